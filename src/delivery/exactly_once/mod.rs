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

mod progress_topic;
mod session;

use std::time::Instant;

use bytes::Bytes;

pub use self::progress_topic::read_progress;
pub(super) use self::session::PROGRESS_SEQ;
use crate::config::DeliveryConfig;
use crate::error::{Error, Result};
use crate::lsn::Lsn;
use crate::router::Record;

/// The transactional state of one session.
pub struct Transactions {
    config: DeliveryConfig,
    /// Commit LSN of the last PostgreSQL transaction that a committed Kafka transaction holds:
    /// from the progress topic at start, then from each commit.
    committed: Option<Lsn>,
    open: Option<Open>,
    /// The PostgreSQL transaction being read is in Kafka already: its records are dropped.
    skipping: bool,
    /// Commit LSN of the PostgreSQL transaction (or non-transactional message) being read.
    current: Lsn,
    /// Inside a PostgreSQL transaction: a Kafka transaction may not commit now.
    in_pg_transaction: bool,
}

/// The open Kafka transaction.
struct Open {
    since: Instant,
    records: usize,
    /// Commit LSN of the last whole PostgreSQL transaction in it.
    last: Option<Lsn>,
    /// The confirmable position when it began: nothing past it may be confirmed until it
    /// commits.
    cap: Lsn,
}

impl Transactions {
    pub fn new(config: DeliveryConfig) -> Transactions {
        Transactions {
            config,
            committed: None,
            open: None,
            skipping: false,
            current: Lsn::ZERO,
            in_pg_transaction: false,
        }
    }

    pub fn transactional_id(&self) -> &str {
        &self.config.transactional_id
    }

    pub fn progress_topic(&self) -> &str {
        &self.config.progress_topic
    }

    /// Sets what the progress topic holds, read at start.
    pub fn resume_after(&mut self, committed: Option<Lsn>) {
        self.committed = committed;
    }

    /// A PostgreSQL transaction that commits at `commit_lsn` starts. Returns whether it is in
    /// Kafka already (its records are to be dropped).
    pub fn begin(&mut self, commit_lsn: Lsn) -> bool {
        self.current = commit_lsn;
        self.in_pg_transaction = true;
        self.skipping = self.committed.is_some_and(|c| commit_lsn <= c);
        self.skipping
    }

    /// A non-transactional logical message at `lsn` is relayed on its own.
    pub fn alone(&mut self, lsn: Lsn) -> bool {
        self.current = lsn;
        self.skipping = self.committed.is_some_and(|c| lsn <= c);
        self.skipping
    }

    pub fn skipping(&self) -> bool {
        self.skipping
    }

    /// Whether a record of the current transaction needs a Kafka transaction begun first.
    /// Also refuses a PostgreSQL transaction that has kept one open for most of
    /// `transaction.timeout.ms`: the broker would abort it, and splitting it would break the
    /// guarantee.
    pub fn before_record(&mut self, confirmable: Lsn) -> Result<bool> {
        if let Some(open) = &mut self.open {
            open.records += 1;
            let limit = self.config.transaction_timeout.mul_f64(0.8);
            if open.since.elapsed() > limit {
                return Err(Error::definite(
                    format!(
                        "the PostgreSQL transaction that commits at LSN {} has kept a Kafka transaction open for {:.1?}, more than 80 % of transaction.timeout.ms ({} ms): the broker would abort it, and splitting it would break exactly-once",
                        self.current,
                        open.since.elapsed(),
                        self.config.transaction_timeout.as_millis()
                    ),
                    "raise [kafka] \"transaction.timeout.ms\" (and the broker's transaction.max.timeout.ms, 15 minutes by default) above the time this transaction takes to publish, or split the transaction in the application; nothing after its start was confirmed",
                ));
            }
            return Ok(false);
        }
        self.open = Some(Open { since: Instant::now(), records: 1, last: None, cap: confirmable });
        Ok(true)
    }

    /// The current PostgreSQL transaction (or lone message) has been read whole.
    pub fn end(&mut self) {
        self.in_pg_transaction = false;
        if !std::mem::take(&mut self.skipping) {
            if let Some(open) = &mut self.open {
                open.last = Some(self.current);
            }
        }
    }

    /// Whether the open Kafka transaction should commit now: it holds whole PostgreSQL
    /// transactions only, and is full or old enough.
    pub fn due(&self) -> bool {
        match &self.open {
            Some(open) if !self.in_pg_transaction && open.last.is_some() => {
                open.records >= self.config.transaction_max_records
                    || open.since.elapsed() >= self.config.transaction_max
            }
            _ => false,
        }
    }

