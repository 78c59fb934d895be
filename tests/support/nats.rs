//! A real NATS server with JetStream for the NATS sink's tests: nats-server v2.15.3, which
//! scripts/install-test-deps.sh builds from the Go module proxy into `$WALRELAY_NATS_HOME/bin`
//! (default `~/.local/walrelay-nats/bin`).
//!
//! [`nats`] starts one per test process on first use, on a free port with its JetStream store
//! under the per-process test directory (no monitoring port). [`private_nats`] starts one a
//! test owns, for tests that stop it: [`NatsServer::stop`] then [`NatsServer::start`] bring
//! it back on the same port and store, so its streams and their messages survive.

use super::sinks::Delivered;
use super::{free_port, note, scratch_dir, tail_file, PID_FILE};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use walrelay::sink::nats::{self as sink, NatsConfig};

/// How long a start may take: ~0.1 s on an idle machine, more while builds share the cores
/// and JetStream recovers its streams.
const START: Duration = Duration::from_secs(60);
/// How long SIGTERM may take before SIGKILL.
const STOP: Duration = Duration::from_secs(15);

/// `$WALRELAY_NATS_HOME/bin/nats-server`, or what to run when it is missing.
pub fn installed() -> Result<PathBuf, String> {
    let home = std::env::var_os("WALRELAY_NATS_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
                .join(".local/walrelay-nats")
        });
    let bin = home.join("bin/nats-server");
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "nats-server is not installed at {}: run scripts/install-test-deps.sh (it builds \
             github.com/nats-io/nats-server/v2@v2.15.3 with go install), or set WALRELAY_NATS_HOME",
            bin.display()
        ))
    }
}

/// One nats-server process with JetStream on 127.0.0.1.
pub struct NatsServer {
    bin: PathBuf,
    version: String,
    port: u16,
    dir: PathBuf,
    log_path: PathBuf,
    child: Mutex<Option<Child>>,
    /// How long the last start took to answer.
    started_in: Mutex<Duration>,
    /// Arguments beyond the address, port and name: `-js -sd <store>` unless a test wants a
    /// server without JetStream, and a login.
    args: Vec<String>,
}

static SHARED: OnceLock<Result<NatsServer, String>> = OnceLock::new();

/// The server the test process shares, started on first use (blocking). Never stop it: stop
/// a [`private_nats`].
pub fn nats() -> &'static NatsServer {
    let result = SHARED.get_or_init(|| {
        let server = NatsServer::launch(&super::scratch_root().join("nats"), free_port(), &[])?;
        super::print_broker_log_on_failure("the shared NATS server's", server.log_path.clone());
        note(&format!("shared NATS server: {}", server.describe()));
        Ok(server)
    });
    match result {
        Ok(s) => s,
        Err(e) => panic!("the NATS server could not be started: {e}"),
    }
}

/// A server of the test's own on a free port, for tests that stop and start it. Blocking.
/// Killed on drop.
pub fn private_nats() -> NatsServer {
    NatsServer::launch(&scratch_dir("nats"), free_port(), &[])
        .unwrap_or_else(|e| panic!("private NATS server: {e}"))
}

/// A [`private_nats`] that wants `user` and `password` of every client.
pub fn private_nats_with_login(user: &str, password: &str) -> NatsServer {
    NatsServer::launch(&scratch_dir("nats"), free_port(), &["--user", user, "--pass", password])
        .unwrap_or_else(|e| panic!("private NATS server with a login: {e}"))
}

/// A [`private_nats`] without JetStream: core NATS only, as a server started without `-js`.
pub fn private_nats_without_jetstream() -> NatsServer {
    NatsServer::launch(&scratch_dir("nats"), free_port(), &["--no-jetstream"])
        .unwrap_or_else(|e| panic!("private NATS server without JetStream: {e}"))
}

impl NatsServer {
    /// Starts nats-server on 127.0.0.1:`port`, its store and log under `dir`; `extra`
    /// arguments are passed on, but `--no-jetstream` leaves JetStream off.
    fn launch(dir: &Path, port: u16, extra: &[&str]) -> Result<NatsServer, String> {
        let bin = installed()?;
        let version = Command::new(&bin)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .map_err(|e| format!("{} --version: {e}", bin.display()))?;
        std::fs::create_dir_all(dir.join("store"))
            .map_err(|e| format!("create {}: {e}", dir.display()))?;
        let server = NatsServer {
            bin,
            version,
            port,
            dir: dir.to_path_buf(),
            log_path: dir.join("nats-server.log"),
            child: Mutex::new(None),
            started_in: Mutex::new(Duration::ZERO),
            args: args(dir, extra),
        };
        server.spawn()?;
        Ok(server)
    }

