//! Outbox tables as users run them: partitioned, several in one relay, renamed while streaming,
//! replaced under the same name. Rows are recognised by relation OID; a row the relay cannot
//! place stops it (or goes to the dead-letter topic), never silently away.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::{ids, Setup};
use crate::support::kafka::{self, private_broker, Consumed};
use crate::support::process::{freeze, thaw, transactions_read, RelayProcess};
use crate::support::slot::{slot_active_pid, slot_confirmed};
use crate::support::{services, wait_until};

/// Inserts event `n` of aggregate `agg` (payload `{"n": n}`) into the partition `created_at`
/// picks, one transaction each; returns its id.
async fn insert_at(s: &Setup, table: &str, agg: &str, n: usize, created_at: &str) -> String {
    let id = uuid_for(n);
    s.db.execute(&format!(
        "INSERT INTO {table} (id, aggregatetype, aggregateid, type, payload, created_at) \
         VALUES ('{id}', 'Order', '{agg}', 'Tested', '{{\"n\": {n}}}', '{created_at}')"
    ))
    .await;
    id
}

fn uuid_for(n: usize) -> String {
    format!("00000000-0000-0000-0000-{n:012}")
}

/// Per key, the `n` of each record in delivery order.
fn sequences(records: &[Consumed]) -> BTreeMap<String, Vec<u64>> {
    let mut by_key: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for r in records {
        let n = serde_json::from_str::<serde_json::Value>(r.value_str().unwrap_or("{}"))
            .ok()
            .and_then(|v| v["n"].as_u64())
            .unwrap_or(u64::MAX);
        by_key.entry(r.key_str().unwrap_or("").to_string()).or_default().push(n);
    }
    by_key
}

fn assert_ordered(by_key: &BTreeMap<String, Vec<u64>>) {
    for (key, ns) in by_key {
        assert!(ns.windows(2).all(|w| w[0] < w[1]), "aggregate {key} out of commit order: {ns:?}");
    }
}

/// Reads the `expected` events, checks each arrived once and every aggregate in commit order;
/// returns how many aggregates there were.
async fn assert_all_in_order(s: &Setup, relay: &RelayProcess, mut expected: Vec<String>) -> usize {
    let got = s.read("Order", expected.len()).await;
    let mut got_ids = ids(&got);
    got_ids.sort();
    expected.sort();
    assert_eq!(got_ids, expected, "{}", s.diagnostics(relay));
    let by_key = sequences(&got);
    assert_ordered(&by_key);
    by_key.len()
}

/// Every row of a range-partitioned outbox is relayed under the table's name and in commit
/// order per aggregate: rows of the current partition, of an old partition, and of a
/// partition attached while the relay streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_outbox_rows_are_relayed_in_order_from_old_current_and_newly_attached_partitions(
) {
    let s = Setup::new("partitioned").await;
    crate::common::partitioned_outbox(&s).await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let mut expected = Vec::new();
    let stamps = ["2026-12-01 10:00:00+00", "2025-03-01 10:00:00+00"];
    for n in 0..30 {
        expected.push(insert_at(&s, "outbox", &format!("o-{}", n % 3), n, stamps[n % 2]).await);
    }
    // A partition attached while streaming (the usual monthly roll-over).
    s.db.execute(
        "CREATE TABLE outbox_2028 (LIKE outbox INCLUDING DEFAULTS);
         ALTER TABLE outbox ATTACH PARTITION outbox_2028 FOR VALUES FROM ('2028-01-01') TO ('2029-01-01');",
    )
    .await;
    let stamps = ["2028-02-01 00:00:00+00", "2025-06-01 00:00:00+00", "2026-12-02 00:00:00+00"];
    for n in 30..60 {
        expected.push(insert_at(&s, "outbox", &format!("o-{}", n % 3), n, stamps[n % 3]).await);
    }
    let aggregates = assert_all_in_order(&s, &relay, expected).await;
    println!(
        "partitioned outbox: 60 of 60 rows from 3 partitions (one attached while streaming) delivered, {aggregates} aggregates in commit order"
    );
    let more = s.read_within("Order", 61, Duration::from_secs(3)).await;
    assert_eq!(more.len(), 60, "a row was delivered twice");
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
}

/// A publication made without `publish_via_partition_root` names each partition's rows by the
/// partition: `run` refuses it with the statement that fixes it, and `check` says the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_outbox_with_a_publication_without_partition_root_is_refused_with_the_fix() {
    let s = Setup::new("pubnoroot").await;
    crate::common::partitioned_outbox(&s).await;
    s.db.execute(&format!(
        "CREATE PUBLICATION {} FOR TABLE outbox WITH (publish = 'insert')",
        s.publication
    ))
    .await;
    let mut relay = s.start_relay();
    let code = relay.wait_exit(Duration::from_secs(30));
    let log = relay.log();
    assert_eq!(code, Some(1), "{log}");
    let fix =
        format!("ALTER PUBLICATION {} SET (publish_via_partition_root = true)", s.publication);
    assert!(log.contains("publish_via_partition_root is off") && log.contains(&fix), "{log}");

    let check = crate::support::process::walrelay_async(&["check"], Some(&s.config())).await;
    assert_eq!(check.code, Some(1), "{check}");
    assert!(check.stdout.contains(&format!("— fix: {fix}")), "{check}");

    // Fixed as told, the relay streams and relays the partition's rows.
    s.db.execute(&fix).await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let id = insert_at(&s, "outbox", "o-1", 1, "2025-05-05 00:00:00+00").await;
    assert_eq!(ids(&s.read("Order", 1).await), vec![id], "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0));
}

