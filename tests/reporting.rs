//! What walrelay reports must be what is: `/readyz` and `walrelay_broker_up` follow
//! the broker itself, and a broker outage is logged once when it starts and once when it ends.

use std::time::{Duration, Instant};

use crate::common::Setup;
use crate::support::kafka;
use crate::support::kafka::private_broker;
use crate::support::process::{freeze, http_get, metric, thaw, RelayProcess};
use crate::support::{free_port, note, wait_until};

/// The first line of `/readyz`'s answer and its body, or "no answer".
async fn readyz(port: u16) -> String {
    match http_get(port, "/readyz").await {
        Some(r) => {
            let status = r.lines().next().unwrap_or("").to_string();
            let body = r.split("\r\n\r\n").nth(1).unwrap_or("").trim().to_string();
            format!("{status} {body}")
        }
        None => "no answer".into(),
    }
}

/// Waits until `/readyz` answers 200 (`ready`) or not; returns how long it took, or `None`.
async fn wait_ready(port: u16, ready: bool, deadline: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    let what = if ready { "/readyz answers 200" } else { "/readyz answers 503" };
    wait_until(what, deadline, || async move { readyz(port).await.contains(" 200") == ready })
        .await
        .then(|| t0.elapsed())
}

async fn broker_up(port: u16) -> Option<f64> {
    metric(&http_get(port, "/metrics").await.unwrap_or_default(), "walrelay_broker_up")
}

/// After an outage on a quiet outbox, `/readyz` turns ready again within seconds of the broker
/// answering, with no row written; with the broker hung (SIGSTOP) and a record waiting, it
/// turns not ready, and back once the broker answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_broker_after_an_outage_and_during_a_hang() {
    let broker = tokio::task::spawn_blocking(|| private_broker(None)).await.unwrap();
    let s = Setup::new("ready_broker").await;
    let topic = s.topic("Order");
    kafka::create_topic(broker.bootstrap(), &topic, 1).await;
    let http = free_port();
    // A message timeout longer than the hang: the record waits instead of failing (which
    // would end the session and make /readyz fail for another reason).
    let config = s.config_for_bootstrap(
        broker.bootstrap(),
        "",
        "\"message.timeout.ms\" = 20000",
        &format!("[http]\nlisten = \"127.0.0.1:{http}\"\nready_max_unacked_s = 5\n"),
    );
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    assert!(wait_ready(http, true, Duration::from_secs(30)).await.is_some(), "{}", relay.log());
    s.insert_events("Order", "a1", 1).await;
    assert_eq!(
        kafka::consume(broker.bootstrap(), &topic, 1, Duration::from_secs(30)).await.len(),
        1
    );

    // The hang: the broker frozen with a record waiting, until both signals are seen (the
    // record over ready_max_unacked_s after 5 s; the probe, asked every 2 s, timed out after 4 s
    // by 6 s at the latest), for 8 s at most. Not longer: 8 s with heartbeats every 500 ms stays
    // inside the broker's 9 s session. A single node frozen past it fences its own broker on
    // the thaw (its controller, frozen too, wakes to a heartbeat that old), every partition is
    // elected again with a new epoch, and clients then went up to a minute without an answer,
    // this test's own reader too (3 of 16 runs frozen 10 s, four at once). A deployed cluster
    // fences a hung broker during the hang, from its other nodes.
    freeze(broker.pid());
    let frozen = Instant::now();
    s.insert_events("Order", "a2", 1).await;
    let mut not_ready = None;
    let mut hang_reason = String::new();
    let mut up_while_hung = Vec::new();
    while frozen.elapsed() < Duration::from_secs(8)
        && (not_ready.is_none() || !up_while_hung.contains(&0.0))
    {
        let answer = readyz(http).await;
        if not_ready.is_none() && !answer.contains(" 200") {
            not_ready = Some(frozen.elapsed());
            hang_reason = answer;
        }
        up_while_hung.push(broker_up(http).await.unwrap_or(-1.0));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let hung_for = frozen.elapsed();
    thaw(broker.pid());
    let ready_again = wait_ready(http, true, Duration::from_secs(60)).await;
    note(&format!(
        "broker hung {hung_for:.1?}: /readyz not ready {not_ready:.1?} after SIGSTOP ({hang_reason}); broker_up sampled {up_while_hung:?}; ready again {ready_again:.1?} after SIGCONT"
    ));
    assert!(
        not_ready.is_some(),
        "/readyz stayed ready with the broker hung and a record waiting:\n{}",
        relay.log()
    );
    assert!(up_while_hung.contains(&0.0), "walrelay_broker_up stayed 1 during the hang");
    assert!(
        ready_again.is_some(),
        "/readyz never ready after SIGCONT ({}):\n{}\n--- the broker's log ---\n{}",
        readyz(http).await,
        relay.log(),
        broker.log_tail(30)
    );
    let got = kafka::consume(broker.bootstrap(), &topic, 2, Duration::from_secs(30)).await;
    assert_eq!(
        got.len(),
        2,
        "the record written during the hang arrives; {}\n--- the broker's log ---\n{}",
        kafka::holdings(broker.bootstrap(), &topic),
        broker.log_tail(30)
    );

    // The outage: the broker gone for a while, then back on its data and port, as a broker
    // restarts; no row written. (A fresh cluster on the same port instead once left librdkafka
    // without a metadata answer for 30 s after it was up.)
    broker.kill();
    let down = wait_ready(http, false, Duration::from_secs(30)).await;
    let down_reason = readyz(http).await;
    let up_while_down = broker_up(http).await;
    let broker = tokio::task::spawn_blocking(move || {
        broker.restart().unwrap_or_else(|e| panic!("restart the broker: {e}"));
        broker
    })
    .await
    .unwrap();
    let back = wait_ready(http, true, Duration::from_secs(45)).await;
    note(&format!(
        "outage on a quiet outbox: /readyz not ready {down:.1?} after the kill ({down_reason}, broker_up {up_while_down:?}); ready again {back:.1?} after the broker came back, broker_up {:?}",
        broker_up(http).await
    ));
    assert!(down.is_some(), "/readyz stayed ready with the broker gone:\n{}", relay.log());
    assert_eq!(up_while_down, Some(0.0));
    assert!(
        back.is_some_and(|t| t < Duration::from_secs(20)),
        "/readyz not ready again within 20 s of the broker's return ({back:?}; it says {}; broker_up {:?}):\n{}\n--- the returned broker's log ---\n{}",
        readyz(http).await,
        broker_up(http).await,
        relay.log(),
        broker.log_tail(30)
    );

    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
}

