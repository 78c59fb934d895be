//! Debezium Outbox Event Router, byte for byte.
//!
//! One committed INSERT into the outbox table becomes one Kafka record exactly as Debezium 3.6.3's
//! `EventRouter` SMT followed by the configured Kafka Connect converters would produce it. So
//! does one logical decoding message (`pg_logical_emit_message`) whose content is a JSON object
//! of outbox columns, as Debezium's
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
//!   its LSN. Debezium stays down on it, restart after restart.
//! * Content is read as UTF-8 always; Debezium decodes it with the JVM's default charset (UTF-8
//!   on JDK 18+ and in UTF-8 locales; JDK 17 in a C/POSIX locale turns every non-ASCII byte into
//!   U+FFFD). Content that is not valid UTF-8 (only possible through the `bytea` form of
//!   `pg_logical_emit_message` or a non-UTF-8 database) is refused, not repaired with U+FFFD.
//! * An array of objects with different keys has its merged element fields in first-seen order;
//!   Debezium's order comes from a `HashSet` and differs between JVM runs (only JsonConverter
//!   output shows it; `Struct{…}` text is the same).
//! * With `fields.null.include`, an `id` member that is JSON `null` is refused, as a row's NULL
//!   id is; Debezium would send an `id` header without a value.
//! * Selection (`crate::message_selection`): without `message.prefix.include.list` or `.exclude.list`
//!   messages are ignored (Debezium captures every prefix); a non-transactional message is
//!   refused unless `[outbox] non_transactional_messages = "relay"` (Debezium relays it, even
//!   when its transaction rolls back); prefix patterns use Rust's regex syntax, and their
//!   case-insensitive match folds non-ASCII letters too (Java's folds ASCII only).
//! * `binary.handling.mode` has no counterpart: content is always read as bytes (Debezium fails
//!   every message unless it is `bytes`, its default).

mod avro;
mod binding;
mod column;
mod convert;
mod converters;
mod event;
mod expand;
mod json;
mod json_schema;
mod message_content;
mod options;
mod protobuf;
mod record;
mod topic;
mod trace_context;

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

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;

/// For values rewritten under a registered schema (`crate::registry`).
pub(crate) use self::avro::{write_long as write_avro_long, FRAME_RESERVED};
pub use self::binding::Binding;
use self::binding::{Col, TimeUnit, Values};
use self::column::{Cv, Kind};
use self::convert::{json_bytes, simple_header_bytes, string_bytes, Schema};
/// For the envelopes' own JSON and base64 (`crate::envelope`).
pub(crate) use self::convert::{write_base64, write_str as write_json_string};
use self::converters::{Converter, HeaderConverter};
pub use self::event::{EventFields, PayloadKind};
pub use self::message_content::event_id as message_event_id;
#[cfg(test)]
pub(crate) use self::options::NullBehavior;
pub use self::options::{InvalidOpBehavior, Options, RouterConfig};
pub(crate) use self::protobuf::{delimited as protobuf_delimited, varint as protobuf_varint};
pub use self::topic::validate_topic;
use crate::metrics::Metrics;
use crate::pgoutput::Tuple;
/// For the tests, which build Relations and rows through `super::*`.
#[cfg(test)]
use crate::pgoutput::{Relation, Value};
use crate::trace::{SpanIds, Trace};

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

/// The header every replayed record carries: the replay's own id (a UUIDv7). The audit reads it
/// to tell a replay's copies from the relay's, and a sink to tell a replay from a resend.
pub const REPLAY_HEADER: &str = "walrelay.replay";

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
    /// The trace the record carries on (`tracing.span.context.field`); its headers are in
    /// `headers` already, or an envelope adds them as its own attributes.
    pub trace: Option<Trace>,
    /// A registry converter's value: the schema it was written with, whose registry id the
    /// value's first bytes await (`crate::registry` frames it before it is sent).
    pub value_schema: Option<Arc<str>>,
    /// The same for the key, with `key.converter = "avro"`.
    pub key_schema: Option<Arc<str>>,
}

impl Record {
    /// A record of `topic` with no key, value or header, for tests (and the benchmark) to fill
    /// in with struct update syntax.
    pub fn bare(topic: &str, event_id: &str) -> Record {
        Record {
            topic: Arc::from(topic),
            key: None,
            value: None,
            headers: Vec::new(),
            partition: None,
            timestamp_ms: None,
            event_id: event_id.to_string(),
            trace: None,
            value_schema: None,
            key_schema: None,
        }
    }

