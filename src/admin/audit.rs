//! `walrelay audit`: compares the retained outbox rows of a window with what Kafka (or the NATS
//! sink's JetStream stream) holds (see [`crate::audit`]). A table by default, `--json` for scripts. `--repair` re-publishes the
//! missing events the way `walrelay replay --ids` does (same ids, keys and partitions), then
//! audits again and shows both.
//!
//! Exit code 0 when clean (an empty window too: nothing was lost); 1 when anything is missing,
//! unverifiable, duplicated beyond replays, out of order, misplaced or unexpected, or the audit
//! could not finish (run it again); 2 when it cannot run as given (bad options, a topic it may
//! not read, a repair it refuses: the message says the fix).
//!
//! A repair never does harm it was not asked for: it sends only events the relay's slot has
//! confirmed past (others are pending: the relay sends them itself), refuses compacted topics
//! unless `--allow-compacted-rollback`, and under exactly-once asks before sending records
//! outside Kafka transactions (`--yes` in scripts).

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::audit::{self, Options, ReadFrom, Report, TopicReport};
use crate::config::Config;
use crate::replay;
use crate::snapshot::{self, Selection, TimeBound};

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
    /// With --repair: do not ask for confirmation (required in scripts under exactly-once).
    #[arg(long, requires = "repair")]
    yes: bool,
    /// With --repair: re-publish events of compacted topics too. A compacted reader then
    /// takes the re-published (older) event as its key's latest state, rolling it back, until
    /// the key's next event.
    #[arg(long, requires = "repair")]
    allow_compacted_rollback: bool,
}

/// How long a repair waits for the relay's slot to confirm past the audit's snapshot.
const SLOT_CATCH_UP: Duration = Duration::from_secs(30);

impl Args {
    pub fn config(&self) -> &std::path::Path {
        &self.config
    }
}

