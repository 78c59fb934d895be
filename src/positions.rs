//! Where the relay stands in the WAL, as one value: what the relay loop's `Progress` knows
//! (received, acknowledged, vouched for, confirmed, resumed, and the commit times that make the
//! lag in seconds) and `/metrics` and `/readyz` read, together.

use crate::clock::unix_micros;
use crate::lsn::Lsn;

/// Where the relay stands in the WAL. The relay loop's `Progress` (relay/progress.rs) owns these
/// facts and publishes them together once per turn of the loop; `/metrics` and `/readyz` read
/// one snapshot, so a scrape never pairs the server's newest position with an older
/// confirmation, and nothing else writes them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Positions {
    /// The newest WAL position the server reported (data and keepalives). Kept across sessions.
    pub received: Lsn,
    /// Every record before it acknowledged by Kafka (I2); exactly-once, what is confirmed is
    /// capped below it by the committed Kafka transactions (I9).
    pub acked: Lsn,
    /// What the catalog checks vouched for (`source::watch`).
    pub vouched: Lsn,
    /// What the slot is confirmed to: the lower of `acked` and `vouched`, as handed to the
    /// replication client.
    pub confirmed: Lsn,
    /// The slot's confirmed position when this session started.
    pub resumed: Lsn,
    /// Commit time (µs since the Unix epoch) of the oldest transaction read and not yet
    /// confirmed; `None` when caught up. Kept across sessions: the next one replays it.
    pub oldest_unconfirmed_commit: Option<i64>,
    /// Commit time (µs since the Unix epoch) of the last transaction confirmed.
    pub last_confirmed_commit: Option<i64>,
}

impl Positions {
    /// Replication lag: the server's WAL end minus what the slot has confirmed.
    pub fn lag_bytes(&self) -> u64 {
        self.received.bytes_since(self.confirmed)
    }

    /// Seconds since the commit of the oldest transaction read but not confirmed; 0 when
    /// caught up. PostgreSQL's clock against this host's: skew shows up here, never below 0.
    pub fn lag_seconds(&self) -> f64 {
        match self.oldest_unconfirmed_commit {
            None => 0.0,
            Some(oldest) => (unix_micros() - oldest).max(0) as f64 / 1e6,
        }
    }
}
