//! The transactional producer's calls (exactly-once, see `delivery::exactly_once`): librdkafka's
//! blocking ones run off the relay's thread, and their failures are sorted by what happens next.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, Producer};

use super::{Publisher, RelayContext};
use crate::error::{Error, Result};

impl Publisher {
    /// Fences every earlier producer of this `transactional.id` and aborts what it left open.
    pub async fn init_transactions(&self, timeout: Duration) -> Result<()> {
        self.blocking(move |p| p.init_transactions(timeout))
            .await
            .map_err(|e| transaction_error("initialise the Kafka transactions", e))
    }

    /// Starts a Kafka transaction (local to librdkafka: no request).
    pub fn begin_transaction(&self) -> Result<()> {
        self.producer
            .begin_transaction()
            .map_err(|e| transaction_error("begin a Kafka transaction", e))
    }

    /// Commits the open transaction: librdkafka flushes its records first.
    pub async fn commit_transaction(&self, timeout: Duration) -> Result<()> {
        self.blocking(move |p| p.commit_transaction(timeout))
            .await
            .map_err(|e| transaction_error("commit a Kafka transaction", e))
    }

    /// Aborts the open transaction; its records stay invisible to `read_committed` consumers.
    pub async fn abort_transaction(&self, timeout: Duration) -> Result<()> {
        self.blocking(move |p| p.abort_transaction(timeout))
            .await
            .map_err(|e| transaction_error("abort a Kafka transaction", e))
    }

    /// Runs one of librdkafka's blocking transactional calls off the relay's thread, which
    /// must keep answering PostgreSQL meanwhile. Delivery reports a commit flushes are served
    /// by that call, on that thread: they wait with the others for the next
    /// [`Publisher::serve_reports`].
    async fn blocking(
        &self,
        call: impl FnOnce(&BaseProducer<RelayContext>) -> rdkafka::error::KafkaResult<()>
            + Send
            + 'static,
    ) -> std::result::Result<(), KafkaError> {
        let producer = Arc::clone(&self.producer);
        let result = tokio::task::spawn_blocking(move || call(&producer)).await;
        // Served on the other thread: whatever it left on the queue is the loop's again.
        self.queue.ready.notify_one();
        result.unwrap_or(Err(KafkaError::Canceled))
    }
}

/// A transactional call's failure, by what happens next: fenced (another relay took over: stand
/// by), or anything else (end the session; the next one aborts what is open and resumes from
/// the last committed position).
fn transaction_error(what: &str, error: KafkaError) -> Error {
    let fenced = matches!(
        error.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::Fenced
                | RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch
        )
    );
    if fenced {
        return Error::Busy {
            what: format!(
                "this relay's Kafka producer was fenced while trying to {what}: another walrelay with the same [delivery] transactional_id initialised its transactions (it took the slot), or the broker aborted this relay's transaction after transaction.timeout.ms, which Kafka reports the same way (KIP-588); standing down, then resuming from the last committed position if the slot is free ({error})"
            ),
        };
    }
    Error::transient(format!("could not {what}"), error)
}
