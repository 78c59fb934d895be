//! The outbox tables read in one snapshot: the rows of a [`Selection`], in batches, each turned
//! into the record the live relay sends. Replay sends them, the audit checks Kafka against them,
//! the console's lookup finds one; this room serves all three and imports none of them.
//!
//! The live relay never reads the outbox table (I4); these readers do, because the rows Kafka no
//! longer holds (or that the audit wants to find there) are only there, kept by
//! `[retention] keep`. A [`Snapshot`]:
//!
//! * reads one consistent snapshot (one `REPEATABLE READ READ ONLY` transaction) in batches of
//!   [`BATCH_ROWS`], one outbox table after another ([`table`]);
//! * turns each row into a record with the **same router and envelope** as the live relay
//!   ([`Rows::routed`]), so the event id, key and partition are the ones consumers saw.
//!
//! Two orders, and a way of paging each:
//!
//! * **timestamp column, then event id** — keyset pages: each batch is
//!   `WHERE (col, id) > (last col, last id) ORDER BY col, id LIMIT n`, which an index on the
//!   column (ideally `(col, id)`) answers by descending once per batch, however far in;
//! * **commit order** (`track_commit_timestamp = on`) — `pg_xact_commit_timestamp(xmin)` is in no
//!   index, so keyset pages would sort the whole selection again for every batch. Instead one
//!   cursor sorts it once (the selection itself is still found by the index) and each batch is a
//!   `FETCH` from it. A table with no index to page by is read the same way: one scan and one
//!   sort, not one per batch. Rows that committed in the same microsecond, and rows older than the
//!   setting (their commit time is unknown: they go first), follow the column and the id.
//!
//! A reader that wants only where each record goes (the audit, the lookup) reads in no order.
//! Logical-message events (the table-less outbox) are in no table: there is nothing to read.

mod selection;
mod table;

use std::collections::HashSet;

use crate::config::{Config, RetentionConfig};
use crate::encoder::Encoder;
use crate::error::{Error, Result};
use crate::router::{Binding, RawColumn, Record};
use crate::source::error::classify_pg;
use crate::source::{self, catalog, Control};
use crate::txn::Txn;

pub use self::selection::{describe, inverted_window, Selection, TimeBound};
pub use self::table::{index_for, Commit};
use self::table::{Row, TableRead, TimeColumn};

/// Rows read per batch: a round trip per 1,000 rows is noise, and a batch's memory is small.
pub const BATCH_ROWS: usize = 1_000;

/// What one snapshot reads.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub selection: Selection,
    /// The timestamp column; `None`: `[retention] column` (or its default).
    pub column: Option<String>,
    /// A selection of no rows opens (for the audit of a quiet window) instead of failing.
    pub allow_empty: bool,
    /// Only where each record goes is wanted (the audit, the lookup, never a send): rows come in
    /// no particular order, and a JSON payload no other field reads is left out of the values.
    pub places_only: bool,
}

/// The order rows are read in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Commit order, from `pg_xact_commit_timestamp` (`track_commit_timestamp = on`).
    Commit,
    /// The timestamp column, then the event id.
    Column,
}

impl Order {
    /// The order in words, naming `column` and `id`.
    pub fn describe(&self, column: &str, id: &str) -> String {
        match self {
            Order::Commit => format!("commit order (track_commit_timestamp is on; ties and rows older than the setting by {column}, then {id})"),
            Order::Column => format!("by {column}, then {id} (track_commit_timestamp is off, so commit order is unknown; rows of one transaction share {column} and go in {id} order)"),
        }
    }
}

/// The order a snapshot is read in on this server.
pub async fn order(control: &Control) -> Result<Order> {
    let on: bool = control
        .query_one(
            "cannot read track_commit_timestamp",
            "SELECT current_setting('track_commit_timestamp') = 'on'",
            &[],
        )
        .await?
        .get(0);
    Ok(if on { Order::Commit } else { Order::Column })
}

