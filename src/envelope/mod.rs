//! Envelopes: what a routed event looks like on the wire.
//!
//! The router (`crate::router`) decides everything Debezium's Event Router decides — topic, key,
//! partition, timestamp, the `id` header and the placements — and an envelope then decides the
//! value and its describing headers. The default, `debezium`, is the router's record as it is,
//! byte for byte. The others replace the value:
//!
//! * `cloudevents-binary` (`cloudevents.rs`): the payload, unchanged, with the CloudEvents
//!   attributes in `ce_*` headers and the payload's media type in `content-type`;
//! * `cloudevents-structured` (`cloudevents.rs`): one JSON event (`data` inline for JSON,
//!   `data_base64` for bytes);
//! * `cloudevents-protobuf` (`cloudevents.rs`): one CloudEvent in the CloudEvents protobuf
//!   format (`proto/io/cloudevents/v1/cloudevents.proto`);
//! * `protobuf` (`protobuf.rs`): an encoded `walrelay.v1.Event` (`proto/walrelay/v1/event.proto`).
//!
//! Every routing option applies to every format: the key, topic, partition and timestamp stay
//! the router's, its headers are kept (so `id` is always there for deduplication), and
//! `envelope` placements become the event's own fields. Options that only shape a Kafka
//! Connect value are refused at start-up (`config.rs`).
//!
//! Knows nothing of PostgreSQL or Kafka I/O: the relay hands it the transaction's facts.

mod cloudevents;
mod cloudevents_protobuf;
mod config;
pub mod proto;
mod protobuf;
mod wire;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

pub use self::config::{parse, EnvelopeConfig, Format, DEFAULT_SOURCE};
use crate::router::{EventFields, PayloadKind, Record, RouteError, RouterConfig};
use crate::trace::Trace;
use crate::txn::Txn;

/// Where an event was written: an outbox table or a logical decoding message's prefix.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    /// `schema.table`, or `message:<prefix>`: what `${table}` in `source` becomes.
    pub label: &'a str,
    pub schema: &'a str,
    pub table: &'a str,
    pub message_prefix: Option<&'a str>,
}

impl<'a> Origin<'a> {
    pub fn table(label: &'a str, schema: &'a str, table: &'a str) -> Origin<'a> {
        Origin { label, schema, table, message_prefix: None }
    }

    /// `label` is `message:<prefix>`.
    pub fn message(label: &'a str, prefix: &'a str) -> Origin<'a> {
        Origin { label, schema: "", table: "", message_prefix: Some(prefix) }
    }
}

/// What is fixed per origin: its CloudEvents `source`, and its protobuf `Source` fields.
#[derive(Debug)]
struct Place {
    source: Bytes,
    schema: String,
    table: String,
    message_prefix: Option<String>,
}

/// Turns routed events into records of the configured format (through `crate::encoder`).
#[derive(Debug)]
pub struct Envelope {
    cfg: EnvelopeConfig,
    database: String,
    /// `table.field.event.type`, for the error when a CloudEvent's `type` is NULL.
    type_field: String,
    /// `table.field.event.payload`, for the error when a payload is not the JSON it claims.
    payload_field: String,
    /// `[envelope] content_type`, ready for a header.
    content_type_header: Option<Bytes>,
    places: HashMap<Box<str>, Arc<Place>>,
    names: cloudevents::HeaderNames,
    /// The last commit time formatted (RFC 3339): a transaction's events share it.
    time: (i64, Bytes),
}

/// Origins cached at most (one per outbox table and message prefix, in practice).
const PLACE_CACHE_LIMIT: usize = 1_000;

impl Envelope {
    pub fn new(cfg: EnvelopeConfig, router: &RouterConfig, database: &str) -> Envelope {
        Envelope {
            content_type_header: cfg.content_type.as_ref().map(|ct| Bytes::from(ct.clone())),
            cfg,
            database: database.to_owned(),
            type_field: router.field_event_type.clone(),
            payload_field: router.field_payload.clone(),
            places: HashMap::new(),
            names: cloudevents::HeaderNames::default(),
            time: (i64::MIN, Bytes::new()),
        }
    }

    pub fn format(&self) -> Format {
        self.cfg.format
    }

    /// Whether records pass through unchanged, so the router need not gather event fields.
    pub fn is_debezium(&self) -> bool {
        self.cfg.format == Format::Debezium
    }

