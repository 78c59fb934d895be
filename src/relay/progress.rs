//! Where the session stands in the WAL, with one owner: what the server reported, what Kafka
//! acknowledged, what the catalog checks vouched for, what the slot is confirmed to, and where
//! the session resumed.
//!
//! Three things have a say in what may be confirmed: the acknowledged prefix, up to which every
//! record is acknowledged (I2, `Delivery::progress`); exactly-once, the ceiling of the Kafka
//! transactions, past which nothing is in a committed one (I9, `Transactions::ceiling`); and
//! the catalog watch, up to which the publication and the outbox tables are known to be what
//! the relay expects (`source::watch`). The target is the lowest of the three; it is computed
//! here only, and what it says to hand the replication
//! client (which sends it in its standby status updates) is the only position the session hands
//! it (`Session::report_position`). The positions are published to the metrics as one snapshot
//! (`positions::Positions`), which `/metrics` and `/readyz` read.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::delivery::Acked;
use crate::lsn::Lsn;
use crate::metrics::Metrics;
use crate::positions::Positions;

pub(super) struct Progress {
    /// This session's positions; `confirmed` is the last one handed to the replication client.
    positions: Positions,
    metrics: Arc<Metrics>,
    /// When the confirmed position was last logged (at debug, at most once a second): a
    /// relay's log then shows how far it got when a test or an operator asks why.
    logged: Option<Instant>,
}

/// How often a moving confirmed position is logged, at most.
const LOG_EVERY: Duration = Duration::from_secs(1);

/// What a report found.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Reported {
    /// What may be confirmed now, when it moved: to hand the replication client.
    pub moved: Option<Lsn>,
    /// What may be confirmed.
    pub at: Lsn,
    /// Acknowledgements are ahead of what the catalog watch vouched for: a check now would let
    /// the slot follow them.
    pub check_wanted: bool,
}

impl Progress {
    /// A session that resumed at the slot's confirmed position `resumed`.
    pub fn new(resumed: Lsn, metrics: &Arc<Metrics>) -> Progress {
        // The server's position and the oldest unconfirmed commit outlive a session: what the
        // last one left unconfirmed is replayed by this one, and its lag keeps growing through
        // the reconnects instead of reading 0.
        let last = metrics.positions();
        let positions = Positions {
            received: last.received.max(resumed),
            acked: resumed,
            vouched: resumed,
            confirmed: resumed,
            resumed,
            ..last
        };
        metrics.publish_positions(positions);
        Progress { positions, metrics: metrics.clone(), logged: None }
    }

    /// The server reported its WAL end (with data, or in a keepalive).
    pub fn received(&mut self, wal_end: Lsn) {
        self.positions.received = self.positions.received.max(wal_end);
    }

    /// What Kafka acknowledged at the last report.
    pub fn acked(&self) -> Lsn {
        self.positions.acked
    }

    /// What may be confirmed: min(acknowledged, the Kafka transactions' ceiling, vouched for
    /// by the catalog watch). Publishes the positions.
    pub fn report(&mut self, acked: Acked, vouched: Lsn) -> Reported {
        let p = &mut self.positions;
        p.acked = acked.acked;
        p.vouched = vouched;
        let delivered = acked.confirmable();
        let target = delivered.min(vouched);
        let moved = (target > p.confirmed).then_some(target);
        p.confirmed = p.confirmed.max(target);
        if acked.last_confirmed_commit.is_some() {
            p.last_confirmed_commit = acked.last_confirmed_commit;
        }
        match acked.oldest_unconfirmed_commit {
            Some(oldest) => p.oldest_unconfirmed_commit = Some(oldest),
            // Caught up, once this session has moved past where it resumed. Before that, what
            // the last session left unconfirmed is still to be replayed.
            None if delivered > p.resumed => p.oldest_unconfirmed_commit = None,
            None => {}
        }
        self.metrics.publish_positions(*p);
        if moved.is_some() && self.logged.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
            self.logged = Some(Instant::now());
            tracing::debug!(confirmed = %p.confirmed, acked = %p.acked, vouched = %p.vouched, "position confirmed");
        }
        Reported { moved, at: p.confirmed, check_wanted: delivered > vouched }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acked(lsn: u64, oldest: Option<i64>, last: Option<i64>) -> Acked {
        Acked {
            acked: Lsn(lsn),
            ceiling: None,
            oldest_unconfirmed_commit: oldest,
            last_confirmed_commit: last,
        }
    }

