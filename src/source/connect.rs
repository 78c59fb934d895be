//! Where a session's two connections go, and the control connection itself.
//!
//! A URL may name several hosts (`host=a,b target_session_attrs=read-write`, or
//! `postgres://a,b/app?…`). libpq tries them in order and keeps the first that accepts the
//! session; walrelay does the same once per session and then sends **both** connections — the
//! control connection and the replication stream — to the server it found ([`Endpoint`]), with a
//! host name resolved once, so the two can never reach different servers. After a failover the
//! next session resolves again and finds the promoted server.
//!
//! Every control query has a deadline ([`Control::timeout`]): a stalled server ends the session
//! (transient) instead of holding the relay loop, its delivery reports or a shutdown.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_postgres::config::Host;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, NoTls, Row};

use super::error::{classify_pg, pg_class, Class};
use crate::config::SourceConfig;
use crate::error::{Error, Result};
use crate::libpq;

/// How long one control query may take. Catalog and slot queries answer in milliseconds; a
/// query that takes this long means the server or the network stalled.
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);

/// The one server a session talks to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// As configured: a name (used for TLS verification) or a Unix socket directory.
    pub host: Host,
    /// The address the name resolved to (or `hostaddr`), so both connections reach the same
    /// machine even behind round-robin DNS. `None` for Unix sockets.
    pub addr: Option<IpAddr>,
    pub port: u16,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.host, self.addr) {
            (Host::Tcp(name), Some(addr)) if name != &addr.to_string() => {
                write!(f, "{name}:{} ({addr})", self.port)
            }
            (Host::Tcp(name), _) => write!(f, "{name}:{}", self.port),
            (Host::Unix(dir), _) => write!(f, "{}/.s.PGSQL.{}", dir.display(), self.port),
        }
    }
}

/// What the control connection learned about the server when it connected.
#[derive(Debug, Clone)]
pub struct Server {
    /// `server_version_num`, e.g. 170002.
    pub version_num: i32,
    /// `server_version`, e.g. "17.2 (Debian 17.2-1)".
    pub version: String,
    pub in_recovery: bool,
}

/// The control connection of a session: catalog and slot queries, each with a deadline.
pub struct Control {
    client: Arc<Client>,
    closed: oneshot::Receiver<()>,
    pub endpoint: Endpoint,
    /// The single-host connection settings both connections use.
    pub config: Config,
    pub server: Server,
    pub timeout: Duration,
}

impl Control {
    pub async fn query(
        &self,
        what: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        self.bounded(what, self.client.query(sql, params)).await
    }

