//! A broker of the test's own taken away: frozen longer than `message.timeout.ms`,
//! absent when the relay starts, killed and started again on its data. The relay never confirms
//! past what Kafka has not acknowledged, and once the broker is back everything arrives.
//!
//! These run on whichever broker `WALRELAY_TEST_BROKER` selects; the Apache Kafka cluster's own
//! faults (leaders, ISR) are in tests/broker_faults.rs.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::common::{release_slot, Setup};
use crate::support::kafka::{self, private_broker};
use crate::support::process::{
    first_read_after, freeze, http_get, metric, thaw, transactions_read,
};
use crate::support::readback::{
    assert_no_loss_in_order, read_back, write_and_await_delivery, QUIET,
};
use crate::support::slot::{slot_active_pid, slot_confirmed, wait_confirmed, walsender_timed_out};
use crate::support::writer::{Writer, WriterConfig};
use crate::support::{free_port, services, wait_until};

/// A private broker frozen (SIGSTOP) for 15 s, five times `message.timeout.ms` and longer than
/// `wal_sender_timeout` (10 s): the slot is never confirmed past the first unacknowledged
/// transaction, no walsender of the relay is timed out by PostgreSQL, the outage is logged, and
/// after SIGCONT everything arrives, in commit order per aggregate. The outage is logged once
/// and measured whole, though each session's producer sees only its part.
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
    let mut relay = s.start_streaming(&config).await;

    // Before the hang: 20 events delivered and confirmed.
    let mut base = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 4);
    base.agg_prefix = "before".into();
    base.max_events = Some(20);
    let topics = base.topics();
    let before = write_and_await_delivery(broker.bootstrap(), base, &relay).await;
    let last_end = *transactions_read(&relay.log()).iter().max().unwrap();
    assert!(wait_confirmed(&s.db.url, &s.slot, last_end, Duration::from_secs(10)).await);
    let c0 = slot_confirmed(&s.db.url, &s.slot).await.unwrap();

    // The hang: 150 events committed while the broker is frozen.
    freeze(broker.pid());
    let hung_at = Instant::now();
    let mut during = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 6);
    during.agg_prefix = "during".into();
    during.max_events = Some(150);
    during.pause = Duration::from_millis(20);
    let writer = Writer::spawn(during);
    let mut samples = Vec::new(); // (confirmed, active pid)
    let mut walsenders = HashSet::new();
    let mut readyz = HashSet::new();
    let mut bodies = HashSet::new();
    while hung_at.elapsed() < HANG {
        let confirmed = slot_confirmed(&s.db.url, &s.slot).await.unwrap_or_default();
        let pid = slot_active_pid(&s.db.url, &s.slot).await;
        walsenders.extend(pid);
        samples.push((confirmed, pid));
        if let Some(response) = http_get(http, "/readyz").await {
            let status = response.lines().next().unwrap_or_default().to_string();
            bodies.insert(response.lines().last().unwrap_or_default().to_string());
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
    thaw(broker.pid());
    let resumed = Instant::now();

    let all = [&before, &during];
    let read = read_back(broker.bootstrap(), &topics, &all, QUIET, Duration::from_secs(60)).await;
    let delivered_in = resumed.elapsed();
    let v = read.verdict;

    let log = relay.log();
    let first_unacked = first_read_after(&log, c0).expect("transactions read during the hang");
    let max_confirmed = samples.iter().map(|(c, _)| *c).max().unwrap();
    let active = samples.iter().filter(|(_, p)| p.is_some()).count();
    let sessions = log.matches(" streaming").count();
    let timed_out = walsender_timed_out(&services().pg.log(), &walsenders);
    println!(
        "broker frozen {HANG:?} (message.timeout.ms 3000): slot active in {active}/{} samples, {} walsenders, {sessions} relay sessions, highest confirmed during the hang {} < first unacked commit {}; delivered {delivered_in:.1?} after SIGCONT; {}",
        samples.len(),
        walsenders.len(),
        max_confirmed,
        first_unacked,
        v.summary()
    );
    assert_no_loss_in_order(&v, &log);
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
    // The cause stays the broker while sessions end and start again because of it.
    println!("during the hang /readyz said {bodies:?}");
    assert!(
        !bodies.iter().any(|b| b.contains("not streaming")),
        "/readyz named an effect of the outage, not its cause: {bodies:?}"
    );
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
    // One outage, however many sessions it spanned, is logged once each way and measured
    // from the first failed probe to the first answer.
    let again = wait_until("the broker logged reachable again", Duration::from_secs(20), || {
        let found = relay.log().contains("kafka broker reachable again");
        async move { found }
    })
    .await;
    let log = relay.log();
    assert!(again, "no \"reachable again\" line after SIGCONT:\n{log}");
    let unreachable = log.matches("kafka broker unreachable").count();
    let unreachable_for = outage_seconds(&log);
    println!("the outage spanned {sessions} sessions: {unreachable} \"unreachable\" line(s), reachable again after {unreachable_for:?} s");
    assert_eq!(unreachable, 1, "one outage logged as {unreachable} outages:\n{log}");
    let least = HANG.as_secs() - 4;
    assert!(
        unreachable_for.is_some_and(|s| s >= least && s <= HANG.as_secs() + 30),
        "a {HANG:?} outage measured as {unreachable_for:?} s (expected at least {least} s):\n{log}"
    );
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// `unreachable_for_s` of the relay's "kafka broker reachable again" line.
fn outage_seconds(log: &str) -> Option<u64> {
    let line = log.lines().find(|l| l.contains("kafka broker reachable again"))?;
    let value = line.split("unreachable_for_s=").nth(1)?;
    value.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// The relay starts while nothing listens on its bootstrap address: it streams, fails the
/// deliveries, retries, and once a broker appears on that port everything arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_unreachable_at_start_relay_waits_and_delivers_when_it_appears() {
    let port = free_port();
    let bootstrap = format!("127.0.0.1:{port}");
    let s = Setup::new("nobroker").await;
    let config = s.config_for_bootstrap(&bootstrap, "", "\"message.timeout.ms\" = 3000", "");
    let mut relay = s.start_streaming(&config).await;
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
    let first = first_read_after(&relay.log(), c0).unwrap();
    let confirmed = slot_confirmed(&s.db.url, &s.slot).await.unwrap();
    assert!(confirmed < first, "confirmed {} past an unacknowledged commit {}", confirmed, first);

    let broker = tokio::task::spawn_blocking(move || private_broker(Some(port))).await.unwrap();
    let appeared = Instant::now();
    let v = read_back(broker.bootstrap(), &topics, &[&report], QUIET, Duration::from_secs(60))
        .await
        .verdict;
    let failures = relay.log().matches("relay session ended").count();
    println!(
        "no broker for {} failed sessions; broker appeared, everything delivered {:.1?} later; {}",
        failures,
        appeared.elapsed(),
        v.summary()
    );
    assert_no_loss_in_order(&v, &relay.log());
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
    let mut relay = s.start_streaming(&config).await;
    wcfg.max_events = Some(20);
    wcfg.agg_prefix = "before".into();
    let before = write_and_await_delivery(broker.bootstrap(), wcfg.clone(), &relay).await;

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
    let all = if persistent { vec![&before, &down, &after] } else { vec![&down, &after] };
    let v =
        read_back(broker.bootstrap(), &topics, &all, QUIET, Duration::from_secs(90)).await.verdict;
    let log = relay.log();
    println!(
        "{} broker killed and restarted: {} failed sessions; everything delivered {:.1?} after the restart; {}",
        broker.describe(),
        log.matches("relay session ended").count(),
        restarted.elapsed(),
        v.summary()
    );
    assert_no_loss_in_order(&v, &log);
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}