/// With the broker hung, rows of partitions are read but not acknowledged: the slot stays
/// before every one of them (after a SIGKILL the slot still holds them all), and a restarted
/// relay delivers them once the broker is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_rows_not_acknowledged_keep_the_slot_before_them() {
    let broker = tokio::task::spawn_blocking(|| private_broker(None)).await.unwrap();
    let s = Setup::new("partpause").await;
    crate::common::partitioned_outbox(&s).await;
    let config = s.config_for_bootstrap(broker.bootstrap(), "", "", "");
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let first = insert_at(&s, "outbox", "o-1", 0, "2026-12-01 00:00:00+00").await;
    let read = |n| {
        let topic = s.topic("Order");
        let bootstrap = broker.bootstrap().to_string();
        async move { kafka::consume(&bootstrap, &topic, n, Duration::from_secs(60)).await }
    };
    assert_eq!(ids(&read(1).await), vec![first.clone()]);

    freeze(broker.pid());
    let read_before = transactions_read(&relay.log()).len();
    let mut hung = Vec::new();
    for n in 1..=20 {
        let at = if n % 2 == 0 { "2025-02-01 00:00:00+00" } else { "2026-12-01 00:00:00+00" };
        hung.push(insert_at(&s, "outbox", &format!("o-{}", n % 2), n, at).await);
    }
    // The relay reads the 20 transactions (its log names each) but Kafka never answers.
    let r = &relay;
    assert!(
        wait_until("the relay read the 20 transactions", Duration::from_secs(30), || async move {
            transactions_read(&r.log()).len() >= read_before + 20
        })
        .await,
        "{}",
        relay.log()
    );
    relay.kill();
    let (url, slot) = (s.db.url.clone(), s.slot.clone());
    assert!(
        wait_until("the slot is released", Duration::from_secs(15), || {
            let (url, slot) = (url.clone(), slot.clone());
            async move { slot_active_pid(&url, &slot).await.is_none() }
        })
        .await
    );
    let mut held = 0;
    for id in &hung {
        held += usize::from(s.slot_holds(id).await);
    }
    println!(
        "broker hung: the relay read 20 partition rows, was killed, and the slot still holds {held} of 20 (confirmed at {})",
        slot_confirmed(&s.db.url, &s.slot).await.unwrap_or_default()
    );
    assert_eq!(held, 20, "the slot was confirmed past unacknowledged partition rows");

    thaw(broker.pid());
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let mut expected = vec![first];
    expected.extend(hung);
    expected.sort();
    // The hung broker may still hold produce requests of the killed relay: duplicates arrive
    // beside the new relay's records, so read until every id is there.
    let got_ids = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let (topic, bootstrap) = (s.topic("Order"), broker.bootstrap().to_string());
    let complete = wait_until("every row delivered", Duration::from_secs(60), || {
        let (topic, bootstrap, expected) = (topic.clone(), bootstrap.clone(), expected.clone());
        let got_ids = got_ids.clone();
        async move {
            let records = kafka::consume(&bootstrap, &topic, 1_000, Duration::from_secs(2)).await;
            let mut got = ids(&records);
            got.sort();
            got.dedup();
            let done = got == expected;
            *got_ids.lock().unwrap() = got;
            done
        }
    })
    .await;
    assert!(complete, "delivered {:?}\n{}", got_ids.lock().unwrap(), relay.log());
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
}

/// Two outbox tables, one relay: one slot, one publication; an aggregate whose events are
/// written to both tables keeps commit order across them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_outbox_tables_in_one_relay_keep_commit_order_across_tables() {
    let s = Setup::new("twotables").await;
    s.db.create_outbox("billing.outbox").await;
    let config = s
        .config()
        .replace("table = \"public.outbox\"", "tables = [\"public.outbox\", \"billing.outbox\"]");
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let mut expected = Vec::new();
    for n in 0..40 {
        let table = if n % 3 == 0 { "billing.outbox" } else { "public.outbox" };
        expected
            .push(insert_at(&s, table, &format!("o-{}", n % 4), n, "2026-12-01 00:00:00+00").await);
    }
    // One transaction writing both tables: its rows keep their order too.
    s.db.execute(&format!(
        "BEGIN;
         INSERT INTO billing.outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('{}', 'Order', 'o-0', 'T', '{{\"n\": 40}}');
         INSERT INTO public.outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('{}', 'Order', 'o-0', 'T', '{{\"n\": 41}}');
         COMMIT;",
        uuid_for(40),
        uuid_for(41)
    ))
    .await;
    expected.extend([uuid_for(40), uuid_for(41)]);
    let aggregates = assert_all_in_order(&s, &relay, expected).await;
    println!("two outbox tables: 42 of 42 rows delivered, {aggregates} aggregates in commit order across both tables");
    assert_eq!(s.published_tables().await, 2, "one publication carries both tables");
    assert_eq!(relay.terminate(), Some(0));
}

