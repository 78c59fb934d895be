//! The comparison, streamed (its answer is a [`Report`]). The window's expected records and the
//! topics' records, each sorted by event id (spilled to disk past a budget), are walked side by
//! side, one event id at a time; what the order check needs is sorted again, by partition, key and offset. Memory is the
//! sorters' budgets and the first `PROBLEMS_KEPT` problem events, whatever the window.

use std::io::{self, Read, Write};
use std::sync::Arc;

use super::kafka::{Held, Shape};
use super::report::{Problem, ProblemKind, Report};
use super::spill::{failed, heap, read_bytes, read_i64, write_bytes, write_i64, Item, Sorter};
use crate::error::Result;

/// One expected record: where the live relay puts the event; sorted by event id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Want {
    pub id: String,
    /// Its commit timestamp (µs), the order check's; `i64::MIN` when unknown (a row older than
    /// `track_commit_timestamp = on`, so older than every known one). The rows of one
    /// transaction share it: their order in Kafka is the WAL's, which no row records.
    pub commit_order: i64,
    /// Its topic's index in the audit's topic list.
    pub topic: u32,
    /// From a partition placement; -1: the key's partition (murmur2), or any without a key.
    pub partition: i32,
    pub key: Option<Vec<u8>>,
    pub commit_micros: i64,
}

impl Item for Want {
    fn size(&self) -> usize {
        heap(self.id.capacity()) + self.key.as_ref().map_or(0, |k| heap(k.capacity()))
    }

    fn write(&self, w: &mut impl Write) -> io::Result<()> {
        write_bytes(w, self.id.as_bytes())?;
        write_i64(w, self.commit_order)?;
        write_i64(w, ((self.topic as i64) << 32) | (self.partition as u32 as i64))?;
        write_key(w, &self.key)?;
        write_i64(w, self.commit_micros)
    }

    fn read(r: &mut impl Read) -> io::Result<Option<Want>> {
        let Some(id) = read_bytes(r)? else { return Ok(None) };
        let commit_order = read_i64(r)?;
        let at = read_i64(r)?;
        let key = read_key(r)?;
        Ok(Some(Want {
            id: String::from_utf8_lossy(&id).into_owned(),
            commit_order,
            topic: (at >> 32) as u32,
            partition: at as u32 as i32,
            key,
            commit_micros: read_i64(r)?,
        }))
    }
}

/// An event's first copy, for the order check: sorted by topic, partition, key and offset.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Placed {
    topic: u32,
    partition: i32,
    key: Option<Vec<u8>>,
    offset: i64,
    commit_order: i64,
    id: String,
}

impl Item for Placed {
    fn size(&self) -> usize {
        heap(self.id.capacity()) + self.key.as_ref().map_or(0, |k| heap(k.capacity()))
    }

    fn write(&self, w: &mut impl Write) -> io::Result<()> {
        write_i64(w, ((self.topic as i64) << 32) | (self.partition as u32 as i64))?;
        write_key(w, &self.key)?;
        write_i64(w, self.offset)?;
        write_i64(w, self.commit_order)?;
        write_bytes(w, self.id.as_bytes())
    }

    fn read(r: &mut impl Read) -> io::Result<Option<Placed>> {
        let mut at = [0u8; 8];
        match r.read_exact(&mut at) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        let at = i64::from_le_bytes(at);
        let key = read_key(r)?;
        let offset = read_i64(r)?;
        let commit_order = read_i64(r)?;
        let id = read_bytes(r)?.unwrap_or_default();
        Ok(Some(Placed {
            topic: (at >> 32) as u32,
            partition: at as u32 as i32,
            key,
            offset,
            commit_order,
            id: String::from_utf8_lossy(&id).into_owned(),
        }))
    }
}

fn write_key(w: &mut impl Write, key: &Option<Vec<u8>>) -> io::Result<()> {
    match key {
        Some(k) => {
            w.write_all(&[1])?;
            write_bytes(w, k)
        }
        None => w.write_all(&[0]),
    }
}

fn read_key(r: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut flag = [0u8; 1];
    r.read_exact(&mut flag)?;
    match flag[0] {
        0 => Ok(None),
        _ => read_bytes(r)?.map(Some).ok_or_else(|| io::ErrorKind::UnexpectedEof.into()),
    }
}

/// What the comparison needs besides the two sorted streams.
pub(crate) struct Judge<'a> {
    pub topics: &'a [Arc<str>],
    pub shape: &'a Shape,
    /// Rows committed after this (µs) and not in Kafka yet are pending; only records
    /// timestamped before it can be unexpected (a later one may be of a row that committed
    /// after the snapshot).
    pub settled_before: i64,
    pub commit_ordered: bool,
    pub read_committed: bool,
    /// Bytes each sorter holds before it spills.
    pub budget: usize,
}

