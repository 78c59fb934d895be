//! A throw-away PostgreSQL instance (initdb into the scratch dir, wal_level=logical).
//!
//! One instance per test process; each test makes its own database with
//! [`Postgres::create_database`] and its own slot / publication names with `unique()`.

use super::servers::Server;
use super::{free_port, is_root, scratch_dir, tail_file, PID_FILE};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use tokio_postgres::{Client, GenericClient, NoTls};

/// Settings appended to postgresql.conf (plus listen/socket settings and, when the library is
/// there, `shared_preload_libraries = 'pg_stat_statements'`).
pub const SETTINGS: &[(&str, &str)] = &[
    ("wal_level", "logical"),
    ("max_wal_senders", "200"),
    ("max_replication_slots", "200"),
    ("wal_sender_timeout", "'10s'"),
    ("fsync", "off"),
    ("synchronous_commit", "off"),
    ("full_page_writes", "off"),
    ("max_connections", "300"),
    ("track_counts", "on"),
    ("max_wal_size", "'1GB'"),
];

pub struct Postgres {
    port: u16,
    server: Server,
    dir: PathBuf,
    data_dir: PathBuf,
    log_path: PathBuf,
    /// Running as root: the server programs run as the `postgres` OS user via runuser.
    as_postgres_user: bool,
}

/// A database of its own for one test.
pub struct TestDb {
    pub name: String,
    /// `postgres://postgres@127.0.0.1:PORT/NAME`
    pub url: String,
}

/// The selected server's bin directory (see [`Server::selected`]).
pub fn find_bin_dir() -> Result<PathBuf, String> {
    Server::selected().map(|s| s.bin_dir)
}

fn output_text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

impl Postgres {
    /// initdb into `dir/data` and start the selected server on a free port (blocking).
    pub fn start(dir: &Path) -> Result<Postgres, String> {
        Postgres::start_with(dir, &Server::selected()?, &[])
    }

    /// Like [`Postgres::start`] with `server`'s programs and `settings` appended to
    /// postgresql.conf after the harness's own (values as written there: `'quoted'` strings).
    pub fn start_with(
        dir: &Path,
        server: &Server,
        settings: &[(&str, &str)],
    ) -> Result<Postgres, String> {
        let started = Instant::now();
        let pg = Postgres::prepare(dir, server)?;
        let out = pg
            .command("initdb")
            .arg("-D")
            .arg(&pg.data_dir)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"])
            .output()
            .map_err(|e| format!("run initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!("initdb failed:\n{}", output_text(&out)));
        }

        let mut conf = String::from("\n# walrelay test harness\n");
        conf += "listen_addresses = '127.0.0.1'\n";
        conf += &format!("unix_socket_directories = '{}'\n", pg.dir.display());
        for (k, v) in SETTINGS {
            conf += &format!("{k} = {v}\n");
        }
        if server.has_library("pg_stat_statements") {
            conf += "shared_preload_libraries = 'pg_stat_statements'\n";
        } else {
            eprintln!(
                "[support] warning: pg_stat_statements not found next to {}; not preloading it",
                server.bin_dir.display()
            );
        }
        for (k, v) in settings {
            conf += &format!("{k} = {v}\n");
        }
        append(&pg.data_dir.join("postgresql.conf"), &conf)?;
        std::fs::write(
            pg.data_dir.join("pg_hba.conf"),
            "local all all trust\n\
             local replication all trust\n\
             host all all 127.0.0.1/32 trust\n\
             host replication all 127.0.0.1/32 trust\n",
        )
        .map_err(|e| format!("write pg_hba.conf: {e}"))?;
        let pg = pg.launch()?;
        eprintln!(
            "[support] postgres started on 127.0.0.1:{} in {:.1?}",
            pg.port,
            started.elapsed()
        );
        Ok(pg)
    }

    /// A stopped instance of `server` whose data directory will be `dir/data` (not created:
    /// initdb or pg_basebackup does that); `dir` is created and, as root, given to the
    /// `postgres` OS user.
    pub(crate) fn prepare(dir: &Path, server: &Server) -> Result<Postgres, String> {
        let as_postgres_user = is_root();
        if as_postgres_user {
            let ok = Command::new("id")
                .arg("postgres")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                return Err(
                    "running as root, but there is no `postgres` OS user to run initdb as (initdb refuses root); run scripts/install-test-deps.sh".to_string()
                );
            }
        }
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        // Read by the cleanup script (it needs pg_ctl).
        let _ = std::fs::write(dir.join("bin_dir"), server.bin_dir.display().to_string());
        if as_postgres_user {
            let out = Command::new("chown")
                .args(["-R", "postgres"])
                .arg(dir)
                .output()
                .map_err(|e| format!("chown: {e}"))?;
            if !out.status.success() {
                return Err(format!("chown -R postgres {}: {}", dir.display(), output_text(&out)));
            }
        }
        Ok(Postgres {
            port: 0,
            server: server.clone(),
            dir: dir.to_path_buf(),
            data_dir: dir.join("data"),
            log_path: dir.join("postgres.log"),
            as_postgres_user,
        })
    }

