//! Kafka: the librdkafka producer and its delivery reports.
//!
//! Delivery reports come back on librdkafka's polling thread; each one is forwarded, with the
//! record's sequence number, to the relay loop over a channel. The loop owns the frontier, so
//! nothing here decides what is confirmed.

use std::time::{Duration, Instant};

use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Headers;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Message};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::metrics::Metrics;

use crate::checkpoint::Seq;
use crate::config::KafkaConfig;
use crate::error::{Error, Result};
use crate::router::Record;

/// What librdkafka tells the relay loop.
#[derive(Debug)]
pub enum Report {
    Delivered {
        seq: Seq,
    },
    /// A failure retrying may cure (timeout, broker gone): replay from the confirmed position.
    Failed {
        seq: Seq,
        error: KafkaError,
    },
    /// The broker or librdkafka refuses this record for good (too large, unknown partition…);
    /// replaying would fail again. Carries what a dead letter needs.
    Rejected {
        seq: Seq,
        error: KafkaError,
        record: Box<Rejected>,
    },
    /// The producer can't go on (e.g. the idempotence state was lost); it must be rebuilt.
    Fatal(String),
}

/// The parts of a refused record a dead letter keeps.
#[derive(Debug)]
pub struct Rejected {
    pub topic: String,
    pub key: Option<Vec<u8>>,
    /// The first `capture_bytes` of the value.
    pub value: Option<Vec<u8>>,
    pub event_id: Option<String>,
}

pub struct RelayContext {
    reports: mpsc::UnboundedSender<Report>,
    metrics: Arc<Metrics>,
    /// How much of a refused record's value to keep for its dead letter.
    capture_bytes: usize,
    /// The broker acknowledged a record of this producer (ends the start-up metadata requests).
    acked: AtomicBool,
}

/// Errors that no retry can cure for this record.
pub fn is_permanent(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::MessageSizeTooLarge
                | RDKafkaErrorCode::InvalidMessage
                | RDKafkaErrorCode::InvalidMessageSize
                | RDKafkaErrorCode::InvalidRecord
                | RDKafkaErrorCode::UnknownPartition
                | RDKafkaErrorCode::InvalidTopic
        )
    )
}

impl ClientContext for RelayContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => tracing::error!(target: "librdkafka", fac, "{message}"),
            RDKafkaLogLevel::Warning => tracing::warn!(target: "librdkafka", fac, "{message}"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", fac, "{message}")
            }
            RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", fac, "{message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown) {
            self.metrics.broker_up.store(false, Relaxed);
        }
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal) {
            let _ = self.reports.send(Report::Fatal(format!("{error}: {reason}")));
        } else {
            // Transport errors (broker down, all brokers down) are retried by librdkafka; the
            // relay only acts on delivery reports.
            tracing::warn!(%error, reason, "kafka client error");
        }
    }
}

impl ProducerContext for RelayContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, seq: usize) {
        let seq = seq as Seq;
        let report = match result {
            Ok(_) => {
                self.metrics.broker_up.store(true, Relaxed);
                self.acked.store(true, Relaxed);
                Report::Delivered { seq }
            }
            Err((error, m)) if is_permanent(error) => {
                let event_id = m.headers().and_then(|h| {
                    h.iter()
                        .find(|h| h.key == "id")
                        .and_then(|h| h.value)
                        .map(|v| String::from_utf8_lossy(v).into_owned())
                });
                let record = Rejected {
                    topic: m.topic().to_string(),
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(|v| v[..v.len().min(self.capture_bytes)].to_vec()),
                    event_id,
                };
                Report::Rejected { seq, error: error.clone(), record: Box::new(record) }
            }
            Err((error, _)) => Report::Failed { seq, error: error.clone() },
        };
        // The receiver is gone only when the session ended; its reports no longer matter.
        let _ = self.reports.send(report);
    }
}

pub struct Publisher {
    producer: Arc<ThreadedProducer<RelayContext>>,
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
            Error::definite_with(
                "librdkafka rejected the [kafka] configuration",
                "fix the property named in the message; names and values are librdkafka's (CONFIGURATION.md)",
                e,
            )
        })
    }

    /// `capture_bytes`: how much of a refused record's value its report keeps (for dead letters).
    pub fn new(
        kafka: &KafkaConfig,
        capture_bytes: usize,
        metrics: Arc<Metrics>,
    ) -> Result<(Publisher, mpsc::UnboundedReceiver<Report>)> {
        let mut cfg = ClientConfig::new();
        for (k, v) in &kafka.properties {
            cfg.set(k, v);
        }
        cfg.set_log_level(RDKafkaLogLevel::Warning);
        let (tx, rx) = mpsc::unbounded_channel();
        let producer: ThreadedProducer<RelayContext> = cfg.create_with_context(RelayContext { reports: tx, capture_bytes, metrics, acked: AtomicBool::new(false) }).map_err(|e| {
            Error::definite_with(
                "librdkafka rejected the [kafka] configuration",
                "fix the property named in the message; names and values are librdkafka's (CONFIGURATION.md)",
                e,
            )
        })?;
        let producer = Arc::new(producer);
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
            while Instant::now() < deadline && !warm.context().acked.load(Relaxed) {
                let _ = warm.client().fetch_metadata(None, Duration::from_millis(250));
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Ok((Publisher { producer }, rx))
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
