//! `[delivery]`: the guarantee walrelay gives consumers — at-least-once (the default), or
//! exactly-once into Kafka for consumers that read with `isolation.level=read_committed`.

use std::time::Duration;

use serde::Deserialize;

use super::{invalid, section, ConfigError, KafkaConfig, Options};
use crate::sink::SinkConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guarantee {
    /// Records may repeat after a crash; consumers deduplicate by the `id` header.
    AtLeastOnce,
    /// Records go out in Kafka transactions that also hold the relay's position, so a
    /// `read_committed` consumer sees each event once (see `delivery::exactly_once`).
    ExactlyOnce,
}

impl Guarantee {
    pub fn name(self) -> &'static str {
        match self {
            Guarantee::AtLeastOnce => "at-least-once",
            Guarantee::ExactlyOnce => "exactly-once",
        }
    }
}

/// `[delivery]`, with its defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryConfig {
    /// `sink`: where records go — Kafka (the default) or a sink beyond it, with its section.
    pub sink: SinkConfig,
    pub guarantee: Guarantee,
    /// The producer's `transactional.id`: shared by the active relay and its stand-by, so the
    /// one that takes the slot fences the other.
    pub transactional_id: String,
    /// The compacted, one-partition topic where each Kafka transaction records the commit LSN
    /// of the last PostgreSQL transaction it holds (key: `transactional_id`). By default the
    /// relay's own, `walrelay.progress.<slot>`: no other producer's open transaction can hold
    /// back its read.
    pub progress_topic: String,
    /// `progress_topic` was not named: the default, per relay.
    pub progress_topic_defaulted: bool,
    /// A Kafka transaction is committed at the first PostgreSQL commit after it has been open
    /// this long…
    pub transaction_max: Duration,
    /// …or once it holds this many records.
    pub transaction_max_records: usize,
    /// librdkafka's `transaction.timeout.ms`: how long one Kafka transaction may stay open.
    pub transaction_timeout: Duration,
}

impl DeliveryConfig {
    /// The shared progress topic of walrelay before per-relay topics: read once, when the
    /// relay's own does not exist yet, so an upgrade sends nothing twice.
    pub const LEGACY_PROGRESS_TOPIC: &'static str = "walrelay.progress";

    /// The default progress topic of the relay of `slot`. Slot names are `[a-z0-9_]`, at most
    /// 63 characters, so this is always a legal topic name (`[a-zA-Z0-9._-]`, at most 249).
    pub fn default_progress_topic(slot: &str) -> String {
        format!("walrelay.progress.{slot}")
    }

    pub fn exactly_once(&self) -> bool {
        self.guarantee == Guarantee::ExactlyOnce
    }

    /// Where an earlier walrelay kept this relay's position, when the topic is the default.
    pub fn legacy_progress_topic(&self) -> Option<&'static str> {
        self.progress_topic_defaulted.then_some(Self::LEGACY_PROGRESS_TOPIC)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Raw {
    sink: Option<String>,
    guarantee: Option<String>,
    transactional_id: Option<String>,
    progress_topic: Option<String>,
    transaction_max_ms: Option<u64>,
    transaction_max_records: Option<u64>,
}

/// The sink `[delivery] sink` names (`kafka` when absent), before anything else is read: it
/// decides which sections are needed.
pub(super) fn sink_name(opts: &Options) -> &str {
    opts.get("sink").map_or("kafka", |s| s.as_str())
}

/// `slot` names the default transactional id; `kafka` holds `transaction.timeout.ms`
/// (librdkafka's default: 60 s). `[kafka]` refuses `transactional.id` itself, pointing here.
/// `sink_section`: the options of the section of the sink `sink` names, if present.
pub(super) fn parse(
    opts: &Options,
    slot: &str,
    kafka: &KafkaConfig,
    sink_section: Option<&Options>,
) -> Result<DeliveryConfig, ConfigError> {
    const S: &str = "delivery";
    let raw: Raw = section::from_options(S, opts)?;
    let sink = SinkConfig::parse(raw.sink.as_deref().unwrap_or("kafka"), sink_section)?;
    let guarantee = match raw.guarantee.as_deref() {
        None | Some("at-least-once") => Guarantee::AtLeastOnce,
        Some("exactly-once") if !sink.is_kafka() => {
            return Err(invalid(
                S,
                "guarantee",
                "exactly-once",
                &format!(
                    "is Kafka's only (its transactions hold the relay's position); with sink = \"{}\" delivery is at-least-once and {}: remove guarantee",
                    sink.name(),
                    sink.instead_of_exactly_once()
                ),
            ))
        }
        Some("exactly-once") => Guarantee::ExactlyOnce,
        Some(other) => {
            return Err(invalid(
                S,
                "guarantee",
                other,
                "must be \"at-least-once\" (the default) or \"exactly-once\"",
            ))
        }
    };
    let transaction_timeout = match kafka.properties.get("transaction.timeout.ms") {
        Some(ms) => Duration::from_millis(ms.parse().map_err(|_| {
            invalid("kafka", "transaction.timeout.ms", ms, "must be a number of milliseconds")
        })?),
        None => Duration::from_secs(60),
    };
    // librdkafka refuses a transactional producer whose records may outlive its transactions;
    // said here, once, so `check` says it as `run` does.
    if guarantee == Guarantee::ExactlyOnce {
        let message_timeout = kafka.properties.get("message.timeout.ms");
        if let Some(ms) = message_timeout.and_then(|ms| ms.parse::<u64>().ok()) {
            if Duration::from_millis(ms) > transaction_timeout {
                return Err(invalid(
                    "kafka",
                    "message.timeout.ms",
                    &ms.to_string(),
                    &format!(
                        "must not exceed [kafka] \"transaction.timeout.ms\" ({} ms) with [delivery] guarantee = \"exactly-once\": a record must not outlive its Kafka transaction (librdkafka refuses the producer); lower message.timeout.ms or raise transaction.timeout.ms (and the broker's transaction.max.timeout.ms, 15 minutes by default)",
                        transaction_timeout.as_millis()
                    ),
                ));
            }
        }
    }
    let transaction_max = Duration::from_millis(raw.transaction_max_ms.unwrap_or(100));
    if transaction_max.is_zero() || transaction_max >= transaction_timeout / 2 {
        return Err(invalid(
            S,
            "transaction_max_ms",
            &transaction_max.as_millis().to_string(),
            &format!(
                "must be more than 0 and under half of [kafka] transaction.timeout.ms ({} ms), so a transaction commits well before the broker aborts it",
                transaction_timeout.as_millis()
            ),
        ));
    }
    let transaction_max_records = raw.transaction_max_records.unwrap_or(100_000);
    if transaction_max_records == 0 {
        return Err(invalid(S, "transaction_max_records", "0", "must be at least 1"));
    }
    let non_empty = |key: &str, value: Option<String>, default: String| match value {
        Some(v) if v.trim().is_empty() => Err(invalid(S, key, &v, "must not be empty")),
        Some(v) => Ok(v),
        None => Ok(default),
    };
    Ok(DeliveryConfig {
        sink,
        guarantee,
        transactional_id: non_empty(
            "transactional_id",
            raw.transactional_id,
            format!("walrelay-{slot}"),
        )?,
        progress_topic_defaulted: raw.progress_topic.is_none(),
        progress_topic: non_empty(
            "progress_topic",
            raw.progress_topic,
            DeliveryConfig::default_progress_topic(slot),
        )?,
        transaction_max,
        transaction_max_records: transaction_max_records as usize,
        transaction_timeout,
    })
}
