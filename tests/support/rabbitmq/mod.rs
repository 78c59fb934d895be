//! A real RabbitMQ for the RabbitMQ sink's tests: Debian's `rabbitmq-server` (3.10.8 on
//! bookworm), installed by scripts/install-test-deps.sh, run as a private node of this test
//! process, started on first use.
//!
//! The node is the test process's own: its own node name, AMQP and distribution ports, data
//! (`RABBITMQ_MNESIA_BASE`) and logs under `<scratch_root>/rabbitmq/`, its own config file
//! (one user, no plugins: the management plugin stays off) and its own `epmd` on a port of its
//! own, so neither the Debian service (never started here: no systemd, and the package's
//! `invoke-rc.d` is denied) nor another test process's node is in the way. The watchdog kills
//! both processes through their `kill-on-exit.pid` files once this process is gone.
//!
//! [`RabbitMqServer::stop`] and [`RabbitMqServer::start`] keep the port and the data: durable
//! queues and their persistent messages survive, as they do a broker restart.
//!
//! The reader (`reader.rs`): [`RabbitMqServer::bind_queue`] declares a durable queue bound to
//! an exchange with a binding key of the test's own; [`RabbitMqServer::read`] takes everything
//! in it (`basic_get`, acked) as the sinks' `Delivered`.

mod reader;

pub use reader::delivered;

use super::{free_port, note, scratch_root, tail_file, unique, PID_FILE};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Where Debian's package puts the server's start script (`/usr/sbin/rabbitmq-server` is a
/// wrapper that switches to the `rabbitmq` user; this one runs as whoever calls it).
const SERVER_SCRIPT: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
/// Erlang boots RabbitMQ in ~5–15 s on an idle 2-core machine; longer beside a build.
const START_DEADLINE: Duration = Duration::from_secs(180);
/// A graceful stop (SIGTERM: the node closes its connections and flushes its stores) takes a
/// few seconds.
const STOP_DEADLINE: Duration = Duration::from_secs(60);
/// The tests' login (RabbitMQ's guest works from localhost only; this one anywhere).
pub const USER: &str = "walrelay";
pub const PASSWORD: &str = "walrelay-test-secret";

/// The node of this test process.
pub struct RabbitMqServer {
    dir: PathBuf,
    port: u16,
    dist_port: u16,
    epmd_port: u16,
    node: String,
    /// The TLS listener's port and the PEM file of the CA that signed its certificate (for
    /// 127.0.0.1), on a [`private_rabbitmq_with_tls`].
    tls: Option<(u16, PathBuf)>,
    /// The start script (its child is the Erlang VM); `None` while stopped.
    child: Mutex<Option<Child>>,
    /// Our epmd; the node registers with it.
    epmd: Mutex<Child>,
}

static SHARED: OnceLock<Result<RabbitMqServer, String>> = OnceLock::new();

/// The node shared by the test process, started on first use (blocking). Tests that stop it
/// must be the only ones using it meanwhile: see [`private_rabbitmq`].
pub fn rabbitmq() -> &'static RabbitMqServer {
    let result = SHARED.get_or_init(|| {
        let server = RabbitMqServer::start_new(&scratch_root().join("rabbitmq"), false)?;
        super::print_broker_log_on_failure("the shared RabbitMQ's", server.log_path());
        Ok(server)
    });
    match result {
        Ok(server) => server,
        Err(e) => panic!("RabbitMQ could not be started: {e}"),
    }
}

/// A node of the test's own, for tests that stop and start it. Stopped on drop.
pub fn private_rabbitmq() -> RabbitMqServer {
    let dir = scratch_root().join(unique("rabbitmq"));
    RabbitMqServer::start_new(&dir, false).unwrap_or_else(|e| panic!("private RabbitMQ: {e}"))
}

/// A [`private_rabbitmq`] that also listens for AMQP over TLS ([`RabbitMqServer::amqps_url`]),
/// with a certificate for 127.0.0.1 signed by a CA of the harness ([`RabbitMqServer::ca`]).
pub fn private_rabbitmq_with_tls() -> RabbitMqServer {
    let dir = scratch_root().join(unique("rabbitmq_tls"));
    RabbitMqServer::start_new(&dir, true).unwrap_or_else(|e| panic!("RabbitMQ with TLS: {e}"))
}

