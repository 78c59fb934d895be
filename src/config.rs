//! The configuration file: one TOML document, validated whole at start-up.
//!
//! `[router]`, `[debezium]` and `[kafka]` take other projects' option names verbatim (Debezium's,
//! librdkafka's), so their keys contain dots. TOML reads `a.b = 1` as nested tables and
//! `"a.b" = 1` as one key; both spellings are flattened to the same dotted name here, and every
//! scalar (string, integer, float, boolean) becomes its text, so `"linger.ms" = 5` and
//! `"linger.ms" = "5"` mean the same.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

pub use crate::config_error::ConfigError;
use crate::messages::MessageSelection;
use crate::router::RouterConfig;

/// Flattened `dotted.key -> value text` options of one section.
pub type Options = BTreeMap<String, String>;

/// The whole, validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub source: SourceConfig,
    pub outbox: OutboxConfig,
    /// Which logical decoding messages are events too; `None`: messages are ignored.
    pub messages: Option<MessageSelection>,
    pub router: RouterConfig,
    /// `[envelope]`: what a record's value is (Debezium's, CloudEvents, protobuf).
    pub envelope: crate::envelope::EnvelopeConfig,
    pub kafka: KafkaConfig,
    pub limits: Limits,
    pub http: Option<HttpConfig>,
    pub dead_letter: Option<DeadLetterConfig>,
    pub retention: Option<RetentionConfig>,
}

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

/// `[source]`: where the WAL comes from.
#[derive(Clone)]
pub struct SourceConfig {
    /// libpq-style URL or key=value string, password included (never printed).
    pub url: String,
    pub conn: tokio_postgres::Config,
    /// `sslmode` / `sslrootcert`, applied by walrelay to both connections.
    pub tls: crate::tls::Tls,
    pub slot: String,
    pub publication: String,
    /// How often the confirmed position is reported to PostgreSQL at most; also the idle
    /// wake-up. Below half of any sane `wal_sender_timeout`.
    pub status_interval: Duration,
    /// Create the slot as a failover slot (PostgreSQL 17+). `None`: wherever supported.
    pub failover: Option<bool>,
}

impl fmt::Debug for SourceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceConfig")
            .field("url", &redact_url(&self.url))
            .field("slot", &self.slot)
            .field("publication", &self.publication)
            .field("status_interval", &self.status_interval)
            .field("failover", &self.failover)
            .finish()
    }
}

/// `[outbox]`: the tables whose INSERTs become records. One slot and one publication serve
/// them all, so their events keep the WAL's commit order across tables (and with the logical
/// messages [`Config::messages`] selects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxConfig {
    /// No duplicates, in the order configured; empty only for a message-only relay.
    pub tables: Vec<TableName>,
}

/// A schema-qualified table name as configured (plain lower-case identifiers).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableName {
    pub schema: String,
    pub name: String,
}

impl TableName {
    pub fn new(schema: &str, name: &str) -> TableName {
        TableName { schema: schema.to_string(), name: name.to_string() }
    }

    /// `"schema"."name"`, for SQL (quotes doubled: a partition's name is not checked like a
    /// configured one).
    pub fn quoted(&self) -> String {
        let quote = |s: &str| s.replace('"', "\"\"");
        format!("\"{}\".\"{}\"", quote(&self.schema), quote(&self.name))
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.schema, self.name)
    }
}

/// `[kafka]`: librdkafka producer properties, relay-owned ones already applied.
#[derive(Clone, PartialEq, Eq)]
pub struct KafkaConfig {
    pub properties: Options,
}

impl fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: BTreeMap<&str, &str> = self
            .properties
            .iter()
            .map(|(k, v)| {
                let secret = k.contains("password") || k.contains("secret");
                (k.as_str(), if secret { "****" } else { v.as_str() })
            })
            .collect();
        f.debug_struct("KafkaConfig").field("properties", &shown).finish()
    }
}

/// `[limits]`: the bounds on what is read from the WAL but not yet acknowledged (I7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub inflight_records: usize,
    pub inflight_bytes: usize,
    /// How long a graceful stop waits for outstanding acknowledgements.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            inflight_records: 20_000,
            inflight_bytes: 16 * 1024 * 1024,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

/// `[http]`: the operational endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    pub listen: SocketAddr,
    /// `/readyz` fails while the slot lags the server by more than this.
    pub ready_max_lag_bytes: u64,
}

