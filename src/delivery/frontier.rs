//! The ack frontier: up to which WAL position every record is acknowledged.
//!
//! Every record sent to Kafka takes the next sequence number. A transaction's Commit is a mark
//! "after sequence N, the WAL up to `end_lsn` is done". Acks arrive out of order across
//! partitions; the frontier only moves over the oldest run of acknowledged records, and a commit
//! mark becomes confirmable once every record before it is acknowledged. Records acknowledged
//! behind an unacknowledged one stay counted as in flight, because a restart would read them
//! again: that is the memory the limits bound.

use std::collections::VecDeque;

use crate::lsn::Lsn;

/// Sequence number of one record sent to Kafka.
pub type Seq = u64;

/// The delivery-report number of exactly-once's progress record: outside the frontier's
/// sequence (which never gets this far), since the commit of its Kafka transaction, not its
/// report, is what counts.
pub(crate) const PROGRESS_SEQ: Seq = Seq::MAX;

#[derive(Debug, Clone)]
struct Slot {
    /// WAL position of the row, to name it in errors and dead letters.
    lsn: Lsn,
    /// What the ack reports back, for metrics.
    sent: Sent,
    bytes: u32,
    acked: bool,
    /// When the record was handed to the producer, µs since the Unix epoch (for readiness).
    sent_micros: i64,
}

/// What the caller wants back when a record is acknowledged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sent {
    pub topic: std::sync::Arc<str>,
    /// `schema.table` of the row, for dead letters.
    pub table: std::sync::Arc<str>,
    /// The transaction's commit time, microseconds since the Unix epoch.
    pub commit_micros: i64,
    /// The relay's span for the record, finished when it is acknowledged (`[tracing]`).
    pub span: Option<Box<crate::trace::Pending>>,
}

#[derive(Debug, Default)]
pub struct Frontier {
    /// Sequence number of `slots[0]`.
    base: Seq,
    /// One per record not yet behind the frontier.
    slots: VecDeque<Slot>,
    /// Commit marks: (sequence number after the transaction's last record, its end_lsn, its
    /// commit time in µs since the Unix epoch).
    commits: VecDeque<(Seq, Lsn, i64)>,
    bytes: usize,
    /// Between Begin and Commit: the commit time (µs since the Unix epoch) of the transaction
    /// the stream is inside, which its commit mark will carry.
    open: Option<i64>,
    /// The commit time of the last transaction behind the frontier, once there is one.
    last_acked_commit: Option<i64>,
    /// The end of the acknowledged prefix: every record before it acknowledged (I2). At-least-once
    /// that is what may be confirmed; exactly-once, the Kafka transactions cap it too
    /// (`Transactions::ceiling`).
    acked: Lsn,
}

impl Frontier {
    /// A frontier that resumes at the slot's confirmed position.
    pub fn new(resumed: Lsn) -> Frontier {
        Frontier { acked: resumed, ..Frontier::default() }
    }

    /// Registers a record (of the row at `lsn`) handed to the producer; returns its sequence
    /// number.
    pub fn sent(&mut self, bytes: usize, lsn: Lsn, sent: Sent) -> Seq {
        let seq = self.base + self.slots.len() as Seq;
        // A record can't exceed u32 in Kafka anyway (message.max.bytes ≤ 1 GB).
        let bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
        let sent_micros = crate::clock::unix_micros();
        self.slots.push_back(Slot { lsn, sent, bytes, acked: false, sent_micros });
        self.bytes += bytes as usize;
        seq
    }

    /// A transaction that committed at `commit_micros` (µs since the Unix epoch) starts;
    /// keepalives are not confirmable until it commits.
    pub fn begin(&mut self, commit_micros: i64) {
        self.open = Some(commit_micros);
    }

    /// Marks the end of a transaction whose records were all `sent` before this call.
    pub fn commit(&mut self, end_lsn: Lsn) {
        let commit_micros = self.open.take().unwrap_or_default();
        let after = self.base + self.slots.len() as Seq;
        self.commits.push_back((after, end_lsn, commit_micros));
        self.advance();
    }

    /// Records a broker acknowledgement; returns what was registered with the record the first
    /// time it is acknowledged. Unknown or repeated sequence numbers are ignored.
    pub fn ack(&mut self, seq: Seq) -> Option<Sent> {
        let slot = self.slot_mut(seq).filter(|slot| !slot.acked)?;
        slot.acked = true;
        let sent = std::mem::take(&mut slot.sent);
        self.advance();
        Some(sent)
    }

