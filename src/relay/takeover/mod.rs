//! Taking over a Debezium connector's slot without replaying what Debezium delivered.
//!
//! Debezium confirms its slot only when it commits offsets, so its slot lags what it delivered;
//! its offsets ([`offsets`]) say exactly what that was. On walrelay's first run on the
//! slot, a session streams from the slot's confirmed position as always and this screen drops
//! every transaction Debezium delivered whole, the way Debezium's own `WalPositionLocator`
//! skips up to its stored position. Skipped transactions still pass Begin and Commit to
//! delivery, so the slot is confirmed past them as usual (I2): they were delivered, by
//! Debezium.
//!
//! "First run" is read from PostgreSQL alone: the slot's confirmed position is at or before
//! the offsets' `lsn_commit`. Debezium flushes at most `lsn_commit` to the slot, and walrelay
//! confirms past it as soon as it relays a transaction of its own, so from then on the offsets
//! are older than the slot and are left alone. Nothing else is recorded anywhere.
//!
//! A transaction counts as delivered when it ends at or before `lsn_commit`, or when it is the
//! transaction Debezium stopped in (`txId`) and each of its outbox rows is at or before the last
//! delivered event (`lsn_proc`). The rows of that transaction are held until its Commit proves
//! Debezium delivered all of them; one row beyond sends the held rows and the rest on (those
//! Debezium had delivered are delivered twice: a transaction is never split). The screen is a
//! start-up decision plus one comparison per transaction until the position is passed; then
//! the relay drops it.

pub(crate) mod offsets;

use std::sync::Arc;

use self::offsets::{Delivered, Unusable};
use crate::config::Limits;
use crate::encoder::Encoder;
use crate::lsn::Lsn;
use crate::router::Record;
use crate::txn::Txn;

use super::Step;

/// A row held back while it is open whether Debezium delivered its whole transaction, encoded
/// as every other row is: released, it goes out as it is.
pub struct Held {
    pub record: Record,
    /// `schema.table` of the row.
    pub table: Arc<str>,
    pub lsn: Lsn,
    /// The transaction it was read in.
    pub txn: Txn,
}