    /// Starts the process (its log appended to) and waits until it says it is ready.
    fn spawn(&self) -> Result<(), String> {
        let started = Instant::now();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| format!("open {}: {e}", self.log_path.display()))?;
        let ready_before = self.ready_lines();
        let mut cmd = Command::new(&self.bin);
        cmd.args(["-a", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-n", &format!("walrelay-test-{}", self.port)])
            .args(&self.args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        super::own_session(&mut cmd);
        let mut child = cmd.spawn().map_err(|e| format!("spawn {}: {e}", self.bin.display()))?;
        let _ = std::fs::write(self.dir.join(PID_FILE), child.id().to_string());
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "nats-server exited with {status} during start-up; {}",
                    tail_file(&self.log_path, 30)
                ));
            }
            // "Server is ready" comes after JetStream has recovered its streams.
            if self.ready_lines() > ready_before {
                break;
            }
            if started.elapsed() > START {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "nats-server did not say it is ready within {START:?}; {}",
                    tail_file(&self.log_path, 30)
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        *self.child.lock().unwrap() = Some(child);
        *self.started_in.lock().unwrap() = started.elapsed();
        Ok(())
    }

    fn ready_lines(&self) -> usize {
        std::fs::read_to_string(&self.log_path)
            .map(|t| t.matches("Server is ready").count())
            .unwrap_or(0)
    }

    /// Stops the server as an operator would (SIGTERM, SIGKILL after 15 s) and waits for the
    /// process to be gone. The store stays.
    pub fn stop(&self) {
        let Some(mut child) = self.child.lock().unwrap().take() else {
            return;
        };
        // SAFETY: kill(2) on the pid of a child we have not waited for yet.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + STOP;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
            }
        }
        let _ = std::fs::remove_file(self.dir.join(PID_FILE));
    }

    /// Starts a stopped server again on the same port and store, and waits until it is ready.
    pub fn start(&self) {
        if self.is_running() {
            return;
        }
        self.spawn().unwrap_or_else(|e| panic!("restarting the NATS server: {e}"));
    }

    pub fn is_running(&self) -> bool {
        let mut child = self.child.lock().unwrap();
        matches!(child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn version(&self) -> &str {
        &self.version
    }

    pub fn started_in(&self) -> Duration {
        *self.started_in.lock().unwrap()
    }

    pub fn describe(&self) -> String {
        format!(
            "{} on {} (JetStream store {}, ready in {:.1?})",
            self.version,
            self.url(),
            self.dir.join("store").display(),
            self.started_in()
        )
    }

    pub fn log_tail(&self, n: usize) -> String {
        tail_file(&self.log_path, n)
    }

    /// The TOML of a `[nats]` section for this server: `stream` and the subjects it captures
    /// (what `walrelay setup` creates), a 5 s PubAck timeout.
    pub fn config_section(&self, stream: &str, subjects: &[&str]) -> String {
        format!(
            "[nats]\nurl = \"{}\"\ntimeout = \"5s\"\nstream = \"{stream}\"\nstream_subjects = \"{}\"\n",
            self.url(),
            subjects.join(",")
        )
    }

    /// The sink's configuration for this server, as [`NatsServer::config_section`] writes it.
    pub fn config(&self, stream: &str, subjects: &[&str]) -> NatsConfig {
        let opts = [
            ("url", self.url()),
            ("timeout", "5s".to_string()),
            ("stream", stream.to_string()),
            ("stream_subjects", subjects.join(",")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        sink::parse(&opts).unwrap_or_else(|e| panic!("[nats] for the test server: {e}"))
    }

    /// Creates `stream` capturing `subjects` with walrelay's own setup.
    pub async fn create_stream(&self, stream: &str, subjects: &[&str]) -> NatsConfig {
        let config = self.config(stream, subjects);
        sink::setup(&config, &[]).await.unwrap_or_else(|e| panic!("setup of {stream}: {e:?}"));
        config
    }

    /// Everything the stream holds on `subject`, in stream order, read without consuming.
    pub async fn read(&self, subject: &str) -> Vec<Delivered> {
        let config = self.config("unused", &[]);
        let stored = sink::read_back(&config, subject, 1, usize::MAX)
            .await
            .unwrap_or_else(|e| panic!("reading {subject} back: {e:?}"));
        stored
            .into_iter()
            .map(|m| {
                let key = m
                    .headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(sink::KEY_HEADER))
                    .map(|(_, v)| v.clone());
                Delivered {
                    routed_to: m.subject,
                    dedup_id: m.msg_id,
                    key,
                    headers: m.headers,
                    body: m.payload.to_vec(),
                }
            })
            .collect()
    }
}

/// `-js -sd <dir>/store` and `extra`, or `extra` without `--no-jetstream` alone.
fn args(dir: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = Vec::new();
    if !extra.contains(&"--no-jetstream") {
        args.extend(["-js".to_string(), "-sd".to_string()]);
        args.push(dir.join("store").display().to_string());
    }
    args.extend(extra.iter().filter(|a| **a != "--no-jetstream").map(|a| a.to_string()));
    args
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        // The shared server lives in a static and is never dropped (the watchdog kills it).
        if let Some(mut child) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(self.dir.join(PID_FILE));
    }
}

/// A private server in operator (JWT) mode and its users' `.creds` files. Tests only: it mints
/// the JWTs with dev-dependencies, which the quickstart binary (that includes this harness) lacks.
#[cfg(test)]
pub mod operator;
