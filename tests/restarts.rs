//! The relay, its walsender or PostgreSQL taken away mid-stream: the relay killed
//! again and again, the walsender terminated, PostgreSQL restarted fast (also while the relay
//! waits for Kafka's acks), and a second relay standing by on the same slot, taking over from a
//! killed relay and from a frozen one.
//!
//! Each test checks, from Kafka and from the slot, the property in its name. Restarting
//! PostgreSQL would disturb every other test, so those tests use a private PostgreSQL.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{ids, release_slot, Setup};
use crate::support::kafka::private_broker;
use crate::support::postgres::PrivatePostgres;
use crate::support::process::{freeze, hwm_kb, mb, thaw, RelayProcess};
use crate::support::readback::{
    assert_no_loss_in_order, read_back, write_and_await_delivery, QUIET,
};
use crate::support::slot::{
    assert_released_after_kill, backend_state, end_walsender, sent_lsn, slot_active_pid,
    slot_confirmed, terminate_walsender, wait_active_pid,
};
use crate::support::writer::{Rng, Writer, WriterConfig};
use crate::support::{free_port, services, wait_until};
use walrelay::lsn::Lsn;

/// Everything the relay logged plus the end of a server log, for assertion messages.
fn diag(relay: &RelayProcess, pg_log: &str) -> String {
    let lines: Vec<&str> = pg_log.lines().collect();
    format!(
        "relay log:\n{}\n--- postgres log tail ---\n{}",
        relay.log(),
        lines[lines.len().saturating_sub(30)..].join("\n")
    )
}

/// Asserts that `pg_ctl restart -m fast` took under 10 s: a fast shutdown waits for no client,
/// so longer means the relay's walsender held it up. `what` says which restart.
#[track_caller]
fn assert_shutdown_not_held(
    restart: Duration,
    what: &str,
    relay: &RelayProcess,
    pg: &PrivatePostgres,
) {
    assert!(
        restart < Duration::from_secs(10),
        "{what} {restart:.1?}: something held the shutdown\n{}",
        diag(relay, &pg.pg.log())
    );
}

