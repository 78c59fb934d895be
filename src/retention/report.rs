//! What a purge did, per table: rows deleted, partitions dropped, partitions kept and why — as
//! the lines `walrelay purge` prints.

use std::fmt::Write as _;
use std::time::Duration;

use super::Plan;
use crate::config::TableName;
use crate::lsn::Lsn;
use crate::source::horizon::Horizon;

#[derive(Debug, Clone)]
pub struct Report {
    pub dry_run: bool,
    pub older_than: Duration,
    /// now − `older_than`, as `timestamptz` text.
    pub cutoff: String,
    pub horizon: Horizon,
    /// The slot's confirmed position when the purge went ahead (≥ `horizon.lsn`, unless
    /// `unconfirmed`).
    pub confirmed: Lsn,
    /// A dry run with the slot short of `horizon.lsn`: a purge now would delete nothing, and the
    /// counts are what it would delete once the slot gets there.
    pub unconfirmed: Option<super::Unconfirmed>,
    /// How long the purge waited for the slot to get there.
    pub waited: Duration,
    pub tables: Vec<TableReport>,
    /// Asked to stop before it was done.
    pub stopped: bool,
    pub elapsed: Duration,
}

#[derive(Debug, Clone)]
pub struct TableReport {
    pub table: TableName,
    /// The cut-off as the age column's type.
    pub cutoff: String,
    /// Rows deleted (dry: that would be), partitions' rows not included.
    pub deleted: u64,
    pub batches: u64,
    /// Dry runs: rows older than the cut-off kept as not yet known to be relayed.
    pub not_yet: u64,
    /// Dry runs: rows older than the cut-off kept because they were written before the table
    /// joined the publication ([`super::Joined`]): never relayed.
    pub before_join: u64,
    pub dropped: Vec<Dropped>,
    pub kept: Vec<Kept>,
    pub stopped: bool,
}

/// A partition dropped (dry: that would be).
#[derive(Debug, Clone)]
pub struct Dropped {
    pub name: TableName,
    pub rows: u64,
    /// How long the outbox was locked (DETACH to COMMIT); `None` in a dry run.
    pub locked: Option<Duration>,
}

/// A partition kept whole, and why; `deleted` when its old rows were deleted instead.
#[derive(Debug, Clone)]
pub struct Kept {
    pub name: TableName,
    pub why: String,
    pub deleted: Option<u64>,
}

impl Kept {
    pub(super) fn whole(name: &TableName, why: String) -> Kept {
        Kept { name: name.clone(), why, deleted: None }
    }
}

impl TableReport {
    pub(super) fn new(plan: &Plan, cutoff: &str) -> TableReport {
        TableReport {
            table: plan.table.name.clone(),
            cutoff: cutoff.to_string(),
            deleted: 0,
            batches: 0,
            not_yet: 0,
            before_join: 0,
            dropped: Vec::new(),
            kept: Vec::new(),
            stopped: false,
        }
    }
}

impl Report {
    /// Rows deleted plus the rows of dropped partitions.
    pub fn rows(&self) -> u64 {
        self.tables.iter().map(|t| t.deleted + t.dropped.iter().map(|d| d.rows).sum::<u64>()).sum()
    }

    pub fn partitions_dropped(&self) -> u64 {
        self.tables.iter().map(|t| t.dropped.len() as u64).sum()
    }

    pub fn partitions_kept(&self) -> u64 {
        self.tables.iter().map(|t| t.kept.len() as u64).sum()
    }

    /// The lines `walrelay purge` prints.
    pub fn render(&self) -> String {
        let (delete, drop) =
            if self.dry_run { ("would delete", "would drop") } else { ("deleted", "dropped") };
        let mut o = String::new();
        if self.unconfirmed.is_some() {
            let _ = writeln!(
                o,
                "purge --dry-run: rows older than {} (before {}) a purge would delete once the slot confirms {} (the WAL when the purge began); it is at {} after {} ms, so a purge now would delete nothing",
                crate::duration::format(self.older_than),
                self.cutoff,
                self.horizon.lsn,
                self.confirmed,
                self.waited.as_millis(),
            );
        } else {
            let _ = writeln!(
            o,
            "purge{}: rows older than {} (before {}) whose events the slot has confirmed: it is at {}, past {} (the WAL when the purge began; waited {} ms)",
            if self.dry_run { " --dry-run" } else { "" },
            crate::duration::format(self.older_than),
            self.cutoff,
            self.confirmed,
            self.horizon.lsn,
            self.waited.as_millis(),
        );
        }
        for t in &self.tables {
            let name = &t.table;
            if t.deleted > 0 || (t.dropped.is_empty() && t.kept.is_empty()) {
                let _ = writeln!(
                    o,
                    "{name}: {delete} {} in {} batch{}",
                    rows(t.deleted),
                    t.batches,
                    if t.batches == 1 { "" } else { "es" }
                );
            }
            if t.not_yet > 0 {
                let _ = writeln!(
                    o,
                    "{name}: kept {} older than the cut-off: written by transactions not yet known to be relayed (a later run takes them)",
                    rows(t.not_yet)
                );
            }
            if t.before_join > 0 {
                let _ = writeln!(
                    o,
                    "{name}: kept {} older than the cut-off: written before the table joined the publication, so never relayed (re-publish them with `walrelay audit --since <when they were written> --repair`, then `walrelay purge --force` deletes them)",
                    rows(t.before_join)
                );
            }
            for d in &t.dropped {
                let locked = match d.locked {
                    Some(l) => format!("; outbox locked {} ms", l.as_millis()),
                    None => String::new(),
                };
                let _ =
                    writeln!(o, "{name}: {drop} partition {} ({}{locked})", d.name, rows(d.rows));
            }
            for k in &t.kept {
                let deleted = match k.deleted {
                    Some(n) => format!("; {delete} {} older than the cut-off", rows(n)),
                    None => String::new(),
                };
                // A table kept whole (not in the publication) is named once.
                let part = match k.name == *name {
                    true => String::new(),
                    false => format!(" partition {}", k.name),
                };
                let _ = writeln!(o, "{name}: kept{part}: {}{deleted}", k.why);
            }
        }
        let dropped = self.partitions_dropped();
        let dropped_rows: u64 = self.tables.iter().flat_map(|t| &t.dropped).map(|d| d.rows).sum();
        let _ = writeln!(
            o,
            "purge: {delete} {}, {drop} {dropped} partition{}{} in {:.1} s{}",
            rows(self.tables.iter().map(|t| t.deleted).sum()),
            if dropped == 1 { "" } else { "s" },
            if dropped > 0 { format!(" ({})", rows(dropped_rows)) } else { String::new() },
            self.elapsed.as_secs_f64(),
            if self.stopped { " (stopped before the end)" } else { "" }
        );
        o
    }
}

fn rows(n: u64) -> String {
    format!("{n} row{}", if n == 1 { "" } else { "s" })
}
