//! `[limits]` (what may be in flight) and `[http]` (the operational endpoint).

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use super::{invalid, required, section, ConfigError, Options};

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

/// `[http]`: the operational endpoint.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpConfig {
    pub listen: SocketAddr,
    /// `/readyz` fails while the slot lags the server by more than this.
    pub ready_max_lag_bytes: u64,
    /// `/readyz` fails while the oldest record handed to the producer has waited longer than
    /// this for the broker's acknowledgement: the broker hangs, or the relay cannot deliver.
    pub ready_max_unacked: Duration,
    /// `table_metrics`: events relayed and the newest event's commit time per outbox table
    /// (bounded; with a thousand tenants' tables, two thousand series). Default true.
    pub table_metrics: bool,
    /// `console_actions`: the console may start a dry-run replay or an audit, with
    /// `console_token` as its bearer token. Default false: the console only reads.
    pub console_actions: bool,
    pub console_token: Option<String>,
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

impl std::fmt::Debug for HttpConfig {
    /// The token is a secret: its presence only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpConfig")
            .field("listen", &self.listen)
            .field("ready_max_lag_bytes", &self.ready_max_lag_bytes)
            .field("ready_max_unacked", &self.ready_max_unacked)
            .field("table_metrics", &self.table_metrics)
            .field("console_actions", &self.console_actions)
            .field(
                "console_token",
                &self.console_token.as_ref().map(|_| crate::options::secret::MASK),
            )
            .finish()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    listen: Option<String>,
    ready_max_lag_bytes: Option<u64>,
    ready_max_unacked_s: Option<u64>,
    table_metrics: Option<bool>,
    console_actions: Option<bool>,
    console_token: Option<String>,
}

pub(super) fn parse_http(opts: &Options) -> Result<HttpConfig, ConfigError> {
    const S: &str = "http";
    let raw: RawHttp = section::from_options(S, opts)?;
    let listen = required(S, raw.listen, "listen", "set listen = \"127.0.0.1:9187\"")?;
    let listen = listen
        .parse()
        .map_err(|_| invalid(S, "listen", &listen, "must be an address like 127.0.0.1:9187"))?;
    let ready_max_lag_bytes = raw.ready_max_lag_bytes.unwrap_or(256 * 1024 * 1024);
    let ready_max_unacked = Duration::from_secs(raw.ready_max_unacked_s.unwrap_or(15));
    if ready_max_unacked.is_zero() {
        return Err(invalid(S, "ready_max_unacked_s", "0", "must be at least 1"));
    }
    let table_metrics = raw.table_metrics.unwrap_or(true);
    let console_actions = raw.console_actions.unwrap_or(false);
    let console_token = raw.console_token.filter(|t| !t.is_empty());
    match (console_actions, &console_token) {
        (true, None) => {
            return Err(invalid(
                S,
                "console_actions",
                "true",
                "needs console_token, the bearer token the console's actions are asked with: set WALRELAY_HTTP_CONSOLE_TOKEN (or [http] console_token) to a long random string",
            ))
        }
        (_, Some(token)) if token.len() < 16 => {
            return Err(invalid(S, "console_token", "", "must be at least 16 characters: a long random string"))
        }
        _ => {}
    }
    Ok(HttpConfig {
        listen,
        ready_max_lag_bytes,
        ready_max_unacked,
        table_metrics,
        console_actions,
        console_token,
    })
}
