//! The RabbitMQ sink against a real RabbitMQ node (tests/support/rabbitmq.rs): where a record
//! goes, what arrives, what is refused, and what an outage looks like to the relay.

mod connections;
mod relay;

use crate::support::rabbitmq::{rabbitmq, RabbitMqServer, PASSWORD};
use crate::support::unique;
use bytes::Bytes;
use lapin::types::{AMQPValue, FieldTable};
use lapin::ExchangeKind;
use std::sync::Arc;
use std::time::{Duration, Instant};
use walrelay::router::Record;
use walrelay::sink::rabbitmq::{self, ExchangeType, RabbitMq, RabbitMqConfig};
use walrelay::sink::{Publish, Published};

pub(super) fn record(
    topic: &str,
    event_id: &str,
    key: Option<&str>,
    value: Option<&[u8]>,
) -> Arc<Record> {
    Arc::new(Record {
        key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
        value: value.map(Bytes::copy_from_slice),
        headers: vec![(Arc::from("id"), Bytes::copy_from_slice(event_id.as_bytes()))],
        ..Record::bare(topic, event_id)
    })
}

pub(super) fn config(server: &RabbitMqServer, exchange: &str, timeout: Duration) -> RabbitMqConfig {
    RabbitMqConfig {
        url: server.url(),
        exchange: exchange.to_string(),
        exchange_type: ExchangeType::Topic,
        timeout,
        ca_file: None,
    }
}

/// A topic exchange of the test's own, and a client publishing to it.
async fn client_with_exchange(server: &RabbitMqServer, prefix: &str) -> (RabbitMq, String) {
    let exchange = unique(prefix);
    server.declare_exchange(&exchange, ExchangeKind::Topic).await;
    let client = rabbitmq::connect(&config(server, &exchange, Duration::from_secs(10)))
        .await
        .expect("connect");
    (client, exchange)
}

pub(super) async fn publish(client: &RabbitMq, record: Arc<Record>) -> Published {
    let mut answers = client.publish(&[record]).await;
    assert_eq!(answers.len(), 1);
    answers.remove(0)
}

/// Routed name → routing key, event id → message_id, headers and key → headers, persistent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_queue_gets_message_id_headers_key_and_persistent_delivery() {
    let server = rabbitmq();
    let (client, exchange) = client_with_exchange(server, "rmq_fields").await;
    let queue = server.bind_queue("rmq_fields_q", &exchange, "order.*").await;
    let mut with_all =
        (*record("order.created", "ev-1", Some("order-7"), Some(b"{\"a\":1}"))).clone();
    with_all.headers.push((Arc::from("content-type"), Bytes::from_static(b"application/json")));
    with_all.timestamp_ms = Some(1_765_000_000_123);
    let records = [
        Arc::new(with_all),
        record("order.paid", "ev-2", None, Some(b"paid")),
        record("order.deleted", "ev-3", Some("order-7"), None),
    ];
    for r in &records {
        assert_eq!(publish(&client, r.clone()).await, Published::Acked, "{}", r.event_id);
    }
    let raw = server.read_raw(&queue).await;
    let got: Vec<_> = raw.iter().map(crate::support::rabbitmq::delivered).collect();
    eprintln!("{} messages in {queue}: {got:?}", got.len());
    assert_eq!(got.len(), 3);
    let routed: Vec<_> = got.iter().map(|d| d.routed_to.as_str()).collect();
    assert_eq!(routed, ["order.created", "order.paid", "order.deleted"]);
    let ids: Vec<_> = got.iter().map(|d| d.dedup_id.as_deref()).collect();
    assert_eq!(ids, [Some("ev-1"), Some("ev-2"), Some("ev-3")]);
    assert_eq!(got[0].key.as_deref(), Some("order-7"));
    assert_eq!(got[1].key, None, "no key, no walrelay-key header");
    assert_eq!(got[0].header("id"), Some("ev-1"));
    assert_eq!(got[0].header("walrelay-key"), Some("order-7"));
    assert_eq!(got[0].body, b"{\"a\":1}");
    assert_eq!(got[2].body, b"", "no value, empty body");
    for message in &raw {
        assert_eq!(*message.delivery.properties.delivery_mode(), Some(2), "persistent");
    }
    let first = &raw[0].delivery.properties;
    assert_eq!(first.content_type().as_ref().map(|c| c.as_str()), Some("application/json"));
    assert_eq!(*first.timestamp(), Some(1_765_000_000));
    assert_eq!(*raw[1].delivery.properties.content_type(), None, "unset unless told");
}

