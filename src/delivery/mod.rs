//! Delivery: records to librdkafka, delivery reports back into the ack frontier, dead letters,
//! and what may be confirmed. The relay loop owns one per session and tells it about
//! transaction boundaries; it never decides routing.
//!
//! Every record takes the next sequence number of the [`Frontier`]; a refused record is replaced
//! by its dead letter under the same number (or stops the relay), so the frontier never moves
//! past a record that did not reach Kafka in some form (I2, I8).
//!
//! The common part is this file, `frontier.rs` (what may be confirmed), `reports.rs` (what each
//! report means for its record), `dead_letter.rs` (the record sent in place of a refused one),
//! `failed.rs` (what did not reach the broker as itself) and `side.rs` (Kafka, or a sink beyond
//! it). Kafka's own: `producer.rs` (librdkafka and its delivery reports, with the broker probe
//! and the transactional calls under `producer/`), `offsets.rs` (first writes per partition) and
//! `exactly_once/` (the Kafka transactions: their policy, the progress topic, and the session's
//! commits), which only an exactly-once Kafka delivery holds.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use self::exactly_once::KafkaTransactions;
pub use self::failed::Failed;
use self::fault::Fault;
use self::frontier::{Frontier, Sent, Seq, PROGRESS_SEQ};
use self::offsets::Offsets;
use self::producer::{Publisher, Refused, Report, SendError};
use self::side::Side;
use crate::clock::unix_micros;
use crate::config::{Config, DeadLetterConfig, Limits};
use crate::encoder::Framed;
use crate::error::{Error, Result};
use crate::lsn::Lsn;
use crate::metrics::Metrics;
use crate::router::Record;
use crate::sink::dispatch::Dispatch;
use crate::spans::Exporter;
use crate::trace::Pending;
use crate::txn::Txn;

/// What can work for a row the router refuses. Changing the row in the table changes nothing:
/// walrelay reads it from the WAL, where it stays as it was committed.
pub fn poison_row_hint(slot: &str, commit_lsn: Lsn) -> String {
    format!(
        "the row is read from the WAL, so changing it in the table does not help: configure [dead_letter] topic (the row goes there and the relay goes on), or change the [router] options that refuse it, or skip its transaction — with walrelay stopped — by moving the slot past its commit LSN {commit_lsn}: SELECT pg_replication_slot_advance('{slot}', '{commit_lsn}'::pg_lsn + 1) (its events are then not relayed)"
    )
}

/// What delivery says may be confirmed, with the commit times around it (for the lag metrics).
/// `relay::Progress` confirms the lowest of `acked`, `ceiling` and what the catalog vouched
/// for, in one place (I2, I9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acked {
    /// Every record before it acknowledged (I2).
    pub acked: Lsn,
    /// Exactly-once: nothing past it is in a committed Kafka transaction (I9); `None`: no cap
    /// (at-least-once, or every acknowledged record is committed).
    pub ceiling: Option<Lsn>,
    /// Commit time (µs since the Unix epoch) of the oldest transaction read and not confirmable
    /// yet; `None` when there is none.
    pub oldest_unconfirmed_commit: Option<i64>,
    /// Commit time of the last transaction that is confirmable, once there is one.
    pub last_confirmed_commit: Option<i64>,
}

impl Acked {
    /// What delivery allows to be confirmed: the acknowledged prefix, capped by the ceiling.
    pub fn confirmable(&self) -> Lsn {
        self.ceiling.map_or(self.acked, |c| c.min(self.acked))
    }
}

/// A topic's partition.
type Partition = (Arc<str>, i32);

/// Records held behind first writes at most before the relay stops reading: a first write
/// takes one round trip (seconds on a topic just created), and reading on through it would
/// hold up to `[limits] inflight_records` records here, outside librdkafka's buffer.
const MAX_HELD: usize = 1_000;

