//! The event's fields that an envelope other than Debezium's needs beside the [`Record`]: the
//! aggregate type and id, the event type, the payload with its kind, and the `envelope`
//! placements, each as text. Debezium's output never reads them, so the default format never
//! pays for them (see [`Router::route_event`]).

use std::sync::Arc;

use bytes::Bytes;

use super::column::{Cv, Kind};
use super::convert::{simple_header_bytes, string_bytes, write_cv_json};
use super::{Binding, Col, Record, RouteError, Router, Tuple, Values};

/// How the payload's bytes are to be read, which decides its default content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadKind {
    /// JSON text: a `json`/`jsonb` column, or a message's payload member that is a JSON object,
    /// array, number or boolean (written back as JSON).
    Json,
    /// Raw bytes: a `bytea` column.
    Binary,
    /// Text of any other column type, or a message's payload member that is a JSON string.
    Text,
}

/// One routed event's fields, as an envelope (CloudEvents, protobuf) carries them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFields {
    /// The `route.by.field` value (`aggregatetype`).
    pub aggregate_type: Bytes,
    /// The key field's text (`aggregateid`); `None` when NULL.
    pub aggregate_id: Option<Bytes>,
    /// The `table.field.event.type` value; `None` when the field is absent or NULL.
    pub event_type: Option<Bytes>,
    /// The payload's bytes; `None` when NULL.
    pub payload: Option<Bytes>,
    pub payload_kind: PayloadKind,
    /// `route.tombstone.on.empty.payload` made the record a tombstone.
    pub tombstone: bool,
    /// The `envelope` placements, alias → text (as a `header` placement would carry it), in
    /// configuration order; NULL values are left out.
    pub additional: Vec<(Arc<str>, Bytes)>,
}

impl Router {
    /// [`Router::route`], plus the event's fields for an envelope.
    pub fn route_event(
        &mut self,
        b: &Binding,
        row: &Tuple,
    ) -> Result<(Record, EventFields), RouteError> {
        b.check_columns(row)?;
        let (record, fields) =
            self.route_values(b, Values::Row { vals: &row.0, kinds: &b.kinds }, true)?;
        Ok((record, fields.expect("asked for the fields")))
    }

    /// [`Router::route_message`], plus the event's fields for an envelope.
    pub fn route_message_event(
        &mut self,
        content: &Bytes,
    ) -> Result<(Record, EventFields), RouteError> {
        let (record, fields) = self.route_message_with(content, true)?;
        Ok((record, fields.expect("asked for the fields")))
    }

    /// The event's fields, from the values `route_values` has read already (the route field,
    /// the key's, the payload's) and the ones only an envelope needs.
    pub(super) fn event_fields(
        &self,
        b: &Binding,
        vals: Values<'_>,
        aggregate_type: Bytes,
        key: &Cv,
        payload_cv: &Cv,
        tombstone: bool,
    ) -> Result<EventFields, RouteError> {
        let aggregate_id = string_bytes(key);
        let event_type = match &b.event_type {
            Some(col) => string_bytes(&*vals.read(col)?),
            None => None,
        };
        let (payload, payload_kind) = payload_of(vals, &b.payload, payload_cv)?;
        let mut additional = Vec::with_capacity(b.envelope.len());
        for (alias, col) in &b.envelope {
            if let Some(text) = simple_header_bytes(&*vals.read(col)?) {
                additional.push((alias.clone(), text));
            }
        }
        Ok(EventFields {
            aggregate_type,
            aggregate_id,
            event_type,
            payload,
            payload_kind,
            tombstone,
            additional,
        })
    }
}

/// The payload's bytes and kind: a column's by its type; a message member's by its JSON type.
fn payload_of(
    vals: Values<'_>,
    col: &Col,
    cv: &Cv,
) -> Result<(Option<Bytes>, PayloadKind), RouteError> {
    let kind = match vals {
        Values::Row { kinds, .. } => match kinds[col.index] {
            Kind::Json => PayloadKind::Json,
            Kind::Bytea => PayloadKind::Binary,
            _ => PayloadKind::Text,
        },
        Values::Message(_) => match cv {
            Cv::Text(_) | Cv::Null => PayloadKind::Text,
            Cv::Bin(_) => PayloadKind::Binary,
            _ => PayloadKind::Json,
        },
    };
    let bytes = match (vals, cv) {
        (_, Cv::Null) => None,
        (Values::Message(_), Cv::Int(_) | Cv::Bool(_) | Cv::Double(_) | Cv::Array(_))
        | (Values::Message(_), Cv::Struct(_)) => {
            let mut out = Vec::with_capacity(128);
            write_cv_json(&mut out, cv).map_err(|r| col.invalid(r))?;
            Some(Bytes::from(out))
        }
        _ => string_bytes(cv),
    };
    Ok((bytes, kind))
}
