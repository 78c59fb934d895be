//! `[audit]` in `walrelay run`: every `interval`, an audit of the trailing `window` on a thread,
//! a database connection and a reader of its own (Kafka's, or the JetStream stream's with the NATS
//! sink), so the relay loop never waits for it. Its
//! counts go to `walrelay_audit_events`; a run that cannot finish is logged and counted, and the
//! next interval tries again. It never stops the relay and repairs nothing.
//!
//! **Every event judged at least once.** The window is on the timestamp column, which is
//! usually the insert time (`now()`: when the transaction began), and a row is visible only
//! once its transaction commits. So each run reaches back, beyond `window`, to cover what the
//! run before could not judge: its pending rows (`settle`), and the rows of transactions still
//! open then. Those began at most as long ago as the longest writing transaction the server
//! has shown (`pg_stat_activity`, sampled at each run) plus the time between two runs. Runs
//! that failed leave the reach where it was, so the next one covers them too.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::{run, Options, Report};
use crate::config::{AuditConfig, Config};
use crate::metrics::Metrics;
use crate::snapshot::{Selection, TimeBound};

/// The running audit task.
pub struct Task {
    stop: watch::Sender<bool>,
    thread: std::thread::JoinHandle<()>,
}

impl Task {
    /// Starts the task when `[audit]` is configured.
    pub fn spawn(config: &Config, metrics: Arc<Metrics>) -> Option<Task> {
        let audit = config.audit.clone()?;
        metrics.audit_interval_seconds.store(audit.interval.as_secs(), Relaxed);
        let (stop, stopped) = watch::channel(false);
        let config = config.clone();
        // A runtime of its own: comparing a large window keeps a thread busy for seconds.
        let thread = std::thread::Builder::new()
            .name("walrelay-audit".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
                match runtime {
                    Ok(rt) => rt.block_on(every(config, audit, metrics, stopped)),
                    Err(e) => tracing::error!(error = %e, "the audit task cannot start"),
                }
            })
            .ok()?;
        Some(Task { stop, thread })
    }

    /// Stops the task; an audit in progress is abandoned (it only reads).
    pub fn stop(self) {
        let _ = self.stop.send(true);
        drop(self.thread);
    }
}

async fn every(
    config: Config,
    audit: AuditConfig,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
) {
    let every = crate::duration::format(audit.interval);
    let mut reach = Reach::default();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(audit.interval) => {}
            _ = stop.changed() => return,
        }
        let sampled = std::time::Instant::now();
        let oldest = oldest_writer(&config).await;
        let window = reach.window(audit.window, audit.settle, oldest, sampled);
        let opts = Options {
            selection: Selection { since: Some(TimeBound::Ago(window)), ..Selection::default() },
            column: None,
            settle: audit.settle,
            read_uncommitted: false,
            // A quiet hour is clean, not an error.
            allow_empty: true,
        };
        let outcome = tokio::select! {
            outcome = run(&config, opts) => outcome,
            _ = stop.changed() => return,
        };
        match outcome {
            Ok(report) => {
                reach.judged(sampled, oldest);
                record(&metrics, &report);
                let t = &report.total;
                let fields = (t.expected, t.missing, t.duplicated, t.out_of_order, t.unexpected);
                let window = crate::duration::format(window);
                if report.clean() {
                    tracing::info!(events = fields.0, expired = t.expired, pending = t.pending, repaired = t.repaired, foreign = t.foreign, seconds = report.seconds, "audit: every settled event of the last {window} is in {} once; next in {every}", report.read_from.name());
                } else {
                    let quiet = [
                        super::ProblemKind::Expired,
                        super::ProblemKind::Repaired,
                        super::ProblemKind::Foreign,
                    ];
                    let first: Vec<String> = report
                        .problems
                        .iter()
                        .filter(|p| !quiet.contains(&p.kind))
                        .take(5)
                        .map(|p| format!("{} {} in {}", p.kind.name(), p.event_id, p.topic))
                        .collect();
                    tracing::warn!(
                        events = fields.0,
                        missing = fields.1,
                        unverifiable = t.unverifiable,
                        duplicated = fields.2,
                        out_of_order = fields.3,
                        unexpected = fields.4,
                        first = %first.join("; "),
                        hint = "walrelay audit --since <window> --details 100 lists them; --repair re-publishes the missing",
                        "audit: the last {window} is not clean; next in {every}"
                    );
                }
            }
            Err(e) => {
                metrics.audit_failures.fetch_add(1, Relaxed);
                tracing::warn!(error = %e.chain(), hint = e.hint().unwrap_or(""), "audit failed; next try in {every}");
            }
        }
    }
}

