//! The PostgreSQL checks: the server and its settings, the role, the slot, and whether the slot
//! survives a failover.

use tokio_postgres::config::{Host, TargetSessionAttrs};

use super::{offsets, tables, Report};
use crate::admin::{connect, describe_source, human_bytes};
use crate::config::{Config, SourceConfig};
use crate::error::Result;
use crate::source::connect::{single_host, Endpoint};
use crate::source::slot::{self, Slot, FAILOVER_SINCE};
use crate::source::Control;

pub(super) async fn run(config: &Config, r: &mut Report) {
    let src = &config.source;
    let target = describe_source(src);
    let control = match connect(src).await {
        Ok(c) => c,
        Err(e) => {
            r.fail(
                "postgres",
                format!("cannot connect to {target}: {}", e.chain()),
                "check [source] url (host, port, database, user), PGPASSWORD / the password file, and that pg_hba.conf admits this host; the remaining PostgreSQL checks were skipped",
            );
            return;
        }
    };
    if let Err(e) = checks(config, &control, r).await {
        r.fail(
            "postgres",
            format!("a catalog query failed: {}", e.chain()),
            "check the role's privileges and the server log; the remaining PostgreSQL checks were skipped",
        );
    }
}

async fn checks(config: &Config, control: &Control, r: &mut Report) -> Result<()> {
    let src = &config.source;
    let row = control
        .query_one(
            "cannot read the server's settings",
            "SELECT current_user::text, current_setting('wal_level'), \
             current_setting('max_replication_slots')::int, current_setting('max_wal_senders')::int, \
             (SELECT count(*)::int FROM pg_catalog.pg_replication_slots), \
             (SELECT count(*)::int FROM pg_catalog.pg_stat_activity WHERE backend_type = 'walsender'), \
             current_setting('max_slot_wal_keep_size')",
            &[],
        )
        .await?;
    let role: String = row.get(0);
    let wal_level: String = row.get(1);
    let (max_slots, max_senders): (i32, i32) = (row.get(2), row.get(3));
    let (used_slots, used_senders): (i32, i32) = (row.get(4), row.get(5));
    let keep_size: String = row.get(6);
    let server = &control.server;
    r.ok(
        "postgres",
        format!(
            "connected to {} ({}) as role {role} (PostgreSQL {})",
            describe_source(src),
            control.endpoint,
            server.version
        ),
    );
    if server.version_num < 130000 {
        r.fail(
            "postgres version",
            format!(
                "PostgreSQL {} is older than 13 (no wal_status, no max_slot_wal_keep_size)",
                server.version
            ),
            "upgrade PostgreSQL to 13 or later",
        );
        return Ok(());
    }
    if server.in_recovery {
        r.warn(
            "postgres role",
            "this server is a standby (in recovery): the publication can't be created here and the slot must exist on it",
            "point [source] url at the primary (with several hosts, add target_session_attrs=read-write), unless you decode on a PostgreSQL 16+ standby on purpose",
        );
    }

    if wal_level == "logical" {
        r.ok("wal_level", "logical");
    } else {
        r.fail(
            "wal_level",
            format!("is {wal_level}, logical decoding needs logical"),
            "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL",
        );
    }

    messages(config, server, r);

    // The slot first: whether it exists decides what the other checks require.
    let slot = slot::slot(control, &src.slot).await?;
    let slot_active = slot.as_ref().is_some_and(|s| s.active);
    let what = "max_replication_slots";
    if slot.is_some() {
        r.ok(what, format!("{used_slots} of {max_slots} in use, slot {} among them", src.slot));
    } else if used_slots < max_slots {
        r.ok(what, format!("{used_slots} of {max_slots} in use; room for slot {}", src.slot));
    } else {
        r.fail(
            what,
            format!("all {max_slots} in use; slot {} can't be created", src.slot),
            "drop an unused slot (SELECT slot_name, active FROM pg_replication_slots), or raise max_replication_slots and restart PostgreSQL",
        );
    }
    let what = "max_wal_senders";
    if slot_active {
        r.ok(what, format!("{used_senders} of {max_senders} in use, the relay streaming from the slot among them"));
    } else if used_senders < max_senders {
        r.ok(
            what,
            format!("{used_senders} of {max_senders} in use; room for the relay's connection"),
        );
    } else {
        r.fail(
            what,
            format!("all {max_senders} WAL senders are in use; the relay's replication connection would be refused"),
            "raise max_wal_senders and restart PostgreSQL, or stop an idle replication client",
        );
    }

    let privileges = privileges(control, &role, r).await?;
    tables::run(config, control, &privileges, r).await?;
    super::tenants::run(config, control, r).await?;
    slot_checks(src, slot.as_ref(), &keep_size, r);
    if slot.is_none() {
        creation_blockers(control, &src.slot, r).await?;
    }
    failover(config, control, slot.as_ref(), r).await?;
    offsets::run(config, slot.as_ref(), r).await;
    Ok(())
}

