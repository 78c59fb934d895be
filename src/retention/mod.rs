//! Retention: deleting outbox rows (or dropping whole partitions) once their events are
//! certainly in Kafka — `walrelay purge`, and `[retention]` in `walrelay run`.
//!
//! This is the one place walrelay writes to an outbox table. It never runs on the streaming
//! path: `walrelay run` purges from a task of its own on a connection of
//! its own ([`task`]), and a purge that waits or fails never holds the relay loop.
//!
//! A run:
//!
//! 1. checks every configured outbox table's age column (`[retention] column`, a `timestamptz`,
//!    `timestamp` or `date`) and how the table is stored ([`Plan`]), before anything else;
//! 2. reads the horizon (`L0`, `X0`) and the cut-off (now − `keep`) and waits, for a bounded
//!    time, until the slot has confirmed `L0` — when the relay is down or behind it deletes
//!    nothing and says so ([`Outcome::Unconfirmed`]);
//! 3. deletes only rows older than the cut-off whose inserting transaction precedes `X0`
//!    ([`crate::source::horizon`] explains why exactly those are safe): a plain table in bounded
//!    batches ([`delete`]); a table `PARTITION BY RANGE` on the age column by dropping each
//!    partition whose upper bound is at or before the cut-off, after checking under its lock that
//!    every row in it passes ([`detach`]).
//!
//! A tenant's table (one an `[outbox] tables` pattern matches) may have joined the publication
//! after rows were written to it: `walrelay setup` adding a table made before the event
//! trigger, or an `ALTER PUBLICATION … ADD TABLE` by hand. Those rows were never published, and
//! they sit below every confirmed position, so the `X0` test alone would delete them. A purge
//! therefore deletes a tenant's row only if its transaction is not older than the one that
//! added the table to the publication ([`Joined`]), and leaves a table the publication does not
//! carry alone. (The event trigger's join is in the transaction that creates the table, so every
//! row of such a table passes; it refuses a table that would join holding rows.)
//!
//! On a partitioned table, a partition whose upper bound is after the cut-off is kept whole
//! (it goes at a later run, once the cut-off passes its bound: deleting its rows first would
//! only make work for VACUUM); the DEFAULT partition, one bounded by MAXVALUE, and every
//! partition of a table partitioned another way (LIST, HASH, RANGE on another column or on
//! several) never become droppable by age, so their old rows are deleted in batches instead.

mod delete;
mod detach;
mod report;
pub mod task;

use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::config::{Config, TableName};
use crate::error::{Error, Result};
use crate::lsn::Lsn;
use crate::source::catalog::{self, CatalogColumn, OutboxTable};
use crate::source::horizon::{self, Horizon};
use crate::source::partitions::{self, Bound, Partition, Scheme, Upper};
use crate::source::slot::{self, Confirmation};
use crate::source::{self, Control};

pub use self::report::{Dropped, Kept, Report, TableReport};

/// Rows deleted per transaction: big enough that a batch's round trip is noise, small enough
/// that a batch holds its row locks and WAL for milliseconds and a stop waits for one briefly.
pub const BATCH_ROWS: i64 = 5_000;

/// How long a purge waits for the slot to confirm the WAL position it read, by default.
pub const CONFIRM_WAIT: Duration = Duration::from_secs(30);

/// How long a purge statement may run (a partition's scan, a batch) on the server and here.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(300);

/// What one purge does.
#[derive(Debug, Clone)]
pub struct Options {
    /// Rows older than this go.
    pub older_than: Duration,
    /// The column that says how old a row is.
    pub column: String,
    /// Report what would go, change nothing.
    pub dry_run: bool,
    /// How long to wait for the slot to confirm the current WAL position.
    pub confirm_wait: Duration,
    /// Delete too the rows a tenant's table held before it joined the publication (never
    /// relayed): `purge --force`, once a repair re-published them. Never set by `[retention]`.
    pub before_join: bool,
}

/// How a purge ended, when it did not fail.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Rows and partitions purged (or, dry, what would be); `stopped` if asked to stop midway.
    Purged(Report),
    /// The slot did not confirm `needed` in time: nothing was deleted. (A dry run counts
    /// anyway: its [`Report::unconfirmed`] says this.)
    Unconfirmed(Unconfirmed),
    /// Another purge for the same slot runs (the other relay of a pair, or a cron job):
    /// nothing was done.
    Busy { pid: Option<i32> },
}

