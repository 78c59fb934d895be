//! `[audit]` in `walrelay run`: every `interval`, an audit of the trailing `window` on a thread,
//! a database connection and a Kafka reader of its own, so the relay loop never waits for it. Its
//! counts go to `walrelay_audit_events`; a run that cannot finish is logged and counted, and the
//! next interval tries again. It never stops the relay and repairs nothing.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use tokio::sync::watch;

use super::{run, Options, Report};
use crate::config::{AuditConfig, Config};
use crate::metrics::Metrics;
use crate::replay::{Selection, TimeBound};

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
    let opts = Options {
        selection: Selection { since: Some(TimeBound::Ago(audit.window)), ..Selection::default() },
        column: None,
        settle: audit.settle,
        read_uncommitted: false,
        // A quiet hour is clean, not an error.
        allow_empty: true,
    };
    loop {
        tokio::select! {
            _ = tokio::time::sleep(audit.interval) => {}
            _ = stop.changed() => return,
        }
        let outcome = tokio::select! {
            outcome = run(&config, opts.clone()) => outcome,
            _ = stop.changed() => return,
        };
        match outcome {
            Ok(report) => {
                record(&metrics, &report);
                let t = &report.total;
                let fields = (t.expected, t.missing, t.duplicated, t.out_of_order, t.unexpected);
                if report.clean() {
                    tracing::info!(events = fields.0, expired = t.expired, pending = t.pending, seconds = report.seconds, "audit: every settled event of the last {} is in Kafka once; next in {every}", crate::duration::format(audit.window));
                } else {
                    let first: Vec<String> = report
                        .problems
                        .iter()
                        .filter(|p| p.kind != super::ProblemKind::Expired)
                        .take(5)
                        .map(|p| format!("{} {} in {}", p.kind.name(), p.event_id, p.topic))
                        .collect();
                    tracing::warn!(
                        events = fields.0,
                        missing = fields.1,
                        duplicated = fields.2,
                        out_of_order = fields.3,
                        unexpected = fields.4,
                        first = %first.join("; "),
                        hint = "walrelay audit --since <window> --details 100 lists them; --repair re-publishes the missing",
                        "audit: the last {} is not clean; next in {every}",
                        crate::duration::format(audit.window)
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

/// The report's totals as `walrelay_audit_events`, and the time it finished.
fn record(metrics: &Metrics, report: &Report) {
    let counts = report.total.counts().into_iter().chain([report.unroutable]);
    for (gauge, n) in metrics.audit_events.iter().zip(counts) {
        gauge.store(n, Relaxed);
    }
    metrics.audit_last_success.store(crate::metrics::unix_micros() as u64 / 1_000_000, Relaxed);
}
