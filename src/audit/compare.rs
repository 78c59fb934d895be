//! The comparison of what the window's rows should be in Kafka with what Kafka holds, and its
//! report: counts per topic and in total, and one line per problem event.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde::Serialize;

use super::kafka::Holdings;
use super::Expected;

/// What is wrong with one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    Missing,
    Duplicated,
    OutOfOrder,
    Misplaced,
    Unexpected,
}

impl ProblemKind {
    pub fn name(self) -> &'static str {
        match self {
            ProblemKind::Missing => "missing",
            ProblemKind::Duplicated => "duplicated",
            ProblemKind::OutOfOrder => "out of order",
            ProblemKind::Misplaced => "misplaced",
            ProblemKind::Unexpected => "unexpected",
        }
    }
}

/// One problem event.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    pub kind: ProblemKind,
    pub event_id: String,
    pub topic: String,
    /// Where Kafka holds it (`partition@offset`), empty when missing.
    pub held_at: Vec<String>,
    pub detail: String,
}

/// The counts of one topic.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TopicReport {
    pub expected: u64,
    pub delivered_once: u64,
    pub pending: u64,
    pub missing: u64,
    pub duplicated: u64,
    /// Of the duplicated, those with copies from `walrelay replay` only beyond the first.
    pub duplicated_by_replay: u64,
    pub out_of_order: u64,
    pub misplaced: u64,
    pub unexpected: u64,
}

/// The audit's answer.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub topics: BTreeMap<String, TopicReport>,
    pub total: TopicReport,
    /// Whether commit order was known (`track_commit_timestamp = on`).
    pub order_checked: bool,
    pub read_committed: bool,
    pub problems: Vec<Problem>,
}

impl Report {
    /// Nothing missing, duplicated beyond replays, out of order, misplaced or unexpected.
    pub fn clean(&self) -> bool {
        let t = &self.total;
        t.missing == 0
            && t.duplicated == t.duplicated_by_replay
            && t.out_of_order == 0
            && t.misplaced == 0
            && t.unexpected == 0
    }
}

/// Compares; `present`: the ids Kafka holds that are rows of the tables outside the window;
/// rows committed after `settled_before` (µs) are pending when Kafka does not hold them yet,
/// and only records timestamped before it can be unexpected: a later one may be a row that
/// committed after the snapshot was taken.
pub(crate) fn compare(
    expected: &BTreeMap<String, (usize, Expected)>,
    held: &Holdings,
    present: &HashSet<String>,
    settled_before: i64,
    commit_ordered: bool,
    read_committed: bool,
) -> Report {
    let judged_before_ms = settled_before / 1000;
    let mut r = Report { order_checked: commit_ordered, read_committed, ..Report::default() };
    for (id, (_, e)) in expected {
        let t = r.topics.entry(e.topic.to_string()).or_default();
        t.expected += 1;
        let copies: Vec<&(Arc<str>, super::kafka::Held)> = held
            .records
            .get(id)
            .map(|c| c.iter().filter(|(topic, _)| *topic == e.topic).collect())
            .unwrap_or_default();
        let at = |c: &[&(Arc<str>, super::kafka::Held)]| {
            c.iter().map(|(_, h)| format!("{}@{}", h.partition, h.offset)).collect::<Vec<_>>()
        };
        match copies.len() {
            0 if e.commit_micros > settled_before => t.pending += 1,
            0 => {
                t.missing += 1;
                r.problems.push(Problem {
                    kind: ProblemKind::Missing,
                    event_id: id.clone(),
                    topic: e.topic.to_string(),
                    held_at: Vec::new(),
                    detail: "committed and in the outbox table, in no partition of its topic"
                        .into(),
                });
            }
            1 => t.delivered_once += 1,
            n => {
                t.duplicated += 1;
                let replayed = copies.iter().filter(|(_, h)| h.replayed).count();
                // The first copy is the relay's; every other one from a replay is on purpose.
                let by_replay = replayed > 0 && n - replayed <= 1;
                if by_replay {
                    t.duplicated_by_replay += 1;
                }
                r.problems.push(Problem {
                    kind: ProblemKind::Duplicated,
                    event_id: id.clone(),
                    topic: e.topic.to_string(),
                    held_at: at(&copies),
                    detail: format!("{n} copies, {replayed} from walrelay replay"),
                });
            }
        }
        if let Some((_, first)) = copies.first() {
            let partitions = held.partitions.get(&e.topic).copied().unwrap_or(0);
            let want = e.partition.or_else(|| {
                e.key.as_ref().filter(|_| partitions > 0).map(|k| key_partition(k, partitions))
            });
            if let Some(want) = want.filter(|w| *w != first.partition) {
                t.misplaced += 1;
                r.problems.push(Problem {
                    kind: ProblemKind::Misplaced,
                    event_id: id.clone(),
                    topic: e.topic.to_string(),
                    held_at: at(&copies),
                    detail: format!("in partition {}, the router's is {want}", first.partition),
                });
            }
        }
    }
    if commit_ordered {
        out_of_order(expected, held, &mut r);
    }
    for (id, copies) in &held.records {
        if expected.contains_key(id) || present.contains(id) {
            continue;
        }
        for (topic, h) in copies {
            if h.timestamp_ms.is_none_or(|t| t >= judged_before_ms) {
                continue;
            }
            r.topics.entry(topic.to_string()).or_default().unexpected += 1;
            r.problems.push(Problem {
                kind: ProblemKind::Unexpected,
                event_id: id.clone(),
                topic: topic.to_string(),
                held_at: vec![format!("{}@{}", h.partition, h.offset)],
                detail:
                    "no row of the outbox tables has this event id (purged, or never committed)"
                        .into(),
            });
        }
    }
    for t in r.topics.values() {
        add(&mut r.total, t);
    }
    r.problems
        .sort_by(|a, b| (a.kind, &a.topic, &a.event_id).cmp(&(b.kind, &b.topic, &b.event_id)));
    r
}