/// The slot short of the WAL position the purge began at: rows written since its confirmed
/// position may not be in Kafka yet, so nothing may be deleted.
#[derive(Debug, Clone)]
pub struct Unconfirmed {
    pub needed: Lsn,
    pub confirmed: Option<Lsn>,
    /// A walsender streams from the slot (a relay catching up), or none (walrelay is down).
    pub active: bool,
    pub slot: String,
}

/// One outbox table, checked for retention: its age column and how it is stored.
#[derive(Debug, Clone)]
pub struct Plan {
    pub table: OutboxTable,
    pub column: AgeColumn,
    /// `Some` for a partitioned table.
    pub scheme: Option<Scheme>,
}

/// Since when the publication carries a table: the rows of transactions before that were
/// never published, so never relayed, whatever position the slot confirms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Joined {
    /// From its first row, as far as retention tells: a table by name (the relay refuses to
    /// run without it in the publication).
    FromItsFirstRow,
    /// By the transaction with this xid (the `xmin` of the publication's row for the table, for
    /// its schema, or `FOR ALL TABLES` for the publication): rows inserted by an older
    /// transaction were not published. `walrelay
    /// setup` adds a table under a SHARE lock, so a row written before it joined always belongs
    /// to an older transaction; the event trigger adds a table in the transaction creating it.
    By(String),
    /// Not carried at all: none of its rows are relayed.
    Not,
}

impl Joined {
    /// The SQL condition "this row was inserted by the joining transaction or a later one",
    /// with the join's xid as parameter `$param` (bind [`Joined::xid`]; NULL passes every row).
    /// The ages count back from the same point (see [`crate::source::horizon`]); a join more
    /// than 2^31 transactions old reads as a negative age, and every row the `X0` test lets
    /// through (never older than that) then follows it.
    fn sql(param: usize) -> String {
        format!(
            "(${param}::text IS NULL OR pg_catalog.age(${param}::text::xid) < 0 \
             OR pg_catalog.age(xmin) <= pg_catalog.age(${param}::text::xid))"
        )
    }

    fn xid(&self) -> Option<String> {
        match self {
            Joined::By(xid) => Some(xid.clone()),
            Joined::FromItsFirstRow | Joined::Not => None,
        }
    }
}

/// The column that says how old a row is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgeColumn {
    pub name: String,
    /// `timestamptz`, `timestamp` or `date`: what values are cast to for comparisons.
    pub sql_type: &'static str,
}

impl Plan {
    /// What a purge does to this table, in words (for `check` and reports).
    pub fn describe(&self) -> String {
        let column = format!("{} ({})", self.column.name, self.column.sql_type);
        match &self.scheme {
            None => format!(
                "rows older than the cut-off by {column} are deleted in batches of {BATCH_ROWS}"
            ),
            Some(s) if s.range_on_column => format!(
                "partitioned by {}: partitions whose upper bound is at or before the cut-off are dropped; rows older than the cut-off in a DEFAULT or MAXVALUE partition are deleted in batches",
                s.key
            ),
            Some(s) => format!(
                "partitioned by {}, not by RANGE ({}) alone: no partition is dropped by age; rows older than the cut-off by {column} are deleted in batches",
                s.key, self.column.name
            ),
        }
    }
}

/// Checks `table` for retention by `column`: the column exists and holds a time. `named_by` is
/// the setting that chose the column (`[retention] column`, or replay's `--column`), which the
/// errors blame.
pub async fn plan(
    control: &Control,
    table: &OutboxTable,
    column: &str,
    named_by: &str,
) -> Result<Plan> {
    let column = age_column(table, column, named_by)?;
    let scheme = match table.partitioned {
        true => Some(partitions::scheme(control, table.oid, &column.name).await?),
        false => None,
    };
    Ok(Plan { table: table.clone(), column, scheme })
}

/// The setting that names the age column of `purge` and `[retention]`.
pub const RETENTION_COLUMN: &str = "[retention] column";

fn age_column(table: &OutboxTable, name: &str, named_by: &str) -> Result<AgeColumn> {
    let Some(c) = table.columns.iter().find(|c| c.name == name) else {
        return Err(Error::definite(
            format!("outbox table {} has no column {name}, which {named_by} names as the time a row was written", table.name),
            format!("add it (ALTER TABLE {} ADD COLUMN {name} timestamptz NOT NULL DEFAULT now()), or set {named_by} to the table's timestamptz column", table.name),
        ));
    };
    sql_type(c).map(|sql_type| AgeColumn { name: name.to_string(), sql_type }).ok_or_else(|| {
        Error::definite(
            format!(
                "column {name} of {} is {}, but {named_by} must say when a row was written",
                table.name, c.type_name
            ),
            format!("set {named_by} to a timestamptz, timestamp or date column (e.g. created_at timestamptz NOT NULL DEFAULT now()), or change the type of {name}"),
        )
    })
}

