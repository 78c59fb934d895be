//! Kafka: the librdkafka producer and its delivery reports.
//!
//! Delivery reports wait on librdkafka's main queue until the relay loop serves them on its own
//! thread ([`Publisher::reports_ready`], [`Publisher::serve_reports`]); the serve returns the
//! reports its callbacks produced, each with the record's sequence number. The loop owns the
//! frontier, so nothing here decides what is confirmed.

use std::time::{Duration, Instant};

use rdkafka::bindings as rdsys;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::Notify;

use crate::metrics::Metrics;

mod context;
mod reachability;
mod topics;

pub use self::context::RelayContext;

use super::frontier::Seq;
use crate::config::KafkaConfig;
use crate::error::{Error, Result};
use crate::router::Record;

mod transactions;
pub use self::transactions::Transactional;

/// What librdkafka tells the relay loop.
#[derive(Debug)]
pub enum Report {
    Delivered {
        seq: Seq,
        /// Where the broker stored the record, for the relay's span.
        partition: i32,
        offset: i64,
    },
    /// A failure retrying may cure (timeout, broker gone): replay from the confirmed position.
    Failed { seq: Seq, error: KafkaError },
    /// The broker or librdkafka refuses this record for good (too large, unknown partition…);
    /// replaying would fail again.
    Rejected { seq: Seq, error: KafkaError, record: Box<Refused> },
    /// The producer can't go on (e.g. the idempotence state was lost); it must be rebuilt.
    Fatal(String),
    /// A sink beyond Kafka acknowledged the record (`crate::sink`).
    Acked { seq: Seq },
    /// A sink beyond Kafka refused the record for good; `reason` names why and the fix.
    Refused { seq: Seq, reason: String, record: Box<Refused> },
    /// A sink beyond Kafka cannot take records now; they wait, and are offered again.
    Retrying { reason: String },
}

/// What a dead letter needs of a record Kafka refused, as the refusal saw it. The row's source
/// and position are the frontier's, by the record's number: `Delivery` makes the [`Failed`]
/// (`delivery/failed.rs`) from both.
///
/// [`Failed`]: super::Failed
#[derive(Debug)]
pub struct Refused {
    pub topic: Arc<str>,
    pub key: Option<bytes::Bytes>,
    /// Its first bytes, up to what a dead letter keeps.
    pub value: Option<bytes::Bytes>,
    pub event_id: Option<String>,
}

impl Refused {
    /// What was handed to librdkafka.
    pub fn of(record: &Record) -> Refused {
        Refused {
            topic: record.topic.clone(),
            key: record.key.clone(),
            value: record.value.clone(),
            event_id: Some(record.event_id.clone()).filter(|id| !id.is_empty()),
        }
    }
}

/// The fix for a record refused because an ACL is missing, naming the ACL; `None` for the
/// other permanent errors. `topic` is the resource refused: the record's topic, or for a
/// transactional call the transactional id. `principal` is who walrelay authenticates as (`User:walrelay`).
pub fn refusal_fix(error: &KafkaError, topic: &str, principal: &str) -> Option<String> {
    let acls = "kafka-acls.sh --bootstrap-server … --add";
    match error.rdkafka_error_code()? {
        RDKafkaErrorCode::TopicAuthorizationFailed => Some(format!(
            "add the ACL that allows {principal} Write (and Describe) on topic {topic}: {acls} \
             --allow-principal {principal} --operation Write --operation Describe --topic {topic} \
             (or --resource-pattern-type prefixed --topic <the topics' common prefix>)"
        )),
        RDKafkaErrorCode::ClusterAuthorizationFailed => Some(format!(
            "add the ACL that allows {principal} IdempotentWrite on the cluster: {acls} \
             --allow-principal {principal} --operation IdempotentWrite --cluster"
        )),
        RDKafkaErrorCode::TransactionalIdAuthorizationFailed => Some(format!(
            "add the ACL that allows {principal} Write and Describe on transactional id {topic} \
             ([delivery] transactional_id): {acls} --allow-principal {principal} --operation Write \
             --operation Describe --transactional-id {topic}"
        )),
        _ => None,
    }
}

/// `User:<sasl.username>`, the principal a SASL/PLAIN or SCRAM login makes; for other logins
/// (mTLS, GSSAPI) the broker maps its own name, so the fix names it in words.
pub fn principal(kafka: &KafkaConfig) -> String {
    match kafka.properties.get("sasl.username") {
        Some(user) if !user.is_empty() => format!("User:{user}"),
        _ => "walrelay's principal".to_string(),
    }
}

