//! Exactly-once into Kafka (`[delivery] guarantee = "exactly-once"`).
//!
//! Records go out in Kafka transactions. Each holds whole PostgreSQL transactions, in commit
//! order, and one more record: in the compacted progress topic, under the `transactional.id`,
//! the commit LSN of the last PostgreSQL transaction inside it. So a Kafka transaction either
//! commits its events *and* the position after them, or neither.
//!
//! On start (once the slot is ours, so a stand-by never fences the active relay):
//! `init_transactions` fences any earlier producer of the same id and aborts what it left open;
//! the progress topic is read to its end with `read_committed`; the stream then starts from the
//! slot, and every PostgreSQL transaction whose commit LSN is at or below the stored one is
//! skipped — its events are in Kafka already. The slot is confirmed only past what a committed
//! Kafka transaction holds (a delivery report alone is not enough: the transaction may still
//! abort), so the slot never runs ahead of the progress topic, and the progress topic never
//! ahead of the events.
//!
//! This file holds the policy (when to begin, skip and commit); `progress_topic.rs` reads and
//! creates the progress topic, `session.rs` drives the session's Kafka transactions with the
//! policy, and `delivery/producer/transactions.rs` makes librdkafka's transactional calls.
//! Only a Kafka delivery with `guarantee = "exactly-once"` holds any of it.

pub(crate) mod progress_topic;
mod session;

use std::time::{Duration, Instant};

use bytes::Bytes;

pub use self::progress_topic::read_progress;
pub(crate) use self::session::{KafkaTransactions, ProgressReport};
use crate::config::DeliveryConfig;
use crate::delivery::Acked;
use crate::error::{Error, Result};
use crate::lsn::Lsn;
use crate::router::Record;
use crate::txn::Txn;

/// The session's Kafka transactions, and the one place that says what they allow to be
/// confirmed. Exactly-once only: at-least-once, and every sink beyond Kafka, has none
/// (`Delivery` then holds no `KafkaTransactions` at all, so none of this runs).
pub struct Transactions {
    config: DeliveryConfig,
    /// Where the session resumed: all that may be confirmed until the progress topic is read.
    resumed: Lsn,
    /// The progress topic was read and the transactions initialised (`Delivery::start`).
    started: bool,
    /// Commit LSN of the last PostgreSQL transaction that a committed Kafka transaction holds:
    /// from the progress topic at start, then from each commit.
    committed: Option<Lsn>,
    open: Option<Open>,
    /// A Kafka transaction of this session that was aborted, failed or left to the next
    /// `init_transactions`: where it began, and the oldest commit time in it. Nothing past where
    /// it began is ever confirmed by this session, whatever was acknowledged inside it.
    abandoned: Option<(Lsn, i64)>,
    /// The PostgreSQL transaction being read is in Kafka already: its records are dropped.
    skipping: bool,
    /// Commit LSN and time of the PostgreSQL transaction (or lone message) being read.
    current: Lsn,
    current_commit: i64,
    /// Inside a PostgreSQL transaction: a Kafka transaction may not commit now.
    in_pg_transaction: bool,
    /// Commit time of the last PostgreSQL transaction in a committed Kafka transaction.
    last_committed_commit: Option<i64>,
}

/// What a graceful stop does with the open Kafka transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtStop {
    /// None is open: wait for the acknowledgements.
    Settle,
    /// It holds whole PostgreSQL transactions only: commit it.
    Commit,
    /// It cuts a PostgreSQL transaction: abort it; the next start resumes before it.
    Abort,
}

/// The open Kafka transaction.
struct Open {
    since: Instant,
    records: usize,
    /// Commit LSN and time of the last whole PostgreSQL transaction in it.
    last: Option<(Lsn, i64)>,
    /// Commit time of the first PostgreSQL transaction in it (for the lag).
    first_commit: i64,
    /// The acknowledged position when it began: nothing past it may be confirmed until it
    /// commits.
    cap: Lsn,
    /// PostgreSQL said it has sent everything (a keepalive) since it began: the backlog it
    /// grew in is drained, and `transaction_max_ms` bounds it again.
    caught_up: bool,
}

