//! Kafka security against a real Apache Kafka node (support::secure_kafka): SASL_SSL with
//! SCRAM-SHA-512 over a CA the test makes, ACLs under Kafka's StandardAuthorizer, a missing WRITE
//! ACL, a wrong password, and `walrelay check` authenticating. Every relay is the real binary.

use std::time::Duration;

use rdkafka::bindings::rd_kafka_AclOperation_t::{
    RD_KAFKA_ACL_OPERATION_DESCRIBE as DESCRIBE,
    RD_KAFKA_ACL_OPERATION_IDEMPOTENT_WRITE as IDEMPOTENT_WRITE,
    RD_KAFKA_ACL_OPERATION_READ as READ, RD_KAFKA_ACL_OPERATION_WRITE as WRITE,
};

use crate::common::{ids, Setup};
use crate::support::broker::Kind;
use crate::support::process::{http_get, walrelay_async, RelayProcess};
use crate::support::secure_kafka::{Acl, Login, Resource, SecureKafka, ADMIN, NO_WRITE, RELAY};
use crate::support::{free_port, services, wait_until};

/// A relay configuration for `s` against the secure node's SASL_SSL listener as `login`.
/// `router` and `extra` as in [`Setup::config_with`].
pub(crate) fn secure_config(
    s: &Setup,
    kafka: &SecureKafka,
    login: Login,
    router: &str,
    extra: &str,
) -> String {
    let security = format!("{}\"message.timeout.ms\" = 20000\n", kafka.kafka_toml(login));
    s.config_for_bootstrap(&kafka.bootstrap(), router, &security, extra)
}

/// The ACLs walrelay needs (docs/operations.md): WRITE and DESCRIBE on its topics, by prefix,
/// and IDEMPOTENT_WRITE on the cluster.
pub(crate) fn relay_acls(login: Login, prefix: &str) -> Vec<Acl> {
    vec![
        Acl::allow(login, WRITE, Resource::TopicsPrefixed(prefix.to_string())),
        Acl::allow(login, DESCRIBE, Resource::TopicsPrefixed(prefix.to_string())),
        Acl::allow(login, IDEMPOTENT_WRITE, Resource::Cluster),
    ]
}

/// Waits until no walsender holds the slot (a peek at its changes needs that).
async fn wait_released(s: &Setup) {
    let (db, slot) = (&s.db, s.slot.as_str());
    let released = wait_until("the slot is released", Duration::from_secs(15), || async move {
        db.slot_active(slot).await == Some(false)
    });
    assert!(released.await, "the slot is still active");
}

/// Every password the node knows; none may appear in what walrelay prints.
pub(crate) fn assert_no_password(output: &str) {
    for login in [ADMIN, RELAY, NO_WRITE] {
        assert!(
            !output.contains(login.password),
            "{}'s password was printed:\n{output}",
            login.user
        );
    }
}

/// SASL_SSL with SCRAM-SHA-512, the broker's certificate checked against the test's CA
/// (`ssl.ca.location`): every event arrives in order, read back by a consumer that
/// authenticates as admin, and the slot confirms past the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_ssl_with_scram_sha_512_relays_everything() {
    let kafka = SecureKafka::get().await;
    let s = Setup::new("sec_scram").await;
    kafka.create_topic(&s.topic("Order"), 4).await;
    kafka.wait_visible(ADMIN, &[&s.topic("Order")]).await;
    let mut relay = RelayProcess::start(&secure_config(&s, kafka, ADMIN, "", ""));
    s.wait_streaming(&mut relay).await;
    let sent = s.insert_events("Order", "o-1", 20).await;
    let got = kafka.consume(&[&s.topic("Order")], 20, Duration::from_secs(60)).await;
    println!(
        "SASL_SSL + SCRAM-SHA-512 as admin: {} of {} records read back over SASL_SSL",
        got.len(),
        sent.len()
    );
    assert_eq!(ids(&got), sent, "{}", s.diagnostics(&relay));
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    wait_released(&s).await;
    assert!(!s.slot_holds(&sent[19]).await, "the last event is still unconfirmed");
    assert_no_password(&relay.log());
}

