//! A private Apache Kafka node for the security tests: its client listener is SASL_SSL with
//! SCRAM-SHA-512, behind a certificate signed by a CA the harness makes with the `openssl` CLI,
//! and Kafka's StandardAuthorizer refuses whatever no ACL allows.
//!
//! The SCRAM credentials of [`ADMIN`], [`RELAY`] and [`NO_WRITE`] are written when the storage is
//! formatted (`StorageTool format --add-scram`), as an operator bootstraps a KRaft cluster. ACLs
//! are created through librdkafka's CreateAcls (rdkafka 0.39 wraps no ACL call, and the Kafka
//! tools jar is not among the broker's jars), authenticated as [`ADMIN`], a super user.
//!
//! Besides the SASL_SSL listener the node keeps the harness's PLAINTEXT listener (its readiness
//! probe, topic creation) and a PLAINTEXT controller listener, on 127.0.0.1. Nobody
//! authenticates there, so their principal `User:ANONYMOUS` is a super user too (the broker's
//! own registration and heartbeats to the controller need CLUSTER_ACTION). The relays under test
//! and the readers only use the SASL_SSL listener.
//!
//! One node per test process, started on first use ([`SecureKafka::shared`]); tests keep apart
//! by topic prefix, and grant their ACLs on their own prefix.

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use rdkafka::bindings as rdsys;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::ClientConfig;

use super::broker::{Broker, KafkaNode};
use super::kafka::{self, Consumed};
use super::{free_port, scratch_dir};

/// A SCRAM-SHA-512 user of the secure node.
#[derive(Debug, Clone, Copy)]
pub struct Login {
    pub user: &'static str,
    pub password: &'static str,
}

/// The super user (`super.users`): creates ACLs, reads everything back.
pub const ADMIN: Login = Login { user: "admin", password: "admin-secret-7d41c0" };
/// The principal a relay runs as; it may do only what a test's ACLs grant it.
pub const RELAY: Login = Login { user: "walrelay", password: "relay-secret-51c2e9" };
/// A principal the tests grant DESCRIBE and IDEMPOTENT_WRITE but never WRITE.
pub const NO_WRITE: Login = Login { user: "nowrite", password: "nowrite-secret-a9b3" };

/// What an ACL applies to.
#[derive(Debug, Clone)]
pub enum Resource {
    /// Every topic whose name starts with this (a PREFIXED resource pattern).
    TopicsPrefixed(String),
    /// The cluster (`kafka-cluster`), for IDEMPOTENT_WRITE.
    Cluster,
    /// One topic, by its exact name.
    Topic(String),
    /// One transactional id, by its exact name.
    TransactionalId(String),
}

/// An ALLOW ACL for `principal` (`User:walrelay`) from any host.
#[derive(Debug, Clone)]
pub struct Acl {
    pub principal: String,
    pub operation: rdsys::rd_kafka_AclOperation_t,
    pub resource: Resource,
}

impl Acl {
    pub fn allow(
        login: Login,
        operation: rdsys::rd_kafka_AclOperation_t,
        resource: Resource,
    ) -> Acl {
        Acl { principal: format!("User:{}", login.user), operation, resource }
    }
}

pub struct SecureKafka {
    broker: Broker,
    sasl_port: u16,
    ca: PathBuf,
}

static SHARED: OnceLock<Result<SecureKafka, String>> = OnceLock::new();

