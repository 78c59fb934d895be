//! Fault injection and verification helpers for tests/faults.rs and examples/chaos.rs.
//!
//! * processes: SIGSTOP / SIGCONT / SIGKILL through the `kill` command, VmRSS / VmHWM from /proc;
//! * PostgreSQL: a private instance that a test may restart (`pg_ctl restart -m fast`) without
//!   disturbing the shared one, the walsender's pid, `pg_terminate_backend`;
//! * Kafka: a private broker, a streaming consumer that hands each record to a callback;
//! * a writer that inserts outbox rows in transactions of random size, numbering each aggregate's
//!   events in commit order, and survives PostgreSQL restarts without losing track of what
//!   committed;
//! * the verdict: lost, reordered aggregates (first-delivery order vs commit order), duplicates.
//!
//! Everything runs on 127.0.0.1; every loop is bounded by a deadline.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use tokio_postgres::{Client, NoTls};
use walrelay::lsn::Lsn;

use super::kafka::Consumed;
use super::servers::Server;
use super::{free_port, scratch_dir, Broker, Postgres, PID_FILE};

// ---------------------------------------------------------------------------------------------
// processes

/// `kill -<sig> <pid>`; true when the signal was delivered.
pub fn signal(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// SIGSTOP: the process is frozen (its sockets stay open; the kernel still accepts bytes).
pub fn freeze(pid: u32) {
    assert!(signal(pid, "STOP"), "kill -STOP {pid} failed");
}

/// SIGCONT.
pub fn thaw(pid: u32) {
    assert!(signal(pid, "CONT"), "kill -CONT {pid} failed");
}

/// A `kB` field of /proc/PID/status (`VmRSS`, `VmHWM`, …); None if the process is gone.
pub fn proc_status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// Resident set size in kB.
pub fn rss_kb(pid: u32) -> Option<u64> {
    proc_status_kb(pid, "VmRSS")
}

/// Peak resident set size (high-water mark) in kB.
pub fn hwm_kb(pid: u32) -> Option<u64> {
    proc_status_kb(pid, "VmHWM")
}

/// A small deterministic PRNG (xorshift64*), so fault schedules can be replayed from a seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// Seeded from the clock and the pid; print `seed()` so a failure can be replayed.
    pub fn from_time() -> Rng {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        Rng::new(nanos ^ ((std::process::id() as u64) << 32))
    }

    pub fn seed(&self) -> u64 {
        self.0
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }
}

// ---------------------------------------------------------------------------------------------
// LSNs and the relay's log

/// The value of `field=` on a log line, when it looks like an LSN (`0/1A2B3C`).
pub fn lsn_field(line: &str, field: &str) -> Option<Lsn> {
    let needle = format!("{field}=");
    let start = line.find(&needle)? + needle.len();
    let text: String = line[start..]
        .trim_start_matches('"')
        .chars()
        .take_while(|c| c.is_ascii_hexdigit() || *c == '/')
        .collect();
    text.parse().ok()
}

