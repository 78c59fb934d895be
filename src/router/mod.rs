//! Debezium Outbox Event Router, byte for byte.
//!
//! One committed INSERT into the outbox table becomes one Kafka record exactly as Debezium 3.6.3's
//! `EventRouter` SMT followed by the configured Kafka Connect converters would produce it
//! (peers.md §1, design.md §4). So does one logical decoding message (`pg_logical_emit_message`)
//! whose content is a JSON object of outbox columns, as Debezium's
//! `DecodeLogicalDecodingMessageContent` followed by the `EventRouter` would (`message.rs`). The
//! goldens in `tests/fixtures/debezium/` are the reference; the parity tests in
//! `golden_tests.rs` and `message_golden_tests.rs` replay every fixture row and message through
//! this module.
//!
//! Routing is kept apart from values: [`Router::bind_fields`] decides which field plays which
//! role (id, key, payload, route, timestamp, version, placements) against a [`Shape`] — a
//! Relation's columns or a message's members — and `route_values` reads them through [`Values`]
//! (a pgoutput row, or decoded Connect values), so every routing option works for both.
//!
//! Shape of the work: [`RouterConfig::parse`] once at start-up; [`Router::bind`] once per Relation
//! message (resolves column names to indexes and types); [`Router::route`] per row (index
//! lookups, a topic cache, and zero-copy `Bytes` slices where the value passes through unchanged);
//! [`Router::route_message`] per message (decode, bind by member name, route).
//!
//! Where walrelay deliberately differs from Debezium 3.6.3, for rows:
//! * With `table.expand.json.payload`, payloads Debezium 3.6.3 fails on (a top-level array of
//!   objects, integers beyond `long`, …) are emitted as valid JSON instead of failing the record
//!   (see `expand.rs` for the exact rules).
//! * A header placement whose column is NULL is omitted under the simple header converter
//!   (Kafka Connect would send a header with a null value, which [`Record`] cannot carry).
//! * `StringConverter` writes a `bytea` as its raw bytes (Connect would write Java's `[B@…`).
//! * With `table.field.event.schema.version`, the envelope schema uses each row's payload schema
//!   (Debezium reuses the first payload schema seen for that version).
//!
//! And for logical decoding messages (`tests/fixtures/debezium/messages/README.md` has the rules
//! this follows; the parity tests state each difference):
//! * A message Debezium 3.6.3 stops its task on — content that is empty, not JSON, preceded by
//!   whitespace or a byte-order mark, a JSON string or array; a missing or null `payload`, `id`,
//!   `aggregateid`, `aggregatetype` or placed member; a non-string `aggregatetype`; an array
//!   mixing types or number widths, or holding only nulls; a member with an empty name; an
//!   integer beyond 64 bits; `table.field.event.timestamp` (no JSON value is a timestamp) — is
//!   refused with a [`RouteError`] saying why, and the relay dead-letters it or stops at it with
//!   its LSN (design.md I8). Debezium stays down on it, restart after restart.
//! * Content is read as UTF-8 always; Debezium decodes it with the JVM's default charset (UTF-8
//!   on JDK 18+ and in UTF-8 locales; JDK 17 in a C/POSIX locale turns every non-ASCII byte into
//!   U+FFFD). Content that is not valid UTF-8 (only possible through the `bytea` form of
//!   `pg_logical_emit_message` or a non-UTF-8 database) is refused, not repaired with U+FFFD.
//! * An array of objects with different keys has its merged element fields in first-seen order;
//!   Debezium's order comes from a `HashSet` and differs between JVM runs (only JsonConverter
//!   output shows it; `Struct{…}` text is the same).
//! * With `fields.null.include`, an `id` member that is JSON `null` is refused, as a row's NULL
//!   id is; Debezium would send an `id` header without a value.
//! * Selection (`crate::messages`): without `message.prefix.include.list` or `.exclude.list`
//!   messages are ignored (Debezium captures every prefix); a non-transactional message is
//!   refused unless `[outbox] non_transactional_messages = "relay"` (Debezium relays it, even
//!   when its transaction rolls back); prefix patterns use Rust's regex syntax, and their
//!   case-insensitive match folds non-ASCII letters too (Java's folds ASCII only).
//! * `binary.handling.mode` has no counterpart: content is always read as bytes (Debezium fails
//!   every message unless it is `bytes`, its default).