pub struct Delivery {
    /// Kafka, or the dispatch of a sink beyond it.
    side: Side,
    /// `[tracing]`: where each record's span goes once the broker acknowledged it.
    exporter: Option<Exporter>,
    /// Delivery reports served and not yet handled (a failure stops the handling: the rest wait).
    reports: VecDeque<Report>,
    frontier: Frontier,
    /// The last offset reported per partition: a report below it is no write (`offsets.rs`).
    offsets: Offsets,
    limits: Limits,
    dead_letter: Option<DeadLetterConfig>,
    /// Dead letters for refused records, waiting to be sent under the refused record's number.
    pending_dead: Vec<(Seq, Record)>,
    /// Records for a partition whose first write is in flight, in their order: sent once it is
    /// written (`offsets.rs`, I5). In the frontier already, so the in-flight limits count them.
    held: HashMap<Partition, VecDeque<(Seq, Record)>>,
    /// How many records `held` holds: past [`MAX_HELD`] the relay stops reading until the
    /// first writes are reported (held records live here, not in librdkafka's buffer).
    held_records: usize,
    /// How long after its commit the transaction being read was read, in seconds.
    read_lag: f64,
    /// Records of the current transaction, counted into commit→read at its Commit.
    read_records: u64,
    /// Acknowledged records not yet counted in the metrics.
    acked: Vec<Sent>,
    /// Exactly-once: the Kafka transactions records go out in — what they allow to be
    /// confirmed, and when they begin, skip and commit. `None` at-least-once and for every
    /// sink beyond Kafka: their path makes no transactional call, and checks this once per
    /// hook.
    exactly_once: Option<KafkaTransactions>,

    /// Who the broker sees (`User:walrelay`), for the fix of a missing ACL.
    principal: String,
    /// Records Kafka refused for good that stop the relay: never acknowledged, so a graceful
    /// stop does not wait for them.
    refused: usize,
    /// `[http] table_metrics`: count events per outbox table.
    table_metrics: bool,
    metrics: Arc<Metrics>,
}

impl Delivery {
    /// A producer for one session, whose frontier starts at the slot's confirmed position.
    /// `dispatch`: the started sink beyond Kafka (`crate::sink::start`); `None`: Kafka.
    pub fn new(
        config: &Config,
        confirmed: Lsn,
        metrics: &Arc<Metrics>,
        dispatch: Option<Dispatch>,
    ) -> Result<Delivery> {
        let capture = config.dead_letter.as_ref().map_or(0, |d| d.max_value_bytes);
        let (side, exactly_once) = match dispatch {
            Some(dispatch) => {
                // Kafka's probe keeps these; a sink beyond Kafka was reached to be started, and
                // its failures show as `delivery_failing` until its next acknowledgement.
                metrics.broker_asked.store(true, Relaxed);
                metrics.broker_up.store(true, Relaxed);
                (Side::Broker(dispatch), None)
            }
            None => {
                let d = &config.delivery;
                let id = d.exactly_once().then_some(d.transactional_id.as_str());
                let publisher = Publisher::new(&config.kafka, capture, metrics.clone(), id)?;
                let exactly_once = publisher
                    .transactional()
                    .map(|calls| KafkaTransactions::new(d, &config.kafka, confirmed, calls));
                (Side::Kafka(publisher), exactly_once)
            }
        };
        Ok(Delivery {
            side,
            reports: VecDeque::new(),
            frontier: Frontier::new(confirmed),
            offsets: Offsets::default(),
            limits: config.limits,
            dead_letter: config.dead_letter.clone(),
            pending_dead: Vec::new(),
            held: HashMap::new(),
            held_records: 0,
            read_lag: 0.0,
            read_records: 0,
            acked: Vec::new(),
            exactly_once,
            principal: producer::principal(&config.kafka),
            refused: 0,
            table_metrics: config.http.as_ref().is_none_or(|h| h.table_metrics),
            exporter: Exporter::for_config(config, metrics),
            metrics: metrics.clone(),
        })
    }

    /// Backpressure (I7): whether more may be read from the WAL now.
    /// Exactly-once: nothing past the first Begin is read before the transactions started.
    pub fn has_room(&self) -> bool {
        self.held_records < MAX_HELD
            && self.frontier.inflight_records() < self.limits.inflight_records
            && self.frontier.inflight_bytes() < self.limits.inflight_bytes
            && self.exactly_once.as_ref().is_none_or(|t| t.policy.may_read())
    }

    /// Transaction `txn` starts; its rows follow, each with the same `txn`.
    pub fn begin(&mut self, txn: &Txn) {
        if let Some(t) = &mut self.exactly_once {
            if t.policy.begin(txn) {
                let commit_lsn = txn.commit_lsn;
                tracing::debug!(%commit_lsn, "transaction in Kafka already (exactly-once); skipped");
            }
        }
        self.frontier.begin(txn.commit_micros);
        self.read_lag = (unix_micros() - txn.commit_micros).max(0) as f64 / 1e6;
    }

