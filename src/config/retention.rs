//! `[retention]` (purging relayed outbox rows) and `[dead_letter]` (rows that can't become
//! records): the two sections about what happens to rows besides being relayed.

use std::time::Duration;

use serde::Deserialize;

use super::{check_identifier, invalid, required, section, ConfigError, KafkaConfig, Options};

/// `[retention]`: `walrelay run` purges outbox rows older than `keep` every `interval`, only
/// those whose events the slot has confirmed (see `crate::retention`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionConfig {
    /// Rows whose `column` is older than this go (partitions: whose upper bound is).
    pub keep: Duration,
    pub interval: Duration,
    /// The column that says how old a row is: `timestamptz`, `timestamp` or `date`.
    pub column: String,
}

impl RetentionConfig {
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(3_600);
    pub const DEFAULT_COLUMN: &'static str = "created_at";
}

/// `[dead_letter]`: where rows go that can't become records, instead of stopping the relay (I8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterConfig {
    pub topic: String,
    /// A dead letter carries at most this many bytes of the payload.
    pub max_value_bytes: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRetention {
    keep: Option<String>,
    interval: Option<String>,
    column: Option<String>,
}

pub(super) fn parse_retention(opts: &Options) -> Result<RetentionConfig, ConfigError> {
    const S: &str = "retention";
    let raw: RawRetention = section::from_options(S, opts)?;
    let duration = |key: &str, text: &str| {
        crate::duration::parse(text).map_err(|reason| invalid(S, key, text, &reason))
    };
    let keep = required(
        S,
        raw.keep,
        "keep",
        "set keep = \"7d\" (rows older than that are purged once relayed)",
    )?;
    let keep = duration("keep", &keep)?;
    if keep.is_zero() {
        return Err(invalid(S, "keep", "0", "must be more than 0, e.g. \"7d\""));
    }
    let interval = match raw.interval {
        Some(text) => duration("interval", &text)?,
        None => RetentionConfig::DEFAULT_INTERVAL,
    };
    if interval.is_zero() {
        return Err(invalid(S, "interval", "0", "must be at least 1s, e.g. \"1h\""));
    }
    let column = raw.column.unwrap_or_else(|| RetentionConfig::DEFAULT_COLUMN.to_string());
    check_identifier(S, "column", &column)?;
    Ok(RetentionConfig { keep, interval, column })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDeadLetter {
    topic: Option<String>,
    max_value_bytes: Option<u64>,
}

pub(super) fn parse_dead_letter(
    opts: &Options,
    kafka: &KafkaConfig,
) -> Result<DeadLetterConfig, ConfigError> {
    const S: &str = "dead_letter";
    let raw: RawDeadLetter = section::from_options(S, opts)?;
    let topic = required(S, raw.topic, "topic", "set topic = \"walrelay.dead_letter\"")?;
    if let Err(why) = crate::router::validate_topic(&topic) {
        return Err(invalid(S, "topic", &topic, &format!("not a legal Kafka topic name: {why}")));
    }
    let max_value_bytes =
        usize::try_from(raw.max_value_bytes.unwrap_or(64 * 1024)).unwrap_or(usize::MAX);
    // A dead letter for a record that was too large must itself fit: keep half of
    // message.max.bytes (librdkafka's default is 1,000,000) for the payload, the rest for
    // key and headers.
    let message_max: usize =
        kafka.properties.get("message.max.bytes").and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    Ok(DeadLetterConfig { topic, max_value_bytes: max_value_bytes.min(message_max / 2) })
}
