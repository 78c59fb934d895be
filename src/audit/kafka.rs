//! What the audited topics hold: every record from the offset for a time to the end each
//! partition had when the audit began, read with librdkafka's simple consumer (no consumer
//! group, so no group ACL) one partition at a time, each record's event id and place handed to
//! a [`Sorter`] instead of held.
//!
//! The broker's answers are checked, not trusted: the records just before the offset it gives
//! for the window's start must be older than that start (else the partition is read from its
//! log start), and each read goes on past the end offset it gave, to the first EOF, so an end
//! that lags the records hides none of them. Either way a wrong answer costs reading, never a
//! false "missing".

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use super::id::IdPlace;
use super::readback::{Held, Shape, TopicConfig, Trimmed, FOREIGN_KEPT};
use super::spill::Sorter;
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

/// Records checked before an offset the broker gave for a time: each must be older than it.
const PROBE: i64 = 8;

/// Reads `topics` from the offsets for `from_ms` (Unix ms) to the end each partition has now
/// into `copies`, and their configurations; `id` says where a record's event id is. Records
/// older than `from_ms` are no event of the window and are left out.
pub(crate) async fn read(
    config: &Config,
    topics: &[Arc<str>],
    id: &IdPlace,
    from_ms: i64,
    read_committed: bool,
    copies: Sorter<Held>,
) -> Result<(Shape, Sorter<Held>)> {
    let configs = configs(config, topics).await;
    let described = id.describe();
    let (config, topics, id) = (config.clone(), topics.to_vec(), id.clone());
    let (mut shape, copies) = tokio::task::spawn_blocking(move || {
        let mut copies = copies;
        let shape = read_blocking(&config, &topics, &id, from_ms, read_committed, &mut copies)?;
        Ok::<_, Error>((shape, copies))
    })
    .await
    .map_err(|e| Error::transient("the audit's Kafka reader stopped", e))??;
    shape.configs = configs;
    shape.event_id_in = described;
    Ok((shape, copies))
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
    // (topic index, partition) → (log start, end), as Kafka said when asked (at `asked_ms`).
    let mut marks: Vec<((u32, i32), (i64, i64))> = Vec::new();
    let asked_ms = crate::clock::unix_micros() / 1000;
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
        shape.foreign_counts.push(0);
        for p in 0..n {
            let (low, high) = client
                .fetch_watermarks(topic, p, REQUEST)
                .map_err(|e| Error::transient(format!("no watermarks for {topic} [{p}]"), e))?;
            marks.push(((index, p), (low, high)));
            by_time
                .add_partition_offset(topic, p, Offset::Offset(from_ms.max(0)))
                .map_err(|e| Error::transient("the audit's partition list", e))?;
        }
    }
    if marks.is_empty() {
        return Ok(shape);
    }
    let answers = consumer
        .offsets_for_times(by_time, REQUEST)
        .map_err(|e| Error::transient("Kafka did not say which offsets the window starts at", e))?;
    let mut for_time: HashMap<(String, i32), Option<i64>> = HashMap::new();
    for e in answers.elements() {
        let at = match e.offset() {
            Offset::Offset(o) => Some(o),
            _ => None,
        };
        for_time.insert((e.topic().to_string(), e.partition()), at);
    }
    for ((index, p), (low, end)) in marks {
        let topic = &topics[index as usize];
        let told = for_time.get(&(topic.to_string(), p)).copied().flatten();
        // Where the window starts, as far as the broker's answers hold together.
        let start = match told {
            Some(from) if from > low => {
                match older_than(client, config, topic, p, (from - PROBE).max(low), from, from_ms)?
                {
                    true => from,
                    false => {
                        shape.notes.push(format!("{topic} [{p}]: the broker gave offset {from} for the window's start, but a record before it is not older; read from the partition's start ({low})"));
                        low
                    }
                }
            }
            Some(from) => from.max(low),
            // No record at or after the time, the broker says: the last ones must be older.
            None if end > low => {
                match older_than(client, config, topic, p, (end - PROBE).max(low), end, from_ms)? {
                    true => end,
                    false => {
                        shape.notes.push(format!("{topic} [{p}]: the broker said no record is as young as the window's start, but its last records are; read from the partition's start ({low})"));
                        low
                    }
                }
            }
            None => low,
        };
        // The first record left is of the window: deleted records may have been too.
        let trimmed = low > 0 && start <= low;
        if trimmed {
            shape.trimmed.insert(
                (index, p),
                Trimmed { log_start: low, first_left_ms: i64::MAX, of_subject: false },
            );
        }
        let mut first = true;
        let mut wait = |idle: Duration| idle_too_long(idle, topic, p, end, read_committed);
        let mut visit = |r: &partition_read::Raw<'_>| {
            if first && trimmed {
                let first_left_ms = r.timestamp_ms.unwrap_or(i64::MAX);
                shape.trimmed.insert(
                    (index, p),
                    Trimmed { log_start: low, first_left_ms, of_subject: false },
                );
            }
            first = false;
            shape.records += 1;
            let timestamp_ms = r.timestamp_ms.unwrap_or(-1);
            // Older than the window (a read that started early): no event of it, and no
            // record the audit judges.
            if timestamp_ms >= 0 && timestamp_ms < from_ms {
                return Ok(());
            }
            let replayed = r.headers().any(|(name, _)| name == REPLAY_HEADER);
            let Some(id) = id.find(r.headers(), r.value) else {
                shape.foreign_counts[index as usize] += 1;
                if shape.foreign.len() < FOREIGN_KEPT {
                    shape.foreign.push((index, p, r.offset));
                }
                return Ok(());
            };
            let copy =
                Held { id, topic: index, partition: p, offset: r.offset, replayed, timestamp_ms };
            copies.push(copy).map_err(super::spill::failed)
        };
        // Past the end the broker gave: a broker whose end offsets lag its records hides none.
        partition_read::read_past_end(
            client, topic, p, start, end, asked_ms, &mut wait, &mut visit,
        )
        .map_err(|stop| stopped(config, topic, p, stop))?;
    }
    Ok(shape)
}

