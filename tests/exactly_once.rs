//! `[delivery] guarantee = "exactly-once"` (issue 25) on Apache Kafka: a `read_committed`
//! consumer gets every committed event once, through relay kills, a stand-by taking over and
//! fencing a frozen active relay, a partition leader killed and a broker hung longer than the
//! transaction timeout. The same chaos at-least-once, side by side, prints its duplicates.
//!
//! The readers (tests/support/faults.rs `collect_deliveries`) read with
//! `isolation.level=read_committed`, librdkafka's default and what a consumer of exactly-once
//! sets.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::Setup;
use crate::support::faults::{
    self, collect_deliveries, freeze, slot_active_pid, slot_confirmed, terminate_walsender, thaw,
    verify, Rng, Verdict, Writer, WriterConfig,
};
use crate::support::kafka_cluster::KafkaCluster;
use crate::support::relay::RelayProcess;
use crate::support::{services, unique, wait_until};

const KILLS: usize = 10;

/// The `[delivery]` section of a test: its own transactional id and progress topic.
fn delivery(guarantee: &str) -> String {
    format!(
        "[delivery]\nguarantee = \"{guarantee}\"\ntransactional_id = \"{}\"\nprogress_topic = \"{}\"\n\
         [limits]\ninflight_records = 500\n",
        unique("txid"),
        unique("progress")
    )
}

/// Waits until the slot is free (the killed relay's walsender is gone).
async fn slot_released(s: &Setup) {
    let (url, slot) = (s.db.url.clone(), s.slot.clone());
    let gone = wait_until("the killed relay's walsender exits", Duration::from_secs(15), || {
        let (url, slot) = (url.clone(), slot.clone());
        async move { slot_active_pid(&url, &slot).await.is_none() }
    })
    .await;
    assert!(gone, "walsender of a SIGKILLed relay still active after 15 s");
}

