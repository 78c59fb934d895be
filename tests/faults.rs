//! Faults across the whole path (issue 3), short versions that fit the normal suite: the relay
//! killed, the walsender terminated, PostgreSQL restarted, the broker hung or absent, two relays
//! on one slot, backpressure, one huge transaction, poison rows, definite errors, secrets.
//!
//! Each test injects its fault with tests/support/faults.rs and checks, from Kafka and from the
//! slot, the property in its name. Faults that would disturb other tests (restarting
//! PostgreSQL, hanging or starting a broker) use a private PostgreSQL or broker.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{ids, Setup};
use crate::support::faults::{
    self, collect_deliveries, consume_while, hwm_kb, private_broker, rss_kb, slot_active_pid,
    slot_confirmed, transactions_read, verify, PrivatePostgres, Rng, Writer, WriterConfig,
};
use crate::support::relay::{http_get, metric, RelayProcess};
use crate::support::{free_port, kafka, services, unique, wait_until};
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

/// Waits until the slot is streaming to a walsender other than `not` (a relay (re)connected).
async fn wait_active_pid(url: &str, slot: &str, not: Option<i32>, within: Duration) -> Option<i32> {
    let start = Instant::now();
    while start.elapsed() < within {
        if let Some(pid) = slot_active_pid(url, slot).await {
            if Some(pid) != not {
                return Some(pid);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Drops the test's slot once nothing streams from it: the shared PostgreSQL has
/// `max_replication_slots = 40` for the whole suite and other tests keep theirs.
pub(crate) async fn release_slot(s: &Setup) {
    let (url, slot) = (s.db.url.clone(), s.slot.clone());
    let inactive = wait_until("the slot is released", Duration::from_secs(15), || {
        let (url, slot) = (url.clone(), slot.clone());
        async move { slot_active_pid(&url, &slot).await.is_none() }
    })
    .await;
    if inactive {
        let _ =
            s.db.connect().await.query_one("SELECT pg_drop_replication_slot($1)", &[&s.slot]).await;
    }
}

fn mb(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

// ---------------------------------------------------------------------------------------------
// crash, disconnect, restart

/// SIGKILL of the relay five times at random moments while a writer commits transactions of
/// 1–8 rows over 20 aggregates. After the last restart every committed event is in Kafka, each
/// aggregate's first deliveries are in commit order, and every duplicate belongs to a
/// transaction that was not yet confirmed on the slot when a relay was killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_killed_repeatedly_while_rows_are_inserted_loses_nothing_and_keeps_aggregate_order() {
    const KILLS: usize = 5;
    let s = Setup::new("kills").await;
    let config = s.config_with("", "", "[limits]\ninflight_records = 500\n");
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;

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
        let (url, slot) = (s.db.url.clone(), s.slot.clone());
        let gone =
            wait_until("the killed relay's walsender exits", Duration::from_secs(15), || {
                let (url, slot) = (url.clone(), slot.clone());
                async move { slot_active_pid(&url, &slot).await.is_none() }
            })
            .await;
        assert!(gone, "walsender of a SIGKILLed relay still active after 15 s");
        confirmed_at_kill.push(slot_confirmed(&s.db.url, &s.slot).await.unwrap());
        relay = RelayProcess::start(&config);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = writer.stop().await;
    let want = report.ids();
    let got = collect_deliveries(
        services().broker.bootstrap(),
        &topics,
        &want,
        Duration::from_secs(1),
        Duration::from_secs(60),
    )
    .await;
    peak_hwm = peak_hwm.max(hwm_kb(relay.pid()).unwrap_or(0));
    let v = verify(&report.events, &got);

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
    assert!(
        v.ok(),
        "{}\nlost: {:?}\nreordered: {:?}\nlast relay log:\n{}",
        v.summary(),
        v.lost_ids,
        v.reordered_detail,
        relay.log()
    );
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
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let before = slot_active_pid(&s.db.url, &s.slot).await.expect("walsender pid");

    let mut wcfg = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 5);
    wcfg.max_events = Some(300);
    wcfg.pause = Duration::from_millis(10);
    let topics = wcfg.topics();
    let writer = Writer::spawn(wcfg);
    let w = &writer;
    assert!(
        wait_until("60 events committed", Duration::from_secs(30), || async move {
            w.committed() >= 60
        })
        .await
    );
    let terminated = faults::terminate_walsender(&s.db.url, &s.slot).await;
    assert_eq!(terminated, Some(before));
    let t = Instant::now();
    let after = wait_active_pid(&s.db.url, &s.slot, Some(before), Duration::from_secs(30)).await;
    let reconnect = t.elapsed();
    assert!(after.is_some(), "the relay never reconnected\n{}", s.diagnostics(&relay));

    let report = writer.join().await;
    let got = collect_deliveries(
        services().broker.bootstrap(),
        &topics,
        &report.ids(),
        Duration::from_millis(500),
        Duration::from_secs(60),
    )
    .await;
    let v = verify(&report.events, &got);
    println!(
        "walsender {before} terminated after {} events; relay reconnected as walsender {} in {reconnect:.1?}; {}",
        60,
        after.unwrap(),
        v.summary()
    );
    assert!(
        v.ok(),
        "{}\nlost: {:?}\nreordered: {:?}\n{}",
        v.summary(),
        v.lost_ids,
        v.reordered_detail,
        s.diagnostics(&relay)
    );
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
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let before = slot_active_pid(&s.db.url, &s.slot).await.expect("walsender pid");

    let mut wcfg = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order", "Invoice"], 10);
    wcfg.max_events = Some(400);
    wcfg.pause = Duration::from_millis(10);
    let topics = wcfg.topics();
    let writer = Writer::spawn(wcfg);
    let w = &writer;
    assert!(
        wait_until("100 events committed", Duration::from_secs(30), || async move {
            w.committed() >= 100
        })
        .await
    );
    let pg_ref = &pg;
    let restart = tokio::task::block_in_place(|| pg_ref.restart_fast())
        .unwrap_or_else(|e| panic!("{e}\n{}", diag(&relay, &pg.pg.log())));
    let t = Instant::now();
    let after = wait_active_pid(&s.db.url, &s.slot, Some(before), Duration::from_secs(45)).await;
    let reconnect = t.elapsed();
    assert!(after.is_some(), "the relay never reconnected\n{}", diag(&relay, &pg.pg.log()));

    let report = writer.join().await;
    let got = collect_deliveries(
        services().broker.bootstrap(),
        &topics,
        &report.ids(),
        Duration::from_millis(500),
        Duration::from_secs(60),
    )
    .await;
    let v = verify(&report.events, &got);
    println!(
        "pg_ctl restart -m fast took {restart:.1?}; relay streaming again {reconnect:.1?} later; writer reconnected {}× ({} commits confirmed after reconnect); {}",
        report.reconnects,
        report.commits_confirmed_after_reconnect,
        v.summary()
    );
    assert!(
        v.ok(),
        "{}\nlost: {:?}\nreordered: {:?}\n{}",
        v.summary(),
        v.lost_ids,
        v.reordered_detail,
        diag(&relay, &pg.pg.log())
    );
    assert!(
        restart < Duration::from_secs(10),
        "fast restart took {restart:?}: something held the shutdown\n{}",
        diag(&relay, &pg.pg.log())
    );
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
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let mut wcfg = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 3);
    wcfg.max_events = Some(5);
    let topics = wcfg.topics();
    let first = Writer::spawn(wcfg.clone()).join().await;
    let got = collect_deliveries(
        broker.bootstrap(),
        &topics,
        &first.ids(),
        Duration::ZERO,
        Duration::from_secs(30),
    )
    .await;
    assert!(verify(&first.events, &got).ok(), "{}", relay.log());

    faults::freeze(broker.pid());
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
    faults::thaw(broker.pid());
    let mut events = first.events.clone();
    events.extend(second.events.iter().cloned());
    let want: HashSet<String> = events.iter().map(|e| e.id.clone()).collect();
    let got = collect_deliveries(
        broker.bootstrap(),
        &topics,
        &want,
        Duration::from_millis(500),
        Duration::from_secs(60),
    )
    .await;
    let v = verify(&events, &got);
    println!(
        "fast restart with unacknowledged records in the relay: {restart:.1?}; {}",
        v.summary()
    );
    if std::env::var_os("FAULTS_VERBOSE").is_some() {
        println!("{}", diag(&relay, &pg.pg.log()));
    }
    let restart = restart.unwrap_or_else(|e| panic!("{e}\n{}", diag(&relay, &pg.pg.log())));
    assert!(v.ok(), "{}\nlost: {:?}\n{}", v.summary(), v.lost_ids, relay.log());
    assert!(
        restart < Duration::from_secs(10),
        "the fast shutdown waited {restart:.1?} for the relay\n{}",
        diag(&relay, &pg.pg.log())
    );
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
}

// ---------------------------------------------------------------------------------------------
// broker faults

/// A private broker frozen (SIGSTOP) for 15 s, five times `message.timeout.ms` and longer than
/// `wal_sender_timeout` (10 s): the slot is never confirmed past the first unacknowledged
/// transaction, no walsender of the relay is timed out by PostgreSQL, the outage is logged, and
/// after SIGCONT everything arrives, in commit order per aggregate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_hung_longer_than_message_timeout_relay_resumes_without_loss() {
    const HANG: Duration = Duration::from_secs(15);
    let broker = tokio::task::spawn_blocking(|| private_broker(None)).await.unwrap();
    let s = Setup::new("hung").await;
    let http = free_port();
    let config = s.config_for_bootstrap(
        broker.bootstrap(),
        "",
        "\"message.timeout.ms\" = 3000",
        &format!("[http]\nlisten = \"127.0.0.1:{http}\"\n"),
    );
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;

    // Before the hang: 20 events delivered and confirmed.
    let mut base = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 4);
    base.agg_prefix = "before".into();
    base.max_events = Some(20);
    let topics = base.topics();
    let before = Writer::spawn(base).join().await;
    let got = collect_deliveries(
        broker.bootstrap(),
        &topics,
        &before.ids(),
        Duration::ZERO,
        Duration::from_secs(30),
    )
    .await;
    assert!(verify(&before.events, &got).ok(), "{}", relay.log());
    let last_end = *transactions_read(&relay.log()).iter().max().unwrap();
    let (url, slot) = (s.db.url.clone(), s.slot.clone());
    assert!(
        wait_until("the slot confirms the delivered transactions", Duration::from_secs(10), || {
            let (url, slot) = (url.clone(), slot.clone());
            async move { slot_confirmed(&url, &slot).await.unwrap_or_default() >= last_end }
        })
        .await
    );
    let c0 = slot_confirmed(&s.db.url, &s.slot).await.unwrap();

    // The hang: 150 events committed while the broker is frozen.
    faults::freeze(broker.pid());
    let hung_at = Instant::now();
    let mut during = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 6);
    during.agg_prefix = "during".into();
    during.max_events = Some(150);
    during.pause = Duration::from_millis(20);
    let writer = Writer::spawn(during);
    let mut samples = Vec::new(); // (confirmed, active pid)
    let mut walsenders = HashSet::new();
    let mut readyz = HashSet::new();
    while hung_at.elapsed() < HANG {
        let confirmed = slot_confirmed(&s.db.url, &s.slot).await.unwrap_or_default();
        let pid = slot_active_pid(&s.db.url, &s.slot).await;
        walsenders.extend(pid);
        samples.push((confirmed, pid));
        if let Some(status) =
            http_get(http, "/readyz").await.and_then(|r| r.lines().next().map(str::to_string))
        {
            readyz.insert(status);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let errors_during = metric(
        &http_get(http, "/metrics").await.unwrap_or_default(),
        "walrelay_delivery_errors_total",
    );
    let during = writer.join().await;
    assert!(relay.is_running(), "the relay exited during the hang:\n{}", relay.log());
    faults::thaw(broker.pid());
    let resumed = Instant::now();

    let mut events = before.events.clone();
    events.extend(during.events.iter().cloned());
    let want: HashSet<String> = events.iter().map(|e| e.id.clone()).collect();
    let got = collect_deliveries(
        broker.bootstrap(),
        &topics,
        &want,
        Duration::from_millis(500),
        Duration::from_secs(60),
    )
    .await;
    let delivered_in = resumed.elapsed();
    let v = verify(&events, &got);

    let log = relay.log();
    let first_unacked = transactions_read(&log)
        .into_iter()
        .filter(|l| *l > c0)
        .min()
        .expect("transactions read during the hang");
    let max_confirmed = samples.iter().map(|(c, _)| *c).max().unwrap();
    let active = samples.iter().filter(|(_, p)| p.is_some()).count();
    let sessions = log.matches(" streaming").count();
    let timed_out = faults::walsender_timed_out(&services().pg.log(), &walsenders);
    println!(
        "broker frozen {HANG:?} (message.timeout.ms 3000): slot active in {active}/{} samples, {} walsenders, {sessions} relay sessions, highest confirmed during the hang {} < first unacked commit {}; delivered {delivered_in:.1?} after SIGCONT; {}",
        samples.len(),
        walsenders.len(),
        max_confirmed,
        first_unacked,
        v.summary()
    );
    assert!(
        v.ok(),
        "{}\nlost: {:?}\nreordered: {:?}\n{}",
        v.summary(),
        v.lost_ids,
        v.reordered_detail,
        log
    );
    assert!(
        max_confirmed < first_unacked,
        "the slot was confirmed to {} past the first unacknowledged transaction ending at {}",
        max_confirmed,
        first_unacked
    );
    assert!(timed_out.is_empty(), "PostgreSQL timed out the relay's walsender: {timed_out:?}");
    assert!(
        active * 2 > samples.len(),
        "the relay was connected to PostgreSQL in only {active} of {} samples during the hang",
        samples.len()
    );
    println!(
        "during the hang /readyz answered {readyz:?}; walrelay_delivery_errors_total = {errors_during:?}"
    );
    assert!(
        readyz.iter().any(|st| !st.contains(" 200")),
        "/readyz stayed ready during the outage: {readyz:?}"
    );
    assert!(errors_during.unwrap_or(0.0) >= 1.0, "no delivery error counted in /metrics");
    let outage: Vec<&str> =
        log.lines().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).collect();
    println!(
        "the outage in the relay's log ({} warnings/errors), first: {}",
        outage.len(),
        outage.first().unwrap_or(&"")
    );
    assert!(
        outage.iter().any(|l| l.contains("kafka did not acknowledge") || l.contains("timed out")),
        "the outage was not logged:\n{log}"
    );
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// The relay starts while nothing listens on its bootstrap address: it streams, fails the
/// deliveries, retries, and once a broker appears on that port everything arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_unreachable_at_start_relay_waits_and_delivers_when_it_appears() {
    let port = free_port();
    let bootstrap = format!("127.0.0.1:{port}");
    let s = Setup::new("nobroker").await;
    let config = s.config_for_bootstrap(&bootstrap, "", "\"message.timeout.ms\" = 3000", "");
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let c0 = slot_confirmed(&s.db.url, &s.slot).await.unwrap();

    let mut wcfg = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 3);
    wcfg.max_events = Some(30);
    let topics = wcfg.topics();
    let report = Writer::spawn(wcfg).join().await;
    // Two failed sessions: it keeps retrying on its own.
    let r = &relay;
    assert!(
        wait_until("two failed sessions", Duration::from_secs(40), || {
            let n = r.log().matches("relay session ended").count();
            async move { n >= 2 }
        })
        .await,
        "no failed delivery logged:\n{}",
        relay.log()
    );
    let first = transactions_read(&relay.log()).into_iter().filter(|l| *l > c0).min().unwrap();
    let confirmed = slot_confirmed(&s.db.url, &s.slot).await.unwrap();
    assert!(confirmed < first, "confirmed {} past an unacknowledged commit {}", confirmed, first);

    let broker = tokio::task::spawn_blocking(move || private_broker(Some(port))).await.unwrap();
    let appeared = Instant::now();
    let got = collect_deliveries(
        broker.bootstrap(),
        &topics,
        &report.ids(),
        Duration::from_millis(500),
        Duration::from_secs(60),
    )
    .await;
    let v = verify(&report.events, &got);
    let failures = relay.log().matches("relay session ended").count();
    println!(
        "no broker for {} failed sessions; broker appeared, everything delivered {:.1?} later; {}",
        failures,
        appeared.elapsed(),
        v.summary()
    );
    assert!(v.ok(), "{}\nlost: {:?}\n{}", v.summary(), v.lost_ids, relay.log());
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// The broker killed (SIGKILL) and started again on the same port and data while rows are
/// written: the relay rebuilds its producer when it must (on tansu's memory engine the
/// idempotent producer's state is gone and librdkafka fails fatally with an unknown producer
/// id), and everything committed while the broker was down, and after, arrives. Apache Kafka
/// keeps what it had acknowledged before the crash, so that must still be there too (tansu's
/// memory engine loses it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_killed_and_restarted_keeps_acked_records_and_relay_delivers_the_rest() {
    let port = free_port();
    let dir = crate::support::scratch_dir("crash_broker");
    let broker = tokio::task::spawn_blocking(move || {
        crate::support::Broker::start(&dir, port).unwrap_or_else(|e| panic!("private broker: {e}"))
    })
    .await
    .unwrap();
    let persistent = broker.kind() == crate::support::broker::Kind::Kafka;
    let s = Setup::new("brokerkill").await;
    let mut wcfg = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 4);
    let topics = wcfg.topics();
    for topic in &topics {
        kafka::create_topic(broker.bootstrap(), topic, 4).await;
    }
    // The broker is back within message.timeout.ms. (Observed: librdkafka delivers nothing to
    // a restarted memory-engine broker until the records time out; the relay then rebuilds the
    // producer. So recovery takes about message.timeout.ms there.)
    let config =
        s.config_for_bootstrap(broker.bootstrap(), "", "\"message.timeout.ms\" = 5000", "");
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    wcfg.max_events = Some(20);
    wcfg.agg_prefix = "before".into();
    let before = Writer::spawn(wcfg.clone()).join().await;
    let got = collect_deliveries(
        broker.bootstrap(),
        &topics,
        &before.ids(),
        Duration::ZERO,
        Duration::from_secs(30),
    )
    .await;
    assert!(verify(&before.events, &got).ok(), "{}", relay.log());

    broker.kill();
    wcfg.agg_prefix = "down".into();
    wcfg.max_events = Some(30);
    wcfg.seed += 1;
    let down = Writer::spawn(wcfg.clone()).join().await;
    let broker = tokio::task::spawn_blocking(move || {
        if persistent {
            broker.restart().unwrap_or_else(|e| panic!("restart the broker: {e}"));
            broker
        } else {
            drop(broker);
            private_broker(Some(port))
        }
    })
    .await
    .unwrap();
    let restarted = Instant::now();
    wcfg.agg_prefix = "after".into();
    wcfg.max_events = Some(20);
    wcfg.seed += 1;
    let after = Writer::spawn(wcfg).join().await;
    // A memory-engine broker lost the records acknowledged before the crash with its memory.
    let mut events = if persistent { before.events.clone() } else { Vec::new() };
    events.extend(down.events.iter().cloned());
    events.extend(after.events.iter().cloned());
    let want: HashSet<String> = events.iter().map(|e| e.id.clone()).collect();
    let got = collect_deliveries(
        broker.bootstrap(),
        &topics,
        &want,
        Duration::from_millis(500),
        Duration::from_secs(90),
    )
    .await;
    let v = verify(&events, &got);
    let log = relay.log();
    println!(
        "{} broker killed and restarted: {} failed sessions; everything delivered {:.1?} after the restart; {}",
        broker.describe(),
        log.matches("relay session ended").count(),
        restarted.elapsed(),
        v.summary()
    );
    assert!(v.ok(), "{}\nlost: {:?}\n{log}", v.summary(), v.lost_ids);
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
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
    let got = collect_deliveries(
        services().broker.bootstrap(),
        &topics,
        &late.ids(),
        Duration::from_millis(500),
        Duration::from_secs(30),
    )
    .await;
    let v = verify(&late.events, &got);
    println!(
        "standby took over {takeover:.1?} after the active relay was killed; events committed after the kill: {}",
        v.summary()
    );
    assert!(v.ok(), "{}\nlost: {:?}\n{}", v.summary(), v.lost_ids, second.log());
    assert!(takeover <= Duration::from_secs(15), "takeover took {takeover:?}\n{}", second.log());
    assert_eq!(second.terminate(), Some(0), "{}", second.log());
    release_slot(&s).await;
}