    pub async fn commit(&mut self, end_lsn: Lsn) -> Result<()> {
        self.frontier.commit(end_lsn);
        if let Some(t) = &mut self.exactly_once {
            t.policy.end();
        }
        if self.read_records > 0 {
            // Once per transaction: its records share the read time.
            self.metrics.observe_commit_to_read(self.read_lag, self.read_records);
            self.read_records = 0;
        }
        self.metrics.transactions.fetch_add(1, Relaxed);
        tracing::debug!(%end_lsn, inflight = self.frontier.inflight_records(), "transaction read");
        // Exactly-once, the loop commits the Kafka transaction once it knows whether more is
        // waiting (`commit_due` after each event).
        Ok(())
    }

    /// Starts an event outside any transaction (a non-transactional logical message, `txn` its
    /// own: its position and read time): what is published until [`Delivery::end_alone`] is
    /// confirmable at the message's own position.
    pub fn begin_alone(&mut self, txn: &Txn) {
        if let Some(t) = &mut self.exactly_once {
            t.policy.alone(txn);
        }
        self.frontier.begin(txn.commit_micros);
        self.read_lag = 0.0;
    }

    /// Ends what [`Delivery::begin_alone`] started: `lsn`, the message's position (the end of
    /// its WAL record), is confirmed once everything before it is acknowledged. On a restart
    /// PostgreSQL skips a non-transactional message whose record starts before the confirmed
    /// position: once confirmed it is not sent again, and until then it is (at least once).
    pub async fn end_alone(&mut self, lsn: Lsn) -> Result<()> {
        self.frontier.commit(lsn);
        self.read_records = 0;
        if let Some(t) = &mut self.exactly_once {
            t.policy.end();
        }
        Ok(())
    }

    /// A keepalive's position, confirmable when nothing is in flight (I3).
    pub fn idle(&mut self, wal_end: Lsn) {
        self.frontier.idle(wal_end);
        if let Some(t) = &mut self.exactly_once {
            t.policy.caught_up();
        }
    }

    /// Hands the record of the row of `table` at `lsn`, in transaction `txn`, to librdkafka.
    pub async fn publish(
        &mut self,
        record: Framed,
        table: &Arc<str>,
        lsn: Lsn,
        txn: &Txn,
    ) -> Result<()> {
        self.publish_record(record.into_record(), table, lsn, txn).await
    }

    /// [`Delivery::publish`], and a dead letter (walrelay's own JSON: nothing to frame).
    async fn publish_record(
        &mut self,
        record: Record,
        table: &Arc<str>,
        lsn: Lsn,
        txn: &Txn,
    ) -> Result<()> {
        if self.exactly_once.is_some() && !self.enter_kafka_transaction().await? {
            return Ok(());
        }
        let bytes = record.size();
        let span = Pending::of(record.trace.as_ref(), &record.event_id, lsn, txn.commit_micros);
        let sent = Sent {
            topic: record.topic.clone(),
            table: table.clone(),
            commit_micros: txn.commit_micros,
            span,
        };
        self.read_records += 1;
        let seq = self.frontier.sent(bytes, lsn, sent);
        self.send(seq, record).await
    }