    #[test]
    fn the_kafka_transactions_ceiling_caps_what_is_confirmed_below_the_acked_prefix() {
        let metrics = Metrics::new();
        let mut p = Progress::new(Lsn(100), &metrics);
        let capped = Acked { ceiling: Some(Lsn(150)), ..acked(300, Some(7), None) };
        let r = p.report(capped, Lsn(1000));
        assert_eq!(r, Reported { moved: Some(Lsn(150)), at: Lsn(150), check_wanted: false });
        assert_eq!(metrics.positions().acked, Lsn(300), "the acked prefix is still reported");
        let r = p.report(Acked { ceiling: Some(Lsn(120)), ..capped }, Lsn(1000));
        assert_eq!(r.at, Lsn(150), "a confirmed position never moves back");
    }

    #[test]
    fn progress_confirms_the_lower_of_acked_and_vouched_and_publishes_one_snapshot() {
        let metrics = Metrics::new();
        let mut p = Progress::new(Lsn(100), &metrics);
        p.received(Lsn(500));
        let r = p.report(acked(300, Some(7), Some(5)), Lsn(200));
        assert_eq!(r, Reported { moved: Some(Lsn(200)), at: Lsn(200), check_wanted: true });
        let want = Positions {
            received: Lsn(500),
            acked: Lsn(300),
            vouched: Lsn(200),
            confirmed: Lsn(200),
            resumed: Lsn(100),
            oldest_unconfirmed_commit: Some(7),
            last_confirmed_commit: Some(5),
        };
        assert_eq!(metrics.positions(), want);
        assert_eq!(metrics.positions().lag_bytes(), 300);
        // Nothing new: nothing to hand over; a smaller server position never moves back.
        p.received(Lsn(400));
        let r = p.report(acked(300, Some(7), None), Lsn(200));
        assert_eq!(r, Reported { moved: None, at: Lsn(200), check_wanted: true });
        assert_eq!(metrics.positions(), want, "the last confirmed commit is kept");
        let r = p.report(acked(300, None, Some(9)), Lsn(300));
        assert_eq!(r, Reported { moved: Some(Lsn(300)), at: Lsn(300), check_wanted: false });
        let caught_up = metrics.positions();
        assert_eq!((caught_up.oldest_unconfirmed_commit, caught_up.lag_bytes()), (None, 200));
    }

    #[test]
    fn a_new_session_keeps_the_servers_position_and_the_unconfirmed_commit_until_it_moves_on() {
        let metrics = Metrics::new();
        let mut first = Progress::new(Lsn(100), &metrics);
        first.received(Lsn(900));
        first.report(acked(100, Some(42), None), Lsn(1000));
        // The session ends before anything was confirmed; the next resumes where it did.
        let mut next = Progress::new(Lsn(100), &metrics);
        let resumed = metrics.positions();
        assert_eq!((resumed.received, resumed.confirmed), (Lsn(900), Lsn(100)));
        assert_eq!(resumed.oldest_unconfirmed_commit, Some(42), "replayed, still unconfirmed");
        next.report(acked(100, None, None), Lsn(1000));
        assert_eq!(metrics.positions().oldest_unconfirmed_commit, Some(42), "not past it yet");
        next.report(acked(150, None, Some(42)), Lsn(1000));
        assert_eq!(metrics.positions().oldest_unconfirmed_commit, None, "caught up");
        assert_eq!(metrics.positions().last_confirmed_commit, Some(42));
    }
}