/// No queue bound for the routing key: RabbitMQ acks the message it dropped, and only the
/// mandatory flag's basic.return tells; the sink says Refused, naming exchange, key and fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routing_key_with_no_bound_queue_is_refused_not_acked() {
    let server = rabbitmq();
    let (client, exchange) = client_with_exchange(server, "rmq_noroute").await;
    let queue = server.bind_queue("rmq_noroute_q", &exchange, "bound.key").await;
    let answer = publish(&client, record("unbound.key", "ev-nr", Some("k"), Some(b"x"))).await;
    eprintln!("unroutable: {answer:?}");
    let Published::Refused(reason) = answer else { panic!("expected Refused, got {answer:?}") };
    assert!(reason.contains(&format!("{exchange:?}")), "{reason}");
    assert!(reason.contains("\"unbound.key\"") && reason.contains("NO_ROUTE"), "{reason}");
    assert!(reason.contains("bind a queue") && reason.contains("alternate exchange"), "{reason}");
    // The channel goes on: the next routable record is acked and is the only one there.
    let answer = publish(&client, record("bound.key", "ev-ok", Some("k"), Some(b"y"))).await;
    assert_eq!(answer, Published::Acked);
    let got = server.read(&queue).await;
    assert_eq!(got.iter().map(|d| d.dedup_id.clone()).collect::<Vec<_>>(), [Some("ev-ok".into())]);
}

/// Many publishes at once, half of them unroutable: each answer is its own record's (a
/// returned message carries no delivery tag, so this is what one channel per publish in
/// flight is for).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_routed_and_unroutable_publishes_are_each_answered_right() {
    let server = rabbitmq();
    let (client, exchange) = client_with_exchange(server, "rmq_mixed").await;
    let queue = server.bind_queue("rmq_mixed_q", &exchange, "routed").await;
    let client = Arc::new(client);
    let started = Instant::now();
    let tasks: Vec<_> = (0..400)
        .map(|i| {
            let client = client.clone();
            let topic = if i % 2 == 0 { "routed" } else { "nowhere" };
            let r = record(topic, &format!("ev-{i}"), Some(&format!("k{i}")), Some(b"v"));
            tokio::spawn(async move { (i, publish(&client, r).await) })
        })
        .collect();
    let mut wrong = Vec::new();
    for task in tasks {
        let (i, answer) = task.await.expect("task");
        let right = match answer {
            Published::Acked => i % 2 == 0,
            Published::Refused(_) => i % 2 == 1,
            Published::Retry { .. } => false,
        };
        if !right {
            wrong.push((i, answer));
        }
    }
    eprintln!("400 concurrent publishes answered in {:.2?}", started.elapsed());
    assert!(wrong.is_empty(), "wrong answers: {wrong:?}");
    let got = server.read_until(&queue, 200, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 200);
    assert!(got.iter().all(|d| d.routed_to == "routed"));
}

/// A call's records go out together on one channel, and the broker may confirm them with one
/// `multiple` ack, which lapin can pair with the wrong returned message: each record, routed
/// or not, must still get its own answer (the returned message says whose it is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_of_routed_and_unroutable_records_on_one_channel_answer_each_record_right() {
    let server = rabbitmq();
    let (client, exchange) = client_with_exchange(server, "rmq_calls").await;
    let queue = server.bind_queue("rmq_calls_q", &exchange, "routed").await;
    let client = Arc::new(client);
    let calls: Vec<_> = (0..50)
        .map(|c| {
            let client = client.clone();
            tokio::spawn(async move {
                // The unroutable ones at a different place in each call.
                let records: Vec<_> = (0..8)
                    .map(|i| {
                        let n = c * 8 + i;
                        let topic = if (i + c) % 3 == 0 { "nowhere" } else { "routed" };
                        record(topic, &format!("ev-{n}"), Some(&format!("k{n}")), Some(b"v"))
                    })
                    .collect();
                let answers = client.publish(&records).await;
                (records, answers)
            })
        })
        .collect();
    let (mut wrong, mut routed) = (Vec::new(), 0);
    for call in calls {
        let (records, answers) = call.await.expect("call");
        assert_eq!(answers.len(), records.len());
        for (r, answer) in records.iter().zip(answers) {
            match (&*r.topic, &answer) {
                ("routed", Published::Acked) => routed += 1,
                ("nowhere", Published::Refused(_)) => {}
                _ => wrong.push((r.event_id.clone(), answer)),
            }
        }
    }
    assert!(wrong.is_empty(), "wrong answers: {wrong:?}");
    let got = server.read_until(&queue, routed, Duration::from_secs(10)).await;
    assert_eq!(got.len(), routed);
    assert!(got.iter().all(|d| d.routed_to == "routed"));
}

