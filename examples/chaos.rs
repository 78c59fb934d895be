//! Chaos run: walrelay under every fault at once, verified from Kafka.
//!
//! ```sh
//! cargo build --release --bin walrelay
//! cargo run --release --example chaos -- --events 1000000 --kills 20 --broker-hangs 3 --pg-restarts 3
//! ```
//!
//! Starts its own PostgreSQL (a private instance, so it can restart it), its own broker (tansu,
//! memory engine) and walrelay (`WALRELAY_BIN`, else target/release/walrelay, else
//! target/debug/walrelay). A writer commits `--events` outbox rows in transactions of random size
//! (1..=`--max-txn`) over `--aggregates` aggregates; it owns every aggregate and numbers each
//! one's events in commit order in the payload (`"seq"`). Meanwhile, at random moments spread
//! over the writing, the faults are injected in random order:
//!
//! * kill: SIGKILL of the relay, restarted at once;
//! * broker hang: SIGSTOP of the broker for longer than the relay's `message.timeout.ms`, then
//!   SIGCONT;
//! * PostgreSQL restart: `pg_ctl restart -m fast`.
//!
//! Then everything is read back from Kafka and compared with what committed: lost events,
//! aggregates whose first deliveries are not in commit order, duplicates. Exit code 1 when
//! anything was lost or reordered. Everything listens on 127.0.0.1 only; every wait has a
//! deadline.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashSet;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use support::kafka::private_broker;
use support::postgres::{connect, PrivatePostgres};
use support::process::{freeze, hwm_kb, thaw, walrelay_bin, RelayProcess};
use support::slot::slot_active_pid;
use support::writer::{collect_deliveries, verify, Rng, Writer, WriterConfig};

#[derive(Debug, Clone)]
struct Args {
    events: usize,
    kills: usize,
    broker_hangs: usize,
    pg_restarts: usize,
    aggregates: usize,
    max_txn: usize,
    /// Events per second the writer aims at (0: as fast as it can; None: slow enough that the
    /// writing lasts about twice as long as the faults, capped at 10,000/s).
    rate: Option<f64>,
    message_timeout_ms: u64,
    seed: Option<u64>,
}

const USAGE: &str = "usage: chaos [--events N] [--kills N] [--broker-hangs N] [--pg-restarts N] \
[--aggregates N] [--max-txn N] [--rate EVENTS_PER_S] [--message-timeout-ms MS] [--seed N]";

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        events: 1_000_000,
        kills: 20,
        broker_hangs: 3,
        pg_restarts: 3,
        aggregates: 1000,
        max_txn: 50,
        rate: None,
        message_timeout_ms: 3000,
        seed: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            return Err(USAGE.into());
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let num =
            |v: &str| v.replace('_', "").parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--events" => a.events = num(&value)? as usize,
            "--kills" => a.kills = num(&value)? as usize,
            "--broker-hangs" => a.broker_hangs = num(&value)? as usize,
            "--pg-restarts" => a.pg_restarts = num(&value)? as usize,
            "--aggregates" => a.aggregates = num(&value)?.max(1) as usize,
            "--max-txn" => a.max_txn = num(&value)?.max(1) as usize,
            "--rate" => a.rate = Some(value.parse().map_err(|e| format!("--rate {value}: {e}"))?),
            "--message-timeout-ms" => a.message_timeout_ms = num(&value)?,
            "--seed" => a.seed = Some(num(&value)?),
            _ => return Err(format!("unknown argument {flag}\n{USAGE}")),
        }
    }
    Ok(a)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Kill,
    Hang,
    Restart,
}

/// One relay process at a time, with the peak RSS of all of them.
struct Relays {
    config: String,
    current: RelayProcess,
    peak_hwm_kb: u64,
    started: usize,
}

impl Relays {
    fn start(config: String) -> Relays {
        let current = RelayProcess::start(&config);
        Relays { config, current, peak_hwm_kb: 0, started: 1 }
    }

    fn sample(&mut self) {
        self.peak_hwm_kb = self.peak_hwm_kb.max(hwm_kb(self.current.pid()).unwrap_or(0));
    }

    fn kill_and_restart(&mut self) {
        self.sample();
        self.current.kill();
        self.current = RelayProcess::start(&self.config);
        self.started += 1;
    }

