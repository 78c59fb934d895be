//! The table-less outbox through a real PostgreSQL, walrelay and broker: events written with
//! `pg_logical_emit_message` instead of rows. Transactional messages of the selected prefixes
//! are relayed in commit order with the outbox rows around them; rolled-back, unselected and
//! non-transactional ones are not (the last refused loudly, or relayed when configured); a
//! relay may have no table at all. `goldens.rs` holds the byte-for-byte parity with Debezium.

mod goldens;

use std::time::Duration;

use serde_json::json;
use tokio_postgres::Client;

use crate::common::{ids, Setup};
use crate::support::process::{http_get, metric, walrelay_async, RelayProcess};
use crate::support::{free_port, kafka, services, wait_until};

/// `message.prefix.include.list = outbox`.
const INCLUDE_OUTBOX: &str = "\"message.prefix.include.list\" = \"outbox\"";
const OUTBOX_TABLE: &str = "table = \"public.outbox\"";

/// A relay configuration for `s` whose `[outbox]` section is `outbox` and whose `[debezium]`
/// section is `debezium`, plus `extra` sections.
fn config(s: &Setup, outbox: &str, debezium: &str, extra: &str) -> String {
    s.config_with("", "", &format!("[debezium]\n{debezium}\n{extra}"))
        .replace("[outbox]\ntable = \"public.outbox\"", &format!("[outbox]\n{outbox}"))
}

/// An outbox event as a message's JSON content; the payload travels as JSON text.
fn event(id: &str, aggregate_id: &str, payload: &str) -> String {
    json!({
        "id": id,
        "aggregatetype": "Order",
        "aggregateid": aggregate_id,
        "type": "Emitted",
        "payload": payload,
    })
    .to_string()
}

/// `pg_logical_emit_message(transactional, prefix, content)`; the message's LSN.
async fn emit(c: &Client, transactional: bool, prefix: &str, content: &str) -> String {
    c.query_one(
        "SELECT pg_logical_emit_message($1, $2::text, $3::text)::text",
        &[&transactional, &prefix, &content],
    )
    .await
    .unwrap_or_else(|e| panic!("emit {content}: {e}"))
    .get(0)
}

async fn insert_row(c: &Client, id: &str, aggregate_id: &str, payload: &str) {
    c.execute(
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
         VALUES ($1::text::uuid, 'Order', $2::text, 'Inserted', $3::text::jsonb)",
        &[&id, &aggregate_id, &payload],
    )
    .await
    .unwrap();
}

fn uuid(n: u32) -> String {
    format!("00000000-0000-0000-0000-{n:012}")
}

/// Waits until the slot's confirmed position reaches `lsn`.
async fn confirmed_past(s: &Setup, lsn: &str) -> bool {
    let (db, slot) = (&s.db, s.slot.as_str());
    wait_until(&format!("slot confirmed past {lsn}"), Duration::from_secs(30), || async move {
        db.connect()
            .await
            .query_one(
                "SELECT confirmed_flush_lsn >= $2::text::pg_lsn FROM pg_replication_slots \
                 WHERE slot_name = $1",
                &[&slot, &lsn],
            )
            .await
            .map(|r| r.get::<_, bool>(0))
            .unwrap_or(false)
    })
    .await
}

/// Messages and outbox rows written in the same transactions, for one aggregate, come out as
/// one sequence in commit order — within a transaction, in the order they were written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_messages_keep_commit_order_with_outbox_rows_of_the_same_aggregate() {
    let s = Setup::new("msg_order").await;
    let mut relay = RelayProcess::start(&config(&s, OUTBOX_TABLE, INCLUDE_OUTBOX, ""));
    s.wait_streaming(&mut relay).await;
    let c = s.db.connect().await;
    let mut want = Vec::new();
    for t in 0..20u32 {
        c.batch_execute("BEGIN").await.unwrap();
        for k in 0..3u32 {
            let id = uuid(t * 10 + k);
            let payload = format!("{{\"t\": {t}, \"k\": {k}}}");
            // Alternate which kind comes first, so both orders are exercised.
            if (t + k) % 2 == 0 {
                emit(&c, true, "outbox", &event(&id, "o-1", &payload)).await;
            } else {
                insert_row(&c, &id, "o-1", &payload).await;
            }
            want.push(id);
        }
        c.batch_execute("COMMIT").await.unwrap();
    }
    let got = s.read("Order", want.len()).await;
    assert_eq!(ids(&got), want, "{}", s.diagnostics(&relay));
    // Same aggregate, same key bytes for both kinds: one partition, in commit order.
    assert!(got.iter().all(|r| r.partition == got[0].partition && r.key_str() == Some("o-1")));
    // The message's payload (JSON text in a JSON string) and the row's (jsonb) are the same
    // value bytes.
    assert_eq!(got[0].value_str(), Some("{\"t\": 0, \"k\": 0}"));
    assert_eq!(got[1].value_str(), Some("{\"k\": 1, \"t\": 0}"), "jsonb normalises the row's");
    println!(
        "{} records (30 messages, 30 rows) of 20 transactions, one partition, in commit order: {:?} …",
        got.len(),
        &ids(&got)[..6]
    );
    assert_eq!(relay.terminate(), Some(0));
}