/// Two records alike (same routing key, same event id) in one call could not be told apart
/// by their returned message: they go out one after the other, and each is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_with_one_event_id_twice_answers_both() {
    let server = rabbitmq();
    let (client, exchange) = client_with_exchange(server, "rmq_twice_call").await;
    let queue = server.bind_queue("rmq_twice_call_q", &exchange, "routed").await;
    let records = [
        record("routed", "ev-same", Some("k1"), Some(b"1")),
        record("nowhere", "ev-lost", Some("k2"), Some(b"2")),
        record("routed", "ev-same", Some("k3"), Some(b"3")),
        record("nowhere", "ev-lost", Some("k4"), Some(b"4")),
    ];
    let answers = client.publish(&records).await;
    assert_eq!(answers[0], Published::Acked);
    assert!(matches!(answers[1], Published::Refused(_)), "{:?}", answers[1]);
    assert_eq!(answers[2], Published::Acked);
    assert!(matches!(answers[3], Published::Refused(_)), "{:?}", answers[3]);
    let got = server.read_until(&queue, 2, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 2);
}

/// The default exchange "" routes to the queue named by the routing key, and nowhere else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_exchange_routes_to_the_queue_named_by_the_routed_name() {
    let server = rabbitmq();
    let queue = unique("rmq_default_q");
    server.declare_queue(&queue).await;
    let client =
        rabbitmq::connect(&config(server, "", Duration::from_secs(10))).await.expect("connect");
    let answer = publish(&client, record(&queue, "ev-d1", Some("k"), Some(b"d"))).await;
    assert_eq!(answer, Published::Acked);
    let answer = publish(&client, record(&unique("rmq_no_such_q"), "ev-d2", None, None)).await;
    let Published::Refused(reason) = answer else { panic!("expected Refused, got {answer:?}") };
    assert!(reason.contains("declare that queue"), "{reason}");
    let got = server.read(&queue).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].routed_to, queue);
    assert_eq!(got[0].dedup_id.as_deref(), Some("ev-d1"));
}

/// RabbitMQ keeps no record of message_id: the same event twice is two messages. (The
/// relay offers a record again only when its confirm was lost; consumers dedupe.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_event_id_twice_is_delivered_twice_rabbitmq_has_no_dedup() {
    let server = rabbitmq();
    let (client, exchange) = client_with_exchange(server, "rmq_twice").await;
    let queue = server.bind_queue("rmq_twice_q", &exchange, "#").await;
    for _ in 0..2 {
        let answer = publish(&client, record("twice", "ev-same", Some("k"), Some(b"t"))).await;
        assert_eq!(answer, Published::Acked);
    }
    let got = server.read(&queue).await;
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|d| d.dedup_id.as_deref() == Some("ev-same")));
}

/// What AMQP or the broker cannot take is refused, naming why, and nothing arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_utf8_header_and_a_message_over_max_message_size_are_refused() {
    let server = rabbitmq();
    let (client, exchange) = client_with_exchange(server, "rmq_refuse").await;
    let queue = server.bind_queue("rmq_refuse_q", &exchange, "#").await;
    let mut bad = (*record("r", "ev-bad", Some("k"), Some(b"x"))).clone();
    bad.headers.push((Arc::from("blob"), Bytes::from_static(b"\xff\x00")));
    let answer = publish(&client, Arc::new(bad)).await;
    let Published::Refused(reason) = answer else { panic!("expected Refused, got {answer:?}") };
    assert!(reason.contains("\"blob\"") && reason.contains("UTF-8"), "{reason}");
    // The test node's max_message_size is 1 MiB.
    let big = vec![b'x'; 1_100_000];
    let answer = publish(&client, record("r", "ev-big", Some("k"), Some(&big))).await;
    eprintln!("1.1 MB message: {answer:?}");
    let Published::Refused(reason) = answer else { panic!("expected Refused, got {answer:?}") };
    assert!(reason.contains("max_message_size"), "{reason}");
    // The channel the broker closed is not reused: the next record goes through.
    let answer = publish(&client, record("r", "ev-after", Some("k"), Some(b"ok"))).await;
    assert_eq!(answer, Published::Acked);
    let got = server.read(&queue).await;
    assert_eq!(
        got.iter().map(|d| d.dedup_id.clone()).collect::<Vec<_>>(),
        [Some("ev-after".into())]
    );
}

