//! The latency floor of any WAL-reading relay: a minimal pgoutput client (pgwire-replication +
//! `walrelay::pgoutput::decode`, no Kafka) that notes when each steady-phase row arrives.
//! commit → this = what PostgreSQL's WAL flush + logical decoding + walsender cost; walrelay's
//! commit → consumer latency minus this ≈ what walrelay and the broker add.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pgwire_replication::{Lsn, ReplicationClient, ReplicationConfig, ReplicationEvent, TlsConfig};
use walrelay::pgoutput::{self, Message, Value};

use crate::measure::now_us;
use crate::steady::{phases, Clocks, SteadyRunLike};
use crate::support::{services, TestDb};
use crate::systems::Ctx;
use crate::workload::parse_event_id;

pub async fn wal_latency(
    ctx: &Ctx<'_>,
    db: &TestDb,
    publication: &str,
    rates: &[u64],
    seconds: f64,
) -> SteadyRunLike {
    let slot = crate::support::unique("wallat");
    let c = db.connect().await;
    c.query_one("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", &[&slot])
        .await
        .expect("create slot");
    let cfg = ReplicationConfig::new(
        "127.0.0.1",
        "postgres",
        "",
        db.name.clone(),
        slot.clone(),
        publication.to_string(),
    )
    .with_port(services().pg.port())
    .with_tls(TlsConfig::disabled())
    .with_start_lsn(Lsn(0))
    .with_status_interval(std::time::Duration::from_millis(100));
    let mut stream = ReplicationClient::connect(cfg).await.expect("replication connection");
    let clocks = Clocks::new(crate::steady::total_events(rates, seconds));
    let stop = Arc::new(AtomicBool::new(false));
    let (st, recv) = (stop.clone(), clocks.recv_us.clone());
    let reader = tokio::spawn(async move {
        while !st.load(Ordering::Relaxed) {
            let ev =
                tokio::time::timeout(std::time::Duration::from_millis(100), stream.recv()).await;
            let Ok(ev) = ev else { continue };
            match ev {
                Ok(Some(ReplicationEvent::XLogData { data, .. })) => {
                    if let Ok(Message::Insert(ins)) = pgoutput::decode(&data) {
                        if let Some(Value::Text(id)) = ins.new.0.first() {
                            if let Some((_, n)) = parse_event_id(id) {
                                if let Some(slot) = recv.get(n as usize) {
                                    let _ = slot.compare_exchange(
                                        0,
                                        now_us(),
                                        Ordering::Relaxed,
                                        Ordering::Relaxed,
                                    );
                                }
                            }
                        }
                    }
                }
                Ok(Some(ReplicationEvent::Commit { end_lsn, .. })) => {
                    stream.update_applied_lsn(end_lsn)
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        let _ = stream.shutdown().await;
    });
    let lat = phases(
        db,
        rates,
        seconds,
        1,
        ctx.aggregates,
        &clocks,
        ctx.meter,
        0,
        ctx.sync_commit,
        crate::workload::FLOOR_GROUP,
        crate::steady::Observer::Tail,
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    let _ = reader.await;
    let _ = c.query_one("SELECT pg_drop_replication_slot($1)", &[&slot]).await;
    SteadyRunLike { system: "pgoutput stream alone (no Kafka)".into(), phases: lat }
}
