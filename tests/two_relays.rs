//! Two relays, two databases, one Apache Kafka, both exactly-once with their default progress
//! topics: each relay keeps its position in a topic of its own (`walrelay.progress.<slot>`),
//! read with no consumer group up to where it ended at the start. In one shared topic, a
//! restarted relay could not read it to its end while the other kept writing (librdkafka's end
//! of partition never came), and it would deliver nothing.

use std::time::{Duration, Instant};

use crate::common::{release_slot, Setup};
use crate::support::process::{http_get, metric, RelayProcess};
use crate::support::readback::read_back;
use crate::support::slot::assert_released_after_kill;
use crate::support::writer::{Rng, Writer, WriterConfig};
use crate::support::{free_port, services, wait_until};

const RESTARTS: usize = 4;

/// Relay B is SIGKILLed and started again four times while A streams: every restart commits a
/// Kafka transaction again within 10 s, and `read_committed` readers of both databases' topics
/// get every committed event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_exactly_once_relays_on_one_cluster_with_default_progress_topics_restart_within_10_s_and_deliver_each_event_once(
) {
    two_relays(None).await;
}

/// The same with one progress topic that both relays name: a restart reads it up to where it
/// ended, waiting for the other relay's open transaction at most, never for an end of
/// partition that does not come while the other writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_exactly_once_relays_sharing_a_named_progress_topic_restart_within_10_s_and_deliver_each_event_once(
) {
    two_relays(Some(&crate::support::unique("shared_progress"))).await;
}

async fn two_relays(shared: Option<&str>) {
    let bootstrap = services().broker.bootstrap();
    let (a, b) = (Setup::new("two_a").await, Setup::new("two_b").await);
    let port = free_port();
    let topic = shared.map_or(String::new(), |t| format!("progress_topic = \"{t}\"\n"));
    let eo = format!(
        "[delivery]\nguarantee = \"exactly-once\"\n{topic}[limits]\ninflight_records = 2000\n"
    );
    let eo = eo.as_str();
    let config_a = a.config_for_bootstrap(bootstrap, "", "", eo);
    let config_b = b.config_for_bootstrap(
        bootstrap,
        "",
        "",
        &format!("{eo}[http]\nlisten = \"127.0.0.1:{port}\"\n"),
    );
    let mut relay_a = a.start_streaming(&config_a).await;
    let mut relay_b = b.start_streaming(&config_b).await;
    let mut rng = Rng::from_time();
    let writer = |s: &Setup, rng: &mut Rng| {
        let mut cfg = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order", "Customer"], 20);
        cfg.pause = Duration::from_millis(5);
        cfg.seed = rng.next_u64();
        cfg
    };
    let (wa, wb) = (writer(&a, &mut rng), writer(&b, &mut rng));
    let (topics_a, topics_b) = (wa.topics(), wb.topics());
    let (writer_a, writer_b) = (Writer::spawn(wa), Writer::spawn(wb));
    let transactions = || async move {
        http_get(port, "/metrics")
            .await
            .and_then(|t| metric(&t, "walrelay_kafka_transactions_total"))
            .unwrap_or(0.0)
    };
    let mut delivering_again = Vec::new();
    let mut logs = String::new();
    for _ in 0..RESTARTS {
        tokio::time::sleep(rng.millis(1500, 3000)).await;
        relay_b.kill();
        logs += &relay_b.log();
        assert_released_after_kill(&b.db.url, &b.slot).await;
        let restarted = Instant::now();
        relay_b = RelayProcess::start(&config_b);
        let committed = wait_until("relay B commits again", Duration::from_secs(10), || async {
            transactions().await >= 1.0
        })
        .await;
        let took = restarted.elapsed();
        assert!(
            committed,
            "relay B delivered nothing for {took:.1?} after its restart:\n{}",
            relay_b.log()
        );
        delivering_again.push(took);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (report_a, report_b) = (writer_a.stop().await, writer_b.stop().await);
    let (quiet, deadline) = (Duration::from_secs(2), Duration::from_secs(120));
    let va = read_back(bootstrap, &topics_a, &[&report_a], quiet, deadline).await.verdict;
    let vb = read_back(bootstrap, &topics_b, &[&report_b], quiet, deadline).await.verdict;
    println!(
        "two exactly-once relays on one broker, progress topic {}; relay B SIGKILLed and restarted {RESTARTS}×, committing again after {:?}; A: {}; B: {}",
        shared.unwrap_or("each its own"),
        delivering_again.iter().map(|d| format!("{:.1} s", d.as_secs_f64())).collect::<Vec<_>>(),
        va.summary(),
        vb.summary()
    );
    for (name, v, relay) in [("A", &va, &relay_a), ("B", &vb, &relay_b)] {
        assert!(
            v.lost == 0 && v.duplicated.is_empty(),
            "relay {name}: {}\n{}",
            v.summary(),
            relay.log()
        );
    }
    let log_b = relay_b.log();
    let own = shared.map_or("walrelay.progress.two_b".to_string(), str::to_string);
    assert!(log_b.contains(&own), "B's progress topic is {own}: {log_b}");
    assert_eq!(relay_a.terminate(), Some(0), "{}", relay_a.log());
    assert_eq!(relay_b.terminate(), Some(0), "{logs}{}", relay_b.log());
    release_slot(&a).await;
    release_slot(&b).await;
}