/// SIGKILL of the relay five times at random moments while a writer commits transactions of
/// 1–8 rows over 20 aggregates. After the last restart every committed event is in Kafka, each
/// aggregate's first deliveries are in commit order, and every duplicate belongs to a
/// transaction that was not yet confirmed on the slot when a relay was killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_killed_repeatedly_while_rows_are_inserted_loses_nothing_and_keeps_aggregate_order() {
    const KILLS: usize = 5;
    let s = Setup::new("kills").await;
    let config = s.config_with("", "", "[limits]\ninflight_records = 500\n");
    let mut relay = s.start_streaming(&config).await;

    let kills = Arc::new(AtomicU64::new(0));
    let mut rng = Rng::from_time();
    let mut wcfg = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order", "Customer"], 20);
    wcfg.max_txn = 8;
    wcfg.pause = Duration::from_millis(5);
    wcfg.marker = Some(Arc::clone(&kills));
    wcfg.seed = rng.next_u64();
    let topics = wcfg.topics();
    let writer = Writer::spawn(wcfg);

    // confirmed_flush_lsn of the slot once each killed relay's walsender was gone.
    let mut confirmed_at_kill: Vec<Lsn> = Vec::new();
    let mut peak_hwm = 0;
    let mut logs = Vec::new();
    for _ in 0..KILLS {
        tokio::time::sleep(rng.millis(600, 2200)).await;
        peak_hwm = peak_hwm.max(hwm_kb(relay.pid()).unwrap_or(0));
        relay.kill();
        kills.fetch_add(1, Ordering::SeqCst);
        logs.push(relay.log());
        assert_released_after_kill(&s.db.url, &s.slot).await;
        confirmed_at_kill.push(slot_confirmed(&s.db.url, &s.slot).await.unwrap());
        relay = RelayProcess::start(&config);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = writer.stop().await;
    let bootstrap = services().broker.bootstrap();
    let quiet = Duration::from_secs(1);
    let read = read_back(bootstrap, &topics, &[&report], quiet, Duration::from_secs(60)).await;
    peak_hwm = peak_hwm.max(hwm_kb(relay.pid()).unwrap_or(0));
    let (got, v) = (read.got, read.verdict);

    // Which duplicates are allowed: a transaction committed before kill k (k ≥ the number of
    // kills done before it was sent) whose commit the slot had not confirmed at kill k.
    let mut unexplained = Vec::new();
    let by_id: HashMap<&str, usize> =
        report.events.iter().map(|e| (e.id.as_str(), e.txn)).collect();
    for id in v.duplicated.keys() {
        let txn = &report.txns[by_id[id.as_str()]];
        let in_flight =
            (txn.marker_before as usize..KILLS).any(|k| txn.upper_lsn > confirmed_at_kill[k]);
        if !in_flight {
            let copies: Vec<(i32, i64)> =
                got.iter().filter(|d| &d.id == id).map(|d| (d.partition, d.offset)).collect();
            unexplained.push(format!(
                "{id} (transaction {} sent after {} kills, commit ≤ {}, delivered at {copies:?})",
                by_id[id.as_str()],
                txn.marker_before,
                txn.upper_lsn
            ));
        }
    }
    unexplained.sort();
    println!(
        "relay killed {KILLS}× (SIGKILL) during {:.1?} of writing: {} events in {} transactions; {}; peak relay RSS {:.1} MB; slot confirmed at each kill: {:?}",
        report.elapsed,
        report.events.len(),
        report.txns.len(),
        v.summary(),
        mb(peak_hwm),
        confirmed_at_kill.iter().map(Lsn::to_string).collect::<Vec<_>>()
    );
    assert_no_loss_in_order(&v, &format!("last relay log:\n{}", relay.log()));
    assert!(
        unexplained.is_empty(),
        "{} duplicated events belong to transactions already confirmed at every later kill:\n{}\nwarnings and errors of the relays:\n{}",
        unexplained.len(),
        unexplained[..unexplained.len().min(20)].join("\n"),
        logs.iter().chain([relay.log()].iter()).flat_map(|l| l.lines()).filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).collect::<Vec<_>>().join("\n")
    );
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// `pg_terminate_backend` of the walsender mid-stream: the relay reconnects on its own, from
/// the slot's confirmed position, and every event reaches Kafka in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walsender_terminated_relay_reconnects_and_loses_nothing() {
    let s = Setup::new("walsnd").await;
    let mut relay = s.start_streaming(&s.config()).await;
    let before = slot_active_pid(&s.db.url, &s.slot).await.expect("walsender pid");

    let mut wcfg = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 5);
    wcfg.max_events = Some(300);
    wcfg.pause = Duration::from_millis(10);
    let topics = wcfg.topics();
    let writer = Writer::spawn(wcfg);
    assert!(writer.wait_committed(60, Duration::from_secs(30)).await);
    let terminated = terminate_walsender(&s.db.url, &s.slot).await;
    assert_eq!(terminated, Some(before));
    let t = Instant::now();
    let after = wait_active_pid(&s.db.url, &s.slot, Some(before), Duration::from_secs(30)).await;
    let reconnect = t.elapsed();
    assert!(after.is_some(), "the relay never reconnected\n{}", s.diagnostics(&relay));

    let report = writer.join().await;
    let bootstrap = services().broker.bootstrap();
    let v = read_back(bootstrap, &topics, &[&report], QUIET, Duration::from_secs(60)).await.verdict;
    println!(
        "walsender {before} terminated after {} events; relay reconnected as walsender {} in {reconnect:.1?}; {}",
        60,
        after.unwrap(),
        v.summary()
    );
    assert_no_loss_in_order(&v, &s.diagnostics(&relay));
    assert!(relay.log().contains("relay session ended"), "no reconnect logged:\n{}", relay.log());
    assert_eq!(relay.terminate(), Some(0));
    release_slot(&s).await;
}

