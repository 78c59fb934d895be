//! `walrelay audit`: compares the retained outbox rows of a window with what Kafka holds (see
//! [`crate::audit`]). A table by default, `--json` for scripts. `--repair` re-publishes the
//! missing events the way `walrelay replay --ids` does (same ids, keys and partitions), then
//! audits again and shows both.
//!
//! Exit code 0 when clean; 1 when anything is missing, duplicated beyond replays, out of order,
//! misplaced or unexpected, or the audit could not finish (run it again); 2 when it cannot run
//! as given (bad options, a window with no rows, a topic it may not read: the message says the
//! fix).

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::audit::{self, Options, Report, TopicReport};
use crate::config::Config;
use crate::replay::{self, Selection, TimeBound};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(long, short)]
    config: PathBuf,
    /// Rows written at or after this: a duration before now (6h, 30m, 7d) or an RFC 3339 time.
    #[arg(long, value_parser = TimeBound::parse)]
    since: TimeBound,
    /// Rows written before this: a duration before now or an RFC 3339 time [default: now].
    #[arg(long, value_parser = TimeBound::parse)]
    until: Option<TimeBound>,
    /// Only events of this aggregate type (matched on `route.by.field`).
    #[arg(long)]
    aggregate_type: Option<String>,
    /// Only events of this aggregate id (matched on `table.field.event.key`).
    #[arg(long)]
    aggregate_id: Option<String>,
    /// The column that says when a row was written [default: [retention] column, or created_at].
    #[arg(long)]
    column: Option<String>,
    /// Rows committed less than this long ago and not in Kafka yet are pending, not missing.
    #[arg(long, value_parser = crate::duration::parse, default_value = "30s")]
    settle: Duration,
    /// One JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Print at most this many problem events, one line each.
    #[arg(long, default_value_t = 20)]
    details: usize,
    /// Under exactly-once, read Kafka read_uncommitted: aborted Kafka transactions' records
    /// count too (as duplicates or unexpected).
    #[arg(long)]
    read_uncommitted: bool,
    /// Re-publish the missing events (as `walrelay replay --ids` would), then audit again.
    #[arg(long)]
    repair: bool,
    /// With --repair: say what would be re-published; send nothing.
    #[arg(long, requires = "repair")]
    dry_run: bool,
    /// With --repair: do not ask for confirmation on a terminal.
    #[arg(long, requires = "repair")]
    yes: bool,
}

impl Args {
    pub fn config(&self) -> &std::path::Path {
        &self.config
    }
}

pub(super) async fn run(config: &Config, args: Args) -> ExitCode {
    if config.outbox.is_message_only() {
        eprintln!("error: nothing to audit: this relay's events are logical decoding messages (the table-less outbox), which are in no table — fix: audit a relay of an outbox table kept by [retention] keep");
        return ExitCode::FAILURE;
    }
    if let Some(why) = replay::inverted_window(Some(&args.since), args.until.as_ref()) {
        eprintln!("error: {why}");
        return ExitCode::from(2);
    }
    let selection = Selection {
        since: Some(args.since.clone()),
        until: args.until.clone(),
        ids: Vec::new(),
        aggregate_type: args.aggregate_type.clone(),
        aggregate_id: args.aggregate_id.clone(),
    };
    let described = replay::describe(&selection);
    let opts = Options {
        selection,
        column: args.column.clone(),
        settle: args.settle,
        read_uncommitted: args.read_uncommitted,
        allow_empty: false,
    };
    let before = match audit::run(config, opts.clone()).await {
        Ok(r) => r,
        Err(e) => return failed(&e),
    };
    if !args.repair {
        show(&before, &described, &args, None);
        return verdict(&before);
    }
    let mut repair = Repair::default();
    let mut after = before.clone();
    // Each round re-publishes the missing events the report lists (at most PROBLEMS_KEPT), then
    // audits again: a window with more missing than that takes more rounds.
    loop {
        let missing = missing_ids(&after);
        if missing.is_empty() || args.dry_run {
            repair.would_send = after.total.missing;
            break;
        }
        if repair.rounds > 0 && after.total.missing >= repair.left_last {
            eprintln!("error: the repair sent {} events and as many are still missing — fix: check that the relay's topics accept records (walrelay check) and run the audit again", repair.sent);
            break;
        }
        // Asked once, for every missing event, not once per round.
        let ask = repair.rounds == 0 && !args.yes && std::io::stdin().is_terminal();
        if ask && !confirmed(after.total.missing) {
            eprintln!("repair cancelled: nothing was sent");
            show(&before, &described, &args, None);
            return ExitCode::FAILURE;
        }
        repair.left_last = after.total.missing;
        match republish(config, missing, args.column.clone()).await {
            Ok(summary) => {
                repair.sent += summary.events;
                repair.replay_ids.push(summary.replay_id);
            }
            Err(e) => {
                eprintln!("error: the repair's re-publishing failed: {} (what was sent stays sent; run the audit again)", e.chain());
                return ExitCode::FAILURE;
            }
        }
        repair.rounds += 1;
        after = match audit::run(config, opts.clone()).await {
            Ok(r) => r,
            Err(e) => return failed(&e),
        };
    }
    show(&before, &described, &args, Some((&repair, &after)));
    verdict(&after)
}