/// The `end_lsn` of every "transaction read" line of a walrelay debug log, in log order
/// (a transaction replayed by a later session appears again).
pub fn transactions_read(log: &str) -> Vec<Lsn> {
    log.lines()
        .filter(|l| l.contains("transaction read"))
        .filter_map(|l| lsn_field(l, "end_lsn"))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL

/// A superuser connection to a libpq URL (its connection task spawned on the current runtime).
pub async fn connect(url: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// `active_pid` of the slot: the walsender streaming from it (None: inactive or no such slot).
pub async fn slot_active_pid(url: &str, slot: &str) -> Option<i32> {
    let client = connect(url).await.ok()?;
    client
        .query_opt("SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", &[&slot])
        .await
        .ok()
        .flatten()
        .and_then(|row| row.get::<_, Option<i32>>(0))
}

/// The slot's confirmed_flush_lsn (None: no such slot, or PostgreSQL is unreachable).
pub async fn slot_confirmed(url: &str, slot: &str) -> Option<Lsn> {
    let client = connect(url).await.ok()?;
    client
        .query_opt(
            "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .ok()
        .flatten()
        .and_then(|row| row.get::<_, Option<Lsn>>(0))
}

/// `pg_terminate_backend` of the walsender holding `slot`; its pid, if there was one.
pub async fn terminate_walsender(url: &str, slot: &str) -> Option<i32> {
    let client = connect(url).await.expect("connect to terminate the walsender");
    let row = client
        .query_opt(
            "SELECT active_pid, pg_terminate_backend(active_pid) FROM pg_replication_slots \
             WHERE slot_name = $1 AND active_pid IS NOT NULL",
            &[&slot],
        )
        .await
        .expect("pg_terminate_backend");
    row.map(|r| r.get::<_, i32>(0))
}

/// Whether the server log has a "terminating walsender process due to replication timeout"
/// line from one of `pids` (the default log_line_prefix is `%m [%p] `).
pub fn walsender_timed_out(pg_log: &str, pids: &HashSet<i32>) -> Vec<String> {
    pg_log
        .lines()
        .filter(|l| l.contains("replication timeout"))
        .filter(|l| pids.iter().any(|p| l.contains(&format!("[{p}]"))))
        .map(str::to_string)
        .collect()
}

/// A PostgreSQL instance of its own, for tests that restart or stop it (the shared one must
/// never be restarted: every test in the process uses it). Stopped (immediate) on drop; its
/// postmaster pid is also left where the harness watchdog kills it if the process dies first.
pub struct PrivatePostgres {
    pub pg: Postgres,
    dir: PathBuf,
}

impl PrivatePostgres {
    /// initdb + start in a fresh scratch directory (blocking: call from `spawn_blocking` inside
    /// a runtime, or before one).
    pub fn start(prefix: &str) -> PrivatePostgres {
        let server = Server::selected().unwrap_or_else(|e| panic!("private postgres: {e}"));
        PrivatePostgres::start_on(prefix, &server, &[])
    }

    /// Like [`PrivatePostgres::start`] with `server`'s programs and extra postgresql.conf
    /// `settings` (see [`Postgres::start_with`]).
    pub fn start_on(prefix: &str, server: &Server, settings: &[(&str, &str)]) -> PrivatePostgres {
        let dir = scratch_dir(prefix);
        let pg = Postgres::start_with(&dir, server, settings)
            .unwrap_or_else(|e| panic!("private postgres ({}): {e}", server.describe()));
        PrivatePostgres::adopt(pg)
    }

    /// Takes charge of a running instance whose directory is its own scratch dir: stops it on
    /// drop and leaves its postmaster pid for the watchdog.
    pub(crate) fn adopt(pg: Postgres) -> PrivatePostgres {
        let dir = pg.socket_dir().to_path_buf();
        let private = PrivatePostgres { pg, dir };
        private.write_pid_file();
        private
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The postmaster's pid (first line of postmaster.pid).
    pub fn postmaster_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.pg.data_dir().join("postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next().and_then(|l| l.trim().parse().ok()))
    }

    fn write_pid_file(&self) {
        if let Some(pid) = self.postmaster_pid() {
            let _ = std::fs::write(self.dir.join(PID_FILE), pid.to_string());
        }
    }

    /// `pg_ctl restart -m fast` (same port: pg_ctl reuses postmaster.opts). Blocking. Returns
    /// how long pg_ctl took, i.e. fast shutdown plus start-up.
    pub fn restart_fast(&self) -> Result<Duration, String> {
        let started = Instant::now();
        let out = self
            .pg
            .command("pg_ctl")
            .arg("-D")
            .arg(self.pg.data_dir())
            .arg("-l")
            .arg(self.pg.log_path())
            .args(["-w", "-t", "60", "-s", "-m", "fast", "restart"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run pg_ctl restart: {e}"))?;
        let took = started.elapsed();
        self.write_pid_file();
        if out.status.success() {
            Ok(took)
        } else {
            Err(format!(
                "pg_ctl restart failed after {took:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// The last `n` lines of the server log.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.pg.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = self
            .pg
            .command("pg_ctl")
            .arg("-D")
            .arg(self.pg.data_dir())
            .args(["-s", "-m", "immediate", "stop"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_file(self.dir.join(PID_FILE));
    }
}

// ---------------------------------------------------------------------------------------------
// Kafka

/// A broker of its own (memory engine) on `port` (a free one when None), for tests that hang,
/// kill or delay it. Blocking. Killed on drop.
pub fn private_broker(port: Option<u16>) -> Broker {
    let port = port.unwrap_or_else(free_port);
    Broker::start(&scratch_dir("broker"), port).unwrap_or_else(|e| panic!("private broker: {e}"))
}

fn consumer_config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("broker.address.family", "v4")
        .set("log_level", "3")
        .set("group.id", super::unique("walrelay_fault_reader"))
        // As a consumer of exactly-once reads (librdkafka's default, said out loud).
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "200")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        .set("fetch.wait.max.ms", "100")
        .set("topic.metadata.refresh.interval.ms", "1000");
    c
}

/// What a [`consume_while`] callback is told.
pub enum Next {
    Record(Consumed),
    /// No record for 100 ms.
    Idle,
}

/// Reads `topics` from their start and calls `f` for each record and on every 100 ms without
/// one, until `f` returns false or `deadline` passes. On Apache Kafka the reader is a consumer in
/// a group of its own (`read_committed`, offsets committed as it reads), as users' consumers
/// are; a record read twice because a rebalance handed its partition back is passed on once (by
/// topic, partition and offset), so only the relay's own duplicates show. On tansu it assigns
/// every partition from offset 0 once the topics appear in the metadata (without naming them,
/// which would create them on tansu's memory engine). Returns whether `f` ended it.
pub async fn consume_while(
    bootstrap: &str,
    topics: &[String],
    deadline: Duration,
    mut f: impl FnMut(Next) -> bool,
) -> bool {
    let start = Instant::now();
    let consumer: Arc<StreamConsumer> = Arc::new(
        consumer_config(bootstrap)
            .create()
            .unwrap_or_else(|e| panic!("create consumer for {bootstrap}: {e}")),
    );
    if super::broker::Kind::selected() == Ok(super::broker::Kind::Kafka) {
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        consumer.subscribe(&names).unwrap_or_else(|e| panic!("subscribe {topics:?}: {e}"));
    } else {
        let mut partitions: HashMap<String, Vec<i32>> = HashMap::new();
        while start.elapsed() < deadline {
            let c = Arc::clone(&consumer);
            let md = tokio::task::spawn_blocking(move || {
                c.client().fetch_metadata(None, Duration::from_secs(2))
            })
            .await
            .expect("metadata task");
            if let Ok(md) = md {
                for t in md.topics() {
                    if topics.iter().any(|x| x == t.name()) && !t.partitions().is_empty() {
                        partitions.insert(
                            t.name().to_string(),
                            t.partitions().iter().map(|p| p.id()).collect(),
                        );
                    }
                }
            }
            if topics.iter().all(|t| partitions.contains_key(t)) {
                break;
            }
            // Topics appear when the relay first produces to them; tell the caller we wait.
            if !f(Next::Idle) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut tpl = TopicPartitionList::new();
        for (topic, ps) in &partitions {
            for p in ps {
                tpl.add_partition_offset(topic, *p, Offset::Offset(0)).expect("add partition");
            }
        }
        if tpl.count() == 0 {
            return false;
        }
        consumer.assign(&tpl).unwrap_or_else(|e| panic!("assign {topics:?}: {e}"));
    }
    let mut seen: HashSet<(String, i32, i64)> = HashSet::new();
    loop {
        let remaining = deadline.saturating_sub(start.elapsed());
        if remaining.is_zero() {
            return false;
        }
        let wait = remaining.min(Duration::from_millis(100));
        match tokio::time::timeout(wait, consumer.recv()).await {
            Err(_) => {
                if !f(Next::Idle) {
                    return true;
                }
            }
            Ok(Err(e)) => {
                eprintln!("[faults] consume {topics:?}: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(Ok(m)) => {
                if !seen.insert((m.topic().to_string(), m.partition(), m.offset())) {
                    continue;
                }
                let record = Consumed::from_message(&m);
                if !f(Next::Record(record)) {
                    return true;
                }
            }
        }
    }
}

/// One delivered outbox event, as the writer's payload describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub id: String,
    /// `topic/key`: the aggregate.
    pub aggregate: String,
    pub seq: u64,
    pub partition: i32,
    pub offset: i64,
    /// The record's timestamp: when walrelay handed it to librdkafka (CreateTime).
    pub timestamp_ms: Option<i64>,
}

impl Delivered {
    /// From a record whose value is a writer payload (`{"seq": n, …}`); None otherwise.
    pub fn from_record(r: &Consumed) -> Option<Delivered> {
        let id = r.header_str("id")?.to_string();
        let key = r.key_str()?;
        let value: serde_json::Value = serde_json::from_slice(r.value.as_deref()?).ok()?;
        Some(Delivered {
            id,
            aggregate: format!("{}/{key}", r.topic),
            seq: value.get("seq")?.as_u64()?,
            partition: r.partition,
            offset: r.offset,
            timestamp_ms: r.timestamp_ms,
        })
    }
}

/// Reads `topics` until every id in `want` was delivered, then `quiet` more without a new
/// record (to catch trailing duplicates), or until `deadline`. Keeps only what the verdict
/// needs (no payloads), so a million records fit.
pub async fn collect_deliveries(
    bootstrap: &str,
    topics: &[String],
    want: &HashSet<String>,
    quiet: Duration,
    deadline: Duration,
) -> Vec<Delivered> {
    let mut out = Vec::with_capacity(want.len());
    let mut seen: HashSet<String> = HashSet::with_capacity(want.len());
    let mut missing = want.len();
    let mut last_new = Instant::now();
    consume_while(bootstrap, topics, deadline, |next| {
        match next {
            Next::Record(r) => {
                last_new = Instant::now();
                if let Some(d) = Delivered::from_record(&r) {
                    if seen.insert(d.id.clone()) && want.contains(&d.id) {
                        missing -= 1;
                    }
                    out.push(d);
                }
            }
            Next::Idle => {}
        }
        !(missing == 0 && last_new.elapsed() >= quiet)
    })
    .await;
    out
}

// ---------------------------------------------------------------------------------------------
// the writer

/// One committed outbox event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub id: String,
    /// `topic/key`, as [`Delivered::aggregate`].
    pub aggregate: String,
    /// Position of the event among its aggregate's events, in commit order (0, 1, 2, …).
    pub seq: u64,
    /// Index of its transaction in [`WriterReport::txns`].
    pub txn: usize,
}

/// One committed transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Txn {
    pub events: usize,
    /// The marker (e.g. the number of relay kills so far) read before the transaction was sent.
    pub marker_before: u64,
    /// `pg_current_wal_insert_lsn()` right after the commit: at or after its commit's end (the write
    /// position, `pg_current_wal_lsn()`, can lag it with synchronous_commit = off). `u64::MAX`
    /// when unknown (the connection broke during COMMIT and the commit was confirmed later).
    pub upper_lsn: Lsn,
}

#[derive(Debug, Clone)]
pub struct WriterConfig {
    pub url: String,
    /// `aggregatetype` values; aggregate `a` uses `types[a % types.len()]`.
    pub types: Vec<String>,
    /// Prefix of the relay's topics: topic = `{topic_prefix}.outbox.event.{type}`.
    pub topic_prefix: String,
    /// Aggregates `{agg_prefix}-0 .. {agg_prefix}-{aggregates-1}`.
    pub agg_prefix: String,
    pub aggregates: usize,
    /// Rows per transaction: uniform in 1..=max_txn.
    pub max_txn: usize,
    /// Stop after this many events (None: until stopped).
    pub max_events: Option<usize>,
    /// Events per second at most (None: as fast as PostgreSQL takes them).
    pub rate: Option<f64>,
    /// Pause after each transaction.
    pub pause: Duration,
    /// Extra bytes of padding in each payload.
    pub pad: usize,
    /// Read before each transaction into [`Txn::marker_before`].
    pub marker: Option<Arc<AtomicU64>>,
    pub seed: u64,
    /// How long to keep trying to reconnect after PostgreSQL went away.
    pub reconnect_for: Duration,
}

impl WriterConfig {
    pub fn new(url: &str, topic_prefix: &str, types: &[&str], aggregates: usize) -> WriterConfig {
        WriterConfig {
            url: url.to_string(),
            types: types.iter().map(|t| t.to_string()).collect(),
            topic_prefix: topic_prefix.to_string(),
            agg_prefix: "agg".into(),
            aggregates,
            max_txn: 8,
            max_events: None,
            rate: None,
            pause: Duration::ZERO,
            pad: 0,
            marker: None,
            seed: Rng::from_time().seed(),
            reconnect_for: Duration::from_secs(60),
        }
    }

    pub fn topics(&self) -> Vec<String> {
        let mut t: Vec<String> = self
            .types
            .iter()
            .map(|ty| format!("{}.outbox.event.{ty}", self.topic_prefix))
            .collect();
        t.truncate(self.aggregates.min(self.types.len()));
        t
    }
}

#[derive(Debug, Clone, Default)]
pub struct WriterReport {
    pub events: Vec<Event>,
    pub txns: Vec<Txn>,
    /// Times the connection broke and the writer reconnected.
    pub reconnects: usize,
    /// Transactions whose COMMIT outcome was unknown and that turned out committed.
    pub commits_confirmed_after_reconnect: usize,
    pub elapsed: Duration,
}

impl WriterReport {
    pub fn ids(&self) -> HashSet<String> {
        self.events.iter().map(|e| e.id.clone()).collect()
    }
}

pub struct Writer {
    stop: Arc<AtomicBool>,
    committed: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<Result<WriterReport, String>>,
}

impl Writer {
    /// Starts writing on the current runtime.
    pub fn spawn(cfg: WriterConfig) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let committed = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(write(cfg, Arc::clone(&stop), Arc::clone(&committed)));
        Writer { stop, committed, task }
    }

    /// Events committed so far.
    pub fn committed(&self) -> u64 {
        self.committed.load(Ordering::Relaxed)
    }

    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Asks it to stop after the current transaction and waits for its report.
    pub async fn stop(self) -> WriterReport {
        self.stop.store(true, Ordering::Relaxed);
        self.join().await
    }

    /// Waits until it has written `max_events`.
    pub async fn join(self) -> WriterReport {
        match self.task.await {
            Ok(Ok(report)) => report,
            Ok(Err(e)) => panic!("outbox writer failed: {e}"),
            Err(e) => panic!("outbox writer panicked: {e}"),
        }
    }
}

fn uuid_for(seed: u64, n: u64) -> String {
    uuid::Uuid::from_u128(((seed as u128) << 64) | n as u128).to_string()
}

async fn write(
    cfg: WriterConfig,
    stop: Arc<AtomicBool>,
    committed: Arc<AtomicU64>,
) -> Result<WriterReport, String> {
    let started = Instant::now();
    let mut rng = Rng::new(cfg.seed);
    // The ids' upper 64 bits: distinct per writer even with equal seeds.
    let id_tag = rng.next_u64();
    let mut report = WriterReport::default();
    let mut next_seq = vec![0u64; cfg.aggregates];
    let mut client = connect(&cfg.url).await.map_err(|e| format!("connect: {e}"))?;
    let pad = "x".repeat(cfg.pad);
    let mut n: u64 = 0;
    loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let remaining = cfg.max_events.map(|m| m.saturating_sub(report.events.len()));
        if remaining == Some(0) {
            break;
        }
        if let Some(rate) = cfg.rate {
            let due = Duration::from_secs_f64(report.events.len() as f64 / rate);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                tokio::time::sleep(wait).await;
            }
        }
        let mut size = rng.range(1, cfg.max_txn.max(1) as u64) as usize;
        if let Some(r) = remaining {
            size = size.min(r);
        }
        // The transaction's rows: (id, aggregate index, seq).
        let rows: Vec<(String, usize, u64)> = (0..size)
            .map(|i| {
                let a = rng.range(0, cfg.aggregates as u64 - 1) as usize;
                (uuid_for(id_tag, n + i as u64), a, 0)
            })
            .collect();
        // Sequence numbers: taken in row order (the WAL order inside the transaction).
        let mut seqs = next_seq.clone();
        let rows: Vec<(String, usize, u64)> = rows
            .into_iter()
            .map(|(id, a, _)| {
                let s = seqs[a];
                seqs[a] += 1;
                (id, a, s)
            })
            .collect();
        let mut sql = String::from(
            "BEGIN; INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ",
        );
        for (i, (id, a, s)) in rows.iter().enumerate() {
            if i > 0 {
                sql.push(',');
            }
            sql.push_str(&format!(
                "('{id}', '{ty}', '{p}-{a}', 'E', '{{\"seq\": {s}, \"n\": {nn}, \"pad\": \"{pad}\"}}')",
                ty = cfg.types[a % cfg.types.len()],
                p = cfg.agg_prefix,
                nn = n + i as u64,
            ));
        }
        sql.push_str("; COMMIT; SELECT pg_current_wal_insert_lsn()::text;");
        let marker_before = cfg.marker.as_ref().map_or(0, |m| m.load(Ordering::SeqCst));
        let upper_lsn = match client.simple_query(&sql).await {
            Ok(messages) => messages
                .iter()
                .find_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => {
                        r.get(0).map(|t| t.parse().expect("pg_current_wal_insert_lsn is an LSN"))
                    }
                    _ => None,
                })
                .unwrap_or(Lsn(u64::MAX)),
            // The connection broke, or the server is restarting (57xxx: admin shutdown, cannot
            // connect now): the COMMIT may or may not have happened.
            Err(e)
                if e.code().is_none()
                    || client.is_closed()
                    || e.code().map(|c| c.code()).is_some_and(|c| c.starts_with("57")) =>
            {
                report.reconnects += 1;
                client = reconnect(&cfg.url, cfg.reconnect_for).await?;
                let exists = client
                    .query_opt("SELECT 1 FROM outbox WHERE id = $1::text::uuid", &[&rows[0].0])
                    .await
                    .map_err(|e| format!("check commit after reconnect: {e}"))?;
                if exists.is_none() {
                    // Rolled back: write the same rows again (same ids, same numbers).
                    continue;
                }
                report.commits_confirmed_after_reconnect += 1;
                Lsn(u64::MAX)
            }
            Err(e) => {
                let detail = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
                return Err(format!("insert failed: {e}: {detail}"));
            }
        };
        let txn = report.txns.len();
        report.txns.push(Txn { events: rows.len(), marker_before, upper_lsn });
        for (id, a, s) in rows {
            report.events.push(Event {
                id,
                aggregate: format!(
                    "{}.outbox.event.{}/{}-{a}",
                    cfg.topic_prefix,
                    cfg.types[a % cfg.types.len()],
                    cfg.agg_prefix
                ),
                seq: s,
                txn,
            });
        }
        next_seq = seqs;
        n += size as u64;
        committed.store(report.events.len() as u64, Ordering::Relaxed);
        if !cfg.pause.is_zero() {
            tokio::time::sleep(cfg.pause).await;
        }
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

async fn reconnect(url: &str, within: Duration) -> Result<Client, String> {
    let start = Instant::now();
    loop {
        match connect(url).await {
            Ok(c) => return Ok(c),
            Err(e) if start.elapsed() < within => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(format!("could not reconnect within {within:?}: {e}")),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// the verdict

#[derive(Debug, Clone, Default)]
pub struct Verdict {
    pub committed: usize,
    pub delivered: usize,
    pub unique: usize,
    /// Committed events never delivered (at most 20 listed; `lost` counts all).
    pub lost: usize,
    pub lost_ids: Vec<String>,
    /// Aggregates whose first deliveries are not in commit order, or that span two partitions.
    pub reordered: usize,
    pub reordered_detail: Vec<String>,
    /// Deliveries beyond the first of an id.
    pub duplicates: usize,
    /// Ids delivered more than once, with the number of deliveries.
    pub duplicated: HashMap<String, usize>,
    /// Deliveries of ids nobody committed.
    pub unexpected: usize,
}

impl Verdict {
    pub fn ok(&self) -> bool {
        self.lost == 0 && self.reordered == 0 && self.unexpected == 0
    }

    pub fn summary(&self) -> String {
        format!(
            "committed {}, delivered {} ({} unique), lost {}, reordered aggregates {}, duplicates {}, unexpected {}",
            self.committed,
            self.delivered,
            self.unique,
            self.lost,
            self.reordered,
            self.duplicates,
            self.unexpected
        )
    }
}

/// Compares what was delivered with what was committed: every committed id delivered; per
/// aggregate one partition and the order of first deliveries equal to commit order (the
/// writer's sequence numbers).
pub fn verify(committed: &[Event], delivered: &[Delivered]) -> Verdict {
    let mut v =
        Verdict { committed: committed.len(), delivered: delivered.len(), ..Verdict::default() };
    let committed_ids: HashMap<&str, &Event> =
        committed.iter().map(|e| (e.id.as_str(), e)).collect();
    let mut count: HashMap<&str, usize> = HashMap::with_capacity(delivered.len());
    for d in delivered {
        *count.entry(d.id.as_str()).or_default() += 1;
    }
    v.unique = count.len();
    for (id, n) in &count {
        if *n > 1 {
            v.duplicates += n - 1;
            v.duplicated.insert(id.to_string(), *n);
        }
        if !committed_ids.contains_key(id) {
            v.unexpected += n;
        }
    }
    for e in committed {
        if !count.contains_key(e.id.as_str()) {
            v.lost += 1;
            if v.lost_ids.len() < 20 {
                v.lost_ids.push(format!("{} ({} #{})", e.id, e.aggregate, e.seq));
            }
        }
    }
    // Per aggregate, in log order.
    let mut by_agg: HashMap<&str, Vec<&Delivered>> = HashMap::new();
    for d in delivered {
        if committed_ids.contains_key(d.id.as_str()) {
            by_agg.entry(d.aggregate.as_str()).or_default().push(d);
        }
    }
    for (agg, mut ds) in by_agg {
        ds.sort_by_key(|d| (d.partition, d.offset));
        let partitions: HashSet<i32> = ds.iter().map(|d| d.partition).collect();
        if partitions.len() > 1 {
            v.reordered += 1;
            if v.reordered_detail.len() < 20 {
                v.reordered_detail.push(format!("{agg}: spread over partitions {partitions:?}"));
            }
            continue;
        }
        let mut first: Vec<u64> = Vec::new();
        let mut seen = HashSet::new();
        for d in &ds {
            if seen.insert(d.id.as_str()) {
                first.push(d.seq);
            }
        }
        if let Some(w) = first.windows(2).position(|w| w[0] >= w[1]) {
            v.reordered += 1;
            if v.reordered_detail.len() < 20 {
                let lo = w.saturating_sub(3);
                let hi = (w + 5).min(first.len());
                v.reordered_detail.push(format!(
                    "{agg}: first deliveries out of commit order at position {w}: … {:?} …",
                    &first[lo..hi]
                ));
            }
        }
    }
    v
}
