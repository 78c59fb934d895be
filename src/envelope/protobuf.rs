//! `[envelope] format = "protobuf"`: the value is an encoded `walrelay.v1.Event`
//! (`proto/walrelay/v1/event.proto`, walrelay's wire contract), `content-type` is
//! `application/protobuf`.

use bytes::Bytes;
use prost::Message;

use super::{proto, timestamp, Envelope, Origin, Txn};
use crate::router::{EventFields, Record};

const CONTENT_TYPE: &[u8] = b"application/protobuf";

impl Envelope {
    pub(super) fn protobuf(
        &mut self,
        mut record: Record,
        fields: EventFields,
        txn: &Txn,
        origin: Origin<'_>,
    ) -> Record {
        // A tombstone stays one (null value), so log compaction still deletes the key.
        if fields.tombstone {
            return record;
        }
        let place = self.place(origin);
        let text = |b: Bytes| String::from_utf8_lossy(&b).into_owned();
        let payload_content_type = match fields.payload {
            Some(_) => self.content_type(fields.payload_kind).to_owned(),
            None => String::new(),
        };
        let event = proto::Event {
            id: record.event_id.clone(),
            aggregate_type: text(fields.aggregate_type),
            aggregate_id: fields.aggregate_id.map(text),
            event_type: fields.event_type.map(text),
            payload: fields.payload,
            payload_content_type,
            commit_time: Some(timestamp(txn.commit_micros)),
            commit_lsn: txn.commit_lsn.as_u64(),
            transaction_id: txn.xid,
            source: Some(place.proto.clone()),
            additional: fields
                .additional
                .into_iter()
                .map(|(alias, value)| (alias.to_string(), text(value)))
                .collect(),
        };
        record.value = Some(Bytes::from(event.encode_to_vec()));
        record.headers.push((self.names.content_type.clone(), Bytes::from_static(CONTENT_TYPE)));
        record
    }
}
