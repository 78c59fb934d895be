//! PostgreSQL: the one owner of what walrelay knows about the server. `run`, `check`, `setup`,
//! `status` and `purge` all learn it here.
//!
//! * [`connect`] — which server a session talks to (libpq's hosts, ports, environment and
//!   `target_session_attrs`) and the control connection, every query with a deadline;
//! * [`catalog`] — the outbox tables (by OID) and the publication;
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
}

/// What [`prepare_publication`] checked and set up: everything but the slot.
pub struct Published {
    pub control: Control,
    pub tables: Vec<OutboxTable>,
    /// The publication existed before.
    pub existed: bool,
}

/// Connects, checks wal_level and the outbox tables, and creates the publication when it is
/// missing and `create` allows. `walrelay setup --publication-only` stops here, so the
/// publication can exist well before the slot (see docs/operations.md, Deploying).
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
    let tables = catalog::outbox_tables(&control, &outbox.tables).await?;
    let existed = catalog::publication(&control, &src.publication).await?.is_some();
    catalog::ensure_publication(&control, &src.publication, &tables, create).await?;
    Ok(Published { control, tables, existed })
}

/// Connects and checks what walrelay needs; creates the publication and the slot when they are
/// missing and `create` allows (false once this process has streamed: a publication or slot
/// that disappears later was dropped, and recreating it would hide lost events).
pub async fn prepare(src: &SourceConfig, outbox: &OutboxConfig, create: bool) -> Result<Prepared> {
    let Published { control, tables, existed } = prepare_publication(src, outbox, create).await?;
    let slot = slot::ensure_slot(&control, src, create).await?;
    if slot.created && existed {
        // A publication without its slot: walrelay (or Debezium) streamed here before and its
        // slot is gone — dropped, or lost in a failover before PostgreSQL 17. The new slot
        // starts now; what was committed since the old one's position is not in it.
        tracing::warn!(slot = %src.slot, publication = %src.publication, lsn = %slot.confirmed,
            "created a new replication slot although the publication existed: if an earlier slot was lost (dropped, or a failover on PostgreSQL before 17), events committed between its last confirmed position and this LSN are not relayed — reconcile them (docs/operations.md, failover)");
    }
    Ok(Prepared { control, tables, confirmed: slot.confirmed, in_use_by: slot.in_use_by })
}
