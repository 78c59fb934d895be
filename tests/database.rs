//! How the relay treats PostgreSQL: it never reads the outbox table (I4) and never pins WAL
//! when the outbox is quiet (I3).

use std::time::{Duration, Instant};

use crate::common::Setup;
use crate::support::{shared_pg_with, wait_until, Capability};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_never_reads_updates_or_deletes_the_outbox_table() {
    // pg_stat_statements is contrib: PostgreSQL 16's wheel has none, so then this runs on a
    // server that has it (printed).
    let s = Setup::on(shared_pg_with(Capability::PgStatStatements), "noquery").await;
    s.db.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").await;
    s.db.execute("SELECT pg_stat_statements_reset()").await;
    // Creating the table's primary key scanned it once; count from here.
    s.db.execute("SELECT pg_stat_reset_single_table_counters('outbox'::regclass)").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    s.insert_events("Order", "o-1", 100).await;
    assert_eq!(s.read("Order", 100).await.len(), 100, "relay log:\n{}", relay.log());
    // A graceful stop ends the relay's sessions, which flushes their statistics.
    assert_eq!(relay.terminate(), Some(0));

    let client = s.db.connect().await;
    let c = &client;
    let stats = wait_until("table statistics settle", Duration::from_secs(10), || async move {
        let row = c
            .query_one("SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'outbox'", &[])
            .await
            .unwrap();
        row.get::<_, i64>(0) == 100
    })
    .await;
    assert!(stats, "insert statistics never arrived");
    let row = client
        .query_one(
            "SELECT coalesce(seq_scan, 0), coalesce(idx_scan, 0), n_tup_upd, n_tup_del \
             FROM pg_stat_user_tables WHERE relname = 'outbox'",
            &[],
        )
        .await
        .unwrap();
    let (seq, idx, upd, del): (i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    println!("outbox statistics: seq_scan={seq} idx_scan={idx} n_tup_upd={upd} n_tup_del={del}");
    let all: Vec<String> = client
        .query(
            "SELECT calls || ' × ' || query FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid \
             WHERE d.datname = current_database()",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!((seq, idx, upd, del), (0, 0, 0, 0), "statements run in this database: {all:#?}");

    let reads: Vec<String> = client
        .query(
            "SELECT query FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid \
             WHERE d.datname = current_database() AND query ILIKE '%outbox%' \
             AND query !~* '^\\s*(insert|create|select pg_stat_statements_reset)'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(reads.is_empty(), "statements touching the outbox table: {reads:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_outbox_does_not_pin_wal_while_another_table_is_busy() {
    const MB: i64 = 1024 * 1024;
    let s = Setup::new("idlewal").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    s.insert_events("Order", "o-1", 1).await;
    assert_eq!(s.read("Order", 1).await.len(), 1, "relay log:\n{}", relay.log());

    let client = s.db.connect().await;
    client.batch_execute("CREATE TABLE filler (x text)").await.unwrap();
    let start_lsn: i64 = client
        .query_one("SELECT (pg_current_wal_lsn() - '0/0')::bigint", &[])
        .await
        .unwrap()
        .get(0);
    // ~1 KB rows, in ten transactions: about 80 MB of WAL that the publication does not cover.
    for _ in 0..10 {
        client
            .batch_execute("INSERT INTO filler SELECT repeat(md5(i::text), 32) FROM generate_series(1, 7000) i")
            .await
            .unwrap();
    }
    let written: i64 = client
        .query_one("SELECT (pg_current_wal_lsn() - '0/0')::bigint", &[])
        .await
        .unwrap()
        .get::<_, i64>(0)
        - start_lsn;
    assert!(written >= 64 * MB, "only {} MB of WAL written", written / MB);

    let t0 = Instant::now();
    let lag_seen = std::cell::Cell::new(i64::MAX);
    let (lag_ref, db, slot) = (&lag_seen, &s.db, s.slot.as_str());
    let settled = wait_until("slot lag under 16 MB", Duration::from_secs(30), || async move {
        let lag = db.slot_lag_bytes(slot).await.unwrap_or(i64::MAX);
        lag_ref.set(lag);
        lag < 16 * MB
    })
    .await;
    let lag = lag_seen.get();
    println!(
        "idle WAL: wrote {} MB into another table; slot lag {} KB after {} ms",
        written / MB,
        lag / 1024,
        t0.elapsed().as_millis()
    );
    assert!(settled, "slot still pins {} MB\nrelay log:\n{}", lag / MB, relay.log());
    assert_eq!(relay.terminate(), Some(0));
}
