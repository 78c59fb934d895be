//! The SQS sink through the relay: the scenarios every sink passes, on FIFO queues.

use std::sync::Mutex;

use super::super::scenarios::{self, Broker};
use crate::common::Setup;
use crate::support::sinks::Delivered;
use crate::support::sqs::{private_sqs, sqs as server, SqsServer};
use walrelay::sink::sqs;

/// FIFO queues for the test's Order, Invoice and dead-letter topics; none for Poison, so
/// its record is refused (QueueDoesNotExist).
struct Fifo<'a> {
    server: &'a SqsServer,
    /// What was read so far: reading deletes.
    read: Mutex<Vec<Delivered>>,
}

impl<'a> Fifo<'a> {
    async fn new(server: &'a SqsServer, s: &Setup) -> Fifo<'a> {
        let config = sqs::parse(&server.options("", true)).expect("the harness's [sqs]");
        let routed = ["Order", "Invoice", "dlq"].map(|t| s.topic(t));
        sqs::setup(&config, &routed).await.expect("the test's queues");
        Fifo { server, read: Mutex::new(Vec::new()) }
    }
}

impl Broker for Fifo<'_> {
    fn sections(&self, _s: &Setup) -> String {
        format!("[delivery]\nsink = \"sqs\"\n\n{}", self.server.config_section("", true))
    }

    async fn delivered(&self, s: &Setup) -> Vec<Delivered> {
        for topic in ["Order", "Invoice", "dlq"].map(|t| s.topic(t)) {
            let queue = format!("{}.fifo", topic.replace('.', "-"));
            let mut got = self.server.read(&queue).await;
            for d in &mut got {
                d.routed_to = topic.clone();
            }
            self.read.lock().unwrap().extend(got);
        }
        self.read.lock().unwrap().clone()
    }

    async fn outage(&self, on: bool) {
        if on {
            self.server.stop();
        } else {
            self.server.start().expect("ElasticMQ starts again");
        }
    }

    fn dedups(&self) -> bool {
        true
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_fifo_routes_headers_event_id_and_key() {
    let s = Setup::new("sqs_route").await;
    scenarios::routes_headers_event_id_and_key(&Fifo::new(server(), &s).await, &s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_fifo_keeps_per_key_order_across_four_writers() {
    let s = Setup::new("sqs_order").await;
    scenarios::per_key_order_across_four_writers(&Fifo::new(server(), &s).await, &s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_fifo_five_sigkills_lose_nothing_and_deliver_no_duplicate() {
    let s = Setup::new("sqs_kills").await;
    scenarios::five_sigkills_lose_nothing(&Fifo::new(server(), &s).await, &s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_stopped_for_20_s_loses_nothing_and_confirms_nothing_past_it() {
    let s = Setup::new("sqs_outage").await;
    let own = private_sqs();
    let broker = Fifo::new(&own, &s).await;
    scenarios::a_twenty_second_outage_loses_nothing_and_confirms_nothing_past_it(&broker, &s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_a_missing_queue_dead_letters_the_record_and_later_rows_flow() {
    let s = Setup::new("sqs_poison").await;
    let broker = Fifo::new(server(), &s).await;
    scenarios::a_poison_record_is_dead_lettered_and_later_rows_flow(&broker, &s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_sigterm_exits_within_ten_seconds() {
    let s = Setup::new("sqs_term").await;
    scenarios::sigterm_exits_within_ten_seconds(&Fifo::new(server(), &s).await, &s).await;
}
