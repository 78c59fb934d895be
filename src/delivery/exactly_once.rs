//! Exactly-once into Kafka (`[delivery] guarantee = "exactly-once"`).
//!
//! Records go out in Kafka transactions. Each holds whole PostgreSQL transactions, in commit
//! order, and one more record: in the compacted progress topic, under the `transactional.id`,
//! the commit LSN of the last PostgreSQL transaction inside it. So a Kafka transaction either
//! commits its events *and* the position after them, or neither.
//!
//! On start (once the slot is ours, so a stand-by never fences the active relay):
//! `init_transactions` fences any earlier producer of the same id and aborts what it left open;
//! the progress topic is read to its end with `read_committed`; the stream then starts from the
//! slot, and every PostgreSQL transaction whose commit LSN is at or below the stored one is
//! skipped — its events are in Kafka already. The slot is confirmed only past what a committed
//! Kafka transaction holds (a delivery report alone is not enough: the transaction may still
//! abort), so the slot never runs ahead of the progress topic, and the progress topic never
//! ahead of the events.
//!
//! This file holds the policy (when to begin, skip and commit) and the progress topic's I/O;
//! `delivery/transactions.rs` drives it, `delivery/producer/transactions.rs` makes librdkafka's transactional calls.

use std::time::{Duration, Instant};

use bytes::Bytes;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::config::{DeliveryConfig, KafkaConfig};
use crate::error::{Error, Result};
use crate::lsn::Lsn;
use crate::router::Record;

/// How long start-up waits for the progress topic to be read or created.
const PROGRESS_TIMEOUT: Duration = Duration::from_secs(30);

/// The transactional state of one session.
pub struct Transactions {
    config: DeliveryConfig,
    /// Commit LSN of the last PostgreSQL transaction that a committed Kafka transaction holds:
    /// from the progress topic at start, then from each commit.
    committed: Option<Lsn>,
    open: Option<Open>,
    /// The PostgreSQL transaction being read is in Kafka already: its records are dropped.
    skipping: bool,
    /// Commit LSN of the PostgreSQL transaction (or non-transactional message) being read.
    current: Lsn,
    /// Inside a PostgreSQL transaction: a Kafka transaction may not commit now.
    in_pg_transaction: bool,
}

/// The open Kafka transaction.
struct Open {
    since: Instant,
    records: usize,
    /// Commit LSN of the last whole PostgreSQL transaction in it.
    last: Option<Lsn>,
    /// The confirmable position when it began: nothing past it may be confirmed until it
    /// commits.
    cap: Lsn,
}

impl Transactions {
    pub fn new(config: DeliveryConfig) -> Transactions {
        Transactions {
            config,
            committed: None,
            open: None,
            skipping: false,
            current: Lsn::ZERO,
            in_pg_transaction: false,
        }
    }

    pub fn transactional_id(&self) -> &str {
        &self.config.transactional_id
    }

    pub fn progress_topic(&self) -> &str {
        &self.config.progress_topic
    }

    /// Sets what the progress topic holds, read at start.
    pub fn resume_after(&mut self, committed: Option<Lsn>) {
        self.committed = committed;
    }

    /// A PostgreSQL transaction that commits at `commit_lsn` starts. Returns whether it is in
    /// Kafka already (its records are to be dropped).
    pub fn begin(&mut self, commit_lsn: Lsn) -> bool {
        self.current = commit_lsn;
        self.in_pg_transaction = true;
        self.skipping = self.committed.is_some_and(|c| commit_lsn <= c);
        self.skipping
    }

    /// A non-transactional logical message at `lsn` is relayed on its own.
    pub fn alone(&mut self, lsn: Lsn) -> bool {
        self.current = lsn;
        self.skipping = self.committed.is_some_and(|c| lsn <= c);
        self.skipping
    }

    pub fn skipping(&self) -> bool {
        self.skipping
    }

    /// Whether a record of the current transaction needs a Kafka transaction begun first.
    /// Also refuses a PostgreSQL transaction that has kept one open for most of
    /// `transaction.timeout.ms`: the broker would abort it, and splitting it would break the
    /// guarantee.
    pub fn before_record(&mut self, confirmable: Lsn) -> Result<bool> {
        if let Some(open) = &mut self.open {
            open.records += 1;
            let limit = self.config.transaction_timeout.mul_f64(0.8);
            if open.since.elapsed() > limit {
                return Err(Error::definite(
                    format!(
                        "the PostgreSQL transaction that commits at LSN {} has kept a Kafka transaction open for {:.1?}, more than 80 % of transaction.timeout.ms ({} ms): the broker would abort it, and splitting it would break exactly-once",
                        self.current,
                        open.since.elapsed(),
                        self.config.transaction_timeout.as_millis()
                    ),
                    "raise [kafka] \"transaction.timeout.ms\" (and the broker's transaction.max.timeout.ms, 15 minutes by default) above the time this transaction takes to publish, or split the transaction in the application; nothing after its start was confirmed",
                ));
            }
            return Ok(false);
        }
        self.open = Some(Open { since: Instant::now(), records: 1, last: None, cap: confirmable });
        Ok(true)
    }

    /// The current PostgreSQL transaction (or lone message) has been read whole.
    pub fn end(&mut self) {
        self.in_pg_transaction = false;
        if !std::mem::take(&mut self.skipping) {
            if let Some(open) = &mut self.open {
                open.last = Some(self.current);
            }
        }
    }