/// Producer properties walrelay sets itself, because I2 and I5 depend on them.
pub const RELAY_OWNED_KAFKA: &[(&str, &[&str], &str)] = &[
    ("enable.idempotence", &["true"], "true"),
    ("acks", &["all", "-1"], "all"),
    ("partitioner", &["murmur2_random"], "murmur2_random"),
];

const DEFAULT_MESSAGE_TIMEOUT_MS: &str = "30000";

/// librdkafka waits `linger.ms` (its default: 5) before sending a batch. A relay's records arrive
/// a transaction at a time, so at low rates that wait is most of commit→ack; under load it sets
/// how many produce requests the broker has to handle. Measured (benchmark, 1M-event drain and
/// single-row transactions; docs/benchmarks.md): 2 ms gave p99 6 ms at 2,000/s against 8–10 ms
/// at 3 ms, with the same drain (1.3× the decoding ceiling). Below 2 ms the broker's per-request
/// cost grows (1 ms once halved a drain on the 2-core test machine).
const DEFAULT_LINGER_MS: &str = "2";

/// The sections of the file, in the order they are documented.
const SECTIONS: &[&str] = &[
    "source",
    "outbox",
    "router",
    "debezium",
    "envelope",
    "kafka",
    "limits",
    "http",
    "dead_letter",
    "retention",
];

/// Environment variables that override file keys start with this.
pub const ENV_PREFIX: &str = "WALRELAY_";

impl Config {
    /// Reads the file, then applies `WALRELAY_*` overrides from the process environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Config::parse_with_env(&text, std::env::vars())
    }

    /// Parses the file's text alone.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse_with_env(text, std::iter::empty())
    }

    /// Parses the text, then lets `env` override keys: `WALRELAY_<SECTION>_<KEY>`, upper case,
    /// with each `.` of a key written `__` (`WALRELAY_KAFKA_SASL__PASSWORD` sets `[kafka]
    /// "sasl.password"`, `WALRELAY_SOURCE_URL` sets `[source] url`). Variables whose next word
    /// is not a section are left alone; an unknown key in a known section is an error.
    pub fn parse_with_env(
        text: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut doc: toml::Table =
            text.parse().map_err(|e: toml::de::Error| ConfigError::Syntax(e.to_string()))?;
        if let Some(key) = doc.keys().find(|k| !SECTIONS.contains(&k.as_str())) {
            return Err(ConfigError::UnknownKey {
                section: "top level",
                key: key.clone(),
                hint: format!("the sections are [{}]", SECTIONS.join("], [")),
            });
        }
        let mut sections: BTreeMap<&'static str, Options> = BTreeMap::new();
        for section in SECTIONS {
            if doc.contains_key(*section) {
                sections.insert(section, flatten_section(&mut doc, section)?);
            }
        }
        for (name, value) in env {
            if let Some((section, key)) = env_key(&name) {
                sections.entry(section).or_default().insert(key, value);
            }
        }
        let mut take = |s: &str| sections.remove(s);
        let (source, outbox, router, debezium) =
            (take("source"), take("outbox"), take("router"), take("debezium"));
        let (kafka, limits, http, dead_letter) =
            (take("kafka"), take("limits"), take("http"), take("dead_letter"));
        let (retention, envelope) = (take("retention"), take("envelope"));
        let kafka = parse_kafka(kafka.unwrap_or_default())?;
        let source = parse_source(source.unwrap_or_default())?;
        let (outbox, non_transactional) = parse_outbox(outbox.unwrap_or_default())?;
        let debezium = debezium.unwrap_or_default();
        let (router, envelope) =
            crate::envelope::parse(envelope.as_ref(), &router.unwrap_or_default(), &debezium)?;
        let messages = MessageSelection::parse(&debezium, non_transactional.as_deref())?;
        if outbox.tables.is_empty() && messages.is_none() {
            return Err(invalid(
                "outbox",
                "tables",
                "[]",
                "lists no table and no logical messages are selected, so nothing would be \
                 relayed: name the outbox table(s), or set [debezium] \
                 \"message.prefix.include.list\" for a table-less outbox",
            ));
        }
        if outbox.tables.is_empty() && retention.is_some() {
            return Err(invalid(
                "outbox",
                "tables",
                "[]",
                "a message-only relay has no outbox rows, so [retention] has nothing to purge \
                 (logical messages leave nothing behind): remove the [retention] section",
            ));
        }
        Ok(Config {
            source,
            outbox,
            messages,
            router,
            envelope,
            dead_letter: dead_letter.map(|d| parse_dead_letter(d, &kafka)).transpose()?,
            kafka,
            limits: parse_limits(limits.unwrap_or_default())?,
            http: http.map(parse_http).transpose()?,
            retention: retention.map(parse_retention).transpose()?,
        })
    }
}

