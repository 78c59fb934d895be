//! The Kafka side of `walrelay check`: the broker answers a client built from `[kafka]` exactly
//! as `run` builds its producer (so `security.protocol`, `sasl.*` and `ssl.*` are exercised and
//! a refused login is named), its cluster id and API levels, and the topics walrelay writes by a
//! fixed name (the dead-letter topic, a route whose replacement has no group) exist.
//!
//! The Kafka protocol does not tell a client which release a broker runs: ApiVersions lists,
//! per request type, the versions the broker speaks. Those levels are what the check reports,
//! read from librdkafka's own ApiVersions exchange (its `feature` debug lines).

use std::sync::Mutex;

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;

use super::{plural, Report, BROKER_TIMEOUT};
use crate::config::Config;

/// What the broker said, gathered on a blocking thread.
struct Answer {
    brokers: usize,
    topics: Vec<String>,
    cluster_id: Option<String>,
    /// `(name, max version)` per API, from the ApiVersions response.
    apis: Vec<(String, i16)>,
    /// `auto.create.topics.enable` of the first broker, when this principal may read it.
    auto_create: Option<bool>,
}

/// Collects the ApiVersions lines and the client errors librdkafka reports; prints nothing (the
/// check line says what matters).
#[derive(Default)]
struct Observer {
    apis: Mutex<Vec<(String, i16)>>,
    errors: Mutex<Vec<(Option<RDKafkaErrorCode>, String)>>,
}

