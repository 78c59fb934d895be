//! Where the session stands in the WAL, with one owner: the position the slot may be confirmed
//! at, and the one handed to the replication client.
//!
//! Two sides have a say in what may be confirmed: delivery, up to which every record is
//! acknowledged (I2, `Delivery::progress`), and the catalog watch, up to which the publication
//! and the outbox tables are known to be what the relay expects (`source::watch`). The target
//! is the lower of the two; it is computed here only, and only here is it written to the
//! replication client (which sends it in its standby status updates) and to the metrics.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use pgwire_replication::ReplicationClient;

use crate::lsn::Lsn;
use crate::metrics::Metrics;

pub(super) struct Progress {
    /// The last position handed to the replication client; the slot's confirmed position at
    /// the start of the session.
    reported: Lsn,
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
        Progress { reported: resumed, metrics: metrics.clone() }
    }

    /// Hands the replication client what may be confirmed, if it moved: acknowledged (`acked`)
    /// and vouched for by the catalog watch (`vouched`).
    pub fn report(&mut self, acked: Lsn, vouched: Lsn, stream: &ReplicationClient) -> Reported {
        let target = acked.min(vouched);
        if target > self.reported {
            stream.update_applied_lsn(target.into());
            self.reported = target;
            self.metrics.confirmed_lsn.store(target.as_u64(), Relaxed);
        }
        Reported { at: self.reported, check_wanted: acked > vouched }
    }
}