/// `WALRELAY_DEAD_LETTER_TOPIC` → (`dead_letter`, `topic`); `WALRELAY_KAFKA_LINGER__MS` →
/// (`kafka`, `linger.ms`). Longest section name first, so `DEAD_LETTER` wins over a shorter one.
fn env_key(name: &str) -> Option<(&'static str, String)> {
    let rest = name.strip_prefix(ENV_PREFIX)?;
    let mut sections: Vec<&'static str> = SECTIONS.to_vec();
    sections.sort_by_key(|s| std::cmp::Reverse(s.len()));
    sections.into_iter().find_map(|section| {
        let key = rest.strip_prefix(&section.to_ascii_uppercase())?.strip_prefix('_')?;
        (!key.is_empty()).then(|| (section, key.to_ascii_lowercase().replace("__", ".")))
    })
}

fn flatten_section(doc: &mut toml::Table, section: &'static str) -> Result<Options, ConfigError> {
    let mut out = Options::new();
    match doc.remove(section) {
        None => {}
        Some(toml::Value::Table(table)) => flatten(section, "", &table, &mut out)?,
        Some(other) => {
            return Err(invalid(section, section, &other.to_string(), "must be a [section] table"))
        }
    }
    Ok(out)
}

fn flatten(
    section: &'static str,
    prefix: &str,
    table: &toml::Table,
    out: &mut Options,
) -> Result<(), ConfigError> {
    for (key, value) in table {
        let name = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        let text = match value {
            toml::Value::Table(inner) => {
                flatten(section, &name, inner, out)?;
                continue;
            }
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            // A list is written as the comma-separated text Debezium and librdkafka use for
            // their list options (`tables = ["a", "b"]` is `tables = "a,b"`).
            toml::Value::Array(items) => {
                let mut texts = Vec::with_capacity(items.len());
                for item in items {
                    match scalar_text(item) {
                        Some(text) => texts.push(text),
                        None => {
                            return Err(invalid(
                                section,
                                &name,
                                &item.to_string(),
                                "list items must be strings, numbers or booleans",
                            ))
                        }
                    }
                }
                texts.join(",")
            }
            other => {
                return Err(invalid(
                    section,
                    &name,
                    &other.to_string(),
                    "values must be strings, numbers, booleans or lists of them",
                ))
            }
        };
        if out.insert(name.clone(), text).is_some() {
            return Err(invalid(section, &name, "", "is set twice (quoted and dotted spellings)"));
        }
    }
    Ok(())
}

fn scalar_text(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

fn invalid(section: &'static str, key: &str, value: &str, reason: &str) -> ConfigError {
    ConfigError::InvalidValue {
        section,
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

fn reject_unknown(
    section: &'static str,
    opts: &Options,
    known: &[&str],
) -> Result<(), ConfigError> {
    match opts.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(key) => Err(ConfigError::UnknownKey {
            section,
            key: key.clone(),
            hint: format!("known keys: {}", known.join(", ")),
        }),
    }
}

fn required(
    section: &'static str,
    opts: &mut Options,
    key: &str,
    hint: &str,
) -> Result<String, ConfigError> {
    opts.remove(key).ok_or_else(|| ConfigError::Missing {
        section,
        key: key.to_string(),
        hint: hint.to_string(),
    })
}

fn parse_number<T: std::str::FromStr>(
    section: &'static str,
    key: &str,
    value: &str,
) -> Result<T, ConfigError> {
    value
        .trim()
        .parse()
        .map_err(|_| invalid(section, key, value, "must be a non-negative whole number"))
}

/// PostgreSQL identifiers walrelay puts into SQL and into the replication command. pgwire-replication
/// sends the slot name unquoted, so only plain lower-case identifiers are accepted.
pub fn check_identifier(section: &'static str, key: &str, value: &str) -> Result<(), ConfigError> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && value.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(invalid(
            section,
            key,
            value,
            "must be a plain PostgreSQL identifier: lower-case letters, digits and _, starting with a letter or _, at most 63 bytes",
        ))
    }
}

fn parse_source(mut opts: Options) -> Result<SourceConfig, ConfigError> {
    parse_source_with(&mut opts, &|k: &str| std::env::var(k).ok())
}

