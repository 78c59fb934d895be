//! Exactly-once delivery's Kafka transactions in a session: initialising them once the slot is
//! ours, and committing the open one (with its progress record) when it is due. The policy —
//! which PostgreSQL transactions go in which Kafka transaction — is `delivery::exactly_once`'s.

use std::sync::atomic::Ordering::Relaxed;

use super::{read_progress, Transactions};
use crate::delivery::frontier::Seq;
use crate::delivery::Delivery;
use crate::error::Result;

/// The delivery-report number of the progress record: outside the frontier's sequence, since
/// the commit of its Kafka transaction, not its report, is what counts.
pub(crate) const PROGRESS_SEQ: Seq = Seq::MAX;

/// How long librdkafka's blocking transactional calls may take.
const TXN_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl Delivery {
    /// Exactly-once, once the slot is ours: fences earlier producers of the transactional id,
    /// aborts what they left open, and reads where the last committed Kafka transaction ended.
    /// Nothing to do at-least-once.
    pub async fn start(&mut self, kafka: &crate::config::KafkaConfig) -> Result<()> {
        let Some(txns) = &mut self.transactions else { return Ok(()) };
        self.publisher.init_transactions(TXN_CALL_TIMEOUT).await?;
        let topic = txns.progress_topic();
        let committed = read_progress(kafka, topic, txns.transactional_id(), true).await?;
        tracing::info!(
            transactional_id = txns.transactional_id(),
            progress_topic = topic,
            committed_lsn = %committed.map_or("none".to_string(), |l| l.to_string()),
            "exactly-once: transactions initialised; PostgreSQL transactions committed at or before this LSN are in Kafka already and are skipped"
        );
        if let Some(lsn) = committed {
            self.metrics.progress_lsn.store(lsn.as_u64(), Relaxed);
        }
        txns.resume_after(committed);
        Ok(())
    }

    /// Exactly-once: when the open Kafka transaction should commit by age (it holds whole
    /// PostgreSQL transactions only); never at-least-once.
    pub fn transaction_deadline(&self) -> Option<tokio::time::Instant> {
        self.transactions.as_ref().and_then(Transactions::deadline)
    }

    /// Commits the open Kafka transaction if it is due.
    pub async fn commit_kafka_if_due(&mut self) -> Result<()> {
        if self.transactions.as_ref().is_some_and(Transactions::due) {
            self.commit_kafka().await?;
        }
        Ok(())
    }

    /// Commits the open Kafka transaction: waits for every record's report (a refused one's
    /// dead letter goes in the same transaction), adds the progress record, commits. On
    /// failure the session ends; the next one's `init_transactions` aborts what is open here,
    /// and it resumes from the last committed position.
    pub async fn commit_kafka(&mut self) -> Result<()> {
        let started = std::time::Instant::now();
        while self.frontier.unacked() > 0 || !self.pending_dead.is_empty() {
            self.send_dead_letters().await?;
            if self.frontier.unacked() > 0 {
                self.next_reports().await?;
            }
        }
        let txns = self.transactions.as_mut().expect("exactly-once");
        let Some((record, lsn)) = txns.progress_record() else { return Ok(()) };
        self.send(PROGRESS_SEQ, record).await?;
        if let Err(e) = self.publisher.commit_transaction(TXN_CALL_TIMEOUT).await {
            self.transactions.as_mut().expect("exactly-once").forget();
            self.metrics.kafka_transactions_failed.fetch_add(1, Relaxed);
            return Err(e);
        }
        self.transactions.as_mut().expect("exactly-once").committed(lsn);
        self.metrics.kafka_transactions.fetch_add(1, Relaxed);
        self.metrics.progress_lsn.store(lsn.as_u64(), Relaxed);
        tracing::debug!(%lsn, took_ms = started.elapsed().as_millis() as u64, "kafka transaction committed");
        Ok(())
    }
}