/// The logical messages selected as events, and whether this server can send them: pgoutput's
/// `messages` option exists from PostgreSQL 14 on (Debezium asks for it only there too).
fn messages(config: &Config, server: &crate::source::connect::Server, r: &mut Report) {
    let Some(selection) = &config.messages else {
        return;
    };
    let what = "logical messages";
    if server.version_num < 140000 {
        r.fail(
            what,
            format!(
                "PostgreSQL {} cannot send logical decoding messages to pgoutput (its `messages` option needs 14 or later), so no message would be relayed",
                server.version
            ),
            "upgrade PostgreSQL to 14 or later, or write the events as rows of an outbox table and remove [debezium] message.prefix.include.list / exclude.list",
        );
    } else {
        r.ok(what, selection.describe());
    }
}

/// What the role may do, for the publication check.
pub(super) struct Privileges {
    pub superuser: bool,
    pub create_on_db: bool,
}

async fn privileges(control: &Control, role: &str, r: &mut Report) -> Result<Privileges> {
    let row = control
        .query_one(
            "cannot read the role's privileges",
            "SELECT r.rolsuper, r.rolreplication, \
             EXISTS (SELECT 1 FROM pg_catalog.pg_roles m WHERE m.rolname = 'rds_replication' \
                     AND pg_catalog.pg_has_role(r.oid, m.oid, 'MEMBER')), \
             pg_catalog.has_database_privilege(current_database(), 'CREATE') \
             FROM pg_catalog.pg_roles r WHERE r.rolname = current_user",
            &[],
        )
        .await?;
    let (superuser, replication, rds_replication): (bool, bool, bool) =
        (row.get(0), row.get(1), row.get(2));
    let what = "role privileges";
    if superuser {
        r.ok(what, format!("{role} is a superuser"));
    } else if replication || rds_replication {
        let how = if replication { "REPLICATION" } else { "member of rds_replication" };
        r.ok(what, format!("{role} has {how}"));
    } else {
        r.fail(
            what,
            format!("{role} has neither REPLICATION nor superuser, so it can't stream from a slot"),
            format!("ALTER ROLE {role} REPLICATION (on RDS/Aurora: GRANT rds_replication TO {role}), and a pg_hba.conf entry admitting it to this database (logical replication connections match database entries, not the `replication` keyword)"),
        );
    }
    Ok(Privileges { superuser, create_on_db: row.get(3) })
}

/// A slot created now waits for every transaction holding an xid: name them before `run` or
/// `setup` sits there silently.
async fn creation_blockers(control: &Control, slot: &str, r: &mut Report) -> Result<()> {
    let what = format!("slot {slot} creation");
    let blockers = crate::source::creation::would_block(control).await?;
    if blockers.is_empty() {
        r.ok(&what, "no open transaction holds an xid; creating the slot need not wait");
    } else {
        let list: Vec<String> = blockers.iter().map(|b| b.to_string()).collect();
        r.warn(
            &what,
            format!("creating the slot would wait until these transactions end: {}", list.join("; ")),
            "commit or roll them back (or pg_terminate_backend the pid) before `walrelay run` or `walrelay setup` creates the slot; until then the creation waits, and says so in the log every 10 s",
        );
    }
    Ok(())
}

