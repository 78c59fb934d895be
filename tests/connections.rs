//! Connections as libpq makes them: the `PG*` environment, Unix sockets, several hosts; both of
//! walrelay's connections on the same server; a stalled server never holds a shutdown.

use std::time::{Duration, Instant};

use crate::common::{ids, Setup};
use crate::support::process::RelayProcess;
use crate::support::proxy::Proxy;
use crate::support::{free_port, services, unique, wait_until};

/// `(backend_type, client_port)` of the sessions whose application_name is `app`: a walsender
/// and a client backend for a streaming relay; port -1 means a Unix socket.
async fn sessions_of(s: &Setup, app: &str) -> Vec<(String, i32)> {
    let rows =
        s.db.connect()
            .await
            .query(
                "SELECT backend_type, coalesce(client_port, -1) FROM pg_stat_activity \
             WHERE application_name = $1 ORDER BY backend_type",
                &[&app],
            )
            .await
            .unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

async fn wait_sessions(s: &Setup, app: &str) -> Vec<(String, i32)> {
    wait_until("the relay's two sessions", Duration::from_secs(30), || async {
        sessions_of(s, app).await.len() == 2
    })
    .await;
    sessions_of(s, app).await
}

/// Without `url`, `[source]` connects from libpq's environment alone (host, port, database,
/// user, application name), and both connections carry it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_connects_from_the_libpq_environment_alone() {
    let s = Setup::new("pgenv").await;
    let config = s.config().replace(&format!("url = \"{}\"\n", s.db.url), "");
    assert!(!config.contains("url ="), "{config}");
    let app = unique("envapp");
    let port = services().pg.port().to_string();
    let mut relay = RelayProcess::start_with(
        &config,
        &[],
        &[
            ("PGHOST", "127.0.0.1"),
            ("PGPORT", &port),
            ("PGDATABASE", &s.db.name),
            ("PGUSER", "postgres"),
            ("PGAPPNAME", &app),
        ],
    );
    s.wait_streaming(&mut relay).await;
    let sessions = wait_sessions(&s, &app).await;
    let kinds: Vec<&str> = sessions.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["client backend", "walsender"], "{sessions:?}\n{}", relay.log());
    let sent = s.insert_events("Order", "o-1", 3).await;
    assert_eq!(ids(&s.read("Order", 3).await), sent, "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0));
}

/// A Unix-socket host (`host=/dir`) is used by both connections (client_port -1 for each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_host_is_used_by_both_connections() {
    let s = Setup::new("unixsock").await;
    let app = unique("sockapp");
    let pg = &services().pg;
    let conninfo = format!(
        "host={} port={} dbname={} user=postgres application_name={app}",
        pg.socket_dir().display(),
        pg.port(),
        s.db.name
    );
    let config = s.config().replace(&s.db.url, &conninfo);
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let sessions = wait_sessions(&s, &app).await;
    assert_eq!(
        sessions,
        [("client backend".to_string(), -1), ("walsender".to_string(), -1)],
        "both connections on the socket\n{}",
        relay.log()
    );
    let sent = s.insert_events("Order", "o-1", 2).await;
    assert_eq!(ids(&s.read("Order", 2).await), sent, "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0));
}

/// Several hosts are tried in order: a first host that refuses connections is skipped and both
/// connections go to the next one; the log names the server chosen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_host_url_skips_a_host_that_refuses_and_uses_one_server_for_both_connections() {
    let s = Setup::new("multihost").await;
    let app = unique("multiapp");
    let dead = free_port();
    let port = services().pg.port();
    let url = format!(
        "postgres://postgres@127.0.0.1:{dead},127.0.0.1:{port}/{}?application_name={app}&target_session_attrs=read-write",
        s.db.name
    );
    let config = s.config().replace(&s.db.url, &url);
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let sessions = wait_sessions(&s, &app).await;
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    // The slot is active a moment before the `streaming` line that names the server is written.
    let named = format!("server=127.0.0.1:{port}");
    assert!(relay.wait_for_log(&named, Duration::from_secs(10)).await, "{}", relay.log());
    let sent = s.insert_events("Order", "o-1", 2).await;
    assert_eq!(ids(&s.read("Order", 2).await), sent, "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0));
}

