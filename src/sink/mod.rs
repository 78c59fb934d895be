//! Sinks other than Kafka: NATS JetStream, RabbitMQ, Amazon SQS and HTTP webhooks. Each is one
//! folder that knows its broker's client, how a routed record becomes that broker's message,
//! and what the broker's answer means; nothing else.
//!
//! What is common to every sink lives in `crate::delivery` and is written once: the sequence
//! numbers and the frontier of what may be confirmed (I2), per-key order through retries (I5),
//! dead letters (I8), the in-flight limits (I7), metrics and the graceful stop. A sink only
//! answers, for the records it is handed, [`Published`]: acknowledged, refused for good, or to be
//! sent again.
//!
//! Kafka is not here: its transactions and progress topic make it a side of its own
//! (`crate::delivery`'s producer), and exactly-once lives only there.

pub mod nats;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::router::Record;

/// What a broker said of one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    /// Durable on the broker as its own protocol promises: a JetStream PubAck, a publisher
    /// confirm (ack) of a routed message, SendMessage(Batch)'s success entry, a 2xx. Only this
    /// lets the slot be confirmed past the record.
    Acked,
    /// Refused for good, for a reason of the record's own (too large, too many attributes, no
    /// queue bound to its routing key, a 4xx other than 408 and 429). `reason` names why and
    /// what would fix it; the record is dead-lettered in its place or stops the relay.
    Refused(String),
    /// Not delivered this time (unreachable, a timeout, a nack, a 5xx): the same record is
    /// offered again after a backoff, or after `after` when the broker said when
    /// (`Retry-After`). Nothing after it of the same key is offered meanwhile.
    Retry { reason: String, after: Option<Duration> },
}

/// One sink's client: publishes records and says what became of each.
pub trait Publish: Send + Sync + 'static {
    /// The sink's name as `[delivery] sink`, status and the metrics say it.
    fn name(&self) -> &'static str;

    /// How many records one [`Publish::publish`] call may carry (SQS: 10; others 1).
    fn max_batch(&self) -> usize {
        1
    }

    /// Publishes `records` (at most [`Publish::max_batch`], each of a different key) and
    /// answers one [`Published`] per record, in their order. Never panics on what a broker
    /// does, and returns within a bounded time (a timeout is a [`Published::Retry`]). Called
    /// concurrently from several tasks.
    fn publish(&self, records: &[Arc<Record>]) -> impl Future<Output = Vec<Published>> + Send;
}
