//! A topic's first record in a producer's life goes out once librdkafka knows the topic.
//!
//! librdkafka holds a record for a topic it has no metadata for on the topic's unassigned queue,
//! and on a broker that creates topics on first use (`auto.create.topics.enable=true`) that
//! metadata arrives while the topic is still being created: partitions known, their logs not yet
//! ready. Four runs of the test suite lost the first 3–4 records of one partition of a topic
//! created that way, all reported delivered, never while the topic existed before the relay's
//! first record. So the relay asks for the topic's metadata itself first (which is what creates
//! it on such a broker) and sends only once every partition has a leader: records never wait on
//! the unassigned queue of a topic in creation. A first batch can still meet a partition not yet
//! leading; the report that lost records then comes without an offset, and `offsets.rs` refuses it
//! (docs/operations.md, "Topics created on first use").
//!
//! Once per topic per producer; when the topic does not come (creation on first use disabled, an
//! ACL missing, the broker down), the record is sent after the wait as before, and its delivery
//! report says what is wrong. The metadata's partition count is kept: it tells delivery which
//! partition a keyed record goes to, whose first write goes alone (`offsets.rs`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::types::RDKafkaRespErr;

use super::{Publisher, RelayContext};

/// The topics this producer has met, and how long to wait for a new one's leaders.
pub struct KnownTopics {
    /// Each with its partition count, when its metadata came.
    met: HashMap<Arc<str>, Option<i32>>,
    /// The topic met last, with its partition count.
    last: Option<(Arc<str>, Option<i32>)>,
    /// `topic.metadata.propagation.max.ms` (as long as librdkafka itself waits for a topic), at
    /// most [`MAX_WAIT`].
    wait: Duration,
}

/// A topic being created on first use has its leaders within a second; a longer wait would only
/// hold a graceful stop back (the relay thread waits).
const MAX_WAIT: Duration = Duration::from_secs(5);

impl KnownTopics {
    pub fn new(propagation: Duration) -> KnownTopics {
        KnownTopics { met: HashMap::new(), last: None, wait: propagation.min(MAX_WAIT) }
    }
}

impl Publisher {
    /// Returns once `topic` has a leader for every partition, or after the wait; at once for a
    /// topic met before. Returns its partition count, when its metadata came.
    pub async fn meet(&mut self, topic: &Arc<str>) -> Option<i32> {
        // Every record asks: the topic of the one before, by pointer, spares the hash.
        if let Some((last, partitions)) = &self.topics.last {
            if Arc::ptr_eq(last, topic) {
                return *partitions;
            }
        }
        if let Some(&partitions) = self.topics.met.get(topic) {
            self.topics.last = Some((topic.clone(), partitions));
            return partitions;
        }
        let (producer, name, wait) =
            (Arc::clone(&self.producer), topic.to_string(), self.topics.wait);
        let started = Instant::now();
        let partitions =
            tokio::task::spawn_blocking(move || every_partition_led(&producer, &name, wait))
                .await
                .unwrap_or(None);
        let waited_ms = started.elapsed().as_millis() as u64;
        if partitions.is_some() {
            tracing::debug!(%topic, waited_ms, "topic known; its records go out");
        } else {
            tracing::debug!(%topic, waited_ms, "topic without a leader for every partition; its records are sent anyway and their reports say why");
        }
        self.topics.met.insert(topic.clone(), partitions);
        self.topics.last = Some((topic.clone(), partitions));
        partitions
    }
}

/// Asks for `topic`'s metadata until every partition has a leader (its partition count) or `wait`
/// passed (`None`).
fn every_partition_led(
    producer: &BaseProducer<RelayContext>,
    topic: &str,
    wait: Duration,
) -> Option<i32> {
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let answer =
            producer.client().fetch_metadata(Some(topic), left.min(Duration::from_secs(2)));
        if let Some(t) = answer.as_ref().ok().and_then(|md| md.topics().first()) {
            let led = || t.partitions().iter().all(|p| p.leader() >= 0 && p.error().is_none());
            match t.error() {
                None if !t.partitions().is_empty() && led() => {
                    return i32::try_from(t.partitions().len()).ok();
                }
                // Being created (or not there, which only the wait tells apart).
                None
                | Some(RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
                | Some(RDKafkaRespErr::RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE) => {}
                // Refused (an ACL, an illegal name): no wait makes it come.
                Some(_) => return None,
            }
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{KafkaConfig, Options};
    use crate::metrics::Metrics;
    use rdkafka::mocking::MockCluster;

    fn publisher(bootstrap: &str) -> Publisher {
        let mut properties = Options::new();
        properties.insert("bootstrap.servers".into(), bootstrap.into());
        properties.insert("enable.idempotence".into(), "true".into());
        Publisher::new(&KafkaConfig { properties }, 0, Metrics::new(), None).unwrap()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_topic_is_met_once_its_partitions_have_leaders_and_then_without_asking_again() {
        let mock = MockCluster::new(1).expect("mock cluster");
        mock.create_topic("met", 3, 1).expect("topic");
        let mut publisher = publisher(&mock.bootstrap_servers());
        let topic: Arc<str> = Arc::from("met");
        assert_eq!(publisher.meet(&topic).await, Some(3));
        assert_eq!(publisher.topics.met.get(&topic), Some(&Some(3)));
        let md = publisher.producer.client().fetch_metadata(Some("met"), Duration::from_secs(5));
        assert_eq!(md.unwrap().topics()[0].partitions().len(), 3);
        // Met: no metadata request, so no wait even with the broker gone.
        drop(mock);
        let again = Instant::now();
        assert_eq!(publisher.meet(&topic).await, Some(3), "from what was met");
        assert!(again.elapsed() < Duration::from_millis(50), "{:?}", again.elapsed());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_topic_that_does_not_come_is_met_after_the_wait() {
        let mock = MockCluster::new(1).expect("mock cluster");
        let mut publisher = publisher(&mock.bootstrap_servers());
        publisher.topics.wait = Duration::from_millis(300);
        // No leaders: the mock's only broker is down.
        mock.broker_down(1).expect("broker down");
        let topic: Arc<str> = Arc::from("absent");
        let started = Instant::now();
        assert_eq!(publisher.meet(&topic).await, None, "no partition count without metadata");
        assert!(started.elapsed() >= Duration::from_millis(300), "{:?}", started.elapsed());
        assert!(publisher.topics.met.contains_key(&topic), "not asked again for every record");
    }
}