    /// A primary keepalive's `wal_end` may be confirmed when nothing is in flight and no
    /// transaction is open (I3): everything before it on the socket has been handled.
    pub fn idle(&mut self, wal_end: Lsn) {
        if self.open.is_none() && self.slots.is_empty() && self.commits.is_empty() {
            self.acked = self.acked.max(wal_end);
        }
    }

    fn advance(&mut self) {
        while let Some(front) = self.slots.front() {
            if !front.acked {
                break;
            }
            self.bytes -= front.bytes as usize;
            self.slots.pop_front();
            self.base += 1;
        }
        while let Some(&(after, end_lsn, commit_micros)) = self.commits.front() {
            if after > self.base {
                break;
            }
            self.acked = self.acked.max(end_lsn);
            self.last_acked_commit = Some(commit_micros);
            self.commits.pop_front();
        }
    }

    /// The record under `seq` is replaced by its dead letter, bound for `topic`: its report,
    /// offset and count belong to that topic now.
    pub fn redirect(&mut self, seq: Seq, topic: std::sync::Arc<str>) {
        if let Some(slot) = self.slot_mut(seq) {
            slot.sent.topic = topic;
        }
    }

    /// The WAL position of the row behind an unconfirmed record.
    pub fn lsn_of(&self, seq: Seq) -> Option<Lsn> {
        self.slot(seq).map(|s| s.lsn)
    }

    /// What was registered with a record not yet acknowledged (the ack hands it back).
    pub fn sent_of(&self, seq: Seq) -> Option<&Sent> {
        self.slot(seq).filter(|s| !s.acked).map(|s| &s.sent)
    }

    fn slot(&self, seq: Seq) -> Option<&Slot> {
        self.slots.get(usize::try_from(seq.checked_sub(self.base)?).ok()?)
    }

    fn slot_mut(&mut self, seq: Seq) -> Option<&mut Slot> {
        self.slots.get_mut(usize::try_from(seq.checked_sub(self.base)?).ok()?)
    }

    /// The end of the acknowledged prefix.
    pub fn acked(&self) -> Lsn {
        self.acked
    }

    /// The commit time of the oldest transaction read and not behind the frontier yet (the
    /// open one when every earlier one is); `None` when there is none.
    pub fn oldest_unacked_commit(&self) -> Option<i64> {
        match self.commits.front() {
            Some(&(_, _, commit_micros)) => Some(commit_micros),
            None => self.open,
        }
    }

    /// The commit time of the last transaction behind the frontier.
    pub fn last_acked_commit(&self) -> Option<i64> {
        self.last_acked_commit
    }

    /// Records read from the WAL whose position is not yet confirmable.
    pub fn inflight_records(&self) -> usize {
        self.slots.len()
    }

    pub fn inflight_bytes(&self) -> usize {
        self.bytes
    }

    /// When the oldest record not yet acknowledged was handed to the producer (µs since the
    /// Unix epoch); `None` when every record is acknowledged. After [`Frontier::advance`] the
    /// front is unacknowledged, so this rarely looks past it.
    pub fn oldest_unacked_sent(&self) -> Option<i64> {
        self.slots.iter().find(|s| !s.acked).map(|s| s.sent_micros)
    }

