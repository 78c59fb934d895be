//! A real SQS-compatible server for the tests: ElasticMQ (softwaremill), on the JVM, speaking
//! SQS's JSON and query protocols with FIFO queues (groups, 5-minute deduplication) and SQS's
//! limits (`sqs-limits = strict`). Its queues and messages are kept in an H2 file under the
//! server's directory, so [`SqsServer::stop`] and [`SqsServer::start`] keep what was sent.
//!
//! What it does not emulate: IAM (any signature passes), SQS's own error codes in every case,
//! the 1 MiB message size of queues made since 2025, and the servers of a region (a short
//! poll sees every message).
//!
//! scripts/install-test-deps.sh resolves org.elasticmq:elasticmq-server_2.13 and its jars
//! into `$WALRELAY_ELASTICMQ_HOME` (default `~/.local/walrelay-elasticmq-1.7.1`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName};
use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};

use super::sinks::Delivered;
use super::{free_port, note, scratch_dir, tail_file, PID_FILE};

pub const ELASTICMQ_VERSION: &str = "1.7.1";
/// ElasticMQ's account id, the second-to-last segment of its queue URLs.
pub const ACCOUNT: &str = "000000000000";
pub const REGION: &str = "us-east-1";
/// ~5–8 s on an idle 2-core machine, several times that while builds share the cores.
const START: Duration = Duration::from_secs(120);

/// One ElasticMQ process on 127.0.0.1.
pub struct SqsServer {
    libs: PathBuf,
    port: u16,
    dir: PathBuf,
    log_path: PathBuf,
    child: Mutex<Option<Child>>,
    started_in: Mutex<Duration>,
}

static SHARED: OnceLock<Result<SqsServer, String>> = OnceLock::new();

/// The server shared by the test process, started on first use. Never stop it: other tests
/// use it at the same time; [`private_sqs`] is for outages.
pub fn sqs() -> &'static SqsServer {
    let result = SHARED.get_or_init(|| {
        let server = SqsServer::new(&super::scratch_root().join("sqs"))?;
        super::print_broker_log_on_failure("the shared ElasticMQ's", server.log_path.clone());
        note(&format!("shared SQS server: {}", server.describe()));
        Ok(server)
    });
    match result {
        Ok(s) => s,
        Err(e) => panic!("the SQS server (ElasticMQ) could not be started: {e}"),
    }
}

/// A server of the test's own, which it may stop and start. Killed on drop.
pub fn private_sqs() -> SqsServer {
    SqsServer::new(&scratch_dir("sqs")).unwrap_or_else(|e| panic!("private SQS server: {e}"))
}

/// The jars scripts/install-test-deps.sh resolved; the error says what to run.
pub fn installed() -> Result<PathBuf, String> {
    let home = std::env::var_os("WALRELAY_ELASTICMQ_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
                .join(format!(".local/walrelay-elasticmq-{ELASTICMQ_VERSION}"))
        });
    if !home.join(".complete").is_file() {
        return Err(format!(
            "ElasticMQ {ELASTICMQ_VERSION} is not installed in {}; run scripts/install-test-deps.sh \
             (it resolves org.elasticmq:elasticmq-server_2.13 from Maven Central) or set \
             WALRELAY_ELASTICMQ_HOME",
            home.display()
        ));
    }
    Ok(home.join("libs"))
}

impl SqsServer {
    fn new(dir: &Path) -> Result<SqsServer, String> {
        let libs = installed()?;
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let server = SqsServer {
            libs,
            port: free_port(),
            dir: dir.to_path_buf(),
            log_path: dir.join("elasticmq.log"),
            child: Mutex::new(None),
            started_in: Mutex::new(Duration::ZERO),
        };
        server.start()?;
        Ok(server)
    }

