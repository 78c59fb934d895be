//! `Delivery`'s Kafka transactions (exactly-once): initialising them once the slot is ours, and
//! committing the open one (with its progress record) when it is due. The policy — which
//! PostgreSQL transactions go in which Kafka transaction, and what may be confirmed — is
//! `delivery::exactly_once`'s; librdkafka's transactional calls, off the relay's thread, are
//! `delivery::producer::transactions`'.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::exactly_once::progress_topic::PROGRESS_TIMEOUT;
use super::exactly_once::read_progress;
use crate::delivery::frontier::PROGRESS_SEQ;
use crate::delivery::Delivery;
use crate::error::{Error, Result};
use crate::lsn::Lsn;

/// Where the open Kafka transaction's progress record is: `commit_open` sends it, then waits
/// for its report with the records' before it commits.
#[derive(Debug, Default)]
pub(crate) enum ProgressReport {
    #[default]
    NotSent,
    InFlight,
    Delivered,
    /// Refused or purged: librdkafka will not commit this transaction, and its commit's error
    /// says why (a purge report says only that the transaction failed).
    Failed(rdkafka::error::KafkaError),
}

/// The start under way: its task (the commit LSN the progress topic holds), and the
/// notification that it finished.
pub(crate) type Starting =
    (tokio::task::JoinHandle<Result<Option<Lsn>>>, std::sync::Arc<tokio::sync::Notify>);

/// How long librdkafka's blocking transactional calls may take while streaming.
pub(crate) const TXN_CALL_TIMEOUT: Duration = Duration::from_secs(30);

impl Delivery {
    /// Exactly-once, once the slot is ours (so a stand-by never fences the active relay):
    /// starts fencing earlier producers of the transactional id, aborting what they left open,
    /// and reading where the last committed Kafka transaction ended, on a task of its own. The
    /// stream is read meanwhile up to the first Begin, so the lag is true while Kafka is away;
    /// no record is sent before it finished ([`Delivery::started`]). Nothing to do at-least-once.
    pub fn start(&mut self, kafka: &crate::config::KafkaConfig) {
        let Some(delivery) = self.transactions.config().cloned() else { return };
        let init = self.side.kafka().init_transactions(TXN_CALL_TIMEOUT);
        let kafka = kafka.clone();
        let done = std::sync::Arc::new(tokio::sync::Notify::new());
        let notify = done.clone();
        let task = tokio::spawn(async move {
            let read = async {
                init.await?;
                read_progress(&kafka, &delivery, true, PROGRESS_TIMEOUT).await
            }
            .await;
            notify.notify_one();
            read
        });
        self.starting = Some((task, done));
    }

    /// Resolves once the start under way has finished (never without one): for the relay
    /// loop's select, which then calls [`Delivery::started`]. Cancel-safe.
    pub async fn start_finished(&self) {
        match &self.starting {
            Some((task, _)) if task.is_finished() => {}
            // A notification sent before this waits is kept for it.
            Some((_, done)) => done.notified().await,
            None => std::future::pending().await,
        }
    }

    /// Takes the outcome of the start (waiting for it if need be) and applies it.
    pub async fn started(&mut self) -> Result<()> {
        let Some((task, _)) = self.starting.take() else { return Ok(()) };
        let read = task.await;
        let committed =
            read.map_err(|e| Error::transient("starting the Kafka transactions failed", e))??;
        let (id, topic) = (
            self.transactions.transactional_id().unwrap_or_default(),
            self.transactions.progress_topic().unwrap_or_default(),
        );
        tracing::info!(
            transactional_id = id,
            progress_topic = topic,
            committed_lsn = %committed.map_or("none".to_string(), |l| l.to_string()),
            "exactly-once: transactions initialised; PostgreSQL transactions committed at or before this LSN are in Kafka already and are skipped"
        );
        if let Some(lsn) = committed {
            self.metrics.progress_lsn.store(lsn.as_u64(), Relaxed);
        }
        self.transactions.started(committed);
        Ok(())
    }