    /// Records not yet acknowledged by the broker.
    pub fn unacked(&self) -> usize {
        self.slots.iter().filter(|s| !s.acked).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_is_confirmed_only_after_all_its_records_are_acked() {
        let mut f = Frontier::new(Lsn(100));
        let a = f.sent(10, Lsn(0), Sent::default());
        let b = f.sent(10, Lsn(0), Sent::default());
        f.commit(Lsn(200));
        assert_eq!(f.acked(), Lsn(100));
        f.ack(b);
        assert_eq!(f.acked(), Lsn(100), "one record of the transaction is still unacked");
        f.ack(a);
        assert_eq!(f.acked(), Lsn(200));
        assert_eq!(f.inflight_records(), 0);
        assert_eq!(f.inflight_bytes(), 0);
    }

    #[test]
    fn later_transaction_acked_first_does_not_move_the_frontier_past_an_earlier_one() {
        let mut f = Frontier::new(Lsn(0));
        let t1 = f.sent(1, Lsn(0), Sent::default());
        f.commit(Lsn(10));
        let t2 = f.sent(1, Lsn(0), Sent::default());
        f.commit(Lsn(20));
        f.ack(t2);
        assert_eq!(f.acked(), Lsn(0));
        assert_eq!(f.inflight_records(), 2, "the acked record behind an unacked one still counts");
        f.ack(t1);
        assert_eq!(f.acked(), Lsn(20));
    }

    #[test]
    fn transaction_without_records_is_confirmed_once_earlier_ones_are() {
        let mut f = Frontier::new(Lsn(0));
        f.commit(Lsn(5));
        assert_eq!(f.acked(), Lsn(5));
        let r = f.sent(1, Lsn(0), Sent::default());
        f.commit(Lsn(10));
        f.commit(Lsn(15));
        assert_eq!(f.acked(), Lsn(5));
        f.ack(r);
        assert_eq!(f.acked(), Lsn(15));
    }

    #[test]
    fn open_transaction_records_are_not_confirmed_before_its_commit() {
        let mut f = Frontier::new(Lsn(0));
        let r = f.sent(1, Lsn(0), Sent::default());
        f.ack(r);
        assert_eq!(f.acked(), Lsn(0));
        f.commit(Lsn(50));
        assert_eq!(f.acked(), Lsn(50));
    }

    #[test]
    fn keepalive_is_confirmed_only_when_idle() {
        let mut f = Frontier::new(Lsn(0));
        f.begin(0);
        let r = f.sent(1, Lsn(0), Sent::default());
        f.idle(Lsn(1000));
        assert_eq!(f.acked(), Lsn(0), "a record is in flight");
        f.ack(r);
        f.idle(Lsn(1000));
        assert_eq!(f.acked(), Lsn(0), "its transaction is still open");
        f.commit(Lsn(20));
        f.idle(Lsn(1000));
        assert_eq!(f.acked(), Lsn(1000));
        f.idle(Lsn(500));
        assert_eq!(f.acked(), Lsn(1000), "never moves backwards");
    }

    #[test]
    fn the_oldest_unacked_commit_time_follows_the_frontier() {
        let mut f = Frontier::new(Lsn(0));
        assert_eq!(f.oldest_unacked_commit(), None);
        f.begin(1_000);
        assert_eq!(f.oldest_unacked_commit(), Some(1_000), "read, not committed yet");
        let a = f.sent(1, Lsn(0), Sent::default());
        f.commit(Lsn(10));
        f.begin(2_000);
        let b = f.sent(1, Lsn(0), Sent::default());
        f.commit(Lsn(20));
        assert_eq!(f.oldest_unacked_commit(), Some(1_000));
        f.ack(b);
        assert_eq!(f.oldest_unacked_commit(), Some(1_000), "the first is still unacked");
        assert_eq!(f.last_acked_commit(), None);
        f.ack(a);
        assert_eq!(f.oldest_unacked_commit(), None, "caught up");
        assert_eq!(f.last_acked_commit(), Some(2_000));
        f.begin(3_000);
        f.commit(Lsn(30));
        assert_eq!(f.last_acked_commit(), Some(3_000), "a transaction without records");
    }

    #[test]
    fn a_redirected_record_is_acknowledged_for_its_new_topic() {
        let mut f = Frontier::new(Lsn(0));
        let sent = Sent { topic: "orders".into(), ..Sent::default() };
        let r = f.sent(1, Lsn(0), sent);
        f.redirect(r, "dead".into());
        f.redirect(r + 1, "nowhere".into());
        assert_eq!(&*f.ack(r).unwrap().topic, "dead");
    }

    #[test]
    fn repeated_and_unknown_acks_are_ignored() {
        let mut f = Frontier::new(Lsn(0));
        let r = f.sent(3, Lsn(0), Sent::default());
        assert_eq!(f.ack(r + 7), None);
        assert_eq!(f.inflight_records(), 1);
        assert!(f.ack(r).is_some());
        assert_eq!(f.ack(r), None);
        assert_eq!(f.inflight_records(), 0);
        assert_eq!(f.inflight_bytes(), 0);
    }

    #[test]
    fn huge_transaction_keeps_only_unacked_records_in_memory() {
        let mut f = Frontier::new(Lsn(0));
        for _ in 0..1_000_000u32 {
            let s = f.sent(300, Lsn(0), Sent::default());
            f.ack(s);
        }
        assert_eq!(f.inflight_records(), 0);
        assert_eq!(f.acked(), Lsn(0), "not committed yet");
        f.commit(Lsn(77));
        assert_eq!(f.acked(), Lsn(77));
    }
}