/// A missing exchange closes the channel (404): Retry naming setup, and once the exchange is
/// declared the next publish goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_exchange_is_retry_naming_setup_until_it_exists() {
    let server = rabbitmq();
    let exchange = unique("rmq_missing");
    let client = rabbitmq::connect(&config(server, &exchange, Duration::from_secs(10)))
        .await
        .expect("connect");
    let answer = publish(&client, record("m", "ev-m1", None, Some(b"m"))).await;
    eprintln!("missing exchange: {answer:?}");
    let Published::Retry { reason, .. } = answer else { panic!("expected Retry, got {answer:?}") };
    assert!(reason.contains("does not exist") && reason.contains("walrelay setup"), "{reason}");
    let lines = rabbitmq::setup(&config(server, &exchange, Duration::from_secs(10)), &["m".into()])
        .await
        .expect("setup");
    eprintln!("setup: {lines:?}");
    let queue = server.bind_queue("rmq_missing_q", &exchange, "m").await;
    let answer = publish(&client, record("m", "ev-m2", None, Some(b"m"))).await;
    assert_eq!(answer, Published::Acked);
    assert_eq!(server.read(&queue).await.len(), 1);
}

/// Setup declares the exchange durable and says so; check fails (definite, naming setup)
/// before it and reports the exchange after; a clash of types is reported, not fatal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_declares_the_exchange_and_check_reports_it() {
    let server = rabbitmq();
    let exchange = unique("rmq_setup");
    let mut config = config(server, &exchange, Duration::from_secs(10));
    let e = rabbitmq::check(&config).await.expect_err("no exchange yet");
    eprintln!("check before setup: {e} / {:?}", e.hint());
    assert!(!e.is_transient() && e.hint().is_some_and(|h| h.contains("walrelay setup")), "{e}");
    let lines = rabbitmq::setup(&config, &["a.b".into(), "c".into()]).await.expect("setup");
    eprintln!("setup: {lines:#?}");
    assert!(lines[0].contains("durable topic, declared or found"), "{lines:?}");
    assert!(lines[1].contains("a.b, c") && lines[1].contains("NO_ROUTE"), "{lines:?}");
    let line = rabbitmq::check(&config).await.expect("check");
    eprintln!("check: {line}");
    assert!(line.contains("exists") && !line.contains(PASSWORD), "{line}");
    config.exchange_type = ExchangeType::Fanout;
    let lines = rabbitmq::setup(&config, &[]).await.expect("setup with another type");
    eprintln!("setup, other type: {lines:?}");
    assert!(lines[0].contains("exists, but not as a durable fanout exchange"), "{lines:?}");
    // The default exchange: setup declares the queues the routed names name.
    let queue = unique("rmq_setup_q");
    let lines = rabbitmq::setup(
        &RabbitMqConfig { exchange: String::new(), ..config },
        std::slice::from_ref(&queue),
    )
    .await
    .expect("setup default exchange");
    eprintln!("setup, default exchange: {lines:?}");
    assert!(lines[0].contains(&queue) && lines[0].contains("durable"), "{lines:?}");
}

/// A queue that refuses more (full, `x-overflow = reject-publish`) nacks the publish: Retry,
/// not Acked and not Refused (it takes the record again once consumers drain it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_that_rejects_publishes_nacks_and_the_record_is_retried() {
    let server = rabbitmq();
    let queue = unique("rmq_full_q");
    let mut arguments = FieldTable::default();
    arguments.insert("x-max-length".into(), AMQPValue::LongLongInt(1));
    arguments.insert("x-overflow".into(), AMQPValue::LongString("reject-publish".into()));
    server.declare_queue_with(&queue, arguments).await;
    let client =
        rabbitmq::connect(&config(server, "", Duration::from_secs(10))).await.expect("connect");
    assert_eq!(publish(&client, record(&queue, "ev-f1", None, Some(b"1"))).await, Published::Acked);
    let answer = publish(&client, record(&queue, "ev-f2", None, Some(b"2"))).await;
    eprintln!("full queue: {answer:?}");
    let Published::Retry { reason, .. } = answer else { panic!("expected Retry, got {answer:?}") };
    assert!(reason.contains("nacked"), "{reason}");
    // Drained, it takes the record offered again.
    assert_eq!(server.read(&queue).await.len(), 1);
    assert_eq!(publish(&client, record(&queue, "ev-f2", None, Some(b"2"))).await, Published::Acked);
    let got = server.read(&queue).await;
    assert_eq!(got.iter().map(|d| d.dedup_id.clone()).collect::<Vec<_>>(), [Some("ev-f2".into())]);
}