/// `[source]`, with libpq's environment read through `env`. Without `url` the connection comes
/// from the `PG*` variables alone, as `psql` with no arguments would connect.
fn parse_source_with(
    opts: &mut Options,
    env: crate::source::libpq::Env,
) -> Result<SourceConfig, ConfigError> {
    const S: &str = "source";
    reject_unknown(S, opts, &["url", "slot", "publication", "status_interval_ms", "failover"])?;
    let url = opts.remove("url").unwrap_or_default();
    let (plain_url, tls) = crate::tls::Tls::extract(&url, env)
        .map_err(|reason| invalid(S, "url", &redact_url(&url), &reason))?;
    let mut conn: tokio_postgres::Config = plain_url.parse().map_err(|e| {
        invalid(S, "url", &redact_url(&url), &format!("not a libpq URL or connection string: {e}"))
    })?;
    conn.ssl_mode(match tls.mode {
        crate::tls::SslMode::Disable => tokio_postgres::config::SslMode::Disable,
        crate::tls::SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        _ => tokio_postgres::config::SslMode::Require,
    });
    crate::source::libpq::apply_env(&mut conn, &url, env)
        .map_err(|reason| invalid(S, "url", &redact_url(&url), &reason))?;
    let slot = opts.remove("slot").unwrap_or_else(|| "walrelay".to_string());
    check_identifier(S, "slot", &slot)?;
    let publication = opts.remove("publication").unwrap_or_else(|| "walrelay".to_string());
    check_identifier(S, "publication", &publication)?;
    let status_ms: u64 = match opts.remove("status_interval_ms") {
        Some(v) => parse_number(S, "status_interval_ms", &v)?,
        None => 1000,
    };
    if !(10..=10_000).contains(&status_ms) {
        return Err(invalid(
            S,
            "status_interval_ms",
            &status_ms.to_string(),
            "must be between 10 and 10000",
        ));
    }
    let failover = match opts.remove("failover") {
        None => None,
        Some(v) => Some(parse_bool(S, "failover", &v)?),
    };
    Ok(SourceConfig {
        url,
        conn,
        tls,
        slot,
        publication,
        status_interval: Duration::from_millis(status_ms),
        failover,
    })
}

fn parse_bool(section: &'static str, key: &str, value: &str) -> Result<bool, ConfigError> {
    match value.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        other => Err(invalid(section, key, other, "must be true or false")),
    }
}

/// `[outbox]`, and its `non_transactional_messages` (checked with the message selection).
fn parse_outbox(mut opts: Options) -> Result<(OutboxConfig, Option<String>), ConfigError> {
    const S: &str = "outbox";
    reject_unknown(S, &opts, &["table", "tables", "non_transactional_messages"])?;
    let non_transactional = opts.remove(crate::messages::NON_TRANSACTIONAL_KEY);
    let (key, list) = match (opts.remove("table"), opts.remove("tables")) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                S,
                "table/tables",
                "",
                "set one of them: `table` for one outbox table, `tables` for several",
            ))
        }
        (Some(one), None) => ("table", one),
        // `tables = []`: a message-only relay (checked against the message selection).
        (None, Some(many)) if many.trim().is_empty() => {
            return Ok((OutboxConfig { tables: Vec::new() }, non_transactional))
        }
        (None, Some(many)) => ("tables", many),
        (None, None) => ("table", "public.outbox".to_string()),
    };
    let mut tables: Vec<TableName> = Vec::new();
    for item in list.split(',').map(str::trim) {
        let (schema, name) = item.split_once('.').unwrap_or(("public", item));
        check_identifier(S, key, schema)?;
        check_identifier(S, key, name)?;
        let table = TableName::new(schema, name);
        if tables.contains(&table) {
            return Err(invalid(S, key, &list, &format!("names {table} twice")));
        }
        tables.push(table);
    }
    Ok((OutboxConfig { tables }, non_transactional))
}

fn parse_kafka(mut properties: Options) -> Result<KafkaConfig, ConfigError> {
    const S: &str = "kafka";
    if !properties.contains_key("bootstrap.servers")
        && !properties.contains_key("metadata.broker.list")
    {
        return Err(ConfigError::Missing {
            section: S,
            key: "bootstrap.servers".into(),
            hint: "set \"bootstrap.servers\" = \"host:9092\"".into(),
        });
    }
    for (key, allowed, default) in RELAY_OWNED_KAFKA {
        match properties.get(*key) {
            Some(v) if !allowed.contains(&v.to_ascii_lowercase().as_str()) => {
                return Err(invalid(
                    S,
                    key,
                    v,
                    &format!("walrelay needs {key}={default} for its ordering and delivery guarantees; remove the key"),
                ));
            }
            _ => {
                properties.insert(key.to_string(), default.to_string());
            }
        }
    }
    for unsafe_key in ["transactional.id", "enable.gapless.guarantee"] {
        if properties.contains_key(unsafe_key) {
            return Err(ConfigError::UnknownKey {
                section: S,
                key: unsafe_key.into(),
                hint: "walrelay manages delivery itself; remove the key".into(),
            });
        }
    }
    properties
        .entry("message.timeout.ms".into())
        .or_insert_with(|| DEFAULT_MESSAGE_TIMEOUT_MS.into());
    if !properties.contains_key("queue.buffering.max.ms") {
        properties.entry("linger.ms".into()).or_insert_with(|| DEFAULT_LINGER_MS.into());
    }
    Ok(KafkaConfig { properties })
}