mod column;
mod convert;
mod event;
mod expand;
mod json;
mod message;
mod options;
mod record;
mod topic;

#[cfg(test)]
mod expand_tests;
#[cfg(test)]
mod golden_tests;
#[cfg(test)]
mod message_golden_tests;
#[cfg(test)]
mod options_tests;
#[cfg(test)]
mod route_tests;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use self::column::{Cv, Kind};
use self::convert::{json_bytes, simple_header_bytes, string_bytes, Prim, Schema};
/// For the envelopes' own JSON and base64 (`crate::envelope`).
pub(crate) use self::convert::{write_base64, write_str as write_json_string};
pub use self::event::{EventFields, PayloadKind};
pub use self::message::event_id as message_event_id;
#[cfg(test)]
pub(crate) use self::options::NullBehavior;
use self::options::{Converter, HeaderConverter, MissingBehavior, PlacementKind};
pub use self::options::{InvalidOpBehavior, Options, RouterConfig};
use crate::pgoutput::{Relation, Tuple, Value};

/// Topic-cache size at which the cache is cleared (bounds memory for unbounded route values).
const TOPIC_CACHE_LIMIT: usize = 10_000;
/// Debezium's `payloadSchemaCache` size.
const SCHEMA_NAME_CACHE_LIMIT: usize = 10_000;
/// Payloads nested deeper than this are expanded on a thread with a [`DEEP_STACK_BYTES`] stack.
const INLINE_DEPTH: usize = 32;
const DEEP_STACK_BYTES: usize = 256 << 20;

/// The most headers an envelope adds besides one per extension (CloudEvents binary mode:
/// `content-type` and six `ce_*` attributes).
const ENVELOPE_HEADERS: usize = 7;

const ROLE_ID: &str = "event id (`table.field.event.id`)";
const ROLE_KEY: &str = "event key (`table.field.event.key`)";
const ROLE_PAYLOAD: &str = "payload (`table.field.event.payload`)";
const ROLE_ROUTE: &str = "topic route (`route.by.field`)";
const ROLE_TIMESTAMP: &str = "event timestamp (`table.field.event.timestamp`)";
const ROLE_VERSION: &str = "schema version (`table.field.event.schema.version`)";
const ROLE_PLACEMENT: &str = "additional field (`table.fields.additional.placement`)";
const ROLE_PARTITION: &str = "partition placement (`table.fields.additional.placement`)";
const ROLE_TYPE: &str =
    "event type (`table.field.event.type`), which CloudEvents require as the `type` attribute";

/// The columns of a row a dead letter carries when [`Router::route`] could not map it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawColumn {
    Key,
    Payload,
    EventId,
}

/// One Kafka record, ready for the producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub topic: Arc<str>,
    pub key: Option<Bytes>,
    /// `None` = tombstone / null value.
    pub value: Option<Bytes>,
    /// In Debezium's order: extended headers, `id`, then `header` placements in config order.
    pub headers: Vec<(Arc<str>, Bytes)>,
    /// From a `partition` placement; `None` = the producer's partitioner.
    pub partition: Option<i32>,
    /// From `table.field.event.timestamp`; `None` = the producer's clock (Debezium's processing
    /// time).
    pub timestamp_ms: Option<i64>,
    /// The id column's text, for logs and dead letters.
    pub event_id: String,
}

