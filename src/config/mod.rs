//! The configuration file: one TOML document plus `WALRELAY_*` overrides, validated whole at
//! start-up.
//!
//! walrelay's own sections (`[source]`, `[outbox]`, `[limits]`, `[http]`, `[dead_letter]`,
//! `[retention]`, `[debezium_offsets]`, `[tracing]`) deserialize with serde into
//! `deny_unknown_fields` structs ([`section`]); the pass-through sections (`[router]`, `[debezium]`, `[kafka]`) stay
//! open maps that their owners check (the router, the message selection, librdkafka). No error
//! message prints a secret: see [`secret`].

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use crate::message_selection::MessageSelection;
use crate::router::RouterConfig;

mod audit;
mod debezium_offsets;
mod delivery;
mod document;
mod env;
mod http;
mod kafka;
mod limits;
mod outbox;
mod retention;
mod schema_registry;
use crate::options::section;
mod source;
#[cfg(test)]
mod tests;
mod tracing;

use crate::options::{invalid, required};
pub use crate::options::{secret, ConfigError, Options};
pub use audit::AuditConfig;
pub use debezium_offsets::{DebeziumOffsetsConfig, OffsetStore};
pub use delivery::{DeliveryConfig, Guarantee};
pub use env::ENV_PREFIX;
pub use http::{ConsoleMode, HttpConfig};
pub use kafka::{KafkaConfig, FILL_IN, RELAY_OWNED_KAFKA};
pub use limits::Limits;
pub use outbox::{OutboxConfig, TableName, TablePattern};
pub use retention::{DeadLetterConfig, RetentionConfig};
pub use schema_registry::{IdHandler, SchemaRegistryConfig, SubjectNameStrategy, UseId};
pub use secret::redact_url;
pub use source::SourceConfig;
pub use tracing::TracingConfig;

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
    /// `[delivery]`: at-least-once or exactly-once.
    pub delivery: DeliveryConfig,
    pub limits: Limits,
    pub http: Option<HttpConfig>,
    pub dead_letter: Option<DeadLetterConfig>,
    pub retention: Option<RetentionConfig>,
    /// `[audit]`: `walrelay run` audits a trailing window every interval; `None`: it does not.
    pub audit: Option<AuditConfig>,
    /// Where the Debezium connector whose slot this is kept its offsets.
    pub debezium_offsets: Option<DebeziumOffsetsConfig>,
    /// `[tracing]`: where the relay's spans go; `None`: no spans (context still propagates).
    pub tracing: Option<TracingConfig>,
    /// `[schema_registry]`: where a registry converter's schemas go; `None`: no registry.
    pub schema_registry: Option<SchemaRegistryConfig>,
}

/// walrelay's own sections of the file, in the order they are documented.
const SECTIONS: &[&str] = &[
    "source",
    "outbox",
    "router",
    "debezium",
    "envelope",
    "kafka",
    "schema_registry",
    "delivery",
    "limits",
    "http",
    "dead_letter",
    "retention",
    "audit",
    "tracing",
    "debezium_offsets",
];

/// Every section a file may hold: walrelay's own, then those of the sinks beyond Kafka
/// (`crate::sink::sections`), read when `[delivery] sink` names them.
fn section_names() -> impl Iterator<Item = &'static str> {
    SECTIONS.iter().copied().chain(crate::sink::sections().into_iter().map(|s| s.section))
}

