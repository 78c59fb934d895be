//! What the commands tell a new user must be true: `import-debezium` keeps what
//! protects a connector's connections, and the hints, help and error messages point at what
//! can work.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{ids, Setup};
use crate::support::note;
use crate::support::process::{walrelay, walrelay_async, walrelay_bin, Run};

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
/// user, names the password's variable, and shows no password. walrelay's librdkafka is built
/// with OpenSSL and SCRAM (Cargo.toml's rdkafka features), which the import relies on.
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
    assert!(
        features.contains("ssl")
            && features.contains("sasl_scram")
            && features.contains("sasl_gssapi"),
        "librdkafka was built without TLS or SASL: {features}"
    );
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
/// login. Nothing is written to stdout. (A Java truststore is carried as a placeholder the
/// relay refuses to start with: the next test.)
#[test]
fn import_debezium_refuses_what_it_cannot_carry_instead_of_warning() {
    let cases = [
        ("\"database.sslkey\": \"/k.pem\"", "database.sslkey"),
        (
            "\"producer.override.sasl.jaas.config\": \"com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;\"",
            "Krb5LoginModule",
        ),
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

/// A JKS truststore becomes a FILL-IN `ssl.ca.location` with the keytool line in a warning; the
/// import exits 0, and the file it wrote is refused by `check` until the placeholder is filled.
#[test]
fn import_debezium_marks_a_jks_truststore_for_the_user_and_the_relay_refuses_the_placeholder() {
    let input = r#"{"database.hostname": "pg", "database.dbname": "app", "plugin.name": "pgoutput",
        "producer.override.bootstrap.servers": "kafka:9092",
        "producer.override.security.protocol": "SSL",
        "producer.override.ssl.truststore.location": "/ts.jks"}"#;
    let run = import_stdin(input);
    note(&format!(
        "import-debezium with a JKS truststore: exit {:?}, {}",
        run.code,
        run.stderr.trim()
    ));
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.lines().any(|l| l.starts_with("\"ssl.ca.location\" = \"FILL-IN")), "{run}");
    assert!(run.stderr.contains("keytool -exportcert -rfc -keystore /ts.jks"), "{run}");
    let refused = walrelay_env(&["check"], &run.stdout, &[]);
    assert_eq!(refused.code, Some(2), "{refused}");
    assert!(
        refused.stderr.contains("ssl.ca.location") && refused.stderr.contains("FILL-IN"),
        "{refused}"
    );
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

/// `walrelay ARGS` with extra environment variables.
fn walrelay_env(args: &[&str], config_toml: &str, envs: &[(&str, &str)]) -> Run {
    let path = crate::support::scratch_dir("hints").join("walrelay.toml");
    std::fs::write(&path, config_toml).unwrap();
    let out = Command::new(walrelay_bin())
        .args(args)
        .arg("--config")
        .arg(&path)
        .env("RUST_LOG", "warn")
        .envs(envs.iter().copied())
        .output()
        .expect("run walrelay");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

const MINIMAL: &str = r#"
[source]
url = "postgres://walrelay@127.0.0.1:1/app"
slot = "s"
publication = "p"

[outbox]
table = "public.outbox"

[kafka]
"bootstrap.servers" = "127.0.0.1:1"
"#;

/// Configuration errors point at what is wrong: a list for a one-value key is refused, a bad
/// connection string names its bad part, and a bad `WALRELAY_*` variable is named instead of
/// the file. Every subcommand's `--config` has a help text.
#[test]
fn configuration_errors_name_the_key_the_part_and_the_variable_at_fault() {
    let list = walrelay_env(&["check"], &MINIMAL.replace("slot = \"s\"", "slot = [\"x\"]"), &[]);
    let part = walrelay_env(&["check"], &MINIMAL.replace("/app", "/app?bogus=1"), &[]);
    let env = walrelay_env(&["check"], MINIMAL, &[("WALRELAY_SOURCE_STATUS_INTERVAL_MS", "5")]);
    for (what, run) in [
        ("slot = [\"x\"]", &list),
        ("url ?bogus=1", &part),
        ("WALRELAY_SOURCE_STATUS_INTERVAL_MS=5", &env),
    ] {
        note(&format!("check with {what}: exit {:?}: {}", run.code, run.stderr.trim()));
        assert_eq!(run.code, Some(2), "{run}");
    }
    assert!(list.stderr.contains("`slot`") && list.stderr.contains("not a list"), "{list}");
    assert!(part.stderr.contains("unknown option `bogus`"), "{part}");
    assert!(
        env.stderr.contains(
            "configuration error in environment variable WALRELAY_SOURCE_STATUS_INTERVAL_MS"
        ),
        "{env}"
    );
    for sub in ["run", "check", "setup", "teardown", "status", "purge"] {
        let help = walrelay(&[sub, "--help"], None);
        let line = help
            .stdout
            .lines()
            .find(|l| l.trim_start().starts_with("-c, --config"))
            .unwrap_or("")
            .to_string();
        note(&format!("walrelay {sub} --help: {}", line.trim()));
        assert!(line.contains("The TOML configuration file"), "{sub}: {help}");
    }
}

/// The README's configuration block, copied as is, deletes no rows: `[retention]` is
/// commented out.
#[test]
fn the_readme_configuration_block_turns_on_no_retention() {
    let readme = include_str!("../README.md");
    let block = readme
        .split("```toml")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a toml block in the README");
    let retention: Vec<&str> =
        block.lines().filter(|l| l.contains("retention") || l.contains("keep")).collect();
    note(&format!("README configuration block, retention lines: {retention:?}"));
    assert!(
        block
            .lines()
            .all(|l| !l.trim_start().starts_with("[retention]")
                && !l.trim_start().starts_with("keep")),
        "{block}"
    );
}

/// `check` for a role without REPLICATION points at pg_hba.conf's database entries (which
/// logical replication connections match), not at `replication` ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_points_a_role_without_replication_at_the_database_entries_of_pg_hba() {
    let s = Setup::new("hba_hint").await;
    let role = crate::support::unique("norepl");
    let admin = s.db.connect().await;
    admin.batch_execute(&format!("CREATE ROLE {role} LOGIN")).await.unwrap();
    let url = s.db.url.replacen("postgres://postgres@", &format!("postgres://{role}@"), 1);
    let config = s.config().replace(&s.db.url, &url);
    let run = walrelay_async(&["check"], Some(&config)).await;
    let line = run.stdout.lines().find(|l| l.contains("role privileges")).unwrap_or("").to_string();
    note(&format!("check as {role}: {line}"));
    assert!(line.contains("database entries"), "{run}");
    assert!(!line.contains("allow `replication` connections"), "{run}");
}

/// `setup --publication-only` creates the publication and no slot; `status` says the active
/// pid is the walsender's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_publication_only_creates_no_slot_and_status_names_the_walsender() {
    let db = crate::support::services().pg.create_database("pub_only").await;
    db.create_outbox("outbox").await;
    let slot = crate::support::unique("pub_only_slot");
    let publication = crate::support::unique("pub_only_pub");
    let config = MINIMAL
        .replace("postgres://walrelay@127.0.0.1:1/app", &db.url)
        .replace("slot = \"s\"", &format!("slot = \"{slot}\""))
        .replace("publication = \"p\"", &format!("publication = \"{publication}\""))
        .replace("127.0.0.1:1\"", &format!("{}\"", crate::support::services().broker.bootstrap()));
    let run = walrelay_async(&["setup", "--publication-only"], Some(&config)).await;
    note(&format!("setup --publication-only: exit {:?}: {}", run.code, run.stdout.trim()));
    assert_eq!(run.code, Some(0), "{run}");
    let client = db.connect().await;
    let count = |sql: &'static str, name: String| {
        let client = &client;
        async move { client.query_one(sql, &[&name]).await.unwrap().get::<_, i64>(0) }
    };
    let pubs =
        count("SELECT count(*) FROM pg_publication WHERE pubname = $1", publication.clone()).await;
    let slots =
        count("SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot.clone()).await;
    assert_eq!((pubs, slots), (1, 0), "{run}");

    let mut relay = crate::support::process::RelayProcess::start(&config);
    let (c, name) = (&client, slot.clone());
    let streaming = crate::support::wait_until("the relay streams", Duration::from_secs(30), || {
        let name = name.clone();
        async move {
            c.query_opt("SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND active AND confirmed_flush_lsn IS NOT NULL", &[&name])
                .await
                .unwrap()
                .is_some()
        }
    })
    .await;
    assert!(streaming, "{}", relay.log());
    // Asked until it names the walsender: a session that restarts in between (its slot
    // inactive for the backoff) shows `-`, as it should.
    let last = std::sync::Mutex::new(String::new());
    let (cfg, l) = (&config, &last);
    let named = crate::support::wait_until(
        "status names the walsender",
        Duration::from_secs(20),
        || async move {
            let status = walrelay_async(&["status"], Some(cfg)).await;
            let line = status
                .stdout
                .lines()
                .find(|l| l.starts_with("active pid"))
                .unwrap_or("")
                .to_string();
            let named = line.contains("walsender");
            *l.lock().unwrap() = if named { line } else { status.to_string() };
            named
        },
    )
    .await;
    let last = last.into_inner().unwrap();
    assert!(named, "{last}\n--- relay log ---\n{}", relay.log());
    note(&format!("status while streaming: {last}"));
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
}

