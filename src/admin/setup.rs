//! `walrelay setup` and `walrelay teardown`: the publication and the slot.
//!
//! `setup` runs the same preparation as `walrelay run` ([`crate::source::prepare`]), so what it
//! creates and what it refuses (wal_level, a missing table, a publication without the table, a
//! non-pgoutput slot) are exactly what the relay would do.

use std::process::ExitCode;

use super::{connect, describe_source, quote_ident};
use crate::config::Config;
use crate::source::{self, slot, Control};

pub(super) async fn setup(config: &Config, publication_only: bool) -> ExitCode {
    let src = &config.source;
    let before = match connect(src).await {
        Ok(control) => match existing(&control, config).await {
            Ok(b) => b,
            Err(e) => {
                eprintln!("error: cannot read the catalog: {}", e.chain());
                return ExitCode::FAILURE;
            }
        },
        Err(e) => return connect_failed(config, &e),
    };
    let failed = |e: crate::error::Error| {
        eprintln!("error: {}", e.chain());
        if let Some(hint) = e.hint() {
            eprintln!("fix: {hint}");
        }
        ExitCode::FAILURE
    };
    // The same preparation as `walrelay run`, the slot included unless --publication-only.
    let (control, confirmed) = if publication_only {
        match source::prepare_publication(src, &config.outbox, true).await {
            Ok(p) => (p.control, None),
            Err(e) => return failed(e),
        }
    } else {
        // Creating the slot can wait a long time for open transactions (it logs which): a
        // SIGINT or SIGTERM meanwhile drops the creation, which cancels the creating backend
        // (source::creation) instead of leaving it to hold the slot.
        let prepared = tokio::select! {
            prepared = source::prepare(src, &config.outbox, true) => prepared,
            _ = stop_requested() => {
                eprintln!("error: stopped before the slot was created; nothing is left waiting");
                return ExitCode::FAILURE;
            }
        };
        match prepared {
            Ok(p) => (p.control, Some(p.confirmed)),
            Err(e) => return failed(e),
        }
    };
    let tables: Vec<String> = config.outbox.tables.iter().map(|t| t.to_string()).collect();
    let tables = tables.join(", ");
    let created =
        crate::source::catalog::create_publication_sql(&src.publication, &config.outbox.tables)
            .replace('"', "");
    match (before.publication, config.outbox.tables.is_empty()) {
        (true, false) => {
            println!("publication {} exists and covers {tables} (unchanged)", src.publication)
        }
        (true, true) => println!(
            "publication {} exists (unchanged); a message-only relay needs no table in it",
            src.publication
        ),
        (false, _) => {
            println!("created publication {}", created.trim_start_matches("CREATE PUBLICATION "))
        }
    }
    let Some(lsn) = confirmed else {
        match &before.slot {
            Some(_) => println!("replication slot {} exists (unchanged)", src.slot),
            None => println!(
                "replication slot {} not created (--publication-only): `walrelay setup` or `walrelay run` creates it",
                src.slot
            ),
        }
        return ExitCode::SUCCESS;
    };
    let failover = match slot::slot(&control, &src.slot).await {
        Ok(Some(s)) if s.failover == Some(true) => ", failover slot",
        _ => "",
    };
    if before.slot.is_some() {
        println!("replication slot {} exists, confirmed LSN {lsn}{failover} (unchanged)", src.slot);
    } else {
        println!("created replication slot {} (pgoutput{failover}) at LSN {lsn}", src.slot);
    }
    if config.delivery.exactly_once() {
        return progress_topic(config).await;
    }
    ExitCode::SUCCESS
}

/// Exactly-once: the progress topic, created as `walrelay run` would create it at its first
/// start, so that a relay whose principal may not CREATE topics finds it there.
async fn progress_topic(config: &Config) -> ExitCode {
    use crate::delivery::exactly_once::progress_topic::{create_progress_topic, PROGRESS_TIMEOUT};
    let topic = config.delivery.progress_topic.as_str();
    match create_progress_topic(&config.kafka, topic, PROGRESS_TIMEOUT).await {
        Ok(Some(replicas)) => {
            println!(
                "created progress topic {topic} (compacted, one partition, {replicas} replica(s))"
            );
            ExitCode::SUCCESS
        }
        Ok(None) => {
            println!("progress topic {topic} exists (unchanged)");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", e.chain());
            if let Some(hint) = e.hint() {
                eprintln!("fix: {hint}");
            }
            ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn stop_requested() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        },
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
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
                eprintln!("error: cannot read the catalog: {}", e.chain());
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
            s.confirmed.map_or("none".to_string(), |l| l.to_string()),
            match s.active_pid.filter(|_| s.active) {
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
    if let Some(pid) = found.slot.as_ref().filter(|s| s.active).and_then(|s| s.active_pid) {
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
            .query_one(
                "cannot drop the slot",
                "SELECT 1 FROM pg_catalog.pg_drop_replication_slot($1)",
                &[&src.slot],
            )
            .await
        {
            eprintln!("error: cannot drop replication slot {}: {}", src.slot, e.chain());
            return ExitCode::FAILURE;
        }
        println!("dropped replication slot {}", src.slot);
        dropped += 1;
    }
    if found.publication {
        let sql = format!("DROP PUBLICATION IF EXISTS {}", quote_ident(&src.publication));
        let failed = match client.batch(&sql).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(e) => Some(e.chain()),
        };
        if let Some(e) = failed {
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

struct Existing {
    publication: bool,
    slot: Option<slot::Slot>,
}

async fn existing(control: &Control, config: &Config) -> crate::error::Result<Existing> {
    let publication =
        source::catalog::publication(control, &config.source.publication).await?.is_some();
    let slot = slot::slot(control, &config.source.slot).await?;
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
