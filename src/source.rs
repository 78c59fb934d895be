//! PostgreSQL: the control connection (checks, publication, slot, catalog lookups) and the
//! replication stream.
//!
//! Nothing here reads the outbox table itself (I4): only `pg_catalog` views, `SHOW` and slot
//! functions. Rows arrive exclusively through the slot.

use std::time::Duration;

use pgwire_replication::{Lsn as WireLsn, ReplicationClient, ReplicationConfig};
use tokio::sync::oneshot;
use tokio_postgres::config::Host;
use tokio_postgres::{Client, NoTls};

use crate::config::{OutboxConfig, SourceConfig};
use crate::error::{Error, Result};
use crate::pgoutput::Lsn;

/// Session settings pinned on the walsender so text values are rendered the same way every time
/// (timestamps in ISO/UTC, floats exact).
const WALSENDER_OPTIONS: &str =
    "-c DateStyle=ISO -c TimeZone=UTC -c IntervalStyle=postgres -c extra_float_digits=3";

/// What the control connection learned before streaming.
#[derive(Debug, Clone)]
pub struct SlotState {
    /// Where the slot resumes: the last position a relay confirmed.
    pub confirmed_flush: Lsn,
    /// The outbox table's oid, to notice it being dropped.
    pub outbox_relid: u32,
}

/// Connects the control connection. The receiver resolves when the connection ends, so a
/// session notices a server going away (a fast shutdown waits for walrelay otherwise).
pub async fn connect_control(cfg: &SourceConfig) -> Result<(Client, oneshot::Receiver<()>)> {
    let tls = cfg.tls.client_config().map_err(|reason| {
        Error::definite(
            format!("cannot set up TLS to PostgreSQL: {reason}"),
            "fix sslmode / sslrootcert in [source] url",
        )
    })?;
    let (closed_tx, closed) = oneshot::channel();
    let client = match tls {
        None => {
            let (client, connection) = cfg
                .conn
                .connect(NoTls)
                .await
                .map_err(|e| classify_pg("cannot connect to PostgreSQL", e))?;
            tokio::spawn(watch_closed(connection, closed_tx));
            client
        }
        Some(tls) => {
            let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls);
            let (client, connection) = cfg
                .conn
                .connect(tls)
                .await
                .map_err(|e| classify_pg("cannot connect to PostgreSQL", e))?;
            tokio::spawn(watch_closed(connection, closed_tx));
            client
        }
    };
    Ok((client, closed))
}

async fn watch_closed<F>(connection: F, closed: oneshot::Sender<()>)
where
    F: std::future::Future<Output = Result<(), tokio_postgres::Error>>,
{
    if let Err(e) = connection.await {
        tracing::debug!(error = %e, "control connection closed");
    }
    let _ = closed.send(());
}

/// Checks what walrelay needs and creates the publication and slot when they are missing.
///
/// `create` is false once this process has streamed: a publication or slot that disappears
/// later was dropped by someone, and silently recreating it would hide lost events.
pub async fn prepare(
    client: &Client,
    src: &SourceConfig,
    outbox: &OutboxConfig,
    create: bool,
) -> Result<SlotState> {
    let wal_level: String = query_one(client, "SHOW wal_level", &[]).await?.get(0);
    if wal_level != "logical" {
        return Err(Error::definite(
            format!("wal_level is {wal_level}, not logical"),
            "set wal_level = logical in postgresql.conf and restart PostgreSQL",
        ));
    }
    let relid = outbox_oid(client, outbox).await?;
    ensure_publication(client, &src.publication, outbox, relid, create).await?;
    let confirmed_flush = ensure_slot(client, &src.slot, create).await?;
    Ok(SlotState { confirmed_flush, outbox_relid: relid })
}

async fn outbox_oid(client: &Client, outbox: &OutboxConfig) -> Result<u32> {
    let row = client
        .query_opt(
            "SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')",
            &[&outbox.schema, &outbox.table],
        )
        .await
        .map_err(|e| classify_pg("cannot look up the outbox table", e))?;
    match row {
        Some(row) => Ok(row.get::<_, u32>(0)),
        None => Err(Error::definite(
            format!(
                "outbox table {}.{} does not exist (or was dropped)",
                outbox.schema, outbox.table
            ),
            "create the table, or point [outbox] table at the existing one",
        )),
    }
}

