//! Protobuf wire encoding of the two protobuf envelopes, written straight from the event's
//! bytes into one buffer with prost's own encoding primitives.
//!
//! Filling prost's generated structs first costs an allocation per string field plus the
//! maps', which is most of the envelope's cost per event; the generated types (`proto.rs`)
//! remain the reference the tests decode with (prost in Rust, protoc's Python), so the two are
//! checked against each other. Field numbers are those of `proto/walrelay/v1/event.proto` and
//! `proto/io/cloudevents/v1/cloudevents.proto`; proto3 fields without presence are left out at
//! their default (empty, 0), `optional` and `oneof` fields are written whenever set.

use prost::encoding::{encode_key, encode_varint, encoded_len_varint, WireType};

const VARINT: WireType = WireType::Varint;
const LEN: WireType = WireType::LengthDelimited;

/// One encoded message.
#[derive(Default)]
pub(super) struct Wire {
    pub out: Vec<u8>,
}

impl Wire {
    pub fn with_capacity(n: usize) -> Wire {
        Wire { out: Vec::with_capacity(n) }
    }

    fn key(&mut self, field: u32, wire_type: WireType) {
        encode_key(field, wire_type, &mut self.out);
    }

    fn varint(&mut self, v: u64) {
        encode_varint(v, &mut self.out);
    }

    /// A length-delimited field (string, bytes, or a message encoded as `body`), always.
    pub fn bytes(&mut self, field: u32, body: &[u8]) {
        self.key(field, LEN);
        self.varint(body.len() as u64);
        self.out.extend_from_slice(body);
    }

    /// A string or bytes field without presence: left out when empty.
    pub fn text(&mut self, field: u32, body: &[u8]) {
        if !body.is_empty() {
            self.bytes(field, body);
        }
    }

    /// A varint field without presence: left out when 0. Negative `int32`/`int64` values are
    /// their 64-bit two's complement, as protobuf encodes them.
    pub fn uint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.key(field, VARINT);
            self.varint(v);
        }
    }

    /// The header of a message field whose body, `len` bytes, the caller writes next.
    pub fn message(&mut self, field: u32, len: usize) {
        self.key(field, LEN);
        self.varint(len as u64);
    }

    /// A `google.protobuf.Timestamp` field for `micros` since the Unix epoch.
    pub fn timestamp(&mut self, field: u32, micros: i64) {
        let seconds = micros.div_euclid(1_000_000) as u64;
        let nanos = (micros.rem_euclid(1_000_000) * 1_000) as u64;
        self.message(field, uint_size(1, seconds) + uint_size(2, nanos));
        self.uint(1, seconds);
        self.uint(2, nanos);
    }
}

fn varint_size(v: u64) -> usize {
    encoded_len_varint(v)
}

/// The size of a length-delimited field with a `len`-byte body (field numbers below 16).
pub(super) fn bytes_size(len: usize) -> usize {
    1 + varint_size(len as u64) + len
}

/// [`bytes_size`] of a field left out when empty.
pub(super) fn text_size(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        bytes_size(len)
    }
}

/// The size of a varint field left out when 0 (field numbers below 16).
pub(super) fn uint_size(_field: u32, v: u64) -> usize {
    if v == 0 {
        0
    } else {
        1 + varint_size(v)
    }
}

/// The size of a `google.protobuf.Timestamp` field.
pub(super) fn timestamp_size(micros: i64) -> usize {
    let seconds = micros.div_euclid(1_000_000) as u64;
    let nanos = (micros.rem_euclid(1_000_000) * 1_000) as u64;
    bytes_size(uint_size(1, seconds) + uint_size(2, nanos))
}
