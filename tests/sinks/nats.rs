//! The NATS JetStream sink against a real nats-server: where each part of a record goes, the
//! dedup by `Nats-Msg-Id`, each refusal, and an outage (Retry within the timeout, then Acked
//! with nothing lost). Each test has streams and subjects of its own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use walrelay::router::Record;
use walrelay::sink::nats::{self, Nats};
use walrelay::sink::{Publish, Published};

use crate::support::nats::{nats as shared, private_nats};
use crate::support::{unique, wait_until};

mod audit;
mod connections;
mod credentials;
mod relay;

fn record(topic: &str, event_id: &str, key: Option<&str>, value: Option<&[u8]>) -> Arc<Record> {
    Arc::new(Record {
        key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
        value: value.map(Bytes::copy_from_slice),
        headers: vec![
            (Arc::from("id"), Bytes::copy_from_slice(event_id.as_bytes())),
            (Arc::from("type"), Bytes::from_static(b"OrderCreated")),
        ],
        ..Record::bare(topic, event_id)
    })
}

async fn publish(sink: &Nats, record: Arc<Record>) -> Published {
    let answers = sink.publish(&[record]).await;
    assert_eq!(answers.len(), 1, "one answer per record: {answers:?}");
    answers.into_iter().next().unwrap_or_else(|| unreachable!())
}

