//! `[kafka]`: librdkafka producer properties, passed through by librdkafka's names (an open
//! map: librdkafka checks them), with the properties walrelay's guarantees depend on enforced.

use std::collections::BTreeMap;
use std::fmt;

use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;

use super::secret::{is_secret_key, scrub, MASK};
use super::{invalid, ConfigError, Options};

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
            .map(|(k, v)| (k.as_str(), if is_secret_key(k) { MASK } else { v.as_str() }))
            .collect();
        f.debug_struct("KafkaConfig").field("properties", &shown).finish()
    }
}

impl KafkaConfig {
    /// No `[kafka]` section, with a sink beyond Kafka: no broker to reach, and no property.
    pub fn absent() -> KafkaConfig {
        KafkaConfig { properties: Options::new() }
    }

    /// Checks every property with librdkafka without connecting, so that a typo is a
    /// configuration error (exit code 2) before any server is reached.
    pub fn check_with_librdkafka(&self) -> Result<(), ConfigError> {
        let mut cfg = ClientConfig::new();
        for (k, v) in &self.properties {
            cfg.set(k, v);
        }
        cfg.create_native_config().map(drop).map_err(|e| match &e {
            KafkaError::ClientConfig(_, _, key, _) => ConfigError::InvalidValue {
                section: "kafka",
                key: key.clone(),
                value: String::new(),
                reason: format!(
                    "librdkafka: {}; names and values are librdkafka's (CONFIGURATION.md)",
                    self.describe_librdkafka_error(&e)
                ),
            },
            _ => ConfigError::InvalidValue {
                section: "kafka",
                key: "*".into(),
                value: String::new(),
                reason: self.describe_librdkafka_error(&e),
            },
        })
    }

    /// How long librdkafka lets a topic missing from the metadata propagate
    /// (`topic.metadata.propagation.max.ms`, walrelay's default when unset or unreadable).
    pub fn topic_propagation(&self) -> std::time::Duration {
        let ms =
            self.properties.get("topic.metadata.propagation.max.ms").and_then(|v| v.parse().ok());
        std::time::Duration::from_millis(
            ms.unwrap_or_else(|| DEFAULT_TOPIC_PROPAGATION_MS.parse().unwrap_or(10_000)),
        )
    }

    /// The connection and security settings of `[kafka]` for a consumer of walrelay's own (the
    /// progress topic, Kafka Connect's offsets): every property but those only a producer takes,
    /// about each of which librdkafka would warn.
    pub fn consumer_config(&self) -> ClientConfig {
        let mut cfg = ClientConfig::new();
        for (k, v) in &self.properties {
            if !PRODUCER_ONLY.contains(&k.as_str()) {
                cfg.set(k, v);
            }
        }
        cfg
    }

    /// librdkafka's error in words that carry no secret: its `Display` of a configuration
    /// error ends with the property's value (`… ssl.key.password <the password>`), so that
    /// error is told by its description alone, and any secret property's value is masked.
    pub fn describe_librdkafka_error(&self, e: &KafkaError) -> String {
        match e {
            KafkaError::ClientConfig(_, description, _, _) => self.scrub_secrets(description),
            other => self.scrub_secrets(&other.to_string()),
        }
    }

    /// librdkafka's refusal of these properties (at validation or when a client is created),
    /// as the problem and its fix: the property it names, the file that property points at,
    /// what OpenSSL found wrong with it, and where the property is set (`[kafka]` or its
    /// `WALRELAY_KAFKA_*` variable). No secret in either.
    pub fn rejection(&self, e: &KafkaError) -> (String, String) {
        let said = self.describe_librdkafka_error(e);
        let problem = format!("librdkafka rejected the [kafka] configuration: {said}");
        // The longest property name librdkafka's text mentions is the one it is about
        // (`ssl.key.location` before `ssl.key`).
        // Else the property whose value it quotes ("Unsupported SASL mechanism: SCRAM-SHA-1024"
        // names no property); never by a secret's value, which the text does not hold.
        let by_value = || {
            self.properties
                .iter()
                .filter(|(k, v)| !is_secret_key(k) && v.len() > 2 && said.contains(v.as_str()))
                .map(|(k, _)| k)
                .max_by_key(|k| k.len())
        };
        let Some(key) = self
            .properties
            .keys()
            .filter(|k| said.contains(k.as_str()))
            .max_by_key(|k| k.len())
            .or_else(by_value)
        else {
            return (problem, "fix the property librdkafka names in [kafka] (names and values are librdkafka's, CONFIGURATION.md)".into());
        };
        let set_in = format!("set in [kafka] or by {}", kafka_variable(key));
        let Some(needs) = file_property(key) else {
            return (problem, format!("fix [kafka] {key:?} ({set_in}); names and values are librdkafka's (CONFIGURATION.md)"));
        };
        let value = &self.properties[key];
        let found = match openssl_reason(&said) {
            Some(r) if r.contains("no certificate") || r.contains("no start line") => {
                format!(
                    "{value} holds no PEM {}",
                    if key.starts_with("ssl.key") { "key" } else { "certificate" }
                )
            }
            Some(r) if r.contains("system lib") || r.contains("No such file") => {
                format!("{value} cannot be read (no such file, or not readable by walrelay's user)")
            }
            Some(r) => format!("OpenSSL cannot use {value}: {r}"),
            None => format!("librdkafka cannot use {value}"),
        };
        (
            format!("[kafka] {key}: {found} ({problem})"),
            format!("point {key} at {needs} ({set_in})"),
        )
    }

