//! What `walrelay audit` costs, beside the live drain of the same rows: the binary audits the
//! window the replay phase just re-published to topics of its own (so every event is there
//! once), and its rate and peak resident memory (the child's VmHWM, polled) are
//! printed beside walrelay's drain of the same backlog. With `--baseline-bin` the baseline
//! audits the same window right after, and the table adds the current / baseline ratio.

use std::fmt::Write;
use std::io::Read;
use std::time::Instant;

use crate::measure::peak_rss_mb;
use crate::replay::Replayed;
use crate::report::{thousands, Stat};
use crate::support::{free_port, TestDb};
use crate::systems::{walrelay_config, PLAIN_OUTBOX};
use crate::Rep;

/// One audit of the replayed window.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Audited {
    /// Which binary audited: "walrelay", or the baseline's label.
    pub system: String,
    pub events: u64,
    pub seconds: f64,
    pub events_per_s: f64,
    pub peak_rss_mb: f64,
    pub live_drain_events_per_s: Option<f64>,
    pub live_drain_peak_rss_mb: Option<f64>,
    /// The audit found every event once, nothing else.
    pub clean: bool,
}

/// Audits what `replayed` sent with `bin` (the `walrelay` binary the bench runs when `None`),
/// named `system` in the table.
pub async fn replayed(
    db: &TestDb,
    slot: &str,
    publication: &str,
    replayed: &Replayed,
    live: Option<(f64, Option<f64>)>,
    (system, bin): (&str, Option<&std::path::Path>),
) -> Audited {
    let text = walrelay_config(db, slot, publication, &replayed.prefix, free_port(), PLAIN_OUTBOX);
    let path =
        std::env::temp_dir().join(format!("walrelay-bench-audit-{}.toml", std::process::id()));
    std::fs::write(&path, text).expect("write the audit's config");
    let bin = match bin {
        Some(b) => b.as_os_str().to_owned(),
        None => std::env::var_os("WALRELAY_BIN").expect("the bench sets WALRELAY_BIN"),
    };
    let mut args: Vec<String> = ["audit", "--config"].map(String::from).to_vec();
    args.push(path.display().to_string());
    args.extend(["--since", "7d", "--settle", "0s", "--json", "--details", "0"].map(String::from));
    if let Some(until) = &replayed.until {
        args.extend(["--until".to_string(), until.clone()]);
    }
    let started = Instant::now();
    let (stdout, stderr, peak_rss_mb) = tokio::task::spawn_blocking(move || {
        let mut child = std::process::Command::new(bin)
            .args(&args)
            // Its own account of where the time goes.
            .env("RUST_LOG", "warn,walrelay::audit=debug")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start walrelay audit");
        let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let errors = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            text
        });
        // VmHWM of the running child, polled: wait4's ru_maxrss would also count the bench's
        // own pages, which a spawned child shares until its exec.
        let pid = child.id();
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = out.read_to_string(&mut text);
            text
        });
        let mut peak_mb: f64 = 0.0;
        while child.try_wait().ok().flatten().is_none() {
            if let Some(mb) = peak_rss_mb(pid) {
                peak_mb = peak_mb.max(mb);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        (reader.join().unwrap_or_default(), errors.join().unwrap_or_default(), peak_mb)
    })
    .await
    .expect("the audit's runner");
    let seconds = started.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_default();
    let events = report["total"]["expected"].as_u64().unwrap_or(0);
    // The window holds only the replay's copies: each event there once, as a re-published
    // copy ("repaired" since the audit tells them apart; "delivered once" before).
    let once = |key: &str| report["total"][key].as_u64().unwrap_or(0);
    let clean = report["clean"] == true && once("delivered_once") + once("repaired") == events;
    if !clean {
        eprintln!("[bench] audit not clean: {}\n{stderr}", report["total"]);
    }
    // Its own account of where the time went.
    for line in stderr.lines().filter(|l| l.contains("audit:")) {
        eprintln!("[bench] walrelay said: {line}");
    }
    let a = Audited {
        system: system.to_string(),
        events,
        seconds,
        events_per_s: events as f64 / seconds,
        peak_rss_mb,
        live_drain_events_per_s: live.map(|l| l.0),
        live_drain_peak_rss_mb: live.and_then(|l| l.1),
        clean,
    };
    eprintln!(
        "[bench] audit ({system}): {} events in {:.2} s ({:.0} events/s, peak RSS {:.1} MB; live drain {:?} events/s); clean {}",
        a.events, a.seconds, a.events_per_s, a.peak_rss_mb, a.live_drain_events_per_s.map(f64::round), a.clean
    );
    a
}

/// The audit table (medians over the repetitions, one row per binary, and with a baseline the
/// current / baseline ratio of each repetition's rate), or nothing when no audit ran.
pub fn render(reps: &[Rep]) -> String {
    let runs: Vec<&Audited> = reps.iter().flat_map(|r| r.audits.iter()).collect();
    if runs.is_empty() {
        return String::new();
    }
    let mut systems: Vec<&str> = Vec::new();
    for r in &runs {
        if !systems.contains(&r.system.as_str()) {
            systems.push(&r.system);
        }
    }
    let mut o = String::new();
    let _ = writeln!(o, "\n### Audit: `walrelay audit` of the replayed window, beside walrelay's live drain of the same rows\n");
    let _ = writeln!(o, "| system | events | audit events/s | live drain events/s | audit × live drain | audit seconds | audit peak RSS MB | drain relay peak RSS MB | clean |");
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|");
    for system in &systems {
        let mine: Vec<&&Audited> = runs.iter().filter(|r| r.system == *system).collect();
        let stat = |f: fn(&Audited) -> Option<f64>| Stat::of(mine.iter().filter_map(|r| f(r)));
        let _ = writeln!(
            o,
            "| {system} | {} | {} | {} | {} | {} | {} | {} | {} |",
            stat(|r| Some(r.events as f64)).show(thousands),
            stat(|r| Some(r.events_per_s)).show(thousands),
            stat(|r| r.live_drain_events_per_s).show(thousands),
            stat(|r| Some(r.events_per_s / r.live_drain_events_per_s?)).show(|x| format!("{x:.2}")),
            stat(|r| Some(r.seconds)).show(|x| format!("{x:.2}")),
            stat(|r| Some(r.peak_rss_mb)).show(|x| format!("{x:.1}")),
            stat(|r| r.live_drain_peak_rss_mb).show(|x| format!("{x:.1}")),
            if mine.iter().all(|r| r.clean) { "yes" } else { "**NO**" },
        );
    }
    // Within each repetition: the current binary's rate and memory over the baseline's.
    let ratios: Vec<(f64, f64)> = reps
        .iter()
        .filter_map(|rep| {
            let current = rep.audits.iter().find(|a| a.system == "walrelay")?;
            let base = rep.audits.iter().find(|a| a.system != "walrelay")?;
            Some((current.events_per_s / base.events_per_s, current.peak_rss_mb / base.peak_rss_mb))
        })
        .collect();
    if !ratios.is_empty() {
        let rate = Stat::of(ratios.iter().map(|r| r.0));
        let rss = Stat::of(ratios.iter().map(|r| r.1));
        let _ = writeln!(
            o,
            "\ncurrent / baseline, same window, same invocation: audit events/s × {}, peak RSS × {}",
            rate.show(|x| format!("{x:.3}")),
            rss.show(|x| format!("{x:.3}"))
        );
    }
    o
}