/// A principal with only WRITE and DESCRIBE on its topics (a prefixed pattern) and
/// IDEMPOTENT_WRITE on the cluster relays everything, on two topics, with nothing more granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_privilege_acls_are_enough_to_relay_everything() {
    let kafka = SecureKafka::get().await;
    let s = Setup::new("sec_acl").await;
    for t in ["Order", "Invoice"] {
        kafka.create_topic(&s.topic(t), 4).await;
    }
    kafka.allow(&relay_acls(RELAY, &s.topic_prefix)).await;
    kafka.wait_visible(RELAY, &[&s.topic("Order"), &s.topic("Invoice")]).await;
    let mut relay = RelayProcess::start(&secure_config(&s, kafka, RELAY, "", ""));
    s.wait_streaming(&mut relay).await;
    let orders = s.insert_events("Order", "o-1", 10).await;
    let invoices = s.insert_events("Invoice", "i-1", 10).await;
    let got =
        kafka.consume(&[&s.topic("Order"), &s.topic("Invoice")], 20, Duration::from_secs(60)).await;
    println!(
        "User:{} with WRITE+DESCRIBE on prefix {} and IDEMPOTENT_WRITE: {} of 20 records",
        RELAY.user,
        s.topic_prefix,
        got.len()
    );
    let expected: Vec<String> = orders.iter().chain(&invoices).cloned().collect();
    assert_eq!(ids(&got), expected, "{}", s.diagnostics(&relay));
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    wait_released(&s).await;
    assert!(!s.slot_holds(&invoices[9]).await, "the last event is still unconfirmed");
    assert_no_password(&relay.log());
}

/// Without WRITE on its topic (DESCRIBE and IDEMPOTENT_WRITE granted), the broker answers
/// TOPIC_AUTHORIZATION_FAILED: walrelay stops at once with exit code 1 and a hint naming the ACL
/// to add, and confirms nothing — also with a `[dead_letter]` topic the principal may write: a
/// missing ACL is never dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_write_acl_stops_the_relay_with_the_acl_to_add_even_with_a_dead_letter_topic() {
    let kafka = SecureKafka::get().await;
    let s = Setup::new("sec_nowrite").await;
    let topic = s.topic("Order");
    let dead = format!("{}_dead_letters", s.topic_prefix);
    kafka.create_topic(&topic, 4).await;
    kafka.create_topic(&dead, 1).await;
    kafka
        .allow(&[
            Acl::allow(NO_WRITE, DESCRIBE, Resource::TopicsPrefixed(s.topic_prefix.clone())),
            Acl::allow(NO_WRITE, IDEMPOTENT_WRITE, Resource::Cluster),
            Acl::allow(NO_WRITE, WRITE, Resource::TopicsPrefixed(dead.clone())),
        ])
        .await;
    kafka.wait_visible(NO_WRITE, &[&topic, &dead]).await;
    let mut relay = RelayProcess::start(&secure_config(&s, kafka, NO_WRITE, "", ""));
    s.wait_streaming(&mut relay).await;
    let event = s.insert_events("Order", "o-1", 1).await.remove(0);
    let started = std::time::Instant::now();
    let code = relay.wait_exit(Duration::from_secs(60));
    let log = relay.log();
    let stopped = log.lines().find(|l| l.contains("walrelay stopped")).unwrap_or_default();
    println!("no WRITE ACL: exit {code:?} after {:.1?}: {stopped}", started.elapsed());
    assert_eq!(code, Some(1), "{log}");
    // The refused record is never acknowledged: the stop does not wait the grace period for it.
    assert!(!log.contains("shutdown grace period over"), "{log}");
    for needle in ["authoriz", "User:nowrite", "Write", &topic, "hint="] {
        assert!(stopped.contains(needle), "the stop does not name {needle:?}: {stopped}");
    }
    wait_released(&s).await;
    assert!(s.slot_holds(&event).await, "the refused event was confirmed");
    assert_no_password(&log);

    // With a dead-letter topic it may write, the missing ACL still stops the relay: it is a
    // configuration problem, not a poison row, and a dead letter would hide it.
    let config =
        secure_config(&s, kafka, NO_WRITE, "", &format!("[dead_letter]\ntopic = \"{dead}\"\n"));
    let mut relay = RelayProcess::start(&config);
    let code = relay.wait_exit(Duration::from_secs(60));
    let log = relay.log();
    let stopped = log.lines().find(|l| l.contains("walrelay stopped")).unwrap_or_default();
    let letters = kafka.consume(&[&dead], 1, Duration::from_secs(3)).await;
    println!(
        "no WRITE ACL, [dead_letter] writable: exit {code:?}, {} dead letter(s): {stopped}",
        letters.len()
    );
    assert_eq!(code, Some(1), "{log}");
    for needle in ["authoriz", "User:nowrite", "--operation Write", &topic, "hint="] {
        assert!(stopped.contains(needle), "the stop does not name {needle:?}: {stopped}");
    }
    assert!(letters.is_empty(), "the refused record was dead-lettered: {:?}", letters[0].headers);
    wait_released(&s).await;
    assert!(s.slot_holds(&event).await, "the refused event was confirmed");
    assert_no_password(&log);
}