    /// The record of the configured format for an event the router routed to `record`.
    pub fn wrap(
        &mut self,
        mut record: Record,
        fields: EventFields,
        txn: &Txn,
        origin: Origin<'_>,
    ) -> Result<Record, RouteError> {
        let mut fields = fields;
        if let Some(trace) = record.trace.take() {
            carry_trace(&trace, &mut record, &mut fields, self.cfg.format);
            record.trace = Some(trace);
        }
        // A tombstone stays a tombstone: a structured CloudEvent always has a value, which log
        // compaction would keep, so both structured modes send binary mode's event without data.
        let format = match self.cfg.format {
            Format::CloudEventsStructured | Format::CloudEventsProtobuf if fields.tombstone => {
                Format::CloudEventsBinary
            }
            format => format,
        };
        match format {
            Format::Debezium => Ok(record),
            Format::CloudEventsBinary => self.cloudevents_binary(record, fields, txn, origin),
            Format::CloudEventsStructured => {
                self.cloudevents_structured(record, fields, txn, origin)
            }
            Format::CloudEventsProtobuf => self.cloudevents_protobuf(record, fields, txn, origin),
            Format::Protobuf => Ok(self.protobuf(record, fields, txn, origin)),
        }
    }

    /// The payload's media type: `[envelope] content_type`, or the column type's.
    fn content_type(&self, kind: PayloadKind) -> &str {
        match (&self.cfg.content_type, kind) {
            (Some(ct), _) => ct,
            (None, PayloadKind::Json) => "application/json",
            (None, PayloadKind::Binary) => "application/octet-stream",
            (None, PayloadKind::Text) => "text/plain; charset=utf-8",
        }
    }

    fn place(&mut self, origin: Origin<'_>) -> Arc<Place> {
        if let Some(p) = self.places.get(origin.label) {
            return p.clone();
        }
        if self.places.len() >= PLACE_CACHE_LIMIT {
            self.places.clear();
        }
        let source = self
            .cfg
            .source
            .replace("${database}", &self.database)
            .replace("${table}", origin.label);
        let place = Arc::new(Place {
            source: Bytes::from(source),
            schema: origin.schema.to_owned(),
            table: origin.table.to_owned(),
            message_prefix: origin.message_prefix.map(str::to_owned),
        });
        self.places.insert(origin.label.into(), place.clone());
        place
    }

    /// The commit time as RFC 3339 text, UTC, microseconds.
    fn time(&mut self, micros: i64) -> Bytes {
        if self.time.0 != micros {
            self.time = (micros, Bytes::from(crate::duration::rfc3339(micros)));
        }
        self.time.1.clone()
    }
}

/// The record's trace context, where the format carries it: the CloudEvents distributed
/// tracing extension (`traceparent`, `tracestate` attributes: `ce_traceparent` headers in binary
/// mode, members of the event otherwise), or W3C headers beside `walrelay.v1.Event`, which has
/// no field for it. A `traceparent` placement, if any, keeps its value.
fn carry_trace(trace: &Trace, record: &mut Record, fields: &mut EventFields, format: Format) {
    let mut pairs = vec![("traceparent", Bytes::from(trace.traceparent()))];
    if let Some(state) = &trace.state {
        pairs.push(("tracestate", Bytes::from(state.clone())));
    }
    let placed = |name: &str, fields: &EventFields, record: &Record| {
        fields.additional.iter().any(|(a, _)| &**a == name)
            || record.headers.iter().any(|(h, _)| h.eq_ignore_ascii_case(name))
    };
    if placed("traceparent", fields, record) {
        return;
    }
    for (name, value) in pairs {
        match format {
            Format::Debezium => {}
            Format::Protobuf => record.headers.push((Arc::from(name), value)),
            _ => fields.additional.push((Arc::from(name), value)),
        }
    }
}

/// Text for a protobuf `string`, which must be UTF-8: as it is when it is (always, in a UTF-8
/// database), with U+FFFD for invalid bytes otherwise.
fn utf8(b: &Bytes) -> std::borrow::Cow<'_, [u8]> {
    match std::str::from_utf8(b) {
        Ok(_) => std::borrow::Cow::Borrowed(b),
        Err(_) => std::borrow::Cow::Owned(String::from_utf8_lossy(b).into_owned().into_bytes()),
    }
}
