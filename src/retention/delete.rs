//! Deleting old rows of one table (a plain outbox, or one leaf partition) in bounded batches.
//!
//! Each batch is one statement, so one short transaction: it picks at most [`BATCH_ROWS`] rows
//! older than the cut-off whose inserting transaction precedes `X0`, deletes them by `ctid`, and
//! says where it stopped; a tenant's table keeps the rows written before it joined the
//! publication ([`super::Joined`]). The next batch starts after that `ctid`, so a run reads the table once
//! (PostgreSQL 14+ turns `ctid > …` into a TID range scan; 13 reads from the start each time)
//! instead of rescanning the dead rows earlier batches left for VACUUM. Rows that don't qualify
//! stay where they are for a later run.

use tokio_postgres::types::ToSql;

use super::{statement, AgeColumn, Joined, Run, BATCH_ROWS};
use crate::config::TableName;
use crate::error::Result;
use crate::source::horizon::Horizon;

/// What a table's batches did (or, dry, would do).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Done {
    pub rows: u64,
    pub batches: u64,
    /// Dry runs only: rows older than the cut-off kept because their transaction does not
    /// precede `X0` (not yet known to be relayed).
    pub not_yet: u64,
    /// Dry runs only: rows older than the cut-off kept because they were written before the
    /// table joined the publication (never relayed).
    pub before_join: u64,
    pub stopped: bool,
}

pub(super) async fn rows(
    run: &Run<'_>,
    table: &TableName,
    column: &AgeColumn,
    cutoff: &str,
) -> Result<Done> {
    let (t, c, ty) = (table.quoted(), quote(&column.name), column.sql_type);
    let inserted_before = Horizon::inserted_before_sql(3);
    let joined = Joined::sql(5);
    // MATERIALIZED: the batch is chosen once; the DELETE then finds each row by its ctid.
    let sql = format!(
        "WITH batch AS MATERIALIZED (\
           SELECT ctid FROM {t} WHERE ctid > $1::text::tid AND {c} < $2::text::{ty} \
           AND {inserted_before} AND {joined} LIMIT $4), \
         gone AS (DELETE FROM {t} WHERE ctid = ANY (ARRAY(SELECT ctid FROM batch)) RETURNING 1) \
         SELECT (SELECT count(*) FROM batch), \
         (SELECT ctid::text FROM batch ORDER BY ctid DESC LIMIT 1), \
         (SELECT count(*) FROM gone)"
    );
    let what = format!("cannot delete old rows from {table}");
    let x0 = run.horizon.xid_text();
    let since = run.joined.xid();
    let mut after = "(0,0)".to_string();
    let mut done = Done::default();
    loop {
        if *run.stop.borrow() {
            done.stopped = true;
            break;
        }
        let params: [&(dyn ToSql + Sync); 5] = [&after, &cutoff, &x0, &BATCH_ROWS, &since];
        let rows = statement(run.control, &what, &sql, &params).await?;
        let (picked, last, gone): (i64, Option<String>, i64) =
            (rows[0].get(0), rows[0].get(1), rows[0].get(2));
        done.rows += gone as u64;
        if picked > 0 {
            done.batches += 1;
        }
        match last {
            // A short batch reached the table's end. (Rows picked but gone before the DELETE
            // reached them were deleted or updated by someone else: nothing to do.)
            Some(last) if picked == BATCH_ROWS => after = last,
            _ => break,
        }
    }
    Ok(done)
}

/// What [`rows`] would delete, and how many older rows it would keep.
pub(super) async fn count(
    run: &Run<'_>,
    table: &TableName,
    column: &AgeColumn,
    cutoff: &str,
) -> Result<Done> {
    let (t, c, ty) = (table.quoted(), quote(&column.name), column.sql_type);
    let inserted_before = Horizon::inserted_before_sql(2);
    let joined = Joined::sql(3);
    let sql = format!(
        "SELECT count(*) FILTER (WHERE {inserted_before} AND {joined}), \
         count(*) FILTER (WHERE NOT {inserted_before} AND {joined}), \
         count(*) FILTER (WHERE NOT {joined}) \
         FROM {t} WHERE {c} < $1::text::{ty}"
    );
    let x0 = run.horizon.xid_text();
    let since = run.joined.xid();
    let what = format!("cannot count old rows of {table}");
    let rows = statement(run.control, &what, &sql, &[&cutoff, &x0, &since]).await?;
    let (passing, not_yet, before_join): (i64, i64, i64) =
        (rows[0].get(0), rows[0].get(1), rows[0].get(2));
    Ok(Done {
        rows: passing as u64,
        batches: (passing as u64).div_ceil(BATCH_ROWS as u64),
        not_yet: not_yet as u64,
        before_join: before_join as u64,
        stopped: false,
    })
}

/// `"name"` for SQL.
pub(super) fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