    /// A row that cannot become its record: its dead letter is published in its place, or —
    /// without a dead-letter topic — the relay stops at it with `hint` (I8). `kind` names it
    /// for the operator: "outbox row" or "logical message"; `txn` is the transaction it was
    /// read in.
    pub async fn undeliverable(
        &mut self,
        row: Failed,
        txn: &Txn,
        kind: &'static str,
        hint: &str,
        cause: Option<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Result<()> {
        let what = format!(
            "{kind} {} of {} at LSN {} cannot be turned into a record: {}",
            row.event_id_or_none(),
            row.source,
            row.lsn,
            row.reason
        );
        let Some(dl) = &self.dead_letter else {
            // "row" or "message": the noun the operator reads elsewhere in the text.
            let noun = kind.rsplit(' ').next().unwrap_or(kind);
            let hint = format!("{hint}; nothing after this {noun} was confirmed");
            return Err(match cause {
                Some(cause) => Error::definite_with(what, hint, cause),
                None => Error::definite(what, hint),
            });
        };
        tracing::warn!(topic = %dl.topic, "{what}; sent to the dead-letter topic");
        self.dead_letter(row, txn).await
    }

    /// A non-transactional logical message `[outbox] non_transactional_messages` refuses:
    /// logged with its LSN and prefix, counted, and dead-lettered when `[dead_letter]` is
    /// configured. Refused loudly, it does not stop the relay; `hint` says what to do.
    pub async fn refuse(&mut self, message: Failed, txn: &Txn, hint: &str) -> Result<()> {
        self.metrics.messages_refused.fetch_add(1, Relaxed);
        let id = message.event_id_or_none().to_owned();
        match &self.dead_letter {
            Some(dl) => {
                tracing::warn!(lsn = %message.lsn, source = %message.source, event_id = %id,
                    topic = %dl.topic, reason = %message.reason,
                    "non-transactional logical message refused; sent to the dead-letter topic");
                self.dead_letter(message, txn).await
            }
            None => {
                tracing::error!(lsn = %message.lsn, source = %message.source, event_id = %id,
                    reason = %message.reason, hint,
                    "non-transactional logical message refused and not relayed");
                Ok(())
            }
        }
    }

    /// Publishes `row`'s dead letter in its place.
    async fn dead_letter(&mut self, row: Failed, txn: &Txn) -> Result<()> {
        let dl = self.dead_letter.as_ref().expect("checked by the caller");
        self.metrics.note_dead_letter(row.seen());
        let (source, lsn) = (row.source.clone(), row.lsn);
        let letter = dead_letter::record(dl, row);
        self.publish_record(letter, &source, lsn, txn).await
    }

    /// Hands a record to librdkafka under `seq`; its delivery report settles that number. A
    /// record for a partition whose first write is in flight waits in `held` (`offsets.rs`).
    async fn send(&mut self, seq: Seq, record: Record) -> Result<()> {
        let partitions = self.side.meet(&record.topic).await;
        let partition = self.ordered_partition(&record, partitions);
        if let Some(p) = partition {
            if self.must_hold(&record.topic, p) {
                self.held.entry((record.topic.clone(), p)).or_default().push_back((seq, record));
                self.held_records += 1;
                return Ok(());
            }
        }
        self.hand_over(seq, record, partition).await
    }

    /// The partition a record goes to when its order counts and delivery holds it to that
    /// order: a placed or keyed record, at-least-once. Exactly-once needs no hold: a lost first
    /// batch fails its Kafka transaction, which is aborted, so no read-committed consumer sees
    /// the records after it.
    fn ordered_partition(&self, record: &Record, partitions: Option<i32>) -> Option<i32> {
        if self.exactly_once.is_some() {
            return None;
        }
        record
            .partition
            .or_else(|| Some(partitioner::key_partition(record.key.as_deref()?, partitions?)))
    }

    /// Whether a record for `topic`'s `partition` must wait: records wait there already, or
    /// the partition's first write is in flight (not yet reported, not refused).
    fn must_hold(&self, topic: &Arc<str>, partition: i32) -> bool {
        (!self.held.is_empty() && self.held.contains_key(&(topic.clone(), partition)))
            || self.first_write_in_flight(topic, partition)
    }

    /// Hands `record` to librdkafka now, waiting only while librdkafka's queue is full.
    async fn hand_over(
        &mut self,
        seq: Seq,
        mut record: Record,
        mut partition: Option<i32>,
    ) -> Result<()> {
        // A sink beyond Kafka takes the record itself: it never refuses one before sending, and
        // its dispatch has no queue to fill.
        if let Side::Broker(dispatch) = &self.side {
            dispatch.send(seq, Arc::new(record));
            return Ok(());
        }
        loop {
            match self.side.send(&record, seq) {
                Ok(()) => {
                    if let Some(p) = partition {
                        self.offsets.sent(&record.topic, p, seq);
                    }
                    return Ok(());
                }
                // librdkafka's own queue is full: wait for a delivery report, then retry.
                Err(SendError::QueueFull) => self.next_reports().await?,
                // Refused before it left the process (too large, unknown partition): replaced by
                // its dead letter under the same number, or the relay stops here. A refusal for
                // the transaction's state or an ACL is never the record's fault.
                Err(SendError::Rejected(e)) => {
                    if seq == PROGRESS_SEQ || fault::classify(&e) != Fault::Record {
                        let id = Some(record.event_id.as_str()).filter(|id| !id.is_empty());
                        return Err(self.not_the_records_fault(seq, &record.topic, id, e));
                    }
                    self.on_rejected(seq, e, Refused::of(&record))?;
                    match self.pending_dead.pop() {
                        Some((_, letter)) => {
                            self.side.meet(&letter.topic).await;
                            (record, partition) = (letter, None);
                        }
                        None => return Ok(()),
                    }
                }
            }
        }
    }

    /// Sends what waits: the dead letters of records refused in delivery reports, and the held
    /// records of partitions whose first write is reported (or refused). The loop calls it after
    /// every step; a graceful stop and a Kafka transaction's commit call it too.
    pub async fn send_waiting(&mut self) -> Result<()> {
        self.send_dead_letters().await?;
        if self.held.is_empty() {
            return Ok(());
        }
        let partitions: Vec<Partition> = self.held.keys().cloned().collect();
        for key in partitions {
            while !self.first_write_in_flight(&key.0, key.1) {
                let Some(queue) = self.held.get_mut(&key) else { break };
                let Some((seq, record)) = queue.pop_front() else { break };
                self.held_records -= 1;
                if queue.is_empty() {
                    self.held.remove(&key);
                }
                self.hand_over(seq, record, Some(key.1)).await?;
            }
        }
        Ok(())
    }

    fn first_write_in_flight(&self, topic: &Arc<str>, partition: i32) -> bool {
        self.offsets.first_write(topic, partition).is_some_and(|first| {
            self.frontier.sent_of(first).is_some_and(|sent| sent.topic == *topic)
                && !self.pending_dead.iter().any(|(seq, _)| *seq == first)
        })
    }

    /// Sends the dead letters of records refused in delivery reports.
    async fn send_dead_letters(&mut self) -> Result<()> {
        while let Some((seq, letter)) = self.pending_dead.pop() {
            self.send(seq, letter).await?;
        }
        Ok(())
    }

    /// Counts acknowledged records into the metrics; returns what may be confirmed (every
    /// record before it acknowledged, I2) with the commit times around it.
    pub fn progress(&mut self) -> Acked {
        self.count_acked();
        let mut acked = Acked {
            acked: self.frontier.acked(),
            ceiling: None,
            oldest_unconfirmed_commit: self.frontier.oldest_unacked_commit(),
            last_confirmed_commit: self.frontier.last_acked_commit(),
        };
        if let Some(t) = &self.exactly_once {
            t.policy.cap(&mut acked);
        }
        acked
    }

    /// Counts the records acknowledged since the last call, and what is in flight.
    fn count_acked(&mut self) {
        if !self.acked.is_empty() {
            // Kafka acknowledges again: a failed delivery no longer holds /readyz.
            self.metrics.delivery_failing.store(false, Relaxed);
            self.metrics.under_replicated_partitions.store(0, Relaxed);
            let now = unix_micros();
            let (dead_letters, per_table) = (self.dead_letter.as_ref(), self.table_metrics);
            self.metrics.count_published(self.acked.iter().map(|sent| {
                // A dead letter is no event of its table relayed.
                let relayed = per_table && dead_letters.is_none_or(|dl| *dl.topic != *sent.topic);
                (&sent.topic, relayed.then_some(&sent.table), sent.commit_micros)
            }));
            for sent in self.acked.drain(..) {
                self.metrics.observe_commit_to_ack((now - sent.commit_micros).max(0) as f64 / 1e6);
            }
        }
        let m = &self.metrics;
        m.inflight_records.store(self.frontier.inflight_records() as u64, Relaxed);
        m.inflight_bytes.store(self.frontier.inflight_bytes() as u64, Relaxed);
        m.oldest_unacked_sent_micros
            .store(self.frontier.oldest_unacked_sent().unwrap_or(0), Relaxed);
    }

    /// Waits (until `deadline`) for outstanding acknowledgements, for a graceful stop.
    /// Exactly-once: ends the open Kafka transaction instead (`exactly_once::session`).
    pub async fn drain(&mut self, deadline: tokio::time::Instant) {
        if self.exactly_once.is_some() {
            return self.end_kafka_transaction(deadline).await;
        }
        match tokio::time::timeout_at(deadline, self.settle()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e.chain(), "delivery failed during shutdown; those records will be replayed")
            }
            Err(_) => {
                tracing::warn!(
                    unacked = self.frontier.unacked(),
                    "shutdown grace period over; unacknowledged records will be replayed"
                )
            }
        }
    }

    /// Waits until every record is acknowledged or refused for good. A record refused now goes
    /// to the dead-letter topic in its place, as it does while streaming: until that letter is
    /// acknowledged the frontier stays before the row, so a stop cut short replays it.
    async fn settle(&mut self) -> Result<()> {
        loop {
            self.send_waiting().await?;
            if self.frontier.unacked() <= self.refused {
                return Ok(());
            }
            self.next_reports().await?;
        }
    }
}

pub(crate) mod dead_letter;
pub(crate) mod exactly_once;
mod failed;
pub(crate) mod fault;
pub(crate) mod frontier;
mod offsets;
pub(crate) mod partition_read;
pub(crate) mod partitioner;
pub(crate) mod producer;
mod reports;
pub(crate) mod side;
#[cfg(test)]
mod tests;
