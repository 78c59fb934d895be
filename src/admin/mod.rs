//! Operator commands beside `run`: `check` (preflight), `setup` / `teardown` (publication and
//! slot), `status` (slot lag and retained WAL), `purge` (retention), `replay`, `audit` (the
//! window's rows against Kafka) and `import-debezium` (connector config → walrelay.toml).
//!
//! Like [`crate::source`], these read only `pg_catalog` views, settings and slot functions — never
//! the outbox table (I4) — except `purge`, which deletes relayed rows through
//! [`crate::retention`], and `replay` and `audit`, which read retained rows in a snapshot. What they print goes to stdout; logs go to stderr.

mod audit;
mod check;
mod purge;
pub mod replay;
mod setup;
mod status;
mod table_status;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use crate::config::{redact_url, Config, SourceConfig};
use crate::error::Result;
use crate::source::Control;
use clap::Subcommand;

pub use self::status::SlotStatus;

/// The operator subcommands, flattened into the `walrelay` command line by `main.rs`.
// Parsed once per process: `Replay`'s many options cost nothing worth boxing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Preflight: checks PostgreSQL, the outbox table, the publication, the slot and the broker;
    /// one line per check, exit code 1 on any problem.
    Check {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Creates the publication (FOR TABLE <outbox> WITH (publish = 'insert')) and the pgoutput
    /// slot when they are missing; changes nothing that exists.
    Setup {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// Create the publication only, not the slot: the publication then exists well before
        /// the slot (docs/operations.md, Deploying).
        #[arg(long)]
        publication_only: bool,
        /// Print the SQL of the event trigger that adds tenants' tables ([outbox] tables
        /// patterns) to the publication as they are created, for a DBA to run as a superuser;
        /// connect to nothing.
        #[arg(long, conflicts_with = "publication_only")]
        print_sql: bool,
    },
    /// Drops the slot and the publication. The slot's position is lost: events committed while
    /// no slot exists are never relayed.
    Teardown {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// Really drop them (without it, teardown only says what it would drop).
        #[arg(long)]
        yes: bool,
    },
    /// The slot's confirmed LSN, lag, retained WAL, active pid and last status update.
    Status {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// One JSON object instead of a table.
        #[arg(long)]
        json: bool,
        /// Also each outbox table (by name, and what [outbox] tables patterns match now):
        /// whether the publication carries it, and the events the running relay relayed from
        /// it and the newest one's commit time (from its [http] endpoint).
        #[arg(long)]
        tables: bool,
    },
    /// Deletes outbox rows older than --older-than whose events the slot has confirmed (drops
    /// whole partitions of a table partitioned by range on the age column); exit code 1, and
    /// nothing deleted, when the relay is down or behind.
    Purge {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// Rows older than this go: 7d, 12h, 30m, 45s [default: [retention] keep].
        #[arg(long, value_parser = crate::duration::parse)]
        older_than: Option<Duration>,
        /// Say what would be deleted and dropped; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// How long to wait for the slot to confirm the WAL position the purge starts from.
        #[arg(long, value_parser = crate::duration::parse, default_value = "30s")]
        wait: Duration,
        /// Delete too the old rows a tenant's table held before it joined the publication,
        /// which were never relayed: only once `walrelay audit --repair` (or a replay)
        /// re-published them, or they are not wanted.
        #[arg(long)]
        force: bool,
    },
    /// Re-publishes retained outbox rows, selected by time or event id, through the same router
    /// and envelope as the live relay (same event id, key and partition, plus a header
    /// walrelay.replay); on a producer of its own, never touching the slot. Outside the
    /// exactly-once guarantee: replayed records are not in Kafka transactions, and repeat events
    /// on purpose (consumers deduplicate by the id header).
    Replay(replay::Args),
    /// Compares the retained outbox rows of a window with what the Kafka topics hold: delivered
    /// once, missing, duplicated (and how many by replay), out of order, misplaced, unexpected;
    /// exit code 0 when clean, 1 otherwise.
    Audit(audit::Args),
    /// Prints the walrelay.toml equivalent to a Debezium PostgreSQL connector configuration
    /// (connector JSON, flat JSON config or .properties); warnings go to stderr.
    ImportDebezium {
        /// The connector configuration file; `-` reads standard input.
        file: PathBuf,
    },
}