/// Walks `wants` and `copies` by event id. Returns the report (totals not yet added: see
/// [`Report::finish`]) and the records whose event id is no row of the window, in id order,
/// for the caller to look up in the tables.
pub(crate) fn compare(
    wants: Sorter<Want>,
    copies: Sorter<Held>,
    j: &Judge<'_>,
) -> Result<(Report, Sorter<Held>)> {
    let mut r = Report {
        order_checked: j.commit_ordered,
        read_committed: j.read_committed,
        records_read: j.shape.records,
        ..Report::default()
    };
    let mut strangers = Sorter::new(j.budget);
    let mut placed = Sorter::new(j.budget);
    let mut wants = wants.sorted().map_err(failed)?;
    let mut copies = copies.sorted().map_err(failed)?;
    let mut want = next(&mut wants)?;
    let mut copy = next(&mut copies)?;
    let mut group: Vec<Held> = Vec::new();
    let judged_before_ms = j.settled_before / 1000;
    loop {
        let id = match (&want, &copy) {
            (None, None) => break,
            (Some(w), None) => w.id.clone(),
            (None, Some(c)) => c.id.clone(),
            (Some(w), Some(c)) => w.id.as_str().min(c.id.as_str()).to_string(),
        };
        group.clear();
        while copy.as_ref().is_some_and(|c| c.id == id) {
            group.extend(copy.take());
            copy = next(&mut copies)?;
        }
        if want.as_ref().is_some_and(|w| w.id == id) {
            let w = want.take().expect("checked");
            want = next(&mut wants)?;
            if let Some(first) = judge(&w, &group, j, &mut r) {
                let p = Placed {
                    topic: w.topic,
                    partition: first.partition,
                    key: w.key,
                    offset: first.offset,
                    commit_order: w.commit_order,
                    id: w.id,
                };
                placed.push(p).map_err(failed)?;
            }
        } else {
            for c in group.drain(..) {
                if c.timestamp_ms >= 0 && c.timestamp_ms < judged_before_ms {
                    strangers.push(c).map_err(failed)?;
                }
            }
        }
    }
    if j.commit_ordered {
        out_of_order(placed, j, &mut r)?;
    }
    Ok((r, strangers))
}

/// Counts one expected event against its copies; returns its first copy in its topic.
fn judge<'c>(w: &Want, group: &'c [Held], j: &Judge<'_>, r: &mut Report) -> Option<&'c Held> {
    let topic = &j.topics[w.topic as usize];
    let copies: Vec<&Held> = group.iter().filter(|c| c.topic == w.topic).collect();
    let at = copies.iter().map(|c| format!("{}@{}", c.partition, c.offset)).collect::<Vec<_>>();
    let partitions = j.shape.partitions.get(w.topic as usize).copied().unwrap_or(0);
    let want_partition = match (w.partition, &w.key) {
        (p, _) if p >= 0 => Some(p),
        (_, Some(k)) if partitions > 0 => Some(key_partition(k, partitions)),
        _ => None,
    };
    let t = r.topics.entry(topic.to_string()).or_default();
    t.expected += 1;
    let problem = match copies.len() {
        0 if w.commit_micros > j.settled_before => {
            t.pending += 1;
            None
        }
        0 => match expired(w, want_partition, j) {
            Some(trimmed) => {
                t.expired += 1;
                Some((ProblemKind::Expired, format!(
                    "not in Kafka, which deleted this partition's records before offset {} (retention); the event committed before the first record left",
                    trimmed.log_start
                )))
            }
            None => {
                t.missing += 1;
                Some((
                    ProblemKind::Missing,
                    "committed and in the outbox table, in no partition of its topic".into(),
                ))
            }
        },
        1 => {
            t.delivered_once += 1;
            None
        }
        n => {
            t.duplicated += 1;
            let replayed = copies.iter().filter(|c| c.replayed).count();
            // The first copy is the relay's; every other one from a replay is on purpose.
            if replayed > 0 && n - replayed <= 1 {
                t.duplicated_by_replay += 1;
            }
            Some((ProblemKind::Duplicated, format!("{n} copies, {replayed} from walrelay replay")))
        }
    };
    let first = copies.first().copied();
    let misplaced = match (first, want_partition) {
        (Some(c), Some(want)) if c.partition != want => {
            t.misplaced += 1;
            Some(format!("in partition {}, the router's is {want}", c.partition))
        }
        _ => None,
    };
    for (kind, detail) in problem.into_iter().chain(misplaced.map(|d| (ProblemKind::Misplaced, d)))
    {
        r.problem(Problem {
            kind,
            event_id: w.id.clone(),
            topic: topic.to_string(),
            held_at: at.clone(),
            detail,
        });
    }
    first
}