/// A stream of the test's own capturing `<name>.>`, and a sink connected to the server.
async fn stream_and_sink(
    server: &crate::support::nats::NatsServer,
    name: &str,
) -> (String, nats::NatsConfig, Nats) {
    let stream = unique(name);
    let wildcard = format!("{stream}.>");
    let config = server.create_stream(&stream, &[&wildcard]).await;
    let sink = nats::connect(&config).await.expect("connect to the test server");
    (stream, config, sink)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_go_to_their_subject_with_headers_key_and_event_id() {
    let server = shared();
    let (stream, _, sink) = stream_and_sink(server, "nats_routing").await;
    let subject = format!("{stream}.outbox.event.order");
    let with_all = record(&subject, "e-1", Some("order-7"), Some(br#"{"total":12}"#));
    let bare = record(&subject, "e-2", None, None);
    assert_eq!(publish(&sink, with_all).await, Published::Acked);
    assert_eq!(publish(&sink, bare).await, Published::Acked);

    let got = server.read(&subject).await;
    println!("read back {} messages from {subject}: {got:?}", got.len());
    assert_eq!(got.len(), 2, "{got:?}");
    let (first, second) = (&got[0], &got[1]);
    assert_eq!(first.routed_to, subject);
    assert_eq!(first.dedup_id.as_deref(), Some("e-1"));
    assert_eq!(first.header("Nats-Msg-Id"), Some("e-1"));
    assert_eq!(first.key.as_deref(), Some("order-7"));
    assert_eq!(first.header("walrelay-key"), Some("order-7"));
    assert_eq!(first.header("id"), Some("e-1"));
    assert_eq!(first.header("type"), Some("OrderCreated"));
    assert_eq!(first.body, br#"{"total":12}"#);
    assert_eq!(second.dedup_id.as_deref(), Some("e-2"));
    assert_eq!(second.key, None, "no key, no walrelay-key header: {second:?}");
    assert!(second.body.is_empty(), "no value, empty body: {second:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_event_id_twice_is_one_message_in_the_stream() {
    let server = shared();
    let (stream, _, sink) = stream_and_sink(server, "nats_dedup").await;
    let subject = format!("{stream}.orders");
    let r = record(&subject, "dup-1", Some("k"), Some(b"first"));
    assert_eq!(publish(&sink, r.clone()).await, Published::Acked);
    // A restart sends it again: JetStream's PubAck says duplicate, and that is an Acked.
    assert_eq!(publish(&sink, r).await, Published::Acked);
    assert_eq!(
        publish(&sink, record(&subject, "dup-2", Some("k"), Some(b"x"))).await,
        Published::Acked
    );

    let got = server.read(&subject).await;
    let ids: Vec<_> = got.iter().map(|d| d.dedup_id.clone().unwrap_or_default()).collect();
    println!("3 publishes of 2 event ids; the stream holds {}: {ids:?}", got.len());
    assert_eq!(ids, ["dup-1", "dup-2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_no_stream_captures_is_refused_naming_the_fix() {
    let server = shared();
    let (stream, _, sink) = stream_and_sink(server, "nats_nostream").await;
    let subject = format!("{}.orders", unique("nats_nowhere"));
    let answer = publish(&sink, record(&subject, "e-1", None, Some(b"x"))).await;
    println!("{stream} exists, {subject} is in no stream: {answer:?}");
    match answer {
        Published::Refused(reason) => {
            assert!(reason.contains(&subject), "{reason}");
            assert!(reason.contains("walrelay setup"), "{reason}");
        }
        other => panic!("expected Refused, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_are_not_subjects_and_bad_headers_are_refused() {
    let server = shared();
    let (stream, _, sink) = stream_and_sink(server, "nats_names").await;
    for topic in
        [format!("{stream}.a b"), format!("{stream}.*"), format!("{stream}..x"), String::new()]
    {
        match publish(&sink, record(&topic, "e-1", None, None)).await {
            Published::Refused(reason) => {
                println!("{topic:?}: {reason}");
                assert!(reason.contains("not a NATS subject"), "{reason}");
            }
            other => panic!("{topic:?}: expected Refused, got {other:?}"),
        }
    }
    let subject = format!("{stream}.orders");
    let mut bad = (*record(&subject, "e-2", None, None)).clone();
    bad.headers.push((Arc::from("blob"), Bytes::from_static(&[0xc3, 0x28])));
    match publish(&sink, Arc::new(bad)).await {
        Published::Refused(reason) => assert!(reason.contains("\"blob\""), "{reason}"),
        other => panic!("expected Refused for a non-UTF-8 header, got {other:?}"),
    }
    assert!(server.read(&subject).await.is_empty(), "nothing was published");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_max_payload_is_refused() {
    let server = shared();
    let (stream, _, sink) = stream_and_sink(server, "nats_large").await;
    let subject = format!("{stream}.orders");
    // nats-server's default max_payload is 1 MiB.
    let big = vec![b'x'; 1024 * 1024 + 1];
    match publish(&sink, record(&subject, "big-1", None, Some(&big))).await {
        Published::Refused(reason) => {
            println!("1 MiB + 1 byte: {reason}");
            assert!(reason.contains("max_payload"), "{reason}");
        }
        other => panic!("expected Refused, got {other:?}"),
    }
    let fits = record(&subject, "small-1", None, Some(b"x"));
    assert_eq!(publish(&sink, fits).await, Published::Acked, "the next one goes through");

    // A stream's own limit, below the server's: JetStream refuses in its PubAck.
    let small = unique("nats_small");
    let js = async_nats::jetstream::new(
        async_nats::connect(server.url()).await.expect("a client of the test's own"),
    );
    let limited = async_nats::jetstream::stream::Config {
        name: small.clone(),
        subjects: vec![format!("{small}.>")],
        max_message_size: 100,
        ..Default::default()
    };
    js.create_stream(limited).await.expect("a stream with max_msg_size 100");
    let subject = format!("{small}.orders");
    match publish(&sink, record(&subject, "big-2", None, Some(&[b'x'; 200]))).await {
        Published::Refused(reason) => {
            println!("200 bytes into max_msg_size 100: {reason}");
            assert!(reason.contains("max_msg_size"), "{reason}");
        }
        other => panic!("expected Refused, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_publishes_are_each_acked_once() {
    let server = shared();
    let (stream, _, sink) = stream_and_sink(server, "nats_concurrent").await;
    let sink = Arc::new(sink);
    let mut tasks = tokio::task::JoinSet::new();
    for key in 0..20 {
        let (sink, subject) = (sink.clone(), format!("{stream}.k{key}"));
        tasks.spawn(async move {
            let mut answers = Vec::new();
            for n in 0..10 {
                let r = record(&subject, &format!("k{key}-{n}"), Some(&format!("k{key}")), None);
                answers.push(publish(&sink, r).await);
            }
            answers
        });
    }
    let answers: Vec<Published> = tasks.join_all().await.into_iter().flatten().collect();
    assert_eq!(answers.len(), 200);
    assert!(answers.iter().all(|a| *a == Published::Acked), "{answers:?}");
    let got = server.read(&format!("{stream}.>")).await;
    println!("20 tasks x 10 records: {} acked, the stream holds {}", answers.len(), got.len());
    assert_eq!(got.len(), 200);
    let in_order = got.iter().filter(|d| d.routed_to.ends_with(".k3")).map(|d| d.dedup_id.clone());
    let expected = (0..10).map(|n| Some(format!("k3-{n}")));
    assert!(in_order.eq(expected), "one key's records in the order sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_creates_finds_and_updates_the_stream_and_check_answers() {
    let server = shared();
    let stream = unique("nats_setup");
    let mut config = server.config(&stream, &[]);
    let routed = [format!("{stream}.a"), format!("{stream}.b"), format!("{stream}.a")];
    let created = nats::setup(&config, &routed).await.expect("setup creates");
    println!("{created:?}");
    assert!(
        created[0].contains("created") && created[0].contains(&format!("{stream}.b")),
        "{created:?}"
    );
    let found = nats::setup(&config, &routed[..2]).await.expect("setup again");
    println!("{found:?}");
    assert!(found[0].contains("found"), "{found:?}");
    config.duplicate_window = Duration::from_secs(600);
    let more = [format!("{stream}.a"), format!("{stream}.c")];
    let updated = nats::setup(&config, &more).await.expect("setup updates");
    println!("{updated:?}");
    assert!(
        updated[0].contains("updated")
            && updated[0].contains("added: ")
            && updated[0].contains("10m"),
        "{updated:?}"
    );
    // Every subject is captured now: a publish to each is acknowledged.
    let sink = nats::connect(&config).await.expect("connect");
    for subject in [&routed[0], &routed[1], &more[1]] {
        assert_eq!(
            publish(&sink, record(subject, "e", None, None)).await,
            Published::Acked,
            "{subject}"
        );
    }
    // A stream capturing by a wildcard already captures a routed name under it.
    config.stream_subjects = vec![format!("{stream}.>")];
    let wildcard = nats::setup(&config, &[]).await.expect("setup with a wildcard");
    config.stream_subjects = Vec::new();
    let under = [format!("{stream}.d.e")];
    let found = nats::setup(&config, &under).await.expect("setup under the wildcard");
    println!("{wildcard:?} then {found:?}");
    assert!(found[0].contains("found") && found[0].contains(&format!("{stream}.>")), "{found:?}");
    let line = nats::check(&config).await.expect("check");
    println!("check: {line}");
    assert!(line.contains("answers") && line.contains("JetStream"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_is_retry_within_the_timeout_and_once_started_nothing_is_lost() {
    let server = private_nats();
    let (stream, config, sink) = stream_and_sink(&server, "nats_outage").await;
    let subject = format!("{stream}.orders");
    for i in 0..3 {
        let r = record(&subject, &format!("before-{i}"), Some("k"), Some(b"v"));
        assert_eq!(publish(&sink, r).await, Published::Acked);
    }

    server.stop();
    let during = record(&subject, "during-0", Some("k"), Some(b"v"));
    // The relay offers the record again after each Retry: every attempt answers in time.
    for attempt in 1..=2 {
        let started = Instant::now();
        let answer = publish(&sink, during.clone()).await;
        let took = started.elapsed();
        println!(
            "server stopped, attempt {attempt}: {answer:?} after {took:.1?} (timeout {:?})",
            config.timeout
        );
        assert!(matches!(answer, Published::Retry { .. }), "{answer:?}");
        assert!(took <= config.timeout + Duration::from_secs(1), "took {took:?}");
    }

    server.start();
    let restarted = Instant::now();
    // The client reconnects by itself; the relay offers the record again until it is acked.
    let acked =
        wait_until("the record is acked after the restart", Duration::from_secs(60), || {
            let (sink, during) = (&sink, during.clone());
            async move { publish(sink, during).await == Published::Acked }
        })
        .await;
    println!("acked {:.1?} after the restart", restarted.elapsed());
    assert!(acked, "{}", server.log_tail(20));
    for i in 0..2 {
        let r = record(&subject, &format!("after-{i}"), Some("k"), Some(b"v"));
        assert_eq!(publish(&sink, r).await, Published::Acked);
    }

    let ids: Vec<_> =
        server.read(&subject).await.into_iter().map(|d| d.dedup_id.unwrap_or_default()).collect();
    println!("the stream holds {}: {ids:?}", ids.len());
    assert_eq!(ids, ["before-0", "before-1", "before-2", "during-0", "after-0", "after-1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_back_starts_at_a_sequence_and_stops_at_a_limit() {
    let server = shared();
    let (stream, config, sink) = stream_and_sink(server, "nats_readback").await;
    let subject = format!("{stream}.orders");
    let other = format!("{stream}.other");
    for i in 0..5 {
        assert_eq!(
            publish(&sink, record(&subject, &format!("r-{i}"), None, None)).await,
            Published::Acked
        );
        assert_eq!(
            publish(&sink, record(&other, &format!("o-{i}"), None, None)).await,
            Published::Acked
        );
    }
    let all = nats::read_back(&config, &subject, 1, usize::MAX).await.expect("read");
    let seqs: Vec<u64> = all.iter().map(|m| m.sequence).collect();
    println!("{subject}: sequences {seqs:?}");
    assert_eq!(seqs, [1, 3, 5, 7, 9], "only the subject's messages, with their stream sequences");
    let later = nats::read_back(&config, &subject, 4, 2).await.expect("read from 4");
    let ids: Vec<_> = later.iter().map(|m| m.msg_id.clone().unwrap_or_default()).collect();
    assert_eq!(ids, ["r-2", "r-3"]);
    let nothing = nats::read_back(&config, &format!("{stream}.empty"), 1, 10).await.expect("read");
    assert!(nothing.is_empty());
    // Reading consumed nothing: a second read sees the same.
    assert_eq!(nats::read_back(&config, &subject, 1, usize::MAX).await.expect("again"), all);
}
