//! `walrelay audit` with `[delivery] sink = "nats"`: the JetStream stream is read back without
//! consuming it, and each verdict the Kafka audit gives shows here too: a clean window; messages
//! deleted from the stream (missing); a copy past the duplicate window (duplicated); a message
//! of no row (unexpected) and one without `Nats-Msg-Id` (foreign); messages `max_age` removed
//! (expired, clean); messages `max_msgs_per_subject` removed (unverifiable, not missing); and
//! `[audit]` inside `walrelay run`.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use serde_json::Value;
use walrelay::sink::nats::{self, NatsConfig};

use crate::audit::audit;
use crate::common::Setup;
use crate::support::nats::{nats as shared, NatsServer};
use crate::support::process::{http_get, metric, walrelay_async, RelayProcess};
use crate::support::wait_until;

/// The test's stream, capturing its `Order` subject, with the limits it asks for.
struct Stream {
    name: String,
    subject: String,
    config: NatsConfig,
    sections: String,
}

impl Stream {
    async fn new(server: &NatsServer, s: &Setup, window: Duration, max_age: Duration) -> Stream {
        let name = s.topic_prefix.replace('.', "_");
        let subject = s.topic("Order");
        let js = jetstream::new(async_nats::connect(server.url()).await.expect("connect"));
        let config = stream::Config {
            name: name.clone(),
            subjects: vec![subject.clone()],
            storage: stream::StorageType::File,
            duplicate_window: window,
            max_age,
            ..Default::default()
        };
        js.create_stream(config).await.unwrap_or_else(|e| panic!("create stream {name}: {e}"));
        let sections =
            format!("[delivery]\nsink = \"nats\"\n\n{}", server.config_section(&name, &[&subject]));
        let config = server.config(&name, &[&subject]);
        Stream { name, subject, config, sections }
    }

    /// The stream's messages on the subject: (sequence, Nats-Msg-Id).
    async fn held(&self) -> Vec<(u64, Option<String>)> {
        let all = nats::read_back(&self.config, &self.subject, 1, usize::MAX).await;
        all.expect("read the stream back").into_iter().map(|m| (m.sequence, m.msg_id)).collect()
    }

    /// Whether the stream holds the event `id` on the subject.
    async fn holds(&self, id: &str) -> bool {
        self.held().await.iter().any(|(_, held)| held.as_deref() == Some(id))
    }

    /// Waits until the stream holds `n` messages on the subject.
    async fn wait_for(&self, n: usize, relay: &RelayProcess) {
        let held = wait_until(
            &format!("{n} messages in {}", self.name),
            Duration::from_secs(60),
            || async move { self.held().await.len() >= n },
        )
        .await;
        assert!(held, "the stream holds {:?}; relay log:\n{}", self.held().await, relay.log());
    }

    async fn js(&self, server: &NatsServer) -> jetstream::Context {
        jetstream::new(async_nats::connect(server.url()).await.expect("connect"))
    }
}

/// A relay on the test's stream that delivered `n` events of one aggregate, stopped.
async fn delivered(s: &Setup, stream: &Stream, n: usize, extra: &str) -> Vec<String> {
    let config = s.config_with("", "", &format!("{}{extra}", stream.sections));
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let ids = s.insert_events("Order", "o-1", n).await;
    stream.wait_for(n, &relay).await;
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    ids
}

fn problems(report: &Value, kind: &str) -> Vec<String> {
    let all = report["problems"].as_array().cloned().unwrap_or_default();
    let of_kind = all.iter().filter(|p| p["kind"] == kind);
    of_kind.map(|p| p["event_id"].as_str().unwrap_or_default().to_string()).collect()
}

const FOREVER: Duration = Duration::ZERO;
const TWO_MINUTES: Duration = Duration::from_secs(120);

