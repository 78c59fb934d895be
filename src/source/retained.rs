//! The slot's retained WAL beside `max_slot_wal_keep_size`, sampled for `/metrics` while a
//! session streams: the numbers behind the "slot near invalidation" alert, from the relay
//! itself so no PostgreSQL exporter is needed for it; and the slot as PostgreSQL reports it
//! (confirmed LSN, `wal_status`, active pid, failover), for the console.
//!
//! Best effort: a failed sample is logged and tried again at the next tick; the session's own
//! queries (and the catalog watch) decide whether the connection is broken.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::Client;

use super::slot::SERVER_LSN;
use crate::metrics::seen::SlotSample;
use crate::metrics::Metrics;

/// How often the slot is sampled. The alert looks at minutes; WAL grows by checkpoints.
pub const EVERY: Duration = Duration::from_secs(10);

/// Samples slot `slot` every [`EVERY`] until the returned task is aborted (with its session).
pub fn start(
    client: Arc<Client>,
    slot: String,
    metrics: Arc<Metrics>,
    timeout: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        // `failover` through to_jsonb: the column exists from PostgreSQL 17 on.
        let query = format!(
            "SELECT (({SERVER_LSN}) - s.restart_lsn)::float8, \
             (SELECT setting::bigint FROM pg_catalog.pg_settings WHERE name = 'max_slot_wal_keep_size'), \
             s.confirmed_flush_lsn, s.restart_lsn, s.wal_status::text, s.active_pid, \
             (pg_catalog.to_jsonb(s) ->> 'failover')::bool \
             FROM pg_catalog.pg_replication_slots s WHERE s.slot_name = $1"
        );
        loop {
            match tokio::time::timeout(timeout, client.query_opt(&query, &[&slot])).await {
                Ok(Ok(Some(row))) => {
                    let retained: Option<f64> = row.get(0);
                    let limit_mb: Option<i64> = row.get(1);
                    metrics
                        .slot_retained_wal_bytes
                        .store(retained.unwrap_or(0.0).max(0.0) as u64, Relaxed);
                    metrics.slot_wal_keep_limit_bytes.store(limit_bytes(limit_mb), Relaxed);
                    let sample = SlotSample {
                        sampled_micros: crate::clock::unix_micros(),
                        confirmed: row.get(2),
                        restart: row.get(3),
                        retained_bytes: retained.map(|r| r.max(0.0) as u64),
                        wal_status: row.get(4),
                        active_pid: row.get(5),
                        failover: row.get(6),
                    };
                    *metrics.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(sample);
                }
                Ok(Ok(None)) => {}
                Ok(Err(e)) => tracing::debug!(error = %e, "cannot sample the slot's retained WAL"),
                Err(_) => tracing::debug!("sampling the slot's retained WAL timed out"),
            }
            tokio::time::sleep(EVERY).await;
        }
    })
}

/// `max_slot_wal_keep_size` is in megabytes, -1 for unlimited (kept as -1).
fn limit_bytes(megabytes: Option<i64>) -> i64 {
    match megabytes {
        Some(mb) if mb >= 0 => mb.saturating_mul(1024 * 1024),
        _ => -1,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_limit_is_read_in_megabytes_and_unlimited_stays_minus_one() {
        assert_eq!(super::limit_bytes(Some(50 * 1024)), 50 * 1024 * 1024 * 1024);
        assert_eq!(super::limit_bytes(Some(-1)), -1);
        assert_eq!(super::limit_bytes(None), -1);
    }
}
