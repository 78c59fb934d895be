//! The progress topic's I/O for exactly-once: reading the commit LSN the last committed Kafka
//! transaction stored, and creating the topic on the first start.
//!
//! The read needs no consumer group: librdkafka's consumer wants a `group.id` for `assign()`,
//! and with one it looks up the group's coordinator, which a secured cluster refuses without a
//! group ACL. So the partition is read with librdkafka's simple consumer
//! (`rd_kafka_consume_start`), which has no group. It never waits on EOF either: EOF comes only
//! when a fetch finds nothing new, so on a topic that another relay keeps writing it may never
//! come. The read ends at the partition's end offset taken when it starts (after this relay's
//! `init_transactions`, so none of its own transactions is open): at EOF at or past it, or at
//! the first record at or past it.

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::{Client, ClientContext};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::config::{DeliveryConfig, KafkaConfig};
use crate::delivery::partition_read;
use crate::delivery::producer::principal;
use crate::error::{Error, Result};
use crate::lsn::Lsn;

/// How long start-up waits for the progress topic to be read or created.
pub const PROGRESS_TIMEOUT: Duration = Duration::from_secs(30);

/// How many offsets before the end the read starts at; doubled until this relay's key is found.
const FIRST_WINDOW: i64 = 64;

/// The commit LSN the progress topic of `delivery` holds for its transactional id, read with
/// `read_committed` (`None`: no Kafka transaction of this relay committed yet), within
/// `timeout`. With `create`, creates the topic (compacted, one partition) when it does not
/// exist. A relay that kept its position in the shared `walrelay.progress` before per-relay
/// topics finds it there until its own topic exists.
pub async fn read_progress(
    kafka: &KafkaConfig,
    delivery: &DeliveryConfig,
    create: bool,
    timeout: Duration,
) -> Result<Option<Lsn>> {
    let topic = delivery.progress_topic.as_str();
    let id = delivery.transactional_id.as_str();
    let own = read_topic(kafka, topic, id, timeout).await?;
    if let Some(Some(lsn)) = own {
        return Ok(Some(lsn));
    }
    // Nothing of this relay's in its own topic yet: an earlier version may have kept it in the
    // shared one, until this relay's first commit.
    let legacy = match delivery.legacy_progress_topic() {
        Some(legacy) => read_topic(kafka, legacy, id, timeout).await?.flatten(),
        None => None,
    };
    if let Some(lsn) = legacy {
        tracing::info!(%lsn, legacy = DeliveryConfig::LEGACY_PROGRESS_TOPIC, topic,
            "exactly-once: this relay's position is in the shared progress topic of earlier walrelay versions; it is read from there until the relay's first commit to its own topic");
    }
    if own.is_none() && create {
        create_progress_topic(kafka, topic, timeout).await?;
    }
    Ok(legacy)
}

/// The last position `id` stored in `topic`; `None` when the topic does not exist.
async fn read_topic(
    kafka: &KafkaConfig,
    topic: &str,
    id: &str,
    timeout: Duration,
) -> Result<Option<Option<Lsn>>> {
    let (k, t, i) = (kafka.clone(), topic.to_string(), id.to_string());
    tokio::task::spawn_blocking(move || read_blocking(&k, &t, &i, timeout))
        .await
        .map_err(|e| Error::transient("reading the progress topic panicked", e))?
}

/// librdkafka's log and errors, at debug: the read says itself what went wrong (a normal end of
/// partition is not an error).
pub(crate) struct Quiet;

impl ClientContext for Quiet {
    fn log(&self, _level: RDKafkaLogLevel, fac: &str, message: &str) {
        tracing::debug!(target: "librdkafka", fac, "{message}");
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(target: "librdkafka", %error, reason, "kafka client error");
    }
}

impl ConsumerContext for Quiet {}

impl rdkafka::producer::ProducerContext for Quiet {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &rdkafka::producer::DeliveryResult<'_>, _: ()) {}
}

