//! Creating the slot while a transaction holds an xid: the creation waits, so the
//! relay names the transaction it waits for, `check` and `status` say "creating", and a stop
//! cancels the creating backend instead of leaving it to hold the slot.
//!
//! On a PostgreSQL of its own: an open transaction holds up every slot creation in its cluster,
//! and the shared one's other tests create slots all the time.

use std::time::{Duration, Instant};

use crate::support::postgres::PrivatePostgres;
use crate::support::process::{http_get, metric, walrelay_async, RelayProcess};
use crate::support::{free_port, note, services, unique, wait_until};

/// `backend pid`'s row in pg_stat_activity, if it still exists.
async fn backend_query(client: &tokio_postgres::Client, pid: i32) -> Option<String> {
    client
        .query_opt("SELECT coalesce(query, '') FROM pg_stat_activity WHERE pid = $1", &[&pid])
        .await
        .unwrap()
        .map(|r| r.get(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_creation_held_up_by_an_open_transaction_says_by_which_and_is_cancelled_on_stop() {
    let private =
        tokio::task::spawn_blocking(|| PrivatePostgres::start("slot_creation")).await.unwrap();
    let db = private.pg.create_database("creating").await;
    db.create_outbox("outbox").await;
    let slot = unique("creating_slot");
    let http = free_port();
    let config = format!(
        r#"
[source]
url = "{url}"
slot = "{slot}"
publication = "{publication}"

[outbox]
table = "public.outbox"

[kafka]
"bootstrap.servers" = "{bootstrap}"

[http]
listen = "127.0.0.1:{http}"
"#,
        url = db.url,
        publication = unique("creating_pub"),
        bootstrap = services().broker.bootstrap(),
    );

    // A session that wrote and stays idle in its transaction: it holds an xid.
    let blocker = db.connect().await;
    let blocker_pid: i32 = blocker.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    blocker.batch_execute("BEGIN; SELECT pg_current_xact_id();").await.unwrap();

    let before = walrelay_async(&["check"], Some(&config)).await;
    let warned = before.stdout.lines().find(|l| l.contains("creation")).unwrap_or("").to_string();
    note(&format!(
        "check before the slot exists, with pid {blocker_pid} idle in transaction: {warned}"
    ));
    assert!(
        warned.starts_with("warn") && warned.contains(&format!("pid {blocker_pid} ")),
        "{before}"
    );

    let mut relay = RelayProcess::start(&config);
    let started = Instant::now();
    let named =
        relay.wait_for_log("waits for these transactions to end", Duration::from_secs(30)).await;
    let log = relay.log();
    let line = log.lines().find(|l| l.contains("waits for these transactions")).unwrap_or("");
    note(&format!("after {:.1?} the relay logged: {line}", started.elapsed()));
    assert!(named, "nothing said what the creation waits for:\n{log}");
    assert!(line.contains(&format!("pid {blocker_pid} ")), "{line}");
    assert!(line.contains("idle in transaction") && line.contains("pg_current_xact_id"), "{line}");

    // Nobody asked the broker yet: /metrics does not call it down.
    let metrics = http_get(http, "/metrics").await.unwrap_or_default();
    let up = metric(&metrics, "walrelay_broker_up");
    note(&format!(
        "while creating: walrelay_broker_up {up:?}, walrelay_streaming {:?}",
        metric(&metrics, "walrelay_streaming")
    ));
    assert!(metrics.contains("walrelay_streaming 0"), "{metrics}");
    assert_eq!(up, None, "walrelay_broker_up is {up:?} though no probe asked the broker yet");

    let check = walrelay_async(&["check"], Some(&config)).await;
    let status = walrelay_async(&["status"], Some(&config)).await;
    let check_line = check.stdout.lines().find(|l| l.contains("activity")).unwrap_or("");
    let status_line = status.stdout.lines().find(|l| l.starts_with("active pid")).unwrap_or("");
    note(&format!("while creating: check says {check_line:?}; status says {status_line:?}"));
    assert!(check_line.contains("creating"), "{check}");
    assert!(status_line.contains("creating"), "{status}");
    let creator: i32 = status_line
        .split_whitespace()
        .nth(2)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {status_line:?}"));

    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    let observer = db.connect().await;
    let (o, s) = (&observer, slot.as_str());
    let gone = wait_until(
        "the creating backend and its slot are gone",
        Duration::from_secs(10),
        || async move {
            let slot_left = o
                .query_opt("SELECT 1 FROM pg_replication_slots WHERE slot_name = $1", &[&s])
                .await
                .unwrap()
                .is_some();
            let waiting = backend_query(o, creator)
                .await
                .is_some_and(|q| q.contains("pg_create_logical_replication_slot"));
            !slot_left && !waiting
        },
    )
    .await;
    let left = backend_query(&observer, creator).await;
    note(&format!(
        "after SIGTERM: creating backend {creator} now runs {left:?}; slot and waiting backend gone: {gone}"
    ));
    assert!(gone, "an orphan still creates the slot:\n{}", relay.log());

    blocker.batch_execute("ROLLBACK").await.unwrap();
}

/// `walrelay setup` held up the same way says so too, and SIGTERM leaves no backend creating
/// the slot behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_held_up_by_an_open_transaction_says_by_which_and_leaves_nothing_on_sigterm() {
    let private =
        tokio::task::spawn_blocking(|| PrivatePostgres::start("setup_creation")).await.unwrap();
    let db = private.pg.create_database("setup_creating").await;
    db.create_outbox("outbox").await;
    let slot = unique("setup_slot");
    let dir = crate::support::scratch_dir("setup_creation");
    let config_path = dir.join("walrelay.toml");
    std::fs::write(
        &config_path,
        format!(
            "[source]\nurl = \"{}\"\nslot = \"{slot}\"\npublication = \"{}\"\n\n[outbox]\ntable = \"public.outbox\"\n\n[kafka]\n\"bootstrap.servers\" = \"{}\"\n",
            db.url,
            unique("setup_pub"),
            services().broker.bootstrap()
        ),
    )
    .unwrap();
    let blocker = db.connect().await;
    let blocker_pid: i32 = blocker.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    blocker.batch_execute("BEGIN; SELECT pg_current_xact_id();").await.unwrap();

    let log_path = dir.join("setup.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = std::process::Command::new(crate::support::process::walrelay_bin())
        .args(["setup", "--config"])
        .arg(&config_path)
        .env("RUST_LOG", "info")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let named = wait_until("setup names what it waits for", Duration::from_secs(30), || {
        let found = read_log().contains("waits for these transactions");
        async move { found }
    })
    .await;
    let text = read_log();
    let line = text.lines().find(|l| l.contains("waits for these transactions")).unwrap_or("");
    note(&format!("walrelay setup logged: {line}"));
    assert!(named && line.contains(&format!("pid {blocker_pid} ")), "{text}");

    assert!(crate::support::process::signal(child.id(), "TERM"));
    let code = tokio::task::spawn_blocking(move || child.wait().unwrap().code()).await.unwrap();
    let observer = db.connect().await;
    let (o, s) = (&observer, slot.as_str());
    let gone = wait_until("no backend creates the slot", Duration::from_secs(10), || async move {
        o.query_opt("SELECT 1 FROM pg_replication_slots WHERE slot_name = $1", &[&s])
            .await
            .unwrap()
            .is_none()
    })
    .await;
    note(&format!("setup after SIGTERM: exit {code:?}; slot and creating backend gone: {gone}"));
    assert!(gone, "{}", read_log());
    assert_eq!(code, Some(1), "{}", read_log());
    blocker.batch_execute("ROLLBACK").await.unwrap();
}
