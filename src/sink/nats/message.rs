//! How a routed record becomes a JetStream message, and what the server's answer means.
//!
//! - subject: the routed name as it is (`outbox.event.order`; Kafka-style dotted names are
//!   subjects already), refused when it is not a subject one can publish to;
//! - headers: every record header with the same name and its value as text, `walrelay-key`
//!   the key, and `Nats-Msg-Id` the event id, JetStream's dedup key within the stream's
//!   `duplicate_window`;
//! - payload: the value, empty for none.

use std::str::FromStr;

use async_nats::header::{HeaderName, HeaderValue, NATS_MESSAGE_ID};
use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::publish::PublishAck;
use async_nats::HeaderMap;

use crate::error::chain;
use crate::router::{Record, REPLAY_HEADER};
use crate::sink::Published;

/// The header the key (the aggregate id) goes into, as in every sink but SQS FIFO.
pub const KEY_HEADER: &str = "walrelay-key";

/// The subject `topic` is published to, or why it cannot be one.
pub fn subject(topic: &str) -> Result<&str, String> {
    let why = if topic.is_empty() {
        Some("it is empty")
    } else if topic.contains(|c: char| c.is_whitespace() || c.is_control()) {
        Some("it holds a space or a control character")
    } else if topic.split('.').any(|t| t == "*" || t == ">" || t.contains(['*', '>'])) {
        Some("it holds '*' or '>', which are wildcards in NATS")
    } else if topic.split('.').any(str::is_empty) {
        Some("it has an empty token (two dots in a row, or a dot at an end)")
    } else {
        None
    };
    match why {
        Some(why) => Err(format!(
            "the routed name {topic:?} is not a NATS subject one can publish to: {why}; \
             change the route (route.topic.replacement) so that it yields dot-separated words"
        )),
        None => Ok(topic),
    }
}

/// The record's headers, key and event id as NATS headers, or why one cannot be sent.
pub fn headers(record: &Record) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::new();
    for (name, value) in &record.headers {
        let text = std::str::from_utf8(value).map_err(|_| {
            format!(
                "header {name:?} is not UTF-8 text, which NATS headers must be; fix what writes it"
            )
        })?;
        put(&mut map, name, text)?;
    }
    if let Some(key) = &record.key {
        let key = std::str::from_utf8(key).map_err(|_| {
            format!("the key is not UTF-8 text, which the {KEY_HEADER} header must be")
        })?;
        put(&mut map, KEY_HEADER, key)?;
    }
    let id = HeaderValue::from_str(&record.event_id).map_err(|_| {
        format!("the event id {:?} holds a line break, which a Nats-Msg-Id cannot", record.event_id)
    })?;
    map.insert(NATS_MESSAGE_ID, id);
    Ok(map)
}

fn put(map: &mut HeaderMap, name: &str, value: &str) -> Result<(), String> {
    let header = HeaderName::from_str(name).map_err(|_| {
        format!(
            "header name {name:?} cannot be a NATS header (printable ASCII without ':' or spaces only)"
        )
    })?;
    let value = HeaderValue::from_str(value).map_err(|_| {
        format!("header {name:?}'s value holds a line break, which NATS headers cannot")
    })?;
    map.append(header, value);
    Ok(())
}

/// What a PubAck, or the error in its place, means for the record. No responders is left to
/// the caller, which asks JetStream whether a stream captures the subject at all.
pub fn answer(subject: &str, record: &Record, result: Result<PublishAck, PublishError>) -> Answer {
    match result {
        // A replay is asked for so that consumers get the event again: JetStream dropping it
        // as a repeat of a message stored within the window means they will not, whether or
        // not that message is still there (a deleted message's id stays in the window).
        Ok(ack) if ack.duplicate && replayed(record) => Answer::Done(Published::Refused(format!(
            "JetStream dropped the replayed message for {subject} as a duplicate: a message with \
             the same Nats-Msg-Id (the event id) was stored on stream {} within its \
             duplicate_window; replay it again once the window has passed",
            ack.stream
        ))),
        // A resend of the relay's is there already: acknowledged as well.
        Ok(_) => Answer::Done(Published::Acked),
        Err(e) => match e.kind() {
            PublishErrorKind::StreamNotFound => Answer::NoResponders,
            PublishErrorKind::MaxPayloadExceeded => Answer::Done(Published::Refused(format!(
                "the message for {subject} is larger than the NATS server's max_payload ({e}); \
                 raise max_payload in the server's configuration, or make the event smaller"
            ))),
            PublishErrorKind::Other if too_large_for_stream(&e) => {
                Answer::Done(Published::Refused(format!(
                    "the stream that captures {subject} refuses a message this large ({}); \
                     raise the stream's max_msg_size, or make the event smaller",
                    chain(&e)
                )))
            }
            PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe => Answer::Done(retry(
                format!("no PubAck for {subject} in time ({e}): the connection is down or the server slow"),
            )),
            _ => Answer::Done(retry(format!("publishing to {subject} failed: {}", chain(&e)))),
        },
    }
}