/// A replay the broker refuses (no WRITE ACL on `--to-topic`) stops with the `kafka-acls.sh`
/// line that grants it, and its progress counts acknowledgements: it never reads 100 %.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_refused_for_a_missing_acl_names_the_acl_and_never_shows_full_progress() {
    let kafka = SecureKafka::get().await;
    let s = Setup::new("sec_replay").await;
    let side = format!("{}_side", s.topic_prefix);
    kafka.create_topic(&side, 1).await;
    kafka
        .allow(&[
            Acl::allow(NO_WRITE, DESCRIBE, Resource::TopicsPrefixed(side.clone())),
            Acl::allow(NO_WRITE, IDEMPOTENT_WRITE, Resource::Cluster),
        ])
        .await;
    kafka.wait_visible(NO_WRITE, &[&side]).await;
    crate::replay::insert_aged(&s.db, "Order", 20, 30).await;
    let config = secure_config(&s, kafka, NO_WRITE, "", "");
    let run =
        walrelay_async(&["replay", "--since", "1h", "--to-topic", &side, "--yes"], Some(&config))
            .await;
    println!("replay without WRITE: exit {:?}\n{}", run.code, run.stderr.trim());
    assert_eq!(run.code, Some(1), "{run}");
    for needle in ["refused", "kafka-acls.sh", "User:nowrite", "--operation Write", &side] {
        assert!(run.stderr.contains(needle), "the refusal does not name {needle:?}: {run}");
    }
    assert!(!run.stderr.contains("(100%)"), "a refused replay showed full progress: {run}");
    assert!(kafka.consume(&[&side], 1, Duration::from_secs(3)).await.is_empty());
    assert_no_password(&run.stdout);
    assert_no_password(&run.stderr);
}

/// A CA file that is not PEM: `run` stops at once, and `check` fails, naming the property, the
/// file, what is wrong with it and the variable that also sets it, not OpenSSL's function name
/// alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_file_that_is_not_pem_is_named_with_the_property_the_file_and_the_variable() {
    let kafka = SecureKafka::get().await;
    let s = Setup::new("sec_badca").await;
    let bad = crate::support::scratch_dir("badca").join("ca.der");
    std::fs::write(&bad, b"not a certificate\n").unwrap();
    let config = secure_config(&s, kafka, RELAY, "", "")
        .replace(&kafka.ca().display().to_string(), &bad.display().to_string());
    let check = walrelay_async(&["check"], Some(&config)).await;
    let line = check.stdout.lines().find(|l| l.starts_with("FAIL broker")).unwrap_or_default();
    println!("check with a CA that is not PEM: {line}");
    let mut relay = RelayProcess::start(&config);
    let code = relay.wait_exit(Duration::from_secs(30));
    let log = relay.log();
    let stopped = log.lines().find(|l| l.contains("walrelay stopped")).unwrap_or_default();
    println!("run with a CA that is not PEM: exit {code:?}: {stopped}");
    assert_eq!(code, Some(1), "{log}");
    let named = format!("[kafka] ssl.ca.location: {} holds no PEM certificate", bad.display());
    for said in [line, stopped] {
        assert!(said.contains(&named), "{said}");
        assert!(said.contains("WALRELAY_KAFKA_SSL__CA__LOCATION"), "{said}");
        assert!(said.contains("the PEM file of the CA"), "{said}");
    }
    assert_no_password(&check.stdout);
    assert_no_password(&log);
}