/// How far back the next run must reach for every event to be judged at least once.
#[derive(Debug, Default)]
struct Reach {
    /// The last run that finished: when its reach was sampled, and the oldest writing
    /// transaction then.
    last: Option<(Instant, Duration)>,
    /// The time between the last two finished runs' samples.
    spacing: Duration,
    /// The longest-open writing transaction seen so far.
    longest: Duration,
}

impl Reach {
    /// The window of a run sampled at `now`, when the oldest writing transaction open is
    /// `oldest` old: `window`, or further back to the last run's pending rows and to rows of
    /// transactions that were open then or began since (and, with commit timestamps, committed
    /// within `settle` of it).
    fn window(
        &mut self,
        window: Duration,
        settle: Duration,
        oldest: Duration,
        now: Instant,
    ) -> Duration {
        self.longest = self.longest.max(oldest);
        let since_last = match self.last {
            Some((at, _)) => now.duration_since(at) + settle + self.longest + self.spacing,
            None => Duration::ZERO,
        };
        window.max(oldest).max(since_last)
    }

    /// A run sampled at `at` finished.
    fn judged(&mut self, at: Instant, oldest: Duration) {
        if let Some((last, _)) = self.last {
            self.spacing = at.duration_since(last);
        }
        self.last = Some((at, oldest));
    }
}

/// How long the oldest transaction that has written something has been open (zero when none
/// is, or the server would not say: the role needs `pg_read_all_stats` to see other roles'
/// transactions, as docs/operations.md says).
async fn oldest_writer(config: &Config) -> Duration {
    let sql = "SELECT coalesce(extract(epoch FROM now() - min(xact_start)), 0)::float8 \
               FROM pg_catalog.pg_stat_activity \
               WHERE backend_xid IS NOT NULL AND datname = current_database()";
    let age = match crate::source::connect(&config.source).await {
        Ok(control) => match control.query_one("cannot read pg_stat_activity", sql, &[]).await {
            Ok(row) => row.get::<_, f64>(0),
            Err(_) => 0.0,
        },
        Err(_) => 0.0,
    };
    // Rounded up a second: the window's bound is in whole seconds.
    Duration::from_secs_f64(age.max(0.0)) + Duration::from_secs(1)
}

/// The report's totals as `walrelay_audit_events`, and the time it finished.
fn record(metrics: &Metrics, report: &Report) {
    let counts = report.total.counts().into_iter().chain([report.unroutable]);
    for (gauge, n) in metrics.audit_events.iter().zip(counts) {
        gauge.store(n, Relaxed);
    }
    metrics.audit_last_success.store(crate::clock::unix_micros() as u64 / 1_000_000, Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn the_first_run_reaches_back_to_the_oldest_open_writer() {
        let mut r = Reach::default();
        let now = Instant::now();
        assert_eq!(r.window(S(60), S(10), S(5), now), S(60));
        assert_eq!(r.window(S(60), S(10), S(300), now), S(300));
    }

    #[test]
    fn a_run_after_a_late_one_reaches_back_past_the_last_runs_pending_rows() {
        // Runs every 100 s, the window 120 s, settle 10 s; the last run finished, then the
        // next came 500 s later (a slow or failed run between): it reaches back 500 s + settle
        // + the longest writer + the spacing.
        let mut r = Reach::default();
        let t0 = Instant::now();
        r.window(S(120), S(10), S(2), t0);
        r.judged(t0, S(2));
        let t1 = t0 + S(100);
        assert_eq!(r.window(S(120), S(10), S(2), t1), S(120).max(S(100 + 10 + 2)));
        r.judged(t1, S(2));
        let t2 = t1 + S(500);
        assert_eq!(r.window(S(120), S(10), S(2), t2), S(500 + 10 + 2 + 100));
    }

    #[test]
    fn a_long_transaction_seen_once_widens_every_later_window() {
        let mut r = Reach::default();
        let t0 = Instant::now();
        r.window(S(60), S(5), S(1_800), t0);
        r.judged(t0, S(1_800));
        let t1 = t0 + S(30);
        // The 30-minute transaction committed meanwhile: its rows began 1,830 s before t1.
        assert!(r.window(S(60), S(5), S(1), t1) >= S(1_830));
    }
}