/// Why a Relation cannot be bound or a row cannot be routed. Each message names the column or
/// value and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error(
        "table {table} has no column `{column}`, which the router needs as the {role}; add the \
         column (and publish it), or point the option at an existing column"
    )]
    MissingColumn { column: String, role: &'static str, table: String },
    #[error(
        "column `{column}` of table {table} is {found}, but the {role} must be {expected}; change \
         the column's type or the option"
    )]
    ColumnType {
        column: String,
        role: &'static str,
        table: String,
        found: &'static str,
        expected: &'static str,
    },
    #[error("column `{column}` ({role}) is NULL, so the row cannot be routed; make the column NOT NULL or fix the row")]
    NullValue { column: String, role: &'static str },
    #[error(
        "topic {topic:?} is not a valid Kafka topic name: {reason}; fix the row's `route.by.field` \
         value or `route.topic.regex` / `route.topic.replacement`"
    )]
    InvalidTopic { topic: String, reason: String },
    #[error("column `{column}` has a value the router cannot convert: {reason}")]
    InvalidValue { column: String, reason: String },
    #[error(
        "a row of table {table} has {found} columns but its Relation message announced {expected}; \
         bind the latest Relation message before routing its rows"
    )]
    ColumnCount { table: String, expected: usize, found: usize },
    #[error(
        "the message content is not an outbox event: {reason}; emit a JSON object whose members \
         are the outbox columns (`id`, `aggregatetype`, `aggregateid`, `payload`, …)"
    )]
    Content { reason: String },
    #[error(
        "the message content has no member `{member}` (or it is null), which the router needs as \
         the {role}; add it to the JSON object the application emits, or point the option at \
         another member"
    )]
    MissingMember { member: String, role: &'static str },
    #[error(
        "member `{member}` of the message content is {found}, but the {role} must be {expected}"
    )]
    MemberType { member: String, role: &'static str, found: &'static str, expected: &'static str },
}

/// A configured field resolved against a Relation (a column) or a message's content (a
/// member): where its value is and its Connect schema.
#[derive(Debug, Clone)]
struct Col {
    /// The column's index in the row, or the member's in the decoded content.
    index: usize,
    name: Arc<str>,
    /// `json` (not `jsonb`) text may repeat keys; Jackson keeps the last value.
    dedupe_json: bool,
    schema: Schema,
    /// `schema` as JsonConverter writes it; computed only when a converter writes schemas
    /// (empty otherwise, and then never read).
    schema_json: Arc<str>,
}

impl Col {
    fn invalid(&self, reason: String) -> RouteError {
        RouteError::InvalidValue { column: self.name.to_string(), reason }
    }
}

/// Where an event's values are: a pgoutput row, read by each column's type, or the members of a
/// decoded message, which already are Connect values.
#[derive(Clone, Copy)]
enum Values<'a> {
    Row { vals: &'a [Value], kinds: &'a [Kind] },
    Message(&'a [Cv]),
}

impl Values<'_> {
    fn read(&self, col: &Col) -> Result<Cow<'_, Cv>, RouteError> {
        match self {
            Values::Row { vals, kinds } => column::read(kinds[col.index], &vals[col.index])
                .map(Cow::Owned)
                .map_err(|reason| col.invalid(reason)),
            Values::Message(members) => Ok(Cow::Borrowed(&members[col.index])),
        }
    }
}

/// The router's fields resolved against one Relation message (or one message's content): which
/// field plays which role, so [`Router::route`] is index lookups.
#[derive(Debug, Clone)]
pub struct Binding {
    /// `schema.table` as the Relation message named it (empty for a message).
    table: Arc<str>,
    /// The same, apart: (schema, table).
    relation_name: (Arc<str>, Arc<str>),
    /// How pgoutput sends each column of the relation (empty for a message).
    kinds: Vec<Kind>,
    ncols: usize,
    id: Col,
    key: Col,
    payload: Col,
    route: Col,
    /// `table.field.event.type`, when the event has it (only envelopes read it).
    event_type: Option<Col>,
    timestamp: Option<(Col, TimeUnit)>,
    schema_version: Option<Col>,
    headers: Vec<(Arc<str>, Col)>,
    envelope: Vec<(Arc<str>, Col)>,
    partition: Option<Col>,
    /// The envelope struct's schema name is `.0` + the routed value + `.1`:
    /// `<topic.prefix>.<schema>.<table>.` and `.Value` for a row (the change event's value
    /// schema name with the route value inserted), nothing around it for a message (whose
    /// decoded content has no schema name).
    envelope_name: (String, &'static str),
    /// The `__debezium.context.*` headers go first (when enabled): Debezium adds them to change
    /// events, never to messages.
    extended_headers: bool,
}

impl Binding {
    /// A row must have the relation's columns, or its values would land in the wrong roles.
    fn check_columns(&self, row: &Tuple) -> Result<(), RouteError> {
        match row.0.len() == self.ncols {
            true => Ok(()),
            false => Err(RouteError::ColumnCount {
                table: self.table.to_string(),
                expected: self.ncols,
                found: row.0.len(),
            }),
        }
    }

