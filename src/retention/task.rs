//! `[retention]` in `walrelay run`: a task of its own purges every `interval`, on a connection of
//! its own (opened per run), beside the relay loop and never in its way.
//!
//! A purge that finds the slot behind (the relay is still catching up after a start, or the
//! broker is down) deletes nothing and waits for the next interval. Errors are logged and
//! retried at the next interval too: retention never stops the relay.
//!
//! Nor does it hold up the relay's stop. It is told to stop at the same moment as the relay
//! (SIGTERM), so a purge starts no new batch while the relay stops; once the relay's stop is
//! done, whatever the purge was doing is dropped: a wait for the slot (nothing was deleted), or
//! a batch, which the server rolls back or commits whole. Either is safe, and the stop keeps
//! `[limits] shutdown_grace_ms` with or without `[retention]`.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{purge, Options, Outcome, Unconfirmed, CONFIRM_WAIT};
use crate::config::{Config, RetentionConfig};
use crate::duration;
use crate::metrics::Metrics;

/// The first purge comes this soon after start at most, so frequent restarts don't starve it.
const FIRST_RUN_AFTER: Duration = Duration::from_secs(60);

/// The running retention task.
pub struct Task {
    handle: JoinHandle<()>,
}

impl Task {
    /// Starts the task when `[retention]` is configured; `stop` turning true (the relay's stop
    /// signal) ends it between batches.
    pub fn spawn(
        config: &Config,
        metrics: Arc<Metrics>,
        stop: watch::Receiver<bool>,
    ) -> Option<Task> {
        let retention = config.retention.clone()?;
        let handle = tokio::spawn(run(config.clone(), retention, metrics, stop));
        Some(Task { handle })
    }

    /// Ends the task, once the relay has stopped: at once, wherever the purge is.
    pub async fn stop(self) {
        self.handle.abort();
        let _ = self.handle.await;
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
        // Rows a tenant's table held before it joined wait for a person: `purge --force`.
        before_join: false,
    };
    let every = duration::format(retention.interval);
    let keep = duration::format(retention.keep);
    let mut wait = retention.interval.min(FIRST_RUN_AFTER);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|stop| *stop) => return,
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