/// `pg_ctl restart -m fast` of a private PostgreSQL while a writer commits and the relay
/// streams: the fast shutdown is not held up by the relay's walsender, the relay reconnects
/// by itself, and every committed event reaches Kafka in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_fast_restart_relay_reconnects_and_loses_nothing() {
    let pg = tokio::task::spawn_blocking(|| PrivatePostgres::start("pgrestart")).await.unwrap();
    let s = Setup::on(&pg.pg, "pgrestart").await;
    let mut relay = s.start_streaming(&s.config()).await;
    let before = slot_active_pid(&s.db.url, &s.slot).await.expect("walsender pid");

    let mut wcfg = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order", "Invoice"], 10);
    wcfg.max_events = Some(400);
    wcfg.pause = Duration::from_millis(10);
    let topics = wcfg.topics();
    let writer = Writer::spawn(wcfg);
    assert!(writer.wait_committed(100, Duration::from_secs(30)).await);
    let pg_ref = &pg;
    let restart = tokio::task::block_in_place(|| pg_ref.restart_fast())
        .unwrap_or_else(|e| panic!("{e}\n{}", diag(&relay, &pg.pg.log())));
    let t = Instant::now();
    let after = wait_active_pid(&s.db.url, &s.slot, Some(before), Duration::from_secs(45)).await;
    let reconnect = t.elapsed();
    assert!(after.is_some(), "the relay never reconnected\n{}", diag(&relay, &pg.pg.log()));

    let report = writer.join().await;
    let bootstrap = services().broker.bootstrap();
    let v = read_back(bootstrap, &topics, &[&report], QUIET, Duration::from_secs(60)).await.verdict;
    println!(
        "pg_ctl restart -m fast took {restart:.1?}; relay streaming again {reconnect:.1?} later; writer reconnected {}× ({} commits confirmed after reconnect); {}",
        report.reconnects,
        report.commits_confirmed_after_reconnect,
        v.summary()
    );
    assert_no_loss_in_order(&v, &diag(&relay, &pg.pg.log()));
    assert_shutdown_not_held(restart, "fast restart took", &relay, &pg);
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
}

/// The same fast restart while the relay holds records Kafka has not acknowledged (broker
/// frozen, long `message.timeout.ms`): at shutdown a logical walsender waits until its client
/// reports everything sent as flushed, which the relay must not do before the acks. The
/// shutdown must still finish promptly (the relay has to let go of the connection), and once the
/// broker is back every event arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_fast_shutdown_is_not_blocked_while_the_relay_waits_for_kafka_acks() {
    let pg = tokio::task::spawn_blocking(|| PrivatePostgres::start("pgunacked")).await.unwrap();
    let broker = tokio::task::spawn_blocking(|| private_broker(None)).await.unwrap();
    let s = Setup::on(&pg.pg, "pgunacked").await;
    let config =
        s.config_for_bootstrap(broker.bootstrap(), "", "\"message.timeout.ms\" = 60000", "");
    let mut relay = s.start_streaming(&config).await;
    let mut wcfg = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 3);
    wcfg.max_events = Some(5);
    let topics = wcfg.topics();
    let first = write_and_await_delivery(broker.bootstrap(), wcfg.clone(), &relay).await;

    freeze(broker.pid());
    wcfg.agg_prefix = "unacked".into();
    wcfg.max_events = Some(20);
    wcfg.seed += 1;
    let second = Writer::spawn(wcfg).join().await;
    let (r, txns) = (&relay, first.txns.len() + second.txns.len());
    assert!(
        wait_until(
            "the relay reads the unacknowledged transactions",
            Duration::from_secs(20),
            || {
                let n = r.log().matches("transaction read").count();
                async move { n >= txns }
            }
        )
        .await,
        "{}",
        relay.log()
    );
    let pg_ref = &pg;
    let restart = tokio::task::block_in_place(|| pg_ref.restart_fast());
    thaw(broker.pid());
    let both = [&first, &second];
    let v =
        read_back(broker.bootstrap(), &topics, &both, QUIET, Duration::from_secs(60)).await.verdict;
    println!(
        "fast restart with unacknowledged records in the relay: {restart:.1?}; {}",
        v.summary()
    );
    if std::env::var_os("FAULTS_VERBOSE").is_some() {
        println!("{}", diag(&relay, &pg.pg.log()));
    }
    let restart = restart.unwrap_or_else(|e| panic!("{e}\n{}", diag(&relay, &pg.pg.log())));
    assert_no_loss_in_order(&v, &relay.log());
    assert_shutdown_not_held(restart, "the fast shutdown waited", &relay, &pg);
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
}
// ---------------------------------------------------------------------------------------------
// high availability

