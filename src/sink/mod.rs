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

    /// How many [`Publish::publish`] calls may be in flight at once, across keys (one per key
    /// at most). 64 by default: as many requests as a receiver should have to take at once.
    fn max_calls(&self) -> usize {
        dispatch::MAX_CALLS
    }

    /// Publishes `records` (at most [`Publish::max_batch`], each of a different key) and
    /// answers one [`Published`] per record, in their order. Never panics on what a broker
    /// does, and returns within a bounded time (a timeout is a [`Published::Retry`]). Called
    /// concurrently from several tasks.
    fn publish(&self, records: &[Arc<Record>]) -> impl Future<Output = Vec<Published>> + Send;
}

pub mod dispatch;
pub mod nats;
pub mod rabbitmq;
pub mod sqs;
pub mod webhook;

use crate::error::Error;
use crate::options::{ConfigError, Options};

use self::dispatch::Dispatch;

/// `[delivery] sink`, and the section of the sink it names, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkConfig {
    /// `[kafka]`: the default, and the only sink with exactly-once.
    Kafka,
    /// `[nats]`: JetStream.
    Nats(nats::NatsConfig),
    /// `[rabbitmq]`.
    RabbitMq(rabbitmq::RabbitMqConfig),
    /// `[sqs]`.
    Sqs(sqs::SqsConfig),
    /// `[webhook]`.
    Http(webhook::WebhookConfig),
}

/// What `[delivery] sink` accepts.
pub const NAMES: &[&str] = &["kafka", "nats", "rabbitmq", "sqs", "http"];

/// A sink's section of the file: everything the configuration reader needs to know of it, so
/// that a new sink is its folder and its lines in this file, and nothing in `config`.
pub struct SinkSection {
    /// The section's name: `[nats]`.
    pub section: &'static str,
    /// The `[delivery] sink` it configures.
    pub sink: &'static str,
    /// Its keys, for the unknown-key check.
    pub keys: &'static [&'static str],
    /// The keys that take a list (`stream_subjects = ["a.>", "b.>"]`); every other one value.
    pub lists: &'static [&'static str],
}

/// The sections of the sinks beyond Kafka.
pub fn sections() -> [SinkSection; 4] {
    use crate::options::section::keys_of;
    [
        SinkSection {
            section: "nats",
            sink: "nats",
            keys: keys_of::<nats::config::Raw>(),
            lists: &["stream_subjects"],
        },
        SinkSection {
            section: "rabbitmq",
            sink: "rabbitmq",
            keys: keys_of::<rabbitmq::config::Raw>(),
            lists: &[],
        },
        SinkSection { section: "sqs", sink: "sqs", keys: sqs::keys(), lists: &[] },
        SinkSection {
            section: "webhook",
            sink: "http",
            keys: keys_of::<webhook::Raw>(),
            lists: &[],
        },
    ]
}

impl SinkConfig {
    /// The sink `name` with its section's options (`None`: the section is absent).
    pub fn parse(name: &str, section: Option<&Options>) -> Result<SinkConfig, ConfigError> {
        let need = |sink: &str| -> Result<&Options, ConfigError> {
            let name = SinkConfig::section(sink).unwrap_or("kafka");
            section.ok_or_else(|| ConfigError::Missing {
                section: name,
                key: "url".into(),
                hint: format!("[delivery] sink = \"{sink}\" sends to the [{name}] section's broker: add [{name}] with its url (see docs/sinks.md)"),
            })
        };
        match name {
            "kafka" => Ok(SinkConfig::Kafka),
            "nats" => Ok(SinkConfig::Nats(nats::parse(need("nats")?)?)),
            "rabbitmq" => Ok(SinkConfig::RabbitMq(rabbitmq::parse(need("rabbitmq")?)?)),
            "sqs" => Ok(SinkConfig::Sqs(sqs::parse(need("sqs")?)?)),
            "http" => Ok(SinkConfig::Http(webhook::parse(need("http")?)?)),
            other => Err(crate::options::invalid(
                "delivery",
                "sink",
                other,
                &format!("is no sink; one of {}", NAMES.join(", ")),
            )),
        }
    }