/// A Debezium connector that trusts the broker through a PEM truststore imports to a
/// configuration that relays over SASL_SSL as it is, the password from its variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connector_with_a_pem_truststore_imports_to_a_config_that_relays_over_sasl_ssl() {
    let kafka = SecureKafka::get().await;
    let s = Setup::new("sec_import").await;
    kafka.create_topic(&s.topic("Order"), 4).await;
    kafka.allow(&relay_acls(RELAY, &s.topic_prefix)).await;
    let port = s.db.url.rsplit(':').next().and_then(|p| p.split('/').next()).unwrap();
    let connector = serde_json::json!({"name": "outbox", "config": {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": "127.0.0.1", "database.port": port, "database.user": "postgres",
        "database.dbname": s.db.name, "plugin.name": "pgoutput", "topic.prefix": "dbz",
        "slot.name": s.slot, "publication.name": s.publication,
        "table.include.list": "public.outbox",
        "transforms": "outbox",
        "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
        "transforms.outbox.route.topic.replacement":
            format!("{}.outbox.event.${{routedByValue}}", s.topic_prefix),
        "producer.override.bootstrap.servers": kafka.bootstrap(),
        "producer.override.security.protocol": "SASL_SSL",
        "producer.override.sasl.mechanism": "SCRAM-SHA-512",
        "producer.override.sasl.jaas.config": format!(
            "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{}\" password=\"{}\";",
            RELAY.user, RELAY.password
        ),
        "producer.override.ssl.truststore.type": "PEM",
        "producer.override.ssl.truststore.location": kafka.ca().display().to_string(),
    }});
    let path = crate::support::scratch_dir("import").join("connector.json");
    std::fs::write(&path, connector.to_string()).unwrap();
    let import = walrelay_async(&["import-debezium", path.to_str().unwrap()], None).await;
    println!("import of a PEM truststore: exit {:?}\n{}", import.code, import.stderr.trim());
    assert_eq!(import.code, Some(0), "{import}");
    let ca = format!("\"ssl.ca.location\" = \"{}\"", kafka.ca().display());
    assert!(import.stdout.contains(&ca), "{}", import.stdout);
    assert_no_password(&import.stdout);
    assert_no_password(&import.stderr);

    let mut relay = RelayProcess::start_with(
        &import.stdout,
        &[],
        &[("WALRELAY_KAFKA_SASL__PASSWORD", RELAY.password)],
    );
    s.wait_streaming(&mut relay).await;
    let sent = s.insert_events("Order", "o-1", 5).await;
    let got = kafka.consume(&[&s.topic("Order")], 5, Duration::from_secs(30)).await;
    let got: Vec<String> =
        got.iter().filter_map(|r| r.header_str("id").map(str::to_string)).collect();
    assert_eq!(got, sent, "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    assert_no_password(&relay.log());
}