/// A transactional message is decoded at its transaction's commit: one that rolled back is
/// never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_in_a_rolled_back_transaction_is_not_relayed() {
    let s = Setup::new("msg_rollback").await;
    let mut relay = RelayProcess::start(&config(&s, OUTBOX_TABLE, INCLUDE_OUTBOX, ""));
    s.wait_streaming(&mut relay).await;
    let c = s.db.connect().await;
    c.batch_execute("BEGIN").await.unwrap();
    emit(&c, true, "outbox", &event(&uuid(1), "o-1", "rolled back")).await;
    c.batch_execute("ROLLBACK").await.unwrap();
    c.batch_execute("BEGIN; SAVEPOINT s").await.unwrap();
    emit(&c, true, "outbox", &event(&uuid(2), "o-1", "rolled back to a savepoint")).await;
    c.batch_execute("ROLLBACK TO SAVEPOINT s").await.unwrap();
    emit(&c, true, "outbox", &event(&uuid(3), "o-1", "committed")).await;
    c.batch_execute("COMMIT").await.unwrap();
    let first = s.read("Order", 1).await;
    assert_eq!(ids(&first), [uuid(3)], "{}", s.diagnostics(&relay));
    let all = s.read_within("Order", 2, Duration::from_secs(5)).await;
    assert_eq!(ids(&all), [uuid(3)], "a rolled-back message was relayed");
    println!("rolled back and rolled back to a savepoint: not relayed; committed: {:?}", ids(&all));
    assert_eq!(relay.terminate(), Some(0));
}

/// Debezium's prefix lists: the include list matches whole prefixes, case-insensitively; the
/// exclude list relays every other prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn excluded_prefixes_and_prefixes_outside_the_include_list_are_not_relayed() {
    for (debezium, relayed) in [
        (INCLUDE_OUTBOX, vec!["OUTBOX", "outbox"]),
        (
            "\"message.prefix.exclude.list\" = \"audit, outbox\\\\.v[0-9]+\"",
            vec!["outboxes", "OUTBOX", "outbox"],
        ),
    ] {
        let s = Setup::new("msg_prefix").await;
        let mut relay = RelayProcess::start(&config(&s, OUTBOX_TABLE, debezium, ""));
        s.wait_streaming(&mut relay).await;
        let c = s.db.connect().await;
        let prefixes = ["audit", "outboxes", "outbox.v2", "OUTBOX", "Audit", "outbox"];
        let mut want = Vec::new();
        for (n, prefix) in prefixes.iter().enumerate() {
            let id = uuid(n as u32);
            emit(&c, true, prefix, &event(&id, "o-1", prefix)).await;
            if relayed.contains(prefix) {
                want.push(id);
            }
        }
        // A last relayed message marks the end: nothing unselected comes after it.
        let last = uuid(99);
        let closing = if debezium == INCLUDE_OUTBOX { "outbox" } else { "outboxes" };
        emit(&c, true, closing, &event(&last, "o-1", "last")).await;
        want.push(last);
        let got = s.read("Order", want.len()).await;
        assert_eq!(ids(&got), want, "{debezium}\n{}", s.diagnostics(&relay));
        let payloads: Vec<&str> = got.iter().filter_map(|r| r.value_str()).collect();
        println!("{debezium}: relayed the prefixes {payloads:?}");
        assert_eq!(relay.terminate(), Some(0));
    }
}