impl ClientContext for Observer {
    fn log(&self, _level: RDKafkaLogLevel, fac: &str, message: &str) {
        if fac == "APIVERSION" {
            if let Some(api) = parse_api_version(message) {
                let mut apis = self.apis.lock().unwrap_or_else(|e| e.into_inner());
                if !apis.iter().any(|(name, _)| *name == api.0) {
                    apis.push(api);
                }
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let mut errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        errors.push((error.rdkafka_error_code(), reason.to_string()));
    }
}

impl Observer {
    /// Why librdkafka got no metadata, from what it reported meanwhile: a refused login or TLS
    /// handshake says more than the metadata request's own error.
    fn failure(&self, metadata_error: KafkaError) -> Failure {
        let errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        let first = |code| errors.iter().find(|(c, _)| *c == Some(code)).map(|(_, r)| r.clone());
        if let Some(reason) = first(RDKafkaErrorCode::Authentication) {
            return Failure::Refused {
                problem: format!("the broker refused the login: {reason}"),
                fix: "check sasl.mechanism, sasl.username and the password (WALRELAY_KAFKA_SASL__PASSWORD)",
            };
        }
        if let Some(reason) = first(RDKafkaErrorCode::SSL) {
            return Failure::Refused {
                problem: format!("the TLS handshake failed: {reason}"),
                fix: "check ssl.ca.location (the CA that signed the brokers' certificates) and that the certificates name the hosts of bootstrap.servers",
            };
        }
        Failure::NoAnswer(match errors.first() {
            Some((_, reason)) => format!("{metadata_error}: {reason}"),
            None => metadata_error.to_string(),
        })
    }
}

/// A producer that sends nothing: the check only asks for metadata.
impl ProducerContext for Observer {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &DeliveryResult<'_>, _: ()) {}
}

/// `[thrd:…]: sasl_ssl://…/bootstrap:   ApiKey Produce (0) Versions 0..13` → `("Produce", 13)`.
fn parse_api_version(line: &str) -> Option<(String, i16)> {
    let (_, rest) = line.split_once("ApiKey ")?;
    let (name, rest) = rest.split_once(" (")?;
    let (_, versions) = rest.split_once("Versions ")?;
    let max = versions.split("..").nth(1)?.trim().parse().ok()?;
    Some((name.to_string(), max))
}

pub(super) async fn run(config: &Config, r: &mut Report) {
    let props = &config.kafka.properties;
    let servers = props
        .get("bootstrap.servers")
        .or_else(|| props.get("metadata.broker.list"))
        .cloned()
        .unwrap_or_default();
    let what = format!("broker {}", crate::config::redact_url(&servers));
    let kafka = config.kafka.clone();
    let mut cfg = ClientConfig::new();
    for (k, v) in props {
        cfg.set(k, v);
    }
    // Debug level for the `feature` lines only; the Observer keeps nothing else.
    cfg.set("debug", "feature").set_log_level(RDKafkaLogLevel::Debug);
    let fixed = fixed_topics(config).into_iter().map(|(topic, _)| topic).collect();
    let result = tokio::task::spawn_blocking(move || ask(cfg, fixed))
        .await
        .unwrap_or_else(|e| Err(Failure::Crashed(e.to_string())));
    let answer = match result {
        Ok(answer) => answer,
        Err(Failure::Config(e)) => {
            let (problem, fix) = kafka.rejection(&e);
            return r.fail(&what, problem, fix);
        }
        Err(Failure::Refused { problem, fix }) => {
            return r.fail(&what, kafka.scrub_secrets(&problem), fix)
        }
        Err(Failure::NoAnswer(e)) => {
            return r.fail(
                &what,
                format!("no answer within {} s: {}", BROKER_TIMEOUT.as_secs(), kafka.scrub_secrets(&e)),
                "check [kafka] bootstrap.servers, the network path, and security.protocol / sasl.* / ssl.* settings",
            )
        }
        Err(Failure::Crashed(e)) => {
            return r.fail(&what, format!("the metadata request crashed: {e}"), "report this as a bug")
        }
    };
    r.ok(&what, answers(&answer));
    topics(config, &answer, r);
}

/// `answers: 1 broker, 7 topics, cluster id …, API levels Produce v13, …`
fn answers(a: &Answer) -> String {
    let mut text = format!(
        "answers: {} broker{}, {} topic{}, cluster id {}",
        a.brokers,
        plural(a.brokers),
        a.topics.len(),
        plural(a.topics.len()),
        a.cluster_id.as_deref().unwrap_or("unknown")
    );
    let level = |name: &str| a.apis.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
    if a.apis.is_empty() {
        text += ", API levels unknown (no ApiVersions exchange)";
    } else {
        let named: Vec<String> = ["Produce", "Fetch", "Metadata", "InitProducerId"]
            .iter()
            .filter_map(|n| level(n).map(|v| format!("{n} v{v}")))
            .collect();
        text += &format!(
            ", API levels {} ({} APIs; Kafka does not report its release)",
            named.join(", "),
            a.apis.len()
        );
    }
    text
}

/// The fixed topics: each exists, or the broker will create it, or the check fails.
fn topics(config: &Config, a: &Answer, r: &mut Report) {
    for (topic, option) in fixed_topics(config) {
        let what = format!("topic {topic}");
        if a.topics.contains(&topic) {
            r.ok(&what, format!("exists ({option})"));
        } else if a.auto_create == Some(true) {
            r.warn(
                &what,
                format!("does not exist yet ({option}); the broker creates it on the first record (auto.create.topics.enable), with its default partitions and replicas"),
                "create it with the partitions and replication you want",
            );
        } else {
            let why = match a.auto_create {
                Some(_) => "the broker does not create topics (auto.create.topics.enable=false)",
                None => "the broker's auto.create.topics.enable could not be read, and a principal without CREATE could not create it anyway",
            };
            r.fail(
                &what,
                format!("does not exist, or this principal may not DESCRIBE it ({option}); {why}"),
                format!("create it (kafka-topics.sh --create --topic {topic}), and grant walrelay's principal WRITE and DESCRIBE on it"),
            );
        }
    }
}

/// The topics walrelay writes by a fixed name, each with the option that names it.
fn fixed_topics(config: &Config) -> Vec<(String, &'static str)> {
    let mut fixed = Vec::new();
    if let Some(dl) = &config.dead_letter {
        fixed.push((dl.topic.clone(), "[dead_letter] topic"));
    }
    if let Some(topic) = config.router.topic_router.fixed_topic() {
        fixed.push((topic, "route.topic.replacement"));
    }
    fixed
}

enum Failure {
    Config(KafkaError),
    /// The broker answered, and refused the login or the TLS handshake.
    Refused {
        problem: String,
        fix: &'static str,
    },
    NoAnswer(String),
    Crashed(String),
}

/// Metadata, the cluster id, the API levels and, when one of `fixed` topics is missing, the
/// broker's `auto.create.topics.enable`. Blocking.
fn ask(cfg: ClientConfig, fixed: Vec<String>) -> Result<Answer, Failure> {
    let client: BaseProducer<Observer> =
        cfg.create_with_context(Observer::default()).map_err(Failure::Config)?;
    let metadata = client.client().fetch_metadata(None, BROKER_TIMEOUT);
    // Logs and client errors wait on librdkafka's main queue until served (one event per turn
    // of a poll that keeps polling until its deadline).
    client.poll(Duration::from_millis(50));
    let metadata = metadata.map_err(|e| client.context().failure(e))?;
    let cluster_id = client.client().fetch_cluster_id(BROKER_TIMEOUT);
    client.poll(Duration::from_millis(50));
    let topics: Vec<String> = metadata.topics().iter().map(|t| t.name().to_string()).collect();
    let auto_create = match metadata.brokers().first() {
        Some(broker) if fixed.iter().any(|t| !topics.contains(t)) => auto_create(&cfg, broker.id()),
        _ => None,
    };
    let apis = client.context().apis.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok(Answer { brokers: metadata.brokers().len(), topics, cluster_id, apis, auto_create })
}

/// The broker's `auto.create.topics.enable`, when this principal may DESCRIBE_CONFIGS.
fn auto_create(cfg: &ClientConfig, broker: i32) -> Option<bool> {
    // Quiet: a refusal only means the check can't tell.
    let mut cfg = cfg.clone();
    cfg.remove("debug").set_log_level(RDKafkaLogLevel::Emerg);
    let admin: AdminClient<DefaultClientContext> = cfg.create().ok()?;
    let options = AdminOptions::new().request_timeout(Some(BROKER_TIMEOUT));
    let resource = ResourceSpecifier::Broker(broker);
    // Called on a blocking thread of the check's runtime; the future is completed by rdkafka's
    // admin thread.
    let request = admin.describe_configs([&resource], &options);
    let results = tokio::runtime::Handle::current().block_on(request).ok()?;
    let resource = results.into_iter().next()?.ok()?;
    let value = resource.get("auto.create.topics.enable")?.value.clone()?;
    Some(value == "true")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_version_lines_parse_to_name_and_max() {
        assert_eq!(
            parse_api_version("[thrd:sasl_ssl://b:9093/bootstrap]: sasl_ssl://b:9093/bootstrap:   ApiKey Produce (0) Versions 0..13"),
            Some(("Produce".into(), 13))
        );
        assert_eq!(
            parse_api_version("ApiKey InitProducerId (22) Versions 0..6"),
            Some(("InitProducerId".into(), 6))
        );
        assert_eq!(parse_api_version("Broker API support:"), None);
    }
}
