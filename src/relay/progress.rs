//! Where the session stands in the WAL, with one owner: what the server reported, what Kafka
//! acknowledged, what the catalog checks vouched for, what the slot is confirmed to, and where
//! the session resumed.
//!
//! Two sides have a say in what may be confirmed: delivery, up to which every record is
//! acknowledged (I2, `Delivery::progress`), and the catalog watch, up to which the publication
//! and the outbox tables are known to be what the relay expects (`source::watch`). The target
//! is the lower of the two; it is computed here only, and only here is it written to the
//! replication client (which sends it in its standby status updates). The positions are
//! published to the metrics as one snapshot (`metrics::Positions`), which `/metrics` and
//! `/readyz` read.

use std::sync::Arc;

use pgwire_replication::ReplicationClient;

use crate::delivery::Acked;
use crate::lsn::Lsn;
use crate::metrics::{Metrics, Positions};

pub(super) struct Progress {
    /// This session's positions; `confirmed` is the last one handed to the replication client.
    positions: Positions,
    metrics: Arc<Metrics>,
}

/// What a report found.
pub(super) struct Reported {
    /// The position the replication client holds now.
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
        Progress { positions, metrics: metrics.clone() }
    }

    /// The server reported its WAL end (with data, or in a keepalive).
    pub fn received(&mut self, wal_end: Lsn) {
        self.positions.received = self.positions.received.max(wal_end);
    }

    /// Hands the replication client what may be confirmed, if it moved: acknowledged (`acked`)
    /// and vouched for by the catalog watch (`vouched`). Publishes the positions.
    pub fn report(&mut self, acked: Acked, vouched: Lsn, stream: &ReplicationClient) -> Reported {
        let p = &mut self.positions;
        p.acked = acked.lsn;
        p.vouched = vouched;
        let target = acked.lsn.min(vouched);
        if target > p.confirmed {
            stream.update_applied_lsn(target.into());
            p.confirmed = target;
        }
        if acked.last_confirmed_commit.is_some() {
            p.last_confirmed_commit = acked.last_confirmed_commit;
        }
        match acked.oldest_unconfirmed_commit {
            Some(oldest) => p.oldest_unconfirmed_commit = Some(oldest),
            // Caught up, once this session has moved past where it resumed. Before that, what
            // the last session left unconfirmed is still to be replayed.
            None if acked.lsn > p.resumed => p.oldest_unconfirmed_commit = None,
            None => {}
        }
        self.metrics.publish_positions(*p);
        Reported { at: p.confirmed, check_wanted: acked.lsn > vouched }
    }
}
