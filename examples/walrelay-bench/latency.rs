//! `walrelay-bench latency`: commit→ack tail latency under two client shapes, each beside the
//! broker's own floor for the same topic layout, in one invocation.
//!
//! * `pipelined` — the steady phase of the main benchmark: 2 (8 above 5,000/s) pipelined
//!   connections on a fixed schedule, four aggregate types into four pre-created topics of four
//!   partitions.
//! * `clients` — what an application looks like: independent connections (4; 16 above
//!   5,000/s), each one transaction at a time with Poisson arrivals (`pgbench -c 4 -j 2 -R`),
//!   one aggregate type, so one topic, auto-created by the broker on first produce.
//!
//! For each: commit→ack and commit→read from walrelay's own histograms, commit→CreateTime from
//! the records read back (the CreateTime is when walrelay handed the record to librdkafka, in
//! ms), and three floors, the Kafka ones each a producer with walrelay's settings, the same
//! layout and record size:
//!
//! * the broker alone on an idle machine, with the shape's arrivals, send → delivery report;
//! * the dual write the outbox replaces: the shape's writers commit the same load into a
//!   database no relay reads, and each produces its record as soon as its commit returns,
//!   measured from sending the transaction to the delivery report. The same commits, WAL
//!   flushes, arrivals and cores, without the walsender and walrelay: the difference to
//!   walrelay's commit→ack is what reading and relaying the WAL adds;
//! * PostgreSQL's share alone: a bare pgoutput reader beside the same writers, commit → Begin
//!   read, the floor of walrelay's commit→read (and of any WAL-reading relay's).
//!
//! With `--together N`, a diagnostic phase follows walrelay's at each rate up to 5,000/s: the
//! writers also produce every Nth event's record themselves, beside walrelay, so both paths'
//! tails are measured under the same load at the same moments.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pgwire_replication::{Lsn, ReplicationClient, ReplicationConfig, ReplicationEvent, TlsConfig};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::ackhist::{self, AckQuantiles};
use crate::measure::{delta, now_us, percentile, CpuDelta, Meter, PgCpu};
use crate::support::{unique, TestDb};
use crate::systems::{keep_log, start_walrelay, walrelay_config, PLAIN_OUTBOX};
use crate::workload::{self, parse_event_id, STEADY_GROUP};

mod floors;
mod report;

use self::floors::{
    checkpoint, dual_write_floor, dual_write_hook, floor, latencies, wal_read_floor, FloorProducer,
};
use self::report::render;

#[derive(clap::Args, Clone, Debug)]
pub struct LatencyArgs {
    /// Repetitions; medians and ranges are printed.
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    /// Rates, events/s.
    #[arg(long, value_delimiter = ',', default_value = "2000,20000")]
    rates: Vec<u64>,
    /// Seconds per rate (the first fifth, at most 5 s, is warm-up and not counted).
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Shapes (comma-separated): pipelined, clients.
    #[arg(long, value_delimiter = ',', default_value = "pipelined,clients")]
    shapes: Vec<String>,
    /// Don't build the release walrelay binary first.
    #[arg(long)]
    no_build: bool,
    /// A diagnostic phase after walrelay's at each rate up to 5,000/s: the writers also produce
    /// every Nth event's record themselves when its commit returns, beside walrelay, and both
    /// tails are printed (1: every event).
    #[arg(long, value_name = "N")]
    together: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Shape {
    Pipelined,
    Clients,
}

impl Shape {
    fn parse(name: &str) -> Option<Shape> {
        match name.trim() {
            "pipelined" => Some(Shape::Pipelined),
            "clients" => Some(Shape::Clients),
            _ => None,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Shape::Pipelined => "pipelined writers, fixed schedule, 4 pre-created topics × 4",
            Shape::Clients => "independent clients, Poisson, 1 auto-created topic",
        }
    }

    fn connections(self, rate: u64) -> usize {
        match (self, rate > 5_000) {
            (Shape::Pipelined, false) => 2,
            (Shape::Pipelined, true) => 8,
            (Shape::Clients, false) => 4,
            (Shape::Clients, true) => 16,
        }
    }