/// A non-transactional message is sent even when its transaction rolls back, so by default it
/// is refused: logged with its LSN and prefix, counted, and — with no dead-letter topic — not
/// relayed, while the stream moves on and the slot is confirmed past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_transactional_message_is_refused_logged_and_counted_and_the_stream_moves_on() {
    let s = Setup::new("msg_nontx").await;
    let port = free_port();
    let http = format!("[http]\nlisten = \"127.0.0.1:{port}\"\n");
    let mut relay = RelayProcess::start(&config(&s, OUTBOX_TABLE, INCLUDE_OUTBOX, &http));
    s.wait_streaming(&mut relay).await;
    let c = s.db.connect().await;
    let autocommit = emit(&c, false, "outbox", &event(&uuid(1), "o-1", "non-transactional")).await;
    c.batch_execute("BEGIN").await.unwrap();
    let rolled_back =
        emit(&c, false, "outbox", &event(&uuid(2), "o-1", "its transaction rolls back")).await;
    c.batch_execute("ROLLBACK").await.unwrap();
    emit(&c, false, "audit", &event(&uuid(3), "o-1", "not selected: not refused")).await;
    let after = emit(&c, true, "outbox", &event(&uuid(4), "o-1", "transactional")).await;

    let first = s.read("Order", 1).await;
    assert_eq!(ids(&first), [uuid(4)], "{}", s.diagnostics(&relay));
    for lsn in [&autocommit, &rolled_back] {
        let logged = relay.log().lines().any(|l| {
            l.contains("non-transactional logical message refused")
                && l.contains(&format!("lsn={lsn}"))
                && l.contains("source=message:outbox")
        });
        assert!(logged, "no refusal logged for {lsn}:\n{}", relay.log());
    }
    let text = http_get(port, "/metrics").await.unwrap_or_default();
    assert_eq!(metric(&text, "walrelay_messages_refused_total"), Some(2.0), "{text}");
    assert!(confirmed_past(&s, &after).await, "{}", s.diagnostics(&relay));
    let refusal = relay
        .log()
        .lines()
        .find(|l| l.contains("non-transactional logical message refused"))
        .unwrap_or("")
        .to_string();
    println!("refused (2 counted, slot confirmed past them): {refusal}");
    assert_eq!(relay.terminate(), Some(0));
}

/// With `[dead_letter]`, a refused non-transactional message goes to the dead-letter topic with
/// its content, the reason, its LSN and `walrelay.table = message:<prefix>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_transactional_message_is_dead_lettered_when_a_dead_letter_topic_is_configured() {
    let s = Setup::new("msg_nontx_dl").await;
    let dlq = format!("{}.dlq", s.topic_prefix);
    let dead_letter = format!("[dead_letter]\ntopic = \"{dlq}\"\n");
    let mut relay = RelayProcess::start(&config(&s, OUTBOX_TABLE, INCLUDE_OUTBOX, &dead_letter));
    s.wait_streaming(&mut relay).await;
    let c = s.db.connect().await;
    let content = event(&uuid(1), "o-1", "non-transactional");
    let lsn = emit(&c, false, "outbox", &content).await;
    emit(&c, true, "outbox", &event(&uuid(2), "o-1", "transactional")).await;
    assert_eq!(ids(&s.read("Order", 1).await), [uuid(2)], "{}", s.diagnostics(&relay));
    let dead =
        kafka::consume(services().broker.bootstrap(), &dlq, 1, Duration::from_secs(30)).await;
    assert_eq!(dead.len(), 1, "nothing dead-lettered:\n{}", relay.log());
    let d = &dead[0];
    assert_eq!(d.value_str(), Some(content.as_str()));
    assert_eq!(d.header_str("walrelay.table"), Some("message:outbox"));
    assert_eq!(d.header_str("walrelay.lsn"), Some(lsn.as_str()));
    assert_eq!(d.header_str("walrelay.event.id"), Some(uuid(1).as_str()));
    let error = d.header_str("walrelay.error").unwrap_or("");
    assert!(error.contains("non-transactional"), "{error}");
    println!("dead letter of the refused message: walrelay.error = {error:?}, lsn {lsn}");
    assert_eq!(relay.terminate(), Some(0));
}