impl Transactions {
    /// Exactly-once's transactions (`config` asks for them), in a session that resumed at
    /// `resumed`.
    pub fn new(config: &DeliveryConfig, resumed: Lsn) -> Transactions {
        Transactions {
            config: config.clone(),
            resumed,
            started: false,
            committed: None,
            open: None,
            abandoned: None,
            skipping: false,
            current: Lsn::ZERO,
            current_commit: 0,
            in_pg_transaction: false,
            last_committed_commit: None,
        }
    }

    pub fn config(&self) -> &DeliveryConfig {
        &self.config
    }

    /// Before `Delivery::start` finished: no record may be sent yet.
    pub fn needs_start(&self) -> bool {
        !self.started
    }

    /// The transactions are initialised and the progress topic says what Kafka holds.
    pub fn started(&mut self, committed: Option<Lsn>) {
        self.started = true;
        self.committed = committed;
        // A Begin read while the start was under way is judged now: none of its records has
        // been sent yet (`may_read`).
        if self.in_pg_transaction {
            self.skipping = committed.is_some_and(|c| self.current <= c);
        }
    }

    /// Whether the relay may read more from the WAL: before the start, up to the first Begin
    /// only (so the lag shows the oldest waiting transaction while Kafka is away), never a row.
    pub fn may_read(&self) -> bool {
        self.started || !self.in_pg_transaction
    }

    /// PostgreSQL transaction `txn` starts. Returns whether it is in Kafka already (its
    /// records are to be dropped).
    pub fn begin(&mut self, txn: &Txn) -> bool {
        self.in_pg_transaction = true;
        self.enter(txn)
    }

    /// A non-transactional logical message, `txn` its own, is relayed on its own.
    pub fn alone(&mut self, txn: &Txn) -> bool {
        self.enter(txn)
    }

    pub fn skipping(&self) -> bool {
        self.skipping
    }

    /// Whether a record of the current transaction needs a Kafka transaction begun first;
    /// `acked` is the acknowledged position, where a new one would begin.
    pub fn before_record(&mut self, acked: Lsn) -> Result<bool> {
        if let Some(open) = &mut self.open {
            open.records += 1;
            self.overrun()?;
            return Ok(false);
        }
        self.open = Some(Open {
            since: Instant::now(),
            records: 1,
            last: None,
            first_commit: self.current_commit,
            cap: acked,
            caught_up: false,
        });
        Ok(true)
    }

    /// The current PostgreSQL transaction (or lone message) has been read whole.
    pub fn end(&mut self) {
        self.in_pg_transaction = false;
        if !std::mem::take(&mut self.skipping) {
            if let Some(open) = &mut self.open {
                open.last = Some((self.current, self.current_commit));
            }
        }
    }

    /// PostgreSQL has sent all it has (its walsender sends a keepalive when it waits for WAL,
    /// never while it streams a backlog): the open Kafka transaction need not wait out
    /// [`backlog_max`] for more. Only the bound changes: committing on every keepalive would
    /// commit after every PostgreSQL transaction of steady traffic, which is read in bursts
    /// with a keepalive between them.
    pub fn caught_up(&mut self) {
        if let Some(open) = self.open.as_mut() {
            open.caught_up = true;
        }
    }

    /// Whether the open Kafka transaction should commit now: it holds whole PostgreSQL
    /// transactions only, and is full or old enough.
    /// While the relay drains a backlog (the last PostgreSQL transaction read committed longer
    /// ago than [`backlog_max`]) it grows up to [`backlog_max`] first: each commit empties the
    /// pipeline, and at drain speed that cost half the throughput with 100 ms transactions.
    /// Caught up, `transaction_max_ms` bounds commit→visible latency.
    pub fn due(&self) -> bool {
        match &self.open {
            Some(open) if !self.in_pg_transaction && open.last.is_some() => {
                open.records >= self.config.transaction_max_records
                    || open.since.elapsed() >= self.max_age()
            }
            _ => false,
        }
    }

