//! `[envelope] format = "cloudevents-protobuf"`: CloudEvents 1.0 in the Kafka binding's
//! structured content mode with the protobuf event format
//! (<https://github.com/cloudevents/spec/blob/main/cloudevents/formats/protobuf-format.md>): the
//! value is an encoded `io.cloudevents.v1.CloudEvent`, `content-type` is
//! `application/cloudevents+protobuf`.
//!
//! The required attributes are fields; `time` is a `ce_timestamp`, `subject`, `datacontenttype`
//! and the `envelope` placements' extensions are `ce_string`s. The data is `text_data` when it
//! is text (JSON included), `binary_data` for bytes.

use std::collections::BTreeMap;

use bytes::Bytes;
use prost::Message;

use super::proto::cloudevents::cloud_event::cloud_event_attribute_value::Attr;
use super::proto::cloudevents::cloud_event::{CloudEventAttributeValue, Data};
use super::proto::cloudevents::CloudEvent;
use super::{timestamp, Envelope, Origin, Txn};
use crate::router::{EventFields, PayloadKind, Record, RouteError};

const CONTENT_TYPE: &[u8] = b"application/cloudevents+protobuf";

impl Envelope {
    /// A tombstone stays a tombstone, as in structured JSON mode: the binary mode's event
    /// without data.
    pub(super) fn cloudevents_protobuf(
        &mut self,
        mut record: Record,
        mut fields: EventFields,
        txn: &Txn,
        origin: Origin<'_>,
    ) -> Result<Record, RouteError> {
        if fields.tombstone {
            return self.cloudevents_binary(record, fields, txn, origin);
        }
        let a = self.attributes(&record, &mut fields, txn, origin)?;
        let text = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
        let string = |s: String| CloudEventAttributeValue { attr: Some(Attr::CeString(s)) };
        let mut attributes = BTreeMap::new();
        attributes.insert(
            "time".to_owned(),
            CloudEventAttributeValue {
                attr: Some(Attr::CeTimestamp(timestamp(txn.commit_micros))),
            },
        );
        if let Some(subject) = &a.subject {
            attributes.insert("subject".to_owned(), string(text(subject)));
        }
        for (alias, value) in &fields.additional {
            attributes.insert(alias.to_string(), string(text(value)));
        }
        let data = fields.payload.take().map(|payload| {
            let content_type = self.content_type(fields.payload_kind).to_owned();
            attributes.insert("datacontenttype".to_owned(), string(content_type));
            match (fields.payload_kind, String::from_utf8(payload.to_vec())) {
                (PayloadKind::Json | PayloadKind::Text, Ok(text)) => Data::TextData(text),
                _ => Data::BinaryData(payload),
            }
        });
        let event = CloudEvent {
            id: text(&a.id),
            source: text(&a.source),
            spec_version: "1.0".to_owned(),
            r#type: text(&a.ty),
            attributes,
            data,
        };
        record.value = Some(Bytes::from(event.encode_to_vec()));
        record.headers.push((self.names.content_type.clone(), Bytes::from_static(CONTENT_TYPE)));
        Ok(record)
    }
}
