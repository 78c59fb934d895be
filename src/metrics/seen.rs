//! What the relay saw, beside what it counts, for the console (`crate::console`): the slot as
//! PostgreSQL last reported it, the dead letters by reason and the latest of them, and the last
//! error Kafka gave. Each is bounded: a fixed number of entries, each of bounded text.

use std::collections::{BTreeMap, VecDeque};

use crate::lsn::Lsn;

/// Dead-letter reasons with a count of their own, at most; the rest count under "(other)".
pub const MAX_REASONS: usize = 50;
/// The latest dead letters kept.
pub const RECENT_DEAD_LETTERS: usize = 20;
/// Longest text kept of a reason, an error or an event id.
pub const MAX_TEXT: usize = 300;

/// The slot as the relay's sampler (`source::retained`) last read it from PostgreSQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotSample {
    /// µs since the Unix epoch.
    pub sampled_micros: i64,
    pub confirmed: Option<Lsn>,
    pub restart: Option<Lsn>,
    pub retained_bytes: Option<u64>,
    pub wal_status: Option<String>,
    pub active_pid: Option<i32>,
    /// PostgreSQL 17+.
    pub failover: Option<bool>,
}

/// One dead letter as the console lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterSeen {
    pub micros: i64,
    pub event_id: String,
    /// `schema.table` of the row, or `message:<prefix>`.
    pub source: String,
    /// The topic the record was for, when it had one.
    pub topic: Option<String>,
    pub reason: String,
}

/// Dead letters by reason, and the latest ones.
#[derive(Debug, Clone, Default)]
pub struct DeadLetters {
    pub by_reason: BTreeMap<String, u64>,
    pub recent: VecDeque<DeadLetterSeen>,
}

impl DeadLetters {
    pub fn add(&mut self, mut seen: DeadLetterSeen) {
        let reason = reason_kind(&seen.reason);
        let known = self.by_reason.contains_key(&reason);
        let key =
            if known || self.by_reason.len() < MAX_REASONS { reason } else { "(other)".into() };
        *self.by_reason.entry(key).or_default() += 1;
        seen.reason = cut(&seen.reason);
        seen.event_id = cut(&seen.event_id);
        if self.recent.len() == RECENT_DEAD_LETTERS {
            self.recent.pop_front();
        }
        self.recent.push_back(seen);
    }
}

/// A reason without the particulars of its row: up to the first `": "`, which is where
/// walrelay's reasons turn from what went wrong to which value it was (`topic "a b" is not a
/// legal Kafka topic name: it contains ' '`), cut to [`MAX_TEXT`].
pub fn reason_kind(reason: &str) -> String {
    cut(reason.split(": ").next().unwrap_or(reason))
}

/// `text` cut to [`MAX_TEXT`] characters.
pub fn cut(text: &str) -> String {
    cut_to(text, MAX_TEXT)
}

/// `text` cut to `max` characters, an ellipsis marking the cut.
pub fn cut_to(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(reason: &str) -> DeadLetterSeen {
        DeadLetterSeen {
            micros: 0,
            event_id: "e".into(),
            source: "public.outbox".into(),
            topic: None,
            reason: reason.into(),
        }
    }

    #[test]
    fn dead_letters_count_by_reason_bounded_and_keep_the_latest() {
        let mut d = DeadLetters::default();
        for i in 0..(MAX_REASONS + 10) {
            d.add(letter(&format!("reason {i}: of row {i}")));
        }
        d.add(letter("reason 0: of another row"));
        assert_eq!(d.by_reason.len(), MAX_REASONS + 1);
        assert_eq!(d.by_reason["reason 0"], 2);
        assert_eq!(d.by_reason["(other)"], 10);
        assert_eq!(d.recent.len(), RECENT_DEAD_LETTERS);
        assert_eq!(d.recent.back().unwrap().reason, "reason 0: of another row");
        assert!(cut(&"x".repeat(1000)).chars().count() <= MAX_TEXT + 1);
    }
}
