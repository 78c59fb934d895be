//! One outbox table's part of a snapshot: the selection as SQL, a count, and batches in order
//! (keyset pages, a cursor, or one streamed query, as the module above says).
//!
//! Values are selected as `::text` in the table's column order, with the session settings the
//! walsender is pinned to, so the router sees the same text pgoutput sends the live relay.
//! Selection values are SQL literals (quoted, `standard_conforming_strings` on) rather than
//! parameters because `DECLARE … CURSOR` takes none.

use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use tokio_postgres::RowStream;

use super::selection::bound_sql;
use super::{literal, quote, Order, Selection, BATCH_ROWS};
use crate::config::{Config, RetentionConfig};
use crate::error::{Error, Result};
use crate::pgoutput::{Tuple, Value};
use crate::retention::{self, AgeColumn};
use crate::router::{Binding, Router};
use crate::source::catalog::{CatalogColumn, OutboxTable};
use crate::source::error::{classify_pg, pg_class, Class};
use crate::source::Control;

/// A statement without parameters, for `query_raw`.
const NO_PARAMETERS: [&str; 0] = [];

/// How long one statement of the snapshot may run (a count, the cursor's sort, a batch).
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(600);

/// One selected row: its values as pgoutput would send them, and what the envelope takes from
/// its transaction.
pub(super) struct Row {
    pub tuple: Tuple,
    pub commit: Commit,
    pub xid: u32,
}

/// When a row's transaction committed, as far as the server knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commit {
    /// µs since the Unix epoch: the commit timestamp, or (track_commit_timestamp off, or a row
    /// older than the setting) the timestamp column's value.
    pub micros: i64,
    /// `micros` is the commit timestamp itself.
    pub exact: bool,
}

/// The index an ordered read of `column` of table `oid` would use: a valid btree index whose
/// first column it is (one that goes on with a second column preferred), as `name (columns)`.
pub async fn index_for(control: &Control, oid: u32, column: &str) -> Result<Option<String>> {
    let row = control
        .query_opt(
            "cannot read the outbox table's indexes",
            "SELECT ic.relname::text || ' (' || (SELECT string_agg(a.attname::text, ', ' ORDER BY k.n) \
               FROM unnest(i.indkey::int2[]) WITH ORDINALITY k(attnum, n) \
               JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum) || ')' \
             FROM pg_catalog.pg_index i \
             JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid \
             JOIN pg_catalog.pg_am am ON am.oid = ic.relam AND am.amname = 'btree' \
             JOIN pg_catalog.pg_attribute f ON f.attrelid = i.indrelid AND f.attnum = i.indkey[0] \
             WHERE i.indrelid = $1 AND f.attname = $2 AND i.indisvalid AND i.indpred IS NULL \
             ORDER BY i.indnatts >= 2 DESC, i.indisprimary DESC, ic.relname LIMIT 1",
            &[&oid, &column],
        )
        .await?;
    Ok(row.map(|r| r.get(0)))
}

/// One outbox table's part of a snapshot.
pub(super) struct TableRead {
    pub table: OutboxTable,
    /// The index the read goes by, as `name (columns)`; `None`: a full scan.
    pub index: Option<String>,
    column: AgeColumn,
    id: CatalogColumn,
    binding: Binding,
    /// `FROM … WHERE …` of the selection.
    from: String,
    select: String,
    order: Order,
    /// Rows in no particular order, for a reader that wants only where each record goes.
    unordered: bool,
    /// The unordered read's one query, once sent.
    stream: Option<Pin<Box<RowStream>>>,
    /// The cursor, once open; the last key read (col, id), as text, for keyset pages.
    cursor: Option<String>,
    last: Option<(String, String)>,
    finished: bool,
}

/// The column that says when a row was written, and the setting that named it (`--column`, or
/// `[retention] column` and its default), which errors blame.
#[derive(Debug, Clone)]
pub(super) struct TimeColumn {
    pub name: String,
    pub named_by: &'static str,
}

