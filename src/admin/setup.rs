//! `walrelay setup` and `walrelay teardown`: the publication and the slot.
//!
//! `setup` runs the same preparation as `walrelay run` ([`crate::source::prepare`]), so what it
//! creates and what it refuses (wal_level, a missing table, a publication without the table, a
//! non-pgoutput slot) are exactly what the relay would do.

use std::process::ExitCode;

use super::{connect, describe_source, quote_ident};
use crate::config::Config;
use crate::source::{self, slot, tenants, Control};

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
    let (control, confirmed, tenants) = if publication_only {
        match source::prepare_publication(src, &config.outbox, true).await {
            Ok(p) => (p.control, None, p.tenants),
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
            Ok(p) => (p.control, Some(p.confirmed), p.tenants),
            Err(e) => return failed(e),
        }
    };
    let tables: Vec<String> = config.outbox.tables.iter().map(|t| t.to_string()).collect();
    let tables = tables.join(", ");
    let created =
        crate::source::catalog::create_publication_sql(&src.publication, &config.outbox.tables)
            .replace('"', "");
    match (before.publication, config.outbox.is_message_only()) {
        (true, false) => {
            println!("publication {} exists and covers {tables} (unchanged)", src.publication)
        }
        (true, true) => println!(
            "publication {} exists (unchanged); a message-only relay needs no table in it",
            src.publication
        ),
        (false, _) => match &tenants {
            None => println!("created publication {}", created.trim_start_matches("CREATE PUBLICATION ")),
            Some(t) => println!(
                "created publication {} for {}{} table(s) [outbox] tables patterns match now (publish = 'insert', publish_via_partition_root = true)",
                src.publication,
                if tables.is_empty() { String::new() } else { format!("{tables} and the ") },
                t.matched
            ),
        },
    }
    if let Some(t) = &tenants {
        if let Err(code) = tenant_tables(config, &control, t).await {
            return code;
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
    sink(config).await
}

/// What a sink beyond Kafka needs (a JetStream stream, an exchange), for the names known before
/// any row is routed: the dead-letter destination; the sink's own section names the rest.
async fn sink(config: &Config) -> ExitCode {
    let routed: Vec<String> = config.dead_letter.iter().map(|d| d.topic.clone()).collect();
    match crate::sink::setup(&config.delivery.sink, &routed).await {
        None => ExitCode::SUCCESS,
        Some(Ok(lines)) => {
            for line in lines {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Some(Err(e)) => {
            eprintln!("error: the {} sink: {}", config.delivery.sink.name(), e.chain());
            if let Some(hint) = e.hint() {
                eprintln!("fix: {hint}");
            }
            ExitCode::FAILURE
        }
    }
}

/// With `[outbox] tables` patterns: adds the matching tables the publication lacks (their rows
/// from now on are relayed; `audit --repair` sends what they hold from before), and says how
/// tables created later join the publication — setup fails, with the fix, when nothing makes
/// sure they do from their first row.
async fn tenant_tables(
    config: &Config,
    control: &Control,
    t: &tenants::Tenants,
) -> Result<(), ExitCode> {
    let publication = &config.source.publication;
    for table in &t.uncovered {
        let sql =
            format!("ALTER PUBLICATION {} ADD TABLE {}", quote_ident(publication), table.quoted());
        // Under a SHARE lock (no INSERT runs meanwhile) every row written before the table
        // joined belongs to a transaction older than the one adding it: the purge keeps those
        // rows, which were never relayed, by that test (retention's `Joined`).
        let locked = format!(
            "BEGIN; SET LOCAL lock_timeout = '5s'; LOCK TABLE {} IN SHARE MODE; {sql}; COMMIT",
            table.quoted()
        );
        if let Err(e) = batch(control, &locked).await {
            let _ = batch(control, "ROLLBACK").await;
            eprintln!("error: cannot add {table} to publication {publication}: {e}");
            eprintln!("fix: run it as the table's owner or a superuser, when no long transaction writes to the table: {locked}");
            return Err(ExitCode::FAILURE);
        }
        println!("added {table} to publication {publication}: its rows from now on are relayed; the rows written before were not, and the purge keeps them: `walrelay audit --since <when it was created> --repair` sends them");
    }
    let patterns: Vec<&str> = config.outbox.patterns.iter().map(|p| p.text.as_str()).collect();
    let name = tenants::trigger_name(publication);
    match &t.joining {
        tenants::Joining::Trigger => println!(
            "event trigger {name} is installed: a table created later that {} matches joins publication {publication} in the transaction that creates it",
            patterns.join(", ")
        ),
        tenants::Joining::AllTables => println!(
            "publication {publication} is FOR ALL TABLES: a table created later that {} matches is relayed from its first row",
            patterns.join(", ")
        ),
        tenants::Joining::NotGuaranteed(why) => {
            eprintln!("error: {why}: a table created later that {} matches would join publication {publication} late, and lose the rows written before", patterns.join(", "));
            eprintln!("fix: {}", tenants::install_fix(publication));
            return Err(ExitCode::FAILURE);
        }
    }
    Ok(())
}

/// `walrelay setup --print-sql`: the event trigger's SQL, for a DBA to run as a superuser.
pub(super) fn print_sql(config: &Config) -> ExitCode {
    if config.outbox.patterns.is_empty() {
        eprintln!("error: [outbox] tables has no pattern, so there is no event trigger to install — fix: the publication is all `walrelay setup` needs to create");
        return ExitCode::from(2);
    }
    println!("-- Run as a superuser in the outbox's database: adds each table created later that [outbox] tables");
    println!(
        "-- matches to publication {} in the transaction that creates it.",
        config.source.publication
    );
    print!("{}", tenants::install_sql(&config.source.publication, &config.outbox));
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
        Some(f) if !f.other_slots.is_empty() => format!(
            "nothing else: publication {} is kept, as {}",
            src.publication,
            shared(&f.other_slots)
        ),
        Some(Existing { trigger: true, .. }) => format!(
            "publication {} and event trigger {}",
            src.publication,
            tenants::trigger_name(&src.publication)
        ),
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
    if !found.other_slots.is_empty() {
        // Dropped on purpose: a slot of this name created later is no loss.
        if found.publication {
            let _ = source::catalog::forget_slot(&client, &src.publication, &src.slot).await;
        }
        println!(
            "kept publication {}: {}; drop it once none of them reads it: DROP PUBLICATION {}",
            src.publication,
            shared(&found.other_slots),
            quote_ident(&src.publication)
        );
        return ExitCode::SUCCESS;
    }
    if found.trigger {
        // Before the publication: with the publication gone, the trigger only does nothing.
        if let Err(e) = batch(&client, &tenants::drop_sql(&src.publication)).await {
            eprintln!(
                "error: cannot drop event trigger {}: {e}",
                tenants::trigger_name(&src.publication)
            );
            return ExitCode::FAILURE;
        }
        println!("dropped event trigger {}", tenants::trigger_name(&src.publication));
        dropped += 1;
    }
    if found.publication {
        let sql = format!("DROP PUBLICATION IF EXISTS {}", quote_ident(&src.publication));
        if let Err(e) = batch(&client, &sql).await {
            eprintln!("error: cannot drop publication {}: {e}", src.publication);
            return ExitCode::FAILURE;
        }
        println!("dropped publication {}", src.publication);
        if !found.unrecorded_slots.is_empty() {
            println!(
                "note: replication slot(s) {} of this database decode with pgoutput too: if one read publication {}, its consumer now fails to start — recreate the publication for it",
                found.unrecorded_slots.join(", "),
                src.publication
            );
        }
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

/// Why the publication is kept: other walrelay slots read it.
fn shared(others: &[String]) -> String {
    format!(
        "walrelay's replication slot(s) {} decode with it too (the publication's comment records them)",
        others.join(", ")
    )
}

/// Runs DDL; the error as text.
async fn batch(client: &Control, sql: &str) -> Result<(), String> {
    match client.batch(sql).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(e.chain()),
    }
}

struct Existing {
    publication: bool,
    slot: Option<slot::Slot>,
    /// Other slots that exist and that the publication records as walrelay's, decoding with it
    /// (`catalog::record_slot`): the publication is theirs too, and is kept.
    other_slots: Vec<String>,
    /// The database's other pgoutput slots it does not record: one may read it (a slot does
    /// not record its publication), which teardown says as it drops it.
    unrecorded_slots: Vec<String>,
    /// The event trigger that adds tenants' tables to the publication.
    trigger: bool,
}

async fn existing(control: &Control, config: &Config) -> crate::error::Result<Existing> {
    let src = &config.source;
    let publication = source::catalog::publication(control, &src.publication).await?.is_some();
    let slot = slot::slot(control, &src.slot).await?;
    let recorded = match publication {
        true => source::catalog::publication_slots(control, &src.publication).await?,
        false => Vec::new(),
    };
    let (other_slots, unrecorded_slots): (Vec<String>, Vec<String>) = control
        .query(
            "cannot list the database's replication slots",
            "SELECT slot_name::text FROM pg_catalog.pg_replication_slots \
             WHERE slot_type = 'logical' AND plugin = 'pgoutput' \
             AND database = current_database() AND slot_name <> $1 ORDER BY 1",
            &[&src.slot],
        )
        .await?
        .iter()
        .map(|r| r.get::<_, String>(0))
        .partition(|name| recorded.contains(name));
    let trigger = control
        .query_opt(
            "cannot look up the event trigger",
            "SELECT 1 FROM pg_catalog.pg_event_trigger WHERE evtname = $1",
            &[&tenants::trigger_name(&src.publication)],
        )
        .await?
        .is_some();
    Ok(Existing { publication, slot, other_slots, unrecorded_slots, trigger })
}

fn connect_failed(config: &Config, e: &crate::error::Error) -> ExitCode {
    eprintln!(
        "error: cannot connect to {}: {} — fix: check [source] url and PGPASSWORD",
        describe_source(&config.source),
        e.chain()
    );
    ExitCode::FAILURE
}
