//! `[debezium_offsets]`: where the Debezium connector whose slot walrelay takes over kept its
//! offsets, so the first run skips what Debezium already delivered (`relay::takeover`).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{invalid, required, section, ConfigError, Options};

/// Where Debezium's offsets are, and under which key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebeziumOffsetsConfig {
    pub store: OffsetStore,
    /// The connector's (or embedded engine's) `name`: the key's first element.
    pub connector: String,
    /// The connector's `topic.prefix`: the key's `server`.
    pub server: String,
    /// How long reading the offsets topic may take before walrelay gives up on it.
    pub timeout: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetStore {
    /// `offset.storage.file.filename` (embedded engine, Debezium Server).
    File(PathBuf),
    /// Kafka Connect's `offset.storage.topic`, read with the `[kafka]` settings.
    Topic(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Raw {
    file: Option<String>,
    topic: Option<String>,
    connector: Option<String>,
    server: Option<String>,
    timeout_ms: Option<u64>,
}

/// `topic_prefix`: `[debezium] "topic.prefix"`, the default for `server`.
pub(super) fn parse(
    opts: &Options,
    topic_prefix: Option<&String>,
) -> Result<DebeziumOffsetsConfig, ConfigError> {
    const S: &str = "debezium_offsets";
    let raw: Raw = section::from_options(S, opts)?;
    let store = match (raw.file, raw.topic) {
        (Some(file), None) if !file.is_empty() => OffsetStore::File(PathBuf::from(file)),
        (None, Some(topic)) if !topic.is_empty() => OffsetStore::Topic(topic),
        (Some(_), Some(_)) => {
            return Err(invalid(S, "topic", "", "set either file (an offset file) or topic (Kafka Connect's offsets topic), not both"))
        }
        (None, None) => {
            return Err(ConfigError::Missing {
                section: S,
                key: "file".into(),
                hint: "set file = \"<offset.storage.file.filename>\" (embedded engine, Debezium Server) or topic = \"<offset.storage.topic>\" (Kafka Connect, e.g. connect-offsets)".into(),
            })
        }
        _ => return Err(invalid(S, "file", "", "must not be empty")),
    };
    let connector =
        required(S, raw.connector, "connector", "set connector = \"<the connector's name>\"")?;
    let server = match raw.server.or_else(|| topic_prefix.cloned()) {
        Some(s) => s,
        None => required(
            S,
            None,
            "server",
            "set server = \"<the connector's topic.prefix>\" (or [debezium] \"topic.prefix\")",
        )?,
    };
    let timeout = Duration::from_millis(raw.timeout_ms.unwrap_or(10_000));
    if timeout.is_zero() {
        return Err(invalid(S, "timeout_ms", "0", "must be at least 1"));
    }
    Ok(DebeziumOffsetsConfig { store, connector, server, timeout })
}