/// What [`answer`] made of a publish.
#[derive(Debug)]
pub enum Answer {
    Done(Published),
    /// No one answered the subject: no stream captures it, or JetStream is not up yet.
    NoResponders,
}

/// The record is refused when JetStream, asked, says that no stream captures `subject`.
pub fn no_stream(subject: &str) -> Published {
    Published::Refused(format!(
        "no JetStream stream captures the subject {subject}; run `walrelay setup` to create \
         the [nats] stream, or add {subject} (or a wildcard such as \"outbox.>\") to a stream's subjects"
    ))
}

pub fn retry(reason: String) -> Published {
    Published::Retry { reason, after: None }
}

fn too_large_for_stream(e: &PublishError) -> bool {
    use async_nats::jetstream::ErrorCode;
    let mut cur: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(err) = cur {
        if let Some(js) = err.downcast_ref::<async_nats::jetstream::Error>() {
            return js.error_code() == ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM;
        }
        cur = err.source();
    }
    false
}

/// Whether `record` is a replay's (its `walrelay.replay` header), not the relay's own.
fn replayed(record: &Record) -> bool {
    record.headers.iter().any(|(name, _)| &**name == REPLAY_HEADER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::sync::Arc;

    #[test]
    fn dotted_names_are_subjects() {
        assert_eq!(subject("outbox.event.order"), Ok("outbox.event.order"));
        assert_eq!(subject("orders-v2_x"), Ok("orders-v2_x"));
    }

    #[test]
    fn names_that_are_not_subjects_are_refused_with_why() {
        for (topic, why) in [
            ("", "empty"),
            ("outbox event", "space"),
            ("outbox.*", "wildcards"),
            ("outbox.>", "wildcards"),
            ("outbox..order", "empty token"),
            ("outbox.", "empty token"),
        ] {
            let e = subject(topic).expect_err(topic);
            assert!(e.contains(why) && e.contains("route.topic.replacement"), "{topic}: {e}");
        }
    }

    #[test]
    fn headers_key_and_event_id() {
        let mut r = Record::bare("outbox.event.order", "9f1c");
        r.key = Some(Bytes::from_static(b"order-7"));
        r.headers = vec![(Arc::from("id"), Bytes::from_static(b"9f1c"))];
        let map = headers(&r).unwrap();
        assert_eq!(map.get("id").map(|v| v.as_str()), Some("9f1c"));
        assert_eq!(map.get(KEY_HEADER).map(|v| v.as_str()), Some("order-7"));
        assert_eq!(map.get("Nats-Msg-Id").map(|v| v.as_str()), Some("9f1c"));
    }

    #[test]
    fn headers_that_cannot_be_sent_are_named() {
        let mut r = Record::bare("t", "1");
        r.headers = vec![(Arc::from("bin"), Bytes::from_static(&[0xff, 0xfe]))];
        assert!(headers(&r).unwrap_err().contains("\"bin\" is not UTF-8"));
        r.headers = vec![(Arc::from("a:b"), Bytes::from_static(b"x"))];
        assert!(headers(&r).unwrap_err().contains("\"a:b\""));
        r.headers = vec![(Arc::from("h"), Bytes::from_static(b"x\r\ny"))];
        assert!(headers(&r).unwrap_err().contains("line break"));
    }
}
