//! `[http]`: the operational endpoint (`/metrics`, `/healthz`, `/readyz`) and who may see the
//! console it also serves.
//!
//! The console shows what strangers must not see (aggregate ids, log lines, dead-letter ids)
//! and its lookups cost a query and a Kafka read, so it is resolved here, once, to what is safe:
//! `console` is `"read"` unless set, every request of a console on a non-loopback listen needs
//! `console_token`, and without a token such a console is off (or, when `console` asks for it
//! explicitly, refused).

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use super::{invalid, required, section, ConfigError, Options};

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
    /// What the console serves, as resolved from `console`, `listen` and `console_token`.
    pub console: ConsoleMode,
    /// The bearer token of the console's actions, and of every console request when `listen`
    /// is not a loopback address.
    pub console_token: Option<String>,
    /// `hosts`: the names (lower case) clients may reach the console by besides `localhost`
    /// and IP addresses: the Host check against DNS rebinding.
    pub hosts: Vec<String>,
}

/// `[http] console`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsoleMode {
    /// No page, no API: `/` and `/api/v1/` answer 404.
    Off,
    /// The page and its read-only API.
    Read,
    /// Reads, and a dry-run replay or an audit started from the page.
    Actions,
}

impl ConsoleMode {
    pub fn name(self) -> &'static str {
        match self {
            ConsoleMode::Off => "off",
            ConsoleMode::Read => "read",
            ConsoleMode::Actions => "actions",
        }
    }
}

impl HttpConfig {
    /// The endpoint alone, for a command that serves `/metrics` while it runs (`replay
    /// --metrics-listen`): never ready, no console.
    pub fn metrics_only(listen: SocketAddr) -> HttpConfig {
        HttpConfig {
            listen,
            ready_max_lag_bytes: u64::MAX,
            ready_max_unacked: Duration::MAX,
            table_metrics: false,
            console: ConsoleMode::Off,
            console_token: None,
            hosts: Vec::new(),
        }
    }

    /// Whether every console request, reads included, must carry the token: anyone who can
    /// reach a non-loopback address could read it otherwise.
    pub fn console_needs_token(&self) -> bool {
        !self.listen.ip().is_loopback()
    }
}

