//! The reader of the RabbitMQ tests: a durable queue bound with a test's own binding key,
//! and everything in it taken off (`basic_get`, acked) in order, as the sinks' [`Delivered`].

use super::RabbitMqServer;
use crate::support::sinks::Delivered;
use crate::support::unique;
use lapin::message::BasicGetMessage;
use lapin::options::{
    BasicAckOptions, BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Connection, ConnectionProperties, ExchangeKind};
use std::time::{Duration, Instant};

impl RabbitMqServer {
    async fn connection(&self) -> Connection {
        Connection::connect(&self.url(), ConnectionProperties::default())
            .await
            .unwrap_or_else(|e| panic!("reader: connect to RabbitMQ on {}: {e}", self.port))
    }

    /// Declares exchange `name` durable of `kind` (a test's own exchange).
    pub async fn declare_exchange(&self, name: &str, kind: ExchangeKind) {
        let connection = self.connection().await;
        let channel = connection.create_channel().await.expect("reader: channel");
        channel
            .exchange_declare(
                name.into(),
                kind,
                ExchangeDeclareOptions { durable: true, ..Default::default() },
                FieldTable::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("declare exchange {name}: {e}"));
    }

    /// A new durable queue (named after `prefix`, unique) bound to `exchange` with
    /// `binding_key` (for the default exchange `""`, no binding: the queue's name routes).
    pub async fn bind_queue(&self, prefix: &str, exchange: &str, binding_key: &str) -> String {
        let queue = unique(prefix);
        self.declare_queue(&queue).await;
        if !exchange.is_empty() {
            let connection = self.connection().await;
            let channel = connection.create_channel().await.expect("reader: channel");
            channel
                .queue_bind(
                    queue.as_str().into(),
                    exchange.into(),
                    binding_key.into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .unwrap_or_else(|e| panic!("bind {queue} to {exchange} with {binding_key}: {e}"));
        }
        queue
    }

    /// Declares durable queue `name`.
    pub async fn declare_queue(&self, name: &str) {
        self.declare_queue_with(name, FieldTable::default()).await;
    }

    /// Declares durable queue `name` with `arguments` (`x-max-length`, `x-overflow`…).
    pub async fn declare_queue_with(&self, name: &str, arguments: FieldTable) {
        let connection = self.connection().await;
        let channel = connection.create_channel().await.expect("reader: channel");
        channel
            .queue_declare(
                name.into(),
                QueueDeclareOptions { durable: true, ..Default::default() },
                arguments,
            )
            .await
            .unwrap_or_else(|e| panic!("declare queue {name}: {e}"));
    }

    /// Everything in `queue`, in order, taken off it (acked), as the broker delivered it.
    pub async fn read_raw(&self, queue: &str) -> Vec<BasicGetMessage> {
        let connection = self.connection().await;
        let channel = connection.create_channel().await.expect("reader: channel");
        let mut messages = Vec::new();
        while let Some(message) = channel
            .basic_get(queue.into(), BasicGetOptions::default())
            .await
            .unwrap_or_else(|e| panic!("basic_get {queue}: {e}"))
        {
            channel
                .basic_ack(message.delivery.delivery_tag, BasicAckOptions::default())
                .await
                .unwrap_or_else(|e| panic!("ack on {queue}: {e}"));
            messages.push(message);
        }
        messages
    }

    /// [`RabbitMqServer::read_raw`] in the sinks' common shape.
    pub async fn read(&self, queue: &str) -> Vec<Delivered> {
        self.read_raw(queue).await.iter().map(delivered).collect()
    }

    /// Reads `queue` until it has held `count` messages in all or `deadline` passes.
    pub async fn read_until(
        &self,
        queue: &str,
        count: usize,
        deadline: Duration,
    ) -> Vec<Delivered> {
        let started = Instant::now();
        let mut all = Vec::new();
        loop {
            all.extend(self.read(queue).await);
            if all.len() >= count || started.elapsed() > deadline {
                return all;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// One message as the sinks' tests compare it.
pub fn delivered(message: &BasicGetMessage) -> Delivered {
    let properties = &message.delivery.properties;
    let headers: Vec<(String, String)> = properties
        .headers()
        .as_ref()
        .map(|table| {
            table.inner().iter().map(|(name, value)| (name.to_string(), text(value))).collect()
        })
        .unwrap_or_default();
    let key = headers.iter().find(|(n, _)| n == "walrelay-key").map(|(_, v)| v.clone());
    Delivered {
        routed_to: message.delivery.routing_key.to_string(),
        dedup_id: properties.message_id().as_ref().map(|id| id.to_string()),
        key,
        headers,
        body: message.delivery.data.clone(),
    }
}

fn text(value: &AMQPValue) -> String {
    match value {
        AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        AMQPValue::ShortString(s) => s.to_string(),
        other => format!("{other:?}"),
    }
}