/// A second relay on a slot another relay holds stands by, names the holder, and takes over
/// within 15 s of the first one being killed; events committed afterwards arrive through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_on_one_slot_second_stands_by_and_takes_over_within_15s_of_the_first_being_killed(
) {
    let s = Setup::new("standby").await;
    let mut first = s.start_relay();
    s.wait_streaming(&mut first).await;
    let holder = slot_active_pid(&s.db.url, &s.slot).await.expect("walsender pid");
    let mut second = s.start_relay();
    assert!(
        second.wait_for_log("standing by", Duration::from_secs(15)).await,
        "the second relay does not say it stands by:\n{}",
        second.log()
    );
    let log = second.log();
    let line = log.lines().find(|l| l.contains("standing by")).unwrap().to_string();
    assert!(
        line.contains(&holder.to_string()) || line.contains(&first.pid().to_string()),
        "the standby line names neither the holding walsender ({holder}) nor the first relay ({}): {line}",
        first.pid()
    );
    let early = s.insert_events("Order", "o-1", 5).await;
    assert_eq!(ids(&s.read("Order", 5).await), early, "{}", first.log());

    first.kill();
    let killed = Instant::now();
    let taken = wait_active_pid(&s.db.url, &s.slot, Some(holder), Duration::from_secs(30)).await;
    let takeover = killed.elapsed();
    assert!(taken.is_some(), "nobody took the slot over:\n{}", second.log());
    // Events committed after the kill; read by id (the takeover may replay earlier ones).
    let mut wcfg = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 3);
    wcfg.max_events = Some(20);
    let topics = wcfg.topics();
    let late = Writer::spawn(wcfg).join().await;
    let bootstrap = services().broker.bootstrap();
    let v = read_back(bootstrap, &topics, &[&late], QUIET, Duration::from_secs(30)).await.verdict;
    println!(
        "standby took over {takeover:.1?} after the active relay was killed; events committed after the kill: {}",
        v.summary()
    );
    assert_no_loss_in_order(&v, &second.log());
    assert!(takeover <= Duration::from_secs(15), "takeover took {takeover:?}\n{}", second.log());
    assert_eq!(second.terminate(), Some(0), "{}", second.log());
    release_slot(&s).await;
}