fn slot_checks(src: &SourceConfig, slot: Option<&Slot>, keep_size: &str, r: &mut Report) {
    let name = &src.slot;
    let what = format!("slot {name}");
    let Some(s) = slot else {
        r.ok(
            &what,
            "does not exist yet — `walrelay run` (or `walrelay setup`) creates it with pgoutput; rows committed before it exists are not relayed",
        );
        return;
    };
    let confirmed = s.confirmed.map_or("none".to_string(), |l| l.to_string());
    if s.kind != "logical" || s.plugin.as_deref() != Some("pgoutput") {
        r.fail(
            &what,
            format!("is a {} slot with plugin {}, walrelay needs a logical pgoutput slot", s.kind, s.plugin.as_deref().unwrap_or("none")),
            "set [source] slot to another name (walrelay creates it), or drop this slot if nothing uses it",
        );
    } else if !s.same_database {
        r.fail(
            &what,
            format!("belongs to database {}, not this one", s.database.as_deref().unwrap_or("?")),
            "use that database in [source] url, or another slot name",
        );
    } else {
        r.ok(&what, format!("logical, pgoutput, confirmed LSN {confirmed}"));
    }
    let what = format!("slot {name} activity");
    match s.active_pid {
        Some(pid) if s.creating => r.warn(
            &what,
            format!("creating: backend pid {pid} is creating the slot and waits for running transactions to end"),
            "see the creating relay's log (it names the transactions every 10 s), or SELECT pg_blocking_pids(pid); commit or roll them back",
        ),
        Some(pid) if s.active => r.ok(
            &what,
            format!("active, walsender pid {pid} streams from it (another relay started now stands by until it goes)"),
        ),
        _ => r.ok(&what, "inactive — nothing streams from it now; WAL accumulates until a relay connects"),
    }
    let what = format!("slot {name} WAL");
    let retained_text = match (s.retained_bytes(), s.restart_lsn) {
        (Some(b), Some(lsn)) => format!("retains {} (restart LSN {lsn})", human_bytes(b as i64)),
        _ => "retains no WAL".to_string(),
    };
    let limit = if keep_size == "-1" {
        "max_slot_wal_keep_size = -1: no limit, an abandoned slot can fill the disk".to_string()
    } else {
        match s.safe_wal_size {
            Some(left) => format!(
                "max_slot_wal_keep_size = {keep_size}, {} left before invalidation",
                human_bytes(left)
            ),
            None => format!("max_slot_wal_keep_size = {keep_size}"),
        }
    };
    match s.wal_status.as_deref() {
        Some("lost") => r.fail(
            &what,
            "wal_status = lost: the WAL the slot needed was removed, events since its confirmed LSN can't be decoded",
            "walrelay teardown --yes, then walrelay setup, and reconcile the outbox with Kafka for the gap",
        ),
        Some("unreserved") => r.warn(
            &what,
            format!("wal_status = unreserved: {retained_text}, beyond max_slot_wal_keep_size; the next checkpoint may invalidate the slot"),
            "start the relay now (or find why it is behind), or raise max_slot_wal_keep_size",
        ),
        Some(status) => r.ok(&what, format!("wal_status = {status}, {retained_text}; {limit}")),
        None => r.ok(&what, format!("{retained_text}; {limit}")),
    }
}