/// A snapshot open on the outbox tables with its selection counted, read by
/// [`Snapshot::next_rows`] and ended by [`Snapshot::close`].
pub struct Snapshot {
    control: Control,
    tables: Vec<TableRead>,
    /// The timestamp column.
    column: TimeColumn,
    /// `table.field.event.id`, for the order in words.
    id_field: String,
    pub order: Order,
    /// Rows the selection holds in the snapshot, over every table.
    pub total: u64,
    /// The table being read ([`Snapshot::next_rows`]).
    current: usize,
}

impl Snapshot {
    /// Connects, opens the snapshot and counts the selection. Fails, before any row is read, on
    /// bad input: an unknown or non-time column, a window retention already purged, ids that
    /// are not ids, a selection that matches nothing (unless `allow_empty`).
    pub async fn open(config: &Config, opts: &Options) -> Result<Snapshot> {
        if config.outbox.is_message_only() {
            return Err(Error::definite(
                "nothing to replay: this relay's events are logical decoding messages (the table-less outbox), which are in no table; once the WAL is recycled PostgreSQL keeps no copy of them",
                "to be able to replay events, write them to an outbox table kept by [retention] keep (docs/table-less-outbox.md, docs/operations.md)",
            ));
        }
        let sel = &opts.selection;
        if sel.ids.is_empty() && sel.since.is_none() && sel.until.is_none() {
            return Err(Error::definite(
                "no selection: replay needs a time window or event ids",
                "pass --since 6h (and/or --until), --id UUID or --ids FILE",
            ));
        }
        if !sel.ids.is_empty() && (sel.since.is_some() || sel.until.is_some()) {
            return Err(Error::definite(
                "--id / --ids and --since / --until select rows two ways at once",
                "pass either event ids or a time window; narrow either with --aggregate-type and --aggregate-id",
            ));
        }
        let column = match &opts.column {
            Some(name) => TimeColumn { name: name.clone(), named_by: "--column" },
            None => TimeColumn {
                name: config
                    .retention
                    .as_ref()
                    .map_or(RetentionConfig::DEFAULT_COLUMN.to_string(), |r| r.column.clone()),
                named_by: crate::retention::RETENTION_COLUMN,
            },
        };
        let control = source::connect(&config.source).await?;
        let tables = catalog::outbox_tables(&control, &config.outbox).await?;
        let order = order(&control).await?;
        selection::check_times(&control, sel).await?;
        begin(&control).await?;
        let mut reads = Vec::with_capacity(tables.len());
        let mut total = 0;
        for table in tables {
            let t = TableRead::new(&control, config, table, &column, sel, order, opts.places_only)
                .await?;
            t.check_retained(&control, config.retention.as_ref(), sel).await?;
            total += t.count(&control).await?;
            reads.push(t);
        }
        if total == 0 && !opts.allow_empty {
            return Err(Error::definite(
                format!("no outbox rows match the selection ({})", describe(sel)),
                "check the window and the ids (times are compared with the timestamp column, in UTC unless the time says otherwise); `--dry-run` shows what a selection holds",
            ));
        }
        if !sel.ids.is_empty() && total < sel.ids.len() as u64 {
            tracing::warn!(
                asked = sel.ids.len(),
                found = total,
                "some event ids are not in the outbox table (purged, or never written); replaying those found"
            );
        }
        Ok(Snapshot {
            control,
            tables: reads,
            column,
            id_field: config.router.field_event_id.clone(),
            order,
            total,
            current: 0,
        })
    }

    /// The order rows go in, in words.
    pub fn order_text(&self) -> String {
        self.order.describe(&self.column.name, &self.id_field)
    }

    /// The index each table is read by, for the operator (`None`: no index, a full scan).
    pub fn indexes(&self) -> Vec<(String, Option<String>)> {
        self.tables.iter().map(|t| (t.table.name.to_string(), t.index.clone())).collect()
    }

    /// The next batch of one table's rows, as read, to route with [`Rows::routed`] and the
    /// table's binding; `None` once it is all read.
    pub(crate) async fn next_rows(&mut self) -> Result<Option<Rows>> {
        while let Some(table) = self.tables.get_mut(self.current) {
            match table.next_batch(&self.control).await? {
                Some(rows) => return Ok(Some(Rows { table: self.current, rows })),
                None => self.current += 1,
            }
        }
        Ok(None)
    }

