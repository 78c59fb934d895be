//! The RabbitMQ sink through the relay: the scenarios every sink passes.

use std::sync::Mutex;

use super::super::scenarios::{self, Broker};
use crate::common::Setup;
use crate::support::rabbitmq::{private_rabbitmq, rabbitmq as shared, RabbitMqServer};
use crate::support::sinks::Delivered;

/// A topic exchange of the test's own with a queue bound to each of its Order, Invoice and
/// dead-letter routing keys; none to Poison, so its record comes back unroutable (refused).
struct Exchange<'a> {
    server: &'a RabbitMqServer,
    exchange: String,
    /// (routing key, queue)
    queues: Vec<(String, String)>,
    /// What was read so far: reading takes the messages off the queue.
    read: Mutex<Vec<Delivered>>,
}

impl<'a> Exchange<'a> {
    async fn new(server: &'a RabbitMqServer, s: &Setup) -> Exchange<'a> {
        let exchange = format!("{}.x", s.topic_prefix);
        server.declare_exchange(&exchange, lapin::ExchangeKind::Topic).await;
        let mut queues = Vec::new();
        for topic in ["Order", "Invoice", "dlq"].map(|t| s.topic(t)) {
            let queue = server.bind_queue(&s.topic_prefix, &exchange, &topic).await;
            queues.push((topic, queue));
        }
        Exchange { server, exchange, queues, read: Mutex::new(Vec::new()) }
    }
}

impl Broker for Exchange<'_> {
    fn sections(&self, _s: &Setup) -> String {
        format!("[delivery]\nsink = \"rabbitmq\"\n\n{}", self.server.config_section(&self.exchange))
    }

    async fn delivered(&self, _s: &Setup) -> Vec<Delivered> {
        for (topic, queue) in &self.queues {
            let mut got = self.server.read(queue).await;
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
            self.server.start();
        }
    }

    fn dedups(&self) -> bool {
        false
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_routes_headers_event_id_and_key() {
    let s = Setup::new("rmq_route").await;
    scenarios::routes_headers_event_id_and_key(&Exchange::new(shared(), &s).await, &s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_keeps_per_key_order_across_four_writers() {
    let s = Setup::new("rmq_order").await;
    scenarios::per_key_order_across_four_writers(&Exchange::new(shared(), &s).await, &s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_five_sigkills_lose_nothing() {
    let s = Setup::new("rmq_kills").await;
    scenarios::five_sigkills_lose_nothing(&Exchange::new(shared(), &s).await, &s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_stopped_for_20_s_loses_nothing_and_confirms_nothing_past_it() {
    let s = Setup::new("rmq_outage").await;
    let own = private_rabbitmq();
    let broker = Exchange::new(&own, &s).await;
    scenarios::a_twenty_second_outage_loses_nothing_and_confirms_nothing_past_it(&broker, &s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_a_routing_key_with_no_bound_queue_is_dead_lettered_not_lost() {
    let s = Setup::new("rmq_poison").await;
    let broker = Exchange::new(shared(), &s).await;
    scenarios::a_poison_record_is_dead_lettered_and_later_rows_flow(&broker, &s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_sigterm_exits_within_ten_seconds() {
    let s = Setup::new("rmq_term").await;
    scenarios::sigterm_exits_within_ten_seconds(&Exchange::new(shared(), &s).await, &s).await;
}