/// 200 events through the relay into JetStream: the audit finds each once, exits 0, and its
/// table says where it read them and that misplaced does not apply (a stream has no partitions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_audit_of_a_clean_window_finds_every_event_once_in_the_stream() {
    let s = Setup::new("nats_audit_clean").await;
    let stream = Stream::new(shared(), &s, TWO_MINUTES, FOREVER).await;
    let config = s.config_with("", "", &stream.sections);
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let mut written = Vec::new();
    for aggregate in ["o-1", "o-2", "o-3", "o-4"] {
        written.extend(s.insert_events("Order", aggregate, 50).await);
    }
    stream.wait_for(200, &relay).await;
    let (code, report, run) = audit(&config, &[]).await;
    println!("[nats audit] clean window: {} in {} s", report["total"], report["seconds"]);
    let total = &report["total"];
    assert_eq!(
        (total["expected"].as_u64(), total["delivered_once"].as_u64()),
        (Some(200), Some(200)),
        "{run}"
    );
    for kind in [
        "missing",
        "duplicated",
        "out_of_order",
        "misplaced",
        "unexpected",
        "foreign",
        "pending",
        "expired",
    ] {
        assert_eq!(total[kind], 0, "{kind}: {run}");
    }
    assert_eq!((code, &report["clean"]), (Some(0), &Value::Bool(true)), "{run}");
    assert_eq!(report["read_from"], "jetstream", "{run}");
    assert_eq!(report["event_id_in"], "header Nats-Msg-Id", "{run}");
    let table = walrelay_async(&["audit", "--since", "1h", "--settle", "0s"], Some(&config)).await;
    println!("{}", table.stdout);
    assert_eq!(table.code, Some(0), "{table}");
    assert!(table.stdout.contains("clean: every settled event is in JetStream once"), "{table}");
    assert!(table.stdout.contains("misplaced does not apply"), "{table}");
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    crate::common::release_slot(&s).await;
}

/// Three of ten delivered messages deleted from the stream: the audit names them missing and
/// exits 1 (not clean), and says the stream has deleted messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_audit_reports_messages_deleted_from_the_stream_as_missing() {
    let s = Setup::new("nats_audit_missing").await;
    let server = shared();
    let stream = Stream::new(server, &s, TWO_MINUTES, FOREVER).await;
    delivered(&s, &stream, 10, "").await;
    let held = stream.held().await;
    let js = stream.js(server).await;
    let handle = js.get_stream(&stream.name).await.expect("the test's stream");
    let mut deleted: Vec<String> = Vec::new();
    // Not the first: a removed head is told apart (expired, unverifiable), a gap is not.
    for (sequence, id) in [&held[2], &held[5], &held[8]] {
        assert!(handle.delete_message(*sequence).await.expect("delete"), "{sequence}");
        deleted.push(id.clone().expect("the relay's message has an id"));
    }
    deleted.sort();
    let (code, report, run) = audit(&s.config_with("", "", &stream.sections), &[]).await;
    println!(
        "[nats audit] 3 deleted: {} missing {:?}",
        report["total"],
        problems(&report, "missing")
    );
    assert_eq!(report["total"]["missing"], 3, "{run}");
    assert_eq!(report["total"]["delivered_once"], 7, "{run}");
    assert_eq!(problems(&report, "missing"), deleted, "{run}");
    assert_eq!((code, &report["clean"]), (Some(1), &Value::Bool(false)), "{run}");
    let notes = report["notes"].to_string();
    assert!(notes.contains("3 message(s) deleted"), "{run}");
    crate::common::release_slot(&s).await;
}

/// With a 1 s duplicate window, the same `Nats-Msg-Id` published again past it is a second
/// message in the stream (within it JetStream drops it): the audit reports the event duplicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_audit_reports_a_copy_published_past_the_duplicate_window_as_duplicated() {
    use walrelay::sink::{Publish, Published};
    let s = Setup::new("nats_audit_dup").await;
    let stream = Stream::new(shared(), &s, Duration::from_secs(1), FOREVER).await;
    let ids = delivered(&s, &stream, 3, "").await;
    let sink = nats::connect(&stream.config).await.expect("connect");
    let again = std::sync::Arc::new(walrelay::router::Record {
        key: Some(Bytes::from_static(b"o-1")),
        value: Some(Bytes::from_static(b"{}")),
        ..walrelay::router::Record::bare(&stream.subject, &ids[0])
    });
    // Each publish within the window is dropped (and acknowledged); the first past it stays.
    let first = ids[0].as_str();
    let copied = wait_until("a second copy past the window", Duration::from_secs(30), || {
        let (sink, again, stream) = (&sink, again.clone(), &stream);
        async move {
            assert_eq!(sink.publish(&[again]).await, vec![Published::Acked]);
            let held = stream.held().await;
            held.iter().filter(|(_, id)| id.as_deref() == Some(first)).count() == 2
        }
    })
    .await;
    assert!(copied, "{:?}", stream.held().await);
    let (code, report, run) = audit(&s.config_with("", "", &stream.sections), &[]).await;
    println!("[nats audit] a copy past the window: {}", report["total"]);
    assert_eq!(report["total"]["duplicated"], 1, "{run}");
    assert_eq!(report["total"]["delivered_once"], 2, "{run}");
    assert_eq!(problems(&report, "duplicated"), vec![ids[0].clone()], "{run}");
    assert_eq!((code, &report["clean"]), (Some(1), &Value::Bool(false)), "{run}");
    crate::common::release_slot(&s).await;
}