/// What `--repair` did.
#[derive(Debug, Default, serde::Serialize)]
struct Repair {
    rounds: u32,
    sent: u64,
    /// With `--dry-run`: how many missing events it would send.
    would_send: u64,
    replay_ids: Vec<String>,
    #[serde(skip)]
    left_last: u64,
}

fn verdict(r: &Report) -> ExitCode {
    if r.clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn failed(e: &crate::error::Error) -> ExitCode {
    match e.hint() {
        Some(hint) => {
            eprintln!("error: {} — fix: {hint}", e.chain());
            ExitCode::from(2)
        }
        None => {
            eprintln!("error: {} (run the audit again)", e.chain());
            ExitCode::FAILURE
        }
    }
}

/// The missing events the report lists.
fn missing_ids(r: &Report) -> Vec<String> {
    r.problems
        .iter()
        .filter(|p| p.kind == audit::ProblemKind::Missing)
        .map(|p| p.event_id.clone())
        .collect()
}

/// Sends `ids` through `walrelay replay`'s path: the router's topic, key and partition.
async fn republish(
    config: &Config,
    ids: Vec<String>,
    column: Option<String>,
) -> crate::error::Result<replay::Summary> {
    let opts = replay::Options {
        selection: Selection { ids, ..Selection::default() },
        column,
        ..replay::Options::default()
    };
    let replay = replay::Replay::open(config, opts).await?;
    eprintln!(
        "repair: re-publishing {} missing event(s) as replay {}",
        replay.total, replay.replay_id
    );
    replay.run(crate::metrics::Metrics::new(), &mut |_| {}).await
}

/// Asks on the terminal; anything but y/yes is no.
fn confirmed(n: u64) -> bool {
    eprint!("re-publish {n} missing events to Kafka? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    let _ = std::io::stdin().lock().read_line(&mut answer);
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// The report (and, after a repair, what it did and the second report) on stdout.
fn show(before: &Report, window: &str, args: &Args, repaired: Option<(&Repair, &Report)>) {
    if args.json {
        let report = |r: &Report| {
            let mut v = serde_json::to_value(r).unwrap_or_default();
            v["window"] = serde_json::json!(window);
            v["clean"] = serde_json::json!(r.clean());
            v
        };
        let v = match repaired {
            None => report(before),
            Some((repair, after)) => serde_json::json!({
                "before": report(before),
                "repair": repair,
                "after": report(after),
                "clean": after.clean(),
            }),
        };
        println!("{v}");
        return;
    }
    match repaired {
        None => print!("{}", render(before, window, args.details)),
        Some((repair, after)) => {
            println!("before the repair:");
            print!("{}", render(before, window, args.details));
            if args.dry_run {
                println!(
                    "repair (dry run): would re-publish {} missing event(s); nothing was sent",
                    repair.would_send
                );
                for id in missing_ids(before).iter().take(args.details) {
                    println!("  would re-publish {id}");
                }
                return;
            }
            println!(
                "repair: re-published {} event(s) in {} round(s) (replay {})",
                repair.sent,
                repair.rounds,
                repair.replay_ids.join(", ")
            );
            println!("after the repair:");
            print!("{}", render(after, window, args.details));
        }
    }
}

/// The report as a table, then its verdict and the first `details` problem events.
pub fn render(r: &Report, window: &str, details: usize) -> String {
    let mut out = format!(
        "audit of {} events ({window}) in {} topic(s), event ids from {}; Kafka read {}; {}\n",
        r.total.expected,
        r.topics.len(),
        r.event_id_in,
        if r.read_committed {
            "read_committed"
        } else {
            "read_uncommitted (aborted records count too)"
        },
        if r.order_checked {
            "order checked against commit order"
        } else {
            "order not checked: commit order is unknown (track_commit_timestamp is off)"
        }
    );
    let width = r.topics.keys().map(String::len).max().unwrap_or(5).max(5);
    // The columns after the topic's name, and their widths: expected, then the counts.
    let names = [
        "expected",
        "once",
        "pending",
        "missing",
        "expired",
        "duplicated",
        "replay",
        "out of order",
        "misplaced",
        "unexpected",
    ];
    let widths = [8, 8, 7, 7, 7, 10, 6, 12, 9, 10];
    let header: Vec<String> = names.iter().zip(widths).map(|(n, w)| format!("{n:>w$}")).collect();
    out += &format!("{:<width$}  {}\n", "topic", header.join("  "));
    let row = |name: &str, t: &TopicReport| {
        let counts = std::iter::once(t.expected).chain(t.counts());
        let cells: Vec<String> = counts.zip(widths).map(|(n, w)| format!("{n:>w$}")).collect();
        format!("{name:<width$}  {}\n", cells.join("  "))
    };
    for (topic, t) in &r.topics {
        out += &row(topic, t);
    }
    out += &row("total", &r.total);
    for (topic, t) in r.topics.iter().filter(|(_, t)| t.expired > 0) {
        let retention = t.retention_ms.map_or("retention.ms unknown".to_string(), |ms| {
            format!(
                "retention.ms={ms}, {}",
                crate::duration::format(Duration::from_millis(ms.max(0) as u64))
            )
        });
        out += &format!("{topic}: {} event(s) expired: Kafka deleted the partition's records from before they committed ({retention}), so whether they were delivered cannot be checked; audit a window younger than the topic's retention\n", t.expired);
    }
    if r.unroutable > 0 {
        out += &format!("{} row(s) of the window the router refuses are in no routed topic: the relay dead-letters them (or, without [dead_letter], stops at the first); listed as unroutable\n", r.unroutable);
    }
    if let Some(behind) = r.slot_behind_bytes.filter(|b| *b > 0 && r.total.missing > 0) {
        out += &format!("note: the relay's slot was {behind} bytes of WAL behind when the audit began: an event it had not confirmed yet and that committed before --settle counts as missing; if the relay lags, audit again with a --settle above its lag (walrelay status)\n");
    }
    let problems = r.problems.len() + r.problems_not_listed as usize;
    out += &if r.clean() {
        let replays = r.total.duplicated_by_replay;
        format!(
            "clean: every settled event{} is in Kafka once{}\n",
            if r.total.expired > 0 { " Kafka still keeps" } else { "" },
            match replays {
                0 => String::new(),
                n => format!(" (and {n} again from walrelay replay, on purpose)"),
            }
        )
    } else {
        format!("NOT CLEAN: {problems} problem event(s)\n")
    };
    for p in r
        .problems
        .iter()
        .filter(|p| !r.clean() || !matches!(p.kind, audit::ProblemKind::Duplicated))
        .take(details)
    {
        let at = if p.held_at.is_empty() {
            String::new()
        } else {
            format!(" at {}", p.held_at.join(", "))
        };
        out +=
            &format!("  {:<12} {} in {}{at}: {}\n", p.kind.name(), p.event_id, p.topic, p.detail);
    }
    if problems > details {
        out += &format!(
            "  … {} more (--details N, or --json for the first {})\n",
            problems - details,
            audit::PROBLEMS_KEPT
        );
    }
    out
}