fn parse_limits(mut opts: Options) -> Result<Limits, ConfigError> {
    const S: &str = "limits";
    reject_unknown(S, &opts, &["inflight_records", "inflight_bytes", "shutdown_grace_ms"])?;
    let mut limits = Limits::default();
    if let Some(v) = opts.remove("inflight_records") {
        limits.inflight_records = parse_number(S, "inflight_records", &v)?;
    }
    if let Some(v) = opts.remove("inflight_bytes") {
        limits.inflight_bytes = parse_number(S, "inflight_bytes", &v)?;
    }
    if let Some(v) = opts.remove("shutdown_grace_ms") {
        limits.shutdown_grace = Duration::from_millis(parse_number(S, "shutdown_grace_ms", &v)?);
    }
    if limits.inflight_records == 0 || limits.inflight_bytes < 1024 {
        return Err(invalid(
            S,
            "inflight_records/inflight_bytes",
            "",
            "must allow at least one record and 1024 bytes",
        ));
    }
    Ok(limits)
}

fn parse_dead_letter(
    mut opts: Options,
    kafka: &KafkaConfig,
) -> Result<DeadLetterConfig, ConfigError> {
    const S: &str = "dead_letter";
    reject_unknown(S, &opts, &["topic", "max_value_bytes"])?;
    let topic = required(S, &mut opts, "topic", "set topic = \"walrelay.dead_letter\"")?;
    let legal = !topic.is_empty()
        && topic.len() <= 249
        && topic != "."
        && topic != ".."
        && topic.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if !legal {
        return Err(invalid(
            S,
            "topic",
            &topic,
            "not a legal Kafka topic name: [a-zA-Z0-9._-], at most 249 characters",
        ));
    }
    let mut max_value_bytes: usize = match opts.remove("max_value_bytes") {
        Some(v) => parse_number(S, "max_value_bytes", &v)?,
        None => 64 * 1024,
    };
    // A dead letter for a record that was too large must itself fit: keep half of
    // message.max.bytes (librdkafka's default is 1,000,000) for the payload, the rest for
    // key and headers.
    let message_max: usize =
        kafka.properties.get("message.max.bytes").and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    max_value_bytes = max_value_bytes.min(message_max / 2);
    Ok(DeadLetterConfig { topic, max_value_bytes })
}

fn parse_http(mut opts: Options) -> Result<HttpConfig, ConfigError> {
    const S: &str = "http";
    reject_unknown(S, &opts, &["listen", "ready_max_lag_bytes"])?;
    let listen = required(S, &mut opts, "listen", "set listen = \"127.0.0.1:9187\"")?;
    let listen = listen
        .parse()
        .map_err(|_| invalid(S, "listen", &listen, "must be an address like 127.0.0.1:9187"))?;
    let ready_max_lag_bytes = match opts.remove("ready_max_lag_bytes") {
        Some(v) => parse_number(S, "ready_max_lag_bytes", &v)?,
        None => 256 * 1024 * 1024,
    };
    Ok(HttpConfig { listen, ready_max_lag_bytes })
}

fn parse_retention(mut opts: Options) -> Result<RetentionConfig, ConfigError> {
    const S: &str = "retention";
    reject_unknown(S, &opts, &["keep", "interval", "column"])?;
    let duration = |key: &str, text: &str| {
        crate::duration::parse(text).map_err(|reason| invalid(S, key, text, &reason))
    };
    let keep = required(
        S,
        &mut opts,
        "keep",
        "set keep = \"7d\" (rows older than that are purged once relayed)",
    )?;
    let keep = duration("keep", &keep)?;
    if keep.is_zero() {
        return Err(invalid(S, "keep", "0", "must be more than 0, e.g. \"7d\""));
    }
    let interval = match opts.remove("interval") {
        Some(text) => duration("interval", &text)?,
        None => RetentionConfig::DEFAULT_INTERVAL,
    };
    if interval.is_zero() {
        return Err(invalid(S, "interval", "0", "must be at least 1s, e.g. \"1h\""));
    }
    let column =
        opts.remove("column").unwrap_or_else(|| RetentionConfig::DEFAULT_COLUMN.to_string());
    check_identifier(S, "column", &column)?;
    Ok(RetentionConfig { keep, interval, column })
}