    /// `text` with the value of every secret property masked.
    pub fn scrub_secrets(&self, text: &str) -> String {
        let secrets: Vec<String> = self
            .properties
            .iter()
            .filter(|(k, _)| is_secret_key(k))
            .map(|(_, v)| v.clone())
            .collect();
        scrub(text, &secrets)
    }
}

/// The variable that sets `[kafka] key`: `WALRELAY_KAFKA_SSL__CA__LOCATION` for
/// `ssl.ca.location`.
pub fn kafka_variable(key: &str) -> String {
    format!("{}KAFKA_{}", super::ENV_PREFIX, key.to_ascii_uppercase().replace('.', "__"))
}

/// What a property that names a file must point at, for the TLS files librdkafka reads.
fn file_property(key: &str) -> Option<&'static str> {
    Some(match key {
        "ssl.ca.location" => "the PEM file of the CA that signed the brokers' certificates",
        "ssl.certificate.location" => "the PEM file of walrelay's client certificate",
        "ssl.key.location" => "the PEM file of the client certificate's private key (encrypted only with ssl.key.password)",
        "ssl.keystore.location" => "a PKCS#12 file holding walrelay's client certificate and key",
        "ssl.crl.location" => "a PEM file of certificate revocation lists",
        _ => return None,
    })
}

/// OpenSSL's reason at the end of librdkafka's text: `… error:05800088:x509 certificate
/// routines::no certificate or crl found` gives `no certificate or crl found`.
fn openssl_reason(text: &str) -> Option<&str> {
    let after = &text[text.rfind("error:")?..];
    after.rsplit("::").next().or_else(|| after.rsplit(':').next()).map(str::trim)
}

/// `[kafka]` keys that only a producer takes.
const PRODUCER_ONLY: &[&str] = &[
    "acks",
    "request.required.acks",
    "enable.idempotence",
    "linger.ms",
    "queue.buffering.max.ms",
    "partitioner",
    "compression.type",
    "compression.codec",
    "batch.num.messages",
    "batch.size",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "max.in.flight.requests.per.connection",
    "max.in.flight",
    "queue.buffering.max.messages",
    "queue.buffering.max.kbytes",
    "retries",
    "message.send.max.retries",
    "retry.backoff.ms",
    "transactional.id",
    "transaction.timeout.ms",
    "request.timeout.ms",
    "sticky.partitioning.linger.ms",
];

/// Producer properties walrelay sets itself, because I2 and I5 depend on them.
pub const RELAY_OWNED_KAFKA: &[(&str, &[&str], &str)] = &[
    ("enable.idempotence", &["true"], "true"),
    ("acks", &["all", "-1"], "all"),
    ("partitioner", &["murmur2_random"], "murmur2_random"),
];

/// The start of a `[kafka]` value `walrelay import-debezium` could not fill in (a Java
/// truststore's CA certificates as a PEM file, a JKS keystore's PKCS#12 copy); the rest of the
/// value names what belongs there. Refused rather than left out: without the file librdkafka
/// would trust the system's CAs instead of the connector's, or connect without the client
/// certificate.
pub const FILL_IN: &str = "FILL-IN:";

const DEFAULT_MESSAGE_TIMEOUT_MS: &str = "30000";

/// How long librdkafka lets a topic missing from the cluster's metadata "propagate" before it
/// fails the topic's records as unknown (its default: 30 s). It must end before
/// `message.timeout.ms`: a record that times out first is retried by a new session, which waits
/// as long again, so a routed topic that does not exist (brokers with
/// auto.create.topics.enable=false) would stall the relay for ever instead of stopping it with
/// a hint naming the topic. 10 s still covers a topic created a moment before its first record.
const DEFAULT_TOPIC_PROPAGATION_MS: &str = "10000";

/// librdkafka waits `linger.ms` (its default: 5) before sending a batch. A relay's records arrive
/// a transaction at a time, so at low rates that wait is most of commit→ack; under load it sets
/// how many produce requests the broker has to handle. Measured (benchmark, 1M-event drain and
/// single-row transactions; docs/benchmarks-history.md): 2 ms gave p99 6 ms at 2,000/s against 8–10 ms
/// at 3 ms, with the same drain (1.3× the decoding ceiling). Below 2 ms the broker's per-request
/// cost grows (1 ms once halved a drain on the 2-core test machine).
const DEFAULT_LINGER_MS: &str = "2";