/// A message whose `Nats-Msg-Id` no row has is unexpected (not clean), and one without a
/// `Nats-Msg-Id` is foreign (said, not judged); the relay's five are each delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_audit_reports_a_message_of_no_row_as_unexpected_and_one_without_an_id_as_foreign() {
    let s = Setup::new("nats_audit_strangers").await;
    let server = shared();
    let stream = Stream::new(server, &s, TWO_MINUTES, FOREVER).await;
    delivered(&s, &stream, 5, "").await;
    let client = s.db.connect().await;
    let stranger: String =
        client.query_one("SELECT gen_random_uuid()::text", &[]).await.expect("uuid").get(0);
    let js = stream.js(server).await;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", stranger.as_str());
    let subject = stream.subject.clone();
    let ack = js.publish_with_headers(subject.clone(), headers, Bytes::from_static(b"{}")).await;
    ack.expect("publish").await.expect("acked");
    let ack = js.publish(subject, Bytes::from_static(b"another producer's")).await;
    ack.expect("publish").await.expect("acked");
    let (code, report, run) = audit(&s.config_with("", "", &stream.sections), &[]).await;
    println!("[nats audit] a stranger and a foreign message: {}", report["total"]);
    let total = &report["total"];
    assert_eq!(
        (total["unexpected"].as_u64(), total["foreign"].as_u64()),
        (Some(1), Some(1)),
        "{run}"
    );
    assert_eq!(total["delivered_once"], 5, "{run}");
    assert_eq!(problems(&report, "unexpected"), vec![stranger], "{run}");
    assert_eq!(problems(&report, "foreign"), vec!["(none)".to_string()], "{run}");
    assert_eq!((code, &report["clean"]), (Some(1), &Value::Bool(false)), "{run}");
    crate::common::release_slot(&s).await;
}

/// A stream whose `max_age` (3 s) removed every message: the events are expired, not missing,
/// and the window is clean (deleted as configured); the table says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_audit_reports_messages_max_age_removed_as_expired_not_missing() {
    let s = Setup::new("nats_audit_expired").await;
    let stream = Stream::new(shared(), &s, Duration::from_secs(1), Duration::from_secs(3)).await;
    delivered(&s, &stream, 4, "").await;
    let reader = nats::Reader::connect(&stream.config).await.expect("connect");
    let removed = wait_until("max_age removes the messages", Duration::from_secs(30), || async {
        reader.stream_of(&stream.subject).await.is_ok_and(|st| st.messages == 0)
    })
    .await;
    assert!(removed, "{:?}", reader.stream_of(&stream.subject).await);
    let config = s.config_with("", "", &stream.sections);
    let (code, report, run) = audit(&config, &[]).await;
    println!("[nats audit] max_age removed all: {}", report["total"]);
    assert_eq!(
        (report["total"]["expired"].as_u64(), report["total"]["missing"].as_u64()),
        (Some(4), Some(0)),
        "{run}"
    );
    assert_eq!((code, &report["clean"]), (Some(0), &Value::Bool(true)), "{run}");
    let table = walrelay_async(&["audit", "--since", "1h", "--settle", "0s"], Some(&config)).await;
    assert!(table.stdout.contains("max_age=3000"), "{table}");
    assert!(table.stdout.contains("time retention deleted the stream's messages"), "{table}");
    crate::common::release_slot(&s).await;
}

