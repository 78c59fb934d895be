//! Where the audit reads the window's records back from, chosen here and nowhere else: Kafka's
//! topics ([`super::kafka`]) or JetStream's streams ([`super::jetstream`]), both read without
//! consuming them, each record handed to a [`Sorter`] as what [`super::compare`] needs of it
//! ([`Held`]), whatever the sink. The other sinks' messages cannot be read back without taking
//! them from their consumers: the audit refuses them (`SinkConfig::why_no_audit`).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::sync::Arc;

use serde::Serialize;

use super::id::IdPlace;
use super::spill::{heap, read_bytes, read_i64, write_bytes, write_i64, Item, Sorter};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::sink::SinkConfig;

/// What the records were read back from, for the report's words and what it can judge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadFrom {
    /// Topics of partitions (`partition@offset`).
    #[default]
    Kafka,
    /// Streams of subjects, one sequence per stream (`0@sequence`: no partitions).
    #[serde(rename = "jetstream")]
    JetStream,
}

impl ReadFrom {
    /// Where `config`'s sink is read back from (Kafka for a sink the audit refuses).
    pub fn of(config: &Config) -> ReadFrom {
        match config.delivery.sink {
            SinkConfig::Nats(_) => ReadFrom::JetStream,
            _ => ReadFrom::Kafka,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ReadFrom::Kafka => "Kafka",
            ReadFrom::JetStream => "JetStream",
        }
    }

    /// Whether the router chooses a partition that can be checked (misplaced).
    pub fn partitioned(self) -> bool {
        matches!(self, ReadFrom::Kafka)
    }

    /// The setting that removes records older than an age, and the one of their size.
    pub fn age_limit(self) -> &'static str {
        match self {
            ReadFrom::Kafka => "retention.ms",
            ReadFrom::JetStream => "max_age",
        }
    }

    pub fn size_limit(self) -> &'static str {
        match self {
            ReadFrom::Kafka => "retention.bytes",
            ReadFrom::JetStream => "max_bytes",
        }
    }

    /// Where an event is when it is in none of them.
    pub fn nowhere(self) -> &'static str {
        match self {
            ReadFrom::Kafka => "in no partition of its topic",
            ReadFrom::JetStream => "on its subject in no message of the stream",
        }
    }
}

impl ReadFrom {
    /// What holds an audited topic's records, in a sentence.
    pub fn holder(self) -> &'static str {
        match self {
            ReadFrom::Kafka => "the topic",
            ReadFrom::JetStream => "the stream",
        }
    }

    /// What removes records one by one on request.
    pub fn delete_request(self) -> &'static str {
        match self {
            ReadFrom::Kafka => "a delete-records request",
            ReadFrom::JetStream => "a purge or a message delete",
        }
    }

    /// What was deleted where an absent event would be.
    pub(crate) fn gone(self, trimmed: &Trimmed) -> String {
        let start = trimmed.log_start;
        match (self, trimmed.first_left_ms) {
            (ReadFrom::Kafka, i64::MAX) => {
                format!("Kafka deleted every record of its partition (log start {start})")
            }
            (ReadFrom::Kafka, _) => format!(
                "Kafka deleted its partition's records before offset {start}, from before it committed"
            ),
            (ReadFrom::JetStream, i64::MAX) if trimmed.of_subject => {
                "the stream holds no message of its subject any more".to_string()
            }
            (ReadFrom::JetStream, i64::MAX) => {
                format!("the stream holds no message any more (first sequence {start})")
            }
            (ReadFrom::JetStream, _) if trimmed.of_subject => format!(
                "the stream removed its subject's messages before sequence {start}, from before it committed"
            ),
            (ReadFrom::JetStream, _) => format!(
                "the stream removed its messages before sequence {start}, from before it committed"
            ),
        }
    }
}

/// Reads the records of `topics` (routed names: Kafka topics, or JetStream subjects) stored
/// from `from_ms` (Unix ms) on into `copies`; `id` says where a Kafka record's event id is
/// (a JetStream message's is its `Nats-Msg-Id`).
pub(crate) async fn read(
    config: &Config,
    topics: &[Arc<str>],
    id: &IdPlace,
    from_ms: i64,
    read_committed: bool,
    copies: Sorter<Held>,
) -> Result<(Shape, Sorter<Held>)> {
    match &config.delivery.sink {
        SinkConfig::Kafka => {
            super::kafka::read(config, topics, id, from_ms, read_committed, copies).await
        }
        SinkConfig::Nats(nats) => super::jetstream::read(nats, topics, from_ms, copies).await,
        other => Err(Error::definite(
            format!(
                "the audit cannot read the {} sink back: {}",
                other.name(),
                other.why_no_audit().unwrap_or_default()
            ),
            "check delivery with the broker's own tools",
        )),
    }
}

