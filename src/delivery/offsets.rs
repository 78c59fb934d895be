//! The broker's own word that a record was written: its offset. In one partition a record
//! reported after another was written after it, so its offset is higher. A delivery report at or
//! below an offset already reported for that partition says the broker did not write the
//! record although librdkafka calls it delivered: the idempotent producer sent a sequence number
//! again that the broker took for a duplicate of a batch it had (librdkafka 1.9's changelog
//! describes one way: partition state forgotten and restarted at zero), or the partition's log was
//! truncated or recreated under the producer. Such a record is not acknowledged: the session
//! ends, and the next one sends it again from the confirmed position (I2).
//!
//! A report with no offset is not taken as a write either. With acks=all the broker answers
//! every write with its offset; librdkafka reports a record delivered without one when it
//! acknowledges it implicitly, because a later batch of its partition succeeded
//! (`rd_kafka_dr_implicit_ack`), or when the broker answered its batch with
//! DUPLICATE_SEQUENCE_NUMBER. Neither says the broker holds the record, and the first does not
//! hold: a topic's new partition refused a first batch (Not leader), took the next one, already in
//! flight, as the producer's first, and the refused record was reported delivered at offset -1001
//! (docs/operations.md, "Topics created on first use"). Sending it again costs a duplicate at worst.
//!
//! Sending it again is not enough for a key's order, though: the records after the lost one were
//! written before it, so a consumer that drops duplicates by event id sees the key's events out of
//! order (I5; seen in the suite as a warm-up key first delivered 1, 2, 3, 4, 0). So a partition
//! the broker has not yet written a record of this producer's to takes one record at a time:
//! the records after its first write are held in delivery, in order, until the first is reported
//! ([`Offsets::first_write`]); the relay reads on meanwhile. Once the broker has written one, it
//! keeps the producer's sequence for the partition and refuses a batch out of order, which
//! librdkafka then sends again in order. The hold costs one round trip per partition per
//! producer's life. It is exact for keyed records and placed ones, the ones whose order counts;
//! a record without a key goes to a partition librdkafka picks, and a topic whose metadata never
//! came has no partition count, so theirs are not held (a loss is still refused and sent again).
//! Exactly-once holds nothing: a lost first batch fails its Kafka transaction, which is aborted.
//!
//! Reports of one partition arrive in the order its records were written (librdkafka keeps that
//! order for the idempotent producer, which walrelay always is), so the last offset per
//! partition is all there is to keep.

use std::collections::HashMap;
use std::sync::Arc;

use super::frontier::Seq;

/// The last offset reported per topic and partition, for one producer's life.
#[derive(Debug, Default)]
pub struct Offsets {
    /// Per topic, the last offset reported per partition; -1: none yet.
    last: HashMap<Arc<str>, Vec<i64>>,
    /// The record in flight to a partition with no offset reported yet: its first write.
    firsts: HashMap<(Arc<str>, i32), Seq>,
}

/// A report that is not where a written record would be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotWritten {
    /// At or below `after`, the offset an earlier report of the same partition gave.
    Repeated { after: i64 },
    /// With no offset, or no partition.
    NoOffset,
}

impl std::fmt::Display for NotWritten {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotWritten::Repeated { after } => write!(
                f,
                "not after offset {after} that it reported for an earlier record there, so the \
                 broker did not write it (a sequence number taken for a duplicate, or the \
                 partition's log truncated or recreated)"
            ),
            NotWritten::NoOffset => f.write_str(
                "with no offset, which is no proof of a write (librdkafka reports so a record it \
                 acknowledged implicitly by a later batch's success, or a batch the broker called a \
                 duplicate)",
            ),
        }
    }
}

impl Offsets {
    /// Takes the report of a record of `topic` at `partition` and `offset`.
    pub fn reported(
        &mut self,
        topic: &Arc<str>,
        partition: i32,
        offset: i64,
    ) -> Result<(), NotWritten> {
        let (Ok(p), true) = (usize::try_from(partition), offset >= 0) else {
            return Err(NotWritten::NoOffset);
        };
        let last = match self.last.get_mut(&**topic) {
            Some(last) => last,
            None => self.last.entry(topic.clone()).or_default(),
        };
        if last.len() <= p {
            last.resize(p + 1, -1);
        }
        if offset <= last[p] {
            return Err(NotWritten::Repeated { after: last[p] });
        }
        if last[p] < 0 {
            self.firsts.remove(&(topic.clone(), partition));
        }
        last[p] = offset;
        Ok(())
    }

