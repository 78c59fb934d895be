//! Confirm-after-ack (I2) and at-least-once across restarts (I6).

use std::collections::HashSet;
use std::time::Duration;

use crate::common::{ids, Setup};
use crate::support::process::RelayProcess;
use crate::support::{free_port, wait_until};
use walrelay::lsn::Lsn;

/// The first relay can't reach any broker, so nothing it reads is ever acknowledged. It must not
/// confirm past those rows; killed with SIGKILL, the next relay delivers all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_before_broker_ack_the_events_are_delivered_after_restart() {
    let s = Setup::new("killack").await;
    let nowhere = format!("127.0.0.1:{}", free_port());
    let mut first = RelayProcess::start(&s.config_for_bootstrap(&nowhere, "", "", ""));
    s.wait_streaming(&mut first).await;
    let before = s.db.confirmed_flush_lsn(&s.slot).await;
    let sent = s.insert_events("Order", "o-1", 50).await;

    // The relay has read every row once it logged the commit of the last transaction.
    let relay = &first;
    let read_all =
        wait_until("relay reads the 50 transactions", Duration::from_secs(30), || async move {
            relay.log().matches("transaction read").count() >= 50
        })
        .await;
    assert!(read_all, "relay log:\n{}", first.log());
    // Idle keepalives may move the slot up to where our first transaction starts (I3), never
    // past its end: nothing of it was acknowledged.
    let log = first.log();
    let first_end = log
        .split("transaction read")
        .nth(1)
        .and_then(|rest| rest.split("end_lsn").nth(1))
        .map(|s| s.trim_start_matches(|c: char| !c.is_ascii_hexdigit()))
        .and_then(|s| s.split(|c: char| !(c.is_ascii_hexdigit() || c == '/')).next())
        .map(|text| text.parse::<Lsn>().unwrap())
        .expect("first transaction's end_lsn in the log");
    let confirmed: Lsn = s.db.confirmed_flush_lsn(&s.slot).await.unwrap().parse().unwrap();
    assert!(
        confirmed < first_end,
        "the slot moved to {confirmed} past the first unacknowledged transaction ending at {first_end} (before: {before:?})"
    );
    first.kill();

    let mut second = s.start_relay();
    let got = s.read("Order", 50).await;
    let got_ids: HashSet<String> = ids(&got).into_iter().collect();
    let missing: Vec<&String> = sent.iter().filter(|id| !got_ids.contains(*id)).collect();
    assert!(missing.is_empty(), "lost after SIGKILL: {missing:?}\nrelay log:\n{}", second.log());
    println!("kill before ack: 50 committed, {} delivered after restart, 0 lost", got.len());
    assert_eq!(second.terminate(), Some(0));
}

/// SIGTERM after everything was acknowledged confirms it all, so a restart replays nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_stop_after_acks_then_restart_delivers_no_duplicate() {
    let s = Setup::new("graceful").await;
    let mut first = s.start_relay();
    s.wait_streaming(&mut first).await;
    let mut sent = s.insert_events("Order", "o-1", 20).await;
    assert_eq!(s.read("Order", 20).await.len(), 20, "relay log:\n{}", first.log());
    assert_eq!(first.terminate(), Some(0), "relay log:\n{}", first.log());

    sent.extend(s.insert_events("Order", "o-1", 5).await);
    let mut second = s.start_relay();
    let got = s.read("Order", 25).await;
    assert_eq!(ids(&got), sent, "relay log:\n{}", second.log());
    // Nothing else arrives: no replay of the first 20.
    let again = s.read_within("Order", 26, Duration::from_secs(5)).await;
    assert_eq!(again.len(), 25, "duplicates after a graceful restart: {:?}", ids(&again));
    println!("graceful restart: 25 committed, 25 delivered, 0 duplicates");
    assert_eq!(second.terminate(), Some(0));
}
