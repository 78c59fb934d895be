//! libpq's conventions for what a connection string leaves out: the `PG*` environment variables,
//! the password file and the default host. walrelay connects the way `psql` would with the same
//! URL and environment, so an operator's existing setup carries over.
//!
//! `sslmode` / `sslrootcert` (and `PGSSLMODE` / `PGSSLROOTCERT`) are read by [`crate::tls`].
//! Not supported: `service=` / `PGSERVICE` (pg_service.conf), `PGREQUIRESSL`, GSSAPI.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokio_postgres::config::{Host, TargetSessionAttrs};
use tokio_postgres::Config;

/// Reads an environment variable (the process environment, or a map in tests).
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// walrelay's connect timeout when neither the URL nor `PGCONNECT_TIMEOUT` sets one (libpq
/// waits for ever, which would leave a relay hanging on a black-holed host).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The application name both connections report when none is configured.
pub const DEFAULT_APPLICATION_NAME: &str = "walrelay";

/// Fills what `url` left out from libpq's environment variables and defaults: `PGHOST`,
/// `PGHOSTADDR`, `PGPORT`, `PGDATABASE`, `PGUSER`, `PGPASSWORD`, `PGAPPNAME`,
/// `PGCONNECT_TIMEOUT`, `PGTARGETSESSIONATTRS`, `PGOPTIONS`. Keys the URL sets always win.
/// Errors name the variable and what is wrong with its value (never the password).
pub fn apply_env(conn: &mut Config, url: &str, env: Env) -> Result<(), String> {
    if conn.get_hosts().is_empty() {
        if let Some(hosts) = env("PGHOST").filter(|h| !h.is_empty()) {
            for host in hosts.split(',') {
                conn.host(host.trim());
            }
        }
    }
    if conn.get_hostaddrs().is_empty() {
        if let Some(addrs) = env("PGHOSTADDR").filter(|h| !h.is_empty()) {
            for addr in addrs.split(',') {
                let ip: IpAddr = addr
                    .trim()
                    .parse()
                    .map_err(|_| format!("PGHOSTADDR: {:?} is not an IP address", addr.trim()))?;
                conn.hostaddr(ip);
            }
        }
    }
    if conn.get_ports().is_empty() {
        if let Some(ports) = env("PGPORT").filter(|p| !p.is_empty()) {
            for port in ports.split(',') {
                let port: u16 = port
                    .trim()
                    .parse()
                    .map_err(|_| format!("PGPORT: {:?} is not a port number", port.trim()))?;
                conn.port(port);
            }
        }
    }
    if conn.get_user().is_none() {
        // libpq's last resort is the operating-system user name.
        let user = env("PGUSER")
            .or_else(|| env("USER"))
            .or_else(|| env("LOGNAME"))
            .unwrap_or_else(|| "postgres".to_string());
        conn.user(user);
    }
    if conn.get_dbname().is_none() {
        // As libpq: the database named like the user.
        let db = env("PGDATABASE").unwrap_or_else(|| conn.get_user().unwrap_or("").to_string());
        conn.dbname(db);
    }
    if conn.get_password().is_none() {
        if let Some(pw) = env("PGPASSWORD") {
            conn.password(pw);
        }
    }
    if conn.get_application_name().is_none() {
        let name = env("PGAPPNAME").unwrap_or_else(|| DEFAULT_APPLICATION_NAME.to_string());
        conn.application_name(name);
    }
    if conn.get_options().is_none() {
        if let Some(options) = env("PGOPTIONS") {
            conn.options(options);
        }
    }
    if conn.get_connect_timeout().is_none() {
        let timeout = match env("PGCONNECT_TIMEOUT").filter(|t| !t.is_empty()) {
            // libpq: 0 or a negative value means wait indefinitely; walrelay still bounds it.
            Some(t) => match t.trim().parse::<i64>() {
                Ok(s) if s > 0 => Duration::from_secs(s.max(2) as u64),
                Ok(_) => DEFAULT_CONNECT_TIMEOUT,
                Err(_) => {
                    return Err(format!("PGCONNECT_TIMEOUT: {t:?} is not a number of seconds"))
                }
            },
            None => DEFAULT_CONNECT_TIMEOUT,
        };
        conn.connect_timeout(timeout);
    }
    if !url.contains("target_session_attrs") {
        if let Some(attrs) = env("PGTARGETSESSIONATTRS").filter(|a| !a.is_empty()) {
            conn.target_session_attrs(match attrs.as_str() {
                "any" => TargetSessionAttrs::Any,
                "read-write" | "primary" => TargetSessionAttrs::ReadWrite,
                "read-only" | "standby" => TargetSessionAttrs::ReadOnly,
                other => {
                    return Err(format!(
                        "PGTARGETSESSIONATTRS: {other:?} is not one of any, read-write, primary, read-only, standby"
                    ))
                }
            });
        }
    }
    if conn.get_hosts().is_empty() && conn.get_hostaddrs().is_empty() {
        let port = conn.get_ports().first().copied().unwrap_or(5432);
        match default_socket_dir(port) {
            Some(dir) => conn.host_path(dir),
            None => conn.host("localhost"),
        };
    }
    Ok(())
}