/// `ALTER TABLE … RENAME` while streaming: the table keeps its OID, so its rows keep being
/// relayed (before and after the rename), and the log says to update the configuration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renamed_outbox_table_keeps_being_relayed_by_oid() {
    let s = Setup::new("renamed").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let mut expected = vec![insert_at(&s, "outbox", "o-1", 0, "2026-12-01 00:00:00+00").await];
    s.db.execute("ALTER TABLE outbox RENAME TO outbox_v2").await;
    for n in 1..=5 {
        expected.push(insert_at(&s, "outbox_v2", "o-1", n, "2026-12-01 00:00:00+00").await);
    }
    let got = s.read("Order", 6).await;
    assert_eq!(ids(&got), expected, "{}", relay.log());
    assert!(
        relay.wait_for_log("the outbox table was renamed", Duration::from_secs(15)).await,
        "{}",
        relay.log()
    );
    assert!(relay.is_running(), "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0));
}

/// With a publication for all tables (as a migrated Debezium setup has), the outbox table is
/// renamed away and a new table takes its name: its rows are not the outbox walrelay resolved
/// at start. With a dead-letter topic such a row goes there and the stream moves on (the renamed
/// table, still the outbox by OID, keeps being relayed); without one the relay stops at the
/// row with its LSN and a hint, the slot stays before it, and a restart (which resolves
/// `[outbox] table` again) relays it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_of_a_table_that_took_the_outbox_name_is_dead_lettered_or_stops_the_relay() {
    let s = Setup::new("impostor").await;
    s.db.execute(&format!(
        "CREATE PUBLICATION {} FOR ALL TABLES WITH (publish = 'insert')",
        s.publication
    ))
    .await;
    let dlq = format!("{}.dlq", s.topic_prefix);
    let with_dlq = s.config_with("", "", &format!("[dead_letter]\ntopic = \"{dlq}\"\n"));
    let mut relay = RelayProcess::start(&with_dlq);
    s.wait_streaming(&mut relay).await;
    let first = insert_at(&s, "outbox", "o-1", 0, "2026-12-01 00:00:00+00").await;
    assert_eq!(ids(&s.read("Order", 1).await), vec![first.clone()]);

    s.db.execute("ALTER TABLE outbox RENAME TO outbox_a").await;
    s.db.create_outbox("outbox").await;
    let stray = insert_at(&s, "outbox", "o-1", 1, "2026-12-01 00:00:00+00").await;
    let renamed = insert_at(&s, "outbox_a", "o-1", 2, "2026-12-01 00:00:00+00").await;
    let letters =
        kafka::consume(services().broker.bootstrap(), &dlq, 1, Duration::from_secs(60)).await;
    assert_eq!(letters.len(), 1, "{}", relay.log());
    let reason = letters[0].header_str("walrelay.error").unwrap_or("");
    assert!(
        reason.contains("carries the name of the outbox table public.outbox but is not it"),
        "{reason}"
    );
    assert_eq!(letters[0].header_str("walrelay.table"), Some("public.outbox"));
    assert!(letters[0].value_str().unwrap_or("").contains(&stray), "{:?}", letters[0].value_str());
    assert_eq!(
        ids(&s.read("Order", 2).await),
        vec![first.clone(), renamed.clone()],
        "{}",
        relay.log()
    );
    assert_eq!(relay.terminate(), Some(0));

    // Without a dead-letter topic: the relay now resolves public.outbox to the new table; a
    // second swap puts a third table under the name.
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    s.db.execute("ALTER TABLE outbox RENAME TO outbox_b").await;
    s.db.create_outbox("outbox").await;
    let stray2 = insert_at(&s, "outbox", "o-1", 3, "2026-12-01 00:00:00+00").await;
    let code = relay.wait_exit(Duration::from_secs(30));
    let log = relay.log();
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains("carries the name of the outbox table public.outbox but is not it"),
        "{log}"
    );
    assert!(log.contains("nothing after this row was confirmed"), "{log}");
    assert_eq!(
        s.read_within("Order", 3, Duration::from_secs(3)).await.len(),
        2,
        "the stray row was published"
    );

    // Restarted, the relay resolves the name again: the row it stopped at is now the outbox's.
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let got = s.read("Order", 3).await;
    assert_eq!(ids(&got), vec![first, renamed, stray2], "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0));
}