// ---------------------------------------------------------------------------------------------
// memory

/// `[limits] inflight_records = 2000` and a frozen broker with a long `message.timeout.ms`:
/// 30,000 rows of ~2 KB (60 MB) are committed, the relay stops reading at the limit, keeps its
/// walsender alive beyond wal_sender_timeout, and its RSS grows by less than the in-flight bound
/// plus a constant; after SIGCONT everything arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backpressure_with_hung_broker_keeps_memory_bounded_and_delivers_everything() {
    const ROWS: usize = 30_000;
    const PAD: usize = 2000;
    const INFLIGHT: usize = 2000;
    const CONSTANT_KB: u64 = 32 * 1024;
    let broker = tokio::task::spawn_blocking(|| private_broker(None)).await.unwrap();
    let s = Setup::new("backpressure").await;
    let config = s.config_for_bootstrap(
        broker.bootstrap(),
        "",
        "\"message.timeout.ms\" = 120000",
        &format!("[limits]\ninflight_records = {INFLIGHT}\n"),
    );
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    // Warm up (producer, topic, router caches), then take the baseline.
    let mut warm = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 10);
    warm.agg_prefix = "warm".into();
    warm.max_events = Some(50);
    warm.pad = PAD;
    let topics = warm.topics();
    let warm = Writer::spawn(warm).join().await;
    let got = collect_deliveries(
        broker.bootstrap(),
        &topics,
        &warm.ids(),
        Duration::ZERO,
        Duration::from_secs(30),
    )
    .await;
    assert!(verify(&warm.events, &got).ok(), "{}", relay.log());
    let baseline = rss_kb(relay.pid()).unwrap();
    let walsender = slot_active_pid(&s.db.url, &s.slot).await.unwrap();

    faults::freeze(broker.pid());
    let hung_at = Instant::now();
    let mut wcfg = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 100);
    wcfg.max_events = Some(ROWS);
    wcfg.max_txn = 1000;
    wcfg.pad = PAD;
    let writer = Writer::spawn(wcfg);
    let mut peak = baseline;
    let mut inactive_samples = 0;
    let mut samples = 0;
    while hung_at.elapsed() < Duration::from_secs(14) || !writer.is_finished() {
        assert!(hung_at.elapsed() < Duration::from_secs(60), "writer too slow");
        peak = peak.max(rss_kb(relay.pid()).unwrap_or(0));
        samples += 1;
        if slot_active_pid(&s.db.url, &s.slot).await != Some(walsender) {
            inactive_samples += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let report = writer.join().await;
    let hung_for = hung_at.elapsed();
    faults::thaw(broker.pid());
    let resumed = Instant::now();

    let mut events = warm.events.clone();
    events.extend(report.events.iter().cloned());
    let want: HashSet<String> = events.iter().map(|e| e.id.clone()).collect();
    let got = collect_deliveries(
        broker.bootstrap(),
        &topics,
        &want,
        Duration::from_millis(500),
        Duration::from_secs(90),
    )
    .await;
    let v = verify(&events, &got);
    let record_kb = ((PAD + 200) as u64).div_ceil(1024);
    let bound = INFLIGHT as u64 * record_kb;
    let growth = peak.saturating_sub(baseline);
    println!(
        "backpressure: {ROWS} rows × {PAD} B committed during a {hung_for:.1?} broker hang; relay RSS baseline {:.1} MB, peak {:.1} MB (+{:.1} MB); in-flight bound {INFLIGHT} records ≈ {:.1} MB, allowed growth bound + {:.0} MB; walsender changed in {inactive_samples}/{samples} samples; delivered {:.1?} after SIGCONT; {}",
        mb(baseline),
        mb(peak),
        mb(growth),
        mb(bound),
        mb(CONSTANT_KB),
        resumed.elapsed(),
        v.summary()
    );
    assert!(v.ok(), "{}\nlost: {:?}\nreordered: {:?}", v.summary(), v.lost_ids, v.reordered_detail);
    assert!(
        growth < bound + CONSTANT_KB,
        "relay RSS grew {:.1} MB during the hang, above the in-flight bound {:.1} MB + {:.0} MB",
        mb(growth),
        mb(bound),
        mb(CONSTANT_KB)
    );
    assert_eq!(
        inactive_samples,
        0,
        "the relay lost its walsender while backpressured:\n{}",
        relay.log()
    );
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// 100,000 outbox rows in one transaction. The relay is frozen (SIGSTOP) as soon as the first
/// record of it is in Kafka: at that moment part of the transaction is acknowledged and the
/// slot is not confirmed past its commit. Then everything arrives, in order per aggregate, and
/// only then is the commit confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_transaction_of_100000_rows_is_delivered_and_confirmed_only_after_the_last_ack() {
    const ROWS: i64 = 100_000;
    const AGGREGATES: i64 = 100;
    let s = Setup::new("hugetx").await;
    let topic = s.topic("Order");
    kafka::create_topic(services().broker.bootstrap(), &topic, 4).await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let c0 = slot_confirmed(&s.db.url, &s.slot).await.unwrap();

    let started = Instant::now();
    s.db.execute(&format!(
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
         SELECT gen_random_uuid(), 'Order', 'agg-' || (i % {AGGREGATES}), 'E', \
                jsonb_build_object('seq', i / {AGGREGATES}, 'n', i) \
         FROM generate_series(0, {} - 1) AS i",
        ROWS
    ))
    .await;
    let committed_in = started.elapsed();
    let truth: Vec<(String, String, i64)> = s
        .db
        .connect()
        .await
        .query("SELECT id::text, aggregateid, (payload->>'seq')::bigint FROM outbox ORDER BY (payload->>'n')::bigint", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();

    // Freeze the relay at the first record of the transaction in Kafka.
    let bootstrap = services().broker.bootstrap().to_string();
    let topics = vec![topic.clone()];
    let pid = relay.pid();
    let mut frozen_at = None;
    consume_while(&bootstrap, &topics, Duration::from_secs(90), |next| {
        if let faults::Next::Record(_) = next {
            faults::freeze(pid);
            frozen_at = Some(Instant::now());
            return false;
        }
        true
    })
    .await;
    assert!(frozen_at.is_some(), "nothing of the transaction reached Kafka:\n{}", relay.log());
    // Let what was already on the wire land, then count what Kafka holds and what the slot says.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let confirmed_frozen = slot_confirmed(&s.db.url, &s.slot).await.unwrap();
    let in_kafka =
        kafka::consume(&bootstrap, &topic, ROWS as usize, Duration::from_secs(2)).await.len();
    let hwm_frozen = hwm_kb(pid).unwrap_or(0);
    faults::thaw(pid);

    let want: HashSet<String> = truth.iter().map(|t| t.0.clone()).collect();
    let got = collect_deliveries(
        &bootstrap,
        &topics,
        &want,
        Duration::from_millis(500),
        Duration::from_secs(120),
    )
    .await;
    let delivered_in = started.elapsed();
    let events: Vec<faults::Event> = truth
        .iter()
        .map(|(id, agg, seq)| faults::Event {
            id: id.clone(),
            aggregate: format!("{topic}/{agg}"),
            seq: *seq as u64,
            txn: 0,
        })
        .collect();
    let v = verify(&events, &got);
    let end = transactions_read(&relay.log())
        .into_iter()
        .filter(|l| *l > c0)
        .min()
        .expect("the transaction's commit in the log");
    let (url, slot) = (s.db.url.clone(), s.slot.clone());
    let confirmed_after =
        wait_until("the slot confirms the transaction", Duration::from_secs(20), || {
            let (url, slot) = (url.clone(), slot.clone());
            async move { slot_confirmed(&url, &slot).await.unwrap_or_default() >= end }
        })
        .await;
    let hwm = hwm_kb(pid).unwrap_or(0);
    println!(
        "one transaction of {ROWS} rows committed in {committed_in:.1?}; relay frozen with {in_kafka} of them in Kafka and the slot at {} (commit ends at {}); all delivered {delivered_in:.1?} after the insert began; relay peak RSS (VmHWM) {:.1} MB ({:.1} MB when frozen); {}",
        confirmed_frozen,
        end,
        mb(hwm),
        mb(hwm_frozen),
        v.summary()
    );
    assert!(
        in_kafka < ROWS as usize,
        "the relay delivered the whole transaction before it could be frozen; nothing was shown"
    );
    assert!(
        confirmed_frozen < end,
        "with {in_kafka} of {ROWS} rows acknowledged the slot was already confirmed to {} (commit end {})",
        confirmed_frozen,
        end
    );
    assert!(v.ok(), "{}\nlost: {:?}\nreordered: {:?}", v.summary(), v.lost_ids, v.reordered_detail);
    assert!(
        confirmed_after,
        "the slot never confirmed the delivered transaction:\n{}",
        relay.log()
    );
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

// ---------------------------------------------------------------------------------------------
// poison rows

/// The LSN written right after `marker` on a log line (`… at LSN 0/1A2B3C …`).
pub(crate) fn lsn_after(line: &str, marker: &str) -> Option<Lsn> {
    let rest = line.split(marker).nth(1)?;
    let text: String = rest.chars().take_while(|c| c.is_ascii_hexdigit() || *c == '/').collect();
    text.parse().ok()
}

pub(crate) fn dead_letter_section(topic: &str) -> String {
    format!("[dead_letter]\ntopic = \"{topic}\"\n")
}

fn assert_dead_letter_headers(r: &kafka::Consumed, event_id: Option<&str>) {
    let error = r.header_str("walrelay.error").unwrap_or("");
    assert!(!error.is_empty(), "no walrelay.error header: {:?}", r.headers);
    assert_eq!(r.header_str("walrelay.table"), Some("public.outbox"), "{:?}", r.headers);
    let lsn = r.header_str("walrelay.lsn").unwrap_or("");
    assert!(lsn.parse::<Lsn>().is_ok(), "walrelay.lsn {lsn:?}");
    // The event id when the row has one; a NULL id has no header (or an empty one).
    match event_id {
        Some(id) => assert_eq!(r.header_str("walrelay.event.id"), Some(id), "{:?}", r.headers),
        None => {
            assert!(r.header_str("walrelay.event.id").unwrap_or("").is_empty(), "{:?}", r.headers)
        }
    }
}

/// With `table.field.event.id` on a nullable column, a row whose id is NULL cannot be routed:
/// with a dead-letter topic it goes there with its key, payload and the error headers, and the
/// rows after it are delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_with_null_event_id_goes_to_the_dead_letter_topic_and_the_stream_moves_on() {
    let s = Setup::new("nullid").await;
    s.db.execute("ALTER TABLE outbox ADD COLUMN event_id uuid").await;
    let dlq = format!("{}.dlq", s.topic_prefix);
    let mut relay = RelayProcess::start(&s.config_with(
        "\"table.field.event.id\" = \"event_id\"",
        "",
        &dead_letter_section(&dlq),
    ));
    s.wait_streaming(&mut relay).await;
    let client = s.db.connect().await;
    let mut want = Vec::new();
    for (n, id) in [
        Some("11111111-1111-1111-1111-111111111111"),
        None,
        Some("33333333-3333-3333-3333-333333333333"),
    ]
    .iter()
    .enumerate()
    {
        client
            .execute(
                "INSERT INTO outbox (id, event_id, aggregatetype, aggregateid, type, payload) \
                 VALUES (gen_random_uuid(), $1::text::uuid, 'Order', $2, 'E', $3::text::jsonb)",
                // The good rows share aggregate o-0 (one partition, so order is checked).
                &[id, &format!("o-{}", n % 2), &format!("{{\"n\": {n}}}")],
            )
            .await
            .unwrap();
        if let Some(id) = id {
            want.push(id.to_string());
        }
    }
    let good = s.read("Order", 2).await;
    assert_eq!(ids(&good), want, "{}", s.diagnostics(&relay));
    let dead =
        kafka::consume(services().broker.bootstrap(), &dlq, 1, Duration::from_secs(30)).await;
    assert_eq!(dead.len(), 1, "nothing dead-lettered:\n{}", relay.log());
    let d = &dead[0];
    println!(
        "dead letter: key {:?}, value {:?}, headers {:?}",
        d.key_str(),
        d.value_str(),
        d.headers
            .iter()
            .map(|(k, v)| format!(
                "{k}={}",
                String::from_utf8_lossy(v.as_deref().unwrap_or_default())
            ))
            .collect::<Vec<_>>()
    );
    assert_eq!(d.key_str(), Some("o-1"));
    assert_eq!(d.value_str(), Some("{\"n\": 1}"));
    assert_dead_letter_headers(d, None);
    assert!(relay.is_running(), "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// Without a dead-letter topic, a row whose `aggregatetype` makes an illegal topic name stops
/// the relay with exit code 1 and a message naming the row's LSN and event id; the slot keeps
/// the row; a restart stops at the same row with the same message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn illegal_topic_name_without_dead_letter_stops_the_relay_at_that_row_and_again_after_restart(
) {
    let s = Setup::new("badtopic").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let a = s.db.insert_outbox("outbox", "Order", "o-1", "E", Some("{}")).await;
    let poison = s.db.insert_outbox("outbox", "Bad Topic", "o-2", "E", Some("{}")).await;
    let b = s.db.insert_outbox("outbox", "Order", "o-3", "E", Some("{}")).await;
    let code = relay.wait_exit(Duration::from_secs(30));
    assert_eq!(code, Some(1), "{}", s.diagnostics(&relay));
    let log = relay.log();
    let line = |log: &str| {
        log.lines().find(|l| l.contains("walrelay stopped")).unwrap_or_default().to_string()
    };
    let first = line(&log);
    let lsn = lsn_after(&first, "LSN ");
    println!("poison row stopped the relay: {first}");
    assert!(lsn.is_some(), "the message names no LSN: {first}");
    assert!(first.contains(&poison), "the message does not name the event id {poison}: {first}");
    assert!(first.contains("topic") && first.contains("hint"), "no reason or hint: {first}");
    assert_eq!(ids(&s.read("Order", 1).await), vec![a.clone()]);
    assert!(s.slot_holds(&poison).await, "the slot was confirmed past the poison row");
    assert!(s.slot_holds(&b).await, "the slot was confirmed past the row after the poison row");

    let mut again = s.start_relay();
    assert_eq!(again.wait_exit(Duration::from_secs(30)), Some(1), "{}", again.log());
    let second = line(&again.log());
    let lsn_again = lsn_after(&second, "LSN ");
    println!("after restart: {second}");
    assert_eq!(lsn_again, lsn, "the restarted relay stopped elsewhere: {second}");
    assert!(second.contains(&poison), "{second}");
    let orders = s.read_within("Order", 3, Duration::from_secs(3)).await;
    assert!(!ids(&orders).contains(&b), "a row after the poison row was published");
    release_slot(&s).await;
}

/// A 50 KB payload with the producer's `message.max.bytes` at 10,000: librdkafka refuses it as
/// a broker would, the record goes to the dead-letter topic with its first bytes and the error
/// headers, and the next row is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_larger_than_message_max_bytes_is_dead_lettered_with_its_first_bytes() {
    let s = Setup::new("toolarge").await;
    let dlq = format!("{}.dlq", s.topic_prefix);
    let mut relay = RelayProcess::start(&s.config_with(
        "",
        "\"message.max.bytes\" = 10000",
        &dead_letter_section(&dlq),
    ));
    s.wait_streaming(&mut relay).await;
    // The good rows share an aggregate (one partition), so their order is checked too.
    let a = s.db.insert_outbox("outbox", "Order", "o-1", "E", Some("{\"small\": 1}")).await;
    let big = format!("{{\"blob\": \"{}\"}}", "y".repeat(50_000));
    let poison = s.db.insert_outbox("outbox", "Order", "o-2", "E", Some(&big)).await;
    let b = s.db.insert_outbox("outbox", "Order", "o-1", "E", Some("{\"small\": 3}")).await;
    let good = s.read("Order", 2).await;
    assert_eq!(ids(&good), vec![a, b], "{}", s.diagnostics(&relay));
    let dead =
        kafka::consume(services().broker.bootstrap(), &dlq, 1, Duration::from_secs(30)).await;
    assert_eq!(dead.len(), 1, "nothing dead-lettered:\n{}", relay.log());
    let d = &dead[0];
    let value = d.value.clone().unwrap_or_default();
    println!(
        "dead letter of a {} B payload: {} B kept, key {:?}, error {:?}",
        big.len(),
        value.len(),
        d.key_str(),
        d.header_str("walrelay.error")
    );
    assert_eq!(d.key_str(), Some("o-2"));
    assert!(!value.is_empty() && value.len() < 10_000, "dead letter value of {} B", value.len());
    assert!(big.as_bytes().starts_with(&value), "the dead letter is not the payload's first bytes");
    assert_dead_letter_headers(d, Some(&poison));
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

// ---------------------------------------------------------------------------------------------
// definite errors

/// Waits for exit code 1 within 30 s and a `hint` in the log, and checks it did not loop.
pub(crate) fn assert_stops_with_hint(relay: &mut RelayProcess, what: &str) -> String {
    let started = Instant::now();
    let code = relay.wait_exit(Duration::from_secs(30));
    let log = relay.log();
    assert_eq!(
        code,
        Some(1),
        "{what}: the relay did not stop with exit code 1 within 30 s:\n{log}"
    );
    let line = log.lines().find(|l| l.contains("walrelay stopped")).unwrap_or_default().to_string();
    println!("{what}: exit 1 after {:.1?}: {line}", started.elapsed());
    assert!(line.contains("hint=") && !line.contains("hint=\"\""), "{what}: no hint: {line}");
    line
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_slot_stops_the_relay_with_a_hint() {
    let s = Setup::new("dropslot").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    s.insert_events("Order", "o-1", 3).await;
    assert_eq!(s.read("Order", 3).await.len(), 3);
    // An active slot can't be dropped: terminate its walsender and drop it before the relay
    // reconnects.
    let client = s.db.connect().await;
    let mut dropped = false;
    for _ in 0..200 {
        let _ = faults::terminate_walsender(&s.db.url, &s.slot).await;
        if client.query_one("SELECT pg_drop_replication_slot($1)", &[&s.slot]).await.is_ok() {
            dropped = true;
            break;
        }
    }
    assert!(dropped, "could not drop the slot");
    s.insert_events("Order", "o-1", 1).await;
    let line = assert_stops_with_hint(&mut relay, "slot dropped");
    assert!(line.contains("slot"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
/// A dropped publication stops the relay, and the slot is never confirmed past the row
/// written after the drop (PostgreSQL 18's pgoutput skips a missing publication with a WARNING
/// and keeps streaming; earlier versions end the stream with an error).
async fn dropped_publication_stops_the_relay_with_a_hint() {
    let s = Setup::new("droppub").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    s.insert_events("Order", "o-1", 3).await;
    assert_eq!(s.read("Order", 3).await.len(), 3);
    s.db.execute(&format!("DROP PUBLICATION {}", s.publication)).await;
    let client = s.db.connect().await;
    let before_row: String =
        client.query_one("SELECT pg_current_wal_insert_lsn()::text", &[]).await.unwrap().get(0);
    s.insert_events("Order", "o-1", 1).await;
    let line = assert_stops_with_hint(&mut relay, "publication dropped");
    assert!(line.contains("publication"), "{line}");
    let confirmed = slot_confirmed(&s.db.url, &s.slot).await.unwrap_or_default();
    assert!(
        confirmed <= before_row.parse::<Lsn>().unwrap(),
        "the slot was confirmed to {} past the row written after the drop (at {before_row})",
        confirmed
    );
    release_slot(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_outbox_table_stops_the_relay_with_a_hint() {
    let s = Setup::new("droptable").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    s.insert_events("Order", "o-1", 3).await;
    assert_eq!(s.read("Order", 3).await.len(), 3);
    s.db.execute("DROP TABLE outbox").await;
    let line = assert_stops_with_hint(&mut relay, "outbox table dropped");
    assert!(line.contains("outbox"), "{line}");
    release_slot(&s).await;
}

/// A key column the router needs is dropped: the next row's Relation message can't be bound,
/// and the relay stops naming the column instead of guessing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_key_column_stops_the_relay_with_a_hint() {
    let s = Setup::new("dropcol").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    s.insert_events("Order", "o-1", 2).await;
    assert_eq!(s.read("Order", 2).await.len(), 2);
    s.db.execute(
        "ALTER TABLE outbox DROP COLUMN aggregateid;
         INSERT INTO outbox (id, aggregatetype, type, payload)
           VALUES (gen_random_uuid(), 'Order', 'E', '{}');",
    )
    .await;
    let line = assert_stops_with_hint(&mut relay, "key column dropped");
    assert!(line.contains("aggregateid"), "{line}");
    release_slot(&s).await;
}

/// A slot invalidated by `max_slot_wal_keep_size` (wal_status = lost) on a private PostgreSQL,
/// while the relay holds it (frozen, so it can't confirm): the checkpoint terminates its
/// walsender and invalidates the slot; the relay stops with a hint instead of retrying.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidated_slot_stops_the_relay_with_a_hint() {
    let pg = tokio::task::spawn_blocking(|| PrivatePostgres::start("invalid")).await.unwrap();
    let s = Setup::on(&pg.pg, "invalid").await;
    s.db.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'").await;
    s.db.execute("SELECT pg_reload_conf()").await;
    s.db.execute("CREATE TABLE filler (n int)").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    s.insert_events("Order", "o-1", 2).await;
    assert_eq!(s.read("Order", 2).await.len(), 2);

    faults::freeze(relay.pid());
    let client = s.db.connect().await;
    let mut status = String::new();
    for _ in 0..10 {
        client
            .batch_execute(
                "INSERT INTO filler VALUES (1); SELECT pg_switch_wal();
                 INSERT INTO filler VALUES (2); SELECT pg_switch_wal();
                 INSERT INTO filler VALUES (3); SELECT pg_switch_wal();
                 CHECKPOINT;",
            )
            .await
            .unwrap();
        status = client
            .query_one(
                "SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1",
                &[&s.slot],
            )
            .await
            .unwrap()
            .get::<_, Option<String>>(0)
            .unwrap_or_default();
        if status == "lost" {
            break;
        }
    }
    faults::thaw(relay.pid());
    assert_eq!(status, "lost", "could not invalidate the slot\n{}", pg.log_tail(20));
    let line = assert_stops_with_hint(&mut relay, "slot invalidated");
    assert!(line.contains("invalidated") || line.contains("lost"), "{line}");
}

// ---------------------------------------------------------------------------------------------
// security

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

/// A `partition` placement naming a partition the topic does not have: the broker (or
/// librdkafka, once it knows the topic) refuses the record for good; it is dead-lettered with
/// the reason and the stream moves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_placement_outside_the_topics_partitions_is_dead_lettered() {
    let s = Setup::new("badpart").await;
    s.db.execute("ALTER TABLE outbox ADD COLUMN part int").await;
    let dlq = format!("{}.dlq", s.topic_prefix);
    // The topic exists with 4 partitions before the relay produces to it.
    kafka::create_topic(services().broker.bootstrap(), &s.topic("Order"), 4).await;
    let mut relay = RelayProcess::start(&s.config_with(
        "\"table.fields.additional.placement\" = \"part:partition\"",
        "",
        &dead_letter_section(&dlq),
    ));
    s.wait_streaming(&mut relay).await;
    let client = s.db.connect().await;
    let mut rows = Vec::new();
    for part in [1, 99, 2] {
        let row = client
            .query_one(
                "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, part) \
                 VALUES (gen_random_uuid(), 'Order', 'o-1', 'E', '{}', $1) RETURNING id::text",
                &[&part],
            )
            .await
            .unwrap();
        rows.push((part, row.get::<_, String>(0)));
    }
    let good: Vec<String> =
        rows.iter().filter(|(p, _)| *p != 99).map(|(_, id)| id.clone()).collect();
    let dead_id = rows[1].1.clone();
    let delivered = s.read("Order", 2).await;
    assert_eq!(ids(&delivered), good, "{}", s.diagnostics(&relay));
    assert_eq!(delivered.iter().map(|r| r.partition).collect::<Vec<_>>(), vec![1, 2]);
    let dead =
        kafka::consume(services().broker.bootstrap(), &dlq, 1, Duration::from_secs(30)).await;
    assert_eq!(dead.len(), 1, "nothing dead-lettered:\n{}", relay.log());
    assert_dead_letter_headers(&dead[0], Some(&dead_id));
    println!("partition 99 of 4: dead-lettered with {:?}", dead[0].header_str("walrelay.error"));
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// `wal_level` no longer logical (PostgreSQL restarted with `replica`; it can only start that
/// way once no logical slot is left): a definite error with the fix, never a retry loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wal_level_not_logical_stops_the_relay_with_a_hint() {
    let pg = tokio::task::spawn_blocking(|| PrivatePostgres::start("walreplica")).await.unwrap();
    let conf = pg.pg.data_dir().join("postgresql.conf");
    let mut text = std::fs::read_to_string(&conf).unwrap();
    text.push_str("\nwal_level = replica\n");
    std::fs::write(&conf, text).unwrap();
    let pg =
        tokio::task::spawn_blocking(move || pg.restart_fast().map(|_| pg)).await.unwrap().unwrap();
    let db = pg.pg.create_database("walreplica").await;
    db.create_outbox("outbox").await;
    let config = format!(
        "[source]\nurl = \"{}\"\n[kafka]\n\"bootstrap.servers\" = \"{}\"\n",
        db.url,
        services().broker.bootstrap()
    );
    let mut relay = RelayProcess::start(&config);
    assert_eq!(relay.wait_exit(Duration::from_secs(30)), Some(1), "{}", relay.log());
    let log = relay.log();
    assert!(log.contains("wal_level is replica") && log.contains("wal_level = logical"), "{log}");
}
