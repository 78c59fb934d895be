//! The replication slot: its state, its creation (as a failover slot where the server can
//! synchronise it to a standby), and moving it forward after a graceful stop.
//!
//! The slot's confirmed position is the relay's only offset: a session starts from it, and it
//! moves only when the relay confirms an acknowledged prefix (I2).

use super::connect::Control;
use crate::config::SourceConfig;
use crate::error::{Error, Result};
use crate::lsn::Lsn;

/// Failover slots (`failover = true`, synchronised to standbys) exist from PostgreSQL 17 on.
pub const FAILOVER_SINCE: i32 = 170000;

/// The server's current WAL position: on a standby (16+ decodes there) the replayed position.
pub const SERVER_LSN: &str =
    "CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn() \
     ELSE pg_catalog.pg_current_wal_lsn() END";

/// One slot as `pg_replication_slots` (and `pg_stat_replication`) report it.
#[derive(Debug, Clone, PartialEq)]
pub struct Slot {
    pub name: String,
    pub plugin: Option<String>,
    /// `logical` or `physical`.
    pub kind: String,
    pub database: Option<String>,
    /// The slot belongs to the connected database.
    pub same_database: bool,
    pub active: bool,
    pub active_pid: Option<i32>,
    /// Active but without a confirmed position: `active_pid` is the backend creating the slot
    /// (it waits for running transactions: see `source::creation`), not a walsender.
    pub creating: bool,
    /// `reserved`, `extended`, `unreserved` or `lost`.
    pub wal_status: Option<String>,
    pub restart_lsn: Option<Lsn>,
    /// Where a relay resumes: the last position confirmed.
    pub confirmed: Option<Lsn>,
    /// The server's WAL position when this was read.
    pub server_lsn: Lsn,
    /// Bytes left before `max_slot_wal_keep_size` invalidates the slot.
    pub safe_wal_size: Option<i64>,
    /// PostgreSQL 17+: the slot is synchronised to standbys with `sync_replication_slots`.
    pub failover: Option<bool>,
    /// PostgreSQL 17+: this is a standby's synchronised copy (not usable until promotion).
    pub synced: Option<bool>,
    /// PostgreSQL 17+: why the slot was invalidated.
    pub invalidation_reason: Option<String>,
    /// `pg_stat_replication.reply_time` of the active walsender, ISO-8601 UTC.
    pub last_status_update: Option<String>,
    pub last_status_update_age_s: Option<f64>,
    /// Without `pg_read_all_stats` the reply time of another role's walsender reads as NULL.
    pub can_read_stats: bool,
}

impl Slot {
    /// WAL written since the slot's confirmed position.
    pub fn lag_bytes(&self) -> Option<u64> {
        self.confirmed.map(|c| self.server_lsn.bytes_since(c))
    }

    /// WAL the server keeps for the slot.
    pub fn retained_bytes(&self) -> Option<u64> {
        self.restart_lsn.map(|r| self.server_lsn.bytes_since(r))
    }

    pub fn is_lost(&self) -> bool {
        self.wal_status.as_deref() == Some("lost")
    }
}

