//! Which outbox rows have certainly been relayed: the horizon that retention deletes behind.
//!
//! A row is safe to delete once the event of its INSERT is acknowledged by Kafka, i.e. once the
//! slot's confirmed position has passed the commit of the transaction that inserted it. The
//! catalog can't map a row to its commit LSN, so purge uses two facts read together instead:
//!
//! * `X0` — the xmin of a snapshot taken now (`pg_snapshot_xmin(pg_current_snapshot())`): the
//!   oldest transaction still running. Every transaction whose xid precedes `X0` had ended (committed
//!   or rolled back) when the snapshot was taken.
//! * `L0` — the WAL insert position read after that snapshot, in the same statement
//!   (`pg_current_wal_insert_lsn()`; a statement's snapshot is taken before its expressions run).
//!   A transaction inserts its commit record before it leaves the set snapshots see as running,
//!   so every transaction that had ended at `X0`'s snapshot has its commit record before `L0`.
//!
//! Purge then waits until the slot's `confirmed_flush_lsn` ≥ `L0` ([`super::slot::wait_confirmed`]).
//! walrelay confirms a position only when every transaction committed before it is acknowledged
//! (I2, and I3 for idle keepalives), so from then on every committed transaction preceding `X0`
//! has been relayed — and purge deletes only rows whose `xmin` precedes `X0` ([`Horizon::inserted_before_sql`]).
//! A row whose xmin is a subtransaction's xid is covered too: a subtransaction gets its xid after
//! its parent, so if the subxid precedes `X0` so does the parent's, which had ended.
//!
//! Rows that don't pass (inserted by a transaction running at the snapshot or later, including a
//! row with an old `created_at` committed while the relay was down, or a row updated since) are
//! kept for a later run. The check is conservative: a transaction that ended before the snapshot
//! but has a higher xid than the oldest running one waits for the next run.
//!
//! ## Comparing xids across wraparound
//!
//! xids are 32-bit and wrap around; `X0` comes as a 64-bit `xid8` and is reduced to its low 32
//! bits ([`Horizon::xid`]). The test is `age(xmin) > age(X0)`: PostgreSQL's `age(x)` is
//! `(int32)(N - x)` for a fixed N per transaction (its own xid, or the next xid when it first
//! asks) and `INT_MAX` for the permanent xids 1 and 2. N is at or after every xid assigned
//! before the statement ran, so for a row whose xmin is at or before N, both ages count back
//! from the same N, both within 2^31 (PostgreSQL forbids an unfrozen xid older than that), and
//! `age(xmin) > age(X0)` holds exactly when xmin precedes `X0` ([`inserted_before`] is the same
//! arithmetic, unit-tested around the wrap). An xmin after N reads as a negative age: kept, and
//! rightly, since it follows `X0` too. The only imprecision is on the keeping side: a frozen
//! row whose raw xmin is more than 2^31 transactions old also reads as negative and is kept.

use super::connect::Control;
use crate::error::{Error, Result};
use crate::lsn::Lsn;

/// `L0` and `X0`, read together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Horizon {
    /// `L0`: the WAL insert position after the snapshot.
    pub lsn: Lsn,
    /// `X0`: the snapshot's xmin, as a 64-bit (epoch-qualified) xid.
    pub xmin: u64,
}

impl Horizon {
    /// `X0` as the 32-bit xid row headers carry.
    pub fn xid(&self) -> u32 {
        self.xmin as u32
    }

    /// The SQL condition "this row was inserted by a transaction that had ended at the
    /// snapshot", with `X0` as parameter `$param` (bind [`Horizon::xid_text`]).
    pub fn inserted_before_sql(param: usize) -> String {
        format!("pg_catalog.age(xmin) > pg_catalog.age(${param}::text::xid)")
    }

    /// `X0`'s 32-bit xid as text, the parameter of [`Horizon::inserted_before_sql`].
    pub fn xid_text(&self) -> String {
        self.xid().to_string()
    }
}