/// Whether the slot survives the loss of this server: on 17+ a failover slot that the
/// standbys synchronise; before 17 it cannot, which is said plainly where standbys exist.
async fn failover(
    config: &Config,
    control: &Control,
    slot: Option<&Slot>,
    r: &mut Report,
) -> Result<()> {
    let src = &config.source;
    let name = &src.slot;
    let what = "failover";
    let standbys = physical_standbys(control).await?;
    let other_hosts = src.conn.get_hosts().len() > 1;
    if control.server.version_num < FAILOVER_SINCE {
        if standbys.is_empty() && !other_hosts {
            r.ok(
                what,
                format!(
                    "no standby streams from this server; PostgreSQL {} has no failover slots",
                    control.server.version
                ),
            );
        } else {
            r.warn(
                what,
                format!(
                    "PostgreSQL {} has no failover slots: after a failover the promoted standby has no slot {name}, walrelay stops (\"slot was dropped\") and events committed after its last confirmed position on the old primary are not relayed",
                    control.server.version
                ),
                "upgrade to PostgreSQL 17+ (failover slots), or after a failover create the slot on the new primary and reconcile the outbox with Kafka for the gap (docs/operations.md, failover)",
            );
        }
        return Ok(());
    }
    match (slot.and_then(|s| s.failover), crate::source::slot::wants_failover(src, control)) {
        (Some(true), _) => r.ok(&format!("slot {name} failover"), "a failover slot: standbys with sync_replication_slots = on keep a copy"),
        (None, Ok(true)) => r.ok(&format!("slot {name} failover"), "will be created as a failover slot"),
        (None, _) => r.warn(
            &format!("slot {name} failover"),
            "will be created without failover ([source] failover = false): a failover loses it",
            "remove failover = false from [source]",
        ),
        (Some(false), _) => r.warn(
            &format!("slot {name} failover"),
            "is not a failover slot: no standby can synchronise it, so a failover loses it",
            format!("on a replication connection (psql \"dbname=… replication=database\"): ALTER_REPLICATION_SLOT {name} ( FAILOVER true ), with no relay streaming from it"),
        ),
    }
    let synchronized: String = control
        .query_one(
            "cannot read synchronized_standby_slots",
            "SELECT current_setting('synchronized_standby_slots', true)",
            &[],
        )
        .await?
        .get::<_, Option<String>>(0)
        .unwrap_or_default();
    let physical: Vec<&str> = standbys.iter().filter_map(|s| s.slot.as_deref()).collect();
    if synchronized.trim().is_empty() {
        let fix = match physical.first() {
            Some(one) => format!("ALTER SYSTEM SET synchronized_standby_slots = '{one}'; SELECT pg_reload_conf();"),
            None => "give the standby a physical slot (primary_slot_name), then ALTER SYSTEM SET synchronized_standby_slots = '<that slot>'; SELECT pg_reload_conf();".to_string(),
        };
        r.warn(
            "synchronized_standby_slots",
            "is empty: walrelay may confirm changes a standby has not received, and that standby's copy of the slot can then be unusable after promotion",
            fix,
        );
    } else {
        r.ok(
            "synchronized_standby_slots",
            format!("{synchronized}: changes reach walrelay only after those standbys have them"),
        );
    }
    if standbys.is_empty() && !other_hosts {
        r.warn(
            "standbys",
            "no standby streams from this server, so nothing keeps a copy of the slot",
            "add a physical standby with primary_slot_name, sync_replication_slots = on, hot_standby_feedback = on and dbname in primary_conninfo (docs/operations.md, failover)",
        );
    }
    if other_hosts {
        standby_hosts(config, control, r).await;
    }
    Ok(())
}

struct Standby {
    /// The physical slot it streams through, if any.
    slot: Option<String>,
}

async fn physical_standbys(control: &Control) -> Result<Vec<Standby>> {
    let rows = control
        .query(
            "cannot list the standbys",
            "SELECT s.slot_name::text FROM pg_catalog.pg_stat_replication r \
             LEFT JOIN pg_catalog.pg_replication_slots s ON s.active_pid = r.pid AND s.slot_type = 'physical' \
             WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots l \
                               WHERE l.active_pid = r.pid AND l.slot_type = 'logical')",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|row| Standby { slot: row.get(0) }).collect())
}

