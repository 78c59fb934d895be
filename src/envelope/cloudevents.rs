//! CloudEvents 1.0 in the Kafka protocol binding: binary content mode (the payload as the value,
//! attributes in `ce_*` headers) and structured content mode (the JSON event format as the
//! value). <https://github.com/cloudevents/spec/blob/v1.0.2/cloudevents/bindings/kafka-protocol-binding.md>
//!
//! Attributes: `specversion` 1.0, `id` (event id), `source` (`[envelope] source`), `type` (the
//! event type field), `time` (the commit time), `subject` (the aggregate id, when not NULL),
//! `datacontenttype`, and one extension per `envelope` placement (its alias, its text).

use std::sync::Arc;

use bytes::Bytes;

use super::{Envelope, Origin};
use crate::router::{
    write_base64, write_json_string, EventFields, PayloadKind, Record, RouteError,
};
use crate::txn::Txn;

const ROLE_TYPE: &str = "event type (`table.field.event.type`), the CloudEvents `type`";
const STRUCTURED_CONTENT_TYPE: &[u8] = b"application/cloudevents+json; charset=UTF-8";

/// Header names, allocated once: a record's headers share them.
#[derive(Debug)]
pub(super) struct HeaderNames {
    pub content_type: Arc<str>,
    specversion: Arc<str>,
    id: Arc<str>,
    source: Arc<str>,
    ty: Arc<str>,
    time: Arc<str>,
    subject: Arc<str>,
    /// `ce_<alias>` per extension alias seen.
    extensions: Vec<(Arc<str>, Arc<str>)>,
}

impl Default for HeaderNames {
    fn default() -> Self {
        HeaderNames {
            content_type: Arc::from("content-type"),
            specversion: Arc::from("ce_specversion"),
            id: Arc::from("ce_id"),
            source: Arc::from("ce_source"),
            ty: Arc::from("ce_type"),
            time: Arc::from("ce_time"),
            subject: Arc::from("ce_subject"),
            extensions: Vec::new(),
        }
    }
}

impl HeaderNames {
    fn extension(&mut self, alias: &Arc<str>) -> Arc<str> {
        if let Some((_, name)) = self.extensions.iter().find(|(a, _)| a == alias) {
            return name.clone();
        }
        let name: Arc<str> = Arc::from(format!("ce_{alias}"));
        self.extensions.push((alias.clone(), name.clone()));
        name
    }
}

/// The attributes every CloudEvent of one record has, read once (`id` is the record's
/// `event_id`).
pub(super) struct Attributes {
    pub source: Bytes,
    pub ty: Bytes,
    pub time: Bytes,
    pub subject: Option<Bytes>,
}

impl Envelope {
    pub(super) fn attributes(
        &mut self,
        fields: &mut EventFields,
        txn: &Txn,
        origin: Origin<'_>,
    ) -> Result<Attributes, RouteError> {
        let ty = fields.event_type.take().ok_or_else(|| RouteError::NullValue {
            column: self.type_field.clone(),
            role: ROLE_TYPE,
        })?;
        Ok(Attributes {
            source: self.place(origin).source.clone(),
            ty,
            time: self.time(txn.commit_micros),
            subject: fields.aggregate_id.take(),
        })
    }

    /// Binary content mode. A tombstone, or an event whose payload is NULL, is an event
    /// without data: no value and no `content-type` (binding §3.2.2).
    pub(super) fn cloudevents_binary(
        &mut self,
        mut record: Record,
        mut fields: EventFields,
        txn: &Txn,
        origin: Origin<'_>,
    ) -> Result<Record, RouteError> {
        let a = self.attributes(&mut fields, txn, origin)?;
        let id = Bytes::copy_from_slice(record.event_id.as_bytes());
        let data = if fields.tombstone { None } else { fields.payload.take() };
        let content_type = data.as_ref().map(|_| self.content_type_bytes(fields.payload_kind));
        let extensions: Vec<(Arc<str>, Bytes)> = fields
            .additional
            .into_iter()
            .map(|(alias, value)| (self.names.extension(&alias), value))
            .collect();
        let n = &self.names;
        let h = &mut record.headers;
        h.reserve(7 + extensions.len());
        if let Some(ct) = content_type {
            h.push((n.content_type.clone(), ct));
        }
        h.push((n.specversion.clone(), Bytes::from_static(b"1.0")));
        h.push((n.id.clone(), id));
        h.push((n.source.clone(), a.source));
        h.push((n.ty.clone(), a.ty));
        h.push((n.time.clone(), a.time));
        if let Some(subject) = a.subject {
            h.push((n.subject.clone(), subject));
        }
        h.extend(extensions);
        record.value = data;
        Ok(record)
    }