pub(super) async fn run(config: &Config, args: Args) -> ExitCode {
    if let Some(why) = config.delivery.sink.why_no_audit() {
        eprintln!(
            "error: nothing to audit with [delivery] sink = \"{}\": {why} — fix: check delivery with the broker's own tools (docs/sinks.md says what each sink guarantees), or `walrelay replay` what a consumer lacks",
            config.delivery.sink.name(),
        );
        return ExitCode::from(2);
    }
    if config.outbox.is_message_only() {
        eprintln!("error: nothing to audit: this relay's events are logical decoding messages (the table-less outbox), which are in no table — fix: audit a relay of an outbox table kept by [retention] keep");
        return ExitCode::FAILURE;
    }
    if let Some(why) = snapshot::inverted_window(Some(&args.since), args.until.as_ref()) {
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
    let described = snapshot::describe(&selection);
    let opts = Options {
        selection,
        column: args.column.clone(),
        settle: args.settle,
        read_uncommitted: args.read_uncommitted,
        // A quiet window is clean, not bad input: the hourly CronJob must not alert on it.
        allow_empty: true,
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
    if let Err(refusal) = may_repair(config, &before, &args).await {
        eprintln!("error: {refusal}");
        show(&before, &described, &args, None);
        return ExitCode::from(2);
    }
    // Each round re-publishes the missing events the report lists (at most PROBLEMS_KEPT), then
    // audits again: a window with more missing than that takes more rounds.
    loop {
        let missing = repairable(&after, args.allow_compacted_rollback);
        let left = to_repair(&after, args.allow_compacted_rollback);
        if missing.is_empty() || args.dry_run {
            repair.would_send = left;
            break;
        }
        if repair.rounds > 0 && left >= repair.left_last {
            eprintln!("error: the repair sent {} events and as many are still missing — fix: check that the relay's topics accept records (walrelay check) and run the audit again", repair.sent);
            break;
        }
        // Asked once, for every missing event, not once per round.
        let ask = repair.rounds == 0 && !args.yes && std::io::stdin().is_terminal();
        if ask && !confirmed(left, config) {
            eprintln!("repair cancelled: nothing was sent");
            show(&before, &described, &args, None);
            return ExitCode::FAILURE;
        }
        repair.left_last = left;
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

/// The events a repair re-publishes: the missing ones the report lists, and with
/// `--allow-compacted-rollback` the unverifiable ones of compacted topics.
fn repairable(r: &Report, compacted_too: bool) -> Vec<String> {
    r.problems
        .iter()
        .filter(|p| match p.kind {
            audit::ProblemKind::Missing => true,
            audit::ProblemKind::Unverifiable => {
                compacted_too && r.compacted_topics.contains(&p.topic)
            }
            _ => false,
        })
        .map(|p| p.event_id.clone())
        .collect()
}

/// How many events a repair would re-publish in all, listed or only counted.
fn to_repair(r: &Report, compacted_too: bool) -> u64 {
    let compacted = match compacted_too {
        true => {
            r.compacted_topics.iter().filter_map(|t| r.topics.get(t)).map(|t| t.unverifiable).sum()
        }
        false => 0,
    };
    r.total.missing + compacted
}

/// Why a repair must not run as asked, if it must not: events of a compacted topic without
/// `--allow-compacted-rollback`, exactly-once in a script without `--yes`, or a slot that has
/// not confirmed past the audit's snapshot (its events may be pending, not lost).
async fn may_repair(config: &Config, r: &Report, args: &Args) -> Result<(), String> {
    let compacted: Vec<&str> = r
        .problems
        .iter()
        .filter(|p| {
            matches!(p.kind, audit::ProblemKind::Missing | audit::ProblemKind::Unverifiable)
                && r.compacted_topics.contains(&p.topic)
        })
        .map(|p| p.topic.as_str())
        .collect();
    if let (Some(topic), false) = (compacted.first(), args.allow_compacted_rollback) {
        return Err(format!("the repair refuses compacted topic {topic} (cleanup.policy compact; {} event(s) of the window there): re-publishing an event after the newest of its key makes every compacted reader take the older event as the key's state — fix: pass --allow-compacted-rollback if the key's next event will correct it, or re-publish the key's latest event after the repair", compacted.len()));
    }
    if repairable(r, args.allow_compacted_rollback).is_empty() || args.dry_run {
        return Ok(());
    }
    if config.delivery.exactly_once() && !args.yes && !std::io::stdin().is_terminal() {
        return Err("under exactly-once the repair sends its records outside Kafka transactions (read_committed consumers see them at once, beside the relay's transactions) — fix: pass --yes to say so in a script".to_string());
    }
    let Some(snapshot) = r.snapshot_lsn else { return Ok(()) };
    slot_past(config, snapshot).await
}

/// Waits (up to [`SLOT_CATCH_UP`]) until the relay's slot has confirmed past `lsn`; without a
/// slot there is no relay to send anything, and a repair is the only way.
async fn slot_past(config: &Config, lsn: crate::lsn::Lsn) -> Result<(), String> {
    let control = crate::source::connect(&config.source)
        .await
        .map_err(|e| format!("the repair cannot check the relay's slot: {}", e.chain()))?;
    let deadline = std::time::Instant::now() + SLOT_CATCH_UP;
    loop {
        let slot = crate::source::slot::slot(&control, &config.source.slot)
            .await
            .map_err(|e| format!("the repair cannot read the relay's slot: {}", e.chain()))?;
        let confirmed = match slot {
            None => return Ok(()),
            Some(s) => s.confirmed,
        };
        if confirmed.is_some_and(|c| c >= lsn) {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            let at = confirmed.map_or("nothing".to_string(), |c| c.to_string());
            return Err(format!("the relay's slot {} has confirmed {at}, not yet past the audit's snapshot ({lsn}): the events it has not confirmed are pending, not lost, and the relay sends them itself; a repair now would send them twice — fix: let the relay catch up (walrelay status), or start it if it is down, then run the repair again", config.source.slot));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
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
        replay.total(),
        replay.replay_id
    );
    replay.run(crate::metrics::Metrics::new(), &mut |_| {}).await
}

/// Asks on the terminal; anything but y/yes is no.
fn confirmed(n: u64, config: &Config) -> bool {
    if config.delivery.exactly_once() {
        eprintln!("note: under exactly-once the repair's records go outside Kafka transactions: read_committed consumers see them at once");
    }
    eprint!("re-publish {n} missing events to {}? [y/N] ", audit::ReadFrom::of(config).name());
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
                for id in
                    repairable(before, args.allow_compacted_rollback).iter().take(args.details)
                {
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
            if repair.sent > 0 {
                println!("note: each re-published event sits after the events of its key the relay sent meanwhile: a consumer that keeps per-key order sees it late (later audits count it as repaired, not out of order)");
            }
            println!("after the repair:");
            print!("{}", render(after, window, args.details));
        }
    }
}

/// The report as a table, then its verdict and the first `details` problem events.
pub fn render(r: &Report, window: &str, details: usize) -> String {
    if r.empty() {
        return format!("audit of 0 events ({window}): the window holds no outbox row, so nothing could be lost; clean\n");
    }
    let read = match (r.read_from, r.read_committed) {
        (ReadFrom::JetStream, _) => {
            "JetStream streams read without consuming (no partitions: misplaced does not apply)"
        }
        (ReadFrom::Kafka, true) => "Kafka read read_committed",
        (ReadFrom::Kafka, false) => "Kafka read read_uncommitted (aborted records count too)",
    };
    let (kafka, places) = match r.read_from {
        ReadFrom::Kafka => ("Kafka", "topic(s)"),
        ReadFrom::JetStream => ("JetStream", "subject(s)"),
    };
    let mut out = format!(
        "audit of {} events ({window}) in {} {places}, event ids from {}; {read}; {}\n",
        r.total.expected,
        r.topics.len(),
        r.event_id_in,
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
        "unverifiable",
        "duplicated",
        "replay",
        "repaired",
        "out of order",
        "misplaced",
        "unexpected",
        "foreign",
    ];
    let widths = [8, 8, 7, 7, 7, 12, 10, 6, 8, 12, 9, 10, 7];
    let header: Vec<String> = names.iter().zip(widths).map(|(n, w)| format!("{n:>w$}")).collect();
    out += &format!("{:<width$}  {}\n", "topic", header.join("  "));
    let row = |name: &str, t: &TopicReport| {
        let counts = std::iter::once(t.expected).chain(t.counts());
        let cells: Vec<String> = (counts.zip(widths).zip(names))
            .map(|((n, w), name)| match name {
                // A stream has no partitions: a 0 would claim a check that was not made.
                "misplaced" if !r.read_from.partitioned() => format!("{:>w$}", "-"),
                _ => format!("{n:>w$}"),
            })
            .collect();
        format!("{name:<width$}  {}\n", cells.join("  "))
    };
    for (topic, t) in &r.topics {
        out += &row(topic, t);
    }
    out += &row("total", &r.total);
    let age_limit = r.read_from.age_limit();
    for (topic, t) in r.topics.iter().filter(|(_, t)| t.expired > 0) {
        let retention = t.retention_ms.map_or(format!("{age_limit} unknown"), |ms| {
            format!(
                "{age_limit}={ms}, {}",
                crate::duration::format(Duration::from_millis(ms.max(0) as u64))
            )
        });
        let (records, holder) = match r.read_from {
            ReadFrom::Kafka => ("the partition's records", "topic"),
            ReadFrom::JetStream => ("the stream's messages", "stream"),
        };
        out += &format!("{topic}: {} event(s) expired: time retention deleted {records} from before they committed, and they are older than the {holder}'s retention ({retention}): deleted as configured, so whether they were delivered cannot be checked; audit a window younger than the {holder}'s retention\n", t.expired);
    }
    let other_deletes = match r.read_from {
        ReadFrom::Kafka => "retention.bytes, a delete-records request, compaction",
        ReadFrom::JetStream => "max_msgs, max_bytes, a purge",
    };
    for (topic, t) in r.topics.iter().filter(|(_, t)| t.unverifiable > 0) {
        out += &format!("{topic}: {} event(s) unverifiable: not in {kafka}, where records that could have held them were deleted for a reason time retention does not explain ({other_deletes}): deleted or never written cannot be told, so the window is not clean; each line below says why\n", t.unverifiable);
    }
    for note in &r.notes {
        out += &format!("note: {note}\n");
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
            "clean: every settled event{} is in {kafka} once{}{}\n",
            if r.total.expired > 0 { format!(" {kafka} still keeps") } else { String::new() },
            match replays {
                0 => String::new(),
                n => format!(" (and {n} again from walrelay replay, on purpose)"),
            },
            match r.total.repaired {
                0 => String::new(),
                n => format!("; {n} of them only as re-published copies (repaired)"),
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
