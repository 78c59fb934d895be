//! One function per measured system: the pgoutput ceiling (pg_recvlogical), walrelay and the
//! polling relay, each draining the same backlog; plus walrelay's first record and the steady
//! phases.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use walrelay::lsn::Lsn;

use crate::kafka::{count_delivered, create_topics, Delivery, Tail};
use crate::measure::{delta, now_us, peak_rss_mb, CpuDelta, Meter};
use crate::polling::{sum_stats, InstanceStats, PollingArgs, PollingProcess};
use crate::steady::{phases, Clocks, Latency, Observer};
use crate::support::{services, unique, RelayProcess, TestDb};
use crate::workload::{self, insert_one, table_stats, table_stats_settled, Loaded, TableStats};

/// One system draining the backlog.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Drain {
    pub system: String,
    pub events: u64,
    pub seconds: f64,
    pub events_per_s: f64,
    /// CPU of the relay process (pg_recvlogical for the ceiling).
    pub relay_cpu_s: f64,
    pub peak_rss_mb: Option<f64>,
    pub cpu: CpuDelta,
    pub table_before: Option<TableStats>,
    pub table_after: Option<TableStats>,
    pub delivery: Option<Delivery>,
    pub polling_split: Option<InstanceStats>,
    pub ok: bool,
}

#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    pub meter: &'a Meter,
    /// The walrelay executable the drain and steady phases run: the current build, or the
    /// baseline of --baseline-bin.
    pub walrelay_bin: &'a Path,
    /// The id group of the steady phases' events (`workload::STEADY_GROUP`; the baseline's
    /// steady rows go to the same table and need ids of their own).
    pub steady_group: u32,
    pub aggregates: u32,
    pub poll_ms: u64,
    /// `synchronous_commit` of the steady phase's writers.
    pub sync_commit: bool,
}

fn bootstrap() -> &'static str {
    crate::fresh::bootstrap()
}

/// Reads the prefix's topics back on a blocking thread and checks events `range` of `group`
/// (missing, duplicates, wrong topic or key), allowing 2 minutes plus 1 s per 20,000 events.
async fn read_back(
    prefix: &str,
    group: u32,
    range: std::ops::RangeInclusive<u64>,
    aggregates: u32,
) -> Delivery {
    let (bootstrap, prefix) = (bootstrap().to_string(), prefix.to_string());
    let within = Duration::from_secs(120 + range.end() / 20_000);
    tokio::task::spawn_blocking(move || {
        count_delivered(&bootstrap, &prefix, group, range, aggregates, within)
    })
    .await
    .expect("count")
}

fn drain_deadline(n: u64) -> Duration {
    Duration::from_secs(60 + n / 2_000)
}

