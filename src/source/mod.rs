//! PostgreSQL: the one owner of what walrelay knows about the server. `run`, `check`, `setup`,
//! `status` and `purge` all learn it here.
//!
//! * [`connect`] — which server a session talks to (libpq's hosts, ports, environment and
//!   `target_session_attrs`) and the control connection, every query with a deadline;
//! * [`catalog`] — the outbox tables (by OID) and the publication;
//! * [`tenants`] — outbox tables by pattern, and the event trigger that adds new tenants' tables
//!   to the publication as they are created;
//! * [`slot`] — the replication slot (failover slots on 17+); [`retained`] samples the WAL it
//!   retains for `/metrics`;
//! * [`horizon`] — which outbox rows the slot has certainly relayed (for `purge`);
//! * [`partitions`] — a partitioned outbox's scheme and partition bounds (for `purge`);
//! * [`stream`] — the replication stream and what its errors mean;
//! * [`error`] — errors classified by SQLSTATE, never by (translated) message text;
//! * [`libpq`] — the `PG*` environment variables and the password file.
//!
//! Nothing here reads an outbox table (I4) — only `pg_catalog`, settings and slot functions.
//! Rows arrive exclusively through the slot. (Retention, which deletes rows, lives in
//! [`crate::retention`] and asks here what is safe.)

pub mod catalog;
pub mod connect;
pub mod creation;
pub mod error;
pub mod horizon;
pub mod partitions;
pub mod retained;
pub mod slot;
pub mod stream;
pub mod tenants;
pub mod watch;

pub use self::catalog::OutboxTable;
pub use self::connect::{connect, Control};

use crate::config::{OutboxConfig, SourceConfig};
use crate::error::{Error, Result};
use crate::lsn::Lsn;

/// What a session checked and set up before streaming.
pub struct Prepared {
    pub control: Control,
    pub tables: Vec<OutboxTable>,
    /// Where the slot resumes: the last position a relay confirmed.
    pub confirmed: Lsn,
    /// The pid of the process streaming from the slot as it was read, if one was.
    pub in_use_by: Option<i32>,
    /// As [`Published::tenants`].
    pub tenants: Option<tenants::Tenants>,
}

impl Prepared {
    /// The outbox tables for the relay's "streaming" line: those by name, then how many the
    /// patterns match (a thousand tenants' names would make the line unreadable) and how new
    /// ones join.
    pub fn describe_tables(&self, outbox: &OutboxConfig) -> String {
        let mut text: Vec<String> = outbox.tables.iter().map(|t| t.to_string()).collect();
        if let Some(tenants) = &self.tenants {
            let patterns: Vec<&str> = outbox.patterns.iter().map(|p| p.text.as_str()).collect();
            let joining = match &tenants.joining {
                tenants::Joining::Trigger => "new ones join by the event trigger",
                tenants::Joining::AllTables => "new ones are in the FOR ALL TABLES publication",
                tenants::Joining::NotGuaranteed(_) => "new ones join late: no event trigger",
            };
            text.push(format!(
                "{} table(s) by {} ({joining})",
                tenants.matched,
                patterns.join(" ")
            ));
        }
        text.join(",")
    }
}

/// What [`prepare_publication`] checked and set up: everything but the slot.
pub struct Published {
    pub control: Control,
    /// The tables by name, then those the patterns match now.
    pub tables: Vec<OutboxTable>,
    /// The publication existed before.
    pub existed: bool,
    /// With `[outbox] tables` patterns: how new tenants' tables join the publication, and the
    /// tables it does not carry.
    pub tenants: Option<tenants::Tenants>,
}

/// Connects, checks wal_level and the outbox tables, and creates the publication when it is
/// missing and `create` allows. `walrelay setup --publication-only` stops here, so the
/// publication can exist well before the slot (see docs/operations.md, Deploying).
///
/// The tables by name must be in the publication. A tenant's table (matched by a pattern) the
/// publication lacks is said and left out, with the fix: one tenant of a thousand must not
/// stop the others. With patterns, `create` also installs the event trigger that adds new
/// tenants' tables to the publication as they are created, when the role may.
pub async fn prepare_publication(
    src: &SourceConfig,
    outbox: &OutboxConfig,
    create: bool,
) -> Result<Published> {
    let control = connect(src).await?;
    let wal_level: String = control
        .query_one("cannot read wal_level", "SELECT current_setting('wal_level')", &[])
        .await?
        .get(0);
    if wal_level != "logical" {
        return Err(Error::definite(
            format!("wal_level is {wal_level}, not logical"),
            "set wal_level = logical in postgresql.conf and restart PostgreSQL",
        ));
    }
    let tables = catalog::outbox_tables(&control, outbox).await?;
    let existed = catalog::publication(&control, &src.publication).await?.is_some();
    // A new publication carries every table found; an existing one must carry those by name.
    let named: Vec<OutboxTable> =
        tables.iter().filter(|t| outbox.tables.contains(&t.name)).cloned().collect();
    let required = if existed { &named } else { &tables };
    let publication =
        catalog::ensure_publication(&control, &src.publication, required, create).await?;
    let tenants = match outbox.patterns.is_empty() {
        true => None,
        false => {
            let joining = tenants::ensure(&control, &src.publication, outbox, create).await?;
            // (The session's watch says each one the publication lacks, and `setup` adds them.)
            let uncovered = tables
                .iter()
                .filter(|t| {
                    !outbox.tables.contains(&t.name)
                        && !publication.all_tables
                        && publication.entry_for(t).is_none()
                })
                .map(|t| t.name.clone())
                .collect();
            if let (true, tenants::Joining::NotGuaranteed(why)) = (create, &joining) {
                tenants::warn_not_guaranteed(&src.publication, why);
            }
            let matched = tables.len() - named.len();
            Some(tenants::Tenants { joining, matched, uncovered })
        }
    };
    Ok(Published { control, tables, existed, tenants })
}

/// Connects and checks what walrelay needs; creates the publication and the slot when they are
/// missing and `create` allows (false once this process has streamed: a publication or slot
/// that disappears later was dropped, and recreating it would hide lost events).
pub async fn prepare(src: &SourceConfig, outbox: &OutboxConfig, create: bool) -> Result<Prepared> {
    let Published { control, tables, existed, tenants } =
        prepare_publication(src, outbox, create).await?;
    let slot = slot::ensure_slot(&control, src, create).await?;
    // The publication remembers which slots decoded with it (its comment, written here at
    // each start): a slot it names that had to be created again was lost — dropped, or lost in
    // a failover before PostgreSQL 17 — and what was committed since its last position is not
    // in the new one. A publication created ahead of its first slot (docs/operations.md,
    // Deploying) names none, and is no loss.
    let before = catalog::publication_slots(&control, &src.publication).await?;
    if slot.created && existed && before.contains(&src.slot) {
        tracing::warn!(slot = %src.slot, publication = %src.publication, lsn = %slot.confirmed,
            "created replication slot again: publication {} records that this slot decoded with it before, so it was lost (dropped, or a failover on PostgreSQL before 17), and the events committed between its last confirmed position and this LSN are not relayed — `walrelay audit --since <before the loss> --repair` finds and sends them (docs/operations.md, Failover)", src.publication);
    } else if slot.created && existed {
        tracing::info!(slot = %src.slot, publication = %src.publication, lsn = %slot.confirmed,
            "created the replication slot for a publication created ahead of it: relaying from this LSN");
    }
    catalog::record_slot(&control, &src.publication, &src.slot, &before).await;
    Ok(Prepared { control, tables, confirmed: slot.confirmed, in_use_by: slot.in_use_by, tenants })
}
