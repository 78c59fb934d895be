//! The audit's answer: counts per topic and in total, and one line per problem event (the first
//! [`PROBLEMS_KEPT`]).

use std::collections::BTreeMap;

use serde::Serialize;

use super::kafka::Held;

/// Problem events listed one by one; past it they are only counted.
pub const PROBLEMS_KEPT: usize = 10_000;

/// What is wrong with one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    Missing,
    Duplicated,
    OutOfOrder,
    Misplaced,
    Unexpected,
    /// Not in Kafka, where Kafka's retention deleted records: not known to be missing.
    Expired,
    /// A row the router refuses: the live relay sent it to the dead-letter topic, or stops at
    /// it. Said, not judged: it is in no routed topic by design.
    Unroutable,
}

impl ProblemKind {
    pub fn name(self) -> &'static str {
        match self {
            ProblemKind::Missing => "missing",
            ProblemKind::Duplicated => "duplicated",
            ProblemKind::OutOfOrder => "out of order",
            ProblemKind::Misplaced => "misplaced",
            ProblemKind::Unexpected => "unexpected",
            ProblemKind::Expired => "expired",
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
    /// Not in Kafka, in a partition whose records Kafka's retention deleted from before the
    /// event's commit: whether it was delivered cannot be known.
    pub expired: u64,
    pub duplicated: u64,
    /// Of the duplicated, those with copies from `walrelay replay` only beyond the first.
    pub duplicated_by_replay: u64,
    pub out_of_order: u64,
    pub misplaced: u64,
    pub unexpected: u64,
    /// The topic's `retention.ms`, when events expired from it (and Kafka said).
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
    /// Where the records' event ids were read from (`header id`, …).
    pub event_id_in: String,
    /// WAL written since the relay's slot's confirmed position when the audit began.
    pub slot_behind_bytes: Option<u64>,
    /// How long the audit took.
    pub seconds: f64,
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
    pub fn counts(&self) -> [u64; 9] {
        [
            self.delivered_once,
            self.pending,
            self.missing,
            self.expired,
            self.duplicated,
            self.duplicated_by_replay,
            self.out_of_order,
            self.misplaced,
            self.unexpected,
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
            &mut self.duplicated,
            &mut self.duplicated_by_replay,
            &mut self.out_of_order,
            &mut self.misplaced,
            &mut self.unexpected,
        ];
        for (mine, theirs) in mine.into_iter().zip(std::iter::once(t.expected).chain(t.counts())) {
            *mine += theirs;
        }
    }
}

impl Report {
    /// Nothing missing, duplicated beyond replays, out of order, misplaced or unexpected.
    /// Expired events are said, not judged: Kafka deleted what would tell.
    pub fn clean(&self) -> bool {
        let t = &self.total;
        t.missing == 0
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
        refused: Vec<crate::replay::Refused>,
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
