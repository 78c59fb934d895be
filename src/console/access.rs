//! Who may use the console: the Host check every request passes first, and the bearer token
//! that actions always need and, on a non-loopback listen, every request for data too.
//!
//! The Host check is what defeats DNS rebinding: a page of `evil.example` whose name the
//! attacker re-points at 127.0.0.1 can make a browser beside the relay send requests here, but
//! they carry `Host: evil.example`. Accepted are `localhost`, an IP address (a URL naming an
//! address has nothing to re-point) and the names of `[http] hosts`, whatever the port: the
//! port is not what rebinding changes, and a port-forward (`kubectl port-forward 8080:9187`)
//! does change it.

use std::net::{IpAddr, Ipv6Addr};

use hyper::header::{AUTHORIZATION, HOST};
use hyper::Request;

use crate::config::HttpConfig;

pub struct Access {
    token: Option<String>,
    /// Reads need the token too: the endpoint listens on a non-loopback address.
    reads_need_token: bool,
    /// `[http] hosts`, lower case.
    hosts: Vec<String>,
}

impl Access {
    pub fn new(http: &HttpConfig) -> Access {
        Access {
            token: http.console_token.clone(),
            reads_need_token: http.console_needs_token(),
            hosts: http.hosts.clone(),
        }
    }

    /// Whether the request names this endpoint: its target's authority when it has one (the
    /// absolute form, which a server must prefer), else its Host header.
    pub fn host_allowed<B>(&self, request: &Request<B>) -> bool {
        let host = match request.uri().authority() {
            Some(authority) => Some(authority.as_str()),
            None => request.headers().get(HOST).and_then(|h| h.to_str().ok()),
        };
        host.is_some_and(|h| names_this_endpoint(h, &self.hosts))
    }

    /// Whether a request for data must carry the token.
    pub fn reads_need_token(&self) -> bool {
        self.reads_need_token
    }

    /// Whether the request carries the token (`Authorization: Bearer …`).
    pub fn authorized<B>(&self, request: &Request<B>) -> bool {
        let given = request.headers().get(AUTHORIZATION).and_then(|v| v.to_str().ok());
        match (&self.token, given.and_then(|a| a.strip_prefix("Bearer "))) {
            (Some(token), Some(given)) => same(given.as_bytes(), token.as_bytes()),
            _ => false,
        }
    }
}

/// The same time whatever the first difference: no guessing the token byte by byte.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Whether `host` (`name`, `name:port`, `[v6]`, `[v6]:port`) is `localhost`, an IP address or
/// one of `hosts`.
fn names_this_endpoint(host: &str, hosts: &[String]) -> bool {
    let Some(name) = without_port(host.trim()) else { return false };
    if let Some(v6) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        return v6.parse::<Ipv6Addr>().is_ok();
    }
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    name == "localhost" || name.parse::<IpAddr>().is_ok() || hosts.contains(&name)
}

/// `host` without its `:port`; `None` when what follows the name is not a port.
fn without_port(host: &str) -> Option<&str> {
    let name_end = match host.starts_with('[') {
        true => host.find(']')? + 1,
        false => host.find(':').unwrap_or(host.len()),
    };
    let (name, rest) = host.split_at(name_end);
    let port_ok = match rest.strip_prefix(':') {
        None => rest.is_empty(),
        Some(port) => {
            !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit())
        }
    };
    (port_ok && !name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(token: Option<&str>, hosts: &[&str]) -> Access {
        Access {
            token: token.map(String::from),
            reads_need_token: true,
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
        }
    }

    fn request(host: Option<&str>, authorization: Option<&str>) -> Request<()> {
        let mut r = Request::builder().uri("/api/v1/overview");
        if let Some(h) = host {
            r = r.header(HOST, h);
        }
        if let Some(a) = authorization {
            r = r.header(AUTHORIZATION, a);
        }
        r.body(()).unwrap()
    }

    #[test]
    fn loopback_names_addresses_and_configured_hosts_pass_the_host_check() {
        let a = access(None, &["walrelay.internal"]);
        for good in [
            "localhost",
            "localhost:9187",
            "LocalHost.:8080",
            "127.0.0.1:9187",
            "[::1]:9187",
            "[::1]",
            "10.2.3.4:9187",
            "walrelay.internal:9187",
            "WALRELAY.internal",
        ] {
            assert!(a.host_allowed(&request(Some(good), None)), "{good}");
        }
    }

    #[test]
    fn other_names_broken_hosts_and_no_host_fail_the_host_check() {
        let a = access(None, &["walrelay.internal"]);
        for bad in [
            "evil.example:9187",
            "localhost.evil.example",
            "walrelay.internal.evil.example",
            "127.0.0.1.nip.io:9187",
            "localhost:",
            "localhost:http",
            "[::1",
            "[evil]:1",
            "",
        ] {
            assert!(!a.host_allowed(&request(Some(bad), None)), "{bad:?}");
        }
        assert!(!a.host_allowed(&request(None, None)));
        // The absolute form's authority is what counts, not a Host header beside it.
        let absolute = Request::builder()
            .uri("http://evil.example:9187/api/v1/overview")
            .header(HOST, "localhost")
            .body(())
            .unwrap();
        assert!(!a.host_allowed(&absolute));
    }

    #[test]
    fn only_the_exact_token_authorizes() {
        let a = access(Some("s3cret-token-of-16+"), &[]);
        assert!(a.authorized(&request(None, Some("Bearer s3cret-token-of-16+"))));
        for wrong in
            [None, Some("s3cret-token-of-16+"), Some("Bearer s3cret-token-of-16"), Some("Bearer ")]
        {
            assert!(!a.authorized(&request(None, wrong)), "{wrong:?}");
        }
        let none = access(None, &[]);
        assert!(!none.authorized(&request(None, Some("Bearer "))));
    }
}