/// A server that stops answering (here: a proxy that forwards nothing any more) never holds a
/// shutdown: SIGTERM ends the relay within seconds, exit code 0, though the final confirmation
/// could not reach the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_server_does_not_hold_a_graceful_shutdown() {
    let s = Setup::new("stalled").await;
    let proxy = Proxy::start(services().pg.port()).await;
    let url =
        s.db.url.replace(&format!(":{}/", services().pg.port()), &format!(":{}/", proxy.port()));
    assert_ne!(url, s.db.url);
    let config = s.config().replace(&s.db.url, &url);
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let sent = s.insert_events("Order", "o-1", 2).await;
    assert_eq!(ids(&s.read("Order", 2).await), sent, "{}", relay.log());

    proxy.freeze();
    // The relay's next catalog check and status update go nowhere.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let asked = Instant::now();
    let code = tokio::task::spawn_blocking(move || {
        let code = relay.terminate();
        (code, relay)
    })
    .await
    .unwrap();
    let took = asked.elapsed();
    let (code, relay) = code;
    println!("stalled server: SIGTERM to exit in {took:.1?}, exit code {code:?}");
    assert_eq!(code, Some(0), "{}", relay.log());
    assert!(took < Duration::from_secs(10), "shutdown took {took:?}\n{}", relay.log());
}

/// Under a server that answers in German (`lc_messages = 'de_DE.UTF-8'`), errors are still told
/// apart by SQLSTATE: a second relay recognises the slot in use, stands by naming the pid, takes
/// over when the first relay is killed; a dropped publication stops it with its hint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn translated_server_messages_do_not_change_what_errors_mean() {
    let pg = crate::support::cluster::start_translated("german", "de_DE.UTF-8", &[]).await;
    let probe = pg.pg.connect_to("postgres").await;
    let e = probe.query_one("SELECT * FROM no_such_table", &[]).await.unwrap_err();
    let text = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
    assert!(text.contains("existiert nicht"), "the server does not answer in German: {text}");

    let s = Setup::on(&pg.pg, "german").await;
    let mut first = RelayProcess::start(&s.config());
    s.wait_streaming(&mut first).await;
    let holder: i32 = s
        .db
        .connect()
        .await
        .query_one("SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", &[&s.slot])
        .await
        .unwrap()
        .get(0);
    let mut second = RelayProcess::start(&s.config());
    let standing_by = format!("in use by another process (pid {holder}); standing by");
    assert!(second.wait_for_log(&standing_by, Duration::from_secs(30)).await, "{}", second.log());
    assert!(second.is_running(), "{}", second.log());

    first.kill();
    let took_over = Instant::now();
    let (db, slot) = (&s.db, s.slot.as_str());
    assert!(
        wait_until(
            "the second relay takes over the slot",
            Duration::from_secs(30),
            || async move {
                db.slot_active(slot).await == Some(true)
                    && db
                        .connect()
                        .await
                        .query_one(
                            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
                            &[&slot],
                        )
                        .await
                        .is_ok_and(|r| r.get::<_, Option<i32>>(0).is_some_and(|p| p != holder))
            }
        )
        .await,
        "{}",
        second.log()
    );
    let sent = s.insert_events("Order", "o-1", 2).await;
    assert_eq!(ids(&s.read("Order", 2).await), sent, "{}", second.log());
    println!("German server: stand-by recognised the slot in use (pid {holder}) and took over {:.1?} after the kill", took_over.elapsed());

    s.db.execute(&format!("DROP PUBLICATION {}", s.publication)).await;
    let code = second.wait_exit(Duration::from_secs(30));
    let log = second.log();
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains(&format!("publication {} was dropped", s.publication)), "{log}");
    assert!(log.contains("hint="), "{log}");
}

/// A stand-by learns that the slot is busy before it builds its Kafka side: waiting ~10 s
/// behind an active relay it builds at most one producer (not one every 2 s retry, each with
/// its warm-up thread and broker connections).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_does_not_build_a_producer_at_every_retry() {
    let s = Setup::new("standbyproducer").await;
    let mut active = s.start_relay();
    s.wait_streaming(&mut active).await;
    let mut standby = s.start_relay();
    assert!(
        standby.wait_for_log("standing by", Duration::from_secs(30)).await,
        "{}",
        standby.log()
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    let log = standby.log();
    let retries = log.lines().filter(|l| l.contains("in use by another process")).count();
    let built = log.lines().filter(|l| l.contains("kafka producer created")).count();
    println!("stand-by behind an active relay for ~10 s: {built} kafka producer(s) built");
    assert!(retries >= 1, "{log}");
    assert!(built <= 1, "{built} producers built while standing by:\n{log}");
    assert!(standby.is_running(), "{log}");
    assert_eq!(standby.terminate(), Some(0), "{}", standby.log());
    assert_eq!(active.terminate(), Some(0), "{}", active.log());
}