    /// `schema.table` of the relation this binding is for.
    pub fn table(&self) -> &Arc<str> {
        &self.table
    }

    /// The schema and the name of the relation this binding is for.
    pub fn relation_name(&self) -> (&str, &str) {
        (&self.relation_name.0, &self.relation_name.1)
    }
}

/// The unit of an event timestamp field (`table.field.event.timestamp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TimeUnit {
    Millis,
    Micros,
}

/// The unit of a Debezium timestamp schema (`io.debezium.time.Timestamp` / `MicroTimestamp`),
/// the only ones the Event Router reads as a record timestamp.
fn timestamp_unit(schema: &Schema) -> Option<TimeUnit> {
    match schema {
        Schema::Prim { ty: Prim::Int64, name: Some("io.debezium.time.Timestamp"), .. } => {
            Some(TimeUnit::Millis)
        }
        Schema::Prim { ty: Prim::Int64, name: Some("io.debezium.time.MicroTimestamp"), .. } => {
            Some(TimeUnit::Micros)
        }
        _ => None,
    }
}

/// What [`Router::bind_fields`] requires of a field's Connect schema.
#[derive(Debug, Clone, Copy)]
enum Expect {
    String,
    Int32,
    Timestamp,
}

/// The fields an event offers, for [`Router::bind_fields`]: a Relation's columns or a decoded
/// message's members. It also words what is wrong with them, in the terms of its source.
trait Shape {
    /// The field called `name`: its index and Connect schema, or `None` when absent.
    fn field(&self, name: &str) -> Option<(usize, Schema, bool)>;
    fn missing(&self, name: &str, role: &'static str) -> RouteError;
    fn wrong_type(&self, col: &Col, role: &'static str, expected: Expect) -> RouteError;
}

struct RelationShape<'a> {
    relation: &'a Relation,
    table: &'a str,
    kinds: &'a [Kind],
    not_null: &'a [bool],
}

impl Shape for RelationShape<'_> {
    fn field(&self, name: &str) -> Option<(usize, Schema, bool)> {
        let index = self.relation.columns.iter().position(|c| c.name == name)?;
        let optional = !self.not_null.get(index).copied().unwrap_or(false);
        let dedupe_json = self.relation.columns[index].type_oid != 3802;
        Some((index, self.kinds[index].schema(optional), dedupe_json))
    }

    fn missing(&self, name: &str, role: &'static str) -> RouteError {
        RouteError::MissingColumn { column: name.to_owned(), role, table: self.table.to_owned() }
    }