fn read_blocking(
    kafka: &KafkaConfig,
    topic: &str,
    id: &str,
    timeout: Duration,
) -> Result<Option<Option<Lsn>>> {
    let fail = |what: String, e: KafkaError| {
        Error::transient(format!("{what}: {}", kafka.describe_librdkafka_error(&e)), e)
    };
    let deadline = Instant::now() + timeout;
    let consumer = reader(kafka)?;
    let client = consumer.client();
    let metadata = client
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| fail(format!("cannot read the metadata of {topic}"), e))?;
    let Some(meta) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Ok(None);
    };
    match meta.error().map(RDKafkaErrorCode::from) {
        Some(RDKafkaErrorCode::TopicAuthorizationFailed) => {
            return Err(not_allowed(kafka, topic, "Describe"))
        }
        Some(_) => return Ok(None),
        None if meta.partitions().is_empty() => return Ok(None),
        None => {}
    }
    if meta.partitions().len() != 1 {
        return Err(Error::definite(
            format!(
                "the progress topic {topic} has {} partitions; walrelay keeps its position in one",
                meta.partitions().len()
            ),
            "name a topic of one partition in [delivery] progress_topic (walrelay creates it compacted when it does not exist)",
        ));
    }
    let left = deadline.saturating_duration_since(Instant::now());
    let (low, end) = client
        .fetch_watermarks(topic, 0, left)
        .map_err(|e| fail(format!("cannot read where the progress topic {topic} ends"), e))?;
    // At least one read, also of an empty topic: a missing Read ACL shows now, not at the first
    // restart after the first commit.
    let mut from = end;
    loop {
        from = (from - FIRST_WINDOW.max(end - from)).max(low);
        let mut last = None;
        read_range(kafka, client, topic, from, end, deadline, &mut |key, value, offset| {
            if key == id.as_bytes() {
                last = Some(parse_position(topic, id, value, offset)?);
            }
            Ok(())
        })?;
        if last.is_some() {
            return Ok(Some(last));
        }
        if from <= low {
            return Ok(Some(None));
        }
    }
}

fn parse_position(topic: &str, id: &str, value: &[u8], offset: i64) -> Result<Lsn> {
    let text = String::from_utf8_lossy(value);
    text.parse::<Lsn>().map_err(|_| {
        Error::definite(
            format!("the progress topic {topic} holds {text:?} for {id} at offset {offset}, which is not an LSN"),
            "something other than walrelay wrote to the progress topic: give walrelay a topic of its own in [delivery] progress_topic",
        )
    })
}

/// The keys (transactional ids) of the last `window` records of `topic` (for `walrelay
/// check`: who else writes to a shared progress topic). Empty when the topic does not exist.
pub(crate) async fn writers(
    kafka: &KafkaConfig,
    topic: &str,
    window: i64,
    timeout: Duration,
) -> Result<std::collections::BTreeSet<String>> {
    let (kafka, topic) = (kafka.clone(), topic.to_string());
    let read = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + timeout;
        let consumer = reader(&kafka)?;
        let client = consumer.client();
        let mut keys = std::collections::BTreeSet::new();
        let Ok((low, end)) = client.fetch_watermarks(&topic, 0, timeout) else { return Ok(keys) };
        if end > low {
            read_range(
                &kafka,
                client,
                &topic,
                (end - window).max(low),
                end,
                deadline,
                &mut |key, _, _| {
                    keys.insert(String::from_utf8_lossy(key).into_owned());
                    Ok(())
                },
            )?;
        }
        Ok(keys)
    });
    read.await.map_err(|e| Error::transient("reading the progress topic panicked", e))?
}

fn reader(kafka: &KafkaConfig) -> Result<BaseConsumer<Quiet>> {
    let mut cfg = kafka.consumer_config();
    cfg.set("enable.partition.eof", "true")
        .set("allow.auto.create.topics", "false")
        // Only what committed Kafka transactions hold: an aborted one's position never counts.
        .set("isolation.level", "read_committed")
        // The end of the partition is known when a fetch comes back with nothing new: the
        // broker holds such a fetch up to this long (500 ms by default), and every start waits
        // for one.
        .set("fetch.wait.max.ms", "10")
        .set_log_level(RDKafkaLogLevel::Debug);
    cfg.create_with_context(Quiet).map_err(|e| {
        Error::transient(
            format!(
                "cannot create the progress topic's reader: {}",
                kafka.describe_librdkafka_error(&e)
            ),
            e,
        )
    })
}

/// What a read hands over of each record: key, value, offset.
type Visit<'a> = dyn FnMut(&[u8], &[u8], i64) -> Result<()> + 'a;

/// Hands `visit` every committed record between offset `from` and `end` (the end offset when
/// the read began), within `deadline`.
fn read_range(
    kafka: &KafkaConfig,
    client: &Client<Quiet>,
    topic: &str,
    from: i64,
    end: i64,
    deadline: Instant,
    visit: &mut Visit<'_>,
) -> Result<()> {
    let mut waiting_said = false;
    let mut wait = |_: Duration| {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::transient_msg(format!(
                "reading the progress topic {topic} up to offset {end} took more than its timeout: another producer's Kafka transaction is open on it (a shared topic), or the broker is slow"
            )));
        }
        if !waiting_said && left < Duration::from_secs(20) {
            waiting_said = true;
            tracing::info!(topic, end, "waiting for the progress topic to be readable up to its end: on a shared topic another relay's open Kafka transaction holds it back (give each relay its own topic)");
        }
        Ok(())
    };
    let mut each = |r: &partition_read::Raw<'_>| visit(r.key, r.value, r.offset);
    partition_read::read(client, topic, 0, from, end, &mut wait, &mut each).map_err(|stop| {
        match stop {
            partition_read::Stop::NotAllowed => not_allowed(kafka, topic, "Read"),
            partition_read::Stop::Failed(e) => {
                Error::transient(format!("reading the progress topic {topic}"), e)
            }
            partition_read::Stop::Caller(e) => e,
        }
    })
}

