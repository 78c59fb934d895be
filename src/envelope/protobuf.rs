//! `[envelope] format = "protobuf"`: the value is an encoded `walrelay.v1.Event`
//! (`proto/walrelay/v1/event.proto`, walrelay's wire contract), `content-type` is
//! `application/protobuf`. Encoded by hand (`wire.rs`), field by field from the event's bytes.

use bytes::Bytes;

use super::wire::{bytes_size, text_size, timestamp_size, uint_size, Wire};
use super::{utf8, Envelope, Origin};
use crate::router::{EventFields, Record};
use crate::txn::Txn;

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
        let content_type: &[u8] = match fields.payload {
            Some(_) => self.content_type(fields.payload_kind).as_bytes(),
            None => b"",
        };
        let id = record.event_id.as_bytes();
        let aggregate_type = utf8(&fields.aggregate_type);
        let aggregate_id = fields.aggregate_id.as_ref().map(utf8);
        let event_type = fields.event_type.as_ref().map(utf8);
        let additional: Vec<(&[u8], std::borrow::Cow<'_, [u8]>)> =
            fields.additional.iter().map(|(k, v)| (k.as_bytes(), utf8(v))).collect();
        let entry = |k: &[u8], v: &[u8]| bytes_size(k.len()) + bytes_size(v.len());
        let prefix = place.message_prefix.as_deref();
        let source = text_size(self.database.len())
            + text_size(place.schema.len())
            + text_size(place.table.len())
            + prefix.map_or(0, |p| bytes_size(p.len()));
        let size = text_size(id.len())
            + text_size(aggregate_type.len())
            + aggregate_id.as_ref().map_or(0, |a| bytes_size(a.len()))
            + event_type.as_ref().map_or(0, |t| bytes_size(t.len()))
            + fields.payload.as_ref().map_or(0, |p| bytes_size(p.len()))
            + text_size(content_type.len())
            + timestamp_size(txn.commit_micros)
            + uint_size(8, txn.commit_lsn.as_u64())
            + uint_size(9, u64::from(txn.xid))
            + bytes_size(source)
            + additional.iter().map(|(k, v)| bytes_size(entry(k, v))).sum::<usize>();

        let mut w = Wire::with_capacity(size);
        w.text(1, id);
        w.text(2, &aggregate_type);
        if let Some(a) = &aggregate_id {
            w.bytes(3, a);
        }
        if let Some(t) = &event_type {
            w.bytes(4, t);
        }
        if let Some(p) = &fields.payload {
            w.bytes(5, p);
        }
        w.text(6, content_type);
        w.timestamp(7, txn.commit_micros);
        w.uint(8, txn.commit_lsn.as_u64());
        w.uint(9, u64::from(txn.xid));
        w.message(10, source);
        w.text(1, self.database.as_bytes());
        w.text(2, place.schema.as_bytes());
        w.text(3, place.table.as_bytes());
        if let Some(p) = prefix {
            w.bytes(4, p.as_bytes());
        }
        for (k, v) in &additional {
            w.message(11, entry(k, v));
            w.bytes(1, k);
            w.bytes(2, v);
        }
        debug_assert_eq!(w.out.len(), size, "the size computed is the size written");
        record.value = Some(Bytes::from(w.out));
        record.headers.push((self.names.content_type.clone(), Bytes::from_static(CONTENT_TYPE)));
        record
    }
}
