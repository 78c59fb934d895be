//! Where a record carries its event id, as the envelope put it there: a header (the default
//! envelope's `id`, cloudevents-binary's `ce_id`), the top-level `"id"` of a JSON value
//! (cloudevents-structured), or field 1 of a protobuf value (`walrelay.v1.Event` and the
//! CloudEvents protobuf format both keep the id there).

use prost::bytes::Buf;
use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};

use crate::router::Record;

/// Where the audited records' event ids are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IdPlace {
    Header(String),
    JsonField,
    ProtobufField1,
}

impl IdPlace {
    /// Where `record` (an expected record, built by the live relay's encoder) carries its
    /// event id; `None` when in none of these.
    pub fn of(record: &Record) -> Option<IdPlace> {
        let id = record.event_id.as_bytes();
        if let Some((name, _)) = record.headers.iter().find(|(_, v)| v.as_ref() == id) {
            return Some(IdPlace::Header(name.to_string()));
        }
        let value = record.value.as_deref()?;
        if json_id(value).is_some_and(|v| v.as_bytes() == id) {
            return Some(IdPlace::JsonField);
        }
        if protobuf_field1(value).is_some_and(|v| v == id) {
            return Some(IdPlace::ProtobufField1);
        }
        None
    }

    /// The event id of a record read from Kafka; `None` when it has none there.
    pub fn find<'a>(
        &self,
        mut headers: impl Iterator<Item = (&'a str, Option<&'a [u8]>)>,
        value: &[u8],
    ) -> Option<String> {
        match self {
            IdPlace::Header(name) => headers
                .find(|(n, _)| n == name)
                .and_then(|(_, v)| v)
                .map(|v| String::from_utf8_lossy(v).into_owned()),
            IdPlace::JsonField => json_id(value),
            IdPlace::ProtobufField1 => {
                protobuf_field1(value).map(|v| String::from_utf8_lossy(v).into_owned())
            }
        }
    }

    pub fn describe(&self) -> String {
        match self {
            IdPlace::Header(name) => format!("header {name}"),
            IdPlace::JsonField => "the value's \"id\"".into(),
            IdPlace::ProtobufField1 => "the value's protobuf field 1".into(),
        }
    }
}

/// The top-level `"id"` string of a JSON object.
fn json_id(value: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Id {
        id: String,
    }
    serde_json::from_slice::<Id>(value).ok().map(|v| v.id)
}

/// The bytes of a protobuf message's field 1, when it is length-delimited.
fn protobuf_field1(value: &[u8]) -> Option<&[u8]> {
    let mut buf = value;
    while buf.has_remaining() {
        let (tag, wire_type) = decode_key(&mut buf).ok()?;
        if tag == 1 && wire_type == WireType::LengthDelimited {
            let len = decode_varint(&mut buf).ok()? as usize;
            return buf.get(..len);
        }
        skip_field(wire_type, tag, &mut buf, DecodeContext::default()).ok()?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_found_in_a_json_value_and_in_protobuf_field_1_after_other_fields() {
        assert_eq!(
            json_id(br#"{"specversion":"1.0","id":"e-1","data":{"id":"x"}}"#).as_deref(),
            Some("e-1")
        );
        assert_eq!(json_id(b"not json"), None);
        // field 2 (varint 150), then field 1 "e-1"
        let proto = [0x10, 0x96, 0x01, 0x0a, 0x03, b'e', b'-', b'1'];
        assert_eq!(protobuf_field1(&proto), Some(&b"e-1"[..]));
        assert_eq!(protobuf_field1(&[0x0a, 0x09, b'e']), None, "a length past the end");
    }
}