    /// The binding of the table [`Rows::table`] names.
    pub(crate) fn binding(&self, table: usize) -> &Binding {
        self.tables[table].binding()
    }

    /// Each table's binding, by the index [`Rows::table`] gives (for a reader that routes on
    /// another thread).
    pub(crate) fn bindings(&self) -> Vec<Binding> {
        self.tables.iter().map(|t| t.binding().clone()).collect()
    }

    /// Which of `ids` are rows of the outbox tables (in the snapshot, whatever the window).
    pub(crate) async fn present_ids(&self, ids: &[String]) -> Result<HashSet<String>> {
        let mut present = HashSet::new();
        for table in &self.tables {
            for chunk in ids.chunks(BATCH_ROWS) {
                present.extend(table.present_ids(&self.control, chunk).await?);
            }
        }
        Ok(present)
    }

    /// Whether some outbox table's id column can hold `id`: a record whose id none can is no
    /// outbox event.
    pub(crate) fn could_be_id(&self, id: &str) -> bool {
        self.tables.iter().any(|t| t.holds_id(id))
    }

    /// The connection the snapshot is open on (for what else the caller reads beside it).
    pub(crate) fn control(&self) -> &Control {
        &self.control
    }

    /// Ends the snapshot; it was read-only, so ending it changes nothing.
    pub(crate) async fn close(&self) {
        let _ = self.control.batch("COMMIT").await;
    }

    /// The order [`Snapshot::next_rows`] goes in.
    pub(crate) fn commit_ordered(&self) -> bool {
        self.order == Order::Commit
    }
}

/// Opens the one snapshot, with the walsender's text settings.
async fn begin(control: &Control) -> Result<()> {
    let sql = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; \
               SET LOCAL DateStyle = ISO; SET LOCAL TimeZone = 'UTC'; \
               SET LOCAL IntervalStyle = postgres; SET LOCAL extra_float_digits = 3; \
               SET LOCAL bytea_output = hex; SET LOCAL standard_conforming_strings = on";
    control.batch(sql).await?.map_err(|e| classify_pg("cannot open the replay's snapshot", e))
}

/// One batch of one table's rows, as read ([`Snapshot::next_rows`]).
pub(crate) struct Rows {
    /// The table's index in [`Snapshot::bindings`].
    pub table: usize,
    rows: Vec<Row>,
}

/// A row the router refuses, as the live relay's router refuses it (which dead-letters it, or
/// stops at it).
#[derive(Debug, Clone)]
pub struct Refused {
    pub event_id: Option<String>,
    pub reason: String,
}

impl Rows {
    /// The rows as the live relay's records, each with when its row committed, or why the
    /// router refuses it.
    pub(crate) fn routed(
        self,
        encoder: &mut Encoder,
        binding: &Binding,
    ) -> Vec<std::result::Result<(Record, Commit), Refused>> {
        let mut records = Vec::with_capacity(self.rows.len());
        for row in self.rows {
            let txn = Txn { commit_micros: row.commit.micros, xid: row.xid, ..Txn::default() };
            records.push(match encoder.row(binding, &row.tuple, &txn) {
                Ok(record) => Ok((record, row.commit)),
                Err(e) => {
                    let id = encoder.router().raw(binding, &row.tuple, RawColumn::EventId);
                    let event_id = id.map(|i| String::from_utf8_lossy(&i).into_owned());
                    Err(Refused { event_id, reason: e.to_string() })
                }
            });
        }
        records
    }
}

/// `"name"`, quoted for SQL.
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `'text'`, a string literal (with `standard_conforming_strings` on, only quotes need doubling).
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_literal_doubles_quotes_and_keeps_backslashes() {
        assert_eq!(literal("it's"), "'it''s'");
        assert_eq!(literal(r"a\b"), r"'a\b'");
    }
}
