//! The comparison on hand-made windows: every kind of verdict, with sorters small enough to
//! spill.

use std::collections::HashSet;

use super::*;
use crate::audit::readback::{TopicConfig, Trimmed};
use crate::audit::PROBLEMS_KEPT;

/// The window, what the topic "t" (4 partitions) holds, and the ids of rows outside it.
struct Case {
    wants: Vec<Want>,
    copies: Vec<Held>,
    shape: Shape,
    present: HashSet<String>,
    who: Strangers,
    /// When the audit runs (ms).
    now_ms: i64,
}

impl Case {
    fn new() -> Case {
        let shape = Shape {
            partitions: vec![4],
            configs: vec![TopicConfig {
                retention_ms: Some(7 * 86_400_000),
                retention_bytes: Some(-1),
                count_limits: Vec::new(),
                compacted: false,
            }],
            ..Shape::default()
        };
        let (wants, copies, present) = (Vec::new(), Vec::new(), HashSet::new());
        let who = Strangers::default();
        Case { wants, copies, shape, present, who, now_ms: 1_000 }
    }

    fn want(&mut self, id: &str, key: &str, commit_micros: i64) {
        let key = Some(key.as_bytes().to_vec());
        let commit_order = commit_micros;
        let w = Want { id: id.into(), commit_order, topic: 0, partition: -1, key, commit_micros };
        self.wants.push(w);
    }