    /// The topics the shape's records go to under `prefix`.
    fn topics(self, prefix: &str) -> Vec<String> {
        match self {
            Shape::Pipelined => crate::kafka::topics(prefix),
            Shape::Clients => vec![format!("{prefix}.outbox.event.Order")],
        }
    }
}

/// Quantiles of a sample, in ms.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Quantiles {
    pub count: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
}

impl Quantiles {
    fn of(mut v: Vec<f64>) -> Quantiles {
        v.sort_by(|a, b| a.total_cmp(b));
        Quantiles {
            count: v.len() as u64,
            p50_ms: percentile(&v, 50.0),
            p99_ms: percentile(&v, 99.0),
            p999_ms: percentile(&v, 99.9),
        }
    }
}

/// One shape at one rate in one repetition.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub rep: u32,
    pub shape: Shape,
    pub rate: u64,
    pub achieved: f64,
    pub events: u64,
    pub ack: Option<AckQuantiles>,
    pub read: Option<AckQuantiles>,
    /// commit (the writer saw COMMIT return) → the record's CreateTime.
    pub create_time: Quantiles,
    /// Records read back: all events of the phase arrived.
    pub missing: u64,
    /// The broker alone, same layout and arrivals: send → delivery report.
    pub floor: Quantiles,
    /// The dual write: the shape's writers commit the same load into a database nobody reads
    /// and produce each record themselves once the commit returns; sent → delivery report.
    pub dual_write: Quantiles,
    /// CPU while walrelay's writers ran.
    pub cpu: CpuDelta,
    /// CPU while the dual write's writers ran.
    pub dual_write_cpu: CpuDelta,
    /// A bare pgoutput reader beside the same writers: commit → Begin read.
    pub wal_read: Quantiles,
    /// CPU while the bare reader's writers ran.
    pub wal_read_cpu: CpuDelta,
    /// walrelay and the dual write on the same events at the same time (rates up to 5,000/s).
    pub beside: Option<Beside>,
}

pub fn main(args: LatencyArgs) {
    let shapes: Vec<Shape> = args.shapes.iter().filter_map(|s| Shape::parse(s)).collect();
    crate::prepare_walrelay(args.no_build);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let rows = rt.block_on(async {
        let svc = tokio::task::spawn_blocking(crate::support::services).await.expect("services");
        let meter = Meter { pg: PgCpu::new(svc.pg.data_dir()) };
        crate::measure::epoch();
        let mut rows = Vec::new();
        for rep in 0..args.repeat.max(1) {
            for &shape in &shapes {
                eprintln!("[latency] repetition {}/{}: {}", rep + 1, args.repeat, shape.describe());
                rows.extend(measure(&meter, rep, shape, &args).await);
            }
        }
        rows
    });
    println!("{}", render(&args, &shapes, &rows));
    let path = crate::target_dir().join("walrelay-bench").join(format!(
        "latency-{}.json",
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
    ));
    let _ = std::fs::create_dir_all(path.parent().unwrap());
    let _ = std::fs::write(&path, serde_json::to_string_pretty(&rows).unwrap_or_default());
    println!("JSON: {}", path.display());
}

