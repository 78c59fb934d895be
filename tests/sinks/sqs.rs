//! The SQS sink against ElasticMQ: where each part of a record goes on standard and FIFO
//! queues, FIFO deduplication, each refusal, and an outage.

mod relay;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use walrelay::router::Record;
use walrelay::sink::sqs::{self, Sqs, SqsConfig};
use walrelay::sink::{Publish, Published};

use crate::support::sqs::{private_sqs, sqs as server, SqsServer};
use crate::support::{unique, wait_until};

fn record(topic: &str, key: Option<&str>, value: &[u8], event_id: &str) -> Arc<Record> {
    Arc::new(Record {
        key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
        value: Some(Bytes::copy_from_slice(value)),
        headers: vec![
            (Arc::from("id"), Bytes::copy_from_slice(event_id.as_bytes())),
            (Arc::from("type"), Bytes::from_static(b"OrderCreated")),
        ],
        ..Record::bare(topic, event_id)
    })
}

/// The sink's config for queues `<prefix>…` of `server`, and the sink, with `routed` set up.
async fn sink(server: &SqsServer, fifo: bool, routed: &[&str]) -> (SqsConfig, Sqs, String) {
    let prefix = format!("{}-", unique("sqs"));
    let config = sqs::parse(&server.options(&prefix, fifo)).expect("the harness's [sqs]");
    let routed: Vec<String> = routed.iter().map(|r| r.to_string()).collect();
    let lines = sqs::setup(&config, &routed).await.expect("setup");
    assert_eq!(lines.len(), routed.len(), "{lines:?}");
    for line in &lines {
        assert!(line.contains(": created, http://127.0.0.1:"), "{line}");
        assert!(!line.contains("fix queue_url"), "{line}");
    }
    let sink = sqs::connect(&config).await.expect("connect");
    (config, sink, prefix)
}

