//! The audit's answer: counts per topic and in total, and one line per problem event (the first
//! [`PROBLEMS_KEPT`]).

use std::collections::BTreeMap;

use serde::Serialize;

use super::readback::{Held, ReadFrom};

/// Problem events listed one by one; past it they are only counted.
pub const PROBLEMS_KEPT: usize = 10_000;

/// What is wrong with one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    Missing,
    /// Not in Kafka, where records were deleted for a reason other than time retention (or
    /// one the audit cannot tell): whether it was ever written cannot be known. Not clean.
    Unverifiable,
    Duplicated,
    OutOfOrder,
    Misplaced,
    Unexpected,
    /// Not in Kafka, where time retention deleted records and the event is older than the
    /// topic's `retention.ms`: deleted as configured.
    Expired,
    /// In Kafka only as copies `walrelay replay` or `audit --repair` re-published: after
    /// later events of its key, by design. Said, not judged.
    Repaired,
    /// A record of an audited topic that carries no outbox event id (none where the envelope
    /// puts it, or one no outbox table's id column can hold), or one the audit cannot
    /// attribute: another producer's, a logical message's, a dropped tenant's. Said, not judged.
    Foreign,
    /// A row the router refuses: the live relay sent it to the dead-letter topic, or stops at
    /// it. Said, not judged: it is in no routed topic by design.
    Unroutable,
}

impl ProblemKind {
    pub fn name(self) -> &'static str {
        match self {
            ProblemKind::Missing => "missing",
            ProblemKind::Unverifiable => "unverifiable",
            ProblemKind::Duplicated => "duplicated",
            ProblemKind::OutOfOrder => "out of order",
            ProblemKind::Misplaced => "misplaced",
            ProblemKind::Unexpected => "unexpected",
            ProblemKind::Expired => "expired",
            ProblemKind::Repaired => "repaired",
            ProblemKind::Foreign => "foreign",
            ProblemKind::Unroutable => "unroutable",
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
    /// Not in Kafka, older than the topic's `retention.ms`, in a partition whose records time
    /// retention deleted from before the event's commit: deleted as configured.
    pub expired: u64,
    /// Not in Kafka, in a partition whose records were deleted for another reason (or one
    /// the audit cannot tell): whether it was ever written cannot be known.
    pub unverifiable: u64,
    pub duplicated: u64,
    /// Of the duplicated, those with copies from `walrelay replay` only beyond the first.
    pub duplicated_by_replay: u64,
    /// In Kafka only as re-published copies (`walrelay replay`, `audit --repair`).
    pub repaired: u64,
    pub out_of_order: u64,
    pub misplaced: u64,
    pub unexpected: u64,
    /// Records with no outbox event id, or none the audit can attribute.
    pub foreign: u64,
    /// The topic's `retention.ms`, when events expired from it or are unverifiable (and Kafka
    /// said).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_ms: Option<i64>,
}

/// The audit's answer.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub topics: BTreeMap<String, TopicReport>,
    pub total: TopicReport,
    /// Whether commit order was known (`track_commit_timestamp = on`).
    pub order_checked: bool,
    pub read_committed: bool,
    /// Records read from Kafka.
    pub records_read: u64,
    /// What the records were read back from: Kafka, or JetStream (no partitions: nothing is
    /// misplaced, and `misplaced` is not judged).
    pub read_from: ReadFrom,
    /// Where the records' event ids were read from (`header id`, …).
    pub event_id_in: String,
    /// WAL written since the relay's slot's confirmed position when the audit began.
    pub slot_behind_bytes: Option<u64>,
    /// How long the audit took.
    pub seconds: f64,
    /// The server's WAL insert position inside the audit's snapshot: every row the audit read
    /// committed before it. A repair waits for the slot to have confirmed past it.
    #[serde(serialize_with = "lsn_text")]
    pub snapshot_lsn: Option<crate::lsn::Lsn>,
    /// Answers of the broker that did not hold together, and what the audit did instead.
    pub notes: Vec<String>,
    /// Audited topics whose `cleanup.policy` compacts: a repair there would put an old event
    /// after the newest of its key.
    pub compacted_topics: Vec<String>,
    /// The first [`PROBLEMS_KEPT`] problem events, by kind, topic and event id.
    pub problems: Vec<Problem>,
    /// Problem events past [`PROBLEMS_KEPT`], counted only.
    pub problems_not_listed: u64,
    /// Rows of the window the router refuses (their records are not in the routed topics: the
    /// relay dead-letters them, or stops at them).
    pub unroutable: u64,
}

