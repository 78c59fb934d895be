//! Creating the replication slot, and the transactions that hold it up.
//!
//! `pg_create_logical_replication_slot` builds the slot's first snapshot, and for that waits,
//! without bound, until every transaction that had an xid when it started has ended. One
//! session left "idle in transaction" after a write holds it for as long as it stays open. So
//! while it waits, walrelay says every [`REPORT_EVERY`] which transactions it waits for (asked
//! on a connection of its own: the control connection is busy creating), and when it is stopped
//! meanwhile it cancels the creating backend. That backend waits on a lock and does not notice
//! its client leave: left alone it would hold the half-made slot, and the next relay would
//! stand by behind it.

use std::time::{Duration, Instant};

use super::connect::{connect, Control};
use crate::config::SourceConfig;
use crate::error::{Error, Result};
use crate::lsn::Lsn;

/// How often a creation that waits says what for.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);

/// A transaction that holds up (or would hold up) the slot's creation.
#[derive(Debug, Clone, PartialEq)]
pub struct Blocker {
    pub pid: i32,
    pub database: Option<String>,
    /// `pg_stat_activity.state`: `idle in transaction`, `active`, …
    pub state: Option<String>,
    /// Seconds since the transaction started.
    pub age_s: Option<f64>,
    /// When its current (or last) query started, ISO-8601 UTC.
    pub query_start: Option<String>,
    /// The start of that query.
    pub query: Option<String>,
}

impl std::fmt::Display for Blocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let or_q = |v: &Option<String>| v.clone().unwrap_or_else(|| "?".into());
        write!(
            f,
            "pid {} (database {}, {}, transaction open {:.0} s, query started {}: {})",
            self.pid,
            or_q(&self.database),
            or_q(&self.state),
            self.age_s.unwrap_or(0.0),
            or_q(&self.query_start),
            or_q(&self.query).replace(char::is_whitespace, " ")
        )
    }
}

const BLOCKER_COLUMNS: &str = "SELECT a.pid, a.datname::text, a.state, \
     extract(epoch FROM clock_timestamp() - a.xact_start)::float8, \
     to_char(a.query_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), \
     left(a.query, 100) FROM pg_catalog.pg_stat_activity a";

fn blockers(rows: Vec<tokio_postgres::Row>) -> Vec<Blocker> {
    rows.iter()
        .map(|r| Blocker {
            pid: r.get(0),
            database: r.get(1),
            state: r.get(2),
            age_s: r.get(3),
            query_start: r.get(4),
            query: r.get(5),
        })
        .collect()
}

/// The transactions the backend `creator` waits for (it waits on their xid locks).
pub async fn waited_for(control: &Control, creator: i32) -> Result<Vec<Blocker>> {
    let sql = format!(
        "{BLOCKER_COLUMNS} WHERE a.pid = ANY(pg_catalog.pg_blocking_pids($1)) ORDER BY a.xact_start"
    );
    Ok(blockers(
        control.query("cannot read what the slot's creation waits for", &sql, &[&creator]).await?,
    ))
}

/// The transactions a slot created now would wait for: every one holding an xid, in any
/// database of the cluster.
pub async fn would_block(control: &Control) -> Result<Vec<Blocker>> {
    let sql = format!(
        "{BLOCKER_COLUMNS} WHERE a.backend_xid IS NOT NULL AND a.pid <> pg_catalog.pg_backend_pid() \
         ORDER BY a.xact_start"
    );
    Ok(blockers(control.query("cannot read the open transactions", &sql, &[]).await?))
}

/// Creates the slot `src.slot` on the control connection, saying what it waits for; a stop
/// while it waits (this future dropped) cancels the creating backend.
pub async fn create(control: &Control, src: &SourceConfig, failover: bool) -> Result<Lsn> {
    let name = src.slot.as_str();
    let creator: i32 = control
        .query_one("cannot read the backend pid", "SELECT pg_catalog.pg_backend_pid()", &[])
        .await?
        .get(0);
    // The five-argument form (temporary, two-phase, failover) exists from 17 on.
    let sql = if failover {
        "SELECT lsn FROM pg_catalog.pg_create_logical_replication_slot($1, 'pgoutput', false, false, true)"
    } else {
        "SELECT lsn FROM pg_catalog.pg_create_logical_replication_slot($1, 'pgoutput')"
    };
    let mut guard = CancelOnDrop { src: Some(src.clone()), pid: creator };
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&name];
    let creating = control.client().query_one(sql, &params);
    tokio::pin!(creating);
    let started = Instant::now();
    let mut report =
        tokio::time::interval_at(tokio::time::Instant::now() + REPORT_EVERY, REPORT_EVERY);
    let mut watcher: Option<Control> = None;
    let created = loop {
        tokio::select! {
            created = &mut creating => break created,
            _ = report.tick() => {
                if watcher.is_none() {
                    watcher = connect(src).await.ok();
                }
                let waited = match &watcher {
                    Some(w) => waited_for(w, creator).await.unwrap_or_default(),
                    None => Vec::new(),
                };
                let list = match waited.is_empty() {
                    true => "none found (they may have just ended)".to_string(),
                    false => waited.iter().map(|b| b.to_string()).collect::<Vec<_>>().join("; "),
                };
                tracing::warn!(slot = %name, creating_pid = creator, waited_s = started.elapsed().as_secs(),
                    "creating the replication slot waits for these transactions to end: {list}. Creating a slot waits for every transaction that holds an xid; commit or roll them back (or pg_terminate_backend the pid)");
            }
        }
    };
    // Finished, either way: nothing is left to cancel.
    guard.src = None;
    let row = created.map_err(|e| {
        Error::definite_with(
            format!("cannot create replication slot {name}"),
            "the role needs the REPLICATION attribute, and max_replication_slots must have room",
            e,
        )
    })?;
    let lsn: Lsn = row.get(0);
    tracing::info!(slot = %name, %lsn, failover, "created replication slot");
    Ok(lsn)
}

/// While armed (`src` set), cancels the creating backend when dropped.
struct CancelOnDrop {
    src: Option<SourceConfig>,
    pid: i32,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(src) = self.src.take() else { return };
        let pid = self.pid;
        // The relay is stopping, and its runtime may be gone before a task spawned now would
        // run: the cancel gets a thread and a connection of its own, and this waits for it
        // (bounded by the connect timeout), so the backend is cancelled before the process
        // exits.
        let cancelled = std::thread::spawn(move || {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            runtime.block_on(async {
                let control = connect(&src).await.ok()?;
                let row = control
                    .query_one("cannot cancel", "SELECT pg_catalog.pg_cancel_backend($1)", &[&pid])
                    .await
                    .ok()?;
                Some(row.get::<_, bool>(0))
            })
        })
        .join()
        .ok()
        .flatten();
        match cancelled {
            Some(true) => tracing::info!(pid, "stopped while creating the replication slot: cancelled the creating backend, which drops the unfinished slot"),
            _ => tracing::warn!(pid, "stopped while creating the replication slot, and could not cancel the creating backend: run SELECT pg_cancel_backend({pid}) or the next relay stands by behind it"),
        }
    }
}
