//! The sinks beyond Kafka against each broker's floor (issue 50), in one invocation:
//!
//! ```sh
//! cargo run --release --example walrelay-bench -- sinks [--events 20000] [--sinks nats,rabbitmq,sqs,http]
//! ```
//!
//! One backlog of N outbox rows (the bench's own rows and keys) is written once, with one slot
//! per sink, so every sink drains the same rows. For each sink, then Kafka: the release walrelay
//! drains the backlog into a fresh broker, done when its slot's confirmed LSN passed the end of
//! the load (every record acknowledged), as the Kafka drain is; events/s, the relay's CPU per
//! event and its peak RSS are recorded. What arrived is read back (all N event ids checked),
//! and that broker is stopped. Then the floor (sink_floor.rs): a plain client of a second,
//! fresh broker of the same kind publishes those very messages with the same ack semantic, with
//! nothing else running. Ratio = walrelay's events/s ÷ the floor's; the target is ≥ 0.8.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use walrelay::lsn::Lsn;

use crate::measure::{delta, peak_rss_mb, Meter, PgCpu};
use crate::sink_brokers::Broker;
use crate::sink_floor::{FloorOut, Msg};
use crate::support::{unique, TestDb};
use crate::systems::{self, Ctx};
use crate::workload::{self, Loaded, AGGREGATE_TYPES};

#[derive(clap::Args, Debug)]
pub struct SinksArgs {
    /// Backlog rows every sink drains.
    #[arg(long, default_value_t = 20_000)]
    events: u64,
    /// The sinks beyond Kafka, comma-separated, or none (Kafka's drain always runs, last).
    #[arg(long, value_delimiter = ',', default_value = "nats,rabbitmq,sqs,http")]
    sinks: Vec<String>,
    /// Rows per load transaction.
    #[arg(long, default_value_t = 100)]
    rows_per_txn: u64,
    /// Distinct aggregate ids (the records' keys), as the main bench.
    #[arg(long, default_value_t = 1000)]
    aggregates: u32,
    /// Messages (SQS: batches) the floor keeps in flight.
    #[arg(long, default_value_t = 64)]
    inflight: usize,
    /// Where to write the JSON [default: target/walrelay-bench/sinks-<unix time>.json].
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Don't build the release walrelay binary first.
    #[arg(long)]
    no_build: bool,
}

/// One sink's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub sink: String,
    pub events: u64,
    pub relay_seconds: f64,
    pub relay_events_per_s: f64,
    pub relay_cpu_us_per_event: f64,
    pub relay_peak_rss_mb: Option<f64>,
    /// PostgreSQL's CPU (the walsender decoding the slot) per event, and the machine's busy
    /// cores, during walrelay's drain: what the floor does not share the two cores with.
    pub pg_cpu_us_per_event: f64,
    pub machine_cores: f64,
    /// Distinct event ids read back from the broker (Kafka: the read-back found all, or not).
    pub delivered: u64,
    pub drained: bool,
    pub floor: Option<FloorOut>,
}

impl Row {
    fn ratio(&self) -> Option<f64> {
        let f = self.floor.as_ref()?;
        Some(self.relay_events_per_s / (f.events as f64 / f.seconds))
    }
}

pub fn main(args: SinksArgs) {
    let bin = crate::prepare_walrelay(args.no_build);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let rows = rt.block_on(run(&args, &bin));
    let _ = std::fs::remove_file(crate::private_copy_path("walrelay"));
    println!("{}", render(&args, &rows));
    let json = args.json.clone().unwrap_or_else(|| {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        crate::target_dir().join("walrelay-bench").join(format!("sinks-{secs}.json"))
    });
    let _ = std::fs::create_dir_all(json.parent().unwrap_or(Path::new(".")));
    std::fs::write(&json, serde_json::to_string_pretty(&rows).expect("json")).expect("write JSON");
    println!("JSON: {}", json.display());
    if rows.iter().any(|r| !r.drained) {
        std::process::exit(1);
    }
}