/// What the relay does with a step.
pub enum Screened {
    /// Handle it as usual.
    Pass,
    /// Delivered by Debezium (or held): not for delivery.
    Taken,
    /// Publish these held rows first, then handle the step as usual.
    Release(Vec<Held>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Current {
    /// Between transactions.
    Between,
    /// In a transaction Debezium delivered whole.
    Skipping,
    /// In the transaction Debezium stopped in, every row so far delivered.
    InFlight { rows_at_event: u64 },
    /// In that transaction, past what Debezium delivered.
    Relaying,
}

pub struct Takeover {
    delivered: Delivered,
    current: Current,
    held: Vec<Held>,
    held_bytes: usize,
    /// At most what the relay keeps in flight is held (I7): `[limits]` records and bytes.
    max_held: (usize, usize),
    /// Transactions (and non-transactional messages) skipped, the events in them, and the end
    /// of the last one.
    transactions: u64,
    events: u64,
    through: Option<Lsn>,
    finished: bool,
}

/// The server's WAL position, which every position of its own WAL is at or before.
pub const WAL_END_SQL: &str = "SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() \
                               ELSE pg_current_wal_lsn() END";

/// What Debezium's offsets mean for the first run, against the slot and the server's WAL. The
/// one judgement both the takeover ([`decide`]) and `walrelay check` act on.
pub enum Verdict {
    /// They can't be read or parsed: nothing is skipped.
    Unusable(Unusable),
    /// They name positions past this server's WAL: another database's; nothing is skipped.
    OtherDatabase(Delivered),
    /// The slot has confirmed past them: nothing is left to skip.
    Older(Delivered),
    /// The transactions ending after the slot's position and at or before `commit` (and the
    /// in-flight transaction's rows up to its last event) were delivered by Debezium: skip them.
    Skip(Delivered),
}

/// Judges `offsets` against the slot's confirmed position and `wal_end`, the server's WAL
/// position now.
pub fn judge(offsets: Result<Delivered, Unusable>, slot_confirmed: Lsn, wal_end: Lsn) -> Verdict {
    let delivered = match offsets {
        Ok(d) => d,
        Err(e) => return Verdict::Unusable(e),
    };
    let furthest = delivered.in_flight.map_or(delivered.commit, |f| f.event.max(delivered.commit));
    if furthest > wal_end {
        Verdict::OtherDatabase(delivered)
    } else if slot_confirmed > delivered.commit {
        Verdict::Older(delivered)
    } else {
        Verdict::Skip(delivered)
    }
}

/// The first-run decision, logged either way: `Some` when the session must screen.
/// `wal_end`: the server's WAL position now.
pub fn decide(
    offsets: Result<Delivered, Unusable>,
    slot_confirmed: Lsn,
    wal_end: Lsn,
    limits: &Limits,
) -> Option<Takeover> {
    let delivered = match judge(offsets, slot_confirmed, wal_end) {
        Verdict::Unusable(Unusable { reason, hint }) => {
            tracing::warn!(%hint, "Debezium's offsets can't be used, so nothing is skipped: {reason}; relaying everything from the slot's confirmed position {slot_confirmed} (what Debezium delivered after it is delivered again)");
            return None;
        }
        Verdict::OtherDatabase(delivered) => {
            tracing::warn!(
                lsn_commit = %delivered.commit,
                %wal_end,
                hint = "point [debezium_offsets] at the offsets of the connector that streamed from this slot on this server",
                "Debezium's offsets are ahead of this server's WAL, so they are another database's; nothing is skipped"
            );
            return None;
        }
        Verdict::Older(delivered) => {
            tracing::warn!(
                lsn_commit = %delivered.commit,
                %slot_confirmed,
                hint = "expected once walrelay has confirmed transactions of its own; remove [debezium_offsets] after the takeover",
                "Debezium's offsets are older than the slot's confirmed position, so nothing is skipped"
            );
            return None;
        }
        Verdict::Skip(delivered) => delivered,
    };
    tracing::info!(
        lsn_commit = %delivered.commit,
        in_flight_xid = ?delivered.in_flight.map(|f| f.xid),
        last_event_lsn = ?delivered.in_flight.map(|f| f.event.to_string()),
        %slot_confirmed,
        "taking over from Debezium: skipping the transactions its offsets record as delivered"
    );
    Some(Takeover {
        delivered,
        current: Current::Between,
        held: Vec::new(),
        held_bytes: 0,
        max_held: (limits.inflight_records.max(1), limits.inflight_bytes.max(1)),
        transactions: 0,
        events: 0,
        through: None,
        finished: false,
    })
}

impl Takeover {
    /// Once true, every later step is Debezium's to never have seen: the relay drops the screen.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// What the relay does with `step`; a held row is encoded as it would be otherwise.
    pub fn screen(&mut self, step: &Step<'_>, encoder: &mut Encoder) -> Screened {
        match (step, self.current) {
            (Step::Begin(Txn { commit_lsn: final_lsn, xid, .. }), _) => {
                // The commit record starts before lsn_commit exactly when it ends at or before
                // it: commit records don't overlap, and lsn_commit is one's end.
                if *final_lsn < self.delivered.commit {
                    self.current = Current::Skipping;
                } else if self.delivered.in_flight.is_some_and(|f| f.xid == *xid) {
                    self.current = Current::InFlight { rows_at_event: 0 };
                } else {
                    self.finish();
                }
                Screened::Pass
            }
            (Step::Commit { end_lsn }, current) => {
                match current {
                    Current::Skipping => self.skipped(*end_lsn),
                    Current::InFlight { .. } => {
                        self.events += self.held.len() as u64;
                        self.held.clear();
                        self.skipped(*end_lsn);
                        self.finish();
                    }
                    _ => self.finish(),
                }
                self.current = Current::Between;
                Screened::Pass
            }
            (
                Step::Row { .. }
                | Step::Update { .. }
                | Step::Unplaceable { .. }
                | Step::Message(_)
                | Step::RefusedMessage(_),
                Current::Skipping,
            ) => {
                self.events += 1;
                Screened::Taken
            }
            (Step::Row { binding, tuple, lsn, txn }, Current::InFlight { rows_at_event }) => {
                let Some(f) = self.delivered.in_flight else {
                    return self.release("Debezium's offsets name no transaction");
                };
                let at_event = u64::from(*lsn == f.event);
                let delivered = *lsn < f.event
                    || (*lsn == f.event && rows_at_event < f.events_at_lsn.unwrap_or(1));
                if !delivered {
                    return self.release("Debezium delivered it only in part");
                }
                match encoder.row(binding, tuple, txn) {
                    Ok(record) => {
                        let size = record.size();
                        if self.held.len() + 1 > self.max_held.0
                            || self.held_bytes + size > self.max_held.1
                        {
                            // The row itself goes on as usual, after the held ones.
                            return self.release("it is larger than [limits] inflight_records / inflight_bytes, which bound what is held back");
                        }
                        self.held_bytes += size;
                        let table = binding.table().clone();
                        self.held.push(Held { record, table, lsn: *lsn, txn: *txn });
                        self.current =
                            Current::InFlight { rows_at_event: rows_at_event + at_event };
                        Screened::Taken
                    }
                    // Whatever Debezium made of it, walrelay handles it as it always does.
                    Err(_) => self.release("walrelay can't route one of its rows"),
                }
            }
            (
                Step::Unplaceable { .. } | Step::Message(_) | Step::RefusedMessage(_),
                Current::InFlight { .. },
            ) => self.release(
                "it holds a logical message or a row walrelay can't place, which are never held back",
            ),
            (Step::Message(m) | Step::RefusedMessage(m), Current::Between) if m.alone() => {
                // A non-transactional message moves lsn_commit to its own position.
                if m.lsn <= self.delivered.commit {
                    self.events += 1;
                    self.skipped(m.lsn);
                    Screened::Taken
                } else {
                    self.finish();
                    Screened::Pass
                }
            }
            _ => Screened::Pass,
        }
    }

    fn skipped(&mut self, end: Lsn) {
        self.transactions += 1;
        self.through = Some(end);
    }

    /// The transaction Debezium stopped in can't be shown delivered whole: all of it goes
    /// (again), since a transaction is never split.
    fn release(&mut self, why: &str) -> Screened {
        let held = std::mem::take(&mut self.held);
        self.held_bytes = 0;
        if let Some(f) = self.delivered.in_flight {
            tracing::warn!(
                xid = f.xid,
                delivered_by_debezium = held.len(),
                "relaying all of the transaction Debezium stopped in, because {why}: its first {} rows, which Debezium had delivered, are delivered again",
                held.len()
            );
        }
        self.current = Current::Relaying;
        Screened::Release(held)
    }

    fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        match self.through {
            Some(through) => tracing::info!(
                transactions = self.transactions,
                events = self.events,
                through = %through,
                "skipped {} transactions ({} events) Debezium had delivered, up to LSN {through}",
                self.transactions,
                self.events
            ),
            None => tracing::info!("Debezium's offsets: nothing left to skip on the slot"),
        }
    }
}

#[cfg(test)]
mod tests;
