//! `walrelay audit`: compares the retained outbox rows of a window with what Kafka holds (see
//! [`crate::audit`]). A table by default, `--json` for scripts. Exit code 0 when clean, 1 when
//! anything is missing, duplicated beyond replays, out of order, misplaced or unexpected (or the
//! audit could not finish), 2 for invalid options.

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
}

impl Args {
    pub fn config(&self) -> &std::path::Path {
        &self.config
    }
}

pub(super) async fn run(config: &Config, args: Args) -> ExitCode {
    if config.outbox.tables.is_empty() {
        eprintln!("error: nothing to audit: this relay's events are logical decoding messages (the table-less outbox), which are in no table — fix: audit a relay of an outbox table kept by [retention] keep");
        return ExitCode::FAILURE;
    }
    if let (TimeBound::Ago(since), Some(TimeBound::Ago(until))) = (&args.since, &args.until) {
        if until >= since {
            eprintln!("error: --until ({} ago) is not after --since ({} ago): the window is empty — fix: give --until a later time (a shorter duration) than --since",
                crate::duration::format(*until), crate::duration::format(*since));
            return ExitCode::from(2);
        }
    }
    let selection = Selection {
        since: Some(args.since.clone()),
        until: args.until.clone(),
        ids: Vec::new(),
        aggregate_type: args.aggregate_type.clone(),
        aggregate_id: args.aggregate_id.clone(),
    };
    let described = replay::describe(&selection);
    let opts = Options { selection, column: args.column.clone(), settle: args.settle };
    let report = match audit::run(config, opts).await {
        Ok(r) => r,
        Err(e) => {
            match e.hint() {
                Some(hint) => eprintln!("error: {} — fix: {hint}", e.chain()),
                None => eprintln!("error: {} (run the audit again)", e.chain()),
            }
            return ExitCode::FAILURE;
        }
    };
    if args.json {
        let mut v = serde_json::to_value(&report).unwrap_or_default();
        v["window"] = serde_json::json!(described);
        v["clean"] = serde_json::json!(report.clean());
        println!("{v}");
    } else {
        print!("{}", render(&report, &described, args.details));
    }
    if report.clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The report as a table, then its verdict and the first `details` problem events.
pub fn render(r: &Report, window: &str, details: usize) -> String {
    let mut out = format!(
        "audit of {} events ({window}) in {} topic(s); Kafka read {}; {}\n",
        r.total.expected,
        r.topics.len(),
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
    out += &format!(
        "{:<width$}  {:>8}  {:>8}  {:>7}  {:>7}  {:>10}  {:>6}  {:>12}  {:>9}  {:>10}\n",
        "topic",
        "expected",
        "once",
        "pending",
        "missing",
        "duplicated",
        "replay",
        "out of order",
        "misplaced",
        "unexpected"
    );
    let row = |name: &str, t: &TopicReport| {
        format!(
            "{name:<width$}  {:>8}  {:>8}  {:>7}  {:>7}  {:>10}  {:>6}  {:>12}  {:>9}  {:>10}\n",
            t.expected,
            t.delivered_once,
            t.pending,
            t.missing,
            t.duplicated,
            t.duplicated_by_replay,
            t.out_of_order,
            t.misplaced,
            t.unexpected
        )
    };
    for (topic, t) in &r.topics {
        out += &row(topic, t);
    }
    out += &row("total", &r.total);
    let problems = r.problems.len();
    out += &if r.clean() {
        let replays = r.total.duplicated_by_replay;
        format!(
            "clean: every settled event is in Kafka once{}\n",
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
        .filter(|p| !r.clean() || p.kind != audit::ProblemKind::Duplicated)
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
        out += &format!("  … {} more (--details N, or --json for all)\n", problems - details);
    }
    out
}