    /// `pg_ctl start` on a free port (blocking). The port was free when picked; another process
    /// may grab it first, so this retries.
    pub(crate) fn launch(self) -> Result<Postgres, String> {
        let mut last_err = String::new();
        for _ in 0..5 {
            let port = free_port();
            let out = self
                .command("pg_ctl")
                .arg("-D")
                .arg(&self.data_dir)
                .arg("-l")
                .arg(&self.log_path)
                .args(["-w", "-t", "60", "-s", "-o"])
                .arg(format!("-p {port}"))
                .arg("start")
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("run pg_ctl: {e}"))?;
            if out.status.success() {
                return Ok(Postgres { port, ..self });
            }
            let log = tail_file(&self.log_path, 30);
            last_err = format!(
                "pg_ctl start failed:\n{}\n--- {} ---\n{log}",
                output_text(&out),
                self.log_path.display()
            );
            if !log.contains("could not bind") && !log.contains("already in use") {
                break;
            }
        }
        Err(last_err)
    }

    /// A command for one of the server's programs (`initdb`, `pg_ctl`, `psql`, `pg_dump`, ...),
    /// run as the `postgres` OS user when the tests run as root; PG* variables removed.
    pub fn command(&self, program: &str) -> Command {
        let exe = self.server.bin_dir.join(program);
        let mut cmd = if self.as_postgres_user {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        };
        cmd.current_dir(&self.dir);
        for var in [
            "PGDATA",
            "PGPORT",
            "PGHOST",
            "PGHOSTADDR",
            "PGUSER",
            "PGDATABASE",
            "PGPASSWORD",
            "PGSERVICE",
            "PGOPTIONS",
        ] {
            cmd.env_remove(var);
        }
        cmd
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn bin_dir(&self) -> &Path {
        &self.server.bin_dir
    }

    /// The server build this instance runs (version, where it comes from, capabilities).
    pub fn server(&self) -> &Server {
        &self.server
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Directory holding the unix socket (and the data dir and server log).
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The server log so far.
    pub fn log(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// `postgres://postgres@127.0.0.1:PORT/DB`
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// A superuser connection to database `db` (connection task spawned on the current runtime).
    pub async fn connect_to(&self, db: &str) -> Client {
        connect_url(&self.url(db)).await
    }

    /// `CREATE DATABASE <unique(prefix)>`.
    pub async fn create_database(&self, prefix: &str) -> TestDb {
        let name = super::unique(prefix);
        let admin = self.connect_to("postgres").await;
        admin
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        TestDb { url: self.url(&name), name }
    }
}

fn append(path: &Path, text: &str) -> Result<(), String> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("append to {}: {e}", path.display()))
}

async fn connect_url(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("[support] postgres connection error: {e}");
        }
    });
    client
}

impl TestDb {
    /// A new superuser connection (its connection task is spawned on the current runtime).
    pub async fn connect(&self) -> Client {
        connect_url(&self.url).await
    }

