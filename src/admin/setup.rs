//! `walrelay setup` and `walrelay teardown`: the publication and the slot.
//!
//! `setup` runs the same preparation as `walrelay run` ([`crate::source::prepare`]), so what it
//! creates and what it refuses (wal_level, a missing table, a publication without the table, a
//! non-pgoutput slot) are exactly what the relay would do.

use std::process::ExitCode;

use tokio_postgres::Client;

use super::{connect, describe_source, quote_ident};
use crate::config::Config;
use crate::source;

pub(super) async fn setup(config: &Config) -> ExitCode {
    let src = &config.source;
    let outbox = &config.outbox;
    let client = match connect(src).await {
        Ok(c) => c,
        Err(e) => return connect_failed(config, &e),
    };
    let before = match existing(&client, config).await {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: cannot read the catalog: {e}");
            return ExitCode::FAILURE;
        }
    };
    let state = match source::prepare(&client, src, outbox, true).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {}", e.chain());
            if let Some(hint) = e.hint() {
                eprintln!("fix: {hint}");
            }
            return ExitCode::FAILURE;
        }
    };
    let table = format!("{}.{}", outbox.schema, outbox.table);
    if before.publication {
        println!("publication {} exists and covers {table} (unchanged)", src.publication);
    } else {
        println!(
            "created publication {} FOR TABLE {table} WITH (publish = 'insert')",
            src.publication
        );
    }
    let lsn = source::fmt_lsn(state.confirmed_flush);
    if before.slot.is_some() {
        println!("replication slot {} exists, confirmed LSN {lsn} (unchanged)", src.slot);
    } else {
        println!("created replication slot {} (pgoutput) at LSN {lsn}", src.slot);
    }
    ExitCode::SUCCESS
}

pub(super) async fn teardown(config: &Config, yes: bool) -> ExitCode {
    let src = &config.source;
    let client = match connect(src).await {
        Ok(c) => Some(c),
        Err(e) if !yes => {
            eprintln!("note: cannot connect to {} to look: {}", describe_source(src), e.chain());
            None
        }
        Err(e) => return connect_failed(config, &e),
    };
    let found = match &client {
        Some(c) => match existing(c, config).await {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("error: cannot read the catalog: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let slot_text = match &found {
        None => format!("replication slot {}", src.slot),
        Some(Existing { slot: None, .. }) => {
            format!("replication slot {} (does not exist)", src.slot)
        }
        Some(Existing { slot: Some(s), .. }) => format!(
            "replication slot {} (confirmed LSN {}, {})",
            src.slot,
            s.confirmed.as_deref().unwrap_or("none"),
            match s.active_pid {
                Some(pid) => format!("active, pid {pid}"),
                None => "inactive".to_string(),
            }
        ),
    };
    let pub_text = match &found {
        Some(Existing { publication: false, .. }) => {
            format!("publication {} (does not exist)", src.publication)
        }
        _ => format!("publication {}", src.publication),
    };
    if !yes {
        println!(
            "refusing to drop without --yes. teardown would drop: {slot_text}; {pub_text}. \
             Dropping the slot loses its position: rows committed until a new slot exists are never relayed. \
             Re-run with --yes to drop them."
        );
        return ExitCode::FAILURE;
    }
    let (Some(client), Some(found)) = (client, found) else {
        unreachable!("with --yes a connection failure returned above");
    };
    if let Some(pid) = found.slot.as_ref().and_then(|s| s.active_pid) {
        println!(
            "refusing to drop: replication slot {} is active, pid {pid} streams from it. \
             Stop that relay first (or SELECT pg_terminate_backend({pid})), then re-run.",
            src.slot
        );
        return ExitCode::FAILURE;
    }
    let mut dropped = 0;
    if found.slot.is_some() {
        if let Err(e) = client
            .query_one("SELECT 1 FROM pg_catalog.pg_drop_replication_slot($1)", &[&src.slot])
            .await
        {
            eprintln!("error: cannot drop replication slot {}: {e}", src.slot);
            return ExitCode::FAILURE;
        }
        println!("dropped replication slot {}", src.slot);
        dropped += 1;
    }
    if found.publication {
        let sql = format!("DROP PUBLICATION IF EXISTS {}", quote_ident(&src.publication));
        if let Err(e) = client.batch_execute(&sql).await {
            eprintln!("error: cannot drop publication {}: {e}", src.publication);
            return ExitCode::FAILURE;
        }
        println!("dropped publication {}", src.publication);
        dropped += 1;
    }
    if dropped == 0 {
        println!(
            "nothing to drop: neither replication slot {} nor publication {} exists",
            src.slot, src.publication
        );
    }
    ExitCode::SUCCESS
}

struct SlotRow {
    confirmed: Option<String>,
    active_pid: Option<i32>,
}

struct Existing {
    publication: bool,
    slot: Option<SlotRow>,
}

async fn existing(client: &Client, config: &Config) -> Result<Existing, tokio_postgres::Error> {
    let publication = client
        .query_opt(
            "SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = $1",
            &[&config.source.publication],
        )
        .await?
        .is_some();
    let slot = client
        .query_opt(
            "SELECT confirmed_flush_lsn::text, CASE WHEN active THEN active_pid END \
             FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
            &[&config.source.slot],
        )
        .await?
        .map(|row| SlotRow { confirmed: row.get(0), active_pid: row.get(1) });
    Ok(Existing { publication, slot })
}

fn connect_failed(config: &Config, e: &crate::error::Error) -> ExitCode {
    eprintln!(
        "error: cannot connect to {}: {} — fix: check [source] url and PGPASSWORD",
        describe_source(&config.source),
        e.chain()
    );
    ExitCode::FAILURE
}