async fn ensure_publication(
    client: &Client,
    publication: &str,
    outbox: &OutboxConfig,
    relid: u32,
    create: bool,
) -> Result<()> {
    let exists = client
        .query_opt(
            "SELECT pubinsert FROM pg_catalog.pg_publication WHERE pubname = $1",
            &[&publication],
        )
        .await
        .map_err(|e| classify_pg("cannot look up the publication", e))?;
    let Some(row) = exists else {
        if !create {
            return Err(Error::definite(
                format!("publication {publication} was dropped while walrelay was running"),
                "changes written while it was missing cannot be decoded with it: recreate the publication, move the slot past the gap (pg_replication_slot_advance) or create a new slot, and reconcile the outbox rows of the gap with Kafka",
            ));
        }
        // Identifiers are validated as plain lower-case names by config, and quoted anyway.
        let sql = format!(
            "CREATE PUBLICATION \"{publication}\" FOR TABLE \"{}\".\"{}\" WITH (publish = 'insert')",
            outbox.schema, outbox.table
        );
        client.batch_execute(&sql).await.map_err(|e| {
            Error::definite_with(
                format!("cannot create publication {publication}"),
                "grant the role CREATE on the database and ownership of the outbox table, or create the publication yourself: ".to_string() + &sql,
                e,
            )
        })?;
        tracing::info!(%publication, "created publication");
        return Ok(());
    };
    if !row.get::<_, bool>(0) {
        return Err(Error::definite(
            format!("publication {publication} does not publish INSERTs"),
            format!("ALTER PUBLICATION {publication} SET (publish = 'insert')"),
        ));
    }
    let covered = client
        .query_opt(
            "SELECT 1 FROM pg_catalog.pg_publication_rel pr JOIN pg_catalog.pg_publication p ON p.oid = pr.prpubid \
             WHERE p.pubname = $1 AND pr.prrelid = $2 \
             UNION ALL SELECT 1 FROM pg_catalog.pg_publication p WHERE p.pubname = $1 AND p.puballtables",
            &[&publication, &relid],
        )
        .await
        .map_err(|e| classify_pg("cannot inspect the publication", e))?;
    if covered.is_none() {
        return Err(Error::definite(
            format!(
                "publication {publication} does not include {}.{}",
                outbox.schema, outbox.table
            ),
            format!("ALTER PUBLICATION {publication} ADD TABLE {}.{}", outbox.schema, outbox.table),
        ));
    }
    Ok(())
}

