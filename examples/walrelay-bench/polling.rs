//! The polling relay: the classic transactional-outbox publisher, written faithfully as the
//! baseline, and run as a child process of the benchmark (`walrelay-bench polling-relay …`) so
//! its CPU and memory are measured like walrelay's.
//!
//! Each instance (a task with its own PostgreSQL connection and its own librdkafka producer)
//! loops:
//! ```sql
//! BEGIN;
//! SELECT id, aggregatetype, aggregateid, payload FROM outbox
//!   WHERE published_at IS NULL ORDER BY seq LIMIT B FOR UPDATE SKIP LOCKED;
//! -- produce every row (topic outbox.event.<aggregatetype>, key aggregateid, value payload
//! -- text, header id), wait for every delivery report
//! UPDATE outbox SET published_at = now() WHERE id = ANY($1);
//! COMMIT;
//! ```
//! sleeping `poll_ms` only after an empty batch. Producer settings match walrelay's:
//! `enable.idempotence=true`, `acks=all`, `partitioner=murmur2_random`, `linger.ms` = `kafka::LINGER_MS` (walrelay's default),
//! `message.timeout.ms=30000`.

use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// Arguments of the child process.
#[derive(Debug, Clone, clap::Args)]
pub struct PollingArgs {
    #[arg(long)]
    pub url: String,
    #[arg(long)]
    pub bootstrap: String,
    #[arg(long)]
    pub topic_prefix: String,
    #[arg(long)]
    pub batch: u32,
    #[arg(long)]
    pub instances: u32,
    /// Drain mode: stop once this many rows are published and a batch comes back empty.
    /// 0 = steady mode: run until "stop" on stdin.
    #[arg(long, default_value_t = 0)]
    pub expect: u64,
    #[arg(long, default_value_t = 10)]
    pub poll_ms: u64,
}

/// Time split of one instance (sums over its batches), reported on the STATS line.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct InstanceStats {
    pub batches: u64,
    pub empty_polls: u64,
    pub rows: u64,
    pub select_s: f64,
    pub produce_acks_s: f64,
    pub update_commit_s: f64,
}

pub fn child_main(a: PollingArgs) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let stop = Arc::new(AtomicBool::new(false));
    {
        // "stop" or EOF on stdin ends the run (steady mode) / the process (after STATS).
        let stop = stop.clone();
        std::thread::spawn(move || {
            let stdin = std::io::stdin();
            for line in stdin.lock().lines() {
                match line {
                    Ok(l) if l.trim() == "stop" => break,
                    Ok(_) => continue,
                    Err(_) => break,
                }
            }
            stop.store(true, Ordering::SeqCst);
        });
    }
    let published = Arc::new(AtomicU64::new(0));
    let drained = Arc::new(AtomicBool::new(false));
    let stats: Vec<InstanceStats> = rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..a.instances {
            let (a, stop, published, drained) =
                (a.clone(), stop.clone(), published.clone(), drained.clone());
            tasks.push(tokio::spawn(instance(a, stop, published, drained)));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.expect("polling instance"));
        }
        out
    });
    println!("STATS {}", serde_json::to_string(&stats).unwrap());
    let _ = std::io::stdout().flush();
    // Wait for the parent to read our /proc figures and close stdin (bounded).
    let deadline = Instant::now() + Duration::from_secs(120);
    while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