/// The slot named `name`, or `None` when there is none.
pub async fn slot(control: &Control, name: &str) -> Result<Option<Slot>> {
    let v17 = control.server.version_num >= FAILOVER_SINCE;
    let (failover, synced, reason) = if v17 {
        ("s.failover", "s.synced", "s.invalidation_reason")
    } else {
        ("NULL::bool", "NULL::bool", "NULL::text")
    };
    let row = control
        .query_opt(
            "cannot read the replication slot",
            &format!(
                "SELECT s.slot_name::text, s.plugin::text, s.slot_type, s.database::text, \
                 s.database IS NOT DISTINCT FROM current_database(), s.active, s.active_pid, s.wal_status, \
                 s.restart_lsn, s.confirmed_flush_lsn, ({SERVER_LSN}), s.safe_wal_size, \
                 {failover}, {synced}, {reason}, \
                 to_char(r.reply_time AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), \
                 extract(epoch FROM clock_timestamp() - r.reply_time)::float8, \
                 pg_catalog.pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') \
                 FROM pg_catalog.pg_replication_slots s \
                 LEFT JOIN pg_catalog.pg_stat_replication r ON s.active AND r.pid = s.active_pid \
                 WHERE s.slot_name = $1"
            ),
            &[&name],
        )
        .await?;
    Ok(row.map(|r| Slot {
        name: r.get(0),
        plugin: r.get(1),
        kind: r.get(2),
        database: r.get(3),
        same_database: r.get(4),
        active: r.get(5),
        active_pid: r.get(6),
        creating: r.get::<_, bool>(5)
            && r.get::<_, Option<Lsn>>(9).is_none()
            && r.get::<_, String>(2) == "logical",
        wal_status: r.get(7),
        restart_lsn: r.get(8),
        confirmed: r.get(9),
        server_lsn: r.get::<_, Option<Lsn>>(10).unwrap_or_default(),
        safe_wal_size: r.get(11),
        failover: r.get(12),
        synced: r.get(13),
        invalidation_reason: r.get(14),
        last_status_update: r.get(15),
        last_status_update_age_s: r.get(16),
        can_read_stats: r.get(17),
    }))
}

/// Whether new slots are created as failover slots: `[source] failover` when set, else on
/// wherever the server supports them (17+).
pub fn wants_failover(src: &SourceConfig, control: &Control) -> Result<bool> {
    let supported = control.server.version_num >= FAILOVER_SINCE;
    match src.failover {
        Some(true) if !supported => Err(Error::definite(
            format!(
                "[source] failover = true, but PostgreSQL {} has no failover slots (they came with 17)",
                control.server.version
            ),
            "remove `failover` from [source] (a failover then loses the slot: see docs/operations.md), or upgrade to PostgreSQL 17+",
        )),
        Some(on) => Ok(on),
        None => Ok(supported),
    }
}

/// Where the slot resumes, and whether it was just created.
pub struct Ensured {
    pub confirmed: Lsn,
    pub created: bool,
    /// The pid of the process streaming from the slot now, if one is.
    pub in_use_by: Option<i32>,
}

/// Another process streams from slot `name`: a relay stands by.
pub fn in_use(name: &str, pid: Option<i32>) -> Error {
    Error::Busy {
        what: format!(
            "the replication slot {name} is in use by another process (pid {}); standing by",
            pid.map_or("unknown".to_string(), |p| p.to_string())
        ),
    }
}

/// Returns where the slot resumes, creating it when `create` allows.
///
/// `create` is false once this process has streamed: a slot that disappears later was dropped
/// (or lost in a failover without slot synchronisation), and creating a new one would start
/// after the events committed in between.
pub async fn ensure_slot(control: &Control, src: &SourceConfig, create: bool) -> Result<Ensured> {
    let name = src.slot.as_str();
    let failover = wants_failover(src, control)?;
    let Some(slot) = slot(control, name).await? else {
        if !create {
            return Err(Error::definite(
                format!("replication slot {name} was dropped while walrelay was running (or this server, after a failover, never had it)"),
                "events committed since the last confirmed position may be lost; reconcile the outbox with Kafka, then restart walrelay (it creates a new slot). On PostgreSQL 17+ let standbys synchronise the slot (docs/operations.md, failover)",
            ));
        }
        let confirmed = super::creation::create(control, src, failover).await?;
        return Ok(Ensured { confirmed, created: true, in_use_by: None });
    };
    if slot.kind != "logical" || slot.plugin.as_deref() != Some("pgoutput") {
        return Err(Error::definite(
            format!(
                "slot {name} is not a logical pgoutput slot (type {}, plugin {})",
                slot.kind,
                slot.plugin.as_deref().unwrap_or("none")
            ),
            "point [source] slot at a pgoutput slot, or drop this one if nothing else uses it",
        ));
    }
    if !slot.same_database {
        return Err(Error::definite(
            format!("slot {name} belongs to database {}", slot.database.as_deref().unwrap_or("?")),
            "use the database of the slot in [source] url, or another slot name",
        ));
    }
    if slot.is_lost() || slot.invalidation_reason.is_some() {
        return Err(Error::definite(
            format!(
                "slot {name} is invalidated ({}): the WAL it needed is gone",
                slot.invalidation_reason.as_deref().unwrap_or("wal_status = lost")
            ),
            "events may have been lost; drop and recreate the slot, then reconcile the outbox with Kafka",
        ));
    }
    if slot.synced == Some(true) && control.server.in_recovery {
        return Err(Error::transient_msg(format!(
            "slot {name} on {} is a standby's synchronised copy; it becomes usable when the standby is promoted",
            control.endpoint
        )));
    }
    if failover && slot.failover == Some(false) {
        tracing::warn!(slot = %name,
            "the slot is not a failover slot, so a standby cannot synchronise it; make it one with ALTER_REPLICATION_SLOT on a replication connection (see docs/operations.md, failover), or set [source] failover = false");
    }
    Ok(Ensured {
        confirmed: slot.confirmed.unwrap_or_default(),
        created: false,
        in_use_by: slot.active.then_some(slot.active_pid).flatten(),
    })
}

