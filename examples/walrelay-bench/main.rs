//! walrelay's benchmark: on the same rows, in one invocation, PostgreSQL's pgoutput decoding
//! ceiling (`pg_recvlogical`), walrelay, and the classic polling relay (B = 50 and 5000, one and
//! two instances) drain a backlog; then single-row transactions at fixed rates measure
//! commit→consumer latency; then `walrelay replay` re-publishes retained rows of that backlog;
//! then retention purges what walrelay relayed and drops a partition of as many rows. Prints a table of medians and writes every figure as JSON.
//!
//! ```sh
//! cargo run --release --example walrelay-bench -- [--events 1000000] [--repeat 3] \
//!     [--rates 2000,20000] [--rate-seconds 30] [--json FILE] [--quick] [--baseline-bin PATH]
//! ```
//! It starts its own PostgreSQL and broker (the test harness's, tests/support) and builds the
//! release `walrelay` binary first (`--no-build` or `WALRELAY_BIN` skip that). docs/benchmarks.md
//! explains every figure.

#[path = "../../tests/support/mod.rs"]
mod support;

mod ackhist;
mod audit;
mod baseline;
mod converters;
mod fresh;
mod kafka;
mod latency;
mod measure;
mod otlp_sink;
mod polling;
mod probe;
mod replay;
mod report;
mod retention;
mod shapes;
mod sink_brokers;
mod sink_floor;
mod sinks;
mod steady;
mod systems;
mod txnprobe;
mod walstream;
mod workload;

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

use crate::measure::{Meter, PgCpu};
use crate::systems::Ctx;

#[derive(Parser)]
#[command(name = "walrelay-bench", about = "walrelay vs the pgoutput ceiling vs the polling relay")]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// The broker every measurement runs on: kafka (Apache Kafka 4.4, KRaft, one node) or
    /// tansu (the in-memory stand-in).
    #[arg(long, global = true, default_value = "kafka", value_parser = ["kafka", "tansu"])]
    broker: String,
    #[command(flatten)]
    opts: Opts,
}

#[derive(Subcommand)]
enum Cmd {
    /// The polling relay as a child process (used by the benchmark itself).
    #[command(hide = true)]
    PollingRelay(polling::PollingArgs),
    /// Time a fresh walrelay-like producer's first delivery (diagnostics).
    ProbeProducer(probe::ProbeArgs),
    /// Tail latency: pipelined writers vs independent Poisson clients, each beside the broker's
    /// own floor for its topic layout (docs/benchmarks-history.md).
    Latency(latency::LatencyArgs),
    /// Does each test broker honour Kafka transactions (abort, commit, fencing)?
    ProbeTransactions(txnprobe::TxnProbeArgs),
    /// The sinks beyond Kafka (NATS, RabbitMQ, SQS, HTTP) draining one backlog beside Kafka,
    /// each against its broker's plain client (docs/benchmarks.md).
    Sinks(sinks::SinksArgs),
    /// One sink's floor as a child process (used by `sinks`).
    #[command(hide = true)]
    SinkFloor(sink_floor::FloorArgs),
}

