//! Debezium Outbox Event Router, byte for byte.
//!
//! One committed INSERT into the outbox table becomes one Kafka record exactly as Debezium 3.6.3's
//! `EventRouter` SMT followed by the configured Kafka Connect converters would produce it
//! (peers.md §1, design.md §4). The goldens in `tests/fixtures/debezium/` are the reference; the
//! parity tests in `golden_tests.rs` replay every fixture row through this module.
//!
//! Shape of the work: [`RouterConfig::parse`] once at start-up; [`Router::bind`] once per Relation
//! message (resolves column names to indexes and types); [`Router::route`] per row (index
//! lookups, a topic cache, and zero-copy `Bytes` slices where the value passes through unchanged).
//!
//! Where walrelay deliberately differs from Debezium 3.6.3:
//! * With `table.expand.json.payload`, payloads Debezium 3.6.3 fails on (a top-level array of
//!   objects, integers beyond `long`, …) are emitted as valid JSON instead of failing the record
//!   (see `expand.rs` for the exact rules).
//! * A header placement whose column is NULL is omitted under the simple header converter
//!   (Kafka Connect would send a header with a null value, which [`Record`] cannot carry).
//! * `StringConverter` writes a `bytea` as its raw bytes (Connect would write Java's `[B@…`).
//! * With `table.field.event.schema.version`, the envelope schema uses each row's payload schema
//!   (Debezium reuses the first payload schema seen for that version).

mod column;
mod convert;
mod expand;
mod json;
mod options;
mod record;
mod topic;

#[cfg(test)]
mod expand_tests;
#[cfg(test)]
mod golden_tests;
#[cfg(test)]
mod options_tests;
#[cfg(test)]
mod route_tests;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use self::column::{Cv, Kind};
use self::convert::{json_bytes, simple_header_bytes, string_bytes, Schema};
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

const ROLE_ID: &str = "event id (`table.field.event.id`)";
const ROLE_KEY: &str = "event key (`table.field.event.key`)";
const ROLE_PAYLOAD: &str = "payload (`table.field.event.payload`)";
const ROLE_ROUTE: &str = "topic route (`route.by.field`)";
const ROLE_TIMESTAMP: &str = "event timestamp (`table.field.event.timestamp`)";
const ROLE_VERSION: &str = "schema version (`table.field.event.schema.version`)";
const ROLE_PLACEMENT: &str = "additional field (`table.fields.additional.placement`)";
const ROLE_PARTITION: &str = "partition placement (`table.fields.additional.placement`)";

/// A row's raw columns, for dead letters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRow {
    /// `schema.table`.
    pub table: String,
    pub key: Option<Bytes>,
    pub payload: Option<Bytes>,
    pub event_id: Option<String>,
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
}

/// A configured column resolved against a Relation.
#[derive(Debug, Clone)]
struct Col {
    index: usize,
    name: Arc<str>,
    kind: Kind,
    /// `json` (not `jsonb`) text may repeat keys; Jackson keeps the last value.
    dedupe_json: bool,
    schema: Schema,
    schema_json: Arc<str>,
}

impl Col {
    fn read(&self, row: &[Value]) -> Result<Cv, RouteError> {
        column::read(self.kind, &row[self.index]).map_err(|reason| self.invalid(reason))
    }

    fn invalid(&self, reason: String) -> RouteError {
        RouteError::InvalidValue { column: self.name.to_string(), reason }
    }
}

/// The router's columns resolved against one Relation message.
#[derive(Debug, Clone)]
pub struct Binding {
    /// `schema.table` as the Relation message named it.
    table: Arc<str>,
    ncols: usize,
    id: Col,
    key: Col,
    payload: Col,
    route: Col,
    timestamp: Option<Col>,
    schema_version: Option<Col>,
    headers: Vec<(Arc<str>, Col)>,
    envelope: Vec<(String, Col)>,
    partition: Option<Col>,
    /// `<topic.prefix>.<schema>.<table>.`: the start of the envelope struct's schema name.
    envelope_name_base: String,
}

impl Binding {
    /// `schema.table` of the relation this binding is for.
    pub fn table(&self) -> &Arc<str> {
        &self.table
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
        let cfg = &self.cfg;
        let table = format!("{}.{}", relation.namespace, relation.name);
        let lookup = |name: &str| -> Option<Col> {
            let index = relation.columns.iter().position(|c| c.name == name)?;
            let c = &relation.columns[index];
            let kind = Kind::from_pg(c.type_oid, c.type_modifier);
            let schema = kind.schema(!not_null.get(index).copied().unwrap_or(false));
            Some(Col {
                index,
                name: Arc::from(name),
                kind,
                dedupe_json: c.type_oid != 3802,
                schema_json: Arc::from(schema.to_json()),
                schema,
            })
        };
        let missing = |column: &str, role: &'static str| RouteError::MissingColumn {
            column: column.to_owned(),
            role,
            table: table.clone(),
        };
        let find = |name: &str, role: &'static str| lookup(name).ok_or_else(|| missing(name, role));
        let wrong_type =
            |col: &Col, role: &'static str, expected: &'static str| RouteError::ColumnType {
                column: col.name.to_string(),
                role,
                table: table.clone(),
                found: col.kind.describe(),
                expected,
            };