    /// Whether the broker has reported a write to `topic`'s `partition` in this producer's life.
    pub fn written(&self, topic: &str, partition: i32) -> bool {
        let Ok(p) = usize::try_from(partition) else { return false };
        self.last.get(topic).and_then(|last| last.get(p)).is_some_and(|&offset| offset >= 0)
    }

    /// The record a send to `topic`'s `partition` must wait for: the partition's first write,
    /// while the broker has not reported it.
    pub fn first_write(&self, topic: &Arc<str>, partition: i32) -> Option<Seq> {
        if self.written(topic, partition) {
            return None;
        }
        self.firsts.get(&(topic.clone(), partition)).copied()
    }

    /// Record `seq` went to `topic`'s `partition`: its first write, if nothing was written there.
    pub fn sent(&mut self, topic: &Arc<str>, partition: i32, seq: Seq) {
        if !self.written(topic, partition) {
            self.firsts.insert((topic.clone(), partition), seq);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rising_offsets_per_partition_pass_and_partitions_and_topics_are_apart() {
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let mut o = Offsets::default();
        assert_eq!(o.reported(&a, 0, 0), Ok(()));
        assert_eq!(o.reported(&a, 0, 1), Ok(()));
        assert_eq!(o.reported(&a, 3, 0), Ok(()), "another partition starts on its own");
        assert_eq!(o.reported(&b, 0, 0), Ok(()), "another topic too");
        assert_eq!(o.reported(&a, 0, 7), Ok(()), "gaps are transaction markers or others' records");
    }

    #[test]
    fn a_report_at_or_below_an_earlier_offset_of_its_partition_is_not_a_write() {
        let t: Arc<str> = Arc::from("t");
        let mut o = Offsets::default();
        o.reported(&t, 1, 5).unwrap();
        let repeated = Err(NotWritten::Repeated { after: 5 });
        assert_eq!(o.reported(&t, 1, 5), repeated, "the same offset twice");
        assert_eq!(o.reported(&t, 1, 0), repeated, "the log started again");
        assert_eq!(o.reported(&t, 1, 6), Ok(()), "the refusal did not move the last offset");
    }

    #[test]
    fn a_partitions_first_write_is_waited_for_until_the_broker_reports_an_offset_there() {
        let t: Arc<str> = Arc::from("t");
        let mut o = Offsets::default();
        assert_eq!(o.first_write(&t, 2), None, "nothing sent: nothing to wait for");
        o.sent(&t, 2, 7);
        assert_eq!(o.first_write(&t, 2), Some(7), "the next record waits for #7");
        assert_eq!(o.first_write(&t, 1), None, "another partition does not");
        assert_eq!(o.reported(&t, 2, -1), Err(NotWritten::NoOffset));
        assert_eq!(o.first_write(&t, 2), Some(7), "a report with no offset writes nothing");
        o.reported(&t, 2, 0).unwrap();
        assert!(o.written(&t, 2));
        assert_eq!(o.first_write(&t, 2), None, "written: records go out together");
        o.sent(&t, 2, 8);
        assert_eq!(o.first_write(&t, 2), None, "a later record is no first write");
    }

    #[test]
    fn a_report_without_an_offset_or_partition_is_not_a_write() {
        let t: Arc<str> = Arc::from("t");
        let mut o = Offsets::default();
        o.reported(&t, 0, 9).unwrap();
        assert_eq!(o.reported(&t, 0, -1), Err(NotWritten::NoOffset), "a duplicate's report");
        assert_eq!(o.reported(&t, -1, 3), Err(NotWritten::NoOffset), "no partition");
        assert_eq!(o.reported(&t, 0, 10), Ok(()), "the refusals did not move the last offset");
    }
}