/// A stream of two subjects whose `max_msgs_per_subject` (4) removed nine of thirteen `Order`
/// messages from its middle (the `Invoice` message before them keeps the stream's first
/// sequence at 1): those nine are unverifiable, naming the limit, not missing. One of the four
/// left, deleted, committed after its subject's first message left was stored: that one is
/// missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_audit_tells_messages_max_msgs_per_subject_removed_from_a_deleted_one() {
    let s = Setup::new("nats_audit_per_subject").await;
    let server = shared();
    let name = s.topic_prefix.replace('.', "_");
    let (order, invoice) = (s.topic("Order"), s.topic("Invoice"));
    let js = jetstream::new(async_nats::connect(server.url()).await.expect("connect"));
    js.create_stream(stream::Config {
        name: name.clone(),
        subjects: vec![order.clone(), invoice.clone()],
        storage: stream::StorageType::File,
        duplicate_window: TWO_MINUTES,
        max_messages_per_subject: 4,
        ..Default::default()
    })
    .await
    .unwrap_or_else(|e| panic!("create stream {name}: {e}"));
    let sections = format!(
        "[delivery]\nsink = \"nats\"\n\n{}",
        server.config_section(&name, &[&order, &invoice])
    );
    let config = s.config_with("", "", &sections);
    let nats_config = server.config(&name, &[&order, &invoice]);
    let (orders, invoices_held) = (
        Stream { name: name.clone(), subject: order, config: nats_config.clone(), sections },
        Stream {
            name: name.clone(),
            subject: invoice,
            config: nats_config,
            sections: String::new(),
        },
    );

    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let invoices = s.insert_events("Invoice", "i-1", 1).await;
    let first = s.insert_events("Order", "o-1", 10).await;
    let stored =
        wait_until("the first ten orders", Duration::from_secs(60), || orders.holds(&first[9]))
            .await;
    assert!(stored, "{}", relay.log());
    // Committed after the tenth order was stored: the limit keeps orders 10 to 13.
    let later = s.insert_events("Order", "o-1", 3).await;
    let stored =
        wait_until("the last three orders", Duration::from_secs(60), || orders.holds(&later[2]))
            .await;
    assert!(stored, "{}", relay.log());
    assert!(invoices_held.holds(&invoices[0]).await, "the invoice is in the stream");
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());

    let held = orders.held().await;
    let kept: Vec<&str> = held.iter().map(|(_, id)| id.as_deref().unwrap_or_default()).collect();
    assert_eq!(kept, [&first[9], &later[0], &later[1], &later[2]], "max_msgs_per_subject = 4");
    let handle = js.get_stream(&name).await.expect("the test's stream");
    assert!(handle.delete_message(held[2].0).await.expect("delete"), "{}", held[2].0);

    let (code, report, run) = audit(&config, &[]).await;
    let mut removed: Vec<String> = first[..9].to_vec();
    removed.sort();
    println!(
        "[nats audit] max_msgs_per_subject removed 9, one deleted: {} unverifiable {:?} missing {:?}",
        report["total"],
        problems(&report, "unverifiable"),
        problems(&report, "missing")
    );
    let mut unverifiable = problems(&report, "unverifiable");
    unverifiable.sort();
    assert_eq!(unverifiable, removed, "{run}");
    assert_eq!(problems(&report, "missing"), [held[2].1.clone().unwrap_or_default()], "{run}");
    assert_eq!(report["total"]["delivered_once"], 4, "{run}");
    assert_eq!((code, &report["clean"]), (Some(1), &Value::Bool(false)), "{run}");
    let details = report["problems"].to_string();
    assert!(details.contains("max_msgs_per_subject=4"), "{run}");
    assert!(details.contains("removed its subject's messages before sequence"), "{run}");
    crate::common::release_slot(&s).await;
}