pub struct Publisher {
    // Dropped first: librdkafka wants queue handles released before the client is destroyed.
    queue: MainQueue,
    producer: Arc<BaseProducer<RelayContext>>,
    /// Exactly-once: the producer's `transactional.id` (empty at-least-once), and who the
    /// broker sees: for the fix of a missing ACL.
    transactional_id: String,
    principal: String,
    /// The topics records went to, so a new one is known before its first record.
    topics: topics::KnownTopics,
}

/// librdkafka's main queue (delivery reports, errors, logs), served by the relay loop. There is
/// no polling thread: with one, every report cost a thread switch and a cross-thread wake-up,
/// and each message was freed on a thread other than the one that allocated it (measured: that
/// thread took 13 % of the relay's CPU while draining a backlog).
struct MainQueue {
    queue: *mut rdsys::rd_kafka_queue_t,
    /// Notified by librdkafka whenever the queue turns non-empty. On the heap so its address,
    /// which librdkafka holds, stays put; it outlives the callback (disabled first thing in
    /// Drop). Shared with [`Transactional`], whose calls serve the queue on another thread.
    ready: Arc<Notify>,
}

// The queue handle is librdkafka's, which is thread-safe; the Notify is Sync.
unsafe impl Send for MainQueue {}
unsafe impl Sync for MainQueue {}

/// Called by librdkafka, on whichever thread enqueues, when the main queue turns non-empty
/// (`rd_kafka_q_enq1`: length 1 after the enqueue, under the queue's lock). A serve that stops
/// only at an empty queue, or leaves a wake-up behind, therefore can't miss an event: whatever
/// arrives after it found the queue empty turns the queue non-empty again. The lock is held
/// meanwhile, so this only sets a wake-up (a `Notify` permit, kept until the loop awaits it).
unsafe extern "C" fn queue_turned_non_empty(
    _rk: *mut rdsys::rd_kafka_t,
    opaque: *mut std::ffi::c_void,
) {
    // SAFETY: `opaque` is `MainQueue::ready`, alive until the callback is disabled.
    unsafe { (*(opaque as *const Notify)).notify_one() };
}

impl MainQueue {
    fn new(producer: &BaseProducer<RelayContext>) -> MainQueue {
        let ready = Arc::new(Notify::new());
        let opaque = Arc::as_ptr(&ready) as *mut std::ffi::c_void;
        // SAFETY: the handle is released in Drop, after the callback is disabled.
        let queue = unsafe { rdsys::rd_kafka_queue_get_main(producer.client().native_ptr()) };
        unsafe {
            rdsys::rd_kafka_queue_cb_event_enable(queue, Some(queue_turned_non_empty), opaque)
        };
        // Whatever arrived before the callback was set is served on the first turn.
        ready.notify_one();
        MainQueue { queue, ready }
    }

    fn len(&self) -> usize {
        // SAFETY: the handle is valid until Drop.
        unsafe { rdsys::rd_kafka_queue_length(self.queue) }
    }
}

impl Drop for MainQueue {
    fn drop(&mut self) {
        // SAFETY: after the callback is disabled (under the queue's lock) nothing uses `ready`;
        // the producer serves the queue itself when it is dropped.
        unsafe {
            rdsys::rd_kafka_queue_cb_event_enable(self.queue, None, std::ptr::null_mut());
            rdsys::rd_kafka_queue_destroy(self.queue);
        }
    }
}

/// Why a record was not handed to librdkafka.
pub enum SendError {
    /// librdkafka's queue is full: wait for delivery reports and try again.
    QueueFull,
    /// The record itself can't be produced (too large, unknown partition…).
    Rejected(KafkaError),
}

impl Publisher {
    /// Checks every `[kafka]` property with librdkafka without connecting, so a typo stops the
    /// relay at start-up rather than after PostgreSQL was reached.
    pub fn validate(kafka: &KafkaConfig) -> Result<()> {
        let mut cfg = ClientConfig::new();
        for (k, v) in &kafka.properties {
            cfg.set(k, v);
        }
        cfg.create_native_config().map(drop).map_err(|e| {
            let (problem, fix) = kafka.rejection(&e);
            Error::definite(problem, fix)
        })
    }

