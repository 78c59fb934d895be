//! The steady phase: single-row transactions at fixed rates while a relay runs, and the
//! commit→consumer-receive latency of every event.
//!
//! Commit time: taken client-side when the INSERT's (auto)commit returned. Receive time: when a
//! consumer tailing the relay's topics (fetch.wait.max.ms = 10) got the record. Both on this
//! process's monotonic clock. The delivery report (the ack) reaches only the relay, so this is
//! an upper bound of commit→ack: it adds the broker→consumer fetch path (see the "broker alone"
//! rows: send → ack vs send → consumer).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::ackhist::{self, AckQuantiles};
use crate::measure::{delta, percentile, CpuDelta, Meter};
use crate::support::TestDb;
use crate::workload::run_rate;

#[derive(Debug, Clone, serde::Serialize)]
pub struct Latency {
    pub target_rate: u64,
    pub achieved_rate: f64,
    pub events: u64,
    /// Events of the phase the consumer saw (all, or the run is flagged).
    pub delivered: u64,
    /// Events counted in the percentiles (the phase minus its warm-up).
    pub measured: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    /// commit→ack from walrelay's own histogram (walrelay only; measured after the warm-up).
    pub ack: Option<AckQuantiles>,
    /// commit→read (until the relay loop read the transaction) from walrelay's histogram, likewise.
    pub read: Option<AckQuantiles>,
    pub relay_cores: f64,
    pub pg_cores: f64,
    pub cpu: CpuDelta,
}

pub struct Clocks {
    pub commit_us: Arc<Vec<AtomicU64>>,
    pub recv_us: Arc<Vec<AtomicU64>>,
}

