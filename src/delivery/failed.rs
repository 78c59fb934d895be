//! A row, logical message or record that did not reach Kafka as itself: the router refused it,
//! the relay could not place its relation, or the broker refused its record for good. One type
//! for all of them, so the dead letter, the definite stop and the log line say the same things
//! whichever side refused (I8).

use std::sync::Arc;

use bytes::Bytes;

use crate::lsn::Lsn;

/// What failed, and what is known of its record.
#[derive(Debug)]
pub struct Failed {
    /// Where it came from: `schema.table`, or `message:<prefix>` for a logical message (the
    /// dead letter's `walrelay.table` header).
    pub source: Arc<str>,
    /// The row's (or message's) WAL position.
    pub lsn: Lsn,
    /// What went wrong, for the log and the dead letter's `walrelay.error` header.
    pub reason: String,
    /// The topic the record was meant for, when routing got that far (the broker refused it).
    pub topic: Option<Arc<str>>,
    pub key: Option<Bytes>,
    /// The value, or what the row carried as its payload; a dead letter keeps its first bytes.
    pub value: Option<Bytes>,
    pub event_id: Option<String>,
}

impl Failed {
    /// The one way a failure is made: who failed and why, with nothing known of its record yet.
    /// Callers that know the record's parts set them on the result.
    pub fn new(source: Arc<str>, lsn: Lsn, reason: String) -> Failed {
        Failed { source, lsn, reason, topic: None, key: None, value: None, event_id: None }
    }

    /// What the console lists of it (`metrics::seen`).
    pub fn seen(&self) -> crate::metrics::seen::DeadLetterSeen {
        crate::metrics::seen::DeadLetterSeen {
            micros: crate::clock::unix_micros(),
            event_id: self.event_id_or_none().to_string(),
            source: self.source.to_string(),
            topic: self.topic.as_deref().map(str::to_string),
            reason: self.reason.clone(),
        }
    }

    /// The event id, or words that say there is none, for messages.
    pub fn event_id_or_none(&self) -> &str {
        self.event_id.as_deref().unwrap_or("(no event id)")
    }
}
