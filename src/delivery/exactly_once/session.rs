//! Exactly-once's side of a session: the Kafka transactions `Delivery` drives, held as
//! `Delivery::exactly_once` — `None` at-least-once and for every sink beyond Kafka, so nothing
//! here runs on their path. Built only from a transactional Kafka producer ([`KafkaTransactions::new`]
//! takes its [`Transactional`] calls), so no other sink can reach a transactional call.
//!
//! Initialising the transactions once the slot is ours, entering the open Kafka transaction
//! before a record, committing it (with its progress record) when it is due, and ending it at a
//! stop. The policy — which PostgreSQL transactions go in which Kafka transaction, and what may
//! be confirmed — is [`Transactions`]'; librdkafka's transactional calls, off the relay's
//! thread, are `delivery::producer::transactions`'.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::progress_topic::PROGRESS_TIMEOUT;
use super::{read_progress, AtStop, Transactions};
use crate::config::{DeliveryConfig, KafkaConfig};
use crate::delivery::frontier::PROGRESS_SEQ;
use crate::delivery::producer::Transactional;
use crate::delivery::Delivery;
use crate::error::{Error, Result};
use crate::lsn::Lsn;

/// The session's Kafka transactions: their policy, the producer's transactional calls, and
/// where the start and the open transaction's progress record are.
pub(crate) struct KafkaTransactions {
    pub(crate) policy: Transactions,
    producer: Transactional,
    /// For reading the progress topic at the start.
    kafka: KafkaConfig,
    /// `init_transactions` and the read of the progress topic, under way on a task of their
    /// own while the stream starts (see [`Delivery::start`]).
    starting: Option<Starting>,
    /// The report of the open Kafka transaction's progress record.
    pub(crate) progress_report: ProgressReport,
}