    /// A relay that exited by itself (a definite error) is a finding: show why.
    fn check_alive(&mut self) -> Result<(), String> {
        if self.current.is_running() {
            return Ok(());
        }
        Err(format!(
            "walrelay exited by itself with code {:?}; its log:\n{}",
            self.current.wait_exit(Duration::ZERO),
            tail(&self.current.log(), 60)
        ))
    }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("chaos: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<bool, String> {
    let mut rng = args.seed.map(Rng::new).unwrap_or_else(Rng::from_time);
    let seed = rng.seed();
    let bin = walrelay_bin();
    let modified = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .map(|d| format!("built {} s ago", d.as_secs()))
        .unwrap_or_default();
    println!("== chaos {args:?} seed {seed}");
    println!("== walrelay binary {} ({modified})", bin.display());
    let began = Instant::now();

    let (pg, broker) =
        tokio::task::spawn_blocking(|| (PrivatePostgres::start("chaos_pg"), private_broker(None)))
            .await
            .map_err(|e| e.to_string())?;
    println!(
        "== postgres 127.0.0.1:{} (pid {:?}), broker {} (pid {})",
        pg.pg.port(),
        pg.postmaster_pid(),
        broker.bootstrap(),
        broker.pid()
    );
    let db = pg.pg.create_database("chaos").await;
    let slot = "chaos_slot";
    let client = connect(&db.url).await.map_err(|e| e.to_string())?;
    // Slot before the table (see docs/architecture.md, "A PostgreSQL 15 caveat").
    client
        .query_one("SELECT 1 FROM pg_create_logical_replication_slot($1, 'pgoutput')", &[&slot])
        .await
        .map_err(|e| format!("create slot: {e}"))?;
    db.create_outbox("outbox").await;

    let mut wcfg = WriterConfig::new(
        &db.url,
        "chaos",
        &["Order", "Customer", "Invoice", "Shipment"],
        args.aggregates,
    );
    wcfg.max_events = Some(args.events);
    wcfg.max_txn = args.max_txn;
    // Roughly how long the faults take: a hang lasts message.timeout.ms + 2.5 s on average, a
    // restart about a second, a kill half a second, plus the pause after each.
    let budget = args.broker_hangs as f64 * (args.message_timeout_ms as f64 / 1000.0 + 2.5)
        + args.pg_restarts as f64 * 1.0
        + args.kills as f64 * 0.5
        + (args.kills + args.broker_hangs + args.pg_restarts) as f64 * 0.55;
    let rate = args
        .rate
        .unwrap_or_else(|| (args.events as f64 / (2.0 * budget.max(1.0))).clamp(500.0, 10_000.0));
    println!("== writer rate {rate:.0} events/s (faults take about {budget:.0} s)");
    wcfg.rate = (rate > 0.0).then_some(rate);
    wcfg.seed = rng.next_u64();
    wcfg.reconnect_for = Duration::from_secs(120);
    let topics = wcfg.topics();
    for t in &topics {
        support::create_topic(broker.bootstrap(), t, 4).await;
    }
    let config = format!(
        r#"[source]
url = "{url}"
slot = "{slot}"
publication = "chaos_pub"
status_interval_ms = 500

[outbox]
table = "public.outbox"

[router]
"route.topic.replacement" = "chaos.outbox.event.${{routedByValue}}"

[kafka]
"bootstrap.servers" = "{bootstrap}"
"message.timeout.ms" = {timeout}
"#,
        url = db.url,
        bootstrap = broker.bootstrap(),
        timeout = args.message_timeout_ms
    );
    let mut relays = Relays::start(config);
    let streaming = support::wait_until("walrelay streams", Duration::from_secs(60), || {
        let url = db.url.clone();
        async move { slot_active_pid(&url, slot).await.is_some() }
    })
    .await;
    if !streaming {
        return Err(format!("walrelay never streamed:\n{}", tail(&relays.current.log(), 40)));
    }

    // The faults, in random order, each at a random point of the writing.
    let mut plan: Vec<Fault> = std::iter::repeat_n(Fault::Kill, args.kills)
        .chain(std::iter::repeat_n(Fault::Hang, args.broker_hangs))
        .chain(std::iter::repeat_n(Fault::Restart, args.pg_restarts))
        .collect();
    for i in (1..plan.len()).rev() {
        let j = rng.range(0, i as u64) as usize;
        plan.swap(i, j);
    }
    let mut at: Vec<usize> =
        plan.iter().map(|_| (args.events as u64 * rng.range(5, 95) / 100) as usize).collect();
    at.sort_unstable();

    let writer = Writer::spawn(wcfg);
    let (mut kills, mut hangs, mut restarts, mut after_writing) = (0, 0, 0, 0);
    let mut restart_times = Vec::new();
    for (fault, threshold) in plan.iter().zip(at) {
        let deadline = Instant::now() + Duration::from_secs(600);
        while (writer.committed() as usize) < threshold && !writer.is_finished() {
            if Instant::now() > deadline {
                return Err("the writer made no progress for 10 minutes".into());
            }
            relays.sample();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        relays.check_alive()?;
        let t = began.elapsed();
        if writer.is_finished() {
            after_writing += 1;
        }
        match fault {
            Fault::Kill => {
                relays.kill_and_restart();
                kills += 1;
                println!("[{t:7.1?}] kill #{kills}: relay SIGKILLed at {} events committed, restarted as pid {}", writer.committed(), relays.current.pid());
            }
            Fault::Hang => {
                let hang = Duration::from_millis(args.message_timeout_ms) + rng.millis(1000, 4000);
                freeze(broker.pid());
                tokio::time::sleep(hang).await;
                thaw(broker.pid());
                hangs += 1;
                println!("[{t:7.1?}] broker hang #{hangs}: SIGSTOP for {hang:.1?} (message.timeout.ms {}), SIGCONT", args.message_timeout_ms);
            }
            Fault::Restart => {
                let pg_ref = &pg;
                let took = tokio::task::block_in_place(|| pg_ref.restart_fast())?;
                restarts += 1;
                restart_times.push(took);
                println!("[{t:7.1?}] postgres restart #{restarts}: pg_ctl restart -m fast took {took:.1?}");
            }
        }
        // Short random pause so faults do not always land back to back.
        tokio::time::sleep(rng.millis(100, 1000)).await;
    }
    let report = writer.join().await;
    println!(
        "[{:7.1?}] writer done: {} events in {} transactions in {:.1?} ({:.0} events/s), {} reconnects",
        began.elapsed(),
        report.events.len(),
        report.txns.len(),
        report.elapsed,
        report.events.len() as f64 / report.elapsed.as_secs_f64(),
        report.reconnects
    );

    // Read everything back while the last relay catches up.
    let want: HashSet<String> = report.ids();
    let catch_up = Duration::from_secs(120) + Duration::from_millis(args.events as u64 / 2);
    let reading = Instant::now();
    let got =
        collect_deliveries(broker.bootstrap(), &topics, &want, Duration::from_secs(2), catch_up)
            .await;
    println!(
        "[{:7.1?}] read {} records from Kafka in {:.1?}",
        began.elapsed(),
        got.len(),
        reading.elapsed()
    );
    relays.check_alive()?;
    relays.sample();
    let code = relays.current.terminate();
    let v = verify(&report.events, &got);

    println!("== chaos results (seed {seed}, {:.1?} in all)", began.elapsed());
    println!("events committed      {}", v.committed);
    println!("events delivered      {} unique ({} records)", v.unique, v.delivered);
    println!("lost                  {}", v.lost);
    println!("reordered aggregates  {}", v.reordered);
    println!("duplicates            {}", v.duplicates);
    println!("unexpected records    {}", v.unexpected);
    println!("relay kills           {kills} ({} relay processes)", relays.started);
    println!("broker hangs          {hangs}");
    println!("postgres restarts     {restarts} (pg_ctl restart -m fast took {restart_times:.1?})");
    println!(
        "peak relay RSS        {:.1} MB (VmHWM, highest of all relay processes)",
        relays.peak_hwm_kb as f64 / 1024.0
    );
    println!(
        "faults while writing  {} of {}",
        kills + hangs + restarts - after_writing,
        kills + hangs + restarts
    );
    println!("final relay stop      exit code {code:?}");
    if !v.lost_ids.is_empty() {
        println!("first lost: {:?}", v.lost_ids);
    }
    if !v.reordered_detail.is_empty() {
        println!("reordered: {:#?}", v.reordered_detail);
    }
    if !v.ok() {
        println!("== last relay log (tail):\n{}", tail(&relays.current.log(), 60));
    }
    Ok(v.lost == 0 && v.reordered == 0 && v.unexpected == 0)
}
