//! Kafka Connect's offsets topic (`offset.storage.topic`, e.g. `connect-offsets`): read whole,
//! every partition from its start to its end as of now, with the `[kafka]` connection settings.
//! Connect's own `KafkaOffsetBackingStore` reads it the same way (to the end offsets, last
//! record per key wins).

use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::{Entries, Unusable, WHERE_HINT};
use crate::config::KafkaConfig;

/// Every record of `topic`, in offset order per partition.
pub fn read(topic: &str, kafka: &KafkaConfig, timeout: Duration) -> Result<Entries, Unusable> {
    let fail = |what: String| Unusable::new(what, WHERE_HINT);
    let mut cfg = kafka.consumer_config();
    // No group: partitions are assigned by hand, nothing is committed.
    cfg.set("group.id", "walrelay-read-debezium-offsets");
    cfg.set("enable.auto.commit", "false");
    cfg.set("enable.auto.offset.store", "false");
    cfg.set("enable.partition.eof", "true");
    cfg.set("allow.auto.create.topics", "false");
    // A position librdkafka finds invalid mid-read (a truncation it infers from a new leader
    // epoch) goes back to the start: its default, the end, would stop the read early and yield
    // an older offset.
    cfg.set("auto.offset.reset", "earliest");
    cfg.set_log_level(RDKafkaLogLevel::Error);
    let consumer: BaseConsumer = cfg.create().map_err(|e| {
        fail(format!("cannot create a Kafka consumer: {}", kafka.describe_librdkafka_error(&e)))
    })?;
    let deadline = Instant::now() + timeout;
    let metadata = consumer.fetch_metadata(Some(topic), timeout).map_err(|e| {
        fail(format!(
            "cannot read the metadata of the offsets topic {topic}: {}",
            kafka.describe_librdkafka_error(&e)
        ))
    })?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic && t.error().is_none())
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    if partitions.is_empty() {
        return Err(fail(format!("the offsets topic {topic} does not exist or has no partitions")));
    }
    let mut assignment = TopicPartitionList::new();
    let mut remaining = 0;
    for &p in &partitions {
        let left = deadline.saturating_duration_since(Instant::now());
        let (low, high) = consumer.fetch_watermarks(topic, p, left).map_err(|e| {
            fail(format!(
                "cannot read the end of {topic} partition {p}: {}",
                kafka.describe_librdkafka_error(&e)
            ))
        })?;
        if high > low {
            assignment
                .add_partition_offset(topic, p, Offset::Offset(low))
                .map_err(|e| fail(format!("cannot assign {topic} partition {p}: {e}")))?;
            remaining += 1;
        }
    }
    let mut records = Vec::new();
    if remaining == 0 {
        return Ok(records);
    }
    let ends: std::collections::HashMap<i32, i64> = partitions
        .iter()
        .filter_map(|&p| {
            let left = deadline.saturating_duration_since(Instant::now());
            consumer.fetch_watermarks(topic, p, left).ok().map(|(_, h)| (p, h))
        })
        .collect();
    consumer.assign(&assignment).map_err(|e| fail(format!("cannot assign {topic}: {e}")))?;
    let mut done = std::collections::HashSet::new();
    while done.len() < remaining {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(fail(format!(
                "reading the offsets topic {topic} took more than {timeout:?}"
            )));
        }
        match consumer.poll(left.min(Duration::from_millis(500))) {
            None => {}
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                done.insert(p);
            }
            Some(Err(e)) => {
                return Err(fail(format!(
                    "reading the offsets topic {topic} failed: {}",
                    kafka.describe_librdkafka_error(&e)
                )))
            }
            Some(Ok(m)) => {
                records.push((m.key().map(<[u8]>::to_vec), m.payload().map(<[u8]>::to_vec)));
                if ends.get(&m.partition()).is_some_and(|end| m.offset() + 1 >= *end) {
                    done.insert(m.partition());
                }
            }
        }
    }
    Ok(records)
}
