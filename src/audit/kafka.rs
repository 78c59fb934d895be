//! What the audited topics hold: every record from the offset for a time to the end each
//! partition had when the audit began, read with no consumer group (`assign`, offsets by time).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::replay::REPLAY_HEADER;

/// How long Kafka may take to answer one metadata, offsets or watermarks request.
const REQUEST: Duration = Duration::from_secs(15);
/// How long the whole read may go without a record before it gives up on the rest.
const IDLE: Duration = Duration::from_secs(30);

/// One record of an audited topic, as far as the audit cares.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub partition: i32,
    pub offset: i64,
    /// Sent by `walrelay replay` (its header).
    pub replayed: bool,
    /// The record's timestamp (Unix ms), when it has one.
    pub timestamp_ms: Option<i64>,
}

/// Per topic: its partition count, and the records by event id in offset order per partition.
#[derive(Debug, Default)]
pub(crate) struct Holdings {
    pub partitions: HashMap<Arc<str>, i32>,
    pub records: HashMap<String, Vec<(Arc<str>, Held)>>,
    /// Per topic and partition, the event ids in offset order (for the order check).
    pub sequences: HashMap<(Arc<str>, i32), Vec<String>>,
}

impl Holdings {
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.records.keys().map(String::as_str)
    }
}

/// Reads `topics` from the offsets for `from_ms` (Unix ms) to the end; `id_header` names the
/// header the event id is in.
pub(crate) async fn read(
    config: &Config,
    topics: &[Arc<str>],
    id_header: &str,
    from_ms: i64,
) -> Result<Holdings> {
    let (config, topics, id_header) = (config.clone(), topics.to_vec(), id_header.to_string());
    tokio::task::spawn_blocking(move || read_blocking(&config, &topics, &id_header, from_ms))
        .await
        .map_err(|e| Error::transient("the audit's Kafka reader stopped", e))?
}

fn read_blocking(
    config: &Config,
    topics: &[Arc<str>],
    id_header: &str,
    from_ms: i64,
) -> Result<Holdings> {
    let read_committed = config.delivery.exactly_once();
    let mut cfg = config.kafka.consumer_config();
    cfg.set("group.id", "walrelay-audit")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        .set("allow.auto.create.topics", "false")
        .set("isolation.level", if read_committed { "read_committed" } else { "read_uncommitted" });
    let consumer: BaseConsumer = cfg.create().map_err(|e| {
        Error::definite(
            format!(
                "cannot create the audit's Kafka reader: {}",
                config.kafka.describe_librdkafka_error(&e)
            ),
            "fix [kafka] as the message says",
        )
    })?;
    let mut holdings = Holdings::default();
    let mut by_time = TopicPartitionList::new();
    let mut ends: HashMap<(Arc<str>, i32), i64> = HashMap::new();
    for topic in topics {
        let metadata = consumer
            .fetch_metadata(Some(topic), REQUEST)
            .map_err(|e| Error::transient(format!("no metadata for topic {topic}"), e))?;
        let t = &metadata.topics()[0];
        if let Some(e) = t.error() {
            let e = KafkaError::MetadataFetch(e.into());
            return Err(match e.rdkafka_error_code() {
                Some(rdkafka::types::RDKafkaErrorCode::TopicAuthorizationFailed) => Error::definite(
                    format!("the audit may not read topic {topic}"),
                    format!("allow walrelay's principal Read and Describe on it: kafka-acls.sh --bootstrap-server … --add --allow-principal User:<walrelay> --operation Read --operation Describe --topic {topic}"),
                ),
                _ => Error::definite(
                    format!("topic {topic}, where the router sends events of the window, cannot be read: {e}"),
                    "every event routed there is missing: check the topic's name and that it exists (kafka-topics.sh --describe --topic …)",
                ),
            });
        }
        let n = t.partitions().len() as i32;
        holdings.partitions.insert(topic.clone(), n);
        for p in 0..n {
            let (low, high) = consumer
                .fetch_watermarks(topic, p, REQUEST)
                .map_err(|e| Error::transient(format!("no watermarks for {topic} [{p}]"), e))?;
            if high > low {
                ends.insert((topic.clone(), p), high);
                by_time
                    .add_partition_offset(topic, p, Offset::Offset(from_ms.max(0)))
                    .map_err(|e| Error::transient("the audit's partition list", e))?;
            }
        }
    }
    if ends.is_empty() {
        return Ok(holdings);
    }
    let starts = consumer
        .offsets_for_times(by_time, REQUEST)
        .map_err(|e| Error::transient("Kafka did not say which offsets the window starts at", e))?;
    let mut assign = TopicPartitionList::new();
    for e in starts.elements() {
        let key = (Arc::<str>::from(e.topic()), e.partition());
        match e.offset() {
            // No record at or after the time: nothing of the window there.
            Offset::End | Offset::Invalid => {
                ends.remove(&key);
            }
            offset => {
                assign
                    .add_partition_offset(e.topic(), e.partition(), offset)
                    .map_err(|e| Error::transient("the audit's partition list", e))?;
            }
        }
    }
    consumer.assign(&assign).map_err(|e| Error::transient("the audit's reader", e))?;
    let mut last_record = Instant::now();
    while !ends.is_empty() {
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            prune_read(&consumer, &mut ends);
            if last_record.elapsed() > IDLE {
                return Err(Error::transient_msg(format!(
                    "the audit read nothing for {}s with {} partition(s) not read to their end",
                    IDLE.as_secs(),
                    ends.len()
                )));
            }
            continue;
        };
        last_record = Instant::now();
        let m = match message {
            Ok(m) => m,
            Err(KafkaError::PartitionEOF(_)) => {
                // The error names no topic, and read_committed ends a partition with a
                // transaction marker no record reports: the positions say which are read.
                prune_read(&consumer, &mut ends);
                continue;
            }
            Err(e) => return Err(Error::transient("the audit's read of Kafka failed", e)),
        };
        // The audited topic's own name: no allocation per record.
        let Some(topic) = topics.iter().find(|t| ***t == *m.topic()).cloned() else { continue };
        let key = (topic.clone(), m.partition());
        if let Some(end) = ends.get(&key) {
            if m.offset() + 1 >= *end {
                ends.remove(&key);
            }
        }
        let Some(headers) = m.headers() else { continue };
        let mut id = None;
        let mut replayed = false;
        for h in headers.iter() {
            if h.key == id_header {
                id = h.value.map(|v| String::from_utf8_lossy(v).into_owned());
            } else if h.key == REPLAY_HEADER {
                replayed = true;
            }
        }
        let Some(id) = id else { continue };
        let held = Held {
            partition: m.partition(),
            offset: m.offset(),
            replayed,
            timestamp_ms: m.timestamp().to_millis(),
        };
        holdings.sequences.entry(key).or_default().push(id.clone());
        holdings.records.entry(id).or_default().push((topic, held));
    }
    Ok(holdings)
}

/// Drops the partitions whose position reached the end they had when the audit began.
fn prune_read(consumer: &BaseConsumer, ends: &mut HashMap<(Arc<str>, i32), i64>) {
    let Ok(positions) = consumer.position() else { return };
    for e in positions.elements() {
        let key = (Arc::<str>::from(e.topic()), e.partition());
        if let (Offset::Offset(at), Some(end)) = (e.offset(), ends.get(&key).copied()) {
            if at >= end {
                ends.remove(&key);
            }
        }
    }
}
