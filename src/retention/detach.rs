//! Dropping one whole partition whose upper bound is at or before the cut-off.
//!
//! Every row in such a partition is older than the cut-off; it may go only if every row also
//! passes the `X0` test. A row can still arrive in an old partition (an INSERT with an old
//! `created_at`), so the test is made twice:
//!
//! 1. without a lock: a partition with rows not yet known to be relayed is kept, and no writer
//!    ever waits for it;
//! 2. in one transaction: `DETACH PARTITION` (which locks the outbox and the partition: no row
//!    can arrive any more), the same test again, then `DROP TABLE` and COMMIT — or ROLLBACK,
//!    leaving the partition attached, if a row arrived meanwhile.
//!
//! Inserts into the outbox wait while step 2 holds the lock: for the re-check's scan, whose pages
//! step 1 just read. Step 2 asks for the lock with `lock_timeout`, so behind a long transaction it
//! gives up (for the next run) instead of queueing every writer behind itself.

use std::time::{Duration, Instant};

use super::{statement, Dropped, Joined, Run};
use crate::config::TableName;
use crate::error::Result;
use crate::source::horizon::Horizon;
use crate::source::partitions::Partition;

/// How long the DETACH waits for its lock before leaving the partition for the next run.
pub(super) const LOCK_TIMEOUT: Duration = Duration::from_secs(2);

pub(super) enum Fate {
    Dropped(Dropped),
    Kept(String),
}

pub(super) async fn partition(run: &Run<'_>, parent: &TableName, part: &Partition) -> Result<Fate> {
    let (rows, not_yet) = scan(run, &part.name).await?;
    if not_yet.before_join > 0 {
        return Ok(Fate::Kept(before_join_reason(not_yet.before_join, rows)));
    }
    if not_yet.running > 0 {
        return Ok(Fate::Kept(not_yet_reason(not_yet.running, rows)));
    }
    if run.dry_run {
        return Ok(Fate::Dropped(Dropped { name: part.name.clone(), rows, locked: None }));
    }
    let control = run.control;
    let begin = format!(
        "BEGIN; SET LOCAL lock_timeout = '{}ms'; ALTER TABLE {} DETACH PARTITION {}",
        LOCK_TIMEOUT.as_millis(),
        parent.quoted(),
        part.name.quoted()
    );
    let locked = Instant::now();
    match control.batch(&begin).await? {
        Ok(()) => {}
        Err(e) => {
            rollback(run).await;
            if e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) {
                return Ok(Fate::Kept(format!(
                    "the outbox stayed locked by other sessions for {} ms; it goes at the next run",
                    LOCK_TIMEOUT.as_millis()
                )));
            }
            return Err(super::denied_or(&format!("cannot detach partition {}", part.name), e));
        }
    }
    let checked = scan(run, &part.name).await;
    let (rows, not_yet) = match checked {
        Ok(counts) => counts,
        Err(e) => {
            rollback(run).await;
            return Err(e);
        }
    };
    if not_yet.before_join > 0 || not_yet.running > 0 {
        rollback(run).await;
        let why = match not_yet.before_join > 0 {
            true => before_join_reason(not_yet.before_join, rows),
            false => not_yet_reason(not_yet.running, rows),
        };
        return Ok(Fate::Kept(why));
    }
    let drop = format!("DROP TABLE {}; COMMIT", part.name.quoted());
    if let Err(e) = control.batch(&drop).await? {
        rollback(run).await;
        return Err(super::denied_or(&format!("cannot drop partition {}", part.name), e));
    }
    Ok(Fate::Dropped(Dropped { name: part.name.clone(), rows, locked: Some(locked.elapsed()) }))
}

/// The rows of a partition that may not go yet.
struct NotYet {
    /// Written by transactions not yet known to be relayed (the `X0` test).
    running: u64,
    /// Written before the table joined the publication ([`super::Joined`]): never relayed.
    before_join: u64,
}

/// The partition's rows, and how many of them may not go.
async fn scan(run: &Run<'_>, part: &TableName) -> Result<(u64, NotYet)> {
    let joined = Joined::sql(2);
    let sql = format!(
        "SELECT count(*), count(*) FILTER (WHERE NOT ({}) AND {joined}), \
         count(*) FILTER (WHERE NOT {joined}) FROM {}",
        Horizon::inserted_before_sql(1),
        part.quoted()
    );
    let x0 = run.horizon.xid_text();
    let since = run.joined.xid();
    let what = format!("cannot read partition {part}");
    let rows = statement(run.control, &what, &sql, &[&x0, &since]).await?;
    let count = |i| rows[0].get::<_, i64>(i) as u64;
    Ok((count(0), NotYet { running: count(1), before_join: count(2) }))
}

fn before_join_reason(before_join: u64, rows: u64) -> String {
    format!("{before_join} of its {rows} rows were written before the table joined the publication, so never relayed: it is kept (re-publish them with `walrelay audit --since <when they were written> --repair`, then `walrelay purge --force` drops it)")
}

fn not_yet_reason(not_yet: u64, rows: u64) -> String {
    format!("{not_yet} of its {rows} rows were written by transactions not yet known to be relayed; it goes at a later run")
}

async fn rollback(run: &Run<'_>) {
    match run.control.batch("ROLLBACK").await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "rollback after a failed partition drop"),
        Err(e) => tracing::debug!(error = %e.chain(), "rollback after a failed partition drop"),
    }
}
