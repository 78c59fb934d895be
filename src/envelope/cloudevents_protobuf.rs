//! `[envelope] format = "cloudevents-protobuf"`: CloudEvents 1.0 in the Kafka binding's
//! structured content mode with the protobuf event format
//! (<https://github.com/cloudevents/spec/blob/main/cloudevents/formats/protobuf-format.md>): the
//! value is an encoded `io.cloudevents.v1.CloudEvent`, `content-type` is
//! `application/cloudevents+protobuf`. Encoded by hand (`wire.rs`).
//!
//! The required attributes are fields; `time` is a `ce_timestamp`, `subject`, `datacontenttype`
//! and the `envelope` placements' extensions are `ce_string`s. The data is `text_data` when it
//! is text (JSON included), `binary_data` for bytes.

use std::borrow::Cow;

use bytes::Bytes;

use super::wire::{bytes_size, text_size, timestamp_size, Wire};
use super::{utf8, Envelope, Origin};
use crate::router::{EventFields, PayloadKind, Record, RouteError};
use crate::txn::Txn;

const CONTENT_TYPE: &[u8] = b"application/cloudevents+protobuf";
/// `CloudEventAttributeValue` fields.
const CE_STRING: u32 = 3;
const CE_TIMESTAMP: u32 = 7;

/// An attribute's value: a string, or the commit time.
enum Value<'a> {
    Text(&'a [u8]),
    Time(i64),
}

impl Value<'_> {
    /// The size of the `CloudEventAttributeValue` message.
    fn size(&self) -> usize {
        match self {
            Value::Text(t) => bytes_size(t.len()),
            Value::Time(micros) => timestamp_size(*micros),
        }
    }
}

impl Envelope {
    /// A tombstone is sent in binary mode (see [`Envelope::wrap`]).
    pub(super) fn cloudevents_protobuf(
        &mut self,
        mut record: Record,
        mut fields: EventFields,
        txn: &Txn,
        origin: Origin<'_>,
    ) -> Result<Record, RouteError> {
        let a = self.attributes(&mut fields, txn, origin)?;
        let (id, source, ty) = (record.event_id.as_bytes(), utf8(&a.source), utf8(&a.ty));
        let subject = a.subject.as_ref().map(utf8);
        let additional: Vec<(&[u8], Cow<'_, [u8]>)> =
            fields.additional.iter().map(|(k, v)| (k.as_bytes(), utf8(v))).collect();
        // Data: text (JSON included) when it is UTF-8, bytes otherwise.
        let data = fields.payload.as_ref().map(|payload| {
            let content_type = self.content_type(fields.payload_kind).as_bytes();
            let text =
                fields.payload_kind != PayloadKind::Binary && std::str::from_utf8(payload).is_ok();
            (if text { 7 } else { 6 }, payload, content_type)
        });
        // The attributes map, walked twice (sizes, then bytes) rather than collected: no
        // allocation per event unless there are extensions.
        let attributes = || {
            std::iter::once((&b"time"[..], Value::Time(txn.commit_micros)))
                .chain(subject.as_deref().map(|s| (&b"subject"[..], Value::Text(s))))
                .chain(additional.iter().map(|(k, v)| (*k, Value::Text(v))))
                .chain(data.map(|(_, _, ct)| (&b"datacontenttype"[..], Value::Text(ct))))
        };
        let entry = |k: &[u8], v: &Value<'_>| bytes_size(k.len()) + bytes_size(v.size());
        let size = text_size(id.len())
            + text_size(source.len())
            + bytes_size(3)
            + text_size(ty.len())
            + attributes().map(|(k, v)| bytes_size(entry(k, &v))).sum::<usize>()
            + data.map_or(0, |(_, p, _)| bytes_size(p.len()));

        let mut w = Wire::with_capacity(size);
        w.text(1, id);
        w.text(2, &source);
        w.text(3, b"1.0");
        w.text(4, &ty);
        for (k, v) in attributes() {
            w.message(5, entry(k, &v));
            w.bytes(1, k);
            w.message(2, v.size());
            match v {
                Value::Text(t) => w.bytes(CE_STRING, t),
                Value::Time(micros) => w.timestamp(CE_TIMESTAMP, micros),
            }
        }
        if let Some((field, payload, _)) = data {
            w.bytes(field, payload);
        }
        debug_assert_eq!(w.out.len(), size, "the size computed is the size written");
        record.value = Some(Bytes::from(w.out));
        record.headers.push((self.names.content_type.clone(), Bytes::from_static(CONTENT_TYPE)));
        Ok(record)
    }
}