/// The floors, then walrelay, for every rate of one shape (a fresh broker for each).
async fn measure(meter: &Meter, rep: u32, shape: Shape, args: &LatencyArgs) -> Vec<Row> {
    let (rates, seconds) = (&args.rates, args.seconds);
    let together_at = |rate: u64| args.together.filter(|_| rate <= BESIDE_MAX_RATE);
    let mut floors = Vec::new();
    // The floors with a database load run as long as walrelay's phase: where PostgreSQL can't keep
    // up, the reader's lag grows with the phase, so a shorter floor would look better.
    let idle_seconds = seconds.min(10.0);
    for &rate in rates {
        crate::fresh::broker();
        let idle = floor(crate::fresh::bootstrap(), shape, rate, idle_seconds).await;
        eprintln!("[latency]   broker alone at {rate}/s: send→ack {idle:?}");
        crate::fresh::broker();
        let (dual, cpu) = dual_write_floor(meter, shape, rate, seconds).await;
        eprintln!("[latency]   dual write at {rate}/s: commit→ack {dual:?}, {cpu:?}");
        let (wal, wal_cpu) = wal_read_floor(meter, shape, rate, seconds).await;
        eprintln!(
            "[latency]   pgoutput stream alone at {rate}/s: commit→read {wal:?}, {wal_cpu:?}"
        );
        floors.push((idle, dual, cpu, wal, wal_cpu));
    }
    crate::fresh::broker();
    let db = workload::create_db("bench_lat").await;
    let (publication, slot, prefix) = (unique("lat_pub"), unique("lat"), unique("lat"));
    workload::create_publication_and_slots(&db, &publication, &[&slot]).await;
    if shape == Shape::Pipelined {
        crate::kafka::create_topics(crate::fresh::bootstrap(), &prefix).await;
    }
    let http_port = crate::support::free_port();
    let relay = start_walrelay(&walrelay_config(
        &db,
        &slot,
        &publication,
        &prefix,
        http_port,
        PLAIN_OUTBOX,
    ));
    // Up to 5,000/s each rate has a second phase, walrelay and the dual write together.
    let phases = |r: u64| if together_at(r).is_some() { 2 } else { 1 };
    let capacity: usize =
        rates.iter().map(|&r| ((r as f64 * seconds * 1.3) as usize + 1000) * phases(r)).sum();
    let commit_us = Arc::new((0..capacity).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
    let mut walrelay = Relayed { meter, relay, http_port, db: &db, shape, seconds, commit_us };
    let mut rows = Vec::new();
    let mut first_n = 1u64;
    for (&rate, (floor, dual_write, dual_write_cpu, wal_read, wal_read_cpu)) in
        rates.iter().zip(floors)
    {
        let RelayPhase { events, achieved, cpu, ack, read } =
            walrelay.phase(rate, first_n, None).await;
        let range = first_n..first_n + events;
        let skip = (warmup(seconds) * achieved) as u64;
        let (create_time, missing) =
            create_times(&prefix, shape, range, skip, &walrelay.commit_us).await;
        let mut row = Row {
            rep,
            shape,
            rate,
            achieved,
            events,
            ack,
            read,
            create_time,
            missing,
            floor,
            dual_write,
            cpu,
            dual_write_cpu,
            wal_read,
            wal_read_cpu,
            beside: None,
        };
        eprintln!(
            "[latency]   walrelay at {rate}/s (achieved {achieved:.0}/s): commit→ack {:?}, commit→read {:?}, commit→CreateTime {:?}, missing {missing}, {:?}",
            row.ack, row.read, row.create_time, row.cpu
        );
        first_n += events;
        if let Some(sample) = together_at(rate) {
            let b = walrelay.beside(rate, first_n, sample).await;
            eprintln!("[latency]   walrelay and the dual write together at {rate}/s: {b:?}");
            first_n += b.events;
            row.beside = Some(b);
        }
        rows.push(row);
    }
    walrelay.relay.terminate();
    keep_log(&format!("{prefix}-latency"), &walrelay.relay.log());
    workload::drop_db(&db).await;
    rows
}

/// Above this rate the machine is saturated by the database alone; a phase with more for the
/// broker says nothing more.
const BESIDE_MAX_RATE: u64 = 5_000;

/// What one phase of writes did to walrelay: its histograms over the phase (warm-up not
/// counted) and the CPU while the writers ran.
struct RelayPhase {
    events: u64,
    achieved: f64,
    cpu: CpuDelta,
    ack: Option<AckQuantiles>,
    read: Option<AckQuantiles>,
}

/// The first fifth of a phase, at most 5 s, is warm-up and not counted.
fn warmup(seconds: f64) -> f64 {
    (seconds / 5.0).min(5.0)
}

/// walrelay running on the shape's database, and what its phases write with.
struct Relayed<'a> {
    meter: &'a Meter,
    relay: crate::support::RelayProcess,
    http_port: u16,
    db: &'a TestDb,
    shape: Shape,
    seconds: f64,
    /// When each event's commit returned, by event number.
    commit_us: Arc<Vec<AtomicU64>>,
}

