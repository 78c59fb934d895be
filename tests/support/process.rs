//! The processes a test runs or disturbs: the real `walrelay` binary as a relay
//! ([`RelayProcess`]) or as a one-shot command ([`walrelay`]), what its log says, and signals
//! and memory figures of any process by pid.
//!
//! Binary: `WALRELAY_BIN` if set, else cargo's `CARGO_BIN_EXE_walrelay` (integration tests
//! only), else `target/release/walrelay` or `target/debug/walrelay` (for examples).

use super::{scratch_dir, tail_file, PID_FILE};
use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use walrelay::lsn::Lsn;

pub struct RelayProcess {
    child: Child,
    dir: PathBuf,
    config_path: PathBuf,
    log_path: PathBuf,
    status: Option<ExitStatus>,
}

/// The walrelay executable to run.
pub fn walrelay_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("WALRELAY_BIN").filter(|v| !v.is_empty()) {
        return PathBuf::from(bin);
    }
    if let Some(bin) = option_env!("CARGO_BIN_EXE_walrelay") {
        return PathBuf::from(bin);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    for profile in ["release", "debug"] {
        let bin = target.join(profile).join("walrelay");
        if bin.is_file() {
            return bin;
        }
    }
    panic!(
        "walrelay binary not found: set WALRELAY_BIN, or build it (cargo build --bin walrelay) into {}",
        target.display()
    );
}

/// Exit code of a status; death by signal N is reported as 128 + N (as shells do).
fn code_of(status: ExitStatus) -> i32 {
    status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(-1)
}

impl RelayProcess {
    /// Writes `config_toml` to a temp file and runs `walrelay run --config FILE` with
    /// `RUST_LOG=walrelay=debug,info`; stdout and stderr go to a log file (see [`Self::log`]).
    pub fn start(config_toml: &str) -> RelayProcess {
        Self::start_with(config_toml, &[], &[])
    }

    /// Like [`Self::start`] with extra arguments after `run --config FILE` and extra
    /// environment variables (which may override RUST_LOG).
    pub fn start_with(config_toml: &str, args: &[&str], envs: &[(&str, &str)]) -> RelayProcess {
        Self::start_program(&walrelay_bin(), config_toml, args, envs)
    }

