//! A real schema registry for the tests: Apicurio Registry (3.3.3 on Java 21+, else 2.6.13.Final
//! on Java 17), whose Confluent-compatible API (`/apis/ccompat/v7`) is what walrelay's Avro,
//! JSON Schema and Protobuf serializers talk to, with in-memory storage and no auth.
//!
//! scripts/install-test-deps.sh unpacks it under `$WALRELAY_APICURIO_HOME` (default
//! `~/.local/walrelay-apicurio`) and writes `launch` there: which version, which `java` and which
//! jar. [`registry`] starts one per test process on first use; [`private_registry`] one that a
//! test owns and may kill and start again on the same port (in-memory storage: a restarted
//! registry has forgotten every schema, so "down for 30 s" is [`Registry::pause`] and
//! [`Registry::resume`]: SIGSTOP keeps the schemas and the port, and a client's connection
//! hangs as it would on a stalled server).
//!
//! `registry_decode` decodes what walrelay wrote with confluent-kafka's Python deserializers.

pub use super::registry_http::http;
use super::{free_port, note, scratch_dir, tail_file, PID_FILE};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The JVM heap: the in-memory store of a test run's schemas is small, and the machine has two
/// cores and a Kafka node or three beside it.
pub const REGISTRY_HEAP: &str = "-Xmx256m";
/// How long the registry may take to answer: ~6–12 s on an idle 2-core machine (Quarkus on the
/// JVM), several times that while a build shares the cores.
pub const REGISTRY_START: Duration = Duration::from_secs(180);
/// One HTTP request's deadline: the registry answers in milliseconds once up.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// How many times [`Registry::expect_answer`] sends a request the registry did not answer: once
/// in the whole suite on a loaded CI machine, a connection to the shared registry was lost.
const TRANSPORT_TRIES: usize = 3;

/// What scripts/install-test-deps.sh installed: `$WALRELAY_APICURIO_HOME/launch`.
#[derive(Debug, Clone)]
pub struct Launch {
    pub version: String,
    pub java: PathBuf,
    pub jar: PathBuf,
}

/// Reads `launch`, checking that its java and jar are still there; the error says what to run.
pub fn installed() -> Result<Launch, String> {
    let home = std::env::var_os("WALRELAY_APICURIO_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
                .join(".local/walrelay-apicurio")
        });
    let file = home.join("launch");
    let fix = "run scripts/install-test-deps.sh (it fetches io.apicurio:apicurio-registry-app \
               from Maven Central and picks a Java 21+ under /usr/lib/jvm, or set \
               WALRELAY_APICURIO_HOME to where it did)";
    let text = std::fs::read_to_string(&file).map_err(|e| {
        format!("Apicurio Registry is not installed ({}: {e}); {fix}", file.display())
    })?;
    let get = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
            .map(str::to_string)
            .ok_or_else(|| format!("{} has no `{key}=` line; {fix}", file.display()))
    };
    let launch =
        Launch { version: get("version")?, java: get("java")?.into(), jar: get("jar")?.into() };
    for path in [&launch.java, &launch.jar] {
        if !path.is_file() {
            return Err(format!(
                "{} names {}, which is gone; {fix}",
                file.display(),
                path.display()
            ));
        }
    }
    Ok(launch)
}

/// One Apicurio Registry process on 127.0.0.1.
pub struct Registry {
    launch: Launch,
    port: u16,
    /// Quarkus's management interface (health, metrics): 0.0.0.0:9000 by default, which two test
    /// processes, or a test process and anything else on the machine, would fight over.
    management_port: u16,
    dir: PathBuf,
    log_path: PathBuf,
    child: Mutex<Child>,
    /// How long the last start took to answer.
    started_in: Mutex<Duration>,
    /// `-D` properties beyond the defaults (a login, for [`private_registry_with_login`]).
    props: Vec<String>,
}

static SHARED: OnceLock<Result<Registry, String>> = OnceLock::new();