impl Config {
    /// Reads the file, applies `WALRELAY_*` overrides from the process environment, and has
    /// librdkafka check the `[kafka]` properties.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        let config = Config::parse_with_env(&text, std::env::vars_os())?;
        config.kafka.check_with_librdkafka()?;
        Ok(config)
    }

    /// Parses the file's text alone.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse_with_env(text, std::iter::empty::<(OsString, OsString)>())
    }

    /// Parses the text, then lets `env` override keys: `WALRELAY_<SECTION>_<KEY>`, upper case,
    /// with each `.` of a key written `__` (`WALRELAY_KAFKA_SASL__PASSWORD` sets `[kafka]
    /// "sasl.password"`, `WALRELAY_SOURCE_URL` sets `[source] url`). Variables whose next word
    /// is not a section are left alone; an unknown key in a known section is an error.
    ///
    /// Every error is scrubbed of the secrets the text and the overrides hold, as a last line
    /// of defence behind the value-free messages the sections produce.
    pub fn parse_with_env<K, V>(
        text: &str,
        env: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Config, ConfigError>
    where
        K: Into<OsString>,
        V: Into<OsString>,
    {
        let overrides = env::overrides(env)?;
        let mut env_secrets = Vec::new();
        for o in &overrides {
            if secret::is_secret_key(&o.key) {
                env_secrets.push(o.value.clone());
            }
            env_secrets.extend(secret::secrets_in(&o.value));
        }
        Config::build(text, overrides).map_err(|e| {
            let mut secrets = secret::secrets_in(text);
            secrets.append(&mut env_secrets);
            e.scrubbed(&secrets)
        })
    }

    fn build(text: &str, overrides: Vec<env::Override>) -> Result<Config, ConfigError> {
        let mut doc = document::parse(text)?;
        // A section its owner module parses from its own TOML table is taken out of `doc`
        // here, before the flat sections are read.
        let mut sections = document::sections(&mut doc)?;
        let origins: Vec<(&'static str, String, String)> =
            overrides.iter().map(|o| (o.section, o.key.clone(), o.variable.clone())).collect();
        for o in overrides {
            sections.entry(o.section).or_default().insert(o.key, o.value);
        }
        Config::from_sections(sections).map_err(|e| env::attribute(e, &origins))
    }

    fn from_sections(mut sections: BTreeMap<&'static str, Options>) -> Result<Config, ConfigError> {
        let mut take = |s: &str| sections.remove(s);
        let (source, outbox, router, debezium) =
            (take("source"), take("outbox"), take("router"), take("debezium"));
        let (kafka, limits, http, dead_letter) =
            (take("kafka"), take("limits"), take("http"), take("dead_letter"));
        let (retention, debezium_offsets) = (take("retention"), take("debezium_offsets"));
        let (audit, schema_registry) = (take("audit"), take("schema_registry"));
        let (envelope, delivery, tracing) = (take("envelope"), take("delivery"), take("tracing"));
        let tracing = tracing.map(|t| tracing::parse(&t)).transpose()?.flatten();
        let delivery = delivery.unwrap_or_default();
        let sink = delivery::sink_name(&delivery).to_string();
        let mut sink_section = None;
        for crate::sink::SinkSection { section, sink: serves, .. } in crate::sink::sections() {
            match sections.remove(section) {
                Some(options) if serves == sink => sink_section = Some(options),
                Some(_) => {
                    return Err(invalid(
                        "delivery",
                        "sink",
                        &sink,
                        &format!("leaves the [{section}] section unused (it configures sink = \"{serves}\"): set sink = \"{serves}\" or remove [{section}]"),
                    ))
                }
                None => {}
            }
        }
        // Only the Kafka sink needs a broker list; the others keep `[kafka]` for nothing but
        // the commands that read Kafka.
        let kafka = match kafka {
            None if sink != "kafka" => KafkaConfig::absent(),
            kafka => kafka::parse(kafka.unwrap_or_default())?,
        };
        let source = source::parse(&source.unwrap_or_default())?;
        let delivery = delivery::parse(&delivery, &source.slot, &kafka, sink_section.as_ref())?;
        let (outbox, non_transactional) = outbox::parse(&outbox.unwrap_or_default())?;
        let debezium = debezium.unwrap_or_default();
        let debezium_offsets = debezium_offsets
            .map(|o| debezium_offsets::parse(&o, debezium.get("topic.prefix")))
            .transpose()?;
        let (mut router, envelope) =
            crate::envelope::parse(envelope.as_ref(), &router.unwrap_or_default(), &debezium)?;
        // The relay's span id goes into the header only when that span is exported.
        router.relay_spans = tracing.is_some();
        router.tenant_header = outbox.tenant_header.as_deref().map(std::sync::Arc::from);
        let messages = MessageSelection::parse(&debezium, non_transactional.as_deref())?;
        let schema_registry = schema_registry.map(|r| schema_registry::parse(&r)).transpose()?;
        let registry_side = match (router.registry_converter(), router.registry_key_converter()) {
            (Some(converter), _) => Some(("value.converter", converter)),
            (None, Some(converter)) => Some(("key.converter", converter)),
            (None, None) => None,
        };
        if let (Some((side, converter)), None) = (registry_side, &schema_registry) {
            return Err(ConfigError::Missing {
                section: "schema_registry",
                key: "url".into(),
                hint: format!(
                    "[debezium] {side} = {converter:?} writes schema ids: set [schema_registry] url to the registry's Confluent-compatible API"
                ),
            });
        }
        if let (Some(c @ ("protobuf" | "json-schema")), Some(r)) =
            (router.registry_converter(), &schema_registry)
        {
            // Record-named subjects read the value's schema as Avro to name the record.
            if r.subject_name_strategy != SubjectNameStrategy::Topic {
                return Err(invalid(
                    "schema_registry",
                    "subject_name_strategy",
                    r.subject_name_strategy.as_str(),
                    &format!(
                        "is for value.converter = \"avro\" only: with {c:?} the subject is the \
                         topic's (\"topic\", <topic>-value)"
                    ),
                ));
            }
        }
        // Apicurio ships Avro's Connect converter only; its Protobuf serdes frame a message
        // reference of their own, which walrelay does not write.
        let not_avro = [router.registry_converter(), router.registry_key_converter()]
            .into_iter()
            .flatten()
            .find(|c| *c != "avro");
        if let (Some(c), Some(r)) = (not_avro, &schema_registry) {
            if !r.confluent_framing() {
                return Err(invalid(
                    "schema_registry",
                    "id_handler",
                    &format!("{} (use_id = {})", r.id_handler.as_str(), r.use_id.as_str()),
                    &format!(
                        "is Apicurio's AvroConverter's framing, for value.converter = \"avro\" \
                         only: with {c:?} values carry Confluent's (id_handler = \"4-byte\", \
                         use_id = \"contentId\"), which Apicurio's deserializers read with \
                         apicurio.registry.as-confluent or their 4-byte default"
                    ),
                ));
            }
        }
        if outbox.is_message_only() && messages.is_none() {
            return Err(invalid(
                "outbox",
                "tables",
                "[]",
                "lists no table and no logical messages are selected, so nothing would be \
                 relayed: name the outbox table(s), or set [debezium] \
                 \"message.prefix.include.list\" for a table-less outbox",
            ));
        }
        // The two sections that read outbox rows, which a message-only relay has none of.
        for (name, present, does) in [
            ("retention", retention.is_some(), "to purge"),
            ("audit", audit.is_some(), "to compare Kafka with"),
        ] {
            if outbox.is_message_only() && present {
                return Err(invalid(
                    "outbox",
                    "tables",
                    "[]",
                    &format!(
                        "a message-only relay has no outbox rows, so [{name}] has nothing {does} \
                         (logical messages leave nothing behind): remove the [{name}] section"
                    ),
                ));
            }
        }
        if !delivery.sink.is_kafka() {
            let sink = delivery.sink.name();
            if let (Some(why), true) = (delivery.sink.why_no_audit(), audit.is_some()) {
                return Err(invalid(
                    "delivery",
                    "sink",
                    sink,
                    &format!("leaves [audit] nothing to read: {why}; remove [audit]"),
                ));
            }
            if let Some(converter) = router.registry_key_converter() {
                return Err(invalid(
                    "debezium",
                    "key.converter",
                    converter,
                    &format!("frames keys in bytes for Kafka's partitioner; the {sink} sink carries the key as text (a header, or SQS's message group): use the default key converter"),
                ));
            }
        }
        Ok(Config {
            source,
            outbox,
            messages,
            router,
            envelope,
            dead_letter: dead_letter
                .map(|d| retention::parse_dead_letter(&d, &kafka))
                .transpose()?,
            kafka,
            delivery,
            limits: limits::parse_limits(&limits.unwrap_or_default())?,
            http: http.map(|h| http::parse(&h)).transpose()?,
            retention: retention.map(|r| retention::parse_retention(&r)).transpose()?,
            audit: audit.map(|a| audit::parse_audit(&a)).transpose()?,
            debezium_offsets,
            tracing,
            schema_registry,
        })
    }
}

/// walrelay's own sections and the keys each accepts, from their serde derives (any other key
/// is refused); the pass-through sections are open maps and not listed.
pub fn owned_section_keys() -> Vec<(&'static str, &'static [&'static str])> {
    let mut keys = vec![
        ("source", section::keys_of::<source::Raw>()),
        ("outbox", section::keys_of::<outbox::Raw>()),
        ("delivery", section::keys_of::<delivery::Raw>()),
        ("limits", section::keys_of::<limits::RawLimits>()),
        ("http", section::keys_of::<http::Raw>()),
        ("dead_letter", section::keys_of::<retention::RawDeadLetter>()),
        ("retention", section::keys_of::<retention::RawRetention>()),
        ("audit", section::keys_of::<audit::RawAudit>()),
        ("debezium_offsets", section::keys_of::<debezium_offsets::Raw>()),
        ("tracing", section::keys_of::<tracing::Raw>()),
        ("schema_registry", section::keys_of::<schema_registry::Raw>()),
    ];
    keys.extend(crate::sink::sections().into_iter().map(|s| (s.section, s.keys)));
    keys
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