/// A wrong password: every attempt window (a session, until its records time out) says it in
/// one line that names SASL, the user and the variable that holds the password; the session's
/// end and `/readyz` name the same cause, never "broker unreachable". No record is confirmed,
/// and the password is printed nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_said_once_per_attempt_naming_sasl_the_user_and_the_variable() {
    const WRONG: Login = Login { user: "walrelay", password: "not-the-password-3e7f" };
    const CLEAR: &str = "kafka refuses walrelay's SASL login as user walrelay (SCRAM-SHA-512)";
    let kafka = SecureKafka::get().await;
    let s = Setup::new("sec_badpw").await;
    kafka.create_topic(&s.topic("Order"), 4).await;
    kafka.allow(&relay_acls(RELAY, &s.topic_prefix)).await;
    let http = free_port();
    let config =
        secure_config(&s, kafka, WRONG, "", &format!("[http]\nlisten = \"127.0.0.1:{http}\"\n"))
            .replace("\"message.timeout.ms\" = 20000", "\"message.timeout.ms\" = 5000");
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let sent = s.insert_events("Order", "o-1", 3).await;
    let said = relay.wait_for_log(CLEAR, Duration::from_secs(30)).await;
    assert!(said, "no line naming the refused SASL login within 30 s:\n{}", relay.log());
    let readyz = http_get(http, "/readyz").await.unwrap_or_default();
    // Two attempt windows: the records time out (message.timeout.ms) and the session ends,
    // confirming nothing, twice.
    let two = wait_until("two sessions ended", Duration::from_secs(60), || {
        let n = relay.log().matches("relay session ended").count();
        async move { n >= 2 }
    })
    .await;
    let log = relay.log();
    assert!(two, "the sessions never gave up on their records:\n{log}");
    let loud: Vec<&str> =
        log.lines().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).collect();
    println!("wrong password: /readyz {:?}", readyz.lines().last().unwrap_or_default());
    println!("wrong password, the relay's warnings and errors:\n{}", loud.join("\n"));
    // The clear line itself, at ERROR; the session's end repeats its cause in its own line.
    let clear = loud.iter().filter(|l| l.contains(" ERROR ") && l.contains(CLEAR)).count();
    let sessions = log.matches("relay session ended").count();
    let first = loud.iter().find(|l| l.contains(CLEAR)).copied().unwrap_or_default();
    assert!(first.contains("WALRELAY_KAFKA_SASL__PASSWORD"), "{first}");
    assert!(first.contains("invalid credentials"), "librdkafka's reason is left out: {first}");
    assert!(
        (1..=sessions + 1).contains(&clear),
        "{clear} lines naming the login for {sessions} attempt windows:\n{log}"
    );
    // The source's own warnings (the slot is no failover slot here) are not about Kafka.
    let unclear: Vec<&&str> =
        loud.iter().filter(|l| !l.contains("SASL") && !l.contains("walrelay::source")).collect();
    assert!(unclear.is_empty(), "lines that do not name the refused login: {unclear:#?}");
    assert!(readyz.contains(" 503 ") && readyz.contains(CLEAR), "/readyz: {readyz}");
    relay.kill();
    wait_released(&s).await;
    let confirmed = s.db.confirmed_flush_lsn(&s.slot).await;
    let mut held = 0;
    for id in &sent {
        held += usize::from(s.slot_holds(id).await);
    }
    println!("wrong password: confirmed_flush_lsn {confirmed:?}; the slot still holds {held} of 3 events");
    assert_eq!(held, 3, "an event was confirmed without reaching Kafka:\n{log}");
    assert_no_password(&relay.log());
    assert!(!relay.log().contains(WRONG.password), "the wrong password was printed");
}

