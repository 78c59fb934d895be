//! The replication slot and its walsender as SQL sees them: who streams from it, where it is
//! confirmed, and how a test takes the walsender away.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use walrelay::lsn::Lsn;

use super::postgres::connect;

/// `active_pid` of the slot: the walsender streaming from it (None: inactive or no such slot).
pub async fn slot_active_pid(url: &str, slot: &str) -> Option<i32> {
    let client = connect(url).await.ok()?;
    client
        .query_opt("SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", &[&slot])
        .await
        .ok()
        .flatten()
        .and_then(|row| row.get::<_, Option<i32>>(0))
}

/// The slot's confirmed_flush_lsn (None: no such slot, or PostgreSQL is unreachable).
pub async fn slot_confirmed(url: &str, slot: &str) -> Option<Lsn> {
    let client = connect(url).await.ok()?;
    client
        .query_opt(
            "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .ok()
        .flatten()
        .and_then(|row| row.get::<_, Option<Lsn>>(0))
}

/// `pg_terminate_backend` of the walsender holding `slot`; its pid, if there was one.
pub async fn terminate_walsender(url: &str, slot: &str) -> Option<i32> {
    let client = connect(url).await.expect("connect to terminate the walsender");
    let row = client
        .query_opt(
            "SELECT active_pid, pg_terminate_backend(active_pid) FROM pg_replication_slots \
             WHERE slot_name = $1 AND active_pid IS NOT NULL",
            &[&slot],
        )
        .await
        .expect("pg_terminate_backend");
    row.map(|r| r.get::<_, i32>(0))
}

/// Whether the server log has a "terminating walsender process due to replication timeout"
/// line from one of `pids` (the default log_line_prefix is `%m [%p] `).
pub fn walsender_timed_out(pg_log: &str, pids: &HashSet<i32>) -> Vec<String> {
    pg_log
        .lines()
        .filter(|l| l.contains("replication timeout"))
        .filter(|l| pids.iter().any(|p| l.contains(&format!("[{p}]"))))
        .map(str::to_string)
        .collect()
}

/// Ends the walsender holding `slot` even when its client is frozen: `pg_terminate_backend`
/// once a second until the slot is free or held by another walsender. Returns the pid ended and
/// how many signals it took, or why the slot is still held at the deadline.
///
/// One signal is not always enough. A walsender whose client stopped reading (a frozen process,
/// a paused VM) blocks in a write once the socket buffer is full; the first SIGTERM turns that
/// into a FATAL error, whose message it then tries to send on the same full socket, waiting in
/// `ClientWrite` with the slot still held. A second SIGTERM makes it exit without sending
/// (seen on PostgreSQL 15 and 18; a CI run's stand-by once waited 30 s for a slot held so).
pub async fn end_walsender(
    url: &str,
    slot: &str,
    deadline: Duration,
) -> Result<(i32, u32), String> {
    let Some(pid) = terminate_walsender(url, slot).await else {
        return Err(format!("no walsender holds {slot}"));
    };
    let (start, mut signals) = (Instant::now(), 1);
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if slot_active_pid(url, slot).await != Some(pid) {
            return Ok((pid, signals));
        }
        if start.elapsed() > deadline {
            return Err(format!(
                "walsender {pid} still holds {slot} after {signals} pg_terminate_backend in \
                 {deadline:?}: {}",
                backend_state(url, pid).await
            ));
        }
        if start.elapsed() >= Duration::from_secs(signals as u64) {
            terminate_walsender(url, slot).await;
            signals += 1;
        }
    }
}

/// `sent_lsn` of walsender `pid` in `pg_stat_replication`: how far it has sent.
pub async fn sent_lsn(url: &str, pid: i32) -> Option<Lsn> {
    let client = connect(url).await.ok()?;
    let sql = "SELECT sent_lsn FROM pg_stat_replication WHERE pid = $1";
    let row = client.query_opt(sql, &[&pid]).await.ok().flatten()?;
    row.get::<_, Option<Lsn>>(0)
}

/// What a backend waits on, from `pg_stat_activity`, for a failure message.
pub async fn backend_state(url: &str, pid: i32) -> String {
    let Ok(client) = connect(url).await else { return "PostgreSQL unreachable".into() };
    let row = client
        .query_opt(
            "SELECT format('%s, waiting on %s/%s', state, wait_event_type, wait_event) \
             FROM pg_stat_activity WHERE pid = $1",
            &[&pid],
        )
        .await;
    match row {
        Ok(Some(row)) => row.get(0),
        Ok(None) => format!("pid {pid} has exited"),
        Err(e) => format!("pg_stat_activity: {e}"),
    }
}

/// Waits until the slot is streaming to a walsender other than `not` (a relay (re)connected).
pub async fn wait_active_pid(
    url: &str,
    slot: &str,
    not: Option<i32>,
    within: Duration,
) -> Option<i32> {
    let start = Instant::now();
    while start.elapsed() < within {
        if let Some(pid) = slot_active_pid(url, slot).await {
            if Some(pid) != not {
                return Some(pid);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Where PostgreSQL will write its next WAL record: everything committed so far is before it.
pub async fn wal_insert_lsn(url: &str) -> Lsn {
    let client = connect(url).await.expect("connect to read the WAL position");
    let row = client.query_one("SELECT pg_current_wal_insert_lsn()", &[]).await;
    row.expect("pg_current_wal_insert_lsn()").get(0)
}

/// Waits until the slot is confirmed at or past `lsn` (the relay confirmed what Kafka acked).
pub async fn wait_confirmed(url: &str, slot: &str, lsn: Lsn, deadline: Duration) -> bool {
    super::wait_until(&format!("the slot confirms {lsn}"), deadline, || async move {
        slot_confirmed(url, slot).await.unwrap_or_default() >= lsn
    })
    .await
}

/// Waits until no walsender streams from the slot (a killed relay's session is gone).
pub async fn wait_inactive(url: &str, slot: &str, deadline: Duration) -> bool {
    super::wait_until("the slot's walsender exits", deadline, || async move {
        slot_active_pid(url, slot).await.is_none()
    })
    .await
}

/// After a SIGKILL of the relay: waits until PostgreSQL has noticed and ended its walsender, so
/// the next relay finds the slot free instead of standing by; fails the test after 15 s.
pub async fn assert_released_after_kill(url: &str, slot: &str) {
    let gone = wait_inactive(url, slot, Duration::from_secs(15)).await;
    assert!(gone, "walsender of a SIGKILLed relay still active after 15 s");
}
