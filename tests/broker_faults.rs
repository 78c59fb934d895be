//! Broker faults on Apache Kafka itself: a partition leader killed mid-stream, the
//! ISR below `min.insync.replicas`, the whole cluster restarted on its data, a record the
//! topic's own config refuses, and a routed topic that does not exist.
//!
//! Whatever `WALRELAY_TEST_BROKER` says, these tests run Apache Kafka: a 3-node cluster
//! ([`KafkaCluster`]: replication factor 3, `min.insync.replicas=2`) or a single private node,
//! owned by the test so it can kill, stop and restart nodes. Each prints its figures;
//! docs/reliability.md keeps them.

use std::time::{Duration, Instant};

use crate::common::release_slot;
use crate::common::Setup;
use crate::dead_letters::dead_letter_section;
use crate::support::broker::{Broker, KafkaNode};
use crate::support::kafka_cluster::KafkaCluster;
use crate::support::process::{
    assert_stops_with_hint, first_read_after, http_get, lsn_after, metric, transactions_read,
    RelayProcess,
};
use crate::support::readback::{
    assert_no_loss_in_order, read_back, write_and_await_delivery, QUIET,
};
use crate::support::slot::{slot_confirmed, wait_confirmed};
use crate::support::writer::{Delivered, Writer, WriterConfig};
use crate::support::{free_port, kafka, scratch_dir, wait_until};
use walrelay::lsn::Lsn;

/// Milliseconds since the Unix epoch, comparable with the brokers' LogAppendTime.
fn unix_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// A single private Kafka node with extra `server.properties` (blocking start off the runtime).
async fn private_kafka(prefix: &str, properties: &[(&str, &str)]) -> Broker {
    let dir = scratch_dir(prefix);
    let mut node = KafkaNode::single(free_port());
    for (k, v) in properties {
        node = node.set(k, v);
    }
    tokio::task::spawn_blocking(move || Broker::start_kafka(&dir, node))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("private kafka node: {e}"))
}

/// Waits until the slot is confirmed at or past every transaction the relay has read so far.
async fn wait_confirmed_all_read(s: &Setup, relay: &RelayProcess) -> Lsn {
    let last_end = transactions_read(&relay.log()).into_iter().max().expect("transactions read");
    let ok = wait_confirmed(&s.db.url, &s.slot, last_end, Duration::from_secs(20)).await;
    assert!(ok, "the slot never reached {}:\n{}", last_end, relay.log());
    slot_confirmed(&s.db.url, &s.slot).await.unwrap()
}

/// The first line of an HTTP response (`HTTP/1.1 503 Service Unavailable`), or "no answer".
async fn status_line(port: u16, path: &str) -> String {
    http_get(port, path)
        .await
        .and_then(|r| r.lines().next().map(str::to_string))
        .unwrap_or_else(|| "no answer".into())
}

/// How long the partitions in `partitions` went without an append around `killed_ms`: the
/// largest gap between consecutive LogAppendTimes there, and from the kill to their first
/// append after it.
fn stall(got: &[Delivered], partitions: &[i32], killed_ms: i64) -> (i64, Option<i64>) {
    let mut appended: Vec<i64> = got
        .iter()
        .filter(|d| partitions.contains(&d.partition))
        .filter_map(|d| d.timestamp_ms)
        .collect();
    appended.sort_unstable();
    let max_gap = appended.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    let first_after = appended.iter().find(|t| **t >= killed_ms).map(|t| t - killed_ms);
    (max_gap, first_after)
}

// ---------------------------------------------------------------------------------------------
// the 3-node cluster