impl Clocks {
    pub fn new(events: usize) -> Clocks {
        let v = || Arc::new((0..events).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
        Clocks { commit_us: v(), recv_us: v() }
    }
}

/// How a phase learns that its events arrived.
#[derive(Clone, Copy)]
pub enum Observer {
    /// A consumer tailing the topics fills `Clocks::recv_us` (commit → consumer latency).
    Tail,
    /// walrelay's /metrics on this port: its commit→ack histogram, read after the warm-up and
    /// once every event of the phase was acknowledged. No consumer runs during the phase: on
    /// this 2-core machine a tailing consumer made the broker burn ~1 core (its fetches), which
    /// is load a production relay's host doesn't carry. The events are read back afterwards.
    Histogram(u16),
}

/// Runs each rate for `seconds` (events numbered from `first_n` on), waiting after each phase
/// until every event of it arrived (or 30 s + twice the phase passed). `relay_pid` is sampled
/// for CPU.
#[allow(clippy::too_many_arguments)]
pub async fn phases(
    db: &TestDb,
    rates: &[u64],
    seconds: f64,
    mut first_n: u64,
    aggregates: u32,
    clocks: &Clocks,
    meter: &Meter,
    relay_pid: u32,
    sync_commit: bool,
    group: u32,
    observer: Observer,
) -> Vec<Latency> {
    let mut out = Vec::new();
    let scrape = || async move {
        match observer {
            Observer::Histogram(port) => ackhist::scrape(port).await,
            Observer::Tail => ackhist::Scrape::default(),
        }
    };
    for &rate in rates {
        let conns = if rate > 5_000 { 8 } else { 2 };
        let pid = (relay_pid != 0).then_some(relay_pid);
        let acked_before = ackhist::count(&scrape().await.ack);
        let a = meter.snap(pid);
        let warmup = (seconds / 5.0).min(5.0);
        let after_warmup = async {
            tokio::time::sleep(Duration::from_secs_f64(warmup)).await;
            scrape().await
        };
        let (phase, hist_warm) = tokio::join!(
            run_rate(
                db,
                group,
                sync_commit,
                conns,
                rate,
                seconds,
                first_n,
                aggregates,
                clocks.commit_us.clone(),
                None,
            ),
            after_warmup
        );
        let b = meter.snap(pid);
        let range = phase.first_n as usize..(phase.first_n + phase.events) as usize;
        let wait_start = Instant::now();
        // A relay that fell behind gets time to catch up (bounded).
        let catch_up = Duration::from_secs_f64(30.0 + 2.0 * seconds);
        let ((ack, read), acked) = loop {
            let now = scrape().await;
            let acked = ackhist::count(&now.ack).saturating_sub(acked_before);
            let all_in = match observer {
                Observer::Tail => {
                    range.clone().all(|n| clocks.recv_us[n].load(Ordering::Relaxed) != 0)
                }
                Observer::Histogram(_) => acked >= phase.events,
            };
            if all_in || wait_start.elapsed() > catch_up {
                let read = ackhist::between(&hist_warm.read, &now.read);
                break ((ackhist::between(&hist_warm.ack, &now.ack), read), acked);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let skip = (warmup * rate as f64) as usize;
        let mut lat = Vec::with_capacity(range.len());
        let mut delivered = match observer {
            Observer::Histogram(_) => acked.min(phase.events),
            Observer::Tail => 0,
        };
        for n in range.clone() {
            let r = clocks.recv_us[n].load(Ordering::Relaxed);
            let c = clocks.commit_us[n].load(Ordering::Relaxed);
            if r != 0 {
                delivered += 1;
            }
            if n >= range.start + skip && r != 0 && c != 0 {
                lat.push(r.saturating_sub(c) as f64 / 1000.0);
            }
        }
        lat.sort_by(|x, y| x.partial_cmp(y).unwrap());
        let cpu = delta(&a, &b);
        out.push(Latency {
            target_rate: rate,
            achieved_rate: phase.achieved_rate,
            events: phase.events,
            delivered,
            measured: lat.len() as u64,
            p50_ms: percentile(&lat, 50.0),
            p99_ms: percentile(&lat, 99.0),
            p999_ms: percentile(&lat, 99.9),
            max_ms: lat.last().copied().unwrap_or(f64::NAN),
            ack,
            read,
            relay_cores: if pid.is_some() { cpu.relay_cpu_s / cpu.wall_s } else { f64::NAN },
            pg_cores: cpu.pg_cpu_s / cpu.wall_s,
            cpu,
        });
        first_n += phase.events;
        let l = out.last().unwrap();
        eprintln!(
            "[bench]   {rate}/s: achieved {:.0}/s, arrived {delivered}/{}, commit→consumer p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms; commit→ack {:?}",
            phase.achieved_rate, phase.events, l.p50_ms, l.p99_ms, l.p999_ms, l.ack
        );
    }
    out
}

/// Total events the phases insert (plus one for the first-record event 0).
pub fn total_events(rates: &[u64], seconds: f64) -> usize {
    1 + rates.iter().map(|r| (*r as f64 * seconds) as usize).sum::<usize>()
}

/// The measuring path alone: records produced straight to the broker (acks=all, idempotent,
/// `kafka::LINGER_MS`, like the relays) at `rate`/s for `seconds`, timed from send to delivery report
/// ("broker alone: send → ack") and from send to the tailing consumer ("… → consumer"). The
/// first second is warm-up and not counted.
pub async fn calibrate(bootstrap: &str, rate: u64, seconds: f64) -> Vec<SteadyRunLike> {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let prefix = crate::support::unique("calib");
    crate::kafka::create_topics(bootstrap, &prefix).await;
    let total = (rate as f64 * seconds) as usize + 1;
    let clocks = Clocks::new(total);
    let (b, p, r) = (bootstrap.to_string(), prefix.clone(), clocks.recv_us.clone());
    let mut tail = tokio::task::spawn_blocking(move || crate::kafka::Tail::start(&b, &p, r))
        .await
        .expect("tail");
    let producer: FutureProducer =
        crate::kafka::relay_like_producer(bootstrap).create().expect("producer");
    let topics = crate::kafka::topics(&prefix);
    let ack_us = Arc::new((0..total).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
    let start = Instant::now();
    let mut n = 1usize;
    let mut pending = Vec::new();
    while n < total && start.elapsed().as_secs_f64() < seconds * 3.0 + 5.0 {
        let due = ((start.elapsed().as_secs_f64() * rate as f64) as usize + 1).min(total - 1);
        while n <= due && n < total {
            let id = format!("{:08x}-0000-4000-8000-{:012x}", crate::workload::STEADY_GROUP, n);
            let key = format!("agg-{:05}", n % 1000);
            let rec: FutureRecord<'_, str, str> = FutureRecord::to(&topics[n % 4])
                .key(key.as_str())
                .payload("{}")
                .headers(OwnedHeaders::new().insert(Header { key: "id", value: Some(&id) }));
            clocks.commit_us[n].store(crate::measure::now_us(), Ordering::Relaxed);
            if let Ok(f) = producer.send_result(rec) {
                let acks = ack_us.clone();
                pending.push(tokio::spawn(async move {
                    if let Ok(Ok(_)) = f.await {
                        acks[n].store(crate::measure::now_us(), Ordering::Relaxed);
                    }
                }));
            }
            n += 1;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let achieved = (n - 1) as f64 / start.elapsed().as_secs_f64();
    for h in pending {
        let _ = h.await;
    }
    let wait = Instant::now();
    while (1..n).any(|i| clocks.recv_us[i].load(Ordering::Relaxed) == 0)
        && wait.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tail.stop();
    let skip = (rate as usize).min(n - 1);
    let row = |name: &str, v: &Vec<AtomicU64>| {
        let mut l: Vec<f64> = (skip + 1..n)
            .filter_map(|i| {
                let (s, e) =
                    (clocks.commit_us[i].load(Ordering::Relaxed), v[i].load(Ordering::Relaxed));
                (e != 0).then(|| e.saturating_sub(s) as f64 / 1000.0)
            })
            .collect();
        l.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let delivered = (1..n).filter(|&i| v[i].load(Ordering::Relaxed) != 0).count() as u64;
        SteadyRunLike {
            system: name.to_string(),
            phases: vec![Latency {
                target_rate: rate,
                achieved_rate: achieved,
                events: (n - 1) as u64,
                delivered,
                measured: l.len() as u64,
                p50_ms: percentile(&l, 50.0),
                p99_ms: percentile(&l, 99.0),
                p999_ms: percentile(&l, 99.9),
                max_ms: l.last().copied().unwrap_or(f64::NAN),
                ack: None,
                read: None,
                relay_cores: f64::NAN,
                pg_cores: f64::NAN,
                cpu: CpuDelta::default(),
            }],
        }
    };
    vec![
        row(
            &format!(
                "broker alone: send → ack (librdkafka, linger {} ms)",
                crate::kafka::LINGER_MS
            ),
            &ack_us,
        ),
        row("broker alone: send → consumer", &clocks.recv_us),
    ]
}

/// A steady run of something that is not a relay (no delivery to verify).
#[derive(Debug, Clone, serde::Serialize)]
pub struct SteadyRunLike {
    pub system: String,
    pub phases: Vec<Latency>,
}