    /// `capture_bytes`: how much of a refused record's value its report keeps (for dead letters).
    /// `transactional_id`: a transactional producer (exactly-once), which must call
    /// [`Publisher::init_transactions`] before it sends.
    pub fn new(
        kafka: &KafkaConfig,
        capture_bytes: usize,
        metrics: Arc<Metrics>,
        transactional_id: Option<&str>,
    ) -> Result<Publisher> {
        let mut cfg = ClientConfig::new();
        for (k, v) in &kafka.properties {
            cfg.set(k, v);
        }
        if let Some(id) = transactional_id {
            cfg.set("transactional.id", id);
        }
        // librdkafka's `debug` contexts log at debug level: an operator who sets `[kafka] debug`
        // sees them (with RUST_LOG=librdkafka=debug); otherwise warnings and worse only.
        let wants_debug = kafka.properties.get("debug").is_some_and(|d| !d.is_empty());
        cfg.set_log_level(if wants_debug {
            RDKafkaLogLevel::Debug
        } else {
            RDKafkaLogLevel::Warning
        });
        let context = RelayContext::new(kafka, capture_bytes, metrics.clone());
        let producer: BaseProducer<RelayContext> =
            cfg.create_with_context(context).map_err(|e| {
                let (problem, fix) = kafka.rejection(&e);
                Error::definite(problem, fix)
            })?;
        let producer = Arc::new(producer);
        let queue = MainQueue::new(&producer);
        // Ask for metadata now and then until the first record is acknowledged: an idempotent
        // producer asks for its producer id while its bootstrap connection is being replaced by
        // the broker it learned about, is told "coordinator not up", and then waits on a
        // 500 ms retry timer inside librdkafka before the first record can go. Every metadata
        // response restarts that request, so a few cheap requests ~20 ms apart bring the first
        // delivery down to ~60 ms (measured: 500–2,000 ms without, and one request at start
        // only helped sometimes). All-topics metadata creates no topic.
        let warm = Arc::clone(&producer);
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline && !warm.context().has_acked() {
                let _ = warm.client().fetch_metadata(None, Duration::from_millis(250));
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        reachability::watch(Arc::downgrade(&producer), metrics);
        tracing::debug!("kafka producer created");
        Ok(Publisher {
            queue,
            producer,
            transactional_id: transactional_id.unwrap_or_default().to_string(),
            principal: principal(kafka),
            topics: topics::KnownTopics::new(kafka.topic_propagation()),
        })
    }

    /// Resolves once librdkafka has something for [`Publisher::serve_reports`] (cancel-safe: a
    /// wake-up that arrives while nobody waits is kept for the next call).
    pub async fn reports_ready(&self) {
        self.queue.ready.notified().await
    }

    /// Runs the callbacks of what waits on librdkafka's main queue, on this thread, and appends
    /// the reports they produced to `reports`, in the order they came. Serves at most
    /// `MAX_EVENTS` events (each holds a produce response's reports) and leaves a wake-up
    /// behind if more wait, so the relay loop gets back to the stream in between.
    pub fn serve_reports(&self, reports: &mut VecDeque<Report>) {
        const MAX_EVENTS: usize = 64;
        for _ in 0..MAX_EVENTS {
            if self.queue.len() == 0 {
                break;
            }
            self.producer.poll(Duration::ZERO);
        }
        if self.queue.len() > 0 {
            self.queue.ready.notify_one();
        }
        self.producer.context().take_reports(reports);
    }

    /// The partitions of `topic` with fewer in-sync replicas than replicas (under-replicated),
    /// as the cluster's metadata says now: `partition 0 has 1 in-sync replica(s) of 3`; empty
    /// when there are none or no metadata came within 2 s. librdkafka retries a record the
    /// leader refuses with NOT_ENOUGH_REPLICAS until `message.timeout.ms`, and its delivery
    /// report then says only "Message timed out": this is how the relay can tell the operator
    /// why. Blocking; called once when a session ends on a failed delivery.
    pub fn under_replicated(&self, topic: &str) -> Vec<String> {
        let Ok(md) = self.producer.client().fetch_metadata(Some(topic), Duration::from_secs(2))
        else {
            return Vec::new();
        };
        md.topics()
            .iter()
            .flat_map(|t| t.partitions())
            .filter(|p| p.isr().len() < p.replicas().len())
            .map(|p| {
                format!(
                    "partition {} has {} in-sync replica(s) of {}",
                    p.id(),
                    p.isr().len(),
                    p.replicas().len()
                )
            })
            .collect()
    }

    pub fn send(&self, record: &Record, seq: Seq) -> Result<(), SendError> {
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
        for (key, value) in &record.headers {
            headers = headers.insert(Header { key: key.as_ref(), value: Some(value.as_ref()) });
        }
        let mut base: BaseRecord<'_, [u8], [u8], usize> =
            BaseRecord::with_opaque_to(&record.topic, seq as usize).headers(headers);
        if let Some(key) = &record.key {
            base = base.key(key.as_ref());
        }
        if let Some(value) = &record.value {
            base = base.payload(value.as_ref());
        }
        if let Some(p) = record.partition {
            base = base.partition(p);
        }
        if let Some(ts) = record.timestamp_ms {
            base = base.timestamp(ts);
        }
        match self.producer.send(base) {
            Ok(()) => Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                Err(SendError::QueueFull)
            }
            Err((e, _)) => Err(SendError::Rejected(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::mocking::MockCluster;

    fn kafka(bootstrap: &str, extra: &[(&str, &str)]) -> KafkaConfig {
        let mut properties = crate::config::Options::new();
        properties.insert("bootstrap.servers".into(), bootstrap.into());
        properties.insert("enable.idempotence".into(), "true".into());
        properties.insert("linger.ms".into(), "3".into());
        for (k, v) in extra {
            properties.insert((*k).into(), (*v).into());
        }
        KafkaConfig { properties }
    }

    /// A mock cluster with the test topic, and a publisher on it.
    fn publisher_on_mock(
        partitions: i32,
        extra: &[(&str, &str)],
    ) -> (MockCluster<'static, rdkafka::producer::DefaultProducerContext>, Publisher) {
        let mock = MockCluster::new(1).expect("mock cluster");
        mock.create_topic("outbox.event.order", partitions, 1).expect("topic");
        let publisher =
            Publisher::new(&kafka(&mock.bootstrap_servers(), extra), 0, Metrics::new(), None)
                .unwrap();
        (mock, publisher)
    }

    fn record(n: u32) -> Record {
        Record {
            topic: Arc::from("outbox.event.order"),
            key: Some(bytes::Bytes::from(format!("agg-{}", n % 7))),
            value: Some(bytes::Bytes::from(format!("{{\"n\":{n}}}"))),
            headers: vec![(Arc::from("id"), bytes::Bytes::from(n.to_string()))],
            partition: None,
            timestamp_ms: None,
            event_id: n.to_string(),
            trace: None,
            value_schema: None,
            key_schema: None,
        }
    }

    /// Waits (bounded) for reports, serving the queue as the relay loop does, until `want`
    /// delivered sequence numbers arrived.
    async fn delivered(publisher: &Publisher, want: usize) -> Vec<Seq> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut seqs = Vec::new();
        while seqs.len() < want {
            let woke = tokio::time::timeout_at(deadline, publisher.reports_ready()).await;
            assert!(woke.is_ok(), "no wake-up after {} of {want} reports", seqs.len());
            let mut reports = VecDeque::new();
            publisher.serve_reports(&mut reports);
            for report in reports {
                match report {
                    Report::Delivered { seq, .. } => seqs.push(seq),
                    other => panic!("unexpected report {other:?}"),
                }
            }
        }
        seqs
    }

    #[tokio::test(flavor = "current_thread")]
    async fn delivery_reports_wake_the_relay_thread_and_are_served_on_it() {
        let (_mock, publisher) = publisher_on_mock(4, &[]);
        for n in 0..1_000u32 {
            assert!(publisher.send(&record(n), n as Seq).is_ok());
        }
        let woke = tokio::time::timeout(Duration::from_secs(20), publisher.reports_ready()).await;
        assert!(woke.is_ok(), "librdkafka never signalled its queue");
        // Signalled, but nothing was served behind this thread's back: no polling thread.
        let mut served = VecDeque::new();
        publisher.producer.context().take_reports(&mut served);
        assert!(served.is_empty());
        publisher.queue.ready.notify_one();
        let mut seqs = delivered(&publisher, 1_000).await;
        seqs.sort_unstable();
        assert_eq!(seqs, (0..1_000).collect::<Vec<Seq>>());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn every_burst_is_served_to_its_last_report_without_a_lost_wake_up() {
        let (_mock, publisher) = publisher_on_mock(4, &[]);
        let mut next: Seq = 0;
        for burst in 0..300u64 {
            let size = 1 + (burst * 7919) % 97;
            for _ in 0..size {
                assert!(publisher.send(&record(next as u32), next).is_ok());
                next += 1;
            }
            // After the burst nothing else arrives: its last reports must wake the loop.
            let seqs = delivered(&publisher, size as usize).await;
            assert_eq!(seqs.len() as u64, size, "burst {burst}");
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_full_producer_queue_empties_as_reports_are_served() {
        let (_mock, publisher) = publisher_on_mock(1, &[("queue.buffering.max.messages", "10")]);
        let mut sent = 0u32;
        while publisher.send(&record(sent), sent as Seq).is_ok() {
            sent += 1;
        }
        assert_eq!(sent, 10, "librdkafka holds queue.buffering.max.messages records");
        assert!(matches!(publisher.send(&record(sent), sent as Seq), Err(SendError::QueueFull)));
        delivered(&publisher, 10).await;
        assert!(publisher.send(&record(sent), sent as Seq).is_ok(), "room again once served");
        assert_eq!(delivered(&publisher, 1).await, vec![sent as Seq]);
    }
}