/// Where a missing event's partition lost records from before its commit to retention.
fn expired(w: &Want, partition: Option<i32>, j: &Judge<'_>) -> Option<super::kafka::Trimmed> {
    let commit_ms = w.commit_micros / 1000;
    let left_after = |t: &&super::kafka::Trimmed| commit_ms <= t.first_left_ms;
    match partition {
        Some(p) => j.shape.trimmed.get(&(w.topic, p)).filter(left_after).copied(),
        // Without a key the event could be in any partition.
        None => j
            .shape
            .trimmed
            .iter()
            .filter(|((topic, _), _)| *topic == w.topic)
            .map(|(_, t)| t)
            .find(left_after)
            .copied(),
    }
}

/// For each key, the events' first copies in each partition in offset order must come in commit
/// order: one that committed strictly before an event ahead of it is out of order. Equal commit
/// timestamps (one transaction's rows) are no order the table knows.
fn out_of_order(placed: Sorter<Placed>, j: &Judge<'_>, r: &mut Report) -> Result<()> {
    // The group (topic, partition, key) being walked, and the latest commit seen in it.
    let mut current: Option<(u32, i32, Option<Vec<u8>>, i64)> = None;
    for p in placed.sorted().map_err(failed)? {
        let p = p.map_err(failed)?;
        match &mut current {
            Some((topic, partition, key, latest))
                if *topic == p.topic && *partition == p.partition && *key == p.key =>
            {
                if p.commit_order < *latest {
                    let name = j.topics[p.topic as usize].to_string();
                    r.topics.entry(name.clone()).or_default().out_of_order += 1;
                    r.problem(Problem {
                        kind: ProblemKind::OutOfOrder,
                        event_id: p.id,
                        topic: name,
                        held_at: vec![format!("{}@{}", p.partition, p.offset)],
                        detail: "after an event of its key that committed later".into(),
                    });
                } else {
                    *latest = p.commit_order;
                }
            }
            _ => current = Some((p.topic, p.partition, p.key, p.commit_order)),
        }
    }
    Ok(())
}

fn next<T: Item>(items: &mut super::spill::Sorted<T>) -> Result<Option<T>> {
    items.next().transpose().map_err(failed)
}