/// The registry shared by the test process, started on first use (blocking, like
/// [`super::services`]); every later call after a failed start panics with the same message.
/// Never stop it: pausing is for a [`private_registry`].
pub fn registry() -> &'static Registry {
    let result = SHARED.get_or_init(|| {
        let registry = Registry::start(&super::scratch_root().join("registry"), free_port())?;
        super::print_broker_log_on_failure("the shared registry's", registry.log_path.clone());
        note(&format!("shared schema registry: {}", registry.describe()));
        Ok(registry)
    });
    match result {
        Ok(r) => r,
        Err(e) => panic!("the schema registry could not be started: {e}"),
    }
}

/// A registry of the test's own on a free port, for tests that pause, kill or restart it.
/// Blocking. Killed on drop.
pub fn private_registry() -> Registry {
    Registry::start(&scratch_dir("registry"), free_port())
        .unwrap_or_else(|e| panic!("private schema registry: {e}"))
}

/// A [`private_registry`] whose API wants HTTP basic auth as `user` with `password` (Quarkus's
/// own basic authentication in front of every `/apis/` path, with one embedded user: the
/// registry answers 401 to anything else, as a secured registry does).
pub fn private_registry_with_login(user: &str, password: &str) -> Registry {
    let props = vec![
        "-Dquarkus.http.auth.basic=true".to_string(),
        "-Dquarkus.security.users.embedded.enabled=true".into(),
        "-Dquarkus.security.users.embedded.plain-text=true".into(),
        format!("-Dquarkus.security.users.embedded.users.{user}={password}"),
        "-Dquarkus.http.auth.permission.api.paths=/apis/*".into(),
        "-Dquarkus.http.auth.permission.api.policy=authenticated".into(),
    ];
    Registry::start_with(&scratch_dir("registry"), free_port(), props)
        .unwrap_or_else(|e| panic!("private schema registry with a login: {e}"))
}

/// A [`private_registry`] that also serves HTTPS, on the returned port, with a certificate for
/// 127.0.0.1 signed by a CA of the harness (the returned PEM file).
pub fn private_registry_with_tls() -> (Registry, u16, PathBuf) {
    let dir = scratch_dir("registry");
    let tls = super::secure_kafka::make_certificates(&dir)
        .unwrap_or_else(|e| panic!("certificates for the registry: {e}"));
    let pem = |name: &str| tls.ca.with_file_name(name).display().to_string();
    let https_port = free_port();
    let props = vec![
        format!("-Dquarkus.http.ssl-port={https_port}"),
        format!("-Dquarkus.http.ssl.certificate.files={}", pem("broker.pem")),
        format!("-Dquarkus.http.ssl.certificate.key-files={}", pem("broker.key")),
    ];
    let registry = Registry::start_with(&dir, free_port(), props)
        .unwrap_or_else(|e| panic!("private schema registry with TLS: {e}"));
    (registry, https_port, tls.ca)
}

impl Registry {
    /// Starts Apicurio Registry on 127.0.0.1:`port`, its log in `dir/registry.log`, and waits
    /// until its Confluent-compatible API answers.
    pub fn start(dir: &Path, port: u16) -> Result<Registry, String> {
        Registry::start_with(dir, port, Vec::new())
    }

    /// [`Registry::start`] with more `-D` properties.
    fn start_with(dir: &Path, port: u16, props: Vec<String>) -> Result<Registry, String> {
        let launch = installed()?;
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let management_port = free_port();
        let log_path = dir.join("registry.log");
        let child = spawn(&launch, dir, &log_path, port, management_port, &props)?;
        let registry = Registry {
            props,
            launch,
            port,
            management_port,
            dir: dir.to_path_buf(),
            log_path,
            child: Mutex::new(child),
            started_in: Mutex::new(Duration::ZERO),
        };
        registry.wait_ready(REGISTRY_START)?;
        Ok(registry)
    }

