//! A routed record as one SQS message: its queue, body, attributes, and on a FIFO queue its
//! group and dedup ids; or why SQS would refuse it, said before it is sent.
//!
//! The checks are SQS's documented limits, so that a record over one is refused with a reason
//! that names it rather than with the batch entry's terse error code.

use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};

use super::config::SqsConfig;
use crate::router::Record;

/// Where the key goes on a standard queue (and on a FIFO queue when the key cannot be the
/// group id as it is).
pub const KEY_ATTRIBUTE: &str = "walrelay-key";
/// SQS's limit on a message's attributes.
pub const MAX_ATTRIBUTES: usize = 10;
/// SQS's limit on an attribute name.
const MAX_ATTRIBUTE_NAME: usize = 256;
/// SQS's limit on `MessageGroupId` and `MessageDeduplicationId`.
const MAX_ID: usize = 128;
/// The data type of every attribute: headers are text.
const STRING: &str = "String";

/// One message ready for a batch.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub queue_url: String,
    pub entry: SendMessageBatchRequestEntry,
    /// As SQS counts it: the body and each attribute's name, type and value.
    pub size: usize,
}

/// The message for `record`, as entry `id` of its batch, or why SQS would refuse it.
pub fn message(config: &SqsConfig, record: &Record, id: usize) -> Result<Outgoing, String> {
    let queue_url = config.queue_url_for(&record.topic);
    let queue = super::config::queue_name(&queue_url);
    if queue.len() > SqsConfig::MAX_QUEUE_NAME {
        return Err(format!(
            "its queue name {queue} is {} characters, SQS allows {}: route it to a shorter name \
             or shorten queue_url",
            queue.len(),
            SqsConfig::MAX_QUEUE_NAME
        ));
    }
    let body = record.value.as_deref().unwrap_or_default();
    let body = sqs_text(body).map_err(|why| {
        format!(
            "its value {why}: an SQS message body is text (a binary value such as Avro or \
             Protobuf cannot go to SQS; use a JSON value converter)"
        )
    })?;
    if body.is_empty() {
        return Err("its value is empty (a tombstone?) and SQS refuses an empty message body: \
                    give the event a payload"
            .into());
    }

    let mut attributes: Vec<(&str, &str)> = Vec::with_capacity(record.headers.len() + 1);
    for (name, value) in &record.headers {
        check_attribute_name(name)?;
        let value = sqs_text(value).map_err(|why| format!("its header {name} {why}"))?;
        if value.is_empty() {
            return Err(format!(
                "its header {name} is empty and SQS refuses an attribute without a value: give \
                 it a value or drop its header placement"
            ));
        }
        attributes.push((name, value));
    }
    let key = match &record.key {
        Some(key) => Some(sqs_text(key).map_err(|why| format!("its key {why}"))?),
        None => None,
    };
    let mut group = None;
    if config.fifo() {
        // The key orders the group, as a Kafka partition key does; a record without one is
        // ordered with everything of its routed name.
        let text = key.unwrap_or(&record.topic);
        if is_sqs_id(text) {
            group = Some(text.to_string());
        } else {
            // Same key, same hash, same group: order still holds; the key itself rides along.
            group = Some(sha256_hex(text.as_bytes()));
            if let Some(key) = key {
                attributes.push((KEY_ATTRIBUTE, key));
            }
        }
    } else if let Some(key) = key.filter(|k| !k.is_empty()) {
        attributes.push((KEY_ATTRIBUTE, key));
    }
    if let Some(name) = duplicate(&attributes) {
        return Err(format!(
            "it has two headers named {name}, and SQS attributes have one value a name: \
             rename one of its header placements"
        ));
    }
    if attributes.len() > MAX_ATTRIBUTES {
        return Err(format!(
            "it has {} message attributes (headers and {KEY_ATTRIBUTE}) and SQS allows at most \
             {MAX_ATTRIBUTES}: drop header placements",
            attributes.len()
        ));
    }
    let size = body.len()
        + attributes.iter().map(|(n, v)| n.len() + STRING.len() + v.len()).sum::<usize>();
    if size > config.max_message_bytes {
        return Err(format!(
            "it is {size} bytes (body and attributes) and the limit is {} \
             (max_message_bytes; SQS allows 256 KiB, or up to 1 MiB by the queue's \
             MaximumMessageSize)",
            config.max_message_bytes
        ));
    }

    let mut entry = SendMessageBatchRequestEntry::builder().id(id.to_string()).message_body(body);
    for (name, value) in attributes {
        let value = MessageAttributeValue::builder()
            .data_type(STRING)
            .string_value(value)
            .build()
            .map_err(|e| format!("its attribute {name} could not be built: {e}"))?;
        entry = entry.message_attributes(name, value);
    }
    if config.fifo() {
        let dedup = if is_sqs_id(&record.event_id) {
            record.event_id.clone()
        } else {
            sha256_hex(record.event_id.as_bytes())
        };
        entry = entry.set_message_group_id(group).message_deduplication_id(dedup);
    }
    let entry = entry.build().map_err(|e| format!("its SQS message could not be built: {e}"))?;
    Ok(Outgoing { queue_url, entry, size })
}

