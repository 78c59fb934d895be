//! The transaction an event was committed in: made by the relay's assembler from pgoutput's
//! Begin (or for a logical message, from the message itself) and by a replay from the row's
//! commit, and read by every stage after it: the envelope's headers, the delivery's frontier
//! and its Kafka transactions.

use crate::lsn::Lsn;

/// The transaction an event was committed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Txn {
    /// Commit time, microseconds since the Unix epoch.
    pub commit_micros: i64,
    /// The LSN of the commit record (pgoutput Begin's `final_lsn`); for a non-transactional
    /// message, the message's own.
    pub commit_lsn: Lsn,
    /// The transaction id; 0 for a non-transactional message.
    pub xid: u32,
}