impl SecureKafka {
    /// The process's secure node, started on first use (blocking: call it from
    /// `spawn_blocking`, or see [`SecureKafka::get`]).
    pub fn shared() -> &'static SecureKafka {
        let node = SHARED.get_or_init(|| SecureKafka::start(&scratch_dir("secure_kafka")));
        node.as_ref().unwrap_or_else(|e| panic!("secure Kafka node: {e}"))
    }

    /// [`SecureKafka::shared`] from async code.
    pub async fn get() -> &'static SecureKafka {
        tokio::task::spawn_blocking(SecureKafka::shared).await.expect("starting the secure node")
    }

    fn start(dir: &Path) -> Result<SecureKafka, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let tls = make_certificates(dir)?;
        let sasl_port = free_port();
        let mut node = KafkaNode::single(free_port());
        let listeners = format!(
            "PLAINTEXT://127.0.0.1:{},CONTROLLER://127.0.0.1:{},SASL_SSL://127.0.0.1:{sasl_port}",
            node.port, node.controller_port
        );
        let advertised =
            format!("PLAINTEXT://127.0.0.1:{},SASL_SSL://127.0.0.1:{sasl_port}", node.port);
        let keystore = tls.keystore.display().to_string();
        node = node
            .set("listeners", &listeners)
            .set("advertised.listeners", &advertised)
            .set("sasl.enabled.mechanisms", "SCRAM-SHA-512")
            .set(
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config",
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            )
            .set("listener.name.sasl_ssl.ssl.keystore.type", "PKCS12")
            .set("listener.name.sasl_ssl.ssl.keystore.location", &keystore)
            .set("listener.name.sasl_ssl.ssl.keystore.password", KEYSTORE_PASSWORD)
            .set("listener.name.sasl_ssl.ssl.key.password", KEYSTORE_PASSWORD)
            .set("authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
            .set("super.users", "User:admin;User:ANONYMOUS")
            .set("allow.everyone.if.no.acl.found", "false")
            // As many production clusters run: topics exist before anyone writes to them.
            .set("auto.create.topics.enable", "false");
        for login in [ADMIN, RELAY, NO_WRITE] {
            node.format_args.push("--add-scram".into());
            node.format_args
                .push(format!("SCRAM-SHA-512=[name={},password={}]", login.user, login.password));
        }
        let broker = Broker::start_kafka(dir, node)?;
        super::print_broker_log_on_failure("the secure Kafka node's", broker.log_path().into());
        let secure = SecureKafka { broker, sasl_port, ca: tls.ca };
        secure.wait_authenticated()?;
        Ok(secure)
    }

    /// Waits until [`ADMIN`] gets metadata over SASL_SSL (the listener comes up with the node,
    /// the SCRAM credentials once the node has replayed its metadata log).
    fn wait_authenticated(&self) -> Result<(), String> {
        let producer: BaseProducer =
            self.client(ADMIN).create().map_err(|e| format!("create a SASL_SSL client: {e}"))?;
        let started = std::time::Instant::now();
        let mut last = String::new();
        while started.elapsed() < Duration::from_secs(60) {
            match producer.client().fetch_metadata(None, Duration::from_secs(5)) {
                Ok(md) if !md.brokers().is_empty() => {
                    eprintln!(
                        "[support] secure Kafka node: SASL_SSL on {} authenticates admin ({:.1?})",
                        self.bootstrap(),
                        started.elapsed()
                    );
                    return Ok(());
                }
                Ok(_) => last = "no broker in the metadata".into(),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(format!(
            "admin gets no metadata over SASL_SSL on {}: {last}; {}",
            self.bootstrap(),
            self.broker.log_tail(40)
        ))
    }

    /// The SASL_SSL listener, `127.0.0.1:PORT`.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.sasl_port)
    }

    /// The unauthenticated PLAINTEXT listener (User:ANONYMOUS, a super user): for the harness's
    /// own set-up only.
    pub fn plaintext_bootstrap(&self) -> &str {
        self.broker.bootstrap()
    }

    /// The CA certificate (PEM) that signed the broker's certificate.
    pub fn ca(&self) -> &Path {
        &self.ca
    }

    pub fn log_tail(&self, lines: usize) -> String {
        self.broker.log_tail(lines)
    }

    /// The librdkafka properties of a client of the SASL_SSL listener logging in as `login`.
    pub fn security_properties(&self, login: Login) -> Vec<(&'static str, String)> {
        vec![
            ("security.protocol", "SASL_SSL".into()),
            ("sasl.mechanism", "SCRAM-SHA-512".into()),
            ("sasl.username", login.user.into()),
            ("sasl.password", login.password.into()),
            ("ssl.ca.location", self.ca.display().to_string()),
        ]
    }

    /// [`SecureKafka::security_properties`] as lines of a walrelay.toml `[kafka]` section.
    pub fn kafka_toml(&self, login: Login) -> String {
        self.security_properties(login).iter().map(|(k, v)| format!("{k:?} = {v:?}\n")).collect()
    }

    /// An rdkafka client configuration of the SASL_SSL listener as `login`.
    pub fn client(&self, login: Login) -> ClientConfig {
        let mut config = kafka::client_config(&self.bootstrap());
        for (k, v) in self.security_properties(login) {
            config.set(k, v);
        }
        config
    }

    /// Creates `topic` (through the PLAINTEXT listener: the node creates no topic by itself).
    pub async fn create_topic(&self, topic: &str, partitions: i32) {
        kafka::create_topic(self.plaintext_bootstrap(), topic, partitions).await
    }

    /// Waits until `login` sees each of `topics`, with its partitions, in the node's metadata. A
    /// new topic, or an ACL granted on it, takes effect only once the broker has applied the
    /// controller's record: seconds after the request returned on a loaded machine (measured:
    /// controller events taking 2–3.5 s while two builds ran beside the suite).
    pub async fn wait_visible(&self, login: Login, topics: &[&str]) {
        let config = self.client(login);
        let topics: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
        let result = tokio::task::spawn_blocking(move || {
            let producer: BaseProducer = config.create().map_err(|e| e.to_string())?;
            let started = std::time::Instant::now();
            let mut last = String::new();
            while started.elapsed() < Duration::from_secs(60) {
                let missing: Vec<String> = topics
                    .iter()
                    .filter(|t| {
                        match producer.client().fetch_metadata(Some(t), Duration::from_secs(5)) {
                            Ok(md) => !md.topics().iter().any(|m| {
                                m.name() == t.as_str()
                                    && m.error().is_none()
                                    && !m.partitions().is_empty()
                            }),
                            Err(_) => true,
                        }
                    })
                    .cloned()
                    .collect();
                if missing.is_empty() {
                    return Ok(started.elapsed());
                }
                last = format!("{missing:?} not visible");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(last)
        })
        .await
        .expect("metadata task");
        match result {
            Ok(took) => println!("{} sees its topics after {took:.1?}", login.user),
            Err(e) => panic!("{} after 60 s: {e}\n{}", login.user, self.log_tail(40)),
        }
    }

    /// Reads `topics` as [`ADMIN`] over SASL_SSL, in a consumer group of its own.
    pub async fn consume(
        &self,
        topics: &[&str],
        expected: usize,
        deadline: Duration,
    ) -> Vec<Consumed> {
        kafka::consume_topics_with(self.client(ADMIN), topics, expected, deadline).await
    }

    /// Creates `acls` as [`ADMIN`] (CreateAcls through librdkafka's C API).
    pub async fn allow(&self, acls: &[Acl]) {
        let config = self.client(ADMIN);
        let acls = acls.to_vec();
        tokio::task::spawn_blocking(move || create_acls(config, &acls))
            .await
            .expect("CreateAcls task")
            .unwrap_or_else(|e| panic!("create ACLs: {e}"));
    }
}

const KEYSTORE_PASSWORD: &str = "keystore-pass";

/// The files [`make_certificates`] leaves in the node's directory (`tls/`, beside them the
/// server's PEM certificate and key, `broker.pem` and `broker.key`).
pub struct Tls {
    pub ca: PathBuf,
    pub keystore: PathBuf,
}

/// The `openssl` configuration: the CA's and the broker's extensions. The broker's certificate
/// names 127.0.0.1, since librdkafka checks the host name (`ssl.endpoint.identification.algorithm
/// = https`, its default).
const OPENSSL_CNF: &str = "\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = walrelay test
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[broker]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
authorityKeyIdentifier = keyid
[client]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
";

/// A CA, and a server certificate it signs for 127.0.0.1 and localhost, in a PKCS12 keystore
/// for the broker (and as PEM files, for the schema registry); and a client certificate it
/// signs, `client.pem` and `client.key` beside `ca.pem`.
pub fn make_certificates(dir: &Path) -> Result<Tls, String> {
    let tls = dir.join("tls");
    std::fs::create_dir_all(&tls).map_err(|e| format!("create {}: {e}", tls.display()))?;
    std::fs::write(tls.join("openssl.cnf"), OPENSSL_CNF).map_err(|e| e.to_string())?;
    let steps: [&[&str]; 6] = [
        &[
            "req",
            "-x509",
            "-config",
            "openssl.cnf",
            "-extensions",
            "ca",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "7",
            "-subj",
            "/CN=walrelay test CA",
        ],
        &[
            "req",
            "-new",
            "-config",
            "openssl.cnf",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "broker.key",
            "-out",
            "broker.csr",
            "-subj",
            "/CN=localhost",
        ],
        &[
            "x509",
            "-req",
            "-in",
            "broker.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "broker.pem",
            "-days",
            "7",
            "-extfile",
            "openssl.cnf",
            "-extensions",
            "broker",
        ],
        &[
            "pkcs12",
            "-export",
            "-in",
            "broker.pem",
            "-inkey",
            "broker.key",
            "-certfile",
            "ca.pem",
            "-name",
            "broker",
            "-out",
            "broker.p12",
            "-passout",
            &format!("pass:{KEYSTORE_PASSWORD}"),
        ],
        &[
            "req",
            "-new",
            "-config",
            "openssl.cnf",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "client.key",
            "-out",
            "client.csr",
            "-subj",
            "/CN=walrelay",
        ],
        &[
            "x509",
            "-req",
            "-in",
            "client.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "client.pem",
            "-days",
            "7",
            "-extfile",
            "openssl.cnf",
            "-extensions",
            "client",
        ],
    ];
    for args in steps {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&tls)
            .output()
            .map_err(|e| format!("run openssl (is it installed?): {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "openssl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok(Tls { ca: tls.join("ca.pem"), keystore: tls.join("broker.p12") })
}

/// One CreateAcls request and its per-binding results. Blocking.
fn create_acls(config: ClientConfig, acls: &[Acl]) -> Result<(), String> {
    use rdsys::rd_kafka_ResourcePatternType_t::*;
    use rdsys::rd_kafka_ResourceType_t::*;
    let producer: BaseProducer = config.create().map_err(|e| format!("admin client: {e}"))?;
    let rk = producer.client().native_ptr();
    let mut errstr = [0 as std::ffi::c_char; 512];
    let mut bindings = Vec::with_capacity(acls.len());
    for acl in acls {
        let (kind, name, pattern) = match &acl.resource {
            Resource::TopicsPrefixed(prefix) => {
                (RD_KAFKA_RESOURCE_TOPIC, prefix.as_str(), RD_KAFKA_RESOURCE_PATTERN_PREFIXED)
            }
            // librdkafka's BROKER (4) is Kafka's CLUSTER resource type, named kafka-cluster.
            Resource::Cluster => {
                (RD_KAFKA_RESOURCE_BROKER, "kafka-cluster", RD_KAFKA_RESOURCE_PATTERN_LITERAL)
            }
            Resource::Topic(name) => {
                (RD_KAFKA_RESOURCE_TOPIC, name.as_str(), RD_KAFKA_RESOURCE_PATTERN_LITERAL)
            }
            Resource::TransactionalId(id) => {
                (RD_KAFKA_RESOURCE_TRANSACTIONAL_ID, id.as_str(), RD_KAFKA_RESOURCE_PATTERN_LITERAL)
            }
        };
        let name = CString::new(name).expect("no NUL in a resource name");
        let principal = CString::new(acl.principal.as_str()).expect("no NUL in a principal");
        // SAFETY: every pointer is valid for the call; librdkafka copies the strings.
        let binding = unsafe {
            rdsys::rd_kafka_AclBinding_new(
                kind,
                name.as_ptr(),
                pattern,
                principal.as_ptr(),
                c"*".as_ptr(),
                acl.operation,
                rdsys::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW,
                errstr.as_mut_ptr(),
                errstr.len(),
            )
        };
        if binding.is_null() {
            // SAFETY: librdkafka wrote a NUL-terminated message into errstr.
            let why = unsafe { CStr::from_ptr(errstr.as_ptr()) }.to_string_lossy().into_owned();
            free_bindings(&mut bindings);
            return Err(format!("{acl:?}: {why}"));
        }
        bindings.push(binding);
    }
    // SAFETY: the queue, options and bindings are released below, after the result was read.
    let result = unsafe {
        let queue = rdsys::rd_kafka_queue_new(rk);
        let options = rdsys::rd_kafka_AdminOptions_new(
            rk,
            rdsys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_CREATEACLS,
        );
        rdsys::rd_kafka_CreateAcls(rk, bindings.as_mut_ptr(), bindings.len(), options, queue);
        let event = rdsys::rd_kafka_queue_poll(queue, 30_000);
        let result = read_create_acls_result(event);
        if !event.is_null() {
            rdsys::rd_kafka_event_destroy(event);
        }
        rdsys::rd_kafka_AdminOptions_destroy(options);
        rdsys::rd_kafka_queue_destroy(queue);
        result
    };
    free_bindings(&mut bindings);
    result
}

/// The outcome of a CreateAcls result event: the request's error, or the first binding's.
///
/// # Safety
/// `event` is null or a live event from the CreateAcls queue.
unsafe fn read_create_acls_result(event: *mut rdsys::rd_kafka_event_t) -> Result<(), String> {
    if event.is_null() {
        return Err("no CreateAcls result within 30 s".into());
    }
    let text = |p: *const std::ffi::c_char| {
        if p.is_null() {
            String::new()
        } else {
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    unsafe {
        if rdsys::rd_kafka_event_error(event)
            != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        {
            return Err(text(rdsys::rd_kafka_event_error_string(event)));
        }
        let result = rdsys::rd_kafka_event_CreateAcls_result(event);
        let mut n = 0;
        let results = rdsys::rd_kafka_CreateAcls_result_acls(result, &mut n);
        for i in 0..n {
            let error = rdsys::rd_kafka_acl_result_error(*results.add(i));
            if !error.is_null() {
                return Err(format!("binding {i}: {}", text(rdsys::rd_kafka_error_string(error))));
            }
        }
    }
    Ok(())
}

fn free_bindings(bindings: &mut Vec<*mut rdsys::rd_kafka_AclBinding_t>) {
    if !bindings.is_empty() {
        // SAFETY: each binding came from rd_kafka_AclBinding_new and is freed once.
        unsafe { rdsys::rd_kafka_AclBinding_destroy_array(bindings.as_mut_ptr(), bindings.len()) };
        bindings.clear();
    }
}