fn sql_type(column: &CatalogColumn) -> Option<&'static str> {
    match column.type_oid {
        1184 => Some("timestamptz"),
        1114 => Some("timestamp"),
        1082 => Some("date"),
        _ => None,
    }
}

/// One purge of every configured outbox table. `stop` turning true ends it between batches.
pub async fn purge(
    config: &Config,
    opts: &Options,
    stop: &watch::Receiver<bool>,
) -> Result<Outcome> {
    let started = Instant::now();
    let control = source::connect(&config.source).await?;
    prepare_session(&control).await?;
    if let Some(pid) = exclusive(&control, &config.source.slot).await? {
        return Ok(Outcome::Busy { pid });
    }
    let tables = catalog::outbox_tables(&control, &config.outbox).await?;
    let mut plans = Vec::with_capacity(tables.len());
    for table in &tables {
        plans.push(plan(&control, table, &opts.column, RETENTION_COLUMN).await?);
    }
    let joined = joined(&control, config, &tables).await?;
    let horizon = horizon::now(&control).await?;
    let cutoff = cutoff(&control, opts.older_than).await?;
    let slot = &config.source.slot;
    let waiting = Instant::now();
    let (confirmed, unconfirmed) =
        match slot::wait_confirmed(&control, slot, horizon.lsn, opts.confirm_wait).await? {
            Confirmation::Reached(lsn) => (lsn, None),
            Confirmation::Behind { confirmed, active } => {
                let behind =
                    Unconfirmed { needed: horizon.lsn, confirmed, active, slot: slot.clone() };
                // A dry run deletes nothing either way: it counts what a purge would delete once
                // the slot gets there, and says that it is not there.
                if !opts.dry_run {
                    return Ok(Outcome::Unconfirmed(behind));
                }
                (confirmed.unwrap_or(Lsn::ZERO), Some(behind))
            }
        };
    let mut report = Report {
        dry_run: opts.dry_run,
        older_than: opts.older_than,
        cutoff: cutoff.clone(),
        horizon,
        confirmed,
        unconfirmed,
        waited: waiting.elapsed(),
        tables: Vec::new(),
        stopped: false,
        elapsed: Duration::ZERO,
    };
    let first_row = Joined::FromItsFirstRow;
    let run = Run {
        control: &control,
        horizon: &horizon,
        dry_run: opts.dry_run,
        stop,
        joined: &first_row,
    };
    for (plan, joined) in plans.iter().zip(&joined) {
        if *stop.borrow() {
            report.stopped = true;
            break;
        }
        let publication = &config.source.publication;
        if *joined == Joined::Not {
            let mut table = TableReport::new(plan, &cutoff);
            table.kept.push(Kept::whole(&plan.table.name, format!("publication {publication} does not carry it, so none of its rows were relayed: nothing is deleted (`walrelay setup` adds it; `walrelay audit --since <when they were written> --repair` re-publishes its rows)")));
            report.tables.push(table);
            continue;
        }
        // `--force`: the operator says the rows before the join were re-published (or are not
        // wanted); the slot's test still applies to every row.
        let joined = if opts.before_join { &first_row } else { joined };
        let run = Run { joined, ..run };
        let table_cutoff = run.cutoff_as(&cutoff, plan.column.sql_type).await?;
        let table = run.table(plan, &table_cutoff).await?;
        report.stopped |= table.stopped;
        report.tables.push(table);
    }
    report.elapsed = started.elapsed();
    Ok(Outcome::Purged(report))
}