/// The installed server's version, or what to run to install it.
pub fn installed() -> Result<String, String> {
    if !Path::new(SERVER_SCRIPT).exists() {
        return Err(format!(
            "{SERVER_SCRIPT} is missing: run scripts/install-test-deps.sh (it installs Debian's \
             rabbitmq-server package)"
        ));
    }
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Version}", "rabbitmq-server"])
        .output()
        .map_err(|e| format!("dpkg-query: {e}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl RabbitMqServer {
    fn start_new(dir: &Path, with_tls: bool) -> Result<RabbitMqServer, String> {
        let version = installed()?;
        std::fs::create_dir_all(dir.join("epmd"))
            .map_err(|e| format!("create {}: {e}", dir.display()))?;
        let (port, dist_port, epmd_port) = (free_port(), free_port(), free_port());
        let node = format!("walrelay-{}-{port}@localhost", std::process::id());
        let tls = match with_tls {
            false => None,
            true => {
                let files = super::secure_kafka::make_certificates(dir)?;
                Some((free_port(), files.ca))
            }
        };
        write_config(dir, port, tls.as_ref())?;
        let epmd = Command::new("epmd")
            .args(["-port", &epmd_port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("epmd (Erlang's port mapper, from erlang-base): {e}"))?;
        let _ = std::fs::write(dir.join("epmd").join(PID_FILE), epmd.id().to_string());
        let server = RabbitMqServer {
            dir: dir.to_path_buf(),
            port,
            dist_port,
            epmd_port,
            node,
            tls,
            child: Mutex::new(None),
            epmd: Mutex::new(epmd),
        };
        let took = server.start_within(START_DEADLINE)?;
        note(&format!(
            "RabbitMQ {version} node {} on 127.0.0.1:{port} up in {took:.1?}, dir {}",
            server.node,
            dir.display()
        ));
        Ok(server)
    }

    /// Starts the node again on the same port and data, and waits until it speaks AMQP.
    /// Returns how long that took.
    pub fn start(&self) -> Duration {
        self.start_within(START_DEADLINE).unwrap_or_else(|e| panic!("RabbitMQ start: {e}"))
    }

    fn start_within(&self, deadline: Duration) -> Result<Duration, String> {
        let started = Instant::now();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.out"))
            .map_err(|e| format!("server.out: {e}"))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let path = |name: &str| self.dir.join(name).display().to_string();
        let mut cmd = Command::new(SERVER_SCRIPT);
        cmd.env("HOME", &self.dir) // its Erlang cookie
            .env("ERL_EPMD_PORT", self.epmd_port.to_string())
            .env("RABBITMQ_NODENAME", &self.node)
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", path("mnesia"))
            .env("RABBITMQ_LOG_BASE", path("log"))
            .env("RABBITMQ_PID_FILE", path(PID_FILE))
            .env("RABBITMQ_CONFIG_FILE", path("rabbitmq.conf"))
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", path("advanced.config"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", path("enabled_plugins"))
            .env("RABBITMQ_CONF_ENV_FILE", path("rabbitmq-env.conf"))
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        super::own_session(&mut cmd);
        let child = cmd.spawn().map_err(|e| format!("{SERVER_SCRIPT}: {e}"))?;
        *self.child.lock().unwrap() = Some(child);
        loop {
            if self.speaks_amqp() {
                return Ok(started.elapsed());
            }
            let exited = match self.child.lock().unwrap().as_mut() {
                Some(child) => child.try_wait().ok().flatten(),
                None => None,
            };
            if let Some(status) = exited {
                return Err(format!(
                    "the node exited with {status} while starting; {}",
                    self.log_tail(40)
                ));
            }
            if started.elapsed() > deadline {
                return Err(format!(
                    "no AMQP on 127.0.0.1:{} after {deadline:?}; {}",
                    self.port,
                    self.log_tail(40)
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the node as an operator's `systemctl stop` would (SIGTERM: connections closed,
    /// stores flushed) and waits until it is gone.
    pub fn stop(&self) {
        let Some(mut child) = self.child.lock().unwrap().take() else { return };
        let vm = std::fs::read_to_string(self.dir.join(PID_FILE))
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok());
        // SAFETY: kill(2) with a pid the node wrote for itself.
        match vm {
            Some(pid) => unsafe {
                libc::kill(pid, libc::SIGTERM);
            },
            None => unsafe {
                libc::kill(child.id() as i32, libc::SIGTERM);
            },
        }
        let started = Instant::now();
        while child.try_wait().ok().flatten().is_none() {
            if started.elapsed() > STOP_DEADLINE {
                if let Some(pid) = vm {
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_file(self.dir.join(PID_FILE));
    }

    /// Freezes the node (SIGSTOP): its connections stay open and answer nothing, as a hung
    /// broker's do. [`RabbitMqServer::resume`] thaws it.
    pub fn pause(&self) {
        let pid = self.signal_vm(libc::SIGSTOP);
        // Only once the kernel says the VM is stopped does "nothing answers" hold: a publish
        // sent before it could still be confirmed.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next());
            if state == Some("T") {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the RabbitMQ node (pid {pid} from its pid file) is not stopped 5 s after SIGSTOP: state {state:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn resume(&self) {
        self.signal_vm(libc::SIGCONT);
    }

    /// Sends `signal` to the node's VM; its pid.
    fn signal_vm(&self, signal: i32) -> i32 {
        let pid = std::fs::read_to_string(self.dir.join(PID_FILE))
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
            .expect("the node's pid file");
        // SAFETY: kill(2) with a pid the node wrote for itself.
        unsafe { libc::kill(pid, signal) };
        pid
    }

    /// Whether something on the port answers the AMQP 0-9-1 protocol header with a frame
    /// (`connection.start`): the node has booted.
    fn speaks_amqp(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect_timeout(
            &([127, 0, 0, 1], self.port).into(),
            Duration::from_millis(500),
        ) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let mut first = [0u8; 1];
        stream.write_all(b"AMQP\x00\x00\x09\x01").is_ok()
            && stream.read_exact(&mut first).is_ok()
            && first[0] == 1
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `amqp://walrelay:…@127.0.0.1:<port>/%2f`.
    pub fn url(&self) -> String {
        format!("amqp://{USER}:{PASSWORD}@127.0.0.1:{}/%2f", self.port)
    }

    /// The `[rabbitmq]` section pointing at this node.
    pub fn config_section(&self, exchange: &str) -> String {
        format!(
            "[rabbitmq]\nurl = \"{}\"\nexchange = \"{exchange}\"\ntimeout = \"10s\"\n",
            self.url()
        )
    }

    /// `amqps://walrelay:…@127.0.0.1:<tls port>/%2f`, on a [`private_rabbitmq_with_tls`].
    pub fn amqps_url(&self) -> String {
        let (port, _) = self.tls.as_ref().expect("a node started with TLS");
        format!("amqps://{USER}:{PASSWORD}@127.0.0.1:{port}/%2f")
    }

    /// The PEM file of the CA that signed the TLS listener's certificate.
    pub fn ca(&self) -> PathBuf {
        self.tls.as_ref().expect("a node started with TLS").1.clone()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("log").join(format!("{}.log", self.node))
    }

    pub fn log_tail(&self, lines: usize) -> String {
        format!(
            "--- {} ---\n{}\n--- server.out ---\n{}",
            self.log_path().display(),
            tail_file(&self.log_path(), lines),
            tail_file(&self.dir.join("server.out"), lines)
        )
    }
}

impl Drop for RabbitMqServer {
    fn drop(&mut self) {
        self.stop();
        let mut epmd = self.epmd.lock().unwrap_or_else(|e| e.into_inner());
        let _ = epmd.kill();
        let _ = epmd.wait();
    }
}

/// The node's own configuration: loopback only, one user, messages up to 1 MiB (so that a
/// test can be refused for size cheaply; RabbitMQ's default is 128 MiB), the defaults
/// otherwise; with `tls`, a TLS listener too.
fn write_config(dir: &Path, port: u16, tls: Option<&(u16, PathBuf)>) -> Result<(), String> {
    let mut conf = format!(
        "listeners.tcp.default = 127.0.0.1:{port}\n\
                 default_user = {USER}\n\
                 default_pass = {PASSWORD}\n\
                 loopback_users = none\n\
                 disk_free_limit.absolute = 50MB\n\
                 max_message_size = 1048576\n"
    );
    if let Some((tls_port, ca)) = tls {
        let pem = |name: &str| ca.with_file_name(name).display().to_string();
        conf.push_str(&format!(
            "listeners.ssl.default = 127.0.0.1:{tls_port}\n\
             ssl_options.cacertfile = {}\n\
             ssl_options.certfile = {}\n\
             ssl_options.keyfile = {}\n\
             ssl_options.verify = verify_none\n\
             ssl_options.fail_if_no_peer_cert = false\n",
            ca.display(),
            pem("broker.pem"),
            pem("broker.key")
        ));
    }
    let files = [
        ("rabbitmq.conf", conf),
        // No plugins: the management plugin would want a port of its own.
        ("enabled_plugins", "[].\n".to_string()),
        // Keeps /etc/rabbitmq/rabbitmq-env.conf (the Debian service's) out.
        ("rabbitmq-env.conf", String::new()),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).map_err(|e| format!("write {name}: {e}"))?;
    }
    Ok(())
}
