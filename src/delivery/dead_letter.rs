//! Dead letters: what walrelay publishes instead of a row it cannot turn into a record, or of a
//! record the broker refuses for good, when `[dead_letter]` is configured (I8). The stream moves
//! on; nothing is dropped silently.
//!
//! A dead letter keeps the original key and the payload (its first bytes when it is too large)
//! and says in headers what went wrong and where the row came from.

use std::sync::Arc;

use bytes::Bytes;

use super::failed::Failed;
use crate::config::DeadLetterConfig;
use crate::router::Record;

pub const HEADER_ERROR: &str = "walrelay.error";
pub const HEADER_TABLE: &str = "walrelay.table";
pub const HEADER_LSN: &str = "walrelay.lsn";
pub const HEADER_EVENT_ID: &str = "walrelay.event.id";
pub const HEADER_TOPIC: &str = "walrelay.topic";

/// The dead letter of what failed, for the topic of `cfg`.
pub fn record(cfg: &DeadLetterConfig, failed: Failed) -> Record {
    let mut headers: Vec<(Arc<str>, Bytes)> = vec![
        (Arc::from(HEADER_ERROR), Bytes::from(failed.reason.into_bytes())),
        (Arc::from(HEADER_TABLE), Bytes::copy_from_slice(failed.source.as_bytes())),
        (Arc::from(HEADER_LSN), Bytes::from(failed.lsn.to_string().into_bytes())),
    ];
    if let Some(id) = &failed.event_id {
        headers.push((Arc::from(HEADER_EVENT_ID), Bytes::copy_from_slice(id.as_bytes())));
    }
    if let Some(topic) = &failed.topic {
        headers.push((Arc::from(HEADER_TOPIC), Bytes::copy_from_slice(topic.as_bytes())));
    }
    let value = failed.value.map(|v| v.slice(..v.len().min(cfg.max_value_bytes)));
    Record {
        topic: Arc::from(cfg.topic.as_str()),
        key: failed.key,
        value,
        headers,
        partition: None,
        timestamp_ms: None,
        event_id: failed.event_id.unwrap_or_default(),
        trace: None,
        value_schema: None,
        key_schema: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lsn::Lsn;

    #[test]
    fn dead_letter_keeps_key_truncates_value_and_names_error_table_lsn_and_id() {
        let cfg = DeadLetterConfig { topic: "dlq".into(), max_value_bytes: 4 };
        let r = record(
            &cfg,
            Failed {
                topic: Some(Arc::from("outbox.event.Order")),
                key: Some(Bytes::from_static(b"order-1")),
                value: Some(Bytes::from_static(b"0123456789")),
                event_id: Some("e-1".into()),
                ..Failed::new(Arc::from("public.outbox"), Lsn(0x1_0000_0010), "too large".into())
            },
        );
        assert_eq!(&*r.topic, "dlq");
        assert_eq!(r.key.as_deref(), Some(&b"order-1"[..]));
        assert_eq!(r.value.as_deref(), Some(&b"0123"[..]));
        let h: Vec<(&str, &[u8])> = r.headers.iter().map(|(k, v)| (&**k, &v[..])).collect();
        assert_eq!(
            h,
            vec![
                (HEADER_ERROR, &b"too large"[..]),
                (HEADER_TABLE, b"public.outbox"),
                (HEADER_LSN, b"1/10"),
                (HEADER_EVENT_ID, b"e-1"),
                (HEADER_TOPIC, b"outbox.event.Order"),
            ]
        );
    }
}