/// How walrelay's Kafka clients find a broker again after an outage, unless `[kafka]` says
/// otherwise (docs/operations.md, "Broker reachability"):
/// - `reconnect.backoff.max.ms`: librdkafka's backoff grows to 10 s, and a broker back from an
///   outage would wait that long to be used and to read as reachable; 2 s keeps the retries
///   cheap and the return quick.
/// - `socket.connection.setup.timeout.ms`: a connection whose set-up (TCP, TLS, ApiVersions,
///   SASL) gets no answer is given up after 30 s by default, and until then the broker is not
///   tried again; 10 s is the Java client's default.
/// - `metadata.recovery.rebootstrap.trigger.ms`: librdkafka drops the brokers a metadata answer
///   leaves out, and a KRaft broker rejoining its cluster (just restarted, or fenced after a
///   pause) can be left out for a while; the client then has no broker until it re-bootstraps,
///   after 5 min by default.
const RECONNECT_DEFAULTS: &[(&str, &str)] = &[
    ("reconnect.backoff.max.ms", "2000"),
    ("socket.connection.setup.timeout.ms", "10000"),
    ("metadata.recovery.rebootstrap.trigger.ms", "10000"),
];

pub(super) fn parse(mut properties: Options) -> Result<KafkaConfig, ConfigError> {
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
    if let Some((key, value)) = properties.iter().find(|(_, v)| v.starts_with(FILL_IN)) {
        return Err(invalid(
            S,
            key,
            value,
            "a placeholder to fill in: replace it with the path of the file it names (`walrelay import-debezium` printed the command that makes the file)",
        ));
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
                hint: match unsafe_key {
                    "transactional.id" => "walrelay owns it: set [delivery] guarantee = \"exactly-once\" and, to choose the id, [delivery] transactional_id".into(),
                    _ => "walrelay manages delivery itself; remove the key".into(),
                },
            });
        }
    }
    properties
        .entry("message.timeout.ms".into())
        .or_insert_with(|| DEFAULT_MESSAGE_TIMEOUT_MS.into());
    properties
        .entry("topic.metadata.propagation.max.ms".into())
        .or_insert_with(|| DEFAULT_TOPIC_PROPAGATION_MS.into());
    if !properties.contains_key("queue.buffering.max.ms") {
        properties.entry("linger.ms".into()).or_insert_with(|| DEFAULT_LINGER_MS.into());
    }
    for (key, default) in RECONNECT_DEFAULTS {
        properties.entry(key.to_string()).or_insert_with(|| default.to_string());
    }
    Ok(KafkaConfig { properties })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> KafkaConfig {
        let properties = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        KafkaConfig { properties }
    }

    #[test]
    fn a_tls_file_librdkafka_refuses_is_named_with_what_is_wrong_and_where_it_is_set() {
        let kafka = config(&[("ssl.ca.location", "/etc/hostname"), ("sasl.password", "pw-42")]);
        let e = KafkaError::ClientCreation("ssl.ca.location failed: ../crypto/x509/by_file.c:252:X509_load_cert_crl_file_ex error:05800088:x509 certificate routines::no certificate or crl found".into());
        let (problem, fix) = kafka.rejection(&e);
        assert!(
            problem.starts_with("[kafka] ssl.ca.location: /etc/hostname holds no PEM certificate"),
            "{problem}"
        );
        assert!(
            fix.contains("the PEM file of the CA")
                && fix.contains("WALRELAY_KAFKA_SSL__CA__LOCATION"),
            "{fix}"
        );
        let e = KafkaError::ClientCreation(
            "ssl.key.location failed: error:8000000D:system library::Permission denied".into(),
        );
        let kafka = config(&[("ssl.key.location", "/k.pem"), ("ssl.key.password", "pw-42")]);
        let (problem, fix) = kafka.rejection(&e);
        assert!(
            problem
                .contains("[kafka] ssl.key.location: OpenSSL cannot use /k.pem: Permission denied"),
            "{problem}"
        );
        assert!(fix.contains("WALRELAY_KAFKA_SSL__KEY__LOCATION"), "{fix}");
        assert!(!problem.contains("pw-42") && !fix.contains("pw-42"));
    }

    #[test]
    fn another_refused_property_is_named_with_its_variable() {
        let kafka = config(&[("acks", "all"), ("linger.ms", "soon")]);
        let e = KafkaError::ClientConfig(
            rdkafka::types::RDKafkaConfRes::RD_KAFKA_CONF_INVALID,
            "Invalid value \"soon\" for configuration property \"linger.ms\"".into(),
            "linger.ms".into(),
            "soon".into(),
        );
        let (_, fix) = kafka.rejection(&e);
        assert!(
            fix.starts_with(
                "fix [kafka] \"linger.ms\" (set in [kafka] or by WALRELAY_KAFKA_LINGER__MS)"
            ),
            "{fix}"
        );
    }
}