/// SIGKILL of the broker leading the most partitions of the topic being written, while a writer
/// commits 600 events at 60/s over 12 aggregates. librdkafka moves to the new leaders and the
/// idempotent producer retries what was in flight: nothing is lost, each aggregate's first
/// deliveries are in commit order, and the duplicates and the stall are printed. The topic
/// uses LogAppendTime, so record timestamps say when the cluster appended each record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_leader_killed_mid_stream_loses_nothing_and_keeps_aggregate_order() {
    let (cluster, s) = tokio::join!(KafkaCluster::start("leaderkill"), Setup::new("leaderkill"));
    let mut wcfg = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 12);
    let topics = wcfg.topics();
    let timestamps = [("message.timestamp.type", "LogAppendTime")];
    kafka::create_topic_with(cluster.bootstrap(), &topics[0], 4, 3, &timestamps).await;
    let mut leaders = Vec::new();
    for p in 0..4 {
        leaders.push(cluster.leader_of(&topics[0], p).await);
    }
    let victim = (1..=3).max_by_key(|n| leaders.iter().filter(|l| *l == n).count()).unwrap();
    let led: Vec<i32> = (0..4).filter(|p| leaders[*p as usize] == victim).collect();
    let mut relay =
        s.start_streaming(&s.config_for_bootstrap(cluster.bootstrap(), "", "", "")).await;

    wcfg.max_events = Some(600);
    wcfg.rate = Some(60.0);
    let writer = Writer::spawn(wcfg);
    assert!(writer.wait_committed(150, Duration::from_secs(30)).await);
    let killed_ms = unix_ms();
    tokio::task::block_in_place(|| cluster.node(victim).kill());
    let report = writer.join().await;
    let read =
        read_back(cluster.bootstrap(), &topics, &[&report], QUIET, Duration::from_secs(60)).await;
    let v = read.verdict;
    let (max_gap, first_after) = stall(&read.got, &led, killed_ms);
    let log = relay.log();
    println!(
        "leader killed mid-stream: node {victim} (leading partitions {led:?} of 4) SIGKILLed after 150 of 600 events; \
         its partitions' largest gap between appends {max_gap} ms, first append {first_after:?} ms after the kill; \
         {} relay sessions ended; {}",
        log.matches("relay session ended").count(),
        v.summary()
    );
    assert_no_loss_in_order(&v, &log);
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// Two of the three brokers stopped (controlled shutdown, one after the other), so each
/// partition's ISR is the one broker left, below `min.insync.replicas=2`: the broker refuses
/// the records with NOT_ENOUGH_REPLICAS. walrelay says so in its log, counts it in /metrics
/// and turns /readyz to 503; the slot is never confirmed past the first refused commit. When a
/// second broker returns, everything is delivered.
///
/// Controlled shutdown, not SIGKILL: with every node a KRaft voter, killing two of three loses
/// the controller quorum before the ISR can shrink, and the leader then waits for the dead
/// follower (a request timeout, not NOT_ENOUGH_REPLICAS). The second node's controlled shutdown
/// still has a quorum (itself and the survivor) to take it out of the ISR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isr_below_min_insync_replicas_refuses_records_confirms_nothing_past_them_and_resumes() {
    let (cluster, s) = tokio::join!(KafkaCluster::start("minisr"), Setup::new("minisr"));
    let mut wcfg = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 6);
    let topics = wcfg.topics();
    kafka::create_topic_with(cluster.bootstrap(), &topics[0], 2, 3, &[]).await;
    let http = free_port();
    let config = s.config_for_bootstrap(
        cluster.bootstrap(),
        "",
        "\"message.timeout.ms\" = 5000",
        &format!("[http]\nlisten = \"127.0.0.1:{http}\"\n"),
    );
    let mut relay = s.start_streaming(&config).await;
    wcfg.agg_prefix = "before".into();
    wcfg.max_events = Some(20);
    let before = write_and_await_delivery(cluster.bootstrap(), wcfg.clone(), &relay).await;
    let c0 = wait_confirmed_all_read(&s, &relay).await;

    tokio::task::block_in_place(|| {
        cluster.node(2).stop();
        cluster.node(3).stop();
    });
    let down = Instant::now();
    wcfg.agg_prefix = "during".into();
    wcfg.max_events = Some(40);
    wcfg.seed += 1;
    let during = Writer::spawn(wcfg.clone()).join().await;
    let refused = relay.wait_for_log("NOT_ENOUGH_REPLICAS", Duration::from_secs(30)).await;
    let refused_after = down.elapsed();
    // Sampled for 8 s once the refusal is known: what an operator's probe and scraper see.
    let mut readyz = Vec::new();
    let mut max_confirmed = Lsn::ZERO;
    let sampling = Instant::now();
    while sampling.elapsed() < Duration::from_secs(8) {
        readyz.push(status_line(http, "/readyz").await);
        max_confirmed =
            max_confirmed.max(slot_confirmed(&s.db.url, &s.slot).await.unwrap_or_default());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let metrics = http_get(http, "/metrics").await.unwrap_or_default();
    let errors = metric(&metrics, "walrelay_delivery_errors_total");
    let under_replicated = metric(&metrics, "walrelay_kafka_under_replicated_partitions");

    tokio::task::block_in_place(|| {
        cluster.node(2).restart().unwrap_or_else(|e| panic!("restart node 2: {e}"))
    });
    let returned = Instant::now();
    let all = [&before, &during];
    let v =
        read_back(cluster.bootstrap(), &topics, &all, QUIET, Duration::from_secs(60)).await.verdict;
    let delivered_in = returned.elapsed();
    let ready_again = wait_until("/readyz answers 200", Duration::from_secs(30), || async move {
        status_line(http, "/readyz").await.contains(" 200")
    })
    .await;

    let log = relay.log();
    let first_unacked = first_read_after(&log, c0).expect("transactions read");
    let refusal = log.lines().find(|l| l.contains("NOT_ENOUGH_REPLICAS")).unwrap_or("");
    let not_ready = readyz.iter().filter(|st| st.contains(" 503")).count();
    println!(
        "ISR below min.insync.replicas (nodes 2 and 3 stopped): refusal logged {refused_after:.1?} after the second stop; \
         /readyz 503 in {not_ready}/{} samples; walrelay_delivery_errors_total {errors:?}, walrelay_kafka_under_replicated_partitions {under_replicated:?}; \
         highest confirmed {} < first unacked commit {}; delivered {delivered_in:.1?} after node 2 returned; {}\n  log: {refusal}",
        readyz.len(),
        max_confirmed,
        first_unacked,
        v.summary()
    );
    assert!(refused, "NOT_ENOUGH_REPLICAS never logged:\n{log}\n{}", cluster.logs());
    assert_no_loss_in_order(&v, &log);
    assert!(
        max_confirmed < first_unacked,
        "the slot was confirmed to {} past the first refused transaction ending at {}",
        max_confirmed,
        first_unacked
    );
    assert_eq!(not_ready, readyz.len(), "/readyz was not 503 throughout the refusal: {readyz:?}");
    assert!(errors.unwrap_or(0.0) >= 1.0, "no delivery error in /metrics");
    assert_eq!(under_replicated, Some(2.0), "both partitions are short of replicas:\n{metrics}");
    assert!(ready_again, "/readyz did not turn 200 after delivery resumed:\n{log}");
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// All three nodes SIGKILLed at once, events committed while the cluster is down, then the
/// cluster started again on its data: every event committed before, during and after is in
/// Kafka, in order per aggregate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_cluster_killed_and_restarted_on_its_data_loses_nothing() {
    let (cluster, s) = tokio::join!(KafkaCluster::start("clusterkill"), Setup::new("clusterkill"));
    let mut wcfg = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 8);
    let topics = wcfg.topics();
    kafka::create_topic_with(cluster.bootstrap(), &topics[0], 4, 3, &[]).await;
    let config =
        s.config_for_bootstrap(cluster.bootstrap(), "", "\"message.timeout.ms\" = 10000", "");
    let mut relay = s.start_streaming(&config).await;
    wcfg.agg_prefix = "before".into();
    wcfg.max_events = Some(100);
    let before = write_and_await_delivery(cluster.bootstrap(), wcfg.clone(), &relay).await;

    tokio::task::block_in_place(|| cluster.nodes().iter().for_each(Broker::kill));
    wcfg.agg_prefix = "down".into();
    wcfg.seed += 1;
    let down = Writer::spawn(wcfg.clone()).join().await;
    let restarting = Instant::now();
    tokio::task::block_in_place(|| {
        for n in cluster.nodes() {
            n.relaunch().unwrap_or_else(|e| panic!("relaunch: {e}"));
        }
        for n in cluster.nodes() {
            n.wait_ready(Duration::from_secs(90)).unwrap_or_else(|e| panic!("{e}"));
        }
        assert!(cluster.wait_brokers(3, Duration::from_secs(60)), "{}", cluster.logs());
    });
    let up_in = restarting.elapsed();
    wcfg.agg_prefix = "after".into();
    wcfg.seed += 1;
    let after = Writer::spawn(wcfg).join().await;
    let all = [&before, &down, &after];
    let v =
        read_back(cluster.bootstrap(), &topics, &all, QUIET, Duration::from_secs(60)).await.verdict;
    let log = relay.log();
    println!(
        "whole cluster SIGKILLed and restarted on its data: up again in {up_in:.1?}, everything delivered {:.1?} after the restart began; \
         {} relay sessions ended; {}",
        restarting.elapsed(),
        log.matches("relay session ended").count(),
        v.summary()
    );
    assert_no_loss_in_order(&v, &log);
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

