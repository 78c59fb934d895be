//! `walrelay check`: one line per check, `ok` / `warn` / `FAIL … — fix: …`; exit code 1 when any
//! check failed.
//!
//! A missing publication or slot is not a failure — `walrelay run` creates them — but the role
//! must then be allowed to create them, which is checked instead.
//!
//! `postgres.rs` checks the server, the role and the slot (failover included), then
//! `offsets.rs` Debezium's offsets against the slot (with `[debezium_offsets]`), `tables.rs` the
//! outbox tables and the publication, `retention.rs` the `[retention]` settings against each
//! table, `replay.rs` the index `walrelay replay` would read each table by; all read through [`crate::source`], as `run` does. `kafka.rs` checks the broker as
//! the configured principal, and the fixed topics; `exactly_once.rs` what exactly-once needs (the
//! progress topic, the transactional id's ACLs); `registry.rs` that the schema registry answers
//! and takes the credentials.

mod authorized;
mod exactly_once;
mod kafka;
mod offsets;
mod postgres;
mod registry;
mod replay;
mod retention;
mod tables;
mod tenants;

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

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
    match crate::sink::check(&config.delivery.sink).await {
        None => kafka::run(config, &mut r).await,
        Some(Ok(line)) => r.ok(&format!("sink {}", config.delivery.sink.name()), line),
        Some(Err(e)) => r.fail(
            &format!("sink {}", config.delivery.sink.name()),
            e.chain(),
            e.hint().unwrap_or("start the broker, or fix its section's url and credentials"),
        ),
    }
    registry::run(config, &mut r).await;
    exactly_once::run(config, &mut r).await;
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

pub(super) fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
