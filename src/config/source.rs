//! `[source]`: where the WAL comes from: a libpq URL or `key=value` string (or libpq's `PG*`
//! environment alone), the slot, the publication, the status interval.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use super::secret::redact_url;
use super::{check_identifier, invalid, section, ConfigError, Options};

/// `[source]`: where the WAL comes from.
#[derive(Clone)]
pub struct SourceConfig {
    /// libpq-style URL or key=value string, password included (never printed).
    pub url: String,
    pub conn: tokio_postgres::Config,
    /// `sslmode` / `sslrootcert`, applied by walrelay to both connections.
    pub tls: crate::tls::Tls,
    pub slot: String,
    pub publication: String,
    /// How often the confirmed position is reported to PostgreSQL at most; also the idle
    /// wake-up. Below half of any sane `wal_sender_timeout`.
    pub status_interval: Duration,
    /// Create the slot as a failover slot (PostgreSQL 17+). `None`: wherever supported.
    pub failover: Option<bool>,
}

impl fmt::Debug for SourceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceConfig")
            .field("url", &redact_url(&self.url))
            .field("slot", &self.slot)
            .field("publication", &self.publication)
            .field("status_interval", &self.status_interval)
            .field("failover", &self.failover)
            .finish()
    }
}

/// The section as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Raw {
    url: Option<String>,
    slot: Option<String>,
    publication: Option<String>,
    status_interval_ms: Option<u64>,
    failover: Option<bool>,
}

const S: &str = "source";

pub(super) fn parse(opts: &Options) -> Result<SourceConfig, ConfigError> {
    parse_with(opts, &|k: &str| std::env::var_os(k).and_then(|v| v.into_string().ok()))
}

/// `[source]`, with libpq's environment read through `env`. Without `url` the connection comes
/// from the `PG*` variables alone, as `psql` with no arguments would connect.
pub(super) fn parse_with(
    opts: &Options,
    env: crate::libpq::Env,
) -> Result<SourceConfig, ConfigError> {
    let raw: Raw = section::from_options(S, opts)?;
    let url = raw.url.unwrap_or_default();
    // The URL itself is not repeated: one that does not parse is exactly the one whose
    // password no rule can find (a `:` or `@` lost to a typo).
    let conn_error = |reason: &str| invalid(S, "url", "", reason);
    let (plain_url, tls) = crate::tls::Tls::extract(&url, env).map_err(|r| conn_error(&r))?;
    let mut conn: tokio_postgres::Config =
        plain_url.parse().map_err(|e: tokio_postgres::Error| {
            // tokio-postgres says which part is wrong only in the error's source (an option's
            // name, never its value): "unknown option `sslcert`", "invalid value for option
            // `port`".
            let part = std::error::Error::source(&e).map(|s| format!(": {s}")).unwrap_or_default();
            conn_error(&format!("not a libpq URL or connection string: {e}{part}"))
        })?;
    conn.ssl_mode(match tls.mode {
        crate::tls::SslMode::Disable => tokio_postgres::config::SslMode::Disable,
        crate::tls::SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        _ => tokio_postgres::config::SslMode::Require,
    });
    crate::libpq::apply_env(&mut conn, &url, env).map_err(|r| conn_error(&r))?;
    let slot = raw.slot.unwrap_or_else(|| "walrelay".to_string());
    check_identifier(S, "slot", &slot)?;
    let publication = raw.publication.unwrap_or_else(|| "walrelay".to_string());
    check_identifier(S, "publication", &publication)?;
    let status_ms = raw.status_interval_ms.unwrap_or(1000);
    if !(10..=10_000).contains(&status_ms) {
        return Err(invalid(
            S,
            "status_interval_ms",
            &status_ms.to_string(),
            "must be between 10 and 10000",
        ));
    }
    Ok(SourceConfig {
        url,
        conn,
        tls,
        slot,
        publication,
        status_interval: Duration::from_millis(status_ms),
        failover: raw.failover,
    })
}