async fn instance(
    a: PollingArgs,
    stop: Arc<AtomicBool>,
    published: Arc<AtomicU64>,
    drained: Arc<AtomicBool>,
) -> InstanceStats {
    let (mut client, conn) =
        tokio_postgres::connect(&a.url, tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let producer: FutureProducer = crate::kafka::relay_like_producer(&a.bootstrap)
        .set("message.timeout.ms", "30000")
        .create()
        .expect("producer");
    let select = client
        .prepare(&format!(
            "SELECT id::text, aggregatetype, aggregateid, payload::text FROM outbox \
             WHERE published_at IS NULL ORDER BY seq LIMIT {} FOR UPDATE SKIP LOCKED",
            a.batch
        ))
        .await
        .expect("prepare select");
    let update = client
        .prepare("UPDATE outbox SET published_at = now() WHERE id = ANY($1::text[]::uuid[])")
        .await
        .expect("prepare update");
    let topics: std::collections::HashMap<String, String> = crate::workload::AGGREGATE_TYPES
        .iter()
        .map(|t| (t.to_string(), format!("{}.outbox.event.{t}", a.topic_prefix)))
        .collect();
    let mut s = InstanceStats::default();
    let drain = a.expect > 0;
    while !stop.load(Ordering::Relaxed) {
        let t0 = Instant::now();
        let tx = client.transaction().await.expect("BEGIN");
        let rows = tx.query(&select, &[]).await.expect("SELECT … FOR UPDATE SKIP LOCKED");
        let t1 = Instant::now();
        s.select_s += (t1 - t0).as_secs_f64();
        if rows.is_empty() {
            tx.commit().await.expect("COMMIT");
            s.empty_polls += 1;
            if drain && published.load(Ordering::SeqCst) >= a.expect {
                break;
            }
            tokio::time::sleep(Duration::from_millis(a.poll_ms)).await;
            continue;
        }
        let mut ids: Vec<String> = Vec::with_capacity(rows.len());
        let mut acks = Vec::with_capacity(rows.len());
        for row in &rows {
            let id: String = row.get(0);
            let aggregate_type: &str = row.get(1);
            let aggregate_id: &str = row.get(2);
            let payload: Option<&str> = row.get(3);
            let topic = topics
                .get(aggregate_type)
                .cloned()
                .unwrap_or_else(|| format!("{}.outbox.event.{aggregate_type}", a.topic_prefix));
            let headers =
                OwnedHeaders::new_with_capacity(1).insert(Header { key: "id", value: Some(&id) });
            let mut rec: FutureRecord<'_, str, str> =
                FutureRecord::to(&topic).key(aggregate_id).headers(headers);
            if let Some(p) = payload {
                rec = rec.payload(p);
            }
            match producer.send_result(rec) {
                Ok(f) => acks.push(f),
                Err((e, _)) => panic!("produce: {e}"),
            }
            ids.push(id);
        }
        for f in acks {
            match f.await {
                Ok(Ok(_)) => {}
                Ok(Err((e, _))) => panic!("delivery failed: {e}"),
                Err(_) => panic!("delivery report lost"),
            }
        }
        let t2 = Instant::now();
        s.produce_acks_s += (t2 - t1).as_secs_f64();
        tx.execute(&update, &[&ids]).await.expect("UPDATE published_at");
        tx.commit().await.expect("COMMIT");
        let t3 = Instant::now();
        s.update_commit_s += (t3 - t2).as_secs_f64();
        s.batches += 1;
        s.rows += ids.len() as u64;
        let total = published.fetch_add(ids.len() as u64, Ordering::SeqCst) + ids.len() as u64;
        if drain && total >= a.expect && !drained.swap(true, Ordering::SeqCst) {
            println!("DRAINED");
            let _ = std::io::stdout().flush();
        }
    }
    s
}

/// The parent's handle on a polling-relay child.
pub struct PollingProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::UnboundedReceiver<String>,
}

impl PollingProcess {
    pub fn start(a: &PollingArgs) -> PollingProcess {
        let exe = std::env::current_exe().expect("current exe");
        let mut cmd = Command::new(exe);
        cmd.arg("polling-relay")
            .args(["--url", &a.url, "--bootstrap", &a.bootstrap, "--topic-prefix", &a.topic_prefix])
            .args(["--batch", &a.batch.to_string(), "--instances", &a.instances.to_string()])
            .args(["--expect", &a.expect.to_string(), "--poll-ms", &a.poll_ms.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        crate::support::own_session(&mut cmd);
        let mut child = cmd.spawn().expect("start the polling relay");
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        PollingProcess { child, stdin, lines }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line starting with `prefix` (its rest), or None on exit or after `within`.
    pub async fn wait_line(&mut self, prefix: &str, within: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(line)) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return Some(rest.trim().to_string());
                    }
                }
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// Steady mode: ask the instances to finish their batch and stop.
    pub fn request_stop(&mut self) {
        if let Some(s) = self.stdin.as_mut() {
            let _ = writeln!(s, "stop");
            let _ = s.flush();
        }
    }

    /// Closes stdin (the child exits) and reaps it (killing it after 30 s).
    pub fn finish(mut self) {
        self.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PollingProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Sum of the instances' time split.
pub fn sum_stats(stats: &[InstanceStats]) -> InstanceStats {
    stats.iter().fold(InstanceStats::default(), |acc, s| InstanceStats {
        batches: acc.batches + s.batches,
        empty_polls: acc.empty_polls + s.empty_polls,
        rows: acc.rows + s.rows,
        select_s: acc.select_s + s.select_s,
        produce_acks_s: acc.produce_acks_s + s.produce_acks_s,
        update_commit_s: acc.update_commit_s + s.update_commit_s,
    })
}
