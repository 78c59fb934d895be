//! Rows the relay cannot deliver: with a dead-letter topic they go there with the
//! error headers and the stream moves on; without one the relay stops at the row, naming it.

use std::time::Duration;

use crate::common::{ids, release_slot, Setup};
use crate::support::kafka;
use crate::support::process::{lsn_after, RelayProcess};
use crate::support::services;
use walrelay::lsn::Lsn;

pub(crate) fn dead_letter_section(topic: &str) -> String {
    format!("[dead_letter]\ntopic = \"{topic}\"\n")
}

fn assert_dead_letter_headers(r: &kafka::Consumed, event_id: Option<&str>) {
    let error = r.header_str("walrelay.error").unwrap_or("");
    assert!(!error.is_empty(), "no walrelay.error header: {:?}", r.headers);
    assert_eq!(r.header_str("walrelay.table"), Some("public.outbox"), "{:?}", r.headers);
    let lsn = r.header_str("walrelay.lsn").unwrap_or("");
    assert!(lsn.parse::<Lsn>().is_ok(), "walrelay.lsn {lsn:?}");
    // The event id when the row has one; a NULL id has no header (or an empty one).
    match event_id {
        Some(id) => assert_eq!(r.header_str("walrelay.event.id"), Some(id), "{:?}", r.headers),
        None => {
            assert!(r.header_str("walrelay.event.id").unwrap_or("").is_empty(), "{:?}", r.headers)
        }
    }
}

/// With `table.field.event.id` on a nullable column, a row whose id is NULL cannot be routed:
/// with a dead-letter topic it goes there with its key, payload and the error headers, and the
/// rows after it are delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_with_null_event_id_goes_to_the_dead_letter_topic_and_the_stream_moves_on() {
    let s = Setup::new("nullid").await;
    s.db.execute("ALTER TABLE outbox ADD COLUMN event_id uuid").await;
    let dlq = format!("{}.dlq", s.topic_prefix);
    let mut relay = RelayProcess::start(&s.config_with(
        "\"table.field.event.id\" = \"event_id\"",
        "",
        &dead_letter_section(&dlq),
    ));
    s.wait_streaming(&mut relay).await;
    let client = s.db.connect().await;
    let mut want = Vec::new();
    for (n, id) in [
        Some("11111111-1111-1111-1111-111111111111"),
        None,
        Some("33333333-3333-3333-3333-333333333333"),
    ]
    .iter()
    .enumerate()
    {
        client
            .execute(
                "INSERT INTO outbox (id, event_id, aggregatetype, aggregateid, type, payload) \
                 VALUES (gen_random_uuid(), $1::text::uuid, 'Order', $2, 'E', $3::text::jsonb)",
                // The good rows share aggregate o-0 (one partition, so order is checked).
                &[id, &format!("o-{}", n % 2), &format!("{{\"n\": {n}}}")],
            )
            .await
            .unwrap();
        if let Some(id) = id {
            want.push(id.to_string());
        }
    }
    let good = s.read("Order", 2).await;
    assert_eq!(ids(&good), want, "{}", s.diagnostics(&relay));
    let dead =
        kafka::consume(services().broker.bootstrap(), &dlq, 1, Duration::from_secs(30)).await;
    assert_eq!(dead.len(), 1, "nothing dead-lettered:\n{}", relay.log());
    let d = &dead[0];
    println!(
        "dead letter: key {:?}, value {:?}, headers {:?}",
        d.key_str(),
        d.value_str(),
        d.headers
            .iter()
            .map(|(k, v)| format!(
                "{k}={}",
                String::from_utf8_lossy(v.as_deref().unwrap_or_default())
            ))
            .collect::<Vec<_>>()
    );
    assert_eq!(d.key_str(), Some("o-1"));
    assert_eq!(d.value_str(), Some("{\"n\": 1}"));
    assert_dead_letter_headers(d, None);
    assert!(relay.is_running(), "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// Without a dead-letter topic, a row whose `aggregatetype` makes an illegal topic name stops
/// the relay with exit code 1 and a message naming the row's LSN and event id; the slot keeps
/// the row; a restart stops at the same row with the same message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn illegal_topic_name_without_dead_letter_stops_the_relay_at_that_row_and_again_after_restart(
) {
    let s = Setup::new("badtopic").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let a = s.db.insert_outbox("outbox", "Order", "o-1", "E", Some("{}")).await;
    let poison = s.db.insert_outbox("outbox", "Bad Topic", "o-2", "E", Some("{}")).await;
    let b = s.db.insert_outbox("outbox", "Order", "o-3", "E", Some("{}")).await;
    let code = relay.wait_exit(Duration::from_secs(30));
    assert_eq!(code, Some(1), "{}", s.diagnostics(&relay));
    let log = relay.log();
    let line = |log: &str| {
        log.lines().find(|l| l.contains("walrelay stopped")).unwrap_or_default().to_string()
    };
    let first = line(&log);
    let lsn = lsn_after(&first, "LSN ");
    println!("poison row stopped the relay: {first}");
    assert!(lsn.is_some(), "the message names no LSN: {first}");
    assert!(first.contains(&poison), "the message does not name the event id {poison}: {first}");
    assert!(first.contains("topic") && first.contains("hint"), "no reason or hint: {first}");
    assert_eq!(ids(&s.read("Order", 1).await), vec![a.clone()]);
    assert!(s.slot_holds(&poison).await, "the slot was confirmed past the poison row");
    assert!(s.slot_holds(&b).await, "the slot was confirmed past the row after the poison row");

    let mut again = s.start_relay();
    assert_eq!(again.wait_exit(Duration::from_secs(30)), Some(1), "{}", again.log());
    let second = line(&again.log());
    let lsn_again = lsn_after(&second, "LSN ");
    println!("after restart: {second}");
    assert_eq!(lsn_again, lsn, "the restarted relay stopped elsewhere: {second}");
    assert!(second.contains(&poison), "{second}");
    let orders = s.read_within("Order", 3, Duration::from_secs(3)).await;
    assert!(!ids(&orders).contains(&b), "a row after the poison row was published");
    release_slot(&s).await;
}

