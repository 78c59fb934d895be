//! What the commands tell a new user must be true (issue 29): `import-debezium` keeps what
//! protects a connector's connections, and the hints, help and error messages point at what
//! can work.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::admin::{walrelay, Run};
use crate::support::note;
use crate::support::relay::walrelay_bin;

/// `walrelay import-debezium -` with `input` on standard input.
fn import_stdin(input: &str) -> Run {
    let mut child = Command::new(walrelay_bin())
        .args(["import-debezium", "-"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run walrelay");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// librdkafka's compiled-in features (`builtin.features`) in this build.
fn librdkafka_features() -> String {
    let config = rdkafka::config::ClientConfig::new().create_native_config().unwrap();
    config.get("builtin.features").unwrap_or_default()
}

const SECURED: &str = r#"{"name": "secured", "config": {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "database.hostname": "pg.internal", "database.user": "dbz", "database.password": "pg-s3cret",
    "database.dbname": "app", "database.sslmode": "verify-full",
    "database.sslrootcert": "/etc/walrelay/pg-ca.pem",
    "plugin.name": "pgoutput", "slot.name": "app_slot", "topic.prefix": "app",
    "publication.autocreate.mode": "filtered", "table.include.list": "public.outbox",
    "transforms": "outbox",
    "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
    "producer.override.bootstrap.servers": "kafka:9093",
    "producer.override.security.protocol": "SASL_SSL",
    "producer.override.sasl.mechanism": "SCRAM-SHA-512",
    "producer.override.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"relay\" password=\"kafka-s3cret\";",
    "producer.override.ssl.ca.location": "/etc/walrelay/kafka-ca.pem"}}"#;

/// A connector with verified TLS to PostgreSQL and SASL_SSL to Kafka: the URL keeps sslmode
/// and sslrootcert, `[kafka]` keeps the protocol, the CA, the mechanism and the JAAS line's
/// user, names the password's variable, and shows no password. Where this build's librdkafka
/// has no TLS, the import refuses (exit 2) instead of writing a plaintext configuration.
#[test]
fn import_debezium_keeps_what_protects_a_secured_connectors_connections() {
    let run = import_stdin(SECURED);
    let features = librdkafka_features();
    let url = run.stdout.lines().find(|l| l.starts_with("url = ")).unwrap_or("");
    let kafka: Vec<&str> = run
        .stdout
        .lines()
        .skip_while(|l| *l != "[kafka]")
        .take_while(|l| !l.starts_with("# Where Debezium"))
        .filter(|l| !l.is_empty())
        .collect();
    note(&format!(
        "import-debezium of a secured connector (librdkafka features {features}): exit {:?}; {url}; {kafka:?}; stderr: {}",
        run.code,
        run.stderr.trim()
    ));
    assert!(!format!("{run}").contains("s3cret"), "a password was printed:\n{run}");
    if !(features.contains("ssl") && features.contains("sasl_scram")) {
        assert_eq!(run.code, Some(2), "{run}");
        assert!(run.stdout.is_empty(), "{run}");
        assert!(run.stderr.contains("security.protocol"), "{run}");
        return;
    }
    assert_eq!(run.code, Some(0), "{run}");
    assert_eq!(
        url,
        "url = \"postgres://dbz@pg.internal:5432/app?sslmode=verify-full&sslrootcert=/etc/walrelay/pg-ca.pem\""
    );
    for line in [
        "\"security.protocol\" = \"SASL_SSL\"",
        "\"sasl.mechanism\" = \"SCRAM-SHA-512\"",
        "\"sasl.username\" = \"relay\"",
        "\"ssl.ca.location\" = \"/etc/walrelay/kafka-ca.pem\"",
    ] {
        assert!(kafka.contains(&line), "{line} missing:\n{run}");
    }
    assert!(run.stdout.contains("WALRELAY_KAFKA_SASL__PASSWORD"), "{run}");
    assert!(!run.stdout.contains("JAAS__CONFIG") && !run.stderr.contains("JAAS__CONFIG"), "{run}");
    walrelay::config::Config::parse(&run.stdout).unwrap_or_else(|e| panic!("{e}\n{run}"));
}

/// SASL_PLAINTEXT with PLAIN (which every build of librdkafka has): the protocol, the
/// mechanism and the JAAS line's user are carried, the password's variable is named, and the
/// PostgreSQL URL keeps verify-full.
#[test]
fn import_debezium_carries_sasl_plaintext_and_a_plain_jaas_line() {
    let input = SECURED
        .replace("SASL_SSL", "SASL_PLAINTEXT")
        .replace("SCRAM-SHA-512", "PLAIN")
        .replace("scram.ScramLoginModule", "plain.PlainLoginModule")
        .replace(
            "\"producer.override.ssl.ca.location\": \"/etc/walrelay/kafka-ca.pem\"",
            "\"x\": \"y\"",
        );
    let run = import_stdin(&input);
    let url = run.stdout.lines().find(|l| l.starts_with("url = ")).unwrap_or("");
    let sasl: Vec<&str> =
        run.stdout.lines().filter(|l| l.contains("sasl") || l.contains("security")).collect();
    note(&format!(
        "import-debezium of a SASL_PLAINTEXT connector: exit {:?}; {url}; {sasl:?}",
        run.code
    ));
    assert_eq!(run.code, Some(0), "{run}");
    assert!(!format!("{run}").contains("s3cret"), "a password was printed:\n{run}");
    assert!(url.contains("?sslmode=verify-full&sslrootcert=/etc/walrelay/pg-ca.pem"), "{run}");
    for line in [
        "\"security.protocol\" = \"SASL_PLAINTEXT\"",
        "\"sasl.mechanism\" = \"PLAIN\"",
        "\"sasl.username\" = \"relay\"",
    ] {
        assert!(run.stdout.lines().any(|l| l == line), "{line} missing:\n{run}");
    }
    assert!(run.stdout.contains("WALRELAY_KAFKA_SASL__PASSWORD"), "{run}");
    assert!(!run.stderr.contains("JAAS__CONFIG"), "{run}");
}

/// What can't be carried fails the import: a client certificate to PostgreSQL, a Kerberos
/// login, a Java keystore. Nothing is written to stdout.
#[test]
fn import_debezium_refuses_what_it_cannot_carry_instead_of_warning() {
    let cases = [
        ("\"database.sslkey\": \"/k.pem\"", "database.sslkey"),
        (
            "\"producer.override.sasl.jaas.config\": \"com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;\"",
            "Krb5LoginModule",
        ),
        ("\"producer.override.ssl.truststore.location\": \"/ts.jks\"", "ssl.truststore.location"),
    ];
    for (option, named) in cases {
        let input = format!(
            r#"{{"database.hostname": "pg", "database.dbname": "app", "plugin.name": "pgoutput",
               "producer.override.bootstrap.servers": "kafka:9092", {option}}}"#
        );
        let run = import_stdin(&input);
        note(&format!("import-debezium with {option}: exit {:?}, {}", run.code, run.stderr.trim()));
        assert_eq!(run.code, Some(2), "{run}");
        assert!(run.stdout.is_empty(), "{run}");
        assert!(run.stderr.contains(named), "{run}");
    }
}

/// Debezium's default plugin is decoderbufs: its slot can't be taken over, so the file names a
/// new one instead of the connector's.
#[test]
fn import_debezium_names_a_new_slot_for_a_decoderbufs_connector() {
    let input = r#"{"database.hostname": "pg", "database.dbname": "app", "slot.name": "debezium",
        "plugin.name": "decoderbufs", "producer.override.bootstrap.servers": "kafka:9092"}"#;
    let run = import_stdin(input);
    let slot = run.stdout.lines().find(|l| l.starts_with("slot = ")).unwrap_or("");
    note(&format!("import-debezium of a decoderbufs connector: {slot}"));
    assert_eq!(run.code, Some(0), "{run}");
    assert_eq!(slot, "slot = \"debezium_walrelay\"", "{run}");
    let missing = walrelay(&["import-debezium", "/nonexistent.json"], None);
    assert_eq!(missing.code, Some(2), "{missing}");
}