    /// When the open Kafka transaction becomes due by age, if it may commit then.
    pub fn deadline(&self) -> Option<tokio::time::Instant> {
        match &self.open {
            Some(open) if !self.in_pg_transaction && open.last.is_some() => {
                Some(tokio::time::Instant::from_std(open.since + self.config.transaction_max))
            }
            _ => None,
        }
    }

    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// The open transaction may commit (it holds whole PostgreSQL transactions only).
    pub fn committable(&self) -> bool {
        !self.in_pg_transaction && self.open.as_ref().is_some_and(|o| o.last.is_some())
    }

    /// The progress record for the open transaction: the commit LSN of its last PostgreSQL
    /// transaction, keyed by the transactional id.
    pub fn progress_record(&self) -> Option<(Record, Lsn)> {
        let lsn = self.open.as_ref()?.last?;
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
        };
        Some((record, lsn))
    }

    /// The open transaction committed; its records and position are visible.
    pub fn committed(&mut self, lsn: Lsn) {
        self.committed = Some(lsn);
        self.open = None;
    }

    /// The open transaction was aborted (or is left to the next `init_transactions`).
    pub fn forget(&mut self) {
        self.open = None;
    }

    /// What may be confirmed: nothing past where the open Kafka transaction began.
    pub fn cap(&self, confirmable: Lsn) -> Lsn {
        match &self.open {
            Some(open) => confirmable.min(open.cap),
            None => confirmable,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn txns(max_ms: u64, max_records: usize) -> Transactions {
        Transactions::new(DeliveryConfig {
            guarantee: crate::config::Guarantee::ExactlyOnce,
            transactional_id: "walrelay-t".into(),
            progress_topic: "walrelay.progress".into(),
            transaction_max: Duration::from_millis(max_ms),
            transaction_max_records: max_records,
            transaction_timeout: Duration::from_secs(60),
        })
    }

    fn lsn(n: u64) -> Lsn {
        Lsn::from(n)
    }

    #[test]
    fn transactions_at_or_below_the_stored_commit_lsn_are_skipped_and_later_ones_are_not() {
        let mut t = txns(100, 10);
        t.resume_after(Some(lsn(200)));
        assert!(t.begin(lsn(100)), "before the stored position");
        t.end();
        assert!(t.begin(lsn(200)), "the stored transaction itself");
        t.end();
        assert!(!t.begin(lsn(201)), "after it");
        assert!(!t.skipping());
        t.end();
        let mut fresh = txns(100, 10);
        assert!(!fresh.begin(lsn(1)), "nothing stored: nothing skipped");
    }

    #[test]
    fn a_kafka_transaction_commits_only_between_postgresql_transactions_once_full() {
        let mut t = txns(60_000, 3);
        t.begin(lsn(10));
        assert!(t.before_record(lsn(5)).unwrap(), "the first record begins a Kafka transaction");
        assert!(!t.before_record(lsn(5)).unwrap());
        assert!(!t.before_record(lsn(5)).unwrap());
        assert!(!t.due(), "full, but inside a PostgreSQL transaction");
        assert!(t.deadline().is_none());
        t.end();
        assert!(t.due(), "full at a commit");
        let (record, at) = t.progress_record().unwrap();
        assert_eq!(at, lsn(10));
        assert_eq!(record.value.as_deref(), Some(lsn(10).to_string().as_bytes()));
        assert_eq!(record.key.as_deref(), Some(&b"walrelay-t"[..]));
        assert_eq!(record.partition, Some(0));
        t.committed(at);
        assert!(!t.is_open() && !t.due());
        assert!(t.begin(lsn(10)), "what was committed is skipped from now on");
    }

    #[test]
    fn nothing_past_the_start_of_the_open_kafka_transaction_is_confirmable() {
        let mut t = txns(100, 10);
        assert_eq!(t.cap(lsn(50)), lsn(50), "no open transaction: no cap");
        t.begin(lsn(60));
        t.before_record(lsn(50)).unwrap();
        t.end();
        assert_eq!(t.cap(lsn(70)), lsn(50), "acknowledged, but not committed");
        t.committed(lsn(60));
        assert_eq!(t.cap(lsn(70)), lsn(70));
    }

    #[test]
    fn a_skipped_transaction_adds_no_position_to_the_open_one() {
        let mut t = txns(100, 10);
        t.resume_after(Some(lsn(30)));
        t.begin(lsn(20));
        t.end();
        assert!(t.progress_record().is_none() && !t.committable());
    }

    #[test]
    fn a_postgresql_transaction_that_outlives_most_of_the_transaction_timeout_is_refused() {
        let mut t = txns(10, 1_000_000);
        t.config.transaction_timeout = Duration::from_millis(20);
        t.begin(lsn(10));
        t.before_record(lsn(5)).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let e = t.before_record(lsn(5)).unwrap_err();
        assert!(e.to_string().contains("transaction.timeout.ms"), "{e}");
        assert!(e.hint().unwrap().contains("raise"), "{e:?}");
    }
}