    pub async fn query_opt(
        &self,
        what: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>> {
        self.bounded(what, self.client.query_opt(sql, params)).await
    }

    pub async fn query_one(
        &self,
        what: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row> {
        self.bounded(what, self.client.query_one(sql, params)).await
    }

    /// Runs DDL or a multi-statement batch. Errors are returned as they are: the caller says
    /// what failed and how to fix it.
    pub async fn batch(&self, sql: &str) -> Result<std::result::Result<(), tokio_postgres::Error>> {
        match tokio::time::timeout(self.timeout, self.client.batch_execute(sql)).await {
            Ok(result) => Ok(result),
            Err(_) => Err(self.timed_out(sql)),
        }
    }

    /// The underlying client, for work with its own deadlines (purge's batches).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// A handle on the same connection for a task of its own (the session's table watch).
    pub fn client_handle(&self) -> Arc<Client> {
        Arc::clone(&self.client)
    }

    /// Resolves once the connection has ended (server gone, network broken).
    pub fn closed(&mut self) -> &mut oneshot::Receiver<()> {
        &mut self.closed
    }

    async fn bounded<T>(
        &self,
        what: &str,
        query: impl std::future::Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.timeout, query).await {
            Ok(result) => result.map_err(|e| classify_pg(what, e)),
            Err(_) => Err(self.timed_out(what)),
        }
    }

    fn timed_out(&self, what: &str) -> Error {
        Error::transient_msg(format!(
            "{what}: PostgreSQL at {} did not answer within {} s",
            self.endpoint,
            self.timeout.as_secs()
        ))
    }
}

/// Connects the control connection to the first server of `[source] url` that accepts the
/// session (libpq's order and `target_session_attrs`).
pub async fn connect(src: &SourceConfig) -> Result<Control> {
    let candidates = candidates(&src.conn);
    let mut failures: Vec<(Endpoint, Error)> = Vec::new();
    for (host, hostaddr, port) in candidates {
        match connect_one(src, &host, hostaddr, port).await {
            Ok(control) => return Ok(control),
            Err((endpoint, e)) => {
                tracing::debug!(server = %endpoint, error = %e.chain(), "server not usable");
                failures.push((endpoint, e));
            }
        }
    }
    Err(all_failed(failures))
}

/// (host, hostaddr, port) in libpq's order: ports pair with hosts, or one port serves all.
fn candidates(conn: &Config) -> Vec<(Host, Option<IpAddr>, u16)> {
    let hosts = conn.get_hosts();
    let addrs = conn.get_hostaddrs();
    let ports = conn.get_ports();
    let port_of = |i: usize| match ports {
        [] => 5432,
        [one] => *one,
        many => many.get(i).copied().unwrap_or(5432),
    };
    if hosts.is_empty() {
        return addrs
            .iter()
            .enumerate()
            .map(|(i, a)| (Host::Tcp(a.to_string()), Some(*a), port_of(i)))
            .collect();
    }
    hosts.iter().enumerate().map(|(i, h)| (h.clone(), addrs.get(i).copied(), port_of(i))).collect()
}

async fn connect_one(
    src: &SourceConfig,
    host: &Host,
    hostaddr: Option<IpAddr>,
    port: u16,
) -> std::result::Result<Control, (Endpoint, Error)> {
    let mut endpoint = Endpoint { host: host.clone(), addr: hostaddr, port };
    let fail = |endpoint: &Endpoint, e: Error| (endpoint.clone(), e);
    if let (Host::Tcp(name), None) = (host, hostaddr) {
        endpoint.addr = Some(resolve(name, port).await.map_err(|e| fail(&endpoint, e))?);
    }
    let config = single_host(&src.conn, &endpoint);
    let what = format!("cannot connect to PostgreSQL at {endpoint}");
    let tls = src.tls.client_config().map_err(|reason| {
        fail(
            &endpoint,
            Error::definite(
                format!("cannot set up TLS to PostgreSQL: {reason}"),
                "fix sslmode / sslrootcert in [source] url",
            ),
        )
    })?;
    let deadline = config.get_connect_timeout().copied().unwrap_or(libpq::DEFAULT_CONNECT_TIMEOUT);
    // tokio-postgres bounds the TCP connect; this bounds TLS and authentication as well.
    let connected = tokio::time::timeout(deadline + Duration::from_secs(1), async {
        let (closed_tx, closed) = oneshot::channel();
        let client = match tls {
            None => {
                let (client, connection) = config.connect(NoTls).await?;
                tokio::spawn(watch_closed(connection, closed_tx));
                client
            }
            Some(tls) => {
                let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls);
                let (client, connection) = config.connect(tls).await?;
                tokio::spawn(watch_closed(connection, closed_tx));
                client
            }
        };
        Ok::<_, tokio_postgres::Error>((client, closed))
    })
    .await;
    let (client, closed) = match connected {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => return Err(fail(&endpoint, classify_connect(&what, e))),
        Err(_) => {
            return Err(fail(
                &endpoint,
                Error::transient_msg(format!("{what}: no answer within {} s", deadline.as_secs())),
            ))
        }
    };
    let mut control = Control {
        client: Arc::new(client),
        closed,
        endpoint,
        config,
        server: Server { version_num: 0, version: String::new(), in_recovery: false },
        timeout: CONTROL_TIMEOUT,
    };
    let row = control
        .query_one(
            "cannot read the server version",
            "SELECT current_setting('server_version_num')::int, current_setting('server_version'), \
             pg_catalog.pg_is_in_recovery()",
            &[],
        )
        .await
        .map_err(|e| fail(&control.endpoint, e))?;
    control.server =
        Server { version_num: row.get(0), version: row.get(1), in_recovery: row.get(2) };
    Ok(control)
}

/// A server that refuses the session because it is read-only while `read-write` is asked for
/// (a standby before promotion) is worth trying again: a failover may be under way.
fn classify_connect(what: &str, e: tokio_postgres::Error) -> Error {
    match pg_class(&e) {
        Class::Transient => Error::transient(what, e),
        _ => classify_pg(what, e),
    }
}

/// One address for a host name, looked up once per session.
async fn resolve(name: &str, port: u16) -> Result<IpAddr> {
    if let Ok(ip) = name.parse::<IpAddr>() {
        return Ok(ip);
    }
    let mut addrs = tokio::net::lookup_host((name, port))
        .await
        .map_err(|e| Error::transient(format!("cannot resolve PostgreSQL host {name}"), e))?;
    addrs.next().map(|a| a.ip()).ok_or_else(|| {
        Error::transient_msg(format!("PostgreSQL host {name} resolves to no address"))
    })
}