impl TableRead {
    pub async fn new(
        control: &Control,
        config: &Config,
        table: OutboxTable,
        column: &TimeColumn,
        sel: &Selection,
        order: Order,
        places_only: bool,
    ) -> Result<TableRead> {
        let column = retention::plan(control, &table, &column.name, column.named_by).await?.column;
        let relation = table.relation();
        let not_null: Vec<bool> = table.columns.iter().map(|c| c.not_null).collect();
        let binding =
            Router::new(config.router.clone()).bind(&relation, &not_null).map_err(|e| {
                Error::definite(
                    format!("outbox table {} cannot be routed: {e}", table.name),
                    "fix [router] or the table, as `walrelay check` says",
                )
            })?;
        let router = &config.router;
        let find = |name: &str| table.columns.iter().find(|c| c.name == name).cloned();
        let id = find(&router.field_event_id).expect("bound above");
        if id.type_oid == 2950 {
            if let Some(bad) = sel.ids.iter().find(|i| uuid::Uuid::parse_str(i).is_err()) {
                return Err(Error::definite(
                    format!("{bad:?} is not a UUID, which event ids of {} are", table.name),
                    "give event ids as the `id` header shows them, e.g. 0190a3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d, one per line in --ids FILE",
                ));
            }
        }
        let (c, i) = (quote(&column.name), quote(&id.name));
        let ty = column.sql_type;
        let mut conditions = Vec::new();
        if let Some(since) = &sel.since {
            conditions.push(format!("t.{c} >= ({})::{ty}", bound_sql(since)));
        }
        if let Some(until) = &sel.until {
            conditions.push(format!("t.{c} < ({})::{ty}", bound_sql(until)));
        }
        if !sel.ids.is_empty() {
            let list: Vec<String> = sel.ids.iter().map(|v| literal(v)).collect();
            conditions.push(format!(
                "t.{i} = ANY (ARRAY[{}]::text[]::{}[])",
                list.join(","),
                id.type_name
            ));
        }
        if let Some(t) = &sel.aggregate_type {
            conditions.push(format!("t.{}::text = {}", quote(&router.route_by_field), literal(t)));
        }
        if let Some(a) = &sel.aggregate_id {
            conditions.push(format!("t.{}::text = {}", quote(&router.field_event_key), literal(a)));
        }
        let from = format!("FROM {} t WHERE {}", table.name.quoted(), conditions.join(" AND "));
        // Only where each record goes: a JSON payload is read as `{}` (NULL stays NULL, and JSON
        // text is never blank, so a tombstone stays one), sparing the server the conversion of
        // every payload to text, most of a read's cost.
        let stand_in = binding.json_payload_only().filter(|_| places_only);
        let values: Vec<String> = table
            .columns
            .iter()
            .enumerate()
            .map(|(k, col)| match stand_in == Some(k) {
                true => {
                    format!("CASE WHEN t.{} IS NULL THEN NULL ELSE '{{}}' END", quote(&col.name))
                }
                false => format!("t.{}::text", quote(&col.name)),
            })
            .collect();
        let committed = match order {
            Order::Commit => {
                "(extract(epoch FROM pg_catalog.pg_xact_commit_timestamp(t.xmin)) * 1000000)::int8"
            }
            Order::Column => "NULL::int8",
        };
        let select = format!(
            "SELECT {}, (extract(epoch FROM t.{c}::timestamptz) * 1000000)::int8, \
             t.xmin::text::int8, t.{c}::text, t.{i}::text, {committed}",
            values.join(", ")
        );
        let key = if sel.ids.is_empty() { &column.name } else { &id.name };
        let index = index_for(control, table.oid, key).await?;
        Ok(TableRead {
            table,
            index,
            column,
            id,
            binding,
            from,
            select,
            order,
            unordered: places_only,
            stream: None,
            cursor: None,
            last: None,
            finished: false,
        })
    }

    /// The router's fields resolved against this table's columns.
    pub fn binding(&self) -> &Binding {
        &self.binding
    }

    /// Rows the selection holds in this table.
    pub async fn count(&self, control: &Control) -> Result<u64> {
        let sql = format!("SELECT count(*) {}", self.from);
        let rows = statement(control, &self.what(), &sql).await?;
        Ok(rows[0].get::<_, i64>(0) as u64)
    }