impl TopicReport {
    /// The counts after `expected`, in the order of `walrelay_audit_events`' results
    /// ([`crate::metrics::AUDIT_RESULTS`]).
    pub fn counts(&self) -> [u64; 12] {
        [
            self.delivered_once,
            self.pending,
            self.missing,
            self.expired,
            self.unverifiable,
            self.duplicated,
            self.duplicated_by_replay,
            self.repaired,
            self.out_of_order,
            self.misplaced,
            self.unexpected,
            self.foreign,
        ]
    }

    /// Adds `t`'s counts to these.
    fn add(&mut self, t: &TopicReport) {
        let mine = [
            &mut self.expected,
            &mut self.delivered_once,
            &mut self.pending,
            &mut self.missing,
            &mut self.expired,
            &mut self.unverifiable,
            &mut self.duplicated,
            &mut self.duplicated_by_replay,
            &mut self.repaired,
            &mut self.out_of_order,
            &mut self.misplaced,
            &mut self.unexpected,
            &mut self.foreign,
        ];
        for (mine, theirs) in mine.into_iter().zip(std::iter::once(t.expected).chain(t.counts())) {
            *mine += theirs;
        }
    }
}

impl Report {
    /// Nothing missing, unverifiable, duplicated beyond replays, out of order, misplaced or
    /// unexpected. Expired events (time retention, as configured), repaired ones and foreign
    /// records are said, not judged. An empty window is clean: there was nothing to lose.
    pub fn clean(&self) -> bool {
        let t = &self.total;
        t.missing == 0
            && t.unverifiable == 0
            && t.duplicated == t.duplicated_by_replay
            && t.out_of_order == 0
            && t.misplaced == 0
            && t.unexpected == 0
    }

    pub(super) fn problem(&mut self, p: Problem) {
        if self.problems.len() < PROBLEMS_KEPT {
            self.problems.push(p);
        } else {
            self.problems_not_listed += 1;
        }
    }

    /// The rows of the window the router refuses, as problems of their own.
    pub(crate) fn refused(
        &mut self,
        config: &crate::config::Config,
        refused: Vec<crate::snapshot::Refused>,
        count: u64,
    ) {
        self.unroutable = count;
        let fate = match &config.dead_letter {
            Some(dl) => format!("the relay sent it to dead-letter topic {}", dl.topic),
            None => "without [dead_letter] the relay stops at it".to_string(),
        };
        for r in refused {
            self.problem(Problem {
                kind: ProblemKind::Unroutable,
                event_id: r.event_id.unwrap_or_else(|| "(no id)".into()),
                topic: "(none)".into(),
                held_at: Vec::new(),
                detail: format!("the router refuses the row ({}): {fate}", r.reason),
            });
        }
    }

    /// Whether the window held no event at all (nothing to lose, so clean).
    pub fn empty(&self) -> bool {
        self.total.expected == 0 && self.unroutable == 0
    }

    /// A record whose event id is no row of the outbox tables.
    pub(crate) fn unexpected(&mut self, copy: &Held, topic: &str) {
        self.topics.entry(topic.to_string()).or_default().unexpected += 1;
        self.problem(Problem {
            kind: ProblemKind::Unexpected,
            event_id: copy.id.clone(),
            topic: topic.to_string(),
            held_at: vec![format!("{}@{}", copy.partition, copy.offset)],
            detail: "no row of the outbox tables has this event id (purged, or never committed)"
                .into(),
        });
    }

    /// A record of `topic` that is no outbox event the audit can attribute, and why.
    pub(crate) fn foreign(&mut self, id: &str, topic: &str, at: String, why: &str) {
        self.topics.entry(topic.to_string()).or_default().foreign += 1;
        self.problem(Problem {
            kind: ProblemKind::Foreign,
            event_id: id.to_string(),
            topic: topic.to_string(),
            held_at: vec![at],
            detail: why.to_string(),
        });
    }

    /// The totals, and the problems in their order; once every count is in.
    pub(crate) fn finish(&mut self) {
        let mut total = TopicReport::default();
        for t in self.topics.values() {
            total.add(t);
        }
        self.total = total;
        self.problems
            .sort_by(|a, b| (a.kind, &a.topic, &a.event_id).cmp(&(b.kind, &b.topic, &b.event_id)));
    }
}

/// An LSN as PostgreSQL writes it (`0/16B3748`), for `--json`.
fn lsn_text<S: serde::Serializer>(lsn: &Option<crate::lsn::Lsn>, s: S) -> Result<S::Ok, S::Error> {
    match lsn {
        Some(l) => s.serialize_str(&l.to_string()),
        None => s.serialize_none(),
    }
}