// ---------------------------------------------------------------------------------------------
// a single private node

/// A topic created with `max.message.bytes = 2048` and a row whose 4 KB payload exceeds it: the
/// broker refuses the record (MESSAGE_TOO_LARGE). Without `[dead_letter]` the relay stops with
/// exit code 1, naming the row, the topic and the fix, and the slot keeps the row; restarted
/// with a dead-letter topic, the record goes there and the stream moves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_over_the_topics_max_message_bytes_stops_with_a_hint_or_is_dead_lettered() {
    let (broker, s) = tokio::join!(private_kafka("topicmax", &[]), Setup::new("topicmax"));
    let topic = s.topic("Order");
    kafka::create_topic_with(broker.bootstrap(), &topic, 1, 1, &[("max.message.bytes", "2048")])
        .await;
    // librdkafka batches records (up to batch.size, 1 MB by default) and the broker refuses a
    // whole batch over max.message.bytes: without this, the small row after the large one,
    // batched with it, was refused (and dead-lettered) too.
    let kafka = "\"batch.size\" = 2048";
    let mut relay =
        s.start_streaming(&s.config_for_bootstrap(broker.bootstrap(), "", kafka, "")).await;
    let a = s.db.insert_outbox("outbox", "Order", "o-1", "E", Some("{\"small\": 1}")).await;
    let first = kafka::consume(broker.bootstrap(), &topic, 1, Duration::from_secs(30)).await;
    assert_eq!(crate::common::ids(&first), vec![a.clone()], "{}", relay.log());
    let big = format!("{{\"blob\": \"{}\"}}", "y".repeat(4096));
    let poison = s.db.insert_outbox("outbox", "Order", "o-2", "E", Some(&big)).await;
    let b = s.db.insert_outbox("outbox", "Order", "o-1", "E", Some("{\"small\": 3}")).await;
    let line = assert_stops_with_hint(&mut relay, "record over the topic's max.message.bytes");
    assert!(line.contains(&poison), "the message does not name the event id: {line}");
    assert!(line.contains(&topic), "the message does not name the topic: {line}");
    assert!(line.contains("max.message.bytes"), "the hint does not name the setting: {line}");
    assert!(lsn_after(&line, "LSN ").is_some(), "the message names no LSN: {line}");
    assert!(s.slot_holds(&poison).await, "the slot was confirmed past the refused row");

    let dlq = format!("{}.dlq", s.topic_prefix);
    let config = s.config_for_bootstrap(broker.bootstrap(), "", kafka, &dead_letter_section(&dlq));
    let mut relay = RelayProcess::start(&config);
    let good = kafka::consume(broker.bootstrap(), &topic, 2, Duration::from_secs(30)).await;
    let dead = kafka::consume(broker.bootstrap(), &dlq, 1, Duration::from_secs(30)).await;
    println!(
        "record of a {} B payload over the topic's max.message.bytes 2048: {}; dead letter {:?} B, walrelay.error {:?}",
        big.len(),
        line,
        dead.first().map(|d| d.value.as_ref().map_or(0, Vec::len)),
        dead.first().and_then(|d| d.header_str("walrelay.error"))
    );
    assert_eq!(crate::common::ids(&good), vec![a, b], "{}", relay.log());
    assert_eq!(dead.len(), 1, "nothing dead-lettered:\n{}", relay.log());
    assert_eq!(dead[0].header_str("walrelay.event.id"), Some(poison.as_str()));
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// `auto.create.topics.enable=false` and a row routed to a topic that does not exist: librdkafka
/// reports the topic unknown once `topic.metadata.propagation.max.ms` has passed, and the relay
/// stops with exit code 1 naming the topic and the fix (create it) instead of retrying forever.
/// Once the topic is created, a restarted relay delivers the row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routed_topic_missing_with_auto_create_off_stops_naming_the_topic_and_the_fix() {
    let (broker, s) = tokio::join!(
        private_kafka("nocreate", &[("auto.create.topics.enable", "false")]),
        Setup::new("nocreate")
    );
    let topic = s.topic("Invoice");
    let mut relay =
        s.start_streaming(&s.config_for_bootstrap(broker.bootstrap(), "", "", "")).await;
    let inserted = Instant::now();
    let id = s.db.insert_outbox("outbox", "Invoice", "i-1", "E", Some("{}")).await;
    let line = assert_stops_with_hint(&mut relay, "routed topic missing");
    let stopped_in = inserted.elapsed();
    println!("missing topic {topic}: stopped {stopped_in:.1?} after the insert: {line}");
    assert!(line.contains(&topic), "the message does not name the topic: {line}");
    assert!(line.contains(&id), "the message does not name the event id: {line}");
    assert!(line.contains("create"), "the hint does not say to create the topic: {line}");
    assert!(s.slot_holds(&id).await, "the slot was confirmed past the row");

    kafka::create_topic_with(broker.bootstrap(), &topic, 1, 1, &[]).await;
    let mut relay = RelayProcess::start(&s.config_for_bootstrap(broker.bootstrap(), "", "", ""));
    let got = kafka::consume(broker.bootstrap(), &topic, 1, Duration::from_secs(30)).await;
    assert_eq!(crate::common::ids(&got), vec![id], "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}