    /// Waits for the start under way, if the transactions need it (a lone logical message,
    /// which comes without a Begin for the loop to stop reading at).
    pub(crate) async fn finish_start(&mut self) -> Result<()> {
        if self.transactions.needs_start() {
            if self.starting.is_none() {
                return Err(Error::transient_msg(
                    "exactly-once: a record came before the Kafka transactions were started",
                ));
            }
            self.started().await?;
        }
        Ok(())
    }

    /// When the loop must look at the open Kafka transaction again
    /// ([`Delivery::on_transaction_deadline`]); never at-least-once.
    pub fn transaction_deadline(&self) -> Option<tokio::time::Instant> {
        self.transactions.deadline()
    }

    /// The open Kafka transaction's deadline passed: commit it if it is due, or stop if the
    /// PostgreSQL transaction it is inside has kept it open too long.
    pub async fn on_transaction_deadline(&mut self) -> Result<()> {
        self.transactions.overrun()?;
        self.commit_kafka_if_due().await
    }

    /// Commits the open Kafka transaction if it is due; the loop asks after every event.
    pub async fn commit_kafka_if_due(&mut self) -> Result<()> {
        if self.transactions.due() {
            self.commit_kafka(TXN_CALL_TIMEOUT).await?;
        }
        Ok(())
    }

    /// Commits the open Kafka transaction: waits for every record's report (a refused one's
    /// dead letter goes in the same transaction), adds the progress record, commits within
    /// `timeout`. On failure it is abandoned (the ceiling stays where it began) and the session
    /// ends; the next one's `init_transactions` aborts what is open here, and it resumes from
    /// the last committed position.
    pub async fn commit_kafka(&mut self, timeout: Duration) -> Result<()> {
        let started = std::time::Instant::now();
        let result = self.commit_open(timeout).await;
        match result {
            Ok(Some(lsn)) => {
                self.transactions.committed(lsn);
                self.metrics.kafka_transactions.fetch_add(1, Relaxed);
                self.metrics.progress_lsn.store(lsn.as_u64(), Relaxed);
                tracing::debug!(%lsn, took_ms = started.elapsed().as_millis() as u64, "kafka transaction committed");
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => {
                self.abandon_transaction();
                Err(e)
            }
        }
    }

    /// The commit itself; the position it committed, if there was anything to commit.
    ///
    /// The progress record goes out first, while the records' reports are still coming, and
    /// the commit waits for its report too: librdkafka's commit flushes a record sent just
    /// before it about 100 ms late (measured on Apache Kafka 4.4 with librdkafka 2.12: a commit
    /// took 103 ms after a last record, 5 ms after none), and every commit stops the stream.
    async fn commit_open(&mut self, timeout: Duration) -> Result<Option<Lsn>> {
        let Some((record, lsn)) = self.transactions.progress_record() else { return Ok(None) };
        self.progress_report = ProgressReport::InFlight;
        self.send(PROGRESS_SEQ, record).await?;
        loop {
            let progress_in_flight = matches!(self.progress_report, ProgressReport::InFlight);
            if !progress_in_flight && self.frontier.unacked() == 0 && self.pending_dead.is_empty() {
                break;
            }
            // A refused record's dead letter goes in this transaction too.
            self.send_waiting().await?;
            if progress_in_flight || self.frontier.unacked() > 0 {
                self.next_reports().await?;
            }
        }
        let committed = self.side.kafka().commit_transaction(timeout).await;
        if let ProgressReport::Failed(error) = std::mem::take(&mut self.progress_report) {
            // librdkafka refuses to commit a transaction in which a delivery failed
            // (rd_kafka_commit_transaction), and its error names the cause: an ACL, a fence.
            committed?;
            let topic = self.transactions.progress_topic().unwrap_or_default().to_string();
            return Err(self.not_the_records_fault(PROGRESS_SEQ, &topic, None, error));
        }
        committed?;
        Ok(Some(lsn))
    }
}