async fn run(args: &SinksArgs, bin: &Path) -> Vec<Row> {
    let svc = tokio::task::spawn_blocking(crate::support::services).await.expect("services");
    crate::measure::epoch();
    let meter = Meter { pg: PgCpu::new(svc.pg.data_dir()) };
    let ctx = Ctx {
        meter: &meter,
        walrelay_bin: bin,
        steady_group: workload::STEADY_GROUP,
        aggregates: args.aggregates,
        poll_ms: 10,
        sync_commit: true,
    };
    let db = workload::create_db("bench_sinks").await;
    let publication = unique("sinks_pub");
    // Kafka last: its drain starts a Kafka broker that stays up until the bench ends, and the
    // other sinks' floors should run with no more beside them than the harness's own.
    let sinks = args.sinks.iter().filter(|s| s.as_str() != "none").cloned();
    let names: Vec<String> = sinks.chain(["kafka".to_string()]).collect();
    let slots: Vec<String> = names.iter().map(|n| unique(&format!("sink_{n}"))).collect();
    let slot_refs: Vec<&str> = slots.iter().map(String::as_str).collect();
    workload::create_publication_and_slots(&db, &publication, &slot_refs).await;
    let load = workload::load(&db, args.events, args.rows_per_txn, args.aggregates).await;
    eprintln!("[bench] sinks: loaded {} rows in {:.1} s", load.events, load.seconds);
    let mut rows = Vec::new();
    for (name, slot) in names.iter().zip(&slots) {
        eprintln!("[bench] sinks: {name}");
        let row = match name.as_str() {
            "kafka" => {
                let d = systems::walrelay_drain(
                    &ctx,
                    &db,
                    slot,
                    &publication,
                    &load,
                    "kafka",
                    systems::PLAIN_OUTBOX,
                )
                .await;
                let complete = d.delivery.as_ref().is_some_and(|x| x.complete());
                Row {
                    sink: "kafka".into(),
                    events: d.events,
                    relay_seconds: d.seconds,
                    relay_events_per_s: d.events_per_s,
                    relay_cpu_us_per_event: d.relay_cpu_s * 1e6 / d.events as f64,
                    relay_peak_rss_mb: d.peak_rss_mb,
                    pg_cpu_us_per_event: d.cpu.pg_cpu_s * 1e6 / d.events as f64,
                    machine_cores: d.cpu.machine_cores,
                    delivered: if complete { d.events } else { 0 },
                    drained: d.ok,
                    floor: None,
                }
            }
            "nats" | "rabbitmq" | "sqs" | "http" => {
                sink_row(&meter, &db, slot, &publication, &load, name, args.inflight).await
            }
            other => {
                eprintln!("[bench] unknown sink {other:?} (nats, rabbitmq, sqs, http)");
                continue;
            }
        };
        eprintln!("[bench] sinks: {row:?}");
        rows.push(row);
    }
    workload::drop_db(&db).await;
    rows
}