        let route = find(&cfg.route_by_field, ROLE_ROUTE)?;
        if !route.kind.is_string() {
            return Err(wrong_type(&route, ROLE_ROUTE, "a string type (text, varchar, …)"));
        }
        let timestamp = match &cfg.field_timestamp {
            None => None,
            Some(name) => {
                let col = find(name, ROLE_TIMESTAMP)?;
                if !matches!(col.kind, Kind::TimestampMillis | Kind::TimestampMicros) {
                    return Err(wrong_type(
                        &col,
                        ROLE_TIMESTAMP,
                        "`timestamp` (without time zone)",
                    ));
                }
                Some(col)
            }
        };
        let schema_version = match (&cfg.field_schema_version, cfg.has_envelope()) {
            (Some(name), true) => {
                let col = find(name, ROLE_VERSION)?;
                if col.kind != Kind::Int32 {
                    return Err(wrong_type(&col, ROLE_VERSION, "int4"));
                }
                Some(col)
            }
            _ => None,
        };
        let (mut headers, mut envelope, mut partition) = (Vec::new(), Vec::new(), None);
        for p in &cfg.placements {
            let Some(col) = lookup(&p.column) else {
                match cfg.additional_missing {
                    MissingBehavior::Ignore => continue,
                    MissingBehavior::Error => return Err(missing(&p.column, ROLE_PLACEMENT)),
                }
            };
            match p.kind {
                PlacementKind::Header => headers.push((Arc::from(p.alias.as_str()), col)),
                PlacementKind::Envelope => envelope.push((p.alias.clone(), col)),
                PlacementKind::Partition => {
                    if col.kind != Kind::Int32 {
                        return Err(wrong_type(&col, ROLE_PARTITION, "int4"));
                    }
                    partition = Some(col);
                }
            }
        }
        Ok(Binding {
            ncols: relation.columns.len(),
            id: find(&cfg.field_event_id, ROLE_ID)?,
            key: find(&cfg.field_event_key, ROLE_KEY)?,
            payload: find(&cfg.field_payload, ROLE_PAYLOAD)?,
            route,
            timestamp,
            schema_version,
            headers,
            envelope,
            partition,
            envelope_name_base: format!(
                "{}.{}.{}.",
                cfg.topic_prefix, relation.namespace, relation.name
            ),
            table: Arc::from(table),
        })
    }

    /// One committed INSERT row → one Kafka record.
    /// The raw text of a row's key, payload and event id columns, whatever their state: what a
    /// dead letter carries when [`Router::route`] could not map the row.
    pub fn raw(&self, b: &Binding, row: &Tuple) -> RawRow {
        let text = |c: &Col| match row.0.get(c.index) {
            Some(Value::Text(t) | Value::Binary(t)) => Some(t.clone()),
            _ => None,
        };
        RawRow {
            table: b.table.to_string(),
            key: text(&b.key),
            payload: text(&b.payload),
            event_id: text(&b.id).map(|t| String::from_utf8_lossy(&t).into_owned()),
        }
    }

    pub fn route(&mut self, b: &Binding, row: &Tuple) -> Result<Record, RouteError> {
        let vals = &row.0[..];
        if vals.len() != b.ncols {
            return Err(RouteError::ColumnCount {
                table: b.table.to_string(),
                expected: b.ncols,
                found: vals.len(),
            });
        }
        let id = b.id.read(vals)?;
        let event_id = match &id {
            Cv::Null => {
                return Err(RouteError::NullValue { column: b.id.name.to_string(), role: ROLE_ID })
            }
            other => String::from_utf8_lossy(&string_bytes(other).unwrap_or_default()).into_owned(),
        };

        let Cv::Text(route_value) = b.route.read(vals)? else {
            return Err(RouteError::NullValue {
                column: b.route.name.to_string(),
                role: ROLE_ROUTE,
            });
        };
        let topic = self.topic(&route_value)?;

        let key = self.key(b, vals)?;

        let mut headers = Vec::with_capacity(self.extended.len() + 1 + b.headers.len());
        headers.extend(self.extended.iter().cloned());
        if let Some(h) = self.header(&b.id, &id)? {
            headers.push((self.id_header.clone(), h));
        }
        for (alias, col) in &b.headers {
            if let Some(h) = self.header(col, &col.read(vals)?)? {
                headers.push((alias.clone(), h));
            }
        }

        let partition = match &b.partition {
            Some(col) => match col.read(vals)? {
                Cv::Int(t) => Some(
                    std::str::from_utf8(&t)
                        .ok()
                        .and_then(|s| s.parse::<i32>().ok())
                        .ok_or_else(|| col.invalid("not an int4 value".into()))?,
                ),
                _ => None,
            },
            None => None,
        };
        let timestamp_ms = match &b.timestamp {
            Some(col) => match col.read(vals)? {
                Cv::Ts(v) if col.kind == Kind::TimestampMicros => Some(v / 1000),
                Cv::Ts(v) => Some(v),
                _ => None,
            },
            None => None,
        };

        let payload = b.payload.read(vals)?;
        let value = if self.cfg.tombstone_on_empty_payload && payload.is_blank() {
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

        Ok(Record { topic, key, value, headers, partition, timestamp_ms, event_id })
    }
}
