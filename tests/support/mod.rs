//! Shared integration-test harness: one PostgreSQL instance and one Kafka broker (Apache Kafka
//! by default, tansu with `WALRELAY_TEST_BROKER=tansu`: see [`broker`]) per test process, plus
//! helpers to consume topics and to run the real `walrelay` binary. A schema registry
//! (Apicurio Registry, see [`registry`]) is started only by the tests that ask for one.
//!
//! Also usable from an example: `#[path = "../tests/support/mod.rs"] mod support;`
//! (no `#[test]` items live here).
//!
//! Everything a process starts lives under `/tmp/walrelay-test-<pid>/`. A detached watchdog
//! shell stops PostgreSQL, kills the broker and any relay left behind, and removes that
//! directory once the test process is gone (statics are never dropped at exit).
#![allow(dead_code, unused_imports)]

pub mod broker;
pub mod cluster;
#[cfg(test)]
pub mod fuzz;
pub mod kafka;
pub mod kafka_cluster;
pub mod mtls_proxy;
pub mod nats;
pub mod postgres;
pub mod process;
pub mod proxy;
pub mod rabbitmq;
pub mod readback;
pub mod registry;
pub mod registry_decode;
pub mod registry_http;
pub mod secure_kafka;
pub mod servers;
pub mod sinks;
pub mod slot;
pub mod sqs;
pub mod webhook;
pub mod writer;

pub use broker::Broker;
pub use kafka::{consume, consume_topics, create_topic, produce, Consumed};
pub use postgres::{Postgres, TestDb};
pub use process::RelayProcess;
pub use registry::{private_registry, registry, Registry};
pub use registry_decode::decode_with_confluent;
pub use servers::{note, Capability, Server};

use std::collections::HashSet;
use std::future::Future;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The per-process services.
pub struct Services {
    pub pg: Postgres,
    pub broker: Broker,
}

static SERVICES: OnceLock<Result<Services, String>> = OnceLock::new();

/// Starts PostgreSQL and the broker once per process (blocking; safe to call from inside a
/// tokio runtime since it only uses std::process and std::thread). Panics with a clear
/// message when something is missing; every later call panics with the same message.
pub fn services() -> &'static Services {
    let result = SERVICES.get_or_init(|| {
        let started = Instant::now();
        // Report everything that is missing at once, before starting anything.
        let kind = broker::Kind::selected()?;
        let missing: Vec<String> = [postgres::find_bin_dir().err(), kind.check_installed().err()]
            .into_iter()
            .flatten()
            .collect();
        if !missing.is_empty() {
            return Err(missing.join("\n"));
        }
        let root = scratch_root();
        // The JVM starts while initdb runs.
        let broker_dir = root.join("broker");
        let broker = std::thread::spawn(move || Broker::start(&broker_dir, free_port()));
        let pg = Postgres::start(&root.join("pg"))?;
        let broker = broker.join().map_err(|_| "starting the broker panicked".to_string())??;
        print_broker_log_on_failure("the shared broker's", broker.log_path().to_path_buf());
        // Printed past libtest's capture, so every run says which servers it tested.
        note(&format!(
            "services up in {:.1?}: {} on 127.0.0.1:{}, broker {} on {} (pid {}), dir {}",
            started.elapsed(),
            pg.server().describe(),
            pg.port(),
            broker.describe(),
            broker.bootstrap(),
            broker.pid(),
            root.display()
        ));
        Ok(Services { pg, broker })
    });
    match result {
        Ok(s) => s,
        Err(e) => panic!("test services could not be started: {e}"),
    }
}

/// A failing test (a panic on a test's thread) prints the last lines of a broker's log (`whose`:
/// "the shared broker's") after its message: libtest shows captured output only on failure.
pub(crate) fn print_broker_log_on_failure(whose: &'static str, log: PathBuf) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        eprintln!("--- last lines of {whose} log {} ---\n{}", log.display(), tail_file(&log, 40));
    }));
}

/// The shared instance when its server has `cap`; else a second shared instance, started on
/// first use, of an installed server that has it ([`servers::server_with`] prints which one, so
/// a test never runs on another version unannounced). Blocking, like [`services`].
pub fn shared_pg_with(cap: Capability) -> &'static Postgres {
    let main = &services().pg;
    if main.server().has(cap) {
        return main;
    }
    let server = servers::server_with(cap).unwrap_or_else(|e| panic!("{e}"));
    // One per server; leaked like the statics they are (the watchdog stops them).
    static OTHERS: Mutex<Vec<&'static postgres::PrivatePostgres>> = Mutex::new(Vec::new());
    let mut others = OTHERS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = others.iter().find(|p| p.pg.bin_dir() == server.bin_dir) {
        return &p.pg;
    }
    let started = Box::leak(Box::new(postgres::PrivatePostgres::start_on("shared", &server, &[])));
    note(&format!(
        "second shared instance: {} on 127.0.0.1:{}",
        server.describe(),
        started.pg.port()
    ));
    others.push(started);
    &started.pg
}

/// The Python of the virtualenv scripts/install-test-deps.sh makes (`$WALRELAY_TEST_PYENV`,
/// default `~/.local/walrelay-pyenv`), with the consumers the tests decode records with: the
/// CloudEvents SDK, protobuf + grpcio-tools, confluent-kafka's schema-registry serdes.
pub fn pyenv_python() -> PathBuf {
    let env = std::env::var_os("WALRELAY_TEST_PYENV").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".local/walrelay-pyenv")
    });
    let python = env.join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/install-test-deps.sh (it installs the Python consumers \
         cloudevents, protobuf, grpcio-tools and confluent-kafka with its schema-registry serdes)",
        python.display()
    );
    python
}