/// The bytes as text SQS takes: UTF-8 of #x9 | #xA | #xD | #x20–#xD7FF | #xE000–#xFFFD |
/// #x10000–#x10FFFF; else what is wrong with them.
pub fn sqs_text(bytes: &[u8]) -> Result<&str, String> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| format!("is not UTF-8 text (at byte {})", e.valid_up_to()))?;
    let legal = |c: char| {
        matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}')
            || c >= '\u{10000}'
    };
    match text.char_indices().find(|&(_, c)| !legal(c)) {
        None => Ok(text),
        Some((at, c)) => Err(format!(
            "has U+{:04X} at byte {at}, a character SQS does not allow in a message",
            c as u32
        )),
    }
}

/// Whether `name` may be an attribute name: `[A-Za-z0-9_.-]`, at most 256 characters, not
/// starting with `AWS.` or `Amazon.` (any case), no `..`, no `.` first or last.
fn check_attribute_name(name: &str) -> Result<(), String> {
    let why = if name.is_empty() {
        "is empty"
    } else if name.len() > MAX_ATTRIBUTE_NAME {
        "is longer than 256 characters"
    } else if !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')) {
        "has characters other than letters, digits, `_`, `-` and `.`"
    } else if ["aws.", "amazon."].iter().any(|p| name.to_ascii_lowercase().starts_with(p)) {
        "starts with AWS. or Amazon., which SQS keeps for itself"
    } else if name.contains("..") || name.starts_with('.') || name.ends_with('.') {
        "has `..`, or a `.` first or last"
    } else {
        return Ok(());
    };
    Err(format!(
        "its header {name:?} {why}, and SQS refuses such an attribute name: rename its header \
         placement"
    ))
}

/// Whether `text` may be a `MessageGroupId` or `MessageDeduplicationId`: 1 to 128 ASCII
/// letters, digits and punctuation.
fn is_sqs_id(text: &str) -> bool {
    (1..=MAX_ID).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_graphic())
}

fn duplicate<'a>(attributes: &[(&'a str, &str)]) -> Option<&'a str> {
    let mut names: Vec<&str> = attributes.iter().map(|(n, _)| *n).collect();
    names.sort_unstable();
    names.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
}