    /// Like [`Self::start_with`] but runs `bin` instead of walrelay (`bin run --config FILE
    /// ARGS...`), e.g. a stand-in script.
    pub fn start_program(
        bin: &Path,
        config_toml: &str,
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> RelayProcess {
        let dir = scratch_dir("relay");
        let config_path = dir.join("walrelay.toml");
        std::fs::write(&config_path, config_toml)
            .unwrap_or_else(|e| panic!("write {}: {e}", config_path.display()));
        let log_path = dir.join("walrelay.log");
        let log = File::create(&log_path)
            .unwrap_or_else(|e| panic!("create {}: {e}", log_path.display()));
        let log_err = log.try_clone().expect("clone log file handle");
        let mut cmd = Command::new(bin);
        cmd.arg("run")
            .arg("--config")
            .arg(&config_path)
            .args(args)
            .env("RUST_LOG", "walrelay=debug,info")
            .envs(envs.iter().copied())
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        super::own_session(&mut cmd);
        // ETXTBSY: a just-written executable may briefly be held open for writing by a child
        // another thread forked at that moment; retry a few times.
        let mut attempts = 0;
        let child = loop {
            match cmd.spawn() {
                Err(e) if e.raw_os_error() == Some(26) && attempts < 20 => {
                    attempts += 1;
                    std::thread::sleep(Duration::from_millis(25));
                }
                r => break r.unwrap_or_else(|e| panic!("start {}: {e}", bin.display())),
            }
        };
        let _ = std::fs::write(dir.join(PID_FILE), child.id().to_string());
        RelayProcess { child, dir, config_path, log_path, status: None }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    fn poll(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Ok(Some(st)) = self.child.try_wait() {
                self.status = Some(st);
                let _ = std::fs::remove_file(self.dir.join(PID_FILE));
            }
        }
        self.status
    }

    /// SIGKILL and reap (no-op if it already exited).
    pub fn kill(&mut self) {
        if self.poll().is_none() {
            let _ = self.child.kill();
            if let Ok(st) = self.child.wait() {
                self.status = Some(st);
            }
            let _ = std::fs::remove_file(self.dir.join(PID_FILE));
        }
    }

    /// SIGTERM, then wait up to 30 s for it to exit; returns its exit code (128 + N if a
    /// signal N ended it). If it is still running after 30 s it is SIGKILLed and None returned.
    pub fn terminate(&mut self) -> Option<i32> {
        if let Some(st) = self.poll() {
            return Some(code_of(st));
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        match self.wait_exit(Duration::from_secs(30)) {
            Some(code) => Some(code),
            None => {
                eprintln!(
                    "[support] walrelay (pid {}) ignored SIGTERM for 30 s; killing it",
                    self.pid()
                );
                self.kill();
                None
            }
        }
    }

    /// Waits up to `deadline` for the relay to exit by itself; its exit code (128 + N for
    /// signal N), or None if it is still running.
    pub fn wait_exit(&mut self, deadline: Duration) -> Option<i32> {
        let start = Instant::now();
        loop {
            if let Some(st) = self.poll() {
                return Some(code_of(st));
            }
            if start.elapsed() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn is_running(&mut self) -> bool {
        self.poll().is_none()
    }

    /// Everything it printed so far (stdout and stderr interleaved).
    pub fn log(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Polls the log until it contains `needle` (true) or `deadline` passes (false).
    pub async fn wait_for_log(&self, needle: &str, deadline: Duration) -> bool {
        super::wait_until(&format!("walrelay log to contain {needle:?}"), deadline, || {
            let found = self.log().contains(needle);
            async move { found }
        })
        .await
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let was_running = self.is_running();
        if was_running {
            self.kill();
        }
        if std::thread::panicking() {
            eprintln!(
                "--- walrelay (pid {}, {}) log tail: {} ---\n{}\n--- end of walrelay log ---",
                self.child.id(),
                if was_running { "killed" } else { "had exited" },
                self.log_path.display(),
                tail_file(&self.log_path, 200)
            );
        }
    }
}

/// GET `path` from walrelay's HTTP listener on 127.0.0.1:`port`: the whole response (status
/// line, headers, body), or None when nothing answered within 2 s.
pub async fn http_get(port: u16, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fetch = async {
        let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        conn.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes()).await.ok()?;
        let mut response = String::new();
        conn.read_to_string(&mut response).await.ok()?;
        Some(response)
    };
    tokio::time::timeout(Duration::from_secs(2), fetch).await.ok().flatten()
}

/// The value of an unlabelled metric in Prometheus text.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l[name.len() + 1..].trim().parse().ok())
}

// ---------------------------------------------------------------------------------------------
// one-shot commands

/// What a one-shot `walrelay` command did.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn lines_starting(&self, prefix: &str) -> Vec<&str> {
        self.stdout.lines().filter(|l| l.starts_with(prefix)).collect()
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout ---\n{}--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `walrelay <args…> --config <file with config_toml>` (no config when `None`).
pub fn walrelay(args: &[&str], config_toml: Option<&str>) -> Run {
    walrelay_command(args, config_toml, &[])
}

/// [`walrelay`] with environment variables set (a secret, as a deployment passes it).
pub fn walrelay_with_env(args: &[&str], config_toml: &str, envs: &[(&str, &str)]) -> Run {
    walrelay_command(args, Some(config_toml), envs)
}

fn walrelay_command(args: &[&str], config_toml: Option<&str>, envs: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(walrelay_bin());
    cmd.envs(envs.iter().copied());
    cmd.args(args);
    if let Some(text) = config_toml {
        let path = scratch_dir("admin").join("walrelay.toml");
        std::fs::write(&path, text).unwrap();
        cmd.arg("--config").arg(path);
    }
    let out = cmd.env("RUST_LOG", "warn").output().expect("run walrelay");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `walrelay` in a blocking thread, so the test's runtime keeps serving its connections.
pub async fn walrelay_async(args: &[&str], config_toml: Option<&str>) -> Run {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let config = config_toml.map(str::to_owned);
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        walrelay(&args, config.as_deref())
    })
    .await
    .unwrap()
}

// ---------------------------------------------------------------------------------------------
// the relay's log

/// The value of `field=` on a log line, when it looks like an LSN (`0/1A2B3C`).
pub fn lsn_field(line: &str, field: &str) -> Option<Lsn> {
    let needle = format!("{field}=");
    let start = line.find(&needle)? + needle.len();
    let text: String = line[start..]
        .trim_start_matches('"')
        .chars()
        .take_while(|c| c.is_ascii_hexdigit() || *c == '/')
        .collect();
    text.parse().ok()
}

/// The `end_lsn` of every "transaction read" line of a walrelay debug log, in log order
/// (a transaction replayed by a later session appears again).
pub fn transactions_read(log: &str) -> Vec<Lsn> {
    log.lines()
        .filter(|l| l.contains("transaction read"))
        .filter_map(|l| lsn_field(l, "end_lsn"))
        .collect()
}

/// The end of the first transaction the relay read past `lsn` (the slot's confirmed position
/// before a fault): the commit the slot must not be confirmed past until Kafka acks it.
pub fn first_read_after(log: &str, lsn: Lsn) -> Option<Lsn> {
    transactions_read(log).into_iter().filter(|l| *l > lsn).min()
}

/// The LSN written right after `marker` on a log line (`… at LSN 0/1A2B3C …`).
pub fn lsn_after(line: &str, marker: &str) -> Option<Lsn> {
    let rest = line.split(marker).nth(1)?;
    let text: String = rest.chars().take_while(|c| c.is_ascii_hexdigit() || *c == '/').collect();
    text.parse().ok()
}

/// Waits for exit code 1 within 30 s and a `hint` in the log, and checks it did not loop.
pub fn assert_stops_with_hint(relay: &mut RelayProcess, what: &str) -> String {
    let started = Instant::now();
    let code = relay.wait_exit(Duration::from_secs(30));
    let log = relay.log();
    assert_eq!(
        code,
        Some(1),
        "{what}: the relay did not stop with exit code 1 within 30 s:\n{log}"
    );
    let line = log.lines().find(|l| l.contains("walrelay stopped")).unwrap_or_default().to_string();
    println!("{what}: exit 1 after {:.1?}: {line}", started.elapsed());
    assert!(line.contains("hint=") && !line.contains("hint=\"\""), "{what}: no hint: {line}");
    line
}

// ---------------------------------------------------------------------------------------------
// any process

/// `kill -<sig> <pid>`; true when the signal was delivered.
pub fn signal(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// SIGSTOP: the process is frozen (its sockets stay open; the kernel still accepts bytes).
pub fn freeze(pid: u32) {
    assert!(signal(pid, "STOP"), "kill -STOP {pid} failed");
}

/// SIGCONT.
pub fn thaw(pid: u32) {
    assert!(signal(pid, "CONT"), "kill -CONT {pid} failed");
}

/// A `kB` field of /proc/PID/status (`VmRSS`, `VmHWM`, …); None if the process is gone.
pub fn proc_status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// Resident set size in kB.
pub fn rss_kb(pid: u32) -> Option<u64> {
    proc_status_kb(pid, "VmRSS")
}

/// Peak resident set size (high-water mark) in kB.
pub fn hwm_kb(pid: u32) -> Option<u64> {
    proc_status_kb(pid, "VmHWM")
}

/// kB as MB, for figures a test prints.
pub fn mb(kb: u64) -> f64 {
    kb as f64 / 1024.0
}