/// An ACL on the progress topic is missing: a stop with the line that grants it.
fn not_allowed(kafka: &KafkaConfig, topic: &str, operation: &str) -> Error {
    let principal = principal(kafka);
    Error::definite(
        format!("walrelay may not {operation} its progress topic {topic}"),
        format!("exactly-once reads its position there at every start and writes one in every Kafka transaction: add the ACL that allows {principal} Read and Write on it: kafka-acls.sh --bootstrap-server … --add --allow-principal {principal} --operation Read --operation Write --topic {topic}"),
    )
}

/// Creates the progress topic: one partition, compacted, with the cluster's replication factor
/// (its `default.replication.factor`, and at least as many replicas as it has brokers up to
/// three); never with one replica because the cluster could not be asked. Returns the
/// replication factor it was created with, `None` when it existed.
pub(crate) async fn create_progress_topic(
    kafka: &KafkaConfig,
    topic: &str,
    timeout: Duration,
) -> Result<Option<i32>> {
    let hint = format!(
        "create it yourself: one partition, cleanup.policy=compact (kafka-topics.sh --create --topic {topic} --partitions 1 --replication-factor 3 --config cleanup.policy=compact), or allow walrelay's principal CREATE on it"
    );
    let mut cfg = kafka.consumer_config();
    cfg.set_log_level(RDKafkaLogLevel::Debug);
    let admin: AdminClient<Quiet> = cfg.create_with_context(Quiet).map_err(|e| {
        Error::transient(
            format!("cannot create a Kafka admin client: {}", kafka.describe_librdkafka_error(&e)),
            e,
        )
    })?;
    let (replicas, brokers) = replication_factor(kafka, &admin, topic, timeout).await?;
    let new =
        NewTopic::new(topic, 1, TopicReplication::Fixed(replicas)).set("cleanup.policy", "compact");
    let opts = AdminOptions::new().operation_timeout(Some(timeout));
    let results = admin
        .create_topics([&new], &opts)
        .await
        .map_err(|e| Error::transient(format!("cannot create the progress topic {topic}"), e))?;
    let mut created = None;
    for r in results {
        match r {
            Ok(_) => {
                tracing::info!(
                    topic,
                    replicas,
                    brokers,
                    "created the progress topic (compacted, one partition)"
                );
                created = Some(replicas);
            }
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => {
                return Err(Error::definite(
                    format!("walrelay could not create the progress topic {topic}: {code}"),
                    hint,
                ))
            }
        }
    }
    Ok(created)
}

/// The replication factor a progress topic is created with, and the cluster's brokers: the
/// broker's `default.replication.factor`, at least as many as the cluster has brokers up to
/// three. Refused (never one replica by default) when the cluster's brokers cannot be read.
pub(crate) async fn replication_factor(
    kafka: &KafkaConfig,
    admin: &AdminClient<Quiet>,
    topic: &str,
    timeout: Duration,
) -> Result<(i32, i32)> {
    let metadata = admin.inner().fetch_metadata(None, timeout).map_err(|e| {
        Error::transient(
            format!("cannot read the cluster's brokers to create the progress topic {topic} with its replication factor: {}", kafka.describe_librdkafka_error(&e)),
            e,
        )
    })?;
    let brokers = metadata.brokers().len().max(1) as i32;
    let default = match metadata.brokers().first() {
        Some(b) => default_replication_factor(admin, b.id(), timeout).await,
        None => None,
    };
    Ok((default.unwrap_or(1).max(brokers.min(3)).min(brokers), brokers))
}

/// The broker's `default.replication.factor`, when this principal may read it.
async fn default_replication_factor(
    admin: &AdminClient<Quiet>,
    broker: i32,
    timeout: Duration,
) -> Option<i32> {
    let options = AdminOptions::new().request_timeout(Some(timeout));
    let results =
        admin.describe_configs([&ResourceSpecifier::Broker(broker)], &options).await.ok()?;
    let resource = results.into_iter().next()?.ok()?;
    resource.get("default.replication.factor")?.value.as_deref()?.parse().ok()
}