/// How each of `tables` joined the publication. Tables by name joined from their first row;
/// a tenant's table (matched by a pattern) joined when the publication's row for it, or for its
/// schema (`FOR TABLES IN SCHEMA`, PostgreSQL 15+), was written — or, `FOR ALL TABLES`, the
/// publication's own row (a table made before the publication held rows it never published; an
/// `ALTER PUBLICATION` rewriting that row later only keeps more).
async fn joined(control: &Control, config: &Config, tables: &[OutboxTable]) -> Result<Vec<Joined>> {
    let tenants: Vec<u32> =
        tables.iter().filter(|t| !config.outbox.tables.contains(&t.name)).map(|t| t.oid).collect();
    if tenants.is_empty() {
        return Ok(vec![Joined::FromItsFirstRow; tables.len()]);
    }
    let in_schema = match control.server.version_num >= 150000 {
        true => {
            "(SELECT pn.xmin::text FROM pg_catalog.pg_publication_namespace pn \
             JOIN pg_catalog.pg_class c ON c.relnamespace = pn.pnnspid \
             WHERE pn.pnpubid = p.oid AND c.oid = t.oid)"
        }
        false => "NULL",
    };
    let rows = control
        .query(
            "cannot read when the tenants' outbox tables joined the publication",
            &format!(
                "SELECT t.oid, CASE WHEN p.puballtables THEN p.xmin::text ELSE \
                 COALESCE((SELECT pr.xmin::text FROM pg_catalog.pg_publication_rel pr \
                           WHERE pr.prpubid = p.oid AND pr.prrelid = t.oid), {in_schema}) END \
                 FROM unnest($2::oid[]) t(oid) \
                 LEFT JOIN pg_catalog.pg_publication p ON p.pubname = $1"
            ),
            &[&config.source.publication, &tenants],
        )
        .await?;
    let by_oid: std::collections::HashMap<u32, Joined> = rows
        .iter()
        .map(|r| {
            let joined = match r.get::<_, Option<String>>(1) {
                Some(xid) => Joined::By(xid),
                None => Joined::Not,
            };
            (r.get::<_, u32>(0), joined)
        })
        .collect();
    Ok(tables
        .iter()
        .map(|t| by_oid.get(&t.oid).cloned().unwrap_or(Joined::FromItsFirstRow))
        .collect())
}

/// Session settings for purge's own connection.
async fn prepare_session(control: &Control) -> Result<()> {
    let sql = format!(
        // Batches walk a table in physical order (a seq scan that joins another one midway
        // would skip rows until the next run), without parallel workers; no statement runs
        // unbounded, and a batch waiting on a row lock (an application holding an outbox row)
        // gives up for the next run instead of waiting with the locks it already took.
        "SET application_name = 'walrelay purge'; SET synchronize_seqscans = off; \
         SET max_parallel_workers_per_gather = 0; SET lock_timeout = '5s'; \
         SET statement_timeout = '{}s'",
        STATEMENT_TIMEOUT.as_secs()
    );
    control
        .batch(&sql)
        .await?
        .map_err(|e| source::error::classify_pg("cannot set up the purge session", e))
}

/// One purge per slot at a time: two relays of a pair both purging would only trip over each
/// other's DETACHes. A session-level advisory lock, released when the connection closes.
/// `Some(holder)` when another session holds it.
async fn exclusive(control: &Control, slot: &str) -> Result<Option<Option<i32>>> {
    let key = format!("walrelay purge {slot}");
    let row = control
        .query_one(
            "cannot take the purge lock",
            "SELECT pg_catalog.pg_try_advisory_lock(pg_catalog.hashtext($1))",
            &[&key],
        )
        .await?;
    if row.get(0) {
        return Ok(None);
    }
    let holder = control
        .query_opt(
            "cannot find the other purge",
            "SELECT pid FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND granted \
             AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database()) \
             AND objid = pg_catalog.hashtext($1)::oid AND objsubid = 1 LIMIT 1",
            &[&key],
        )
        .await?;
    Ok(Some(holder.and_then(|r| r.get(0))))
}

/// now − `older_than`, as `timestamptz` text (the session's time zone).
async fn cutoff(control: &Control, older_than: Duration) -> Result<String> {
    let seconds = i64::try_from(older_than.as_secs()).unwrap_or(i64::MAX);
    let row = control
        .query_one(
            "cannot compute the cut-off",
            "SELECT (now() - $1::bigint * interval '1 second')::text",
            &[&seconds],
        )
        .await?;
    Ok(row.get(0))
}

/// What a run shares between tables, and how the table at hand joined the publication.
#[derive(Clone, Copy)]
struct Run<'a> {
    control: &'a Control,
    horizon: &'a Horizon,
    dry_run: bool,
    stop: &'a watch::Receiver<bool>,
    joined: &'a Joined,
}