impl Relayed<'_> {
    /// Writes the shape's load at `rate`, events numbered from `first_n`, and waits until
    /// walrelay has acknowledged all of it.
    async fn phase(
        &self,
        rate: u64,
        first_n: u64,
        on_commit: Option<workload::OnCommit>,
    ) -> RelayPhase {
        let (http_port, pid) = (self.http_port, Some(self.relay.pid()));
        checkpoint().await;
        let before = ackhist::count(&ackhist::scrape(http_port).await.ack);
        let after_warmup = async {
            tokio::time::sleep(Duration::from_secs_f64(warmup(self.seconds))).await;
            ackhist::scrape(http_port).await
        };
        let write = async {
            let a = self.meter.snap(pid);
            let commit_us = self.commit_us.clone();
            let written =
                write(self.db, self.shape, rate, self.seconds, first_n, commit_us, on_commit).await;
            (written, delta(&a, &self.meter.snap(pid)))
        };
        let (((events, achieved), cpu), warm) = tokio::join!(write, after_warmup);
        let deadline = Instant::now() + Duration::from_secs_f64(30.0 + 2.0 * self.seconds);
        let now = loop {
            let now = ackhist::scrape(http_port).await;
            if ackhist::count(&now.ack).saturating_sub(before) >= events
                || Instant::now() > deadline
            {
                break now;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        RelayPhase {
            events,
            achieved,
            cpu,
            ack: ackhist::between(&warm.ack, &now.ack),
            read: ackhist::between(&warm.read, &now.read),
        }
    }

    /// The same writers once more, each also producing every `sample`th event's record itself
    /// as soon as its commit returns (to topics of its own), so both paths deliver under the
    /// same load at the same time: the walsender's and walrelay's cores, the broker. A
    /// diagnostic, not a floor: with every event (1) the broker gets twice the records and on
    /// two cores that overload is most of both tails; with fewer, the writers' producer has a
    /// lighter connection to the broker than walrelay's (docs/benchmarks-history.md).
    async fn beside(&self, rate: u64, first_n: u64, sample: u64) -> Beside {
        let producer = FloorProducer::new(crate::fresh::bootstrap(), self.shape).await;
        let counted_from = Instant::now() + Duration::from_secs_f64(warmup(self.seconds));
        let (on_commit, rx) = dual_write_hook(producer, counted_from, sample);
        let phase = self.phase(rate, first_n, Some(on_commit)).await;
        Beside {
            events: phase.events,
            ack: phase.ack,
            sample,
            dual_write: Quantiles::of(latencies(rx, 0).await),
            cpu: phase.cpu,
        }
    }
}

/// walrelay and the dual write in the same phase (`--together`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Beside {
    pub events: u64,
    /// walrelay's commit→ack.
    pub ack: Option<AckQuantiles>,
    /// Every how many events the writers produced one themselves.
    pub sample: u64,
    /// The writers' own producer: sent → delivery report, the warm-up not counted.
    pub dual_write: Quantiles,
    pub cpu: CpuDelta,
}

/// Writes the shape's single-row transactions at `rate` for `seconds`, numbering events from
/// `first_n`; returns how many were committed and the rate achieved.
async fn write(
    db: &TestDb,
    shape: Shape,
    rate: u64,
    seconds: f64,
    first_n: u64,
    commit_us: Arc<Vec<AtomicU64>>,
    on_commit: Option<workload::OnCommit>,
) -> (u64, f64) {
    let conns = shape.connections(rate);
    match shape {
        Shape::Pipelined => {
            let p = workload::run_rate(
                db,
                STEADY_GROUP,
                true,
                conns,
                rate,
                seconds,
                first_n,
                1000,
                commit_us,
                on_commit,
            )
            .await;
            (p.events, p.achieved_rate)
        }
        Shape::Clients => {
            poisson_clients(db, conns, rate, seconds, first_n, commit_us, on_commit).await
        }
    }
}

