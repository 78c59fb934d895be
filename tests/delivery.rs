//! What reaches Kafka: committed inserts only, in commit order per aggregate.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::{ids, Setup};
use crate::support::kafka;
use crate::support::services;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolled_back_rows_never_reach_kafka() {
    let s = Setup::new("rollback").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;

    let client = s.db.connect().await;
    client
        .batch_execute(
            "BEGIN;
             INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
               VALUES ('00000000-0000-0000-0000-00000000000a', 'Order', 'o-1', 'RolledBack', '{}');
             INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
               VALUES ('00000000-0000-0000-0000-00000000000b', 'Order', 'o-1', 'RolledBack', '{}');
             ROLLBACK;",
        )
        .await
        .unwrap();
    // A savepoint rolled back inside a committed transaction is not committed either.
    client
        .batch_execute(
            "BEGIN;
             SAVEPOINT s;
             INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
               VALUES ('00000000-0000-0000-0000-00000000000c', 'Order', 'o-1', 'RolledBackToSavepoint', '{}');
             ROLLBACK TO SAVEPOINT s;
             INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
               VALUES ('00000000-0000-0000-0000-00000000000d', 'Order', 'o-1', 'Committed', '{}');
             COMMIT;",
        )
        .await
        .unwrap();

    // Anything rolled back would come before the committed row in WAL order, so the first
    // record on the topic tells.
    let first = s.read("Order", 1).await;
    assert_eq!(
        ids(&first),
        vec!["00000000-0000-0000-0000-00000000000d"],
        "relay log:\n{}",
        relay.log()
    );
    let all = s.read_within("Order", 2, Duration::from_secs(5)).await;
    assert_eq!(all.len(), 1, "a rolled-back row was published: {:?}", ids(&all));
    assert_eq!(relay.terminate(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_then_delete_in_one_transaction_still_publishes_the_event() {
    let s = Setup::new("insdel").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    s.db.connect()
        .await
        .batch_execute(
            "BEGIN;
             INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
               VALUES ('00000000-0000-0000-0000-0000000000e1', 'Order', 'o-9', 'OrderCreated', '{\"total\": 5}');
             DELETE FROM outbox WHERE id = '00000000-0000-0000-0000-0000000000e1';
             COMMIT;",
        )
        .await
        .unwrap();
    let got = s.read("Order", 1).await;
    assert_eq!(
        ids(&got),
        vec!["00000000-0000-0000-0000-0000000000e1"],
        "relay log:\n{}",
        relay.log()
    );
    assert_eq!(got[0].value_str(), Some("{\"total\": 5}"));
    assert_eq!(got[0].key_str(), Some("o-9"));
    let rows: i64 =
        s.db.connect().await.query_one("SELECT count(*) FROM outbox", &[]).await.unwrap().get(0);
    assert_eq!(rows, 0, "the outbox table stays empty");
    assert_eq!(relay.terminate(), Some(0));
}

/// With a publication that also sends UPDATE and DELETE (as one made by hand or by Debezium
/// may), updates are dropped with a warning (`table.op.invalid.behavior = warn`) and deletes
/// silently, as Debezium's router does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_warn_and_deletes_are_dropped_when_the_publication_sends_them() {
    let s = Setup::new("upddel").await;
    s.db.execute(&format!("CREATE PUBLICATION {} FOR TABLE outbox", s.publication)).await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let a = s.db.insert_outbox("outbox", "Order", "o-1", "A", Some("{\"v\": 1}")).await;
    s.db.execute(&format!("UPDATE outbox SET payload = '{{\"v\": 2}}' WHERE id = '{a}'")).await;
    s.db.execute(&format!("DELETE FROM outbox WHERE id = '{a}'")).await;
    let b = s.db.insert_outbox("outbox", "Order", "o-1", "B", Some("{\"v\": 3}")).await;

    let got = s.read("Order", 2).await;
    assert_eq!(ids(&got), vec![a, b.clone()], "{}", s.diagnostics(&relay));
    let more = s.read_within("Order", 3, Duration::from_secs(5)).await;
    assert_eq!(more.len(), 2, "an UPDATE or DELETE was published: {:?}", ids(&more));
    assert!(relay.log().contains("unexpected UPDATE"), "no warning logged:\n{}", relay.log());
    assert_eq!(relay.terminate(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_with_fatal_behavior_stops_the_relay_with_a_hint() {
    let s = Setup::new("updfatal").await;
    s.db.execute(&format!("CREATE PUBLICATION {} FOR TABLE outbox", s.publication)).await;
    let mut relay = crate::support::process::RelayProcess::start(&s.config_with(
        "\"table.op.invalid.behavior\" = \"fatal\"",
        "",
        "",
    ));
    s.wait_streaming(&mut relay).await;
    let a = s.db.insert_outbox("outbox", "Order", "o-1", "A", Some("{}")).await;
    s.db.execute(&format!("UPDATE outbox SET type = 'X' WHERE id = '{a}'")).await;
    let code = relay.wait_exit(Duration::from_secs(30));
    assert_eq!(code, Some(1), "{}", s.diagnostics(&relay));
    let log = relay.log();
    assert!(log.contains("UPDATE of an outbox row") && log.contains("find the writer"), "{log}");
    // The row before the update was still delivered.
    assert_eq!(ids(&s.read("Order", 1).await), vec![a]);
}

/// 10,000 events over 100 aggregates, written by four connections at once in transactions of
/// ten rows that mix aggregates. Each aggregate belongs to one writer, which numbers its events
/// and commits them in order, so per aggregate, commit order is the numbering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_aggregate_order_holds_over_10000_events_in_interleaved_transactions() {
    const WRITERS: usize = 4;
    const AGGREGATES: usize = 100;
    const EVENTS: usize = 10_000;
    const TYPES: [&str; 4] = ["Order", "Customer", "Invoice", "Shipment"];
    let s = Setup::new("order").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;

    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let client = s.db.connect().await;
        writers.push(tokio::spawn(async move {
            let mine: Vec<usize> = (0..AGGREGATES).filter(|a| a % WRITERS == w).collect();
            let mut next = vec![0usize; AGGREGATES];
            let per_writer = EVENTS / WRITERS;
            for chunk in 0..per_writer / 10 {
                let mut sql = String::from("BEGIN;");
                for i in 0..10 {
                    let agg = mine[(chunk * 10 + i) % mine.len()];
                    let seq = next[agg];
                    next[agg] += 1;
                    sql.push_str(&format!(
                        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES \
                         (gen_random_uuid(), '{}', 'agg-{agg}', 'E', '{{\"seq\": {seq}}}');",
                        TYPES[agg % 4]
                    ));
                }
                sql.push_str("COMMIT;");
                client.batch_execute(&sql).await.unwrap();
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }

    let topics: Vec<String> = TYPES.iter().map(|t| s.topic(t)).collect();
    let topic_refs: Vec<&str> = topics.iter().map(|t| t.as_str()).collect();
    let got = kafka::consume_topics(
        services().broker.bootstrap(),
        &topic_refs,
        EVENTS,
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(got.len(), EVENTS, "relay log:\n{}", relay.log());

    // Per key, in partition order, the sequence numbers must be 0, 1, 2, … with nothing missing.
    let mut seen: HashMap<String, (i32, Vec<u64>)> = HashMap::new();
    for r in &got {
        let key = r.key_str().unwrap().to_string();
        let seq = r.value_json().unwrap()["seq"].as_u64().unwrap();
        let entry = seen.entry(key.clone()).or_insert((r.partition, Vec::new()));
        assert_eq!(entry.0, r.partition, "aggregate {key} was spread over two partitions");
        entry.1.push(seq);
    }
    assert_eq!(seen.len(), AGGREGATES);
    for (key, (_, seqs)) in &seen {
        let expected: Vec<u64> = (0..seqs.len() as u64).collect();
        assert_eq!(seqs, &expected, "aggregate {key} out of commit order");
    }
    println!(
        "per-aggregate order: {EVENTS} events, {AGGREGATES} aggregates, {} topics, 0 out of order",
        TYPES.len()
    );
    assert_eq!(relay.terminate(), Some(0));
}

/// A backlog in which every row is followed by `ANALYZE outbox`, as autovacuum does on a busy
/// table. Each ANALYZE invalidates the table's relcache entry, so pgoutput sends a Relation
/// message again before the next row, and the relay answers it with a catalog query: the loop
/// waits in the middle of a run of already-buffered events. Every row must still arrive once,
/// in order (a run of buffered events once lost the event read after its 256th).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backlog_with_a_relation_message_before_every_row_is_delivered_whole_and_in_order() {
    const ROWS: usize = 2_000;
    let s = Setup::new("relmsg").await;
    // The first start creates the publication; the backlog is written while the relay is down.
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());

    let mut sql = String::new();
    for i in 0..ROWS {
        sql.push_str(&format!(
            "BEGIN; INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES \
             (gen_random_uuid(), 'Order', 'o-1', 'E', '{{\"n\": {i}}}'); COMMIT; \
             BEGIN; ANALYZE outbox; COMMIT;"
        ));
    }
    s.db.connect().await.batch_execute(&sql).await.unwrap();

    let mut relay = s.start_relay();
    let got = s.read("Order", ROWS).await;
    let ns: Vec<u64> = got.iter().map(|r| r.value_json().unwrap()["n"].as_u64().unwrap()).collect();
    let missing: Vec<u64> = (0..ROWS as u64).filter(|n| !ns.contains(n)).collect();
    assert!(
        missing.is_empty(),
        "{} rows missing: {missing:?}\n{}",
        missing.len(),
        s.diagnostics(&relay)
    );
    assert_eq!(ns, (0..ROWS as u64).collect::<Vec<_>>(), "rows out of commit order");
    let more = s.read_within("Order", ROWS + 1, Duration::from_secs(2)).await;
    assert_eq!(more.len(), ROWS, "a row was published twice");
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
}
