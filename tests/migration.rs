//! Taking over from Debezium: its slot and its default publication (`FOR ALL TABLES`, every
//! operation), continuing from its confirmed position with no gap.

use std::time::Duration;

use crate::common::{ids, Setup};
use crate::support::process::RelayProcess;
use crate::support::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_takes_over_debeziums_slot_and_all_tables_publication_without_a_gap() {
    let s = Setup::new("dbzmove").await;
    // What Debezium's PostgreSQL connector creates with its defaults (publication.autocreate.mode
    // = all_tables): a publication of every table and operation, and a pgoutput slot — here the
    // slot Setup made plays Debezium's.
    s.db.execute(&format!(
        "CREATE PUBLICATION {} FOR ALL TABLES; CREATE TABLE orders (id serial PRIMARY KEY, total int);",
        s.publication
    ))
    .await;
    // Debezium relayed up to here; the slot's position is where it stopped.
    let before = s.insert_events("Order", "o-1", 3).await;
    let client = s.db.connect().await;
    let target: String =
        client.query_one("SELECT pg_current_wal_insert_lsn()::text", &[]).await.unwrap().get(0);
    // The slot only advances over flushed WAL (synchronous_commit=off here): advance_slot
    // retries.
    assert!(s.db.advance_slot(&s.slot, &target).await, "slot advanced past Debezium's last rows");
    // Written while nothing reads the slot (Debezium stopped, walrelay not started yet): busy
    // other tables, updates and deletes of the outbox, and outbox inserts that must all arrive.
    let mut expected = Vec::new();
    for i in 0..5 {
        client
            .batch_execute(&format!(
                "INSERT INTO orders (total) VALUES ({i}); UPDATE orders SET total = total + 1"
            ))
            .await
            .unwrap();
        expected
            .push(s.db.insert_outbox("outbox", "Order", "o-1", "AfterCutOver", Some("{}")).await);
    }
    client.batch_execute(&format!("DELETE FROM outbox WHERE id = '{}'", before[0])).await.unwrap();

    let mut relay = RelayProcess::start(&s.config());
    let got = s.read("Order", 5).await;
    assert_eq!(ids(&got), expected, "{}", s.diagnostics(&relay));
    let more = s.read_within("Order", 6, Duration::from_secs(3)).await;
    assert_eq!(more.len(), 5, "rows Debezium already relayed came again: {:?}", ids(&more));

    // Changes of other tables are skipped yet confirmed: the slot catches up with the server.
    client
        .batch_execute("INSERT INTO orders (total) SELECT g FROM generate_series(1, 1000) g")
        .await
        .unwrap();
    let (db, slot) = (&s.db, s.slot.as_str());
    let caught_up = wait_until("slot lag under 64 KB", Duration::from_secs(30), || async move {
        db.slot_lag_bytes(slot).await.is_some_and(|lag| lag < 64 * 1024)
    })
    .await;
    assert!(caught_up, "{}", s.diagnostics(&relay));
    assert_eq!(relay.terminate(), Some(0));
}