/// For each key, the events' first copies in each partition in offset order must come in commit
/// order (their place in the window, which is read in commit order).
fn out_of_order(expected: &BTreeMap<String, (usize, Expected)>, held: &Holdings, r: &mut Report) {
    let mut seen: HashSet<&str> = HashSet::new();
    for ((topic, _), ids) in &held.sequences {
        // Per key: the latest place seen so far.
        let mut latest: HashMap<Option<&[u8]>, usize> = HashMap::new();
        for id in ids {
            let Some((place, e)) = expected.get(id) else { continue };
            if e.topic != *topic || !seen.insert(id.as_str()) {
                continue;
            }
            let key = e.key.as_deref();
            match latest.get(&key) {
                Some(&before) if before > *place => {
                    r.topics.entry(topic.to_string()).or_default().out_of_order += 1;
                    r.problems.push(Problem {
                        kind: ProblemKind::OutOfOrder,
                        event_id: id.clone(),
                        topic: topic.to_string(),
                        held_at: Vec::new(),
                        detail: "after an event of its key that committed later".into(),
                    });
                }
                _ => {
                    latest.insert(key, *place);
                }
            }
        }
    }
}

fn add(total: &mut TopicReport, t: &TopicReport) {
    total.expected += t.expected;
    total.delivered_once += t.delivered_once;
    total.pending += t.pending;
    total.missing += t.missing;
    total.duplicated += t.duplicated;
    total.duplicated_by_replay += t.duplicated_by_replay;
    total.out_of_order += t.out_of_order;
    total.misplaced += t.misplaced;
    total.unexpected += t.unexpected;
}

/// The partition the Java client's default partitioner (and librdkafka's `murmur2_random`, which
/// walrelay always uses) gives a keyed record: murmur2 of the key, made positive, modulo the
/// partitions.
pub(crate) fn key_partition(key: &[u8], partitions: i32) -> i32 {
    ((murmur2(key) & 0x7fff_ffff) as i32) % partitions
}

