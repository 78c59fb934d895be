//! What the audited topics hold: every record from the offset for a time to the end each
//! partition had when the audit began, read with librdkafka's simple consumer (no consumer
//! group, so no group ACL) one partition at a time, each record's event id and place handed to
//! a [`Sorter`] instead of held.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use super::id::IdPlace;
use super::spill::{heap, read_bytes, read_i64, write_bytes, write_i64, Item, Sorter};
use crate::config::Config;
use crate::delivery::exactly_once::progress_topic::Quiet;
use crate::delivery::partition_read::{self, Stop};
use crate::delivery::producer::principal;
use crate::error::{Error, Result};
use crate::replay::REPLAY_HEADER;

/// How long Kafka may take to answer one metadata, offsets or watermarks request.
const REQUEST: Duration = Duration::from_secs(15);
/// How long a partition's read may go without a record before the audit gives up.
const IDLE: Duration = Duration::from_secs(30);

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
    /// Kafka's log start offset: records before it were deleted (by retention).
    pub log_start: i64,
    /// The timestamp of the first record left (Unix ms); `i64::MAX` when none is left.
    pub first_left_ms: i64,
}

/// Per topic, what the read found besides the records.
#[derive(Debug, Default)]
pub(crate) struct Shape {
    /// Partitions per topic (by index).
    pub partitions: Vec<i32>,
    /// Partitions whose records from the window's start on were partly deleted, by Kafka's
    /// retention: events expected there that committed before the first record left cannot
    /// be told from missing.
    pub trimmed: HashMap<(u32, i32), Trimmed>,
    /// Records read.
    pub records: u64,
}

/// Reads `topics` from the offsets for `from_ms` (Unix ms) to the end each partition has now
/// into `copies`; `id` says where a record's event id is.
pub(crate) async fn read(
    config: &Config,
    topics: &[Arc<str>],
    id: &IdPlace,
    from_ms: i64,
    read_committed: bool,
    copies: Sorter<Held>,
) -> Result<(Shape, Sorter<Held>)> {
    let (config, topics, id) = (config.clone(), topics.to_vec(), id.clone());
    tokio::task::spawn_blocking(move || {
        let mut copies = copies;
        let shape = read_blocking(&config, &topics, &id, from_ms, read_committed, &mut copies)?;
        Ok((shape, copies))
    })
    .await
    .map_err(|e| Error::transient("the audit's Kafka reader stopped", e))?
}

/// A Kafka reader of partitions by offset, with no consumer group (so no group ACL): the
/// audit's, and the console's event lookup's. `read_committed`: only what committed Kafka
/// transactions hold.
pub(super) fn reader(config: &Config, read_committed: bool) -> Result<BaseConsumer<Quiet>> {
    let mut cfg = config.kafka.consumer_config();
    cfg.set("enable.partition.eof", "true")
        .set("allow.auto.create.topics", "false")
        .set("isolation.level", if read_committed { "read_committed" } else { "read_uncommitted" })
        // One partition is read at a time: what librdkafka fetches ahead stays small.
        .set("queued.max.messages.kbytes", "8192")
        .set("fetch.max.bytes", "8388608")
        .set("fetch.wait.max.ms", "10");
    cfg.create_with_context(Quiet).map_err(|e| {
        Error::definite(
            format!(
                "cannot create a Kafka reader (the audit's, or the event lookup's): {}",
                config.kafka.describe_librdkafka_error(&e)
            ),
            "fix [kafka] as the message says",
        )
    })
}