/// `[audit]` is accepted with the NATS sink: inside `walrelay run` it counts the 20 delivered
/// events on `/metrics`, then the two deleted from the stream as missing, with a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_audit_inside_run_counts_delivered_events_and_then_deleted_ones_as_missing() {
    let s = Setup::new("nats_audit_in_run").await;
    let server = shared();
    let stream = Stream::new(server, &s, TWO_MINUTES, FOREVER).await;
    let port = crate::support::free_port();
    let extra = format!(
        "\n[http]\nlisten = \"127.0.0.1:{port}\"\n\n[audit]\ninterval = \"2s\"\nwindow = \"1h\"\nsettle = \"0s\"\n"
    );
    let config = s.config_with("", "", &format!("{}{extra}", stream.sections));
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    s.insert_events("Order", "o-1", 20).await;
    stream.wait_for(20, &relay).await;
    let gauge = |text: &str, result: &str| {
        metric(text, &format!("walrelay_audit_events{{result=\"{result}\"}}")).unwrap_or(-1.0)
    };
    let counted = wait_until("an audit counts the 20", Duration::from_secs(30), || async {
        let text = http_get(port, "/metrics").await.unwrap_or_default();
        gauge(&text, "delivered_once") == 20.0
    })
    .await;
    let text = http_get(port, "/metrics").await.unwrap_or_default();
    let audit_lines =
        |t: &str| t.lines().filter(|l| l.contains("audit")).collect::<Vec<_>>().join("\n");
    assert!(counted, "{}\n{}", audit_lines(&text), relay.log());
    assert!(metric(&text, "walrelay_audit_last_success_seconds").unwrap_or(0.0) > 0.0, "{text}");
    assert!(relay.log().contains("is in JetStream once"), "{}", relay.log());
    let held = stream.held().await;
    let handle = stream.js(server).await.get_stream(&stream.name).await.expect("stream");
    for (sequence, _) in [&held[3], &held[9]] {
        assert!(handle.delete_message(*sequence).await.expect("delete"));
    }
    let missing = wait_until("an audit counts the 2 missing", Duration::from_secs(30), || async {
        let text = http_get(port, "/metrics").await.unwrap_or_default();
        gauge(&text, "missing") == 2.0
    })
    .await;
    let text = http_get(port, "/metrics").await.unwrap_or_default();
    assert!(missing, "{}\n{}", audit_lines(&text), relay.log());
    let log = relay.log();
    assert!(log.contains("audit: the last 1h is not clean"), "{log}");
    assert!(
        log.contains(held[3].1.as_deref().unwrap_or("?"))
            || log.contains(held[9].1.as_deref().unwrap_or("?")),
        "{log}"
    );
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    crate::common::release_slot(&s).await;
}

/// Two events of one aggregate in the stream in the wrong order (published by hand, the later
/// first): with `track_commit_timestamp = on` the earlier one is out of order in stream order,
/// and the audit exits 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_audit_reports_two_events_of_one_aggregate_in_the_wrong_stream_order() {
    use crate::support::postgres::PrivatePostgres;
    use crate::support::servers::Server;
    use walrelay::sink::{Publish, Published};
    let private = tokio::task::spawn_blocking(|| {
        let server = Server::selected().expect("a PostgreSQL server");
        PrivatePostgres::start_on("natsauditorder", &server, &[("track_commit_timestamp", "on")])
    })
    .await
    .expect("start PostgreSQL");
    let s = Setup::on(&private.pg, "natsauditorder").await;
    let stream = Stream::new(shared(), &s, TWO_MINUTES, FOREVER).await;
    let first = s.db.insert_outbox("outbox", "Order", "o-1", "Created", Some("{}")).await;
    let second = s.db.insert_outbox("outbox", "Order", "o-1", "Paid", Some("{}")).await;
    let sink = nats::connect(&stream.config).await.expect("connect");
    for id in [&second, &first] {
        let record = std::sync::Arc::new(walrelay::router::Record {
            key: Some(Bytes::from_static(b"o-1")),
            value: Some(Bytes::from_static(b"{}")),
            ..walrelay::router::Record::bare(&stream.subject, id)
        });
        assert_eq!(sink.publish(&[record]).await, vec![Published::Acked]);
    }
    let (code, report, run) = audit(&s.config_with("", "", &stream.sections), &[]).await;
    println!("[nats audit] two events in the wrong order: {}", report["total"]);
    assert_eq!(report["order_checked"], true, "{run}");
    assert_eq!(report["total"]["out_of_order"], 1, "{run}");
    assert_eq!(report["total"]["delivered_once"], 2, "{run}");
    assert_eq!(problems(&report, "out_of_order"), vec![first], "{run}");
    assert_eq!(code, Some(1), "{run}");
    crate::common::release_slot(&s).await;
}

