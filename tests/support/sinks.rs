//! What the tests of the sinks beyond Kafka read back from each broker, in one shape, so one
//! test body can assert routing, headers, event id, key and order for every sink.
//!
//! Each broker's harness (`nats.rs`, `rabbitmq.rs`, `sqs.rs`, `webhook.rs`) starts its server
//! once per test process and reads what arrived into [`Delivered`].

/// One message as its broker delivered it to a reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// Where it went: the NATS subject, the AMQP routing key, the SQS queue name, the request
    /// path of the webhook.
    pub routed_to: String,
    /// The broker's own dedup key, as the broker holds it: `Nats-Msg-Id`, AMQP `message_id`,
    /// SQS `MessageDeduplicationId` (FIFO), HTTP `Idempotency-Key`.
    pub dedup_id: Option<String>,
    /// Where the key went: SQS FIFO `MessageGroupId`, else the key header.
    pub key: Option<String>,
    /// Headers / attributes as the reader got them, in the broker's order (name, value text).
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Delivered {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}
