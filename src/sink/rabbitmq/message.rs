//! How a routed record becomes an AMQP 0-9-1 message, and what of a record AMQP cannot carry.
//!
//! The routed name is the routing key; the event id is `message_id`; each header is a header of
//! the same name whose value is a long string; the key is the `walrelay-key` header; the value
//! is the body (empty for none). Every message is persistent (`delivery_mode` 2), so a durable
//! queue keeps it across a broker restart: without it a confirm promises nothing past one.

use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::BasicProperties;

use super::config::SHORT_STRING_MAX;
use crate::router::Record;

/// The header that carries the record's key (the aggregate id).
pub const KEY_HEADER: &str = "walrelay-key";

/// AMQP's persistent delivery mode.
pub const PERSISTENT: u8 = 2;

/// What `basic_publish` is given for one record; the body is borrowed from the record.
#[derive(Debug)]
pub(super) struct Message {
    pub routing_key: ShortString,
    pub properties: BasicProperties,
}

/// The record as a message, or why AMQP cannot carry it (a refusal for good: the same record
/// never fits).
pub(super) fn message(record: &Record) -> Result<Message, String> {
    let routing_key = short(&record.topic).ok_or_else(|| {
        format!(
            "the routed name is {} bytes, and an AMQP routing key holds at most 255: route \
             this event type to a shorter name",
            record.topic.len()
        )
    })?;
    let message_id = short(&record.event_id).ok_or_else(|| {
        format!(
            "the event id is {} bytes, and AMQP's message_id holds at most 255: use shorter ids",
            record.event_id.len()
        )
    })?;
    let mut headers = FieldTable::default();
    let mut content_type = None;
    for (name, value) in &record.headers {
        let Ok(text) = std::str::from_utf8(value) else {
            return Err(format!(
                "header {name:?} is not UTF-8 text, and walrelay's sinks carry headers as text: \
                 write the header as text (for example base64)"
            ));
        };
        let key = short(name).ok_or_else(|| {
            format!("header name {name:?} is longer than AMQP's 255 bytes: use a shorter name")
        })?;
        // CloudEvents' binary mode names the body's media type in `content-type`: AMQP has a
        // property for it, which consumers read before any header.
        if name.eq_ignore_ascii_case("content-type") {
            content_type = short(text);
        }
        headers.insert(key, AMQPValue::LongString(LongString::from(text)));
    }
    if let Some(key) = &record.key {
        let Ok(text) = std::str::from_utf8(key) else {
            return Err(format!(
                "the key is not UTF-8 text, and the {KEY_HEADER} header carries it as text: \
                 use a text aggregate id"
            ));
        };
        headers.insert(ShortString::from(KEY_HEADER), AMQPValue::LongString(text.into()));
    }
    let mut properties = BasicProperties::default()
        .with_delivery_mode(PERSISTENT)
        .with_message_id(message_id)
        .with_headers(headers);
    if let Some(content_type) = content_type {
        properties = properties.with_content_type(content_type);
    }
    // AMQP's timestamp is whole seconds since the epoch.
    if let Some(ms) = record.timestamp_ms.filter(|ms| *ms >= 0) {
        properties = properties.with_timestamp((ms / 1000) as u64);
    }
    Ok(Message { routing_key, properties })
}

fn short(text: &str) -> Option<ShortString> {
    if text.len() > SHORT_STRING_MAX {
        return None;
    }
    ShortString::try_new(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::sync::Arc;

    fn header<'a>(m: &'a Message, name: &str) -> Option<&'a [u8]> {
        match m.properties.headers().as_ref()?.inner().get(name)? {
            AMQPValue::LongString(s) => Some(s.as_bytes()),
            _ => None,
        }
    }

    #[test]
    fn a_record_becomes_a_persistent_message_with_its_id_headers_and_key() {
        let mut record = Record::bare("orders", "ev-1");
        record.key = Some(Bytes::from_static(b"order-7"));
        record.headers = vec![
            (Arc::from("id"), Bytes::from_static(b"ev-1")),
            (Arc::from("content-type"), Bytes::from_static(b"application/json")),
        ];
        record.timestamp_ms = Some(1_765_000_000_123);
        let m = message(&record).expect("fits");
        assert_eq!(m.routing_key.as_str(), "orders");
        assert_eq!(*m.properties.delivery_mode(), Some(2));
        assert_eq!(m.properties.message_id().as_ref().map(|s| s.as_str()), Some("ev-1"));
        assert_eq!(header(&m, "id"), Some(&b"ev-1"[..]));
        assert_eq!(header(&m, KEY_HEADER), Some(&b"order-7"[..]));
        assert_eq!(
            m.properties.content_type().as_ref().map(|s| s.as_str()),
            Some("application/json")
        );
        assert_eq!(*m.properties.timestamp(), Some(1_765_000_000));
    }

    #[test]
    fn no_key_no_key_header_and_no_content_type_unless_told() {
        let m = message(&Record::bare("orders", "ev-2")).expect("fits");
        assert_eq!(header(&m, KEY_HEADER), None);
        assert_eq!(*m.properties.content_type(), None);
        assert_eq!(*m.properties.timestamp(), None);
    }

    #[test]
    fn what_amqp_cannot_carry_is_refused_with_the_reason() {
        let mut record = Record::bare("orders", "ev-3");
        record.headers = vec![(Arc::from("trace"), Bytes::from_static(b"\xff\xfe"))];
        let e = message(&record).expect_err("refused");
        assert!(e.contains("\"trace\"") && e.contains("not UTF-8"), "{e}");

        let mut record = Record::bare("orders", "ev-4");
        record.key = Some(Bytes::from_static(b"\xc3"));
        let e = message(&record).expect_err("refused");
        assert!(e.contains(KEY_HEADER), "{e}");

        let long = "x".repeat(256);
        let e = message(&Record::bare(&long, "ev-5")).expect_err("refused");
        assert!(e.contains("routing key"), "{e}");
        let e = message(&Record::bare("orders", &long)).expect_err("refused");
        assert!(e.contains("message_id"), "{e}");
    }
}