    /// The section that configures the sink `name` (`kafka` for Kafka).
    pub fn section(name: &str) -> Option<&'static str> {
        match name {
            "kafka" => Some("kafka"),
            sink => sections().into_iter().find(|s| s.sink == sink).map(|s| s.section),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            SinkConfig::Kafka => "kafka",
            SinkConfig::Nats(_) => "nats",
            SinkConfig::RabbitMq(_) => "rabbitmq",
            SinkConfig::Sqs(_) => "sqs",
            SinkConfig::Http(_) => "http",
        }
    }

    pub fn is_kafka(&self) -> bool {
        matches!(self, SinkConfig::Kafka)
    }

    /// Why the audit cannot check this sink, if it cannot: it reads records back without
    /// consuming them, which Kafka's topics and JetStream's streams allow, and the others not.
    pub fn why_no_audit(&self) -> Option<String> {
        let sink = self.name();
        match self {
            SinkConfig::Kafka | SinkConfig::Nats(_) => None,
            _ => Some(format!("the audit reads records back from Kafka or a JetStream stream, and the {sink} sink's messages cannot be read back without consuming them")),
        }
    }

    /// What this sink offers instead of exactly-once, for the refusal of `guarantee`.
    pub fn instead_of_exactly_once(&self) -> &'static str {
        match self {
            SinkConfig::Kafka => "",
            SinkConfig::Nats(_) => "every message carries Nats-Msg-Id = the event id, which JetStream drops when repeated within the stream's duplicate_window",
            SinkConfig::RabbitMq(_) => "publisher confirms of persistent, mandatory messages, each carrying message_id = the event id for consumers to deduplicate (RabbitMQ itself keeps no dedup window)",
            SinkConfig::Sqs(_) => "a FIFO queue drops a repeated MessageDeduplicationId (the event id) within its 5-minute window",
            SinkConfig::Http(_) => "every request carries Idempotency-Key and webhook-id = the event id, for the receiver to deduplicate",
        }
    }
}

/// Connects the sink beyond Kafka that `config` names and starts its dispatch; `None` for Kafka.
pub async fn start(config: &SinkConfig) -> Result<Option<Dispatch>, Error> {
    Ok(match config {
        SinkConfig::Kafka => None,
        SinkConfig::Nats(c) => Some(Dispatch::spawn(nats::connect(c).await?)),
        SinkConfig::RabbitMq(c) => Some(Dispatch::spawn(rabbitmq::connect(c).await?)),
        SinkConfig::Sqs(c) => Some(Dispatch::spawn(sqs::connect(c).await?)),
        SinkConfig::Http(c) => Some(Dispatch::spawn(webhook::connect(c).await?)),
    })
}

/// `walrelay check`'s line for a sink beyond Kafka; `None` for Kafka (checked on its own).
pub async fn check(config: &SinkConfig) -> Option<Result<String, Error>> {
    Some(match config {
        SinkConfig::Kafka => return None,
        SinkConfig::Nats(c) => nats::check(c).await,
        SinkConfig::RabbitMq(c) => rabbitmq::check(c).await,
        SinkConfig::Sqs(c) => sqs::check(c).await,
        SinkConfig::Http(c) => webhook::check(c).await,
    })
}

/// `walrelay setup` for a sink beyond Kafka: what it created or found, for the `routed` names.
pub async fn setup(config: &SinkConfig, routed: &[String]) -> Option<Result<Vec<String>, Error>> {
    Some(match config {
        SinkConfig::Kafka => return None,
        SinkConfig::Nats(c) => nats::setup(c, routed).await,
        SinkConfig::RabbitMq(c) => rabbitmq::setup(c, routed).await,
        SinkConfig::Sqs(c) => sqs::setup(c, routed).await,
        SinkConfig::Http(c) => webhook::setup(c, routed).await,
    })
}