    /// A window that starts before what `[retention] keep` keeps was purged: the read would
    /// silently miss its start, so it stops here and says where the retained rows begin.
    pub async fn check_retained(
        &self,
        control: &Control,
        retention: Option<&RetentionConfig>,
        sel: &Selection,
    ) -> Result<()> {
        let (Some(retention), Some(since)) = (retention, &sel.since) else {
            return Ok(());
        };
        let c = quote(&self.column.name);
        let sql = format!(
            "SELECT ({since}) < now() - interval '{keep} seconds', \
             (SELECT min(t.{c})::text FROM {table} t), (now() - interval '{keep} seconds')::text",
            since = bound_sql(since),
            keep = retention.keep.as_secs(),
            table = self.table.name.quoted(),
        );
        let row = &statement(control, &self.what(), &sql).await?[0];
        if !row.get::<_, bool>(0) {
            return Ok(());
        }
        let oldest: Option<String> = row.get(1);
        let cutoff: String = row.get(2);
        let oldest = oldest.map_or("the table is empty".to_string(), |o| {
            format!("the oldest row left in {} was written {o}", self.table.name)
        });
        Err(Error::definite(
            format!(
                "--since reaches before what [retention] keeps: rows of {} older than {} ({cutoff}) are purged, so the replay would silently miss the start of the window; {oldest}",
                self.table.name,
                crate::duration::format(retention.keep),
            ),
            "start the window at the oldest retained row or later, or restore the rows from a backup first",
        ))
    }

