//! Where a schema's id goes in a record, by `[schema_registry] id_handler`: Confluent's framing
//! (a magic byte 0, the id in 4 bytes big-endian, then the body), Apicurio's 8-byte frame, or
//! Apicurio's headers beside the unframed body. The router reserved `FRAME_RESERVED` bytes
//! before every registry body for the first.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::config::{IdHandler, UseId};
use crate::router::{Record, FRAME_RESERVED};

/// The part of a record a schema id frames: its own subject (`<topic>-key`, `<topic>-value`),
/// its own headers under Apicurio's framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Part {
    Key = 0,
    Value = 1,
}

impl Part {
    pub(super) fn name(self) -> &'static str {
        match self {
            Part::Key => "key",
            Part::Value => "value",
        }
    }
}

/// One run's `id_handler`, and its headers made once.
pub(super) struct Wire {
    handler: IdHandler,
    /// Per part: the id's header (`apicurio.value.globalId`, `apicurio.key.contentId`, …) and
    /// Avro's encoding header.
    headers: [(Arc<str>, Arc<str>); 2],
}

impl Wire {
    pub(super) fn new(handler: IdHandler, use_id: UseId) -> Wire {
        let headers = [Part::Key, Part::Value].map(|part| {
            let id = format!("apicurio.{}.{}", part.name(), use_id.as_str());
            (Arc::from(id), Arc::from(format!("apicurio.{}.encoding", part.name())))
        });
        Wire { handler, headers }
    }

    /// Puts `bytes` (the reserved bytes, then the body) into `record`'s `part` with `id`.
    pub(super) fn place(&self, part: Part, record: &mut Record, bytes: Bytes, id: u64) {
        let slot = match part {
            Part::Key => &mut record.key,
            Part::Value => &mut record.value,
        };
        match self.handler {
            // Taken, not cloned: the router's buffer is then unique and the id is written in
            // place. Apicurio's 4-byte handler writes a longer id cut to an int, as here.
            IdHandler::FourByte => *slot = Some(framed(bytes, id as u32)),
            IdHandler::EightByte => *slot = Some(framed_long(&bytes, id)),
            // As Apicurio's `DefaultHeadersHandler` and `AvroSerdeHeaders` write them (Avro
            // only: config refuses the other converters).
            IdHandler::Headers => {
                *slot = Some(bytes.slice(FRAME_RESERVED..));
                let (id_header, encoding) = &self.headers[part as usize];
                let id = Bytes::copy_from_slice(&id.to_be_bytes());
                record.headers.push((id_header.clone(), id));
                record.headers.push((encoding.clone(), Bytes::from_static(b"BINARY")));
            }
        }
    }
}

/// `value` (five reserved bytes, then the body) with the magic byte and `id` in front.
fn framed(value: Bytes, id: u32) -> Bytes {
    let mut bytes = match value.try_into_mut() {
        Ok(unique) => unique,
        Err(shared) => BytesMut::from(&shared[..]),
    };
    bytes[0] = 0;
    bytes[1..5].copy_from_slice(&id.to_be_bytes());
    bytes.freeze()
}

/// `value` (five reserved bytes, then the body) with the magic byte and an 8-byte `id` in front
/// (Apicurio's `Legacy8ByteIdHandler`): a new buffer, as the router reserved 5 bytes.
fn framed_long(value: &[u8], id: u64) -> Bytes {
    let body = &value[FRAME_RESERVED..];
    let mut bytes = Vec::with_capacity(9 + body.len());
    bytes.push(0);
    bytes.extend_from_slice(&id.to_be_bytes());
    bytes.extend_from_slice(body);
    bytes.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frame_is_the_magic_byte_and_the_id_big_endian_before_the_body() {
        let value = Bytes::from(vec![9, 9, 9, 9, 9, 2, 4, b'h', b'i']);
        assert_eq!(&framed(value, 0x0102_0304)[..], [0, 1, 2, 3, 4, 2, 4, b'h', b'i']);
    }

    #[test]
    fn apicurios_long_frame_is_the_magic_byte_and_8_bytes_before_the_body() {
        let value = [9, 9, 9, 9, 9, 2, 4];
        assert_eq!(&framed_long(&value, 0x0102_0304_0506)[..], [0, 0, 0, 1, 2, 3, 4, 5, 6, 2, 4]);
    }

    #[test]
    fn apicurios_headers_carry_the_id_of_each_part_beside_the_unframed_body() {
        let wire = Wire::new(IdHandler::Headers, UseId::GlobalId);
        let mut record = Record::bare("t", "e");
        wire.place(Part::Value, &mut record, Bytes::from_static(&[9, 9, 9, 9, 9, 2, 4]), 7);
        wire.place(Part::Key, &mut record, Bytes::from_static(&[9, 9, 9, 9, 9, 2, b'k']), 8);
        assert_eq!(
            (record.value.as_deref(), record.key.as_deref()),
            (Some(&[2, 4][..]), Some(&[2, b'k'][..]))
        );
        let names: Vec<&str> = record.headers.iter().map(|(n, _)| &**n).collect();
        assert_eq!(
            names,
            [
                "apicurio.value.globalId",
                "apicurio.value.encoding",
                "apicurio.key.globalId",
                "apicurio.key.encoding"
            ]
        );
        assert_eq!(&record.headers[0].1[..], 7u64.to_be_bytes());
        assert_eq!(&record.headers[1].1[..], b"BINARY");
    }
}
