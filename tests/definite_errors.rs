//! Definite errors: a dropped slot, publication, outbox table or key column, an
//! invalidated slot, `wal_level` no longer logical. The relay stops with a hint instead of
//! retrying, and never confirms past what it could not deliver.

use std::time::Duration;

use crate::common::{release_slot, Setup};
use crate::support::postgres::PrivatePostgres;
use crate::support::process::{assert_stops_with_hint, freeze, thaw, RelayProcess};
use crate::support::services;
use crate::support::slot::{slot_confirmed, terminate_walsender};
use walrelay::lsn::Lsn;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_slot_stops_the_relay_with_a_hint() {
    let s = Setup::new("dropslot").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    s.insert_events("Order", "o-1", 3).await;
    assert_eq!(s.read("Order", 3).await.len(), 3);
    // An active slot can't be dropped: terminate its walsender and drop it before the relay
    // reconnects.
    let client = s.db.connect().await;
    let mut dropped = false;
    for _ in 0..200 {
        let _ = terminate_walsender(&s.db.url, &s.slot).await;
        if client.query_one("SELECT pg_drop_replication_slot($1)", &[&s.slot]).await.is_ok() {
            dropped = true;
            break;
        }
    }
    assert!(dropped, "could not drop the slot");
    s.insert_events("Order", "o-1", 1).await;
    let line = assert_stops_with_hint(&mut relay, "slot dropped");
    assert!(line.contains("slot"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
/// A dropped publication stops the relay, and the slot is never confirmed past the row
/// written after the drop (PostgreSQL 18's pgoutput skips a missing publication with a WARNING
/// and keeps streaming; earlier versions end the stream with an error).
async fn dropped_publication_stops_the_relay_with_a_hint() {
    let s = Setup::new("droppub").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    s.insert_events("Order", "o-1", 3).await;
    assert_eq!(s.read("Order", 3).await.len(), 3);
    s.db.execute(&format!("DROP PUBLICATION {}", s.publication)).await;
    let client = s.db.connect().await;
    let before_row: String =
        client.query_one("SELECT pg_current_wal_insert_lsn()::text", &[]).await.unwrap().get(0);
    s.insert_events("Order", "o-1", 1).await;
    let line = assert_stops_with_hint(&mut relay, "publication dropped");
    assert!(line.contains("publication"), "{line}");
    let confirmed = slot_confirmed(&s.db.url, &s.slot).await.unwrap_or_default();
    assert!(
        confirmed <= before_row.parse::<Lsn>().unwrap(),
        "the slot was confirmed to {} past the row written after the drop (at {before_row})",
        confirmed
    );
    release_slot(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_outbox_table_stops_the_relay_with_a_hint() {
    let s = Setup::new("droptable").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    s.insert_events("Order", "o-1", 3).await;
    assert_eq!(s.read("Order", 3).await.len(), 3);
    s.db.execute("DROP TABLE outbox").await;
    let line = assert_stops_with_hint(&mut relay, "outbox table dropped");
    assert!(line.contains("outbox"), "{line}");
    release_slot(&s).await;
}

/// A key column the router needs is dropped: the next row's Relation message can't be bound,
/// and the relay stops naming the column instead of guessing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_key_column_stops_the_relay_with_a_hint() {
    let s = Setup::new("dropcol").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    s.insert_events("Order", "o-1", 2).await;
    assert_eq!(s.read("Order", 2).await.len(), 2);
    s.db.execute(
        "ALTER TABLE outbox DROP COLUMN aggregateid;
         INSERT INTO outbox (id, aggregatetype, type, payload)
           VALUES (gen_random_uuid(), 'Order', 'E', '{}');",
    )
    .await;
    let line = assert_stops_with_hint(&mut relay, "key column dropped");
    assert!(line.contains("aggregateid"), "{line}");
    release_slot(&s).await;
}

/// A slot invalidated by `max_slot_wal_keep_size` (wal_status = lost) on a private PostgreSQL,
/// while the relay holds it (frozen, so it can't confirm): the checkpoint terminates its
/// walsender and invalidates the slot; the relay stops with a hint instead of retrying.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidated_slot_stops_the_relay_with_a_hint() {
    let pg = tokio::task::spawn_blocking(|| PrivatePostgres::start("invalid")).await.unwrap();
    let s = Setup::on(&pg.pg, "invalid").await;
    s.db.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'").await;
    s.db.execute("SELECT pg_reload_conf()").await;
    s.db.execute("CREATE TABLE filler (n int)").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    s.insert_events("Order", "o-1", 2).await;
    assert_eq!(s.read("Order", 2).await.len(), 2);

    freeze(relay.pid());
    let client = s.db.connect().await;
    let mut status = String::new();
    for _ in 0..10 {
        client
            .batch_execute(
                "INSERT INTO filler VALUES (1); SELECT pg_switch_wal();
                 INSERT INTO filler VALUES (2); SELECT pg_switch_wal();
                 INSERT INTO filler VALUES (3); SELECT pg_switch_wal();
                 CHECKPOINT;",
            )
            .await
            .unwrap();
        status = client
            .query_one(
                "SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1",
                &[&s.slot],
            )
            .await
            .unwrap()
            .get::<_, Option<String>>(0)
            .unwrap_or_default();
        if status == "lost" {
            break;
        }
    }
    thaw(relay.pid());
    assert_eq!(status, "lost", "could not invalidate the slot\n{}", pg.log_tail(20));
    let line = assert_stops_with_hint(&mut relay, "slot invalidated");
    assert!(line.contains("invalidated") || line.contains("lost"), "{line}");
}

/// `wal_level` no longer logical (PostgreSQL restarted with `replica`; it can only start that
/// way once no logical slot is left): a definite error with the fix, never a retry loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wal_level_not_logical_stops_the_relay_with_a_hint() {
    let pg = tokio::task::spawn_blocking(|| PrivatePostgres::start("walreplica")).await.unwrap();
    let conf = pg.pg.data_dir().join("postgresql.conf");
    let mut text = std::fs::read_to_string(&conf).unwrap();
    text.push_str("\nwal_level = replica\n");
    std::fs::write(&conf, text).unwrap();
    let pg =
        tokio::task::spawn_blocking(move || pg.restart_fast().map(|_| pg)).await.unwrap().unwrap();
    let db = pg.pg.create_database("walreplica").await;
    db.create_outbox("outbox").await;
    let config = format!(
        "[source]\nurl = \"{}\"\n[kafka]\n\"bootstrap.servers\" = \"{}\"\n",
        db.url,
        services().broker.bootstrap()
    );
    let mut relay = RelayProcess::start(&config);
    assert_eq!(relay.wait_exit(Duration::from_secs(30)), Some(1), "{}", relay.log());
    let log = relay.log();
    assert!(log.contains("wal_level is replica") && log.contains("wal_level = logical"), "{log}");
}