#[derive(clap::Args, Clone, Debug)]
struct Opts {
    /// Backlog rows [default: 1000000; --quick: 100000].
    #[arg(long)]
    events: Option<u64>,
    /// Repetitions of every measurement; medians are printed [default: 3; --quick: 1].
    #[arg(long)]
    repeat: Option<u32>,
    /// Steady-phase rates, events/s [default: 2000,20000].
    #[arg(long, value_delimiter = ',')]
    rates: Option<Vec<u64>>,
    /// Seconds per steady rate [default: 30; --quick: 5].
    #[arg(long)]
    rate_seconds: Option<f64>,
    /// Where to write the JSON [default: target/walrelay-bench/bench-<unix time>.json].
    #[arg(long)]
    json: Option<PathBuf>,
    /// Fast iteration: 100,000 events, 1 repetition, 5 s per rate.
    #[arg(long)]
    quick: bool,
    /// Rows per load transaction.
    #[arg(long, default_value_t = 100)]
    rows_per_txn: u64,
    /// Distinct aggregate ids.
    #[arg(long, default_value_t = 1000)]
    aggregates: u32,
    /// Polling relay batch sizes B.
    #[arg(long, value_delimiter = ',', default_value = "50,5000")]
    batches: Vec<u32>,
    /// Polling relay instance counts.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    instances: Vec<u32>,
    /// Polling relay: sleep after an empty batch, ms.
    #[arg(long, default_value_t = 10)]
    poll_ms: u64,
    /// Steady rates for the polling relay (first batch size, one instance); "none" skips.
    #[arg(long, default_value = "2000")]
    polling_rates: String,
    /// Which systems to run: ceiling, walrelay, polling (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "ceiling,walrelay,polling")]
    systems: Vec<String>,
    /// Outbox table shapes walrelay also drains, beside the plain table (comma-separated:
    /// partitioned, two-tables, messages, and the envelope formats debezium (the default format,
    /// drained like the others for a like-for-like baseline), cloudevents-binary,
    /// cloudevents-structured, cloudevents-protobuf, protobuf; exactly-once: the plain table
    /// with `[delivery] guarantee = "exactly-once"`, drained and at the steady rates;
    /// tracing-off, tracing, tracing-export: a span context column, ignored, propagated, and
    /// propagated with OTLP span export; tenants-1, tenants-1000: outbox tables by pattern, one
    /// and a thousand tenants' tables; json-expanded, avro: the payload expanded, the value as
    /// JSON without schemas and as Avro against a schema registry (started only for avro), with
    /// Avro's drain and RSS against JSON's; avro-latest: Avro rewritten under contracts
    /// registered before the drain (use_latest_version); avro-apicurio: Avro with the
    /// globalId in a header, as Apicurio 2's AvroConverter frames; avro-keys: Avro keys too;
    /// protobuf-registry,
    /// json-schema-registry: Confluent's ProtobufConverter and JsonSchemaConverter against the
    /// same registry; "none" skips).
    #[arg(long, default_value = "partitioned,two-tables,messages,exactly-once")]
    shapes: String,
    /// Another walrelay binary (e.g. the build before a change) measured beside the current one
    /// on the plain table: same backlog, same steady rates, interleaved in every repetition;
    /// the report adds each figure's current / baseline ratio.
    #[arg(long)]
    baseline_bin: Option<PathBuf>,
    /// Don't build the release walrelay binary first.
    #[arg(long)]
    no_build: bool,
    /// Retained rows `walrelay replay` re-publishes after walrelay drained them [default: all of
    /// the backlog, --events]; 0 skips the replay phase.
    #[arg(long)]
    replay_events: Option<u64>,
    /// Steady-phase writers commit with synchronous_commit = off (the harness's server
    /// default) instead of on (PostgreSQL's default).
    #[arg(long)]
    async_commit: bool,
}

/// The options after --quick and defaults are applied (recorded in the JSON).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Settings {
    pub events: u64,
    /// Rows the replay phase re-publishes (0: none).
    pub replay_events: u64,
    pub repeat: u32,
    pub rates: Vec<u64>,
    pub rate_seconds: f64,
    pub rows_per_txn: u64,
    pub aggregates: u32,
    pub batches: Vec<u32>,
    pub instances: Vec<u32>,
    pub poll_ms: u64,
    pub polling_rates: Vec<u64>,
    pub systems: Vec<String>,
    pub shapes: Vec<String>,
    pub sync_commit: bool,
    pub walrelay_bin: String,
    /// --baseline-bin, when walrelay runs.
    pub baseline: Option<baseline::Baseline>,
    /// `Apache Kafka 4.4.0 (KRaft, one node)` or `tansu 0.6.0 (memory engine)`.
    pub broker: String,
}

impl Settings {
    fn runs(&self, system: &str) -> bool {
        self.systems.iter().any(|s| s == system)
    }
}