    /// Structured content mode, JSON event format (a tombstone is sent in binary mode: see
    /// [`Envelope::wrap`]).
    pub(super) fn cloudevents_structured(
        &mut self,
        mut record: Record,
        mut fields: EventFields,
        txn: &Txn,
        origin: Origin<'_>,
    ) -> Result<Record, RouteError> {
        let a = self.attributes(&mut fields, txn, origin)?;
        let payload_len = fields.payload.as_ref().map_or(0, |p| p.len());
        let mut out = Vec::with_capacity(payload_len * 4 / 3 + 256);
        out.extend_from_slice(b"{\"specversion\":\"1.0\",\"id\":");
        write_json_string(&mut out, &record.event_id);
        member(&mut out, b",\"source\":", &a.source);
        member(&mut out, b",\"type\":", &a.ty);
        // RFC 3339 text of our own making: nothing in it to escape.
        out.extend_from_slice(b",\"time\":\"");
        out.extend_from_slice(&a.time);
        out.push(b'"');
        if let Some(subject) = &a.subject {
            member(&mut out, b",\"subject\":", subject);
        }
        for (alias, value) in &fields.additional {
            out.push(b',');
            write_json_string(&mut out, alias);
            member(&mut out, b":", value);
        }
        if let Some(payload) = &fields.payload {
            let content_type = self.content_type(fields.payload_kind);
            member(&mut out, b",\"datacontenttype\":", content_type.as_bytes());
            self.write_data(&mut out, payload, fields.payload_kind)?;
        }
        out.push(b'}');
        record.value = Some(Bytes::from(out));
        record
            .headers
            .push((self.names.content_type.clone(), Bytes::from_static(STRUCTURED_CONTENT_TYPE)));
        Ok(record)
    }

    /// `data` as JSON when the content type is JSON, `data_base64` for bytes, a JSON string
    /// for other text (JSON event format §3.1).
    fn write_data(
        &self,
        out: &mut Vec<u8>,
        payload: &Bytes,
        kind: PayloadKind,
    ) -> Result<(), RouteError> {
        let json = is_json(self.content_type(kind));
        match std::str::from_utf8(payload) {
            Ok(text) if kind != PayloadKind::Binary && json => {
                // json/jsonb text is valid JSON by PostgreSQL's own check; other text is checked,
                // since it is copied into the event as it is.
                if kind != PayloadKind::Json
                    && serde_json::from_str::<serde::de::IgnoredAny>(text).is_err()
                {
                    return Err(RouteError::InvalidValue {
                        column: self.payload_field.clone(),
                        reason: format!(
                            "the payload is not JSON, but its content type {:?} says it is; fix \
                             the row, or set [envelope] content_type to a non-JSON media type",
                            self.content_type(kind)
                        ),
                    });
                }
                out.extend_from_slice(b",\"data\":");
                out.extend_from_slice(text.as_bytes());
            }
            Ok(text) if kind != PayloadKind::Binary => {
                out.extend_from_slice(b",\"data\":");
                write_json_string(out, text);
            }
            _ => {
                out.extend_from_slice(b",\"data_base64\":\"");
                write_base64(out, payload);
                out.push(b'"');
            }
        }
        Ok(())
    }

    fn content_type_bytes(&self, kind: PayloadKind) -> Bytes {
        match (&self.content_type_header, kind) {
            (Some(ct), _) => ct.clone(),
            (None, PayloadKind::Json) => Bytes::from_static(b"application/json"),
            (None, PayloadKind::Binary) => Bytes::from_static(b"application/octet-stream"),
            (None, PayloadKind::Text) => Bytes::from_static(b"text/plain; charset=utf-8"),
        }
    }
}

/// `value` as a JSON string after `name`, which is written as it is (`,"source":`). Values are
/// UTF-8 text; anything else is replaced, never copied raw.
fn member(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    match std::str::from_utf8(value) {
        Ok(text) => write_json_string(out, text),
        Err(_) => write_json_string(out, &String::from_utf8_lossy(value)),
    }
}

/// `application/json`, or any `+json` structured syntax suffix, parameters ignored.
pub(super) fn is_json(media_type: &str) -> bool {
    let essence = media_type.split(';').next().unwrap_or("").trim().as_bytes();
    let ends_with = |suffix: &[u8]| {
        essence.len() >= suffix.len()
            && essence[essence.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
    };
    essence.eq_ignore_ascii_case(b"application/json") || ends_with(b"+json")
}