/// The other hosts of a multi-host URL: each standby must synchronise the slot for walrelay to
/// carry on there after a promotion.
async fn standby_hosts(config: &Config, control: &Control, r: &mut Report) {
    let src = &config.source;
    for (i, host) in src.conn.get_hosts().iter().enumerate() {
        if *host == control.endpoint.host && port_of(&src.conn, i) == control.endpoint.port {
            continue;
        }
        let label = format!(
            "standby {}:{}",
            match host {
                Host::Tcp(h) => h.clone(),
                Host::Unix(p) => p.display().to_string(),
            },
            port_of(&src.conn, i)
        );
        let one = SourceConfig { conn: single(&src.conn, i), ..src.clone() };
        let standby = match crate::source::connect(&one).await {
            Ok(c) => c,
            Err(e) => {
                r.warn(
                    &label,
                    format!("cannot connect: {}", e.chain()),
                    "check that the host is up and admits this role",
                );
                continue;
            }
        };
        if !standby.server.in_recovery {
            r.warn(
                &label,
                "is not in recovery: two primaries in one URL?",
                "list the primary and its standbys only",
            );
            continue;
        }
        match standby_settings(&standby, &src.slot).await {
            Ok(problems) if problems.is_empty() => {
                r.ok(&label, format!("synchronises slot {}", src.slot))
            }
            Ok(problems) => {
                for (problem, fix) in problems {
                    r.warn(&label, problem, fix);
                }
            }
            Err(e) => r.warn(
                &label,
                format!("cannot read its settings: {}", e.chain()),
                "run check as a role that can read them (pg_read_all_settings)",
            ),
        }
    }
}

fn port_of(conn: &tokio_postgres::Config, i: usize) -> u16 {
    let ports = conn.get_ports();
    ports.get(i).or(ports.first()).copied().unwrap_or(5432)
}

/// The `i`-th host of `conn` alone, with every other setting the relay would use (password from
/// `.pgpass`, TLS, keepalives), any session accepted: a standby is what is looked at.
fn single(conn: &tokio_postgres::Config, i: usize) -> tokio_postgres::Config {
    let endpoint =
        Endpoint { host: conn.get_hosts()[i].clone(), addr: None, port: port_of(conn, i) };
    let mut c = single_host(conn, &endpoint);
    c.target_session_attrs(TargetSessionAttrs::Any).application_name("walrelay-check");
    c
}

/// What a standby lacks to synchronise `slot` (PostgreSQL 17's slot synchronisation), each
/// with its fix. Empty when it has it all and already holds a synchronised copy.
async fn standby_settings(standby: &Control, slot: &str) -> Result<Vec<(String, String)>> {
    let row = standby
        .query_one(
            "cannot read the standby's settings",
            "SELECT current_setting('sync_replication_slots', true), current_setting('hot_standby_feedback'), \
             current_setting('primary_slot_name'), current_setting('primary_conninfo', true), \
             (SELECT synced FROM pg_catalog.pg_replication_slots WHERE slot_name = $1)",
            &[&slot],
        )
        .await?;
    let on = |v: Option<String>| v.as_deref() == Some("on");
    let mut problems = Vec::new();
    if !on(row.get(0)) {
        problems.push(("sync_replication_slots is off".into(), "ALTER SYSTEM SET sync_replication_slots = on; SELECT pg_reload_conf(); (on the standby)".into()));
    }
    if !on(row.get(1)) {
        problems.push((
            "hot_standby_feedback is off".into(),
            "ALTER SYSTEM SET hot_standby_feedback = on; SELECT pg_reload_conf(); (on the standby)"
                .into(),
        ));
    }
    if row.get::<_, Option<String>>(2).unwrap_or_default().is_empty() {
        problems.push((
            "primary_slot_name is empty".into(),
            "give the standby a physical slot on the primary and set primary_slot_name".into(),
        ));
    }
    if let Some(conninfo) = row.get::<_, Option<String>>(3) {
        if !conninfo.contains("dbname") {
            problems.push((
                "primary_conninfo names no dbname, which slot synchronisation needs".into(),
                "add dbname=<the outbox database> to primary_conninfo".into(),
            ));
        }
    }
    if problems.is_empty() && row.get::<_, Option<bool>>(4) != Some(true) {
        problems.push((format!("holds no synchronised copy of slot {slot} yet"), "wait for the slot sync worker (or SELECT pg_sync_replication_slots() on the standby); the primary's slot must be a failover slot".into()));
    }
    Ok(problems)
}