/// Reads `L0` and `X0` in one statement (the snapshot first, see the module doc).
pub async fn now(control: &Control) -> Result<Horizon> {
    if control.server.in_recovery {
        return Err(Error::definite(
            format!("{} is a standby: rows can only be purged on the primary", control.endpoint),
            "point [source] url at the primary (with several hosts, add target_session_attrs=read-write)",
        ));
    }
    let row = control
        .query_one(
            "cannot read the WAL position and the oldest running transaction",
            "SELECT pg_catalog.pg_current_wal_insert_lsn(), \
             pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())::text",
            &[],
        )
        .await?;
    let xmin: String = row.get(1);
    let xmin = xmin.parse().map_err(|_| {
        Error::transient_msg(format!("the server returned {xmin:?} as a snapshot's xmin"))
    })?;
    Ok(Horizon { lsn: row.get(0), xmin })
}

/// What `age(xmin) > age(x0)` computes in a transaction whose `age()` counts from `now`:
/// whether `xmin` precedes `x0`. The arithmetic of PostgreSQL's `xid_age`, for tests and readers.
#[cfg(test)]
fn inserted_before(xmin: u32, x0: u32, now: u32) -> bool {
    fn age(xid: u32, now: u32) -> i32 {
        // Invalid, bootstrap and frozen xids are "infinitely old".
        if xid < 3 {
            return i32::MAX;
        }
        now.wrapping_sub(xid) as i32
    }
    age(xmin, now) > age(x0, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn horizon_xid_is_the_low_32_bits_of_the_64_bit_xmin() {
        let h = Horizon { lsn: Lsn(1), xmin: (7u64 << 32) | 1234 };
        assert_eq!(h.xid(), 1234);
        assert_eq!(h.xid_text(), "1234");
        assert_eq!(
            Horizon::inserted_before_sql(3),
            "pg_catalog.age(xmin) > pg_catalog.age($3::text::xid)"
        );
    }

    #[test]
    fn horizon_rows_inserted_before_x0_pass_and_later_ones_do_not() {
        let (x0, now) = (1_000, 1_050);
        assert!(inserted_before(999, x0, now));
        assert!(inserted_before(3, x0, now));
        assert!(!inserted_before(1_000, x0, now), "X0 itself was running");
        assert!(!inserted_before(1_001, x0, now));
        assert!(!inserted_before(1_050, x0, now));
        // Assigned after `now` was fixed (a negative age): after X0 as well.
        assert!(!inserted_before(1_051, x0, now));
        // Bootstrap and frozen (pre-9.4) xids are older than anything.
        assert!(inserted_before(1, x0, now));
        assert!(inserted_before(2, x0, now));
    }

    #[test]
    fn horizon_comparison_holds_across_xid_wraparound() {
        // X0 just before the wrap, now just after it.
        let (x0, now) = (u32::MAX - 10, 20);
        assert!(inserted_before(u32::MAX - 11, x0, now));
        assert!(inserted_before(u32::MAX - 2_000_000_000, x0, now));
        assert!(!inserted_before(u32::MAX - 10, x0, now));
        assert!(!inserted_before(u32::MAX, x0, now));
        assert!(!inserted_before(3, x0, now), "xid 3 comes right after the wrap, after X0");
        assert!(!inserted_before(19, x0, now));
        // X0 just after the wrap: rows from before the wrap precede it.
        let (x0, now) = (5, 900);
        assert!(inserted_before(u32::MAX - 100, x0, now));
        assert!(inserted_before(4, x0, now));
        assert!(!inserted_before(6, x0, now));
    }

    #[test]
    fn horizon_a_row_more_than_two_billion_transactions_old_is_kept_never_deleted_wrongly() {
        // A frozen row whose raw xmin is 2^31 + 5 behind `now` reads as newer than X0: the
        // comparison errs on the keeping side, never the deleting one.
        let now: u32 = 3_000_000_000;
        let x0 = now - 10;
        let ancient = now.wrapping_sub((1u32 << 31) + 5);
        assert!(!inserted_before(ancient, x0, now));
        // Exhaustively near X0, for several positions of the wrap: never "before" unless it is.
        for base in [3u32, 1 << 31, u32::MAX - 50] {
            let x0 = base.wrapping_add(40);
            let now = x0.wrapping_add(30);
            for d in 0..80u32 {
                let xmin = base.wrapping_add(d);
                if xmin < 3 {
                    continue;
                }
                assert_eq!(inserted_before(xmin, x0, now), d < 40, "base {base} d {d}");
            }
        }
    }
}