/// `walrelay check` authenticates over SASL_SSL as the relay's principal and reports the cluster
/// id and the broker's API levels; with the broker creating no topics, it names the fixed topics
/// that are missing (the dead-letter topic, a fixed route). A wrong password fails the check,
/// naming authentication, and so does a CA that did not sign the broker's certificate. On a
/// broker that creates topics itself, the missing fixed topics are warnings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_authenticates_and_reports_the_cluster_and_missing_topics() {
    let kafka = SecureKafka::get().await;
    let s = Setup::new("sec_check").await;
    kafka.allow(&relay_acls(RELAY, &s.topic_prefix)).await;
    let dead = format!("{}_dead_letters", s.topic_prefix);
    let fixed = format!("{}.all_events", s.topic_prefix);
    let extra = format!("[dead_letter]\ntopic = \"{dead}\"\n");
    let router = format!("\"route.topic.replacement\" = \"{fixed}\"\n");
    let config = secure_config(&s, kafka, RELAY, &router, &extra);

    let run = walrelay_async(&["check"], Some(&config)).await;
    let broker_line = run.lines_starting(&format!("ok   broker {}", kafka.bootstrap())).join("");
    println!("check, topics missing:\n{}", run.stdout);
    assert!(broker_line.contains("answers") && broker_line.contains("cluster id "), "{run}");
    assert!(broker_line.contains("API levels Produce v"), "{run}");
    let fails = run.lines_starting("FAIL ");
    for topic in [&dead, &fixed] {
        assert!(
            fails.iter().any(|l| l.contains(topic.as_str()) && l.contains("does not exist")),
            "{topic} not reported missing\n{run}"
        );
    }
    assert_eq!(run.code, Some(1), "{run}");
    assert_no_password(&run.to_string());

    kafka.create_topic(&dead, 1).await;
    kafka.create_topic(&fixed, 4).await;
    kafka.wait_visible(RELAY, &[&dead, &fixed]).await;
    let run = walrelay_async(&["check"], Some(&config)).await;
    println!("check, topics created:\n{}", run.stdout);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains(&format!("ok   topic {dead}: exists")), "{run}");

    let wrong = config.replace(RELAY.password, "not-the-password-3e7f");
    let run = walrelay_async(&["check"], Some(&wrong)).await;
    let fail = run.lines_starting(&format!("FAIL broker {}", kafka.bootstrap())).join("");
    println!("check, wrong password: {fail}");
    assert_eq!(run.code, Some(1), "{run}");
    assert!(fail.contains("refused the login") && fail.contains("invalid credentials"), "{run}");
    assert!(!run.to_string().contains("not-the-password-3e7f"), "{run}");

    // The system's CAs did not sign the broker's certificate: the TLS handshake fails, named.
    let ca = kafka.ca().display().to_string();
    let other_ca = config.replace(&ca, "/etc/ssl/certs/ca-certificates.crt");
    assert_ne!(other_ca, config);
    let run = walrelay_async(&["check"], Some(&other_ca)).await;
    let fail = run.lines_starting(&format!("FAIL broker {}", kafka.bootstrap())).join("");
    println!("check, another CA: {fail}");
    assert_eq!(run.code, Some(1), "{run}");
    assert!(
        fail.contains("TLS handshake failed") && fail.contains("certificate verify failed"),
        "{run}"
    );

    // The shared test broker creates topics (auto.create.topics.enable=true, which check reads
    // with DescribeConfigs): the same fixed topics, missing there, are warnings. (tansu, with
    // WALRELAY_TEST_BROKER=tansu, answers no DescribeConfigs.)
    if services().broker.kind() != Kind::Kafka {
        return;
    }
    let plain = s.config_with(&router, "", &extra);
    let run = walrelay_async(&["check"], Some(&plain)).await;
    let warnings = run.lines_starting("warn topic ");
    println!("check, a broker that creates topics:\n{}", warnings.join("\n"));
    assert_eq!(run.code, Some(0), "{run}");
    assert_eq!(warnings.len(), 2, "{run}");
    assert!(warnings.iter().all(|l| l.contains("auto.create.topics.enable")), "{run}");
}

/// An unknown `sasl.mechanism` is refused when the producer is created: exit 1, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_sasl_mechanism_stops_the_relay_at_start() {
    let kafka = SecureKafka::get().await;
    let s = Setup::new("sec_mech").await;
    let config = secure_config(&s, kafka, RELAY, "", "").replace("SCRAM-SHA-512", "NO-SUCH-MECH");
    let mut relay = RelayProcess::start(&config);
    let code = relay.wait_exit(Duration::from_secs(30));
    let log = relay.log();
    println!(
        "sasl.mechanism = NO-SUCH-MECH: exit {code:?}: {}",
        log.lines().find(|l| l.contains("walrelay stopped")).unwrap_or("")
    );
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("NO-SUCH-MECH") && log.to_lowercase().contains("sasl"), "{log}");
    // The fix names the property and the variable that sets it, though librdkafka's text
    // quotes only the value.
    let stopped = log.lines().find(|l| l.contains("walrelay stopped")).unwrap_or_default();
    assert!(
        stopped.contains("sasl.mechanism") && stopped.contains("WALRELAY_KAFKA_SASL__MECHANISM"),
        "{stopped}"
    );
    assert_no_password(&log);
}

/// The ACLs exactly-once needs beyond at-least-once's (docs/operations.md, "The ACLs walrelay
/// needs"), as Kafka 4.4's StandardAuthorizer sees them: Read and Write on the progress topic,
/// Write on the transactional id (each implies Describe), and no consumer-group ACL.
fn exactly_once_acls(progress: &str, transactional_id: &str) -> Vec<(&'static str, Acl)> {
    let topic = || Resource::Topic(progress.to_string());
    let id = || Resource::TransactionalId(transactional_id.to_string());
    vec![
        ("Read on the progress topic", Acl::allow(RELAY, READ, topic())),
        ("Write on the progress topic", Acl::allow(RELAY, WRITE, topic())),
        ("Write on the transactional id", Acl::allow(RELAY, WRITE, id())),
    ]
}