/// Runs one operator command to completion.
pub fn run(command: AdminCommand) -> ExitCode {
    if let AdminCommand::ImportDebezium { file } = &command {
        return crate::import::run_cli(file);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(async move {
        match command {
            AdminCommand::Check { config } => match load(&config) {
                Ok(c) => check::run(&c).await,
                Err(code) => code,
            },
            AdminCommand::Setup { config, print_sql: true, .. } => match load(&config) {
                Ok(c) => setup::print_sql(&c),
                Err(code) => code,
            },
            AdminCommand::Setup { config, publication_only, .. } => match load(&config) {
                Ok(c) => setup::setup(&c, publication_only).await,
                Err(code) => code,
            },
            AdminCommand::Teardown { config, yes } => match load(&config) {
                Ok(c) => setup::teardown(&c, yes).await,
                Err(code) => code,
            },
            AdminCommand::Status { config, json, tables } => match load(&config) {
                Ok(c) => status::run(&c, json, tables).await,
                Err(code) => code,
            },
            AdminCommand::Purge { config, older_than, dry_run, wait, force } => match load(&config)
            {
                Ok(c) => purge::run(&c, older_than, dry_run, wait, force).await,
                Err(code) => code,
            },
            AdminCommand::Replay(args) => match load(args.config()) {
                Ok(c) => replay::run(&c, args).await,
                Err(code) => code,
            },
            AdminCommand::Audit(args) => match load(args.config()) {
                Ok(c) => audit::run(&c, args).await,
                Err(code) => code,
            },
            AdminCommand::ImportDebezium { .. } => unreachable!("handled above"),
        }
    });
    // Leave librdkafka's and tokio-postgres's background tasks behind without waiting.
    runtime.shutdown_timeout(Duration::from_millis(100));
    code
}

/// Loads the configuration; an invalid one exits with code 2, as `walrelay run` does.
fn load(path: &Path) -> Result<Config, ExitCode> {
    Config::load(path).map_err(|e| {
        eprintln!("error: configuration error {}: {e}", e.origin(path));
        ExitCode::from(2)
    })
}

/// The control connection, as `walrelay run` makes it (same server choice, same deadlines).
pub(crate) async fn connect(src: &SourceConfig) -> Result<Control> {
    crate::source::connect(src).await
}

/// Where `[source]` points, without the password, for messages: the URL as written, or the
/// hosts and database it resolved to from libpq's environment.
pub(crate) fn describe_source(src: &SourceConfig) -> String {
    if !src.url.trim().is_empty() {
        return redact_url(&src.url);
    }
    let hosts: Vec<String> = src
        .conn
        .get_hosts()
        .iter()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(dir) => dir.display().to_string(),
        })
        .collect();
    format!(
        "host={} dbname={} user={} (from the PG* environment)",
        hosts.join(","),
        src.conn.get_dbname().unwrap_or(""),
        src.conn.get_user().unwrap_or("")
    )
}

/// A byte count as an operator reads it: `512 B`, `1.5 KiB`, `12.3 MiB`, `1.0 GiB`.
pub fn human_bytes(bytes: i64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    let negative = bytes < 0;
    let magnitude = bytes.unsigned_abs();
    let sign = if negative { "-" } else { "" };
    if magnitude < 1024 {
        return format!("{sign}{magnitude} B");
    }
    let mut value = magnitude as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{sign}{value:.1} {}", UNITS[unit])
}

/// `"name"`, quoted for SQL. Names reaching here passed `config::check_identifier`.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_human_bytes_uses_binary_units_with_one_decimal() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1024), "1.0 KiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(16 * 1024 * 1024), "16.0 MiB");
        assert_eq!(human_bytes(3 * 1024 * 1024 * 1024 + 512 * 1024 * 1024), "3.5 GiB");
        assert_eq!(human_bytes(-2048), "-2.0 KiB");
    }

    #[test]
    fn admin_quote_ident_doubles_quotes() {
        assert_eq!(quote_ident("outbox"), "\"outbox\"");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