/// `clients` connections, each committing one single-row transaction at a time at Poisson
/// arrivals of `rate / clients` per second, like `pgbench -R`: a client that falls behind runs
/// its next transaction at once, and the lag shows as a lower achieved rate.
async fn poisson_clients(
    db: &TestDb,
    clients: usize,
    rate: u64,
    seconds: f64,
    first_n: u64,
    commit_us: Arc<Vec<AtomicU64>>,
    on_commit: Option<workload::OnCommit>,
) -> (u64, f64) {
    let sql = workload::insert_one_type_sql(STEADY_GROUP, 1000, "Order");
    let next = Arc::new(AtomicU64::new(first_n));
    let start = tokio::time::Instant::now();
    let end = start + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for i in 0..clients {
        let c = workload::connect(&db.url).await;
        c.batch_execute("SET synchronous_commit = on").await.expect("SET synchronous_commit");
        let stmt = c.prepare(&sql).await.expect("prepare");
        let (next, commit_us, on_commit) = (next.clone(), commit_us.clone(), on_commit.clone());
        let mut rng = SplitMix(now_us() ^ ((i as u64 + 1) << 40));
        let mean_gap = clients as f64 / rate as f64;
        tasks.push(tokio::spawn(async move {
            let mut due = start;
            loop {
                due += Duration::from_secs_f64(rng.exponential(mean_gap));
                if due >= end {
                    break;
                }
                tokio::time::sleep_until(due).await;
                let n = next.fetch_add(1, Ordering::Relaxed);
                let Some(slot) = commit_us.get(n as usize) else { break };
                let sent = Instant::now();
                c.execute(&stmt, &[&(n as i64)]).await.expect("insert");
                slot.store(now_us().max(1), Ordering::Relaxed);
                if let Some(on_commit) = &on_commit {
                    on_commit(n, sent);
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("client");
    }
    let events = next.load(Ordering::Relaxed) - first_n;
    (events, events as f64 / start.elapsed().as_secs_f64())
}

/// A small, seedable generator for arrival gaps (the benchmark needs no crypto and no crate).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// An exponentially distributed gap with this mean.
    fn exponential(&mut self, mean: f64) -> f64 {
        let u = ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        -mean * u.ln()
    }
}

/// Reads the shape's topics back and measures commit → CreateTime for events `range` (the
/// first `skip` not counted); also how many of `range` never arrived.
async fn create_times(
    prefix: &str,
    shape: Shape,
    range: std::ops::Range<u64>,
    skip: u64,
    commit_us: &Arc<Vec<AtomicU64>>,
) -> (Quantiles, u64) {
    let (bootstrap, topics) = (crate::fresh::bootstrap().to_string(), shape.topics(prefix));
    let commit_us = commit_us.clone();
    // The benchmark's clock is monotonic; CreateTime is wall-clock ms.
    let wall_at_epoch_us =
        SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as i64 - now_us() as i64;
    tokio::task::spawn_blocking(move || {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", unique("lat_reader"))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false")
            .set("fetch.wait.max.ms", "100")
            .create()
            .expect("consumer");
        let mut tpl = TopicPartitionList::new();
        for t in &topics {
            let md = c.fetch_metadata(Some(t), Duration::from_secs(10)).expect("metadata");
            for p in md.topics().iter().flat_map(|t| t.partitions()) {
                tpl.add_partition_offset(t, p.id(), Offset::Beginning).expect("partition");
            }
        }
        c.assign(&tpl).expect("assign");
        let mut seen = vec![false; (range.end - range.start) as usize];
        let (mut arrived, mut last) = (0u64, Instant::now());
        let mut ms = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        while arrived < seen.len() as u64
            && last.elapsed() < Duration::from_secs(10)
            && Instant::now() < deadline
        {
            let Some(Ok(m)) = c.poll(Duration::from_millis(100)) else { continue };
            last = Instant::now();
            let id = m
                .headers()
                .and_then(|hs| hs.iter().find(|h| h.key == "id").and_then(|h| h.value))
                .and_then(parse_event_id);
            let Some((STEADY_GROUP, n)) = id else { continue };
            if !range.contains(&n) || std::mem::replace(&mut seen[(n - range.start) as usize], true)
            {
                continue;
            }
            arrived += 1;
            let (Some(create_ms), commit) =
                (m.timestamp().to_millis(), commit_us[n as usize].load(Ordering::Relaxed))
            else {
                continue;
            };
            if n >= range.start + skip && commit != 0 {
                let commit_wall_us = wall_at_epoch_us + commit as i64;
                ms.push((create_ms * 1000 - commit_wall_us) as f64 / 1000.0);
            }
        }
        (Quantiles::of(ms), seen.len() as u64 - arrived)
    })
    .await
    .expect("read back")
}