    fn wrong_type(&self, col: &Col, role: &'static str, expected: Expect) -> RouteError {
        RouteError::ColumnType {
            column: col.name.to_string(),
            role,
            table: self.table.to_owned(),
            found: self.kinds[col.index].describe(),
            expected: match expected {
                Expect::String => "a string type (text, varchar, …)",
                Expect::Int32 => "int4",
                Expect::Timestamp => "`timestamp` (without time zone)",
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum SchemaNameKey {
    Payload(Schema),
    Version(Option<i32>),
}

/// Routes outbox rows to Kafka records. Holds the per-run caches.
#[derive(Debug)]
pub struct Router {
    cfg: RouterConfig,
    run_id: String,
    extended: Vec<(Arc<str>, Bytes)>,
    id_header: Arc<str>,
    topics: HashMap<Box<[u8]>, Arc<str>>,
    schema_names: HashMap<SchemaNameKey, Arc<str>>,
}

impl Router {
    /// A router for one run; the run id (`__debezium.context.runId`) is a fresh UUIDv7.
    pub fn new(cfg: RouterConfig) -> Router {
        let run_id = uuid::Uuid::now_v7().to_string();
        let context = [
            ("__debezium.context.connectorLogicalName", cfg.topic_prefix.as_str()),
            ("__debezium.context.taskId", "0"),
            ("__debezium.context.connectorName", "postgresql"),
            ("__debezium.context.runId", run_id.as_str()),
        ];
        let string_schema = Kind::Text.schema(false).to_json();
        let extended = if cfg.extended_headers {
            context
                .iter()
                .map(|(name, value)| {
                    let cv = Cv::Text(Bytes::copy_from_slice(value.as_bytes()));
                    let bytes = match cfg.header_converter {
                        HeaderConverter::Simple => simple_header_bytes(&cv).expect("not null"),
                        HeaderConverter::Json { schemas } => {
                            json_bytes(&cv, schemas.then_some(string_schema.as_str()))
                                .expect("UTF-8")
                        }
                    };
                    (Arc::from(*name), bytes)
                })
                .collect()
        } else {
            Vec::new()
        };
        Router {
            cfg,
            run_id,
            extended,
            id_header: Arc::from("id"),
            topics: HashMap::new(),
            schema_names: HashMap::new(),
        }
    }

    /// The run id sent in `__debezium.context.runId` (when extended headers are on).
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The configuration this router was built from.
    pub fn config(&self) -> &RouterConfig {
        &self.cfg
    }

    /// Resolves the configured columns against a Relation message once, so [`Router::route`]
    /// is index lookups. `not_null[i]` is `pg_attribute.attnotnull` of column `i` (it decides
    /// `"optional"` in JSON-with-schemas output); an empty slice means "unknown: nullable".
    pub fn bind(&self, relation: &Relation, not_null: &[bool]) -> Result<Binding, RouteError> {
        let table = format!("{}.{}", relation.namespace, relation.name);
        let kinds: Vec<Kind> =
            relation.columns.iter().map(|c| Kind::from_pg(c.type_oid, c.type_modifier)).collect();
        let shape = RelationShape { relation, table: &table, kinds: &kinds, not_null };
        let mut b = self.bind_fields(&shape)?;
        b.envelope_name = (
            format!("{}.{}.{}.", self.cfg.topic_prefix, relation.namespace, relation.name),
            ".Value",
        );
        b.extended_headers = true;
        b.ncols = relation.columns.len();
        b.table = Arc::from(table);
        b.relation_name =
            (Arc::from(relation.namespace.as_str()), Arc::from(relation.name.as_str()));
        b.kinds = kinds;
        Ok(b)
    }

    /// The roles of the router's options, resolved against `shape`'s fields, with Debezium's
    /// checks of their Connect types (the same for a column and for a message's member). The
    /// caller fills in where the fields come from.
    fn bind_fields(&self, shape: &dyn Shape) -> Result<Binding, RouteError> {
        let cfg = &self.cfg;
        let schemas_needed = cfg.writes_schemas();
        let unused: Arc<str> = Arc::from("");
        let lookup = |name: &str| -> Option<Col> {
            let (index, schema, dedupe_json) = shape.field(name)?;
            let schema_json =
                if schemas_needed { Arc::from(schema.to_json()) } else { unused.clone() };
            Some(Col { index, name: Arc::from(name), dedupe_json, schema, schema_json })
        };
        let find =
            |name: &str, role: &'static str| lookup(name).ok_or_else(|| shape.missing(name, role));
        let checked = |col: Col, role: &'static str, expected: Expect| {
            let ok = match expected {
                Expect::String => col.schema.is_prim(Prim::String),
                Expect::Int32 => col.schema.is_prim(Prim::Int32),
                Expect::Timestamp => timestamp_unit(&col.schema).is_some(),
            };
            if ok {
                Ok(col)
            } else {
                Err(shape.wrong_type(&col, role, expected))
            }
        };

        // In the order Debezium's `EventRouterDelegate.apply` reads them, so the first problem
        // named is the one Debezium stops on.
        let payload = find(&cfg.field_payload, ROLE_PAYLOAD)?;
        let id = find(&cfg.field_event_id, ROLE_ID)?;
        let timestamp = match &cfg.field_timestamp {
            None => None,
            Some(name) => {
                let col = checked(find(name, ROLE_TIMESTAMP)?, ROLE_TIMESTAMP, Expect::Timestamp)?;
                let unit = timestamp_unit(&col.schema).expect("checked above");
                Some((col, unit))
            }
        };
        let schema_version = match (&cfg.field_schema_version, cfg.has_envelope()) {
            (Some(name), true) => {
                Some(checked(find(name, ROLE_VERSION)?, ROLE_VERSION, Expect::Int32)?)
            }
            _ => None,
        };
        let (mut headers, mut envelope, mut partition) = (Vec::new(), Vec::new(), None);
        for p in &cfg.placements {
            let Some(col) = lookup(&p.column) else {
                match cfg.additional_missing {
                    MissingBehavior::Ignore => continue,
                    MissingBehavior::Error => return Err(shape.missing(&p.column, ROLE_PLACEMENT)),
                }
            };
            match p.kind {
                PlacementKind::Header => headers.push((Arc::from(p.alias.as_str()), col)),
                PlacementKind::Envelope => envelope.push((Arc::from(p.alias.as_str()), col)),
                PlacementKind::Partition => {
                    partition = Some(checked(col, ROLE_PARTITION, Expect::Int32)?);
                }
            }
        }
        let key = find(&cfg.field_event_key, ROLE_KEY)?;
        let route = checked(find(&cfg.route_by_field, ROLE_ROUTE)?, ROLE_ROUTE, Expect::String)?;
        let event_type = match lookup(&cfg.field_event_type) {
            None if cfg.event_type_required => {
                return Err(shape.missing(&cfg.field_event_type, ROLE_TYPE))
            }
            found => found,
        };
        Ok(Binding {
            table: Arc::from(""),
            relation_name: (Arc::from(""), Arc::from("")),
            kinds: Vec::new(),
            ncols: 0,
            id,
            key,
            payload,
            route,
            event_type,
            timestamp,
            schema_version,
            headers,
            envelope,
            partition,
            envelope_name: (String::new(), ""),
            extended_headers: false,
        })
    }

    /// The raw text of a row's key, payload or event id column, whatever its state: what a
    /// dead letter carries when [`Router::route`] could not map the row.
    pub fn raw(&self, b: &Binding, row: &Tuple, column: RawColumn) -> Option<Bytes> {
        let col = match column {
            RawColumn::Key => &b.key,
            RawColumn::Payload => &b.payload,
            RawColumn::EventId => &b.id,
        };
        match row.0.get(col.index) {
            Some(Value::Text(t) | Value::Binary(t)) => Some(t.clone()),
            _ => None,
        }
    }

    /// One committed INSERT row → one Kafka record.
    pub fn route(&mut self, b: &Binding, row: &Tuple) -> Result<Record, RouteError> {
        b.check_columns(row)?;
        self.route_values(b, Values::Row { vals: &row.0, kinds: &b.kinds }, false)
            .map(|(record, _)| record)
    }

    /// A logical decoding message's content → one Kafka record, routed as a row whose columns
    /// are the content's top-level members (Debezium's `DecodeLogicalDecodingMessageContent`,
    /// then its `EventRouter`). Message records never carry the `__debezium.context.*`
    /// headers: Debezium adds them to change events only.
    ///
    /// Content nested deeper than [`INLINE_DEPTH`] is decoded and routed on a short-lived
    /// thread with a stack large enough for any depth Jackson accepts, as expansion is.
    pub fn route_message(&mut self, content: &Bytes) -> Result<Record, RouteError> {
        self.route_message_with(content, false).map(|(record, _)| record)
    }

    /// [`Router::route_message`], with the event's fields when `fields` (for an envelope).
    fn route_message_with(
        &mut self,
        content: &Bytes,
        fields: bool,
    ) -> Result<(Record, Option<EventFields>), RouteError> {
        // Counting brackets is one vectorised pass; only content with enough of them can nest
        // deeper than INLINE_DEPTH, and only that is scanned properly.
        let brackets = content.iter().filter(|&&b| b == b'{' || b == b'[').count();
        let deep = brackets > INLINE_DEPTH
            && std::str::from_utf8(content)
                .is_ok_and(|text| json::nesting_exceeds(text, INLINE_DEPTH));
        if !deep {
            return self.route_message_on_this_stack(content, fields);
        }
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("walrelay-message".into())
                .stack_size(DEEP_STACK_BYTES)
                .spawn_scoped(scope, || self.route_message_on_this_stack(content, fields))
                .map_err(|e| RouteError::Content {
                    reason: format!("cannot start a thread to decode deeply nested content: {e}"),
                })?
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    fn route_message_on_this_stack(
        &mut self,
        content: &Bytes,
        fields: bool,
    ) -> Result<(Record, Option<EventFields>), RouteError> {
        let decoded = message::decode(content, self.cfg.message_nulls)?;
        let binding = self.bind_fields(&decoded.shape())?;
        let values = Values::Message(&decoded.values);
        self.route_values(&binding, values, fields)
    }

    /// An event's values → one Kafka record, the same way for a row and a message; with
    /// `fields`, also the event's fields for an envelope, from the same reads.
    fn route_values(
        &mut self,
        b: &Binding,
        vals: Values<'_>,
        fields: bool,
    ) -> Result<(Record, Option<EventFields>), RouteError> {
        let id = vals.read(&b.id)?;
        let event_id = match &*id {
            Cv::Null => {
                return Err(RouteError::NullValue { column: b.id.name.to_string(), role: ROLE_ID })
            }
            other => String::from_utf8_lossy(&string_bytes(other).unwrap_or_default()).into_owned(),
        };

        let route_value = match &*vals.read(&b.route)? {
            Cv::Text(t) => t.clone(),
            _ => {
                return Err(RouteError::NullValue {
                    column: b.route.name.to_string(),
                    role: ROLE_ROUTE,
                })
            }
        };
        let topic = self.topic(&route_value)?;

        let key_value = vals.read(&b.key)?;
        let key = self.key(&b.key, &key_value)?;

        let extended: &[(Arc<str>, Bytes)] = if b.extended_headers { &self.extended } else { &[] };
        // Room for an envelope's headers too, so adding them does not reallocate.
        let room = if fields { ENVELOPE_HEADERS + b.envelope.len() } else { 0 };
        let mut headers = Vec::with_capacity(extended.len() + 1 + b.headers.len() + room);
        headers.extend(extended.iter().cloned());
        if let Some(h) = self.header(&b.id, &id)? {
            headers.push((self.id_header.clone(), h));
        }
        for (alias, col) in &b.headers {
            if let Some(h) = self.header(col, &*vals.read(col)?)? {
                headers.push((alias.clone(), h));
            }
        }

        let partition = match &b.partition {
            Some(col) => match &*vals.read(col)? {
                Cv::Int(t) => Some(
                    std::str::from_utf8(t)
                        .ok()
                        .and_then(|s| s.parse::<i32>().ok())
                        .ok_or_else(|| col.invalid("not an int4 value".into()))?,
                ),
                _ => None,
            },
            None => None,
        };
        let timestamp_ms = match &b.timestamp {
            Some((col, unit)) => match &*vals.read(col)? {
                Cv::Ts(v) if *unit == TimeUnit::Micros => Some(v / 1000),
                Cv::Ts(v) => Some(*v),
                _ => None,
            },
            None => None,
        };

        let payload = vals.read(&b.payload)?;
        let tombstone = self.cfg.tombstone_on_empty_payload && payload.is_blank();
        let value = if tombstone {
            None
        } else {
            match self.cfg.value_converter {
                Converter::String => string_bytes(&payload),
                Converter::Json { schemas } => {
                    let route_text = String::from_utf8_lossy(&route_value);
                    Some(self.json_value(b, vals, &payload, schemas, &route_text, &event_id)?)
                }
            }
        };

        let fields = match fields {
            true => {
                Some(self.event_fields(b, vals, route_value, &key_value, &payload, tombstone)?)
            }
            false => None,
        };
        Ok((Record { topic, key, value, headers, partition, timestamp_ms, event_id }, fields))
    }
}