    /// Starts it (again) on the same port and data, and waits until it answers.
    pub fn start(&self) -> Result<(), String> {
        let mut child = self.child.lock().unwrap();
        if child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None))) {
            return Err(format!("ElasticMQ on port {} is still running", self.port));
        }
        let started = Instant::now();
        *child = Some(self.spawn()?);
        drop(child);
        self.wait_ready(started)?;
        *self.started_in.lock().unwrap() = started.elapsed();
        Ok(())
    }

    /// SIGTERM (ElasticMQ closes its H2 store), SIGKILL after 10 s; what was sent stays in
    /// the store for [`SqsServer::start`]. Until then a client's connections are refused.
    pub fn stop(&self) {
        let mut child = self.child.lock().unwrap();
        if let Some(mut c) = child.take() {
            super::process::signal(c.id(), "TERM");
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(self.dir.join(PID_FILE));
    }

    fn spawn(&self) -> Result<Child, String> {
        let conf = self.dir.join("elasticmq.conf");
        let data = self.dir.join("data");
        std::fs::create_dir_all(&data).map_err(|e| format!("create {}: {e}", data.display()))?;
        // node-address is what queue URLs say: 127.0.0.1 and this port, as queue_url does.
        let text = format!(
            "include classpath(\"application.conf\")\n\
             node-address {{ protocol = http, host = \"127.0.0.1\", port = {port}, context-path = \"\" }}\n\
             rest-sqs {{ enabled = true, bind-port = {port}, bind-hostname = \"127.0.0.1\", sqs-limits = strict }}\n\
             rest-stats {{ enabled = false }}\n\
             generate-node-address = false\n\
             aws {{ region = \"{REGION}\", accountId = \"{ACCOUNT}\" }}\n\
             messages-storage {{ enabled = true, uri = \"jdbc:h2:{}\" }}\n",
            data.join("elasticmq-h2").display(),
            port = self.port,
        );
        std::fs::write(&conf, text).map_err(|e| format!("write {}: {e}", conf.display()))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| format!("open {}: {e}", self.log_path.display()))?;
        let log_err = log.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new("java");
        cmd.args(["-Xmx256m", "-Xms32m", "-XX:+UseSerialGC", "-XX:-UsePerfData"])
            // C1 only: a faster start on two busy cores; the tests send little.
            .arg("-XX:TieredStopAtLevel=1")
            .arg(format!("-Djava.io.tmpdir={}", self.dir.display()))
            .arg(format!("-Dconfig.file={}", conf.display()))
            .arg("-cp")
            .arg(format!("{}/*", self.libs.display()))
            .arg("org.elasticmq.server.Main")
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        super::own_session(&mut cmd);
        let child = cmd.spawn().map_err(|e| format!("start java (ElasticMQ): {e}"))?;
        let _ = std::fs::write(self.dir.join(PID_FILE), child.id().to_string());
        Ok(child)
    }

    fn wait_ready(&self, since: Instant) -> Result<(), String> {
        loop {
            if let Some(c) = self.child.lock().unwrap().as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    return Err(format!(
                        "ElasticMQ exited with {status} during start-up; {}",
                        self.log_tail(40)
                    ));
                }
            }
            // Any HTTP answer (it says 400 to a bare GET) means the SQS API is bound.
            if super::registry_http::http(self.port, "GET", "/", None, Duration::from_secs(2))
                .is_ok()
            {
                return Ok(());
            }
            if since.elapsed() > START {
                return Err(format!(
                    "ElasticMQ on 127.0.0.1:{} did not answer within {START:?}; {}",
                    self.port,
                    self.log_tail(40)
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The JVM's pid while it runs (for SIGSTOP: a stalled server that accepts and never
    /// answers).
    pub fn pid(&self) -> Option<u32> {
        self.child.lock().unwrap().as_ref().map(|c| c.id())
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The URL of queue `name` (ElasticMQ's form, which its CreateQueue answers too).
    pub fn queue_url(&self, name: &str) -> String {
        format!("{}/{ACCOUNT}/{name}", self.endpoint())
    }

    pub fn describe(&self) -> String {
        format!(
            "ElasticMQ {ELASTICMQ_VERSION} on {}, ready in {:.1?}, log {}",
            self.endpoint(),
            *self.started_in.lock().unwrap(),
            self.log_path.display()
        )
    }

    pub fn log_tail(&self, n: usize) -> String {
        format!("last lines of {}:\n{}", self.log_path.display(), tail_file(&self.log_path, n))
    }

    /// The `[sqs]` section for queues named `<prefix><routed name with . as ->` (and `.fifo`).
    pub fn config_section(&self, prefix: &str, fifo: bool) -> String {
        let mut text = String::from("[sqs]\n");
        for (key, value) in self.options(prefix, fifo) {
            text.push_str(&format!("{key} = {value:?}\n"));
        }
        text
    }

    /// [`SqsServer::config_section`] as the section's options.
    pub fn options(&self, prefix: &str, fifo: bool) -> BTreeMap<String, String> {
        let fifo = if fifo { ".fifo" } else { "" };
        [
            ("region", REGION.to_string()),
            ("endpoint", self.endpoint()),
            ("queue_url", self.queue_url(&format!("{prefix}${{topic}}{fifo}"))),
            // ElasticMQ checks no signature; the SDK wants something to sign with.
            ("access_key_id", "walrelay-test".into()),
            ("secret_access_key", "walrelay-test".into()),
            ("timeout", "5s".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// A plain SDK client of this server, for reading.
    pub fn client(&self) -> aws_sdk_sqs::Client {
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(Provider::Rustls(CryptoMode::Ring))
            .build_https();
        let config = aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(REGION))
            .endpoint_url(self.endpoint())
            .credentials_provider(Credentials::new(
                "walrelay-test",
                "walrelay-test",
                None,
                None,
                "test",
            ))
            .http_client(http)
            .build();
        aws_sdk_sqs::Client::from_conf(config)
    }

    /// Everything waiting in queue `name`, in the order received, deleted as it is read: receives
    /// (10 at a time, no wait) until one comes back empty.
    pub async fn read(&self, name: &str) -> Vec<Delivered> {
        let client = self.client();
        let url = self.queue_url(name);
        let mut delivered = Vec::new();
        loop {
            let answer = client
                .receive_message()
                .queue_url(&url)
                .max_number_of_messages(10)
                .wait_time_seconds(0)
                .message_attribute_names("All")
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .send()
                .await
                .unwrap_or_else(|e| {
                    panic!("ReceiveMessage {url}: {}", aws_sdk_sqs::error::DisplayErrorContext(&e))
                });
            let messages = answer.messages();
            if messages.is_empty() {
                return delivered;
            }
            let mut deletes = Vec::new();
            for (n, m) in messages.iter().enumerate() {
                let system = |a: MessageSystemAttributeName| {
                    m.attributes().and_then(|all| all.get(&a)).cloned()
                };
                let mut headers: Vec<(String, String)> = m
                    .message_attributes()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.string_value().unwrap_or_default().to_string()))
                    .collect();
                headers.sort();
                let key = headers
                    .iter()
                    .find(|(k, _)| k == walrelay::sink::sqs::KEY_ATTRIBUTE)
                    .map(|(_, v)| v.clone())
                    .or_else(|| system(MessageSystemAttributeName::MessageGroupId));
                delivered.push(Delivered {
                    routed_to: name.to_string(),
                    dedup_id: system(MessageSystemAttributeName::MessageDeduplicationId),
                    key,
                    headers,
                    body: m.body().unwrap_or_default().as_bytes().to_vec(),
                });
                if let Some(handle) = m.receipt_handle() {
                    deletes.push(
                        DeleteMessageBatchRequestEntry::builder()
                            .id(n.to_string())
                            .receipt_handle(handle)
                            .build()
                            .unwrap_or_else(|e| panic!("delete entry: {e}")),
                    );
                }
            }
            client
                .delete_message_batch()
                .queue_url(&url)
                .set_entries(Some(deletes))
                .send()
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "DeleteMessageBatch {url}: {}",
                        aws_sdk_sqs::error::DisplayErrorContext(&e)
                    )
                });
        }
    }
}

impl Drop for SqsServer {
    fn drop(&mut self) {
        // The shared one lives in a static and is never dropped (the watchdog kills it). A
        // paused one must be woken for SIGTERM to be heard.
        if let Some(pid) = self.pid() {
            super::process::signal(pid, "CONT");
        }
        self.stop();
    }
}