/// Kafka's murmur2 (seed 0x9747b28c), as `org.apache.kafka.common.utils.Utils.murmur2`.
fn murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= (tail[2] as u32) << 16;
    }
    if tail.len() >= 2 {
        h ^= (tail[1] as u32) << 8;
    }
    if !tail.is_empty() {
        h ^= tail[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_is_kafkas() {
        // Kafka's own test vectors (UtilsTest.testMurmur2).
        for (key, want) in [
            ("21", -973_932_308),
            ("foobar", -790_332_482),
            ("a-little-bit-long-string", -985_981_536),
            ("a-little-bit-longer-string", -1_486_304_829),
            ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971),
            ("abc", 479_470_107),
        ] {
            assert_eq!(murmur2(key.as_bytes()) as i32, want, "{key}");
        }
    }

    fn expected(topic: &str, key: &str, place: usize, commit_micros: i64) -> (usize, Expected) {
        let e = Expected {
            topic: Arc::from(topic),
            key: Some(bytes::Bytes::copy_from_slice(key.as_bytes())),
            partition: None,
            commit_micros,
        };
        (place, e)
    }

    fn held(h: &mut Holdings, topic: &str, id: &str, key: &str, offset: i64, replayed: bool) {
        let topic: Arc<str> = Arc::from(topic);
        let partition = key_partition(key.as_bytes(), 4);
        let record =
            super::super::kafka::Held { partition, offset, replayed, timestamp_ms: Some(offset) };
        h.partitions.insert(topic.clone(), 4);
        h.sequences.entry((topic.clone(), partition)).or_default().push(id.to_string());
        h.records.entry(id.to_string()).or_default().push((topic, record));
    }

    #[test]
    fn each_kind_of_problem_is_counted_and_named_and_young_rows_are_pending() {
        let mut want = BTreeMap::new();
        for (i, id) in ["a", "b", "c", "d", "e", "f"].iter().enumerate() {
            want.insert(id.to_string(), expected("t", "k1", i, 100 + i as i64));
        }
        want.insert("young".into(), expected("t", "k1", 6, 2_000_000));
        let mut h = Holdings::default();
        held(&mut h, "t", "a", "k1", 0, false);
        held(&mut h, "t", "c", "k1", 1, false); // b missing
        held(&mut h, "t", "d", "k1", 2, false);
        held(&mut h, "t", "d", "k1", 3, true); // a replay's copy
        held(&mut h, "t", "f", "k1", 4, false);
        held(&mut h, "t", "e", "k1", 5, false); // after f, committed before it
        held(&mut h, "t", "ghost", "k1", 6, false);
        held(&mut h, "t", "old", "k1", 7, false); // a row outside the window
        let present: HashSet<String> = ["old".to_string()].into();
        let r = compare(&want, &h, &present, 1_000_000, true, false);
        let t = &r.total;
        assert_eq!((t.expected, t.delivered_once, t.pending), (7, 4, 1));
        assert_eq!((t.missing, t.duplicated, t.duplicated_by_replay), (1, 1, 1));
        assert_eq!((t.out_of_order, t.misplaced, t.unexpected), (1, 0, 1));
        let named: Vec<(ProblemKind, &str)> =
            r.problems.iter().map(|p| (p.kind, p.event_id.as_str())).collect();
        assert_eq!(
            named,
            [
                (ProblemKind::Missing, "b"),
                (ProblemKind::Duplicated, "d"),
                (ProblemKind::OutOfOrder, "e"),
                (ProblemKind::Unexpected, "ghost")
            ]
        );
        assert!(!r.clean(), "missing, out of order and unexpected");
    }

    #[test]
    fn a_duplicate_the_relay_made_is_not_a_replays_and_a_wrong_partition_is_misplaced() {
        let mut want = BTreeMap::new();
        want.insert("a".to_string(), expected("t", "k1", 0, 1));
        want.insert("b".to_string(), expected("t", "k2", 1, 2));
        let mut h = Holdings::default();
        held(&mut h, "t", "a", "k1", 0, false);
        held(&mut h, "t", "a", "k1", 1, false);
        held(&mut h, "t", "b", "k2", 0, false);
        h.records.get_mut("b").unwrap()[0].1.partition = (key_partition(b"k2", 4) + 1) % 4;
        let r = compare(&want, &h, &HashSet::new(), 1_000_000, false, true);
        assert_eq!((r.total.duplicated, r.total.duplicated_by_replay), (1, 0));
        assert_eq!(r.total.misplaced, 1);
        assert!(!r.clean());
        assert!(!r.order_checked);
    }
}