    /// When the loop must look at the open Kafka transaction again: when it becomes due by
    /// age, or — inside a PostgreSQL transaction — when that transaction would keep it open
    /// past what the broker allows ([`Transactions::overrun`]), however slowly its rows come.
    pub fn deadline(&self) -> Option<tokio::time::Instant> {
        let open = self.open.as_ref()?;
        let after = match (self.in_pg_transaction, open.last) {
            (true, _) => overrun_limit(&self.config),
            (false, Some(_)) => self.max_age(),
            (false, None) => return None,
        };
        Some(tokio::time::Instant::from_std(open.since + after))
    }

    /// What a graceful stop does with the open Kafka transaction.
    pub fn at_stop(&self) -> AtStop {
        match &self.open {
            None => AtStop::Settle,
            Some(open) if !self.in_pg_transaction && open.last.is_some() => AtStop::Commit,
            Some(_) => AtStop::Abort,
        }
    }

    /// The progress record for the open transaction: the commit LSN of its last PostgreSQL
    /// transaction, keyed by the transactional id.
    pub fn progress_record(&self) -> Option<(Record, Lsn)> {
        let (lsn, _) = self.open.as_ref()?.last?;
        let id = &self.config.transactional_id;
        let record = Record {
            topic: self.config.progress_topic.as_str().into(),
            key: Some(Bytes::copy_from_slice(id.as_bytes())),
            value: Some(Bytes::from(lsn.to_string())),
            headers: Vec::new(),
            // One partition: the position is read from it.
            partition: Some(0),
            timestamp_ms: None,
            event_id: String::new(),
            trace: None,
            value_schema: None,
            key_schema: None,
        };
        Some((record, lsn))
    }

    /// The open transaction committed; its records and position are visible.
    pub fn committed(&mut self, lsn: Lsn) {
        if let Some(open) = self.open.take() {
            self.last_committed_commit = open.last.map(|(_, at)| at).or(self.last_committed_commit);
        }
        self.committed = Some(lsn);
    }

    /// The open transaction was aborted, failed to commit, or is left to the next
    /// `init_transactions`: what it held is not in Kafka, so the ceiling stays where it began
    /// for the rest of the session. It can only come down, never go up.
    pub fn abandon(&mut self) {
        if let Some(open) = self.open.take() {
            let (cap, oldest) = match self.abandoned {
                Some((cap, oldest)) => (cap.min(open.cap), oldest.min(open.first_commit)),
                None => (open.cap, open.first_commit),
            };
            self.abandoned = Some((cap, oldest));
        }
    }

    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// Caps what the acknowledgements allow to be confirmed by what Kafka transactions
    /// committed ([`Transactions::ceiling`]); with no cap, `acked` stands as it is.
    pub fn cap(&self, acked: &mut Acked) {
        let Some(ceiling) = self.ceiling() else { return };
        acked.ceiling = Some(ceiling);
        acked.oldest_unconfirmed_commit =
            [acked.oldest_unconfirmed_commit, self.oldest_uncommitted()]
                .into_iter()
                .flatten()
                .min();
        acked.last_confirmed_commit = self.last_committed_commit;
    }

    /// The most that may be confirmed, by what Kafka transactions committed: nothing past the
    /// start of the open or an abandoned one, nothing past where the session resumed until the
    /// progress topic is read; `None`: no cap (every acknowledged record is in a committed
    /// transaction).
    fn ceiling(&self) -> Option<Lsn> {
        if !self.started {
            return Some(self.resumed);
        }
        let open = self.open.as_ref().map(|o| o.cap);
        open.into_iter().chain(self.abandoned.map(|(cap, _)| cap)).min()
    }

    /// Commit time of the oldest PostgreSQL transaction acknowledged but not in a committed
    /// Kafka transaction (it is late too, for the lag).
    fn oldest_uncommitted(&self) -> Option<i64> {
        let open = self.open.as_ref().map(|o| o.first_commit);
        open.into_iter().chain(self.abandoned.map(|(_, at)| at)).min()
    }

