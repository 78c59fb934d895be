//! A 3-node Apache Kafka cluster (KRaft, every node broker and controller), replication factor 3
//! and `min.insync.replicas=2`, for the tests whose meaning needs replicas: a leader killed
//! mid-stream, the ISR below `min.insync.replicas`, the whole cluster restarted on its data.
//!
//! ```ignore
//! let cluster = KafkaCluster::start("leaderkill").await;
//! kafka::create_topic_replicated(cluster.bootstrap(), &topic, 4, 3).await;
//! let leader = cluster.leader_of(&topic, 0).await;
//! cluster.node(leader).kill();
//! ```
//!
//! Each node is a [`Broker`] with its own directory under the test's scratch directory, killed
//! on drop (and by the harness watchdog if the test process dies first).

use std::time::{Duration, Instant};

use rdkafka::producer::{BaseProducer, Producer};

use super::broker::{Broker, KafkaNode};
use super::{free_port, scratch_dir};

pub struct KafkaCluster {
    nodes: Vec<Broker>,
    bootstrap: String,
}

impl KafkaCluster {
    /// Starts three nodes at once and waits until all of them are registered. Blocking work runs
    /// in `spawn_blocking`.
    pub async fn start(prefix: &str) -> KafkaCluster {
        let prefix = prefix.to_string();
        tokio::task::spawn_blocking(move || KafkaCluster::start_blocking(&prefix))
            .await
            .expect("KafkaCluster::start panicked")
            .unwrap_or_else(|e| panic!("3-node Kafka cluster: {e}"))
    }

    fn start_blocking(prefix: &str) -> Result<KafkaCluster, String> {
        let started = Instant::now();
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let voters = ports
            .iter()
            .enumerate()
            .map(|(i, (_, c))| format!("{}@127.0.0.1:{c}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let dir = scratch_dir(prefix);
        // Launched side by side: formatting storage is a JVM run of several seconds per node.
        let launched: Vec<Result<Broker, String>> = std::thread::scope(|scope| {
            let handles: Vec<_> = ports
                .iter()
                .enumerate()
                .map(|(i, (port, controller_port))| {
                    let node = KafkaNode {
                        node_id: i as u32 + 1,
                        port: *port,
                        controller_port: *controller_port,
                        voters: voters.clone(),
                        properties: Vec::new(),
                        jvm_options: Vec::new(),
                        format_args: Vec::new(),
                    };
                    let node_dir = dir.join(format!("node{}", i + 1));
                    scope.spawn(move || Broker::launch_kafka(&node_dir, node))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("launching a kafka node panicked"))
                .collect()
        });
        let nodes = launched.into_iter().collect::<Result<Vec<Broker>, String>>()?;
        let bootstrap = nodes.iter().map(|n| n.bootstrap()).collect::<Vec<_>>().join(",");
        let cluster = KafkaCluster { nodes, bootstrap };
        for n in &cluster.nodes {
            n.wait_ready(super::broker::KAFKA_START)?;
        }
        if !cluster.wait_brokers(3, Duration::from_secs(60)) {
            return Err(format!("fewer than 3 brokers registered within 60 s; {}", cluster.logs()));
        }
        eprintln!(
            "[support] 3-node Kafka cluster {} ready in {:.1?}",
            cluster.bootstrap,
            started.elapsed()
        );
        Ok(cluster)
    }

    /// All three client listeners, comma-separated.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// Node `id` (1, 2 or 3).
    pub fn node(&self, id: i32) -> &Broker {
        &self.nodes[(id - 1) as usize]
    }

    pub fn nodes(&self) -> &[Broker] {
        &self.nodes
    }

    /// Whether the cluster's metadata lists `n` brokers (asked of any running node).
    pub fn wait_brokers(&self, n: usize, deadline: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < deadline {
            if self.metadata().is_some_and(|md| md.brokers().len() >= n) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    fn metadata(&self) -> Option<rdkafka::metadata::Metadata> {
        let client: BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("log_level", "2")
            .create()
            .ok()?;
        client.client().fetch_metadata(None, Duration::from_secs(3)).ok()
    }

    /// The node that leads `topic`'s `partition` now, once there is one.
    pub async fn leader_of(&self, topic: &str, partition: i32) -> i32 {
        let start = Instant::now();
        loop {
            let md = self.metadata();
            let leader = md.as_ref().and_then(|md| {
                md.topics()
                    .iter()
                    .find(|t| t.name() == topic)
                    .and_then(|t| t.partitions().iter().find(|p| p.id() == partition))
                    .map(|p| p.leader())
                    .filter(|l| *l > 0)
            });
            if let Some(l) = leader {
                return l;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no leader for {topic}/{partition} within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The last lines of every node's log (for failure messages).
    pub fn logs(&self) -> String {
        self.nodes.iter().map(|n| n.log_tail(15)).collect::<Vec<_>>().join("\n")
    }
}