/// Exactly-once on SASL_SSL + SCRAM-SHA-512 with exactly the documented ACLs relays
/// everything; with any one of exactly-once's withheld, `walrelay check` fails naming it and
/// `walrelay run` exits 1 within a minute with the `kafka-acls.sh` line that grants it, instead
/// of retrying for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_with_exactly_the_documented_acls_relays_and_each_one_missing_is_named_by_check_and_stops_run(
) {
    let kafka = SecureKafka::get().await;
    let s = Setup::new("sec_eo").await;
    let topic = s.topic("Order");
    kafka.create_topic(&topic, 4).await;
    kafka.allow(&relay_acls(RELAY, &s.topic_prefix)).await;
    // `withheld`: the one of exactly-once's ACLs not granted; each case has its own progress
    // topic (created by the admin) and transactional id, so the others' grants do not count.
    let case = |n: usize, withheld: Option<&'static str>| {
        let progress = crate::support::unique(&format!("sec_eo_progress_{n}"));
        let id = crate::support::unique(&format!("sec_eo_txid_{n}"));
        let acls: Vec<Acl> = exactly_once_acls(&progress, &id)
            .into_iter()
            .filter(|(what, _)| Some(*what) != withheld)
            .map(|(_, acl)| acl)
            .collect();
        let delivery = format!(
            "[delivery]\nguarantee = \"exactly-once\"\nprogress_topic = \"{progress}\"\ntransactional_id = \"{id}\"\n"
        );
        (progress, id, acls, secure_config(&s, kafka, RELAY, "", &delivery))
    };

    let (progress, _, acls, config) = case(0, None);
    kafka.create_topic(&progress, 1).await;
    kafka.allow(&acls).await;
    kafka.wait_visible(RELAY, &[&topic, &progress]).await;
    let check = walrelay_async(&["check"], Some(&config)).await;
    println!("exactly-once, the documented ACLs: check\n{}", check.stdout);
    assert_eq!(check.code, Some(0), "{check}");
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let events = s.insert_events("Order", "o-1", 3).await;
    let got = kafka.consume(&[&topic], 3, Duration::from_secs(60)).await;
    assert_eq!(ids(&got), events, "{}", s.diagnostics(&relay));
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    wait_released(&s).await;
    assert_no_password(&relay.log());

    for (n, (withheld, _)) in exactly_once_acls("", "").into_iter().enumerate() {
        let (progress, id, acls, config) = case(n + 1, Some(withheld));
        kafka.create_topic(&progress, 1).await;
        kafka.allow(&acls).await;
        kafka.wait_visible(RELAY, &[&progress]).await;
        let check = walrelay_async(&["check"], Some(&config)).await;
        let fails = check.lines_starting("FAIL ").join("\n");
        let mut relay = RelayProcess::start(&config);
        s.insert_events("Order", &format!("o-{}", n + 2), 1).await;
        let started = std::time::Instant::now();
        let code = relay.wait_exit(Duration::from_secs(60));
        let log = relay.log();
        let stopped = log.lines().find(|l| l.contains("walrelay stopped")).unwrap_or_default();
        println!(
            "exactly-once without {withheld}: check: {fails}; run: exit {code:?} after {:.1?}: {stopped}",
            started.elapsed()
        );
        assert_eq!(check.code, Some(1), "check passed without {withheld}:\n{check}");
        let resource = if withheld.contains("transactional id") { &id } else { &progress };
        assert!(fails.contains(resource.as_str()), "check does not name {resource}:\n{check}");
        let operation = withheld.split(' ').next().unwrap();
        assert!(fails.contains(operation), "check does not name {operation}:\n{check}");
        assert_eq!(code, Some(1), "run without {withheld} did not stop:\n{log}");
        assert!(stopped.contains("kafka-acls.sh"), "no kafka-acls.sh line: {stopped}");
        assert!(
            stopped.contains(resource.as_str()) || stopped.contains("<the topic>"),
            "{stopped}"
        );
        wait_released(&s).await;
        assert_no_password(&log);
    }
}
