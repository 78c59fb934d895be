//! Which field plays which role: the router's options resolved against a Relation's columns or
//! a decoded message's members ([`Binding`]), and how an event's values are read ([`Values`]).

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;

use super::column::{self, Cv, Kind};
use super::convert::{Prim, Schema};
use super::options::{MissingBehavior, PlacementKind};
use super::{RawColumn, RouteError, Router};
use super::{ROLE_ID, ROLE_KEY, ROLE_PARTITION, ROLE_PAYLOAD, ROLE_PLACEMENT, ROLE_ROUTE};
use super::{ROLE_TIMESTAMP, ROLE_TYPE, ROLE_VERSION};
use crate::pgoutput::{Relation, Tuple, Value};

/// A configured field resolved against a Relation (a column) or a message's content (a
/// member): where its value is and its Connect schema.
#[derive(Debug, Clone)]
pub(super) struct Col {
    /// The column's index in the row, or the member's in the decoded content.
    pub(super) index: usize,
    pub(super) name: Arc<str>,
    /// `json` (not `jsonb`) text may repeat keys; Jackson keeps the last value.
    pub(super) dedupe_json: bool,
    pub(super) schema: Schema,
    /// `schema` as JsonConverter writes it; computed only when a converter writes schemas
    /// (empty otherwise, and then never read).
    pub(super) schema_json: Arc<str>,
}

impl Col {
    pub(super) fn invalid(&self, reason: String) -> RouteError {
        RouteError::InvalidValue { column: self.name.to_string(), reason }
    }
}

/// Where an event's values are: a pgoutput row, read by each column's type, or the members of a
/// decoded message, which already are Connect values.
#[derive(Clone, Copy)]
pub(super) enum Values<'a> {
    Row { vals: &'a [Value], kinds: &'a [Kind] },
    Message(&'a [Cv]),
}

impl Values<'_> {
    pub(super) fn read(&self, col: &Col) -> Result<Cow<'_, Cv>, RouteError> {
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
    pub(super) table: Arc<str>,
    /// The same, apart: (schema, table).
    pub(super) relation_name: (Arc<str>, Arc<str>),
    /// How pgoutput sends each column of the relation (empty for a message).
    pub(super) kinds: Vec<Kind>,
    pub(super) ncols: usize,
    pub(super) id: Col,
    pub(super) key: Col,
    pub(super) payload: Col,
    pub(super) route: Col,
    /// `table.field.event.type`, when the event has it (only envelopes read it).
    pub(super) event_type: Option<Col>,
    pub(super) timestamp: Option<(Col, TimeUnit)>,
    pub(super) schema_version: Option<Col>,
    pub(super) headers: Vec<(Arc<str>, Col)>,
    pub(super) envelope: Vec<(Arc<str>, Col)>,
    pub(super) partition: Option<Col>,
    /// The envelope struct's schema name is `.0` + the routed value + `.1`:
    /// `<topic.prefix>.<schema>.<table>.` and `.Value` for a row (the change event's value
    /// schema name with the route value inserted), nothing around it for a message (whose
    /// decoded content has no schema name).
    pub(super) envelope_name: (String, &'static str),
    /// The `__debezium.context.*` headers go first (when enabled): Debezium adds them to change
    /// events, never to messages.
    pub(super) extended_headers: bool,
    /// `tracing.span.context.field`, when the event has it.
    pub(super) trace: Option<Col>,
    /// The `[outbox] tenant_header` value: the row's schema name, as the header converter
    /// writes it (a row's only, when configured).
    pub(super) tenant: Option<Bytes>,
}

impl Binding {
    /// A row must have the relation's columns, or its values would land in the wrong roles.
    pub(super) fn check_columns(&self, row: &Tuple) -> Result<(), RouteError> {
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

    /// The payload's column when it is `json`/`jsonb` and no field but the record's value
    /// reads it: then where a record goes (topic, key, partition, headers, timestamp) does not
    /// depend on it, and whether the record is a tombstone depends only on its being NULL (JSON
    /// text is never blank).
    pub fn json_payload_only(&self) -> Option<usize> {
        let p = self.payload.index;
        if self.kinds.get(p) != Some(&Kind::Json) {
            return None;
        }
        let mut others = [&self.id, &self.key, &self.route]
            .into_iter()
            .chain(&self.event_type)
            .chain(self.timestamp.as_ref().map(|(c, _)| c))
            .chain(&self.schema_version)
            .chain(self.headers.iter().map(|(_, c)| c))
            .chain(self.envelope.iter().map(|(_, c)| c))
            .chain(&self.partition)
            .chain(&self.trace);
        (!others.any(|c| c.index == p)).then_some(p)
    }
}

/// The unit of an event timestamp field (`table.field.event.timestamp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TimeUnit {
    Millis,
    Micros,
}

/// The unit of a Debezium timestamp schema (`io.debezium.time.Timestamp` / `MicroTimestamp`),
/// the only ones the Event Router reads as a record timestamp.
pub(super) fn timestamp_unit(schema: &Schema) -> Option<TimeUnit> {
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
pub(super) enum Expect {
    String,
    Int32,
    Timestamp,
}

/// The fields an event offers, for [`Router::bind_fields`]: a Relation's columns or a decoded
/// message's members. It also words what is wrong with them, in the terms of its source.
pub(super) trait Shape {
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

impl Router {
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
        if self.cfg.tenant_header.is_some() {
            b.tenant = Some(super::text_header(self.cfg.header_converter, &relation.namespace));
        }
        b.kinds = kinds;
        Ok(b)
    }

    /// The roles of the router's options, resolved against `shape`'s fields, with Debezium's
    /// checks of their Connect types (the same for a column and for a message's member). The
    /// caller fills in where the fields come from.
    pub(super) fn bind_fields(&self, shape: &dyn Shape) -> Result<Binding, RouteError> {
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
        let trace = lookup(&cfg.trace_field);
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
            trace,
            tenant: None,
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
}
