//! `[limits]`: what may be in flight.

use std::time::Duration;

use serde::Deserialize;

use super::{invalid, section, ConfigError, Options};

/// `[limits]`: the bounds on what is read from the WAL but not yet acknowledged (I7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub inflight_records: usize,
    pub inflight_bytes: usize,
    /// How long a graceful stop waits for outstanding acknowledgements.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            inflight_records: 20_000,
            inflight_bytes: 16 * 1024 * 1024,
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    inflight_records: Option<u64>,
    inflight_bytes: Option<u64>,
    shutdown_grace_ms: Option<u64>,
}

pub(super) fn parse_limits(opts: &Options) -> Result<Limits, ConfigError> {
    const S: &str = "limits";
    let raw: RawLimits = section::from_options(S, opts)?;
    let mut limits = Limits::default();
    let size = |key: &str, n: u64| {
        usize::try_from(n).map_err(|_| invalid(S, key, &n.to_string(), "is too large"))
    };
    if let Some(n) = raw.inflight_records {
        limits.inflight_records = size("inflight_records", n)?;
    }
    if let Some(n) = raw.inflight_bytes {
        limits.inflight_bytes = size("inflight_bytes", n)?;
    }
    if let Some(ms) = raw.shutdown_grace_ms {
        limits.shutdown_grace = Duration::from_millis(ms);
    }
    if limits.inflight_records == 0 || limits.inflight_bytes < 1024 {
        return Err(invalid(
            S,
            "inflight_records/inflight_bytes",
            "",
            "must allow at least one record and 1024 bytes",
        ));
    }
    Ok(limits)
}