    fn held(&mut self, id: &str, key: &str, offset: i64, replayed: bool) {
        let partition = key_partition(key.as_bytes(), 4);
        let c = Held { id: id.into(), topic: 0, partition, offset, replayed, timestamp_ms: offset };
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
            now_ms: self.now_ms,
        };
        let (mut r, strange) = compare(wants, copies, &j).unwrap();
        let batch: Vec<Held> = strange.sorted().unwrap().map(Result::unwrap).collect();
        let could_be_id = |id: &str| !id.starts_with('!');
        strangers(&mut r, &batch, &self.present, &could_be_id, self.who, &topics);
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

/// "gone" (5 ms) committed before the first record left (8 ms) of its partition, from
/// which Kafka deleted records; "late" after it, so it would have been kept.
fn deleted_before(retention_ms: i64) -> Case {
    let mut c = Case::new();
    c.want("gone", "k1", 5_000);
    c.want("late", "k1", 900_000);
    c.want("kept", "k1", 10_000);
    c.held("kept", "k1", 12, false);
    let p = key_partition(b"k1", 4);
    c.shape.trimmed.insert((0, p), Trimmed { log_start: 12, first_left_ms: 8, of_subject: false });
    c.shape.configs[0].retention_ms = Some(retention_ms);
    c
}

#[test]
fn an_absent_event_older_than_retention_where_records_were_deleted_is_expired_and_clean() {
    // The audit runs at 1,000 ms: "gone" is 995 ms old, past retention.ms = 100.
    let r = deleted_before(100).compare(1 << 20, false);
    let t = &r.total;
    assert_eq!((t.expired, t.unverifiable, t.missing, t.delivered_once), (1, 0, 1, 1));
    let kinds: Vec<(ProblemKind, &str)> =
        r.problems.iter().map(|p| (p.kind, p.event_id.as_str())).collect();
    assert_eq!(kinds, [(ProblemKind::Missing, "late"), (ProblemKind::Expired, "gone")]);
    assert!(r.problems[1].detail.contains("past retention.ms=100"), "{:?}", r.problems[1]);
}

#[test]
fn an_absent_event_younger_than_retention_where_records_were_deleted_is_unverifiable_not_clean() {
    for (retention_ms, says) in [(86_400_000, "within retention.ms=86400000"), (-1, "forever")] {
        let mut c = deleted_before(retention_ms);
        c.copies.clear();
        c.wants.remove(1);
        c.held("kept", "k1", 12, false);
        let r = c.compare(1 << 20, false);
        assert_eq!((r.total.unverifiable, r.total.expired, r.total.missing), (1, 0, 0));
        assert!(!r.clean(), "unverifiable is no proof");
        assert_eq!(r.problems[0].kind, ProblemKind::Unverifiable);
        assert!(r.problems[0].detail.contains(says), "{:?}", r.problems[0]);
        assert!(r.problems[0].detail.contains("delete-records"), "{:?}", r.problems[0]);
    }
}

#[test]
fn an_event_of_the_last_hour_absent_from_an_idle_partition_retention_emptied_is_not_clean() {
    // Every record the partition ever held is deleted (log start 40 = end); the event is
    // younger than the topic's retention, so time retention does not explain it.
    let mut c = Case::new();
    c.want("lost", "k1", 5_000);
    let p = key_partition(b"k1", 4);
    c.shape
        .trimmed
        .insert((0, p), Trimmed { log_start: 40, first_left_ms: i64::MAX, of_subject: false });
    let r = c.compare(1 << 20, false);
    assert!(!r.clean(), "{:?}", r.problems);
    assert_eq!((r.total.unverifiable, r.total.expired), (1, 0));
    assert!(r.problems[0].detail.contains("every record of its partition"), "{:?}", r.problems);
    // Unknown retention (no DescribeConfigs ACL) is no proof either.
    let mut c = Case::new();
    c.want("lost", "k1", 5_000);
    c.shape
        .trimmed
        .insert((0, p), Trimmed { log_start: 40, first_left_ms: i64::MAX, of_subject: false });
    c.shape.configs[0] = TopicConfig::default();
    let r = c.compare(1 << 20, false);
    assert_eq!(r.total.unverifiable, 1);
    assert!(r.problems[0].detail.contains("DescribeConfigs"), "{:?}", r.problems[0]);
}

#[test]
fn an_absent_event_of_a_compacted_topic_is_unverifiable() {
    let mut c = Case::new();
    c.want("superseded", "k1", 5);
    c.shape.configs[0].compacted = true;
    let r = c.compare(1 << 20, false);
    assert_eq!((r.total.unverifiable, r.total.missing), (1, 0));
    assert!(r.problems[0].detail.contains("compact"), "{:?}", r.problems[0]);
}

#[test]
fn repaired_events_are_counted_and_named_but_neither_out_of_order_nor_unclean() {
    // "b" was lost and re-published after "c", a later event of its key.
    let mut c = Case::new();
    for (i, id) in ["a", "b", "c"].iter().enumerate() {
        c.want(id, "k1", 100 + i as i64);
    }
    c.held("a", "k1", 0, false);
    c.held("c", "k1", 1, false);
    c.held("b", "k1", 2, true);
    let r = c.compare(1 << 20, true);
    let t = &r.total;
    assert_eq!((t.repaired, t.delivered_once, t.out_of_order, t.missing), (1, 2, 0, 0));
    assert!(r.clean(), "{:?}", r.problems);
    let named: Vec<(ProblemKind, &str)> =
        r.problems.iter().map(|p| (p.kind, p.event_id.as_str())).collect();
    assert_eq!(named, [(ProblemKind::Repaired, "b")]);
}

#[test]
fn a_record_whose_id_no_table_can_hold_is_foreign_and_the_audit_goes_on() {
    let mut c = Case::new();
    c.want("a", "k1", 100);
    c.held("a", "k1", 0, false);
    c.held("!not-a-uuid", "k1", 1, false);
    c.held("ghost", "k1", 2, false);
    let r = c.compare(1 << 20, false);
    assert_eq!((r.total.foreign, r.total.unexpected, r.total.delivered_once), (1, 1, 1));
    // With logical messages selected, a record of no row is not judged unexpected.
    let mut c = Case::new();
    c.want("a", "k1", 100);
    c.held("a", "k1", 0, false);
    c.held("ghost", "k1", 2, false);
    c.who.messages = true;
    let r = c.compare(1 << 20, false);
    assert_eq!((r.total.foreign, r.total.unexpected), (1, 0));
    assert!(r.clean(), "{:?}", r.problems);
    assert!(r.problems[0].detail.contains("logical message"), "{:?}", r.problems[0]);
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