    /// Which of `ids` (event ids, as text) are rows of this table, in the snapshot, whatever
    /// the window: the audit's test of a record Kafka holds that the window does not.
    pub async fn present_ids(&self, control: &Control, ids: &[String]) -> Result<Vec<String>> {
        // An id the column cannot hold is no row's, and would fail the cast of the whole list.
        let list: Vec<String> =
            ids.iter().filter(|v| self.holds_id(v)).map(|v| literal(v)).collect();
        if list.is_empty() {
            return Ok(Vec::new());
        }
        let i = quote(&self.id.name);
        let sql = format!(
            "SELECT t.{i}::text FROM {} t WHERE t.{i} = ANY (ARRAY[{}]::text[]::{}[])",
            self.table.name.quoted(),
            list.join(","),
            self.id.type_name
        );
        let rows = statement(control, &self.what(), &sql).await?;
        Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect())
    }

    /// Whether `text` is a value this table's id column can hold (a UUID for a `uuid` column,
    /// an integer for an integer one; any text otherwise).
    pub fn holds_id(&self, text: &str) -> bool {
        match self.id.type_oid {
            2950 => uuid::Uuid::parse_str(text).is_ok(),
            20 => text.parse::<i64>().is_ok(),
            23 => text.parse::<i32>().is_ok(),
            21 => text.parse::<i16>().is_ok(),
            _ => true,
        }
    }

    /// The next batch in the snapshot's order (or in none, for places only); `None` once the
    /// selection is read.
    pub async fn next_batch(&mut self, control: &Control) -> Result<Option<Vec<Row>>> {
        if self.finished {
            return Ok(None);
        }
        let rows = match self.unordered {
            true => self.next_streamed(control).await?,
            false => self.next_ordered(control).await?,
        };
        if rows.len() < BATCH_ROWS {
            self.finished = true;
        }
        if rows.is_empty() {
            return Ok(None);
        }
        let n = self.table.columns.len();
        let last = &rows[rows.len() - 1];
        self.last = Some((last.get(n + 2), last.get(n + 3)));
        let read = rows
            .iter()
            .map(|r| Row {
                tuple: Tuple(
                    (0..n)
                        .map(|k| match r.get::<_, Option<String>>(k) {
                            Some(text) => Value::Text(Bytes::from(text)),
                            None => Value::Null,
                        })
                        .collect(),
                ),
                commit: match r.get::<_, Option<i64>>(n + 4) {
                    Some(micros) => Commit { micros, exact: true },
                    None => {
                        Commit { micros: r.get::<_, Option<i64>>(n).unwrap_or(0), exact: false }
                    }
                },
                xid: r.get::<_, i64>(n + 1) as u32,
            })
            .collect();
        Ok(Some(read))
    }

    /// In order: a cursor for commit order and for a table without an index to page by
    /// (one sort of the selection instead of one per batch), keyset pages otherwise.
    async fn next_ordered(&mut self, control: &Control) -> Result<Vec<tokio_postgres::Row>> {
        let (c, i) = (quote(&self.column.name), quote(&self.id.name));
        let order_by = match self.order {
            Order::Commit => {
                format!("pg_catalog.pg_xact_commit_timestamp(t.xmin) NULLS FIRST, t.{c}, t.{i}")
            }
            Order::Column => format!("t.{c}, t.{i}"),
        };
        let sql = if self.order == Order::Commit || self.index.is_none() {
            if self.cursor.is_none() {
                let name = format!("walrelay_replay_{}", self.table.oid);
                let declare = format!(
                    "DECLARE {name} NO SCROLL CURSOR FOR {} {} ORDER BY {order_by}",
                    self.select, self.from
                );
                statement(control, &self.what(), &declare).await?;
                self.cursor = Some(name);
            }
            format!("FETCH {BATCH_ROWS} FROM {}", self.cursor.as_deref().unwrap_or_default())
        } else {
            let after = match &self.last {
                Some((col, id)) => format!(
                    " AND (t.{c}, t.{i}) > ({}::{}, {}::{})",
                    literal(col),
                    self.column.sql_type,
                    literal(id),
                    self.id.type_name
                ),
                None => String::new(),
            };
            format!("{} {}{after} ORDER BY {order_by} LIMIT {BATCH_ROWS}", self.select, self.from)
        };
        statement(control, &self.what(), &sql).await
    }

    /// In no order: one query whose rows the server streams while the caller works on the
    /// batch before (a round trip per batch would leave each side idle half the time). The
    /// connection holds one message ahead, so memory stays bounded.
    async fn next_streamed(&mut self, control: &Control) -> Result<Vec<tokio_postgres::Row>> {
        let what = self.what();
        let read = async {
            if self.stream.is_none() {
                let sql = format!("{} {}", self.select, self.from);
                let stream = control.client().query_raw(sql.as_str(), NO_PARAMETERS).await?;
                self.stream = Some(Box::pin(stream));
            }
            let stream = self.stream.as_mut().expect("opened above");
            let mut rows = Vec::with_capacity(BATCH_ROWS);
            while rows.len() < BATCH_ROWS {
                match stream.next().await {
                    Some(row) => rows.push(row?),
                    None => break,
                }
            }
            Ok(rows)
        };
        deadline(&what, read).await
    }

    fn what(&self) -> String {
        format!("cannot read outbox table {} for the replay", self.table.name)
    }
}

/// A statement of the snapshot, with its own deadline (the cursor's sort may take a while).
async fn statement(control: &Control, what: &str, sql: &str) -> Result<Vec<tokio_postgres::Row>> {
    deadline(what, control.client().query(sql, &[])).await
}

/// `read` within the deadline for a statement, its failure said as `what`.
async fn deadline<T>(
    what: &str,
    read: impl std::future::Future<Output = std::result::Result<T, tokio_postgres::Error>>,
) -> Result<T> {
    match tokio::time::timeout(STATEMENT_TIMEOUT, read).await {
        Ok(Ok(rows)) => Ok(rows),
        Ok(Err(e)) if pg_class(&e) == Class::Denied => Err(Error::definite_with(
            what,
            "the role needs SELECT on the outbox tables to replay them (GRANT SELECT ON … TO …)",
            e,
        )),
        Ok(Err(e)) => Err(classify_pg(what, e)),
        Err(_) => Err(Error::transient_msg(format!(
            "{what}: no answer within {} s",
            STATEMENT_TIMEOUT.as_secs()
        ))),
    }
}