impl std::fmt::Debug for HttpConfig {
    /// The token is a secret: its presence only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpConfig")
            .field("listen", &self.listen)
            .field("ready_max_lag_bytes", &self.ready_max_lag_bytes)
            .field("ready_max_unacked", &self.ready_max_unacked)
            .field("table_metrics", &self.table_metrics)
            .field("console", &self.console)
            .field(
                "console_token",
                &self.console_token.as_ref().map(|_| crate::options::secret::MASK),
            )
            .field("hosts", &self.hosts)
            .finish()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Raw {
    listen: Option<String>,
    ready_max_lag_bytes: Option<u64>,
    ready_max_unacked_s: Option<u64>,
    table_metrics: Option<bool>,
    console: Option<String>,
    console_token: Option<String>,
    /// Comma-joined, as every list (see `document`).
    hosts: Option<String>,
}

const S: &str = "http";

/// How to give the token, in every message that asks for it.
const SET_TOKEN: &str = "set WALRELAY_HTTP_CONSOLE_TOKEN (or [http] console_token) to a long random string, at least 16 characters";

pub(super) fn parse(opts: &Options) -> Result<HttpConfig, ConfigError> {
    let raw: Raw = section::from_options(S, opts)?;
    let listen = required(S, raw.listen, "listen", "set listen = \"127.0.0.1:9187\"")?;
    let listen: SocketAddr = listen
        .parse()
        .map_err(|_| invalid(S, "listen", &listen, "must be an address like 127.0.0.1:9187"))?;
    let ready_max_lag_bytes = raw.ready_max_lag_bytes.unwrap_or(256 * 1024 * 1024);
    let ready_max_unacked = Duration::from_secs(raw.ready_max_unacked_s.unwrap_or(15));
    if ready_max_unacked.is_zero() {
        return Err(invalid(S, "ready_max_unacked_s", "0", "must be at least 1"));
    }
    let console_token = raw.console_token.filter(|t| !t.is_empty());
    if console_token.as_ref().is_some_and(|t| t.len() < 16) {
        return Err(invalid(
            S,
            "console_token",
            "",
            "must be at least 16 characters: a long random string",
        ));
    }
    let console = console_mode(raw.console.as_deref(), listen, console_token.is_some())?;
    let hosts = match raw.hosts {
        Some(list) if !list.trim().is_empty() => {
            list.split(',').map(host_name).collect::<Result<_, _>>()?
        }
        _ => Vec::new(),
    };
    Ok(HttpConfig {
        listen,
        ready_max_lag_bytes,
        ready_max_unacked,
        table_metrics: raw.table_metrics.unwrap_or(true),
        console,
        console_token,
        hosts,
    })
}

/// `console` as given, resolved against the listen address and whether a token is set.
fn console_mode(
    given: Option<&str>,
    listen: SocketAddr,
    token: bool,
) -> Result<ConsoleMode, ConfigError> {
    let loopback = listen.ip().is_loopback();
    let mode = match given.map(str::trim) {
        // Safe on both: open on the loopback, behind the token elsewhere, else off.
        None if loopback || token => return Ok(ConsoleMode::Read),
        None => return Ok(ConsoleMode::Off),
        Some("off") => return Ok(ConsoleMode::Off),
        Some("read") => ConsoleMode::Read,
        Some("actions") => ConsoleMode::Actions,
        Some(other) => {
            return Err(invalid(
                S,
                "console",
                other,
                "must be \"off\" (no page, no API), \"read\" (the page and its API) or \"actions\" (reads, and a dry-run replay or an audit started from the page, with console_token)",
            ))
        }
    };
    // Reads are open on the loopback, said or not; actions always want the token.
    if token || (mode == ConsoleMode::Read && loopback) {
        return Ok(mode);
    }
    let value = format!("\"{}\"", mode.name());
    if mode == ConsoleMode::Actions {
        return Err(invalid(
            S,
            "console",
            &value,
            &format!(
                "needs console_token, the bearer token the actions are asked with: {SET_TOKEN}"
            ),
        ));
    }
    Err(invalid(
        S,
        "console",
        &value,
        &format!(
            "needs console_token on listen = {listen}, which is not a loopback address (anyone who reaches it could read the console): {SET_TOKEN}, listen on 127.0.0.1, or set console = \"off\""
        ),
    ))
}

/// One name of `hosts`: a DNS name as a Host header carries it, without a port.
fn host_name(item: &str) -> Result<String, ConfigError> {
    let name = item.trim().trim_end_matches('.').to_ascii_lowercase();
    let valid = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if !valid {
        return Err(invalid(
            S,
            "hosts",
            item,
            "must list DNS names as clients write them in the URL, without scheme, port or path (e.g. [\"walrelay.internal\"]); localhost and IP addresses are always accepted",
        ));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    const MINIMAL: &str = "[source]\nurl = \"postgres://u@h/d\"\n[outbox]\ntable = \"public.outbox\"\n[kafka]\n\"bootstrap.servers\" = \"k:9092\"\n";
    const TOKEN: &str = "a-long-random-console-token";

    fn http(keys: &str) -> Result<HttpConfig, ConfigError> {
        Config::parse(&format!("{MINIMAL}[http]\n{keys}\n")).map(|c| c.http.expect("[http]"))
    }

    #[test]
    fn the_console_reads_on_the_loopback_and_is_off_elsewhere_without_a_token() {
        let local = http("listen = \"127.0.0.1:9187\"").unwrap();
        assert_eq!((local.console, local.console_needs_token()), (ConsoleMode::Read, false));
        let v6 = http("listen = \"[::1]:9187\"").unwrap();
        assert_eq!((v6.console, v6.console_needs_token()), (ConsoleMode::Read, false));
        let open = http("listen = \"0.0.0.0:9187\"").unwrap();
        assert_eq!(open.console, ConsoleMode::Off);
        let guarded = http(&format!("listen = \"0.0.0.0:9187\"\nconsole_token = \"{TOKEN}\""));
        let guarded = guarded.unwrap();
        assert_eq!((guarded.console, guarded.console_needs_token()), (ConsoleMode::Read, true));
    }

    #[test]
    fn a_console_asked_for_without_the_token_it_needs_is_refused_with_the_fix() {
        for (keys, says) in [
            ("listen = \"0.0.0.0:9187\"\nconsole = \"read\"", "not a loopback address"),
            ("listen = \"10.1.2.3:9187\"\nconsole = \"read\"", "not a loopback address"),
            ("listen = \"127.0.0.1:9187\"\nconsole = \"actions\"", "needs console_token"),
        ] {
            let e = http(keys).unwrap_err().to_string();
            assert!(e.contains("`console`") && e.contains(says), "{keys}: {e}");
            assert!(e.contains("WALRELAY_HTTP_CONSOLE_TOKEN"), "{e}");
        }
        // Said explicitly, a read-only console on the loopback is what the default gives.
        let said = http("listen = \"127.0.0.1:9187\"\nconsole = \"read\"").unwrap();
        assert_eq!((said.console, said.console_needs_token()), (ConsoleMode::Read, false));
        let off = http("listen = \"0.0.0.0:9187\"\nconsole = \"off\"").unwrap();
        assert_eq!(off.console, ConsoleMode::Off);
        let actions = http(&format!(
            "listen = \"0.0.0.0:1\"\nconsole = \"actions\"\nconsole_token = \"{TOKEN}\""
        ));
        assert_eq!(actions.unwrap().console, ConsoleMode::Actions);
    }

    #[test]
    fn unknown_console_values_and_short_tokens_are_refused() {
        let e = http("listen = \"127.0.0.1:1\"\nconsole = \"on\"").unwrap_err().to_string();
        assert!(e.contains("`console` = \"on\" is invalid") && e.contains("\"off\""), "{e}");
        let e = http("listen = \"127.0.0.1:1\"\nconsole_token = \"short-token\"").unwrap_err();
        let e = e.to_string();
        assert!(e.contains("at least 16") && !e.contains("short-token"), "{e}");
        let e = http("listen = \"127.0.0.1:1\"\nconsole_actions = true").unwrap_err().to_string();
        assert!(e.contains("console_actions") && e.contains("console"), "{e}");
    }

    #[test]
    fn hosts_are_dns_names_without_port_or_scheme() {
        let c = http("listen = \"127.0.0.1:1\"\nhosts = [\"Walrelay.Internal.\", \"relay-1\"]");
        assert_eq!(c.unwrap().hosts, ["walrelay.internal", "relay-1"]);
        for bad in ["walrelay:9187", "http://walrelay", "*.svc", "a/b", "a,,b"] {
            let e = http(&format!("listen = \"127.0.0.1:1\"\nhosts = [\"{bad}\"]"));
            let e = e.unwrap_err().to_string();
            assert!(
                e.contains("`hosts`") && e.contains("without scheme, port or path"),
                "{bad}: {e}"
            );
        }
    }
}
