//! `walrelay check`: one line per check, `ok` / `warn` / `FAIL … — fix: …`; exit code 1 when any
//! check failed.
//!
//! A missing publication or slot is not a failure — `walrelay run` creates them — but the role
//! must then be allowed to create them, which is checked instead.
//!
//! `postgres.rs` checks the server, the role and the slot (failover included), `tables.rs` the
//! outbox tables and the publication, `retention.rs` the `[retention]` settings against each
//! table; all read through [`crate::source`], as `run` does.

mod postgres;
mod retention;
mod tables;

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::producer::{BaseProducer, Producer};

use crate::config::Config;

/// How long the broker has to answer a metadata request.
pub(crate) const BROKER_TIMEOUT: Duration = Duration::from_secs(5);

/// Prints check lines as they are decided and counts them.
#[derive(Default)]
pub(super) struct Report {
    ok: usize,
    warnings: usize,
    problems: usize,
}

impl Report {
    fn ok(&mut self, what: &str, detail: impl AsRef<str>) {
        self.ok += 1;
        line(format!("ok   {what}: {}", detail.as_ref()));
    }

    fn warn(&mut self, what: &str, problem: impl AsRef<str>, fix: impl AsRef<str>) {
        self.warnings += 1;
        line(format!("warn {what}: {} — fix: {}", problem.as_ref(), fix.as_ref()));
    }

    fn fail(&mut self, what: &str, problem: impl AsRef<str>, fix: impl AsRef<str>) {
        self.problems += 1;
        line(format!("FAIL {what}: {} — fix: {}", problem.as_ref(), fix.as_ref()));
    }
}

fn line(text: String) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

pub(super) async fn run(config: &Config) -> ExitCode {
    let mut r = Report::default();
    r.ok("config", "parsed and valid");
    postgres::run(config, &mut r).await;
    broker(config, &mut r).await;
    line(format!(
        "check: {} ok, {} warning{}, {} problem{}",
        r.ok,
        r.warnings,
        if r.warnings == 1 { "" } else { "s" },
        r.problems,
        if r.problems == 1 { "" } else { "s" },
    ));
    if r.problems == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

async fn broker(config: &Config, r: &mut Report) {
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
    // The outcome is reported on the check line; librdkafka's own log lines would repeat it.
    cfg.set_log_level(RDKafkaLogLevel::Emerg);
    let result = tokio::task::spawn_blocking(move || {
        let producer: BaseProducer =
            cfg.create().map_err(|e| (true, kafka.describe_librdkafka_error(&e)))?;
        let metadata = producer
            .client()
            .fetch_metadata(None, BROKER_TIMEOUT)
            .map_err(|e| (false, e.to_string()))?;
        Ok::<_, (bool, String)>((metadata.brokers().len(), metadata.topics().len()))
    })
    .await;
    match result {
        Ok(Ok((brokers, topics))) => r.ok(
            &what,
            format!("answers: {brokers} broker{}, {topics} topic{}", plural(brokers), plural(topics)),
        ),
        Ok(Err((true, e))) => r.fail(
            &what,
            format!("librdkafka rejects the [kafka] properties: {e}"),
            "fix the property named; names and values are librdkafka's (CONFIGURATION.md)",
        ),
        Ok(Err((false, e))) => r.fail(
            &what,
            format!("no answer within {} s: {e}", BROKER_TIMEOUT.as_secs()),
            "check [kafka] bootstrap.servers, the network path, and security.protocol / sasl.* / ssl.* settings",
        ),
        Err(e) => r.fail(&what, format!("the metadata request crashed: {e}"), "report this as a bug"),
    }
}

pub(super) fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
