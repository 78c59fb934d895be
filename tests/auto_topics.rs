//! Topics Kafka creates on first use (`auto.create.topics.enable=true`, as the suite's broker
//! does): the relay's first records go to a topic that does not exist yet, while its producer is
//! young. The relay learns the topic's leaders before its first record goes out
//! (src/delivery/producer/topics.rs), and every record is in the topic.

use crate::common::{ids, Setup};
use crate::support::kafka::holdings;
use crate::support::services;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_records_into_a_topic_kafka_creates_on_first_use_wait_for_its_leaders_and_all_arrive()
{
    let rounds: usize =
        std::env::var("WALRELAY_AUTO_TOPIC_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(4);
    for round in 0..rounds {
        let s = Setup::new("autotopic").await;
        let mut relay = s.start_relay();
        s.wait_streaming(&mut relay).await;
        let mut written = Vec::with_capacity(100);
        for i in 0..100 {
            let aggregate = format!("o-{}", i % 4);
            written.push(
                s.db.insert_outbox("outbox", "Order", &aggregate, "Tested", Some("{}")).await,
            );
        }
        let topic = s.topic("Order");
        let got = ids(&s.read_ids("Order", &written).await);
        let lost: Vec<usize> = written
            .iter()
            .enumerate()
            .filter(|(_, id)| !got.contains(id))
            .map(|(i, _)| i)
            .collect();
        assert!(
            lost.is_empty(),
            "round {round}: {} records read from {topic}; lost #{lost:?}; {}\n{}",
            got.len(),
            holdings(services().broker.bootstrap(), &s.topic_prefix),
            relay.log()
        );
        let log = relay.log();
        // A report without an offset ends the session and the records go again (a duplicate
        // at worst): seen at a topic's first records, where such a report once came with
        // records Kafka did not hold.
        let unproven = log.lines().filter(|l| l.contains("with no offset")).count();
        if unproven > 0 {
            println!("[auto_topics] round {round}: {unproven} report(s) without an offset, sent again; {} records read for 100 events", got.len());
        }
        assert!(
            log.lines().any(|l| l.contains("topic known") && l.contains(&topic)),
            "round {round}: the relay did not wait for {topic}'s leaders\n{log}"
        );
        assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    }
}
