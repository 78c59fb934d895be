//! The progress topic's I/O for exactly-once: reading the commit LSN the last committed Kafka
//! transaction stored, and creating the topic on the first start.

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::config::KafkaConfig;
use crate::error::{Error, Result};
use crate::lsn::Lsn;

/// How long start-up waits for the progress topic to be read or created.
const PROGRESS_TIMEOUT: Duration = Duration::from_secs(30);

/// The commit LSN the progress topic holds for `id`, read to its end with `read_committed`
/// (`None`: no Kafka transaction of this relay committed yet). With `create`, creates the topic
/// (compacted, one partition) when it does not exist.
pub async fn read_progress(
    kafka: &KafkaConfig,
    topic: &str,
    id: &str,
    create: bool,
) -> Result<Option<Lsn>> {
    let (k, t, i) = (kafka.clone(), topic.to_string(), id.to_string());
    let read = tokio::task::spawn_blocking(move || read_blocking(&k, &t, &i))
        .await
        .map_err(|e| Error::transient("reading the progress topic panicked", e))?;
    match read {
        Err(Missing) if create => {
            create_progress_topic(kafka, topic).await?;
            Ok(None)
        }
        Err(Missing) => Ok(None),
        Ok(result) => result,
    }
}

/// The topic does not exist.
struct Missing;

fn read_blocking(
    kafka: &KafkaConfig,
    topic: &str,
    id: &str,
) -> std::result::Result<Result<Option<Lsn>>, Missing> {
    let fail = |what: String, e: KafkaError| {
        Error::transient(format!("{what}: {}", kafka.describe_librdkafka_error(&e)), e)
    };
    let mut cfg = kafka.consumer_config();
    cfg.set("group.id", "walrelay-progress-reader")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        .set("allow.auto.create.topics", "false")
        // A position librdkafka finds invalid mid-read (a truncation it infers from a new leader
        // epoch) goes back to the start and reads the same records again: its default, the end,
        // would stop the read early with an older position, and transactions already in Kafka
        // would be sent again.
        .set("auto.offset.reset", "earliest")
        // Only what committed Kafka transactions hold: an aborted one's position never counts.
        .set("isolation.level", "read_committed")
        .set_log_level(RDKafkaLogLevel::Error);
    let consumer: BaseConsumer = match cfg.create() {
        Ok(c) => c,
        Err(e) => return Ok(Err(fail("cannot create the progress topic's reader".into(), e))),
    };
    let deadline = Instant::now() + PROGRESS_TIMEOUT;
    let metadata = match consumer.fetch_metadata(Some(topic), PROGRESS_TIMEOUT) {
        Ok(m) => m,
        Err(e) => return Ok(Err(fail(format!("cannot read the metadata of {topic}"), e))),
    };
    let Some(meta) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Err(Missing);
    };
    if meta.error().is_some() || meta.partitions().is_empty() {
        return Err(Missing);
    }
    if meta.partitions().len() != 1 {
        return Ok(Err(Error::definite(
            format!(
                "the progress topic {topic} has {} partitions; walrelay keeps its position in one",
                meta.partitions().len()
            ),
            "name a topic of one partition in [delivery] progress_topic (walrelay creates it compacted when it does not exist)",
        )));
    }
    let mut tpl = TopicPartitionList::new();
    if let Err(e) = tpl.add_partition_offset(topic, 0, Offset::Beginning) {
        return Ok(Err(fail(format!("cannot assign {topic}"), e)));
    }
    if let Err(e) = consumer.assign(&tpl) {
        return Ok(Err(fail(format!("cannot assign {topic}"), e)));
    }
    let mut last = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Err(Error::transient_msg(format!(
                "reading the progress topic {topic} to its end took more than {PROGRESS_TIMEOUT:?}"
            ))));
        }
        match consumer.poll(left.min(Duration::from_millis(500))) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(_))) => return Ok(Ok(last)),
            Some(Err(e)) => return Ok(Err(fail(format!("reading the progress topic {topic}"), e))),
            Some(Ok(m)) if m.key() == Some(id.as_bytes()) => {
                let text = m.payload().map(String::from_utf8_lossy).unwrap_or_default();
                match text.parse::<Lsn>() {
                    Ok(lsn) => last = Some(lsn),
                    Err(_) => {
                        return Ok(Err(Error::definite(
                            format!(
                                "the progress topic {topic} holds {text:?} for {id} at offset {}, which is not an LSN",
                                m.offset()
                            ),
                            "something other than walrelay wrote to the progress topic: give walrelay a topic of its own in [delivery] progress_topic",
                        )))
                    }
                }
            }
            Some(Ok(_)) => {}
        }
    }
}

/// Creates the progress topic: one partition, compacted, as many replicas as the cluster has
/// brokers up to three.
async fn create_progress_topic(kafka: &KafkaConfig, topic: &str) -> Result<()> {
    let hint = format!(
        "create it yourself: one partition, cleanup.policy=compact (kafka-topics.sh --create --topic {topic} --partitions 1 --config cleanup.policy=compact), or allow walrelay's principal CREATE on it"
    );
    let mut cfg = kafka.consumer_config();
    cfg.set_log_level(RDKafkaLogLevel::Error);
    let admin: AdminClient<DefaultClientContext> = cfg.create().map_err(|e| {
        Error::transient(
            format!("cannot create a Kafka admin client: {}", kafka.describe_librdkafka_error(&e)),
            e,
        )
    })?;
    let brokers = admin
        .inner()
        .fetch_metadata(None, PROGRESS_TIMEOUT)
        .map(|m| m.brokers().len())
        .unwrap_or(1);
    let replicas = brokers.clamp(1, 3) as i32;
    let new =
        NewTopic::new(topic, 1, TopicReplication::Fixed(replicas)).set("cleanup.policy", "compact");
    let opts = AdminOptions::new().operation_timeout(Some(PROGRESS_TIMEOUT));
    let results = admin
        .create_topics([&new], &opts)
        .await
        .map_err(|e| Error::transient(format!("cannot create the progress topic {topic}"), e))?;
    for r in results {
        match r {
            Ok(_) => {
                tracing::info!(
                    topic,
                    replicas,
                    "created the progress topic (compacted, one partition)"
                )
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
    Ok(())
}
