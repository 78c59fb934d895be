//! The NATS JetStream sink through the relay: the scenarios every sink passes.

use super::super::scenarios::{self, Broker};
use crate::common::Setup;
use crate::support::nats::{nats as shared, private_nats, NatsServer};
use crate::support::sinks::Delivered;

/// A stream of the test's own capturing its Order, Invoice and dead-letter subjects; none
/// captures Poison, so its record is refused (no stream for the subject).
struct Stream<'a> {
    server: &'a NatsServer,
    stream: String,
}

impl<'a> Stream<'a> {
    async fn new(server: &'a NatsServer, s: &Setup) -> Stream<'a> {
        let stream = s.topic_prefix.replace('.', "_");
        let subjects = ["Order", "Invoice", "dlq"].map(|t| s.topic(t));
        let subjects: Vec<&str> = subjects.iter().map(String::as_str).collect();
        server.create_stream(&stream, &subjects).await;
        Stream { server, stream }
    }
}

impl Broker for Stream<'_> {
    fn sections(&self, s: &Setup) -> String {
        let subjects = ["Order", "Invoice", "dlq"].map(|t| s.topic(t));
        let subjects: Vec<&str> = subjects.iter().map(String::as_str).collect();
        format!(
            "[delivery]\nsink = \"nats\"\n\n{}",
            self.server.config_section(&self.stream, &subjects)
        )
    }

    async fn delivered(&self, s: &Setup) -> Vec<Delivered> {
        let mut all = Vec::new();
        for subject in ["Order", "Invoice", "dlq"].map(|t| s.topic(t)) {
            all.extend(self.server.read(&subject).await);
        }
        all
    }

    async fn outage(&self, on: bool) {
        if on {
            self.server.stop();
        } else {
            self.server.start();
        }
    }

    fn dedups(&self) -> bool {
        true
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_routes_headers_event_id_and_key() {
    let s = Setup::new("nats_route").await;
    scenarios::routes_headers_event_id_and_key(&Stream::new(shared(), &s).await, &s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_keeps_per_key_order_across_four_writers() {
    let s = Setup::new("nats_order").await;
    scenarios::per_key_order_across_four_writers(&Stream::new(shared(), &s).await, &s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_five_sigkills_lose_nothing_and_deliver_no_duplicate() {
    let s = Setup::new("nats_kills").await;
    scenarios::five_sigkills_lose_nothing(&Stream::new(shared(), &s).await, &s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_stopped_for_20_s_loses_nothing_and_confirms_nothing_past_it() {
    let s = Setup::new("nats_outage").await;
    let own = private_nats();
    let broker = Stream::new(&own, &s).await;
    scenarios::a_twenty_second_outage_loses_nothing_and_confirms_nothing_past_it(&broker, &s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_a_subject_no_stream_captures_dead_letters_the_record_and_later_rows_flow() {
    let s = Setup::new("nats_poison").await;
    let broker = Stream::new(shared(), &s).await;
    scenarios::a_poison_record_is_dead_lettered_and_later_rows_flow(&broker, &s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_sigterm_exits_within_ten_seconds() {
    let s = Setup::new("nats_term").await;
    scenarios::sigterm_exits_within_ten_seconds(&Stream::new(shared(), &s).await, &s).await;
}

/// `walrelay setup` creates the stream `[nats]` names, capturing its subjects with its
/// duplicate window, beside the slot and the publication; the relay then publishes into it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walrelay_setup_creates_the_jetstream_stream_the_relay_publishes_to() {
    use crate::support::process::{walrelay_async, RelayProcess};
    let s = Setup::new("nats_setup").await;
    let server = shared();
    let stream = s.topic_prefix.replace('.', "_");
    let subjects = ["Order", "Invoice", "dlq"].map(|t| s.topic(t));
    let subjects: Vec<&str> = subjects.iter().map(String::as_str).collect();
    let sections = format!(
        "[delivery]\nsink = \"nats\"\n\n{}duplicate_window = \"5m\"\n",
        server.config_section(&stream, &subjects)
    );
    let config = s.config_with("", "", &sections);
    let run = walrelay_async(&["setup"], Some(&config)).await;
    println!("{run}");
    assert_eq!(run.code, Some(0), "{run}");
    let line = format!("stream {stream}: created (file storage), subjects");
    assert!(run.stdout.contains(&line) && run.stdout.contains("duplicate window 5m"), "{run}");
    let again = walrelay_async(&["setup"], Some(&config)).await;
    assert!(again.stdout.contains(&format!("stream {stream}: found")), "{again}");
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let ids = s.insert_events("Order", "o-1", 2).await;
    let broker = Stream { server, stream };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let got = loop {
        let got = broker.delivered(&s).await;
        if got.len() >= 2 || std::time::Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let got: Vec<&str> = got.iter().filter_map(|d| d.dedup_id.as_deref()).collect();
    assert_eq!(
        got,
        ids.iter().map(String::as_str).collect::<Vec<_>>(),
        "relay log:\n{}",
        relay.log()
    );
    assert_eq!(relay.terminate(), Some(0), "relay log:\n{}", relay.log());
}