fn acked(answers: &[Published]) -> bool {
    answers.iter().all(|a| *a == Published::Acked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standard_queues_get_the_body_headers_and_key_of_their_routed_name() {
    let server = server();
    let (config, sink, prefix) = sink(server, false, &["orders.created", "payments"]).await;
    assert_eq!(sink.name(), "sqs");
    assert_eq!(sink.max_batch(), 10);
    let answers = sink
        .publish(&[
            record("orders.created", Some("order-1"), b"{\"n\":1}", "e1"),
            record("payments", Some("pay-1"), b"{\"n\":2}", "e2"),
            record("orders.created", None, b"{\"n\":3}", "e3"),
        ])
        .await;
    assert!(acked(&answers), "{answers:?}");

    let orders = server.read(&format!("{prefix}orders-created")).await;
    assert_eq!(orders.len(), 2, "{orders:?}");
    assert_eq!(config.queue_name_for("orders.created"), format!("{prefix}orders-created"));
    let first = orders.iter().find(|d| d.body == b"{\"n\":1}").expect("e1 arrived");
    assert_eq!(first.routed_to, format!("{prefix}orders-created"));
    assert_eq!(first.key.as_deref(), Some("order-1"));
    assert_eq!(first.header("walrelay-key"), Some("order-1"));
    assert_eq!(first.header("id"), Some("e1"));
    assert_eq!(first.header("type"), Some("OrderCreated"));
    assert_eq!(first.dedup_id, None, "a standard queue has no dedup id");
    let keyless = orders.iter().find(|d| d.body == b"{\"n\":3}").expect("e3 arrived");
    assert_eq!(keyless.key, None);
    assert_eq!(keyless.header("walrelay-key"), None);
    assert_eq!(keyless.headers.len(), 2, "{keyless:?}");

    let payments = server.read(&format!("{prefix}payments")).await;
    assert_eq!(payments.len(), 1, "{payments:?}");
    assert_eq!(payments[0].key.as_deref(), Some("pay-1"));
    eprintln!("standard: {} + {} messages read back", orders.len(), payments.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_groups_by_key_keeps_their_order_and_dedups_the_event_id() {
    let server = server();
    let (_, sink, prefix) = sink(server, true, &["orders"]).await;
    // Up to 10 records of distinct keys a call; k1's events in three calls.
    let calls = [
        vec![
            record("orders", Some("k1"), b"k1-1", "e1"),
            record("orders", Some("k2"), b"k2-1", "e2"),
        ],
        vec![record("orders", Some("k1"), b"k1-2", "e3"), record("orders", None, b"none-1", "e4")],
        vec![record("orders", Some("k1"), b"k1-3", "e5")],
        // e1 again within the 5 minutes: SQS answers success and keeps one.
        vec![record("orders", Some("k1"), b"k1-1 again", "e1")],
    ];
    for call in &calls {
        let answers = sink.publish(call).await;
        assert!(acked(&answers), "{answers:?}");
    }
    let read = server.read(&format!("{prefix}orders.fifo")).await;
    assert_eq!(read.len(), 5, "one message per event id: {read:?}");
    let k1: Vec<(&str, &[u8])> = read
        .iter()
        .filter(|d| d.key.as_deref() == Some("k1"))
        .map(|d| (d.dedup_id.as_deref().unwrap_or("?"), d.body.as_slice()))
        .collect();
    assert_eq!(k1, [("e1", &b"k1-1"[..]), ("e3", b"k1-2"), ("e5", b"k1-3")]);
    let keyless = read.iter().find(|d| d.body == b"none-1").expect("the keyless record");
    assert_eq!(keyless.key.as_deref(), Some("orders"), "no key: the routed name is the group");
    assert_eq!(keyless.dedup_id.as_deref(), Some("e4"));
    assert!(read.iter().all(|d| d.header("walrelay-key").is_none()), "{read:?}");
    eprintln!("fifo: 6 publishes, {} messages read back (e1 deduplicated)", read.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_with_one_oversize_record_refuses_that_one_and_acks_the_others() {
    let server = server();
    let (_, sink, prefix) = sink(server, false, &["big"]).await;
    let mut records: Vec<Arc<Record>> = (0..10)
        .map(|i| record("big", Some(&format!("k{i}")), b"small", &format!("e{i}")))
        .collect();
    records[4] = record("big", Some("k4"), &vec![b'x'; 256 * 1024 + 1], "e4");
    let answers = sink.publish(&records).await;
    for (i, answer) in answers.iter().enumerate() {
        match (i, answer) {
            (4, Published::Refused(why)) => {
                assert!(why.contains("bytes") && why.contains("max_message_bytes"), "{why}")
            }
            (_, Published::Acked) if i != 4 => {}
            _ => panic!("record {i}: {answer:?}"),
        }
    }
    // Three messages of 100 KiB: more than a batch may carry together, so two batches.
    let hundred = vec![b'y'; 100 * 1024];
    let answers = sink
        .publish(&[
            record("big", Some("a"), &hundred, "a1"),
            record("big", Some("b"), &hundred, "b1"),
            record("big", Some("c"), &hundred, "c1"),
        ])
        .await;
    assert!(acked(&answers), "{answers:?}");
    let read = server.read(&format!("{prefix}big")).await;
    assert_eq!(read.len(), 12, "9 small + 3 of 100 KiB");
    eprintln!("oversize: {:?}", answers_summary(&read));
}

fn answers_summary(read: &[crate::support::sinks::Delivered]) -> Vec<usize> {
    read.iter().map(|d| d.body.len()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_sqs_would_refuse_is_refused_with_the_reason() {
    let server = server();
    let (_, sink, prefix) = sink(server, false, &["refusals"]).await;
    let mut eleven = (*record("refusals", Some("k1"), b"{}", "e1")).clone();
    eleven.headers =
        (0..10).map(|i| (Arc::from(format!("h{i}")), Bytes::from_static(b"v"))).collect();
    let mut binary = (*record("refusals", Some("k2"), b"{}", "e2")).clone();
    binary.value = Some(Bytes::from_static(b"\x00\x01\x02avro"));
    let mut bad_header = (*record("refusals", Some("k3"), b"{}", "e3")).clone();
    bad_header.headers.push((Arc::from("trace"), Bytes::from_static(b"\xff\xfe")));
    let fine = record("refusals", Some("k4"), b"{}", "e4");
    let answers =
        sink.publish(&[Arc::new(eleven), Arc::new(binary), Arc::new(bad_header), fine]).await;
    let why = |i: usize| match &answers[i] {
        Published::Refused(why) => why.clone(),
        other => panic!("record {i}: {other:?}"),
    };
    assert!(
        why(0).contains("11 message attributes") && why(0).contains("at most 10"),
        "{}",
        why(0)
    );
    assert!(why(1).contains("U+0000") && why(1).contains("Avro"), "{}", why(1));
    assert!(why(2).contains("header trace is not UTF-8"), "{}", why(2));
    assert_eq!(answers[3], Published::Acked);
    assert_eq!(server.read(&format!("{prefix}refusals")).await.len(), 1);
    for i in 0..3 {
        eprintln!("refused: {}", why(i));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_that_does_not_exist_is_refused_naming_setup() {
    let server = server();
    let (_, sink, prefix) = sink(server, false, &["exists"]).await;
    let answers = sink
        .publish(&[
            record("exists", Some("a"), b"1", "e1"),
            record("nowhere", Some("b"), b"2", "e2"),
        ])
        .await;
    assert_eq!(answers[0], Published::Acked);
    match &answers[1] {
        Published::Refused(why) => {
            assert!(
                why.contains(&format!("{prefix}nowhere")) && why.contains("walrelay setup"),
                "{why}"
            );
            eprintln!("missing queue: {why}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_and_setup_finds_what_it_made() {
    let server = server();
    let (config, _, prefix) = sink(server, true, &["one", "two.parts"]).await;
    let line = sqs::check(&config).await.expect("check");
    assert!(line.contains("answers: 2 queues named") && line.contains("FIFO"), "{line}");
    let again = sqs::setup(&config, &["one".to_string()]).await.expect("setup again");
    assert_eq!(
        again,
        [format!(
            "SQS queue {prefix}one.fifo: exists, {}",
            server.queue_url(&format!("{prefix}one.fifo"))
        )]
    );
    eprintln!("check: {line}");

    // One fixed queue for every routed name: check reads its attributes.
    let mut fixed = server.options("", true);
    fixed.insert("queue_url".into(), server.queue_url(&format!("{prefix}one.fifo")));
    let fixed = sqs::parse(&fixed).expect("[sqs] with a fixed queue");
    let line = sqs::check(&fixed).await.expect("check of a fixed queue");
    assert!(line.contains(&format!("queue {prefix}one.fifo holds ~0 messages")), "{line}");
    eprintln!("check: {line}");
    let mut missing = server.options("", false);
    missing.insert("queue_url".into(), server.queue_url(&format!("{prefix}absent")));
    let e = sqs::check(&sqs::parse(&missing).expect("[sqs]")).await.expect_err("no such queue");
    assert!(!e.is_transient() && format!("{e:?}").contains("walrelay setup"), "{e:?}");
    eprintln!("check: {e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_retry_within_the_timeout_and_nothing_is_lost_after_start() {
    let server = private_sqs();
    let (config, sink, prefix) = sink(&server, true, &["outage"]).await;
    let queue = format!("{prefix}outage.fifo");
    assert!(acked(&sink.publish(&[record("outage", Some("k"), b"before", "e1")]).await));

    server.stop();
    let started = Instant::now();
    let answers = sink.publish(&[record("outage", Some("k"), b"during", "e2")]).await;
    let took = started.elapsed();
    match &answers[0] {
        Published::Retry { reason, .. } => eprintln!("outage: Retry after {took:?}: {reason}"),
        other => panic!("{other:?}"),
    }
    assert!(took <= config.timeout + Duration::from_secs(1), "{took:?}");

    let down = sqs::check(&config).await.expect_err("check while SQS is down");
    assert!(down.is_transient(), "{down:?}");
    eprintln!("outage: check says {down}");

    server.start().unwrap_or_else(|e| panic!("start again: {e}"));
    let restarted = Instant::now();
    let mut tries = 0;
    let delivered = wait_until("the retried record Acked", Duration::from_secs(60), || {
        tries += 1;
        let sink = &sink;
        async move {
            sink.publish(&[record("outage", Some("k"), b"during", "e2")]).await[0]
                == Published::Acked
        }
    })
    .await;
    assert!(delivered, "{}", server.log_tail(20));
    eprintln!("outage: Acked {:?} after start, {tries} tries", restarted.elapsed());
    let read = server.read(&queue).await;
    let bodies: Vec<&[u8]> = read.iter().map(|d| d.body.as_slice()).collect();
    assert_eq!(bodies, [&b"before"[..], b"during"], "sent before the stop, kept through it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_server_is_retry_at_the_timeout() {
    let server = private_sqs();
    let (config, sink, prefix) = sink(&server, false, &["stalled"]).await;
    let pid = server.pid().expect("running");
    crate::support::process::freeze(pid);
    let started = Instant::now();
    let answers = sink.publish(&[record("stalled", Some("k"), b"1", "e1")]).await;
    let took = started.elapsed();
    crate::support::process::thaw(pid);
    match &answers[0] {
        Published::Retry { reason, .. } => eprintln!("stalled: Retry after {took:?}: {reason}"),
        other => panic!("{other:?}"),
    }
    assert!(took >= config.timeout - Duration::from_millis(500), "{took:?}");
    assert!(took <= config.timeout + Duration::from_secs(1), "{took:?}");
    let delivered = wait_until("Acked once thawed", Duration::from_secs(30), || {
        let sink = &sink;
        async move {
            sink.publish(&[record("stalled", Some("k"), b"1", "e1")]).await[0] == Published::Acked
        }
    })
    .await;
    assert!(delivered);
    // A standard queue has no dedup: the stalled request may have landed too.
    let read = server.read(&format!("{prefix}stalled")).await;
    assert!(!read.is_empty() && read.iter().all(|d| d.body == b"1"), "{read:?}");
    eprintln!("stalled: {} copies read back after the retry", read.len());
}
