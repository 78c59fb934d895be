//! TLS and SCRAM to PostgreSQL with the least privileges walrelay needs: a role with LOGIN and
//! REPLICATION only, a publication created by the table's owner, `sslmode=verify-full` against a
//! CA this test makes. And a wrong CA stops the relay with a hint instead of retrying forever.
//! Last, the secrets walrelay is given never appear in its logs.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{ids, release_slot, Setup};
use crate::support::kafka::consume;
use crate::support::postgres::{insert_numbered_row, PrivatePostgres};
use crate::support::process::RelayProcess;
use crate::support::servers::server_with;
use crate::support::{services, unique, wait_until, Capability};

const PASSWORD: &str = "tls-secret-789";

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A self-signed CA certificate (`pem`) with its key (`key`), valid for 2 days.
fn make_ca(dir: &Path, key: &str, pem: &str, subject: &str) {
    let args = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", pem];
    openssl(dir, &[&args[..], &["-days", "2", "-subj", subject]].concat());
}

/// A CA, and a server certificate it signs for 127.0.0.1 / localhost; plus a CA that signs nothing.
fn make_certificates(dir: &Path) {
    make_ca(dir, "ca.key", "ca.pem", "/CN=walrelay test CA");
    make_ca(dir, "other.key", "other-ca.pem", "/CN=unrelated CA");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n").unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_verify_full_and_scram_with_a_replication_only_role_delivers_and_a_wrong_ca_stops_with_a_hint(
) {
    // The PyPI wheels (16, 18) have no OpenSSL: then Debian's server, and a note says so.
    let server = server_with(Capability::Tls).unwrap_or_else(|e| panic!("{e}"));
    let pg = tokio::task::spawn_blocking(move || PrivatePostgres::start_on("tls", &server, &[]))
        .await
        .unwrap();
    let data = pg.pg.data_dir().to_path_buf();
    make_certificates(&data);
    let _ = Command::new("chown").args(["-R", "postgres"]).arg(&data).status();
    let _ = Command::new("chmod").arg("600").arg(data.join("server.key")).status();
    let conf = format!(
        "ssl = on\nssl_cert_file = '{0}/server.crt'\nssl_key_file = '{0}/server.key'\npassword_encryption = 'scram-sha-256'\n",
        data.display()
    );
    let mut pg_conf = std::fs::read_to_string(data.join("postgresql.conf")).unwrap();
    pg_conf.push_str(&conf);
    std::fs::write(data.join("postgresql.conf"), pg_conf).unwrap();
    // The relay's role only over TLS with SCRAM; the test's superuser keeps its trust line.
    let hba = std::fs::read_to_string(data.join("pg_hba.conf")).unwrap();
    let hba = format!(
        "hostssl all walrelay_tls 127.0.0.1/32 scram-sha-256\nhostssl replication walrelay_tls 127.0.0.1/32 scram-sha-256\nhost all walrelay_tls 127.0.0.1/32 reject\n{hba}"
    );
    std::fs::write(data.join("pg_hba.conf"), hba).unwrap();
    let restarted =
        tokio::task::spawn_blocking(move || pg.restart_fast().map(|_| pg)).await.unwrap();
    let pg = restarted.unwrap_or_else(|e| panic!("restart with TLS: {e}"));

    let admin = pg.pg.connect_to("postgres").await;
    admin.batch_execute("CREATE DATABASE app").await.unwrap();
    admin
        .batch_execute(&format!("CREATE ROLE walrelay_tls LOGIN REPLICATION PASSWORD '{PASSWORD}'"))
        .await
        .unwrap();
    let app = pg.pg.connect_to("app").await;
    app.batch_execute(
        "CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL, \
         aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb, \
         created_at timestamptz NOT NULL DEFAULT now());
         CREATE PUBLICATION walrelay FOR TABLE outbox WITH (publish = 'insert');",
    )
    .await
    .unwrap();
    // The slot before any outbox row: see tests/common.rs.
    app.query_one("SELECT 1 FROM pg_create_logical_replication_slot('walrelay', 'pgoutput')", &[])
        .await
        .unwrap();

    let prefix = unique("tls");
    let config = |ca: &str| {
        format!(
            "[source]\nurl = \"postgres://walrelay_tls:{PASSWORD}@localhost:{port}/app?sslmode=verify-full&sslrootcert={ca}\"\n\
             status_interval_ms = 200\n\
             [router]\n\"route.topic.replacement\" = \"{prefix}.${{routedByValue}}\"\n\
             [kafka]\n\"bootstrap.servers\" = \"{bootstrap}\"\n",
            port = pg.pg.port(),
            ca = data.join(ca).display(),
            bootstrap = services().broker.bootstrap()
        )
    };

    // A CA that did not sign the server's certificate: a definite error, not a retry loop.
    let mut wrong = RelayProcess::start(&config("other-ca.pem"));
    assert_eq!(wrong.wait_exit(Duration::from_secs(30)), Some(1), "{}", wrong.log());
    assert!(wrong.log().contains("sslrootcert"), "{}", wrong.log());

    let mut relay = RelayProcess::start(&config("ca.pem"));
    let mut sent = Vec::new();
    for i in 0..10 {
        sent.push(insert_numbered_row(&app, "Tls", i).await);
    }
    let got = consume(
        services().broker.bootstrap(),
        &format!("{prefix}.Order"),
        10,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(ids(&got), sent, "relay log:\n{}\npostgres log:\n{}", relay.log(), pg.log_tail(30));

    let encrypted: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.usename = 'walrelay_tls' AND s.ssl",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(encrypted >= 2, "control and replication connections over TLS: {encrypted}");
    assert_eq!(relay.terminate(), Some(0));
    for log in [relay.log(), wrong.log()] {
        assert!(!log.contains(PASSWORD), "password in the relay's log:\n{log}");
    }
    println!("TLS verify-full + SCRAM, role with LOGIN REPLICATION only: 10/10 delivered, {encrypted} TLS sessions; wrong CA: exit 1");
}

// ---------------------------------------------------------------------------------------------
// secrets in logs

// The SASL_SSL, SCRAM, ACL and wrong-password cases, and an unknown SASL mechanism, run against a
// broker configured for them in tests/kafka_security.rs.

/// A PostgreSQL password in the URL and a Kafka SASL password, with everything logged at trace
/// level through a failing run and a configuration error: neither secret appears anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_never_appear_in_logs() {
    const PG_SECRET: &str = "pg-secret-456";
    const KAFKA_SECRET: &str = "kafka-secret-123";
    let s = Setup::new("secrets").await;
    let role = unique("walrelay_pw");
    s.db.execute(&format!(
        "CREATE ROLE {role} LOGIN REPLICATION PASSWORD '{PG_SECRET}';
         GRANT ALL ON TABLE outbox TO {role};
         CREATE PUBLICATION {pub} FOR TABLE outbox WITH (publish = 'insert');",
        pub = s.publication
    ))
    .await;
    let url =
        s.db.url.replacen("postgres://postgres@", &format!("postgres://{role}:{PG_SECRET}@"), 1);
    assert_ne!(url, s.db.url);
    let config = s
        .config_with(
            "",
            &format!(
                "\"security.protocol\" = \"SASL_PLAINTEXT\"\n\"sasl.mechanism\" = \"PLAIN\"\n\
                 \"sasl.username\" = \"walrelay\"\n\"sasl.password\" = \"{KAFKA_SECRET}\"\n\
                 \"message.timeout.ms\" = 2000\n"
            ),
            "",
        )
        .replace(&s.db.url, &url);
    let trace = [("RUST_LOG", "trace")];
    let mut relay = RelayProcess::start_with(&config, &[], &trace);
    s.wait_streaming(&mut relay).await;
    s.insert_events("Order", "o-1", 2).await;
    let r = &relay;
    assert!(
        wait_until("a failed delivery", Duration::from_secs(30), || {
            let done = r.log().contains("relay session ended");
            async move { done }
        })
        .await,
        "{}",
        relay.log()
    );
    relay.kill();
    // A configuration error that quotes the URL, and a PostgreSQL that refuses the login.
    let mut bad_config = RelayProcess::start_with(
        &config.replace("status_interval_ms = 200", "status_interval_ms = 1"),
        &[],
        &trace,
    );
    assert_eq!(bad_config.wait_exit(Duration::from_secs(20)), Some(2), "{}", bad_config.log());
    let mut no_db = RelayProcess::start_with(
        &config.replace(&format!("/{}\"", s.db.name), "/no_such_database\""),
        &[],
        &trace,
    );
    let no_db_code = no_db.wait_exit(Duration::from_secs(30));
    no_db.kill();

    let logs = [
        ("failing run", relay.log()),
        ("config error", bad_config.log()),
        ("unknown database", no_db.log()),
    ];
    let total: usize = logs.iter().map(|(_, l)| l.len()).sum();
    println!(
        "secrets: {} bytes of trace logs from 3 runs (unknown database exit {no_db_code:?}); PG password found {}×, Kafka password {}×",
        total,
        logs.iter().map(|(_, l)| l.matches(PG_SECRET).count()).sum::<usize>(),
        logs.iter().map(|(_, l)| l.matches(KAFKA_SECRET).count()).sum::<usize>()
    );
    for (what, log) in &logs {
        for secret in [PG_SECRET, KAFKA_SECRET] {
            let hits: Vec<&str> = log.lines().filter(|l| l.contains(secret)).take(5).collect();
            assert!(
                hits.is_empty(),
                "{what}: the secret {secret} appears in the log:\n{}",
                hits.join("\n")
            );
        }
    }
    assert!(total > 10_000, "trace logging did not happen ({total} bytes)");
    release_slot(&s).await;
}