    /// Whether the open Kafka transaction should commit now: it holds whole PostgreSQL
    /// transactions only, and is full or old enough.
    pub fn due(&self) -> bool {
        match &self.open {
            Some(open) if !self.in_pg_transaction && open.last.is_some() => {
                open.records >= self.config.transaction_max_records
                    || open.since.elapsed() >= self.config.transaction_max
            }
            _ => false,
        }
    }

    /// When the open Kafka transaction becomes due by age, if it may commit then.
    pub fn deadline(&self) -> Option<tokio::time::Instant> {
        match &self.open {
            Some(open) if !self.in_pg_transaction && open.last.is_some() => {
                Some(tokio::time::Instant::from_std(open.since + self.config.transaction_max))
            }
            _ => None,
        }
    }

    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// The open transaction may commit (it holds whole PostgreSQL transactions only).
    pub fn committable(&self) -> bool {
        !self.in_pg_transaction && self.open.as_ref().is_some_and(|o| o.last.is_some())
    }

    /// The progress record for the open transaction: the commit LSN of its last PostgreSQL
    /// transaction, keyed by the transactional id.
    pub fn progress_record(&self) -> Option<(Record, Lsn)> {
        let lsn = self.open.as_ref()?.last?;
        let id = &self.config.transactional_id;
        let record = Record {
            topic: self.config.progress_topic.as_str().into(),
            key: Some(Bytes::copy_from_slice(id.as_bytes())),
            value: Some(Bytes::from(lsn.to_string())),
            headers: Vec::new(),
            // One partition: the position is read from it.
            partition: Some(0),
            timestamp_ms: None,
            event_id: String::new(),
            trace: None,
        };
        Some((record, lsn))
    }

    /// The open transaction committed; its records and position are visible.
    pub fn committed(&mut self, lsn: Lsn) {
        self.committed = Some(lsn);
        self.open = None;
    }

    /// The open transaction was aborted (or is left to the next `init_transactions`).
    pub fn forget(&mut self) {
        self.open = None;
    }

    /// What may be confirmed: nothing past where the open Kafka transaction began.
    pub fn cap(&self, confirmable: Lsn) -> Lsn {
        match &self.open {
            Some(open) => confirmable.min(open.cap),
            None => confirmable,
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn txns(max_ms: u64, max_records: usize) -> Transactions {
        Transactions::new(DeliveryConfig {
            guarantee: crate::config::Guarantee::ExactlyOnce,
            transactional_id: "walrelay-t".into(),
            progress_topic: "walrelay.progress".into(),
            transaction_max: Duration::from_millis(max_ms),
            transaction_max_records: max_records,
            transaction_timeout: Duration::from_secs(60),
        })
    }

    fn lsn(n: u64) -> Lsn {
        Lsn::from(n)
    }

    #[test]
    fn transactions_at_or_below_the_stored_commit_lsn_are_skipped_and_later_ones_are_not() {
        let mut t = txns(100, 10);
        t.resume_after(Some(lsn(200)));
        assert!(t.begin(lsn(100)), "before the stored position");
        t.end();
        assert!(t.begin(lsn(200)), "the stored transaction itself");
        t.end();
        assert!(!t.begin(lsn(201)), "after it");
        assert!(!t.skipping());
        t.end();
        let mut fresh = txns(100, 10);
        assert!(!fresh.begin(lsn(1)), "nothing stored: nothing skipped");
    }

    #[test]
    fn a_kafka_transaction_commits_only_between_postgresql_transactions_once_full() {
        let mut t = txns(60_000, 3);
        t.begin(lsn(10));
        assert!(t.before_record(lsn(5)).unwrap(), "the first record begins a Kafka transaction");
        assert!(!t.before_record(lsn(5)).unwrap());
        assert!(!t.before_record(lsn(5)).unwrap());
        assert!(!t.due(), "full, but inside a PostgreSQL transaction");
        assert!(t.deadline().is_none());
        t.end();
        assert!(t.due(), "full at a commit");
        let (record, at) = t.progress_record().unwrap();
        assert_eq!(at, lsn(10));
        assert_eq!(record.value.as_deref(), Some(lsn(10).to_string().as_bytes()));
        assert_eq!(record.key.as_deref(), Some(&b"walrelay-t"[..]));
        assert_eq!(record.partition, Some(0));
        t.committed(at);
        assert!(!t.is_open() && !t.due());
        assert!(t.begin(lsn(10)), "what was committed is skipped from now on");
    }

    #[test]
    fn nothing_past_the_start_of_the_open_kafka_transaction_is_confirmable() {
        let mut t = txns(100, 10);
        assert_eq!(t.cap(lsn(50)), lsn(50), "no open transaction: no cap");
        t.begin(lsn(60));
        t.before_record(lsn(50)).unwrap();
        t.end();
        assert_eq!(t.cap(lsn(70)), lsn(50), "acknowledged, but not committed");
        t.committed(lsn(60));
        assert_eq!(t.cap(lsn(70)), lsn(70));
    }

    #[test]
    fn a_skipped_transaction_adds_no_position_to_the_open_one() {
        let mut t = txns(100, 10);
        t.resume_after(Some(lsn(30)));
        t.begin(lsn(20));
        t.end();
        assert!(t.progress_record().is_none() && !t.committable());
    }

    #[test]
    fn a_postgresql_transaction_that_outlives_most_of_the_transaction_timeout_is_refused() {
        let mut t = txns(10, 1_000_000);
        t.config.transaction_timeout = Duration::from_millis(20);
        t.begin(lsn(10));
        t.before_record(lsn(5)).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let e = t.before_record(lsn(5)).unwrap_err();
        assert!(e.to_string().contains("transaction.timeout.ms"), "{e}");
        assert!(e.hint().unwrap().contains("raise"), "{e:?}");
    }
}