/// The pid of the process streaming from the slot, if any (a stand-by names it in its log).
pub async fn holder(control: &Control, name: &str) -> Option<i32> {
    let row = control
        .query_opt(
            "cannot read the slot",
            "SELECT active_pid FROM pg_catalog.pg_replication_slots WHERE slot_name = $1 AND active",
            &[&name],
        )
        .await
        .ok()??;
    row.get(0)
}

/// Moves an inactive slot's confirmed position forward: used after a graceful stop when the
/// last status update may not have reached the server.
pub async fn advance(control: &Control, name: &str, to: Lsn) -> Result<()> {
    control
        .query_one(
            "cannot advance the slot",
            "SELECT 1 FROM pg_catalog.pg_replication_slot_advance($1, $2)",
            &[&name, &to],
        )
        .await?;
    Ok(())
}

/// How a wait for the slot to confirm a position ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmation {
    /// The slot's confirmed position reached the target.
    Reached(Lsn),
    /// It did not within the bound: the relay is down or behind. `active`: a relay streams.
    Behind { confirmed: Option<Lsn>, active: bool },
}

/// How long a slot may have no walsender before waiting for it to confirm is given up: longer
/// than a relay's backoff between sessions (2.5 s at most), so a relay reconnecting is waited
/// for, and a relay that is down is not waited for at all.
const NOBODY_STREAMS_FOR: std::time::Duration = std::time::Duration::from_secs(5);

/// Polls the slot until its confirmed position is at or past `target`, for at most `within`,
/// or until no walsender has streamed from it for [`NOBODY_STREAMS_FOR`]: then nothing would
/// move it. A missing or invalidated slot is a definite error: nothing it would have confirmed
/// can be trusted.
pub async fn wait_confirmed(
    control: &Control,
    name: &str,
    target: Lsn,
    within: std::time::Duration,
) -> Result<Confirmation> {
    let deadline = tokio::time::Instant::now() + within;
    let mut streamed_at = tokio::time::Instant::now();
    loop {
        let Some(s) = slot(control, name).await? else {
            return Err(Error::definite(
                format!("replication slot {name} does not exist"),
                "nothing can be purged without the slot that says what was relayed: run `walrelay setup` or `walrelay run`",
            ));
        };
        if s.is_lost() || s.invalidation_reason.is_some() {
            return Err(Error::definite(
                format!("slot {name} is invalidated: what it confirmed no longer tells what was relayed"),
                "purge nothing until the slot is recreated and the outbox reconciled with Kafka (docs/operations.md)",
            ));
        }
        let now = tokio::time::Instant::now();
        if s.active {
            streamed_at = now;
        }
        match s.confirmed {
            Some(c) if c >= target => return Ok(Confirmation::Reached(c)),
            confirmed if now >= deadline || now - streamed_at >= NOBODY_STREAMS_FOR => {
                return Ok(Confirmation::Behind { confirmed, active: s.active })
            }
            _ => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
        }
    }
}