/// A 50 KB payload with the producer's `message.max.bytes` at 10,000: librdkafka refuses it as
/// a broker would, the record goes to the dead-letter topic with its first bytes and the error
/// headers, and the next row is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_larger_than_message_max_bytes_is_dead_lettered_with_its_first_bytes() {
    let s = Setup::new("toolarge").await;
    let dlq = format!("{}.dlq", s.topic_prefix);
    let mut relay = RelayProcess::start(&s.config_with(
        "",
        "\"message.max.bytes\" = 10000",
        &dead_letter_section(&dlq),
    ));
    s.wait_streaming(&mut relay).await;
    // The good rows share an aggregate (one partition), so their order is checked too.
    let a = s.db.insert_outbox("outbox", "Order", "o-1", "E", Some("{\"small\": 1}")).await;
    let big = format!("{{\"blob\": \"{}\"}}", "y".repeat(50_000));
    let poison = s.db.insert_outbox("outbox", "Order", "o-2", "E", Some(&big)).await;
    let b = s.db.insert_outbox("outbox", "Order", "o-1", "E", Some("{\"small\": 3}")).await;
    let good = s.read("Order", 2).await;
    assert_eq!(ids(&good), vec![a, b], "{}", s.diagnostics(&relay));
    let dead =
        kafka::consume(services().broker.bootstrap(), &dlq, 1, Duration::from_secs(30)).await;
    assert_eq!(dead.len(), 1, "nothing dead-lettered:\n{}", relay.log());
    let d = &dead[0];
    let value = d.value.clone().unwrap_or_default();
    println!(
        "dead letter of a {} B payload: {} B kept, key {:?}, error {:?}",
        big.len(),
        value.len(),
        d.key_str(),
        d.header_str("walrelay.error")
    );
    assert_eq!(d.key_str(), Some("o-2"));
    assert!(!value.is_empty() && value.len() < 10_000, "dead letter value of {} B", value.len());
    assert!(big.as_bytes().starts_with(&value), "the dead letter is not the payload's first bytes");
    assert_dead_letter_headers(d, Some(&poison));
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// A `partition` placement naming a partition the topic does not have: the broker (or
/// librdkafka, once it knows the topic) refuses the record for good; it is dead-lettered with
/// the reason and the stream moves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_placement_outside_the_topics_partitions_is_dead_lettered() {
    let s = Setup::new("badpart").await;
    s.db.execute("ALTER TABLE outbox ADD COLUMN part int").await;
    let dlq = format!("{}.dlq", s.topic_prefix);
    // The topic exists with 4 partitions before the relay produces to it.
    kafka::create_topic(services().broker.bootstrap(), &s.topic("Order"), 4).await;
    let mut relay = RelayProcess::start(&s.config_with(
        "\"table.fields.additional.placement\" = \"part:partition\"",
        "",
        &dead_letter_section(&dlq),
    ));
    s.wait_streaming(&mut relay).await;
    let client = s.db.connect().await;
    let mut rows = Vec::new();
    for part in [1, 99, 2] {
        let row = client
            .query_one(
                "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, part) \
                 VALUES (gen_random_uuid(), 'Order', 'o-1', 'E', '{}', $1) RETURNING id::text",
                &[&part],
            )
            .await
            .unwrap();
        rows.push((part, row.get::<_, String>(0)));
    }
    let good: Vec<String> =
        rows.iter().filter(|(p, _)| *p != 99).map(|(_, id)| id.clone()).collect();
    let dead_id = rows[1].1.clone();
    let delivered = s.read("Order", 2).await;
    assert_eq!(ids(&delivered), good, "{}", s.diagnostics(&relay));
    assert_eq!(delivered.iter().map(|r| r.partition).collect::<Vec<_>>(), vec![1, 2]);
    let dead =
        kafka::consume(services().broker.bootstrap(), &dlq, 1, Duration::from_secs(30)).await;
    assert_eq!(dead.len(), 1, "nothing dead-lettered:\n{}", relay.log());
    assert_dead_letter_headers(&dead[0], Some(&dead_id));
    println!("partition 99 of 4: dead-lettered with {:?}", dead[0].header_str("walrelay.error"));
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}