/// `non_transactional_messages = "relay"`: non-transactional messages are relayed as Debezium
/// relays them — at their WAL position, before the records of their own transaction, and even
/// when that transaction rolls back — and the slot is confirmed at their position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_transactional_message_is_relayed_when_configured_even_from_a_rolled_back_transaction()
{
    let s = Setup::new("msg_nontx_relay").await;
    let outbox = format!("{OUTBOX_TABLE}\nnon_transactional_messages = \"relay\"");
    let mut relay = RelayProcess::start(&config(&s, &outbox, INCLUDE_OUTBOX, ""));
    s.wait_streaming(&mut relay).await;
    let c = s.db.connect().await;
    c.batch_execute("BEGIN").await.unwrap();
    emit(&c, true, "outbox", &event(&uuid(1), "o-1", "transactional, written first")).await;
    emit(&c, false, "outbox", &event(&uuid(2), "o-1", "non-transactional, sent first")).await;
    c.batch_execute("COMMIT").await.unwrap();
    c.batch_execute("BEGIN").await.unwrap();
    emit(&c, false, "outbox", &event(&uuid(3), "o-1", "rolled back, relayed anyway")).await;
    c.batch_execute("ROLLBACK").await.unwrap();
    let alone = emit(&c, false, "outbox", &event(&uuid(4), "o-1", "autocommit")).await;
    let got = s.read("Order", 4).await;
    assert_eq!(ids(&got), [uuid(2), uuid(1), uuid(3), uuid(4)], "{}", s.diagnostics(&relay));
    assert!(confirmed_past(&s, &alone).await, "{}", s.diagnostics(&relay));
    println!("relayed in WAL order (non-transactional first): {:?}", ids(&got));
    assert_eq!(relay.terminate(), Some(0));
}

