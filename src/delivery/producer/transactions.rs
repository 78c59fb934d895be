//! The transactional producer's calls (exactly-once, see `delivery::exactly_once`): librdkafka's
//! blocking ones run off the relay's thread, and their failures are sorted by what happens next.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, Producer};

use tokio::sync::Notify;

use super::{refusal_fix, Publisher, RelayContext};
use crate::delivery::fault::{classify, Fault};
use crate::error::{Error, Result};

/// A transactional producer's transactional calls. Only a Kafka publisher created with a
/// `transactional.id` hands one out, so no other sink, and no at-least-once session, can make
/// them.
pub struct Transactional {
    producer: Arc<BaseProducer<RelayContext>>,
    /// The main queue's wake-up: a call that served reports on its thread wakes the loop.
    ready: Arc<Notify>,
    transactional_id: String,
    principal: String,
}

impl Publisher {
    /// The transactional calls of this producer; `None` unless it was created with a
    /// `transactional.id` (exactly-once).
    pub fn transactional(&self) -> Option<Transactional> {
        (!self.transactional_id.is_empty()).then(|| Transactional {
            producer: Arc::clone(&self.producer),
            ready: Arc::clone(&self.queue.ready),
            transactional_id: self.transactional_id.clone(),
            principal: self.principal.clone(),
        })
    }
}

impl Transactional {
    /// Fences every earlier producer of this `transactional.id` and aborts what it left open;
    /// a future of its own, so the relay loop goes on meanwhile.
    pub fn init_transactions(
        &self,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<()>> + Send + 'static {
        let producer = Arc::clone(&self.producer);
        let (id, principal) = (self.transactional_id.clone(), self.principal.clone());
        async move {
            let result = tokio::task::spawn_blocking(move || producer.init_transactions(timeout))
                .await
                .unwrap_or(Err(KafkaError::Canceled));
            result.map_err(|e| {
                transaction_error("initialise the Kafka transactions", e, &id, &principal)
            })
        }
    }

    /// Starts a Kafka transaction (local to librdkafka: no request).
    pub fn begin_transaction(&self) -> Result<()> {
        self.producer
            .begin_transaction()
            .map_err(|e| self.transaction_error("begin a Kafka transaction", e))
    }

    /// Commits the open transaction: librdkafka flushes its records first.
    pub async fn commit_transaction(&self, timeout: Duration) -> Result<()> {
        self.blocking(move |p| p.commit_transaction(timeout))
            .await
            .map_err(|e| self.transaction_error("commit a Kafka transaction", e))
    }

    /// Aborts the open transaction; its records stay invisible to `read_committed` consumers.
    pub async fn abort_transaction(&self, timeout: Duration) -> Result<()> {
        self.blocking(move |p| p.abort_transaction(timeout))
            .await
            .map_err(|e| self.transaction_error("abort a Kafka transaction", e))
    }

    fn transaction_error(&self, what: &str, error: KafkaError) -> Error {
        transaction_error(what, error, &self.transactional_id, &self.principal)
    }

    /// Runs one of librdkafka's blocking transactional calls off the relay's thread, which
    /// must keep answering PostgreSQL meanwhile. Delivery reports a commit flushes are served
    /// by that call, on that thread: they wait with the others for the next
    /// `Publisher::serve_reports`.
    async fn blocking(
        &self,
        call: impl FnOnce(&BaseProducer<RelayContext>) -> rdkafka::error::KafkaResult<()>
            + Send
            + 'static,
    ) -> std::result::Result<(), KafkaError> {
        let producer = Arc::clone(&self.producer);
        let result = tokio::task::spawn_blocking(move || call(&producer)).await;
        // Served on the other thread: whatever it left on the queue is the loop's again.
        self.ready.notify_one();
        result.unwrap_or(Err(KafkaError::Canceled))
    }
}

/// A transactional call's failure, by what happens next (`delivery::fault`): a missing ACL
/// stops the relay with the line that grants it; a fence is told apart from a broker's abort by
/// the session; anything else ends the session, and the next one aborts what is open here and
/// resumes from the last committed position.
fn transaction_error(what: &str, error: KafkaError, id: &str, principal: &str) -> Error {
    match classify(&error) {
        Fault::Authorization => {
            // A commit names no topic: any the Kafka transaction wrote may be the one refused.
            let topics = error.rdkafka_error_code() == Some(RDKafkaErrorCode::TopicAuthorizationFailed);
            let fix = match refusal_fix(&error, id, principal) {
                Some(_) if topics => format!("grant {principal} Write and Describe on every topic a Kafka transaction writes — the routed topics, and the progress topic ([delivery] progress_topic), which needs Read too: kafka-acls.sh --bootstrap-server … --add --allow-principal {principal} --operation Write --operation Describe --topic <the topic>"),
                Some(fix) => fix,
                None => format!("grant {principal} the ACL the error names"),
            };
            Error::definite_with(format!("could not {what}: an ACL is missing"), fix, error)
        }
        Fault::Fenced => Error::Fenced {
            what: format!(
                "this relay's Kafka producer was fenced while trying to {what}: another walrelay with the same [delivery] transactional_id initialised its transactions (it took the slot), or the broker aborted this relay's transaction after transaction.timeout.ms, which Kafka reports the same way (KIP-588) ({error})"
            ),
        },
        Fault::Record | Fault::Transaction | Fault::Transient => {
            Error::transient(format!("could not {what}"), error)
        }
    }
}