/// `prefix_<pid>_<counter>`, lowercase `[a-z0-9_]` only (usable as a PostgreSQL identifier,
/// slot name, publication name and Kafka topic). Unique within the process, and across
/// concurrently running test binaries through the pid.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut p: String = prefix
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    p.truncate(40); // identifiers are limited to 63 bytes in PostgreSQL
    if p.is_empty() || p.starts_with(|c: char| c.is_ascii_digit()) {
        p.insert(0, 't');
    }
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{p}_{}_{n}", std::process::id())
}

/// Polls `f` every 50 ms until it returns true (→ true) or `deadline` has passed (→ false,
/// after one last try). Prints what it waited for when it gives up. Use this instead of sleeps.
pub async fn wait_until<F, Fut>(what: &str, deadline: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if f().await {
            return true;
        }
        if start.elapsed() >= deadline {
            eprintln!("[support] timed out after {deadline:?} waiting for: {what}");
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago (bind port 0, read it, release it), and
/// never handed out before in this process: a test that kills its broker and starts it again on
/// the same port must not find another test's broker there, which the OS would happily give
/// the freed port to.
pub fn free_port() -> u16 {
    static HANDED_OUT: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    let mut handed_out = HANDED_OUT.get_or_init(Default::default).lock().unwrap();
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("bind 127.0.0.1:0");
        if handed_out.insert(port) {
            return port;
        }
    }
}

/// `/tmp/walrelay-test-<pid>`: this process's scratch directory. Created on first use, which
/// also removes stale directories of dead processes and spawns the watchdog that stops
/// everything started under it and removes it once this process is gone.
pub fn scratch_root() -> PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("walrelay-test-{}", std::process::id()));
        // A leftover from an earlier process with the same pid is stale by definition.
        if root.exists() {
            let _ = std::fs::remove_dir_all(&root);
        }
        std::fs::create_dir_all(&root).unwrap_or_else(|e| panic!("create {}: {e}", root.display()));
        // The postgres OS user (tests running as root) must be able to traverse it.
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755));
        cleanup_stale_dirs();
        spawn_watchdog(&root);
        root
    })
    .clone()
}

/// A fresh directory `<scratch_root>/<prefix>_<n>` for a test's own files.
pub fn scratch_dir(prefix: &str) -> PathBuf {
    let dir = scratch_root().join(unique(prefix));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

/// Name of the pid files the watchdog kills (`<scratch_root>/*/PID_FILE`) when the test
/// process is gone.
pub(crate) const PID_FILE: &str = "kill-on-exit.pid";

/// True when this process runs with effective uid 0.
pub(crate) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

fn pid_alive(pid: u32) -> bool {
    // A zombie still has /proc/PID but holds nothing.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')).unwrap_or(true),
        Err(_) => false,
    }
}

/// Shell snippet that stops whatever lives in scratch dir `root` (shared by the watchdog and
/// the stale-dir cleanup).
fn cleanup_script(root: &Path) -> String {
    let root = shell_quote(&root.display().to_string());
    let as_pg = if is_root() { "runuser -u postgres -- " } else { "" };
    format!(
        r#"for f in {root}/*/{PID_FILE} {root}/*/*/{PID_FILE}; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
if [ -f {root}/pg/data/postmaster.pid ]; then
  b=$(cat {root}/pg/bin_dir 2>/dev/null)
  if [ -n "$b" ]; then cd / && {as_pg}"$b/pg_ctl" -D {root}/pg/data -s -m immediate stop >/dev/null 2>&1; fi
  p=$(head -n 1 {root}/pg/data/postmaster.pid 2>/dev/null)
  [ -n "$p" ] && kill -KILL "$p" 2>/dev/null
fi
rm -rf {root}
"#
    )
}

/// Starts the child in a session of its own, as a service manager starts a service. Linux's
/// autogroup scheduling (`/proc/sys/kernel/sched_autogroup_enabled`, on by default) shares the
/// CPU between sessions first and between threads second, and every PostgreSQL backend calls
/// `setsid` itself: a relay or broker left in the harness's session would share one slice with
/// each other and with the benchmark's writers while each backend had a slice of its own (at
/// 20,000 transactions/s that starved the relay and the broker: each waited longer to run than
/// it ran). Also keeps a Ctrl-C of the test run from reaching the child.
pub fn own_session(cmd: &mut Command) {
    // SAFETY: setsid is async-signal-safe, as code between fork and exec must be.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, || {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn spawn_watchdog(root: &Path) {
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done\n{}",
        cleanup_script(root),
        pid = std::process::id()
    );
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(script)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // Own process group: a Ctrl-C on the test run must not take the watchdog down with it.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    match cmd.spawn() {
        Ok(child) => {
            let _ = std::fs::write(root.join("watchdog.pid"), child.id().to_string());
            // Never waited for: it outlives this process on purpose.
            std::mem::forget(child);
        }
        Err(e) => eprintln!("[support] warning: could not spawn the cleanup watchdog: {e}"),
    }
}

/// Removes `/tmp/walrelay-test-<pid>` directories whose process is gone (and stops what a
/// killed watchdog left running there).
fn cleanup_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    let me = std::process::id();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("walrelay-test-").and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me || pid_alive(pid) {
            continue;
        }
        let root = entry.path();
        // If its watchdog still runs it will clean up by itself.
        let watchdog_alive = std::fs::read_to_string(root.join("watchdog.pid"))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .is_some_and(pid_alive);
        if watchdog_alive {
            continue;
        }
        let _ = Command::new("sh")
            .arg("-c")
            .arg(cleanup_script(&root))
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

pub(crate) fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Last `lines` lines of a log file (for error messages).
pub(crate) fn tail_file(path: &Path, lines: usize) -> String {
    let text = std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_else(|e| format!("<cannot read {}: {e}>", path.display()));
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