/// SHA-256 in lower-case hex (64 characters, a legal SQS id).
fn sha256_hex(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;

    use super::*;

    fn config(fifo: bool) -> SqsConfig {
        let url =
            format!("http://127.0.0.1:9324/0/q-${{topic}}{}", if fifo { ".fifo" } else { "" });
        let opts = [("region", "r"), ("queue_url", url.as_str())]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        super::super::config::parse(&opts).unwrap()
    }

    fn record(key: Option<&str>, value: &[u8], headers: &[(&str, &[u8])]) -> Record {
        let mut r = Record::bare("orders.created", "0192f0c1-aaaa-7bbb-8ccc-0123456789ab");
        r.key = key.map(|k| Bytes::copy_from_slice(k.as_bytes()));
        r.value = Some(Bytes::copy_from_slice(value));
        r.headers =
            headers.iter().map(|(n, v)| (Arc::from(*n), Bytes::copy_from_slice(v))).collect();
        r
    }

    fn attribute<'a>(out: &'a Outgoing, name: &str) -> Option<&'a str> {
        out.entry.message_attributes()?.get(name)?.string_value()
    }

    #[test]
    fn a_standard_queue_carries_the_key_as_an_attribute() {
        let out = message(&config(false), &record(Some("k1"), b"{}", &[("id", b"e1")]), 3).unwrap();
        assert_eq!(out.queue_url, "http://127.0.0.1:9324/0/q-orders-created");
        assert_eq!(out.entry.id(), "3");
        assert_eq!(attribute(&out, KEY_ATTRIBUTE), Some("k1"));
        assert_eq!(attribute(&out, "id"), Some("e1"));
        assert_eq!(out.entry.message_group_id(), None);
        assert_eq!(out.entry.message_deduplication_id(), None);
        assert_eq!(out.size, 2 + (12 + 6 + 2) + (2 + 6 + 2));
    }

    #[test]
    fn a_fifo_queue_groups_by_key_and_dedups_by_event_id() {
        let out = message(&config(true), &record(Some("k1"), b"{}", &[]), 0).unwrap();
        assert_eq!(out.entry.message_group_id(), Some("k1"));
        assert_eq!(
            out.entry.message_deduplication_id(),
            Some("0192f0c1-aaaa-7bbb-8ccc-0123456789ab")
        );
        assert_eq!(attribute(&out, KEY_ATTRIBUTE), None);
        let keyless = message(&config(true), &record(None, b"{}", &[]), 0).unwrap();
        assert_eq!(keyless.entry.message_group_id(), Some("orders.created"));
        // A key SQS would refuse as a group id is hashed, and kept as the attribute.
        let spaced = message(&config(true), &record(Some("a key"), b"{}", &[]), 0).unwrap();
        let group = spaced.entry.message_group_id().unwrap();
        assert_eq!(group.len(), 64);
        assert_eq!(attribute(&spaced, KEY_ATTRIBUTE), Some("a key"));
        let mut odd = record(Some("k"), b"{}", &[]);
        odd.event_id = "é".repeat(3);
        let out = message(&config(true), &odd, 0).unwrap();
        assert_eq!(out.entry.message_deduplication_id().map(str::len), Some(64));
    }

    #[test]
    fn what_sqs_would_refuse_is_refused_with_the_limit() {
        let c = config(false);
        let names: Vec<String> = (0..10).map(|i| format!("h{i}")).collect();
        let ten: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b"v"[..])).collect();
        message(&c, &record(None, b"x", &ten), 0).unwrap();
        let e = message(&c, &record(Some("k"), b"x", &ten), 0).unwrap_err();
        assert!(e.contains("11 message attributes") && e.contains("at most 10"), "{e}");
        let limit = vec![b'a'; 256 * 1024];
        assert_eq!(message(&c, &record(None, &limit, &[]), 0).map(|m| m.size), Ok(262_144));
        let over = vec![b'a'; 256 * 1024 + 1];
        let e = message(&c, &record(None, &over, &[]), 0).map(|_| ()).unwrap_err();
        assert!(e.contains("262145 bytes") && e.contains("max_message_bytes"), "{e}");
        let e = message(&c, &record(None, b"\x00\x01avro", &[]), 0).unwrap_err();
        assert!(e.contains("U+0000") && e.contains("Avro"), "{e}");
        let e = message(&c, &record(None, b"\xff", &[]), 0).unwrap_err();
        assert!(e.contains("not UTF-8"), "{e}");
        let e = message(&c, &record(None, b"", &[]), 0).unwrap_err();
        assert!(e.contains("empty message body"), "{e}");
        for bad in ["AWS.trace", "amazon.x", "a..b", ".a", "a b", ""] {
            let e = message(&c, &record(None, b"x", &[(bad, b"v")]), 0).unwrap_err();
            assert!(e.contains("attribute name"), "{bad}: {e}");
        }
        let e = message(&c, &record(None, b"x", &[("h", b"\xc3")]), 0).unwrap_err();
        assert!(e.contains("header h is not UTF-8"), "{e}");
        let e = message(&c, &record(None, b"x", &[("h", b"1"), ("h", b"2")]), 0).unwrap_err();
        assert!(e.contains("two headers named h"), "{e}");
        let e = message(&c, &record(None, b"x", &[("h", b"")]), 0).unwrap_err();
        assert!(e.contains("header h is empty"), "{e}");
    }

    #[test]
    fn sqs_text_is_xml_characters() {
        assert!(sqs_text("tab\there\r\n é 😀 \u{E000}".as_bytes()).is_ok());
        assert!(sqs_text("\u{FFFE}".as_bytes()).unwrap_err().contains("U+FFFE"));
        assert!(sqs_text(b"\x1f").unwrap_err().contains("U+001F at byte 0"));
    }
}