    /// Polls `GET /apis/ccompat/v7/subjects` until it answers 200, the process exits (an error
    /// with its log) or `deadline` passes.
    pub fn wait_ready(&self, deadline: Duration) -> Result<(), String> {
        let start = Instant::now();
        let mut last: String;
        loop {
            if let Some(status) = self.child.lock().unwrap().try_wait().ok().flatten() {
                return Err(format!(
                    "Apicurio Registry {} exited with {status} during start-up ({} {}); {}",
                    self.launch.version,
                    self.launch.java.display(),
                    self.launch.jar.display(),
                    self.log_tail(40)
                ));
            }
            match self.request_within(
                "GET",
                "/apis/ccompat/v7/subjects",
                None,
                Duration::from_secs(2),
            ) {
                // 401: up, and wanting the login of a [`private_registry_with_login`].
                Ok((200 | 401, _)) => break,
                Ok((status, body)) => last = format!("HTTP {status}: {body}"),
                Err(e) => last = e,
            }
            if start.elapsed() > deadline {
                return Err(format!(
                    "Apicurio Registry {} on 127.0.0.1:{} did not answer GET \
                     /apis/ccompat/v7/subjects within {deadline:?} (last: {last}); {}",
                    self.launch.version,
                    self.port,
                    self.log_tail(40)
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        *self.started_in.lock().unwrap() = start.elapsed();
        Ok(())
    }

    /// `Apicurio Registry 3.3.3 on http://127.0.0.1:PORT (pid N, java …), ready in 7.1s, RSS 250 MB`.
    pub fn describe(&self) -> String {
        let pid = self.pid();
        let rss = super::process::rss_kb(pid)
            .map(|kb| format!(", RSS {:.0} MB", super::process::mb(kb)))
            .unwrap_or_default();
        format!(
            "Apicurio Registry {} on {} (pid {pid}, {}), ready in {:.1?}{rss}, log {}",
            self.launch.version,
            self.base_url(),
            self.launch.java.display(),
            self.started_in(),
            self.log_path.display()
        )
    }

    /// `http://127.0.0.1:PORT`
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:PORT/apis/ccompat/v7`: the Confluent-compatible API, what a client's
    /// `schema.registry.url` is.
    pub fn ccompat_url(&self) -> String {
        format!("{}/apis/ccompat/v7", self.base_url())
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn version(&self) -> &str {
        &self.launch.version
    }

    pub fn pid(&self) -> u32 {
        self.child.lock().unwrap().id()
    }

    pub fn started_in(&self) -> Duration {
        *self.started_in.lock().unwrap()
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The last `n` lines of the registry's log, headed by its path (for failure messages).
    pub fn log_tail(&self, n: usize) -> String {
        format!("last lines of {}:\n{}", self.log_path.display(), tail_file(&self.log_path, n))
    }

    /// Registers `schema` under `subject` (`schema_type`: "AVRO", "JSON" or "PROTOBUF") and
    /// returns its id; panics with the registry's answer when it refuses.
    pub fn register(&self, subject: &str, schema_type: &str, schema: &str) -> i32 {
        self.try_register(subject, schema_type, schema).unwrap_or_else(|(status, body)| {
            panic!("register a {schema_type} schema under {subject}: HTTP {status}: {body}")
        })
    }

    /// [`Registry::register`] that returns the refusal: (HTTP status, the registry's body), e.g.
    /// 409 for a schema the subject's compatibility level rejects, 422 for an invalid one.
    pub fn try_register(
        &self,
        subject: &str,
        schema_type: &str,
        schema: &str,
    ) -> Result<i32, (u16, String)> {
        let body = json!({"schemaType": schema_type, "schema": schema}).to_string();
        let (status, answer) = self.expect_answer(
            "POST",
            &format!("/apis/ccompat/v7/subjects/{}/versions", path_segment(subject)),
            Some(&body),
        );
        if status != 200 {
            return Err((status, answer));
        }
        let id = parse(&answer)["id"].as_i64();
        Ok(id.unwrap_or_else(|| panic!("register under {subject}: no id in {answer}")) as i32)
    }

    /// The latest version under `subject`: (id, schema text); None when the subject is unknown.
    pub fn latest(&self, subject: &str) -> Option<(i32, String)> {
        let path = format!("/apis/ccompat/v7/subjects/{}/versions/latest", path_segment(subject));
        match self.expect_answer("GET", &path, None) {
            (200, body) => {
                let v = parse(&body);
                let id = v["id"].as_i64().unwrap_or_else(|| panic!("no id in {body}"));
                let schema = v["schema"].as_str().unwrap_or_else(|| panic!("no schema in {body}"));
                Some((id as i32, schema.to_string()))
            }
            (404, _) => None,
            (status, body) => panic!("GET {path}: HTTP {status}: {body}"),
        }
    }

    /// The schema registered under `id`, as the registry stores it (text, not `format=serialized`).
    pub fn schema_by_id(&self, id: i32) -> Option<String> {
        match self.expect_answer("GET", &format!("/apis/ccompat/v7/schemas/ids/{id}"), None) {
            (200, body) => parse(&body)["schema"].as_str().map(str::to_string),
            (404, _) => None,
            (status, body) => panic!("GET schema {id}: HTTP {status}: {body}"),
        }
    }

    /// The subjects and versions the schema `id` is registered as (one schema text under
    /// several subjects has one id).
    pub fn versions_of(&self, id: i32) -> Vec<(String, i64)> {
        let path = format!("/apis/ccompat/v7/schemas/ids/{id}/versions");
        let (status, body) = self.expect_answer("GET", &path, None);
        assert_eq!(status, 200, "GET {path}: {body}");
        let list: Vec<Value> =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{body}: {e}"));
        list.iter()
            .map(|v| {
                (
                    v["subject"].as_str().unwrap_or_default().to_string(),
                    v["version"].as_i64().unwrap_or(-1),
                )
            })
            .collect()
    }

    /// Every subject, in the registry's order.
    pub fn subjects(&self) -> Vec<String> {
        let (status, body) = self.expect_answer("GET", "/apis/ccompat/v7/subjects", None);
        assert_eq!(status, 200, "GET /subjects: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("subjects {body}: {e}"))
    }

    /// `PUT /config/{subject}`: BACKWARD, FORWARD, FULL, NONE, … (`_TRANSITIVE` too).
    pub fn set_compatibility(&self, subject: &str, level: &str) {
        let path = format!("/apis/ccompat/v7/config/{}", path_segment(subject));
        let body = json!({"compatibility": level}).to_string();
        let (status, answer) = self.expect_answer("PUT", &path, Some(&body));
        assert_eq!(status, 200, "PUT {path} {body}: {answer}");
    }

    /// One request to the registry: (status, body), or what went wrong; never hangs past
    /// [`REQUEST_TIMEOUT`] (a paused registry accepts the connection and never answers).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Result<(u16, String), String> {
        self.request_within(method, path, body, REQUEST_TIMEOUT)
    }

    /// [`Registry::request`] with a deadline of the caller's.
    pub fn request_within(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        timeout: Duration,
    ) -> Result<(u16, String), String> {
        http(self.port, method, path, body, timeout)
            .map_err(|e| format!("{method} {}{path}: {e}", self.base_url()))
    }

    /// [`Registry::request`] for the tests' own reads and registrations, which must not fail a
    /// test over one lost connection: a request the registry never answered (connect, send or
    /// receive failed, or [`REQUEST_TIMEOUT`] passed) is sent again, up to [`TRANSPORT_TRIES`]
    /// times, each retry noted. Every call here is idempotent (a GET; a PUT of a level; a POST of
    /// a schema the subject already holds answers its id). Any HTTP answer is returned as is.
    fn expect_answer(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        let mut failures = Vec::new();
        while failures.len() < TRANSPORT_TRIES {
            match self.request(method, path, body) {
                Ok(answer) => return answer,
                Err(e) => {
                    note(&format!("schema registry: {e}; sending it again"));
                    failures.push(e);
                }
            }
        }
        panic!(
            "the registry answered none of {TRANSPORT_TRIES} tries: {}; {}",
            failures.join("; "),
            self.log_tail(20)
        )
    }

    /// True when `GET /subjects` answers 200 within `timeout`.
    pub fn answers(&self, timeout: Duration) -> bool {
        matches!(
            self.request_within("GET", "/apis/ccompat/v7/subjects", None, timeout),
            Ok((200, _))
        )
    }

    /// SIGSTOP: the registry is down as a stalled server is (connections accepted by the kernel,
    /// never answered), and keeps its schemas for [`Registry::resume`]. Only for a
    /// [`private_registry`]: the shared one serves other tests at the same time.
    pub fn pause(&self) {
        super::process::freeze(self.pid());
    }

    /// SIGCONT, then waits (up to 60 s) until it answers again.
    pub fn resume(&self) {
        super::process::thaw(self.pid());
        self.wait_ready(Duration::from_secs(60)).unwrap_or_else(|e| panic!("after SIGCONT: {e}"));
    }

    pub fn is_running(&self) -> bool {
        matches!(self.child.lock().unwrap().try_wait(), Ok(None))
    }

    /// SIGKILL and reap. In-memory storage: everything registered is gone.
    pub fn kill(&self) {
        let mut child = self.child.lock().unwrap();
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_file(self.dir.join(PID_FILE));
    }

    /// Starts a killed registry again on the same ports (empty: see [`Registry::kill`]) and
    /// waits until it answers.
    pub fn restart(&self) -> Result<(), String> {
        if self.is_running() {
            return Err(format!("the registry on port {} is still running", self.port));
        }
        let child = spawn(
            &self.launch,
            &self.dir,
            &self.log_path,
            self.port,
            self.management_port,
            &self.props,
        )?;
        *self.child.lock().unwrap() = child;
        self.wait_ready(REGISTRY_START)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        // The shared registry lives in a static and is never dropped (the watchdog kills it).
        // A paused one must be woken for SIGKILL to be reaped promptly.
        let _ = super::process::signal(self.pid(), "CONT");
        self.kill();
    }
}

/// `java … -jar quarkus-run.jar`, in its own session like the brokers (see
/// [`super::own_session`]), with a pid file the watchdog kills when the test process is gone.
fn spawn(
    launch: &Launch,
    dir: &Path,
    log_path: &Path,
    port: u16,
    management_port: u16,
    props: &[String],
) -> Result<Child, String> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .map_err(|e| format!("open {}: {e}", log_path.display()))?;
    let log_err = log.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(&launch.java);
    cmd.args([REGISTRY_HEAP, "-Xms64m", "-XX:+UseSerialGC", "-XX:-UsePerfData"])
        // C1 only: about half the start-up time on two busy cores, and a test's few requests
        // never need C2's code.
        .arg("-XX:TieredStopAtLevel=1")
        .arg(format!("-Djava.io.tmpdir={}", dir.display()))
        .arg(format!("-Dquarkus.http.port={port}"))
        .arg("-Dquarkus.http.host=127.0.0.1")
        .arg(format!("-Dquarkus.management.port={management_port}"))
        .arg("-Dquarkus.management.host=127.0.0.1")
        // In-memory storage and no authentication are the defaults of both 3.x (H2 in memory)
        // and 2.x's in-memory app; said here all the same, so that a changed default cannot
        // slip in. 2.x ignores the 3.x keys (it logs them as unknown), and 3.x the 2.x one.
        .arg("-Dapicurio.auth.enabled=false")
        .arg("-Dregistry.auth.enabled=false")
        .arg("-Dapicurio.storage.kind=sql")
        .arg("-Dapicurio.storage.sql.kind=h2")
        .arg("-Dquarkus.log.console.color=false")
        .args(props)
        .arg("-jar")
        .arg(&launch.jar)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    super::own_session(&mut cmd);
    let child = cmd.spawn().map_err(|e| {
        format!(
            "start {} -jar {}: {e}; run scripts/install-test-deps.sh",
            launch.java.display(),
            launch.jar.display()
        )
    })?;
    let _ = std::fs::write(dir.join(PID_FILE), child.id().to_string());
    Ok(child)
}

/// A subject in a URL path: subjects are `topic-value` and the like, but escape whatever is not
/// unreserved.
fn path_segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn parse(body: &str) -> Value {
    serde_json::from_str(body)
        .unwrap_or_else(|e| panic!("registry answered non-JSON ({e}): {body}"))
}