/// `[outbox] tables = []`: no outbox table; walrelay creates an empty publication, `check`
/// says what it relays, messages become records and rows of a table named like the outbox do
/// not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_only_relay_needs_no_outbox_table() {
    let s = Setup::new("msg_only").await;
    let cfg = config(&s, "tables = []", INCLUDE_OUTBOX, "");
    let check = walrelay_async(&["check"], Some(&cfg)).await;
    assert_eq!(check.code, Some(0), "{check}");
    for expected in [
        "ok   outbox tables: none ([outbox] tables = [])",
        "ok   logical messages: prefixes matching `outbox` (case-insensitive, whole prefix)",
        &format!("ok   publication {}: does not exist yet", s.publication),
    ] {
        assert!(check.stdout.contains(expected), "missing {expected:?}\n{check}");
    }
    let mut relay = RelayProcess::start(&cfg);
    s.wait_streaming(&mut relay).await;
    let c = s.db.connect().await;
    assert_eq!(s.published_tables().await, 0, "the publication is empty");
    insert_row(&c, &uuid(1), "o-1", "{}").await;
    emit(&c, true, "outbox", &event(&uuid(2), "o-1", "a message")).await;
    let got = s.read("Order", 1).await;
    assert_eq!(ids(&got), [uuid(2)], "{}", s.diagnostics(&relay));
    assert_eq!(s.read_within("Order", 2, Duration::from_secs(3)).await.len(), 1);
    let check = walrelay_async(&["check"], Some(&cfg)).await;
    assert!(check.stdout.contains("needs no table in it"), "{check}");
    println!(
        "message-only relay: empty publication {}, relayed {:?}; check:\n{}",
        s.publication,
        ids(&got),
        check
            .stdout
            .lines()
            .filter(|l| l.contains("outbox tables") || l.contains("logical messages"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(relay.terminate(), Some(0));
}

/// Content the router cannot read (here: no `payload`) is dead-lettered with the reason and the
/// content; without a dead-letter topic walrelay stops at that message, naming its LSN, and
/// stops there again after a restart (nothing after it was confirmed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unroutable_message_is_dead_lettered_or_stops_the_relay_at_its_lsn() {
    let s = Setup::new("msg_poison").await;
    let dlq = format!("{}.dlq", s.topic_prefix);
    let dead_letter = format!("[dead_letter]\ntopic = \"{dlq}\"\n");
    let mut relay = RelayProcess::start(&config(&s, OUTBOX_TABLE, INCLUDE_OUTBOX, &dead_letter));
    s.wait_streaming(&mut relay).await;
    let c = s.db.connect().await;
    let poison = json!({"id": uuid(1), "aggregatetype": "Order", "aggregateid": "o-1"}).to_string();
    emit(&c, true, "outbox", &poison).await;
    emit(&c, true, "outbox", &event(&uuid(2), "o-1", "after it")).await;
    assert_eq!(ids(&s.read("Order", 1).await), [uuid(2)], "{}", s.diagnostics(&relay));
    let dead =
        kafka::consume(services().broker.bootstrap(), &dlq, 1, Duration::from_secs(30)).await;
    assert_eq!(dead.len(), 1, "{}", relay.log());
    let reason = dead[0].header_str("walrelay.error").unwrap_or("").to_string();
    assert!(reason.contains("no member `payload`"), "{reason}");
    assert_eq!(dead[0].value_str(), Some(poison.as_str()));
    assert_eq!(relay.terminate(), Some(0));

    let s = Setup::new("msg_poison_stop").await;
    let cfg = config(&s, OUTBOX_TABLE, INCLUDE_OUTBOX, "");
    let mut relay = RelayProcess::start(&cfg);
    s.wait_streaming(&mut relay).await;
    let c = s.db.connect().await;
    let lsn = emit(&c, true, "outbox", "[1, 2]").await;
    emit(&c, true, "outbox", &event(&uuid(3), "o-1", "after it")).await;
    assert_eq!(relay.wait_exit(Duration::from_secs(30)), Some(1), "{}", relay.log());
    let stopped = |log: &str| {
        log.contains(&format!("logical message (no event id) of message:outbox at LSN {lsn}"))
            && log.contains("a JSON array, not an object")
            && log.contains("fix what the application emits")
            && log.contains("nothing after this message was confirmed")
    };
    assert!(stopped(&relay.log()), "{}", relay.log());
    let mut again = RelayProcess::start(&cfg);
    assert_eq!(again.wait_exit(Duration::from_secs(30)), Some(1), "{}", again.log());
    assert!(stopped(&again.log()), "a restart stops at the same message:\n{}", again.log());
    assert!(s.read_within("Order", 1, Duration::from_secs(2)).await.is_empty());
    let line =
        again.log().lines().find(|l| l.contains("cannot be turned")).unwrap_or("").to_string();
    println!("dead-lettered: {reason}\nwithout a dead-letter topic, twice: {line}");
}

/// The SQL helper of docs/table-less-outbox.md, created from the page itself: the record of an
/// event emitted with it equals the record of the same event inserted as a row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_emit_helper_from_the_docs_sends_the_same_record_as_an_outbox_row() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/table-less-outbox.md"))
            .unwrap();
    let start = doc.find("-- walrelay's table-less outbox").expect("the helper is in the doc");
    let function = &doc[start..start + doc[start..].find("```").unwrap()];
    let s = Setup::new("msg_helper").await;
    s.db.execute(function).await;
    let mut relay = RelayProcess::start(&config(&s, OUTBOX_TABLE, INCLUDE_OUTBOX, ""));
    s.wait_streaming(&mut relay).await;
    let c = s.db.connect().await;
    let payload = "{\"orderId\": 42, \"total\": 12.5}";
    c.batch_execute("BEGIN").await.unwrap();
    insert_row(&c, &uuid(1), "42", payload).await;
    let emitted: String = c
        .query_one(
            "SELECT outbox_emit('Order', '42', 'OrderPaid', $1::text::jsonb)::text",
            &[&payload],
        )
        .await
        .unwrap()
        .get(0);
    c.batch_execute("COMMIT").await.unwrap();
    let got = s.read("Order", 2).await;
    assert_eq!(ids(&got), [uuid(1), emitted.clone()], "{}", s.diagnostics(&relay));
    let (row, message) = (&got[0], &got[1]);
    assert_eq!(message.value, row.value, "same value bytes");
    assert_eq!(message.value_str(), Some("{\"total\": 12.5, \"orderId\": 42}"));
    assert_eq!((message.key_str(), message.partition), (Some("42"), row.partition));
    println!(
        "outbox_emit → topic {}, key {:?}, id {emitted}, value {:?} (the row's: {:?})",
        message.topic,
        message.key_str(),
        message.value_str(),
        row.value_str()
    );
    assert_eq!(relay.terminate(), Some(0));
}