/// walrelay into a fresh broker of `sink`, the read-back, then the floor on another fresh one.
async fn sink_row(
    meter: &Meter,
    db: &TestDb,
    slot: &str,
    publication: &str,
    load: &Loaded,
    sink: &str,
    inflight: usize,
) -> Row {
    let prefix = unique("sk");
    let routed: Vec<String> =
        AGGREGATE_TYPES.iter().map(|t| format!("{prefix}.outbox.event.{t}")).collect();
    let broker = Broker::start(sink, &prefix, &routed).await;
    let config = format!(
        "[source]\nurl = \"{url}\"\nslot = \"{slot}\"\npublication = \"{publication}\"\n\
         status_interval_ms = 100\n\n{outbox}\n[router]\n\
         \"route.topic.replacement\" = \"{prefix}.outbox.event.${{routedByValue}}\"\n\n\
         [http]\nlisten = \"127.0.0.1:{port}\"\n\n[delivery]\nsink = \"{sink}\"\n\n{section}",
        url = db.url,
        outbox = systems::PLAIN_OUTBOX,
        port = crate::support::free_port(),
        section = broker.section(),
    );
    let watch = workload::connect(&db.url).await;
    let a = meter.snap(None);
    let mut relay = systems::start_walrelay(&config);
    let pid = relay.pid();
    let deadline = Instant::now() + Duration::from_secs(120 + load.events / 500);
    let (mut drained, mut rss) = (false, None);
    while Instant::now() < deadline && relay.is_running() {
        if systems::confirmed_lsn(&watch, slot).await >= Lsn(load.end_lsn) {
            drained = true;
            break;
        }
        rss = peak_rss_mb(pid).or(rss);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let b = meter.snap(Some(pid));
    let rss = peak_rss_mb(pid).or(rss);
    relay.terminate();
    systems::keep_log(&format!("{prefix}-{sink}"), &relay.log());
    if !drained {
        let log = relay.log();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        eprintln!(
            "[bench] walrelay → {sink} did not drain; log tail (newest first):\n{}",
            tail.join("\n")
        );
    }
    let cpu = delta(&a, &b);
    let msgs = broker.read(&routed).await;
    let ids: HashSet<&str> = msgs.iter().filter_map(|m| id_of(m)).collect();
    eprintln!(
        "[bench] {sink}: read back {} messages, {} distinct event ids",
        msgs.len(),
        ids.len()
    );
    let delivered = ids.len() as u64;
    drop(broker);
    // The floor: the same messages into a broker of its own, started empty.
    let floor_broker = Broker::start(sink, &prefix, &routed).await;
    let floor = run_floor(sink, &floor_broker, &msgs, inflight).await;
    Row {
        sink: sink.to_string(),
        events: load.events,
        relay_seconds: cpu.wall_s,
        relay_events_per_s: load.events as f64 / cpu.wall_s,
        relay_cpu_us_per_event: cpu.relay_cpu_s * 1e6 / load.events as f64,
        relay_peak_rss_mb: rss,
        pg_cpu_us_per_event: cpu.pg_cpu_s * 1e6 / load.events as f64,
        machine_cores: cpu.machine_cores,
        delivered,
        drained: drained && delivered == load.events,
        floor,
    }
}

/// The event id: the `id` header every format keeps.
fn id_of(m: &Msg) -> Option<&str> {
    m.headers.iter().find(|(n, _)| n == "id").map(|(_, v)| v.as_str())
}

/// Runs `walrelay-bench sink-floor` on `msgs` against `broker` and reads its FLOOR line.
async fn run_floor(sink: &str, broker: &Broker, msgs: &[Msg], inflight: usize) -> Option<FloorOut> {
    let dir = crate::target_dir().join("walrelay-bench");
    let _ = std::fs::create_dir_all(&dir);
    let file = dir.join(format!("sink-floor-{sink}-{}.json", std::process::id()));
    std::fs::write(&file, serde_json::to_vec(msgs).expect("json")).expect("write the records");
    let (url, exchange) = broker.target();
    let exe = std::env::current_exe().expect("the bench's own path");
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["sink-floor", "--sink", sink, "--url", &url, "--exchange", &exchange])
        .arg("--records")
        .arg(&file)
        .args(["--inflight", &inflight.to_string()]);
    let output = tokio::task::spawn_blocking(move || cmd.output()).await.expect("join");
    let _ = std::fs::remove_file(&file);
    let output = output.expect("run the floor");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().find_map(|l| l.strip_prefix("FLOOR "));
    let floor = line.and_then(|l| serde_json::from_str::<FloorOut>(l).ok());
    if floor.is_none() {
        eprintln!("[bench] the {sink} floor failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    floor
}

fn render(args: &SinksArgs, rows: &[Row]) -> String {
    let mut s = format!(
        "Sinks beyond Kafka, against each broker's plain client: {} events, {} aggregate ids \
         (keys), 4 destinations; floor = a plain client, {} in flight (SQS: batches of 10)\n\n",
        args.events, args.aggregates, args.inflight
    );
    s += "| sink | walrelay events/s | floor events/s | ratio | CPU µs/event, walrelay / floor \
          | PostgreSQL CPU µs/event (walrelay's drain) | busy cores, walrelay / floor \
          | peak RSS MB, walrelay / floor | delivered |\n";
    s += "|---|---:|---:|---:|---:|---:|---:|---:|---|\n";
    let num = |x: Option<f64>, digits: usize| match x {
        Some(v) if v.is_finite() => format!("{v:.digits$}"),
        _ => "—".into(),
    };
    for r in rows {
        let f = r.floor.as_ref();
        let floor_eps = f.map(|f| f.events as f64 / f.seconds);
        let floor_cpu = f.map(|f| f.cpu_s * 1e6 / f.events as f64);
        let delivered = match f {
            Some(f) if f.acked != f.events => {
                format!("{}/{} (floor acked {})", r.delivered, r.events, f.acked)
            }
            _ => format!("{}/{}", r.delivered, r.events),
        };
        s += &format!(
            "| {} | {} | {} | {} | {} / {} | {} | {} / {} | {} / {} | {} |\n",
            r.sink,
            num(Some(r.relay_events_per_s), 0),
            num(floor_eps, 0),
            num(r.ratio(), 2),
            num(Some(r.relay_cpu_us_per_event), 1),
            num(floor_cpu, 1),
            num(Some(r.pg_cpu_us_per_event), 1),
            num(Some(r.machine_cores), 2),
            num(f.map(|f| f.machine_cores), 2),
            num(r.relay_peak_rss_mb, 1),
            num(f.and_then(|f| f.peak_rss_mb), 1),
            delivered,
        );
    }
    s
}
