//! Extra PostgreSQL instances for tests that need more than the shared one: an instance of a
//! chosen server with settings of its own, a physical standby of it, failover.
//!
//! ```ignore
//! let server = Server::major(18)?;                       // failover slots: 17+
//! let primary = cluster::start_instance("primary", &server, &[]).await;
//! let standby = cluster::create_standby(&primary, "standby").await;
//! // ... write on the primary ...
//! assert!(cluster::wait_caught_up(&primary.pg, &standby.pg.pg, Duration::from_secs(30)).await);
//! primary.stop_immediate().unwrap();
//! standby.pg.promote().unwrap();
//! ```
//!
//! Every instance is a [`PrivatePostgres`]: stopped (immediate) on drop, and by the harness
//! watchdog if the test process dies first. The start functions block in `spawn_blocking`;
//! call them from the test's own task (notes name the test by its thread).

use std::process::Stdio;
use std::time::Duration;

use super::postgres::{connect, PrivatePostgres};
use super::servers::{server_with, Capability, Server};
use super::{scratch_dir, unique, wait_until, Postgres, PID_FILE};

/// initdb + start an instance of `server` with extra postgresql.conf `settings` (after the
/// harness's own; values as written in the file, strings `'quoted'`).
pub async fn start_instance(
    prefix: &str,
    server: &Server,
    settings: &[(&str, &str)],
) -> PrivatePostgres {
    let (prefix, server) = (prefix.to_string(), server.clone());
    let settings: Vec<(String, String)> =
        settings.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    tokio::task::spawn_blocking(move || {
        let settings: Vec<(&str, &str)> =
            settings.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        PrivatePostgres::start_on(&prefix, &server, &settings)
    })
    .await
    .expect("start_instance panicked")
}

/// Like [`start_instance`] on the selected server if it has `cap`, else on an installed server
/// that has it (printed; see [`server_with`]).
pub async fn start_with_capability(
    prefix: &str,
    cap: Capability,
    settings: &[(&str, &str)],
) -> PrivatePostgres {
    let server = server_with(cap).unwrap_or_else(|e| panic!("{e}"));
    start_instance(prefix, &server, settings).await
}

/// An instance whose server messages are translated: `lc_messages` set to `locale` (e.g.
/// `de_DE.UTF-8`, which scripts/install-test-deps.sh generates) on a server built with NLS
/// (Debian's; the wheels have none), plus `settings`.
pub async fn start_translated(
    prefix: &str,
    locale: &str,
    settings: &[(&str, &str)],
) -> PrivatePostgres {
    assert!(
        locale_installed(locale),
        "locale {locale} is not generated on this machine (see `locale -a`); scripts/install-test-deps.sh generates de_DE.UTF-8"
    );
    let lc_messages = format!("'{locale}'");
    let mut all = vec![("lc_messages", lc_messages.as_str())];
    all.extend_from_slice(settings);
    start_with_capability(prefix, Capability::Nls, &all).await
}

/// Whether `locale -a` lists `locale` (`de_DE.UTF-8` is listed as `de_DE.utf8`).
pub fn locale_installed(locale: &str) -> bool {
    let norm = |s: &str| s.to_ascii_lowercase().replace('-', "");
    std::process::Command::new("locale")
        .arg("-a")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).lines().any(|l| norm(l) == norm(locale)))
}

/// A physical standby and the replication slot it streams from on its primary.
pub struct Standby {
    pub pg: PrivatePostgres,
    /// The physical slot on the primary (`primary_slot_name`; also its application_name), e.g.
    /// for the primary's `synchronized_standby_slots`.
    pub slot: String,
}

