//! `walrelay replay`: re-publishes retained outbox rows (see [`crate::replay`]). What it will do
//! and the summary go to stdout; progress (a bar on a terminal, lines otherwise) to stderr. Exit
//! code 2 for invalid options, 1 when nothing (or not everything) was sent.

use std::io::{BufRead, IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::config::{Config, HttpConfig};
use crate::metrics::Metrics;
use crate::replay::{Options, Progress, Replay, Summary};
use crate::snapshot::{self, Selection, TimeBound};

/// Above this many events, a replay on a terminal asks before sending (unless `--yes`).
pub const CONFIRM_ABOVE: u64 = 10_000;

/// Plain progress lines (not a terminal) come at most this often.
const LINE_EVERY: Duration = Duration::from_secs(2);

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(long, short)]
    config: PathBuf,
    /// Rows written at or after this: a duration before now (6h, 30m, 7d) or an RFC 3339 time.
    #[arg(long, value_parser = TimeBound::parse)]
    since: Option<TimeBound>,
    /// Rows written before this: a duration before now or an RFC 3339 time [default: now].
    #[arg(long, value_parser = TimeBound::parse)]
    until: Option<TimeBound>,
    /// An event id to replay (repeatable).
    #[arg(long = "id", value_name = "UUID")]
    id: Vec<String>,
    /// A file of event ids to replay, one per line (blank lines and # comments skipped).
    #[arg(long = "ids", value_name = "FILE")]
    ids: Option<PathBuf>,
    /// Only events of this aggregate type (matched on `route.by.field`).
    #[arg(long)]
    aggregate_type: Option<String>,
    /// Only events of this aggregate id (matched on `table.field.event.key`).
    #[arg(long)]
    aggregate_id: Option<String>,
    /// The column that says when a row was written [default: [retention] column, or created_at].
    #[arg(long)]
    column: Option<String>,
    /// Send every event to this topic instead of the one the router picks.
    #[arg(long, value_parser = topic_name)]
    to_topic: Option<String>,
    /// At most this many events per second, so the live relay keeps its share of the broker.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    rate: Option<u32>,
    /// Count the events per topic; send nothing.
    #[arg(long)]
    dry_run: bool,
    /// Do not ask for confirmation above 10,000 events on a terminal.
    #[arg(long)]
    yes: bool,
    /// Serve /metrics (walrelay_replayed_events_total) on this address while replaying.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
}

/// `--to-topic`: a name Kafka would refuse is refused here, before a dry run says it would send.
fn topic_name(text: &str) -> Result<String, String> {
    crate::router::validate_topic(text)
        .map(|()| text.to_string())
        .map_err(|why| format!("not a legal Kafka topic name: {why}"))
}

impl Args {
    pub fn config(&self) -> &std::path::Path {
        &self.config
    }

    fn options(&self) -> Result<Options, String> {
        if let Some(why) = snapshot::inverted_window(self.since.as_ref(), self.until.as_ref()) {
            return Err(why);
        }
        let mut ids = self.id.clone();
        if let Some(file) = &self.ids {
            let text = std::fs::read_to_string(file)
                .map_err(|e| format!("cannot read --ids {}: {e}", file.display()))?;
            ids.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(str::to_string),
            );
            if ids.is_empty() {
                return Err(format!("--ids {} holds no event ids", file.display()));
            }
        }
        Ok(Options {
            selection: Selection {
                since: self.since.clone(),
                until: self.until.clone(),
                ids,
                aggregate_type: self.aggregate_type.clone(),
                aggregate_id: self.aggregate_id.clone(),
            },
            column: self.column.clone(),
            to_topic: self.to_topic.clone(),
            rate: self.rate,
            dry_run: self.dry_run,
        })
    }
}

