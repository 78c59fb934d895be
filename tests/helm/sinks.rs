//! The chart with a sink beyond Kafka: each renders a walrelay.toml that walrelay loads for
//! that sink, with the sink's secret from a Secret; and the chart refuses, naming the fix, an
//! audit CronJob for a sink the audit cannot read back, and a sink's password in the ConfigMap.

use walrelay::config::secret::redact_url;
use walrelay::config::Config;

use super::{template, Rendering};

/// Per sink: the `--set`s that configure it, and the variable its secret becomes.
const SINKS: [(&str, &[&str], &str); 4] = [
    (
        "nats",
        &[
            "config.nats.url=nats://nats.messaging.svc:4222",
            "config.nats.user=walrelay",
            "secrets.natsPassword.secretName=orders-nats",
        ],
        "WALRELAY_NATS_PASSWORD",
    ),
    (
        "rabbitmq",
        &[
            "config.rabbitmq.exchange=outbox",
            "secrets.rabbitmqUrl.secretName=orders-rabbitmq",
            "audit.enabled=false",
        ],
        "WALRELAY_RABBITMQ_URL",
    ),
    (
        "sqs",
        &[
            "config.sqs.region=eu-west-1",
            "config.sqs.queue_url=https://sqs.eu-west-1.amazonaws.com/123456789012/${topic}",
            "secrets.sqsAccessKeyId.secretName=orders-sqs",
            "secrets.sqsSecretAccessKey.secretName=orders-sqs",
            "audit.enabled=false",
        ],
        "WALRELAY_SQS_SECRET_ACCESS_KEY",
    ),
    (
        "http",
        &[
            "config.webhook.url=https://hooks.example.com/outbox/${topic}",
            "secrets.webhookSecret.secretName=orders-webhook",
            "audit.enabled=false",
        ],
        "WALRELAY_WEBHOOK_SECRET",
    ),
];

fn sets_of<'a>(sink: &'a str, sets: &[&'a str]) -> Vec<String> {
    let mut all = vec![format!("config.delivery.sink={sink}")];
    all.extend(sets.iter().map(|s| s.to_string()));
    all
}

#[test]
fn each_sink_renders_a_config_walrelay_loads_for_it_with_its_secret_from_a_secret() {
    for (sink, sets, variable) in SINKS {
        let sets = sets_of(sink, sets);
        let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        let r = Rendering::new(&format!("sink-{sink}"), &sets);
        let env = r.env();
        // A Secret of a URL holds a URL, a webhook's a whsec_ key: the stand-ins must be those.
        let loaded = env.iter().cloned().map(|(name, value)| match name.as_str() {
            "WALRELAY_RABBITMQ_URL" => (name, "amqp://relay:stand-in@rabbit:5672/%2f".into()),
            "WALRELAY_WEBHOOK_SECRET" => (name, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()),
            _ => (name, value),
        });
        let config = Config::parse_with_env(r.toml(), loaded.collect::<Vec<_>>())
            .unwrap_or_else(|e| panic!("{sink}: {e}\n{}", r.toml()));
        assert_eq!(config.delivery.sink.name(), sink, "{}", r.toml());
        let (_, value) = env
            .iter()
            .find(|(name, _)| name == variable)
            .unwrap_or_else(|| panic!("{sink}: {variable} is not in the pod's environment"));
        assert!(value.starts_with("from-secret-orders-"), "{sink}: {variable} = {value}");
        // The audit CronJob only where the audit reads the sink back.
        assert_eq!(r.audit_pod().is_some(), sink == "nats", "{sink}: the audit CronJob");
        println!("{sink}: [delivery] sink = \"{sink}\", {variable} from a secretKeyRef");
    }
}

#[test]
fn the_chart_refuses_an_audit_it_cannot_run_and_a_sinks_password_in_the_configmap() {
    for sink in ["rabbitmq", "sqs", "http"] {
        let (_, sets, _) = SINKS.iter().find(|(s, _, _)| *s == sink).unwrap();
        let mut sets = sets_of(sink, sets);
        sets.retain(|s| s != "audit.enabled=false");
        let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        let refused = template(&sets).expect_err("an audit CronJob for a sink it cannot read");
        assert!(
            refused.contains(&format!("the {sink} sink's messages cannot be read back"))
                && refused.contains("set audit.enabled=false"),
            "{sink}: {refused}"
        );
        println!("{sink} with audit.enabled: {}", refused.trim());
    }
    let url = "amqp://relay:hunter2@rabbit.messaging.svc:5672/%2f";
    let refused = template(&[
        "config.delivery.sink=rabbitmq",
        &format!("config.rabbitmq.url={url}"),
        "config.rabbitmq.exchange=outbox",
        "audit.enabled=false",
    ])
    .expect_err("a password in [rabbitmq] url");
    assert!(
        refused.contains("config.rabbitmq.url holds a password")
            && refused.contains("secrets.rabbitmqUrl"),
        "{refused}"
    );
    assert!(!refused.contains("hunter2"), "the refusal prints the password: {refused}");
    assert_ne!(redact_url(url), url, "walrelay's own rule calls it a password too");
    let refused = template(&[
        "config.delivery.sink=http",
        "config.webhook.url=https://hooks.example.com/${topic}",
        "config.webhook.secret=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "audit.enabled=false",
    ])
    .expect_err("[webhook] secret in the ConfigMap");
    assert!(refused.contains("config.webhook.secret is a secret"), "{refused}");
    println!("refused: a password in [rabbitmq] url, and [webhook] secret in the ConfigMap");
}