    /// Runs one or more SQL statements (simple query protocol), panicking on error.
    pub async fn execute(&self, sql: &str) {
        self.connect()
            .await
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("SQL failed on {}: {e}\n{sql}", self.name));
    }

    /// Advances `slot` (not active) to `lsn` (text, `0/16B3748`). The slot only advances over
    /// flushed WAL, so this retries for up to 10 s; whether the slot got there.
    pub async fn advance_slot(&self, slot: &str, lsn: &str) -> bool {
        let client = self.connect().await;
        let c = &client;
        super::wait_until("slot advanced", std::time::Duration::from_secs(10), || async move {
            c.query_one(
                "SELECT confirmed_flush_lsn >= $2::text::pg_lsn \
                 FROM pg_replication_slot_advance($1, $2::text::pg_lsn) a \
                 JOIN pg_replication_slots s ON s.slot_name = a.slot_name",
                &[&slot, &lsn],
            )
            .await
            .map(|r| r.get::<_, bool>(0))
            .unwrap_or(false)
        })
        .await
    }

    /// Creates Debezium's outbox table `table` (may be schema-qualified; the schema is created
    /// when missing).
    pub async fn create_outbox(&self, table: &str) {
        let mut sql = String::new();
        if let Some((schema, _)) = table.rsplit_once('.') {
            sql += &format!("CREATE SCHEMA IF NOT EXISTS {schema};\n");
        }
        sql += &format!(
            "CREATE TABLE {table} (\n\
             \x20 id uuid PRIMARY KEY,\n\
             \x20 aggregatetype varchar(255) NOT NULL,\n\
             \x20 aggregateid varchar(255) NOT NULL,\n\
             \x20 type varchar(255) NOT NULL,\n\
             \x20 payload jsonb,\n\
             \x20 created_at timestamptz NOT NULL DEFAULT now()\n\
             );"
        );
        self.execute(&sql).await;
    }

    /// Inserts one outbox row with a random id (returned, as text). `payload` is JSON text or
    /// None for SQL NULL.
    pub async fn insert_outbox(
        &self,
        table: &str,
        aggregatetype: &str,
        aggregateid: &str,
        event_type: &str,
        payload: Option<&str>,
    ) -> String {
        let client = self.connect().await;
        let row = client
            .query_one(
                &format!(
                    "INSERT INTO {table} (id, aggregatetype, aggregateid, type, payload) \
                     VALUES (gen_random_uuid(), $1, $2, $3, $4::text::jsonb) RETURNING id::text"
                ),
                &[&aggregatetype, &aggregateid, &event_type, &payload],
            )
            .await
            .unwrap_or_else(|e| panic!("insert into {table}: {e}"));
        row.get(0)
    }

    /// `pg_current_wal_lsn() - confirmed_flush_lsn` of the slot, in bytes (None: no such slot,
    /// or it has no confirmed_flush_lsn).
    pub async fn slot_lag_bytes(&self, slot: &str) -> Option<i64> {
        let client = self.connect().await;
        client
            .query_opt(
                "SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint \
                 FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .unwrap_or_else(|e| panic!("query slot {slot}: {e}"))
            .and_then(|row| row.get::<_, Option<i64>>(0))
    }

    /// The slot's confirmed_flush_lsn as text (`0/16B3748`), None if there is no such slot.
    pub async fn confirmed_flush_lsn(&self, slot: &str) -> Option<String> {
        let client = self.connect().await;
        client
            .query_opt(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .unwrap_or_else(|e| panic!("query slot {slot}: {e}"))
            .and_then(|row| row.get::<_, Option<String>>(0))
    }

    /// Whether a walsender is streaming from the slot (None: no such slot).
    pub async fn slot_active(&self, slot: &str) -> Option<bool> {
        let client = self.connect().await;
        client
            .query_opt("SELECT active FROM pg_replication_slots WHERE slot_name = $1", &[&slot])
            .await
            .unwrap_or_else(|e| panic!("query slot {slot}: {e}"))
            .map(|row| row.get::<_, bool>(0))
    }
}

/// A superuser connection to a libpq URL (its connection task spawned on the current runtime).
pub async fn connect(url: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// A PostgreSQL instance of its own, for tests that restart or stop it (the shared one must
/// never be restarted: every test in the process uses it). Stopped (immediate) on drop; its
/// postmaster pid is also left where the harness watchdog kills it if the process dies first.
pub struct PrivatePostgres {
    pub pg: Postgres,
    dir: PathBuf,
}

impl PrivatePostgres {
    /// initdb + start in a fresh scratch directory (blocking: call from `spawn_blocking` inside
    /// a runtime, or before one).
    pub fn start(prefix: &str) -> PrivatePostgres {
        let server = Server::selected().unwrap_or_else(|e| panic!("private postgres: {e}"));
        PrivatePostgres::start_on(prefix, &server, &[])
    }

    /// Like [`PrivatePostgres::start`] with `server`'s programs and extra postgresql.conf
    /// `settings` (see [`Postgres::start_with`]).
    pub fn start_on(prefix: &str, server: &Server, settings: &[(&str, &str)]) -> PrivatePostgres {
        let dir = scratch_dir(prefix);
        let pg = Postgres::start_with(&dir, server, settings)
            .unwrap_or_else(|e| panic!("private postgres ({}): {e}", server.describe()));
        PrivatePostgres::adopt(pg)
    }

    /// Takes charge of a running instance whose directory is its own scratch dir: stops it on
    /// drop and leaves its postmaster pid for the watchdog.
    pub(crate) fn adopt(pg: Postgres) -> PrivatePostgres {
        let dir = pg.socket_dir().to_path_buf();
        let private = PrivatePostgres { pg, dir };
        private.write_pid_file();
        private
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The postmaster's pid (first line of postmaster.pid).
    pub fn postmaster_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.pg.data_dir().join("postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next().and_then(|l| l.trim().parse().ok()))
    }

    fn write_pid_file(&self) {
        if let Some(pid) = self.postmaster_pid() {
            let _ = std::fs::write(self.dir.join(PID_FILE), pid.to_string());
        }
    }

    /// `pg_ctl restart -m fast` (same port: pg_ctl reuses postmaster.opts). Blocking. Returns
    /// how long pg_ctl took, i.e. fast shutdown plus start-up.
    pub fn restart_fast(&self) -> Result<Duration, String> {
        let started = Instant::now();
        let out = self
            .pg
            .command("pg_ctl")
            .arg("-D")
            .arg(self.pg.data_dir())
            .arg("-l")
            .arg(self.pg.log_path())
            .args(["-w", "-t", "60", "-s", "-m", "fast", "restart"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run pg_ctl restart: {e}"))?;
        let took = started.elapsed();
        self.write_pid_file();
        if out.status.success() {
            Ok(took)
        } else {
            Err(format!(
                "pg_ctl restart failed after {took:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// The last `n` lines of the server log.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.pg.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = self
            .pg
            .command("pg_ctl")
            .arg("-D")
            .arg(self.pg.data_dir())
            .args(["-s", "-m", "immediate", "stop"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_file(self.dir.join(PID_FILE));
    }
}

/// Inserts the `n`th outbox row of aggregate Order/o-1 (`type` = `event_type`, payload
/// `{"n": n}`) through `client`: a session of another role, or an open transaction, where
/// [`TestDb::insert_outbox`] would open its own connection. Returns the row's id.
pub async fn insert_numbered_row(
    client: &impl GenericClient,
    event_type: &str,
    n: usize,
) -> String {
    let row = client
        .query_one(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
             VALUES (gen_random_uuid(), 'Order', 'o-1', $1, $2::text::jsonb) RETURNING id::text",
            &[&event_type, &format!("{{\"n\": {n}}}")],
        )
        .await
        .unwrap_or_else(|e| panic!("insert into outbox: {e}"));
    row.get(0)
}