/// Returns the slot's confirmed position, creating the slot when `create` allows.
async fn ensure_slot(client: &Client, slot: &str, create: bool) -> Result<Lsn> {
    let row = client
        .query_opt(
            "SELECT plugin, slot_type, database = current_database(), wal_status, confirmed_flush_lsn::text \
             FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|e| classify_pg("cannot look up the replication slot", e))?;
    let Some(row) = row else {
        if !create {
            return Err(Error::definite(
                format!("replication slot {slot} was dropped while walrelay was running"),
                "events committed since the last confirmed position may be lost; reconcile the outbox with Kafka, then restart walrelay (it creates a new slot)",
            ));
        }
        let row = client
            .query_one(
                "SELECT lsn::text FROM pg_catalog.pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&slot],
            )
            .await
            .map_err(|e| {
                Error::definite_with(
                    format!("cannot create replication slot {slot}"),
                    "the role needs the REPLICATION attribute, and max_replication_slots must have room",
                    e,
                )
            })?;
        let lsn = parse_lsn(row.get::<_, &str>(0))?;
        tracing::info!(%slot, lsn = %fmt_lsn(lsn), "created replication slot");
        return Ok(lsn);
    };
    let plugin: Option<String> = row.get(0);
    let kind: Option<String> = row.get(1);
    let same_db: Option<bool> = row.get(2);
    let wal_status: Option<String> = row.get(3);
    if kind.as_deref() != Some("logical") || plugin.as_deref() != Some("pgoutput") {
        return Err(Error::definite(
            format!(
                "slot {slot} is not a logical pgoutput slot (type {kind:?}, plugin {plugin:?})"
            ),
            "point [source] slot at a pgoutput slot, or drop this one if nothing else uses it",
        ));
    }
    if same_db != Some(true) {
        return Err(Error::definite(
            format!("slot {slot} belongs to another database"),
            "use the database of the slot in [source] url, or another slot name",
        ));
    }
    if wal_status.as_deref() == Some("lost") {
        return Err(Error::definite(
            format!("slot {slot} is invalidated (wal_status = lost): the WAL it needed is gone"),
            "events may have been lost; drop and recreate the slot, then reconcile the outbox with Kafka",
        ));
    }
    let confirmed: Option<String> = row.get(4);
    let confirmed_flush = confirmed.as_deref().map(parse_lsn).transpose()?.unwrap_or(0);
    Ok(confirmed_flush)
}

/// Whether the outbox table still exists under the same oid; called periodically, since a
/// dropped table produces no message on the stream.
pub async fn check_table(client: &Client, outbox: &OutboxConfig, relid: u32) -> Result<()> {
    let found = outbox_oid(client, outbox).await?;
    if found != relid {
        return Err(Error::definite(
            format!("outbox table {}.{} was dropped and recreated", outbox.schema, outbox.table),
            "add the new table to the publication (ALTER PUBLICATION … ADD TABLE) and restart walrelay",
        ));
    }
    Ok(())
}

/// `attnotnull` of the relation's columns by name, from the catalog (never the table).
pub async fn not_null_columns(client: &Client, relid: u32) -> Result<Vec<(String, bool)>> {
    let rows = client
        .query(
            "SELECT attname::text, attnotnull FROM pg_catalog.pg_attribute \
             WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            &[&relid],
        )
        .await
        .map_err(|e| classify_pg("cannot read the outbox table's columns from the catalog", e))?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// The slot's confirmed position as the server sees it.
pub async fn slot_confirmed(client: &Client, slot: &str) -> Result<Option<(Lsn, bool)>> {
    let row = client
        .query_opt(
            "SELECT confirmed_flush_lsn::text, active FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|e| classify_pg("cannot read the slot", e))?;
    match row {
        None => Ok(None),
        Some(r) => {
            let lsn: Option<String> = r.get(0);
            Ok(Some((lsn.as_deref().map(parse_lsn).transpose()?.unwrap_or(0), r.get(1))))
        }
    }
}

/// Moves an inactive slot's confirmed position forward: used after a graceful stop when the
/// last status update may not have reached the server.
pub async fn advance_slot(client: &Client, slot: &str, to: Lsn) -> Result<()> {
    client
        .query_one(
            "SELECT 1 FROM pg_catalog.pg_replication_slot_advance($1, $2::text::pg_lsn)",
            &[&slot, &fmt_lsn(to)],
        )
        .await
        .map_err(|e| classify_pg("cannot advance the slot", e))?;
    Ok(())
}

/// Opens the replication stream. `confirmed` is reported back until the relay confirms more,
/// so the slot never moves on a position this process has not made durable.
pub async fn start_stream(src: &SourceConfig, confirmed: Lsn) -> Result<ReplicationClient> {
    let conn = &src.conn;
    let host = match conn.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_string(),
    };
    let port = conn.get_ports().first().copied().unwrap_or(5432);
    let password =
        conn.get_password().map(|p| String::from_utf8_lossy(p).into_owned()).unwrap_or_default();
    let tls = src.tls.replication();
    let cfg = ReplicationConfig::new(
        host,
        conn.get_user().unwrap_or("postgres"),
        password,
        conn.get_dbname().unwrap_or("postgres"),
        src.slot.clone(),
        src.publication.clone(),
    )
    .with_port(port)
    .with_tls(tls)
    .with_start_lsn(WireLsn(0))
    .with_ack_lsn(WireLsn(confirmed))
    .with_status_interval(src.status_interval)
    .with_wakeup_interval(src.status_interval.max(Duration::from_millis(500)))
    .with_buffer_size(1024)
    .with_options(WALSENDER_OPTIONS)
    .with_application_name("walrelay");
    ReplicationClient::connect(cfg).await.map_err(classify_wire)
}

/// Replication errors: a slot held by another process or a dropped slot are worth telling apart.
pub fn classify_wire(e: pgwire_replication::PgWireError) -> Error {
    let text = e.to_string();
    if let Some(at) = text.find("is active for PID") {
        let pid = text[at + "is active for PID".len()..]
            .trim()
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap_or("?");
        return Error::Busy {
            what: format!(
                "the replication slot is in use by another process (pid {pid}); standing by"
            ),
        };
    }
    if text.contains("does not exist") && text.contains("replication slot") {
        return Error::definite_with(
            "the replication slot was dropped",
            "events committed since the last confirmed position may be lost; recreate the slot (walrelay run creates it) and reconcile",
            e,
        );
    }
    if text.contains("publication") && text.contains("does not exist") {
        return Error::definite_with(
            "the publication was dropped",
            "changes written while it was missing cannot be decoded with it: recreate the publication, move the slot past the gap (pg_replication_slot_advance) or create a new slot, and reconcile the outbox rows of the gap with Kafka",
            e,
        );
    }
    if text.contains("can no longer get changes") || text.contains("invalidated") {
        return Error::definite_with(
            "the replication slot was invalidated",
            "the WAL it needed is gone; drop and recreate the slot, then reconcile the outbox with Kafka",
            e,
        );
    }
    if e.is_tls() {
        return Error::definite_with(
            "TLS to PostgreSQL failed on the replication connection",
            "check sslmode and sslrootcert in [source] url: the CA must sign the server's certificate, and verify-full needs the host name in it",
            e,
        );
    }
    if e.is_auth() {
        return Error::definite_with(
            "PostgreSQL rejected the credentials of the replication connection",
            "check [source] url and PGPASSWORD",
            e,
        );
    }
    Error::transient("replication stream failed", e)
}

/// Control-plane errors: authentication and privilege problems stop the relay, the rest retries.
const TLS_HINT: &str = "check sslmode and sslrootcert in [source] url: the CA must sign the server's certificate, and verify-full needs the host name in it";

pub fn classify_pg(what: &str, e: tokio_postgres::Error) -> Error {
    use tokio_postgres::error::SqlState;
    let definite = e.code().is_some_and(|c| {
        [
            SqlState::INVALID_PASSWORD,
            SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
            SqlState::INSUFFICIENT_PRIVILEGE,
            SqlState::INVALID_CATALOG_NAME,
        ]
        .contains(c)
    });
    // tokio-postgres has no public error kind for TLS; its message names the handshake.
    let tls = e.to_string().contains("TLS");
    if tls {
        return Error::definite_with(what.to_string(), TLS_HINT, e);
    }
    if definite {
        Error::definite_with(
            what.to_string(),
            "check [source] url: the role, its password and its privileges",
            e,
        )
    } else {
        Error::transient(what.to_string(), e)
    }
}

async fn query_one(
    client: &Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<tokio_postgres::Row> {
    client.query_one(sql, params).await.map_err(|e| classify_pg(sql, e))
}

pub fn parse_lsn(text: &str) -> Result<Lsn> {
    let bad = || {
        Error::definite(
            format!("unexpected LSN text {text:?} from PostgreSQL"),
            "report this as a bug",
        )
    };
    let (hi, lo) = text.split_once('/').ok_or_else(bad)?;
    let hi = u64::from_str_radix(hi, 16).map_err(|_| bad())?;
    let lo = u64::from_str_radix(lo, 16).map_err(|_| bad())?;
    Ok((hi << 32) | lo)
}

pub fn fmt_lsn(lsn: Lsn) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_text_round_trips() {
        assert_eq!(parse_lsn("16/B374D848").unwrap(), 0x16_B374_D848);
        assert_eq!(fmt_lsn(0x16_B374_D848), "16/B374D848");
        assert_eq!(fmt_lsn(0), "0/0");
        assert!(parse_lsn("nonsense").is_err());
    }
}
