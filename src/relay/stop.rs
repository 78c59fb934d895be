//! The graceful stop (SIGTERM, SIGINT, or a definite error after the records before it): read
//! no more, wait for outstanding acknowledgements, confirm what may be confirmed, and make sure
//! the server holds it before the process exits.

use std::time::{Duration, Instant};

use super::{Outcome, Session};
use crate::error::{Error, Result};
use crate::lsn::Lsn;
use crate::source::slot;

/// Kept free at the end of `[limits] shutdown_grace` for the process to exit in.
const STOP_MARGIN: Duration = Duration::from_millis(500);
/// What a stop keeps, of its grace period, for confirming on the server after the drain (at
/// most a third of the period).
const CONFIRM_TIME: Duration = Duration::from_secs(3);

impl Session<'_> {
    /// Graceful stop: read no more, wait for outstanding acks (exactly-once: commit or abort
    /// the open Kafka transaction), confirm what may be confirmed (once a fresh catalog check
    /// vouches for it), all within `[limits] shutdown_grace`.
    pub(super) async fn stop(&mut self) -> Result<Outcome> {
        let grace = self.config.limits.shutdown_grace;
        let deadline = tokio::time::Instant::now() + grace.saturating_sub(STOP_MARGIN);
        // What is left after the drain is for confirming on the server.
        let drained_by = deadline - CONFIRM_TIME.min(grace / 3);
        let stopping = Instant::now();
        self.delivery.drain(drained_by).await;
        tracing::debug!(took_ms = stopping.elapsed().as_millis() as u64, "stop: delivery drained");
        if self.report_position().check_wanted {
            let acked = self.progress.acked();
            let vouched = &mut self.watch.vouched;
            let until = deadline.min(tokio::time::Instant::now() + Duration::from_secs(2));
            let _ = tokio::time::timeout_at(until, vouched.wait_for(|v| *v >= acked)).await;
        }
        let target = self.report_position().at;
        self.confirm_on_server(target, deadline).await;
        tracing::debug!(
            took_ms = stopping.elapsed().as_millis() as u64,
            "stop: confirmed on the server"
        );
        tracing::info!(confirmed_lsn = %target, "stopped");
        Ok(Outcome::Stopped { confirmed: target })
    }

    /// Makes sure the server holds `target` before the process exits: the replication client
    /// sends it within one status interval; if the stream closes first, advance the slot. Every
    /// wait here is bounded, so a stalled server delays a stop by seconds, not a query timeout.
    async fn confirm_on_server(&mut self, target: Lsn, deadline: tokio::time::Instant) {
        let name = self.config.source.slot.as_str();
        let control = &self.control;
        let left = || deadline.saturating_duration_since(tokio::time::Instant::now());
        let wait =
            (self.config.source.status_interval * 2 + Duration::from_millis(500)).min(left());
        // This session's walsender, to tell its release from a successor taking the slot.
        let ours = std::cell::Cell::new(None);
        let reached = poll_until(wait, || async {
            match slot::slot(control, name).await {
                Ok(Some(s)) => {
                    ours.set(s.active_pid);
                    s.confirmed >= Some(target)
                }
                _ => false,
            }
        })
        .await;
        let _ =
            tokio::time::timeout(Duration::from_secs(2).min(left()), self.stream.shutdown()).await;
        // The walsender releases the slot as it exits, a moment after the stream has closed.
        // Waiting for that means whoever comes next (a successor, `teardown`, `status`) finds
        // the slot free once this process has exited.
        let ours = ours.get();
        let inactive = poll_until(Duration::from_secs(2).min(left()), || async move {
            matches!(slot::slot(control, name).await,
                Ok(Some(s)) if !s.active || (ours.is_some() && s.active_pid != ours))
        })
        .await;
        if reached {
            return;
        }
        let advanced = match inactive {
            true => {
                tokio::time::timeout(
                    Duration::from_secs(2).min(left()),
                    slot::advance(control, name, target),
                )
                .await
            }
            false => Ok(Err(Error::transient_msg("the slot stayed active"))),
        };
        if let Ok(Ok(())) = advanced {
            return;
        }
        tracing::warn!(%target, "could not confirm the final position; a restart will replay from the previous one");
    }
}

/// Polls `check` every 50 ms until it holds or `within` has passed; a check still running at
/// the deadline is abandoned.
async fn poll_until<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, check()).await {
            Ok(true) => return true,
            Ok(false) if tokio::time::Instant::now() < deadline => {}
            _ => return false,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