/// `pg_recvlogical` streams the slot (pgoutput, proto 1, the publication) to /dev/null until it
/// passed the end of the load: PostgreSQL's logical decoding alone.
pub async fn ceiling(
    ctx: &Ctx<'_>,
    db: &TestDb,
    slot: &str,
    publication: &str,
    load: &Loaded,
) -> Drain {
    let pg = &services().pg;
    let mut cmd = Command::new(pg.bin_dir().join("pg_recvlogical"));
    cmd.args(["-h", "127.0.0.1", "-p", &pg.port().to_string(), "-U", "postgres"])
        .args(["-d", &db.name, "--slot", slot, "--start", "--no-loop"])
        .args(["-o", "proto_version=1", "-o", &format!("publication_names={publication}")])
        // As walrelay asks (pgwire-replication always does): the messages shape's events are
        // logical messages, which pgoutput sends only with this option.
        .args(["-o", "messages=true"])
        .args(["-E", &Lsn(load.end_lsn).to_string(), "-f", "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    crate::support::own_session(&mut cmd);
    let a = ctx.meter.snap(None);
    let mut child = cmd.spawn().expect("start pg_recvlogical");
    let deadline = Instant::now() + drain_deadline(load.events);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait pg_recvlogical") {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let b = ctx.meter.snap(None);
    let mut cpu = delta(&a, &b);
    // pg_recvlogical was reaped by this process: its CPU is in our children's counters.
    let client_cpu = b.bench - a.bench;
    cpu.foreign_cores = (cpu.foreign_cores - client_cpu / cpu.wall_s).max(0.0);
    let ok = status.is_some_and(|s| s.success());
    if !ok {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        eprintln!("[bench] pg_recvlogical failed ({status:?}): {err}");
    }
    Drain {
        system: "ceiling: pg_recvlogical (pgoutput → /dev/null)".into(),
        events: load.events,
        seconds: cpu.wall_s,
        events_per_s: load.events as f64 / cpu.wall_s,
        relay_cpu_s: client_cpu,
        peak_rss_mb: None,
        cpu,
        table_before: None,
        table_after: None,
        delivery: None,
        polling_split: None,
        ok,
    }
}

/// The `[outbox]` section of the default shape: one plain table.
pub const PLAIN_OUTBOX: &str = "[outbox]\ntable = \"public.outbox\"\n";
/// The plain table relayed exactly-once (Kafka transactions with the position in them).
pub const EXACTLY_ONCE_OUTBOX: &str =
    "[outbox]\ntable = \"public.outbox\"\n\n[delivery]\nguarantee = \"exactly-once\"\n";

/// A walrelay configuration measured at the steady rates.
pub struct SteadyPath {
    /// The row's name.
    pub system: &'static str,
    /// Its `[outbox]` section and any other section the path needs.
    pub toml: &'static str,
    /// Measure commit → a tailing `read_committed` consumer instead of walrelay's own
    /// commit → ack histogram: with exactly-once a record is visible when its Kafka
    /// transaction commits, not when its delivery report arrives.
    pub tail: bool,
}

pub const PLAIN_STEADY: SteadyPath =
    SteadyPath { system: "walrelay", toml: PLAIN_OUTBOX, tail: false };
pub const EXACTLY_ONCE_STEADY: SteadyPath =
    SteadyPath { system: "walrelay, exactly-once", toml: EXACTLY_ONCE_OUTBOX, tail: true };

/// `http_port`: where walrelay serves /metrics (the steady phase reads commit→ack there);
/// `outbox`: the `[outbox]` section (and any section a table shape needs; a `[router]` section
/// there is merged into the bench's own, as TOML takes a table once).
pub fn walrelay_config(
    db: &TestDb,
    slot: &str,
    publication: &str,
    prefix: &str,
    http_port: u16,
    outbox: &str,
) -> String {
    let (outbox, router) = take_section(outbox, "[router]");
    format!(
        r#"[source]
url = "{url}"
slot = "{slot}"
publication = "{publication}"
status_interval_ms = 100

{outbox}

[router]
"route.topic.replacement" = "{prefix}.outbox.event.${{routedByValue}}"
{router}

[http]
listen = "127.0.0.1:{http_port}"

[kafka]
"bootstrap.servers" = "{bootstrap}"
{extra}
"#,
        url = db.url,
        bootstrap = bootstrap(),
        // Diagnostics: more [kafka] lines (or whole sections) for walrelay, e.g.
        // WALRELAY_BENCH_EXTRA_TOML=$'"linger.ms" = 0\n[limits]\ninflight_records = 100000'.
        // Otherwise walrelay runs on its defaults (linger.ms 2).
        extra = std::env::var("WALRELAY_BENCH_EXTRA_TOML").unwrap_or_default(),
    )
}

/// `toml` without its section `header` (from that line to the next `[…]` line), and the
/// section's lines.
fn take_section(toml: &str, header: &str) -> (String, String) {
    let (mut rest, mut section, mut inside) = (String::new(), String::new(), false);
    for line in toml.lines() {
        if line.trim_start().starts_with('[') {
            inside = line.trim() == header;
            if inside {
                continue;
            }
        }
        let out = if inside { &mut section } else { &mut rest };
        out.push_str(line);
        out.push('\n');
    }
    (rest, section)
}

pub fn start_walrelay(config: &str) -> RelayProcess {
    start_walrelay_bin(&crate::support::process::walrelay_bin(), config)
}

/// `bin` as walrelay, e.g. the baseline binary.
pub fn start_walrelay_bin(bin: &Path, config: &str) -> RelayProcess {
    // Production log level (the harness default is debug, one line per transaction).
    let level = std::env::var("WALRELAY_BENCH_LOG").unwrap_or_else(|_| "info".into());
    RelayProcess::start_program(bin, config, &[], &[("RUST_LOG", level.as_str())])
}

pub async fn confirmed_lsn(c: &tokio_postgres::Client, slot: &str) -> Lsn {
    c.query_opt(
        "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1",
        &[&slot],
    )
    .await
    .ok()
    .flatten()
    .and_then(|r| r.get::<_, Option<Lsn>>(0))
    .unwrap_or_default()
}

/// walrelay drains the backlog from its slot into the broker; done when the slot's
/// confirmed_flush_lsn passed the end of the load (every record acknowledged). `system` names
/// the row ("walrelay", or a table shape), `outbox` is its `[outbox]` section.
#[allow(clippy::too_many_arguments)]
pub async fn walrelay_drain(
    ctx: &Ctx<'_>,
    db: &TestDb,
    slot: &str,
    publication: &str,
    load: &Loaded,
    system: &str,
    outbox: &str,
) -> Drain {
    let prefix = unique("wr");
    crate::fresh::broker();
    create_topics(bootstrap(), &prefix).await;
    let config =
        walrelay_config(db, slot, publication, &prefix, crate::support::free_port(), outbox);
    if outbox.contains("exactly-once") {
        prime_exactly_once(&config).await;
    }
    if outbox.contains("use_latest_version = true") {
        crate::converters::register_contracts(&prefix).await;
    }
    let before = workload::try_table_stats(db).await;
    let watch = workload::connect(&db.url).await;
    let a = ctx.meter.snap(None);
    let mut relay = start_walrelay_bin(ctx.walrelay_bin, &config);
    let pid = relay.pid();
    let deadline = Instant::now() + drain_deadline(load.events);
    let mut done = false;
    let mut rss = None;
    while Instant::now() < deadline {
        if confirmed_lsn(&watch, slot).await >= Lsn(load.end_lsn) {
            done = true;
            break;
        }
        if !relay.is_running() {
            break;
        }
        rss = peak_rss_mb(pid).or(rss);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let b = ctx.meter.snap(Some(pid));
    let rss = peak_rss_mb(pid).or(rss);
    let code = relay.terminate();
    keep_log(&format!("{prefix}-drain"), &relay.log());
    if !done {
        eprintln!(
            "[bench] walrelay did not drain (exit {code:?}); log tail:\n{}",
            tail(&relay.log(), 40)
        );
    }
    let cpu = delta(&a, &b);
    let delivery =
        read_back(&prefix, workload::BACKLOG_GROUP, 1..=load.events, ctx.aggregates).await;
    let after = workload::try_table_stats_settled(db).await;
    Drain {
        system: system.into(),
        events: load.events,
        seconds: cpu.wall_s,
        events_per_s: load.events as f64 / cpu.wall_s,
        relay_cpu_s: cpu.relay_cpu_s,
        peak_rss_mb: rss,
        cpu,
        table_before: before,
        table_after: after,
        ok: done && delivery.complete(),
        delivery: Some(delivery),
        polling_split: None,
    }
}

/// Exactly-once drains a backlog the way a relay restarting after an outage does: on a cluster
/// that has run Kafka transactions before (its transaction log exists) and with the relay's
/// progress topic there, as the drain's topics are. Each measurement's broker is new, so without
/// this the drain would also time Kafka creating `__transaction_state` at the first
/// `init_transactions` and walrelay creating its progress topic: a first start's cost, not a
/// drain's (0.78 s before the first record on 2026-12-04). That cost is printed, apart.
async fn prime_exactly_once(config: &str) {
    let started = Instant::now();
    let bootstrap = bootstrap().to_string();
    tokio::task::spawn_blocking(move || {
        use rdkafka::producer::{BaseProducer, Producer};
        let producer: BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("transactional.id", unique("bench_prime"))
            .set("log_level", "3")
            .create()
            .expect("a transactional producer");
        let timeout = Duration::from_secs(60);
        producer.init_transactions(timeout).expect("init_transactions on the fresh broker");
        producer.begin_transaction().expect("begin");
        producer.commit_transaction(timeout).expect("commit");
    })
    .await
    .expect("prime the transaction log");
    let log_ms = started.elapsed().as_millis();
    let setup = crate::support::process::walrelay_async(&["setup"], Some(config)).await;
    assert_eq!(setup.code, Some(0), "walrelay setup: {setup}");
    eprintln!(
        "[bench] exactly-once: the fresh broker's transaction log took {log_ms} ms to create, walrelay setup (its progress topic) {} ms; neither is in the drain",
        started.elapsed().as_millis() - log_ms
    );
}

/// Keeps a relay's log under target/walrelay-bench/logs/ (the harness's scratch directory goes
/// away with the process).
pub fn keep_log(name: &str, log: &str) {
    let dir = crate::target_dir().join("walrelay-bench").join("logs");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join(format!("{name}.log")), log);
}

fn tail(log: &str, lines: usize) -> String {
    let all: Vec<&str> = log.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct SteadyRun {
    pub system: String,
    /// Process start → first record seen by a consumer (walrelay only; slot already there).
    pub first_record_ms: Option<f64>,
    pub phases: Vec<Latency>,
    pub peak_rss_mb: Option<f64>,
    pub delivery: Option<Delivery>,
    pub table_after: Option<TableStats>,
}

/// walrelay restarted on its existing slot (caught up): first-record latency, then the steady
/// phases on the same process.
/// walrelay at the steady rates, configured as `path` says.
pub async fn walrelay_steady(
    ctx: &Ctx<'_>,
    db: &TestDb,
    slot: &str,
    publication: &str,
    rates: &[u64],
    seconds: f64,
    path: &SteadyPath,
) -> SteadyRun {
    let prefix = unique("wrs");
    crate::fresh::broker();
    create_topics(bootstrap(), &prefix).await;
    let clocks = Clocks::new(crate::steady::total_events(rates, seconds));
    let mut tail_consumer = match path.tail {
        true => {
            let (b, p, r) = (bootstrap().to_string(), prefix.clone(), clocks.recv_us.clone());
            Some(tokio::task::spawn_blocking(move || Tail::start(&b, &p, r)).await.expect("tail"))
        }
        false => None,
    };
    // One event committed while no relay runs: the first thing the new process must publish.
    insert_one(db, ctx.sync_commit, ctx.steady_group, 0, ctx.aggregates).await;
    let http_port = crate::support::free_port();
    let t0 = now_us();
    let config = walrelay_config(db, slot, publication, &prefix, http_port, path.toml);
    let mut relay = start_walrelay_bin(ctx.walrelay_bin, &config);
    // Published = acknowledged by the broker: the first ack counted in walrelay's histogram.
    let first_deadline = Instant::now() + Duration::from_secs(30);
    let mut first = None;
    while first.is_none() && Instant::now() < first_deadline && relay.is_running() {
        if crate::ackhist::count(&crate::ackhist::scrape(http_port).await.ack) > 0 {
            first = Some(now_us());
        } else {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let first_record_ms = first.map(|f| (f - t0) as f64 / 1000.0);
    eprintln!("[bench]   walrelay first record after {first_record_ms:?} ms");
    let lat = phases(
        db,
        rates,
        seconds,
        1,
        ctx.aggregates,
        &clocks,
        ctx.meter,
        relay.pid(),
        ctx.sync_commit,
        ctx.steady_group,
        if path.tail { Observer::Tail } else { Observer::Histogram(http_port) },
    )
    .await;
    let rss = peak_rss_mb(relay.pid());
    relay.terminate();
    if let Some(t) = tail_consumer.as_mut() {
        t.stop();
    }
    keep_log(&format!("{prefix}-steady"), &relay.log());
    let total = lat.iter().map(|l| l.events).sum::<u64>();
    let delivery = read_back(&prefix, ctx.steady_group, 0..=total, ctx.aggregates).await;
    SteadyRun {
        system: path.system.into(),
        first_record_ms,
        phases: lat,
        peak_rss_mb: rss,
        delivery: Some(delivery),
        table_after: Some(table_stats_settled(db).await),
    }
}

/// The polling relay (B rows per batch, `instances` instances) drains the backlog.
pub async fn polling_drain(
    ctx: &Ctx<'_>,
    db: &TestDb,
    batch: u32,
    instances: u32,
    load: &Loaded,
) -> Drain {
    let prefix = unique(&format!("poll{batch}x{instances}"));
    crate::fresh::broker();
    create_topics(bootstrap(), &prefix).await;
    let before = table_stats(db).await;
    let args = PollingArgs {
        url: db.url.clone(),
        bootstrap: bootstrap().to_string(),
        topic_prefix: prefix.clone(),
        batch,
        instances,
        expect: load.events,
        poll_ms: ctx.poll_ms,
    };
    let a = ctx.meter.snap(None);
    let mut child = PollingProcess::start(&args);
    let pid = child.pid();
    let drained = child.wait_line("DRAINED", drain_deadline(load.events)).await.is_some();
    let b = ctx.meter.snap(Some(pid));
    let rss = peak_rss_mb(pid);
    let stats: Vec<InstanceStats> = match child.wait_line("STATS", Duration::from_secs(60)).await {
        Some(json) => serde_json::from_str(&json).unwrap_or_default(),
        None => Vec::new(),
    };
    child.finish();
    let cpu = delta(&a, &b);
    let delivery =
        read_back(&prefix, workload::BACKLOG_GROUP, 1..=load.events, ctx.aggregates).await;
    let after = table_stats_settled(db).await;
    Drain {
        system: format!("polling B={batch} ×{instances}"),
        events: load.events,
        seconds: cpu.wall_s,
        events_per_s: load.events as f64 / cpu.wall_s,
        relay_cpu_s: cpu.relay_cpu_s,
        peak_rss_mb: rss,
        cpu,
        table_before: Some(before),
        table_after: Some(after),
        ok: drained && delivery.complete(),
        delivery: Some(delivery),
        polling_split: Some(sum_stats(&stats)),
    }
}

/// The polling relay (B, one instance) at the steady rates, on a table that already holds
/// published rows (VACUUM ANALYZEd, as a deployment's would be).
pub async fn polling_steady(
    ctx: &Ctx<'_>,
    db: &TestDb,
    batch: u32,
    rates: &[u64],
    seconds: f64,
) -> SteadyRun {
    db.execute("VACUUM ANALYZE outbox").await;
    let prefix = unique(&format!("polls{batch}"));
    crate::fresh::broker();
    create_topics(bootstrap(), &prefix).await;
    let clocks = Clocks::new(crate::steady::total_events(rates, seconds));
    let (b, p, r) = (bootstrap().to_string(), prefix.clone(), clocks.recv_us.clone());
    let mut tail_consumer =
        tokio::task::spawn_blocking(move || Tail::start(&b, &p, r)).await.expect("tail");
    let args = PollingArgs {
        url: db.url.clone(),
        bootstrap: bootstrap().to_string(),
        topic_prefix: prefix.clone(),
        batch,
        instances: 1,
        expect: 0,
        poll_ms: ctx.poll_ms,
    };
    let mut child = PollingProcess::start(&args);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let lat = phases(
        db,
        rates,
        seconds,
        1,
        ctx.aggregates,
        &clocks,
        ctx.meter,
        child.pid(),
        ctx.sync_commit,
        ctx.steady_group,
        Observer::Tail,
    )
    .await;
    let rss = peak_rss_mb(child.pid());
    child.request_stop();
    let _ = child.wait_line("STATS", Duration::from_secs(60)).await;
    child.finish();
    tail_consumer.stop();
    let total = lat.iter().map(|l| l.events).sum::<u64>();
    let delivery = read_back(&prefix, ctx.steady_group, 1..=total, ctx.aggregates).await;
    SteadyRun {
        system: format!("polling B={batch} ×1 (poll {} ms)", ctx.poll_ms),
        first_record_ms: None,
        phases: lat,
        peak_rss_mb: rss,
        delivery: Some(delivery),
        table_after: Some(table_stats_settled(db).await),
    }
}