impl Run<'_> {
    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// The cut-off as the age column's type (a `timestamp` in the session's time zone, a `date`
    /// truncated), so that comparisons are the column's own.
    async fn cutoff_as(&self, cutoff: &str, sql_type: &str) -> Result<String> {
        let row = self
            .control
            .query_one(
                "cannot compute the cut-off",
                &format!("SELECT $1::text::timestamptz::{sql_type}::text"),
                &[&cutoff],
            )
            .await?;
        Ok(row.get(0))
    }

    async fn table(&self, plan: &Plan, cutoff: &str) -> Result<TableReport> {
        let mut report = TableReport::new(plan, cutoff);
        match &plan.scheme {
            None => self.delete_in(&plan.table.name, plan, cutoff, &mut report).await?,
            Some(scheme) if scheme.range_on_column => {
                for part in partitions::partitions(self.control, plan.table.oid).await? {
                    if self.stopped() {
                        report.stopped = true;
                        break;
                    }
                    self.partition(plan, &part, cutoff, &mut report).await?;
                }
            }
            Some(_) => {
                for leaf in partitions::leaves(self.control, plan.table.oid).await? {
                    self.delete_in(&leaf, plan, cutoff, &mut report).await?;
                }
            }
        }
        Ok(report)
    }

    /// One partition of a table partitioned by RANGE on the age column.
    async fn partition(
        &self,
        plan: &Plan,
        part: &Partition,
        cutoff: &str,
        report: &mut TableReport,
    ) -> Result<()> {
        let why = match &part.bound {
            Bound::Range { upper: Upper::Value(upper) } => {
                let ty = plan.column.sql_type;
                if !partitions::upper_at_or_before(self.control, upper, cutoff, ty).await? {
                    report.kept.push(Kept::whole(
                        &part.name,
                        format!("its upper bound {upper} is after the cut-off: it goes once the cut-off passes it"),
                    ));
                    return Ok(());
                }
                match detach::partition(self, &plan.table.name, part).await? {
                    detach::Fate::Dropped(d) => report.dropped.push(d),
                    detach::Fate::Kept(why) => report.kept.push(Kept::whole(&part.name, why)),
                }
                return Ok(());
            }
            Bound::Default => "the DEFAULT partition never ages out whole",
            Bound::Range { upper: Upper::MaxValue } => {
                "its upper bound is MAXVALUE: it never ages out whole"
            }
            Bound::Other(text) => {
                report
                    .kept
                    .push(Kept::whole(&part.name, format!("its bound ({text}) is not a time")));
                return Ok(());
            }
        };
        let before = report.deleted;
        for leaf in partitions::leaves(self.control, part.oid).await? {
            self.delete_in(&leaf, plan, cutoff, report).await?;
        }
        let deleted = report.deleted - before;
        report.kept.push(Kept {
            name: part.name.clone(),
            why: why.to_string(),
            deleted: Some(deleted),
        });
        Ok(())
    }

    async fn delete_in(
        &self,
        leaf: &TableName,
        plan: &Plan,
        cutoff: &str,
        report: &mut TableReport,
    ) -> Result<()> {
        if self.stopped() {
            report.stopped = true;
            return Ok(());
        }
        let done = if self.dry_run {
            delete::count(self, leaf, &plan.column, cutoff).await?
        } else {
            delete::rows(self, leaf, &plan.column, cutoff).await?
        };
        report.deleted += done.rows;
        report.batches += done.batches;
        report.not_yet += done.not_yet;
        report.before_join += done.before_join;
        report.stopped |= done.stopped;
        Ok(())
    }
}

/// A purge statement on the purge connection, with purge's own deadline (batches and partition
/// scans may take longer than a catalog query's).
async fn statement(
    control: &Control,
    what: &str,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Vec<tokio_postgres::Row>> {
    let deadline = STATEMENT_TIMEOUT + Duration::from_secs(5);
    match tokio::time::timeout(deadline, control.client().query(sql, params)).await {
        Ok(result) => result.map_err(|e| denied_or(what, e)),
        Err(_) => {
            Err(Error::transient_msg(format!("{what}: no answer within {} s", deadline.as_secs())))
        }
    }
}

/// A refused DELETE or DROP needs a privilege, not a retry.
fn denied_or(what: &str, e: tokio_postgres::Error) -> Error {
    use crate::source::error::{pg_class, Class};
    match pg_class(&e) {
        Class::Denied => Error::definite_with(
            what,
            "the role needs DELETE on the outbox tables (and to own a partitioned one, to drop its partitions)",
            e,
        ),
        _ => source::error::classify_pg(what, e),
    }
}