/// A poison row's hint says what can work, and it does: with the relay stopped, moving the
/// slot past the named commit LSN lets the next start go on with the rows after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_poison_row_hint_names_a_slot_advance_that_works() {
    let s = Setup::new("poison_hint").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    s.db.insert_outbox("outbox", "Bad Topic", "o-1", "E", Some("{}")).await;
    let after = s.db.insert_outbox("outbox", "Order", "o-2", "E", Some("{}")).await;
    assert_eq!(relay.wait_exit(Duration::from_secs(30)), Some(1), "{}", relay.log());
    let log = relay.log();
    let line = log.lines().find(|l| l.contains("walrelay stopped")).unwrap_or("").to_string();
    note(&format!("poison row: {line}"));
    assert!(!line.contains("fix the row's cause"), "{line}");
    let sql = line
        .find("SELECT pg_replication_slot_advance(")
        .and_then(|at| line[at..].find("+ 1)").map(|end| line[at..at + end + 4].to_string()))
        .unwrap_or_else(|| panic!("no slot advance in the hint: {line}"));
    assert!(sql.contains(&s.slot), "{sql}");
    s.db.connect().await.batch_execute(&sql).await.unwrap();
    let mut again = s.start_relay();
    let got = s.read("Order", 1).await;
    note(&format!("ran `{sql}`; the next start relayed {:?}", ids(&got)));
    assert_eq!(ids(&got), vec![after], "{}", again.log());
    assert_eq!(again.terminate(), Some(0), "{}", again.log());
}