    /// What the record weighs in memory and on the wire: key, value and headers. The in-flight
    /// limits (I7) count this.
    pub fn size(&self) -> usize {
        self.key.as_ref().map_or(0, |k| k.len())
            + self.value.as_ref().map_or(0, |v| v.len())
            + self.headers.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
    }
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

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum SchemaNameKey {
    Payload(Schema),
    Version(Option<i32>),
}

/// A header of a text value that no column holds (Debezium's context headers, the tenant), as
/// the header converter writes a required Connect STRING.
pub(super) fn text_header(converter: HeaderConverter, value: &str) -> Bytes {
    let cv = Cv::Text(Bytes::copy_from_slice(value.as_bytes()));
    match converter {
        HeaderConverter::Simple => simple_header_bytes(&cv).expect("not null"),
        HeaderConverter::Json { schemas } => {
            let schema = schemas.then(|| Kind::Text.schema(false).to_json());
            json_bytes(&cv, schema.as_deref()).expect("UTF-8")
        }
    }
}

/// An envelope's schema, its registered text and Protobuf message indexes.
type EnvelopeKnown = (Arc<Schema>, Arc<str>, &'static [u8]);

/// Routes outbox rows to Kafka records. Holds the per-run caches.
#[derive(Debug)]
pub struct Router {
    cfg: RouterConfig,
    run_id: String,
    extended: Vec<(Arc<str>, Bytes)>,
    id_header: Arc<str>,
    topics: HashMap<Box<[u8]>, Arc<str>>,
    /// The table-and-value key of `topics` for a route that depends on the table, built here
    /// so a lookup allocates nothing.
    topic_key: Vec<u8>,
    schema_names: HashMap<SchemaNameKey, Arc<str>>,
    /// Registry converters: the registered schema text per Connect schema, and the Protobuf
    /// message indexes (bounded like `schema_names`).
    registry_schemas: HashMap<Schema, (Arc<str>, &'static [u8])>,
    /// `key.converter = "avro"` or `"protobuf"`: the registered text of each key column's
    /// Connect schema, and Protobuf's message indexes.
    key_schemas: HashMap<Schema, (Arc<str>, &'static [u8])>,
    /// Registry converters with envelope placements: per table and payload schema, the
    /// envelope's schema and its registered text (bounded like `schema_names`).
    envelope_schemas: HashMap<Arc<str>, HashMap<Schema, EnvelopeKnown>>,
    /// Ids of the relay's spans and of the traces it starts.
    span_ids: SpanIds,
    /// Relations whose invalid span context was logged already: once each.
    trace_warned: HashSet<Arc<str>>,
    /// Where invalid span contexts are counted; none in tools that route without a relay.
    metrics: Option<Arc<Metrics>>,
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
        let extended = if cfg.extended_headers {
            context
                .iter()
                .map(|(name, value)| (Arc::from(*name), text_header(cfg.header_converter, value)))
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
            topic_key: Vec::new(),
            schema_names: HashMap::new(),
            registry_schemas: HashMap::new(),
            key_schemas: HashMap::new(),
            envelope_schemas: HashMap::new(),
            span_ids: SpanIds::default(),
            trace_warned: HashSet::new(),
            metrics: None,
        }
    }

    /// Counts invalid span contexts into `metrics` (`walrelay_trace_context_invalid`).
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Router {
        self.metrics = Some(metrics);
        self
    }

    /// The run id sent in `__debezium.context.runId` (when extended headers are on).
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The configuration this router was built from.
    pub fn config(&self) -> &RouterConfig {
        &self.cfg
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
        let decoded = message_content::decode(content, self.cfg.message_nulls)?;
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
        let topic = self.topic(b, &route_value)?;

        let key_value = vals.read(&b.key)?;
        let (key, key_schema) = self.key(&b.key, &key_value)?;

        let extended: &[(Arc<str>, Bytes)] = if b.extended_headers { &self.extended } else { &[] };
        // Room for an envelope's headers too, so adding them does not reallocate.
        let room = if fields { ENVELOPE_HEADERS + b.envelope.len() } else { 0 };
        let mut headers = Vec::with_capacity(extended.len() + 1 + b.headers.len() + room);
        headers.extend(extended.iter().cloned());
        // Where Debezium's tracing SMT put them: on the change event, before the router adds `id`.
        let trace = self.trace(b, vals, &mut headers)?;
        if let Some(h) = self.header(&b.id, &id)? {
            headers.push((self.id_header.clone(), h));
        }
        for (alias, col) in &b.headers {
            if let Some(h) = self.header(col, &*vals.read(col)?)? {
                headers.push((alias.clone(), h));
            }
        }
        if let (Some(name), Some(tenant)) = (&self.cfg.tenant_header, &b.tenant) {
            headers.push((name.clone(), tenant.clone()));
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
        let mut value_schema = None;
        let value = if tombstone {
            None
        } else {
            match self.cfg.value_converter {
                Converter::String => string_bytes(&payload),
                Converter::Json { schemas } => {
                    let route_text = String::from_utf8_lossy(&route_value);
                    Some(self.json_value(b, vals, &payload, schemas, &route_text, &event_id)?)
                }
                // A null value, as Avro's and Protobuf's converters serialize it: no bytes and
                // no schema (with envelope placements the value is a struct whose `payload` is
                // null). JsonSchemaConverter writes a framed `null` under the payload's schema.
                Converter::Avro | Converter::Protobuf
                    if matches!(*payload, Cv::Null) && !self.cfg.has_envelope() =>
                {
                    None
                }
                Converter::Avro | Converter::Protobuf | Converter::JsonSchema => {
                    let route_text = String::from_utf8_lossy(&route_value);
                    let (value, schema) =
                        self.registry_value(b, vals, &payload, &route_text, &event_id)?;
                    value_schema = Some(schema);
                    Some(value)
                }
            }
        };

        let fields = match fields {
            true => {
                Some(self.event_fields(b, vals, route_value, &key_value, &payload, tombstone)?)
            }
            false => None,
        };
        Ok((
            Record {
                topic,
                key,
                value,
                headers,
                partition,
                timestamp_ms,
                event_id,
                trace,
                value_schema,
                key_schema,
            },
            fields,
        ))
    }
}