/// The connection settings of `base` aimed at one server only. The one place a multi-host URL
/// becomes one host's settings: the relay's sessions and `check`'s look at each standby.
pub fn single_host(base: &Config, endpoint: &Endpoint) -> Config {
    let mut c = Config::new();
    match &endpoint.host {
        Host::Tcp(name) => c.host(name),
        Host::Unix(dir) => c.host_path(dir),
    };
    if let Some(addr) = endpoint.addr {
        c.hostaddr(addr);
    }
    c.port(endpoint.port);
    if let Some(user) = base.get_user() {
        c.user(user);
    }
    match base.get_password() {
        Some(pw) => {
            c.password(pw);
        }
        None => {
            let env = |k: &str| std::env::var(k).ok();
            let host = libpq::pgpass_host(&endpoint.host);
            let (db, user) = (base.get_dbname().unwrap_or(""), base.get_user().unwrap_or(""));
            if let Some(pw) = libpq::pgpass_password(&env, &host, endpoint.port, db, user) {
                c.password(pw);
            }
        }
    }
    if let Some(db) = base.get_dbname() {
        c.dbname(db);
    }
    if let Some(options) = base.get_options() {
        c.options(options);
    }
    if let Some(name) = base.get_application_name() {
        c.application_name(name);
    }
    if let Some(t) = base.get_connect_timeout() {
        c.connect_timeout(*t);
    }
    if let Some(t) = base.get_tcp_user_timeout() {
        c.tcp_user_timeout(*t);
    }
    c.ssl_mode(base.get_ssl_mode())
        .keepalives(base.get_keepalives())
        .keepalives_idle(base.get_keepalives_idle())
        .target_session_attrs(base.get_target_session_attrs())
        .channel_binding(base.get_channel_binding());
    if let Some(i) = base.get_keepalives_interval() {
        c.keepalives_interval(i);
    }
    if let Some(r) = base.get_keepalives_retries() {
        c.keepalives_retries(r);
    }
    c
}

/// Every candidate failed: definite only when each failure was (a wrong password on every
/// server), otherwise transient — a standby may be promoted, a server may come back.
fn all_failed(failures: Vec<(Endpoint, Error)>) -> Error {
    if failures.len() == 1 {
        return failures.into_iter().next().expect("one").1;
    }
    let text = failures
        .iter()
        .map(|(endpoint, e)| format!("{endpoint}: {}", e.chain()))
        .collect::<Vec<_>>()
        .join("; ");
    let what = format!("no PostgreSQL server of [source] url accepts the session ({text})");
    if failures.iter().all(|(_, e)| !e.is_transient()) {
        let hint =
            failures.iter().find_map(|(_, e)| e.hint().map(str::to_string)).unwrap_or_default();
        Error::definite(what, hint)
    } else {
        Error::transient_msg(what)
    }
}

async fn watch_closed<F>(connection: F, closed: oneshot::Sender<()>)
where
    F: std::future::Future<Output = std::result::Result<(), tokio_postgres::Error>>,
{
    if let Err(e) = connection.await {
        tracing::debug!(error = %e, "control connection closed");
    }
    let _ = closed.send(());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_host_of_a_multi_host_url_is_a_candidate_in_order_with_its_port() {
        let conn: Config = "host=a,b,/run/pg port=5433,5434,5435 dbname=x".parse().unwrap();
        let got: Vec<String> = candidates(&conn)
            .iter()
            .map(|(h, a, p)| Endpoint { host: h.clone(), addr: *a, port: *p }.to_string())
            .collect();
        assert_eq!(got, ["a:5433", "b:5434", "/run/pg/.s.PGSQL.5435"]);
        let conn: Config = "postgres://a,b:6000/x".parse().unwrap();
        let ports: Vec<u16> = candidates(&conn).iter().map(|c| c.2).collect();
        assert_eq!(ports, [5432, 6000]);
    }

    #[test]
    fn single_host_settings_keep_everything_but_the_other_hosts() {
        let conn: Config =
            "host=a,b user=u password=p dbname=d application_name=n target_session_attrs=read-write connect_timeout=3"
                .parse()
                .unwrap();
        let endpoint =
            Endpoint { host: Host::Tcp("b".into()), addr: Some([10, 0, 0, 2].into()), port: 5 };
        let c = single_host(&conn, &endpoint);
        assert_eq!(c.get_hosts().len(), 1);
        assert_eq!(c.get_hostaddrs(), &[IpAddr::from([10, 0, 0, 2])]);
        assert_eq!(
            (c.get_user(), c.get_password(), c.get_dbname()),
            (Some("u"), Some(&b"p"[..]), Some("d"))
        );
        assert_eq!(c.get_application_name(), Some("n"));
        assert_eq!(
            c.get_target_session_attrs(),
            tokio_postgres::config::TargetSessionAttrs::ReadWrite
        );
        assert_eq!(c.get_connect_timeout(), Some(&Duration::from_secs(3)));
        assert_eq!(endpoint.to_string(), "b:5 (10.0.0.2)");
    }
}
