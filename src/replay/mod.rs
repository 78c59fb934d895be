//! Replay: re-publishing retained outbox rows on demand (`walrelay replay`).
//!
//! The live relay never reads the outbox table (I4); a replay does, because the rows Kafka no
//! longer holds (a deleted topic, an expired retention, a consumer that lost its state) are only
//! there, kept by `[retention] keep`. A replay:
//!
//! * reads one consistent snapshot (one `REPEATABLE READ READ ONLY` transaction) in batches
//!   ([`read`]), in commit order when the server records commit times
//!   (`track_commit_timestamp`), otherwise by the table's timestamp column and then the event id;
//! * turns each row into a record with the **same router and envelope** as the live relay, so
//!   the event id (header `id`), key and partition are the ones consumers already saw, and adds a
//!   header `walrelay.replay` with the replay's own id;
//! * publishes on a producer of its own ([`send`]), at most `--rate` events/s, and never touches
//!   the slot, so it runs beside the live relay.
//!
//! Logical-message events (the table-less outbox) are in no table: there is nothing to replay.

mod read;
mod send;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::config::{Config, RetentionConfig};
use crate::encoder::Encoder;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::router::{Binding, RawColumn, Record};
use crate::source::{self, catalog, Control};
use crate::txn::Txn;

pub use self::read::{index_for, order as read_order, Commit, Order, TimeColumn};

/// The header every replayed record carries: the replay's own id (a UUIDv7).
pub const REPLAY_HEADER: &str = "walrelay.replay";

/// Rows read per batch: a round trip per 1,000 rows is noise, and a batch's memory is small.
pub const BATCH_ROWS: usize = 1_000;

/// One end of the time window: a duration before now (`6h`), or a time (RFC 3339).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimeBound {
    Ago(Duration),
    At(String),
}

impl TimeBound {
    /// `6h` / `30m` / `7d` is a duration ([`crate::duration::parse`], as `purge` reads one); text
    /// that starts with a date (`2026-12-01`, `2026-12-01T10:00:00Z`) or is `now`, `today` or
    /// `yesterday` is a time, which PostgreSQL then reads. Anything else (`5x`, `1.5h`, `90`) is
    /// refused here, with the duration's rule, rather than handed to PostgreSQL, whose error
    /// would be about date styles.
    pub fn parse(text: &str) -> std::result::Result<TimeBound, String> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(
                "empty: give a duration before now (30m, 6h, 7d) or a time (2026-12-01T10:00:00Z)"
                    .into(),
            );
        }
        match crate::duration::parse(trimmed) {
            Ok(d) => Ok(TimeBound::Ago(d)),
            Err(_) if starts_with_date(trimmed) => Ok(TimeBound::At(trimmed.to_string())),
            Err(_)
                if ["now", "today", "yesterday"]
                    .contains(&trimmed.to_ascii_lowercase().as_str()) =>
            {
                Ok(TimeBound::At(trimmed.to_string()))
            }
            Err(not_a_duration) => Err(format!(
                "{not_a_duration}; or a time, an RFC 3339 date and time like 2026-12-01T10:00:00Z"
            )),
        }
    }
}

/// Why a window of two durations is empty (`--since 1h --until 2h`), known before connecting;
/// windows with a time in them are checked by PostgreSQL when the replay or audit opens.
pub fn inverted_window(since: Option<&TimeBound>, until: Option<&TimeBound>) -> Option<String> {
    let (Some(TimeBound::Ago(since)), Some(TimeBound::Ago(until))) = (since, until) else {
        return None;
    };
    (until >= since).then(|| {
        format!(
            "--until ({} ago) is not after --since ({} ago): the window is empty; give --until a shorter duration than --since",
            crate::duration::format(*until),
            crate::duration::format(*since)
        )
    })
}

/// `YYYY-MM-DD` at the start: the only way a time given to replay or audit begins.
fn starts_with_date(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() >= 10
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b'-'
        && b[8..10].iter().all(u8::is_ascii_digit)
}