/// A streaming standby of `primary`, started on a free port: a physical slot on the primary,
/// `pg_basebackup -R` from it, then `primary_conninfo` with `dbname=postgres` (slot sync needs a
/// database), `primary_slot_name`, `hot_standby_feedback = on` and, on 17+,
/// `sync_replication_slots = on` (the slot sync worker copies `failover` logical slots).
pub async fn create_standby(primary: &PrivatePostgres, prefix: &str) -> Standby {
    let slot = unique(prefix);
    let admin = primary.pg.connect_to("postgres").await;
    admin
        .execute("SELECT pg_create_physical_replication_slot($1, true)", &[&slot])
        .await
        .unwrap_or_else(|e| panic!("create physical slot {slot}: {e}"));
    let (server, port) = (primary.pg.server().clone(), primary.pg.port());
    let (dir, slot2) = (scratch_dir(prefix), slot.clone());
    let pg = tokio::task::spawn_blocking(move || {
        basebackup_and_start(&dir, &server, port, &slot2)
            .unwrap_or_else(|e| panic!("standby of 127.0.0.1:{port}: {e}"))
    })
    .await
    .expect("create_standby panicked");
    Standby { pg: PrivatePostgres::adopt(pg), slot }
}

fn basebackup_and_start(
    dir: &std::path::Path,
    server: &Server,
    primary_port: u16,
    slot: &str,
) -> Result<Postgres, String> {
    let pg = Postgres::prepare(dir, server)?;
    let out = pg
        .command("pg_basebackup")
        .arg("-D")
        .arg(pg.data_dir())
        .args(["-h", "127.0.0.1", "-p", &primary_port.to_string(), "-U", "postgres"])
        .args(["-X", "stream", "-c", "fast", "--no-sync", "-R", "-S", slot])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("run pg_basebackup: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "pg_basebackup failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // postgresql.auto.conf is read after postgresql.conf (copied from the primary, with the
    // primary's socket directory) and its last line for a setting wins over pg_basebackup's.
    let mut conf = format!(
        "\n# walrelay test harness: standby\n\
         primary_conninfo = 'host=127.0.0.1 port={primary_port} user=postgres dbname=postgres application_name={slot}'\n\
         primary_slot_name = '{slot}'\n\
         hot_standby_feedback = on\n\
         unix_socket_directories = '{}'\n",
        dir.display()
    );
    if server.major >= 17 {
        conf += "sync_replication_slots = on\n";
    }
    let auto = pg.data_dir().join("postgresql.auto.conf");
    let mut text =
        std::fs::read_to_string(&auto).map_err(|e| format!("read {}: {e}", auto.display()))?;
    text += &conf;
    std::fs::write(&auto, text).map_err(|e| format!("write {}: {e}", auto.display()))?;
    pg.launch()
}

/// Waits until `standby` has replayed everything `primary` had written when this was called.
pub async fn wait_caught_up(primary: &Postgres, standby: &Postgres, deadline: Duration) -> bool {
    // The insert position, not pg_current_wal_lsn(): with the harness's synchronous_commit=off
    // a commit may not be written out yet, and the write position would then precede it.
    let target: String = primary
        .connect_to("postgres")
        .await
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .await
        .expect("pg_current_wal_lsn")
        .get(0);
    let (url, target) = (standby.url("postgres"), target.as_str());
    let url = url.as_str();
    wait_until(&format!("standby replays up to {target}"), deadline, || async move {
        let Ok(c) = connect(url).await else { return false };
        c.query_one(
            "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::text::pg_lsn, false)",
            &[&target],
        )
        .await
        .is_ok_and(|r| r.get::<_, bool>(0))
    })
    .await
}

impl PrivatePostgres {
    /// `pg_ctl stop -m immediate`: no shutdown checkpoint, as in a crash (blocking, quick).
    pub fn stop_immediate(&self) -> Result<(), String> {
        self.pg_ctl(&["-m", "immediate", "stop"])?;
        // The watchdog must not kill whatever process gets this pid next.
        let _ = std::fs::remove_file(self.dir().join(PID_FILE));
        Ok(())
    }

    /// `pg_ctl promote -w`: returns once the standby accepts writes (blocking, quick).
    pub fn promote(&self) -> Result<(), String> {
        self.pg_ctl(&["-t", "60", "promote"])
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let out = self
            .pg
            .command("pg_ctl")
            .arg("-D")
            .arg(self.pg.data_dir())
            .args(["-w", "-s"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run pg_ctl {args:?}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "pg_ctl {args:?} failed: {}{}\n--- server log ---\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                self.log_tail(20)
            ))
        }
    }
}