/// The URL with any password replaced by `****`, for logs and errors.
pub fn redact_url(url: &str) -> String {
    // URL form: scheme://user:password@host...
    if let Some(scheme_end) = url.find("://") {
        let rest = &url[scheme_end + 3..];
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            if let Some(colon) = rest[..at].find(':') {
                return format!("{}{}:****{}", &url[..scheme_end + 3], &rest[..colon], &rest[at..]);
            }
        }
        return url.to_string();
    }
    // key=value form
    url.split_whitespace()
        .map(|kv| if kv.starts_with("password=") { "password=****" } else { kv })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        [source]
        url = "postgres://walrelay:s3cret@127.0.0.1:5432/app"
        [kafka]
        "bootstrap.servers" = "127.0.0.1:9092"
    "#;

    #[test]
    fn linger_defaults_to_two_ms_unless_either_spelling_is_set() {
        let own = Config::parse(&format!("{MINIMAL}\n\"linger.ms\" = 20\n")).unwrap();
        assert_eq!(own.kafka.properties["linger.ms"], "20");
        let alias = Config::parse(&format!("{MINIMAL}\n\"queue.buffering.max.ms\" = 7\n")).unwrap();
        assert!(!alias.kafka.properties.contains_key("linger.ms"), "{:?}", alias.kafka.properties);
    }

    #[test]
    fn minimal_config_gets_defaults_and_relay_owned_producer_settings() {
        let c = Config::parse(MINIMAL).unwrap();
        assert_eq!(c.source.slot, "walrelay");
        assert_eq!(c.source.publication, "walrelay");
        assert_eq!(c.outbox, OutboxConfig { tables: vec![TableName::new("public", "outbox")] });
        assert_eq!(c.kafka.properties["enable.idempotence"], "true");
        assert_eq!(c.kafka.properties["acks"], "all");
        assert_eq!(c.kafka.properties["linger.ms"], "2");
        assert_eq!(c.kafka.properties["partitioner"], "murmur2_random");
        assert_eq!(c.kafka.properties["message.timeout.ms"], "30000");
        assert!(c.http.is_none());
    }

    #[test]
    fn dotted_and_quoted_keys_and_numbers_mean_the_same() {
        let dotted = format!("{MINIMAL}\nlinger.ms = 5\n");
        let quoted = format!("{MINIMAL}\n\"linger.ms\" = \"5\"\n");
        let a = Config::parse(&dotted).unwrap();
        let b = Config::parse(&quoted).unwrap();
        assert_eq!(a.kafka.properties["linger.ms"], "5");
        assert_eq!(a.kafka.properties, b.kafka.properties);
    }

    #[test]
    fn both_spellings_of_one_key_are_rejected_as_duplicate() {
        let text = format!("{MINIMAL}\n\"linger.ms\" = 5\nlinger.ms = 6\n");
        let err = Config::parse(&text);
        // TOML itself or our flattening must refuse it; either way the key is named.
        let msg = err.unwrap_err().to_string();
        assert!(msg.contains("linger"), "{msg}");
    }

    #[test]
    fn unknown_section_and_key_are_named_in_the_error() {
        let e = Config::parse(&format!("{MINIMAL}\n[sorce]\nx=1\n")).unwrap_err().to_string();
        assert!(e.contains("sorce") && e.contains("[source]"), "{e}");
        let e = Config::parse(&MINIMAL.replace("[kafka]", "slott = \"x\"\n[kafka]"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("[source] unknown key `slott`"), "{e}");
    }

    #[test]
    fn unsafe_relay_owned_kafka_setting_is_an_error_not_an_override() {
        let e = Config::parse(&format!("{MINIMAL}\nacks = 1\n")).unwrap_err().to_string();
        assert!(e.contains("acks") && e.contains("remove the key"), "{e}");
        let e = Config::parse(&format!("{MINIMAL}\n\"enable.idempotence\" = false\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("enable.idempotence"), "{e}");
        assert!(Config::parse(&format!("{MINIMAL}\nacks = \"all\"\n")).is_ok());
    }

    #[test]
    fn missing_bootstrap_servers_says_what_to_set() {
        let e = Config::parse("[source]\nurl=\"postgres://a@b/c\"\n").unwrap_err().to_string();
        assert!(e.contains("bootstrap.servers"), "{e}");
    }

    #[test]
    fn source_without_url_connects_from_the_libpq_environment() {
        let env = |k: &str| match k {
            "PGHOST" => Some("db1,db2".to_string()),
            "PGDATABASE" => Some("app".to_string()),
            "PGUSER" => Some("relay".to_string()),
            "PGTARGETSESSIONATTRS" => Some("read-write".to_string()),
            _ => None,
        };
        let mut opts = Options::new();
        let src = parse_source_with(&mut opts, &env).unwrap();
        assert_eq!(src.conn.get_hosts().len(), 2);
        assert_eq!((src.conn.get_dbname(), src.conn.get_user()), (Some("app"), Some("relay")));
        assert_eq!(src.failover, None);
    }

    #[test]
    fn source_failover_is_a_boolean() {
        let c = Config::parse(&MINIMAL.replace("[kafka]", "failover = false\n[kafka]")).unwrap();
        assert_eq!(c.source.failover, Some(false));
        let e = Config::parse(&MINIMAL.replace("[kafka]", "failover = \"maybe\"\n[kafka]"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("failover") && e.contains("true or false"), "{e}");
    }

    #[test]
    fn outbox_tables_take_a_list_or_one_table_but_not_both() {
        let c = Config::parse(&format!(
            "{MINIMAL}\n[outbox]\ntables = [\"public.outbox\", \"billing.outbox\"]\n"
        ))
        .unwrap();
        assert_eq!(
            c.outbox.tables,
            [TableName::new("public", "outbox"), TableName::new("billing", "outbox")]
        );
        let one = Config::parse(&format!("{MINIMAL}\n[outbox]\ntable = \"events\"\n")).unwrap();
        assert_eq!(one.outbox.tables, [TableName::new("public", "events")]);
        let e = Config::parse(&format!("{MINIMAL}\n[outbox]\ntable = \"a\"\ntables = [\"b\"]\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("table/tables"), "{e}");
        let e = Config::parse(&format!("{MINIMAL}\n[outbox]\ntables = [\"a\", \"public.a\"]\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("twice"), "{e}");
    }

    #[test]
    fn messages_are_selected_by_prefix_lists_and_may_be_the_only_events() {
        let none = Config::parse(MINIMAL).unwrap();
        assert!(none.messages.is_none(), "without a prefix list, messages are ignored");
        let only = format!(
            "{MINIMAL}\n[outbox]\ntables = []\nnon_transactional_messages = \"relay\"\n\
             [debezium]\n\"message.prefix.include.list\" = \"outbox\"\n"
        );
        let c = Config::parse(&only).unwrap();
        assert!(c.outbox.tables.is_empty());
        let selection = c.messages.expect("selected");
        assert_eq!(selection.verdict(false, "OUTBOX"), crate::messages::Verdict::Event);
        let e =
            Config::parse(&format!("{MINIMAL}\n[outbox]\ntables = []\n")).unwrap_err().to_string();
        assert!(e.contains("tables") && e.contains("message.prefix.include.list"), "{e}");
        let e = Config::parse(&format!(
            "{MINIMAL}\n[debezium]\n\"message.prefix.include.list\" = \"a\"\n\
             \"message.prefix.exclude.list\" = \"b\"\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("message.prefix.include.list") && e.contains("message.prefix.exclude.list"),
            "{e}"
        );
    }

    #[test]
    fn names_that_could_inject_sql_are_rejected() {
        for bad in ["walrelay; drop table x", "Walrelay", "a-b", "", "x\"y"] {
            let text = MINIMAL.replace("[kafka]", &format!("slot = {bad:?}\n[kafka]"));
            let e = Config::parse(&text).unwrap_err().to_string();
            assert!(e.contains("slot"), "{bad}: {e}");
        }
        let text = format!("{MINIMAL}\n[outbox]\ntable = \"public.outbox; select 1\"\n");
        assert!(Config::parse(&text).is_err());
    }

    #[test]
    fn password_never_appears_in_debug_or_errors() {
        let c = Config::parse(MINIMAL).unwrap();
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("s3cret"), "{dbg}");
        assert!(dbg.contains("walrelay:****@127.0.0.1"), "{dbg}");
        let bad = MINIMAL.replace(
            "postgres://walrelay:s3cret@127.0.0.1:5432/app",
            "postgres://u:s3cret@h:notaport/app",
        );
        let e = Config::parse(&bad).unwrap_err().to_string();
        assert!(!e.contains("s3cret"), "{e}");
        assert_eq!(redact_url("host=h password=s3cret user=u"), "host=h password=**** user=u");
    }

    #[test]
    fn environment_overrides_file_keys_with_dotted_names_spelled_double_underscore() {
        let env = [
            ("WALRELAY_SOURCE_URL", "postgres://other@db:5433/app2"),
            ("WALRELAY_KAFKA_LINGER__MS", "7"),
            ("WALRELAY_ROUTER_ROUTE__TOPIC__REPLACEMENT", "events.${routedByValue}"),
            ("WALRELAY_DEAD_LETTER_TOPIC", "dlq"),
            ("WALRELAY_BIN", "/not/a/section"),
        ];
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        let c = Config::parse_with_env(MINIMAL, env).unwrap();
        assert_eq!(c.source.conn.get_dbname(), Some("app2"));
        assert_eq!(c.kafka.properties["linger.ms"], "7");
        assert_eq!(c.dead_letter.unwrap().topic, "dlq");
        let typo = [("WALRELAY_SOURCE_SLOTT".to_string(), "x".to_string())];
        let e = Config::parse_with_env(MINIMAL, typo).unwrap_err().to_string();
        assert!(e.contains("slott"), "{e}");
    }

    #[test]
    fn dead_letter_section_parses_and_caps_its_payload_to_half_the_message_limit() {
        let text =
            format!("{MINIMAL}\"message.max.bytes\" = 10000\n[dead_letter]\ntopic = \"dlq\"\n");
        let d = Config::parse(&text).unwrap().dead_letter.unwrap();
        assert_eq!((d.topic.as_str(), d.max_value_bytes), ("dlq", 5000));
        let e =
            Config::parse(&format!("{MINIMAL}[dead_letter]\ntopic = \"bad topic\"\n")).unwrap_err();
        assert!(e.to_string().contains("topic"), "{e}");
    }

    #[test]
    fn kafka_secrets_are_hidden_in_debug() {
        let c = Config::parse(&format!("{MINIMAL}\n\"sasl.password\" = \"hunter2\"\n")).unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn retention_takes_durations_and_a_column_with_defaults() {
        let c = Config::parse(&format!("{MINIMAL}\n[retention]\nkeep = \"7d\"\n")).unwrap();
        assert_eq!(
            c.retention,
            Some(RetentionConfig {
                keep: Duration::from_secs(7 * 86_400),
                interval: Duration::from_secs(3_600),
                column: "created_at".into(),
            })
        );
        let c = Config::parse(&format!(
            "{MINIMAL}\n[retention]\nkeep = \"12h\"\ninterval = \"30m\"\ncolumn = \"written_at\"\n"
        ))
        .unwrap()
        .retention
        .unwrap();
        assert_eq!((c.keep.as_secs(), c.interval.as_secs()), (43_200, 1_800));
        assert_eq!(c.column, "written_at");
        assert!(Config::parse(MINIMAL).unwrap().retention.is_none());
    }

    #[test]
    fn bad_retention_values_are_refused_with_the_key_named() {
        for (lines, key) in [
            ("interval = \"1h\"", "`keep`"),
            ("keep = \"7\"", "`keep`"),
            ("keep = \"1w\"", "`keep`"),
            ("keep = \"0d\"", "`keep`"),
            ("keep = \"7d\"\ninterval = \"soon\"", "`interval`"),
            ("keep = \"7d\"\ninterval = \"0s\"", "`interval`"),
            ("keep = \"7d\"\ncolumn = \"Created At\"", "`column`"),
            ("keep = \"7d\"\nkeep_for = \"7d\"", "`keep_for`"),
        ] {
            let e = Config::parse(&format!("{MINIMAL}\n[retention]\n{lines}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("[retention]") && e.contains(key), "{lines}: {e}");
        }
    }

    #[test]
    fn limits_and_http_parse_and_validate() {
        let c = Config::parse(&format!(
            "{MINIMAL}\n[limits]\ninflight_records = 10\ninflight_bytes = 4096\n[http]\nlisten = \"127.0.0.1:9187\"\n"
        ))
        .unwrap();
        assert_eq!(c.limits.inflight_records, 10);
        assert_eq!(c.http.unwrap().listen.port(), 9187);
        let e = Config::parse(&format!("{MINIMAL}\n[limits]\ninflight_records = \"many\"\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("inflight_records"), "{e}");
        let e = Config::parse(&format!("{MINIMAL}\n[http]\nlisten = \"nowhere\"\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("listen"), "{e}");
    }
}