fn main() {
    let cli = Cli::parse();
    // Read by the harness (tests/support/broker.rs) whenever it starts a broker; set before any
    // thread exists.
    std::env::set_var("WALRELAY_TEST_BROKER", &cli.broker);
    match cli.cmd {
        Some(Cmd::PollingRelay(args)) => return polling::child_main(args),
        Some(Cmd::ProbeProducer(args)) => return probe::probe_main(args),
        Some(Cmd::Latency(args)) => return latency::main(args),
        Some(Cmd::ProbeTransactions(args)) => return txnprobe::main(args),
        Some(Cmd::Sinks(args)) => return sinks::main(args),
        Some(Cmd::SinkFloor(args)) => return sink_floor::main(args),
        None => {}
    }
    let o = cli.opts;
    let q = o.quick;
    let events = o.events.unwrap_or(if q { 100_000 } else { 1_000_000 });
    let settings = Settings {
        events,
        replay_events: o.replay_events.unwrap_or(events).min(events),
        repeat: o.repeat.unwrap_or(if q { 1 } else { 3 }).max(1),
        rates: o.rates.clone().unwrap_or_else(|| vec![2_000, 20_000]),
        rate_seconds: o.rate_seconds.unwrap_or(if q { 5.0 } else { 30.0 }),
        rows_per_txn: o.rows_per_txn.max(1),
        aggregates: o.aggregates.max(1),
        batches: o.batches.clone(),
        instances: o.instances.clone(),
        poll_ms: o.poll_ms,
        polling_rates: o.polling_rates.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
        systems: o.systems.clone(),
        shapes: o
            .shapes
            .split(',')
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty() && x != "none")
            .collect(),
        sync_commit: !o.async_commit,
        walrelay_bin: String::new(),
        baseline: None,
        broker: match cli.broker.as_str() {
            "tansu" => "tansu 0.6.0 (memory engine)".into(),
            _ => "Apache Kafka 4.4.0 (KRaft, one node)".into(),
        },
    };
    let mut settings = settings;
    if settings.runs("walrelay") {
        settings.walrelay_bin = prepare_walrelay(o.no_build).display().to_string();
        settings.baseline = o.baseline_bin.as_deref().map(baseline::Baseline::prepare);
    }
    let json_path = o.json.clone().unwrap_or_else(|| {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        target_dir().join("walrelay-bench").join(format!("bench-{secs}.json"))
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let ok = rt.block_on(run(settings, json_path));
    for name in ["walrelay", "baseline"] {
        let _ = std::fs::remove_file(private_copy_path(name));
    }
    if !ok {
        std::process::exit(1);
    }
}

pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
}

/// Builds `target/release/walrelay` (unless told not to) and points the harness at it.
fn prepare_walrelay(no_build: bool) -> PathBuf {
    if let Some(bin) = std::env::var_os("WALRELAY_BIN").filter(|v| !v.is_empty()) {
        return PathBuf::from(bin);
    }
    let bin = target_dir().join("release").join("walrelay");
    if !no_build {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        eprintln!("[bench] cargo build --release --bin walrelay");
        let status = std::process::Command::new(cargo)
            .args(["build", "--release", "--bin", "walrelay", "--manifest-path"])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build --release --bin walrelay failed");
    }
    assert!(bin.is_file(), "{} is missing (build it, or set WALRELAY_BIN)", bin.display());
    let copy = private_copy(&bin, "walrelay");
    // Read by tests/support's walrelay_bin().
    std::env::set_var("WALRELAY_BIN", &copy);
    copy
}

/// Copies `bin` to target/walrelay-bench/bin/NAME-PID: another `cargo build` may replace it
/// during a long run, and every repetition must run the same binary.
pub fn private_copy(bin: &Path, name: &str) -> PathBuf {
    let copy = private_copy_path(name);
    let dir = copy.parent().expect("bin dir");
    let _ = std::fs::create_dir_all(dir);
    // Copies left by runs that died.
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let pid = file.rsplit_once('-').and_then(|(_, p)| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
            let _ = std::fs::remove_file(e.path());
        }
    }
    std::fs::copy(bin, &copy).unwrap_or_else(|e| panic!("copy {}: {e}", bin.display()));
    copy
}

fn private_copy_path(name: &str) -> PathBuf {
    let dir = target_dir().join("walrelay-bench").join("bin");
    dir.join(format!("{name}-{}", std::process::id()))
}

/// One repetition of everything.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Rep {
    pub index: u32,
    pub loads: Vec<(String, workload::Loaded)>,
    pub drains: Vec<systems::Drain>,
    pub steady: Vec<systems::SteadyRun>,
    /// Latency floors: the broker alone (producer → ack / → consumer) and the pgoutput stream
    /// alone (commit → decoded row, no Kafka), at the steady rates.
    pub floors: Vec<steady::SteadyRunLike>,
    /// Retention: purging the relayed rows of a plain outbox, dropping a partition.
    pub retention: Vec<retention::Purged>,
    /// `walrelay replay` of retained rows of the drained backlog.
    pub replays: Vec<replay::Replayed>,
    /// `walrelay audit` of the replayed window.
    pub audits: Vec<audit::Audited>,
}

