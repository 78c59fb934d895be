//! `[audit]`: `walrelay run` audits a trailing window of the outbox every `interval` (see
//! `crate::audit::task`), on its own connection and Kafka reader.

use std::time::Duration;

use serde::Deserialize;

use super::{invalid, section, ConfigError, Options};

/// `[audit]`: every `interval`, the events committed from `window` ago to `settle` ago are
/// compared with what Kafka holds; the counts go to `walrelay_audit_events`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditConfig {
    pub interval: Duration,
    pub window: Duration,
    /// Rows committed less than this long ago are pending, never missing.
    pub settle: Duration,
}

impl AuditConfig {
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(3_600);
    pub const DEFAULT_SETTLE: Duration = Duration::from_secs(300);
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAudit {
    interval: Option<String>,
    window: Option<String>,
    settle: Option<String>,
}

pub(super) fn parse_audit(opts: &Options) -> Result<AuditConfig, ConfigError> {
    const S: &str = "audit";
    let raw: RawAudit = section::from_options(S, opts)?;
    let duration = |key: &str, text: Option<String>, default: Duration| match text {
        Some(text) => {
            crate::duration::parse(&text).map_err(|reason| invalid(S, key, &text, &reason))
        }
        None => Ok(default),
    };
    let interval = duration("interval", raw.interval, AuditConfig::DEFAULT_INTERVAL)?;
    if interval < Duration::from_secs(1) {
        return Err(invalid(S, "interval", "0", "must be at least 1s, e.g. \"1h\""));
    }
    let settle = duration("settle", raw.settle, AuditConfig::DEFAULT_SETTLE)?;
    // By default each audit overlaps the last by ten minutes, so no event falls between two.
    let window = duration("window", raw.window, interval + settle + Duration::from_secs(600))?;
    if window <= interval + settle {
        let text = crate::duration::format(window);
        return Err(invalid(
            S,
            "window",
            &text,
            &format!(
                "must be longer than interval + settle ({} + {}): consecutive audits must overlap by more than settle, or the events between two windows are never judged; e.g. window = \"{}\"",
                crate::duration::format(interval),
                crate::duration::format(settle),
                crate::duration::format(interval + settle + Duration::from_secs(600)),
            ),
        ));
    }
    Ok(AuditConfig { interval, window, settle })
}
