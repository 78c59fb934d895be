//! What `[delivery] guarantee = "exactly-once"` needs of Kafka, for `walrelay check`: the
//! progress topic (one partition, compacted, its replication factor, or what walrelay will
//! create), who else writes to it, and the transactional id's ACLs, proved by initialising its
//! transactions — only while no relay streams from the slot, since that fences the relay that
//! does. (`transaction.timeout.ms` against `message.timeout.ms` is a configuration rule:
//! `config::delivery` refuses it, for `check` as for `run`.)

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::{BaseProducer, Producer};

use super::authorized::{self, Operation};
use super::{Report, BROKER_TIMEOUT};
use crate::admin::connect;
use crate::config::Config;
use crate::delivery::exactly_once::progress_topic::{replication_factor, writers, Quiet};
use crate::delivery::producer::{principal, refusal_fix};
use crate::source::slot;

/// How many of the progress topic's last records are read for who writes to it.
const WRITERS_WINDOW: i64 = 1_000;

pub(super) async fn run(config: &Config, r: &mut Report) {
    if !config.delivery.exactly_once() {
        return;
    }
    progress_topic(config, r).await;
    transactional_id(config, r).await;
}

async fn progress_topic(config: &Config, r: &mut Report) {
    let d = &config.delivery;
    let topic = d.progress_topic.as_str();
    let what = format!("progress topic {topic}");
    let acl_fix = || {
        let denied = rdkafka::error::KafkaError::MessageConsumption(
            RDKafkaErrorCode::TopicAuthorizationFailed,
        );
        let fix = refusal_fix(&denied, topic, &principal(&config.kafka)).unwrap_or_default();
        format!("{fix}, and Read (--operation Read)")
    };
    let mut cfg = config.kafka.consumer_config();
    cfg.set_log_level(rdkafka::config::RDKafkaLogLevel::Debug);
    let admin: AdminClient<Quiet> = match cfg.create_with_context(Quiet) {
        Ok(a) => a,
        Err(e) => {
            return r.fail(&what, format!("cannot create a Kafka client: {e}"), "fix [kafka]")
        }
    };
    let metadata = match admin.inner().fetch_metadata(Some(topic), BROKER_TIMEOUT) {
        Ok(m) => m,
        Err(e) => {
            return r.fail(
                &what,
                format!("no metadata within {BROKER_TIMEOUT:?}: {e}"),
                "see the broker line above",
            )
        }
    };
    let meta = metadata.topics().iter().find(|t| t.name() == topic);
    let error = meta.and_then(|t| t.error()).map(RDKafkaErrorCode::from);
    if error == Some(RDKafkaErrorCode::TopicAuthorizationFailed) {
        return r.fail(&what, "this principal may not Describe it", acl_fix());
    }
    let Some(meta) = meta.filter(|m| error.is_none() && !m.partitions().is_empty()) else {
        let client = client_config(config);
        let cluster =
            tokio::task::spawn_blocking(move || authorized::on_cluster(&client, BROKER_TIMEOUT))
                .await;
        if let Ok(Ok(ops)) = cluster {
            if !authorized::missing(&ops, &[Operation::RD_KAFKA_ACL_OPERATION_CREATE]).is_empty() {
                r.warn(
                    &what,
                    format!("does not exist, and {} may not Create topics on the cluster (a Create ACL on the topic itself would do too)", principal(&config.kafka)),
                    format!("create it: kafka-topics.sh --bootstrap-server … --create --topic {topic} --partitions 1 --config cleanup.policy=compact, or kafka-acls.sh --bootstrap-server … --add --allow-principal {} --operation Create --topic {topic}", principal(&config.kafka)),
                );
            }
        }
        return match replication_factor(&config.kafka, &admin, topic, BROKER_TIMEOUT).await {
            Ok((replicas, brokers)) => r.ok(
                &what,
                format!("does not exist yet: walrelay creates it on its first start (1 partition, cleanup.policy=compact, replication factor {replicas} of {brokers} broker{}), which needs Create on it or on the cluster", super::plural(brokers as usize)),
            ),
            Err(e) => r.fail(&what, format!("does not exist, and {}", e.chain()), "create it: kafka-topics.sh --create --topic … --partitions 1 --config cleanup.policy=compact"),
        };
    };
    if meta.partitions().len() != 1 {
        return r.fail(
            &what,
            format!("has {} partitions; walrelay keeps its position in one", meta.partitions().len()),
            "name a topic of one partition in [delivery] progress_topic, or remove the key (each relay then has its own, walrelay.progress.<slot>)",
        );
    }
    let replicas = meta.partitions()[0].replicas().len();
    let options = AdminOptions::new().request_timeout(Some(BROKER_TIMEOUT));
    let described = admin.describe_configs([&ResourceSpecifier::Topic(topic)], &options).await;
    let policy = described
        .ok()
        .and_then(|mut v| v.pop())
        .and_then(|r| r.ok())
        .and_then(|c| c.get("cleanup.policy").and_then(|e| e.value.clone()));
    match policy.as_deref() {
        Some(p) if !p.split(',').any(|x| x.trim() == "compact") => {
            return r.fail(&what, format!("cleanup.policy={p}: the position would be deleted with the topic's retention"), format!("kafka-configs.sh --bootstrap-server … --alter --entity-type topics --entity-name {topic} --add-config cleanup.policy=compact"));
        }
        _ => {}
    }
    let policy = policy.map_or("cleanup.policy unknown (DescribeConfigs refused)".into(), |p| {
        format!("cleanup.policy={p}")
    });
    // Read, Write and Describe, as the broker says this principal may (KIP-430).
    let client = client_config(config);
    let name = topic.to_string();
    let asked = tokio::task::spawn_blocking(move || {
        authorized::on_topics(&client, &[name.as_str()], BROKER_TIMEOUT)
    })
    .await;
    let needed = [
        Operation::RD_KAFKA_ACL_OPERATION_READ,
        Operation::RD_KAFKA_ACL_OPERATION_WRITE,
        Operation::RD_KAFKA_ACL_OPERATION_DESCRIBE,
    ];
    match asked {
        Ok(Ok(answers)) => match answers.into_iter().next().map(|(_, ops)| ops) {
            Some(Ok(granted)) => {
                let missing = authorized::missing(&granted, &needed);
                if !missing.is_empty() {
                    let ops: Vec<String> =
                        missing.iter().map(|op| format!("--operation {op}")).collect();
                    return r.fail(
                        &what,
                        format!("{} may not {} it (exactly-once reads its position there and writes one in every Kafka transaction)", principal(&config.kafka), missing.join(", ")),
                        format!("kafka-acls.sh --bootstrap-server … --add --allow-principal {} {} --topic {topic}", principal(&config.kafka), ops.join(" ")),
                    );
                }
            }
            Some(Err(why)) => r.warn(
                &what,
                format!("the broker did not say what this principal may do on it: {why}"),
                "see the broker line above",
            ),
            None => {}
        },
        Ok(Err(why)) => r.warn(
            &what,
            format!("the broker did not say what this principal may do on it: {why}"),
            "see the broker line above",
        ),
        Err(e) => r.warn(&what, format!("the authorization probe panicked: {e}"), "report it"),
    }
    r.ok(&what, format!("1 partition, {policy}, replication factor {replicas}; Read, Write and Describe granted"));
    match writers(&config.kafka, topic, WRITERS_WINDOW, BROKER_TIMEOUT).await {
        Ok(keys) => {
            let others: Vec<&String> = keys.iter().filter(|k| **k != d.transactional_id).collect();
            if !others.is_empty() {
                r.warn(
                    &what,
                    format!("other relays write to it too ({}): a restart reads past their records and waits for their open Kafka transactions", others.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")),
                    "give each relay its own: remove [delivery] progress_topic (the default is walrelay.progress.<slot>)",
                );
            }
        }
        Err(e) if e.hint().is_some() => r.fail(&what, e.to_string(), e.hint().unwrap_or_default()),
        Err(e) => r.warn(
            &what,
            format!("could not read who writes to it: {}", e.chain()),
            "see the broker line above",
        ),
    }
}

/// The transactional id's ACLs (Write and Describe on it), proved the only way Kafka tells: by
/// initialising its transactions. That fences whoever holds the id, so only while the slot is
/// not streamed from; a relay streaming exactly-once proves them itself.
async fn transactional_id(config: &Config, r: &mut Report) {
    let id = config.delivery.transactional_id.clone();
    let what = format!("transactional id {id}");
    let streaming = match connect(&config.source).await {
        Ok(control) => slot::slot(&control, &config.source.slot)
            .await
            .ok()
            .flatten()
            .and_then(|s| s.active.then_some(s.active_pid).flatten()),
        Err(_) => None,
    };
    if let Some(pid) = streaming {
        return r.ok(
            &what,
            format!("not probed: a relay streams from slot {} (pid {pid}), and initialising its transactions here would fence it; that relay's transactions prove the ACLs", config.source.slot),
        );
    }
    let mut cfg = client_config(config);
    cfg.set("transactional.id", &id);
    let kafka = config.kafka.clone();
    let probe = tokio::task::spawn_blocking(move || {
        let producer: BaseProducer<Quiet> = cfg.create_with_context(Quiet)?;
        producer.init_transactions(Duration::from_secs(10))
    });
    match probe.await {
        Ok(Ok(())) => r.ok(&what, "Kafka initialised its transactions (Write and Describe on it are granted); no relay was streaming, so none was fenced"),
        Ok(Err(e)) => {
            let denied = matches!(
                crate::delivery::fault::classify(&e),
                crate::delivery::fault::Fault::Authorization
            );
            match refusal_fix(&e, &id, &principal(&kafka)).filter(|_| denied) {
                Some(fix) => r.fail(&what, format!("Kafka refused to initialise its transactions: {e}"), fix),
                None => r.fail(&what, format!("could not initialise its transactions: {}", kafka.describe_librdkafka_error(&e)), "see the broker line above; exactly-once needs the broker's transaction coordinator (transaction.state.log.* settings)"),
            }
        }
        Err(e) => r.fail(&what, format!("the probe panicked: {e}"), "report it"),
    }
}

/// A client configured as `[kafka]` says, logging nothing.
fn client_config(config: &Config) -> rdkafka::config::ClientConfig {
    let mut cfg = rdkafka::config::ClientConfig::new();
    for (k, v) in &config.kafka.properties {
        cfg.set(k, v);
    }
    cfg.set_log_level(rdkafka::config::RDKafkaLogLevel::Emerg);
    cfg
}