/// A replay is asked for so that consumers get the events again. Within the stream's duplicate
/// window JetStream drops a message whose `Nats-Msg-Id` (the event id) it stored, even one
/// deleted since: the replay is refused, naming the window, and the stream holds no copy. Past
/// the window the replay stores a copy of each event, with its `walrelay.replay` header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_replay_within_the_duplicate_window_is_refused_naming_it_and_past_it_is_stored() {
    let s = Setup::new("nats_replay_window").await;
    let server = shared();
    let within = Stream::new(server, &s, TWO_MINUTES, FOREVER).await;
    delivered(&s, &within, 3, "").await;
    // The repair's case: a message deleted from the stream is still in the window.
    let held = within.held().await;
    let handle = within.js(server).await.get_stream(&within.name).await.expect("the stream");
    assert!(handle.delete_message(held[1].0).await.expect("delete"));
    let config = s.config_with("", "", &within.sections);
    let run = walrelay_async(&["replay", "--since", "1h", "--yes"], Some(&config)).await;
    println!("[nats replay] within the window: exit {:?}: {}", run.code, run.stderr.trim());
    assert_ne!(run.code, Some(0), "{run}");
    assert!(
        run.stderr.contains("dropped the replayed message")
            && run.stderr.contains("duplicate_window"),
        "{run}"
    );
    assert_eq!(within.held().await.len(), 2, "a replayed copy was stored: {run}");
    crate::common::release_slot(&s).await;

    let s = Setup::new("nats_replay_past").await;
    let past = Stream::new(server, &s, Duration::from_secs(1), FOREVER).await;
    let ids = delivered(&s, &past, 3, "").await;
    let all = nats::read_back(&past.config, &past.subject, 1, usize::MAX).await.expect("read");
    let last_stored = all.iter().map(|m| m.stored_ms).max().expect("3 messages");
    let window_passed =
        wait_until("the 1 s duplicate window passed", Duration::from_secs(10), || async move {
            walrelay::clock::unix_micros() / 1000 > last_stored + 1_500
        })
        .await;
    assert!(window_passed);
    let config = s.config_with("", "", &past.sections);
    let run = walrelay_async(&["replay", "--since", "1h", "--yes"], Some(&config)).await;
    println!("[nats replay] past the window: exit {:?}", run.code);
    assert_eq!(run.code, Some(0), "{run}");
    let all = nats::read_back(&past.config, &past.subject, 1, usize::MAX).await.expect("read");
    let replayed: Vec<&str> = all
        .iter()
        .filter(|m| m.headers.iter().any(|(name, _)| name == "walrelay.replay"))
        .filter_map(|m| m.msg_id.as_deref())
        .collect();
    assert_eq!(replayed, ids.iter().map(String::as_str).collect::<Vec<_>>(), "{all:?}");
    crate::common::release_slot(&s).await;
}

/// The console's event lookup reads the event's JetStream subject: an event in the stream is
/// found at its stream sequence; once deleted from the stream it is "not found in JetStream",
/// naming what was searched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_console_lookup_finds_an_event_at_its_stream_sequence_and_not_once_deleted() {
    let s = Setup::new("nats_lookup").await;
    let server = shared();
    let stream = Stream::new(server, &s, TWO_MINUTES, FOREVER).await;
    let port = crate::support::free_port();
    let http = format!("\n[http]\nlisten = \"127.0.0.1:{port}\"\nconsole = \"read\"\n");
    let config = s.config_with("", "", &format!("{}{http}", stream.sections));
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let ids = s.insert_events("Order", "o-1", 3).await;
    stream.wait_for(3, &relay).await;
    let held = stream.held().await;
    let (status, found, raw) =
        crate::console::get_json(port, &format!("/api/v1/events/{}", ids[1])).await;
    println!("[nats lookup] found: {found}");
    assert_eq!(status, 200, "{raw}");
    let k = &found["kafka"];
    assert_eq!((&k["found"], &k["in"]), (&Value::Bool(true), &Value::from("JetStream")), "{raw}");
    assert_eq!(k["offset"], held[1].0, "the stream sequence of the event's message: {raw}");
    assert_eq!(k["topic"], stream.subject.as_str(), "{raw}");

    let handle = stream.js(server).await.get_stream(&stream.name).await.expect("the stream");
    assert!(handle.delete_message(held[1].0).await.expect("delete"));
    let (status, gone, raw) =
        crate::console::get_json(port, &format!("/api/v1/events/{}", ids[1])).await;
    println!("[nats lookup] deleted: {gone}");
    assert_eq!(status, 200, "{raw}");
    assert_eq!(gone["kafka"]["found"], false, "{raw}");
    assert!(gone["kafka"]["searched"].as_str().unwrap_or("").contains(&stream.name), "{raw}");
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
}