impl KafkaTransactions {
    /// The transactions of a session resumed at `resumed`, made with `producer`'s calls.
    pub(crate) fn new(
        delivery: &DeliveryConfig,
        kafka: &KafkaConfig,
        resumed: Lsn,
        producer: Transactional,
    ) -> KafkaTransactions {
        KafkaTransactions {
            policy: Transactions::new(delivery, resumed),
            producer,
            kafka: kafka.clone(),
            starting: None,
            progress_report: ProgressReport::NotSent,
        }
    }
}

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
    /// no record is sent before it finished ([`Delivery::started`]). Nothing to start otherwise.
    pub fn start(&mut self) {
        let Some(t) = &mut self.exactly_once else { return };
        let init = t.producer.init_transactions(TXN_CALL_TIMEOUT);
        let (kafka, delivery) = (t.kafka.clone(), t.policy.config().clone());
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
        t.starting = Some((task, done));
    }

    /// Resolves once the start under way has finished (never without one): for the relay
    /// loop's select, which then calls [`Delivery::started`]. Cancel-safe.
    pub async fn start_finished(&self) {
        match self.exactly_once.as_ref().and_then(|t| t.starting.as_ref()) {
            Some((task, _)) if task.is_finished() => {}
            // A notification sent before this waits is kept for it.
            Some((_, done)) => done.notified().await,
            None => std::future::pending().await,
        }
    }

    /// Takes the outcome of the start (waiting for it if need be) and applies it.
    pub async fn started(&mut self) -> Result<()> {
        let Some(t) = &mut self.exactly_once else { return Ok(()) };
        let Some((task, _)) = t.starting.take() else { return Ok(()) };
        let read = task.await;
        let committed =
            read.map_err(|e| Error::transient("starting the Kafka transactions failed", e))??;
        let config = t.policy.config();
        tracing::info!(
            transactional_id = config.transactional_id,
            progress_topic = config.progress_topic,
            committed_lsn = %committed.map_or("none".to_string(), |l| l.to_string()),
            "exactly-once: transactions initialised; PostgreSQL transactions committed at or before this LSN are in Kafka already and are skipped"
        );
        if let Some(lsn) = committed {
            self.metrics.progress_lsn.store(lsn.as_u64(), Relaxed);
        }
        t.policy.started(committed);
        Ok(())
    }

    /// Before a record of the current PostgreSQL transaction goes out: whether it goes out at
    /// all (not when its transaction is in Kafka already), with a Kafka transaction begun for
    /// it if none is open. A lone logical message, which comes without a Begin for the loop to
    /// stop reading at, may be the first record: the start is waited for here then.
    pub(crate) async fn enter_kafka_transaction(&mut self) -> Result<bool> {
        let acked = self.frontier.acked();
        let Some(t) = &mut self.exactly_once else { return Ok(true) };
        if t.policy.skipping() {
            return Ok(false);
        }
        if t.policy.needs_start() {
            if t.starting.is_none() {
                return Err(Error::transient_msg(
                    "exactly-once: a record came before the Kafka transactions were started",
                ));
            }
            self.started().await?;
        }
        let Some(t) = &mut self.exactly_once else { return Ok(true) };
        if t.policy.skipping() {
            return Ok(false);
        }
        if t.policy.before_record(acked)? {
            t.producer.begin_transaction()?;
        }
        Ok(true)
    }

    /// Whether the open Kafka transaction should commit now; the loop asks after every event,
    /// and calls [`Delivery::commit_kafka`] when it should. Never at-least-once.
    pub fn commit_due(&self) -> bool {
        self.exactly_once.as_ref().is_some_and(|t| t.policy.due())
    }

    /// When the loop must look at the open Kafka transaction again
    /// ([`Delivery::on_transaction_deadline`]); never at-least-once.
    pub fn transaction_deadline(&self) -> Option<tokio::time::Instant> {
        self.exactly_once.as_ref()?.policy.deadline()
    }

    /// The open Kafka transaction's deadline passed: commit it if it is due, or stop if the
    /// PostgreSQL transaction it is inside has kept it open too long.
    pub async fn on_transaction_deadline(&mut self) -> Result<()> {
        if let Some(t) = &self.exactly_once {
            t.policy.overrun()?;
        }
        self.commit_kafka_if_due().await
    }

    /// Commits the open Kafka transaction if it is due ([`Delivery::commit_due`]).
    pub async fn commit_kafka_if_due(&mut self) -> Result<()> {
        if self.commit_due() {
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
                if let Some(t) = &mut self.exactly_once {
                    t.policy.committed(lsn);
                }
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
        let Some(t) = &mut self.exactly_once else { return Ok(None) };
        let Some((record, lsn)) = t.policy.progress_record() else { return Ok(None) };
        t.progress_report = ProgressReport::InFlight;
        self.send(PROGRESS_SEQ, record).await?;
        loop {
            let progress_in_flight = matches!(self.progress_report(), ProgressReport::InFlight);
            if !progress_in_flight && self.frontier.unacked() == 0 && self.pending_dead.is_empty() {
                break;
            }
            // A refused record's dead letter goes in this transaction too.
            self.send_waiting().await?;
            if progress_in_flight || self.frontier.unacked() > 0 {
                self.next_reports().await?;
            }
        }
        let Some(t) = &mut self.exactly_once else { return Ok(None) };
        let committed = t.producer.commit_transaction(timeout).await;
        if let ProgressReport::Failed(error) = std::mem::take(&mut t.progress_report) {
            // librdkafka refuses to commit a transaction in which a delivery failed
            // (rd_kafka_commit_transaction), and its error names the cause: an ACL, a fence.
            committed?;
            let topic = t.policy.config().progress_topic.clone();
            return Err(self.not_the_records_fault(PROGRESS_SEQ, &topic, None, error));
        }
        committed?;
        Ok(Some(lsn))
    }

    fn progress_report(&self) -> &ProgressReport {
        self.exactly_once.as_ref().map_or(&ProgressReport::NotSent, |t| &t.progress_report)
    }

    /// The progress record's delivery report came: its transaction's commit is what counts.
    pub(crate) fn progress_reported(&mut self, report: ProgressReport) {
        if let Some(t) = &mut self.exactly_once {
            t.progress_report = report;
        }
    }

    /// A graceful stop with Kafka transactions: commits the open one by `deadline` if it holds
    /// whole PostgreSQL transactions only, else aborts it (the next start resumes before the
    /// transaction that was cut). Either way, what did not commit holds the ceiling where it
    /// began. None open: nothing to wait for — whatever is acknowledged and not in a committed
    /// transaction is confirmed by no one.
    pub(crate) async fn end_kafka_transaction(&mut self, deadline: tokio::time::Instant) {
        let left = || deadline.saturating_duration_since(tokio::time::Instant::now());
        let Some(t) = &self.exactly_once else { return };
        match t.policy.at_stop() {
            // A record Kafka refused is not in the transaction: committing it would put the
            // position past an event that is not there.
            AtStop::Commit if self.refused == 0 => {
                let committed = tokio::time::timeout_at(deadline, self.commit_kafka(left())).await;
                if !matches!(committed, Ok(Ok(()))) {
                    self.abandon_transaction();
                    tracing::warn!("could not commit the open Kafka transaction while stopping; the next start resumes before it");
                }
            }
            AtStop::Commit | AtStop::Abort => {
                // Abandoned first: whatever the abort does in the time left, nothing in this
                // transaction is confirmed.
                self.abandon_transaction();
                self.abort_within(deadline).await;
            }
            AtStop::Settle => {}
        }
    }

    /// Aborts the open Kafka transaction by `deadline`. librdkafka purges its records and waits
    /// for their reports to be served before the abort returns; this thread serves the queue,
    /// so they are served here meanwhile (and dropped: the transaction is abandoned already).
    async fn abort_within(&mut self, deadline: tokio::time::Instant) {
        let Some(t) = &self.exactly_once else { return };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let abort = t.producer.abort_transaction(left);
        tokio::pin!(abort);
        let mut purged = VecDeque::new();
        loop {
            tokio::select! {
                _ = &mut abort => return,
                _ = self.side.reports_ready() => {
                    self.side.serve_reports(&mut purged);
                    purged.clear();
                }
                _ = tokio::time::sleep_until(deadline) => return,
            }
        }
    }

    /// The open Kafka transaction will not commit (its commit failed, the stop aborts it, or
    /// the session ends on an error): counted, and the ceiling stays where it began. Nothing
    /// to abandon at-least-once.
    pub fn abandon_transaction(&mut self) {
        let Some(t) = &mut self.exactly_once else { return };
        if t.policy.is_open() {
            self.metrics.kafka_transactions_failed.fetch_add(1, Relaxed);
        }
        t.policy.abandon();
    }
}
