//! Kafka Connect's offsets topic (`offset.storage.topic`, e.g. `connect-offsets`): read whole,
//! every partition from its start to its end as of now, with the `[kafka]` connection settings.
//! Connect's own `KafkaOffsetBackingStore` reads it the same way (to the end offsets, last
//! record per key wins).

use std::time::{Duration, Instant};

use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::{Entries, Unusable, WHERE_HINT};
use crate::config::KafkaConfig;

/// `[kafka]` keys that only a producer takes; librdkafka would warn about each in a consumer.
const PRODUCER_ONLY: &[&str] = &[
    "acks",
    "request.required.acks",
    "enable.idempotence",
    "linger.ms",
    "queue.buffering.max.ms",
    "partitioner",
    "compression.type",
    "compression.codec",
    "batch.num.messages",
    "batch.size",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "max.in.flight.requests.per.connection",
    "max.in.flight",
    "queue.buffering.max.messages",
    "queue.buffering.max.kbytes",
    "retries",
    "message.send.max.retries",
    "retry.backoff.ms",
    "transactional.id",
    "transaction.timeout.ms",
    "request.timeout.ms",
    "sticky.partitioning.linger.ms",
];

/// Every record of `topic`, in offset order per partition.
pub fn read(topic: &str, kafka: &KafkaConfig, timeout: Duration) -> Result<Entries, Unusable> {
    let fail = |what: String| Unusable::new(what, WHERE_HINT);
    let mut cfg = ClientConfig::new();
    for (k, v) in &kafka.properties {
        if !PRODUCER_ONLY.contains(&k.as_str()) {
            cfg.set(k, v);
        }
    }
    // No group: partitions are assigned by hand, nothing is committed.
    cfg.set("group.id", "walrelay-read-debezium-offsets");
    cfg.set("enable.auto.commit", "false");
    cfg.set("enable.auto.offset.store", "false");
    cfg.set("enable.partition.eof", "true");
    cfg.set("allow.auto.create.topics", "false");
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