/// Ten SIGKILLs of the relay while a writer commits, then a stand-by takes over from a frozen
/// active relay (its walsender terminated, as a network partition would), and the frozen one,
/// thawed, finds itself fenced (exactly-once) or stands by. Returns the verdict and the logs.
async fn chaos(guarantee: &str) -> (Verdict, String) {
    let s = Setup::new(&format!("chaos_{}", guarantee.replace('-', "_"))).await;
    let config = s.config_with("", "", &delivery(guarantee));
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;

    let mut rng = Rng::from_time();
    let marker = Arc::new(AtomicU64::new(0));
    let mut wcfg = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order", "Customer"], 20);
    wcfg.max_txn = 8;
    wcfg.pause = Duration::from_millis(5);
    wcfg.marker = Some(Arc::clone(&marker));
    wcfg.seed = rng.next_u64();
    let topics = wcfg.topics();
    let writer = Writer::spawn(wcfg);
    let mut logs = String::new();
    for _ in 0..KILLS {
        tokio::time::sleep(rng.millis(400, 1500)).await;
        relay.kill();
        marker.fetch_add(1, Ordering::SeqCst);
        logs += &relay.log();
        slot_released(&s).await;
        relay = RelayProcess::start(&config);
    }
    // A stand-by beside the active relay; the active one freezes and loses its walsender.
    s.wait_streaming(&mut relay).await;
    let mut standby = RelayProcess::start(&config);
    assert!(
        standby.wait_for_log("standing by", Duration::from_secs(15)).await
            || standby.wait_for_log("stand by", Duration::from_secs(1)).await,
        "the second relay does not stand by:\n{}",
        standby.log()
    );
    tokio::time::sleep(rng.millis(300, 800)).await;
    freeze(relay.pid());
    let frozen_at = Instant::now();
    terminate_walsender(&s.db.url, &s.slot).await;
    let took_over = wait_until("the stand-by streams", Duration::from_secs(30), || async {
        standby.log().lines().any(|l| l.contains("streaming") && l.contains("resume_lsn"))
    })
    .await;
    thaw(relay.pid());
    assert!(took_over, "the stand-by did not take over:\n{}", standby.log());
    let takeover = frozen_at.elapsed();
    // The thawed relay's session is over (its walsender is gone): it must not publish past the
    // stand-by. With exactly-once its producer is fenced by the stand-by's init_transactions.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let report = writer.stop().await;
    let got = collect_deliveries(
        services().broker.bootstrap(),
        &topics,
        &report.ids(),
        Duration::from_secs(2),
        Duration::from_secs(90),
    )
    .await;
    let v = verify(&report.events, &got);
    let confirmed = slot_confirmed(&s.db.url, &s.slot).await.unwrap_or(0);
    logs += &relay.log();
    logs += &standby.log();
    println!(
        "{guarantee}: relay killed {KILLS}× (SIGKILL), then a stand-by took over {takeover:.1?} after the active relay froze: {} events in {} transactions; {}; slot confirmed {}; fenced messages {}",
        report.events.len(),
        report.txns.len(),
        v.summary(),
        faults::fmt_lsn(confirmed),
        logs.matches("fenced").count()
    );
    relay.kill();
    assert_eq!(standby.terminate(), Some(0), "{}", standby.log());
    // `walrelay status` names the guarantee and, exactly-once, what the progress topic holds.
    let status = crate::admin::walrelay_async(&["status", "--json"], Some(&config)).await;
    let json: serde_json::Value = serde_json::from_str(status.stdout.trim())
        .unwrap_or_else(|e| panic!("status --json: {e}: {status}"));
    println!(
        "{guarantee}: walrelay status: guarantee {}, progress LSN {}, slot confirmed {}",
        json["guarantee"], json["progress_lsn"], json["confirmed_lsn"]
    );
    assert_eq!(json["guarantee"], guarantee, "{status}");
    if guarantee == "exactly-once" {
        let progress =
            json["progress_lsn"].as_str().and_then(|t| t.parse::<walrelay::lsn::Lsn>().ok());
        assert!(progress.is_some_and(|p| p.as_u64() > 0), "{status}");
    }
    (v, logs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_read_committed_consumer_gets_each_event_once_through_ten_kills_and_a_takeover(
) {
    let (v, logs) = chaos("exactly-once").await;
    assert!(v.lost == 0 && v.reordered == 0 && v.unexpected == 0, "{}\n{logs}", v.summary());
    assert_eq!(v.duplicates, 0, "duplicates {:?}\n{logs}", v.duplicated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_same_chaos_loses_nothing_and_prints_its_duplicates() {
    let (v, logs) = chaos("at-least-once").await;
    assert!(v.ok(), "{}\nlost {:?}\n{logs}", v.summary(), v.lost_ids);
}

/// On the 3-node cluster: the leader of a partition being written is SIGKILLed, and later a
/// broker is hung (SIGSTOP) for longer than `transaction.timeout.ms`, so the coordinator aborts
/// the open transaction. A `read_committed` consumer still gets every event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_survives_a_leader_kill_and_a_broker_hung_past_the_transaction_timeout() {
    let cluster = KafkaCluster::start("eos_cluster").await;
    let s = Setup::new("eos_cluster").await;
    let kafka = "\"transaction.timeout.ms\" = 8000\n\"message.timeout.ms\" = 7000";
    let config = s.config_for_bootstrap(cluster.bootstrap(), "", kafka, &delivery("exactly-once"));
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let mut wcfg = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 8);
    wcfg.max_txn = 4;
    wcfg.pause = Duration::from_millis(5);
    wcfg.seed = Rng::from_time().next_u64();
    let topics = wcfg.topics();
    let writer = Writer::spawn(wcfg);
    let bootstrap = cluster.bootstrap().to_string();
    let ok = wait_until("the first records arrive", Duration::from_secs(30), || {
        let (b, t) = (bootstrap.clone(), topics[0].clone());
        async move {
            !crate::support::kafka::consume(&b, &t, 1, Duration::from_secs(2)).await.is_empty()
        }
    })
    .await;
    assert!(ok, "nothing delivered:\n{}\n{}", relay.log(), cluster.logs());

    let leader = cluster.leader_of(&topics[0], 0).await;
    cluster.node(leader).kill();
    let killed = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    tokio::task::block_in_place(|| cluster.node(leader).restart())
        .unwrap_or_else(|e| panic!("restart node {leader}: {e}"));
    let other = (1..=3).find(|n| *n != leader).unwrap();
    freeze(cluster.node(other).pid());
    tokio::time::sleep(Duration::from_secs(11)).await;
    thaw(cluster.node(other).pid());
    let hung_until = killed.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let report = writer.stop().await;
    let got = collect_deliveries(
        cluster.bootstrap(),
        &topics,
        &report.ids(),
        Duration::from_secs(3),
        Duration::from_secs(120),
    )
    .await;
    let v = verify(&report.events, &got);
    let log = relay.log();
    println!(
        "exactly-once on 3 nodes: leader {leader} SIGKILLed and restarted, node {other} hung 11 s (transaction.timeout.ms 8000), {hung_until:.1?} of faults: {} events; {}; sessions ended {}",
        report.events.len(),
        v.summary(),
        log.matches("relay session ended").count()
    );
    assert!(v.lost == 0 && v.reordered == 0, "{}\n{log}\n{}", v.summary(), cluster.logs());
    assert_eq!(v.duplicates, 0, "duplicates {:?}\n{log}", v.duplicated);
    assert_eq!(relay.terminate(), Some(0), "{log}");
}