/// The broker unreachable from the start for 30 s: one line says so, one says when it is back,
/// and librdkafka's reconnect errors do not fill the log meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_down_for_30_s_is_logged_once_when_it_goes_and_once_when_it_returns() {
    let broker = tokio::task::spawn_blocking(|| private_broker(None)).await.unwrap();
    let port = broker.port();
    let bootstrap = broker.bootstrap().to_string();
    broker.kill();
    let s = Setup::new("quiet_outage").await;
    let http = free_port();
    let config = s.config_for_bootstrap(
        &bootstrap,
        "",
        "",
        &format!("[http]\nlisten = \"127.0.0.1:{http}\"\n"),
    );
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let streaming_at = relay.log().len();
    // The 30 s are the measurement: /readyz is asked all along and must never say ready.
    let t0 = Instant::now();
    let mut answers = std::collections::BTreeSet::new();
    while t0.elapsed() < Duration::from_secs(30) {
        answers.insert(readyz(http).await);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let during = relay.log()[streaming_at..].to_string();
    let broker = tokio::task::spawn_blocking(move || private_broker(Some(port))).await.unwrap();
    let back = relay.wait_for_log("kafka broker reachable again", Duration::from_secs(20)).await;
    let log = relay.log();
    let kafka_lines: Vec<&str> =
        during.lines().filter(|l| !l.contains(" DEBUG ") && l.contains("kafka")).collect();
    let unreachable = log.matches("kafka broker unreachable").count();
    note(&format!(
        "broker down 30 s after the relay started streaming: {} log lines above DEBUG in that window, {} about kafka; /readyz said {answers:?}; back: {back}",
        during.lines().filter(|l| !l.contains(" DEBUG ")).count(),
        kafka_lines.len()
    ));
    for line in &kafka_lines {
        note(&format!("  {line}"));
    }
    assert!(
        answers.iter().all(|a| !a.contains(" 200")),
        "/readyz was ready with no broker: {answers:?}"
    );
    assert_eq!(unreachable, 1, "the outage is logged once:\n{log}");
    assert!(back, "no line says the broker is back:\n{log}");
    assert!(kafka_lines.len() <= 4, "{} kafka lines in 30 s:\n{during}", kafka_lines.len());
    drop(broker);
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
}

/// A stand-by relay retries every 2 s; its log says "standing by" once, with no ERROR at the
/// retries (the HA pair keeps one relay there for days).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stand_by_says_standing_by_once_and_logs_no_error_at_its_retries() {
    let s = Setup::new("quiet_standby").await;
    let mut first = s.start_relay();
    s.wait_streaming(&mut first).await;
    let second = s.start_relay();
    assert!(second.wait_for_log("standing by", Duration::from_secs(30)).await, "{}", second.log());
    // Five retries' worth: the wait is the check, an ERROR line ends it early.
    let erred = wait_until("an ERROR in the stand-by's log", Duration::from_secs(10), || {
        let found = second.log().contains(" ERROR ");
        async move { found }
    })
    .await;
    let log = second.log();
    let said = log.matches("standing by").count();
    let errors: Vec<&str> = log.lines().filter(|l| l.contains(" ERROR ")).collect();
    note(&format!(
        "stand-by for 10 s: {said} \"standing by\" line(s), {} ERROR line(s){}",
        errors.len(),
        errors.first().map(|l| format!(", first: {l}")).unwrap_or_default()
    ));
    assert!(!erred, "ERROR lines while standing by:\n{log}");
    assert_eq!(said, 1, "{log}");
    first.kill();
}