/// Records of `batch` whose event id is in `present` are of rows outside the window; the
/// others are unexpected.
pub(crate) fn strangers(
    r: &mut Report,
    batch: &[Held],
    present: &std::collections::HashSet<String>,
    topics: &[Arc<str>],
) {
    for c in batch.iter().filter(|c| !present.contains(&c.id)) {
        r.unexpected(c, &topics[c.topic as usize]);
    }
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
    use std::collections::HashSet;

    use super::*;
    use crate::audit::PROBLEMS_KEPT;

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

    /// The window, what the topic "t" (4 partitions) holds, and the ids of rows outside it.
    struct Case {
        wants: Vec<Want>,
        copies: Vec<Held>,
        shape: Shape,
        present: HashSet<String>,
    }

    impl Case {
        fn new() -> Case {
            let shape = Shape { partitions: vec![4], ..Shape::default() };
            Case { wants: Vec::new(), copies: Vec::new(), shape, present: HashSet::new() }
        }

        fn want(&mut self, id: &str, key: &str, commit_micros: i64) {
            let key = Some(key.as_bytes().to_vec());
            let commit_order = commit_micros;
            let w =
                Want { id: id.into(), commit_order, topic: 0, partition: -1, key, commit_micros };
            self.wants.push(w);
        }

        fn held(&mut self, id: &str, key: &str, offset: i64, replayed: bool) {
            let partition = key_partition(key.as_bytes(), 4);
            let c =
                Held { id: id.into(), topic: 0, partition, offset, replayed, timestamp_ms: offset };
            self.copies.push(c);
        }

        /// Compared with sorters of `budget` bytes (small: they spill).
        fn compare(self, budget: usize, commit_ordered: bool) -> Report {
            let topics: Vec<Arc<str>> = vec![Arc::from("t")];
            let (mut wants, mut copies) = (Sorter::new(budget), Sorter::new(budget));
            for w in self.wants {
                wants.push(w).unwrap();
            }
            for c in self.copies {
                copies.push(c).unwrap();
            }
            let j = Judge {
                topics: &topics,
                shape: &self.shape,
                settled_before: 1_000_000,
                commit_ordered,
                read_committed: false,
                budget,
            };
            let (mut r, strange) = compare(wants, copies, &j).unwrap();
            let batch: Vec<Held> = strange.sorted().unwrap().map(Result::unwrap).collect();
            strangers(&mut r, &batch, &self.present, &topics);
            r.finish();
            r
        }
    }

    fn every_kind() -> Case {
        let mut c = Case::new();
        for (i, id) in ["a", "b", "c", "d", "e", "f"].iter().enumerate() {
            c.want(id, "k1", 100 + i as i64);
        }
        c.want("young", "k1", 2_000_000);
        c.held("a", "k1", 0, false);
        c.held("c", "k1", 1, false); // b missing
        c.held("d", "k1", 2, false);
        c.held("d", "k1", 3, true); // a replay's copy
        c.held("f", "k1", 4, false);
        c.held("e", "k1", 5, false); // after f, committed before it
        c.held("ghost", "k1", 6, false);
        c.held("old", "k1", 7, false); // a row outside the window
        c.present.insert("old".into());
        c
    }

    #[test]
    fn each_kind_of_problem_is_counted_and_named_and_young_rows_are_pending() {
        for budget in [1 << 20, 64] {
            let r = every_kind().compare(budget, true);
            let t = &r.total;
            assert_eq!((t.expected, t.delivered_once, t.pending), (7, 4, 1), "{budget}");
            assert_eq!((t.missing, t.duplicated, t.duplicated_by_replay), (1, 1, 1));
            assert_eq!((t.out_of_order, t.misplaced, t.unexpected, t.expired), (1, 0, 1, 0));
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
            assert_eq!(r.records_read, 0, "the shape says how many were read");
        }
    }

    #[test]
    fn rows_of_one_transaction_in_any_order_are_not_out_of_order_but_an_older_commit_is() {
        // One transaction's rows share their commit timestamp; the relay sends them in WAL
        // order, which no row records (here "z" was inserted before "a").
        let mut c = Case::new();
        c.want("z", "k", 100);
        c.want("a", "k", 100);
        c.want("old", "k", 50);
        c.held("z", "k", 0, false);
        c.held("a", "k", 1, false);
        c.held("old", "k", 2, false);
        let r = c.compare(1 << 20, true);
        assert_eq!(r.total.out_of_order, 1);
        let named: Vec<&str> = r.problems.iter().map(|p| p.event_id.as_str()).collect();
        assert_eq!(named, ["old"]);
    }

    #[test]
    fn a_duplicate_the_relay_made_is_not_a_replays_and_a_wrong_partition_is_misplaced() {
        let mut c = Case::new();
        c.want("a", "k1", 1);
        c.want("b", "k2", 2);
        c.held("a", "k1", 0, false);
        c.held("a", "k1", 1, false);
        c.held("b", "k2", 0, false);
        c.copies[2].partition = (key_partition(b"k2", 4) + 1) % 4;
        let r = c.compare(1 << 20, false);
        assert_eq!((r.total.duplicated, r.total.duplicated_by_replay), (1, 0));
        assert_eq!(r.total.misplaced, 1);
        assert!(!r.clean());
        assert!(!r.order_checked);
    }

    #[test]
    fn a_missing_event_where_retention_deleted_records_is_expired_and_the_window_clean() {
        let mut c = Case::new();
        c.want("gone", "k1", 5_000);
        c.want("late", "k1", 900_000);
        c.want("kept", "k1", 10_000);
        c.held("kept", "k1", 12, false);
        let p = key_partition(b"k1", 4);
        // The first record left was written at 8 ms: "gone" (5 ms) may have been before it.
        c.shape
            .trimmed
            .insert((0, p), super::super::kafka::Trimmed { log_start: 12, first_left_ms: 8 });
        let r = c.compare(1 << 20, false);
        let t = &r.total;
        assert_eq!((t.expired, t.missing, t.delivered_once), (1, 1, 1));
        let kinds: Vec<(ProblemKind, &str)> =
            r.problems.iter().map(|p| (p.kind, p.event_id.as_str())).collect();
        assert_eq!(kinds, [(ProblemKind::Missing, "late"), (ProblemKind::Expired, "gone")]);
    }

    #[test]
    fn problems_past_the_list_are_counted_not_kept() {
        let mut c = Case::new();
        for i in 0..PROBLEMS_KEPT + 5 {
            c.want(&format!("m{i:06}"), "k", 1);
        }
        let r = c.compare(1 << 16, false);
        assert_eq!(r.total.missing, PROBLEMS_KEPT as u64 + 5);
        assert_eq!((r.problems.len(), r.problems_not_listed), (PROBLEMS_KEPT, 5));
    }
}
