//! The comparison, streamed (its answer is a [`Report`]). The window's expected records and the
//! topics' records, each sorted by event id (spilled to disk past a budget), are walked side by
//! side, one event id at a time; what the order check needs is sorted again, by partition, key and offset. Memory is the
//! sorters' budgets and the first `PROBLEMS_KEPT` problem events, whatever the window.

use std::io::{self, Read, Write};
use std::sync::Arc;

use super::readback::{Held, Shape, Trimmed};
use super::report::{Problem, ProblemKind, Report};
use super::spill::{failed, heap, read_bytes, read_i64, write_bytes, write_i64, Item, Sorter};
use crate::delivery::partitioner::key_partition;
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
    /// When the audit began (Unix ms): an event's age, against its topic's `retention.ms`.
    pub now_ms: i64,
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

/// Counts one expected event against its copies; returns its first copy the relay wrote, for
/// the order check (a re-published copy comes after later events of its key by design).
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
    let replayed = copies.iter().filter(|c| c.replayed).count();
    let problem = match copies.len() {
        0 if w.commit_micros > j.settled_before => {
            t.pending += 1;
            None
        }
        0 => {
            let (kind, detail) = absent(w, want_partition, j);
            match kind {
                ProblemKind::Expired => t.expired += 1,
                ProblemKind::Unverifiable => t.unverifiable += 1,
                _ => t.missing += 1,
            }
            Some((kind, detail))
        }
        n if replayed == n => {
            // Only re-published copies: the relay's never came (an advanced slot), and a
            // repair or a replay sent it after later events of its key.
            t.repaired += 1;
            if n > 1 {
                t.duplicated += 1;
                t.duplicated_by_replay += 1;
            }
            let kafka = j.shape.read_from.name();
            Some((ProblemKind::Repaired, format!("in {kafka} only as {n} re-published copy(ies) (walrelay replay or audit --repair), after the events of its key that the relay sent meanwhile")))
        }
        1 => {
            t.delivered_once += 1;
            None
        }
        n => {
            t.duplicated += 1;
            // The first copy is the relay's; every other one from a replay is on purpose.
            if replayed > 0 && n - replayed <= 1 {
                t.duplicated_by_replay += 1;
            }
            Some((ProblemKind::Duplicated, format!("{n} copies, {replayed} from walrelay replay")))
        }
    };
    let first = copies.first().copied();
    let misplaced = match (first, want_partition) {
        // A stream has no partitions: nothing to misplace.
        _ if !j.shape.read_from.partitioned() => None,
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
    copies.iter().find(|c| !c.replayed).copied()
}

/// What an event that is in no partition of its topic is: missing, unless records were
/// deleted where it would be. Then time retention explains its absence only when it is older
/// than the topic's `retention.ms` (expired); any other deletion (`retention.bytes`, a
/// delete-records request, compaction, or a reason Kafka would not say) leaves it unverifiable.
fn absent(w: &Want, partition: Option<i32>, j: &Judge<'_>) -> (ProblemKind, String) {
    let commit_ms = w.commit_micros / 1000;
    let config = j.shape.configs.get(w.topic as usize).cloned().unwrap_or_default();
    if config.compacted {
        return (ProblemKind::Unverifiable, "not in Kafka, in a compacted topic (cleanup.policy compact): Kafka keeps only the latest record of a key, so an earlier one cannot be told from one never written".into());
    }
    let from = j.shape.read_from;
    let (kafka, age_limit) = (from.name(), from.age_limit());
    let Some(trimmed) = deleted_where(w, partition, j) else {
        let nowhere = from.nowhere();
        return (ProblemKind::Missing, format!("committed and in the outbox table, {nowhere}"));
    };
    let age = crate::duration::format(std::time::Duration::from_millis(
        (j.now_ms - commit_ms).max(0) as u64,
    ));
    let gone = from.gone(&trimmed);
    match config.retention_ms {
        Some(ms) if ms >= 0 && j.now_ms - commit_ms > ms => (
            ProblemKind::Expired,
            format!("not in {kafka}: {gone}, and it committed {age} ago, past {age_limit}={ms}"),
        ),
        Some(ms) => {
            let mut limits = config.count_limits.clone();
            if let Some(b) = config.retention_bytes.filter(|b| *b >= 0) {
                limits.insert(0, format!("{}={b}", from.size_limit()));
            }
            let limits: String = limits.iter().map(|l| format!("{l} or ")).collect();
            let within = match ms {
                -1 => format!("{} keeps records forever ({age_limit}=-1)", from.holder()),
                ms => format!("it committed {age} ago, within {age_limit}={ms}"),
            };
            (ProblemKind::Unverifiable, format!("not in {kafka}: {gone}, but {within}, so time retention does not explain it; {limits}{} may have removed it, or it was never written: the audit cannot tell", from.delete_request()))
        }
        None => (ProblemKind::Unverifiable, format!("not in Kafka: {gone}, and Kafka would not describe the topic's retention (DescribeConfigs), so whether retention explains it cannot be told")),
    }
}

/// Where records that may have held a missing event were deleted: its partition (any, for an
/// event without a key) lost records from before its commit.
fn deleted_where(w: &Want, partition: Option<i32>, j: &Judge<'_>) -> Option<Trimmed> {
    let commit_ms = w.commit_micros / 1000;
    let left_after = |t: &&Trimmed| commit_ms <= t.first_left_ms;
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

/// Who may have written records of the audited topics that no row explains: the audit says
/// them "foreign" rather than "unexpected" when the relay itself writes such records.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Strangers {
    /// The relay selects logical messages, whose events are in no table.
    pub messages: bool,
    /// The outbox tables are patterns: a dropped tenant's rows are gone with its table.
    pub tenants: bool,
}

/// Records of `batch` whose event id is in `present` are of rows outside the window; of the
/// others, those whose id no outbox table can hold (`could_be_id`), or that the relay may have
/// written from no row (`who`), are foreign, and the rest unexpected.
pub(crate) fn strangers(
    r: &mut Report,
    batch: &[Held],
    present: &std::collections::HashSet<String>,
    could_be_id: &dyn Fn(&str) -> bool,
    who: Strangers,
    topics: &[Arc<str>],
) {
    for c in batch.iter().filter(|c| !present.contains(&c.id)) {
        let topic = &topics[c.topic as usize];
        let at = format!("{}@{}", c.partition, c.offset);
        if !could_be_id(&c.id) {
            r.foreign(&c.id, topic, at, "its id is no value an outbox table's id column can hold: another producer's record");
        } else if who.messages {
            r.foreign(&c.id, topic, at, "no row has this event id: a logical message's event (the relay selects messages, which no table keeps), or unexpected; not judged");
        } else if who.tenants {
            r.foreign(&c.id, topic, at, "no row has this event id: a dropped tenant's event (its table and rows are gone), or unexpected; not judged");
        } else {
            r.unexpected(c, topic);
        }
    }
}

#[cfg(test)]
mod tests;