    /// How long the open Kafka transaction may stay open: [`backlog_max`] while the last
    /// PostgreSQL transaction read committed longer ago than that (a backlog: steady traffic
    /// is read within milliseconds of its commit) and PostgreSQL has not said it sent all it
    /// has, else `transaction_max_ms`.
    fn max_age(&self) -> Duration {
        let behind = crate::clock::unix_micros() - self.current_commit;
        let caught_up = self.open.as_ref().is_some_and(|open| open.caught_up);
        if !caught_up && behind > backlog_max(&self.config).as_micros() as i64 {
            backlog_max(&self.config)
        } else {
            self.config.transaction_max
        }
    }

    fn enter(&mut self, txn: &Txn) -> bool {
        self.current = txn.commit_lsn;
        self.current_commit = txn.commit_micros;
        self.skipping = self.committed.is_some_and(|c| txn.commit_lsn <= c);
        self.skipping
    }

    /// Refuses a PostgreSQL transaction that has kept the Kafka transaction open for most of
    /// `transaction.timeout.ms`: the broker would abort it, and splitting it would break the
    /// guarantee.
    pub fn overrun(&self) -> Result<()> {
        let Some(open) = self.open.as_ref().filter(|_| self.in_pg_transaction) else {
            return Ok(());
        };
        let open_for = open.since.elapsed();
        if open_for <= overrun_limit(&self.config) {
            return Ok(());
        }
        Err(Error::definite(
            format!(
                "the PostgreSQL transaction that commits at LSN {} has kept a Kafka transaction open for {open_for:.1?}, more than 80 % of transaction.timeout.ms ({} ms): the broker would abort it, and splitting it would break exactly-once",
                self.current,
                self.config.transaction_timeout.as_millis()
            ),
            "raise [kafka] \"transaction.timeout.ms\" (and the broker's transaction.max.timeout.ms, 15 minutes by default) above the time this transaction takes to publish, or split the transaction in the application; nothing after its start was confirmed",
        ))
    }
}

/// How long one PostgreSQL transaction may keep a Kafka transaction open: 80 % of
/// `transaction.timeout.ms`, leaving the commit time to finish in.
fn overrun_limit(config: &DeliveryConfig) -> Duration {
    config.transaction_timeout.mul_f64(0.8)
}

