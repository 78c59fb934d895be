//! `[retention]` in `walrelay run`: a task of its own purges every `interval`, on a connection of
//! its own (opened per run), beside the relay loop and never in its way.
//!
//! A purge that finds the slot behind (the relay is still catching up after a start, or the
//! broker is down) deletes nothing and waits for the next interval. Errors are logged and
//! retried at the next interval too: retention never stops the relay.
//!
//! On shutdown the task finishes the batch it is in (a batch is one short statement) for at most
//! [`STOP_GRACE`], then is dropped: a batch cut short is rolled back by the server, or committed
//! whole, and either is safe.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{purge, Options, Outcome, Unconfirmed, CONFIRM_WAIT};
use crate::config::{Config, RetentionConfig};
use crate::duration;
use crate::metrics::Metrics;

/// How long a stop waits for a purge to reach the end of its batch.
pub const STOP_GRACE: Duration = Duration::from_secs(3);

/// The first purge comes this soon after start at most, so frequent restarts don't starve it.
const FIRST_RUN_AFTER: Duration = Duration::from_secs(60);

/// The running retention task.
pub struct Task {
    stop: watch::Sender<bool>,
    handle: JoinHandle<()>,
}

impl Task {
    /// Starts the task when `[retention]` is configured.
    pub fn spawn(config: &Config, metrics: Arc<Metrics>) -> Option<Task> {
        let retention = config.retention.clone()?;
        let (stop, stopped) = watch::channel(false);
        let handle = tokio::spawn(run(config.clone(), retention, metrics, stopped));
        Some(Task { stop, handle })
    }

    /// Stops the task: a batch in flight gets [`STOP_GRACE`] to finish.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let mut handle = self.handle;
        if tokio::time::timeout(STOP_GRACE, &mut handle).await.is_err() {
            handle.abort();
            tracing::info!("purge stopped in the middle of a batch");
        }
    }
}

async fn run(
    config: Config,
    retention: RetentionConfig,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
) {
    let opts = Options {
        older_than: retention.keep,
        column: retention.column.clone(),
        dry_run: false,
        confirm_wait: CONFIRM_WAIT,
    };
    let every = duration::format(retention.interval);
    let keep = duration::format(retention.keep);
    let mut wait = retention.interval.min(FIRST_RUN_AFTER);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return,
        }
        wait = retention.interval;
        match purge(&config, &opts, &stop).await {
            Ok(Outcome::Purged(report)) => {
                let rows = report.rows();
                metrics.purged_rows.fetch_add(rows, Relaxed);
                metrics.purged_partitions.fetch_add(report.partitions_dropped(), Relaxed);
                if !report.stopped {
                    let now =
                        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
                    metrics.purge_last_success.store(now, Relaxed);
                }
                tracing::info!(
                    rows,
                    deleted = report.tables.iter().map(|t| t.deleted).sum::<u64>(),
                    partitions_dropped = report.partitions_dropped(),
                    partitions_kept = report.partitions_kept(),
                    cutoff = %report.cutoff,
                    elapsed_ms = report.elapsed.as_millis() as u64,
                    stopped = report.stopped,
                    "purged outbox rows older than {keep} whose events the slot confirmed"
                );
            }
            Ok(Outcome::Unconfirmed(Unconfirmed { needed, confirmed, active, slot })) => {
                tracing::info!(
                    %slot,
                    needed = %needed,
                    confirmed = %confirmed.map(|c| c.to_string()).unwrap_or_default(),
                    active,
                    "purge deleted nothing: the slot has not confirmed the current WAL position within {} s (catching up?); next try in {every}",
                    CONFIRM_WAIT.as_secs()
                );
            }
            Ok(Outcome::Busy { pid }) => {
                tracing::info!(pid, "purge skipped: another purge for the slot runs (the other relay of a pair?); next try in {every}");
            }
            Err(e) if e.is_transient() => {
                tracing::warn!(error = %e.chain(), "purge failed; next try in {every}");
            }
            Err(e) => {
                tracing::error!(error = %e.chain(), hint = e.hint().unwrap_or(""), "purge failed; next try in {every}");
            }
        }
    }
}