/// Which rows a replay sends.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub since: Option<TimeBound>,
    pub until: Option<TimeBound>,
    /// Event ids (`table.field.event.id`); empty: select by time.
    pub ids: Vec<String>,
    /// Matched on `route.by.field`.
    pub aggregate_type: Option<String>,
    /// Matched on `table.field.event.key`.
    pub aggregate_id: Option<String>,
}

/// What one replay does.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub selection: Selection,
    /// The timestamp column; `None`: `[retention] column` (or its default).
    pub column: Option<String>,
    /// Everything to this topic instead of the routed one.
    pub to_topic: Option<String>,
    /// Events per second at most.
    pub rate: Option<u32>,
    /// Count per topic, send nothing.
    pub dry_run: bool,
    /// A selection of no rows opens (for the audit of a quiet window) instead of failing.
    pub allow_empty: bool,
    /// Only where each record goes is wanted (the audit, never a send): rows come in no
    /// particular order, and a JSON payload no other field reads is left out of the values.
    pub places_only: bool,
}

/// How far a replay got, after each batch.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Events the broker acknowledged (routed, in a dry run): a send is not progress until
    /// the broker took it, so a refused replay never shows 100 %.
    pub done: u64,
    pub total: u64,
    pub elapsed: Duration,
}

/// What a replay did (or, dry, would do).
#[derive(Debug, Clone)]
pub struct Summary {
    pub replay_id: String,
    pub dry_run: bool,
    pub events: u64,
    /// Events per topic.
    pub topics: BTreeMap<String, u64>,
    pub elapsed: Duration,
}