/// One record of an audited topic, as far as the audit cares; sorted by event id, then where
/// it is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Held {
    pub id: String,
    /// Its topic's index in the audit's topic list.
    pub topic: u32,
    pub partition: i32,
    pub offset: i64,
    /// Sent by `walrelay replay` (its header).
    pub replayed: bool,
    /// The record's timestamp (Unix ms); -1 when it has none.
    pub timestamp_ms: i64,
}

impl Item for Held {
    fn size(&self) -> usize {
        heap(self.id.capacity())
    }

    fn write(&self, w: &mut impl Write) -> io::Result<()> {
        write_bytes(w, self.id.as_bytes())?;
        write_i64(w, ((self.topic as i64) << 32) | (self.partition as u32 as i64))?;
        write_i64(w, self.offset)?;
        write_i64(w, self.timestamp_ms)?;
        w.write_all(&[self.replayed as u8])
    }

    fn read(r: &mut impl Read) -> io::Result<Option<Held>> {
        let Some(id) = read_bytes(r)? else { return Ok(None) };
        let place = read_i64(r)?;
        let offset = read_i64(r)?;
        let timestamp_ms = read_i64(r)?;
        let mut replayed = [0u8];
        r.read_exact(&mut replayed)?;
        let replayed = replayed[0] != 0;
        Ok(Some(Held {
            id: String::from_utf8_lossy(&id).into_owned(),
            topic: (place >> 32) as u32,
            partition: place as u32 as i32,
            offset,
            replayed,
            timestamp_ms,
        }))
    }
}

/// What a topic's partition held when the audit read it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Trimmed {
    /// Kafka's log start offset: records before it were deleted.
    pub log_start: i64,
    /// The timestamp of the first record left (Unix ms); `i64::MAX` when none is left.
    pub first_left_ms: i64,
    /// JetStream: the first message left of the subject, not of the stream
    /// (`max_msgs_per_subject`).
    pub of_subject: bool,
}

/// What a topic's configuration says about records that are gone.
#[derive(Debug, Clone, Default)]
pub(crate) struct TopicConfig {
    /// `retention.ms`; -1: kept forever; `None`: Kafka would not say.
    pub retention_ms: Option<i64>,
    /// `retention.bytes` (JetStream: `max_bytes`); -1: no limit.
    pub retention_bytes: Option<i64>,
    /// Other limits that remove records by count (JetStream: `max_msgs=…`), for the reasons
    /// an absent event may be gone; empty for none.
    pub count_limits: Vec<String>,
    /// `cleanup.policy` holds `compact`: an earlier record of a key may be gone at any age.
    pub compacted: bool,
}

/// Records in an audited topic with no event id where the envelope puts it; the first
/// [`FOREIGN_KEPT`] are named.
pub(crate) const FOREIGN_KEPT: usize = 100;

/// Per topic, what the read found besides the records.
#[derive(Debug, Default)]
pub(crate) struct Shape {
    /// Partitions per topic (by index).
    pub partitions: Vec<i32>,
    /// Partitions whose records from the window's start on were partly or wholly deleted:
    /// events expected there that committed before the first record left may have been
    /// among them.
    pub trimmed: HashMap<(u32, i32), Trimmed>,
    /// Each topic's configuration (by index), for what deleted records can be told from.
    pub configs: Vec<TopicConfig>,
    /// Records read.
    pub records: u64,
    /// Records of the window's time with no event id: (topic index, partition, offset) of the
    /// first [`FOREIGN_KEPT`], and how many per topic (by index).
    pub foreign: Vec<(u32, i32, i64)>,
    pub foreign_counts: Vec<u64>,
    /// Answers of the broker that did not hold together, what the audit did instead, and
    /// what a stream's state says of events that are not in it.
    pub notes: Vec<String>,
    /// What the records were read from.
    pub read_from: ReadFrom,
    /// Where the records carry their event ids (`header id`, `header Nats-Msg-Id`, …).
    pub event_id_in: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_reads_back_as_written_replayed_or_not_with_or_without_a_timestamp() {
        for (replayed, timestamp_ms) in [(false, -1), (false, 0), (true, -1), (true, 1_700_000)] {
            let c = Held {
                id: "e-1".into(),
                topic: 3,
                partition: 7,
                offset: 42,
                replayed,
                timestamp_ms,
            };
            let mut b = Vec::new();
            c.write(&mut b).unwrap();
            assert_eq!(Held::read(&mut b.as_slice()).unwrap(), Some(c));
        }
    }
}
