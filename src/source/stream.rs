//! The replication stream: `START_REPLICATION` on the session's server, and what its errors
//! mean.
//!
//! pgwire-replication runs the connection (CopyBoth framing, keepalive replies, status updates
//! carrying the position the relay hands it). walrelay opens it on the same server as the
//! control connection ([`Endpoint`](super::Endpoint)) and waits until the server has accepted
//! `START_REPLICATION`, so a slot held by another relay or a missing slot is known when the
//! session opens, not somewhere in the event loop.

use std::time::Duration;

use pgwire_replication::{PgWireError, ReplicationClient, ReplicationConfig};
use tokio_postgres::config::Host;

use super::connect::Control;
use super::error::{wire_class, Class, DENIED_HINT, TLS_HINT};
use super::{catalog, slot};
use crate::config::SourceConfig;
use crate::error::{Error, Result};
use crate::lsn::Lsn;

/// Session settings pinned on the walsender so text values are rendered the same way every time
/// (timestamps in ISO/UTC, floats exact). They come after the user's own `options`, so they win.
const WALSENDER_OPTIONS: &str =
    "-c DateStyle=ISO -c TimeZone=UTC -c IntervalStyle=postgres -c extra_float_digits=3";

/// How long the server may take to accept `START_REPLICATION` (it may first wait for running
/// transactions while building the slot's snapshot).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Opens the replication stream on the control connection's server. `confirmed` is reported
/// back until the relay confirms more, so the slot never moves on a position this process has
/// not made durable.
pub async fn start(
    src: &SourceConfig,
    control: &Control,
    confirmed: Lsn,
) -> Result<ReplicationClient> {
    let conn = &control.config;
    let endpoint = &control.endpoint;
    let (host, sni) = match (&endpoint.host, endpoint.addr) {
        (Host::Unix(dir), _) => (dir.display().to_string(), None),
        (Host::Tcp(name), Some(addr)) => (addr.to_string(), Some(name.clone())),
        (Host::Tcp(name), None) => (name.clone(), None),
    };
    let mut tls = src.tls.replication();
    if let Some(name) = sni.filter(|n| n.parse::<std::net::IpAddr>().is_err()) {
        tls = tls.with_sni_hostname(name);
    }
    let options = match conn.get_options() {
        Some(own) if !own.trim().is_empty() => format!("{own} {WALSENDER_OPTIONS}"),
        _ => WALSENDER_OPTIONS.to_string(),
    };
    let password =
        conn.get_password().map(|p| String::from_utf8_lossy(p).into_owned()).unwrap_or_default();
    let cfg = ReplicationConfig::new(
        host,
        conn.get_user().unwrap_or("postgres"),
        password,
        conn.get_dbname().unwrap_or("postgres"),
        src.slot.clone(),
        src.publication.clone(),
    )
    .with_port(endpoint.port)
    .with_tls(tls)
    .with_start_lsn(pgwire_replication::Lsn(0))
    .with_ack_lsn(confirmed.into())
    .with_status_interval(src.status_interval)
    .with_wakeup_interval(src.status_interval.max(Duration::from_millis(500)))
    .with_buffer_size(1024)
    .with_options(options)
    .with_application_name(conn.get_application_name().unwrap_or("walrelay"));
    let mut client = ReplicationClient::connect_gated(cfg).await.map_err(|e| (e, "connect"));
    let started = match &mut client {
        Ok(client) => {
            let _ = client.start().await;
            tokio::time::timeout(START_TIMEOUT, client.wait_started()).await
        }
        Err(_) => Ok(Ok(())),
    };
    match (client, started) {
        (Ok(client), Ok(Ok(()))) => Ok(client),
        (Ok(_), Ok(Err(e))) | (Err((e, _)), _) => Err(classify(e, src, control).await),
        (Ok(_), Err(_)) => Err(Error::transient_msg(format!(
            "PostgreSQL at {endpoint} did not accept START_REPLICATION within {} s",
            START_TIMEOUT.as_secs()
        ))),
    }
}

/// What an error of the replication connection means, asking the catalog where the server's
/// code alone cannot tell (`42704` is the code for a missing slot and a missing publication).
pub async fn classify(e: PgWireError, src: &SourceConfig, control: &Control) -> Error {
    let name = &src.slot;
    match wire_class(&e) {
        Class::SlotInUse => {
            slot::in_use(name, slot::holder(control, name).await)
        }
        Class::Missing => match slot::slot(control, name).await {
            Ok(None) => Error::definite_with(
                format!("the replication slot {name} was dropped"),
                "events committed since the last confirmed position may be lost; recreate the slot (walrelay run creates it) and reconcile",
                e,
            ),
            Ok(Some(_)) => match catalog::publication(control, &src.publication).await {
                Ok(None) => Error::definite_with(
                    format!("the publication {} was dropped", src.publication),
                    "changes written while it was missing cannot be decoded with it: recreate the publication, move the slot past the gap (pg_replication_slot_advance) or create a new slot, and reconcile the outbox rows of the gap with Kafka",
                    e,
                ),
                Ok(Some(_)) => Error::definite_with(
                    "PostgreSQL reports an object of the replication stream missing",
                    "see the server's message; report it if slot and publication both exist",
                    e,
                ),
                Err(lookup) => lookup,
            },
            Err(lookup) => lookup,
        },
        Class::WrongState | Class::WalRemoved => match slot::slot(control, name).await {
            Ok(Some(s)) if s.synced == Some(true) && control.server.in_recovery => {
                Error::transient("the slot is a standby's synchronised copy until promotion", e)
            }
            Ok(Some(s)) if s.is_lost() || s.invalidation_reason.is_some() => Error::definite_with(
                format!("the replication slot {name} was invalidated"),
                "the WAL it needed is gone; drop and recreate the slot, then reconcile the outbox with Kafka",
                e,
            ),
            Ok(_) => Error::definite_with(
                "PostgreSQL cannot stream from the slot in its current state",
                "see the server's message (wal_level must be logical; the slot must belong to this database and be valid)",
                e,
            ),
            Err(lookup) => lookup,
        },
        Class::Tls => Error::definite_with("TLS to PostgreSQL failed on the replication connection", TLS_HINT, e),
        Class::Denied => Error::definite_with(
            "PostgreSQL refused the replication connection",
            DENIED_HINT,
            e,
        ),
        Class::NoDatabase => Error::definite_with(
            "the database of the replication connection does not exist",
            "fix the database name in [source] url (or PGDATABASE)",
            e,
        ),
        Class::Invalid => Error::definite_with(
            "PostgreSQL refused the replication command",
            "report this as a bug, with the server version",
            e,
        ),
        Class::Transient => Error::transient("replication stream failed", e),
    }
}