async fn run(s: Settings, json_path: PathBuf) -> bool {
    let svc = tokio::task::spawn_blocking(support::services).await.expect("services");
    measure::epoch();
    let meter = Meter { pg: PgCpu::new(svc.pg.data_dir()) };
    let ctx = Ctx {
        meter: &meter,
        walrelay_bin: Path::new(&s.walrelay_bin),
        steady_group: workload::STEADY_GROUP,
        aggregates: s.aggregates,
        poll_ms: s.poll_ms,
        sync_commit: s.sync_commit,
    };
    // The binaries measured on the plain table: walrelay, and the baseline's with its row name.
    let mut relays = vec![(ctx, "walrelay".to_string())];
    if let Some(b) = &s.baseline {
        let steady_group = workload::BASELINE_STEADY_GROUP;
        relays.push((Ctx { walrelay_bin: &b.copy, steady_group, ..ctx }, b.system.clone()));
    }
    eprintln!("[bench] settings: {s:?}");
    if s.runs("walrelay") {
        converters::start_registry_if_asked(&s.shapes).await;
    }
    let mut reps: Vec<Rep> = Vec::new();
    for index in 0..s.repeat {
        eprintln!("[bench] === repetition {}/{}", index + 1, s.repeat);
        let mut rep = Rep {
            index,
            loads: Vec::new(),
            drains: Vec::new(),
            steady: Vec::new(),
            floors: Vec::new(),
            retention: Vec::new(),
            replays: Vec::new(),
            audits: Vec::new(),
        };
        for &rate in &s.rates {
            fresh::broker();
            for f in steady::calibrate(fresh::bootstrap(), rate, s.rate_seconds.min(10.0)).await {
                let l = &f.phases[0];
                eprintln!(
                    "[bench] {} at {rate}/s: p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms",
                    f.system, l.p50_ms, l.p99_ms, l.p999_ms
                );
                rep.floors.push(f);
            }
        }
        if s.runs("ceiling") || s.runs("walrelay") {
            let db = workload::create_db("bench_wal").await;
            let publication = support::unique("bench_pub");
            let ceil_slot = support::unique("ceil");
            // One slot per binary; walrelay's is the first (replay and retention use it).
            let slots: Vec<String> = relays.iter().map(|_| support::unique("relay")).collect();
            let relay_slot = &slots[0];
            let all_slots: Vec<&str> =
                std::iter::once(&ceil_slot).chain(&slots).map(String::as_str).collect();
            workload::create_publication_and_slots(&db, &publication, &all_slots).await;
            let load = workload::load(&db, s.events, s.rows_per_txn, s.aggregates).await;
            eprintln!(
                "[bench] loaded {} rows in {:.1} s ({:.0}/s), {:.0} MB WAL, payload {:.0} B",
                load.events,
                load.seconds,
                load.events as f64 / load.seconds,
                load.wal_bytes as f64 / 1e6,
                load.avg_payload_bytes
            );
            rep.loads.push(("ceiling+walrelay".into(), load));
            // Each reads the same backlog from its own slot; the order reverses every other
            // repetition so none always reads the WAL first (or always follows the other).
            let mut turns: Vec<Option<usize>> = Vec::new();
            if s.runs("ceiling") {
                turns.push(None);
            }
            if s.runs("walrelay") {
                turns.extend((0..relays.len()).map(Some));
            }
            if index % 2 == 1 {
                turns.reverse();
            }
            for turn in turns {
                let d = match turn {
                    None => systems::ceiling(&ctx, &db, &ceil_slot, &publication, &load).await,
                    Some(i) => {
                        let (c, system) = &relays[i];
                        let (slot, outbox) = (&slots[i], systems::PLAIN_OUTBOX);
                        systems::walrelay_drain(c, &db, slot, &publication, &load, system, outbox)
                            .await
                    }
                };
                report::log_drain(&d);
                rep.drains.push(d);
            }
            if s.runs("walrelay") && !s.rates.is_empty() {
                let mut order: Vec<usize> = (0..relays.len()).collect();
                if index % 2 == 1 {
                    order.reverse();
                }
                for i in order {
                    let (c, system) = &relays[i];
                    eprintln!("[bench] {system} steady phase");
                    // Past the rows the other binary's steady phase wrote (none before the
                    // first): each starts caught up, as walrelay does after its drain.
                    workload::skip_slot_to_now(&db, &slots[i]).await;
                    let mut st = systems::walrelay_steady(
                        c,
                        &db,
                        &slots[i],
                        &publication,
                        &s.rates,
                        s.rate_seconds,
                        &systems::PLAIN_STEADY,
                    )
                    .await;
                    st.system = system.clone();
                    rep.steady.push(st);
                }
                if s.shapes.iter().any(|x| x == "exactly-once") {
                    // A database of its own: the steady writers number their events from 0.
                    eprintln!("[bench] walrelay exactly-once steady phase");
                    let eos_db = workload::create_db("bench_eos").await;
                    let (eos_pub, eos_slot) = (support::unique("eos_pub"), support::unique("eos"));
                    workload::create_publication_and_slots(&eos_db, &eos_pub, &[&eos_slot]).await;
                    let st = systems::walrelay_steady(
                        &ctx,
                        &eos_db,
                        &eos_slot,
                        &eos_pub,
                        &s.rates,
                        s.rate_seconds,
                        &systems::EXACTLY_ONCE_STEADY,
                    )
                    .await;
                    rep.steady.push(st);
                    workload::drop_db(&eos_db).await;
                }
                eprintln!("[bench] pgoutput stream alone (latency floor)");
                let f = walstream::wal_latency(
                    &ctx,
                    &db,
                    &publication,
                    &s.rates,
                    s.rate_seconds.min(10.0),
                )
                .await;
                rep.floors.push(f);
            }
            if s.runs("walrelay") && s.replay_events > 0 {
                eprintln!("[bench] replay: re-publish {} retained rows", s.replay_events);
                let live = rep.drains.iter().find(|d| d.system == "walrelay");
                rep.replays.push(
                    replay::retained(
                        &db,
                        relay_slot,
                        &publication,
                        s.replay_events,
                        live.map(|d| d.events_per_s),
                    )
                    .await,
                );
                let replayed = rep.replays.last().expect("just pushed");
                if replayed.ok {
                    eprintln!("[bench] audit: the replayed window against its topics");
                    let live = live.map(|d| (d.events_per_s, d.peak_rss_mb));
                    // With a baseline, the order flips every repetition: the first audit after
                    // the replay reads what the broker just wrote, and none should always be it.
                    let mut bins = vec![("walrelay", None)];
                    if let Some(b) = &s.baseline {
                        bins.push((b.system.as_str(), Some(b.copy.as_path())));
                        if index % 2 == 1 {
                            bins.reverse();
                        }
                    }
                    for bin in bins {
                        let a = audit::replayed(&db, relay_slot, &publication, replayed, live, bin)
                            .await;
                        rep.audits.push(a);
                    }
                }
            }
            if s.runs("walrelay") {
                eprintln!("[bench] retention: purge what walrelay relayed, drop a partition");
                rep.retention.push(retention::plain(&db, relay_slot, &publication).await);
            }
            workload::drop_db(&db).await;
            if s.runs("walrelay") {
                rep.retention.push(retention::partition(s.events, s.aggregates).await);
            }
        }
        if s.runs("walrelay") {
            for name in &converters::order(&s.shapes, index) {
                let Some(shape) = shapes::Shape::parse(name) else {
                    eprintln!(
                        "[bench] unknown table shape {name:?} (partitioned, two-tables, messages, \
                         cloudevents-binary, cloudevents-structured, cloudevents-protobuf, \
                         protobuf, exactly-once, tracing-off, tracing, tracing-export, tenants-1, \
                         tenants-1000, json-expanded, avro, avro-latest, avro-apicurio, avro-keys, \
                         protobuf-registry, json-schema-registry)"
                    );
                    continue;
                };
                let (load, drains) = shapes::drain(&ctx, shape, s.events, s.rows_per_txn).await;
                rep.loads.push((shape.system().to_string(), load));
                for d in drains {
                    report::log_drain(&d);
                    rep.drains.push(d);
                }
            }
        }
        if s.runs("polling") {
            for (bi, &batch) in s.batches.iter().enumerate() {
                for &instances in &s.instances {
                    let db = workload::create_db(&format!("bench_poll_{batch}_{instances}")).await;
                    let load = workload::load(&db, s.events, s.rows_per_txn, s.aggregates).await;
                    rep.loads.push((format!("polling B={batch} ×{instances}"), load));
                    let d = systems::polling_drain(&ctx, &db, batch, instances, &load).await;
                    report::log_drain(&d);
                    rep.drains.push(d);
                    if bi == 0 && instances == s.instances[0] && !s.polling_rates.is_empty() {
                        eprintln!("[bench] polling B={batch} steady phase");
                        let st = systems::polling_steady(
                            &ctx,
                            &db,
                            batch,
                            &s.polling_rates,
                            s.rate_seconds,
                        )
                        .await;
                        rep.steady.push(st);
                    }
                    workload::drop_db(&db).await;
                }
            }
        }
        reps.push(rep);
        report::write_json(&json_path, &s, &reps);
    }
    let summary = report::summarize(&s, &reps);
    println!("{}", report::render(&s, &summary));
    print!("{}", replay::render(&reps));
    print!("{}", audit::render(&reps));
    print!("{}", converters::render(&reps));
    report::write_json(&json_path, &s, &reps);
    println!("JSON: {}", json_path.display());
    summary.all_delivered
}