pub(super) async fn run(config: &Config, args: Args) -> ExitCode {
    let opts = match args.options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if config.delivery.exactly_once() {
        eprintln!(
            "note: [delivery] guarantee is exactly-once, but replayed records are outside it: they are not sent in Kafka transactions, read_committed consumers see them at once, and they repeat events on purpose (deduplicate by the id header; docs/consumers.md)"
        );
    }
    let metrics = Metrics::new();
    if let Some(listen) = args.metrics_listen {
        let http = HttpConfig::metrics_only(listen);
        if let Err(e) = crate::http::serve(&http, metrics.clone(), None) {
            eprintln!("error: {}", e.chain());
            return ExitCode::FAILURE;
        }
    }
    let selection = snapshot::describe(&opts.selection);
    let replay = match Replay::open(config, opts).await {
        Ok(r) => r,
        Err(e) => return failed(&e, "nothing was sent"),
    };
    println!(
        "replay {}: {} events ({selection}), {}",
        replay.replay_id,
        thousands(replay.total()),
        replay.order_text()
    );
    for (table, index) in replay.indexes() {
        match index {
            Some(index) => println!("reading {table} by index {index}"),
            None => println!("reading {table} with a full scan: no index starts with the column replay reads by (create one, e.g. ON {table} (created_at, id))"),
        }
    }
    let ask = !args.dry_run && !args.yes && std::io::stdin().is_terminal();
    if ask && replay.total() > CONFIRM_ABOVE && !confirmed(replay.total()) {
        eprintln!("replay cancelled: nothing was sent");
        return ExitCode::FAILURE;
    }
    let _ = std::io::stdout().flush();
    let mut shown = Shown::new(std::io::stderr().is_terminal(), args.dry_run);
    let tracing_id = replay.replay_id.clone();
    match replay.run(metrics.clone(), &mut |p| shown.show(p)).await {
        Ok(summary) => {
            shown.finish();
            print!("{}", render(&summary));
            tracing::info!(
                replay = %tracing_id,
                events = summary.events,
                dry_run = summary.dry_run,
                seconds = summary.elapsed.as_secs_f64(),
                "replay finished"
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            shown.finish();
            failed(&e, "what was sent before the error stays sent")
        }
    }
}

fn failed(e: &crate::error::Error, what_happened: &str) -> ExitCode {
    match e.hint() {
        Some(hint) => eprintln!("error: {} ({what_happened}) — fix: {hint}", e.chain()),
        None => eprintln!("error: {} ({what_happened}; run the replay again)", e.chain()),
    }
    ExitCode::FAILURE
}

/// Asks on the terminal; anything but y/yes is no.
fn confirmed(total: u64) -> bool {
    eprint!("send {} events to Kafka? [y/N] ", thousands(total));
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    let _ = std::io::stdin().lock().read_line(&mut answer);
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// The summary, one line and then one per topic.
pub fn render(s: &Summary) -> String {
    let topics = s.topics.len();
    let mut out = if s.dry_run {
        format!(
            "replay {} (dry run): would send {} events to {topics} topic(s); nothing was sent\n",
            s.replay_id,
            thousands(s.events)
        )
    } else {
        format!(
            "replay {}: sent {} events to {topics} topic(s) in {:.1} s ({} events/s)\n",
            s.replay_id,
            thousands(s.events),
            s.elapsed.as_secs_f64(),
            thousands(s.rate() as u64)
        )
    };
    for (topic, n) in &s.topics {
        out += &format!("  {topic}: {}\n", thousands(*n));
    }
    if s.unroutable_count > 0 {
        out += &format!("{} row(s) the router refuses were not sent (the live relay dead-lettered them, or stops at them; fix the rows and replay them by --id):\n", thousands(s.unroutable_count));
        for r in &s.unroutable {
            out += &format!(
                "  unroutable {}: {}\n",
                r.event_id.as_deref().unwrap_or("(no id)"),
                r.reason
            );
        }
        let unlisted = s.unroutable_count - s.unroutable.len() as u64;
        if unlisted > 0 {
            out += &format!("  … {} more\n", thousands(unlisted));
        }
    }
    out
}

/// Progress on stderr: a bar redrawn in place on a terminal, a line every few seconds otherwise.
struct Shown {
    terminal: bool,
    /// What `done` counts: events routed (a dry run) or acknowledged by the broker.
    counted: &'static str,
    last: Option<Instant>,
    drawn: bool,
}

impl Shown {
    fn new(terminal: bool, dry_run: bool) -> Shown {
        let counted = if dry_run { "routed" } else { "acknowledged" };
        Shown { terminal, counted, last: None, drawn: false }
    }

    fn show(&mut self, p: Progress) {
        let every = if self.terminal { Duration::from_millis(100) } else { LINE_EVERY };
        let done = p.done >= p.total;
        if self.last.is_some_and(|t| t.elapsed() < every) && !done {
            return;
        }
        self.last = Some(Instant::now());
        let rate = thousands((p.done as f64 / p.elapsed.as_secs_f64().max(1e-9)) as u64);
        let (done_n, total) = (thousands(p.done), thousands(p.total));
        if self.terminal {
            const WIDTH: u64 = 30;
            let filled = (p.done * WIDTH / p.total.max(1)).min(WIDTH) as usize;
            eprint!(
                "\r[{}{}] {:>3}% {done_n}/{total} events {}, {rate}/s ",
                "#".repeat(filled),
                " ".repeat(WIDTH as usize - filled),
                p.done * 100 / p.total.max(1),
                self.counted
            );
            self.drawn = true;
        } else {
            eprintln!(
                "replay: {done_n}/{total} events {} ({}%), {rate} events/s",
                self.counted,
                p.done * 100 / p.total.max(1)
            );
        }
    }

    fn finish(&mut self) {
        if self.drawn {
            eprintln!();
            self.drawn = false;
        }
    }
}

/// `1234567` → `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