/// libpq's default host is a Unix socket in the directory it was built with: Debian's
/// `/var/run/postgresql`, upstream's `/tmp`. Whichever holds the port's socket.
fn default_socket_dir(port: u16) -> Option<PathBuf> {
    ["/var/run/postgresql", "/tmp"]
        .into_iter()
        .map(PathBuf::from)
        .find(|dir| dir.join(format!(".s.PGSQL.{port}")).exists())
}

/// The host name a password file entry is matched against: libpq uses `localhost` for the
/// default Unix socket.
pub fn pgpass_host(host: &Host) -> String {
    match host {
        Host::Tcp(name) => name.clone(),
        Host::Unix(_) => "localhost".to_string(),
    }
}

/// The password for `host:port/database` as `user` from the password file (`PGPASSFILE`, else
/// `~/.pgpass`), as libpq reads it: the first matching line wins, `*` matches anything, `\:` and
/// `\\` escape. A file readable by group or others is ignored, as libpq does.
pub fn pgpass_password(
    env: Env,
    host: &str,
    port: u16,
    database: &str,
    user: &str,
) -> Option<String> {
    let path = env("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|home| PathBuf::from(home).join(".pgpass")))?;
    let meta = std::fs::metadata(&path).ok()?;
    if !meta.is_file() {
        return None;
    }
    {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(path = %path.display(), "password file has group or world access and is ignored (as libpq does); chmod 0600 it");
            return None;
        }
    }
    let text = std::fs::read_to_string(&path).ok()?;
    pgpass_lookup(&text, host, &port.to_string(), database, user)
}

fn pgpass_lookup(text: &str, host: &str, port: &str, database: &str, user: &str) -> Option<String> {
    let wanted = [host, port, database, user];
    text.lines().filter(|l| !l.trim_start().starts_with('#')).find_map(|line| {
        let fields = split_pgpass_line(line);
        if fields.len() < 5 {
            return None;
        }
        let matches = fields.iter().zip(wanted).all(|(f, w)| f == "*" || f == w);
        // The password is the rest of the line (it may contain unescaped colons).
        matches.then(|| fields[4..].join(":"))
    })
}