/// A relay frozen (SIGSTOP) while PostgreSQL streams to it: its walsender fills the socket and
/// blocks, and outlives the first `pg_terminate_backend` (it then blocks sending its FATAL
/// message on that socket, slot held); the second ends it, and a stand-by takes over from the
/// slot's confirmed position: every event arrives, in order per aggregate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_relays_walsender_outlives_one_terminate_and_a_stand_by_takes_over_after_the_second(
) {
    let s = Setup::new("frozen").await;
    let mut first = s.start_streaming(&s.config()).await;
    let mut second = s.start_relay();
    assert!(second.wait_for_log("standing by", Duration::from_secs(15)).await, "{}", second.log());
    // Rows of 20 kB, written while the first relay is frozen, fill its socket.
    let mut wcfg = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 5);
    wcfg.pad = 20_000;
    wcfg.max_events = Some(3_000);
    let topics = wcfg.topics();
    let writer = Writer::spawn(wcfg);
    assert!(writer.wait_committed(50, Duration::from_secs(30)).await);
    freeze(first.pid());
    let holder = slot_active_pid(&s.db.url, &s.slot).await.expect("walsender pid");
    let url = &s.db.url;
    // Blocked on a full socket: waiting on WalSenderWriteData with sent_lsn standing still for
    // 2 s (while the client's receive buffer still takes data, the walsender moves on).
    let (mut seen, mut still, start) = (None, 0, Instant::now());
    while still < 4 && start.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = (backend_state(url, holder).await, sent_lsn(url, holder).await);
        still = if now.0.contains("WalSenderWriteData") && Some(&now) == seen.as_ref() {
            still + 1
        } else {
            0
        };
        seen = Some(now);
    }
    assert!(still >= 4, "walsender {holder} never blocked on its socket: {seen:?}");

    let frozen = Instant::now();
    let ended = end_walsender(url, &s.slot, Duration::from_secs(15)).await;
    let (_, signals) = ended.unwrap_or_else(|e| panic!("the frozen relay keeps the slot: {e}"));
    let taken = wait_active_pid(url, &s.slot, Some(holder), Duration::from_secs(30)).await;
    let takeover = frozen.elapsed();
    thaw(first.pid());
    assert!(taken.is_some(), "nobody took the slot over:\n{}", second.log());
    let report = writer.join().await;
    let bootstrap = services().broker.bootstrap();
    let v = read_back(bootstrap, &topics, &[&report], QUIET, Duration::from_secs(60)).await.verdict;
    println!(
        "walsender {holder} of the frozen relay ended after {signals} pg_terminate_backend; stand-by streaming {takeover:.1?} after the first signal; {}",
        v.summary()
    );
    assert!(signals >= 2, "one pg_terminate_backend ended the blocked walsender {holder}");
    assert_no_loss_in_order(&v, &format!("{}\n--- stand-by ---\n{}", first.log(), second.log()));
    first.terminate();
    assert_eq!(second.terminate(), Some(0), "{}", second.log());
    release_slot(&s).await;
}

/// Stopped where no session streams, standing by on a slot another relay holds or in the
/// backoff after a failed session, the relay still ends with exit 0 and says it stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_stopped_between_sessions_exits_0_and_says_it_stopped() {
    let s = Setup::new("stopgap").await;
    let mut first = s.start_relay();
    s.wait_streaming(&mut first).await;
    let mut second = s.start_relay();
    assert!(second.wait_for_log("standing by", Duration::from_secs(15)).await, "{}", second.log());
    assert_eq!(second.terminate(), Some(0), "{}", second.log());
    let said = second.log().lines().any(|l| l.contains(" stopped between sessions"));
    println!("stopped while standing by: {}", last_line(&second.log()));
    assert!(said, "no stopped line while standing by:\n{}", second.log());
    assert_eq!(first.terminate(), Some(0), "{}", first.log());

    // No broker: each session's record times out and the next waits its backoff, which grows
    // to over a second after a few sessions; the stop comes inside one such wait.
    let nobody = format!("127.0.0.1:{}", free_port());
    let config = s.config_for_bootstrap(&nobody, "", "\"message.timeout.ms\" = 1000", "");
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    s.insert_events("Order", "o-1", 1).await;
    let in_backoff = wait_until(
        "a session ended with a backoff of 1.5 s or more",
        Duration::from_secs(60),
        || {
            let waiting = last_backoff_ms(&relay.log()).is_some_and(|ms| ms >= 1_500);
            async move { waiting }
        },
    )
    .await;
    assert!(in_backoff, "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    let log = relay.log();
    println!("stopped in the backoff: {}", last_line(&log));
    assert!(
        log.lines().any(|l| l.contains(" stopped between sessions")),
        "no stopped line:\n{log}"
    );
    release_slot(&s).await;
}

/// `retry_in_ms` of the last "relay session ended" line, while no session streams after it.
fn last_backoff_ms(log: &str) -> Option<u64> {
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("relay session ended") || l.contains(" streaming"))?;
    let value = line.split("retry_in_ms=").nth(1)?;
    value.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

fn last_line(log: &str) -> &str {
    log.lines().last().unwrap_or_default()
}