impl Summary {
    /// Events per second over the whole replay.
    pub fn rate(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// A replay with its snapshot open and its rows counted, ready to [`Replay::run`].
pub struct Replay<'c> {
    config: &'c Config,
    opts: Options,
    control: Control,
    tables: Vec<read::TableRead>,
    /// The timestamp column.
    column: TimeColumn,
    pub order: Order,
    /// Rows the selection holds in the snapshot, over every table.
    pub total: u64,
    pub replay_id: String,
    /// The table being read ([`Replay::next_records`]).
    current: usize,
}

impl<'c> Replay<'c> {
    /// Connects, opens the snapshot and counts the selection. Fails, before anything is sent,
    /// on bad input: an unknown or non-time column, a window retention already purged, ids that
    /// are not ids, a selection that matches nothing.
    pub async fn open(config: &'c Config, opts: Options) -> Result<Replay<'c>> {
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
        let order = read::order(&control).await?;
        read::check_times(&control, sel).await?;
        read::begin_snapshot(&control).await?;
        let mut reads = Vec::with_capacity(tables.len());
        let mut total = 0;
        for table in tables {
            let t = read::TableRead::new(
                &control,
                config,
                table,
                &column,
                sel,
                order,
                opts.places_only,
            )
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
        let replay_id = uuid::Uuid::now_v7().to_string();
        Ok(Replay {
            config,
            opts,
            control,
            tables: reads,
            column,
            order,
            total,
            replay_id,
            current: 0,
        })
    }

    /// The order rows go in, in words.
    pub fn order_text(&self) -> String {
        self.order.describe(&self.column.name, &self.config.router.field_event_id)
    }

    /// The index each table is read by, for the operator (`None`: no index, a full scan).
    pub fn indexes(&self) -> Vec<(String, Option<String>)> {
        self.tables.iter().map(|t| (t.table.name.to_string(), t.index.clone())).collect()
    }

    /// Sends the selection (or, dry, routes and counts it), calling `progress` after each batch.
    pub async fn run(
        mut self,
        metrics: Arc<Metrics>,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Summary> {
        let started = Instant::now();
        let mut encoder = Encoder::new(self.config);
        let mut sender = match self.opts.dry_run {
            true => None,
            false => Some(send::Sender::new(self.config, metrics, self.opts.rate)?),
        };
        let to_topic: Option<Arc<str>> = self.opts.to_topic.as_deref().map(Arc::from);
        let header: (Arc<str>, Bytes) =
            (Arc::from(REPLAY_HEADER), Bytes::from(self.replay_id.clone()));
        let mut topics: BTreeMap<String, u64> = BTreeMap::new();
        let mut done = 0u64;
        while let Some(records) = self.next_records(&mut encoder).await? {
            for (mut record, _) in records {
                place(&mut record, &to_topic, &header);
                if let Some(sender) = sender.as_mut() {
                    sender.send(&record).await?;
                }
                *topics.entry(record.topic.to_string()).or_default() += 1;
                done += 1;
            }
            if let Some(sender) = sender.as_mut() {
                sender.serve()?;
            }
            let acked = sender.as_ref().map_or(done, send::Sender::delivered);
            progress(Progress { done: acked, total: self.total, elapsed: started.elapsed() });
        }
        if let Some(sender) = sender.as_mut() {
            sender.flush().await?;
            progress(Progress { done, total: self.total, elapsed: started.elapsed() });
        }
        self.close().await;
        Ok(Summary {
            replay_id: self.replay_id,
            dry_run: self.opts.dry_run,
            events: done,
            topics,
            elapsed: started.elapsed(),
        })
    }

    /// The next batch of the selection as the live relay's records, in replay order (in none
    /// with `places_only`), each with when its row committed; `None` once it is all read.
    pub(crate) async fn next_records(
        &mut self,
        encoder: &mut Encoder,
    ) -> Result<Option<Vec<(Record, Commit)>>> {
        let Some(rows) = self.next_rows().await? else { return Ok(None) };
        let binding = self.tables[rows.table].binding();
        rows.records(encoder, binding).map(Some)
    }

    /// The next batch of one table's rows, as read, for a caller that routes them elsewhere
    /// ([`Rows::records`], with [`Replay::bindings`]); `None` once it is all read.
    pub(crate) async fn next_rows(&mut self) -> Result<Option<Rows>> {
        while let Some(table) = self.tables.get_mut(self.current) {
            match table.next_batch(&self.control).await? {
                Some(rows) => return Ok(Some(Rows { table: self.current, rows })),
                None => self.current += 1,
            }
        }
        Ok(None)
    }

    /// Each table's binding, by the index [`Rows::table`] gives.
    pub(crate) fn bindings(&self) -> Vec<Binding> {
        self.tables.iter().map(|t| t.binding().clone()).collect()
    }

    /// Which of `ids` are rows of the outbox tables (in the snapshot, whatever the window).
    pub(crate) async fn present_ids(
        &self,
        ids: &[String],
    ) -> Result<std::collections::HashSet<String>> {
        let mut present = std::collections::HashSet::new();
        for table in &self.tables {
            for chunk in ids.chunks(BATCH_ROWS) {
                present.extend(table.present_ids(&self.control, chunk).await?);
            }
        }
        Ok(present)
    }

    /// The connection the snapshot is open on (for what else the caller reads beside it).
    pub(crate) fn control(&self) -> &Control {
        &self.control
    }

    /// Ends the snapshot; it was read-only, so ending it changes nothing.
    pub(crate) async fn close(&self) {
        let _ = self.control.batch("COMMIT").await;
    }

    /// The order [`Replay::next_records`] goes in.
    pub(crate) fn commit_ordered(&self) -> bool {
        self.order == Order::Commit
    }
}

/// One batch of one table's rows, as read ([`Replay::next_rows`]).
pub(crate) struct Rows {
    /// The table's index in [`Replay::bindings`].
    pub table: usize,
    rows: Vec<read::Row>,
}

/// A row the router refuses, as the live relay's router refuses it (which dead-letters it, or
/// stops at it).
#[derive(Debug, Clone)]
pub(crate) struct Refused {
    pub event_id: Option<String>,
    pub reason: String,
}

impl Rows {
    /// The rows as the live relay's records, each with when its row committed; a row the
    /// router refuses stops the replay.
    pub(crate) fn records(
        self,
        encoder: &mut Encoder,
        binding: &Binding,
    ) -> Result<Vec<(Record, Commit)>> {
        self.routed(encoder, binding)
            .into_iter()
            .map(|r| r.map_err(|refused| unroutable(refused.event_id.as_deref(), &refused.reason)))
            .collect()
    }

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

/// `--to-topic`, and the replay's header after the router's.
fn place(record: &mut Record, to_topic: &Option<Arc<str>>, header: &(Arc<str>, Bytes)) {
    if let Some(topic) = to_topic {
        record.topic = topic.clone();
    }
    record.headers.push(header.clone());
}

fn unroutable(event_id: Option<&str>, e: &str) -> Error {
    let id = event_id.unwrap_or("(no id)");
    Error::definite(
        format!("replay stopped at event {id}, which cannot be routed: {e}"),
        "fix the row (the live relay dead-lettered or stopped on it too), or narrow the selection to leave it out; `--dry-run` finds such rows without sending anything",
    )
}

/// The selection in words, for messages.
pub fn describe(sel: &Selection) -> String {
    let bound = |b: &TimeBound| match b {
        TimeBound::Ago(d) => format!("{} ago", crate::duration::format(*d)),
        TimeBound::At(t) => t.clone(),
    };
    let mut parts = Vec::new();
    if !sel.ids.is_empty() {
        parts.push(format!("{} event id(s)", sel.ids.len()));
    }
    if let Some(s) = &sel.since {
        parts.push(format!("since {}", bound(s)));
    }
    if let Some(u) = &sel.until {
        parts.push(format!("until {}", bound(u)));
    }
    if let Some(t) = &sel.aggregate_type {
        parts.push(format!("aggregate type {t}"));
    }
    if let Some(a) = &sel.aggregate_id {
        parts.push(format!("aggregate id {a}"));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_time_bound_is_a_duration_or_a_time() {
        assert_eq!(TimeBound::parse("6h"), Ok(TimeBound::Ago(Duration::from_secs(6 * 3600))));
        assert_eq!(
            TimeBound::parse("2026-12-01T10:00:00Z"),
            Ok(TimeBound::At("2026-12-01T10:00:00Z".into()))
        );
        assert!(TimeBound::parse(" ").is_err());
        assert_eq!(TimeBound::parse("2026-12-01"), Ok(TimeBound::At("2026-12-01".into())));
        assert_eq!(TimeBound::parse("now"), Ok(TimeBound::At("now".into())));
    }

    #[test]
    fn replay_time_bound_refuses_what_is_neither_with_the_duration_rule() {
        for bad in ["5x", "1.5h", "90", "6 hours", "12/01/2026", "1h30m"] {
            let err = TimeBound::parse(bad).unwrap_err();
            assert!(err.contains("is not a duration") && err.contains("RFC 3339"), "{bad}: {err}");
            assert!(!err.to_lowercase().contains("datestyle"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_window_of_two_durations_is_empty_when_until_is_not_after_since() {
        let ago = |s| TimeBound::Ago(Duration::from_secs(s));
        let why = inverted_window(Some(&ago(3600)), Some(&ago(7200))).unwrap();
        assert!(why.starts_with("--until (2h ago) is not after --since (1h ago)"), "{why}");
        assert!(inverted_window(Some(&ago(3600)), Some(&ago(3600))).is_some());
        assert_eq!(inverted_window(Some(&ago(7200)), Some(&ago(3600))), None);
        assert_eq!(inverted_window(Some(&ago(60)), Some(&TimeBound::At("now".into()))), None);
        assert_eq!(inverted_window(None, Some(&ago(60))), None);
    }

    #[test]
    fn replay_describe_names_every_part_of_the_selection() {
        let sel = Selection {
            since: Some(TimeBound::Ago(Duration::from_secs(3600))),
            aggregate_type: Some("Order".into()),
            ..Selection::default()
        };
        assert_eq!(describe(&sel), "since 1h ago, aggregate type Order");
    }
}