fn read_blocking(
    config: &Config,
    topics: &[Arc<str>],
    id: &IdPlace,
    from_ms: i64,
    read_committed: bool,
    copies: &mut Sorter<Held>,
) -> Result<Shape> {
    let consumer = reader(config, read_committed)?;
    let client = consumer.client();
    let mut shape = Shape::default();
    let mut by_time = TopicPartitionList::new();
    // (topic index, partition) → (log start, end).
    let mut marks: HashMap<(u32, i32), (i64, i64)> = HashMap::new();
    for (index, topic) in topics.iter().enumerate() {
        let index = index as u32;
        let metadata = client
            .fetch_metadata(Some(topic), REQUEST)
            .map_err(|e| Error::transient(format!("no metadata for topic {topic}"), e))?;
        let t = &metadata.topics()[0];
        if let Some(e) = t.error() {
            return Err(unreadable(config, topic, KafkaError::MetadataFetch(e.into())));
        }
        let n = t.partitions().len() as i32;
        shape.partitions.push(n);
        for p in 0..n {
            let (low, high) = client
                .fetch_watermarks(topic, p, REQUEST)
                .map_err(|e| Error::transient(format!("no watermarks for {topic} [{p}]"), e))?;
            marks.insert((index, p), (low, high));
            if low > 0 && low == high {
                // Everything the partition ever held is deleted.
                shape
                    .trimmed
                    .insert((index, p), Trimmed { log_start: low, first_left_ms: i64::MAX });
            }
            if high > low {
                by_time
                    .add_partition_offset(topic, p, Offset::Offset(from_ms.max(0)))
                    .map_err(|e| Error::transient("the audit's partition list", e))?;
            }
        }
    }
    if by_time.count() == 0 {
        return Ok(shape);
    }
    let starts = consumer
        .offsets_for_times(by_time, REQUEST)
        .map_err(|e| Error::transient("Kafka did not say which offsets the window starts at", e))?;
    let index_of: HashMap<&str, u32> =
        topics.iter().enumerate().map(|(i, t)| (t.as_ref(), i as u32)).collect();
    for e in starts.elements() {
        let Some(&index) = index_of.get(e.topic()) else { continue };
        let p = e.partition();
        let (low, end) = marks.get(&(index, p)).copied().unwrap_or_default();
        // No record at or after the time: nothing of the window there.
        let Offset::Offset(from) = e.offset() else { continue };
        // The first record left is of the window: deleted records may have been too.
        let trimmed = low > 0 && from <= low;
        let mut first = true;
        let mut wait = |idle: Duration| {
            if idle > IDLE {
                let open = match read_committed {
                    true => ": read_committed stops at a Kafka transaction left open (a relay killed in one) until the broker aborts it (transaction.timeout.ms)",
                    false => "",
                };
                return Err(Error::transient_msg(format!(
                    "the audit read nothing of {} [{p}] for {} s before its end offset {end}{open}",
                    e.topic(),
                    IDLE.as_secs()
                )));
            }
            Ok(())
        };
        let mut visit = |r: &partition_read::Raw<'_>| {
            if first && trimmed {
                let first_left_ms = r.timestamp_ms.unwrap_or(i64::MAX);
                shape.trimmed.insert((index, p), Trimmed { log_start: low, first_left_ms });
            }
            first = false;
            shape.records += 1;
            let replayed = r.headers().any(|(name, _)| name == REPLAY_HEADER);
            let Some(id) = id.find(r.headers(), r.value) else { return Ok(()) };
            let timestamp_ms = r.timestamp_ms.unwrap_or(-1);
            let copy =
                Held { id, topic: index, partition: p, offset: r.offset, replayed, timestamp_ms };
            copies.push(copy).map_err(super::spill::failed)
        };
        partition_read::read(client, e.topic(), p, from, end, &mut wait, &mut visit).map_err(
            |stop| match stop {
                Stop::NotAllowed => unreadable(
                    config,
                    e.topic(),
                    KafkaError::MessageConsumption(RDKafkaErrorCode::TopicAuthorizationFailed),
                ),
                Stop::Failed(k) => {
                    Error::transient(format!("the audit's read of {} [{p}] failed", e.topic()), k)
                }
                Stop::Caller(e) => e,
            },
        )?;
    }
    Ok(shape)
}

/// Each topic's `retention.ms` as Kafka describes it; `None` where it would not say.
pub(crate) async fn retention(config: &Config, topics: &[String]) -> Vec<(String, Option<i64>)> {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    let admin: Option<AdminClient<Quiet>> =
        config.kafka.consumer_config().create_with_context(Quiet).ok();
    let mut out = Vec::with_capacity(topics.len());
    for topic in topics {
        let ms = match &admin {
            Some(admin) => {
                let options = AdminOptions::new().request_timeout(Some(REQUEST));
                let described =
                    admin.describe_configs([&ResourceSpecifier::Topic(topic)], &options).await;
                described
                    .ok()
                    .and_then(|mut v| v.pop())
                    .and_then(|r| r.ok())
                    .and_then(|c| c.get("retention.ms").and_then(|e| e.value.clone()))
                    .and_then(|v| v.parse().ok())
            }
            None => None,
        };
        out.push((topic.clone(), ms));
    }
    out
}

/// A topic the window's events are routed to that the audit cannot read.
fn unreadable(config: &Config, topic: &str, e: KafkaError) -> Error {
    let principal = principal(&config.kafka);
    match e.rdkafka_error_code() {
        Some(RDKafkaErrorCode::TopicAuthorizationFailed) => Error::definite(
            format!("the audit may not read topic {topic}"),
            format!("allow {principal} Read and Describe on it: kafka-acls.sh --bootstrap-server … --add --allow-principal {principal} --operation Read --operation Describe --topic {topic}"),
        ),
        _ => Error::definite(
            format!("topic {topic}, where the router sends events of the window, cannot be read: {e}"),
            "every event routed there is missing: check the topic's name and that it exists (kafka-topics.sh --describe --topic …)",
        ),
    }
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