/// Whether every record of `topic` [`p`] in `[from, to)` is older than `ms`: what an offset the
/// broker gave for the time `ms` promises of the records before it.
fn older_than(
    client: &rdkafka::client::Client<Quiet>,
    config: &Config,
    topic: &str,
    p: i32,
    from: i64,
    to: i64,
    ms: i64,
) -> Result<bool> {
    let mut older = true;
    let mut wait = |idle: Duration| idle_too_long(idle, topic, p, to, false);
    let mut visit = |r: &partition_read::Raw<'_>| {
        if r.offset < to && r.timestamp_ms.is_some_and(|t| t >= ms) {
            older = false;
        }
        Ok(())
    };
    partition_read::read(client, topic, p, from, to, &mut wait, &mut visit)
        .map_err(|stop| stopped(config, topic, p, stop))?;
    Ok(older)
}

/// A read of `topic` [`p`] that brought nothing for [`IDLE`] gives up.
fn idle_too_long(
    idle: Duration,
    topic: &str,
    p: i32,
    end: i64,
    read_committed: bool,
) -> Result<()> {
    if idle <= IDLE {
        return Ok(());
    }
    let open = match read_committed {
        true => ": read_committed stops at a Kafka transaction left open (a relay killed in one) until the broker aborts it (transaction.timeout.ms)",
        false => "",
    };
    Err(Error::transient_msg(format!(
        "the audit read nothing of {topic} [{p}] for {} s before its end offset {end}{open}",
        IDLE.as_secs()
    )))
}

/// Why a partition's read stopped, as the audit's error.
fn stopped(config: &Config, topic: &str, p: i32, stop: Stop) -> Error {
    match stop {
        Stop::NotAllowed => unreadable(
            config,
            topic,
            KafkaError::MessageConsumption(RDKafkaErrorCode::TopicAuthorizationFailed),
        ),
        Stop::Failed(k) => Error::transient(format!("the audit's read of {topic} [{p}] failed"), k),
        Stop::Caller(e) => e,
    }
}

/// Each topic's retention and cleanup policy as Kafka describes them; unknown where it would
/// not say (no DescribeConfigs ACL).
pub(crate) async fn configs(config: &Config, topics: &[Arc<str>]) -> Vec<TopicConfig> {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    let admin: Option<AdminClient<Quiet>> =
        config.kafka.consumer_config().create_with_context(Quiet).ok();
    let Some(admin) = admin else { return vec![TopicConfig::default(); topics.len()] };
    let options = AdminOptions::new().request_timeout(Some(REQUEST));
    let resources: Vec<ResourceSpecifier> =
        topics.iter().map(|t| ResourceSpecifier::Topic(t.as_ref())).collect();
    let described = admin.describe_configs(&resources, &options).await.unwrap_or_default();
    let mut out = vec![TopicConfig::default(); topics.len()];
    for (slot, described) in out.iter_mut().zip(described) {
        let Ok(c) = described else { continue };
        let number = |key: &str| c.get(key).and_then(|e| e.value.as_deref()?.parse().ok());
        *slot = TopicConfig {
            retention_ms: number("retention.ms"),
            retention_bytes: number("retention.bytes"),
            count_limits: Vec::new(),
            compacted: c
                .get("cleanup.policy")
                .and_then(|e| e.value.as_deref())
                .is_some_and(|v| v.contains("compact")),
        };
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