/// Splits at unescaped `:`, resolving `\:` and `\\`.
fn split_pgpass_line(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    fields.last_mut().expect("one field").push(next);
                }
            }
            ':' => fields.push(String::new()),
            c => fields.last_mut().expect("one field").push(c),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> =
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k: &str| map.get(k).cloned()
    }

    #[test]
    fn libpq_environment_fills_only_what_the_url_leaves_out() {
        let env = env_of(&[
            ("PGHOST", "db1,db2"),
            ("PGPORT", "5433,5434"),
            ("PGDATABASE", "app"),
            ("PGUSER", "relay"),
            ("PGPASSWORD", "pw"),
            ("PGAPPNAME", "relay-eu"),
            ("PGCONNECT_TIMEOUT", "3"),
            ("PGTARGETSESSIONATTRS", "read-write"),
        ]);
        let mut conn: Config = "".parse().unwrap();
        apply_env(&mut conn, "", &env).unwrap();
        assert_eq!(conn.get_hosts().len(), 2);
        assert_eq!(conn.get_ports(), &[5433, 5434]);
        assert_eq!(conn.get_dbname(), Some("app"));
        assert_eq!(conn.get_user(), Some("relay"));
        assert_eq!(conn.get_password(), Some(&b"pw"[..]));
        assert_eq!(conn.get_application_name(), Some("relay-eu"));
        assert_eq!(conn.get_connect_timeout(), Some(&Duration::from_secs(3)));
        assert_eq!(conn.get_target_session_attrs(), TargetSessionAttrs::ReadWrite);

        let url = "postgres://u@h:1/d?target_session_attrs=any";
        let mut conn: Config = url.parse().unwrap();
        apply_env(&mut conn, url, &env).unwrap();
        assert!(matches!(conn.get_hosts(), [Host::Tcp(h)] if h == "h"));
        assert_eq!(
            (conn.get_ports(), conn.get_dbname(), conn.get_user()),
            (&[1][..], Some("d"), Some("u"))
        );
        assert_eq!(conn.get_target_session_attrs(), TargetSessionAttrs::Any);
    }

    #[test]
    fn libpq_defaults_database_to_user_and_host_to_a_socket_or_localhost() {
        let env = env_of(&[("USER", "alice")]);
        let mut conn: Config = "".parse().unwrap();
        apply_env(&mut conn, "", &env).unwrap();
        assert_eq!(conn.get_user(), Some("alice"));
        assert_eq!(conn.get_dbname(), Some("alice"));
        assert_eq!(conn.get_hosts().len(), 1);
        assert_eq!(conn.get_application_name(), Some("walrelay"));
        assert_eq!(conn.get_connect_timeout(), Some(&DEFAULT_CONNECT_TIMEOUT));
    }

    #[test]
    fn libpq_host_starting_with_a_slash_is_a_unix_socket_directory() {
        let env = env_of(&[("PGHOST", "/var/run/postgresql")]);
        let mut conn: Config = "dbname=app".parse().unwrap();
        apply_env(&mut conn, "dbname=app", &env).unwrap();
        assert!(
            matches!(conn.get_hosts(), [Host::Unix(p)] if p.to_str() == Some("/var/run/postgresql"))
        );
    }

    #[test]
    fn libpq_bad_environment_values_name_the_variable() {
        for (var, value) in [
            ("PGPORT", "fifty"),
            ("PGHOSTADDR", "not-an-ip"),
            ("PGCONNECT_TIMEOUT", "soon"),
            ("PGTARGETSESSIONATTRS", "writable"),
        ] {
            let env = env_of(&[(var, value)]);
            let mut conn: Config = "".parse().unwrap();
            let e = apply_env(&mut conn, "", &env).unwrap_err();
            assert!(e.starts_with(var) && e.contains(value), "{var}: {e}");
        }
    }

    #[test]
    fn libpq_password_file_lines_match_with_wildcards_and_escapes() {
        let file = "# comment\n\
                    other:5432:app:relay:wrong\n\
                    db\\:1:*:app:relay:pa:ss\n\
                    *:*:*:relay:fallback\n";
        assert_eq!(pgpass_lookup(file, "db:1", "5432", "app", "relay").as_deref(), Some("pa:ss"));
        assert_eq!(
            pgpass_lookup(file, "elsewhere", "1", "x", "relay").as_deref(),
            Some("fallback")
        );
        assert_eq!(pgpass_lookup(file, "elsewhere", "1", "x", "bob"), None);
    }
}