/// How long a Kafka transaction may grow while a backlog is drained: ten times
/// `transaction_max_ms`, and never more than a quarter of `transaction.timeout.ms`.
fn backlog_max(config: &DeliveryConfig) -> Duration {
    (config.transaction_max * 10).min(config.transaction_timeout / 4).max(config.transaction_max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(max_ms: u64, max_records: usize) -> DeliveryConfig {
        DeliveryConfig {
            sink: crate::sink::SinkConfig::Kafka,
            guarantee: crate::config::Guarantee::ExactlyOnce,
            transactional_id: "walrelay-t".into(),
            progress_topic: "walrelay.progress.t".into(),
            progress_topic_defaulted: true,
            transaction_max: Duration::from_millis(max_ms),
            transaction_max_records: max_records,
            transaction_timeout: Duration::from_secs(60),
        }
    }

    /// Started, with `committed` read from the progress topic, resumed at LSN 1.
    fn txns(max_ms: u64, max_records: usize, committed: Option<Lsn>) -> Transactions {
        let mut t = Transactions::new(&config(max_ms, max_records), lsn(1));
        t.started(committed);
        t
    }

    fn lsn(n: u64) -> Lsn {
        Lsn::from(n)
    }

    fn txn(commit: u64) -> Txn {
        Txn { commit_lsn: lsn(commit), commit_micros: commit as i64 * 1_000, ..Txn::default() }
    }

    #[test]
    fn transactions_at_or_below_the_stored_commit_lsn_are_skipped_and_later_ones_are_not() {
        let mut t = txns(100, 10, Some(lsn(200)));
        assert!(t.begin(&txn(100)), "before the stored position");
        t.end();
        assert!(t.begin(&txn(200)), "the stored transaction itself");
        t.end();
        assert!(!t.begin(&txn(201)), "after it");
        assert!(!t.skipping());
        t.end();
        let mut fresh = txns(100, 10, None);
        assert!(!fresh.begin(&txn(1)), "nothing stored: nothing skipped");
    }

    #[test]
    fn before_the_start_only_a_begin_is_read_and_it_is_judged_once_the_position_is_known() {
        let mut t = Transactions::new(&config(100, 10), lsn(7));
        assert!(t.needs_start() && t.may_read());
        assert_eq!(t.ceiling(), Some(lsn(7)), "nothing past the resume point before the start");
        assert!(!t.begin(&txn(50)), "not known yet");
        assert!(!t.may_read(), "no row is read before the start");
        t.started(Some(lsn(60)));
        assert!(t.skipping(), "in Kafka already, as the progress topic says");
        assert!(t.may_read() && t.ceiling().is_none());
    }

    #[test]
    fn a_kafka_transaction_commits_only_between_postgresql_transactions_once_full() {
        let mut t = txns(60_000, 3, None);
        t.begin(&txn(10));
        assert!(t.before_record(lsn(5)).unwrap(), "the first record begins a Kafka transaction");
        assert!(!t.before_record(lsn(5)).unwrap());
        assert!(!t.before_record(lsn(5)).unwrap());
        assert!(!t.due(), "full, but inside a PostgreSQL transaction");
        assert_eq!(t.at_stop(), AtStop::Abort);
        t.end();
        assert!(t.due(), "full at a commit");
        assert_eq!(t.at_stop(), AtStop::Commit);
        let (record, at) = t.progress_record().unwrap();
        assert_eq!(at, lsn(10));
        assert_eq!(record.value.as_deref(), Some(lsn(10).to_string().as_bytes()));
        assert_eq!(record.key.as_deref(), Some(&b"walrelay-t"[..]));
        assert_eq!(record.partition, Some(0));
        t.committed(at);
        assert!(!t.is_open() && !t.due());
        assert_eq!(t.last_committed_commit, Some(10_000));
        assert!(t.begin(&txn(10)), "what was committed is skipped from now on");
    }

    #[test]
    fn a_backlog_grows_the_transaction_past_transaction_max_and_being_caught_up_does_not() {
        let now = crate::clock::unix_micros();
        let mut caught_up = txns(10, 1_000_000, None);
        caught_up.begin(&Txn { commit_lsn: lsn(10), commit_micros: now, ..Txn::default() });
        caught_up.before_record(lsn(5)).unwrap();
        caught_up.end();
        let mut behind = txns(10, 1_000_000, None);
        // Committed a second ago: the relay is draining a backlog.
        behind.begin(&Txn {
            commit_lsn: lsn(10),
            commit_micros: now - 1_000_000,
            ..Txn::default()
        });
        behind.before_record(lsn(5)).unwrap();
        behind.end();
        std::thread::sleep(Duration::from_millis(15));
        assert!(caught_up.due(), "caught up: due at transaction_max_ms");
        assert!(!behind.due(), "a backlog: not yet (ten times as long)");
        std::thread::sleep(Duration::from_millis(100));
        assert!(behind.due(), "and then it is");
    }

    #[test]
    fn a_keepalive_bounds_the_backlog_transaction_by_transaction_max_again_but_never_ends_it_inside_a_postgresql_transaction(
    ) {
        let behind = crate::clock::unix_micros() - 60_000_000;
        let mut t = txns(100, 1_000_000, None);
        t.begin(&Txn { commit_lsn: lsn(10), commit_micros: behind, ..Txn::default() });
        t.before_record(lsn(5)).unwrap();
        t.end();
        let in_a_second = tokio::time::Instant::now() + Duration::from_millis(900);
        assert!(!t.due() && t.deadline().unwrap() > in_a_second, "a backlog: it grows");
        t.begin(&Txn { commit_lsn: lsn(20), commit_micros: behind, ..Txn::default() });
        t.before_record(lsn(5)).unwrap();
        t.caught_up();
        let overrun = tokio::time::Instant::now() + Duration::from_secs(10);
        assert!(t.deadline().unwrap() > overrun, "inside a PostgreSQL transaction it waits");
        t.end();
        let soon = tokio::time::Instant::now() + Duration::from_millis(100);
        assert!(t.deadline().unwrap() <= soon, "caught up: transaction_max_ms bounds it again");
        let give_up = std::time::Instant::now() + Duration::from_secs(5);
        while !t.due() {
            assert!(std::time::Instant::now() < give_up, "due after transaction_max_ms");
            std::thread::sleep(Duration::from_millis(5));
        }
        t.committed(lsn(20));
        t.caught_up();
        t.begin(&Txn { commit_lsn: lsn(30), commit_micros: behind, ..Txn::default() });
        t.before_record(lsn(20)).unwrap();
        t.end();
        assert!(
            t.deadline().unwrap() > in_a_second,
            "a keepalive before a Kafka transaction began says nothing of it"
        );
    }

    #[test]
    fn nothing_past_the_start_of_the_open_kafka_transaction_is_confirmable() {
        let mut t = txns(100, 10, None);
        assert_eq!(t.ceiling(), None, "no open transaction: no cap");
        t.begin(&txn(60));
        t.before_record(lsn(50)).unwrap();
        t.end();
        assert_eq!(t.ceiling(), Some(lsn(50)), "acknowledged, but not committed");
        assert_eq!(t.oldest_uncommitted(), Some(60_000));
        t.committed(lsn(60));
        assert_eq!((t.ceiling(), t.oldest_uncommitted()), (None, None));
    }

    #[test]
    fn an_abandoned_kafka_transaction_holds_the_ceiling_where_it_began_for_good() {
        let mut t = txns(100, 10, None);
        t.begin(&txn(60));
        t.before_record(lsn(50)).unwrap();
        t.end();
        t.begin(&txn(70));
        t.before_record(lsn(50)).unwrap();
        assert_eq!(t.at_stop(), AtStop::Abort, "it cuts the transaction at 70");
        t.abandon();
        assert!(!t.is_open());
        assert_eq!(t.ceiling(), Some(lsn(50)), "forgetting it must not lift the ceiling");
        assert_eq!(t.oldest_uncommitted(), Some(60_000), "its events are still late");
        t.end();
        t.begin(&txn(80));
        t.before_record(lsn(75)).unwrap();
        t.end();
        t.committed(lsn(80));
        assert_eq!(t.ceiling(), Some(lsn(50)), "a later commit does not lift it either");
    }

    #[test]
    fn a_skipped_transaction_adds_no_position_to_the_open_one() {
        let mut t = txns(100, 10, Some(lsn(30)));
        t.begin(&txn(20));
        t.end();
        assert!(t.progress_record().is_none() && t.at_stop() == AtStop::Settle);
    }

    #[test]
    fn a_postgresql_transaction_that_outlives_most_of_the_transaction_timeout_is_refused_even_between_rows(
    ) {
        let mut t = txns(10, 1_000_000, None);
        t.config.transaction_timeout = Duration::from_millis(20);
        t.begin(&txn(10));
        t.before_record(lsn(5)).unwrap();
        let deadline = t.deadline().expect("a deadline while inside the PostgreSQL transaction");
        assert!(deadline <= tokio::time::Instant::now() + Duration::from_millis(16));
        std::thread::sleep(Duration::from_millis(30));
        // No row came: the loop's deadline asks, and the answer is the same as for a row.
        let e = t.overrun().unwrap_err();
        assert!(e.to_string().contains("transaction.timeout.ms"), "{e}");
        assert!(e.hint().unwrap().contains("transaction.max.timeout.ms"), "{e:?}");
        assert!(t.before_record(lsn(5)).is_err());
    }
}
