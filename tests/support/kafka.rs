//! Kafka client helpers for tests (rdkafka / librdkafka).
//!
//! The readers assign themselves every partition of their topics from offset 0, with no group
//! ([`Reader`] says why), and count records rather than trust high watermarks (tansu's memory
//! engine reports wrong ones).

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::{free_port, scratch_dir, Broker};

/// One record read back from the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumed {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    /// In record order; a name may repeat; `None` is a null header value.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub timestamp_ms: Option<i64>,
}

impl Consumed {
    /// A copy of a message read from the broker.
    pub fn from_message(m: &impl Message) -> Consumed {
        Consumed {
            topic: m.topic().to_string(),
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            headers: m
                .headers()
                .map(|hs| {
                    hs.iter().map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec))).collect()
                })
                .unwrap_or_default(),
            timestamp_ms: m.timestamp().to_millis(),
        }
    }

    /// The value of the first header called `name` (None if absent or null).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.iter().find(|(k, _)| k == name).and_then(|(_, v)| v.as_deref())
    }

    /// The first header called `name` as UTF-8 text.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.header(name).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// The event id, wherever the envelope put it: the `id` header, CloudEvents binary's
    /// `ce_id`, or a protobuf `walrelay.v1.Event`'s `id`.
    pub fn event_id(&self) -> Option<String> {
        use prost::Message as _;
        if let Some(id) = self.header_str("id").or(self.header_str("ce_id")) {
            return Some(id.to_string());
        }
        let value = self.value.as_deref()?;
        walrelay::envelope::proto::Event::decode(value).ok().map(|e| e.id)
    }

    pub fn key_str(&self) -> Option<&str> {
        self.key.as_deref().and_then(|v| std::str::from_utf8(v).ok())
    }

    pub fn value_str(&self) -> Option<&str> {
        self.value.as_deref().and_then(|v| std::str::from_utf8(v).ok())
    }

    /// The value parsed as JSON (panics if it is not JSON; None for a null value/tombstone).
    pub fn value_json(&self) -> Option<serde_json::Value> {
        self.value.as_deref().map(|v| {
            serde_json::from_slice(v).unwrap_or_else(|e| {
                panic!(
                    "value of {}/{}@{} is not JSON ({e}): {}",
                    self.topic,
                    self.partition,
                    self.offset,
                    String::from_utf8_lossy(v)
                )
            })
        })
    }
}

/// A client of `bootstrap` as every helper here starts one (IPv4, warnings and worse logged),
/// finding a broker again as walrelay's clients do (config/kafka.rs, `RECONNECT_DEFAULTS`): the
/// tests thaw and restart brokers, and a reader made right after once read nothing for 60 s.
pub fn client_config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("broker.address.family", "v4")
        .set("log_level", "4")
        .set("socket.connection.setup.timeout.ms", "10000")
        .set("reconnect.backoff.max.ms", "1000")
        .set("metadata.recovery.rebootstrap.trigger.ms", "10000");
    c
}

/// Creates `topic` with `partitions` partitions (replication 1). "Already exists" is fine
/// (on tansu's memory engine any metadata request naming a topic creates it with 4
/// partitions, so create topics before anything else touches them).
pub async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) {
    create_topic_with(bootstrap, topic, partitions, 1, &[]).await
}

/// Like [`create_topic`] with `replicas` copies of each partition and topic `configs`
/// (`("max.message.bytes", "2048")`).
pub async fn create_topic_with(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    replicas: i32,
    configs: &[(&str, &str)],
) {
    let admin: AdminClient<DefaultClientContext> = client_config(bootstrap)
        .create()
        .unwrap_or_else(|e| panic!("create admin client for {bootstrap}: {e}"));
    let mut new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(replicas));
    for (k, v) in configs {
        new_topic = new_topic.set(k, v);
    }
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = admin
        .create_topics([&new_topic], &opts)
        .await
        .unwrap_or_else(|e| panic!("create topic {topic}: {e}"));
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => panic!("create topic {name}: {code}"),
        }
    }
}

/// A broker of its own (memory engine) on `port` (a free one when None), for tests that hang,
/// kill or delay it. Blocking. Killed on drop.
pub fn private_broker(port: Option<u16>) -> Broker {
    let port = port.unwrap_or_else(free_port);
    Broker::start(&scratch_dir("broker"), port).unwrap_or_else(|e| panic!("private broker: {e}"))
}

/// A [`private_broker`] (Apache Kafka) whose controller keeps its broker's session for 60 s,
/// not 9: a single node frozen longer than its session fences its own broker on the thaw (its
/// controller wakes to a heartbeat that old) and clients then wait up to a minute for an
/// answer (see `reporting::readiness_follows_the_broker_after_an_outage_and_during_a_hang`).
/// For tests that freeze the broker for longer and are about something else.
pub fn private_broker_keeping_its_session() -> Broker {
    if !matches!(super::broker::Kind::selected(), Ok(super::broker::Kind::Kafka)) {
        return private_broker(None);
    }
    let node =
        super::broker::KafkaNode::single(free_port()).set("broker.session.timeout.ms", "60000");
    Broker::start_kafka(&scratch_dir("broker"), node)
        .unwrap_or_else(|e| panic!("private broker: {e}"))
}

/// One idempotent acks=all producer per bootstrap address, shared by the whole process
/// (creating one costs a broker round trip for the producer id).
pub fn producer_for(bootstrap: &str) -> FutureProducer {
    static PRODUCERS: OnceLock<Mutex<HashMap<String, FutureProducer>>> = OnceLock::new();
    let mut map = PRODUCERS.get_or_init(Default::default).lock().unwrap();
    map.entry(bootstrap.to_string())
        .or_insert_with(|| {
            client_config(bootstrap)
                .set("acks", "all")
                .set("enable.idempotence", "true")
                .set("linger.ms", "0")
                .set("message.timeout.ms", "15000")
                .create()
                .unwrap_or_else(|e| panic!("create producer for {bootstrap}: {e}"))
        })
        .clone()
}

/// Produces one record (acks=all, idempotent) and returns its (partition, offset).
/// `partition: None` lets the partitioner choose (by key).
pub async fn produce(
    bootstrap: &str,
    topic: &str,
    partition: Option<i32>,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(&str, Option<&[u8]>)],
) -> (i32, i64) {
    let producer = producer_for(bootstrap);
    let mut hs = OwnedHeaders::new_with_capacity(headers.len());
    for (k, v) in headers {
        hs = hs.insert(Header { key: k, value: *v });
    }
    let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic).headers(hs);
    if let Some(p) = partition {
        record = record.partition(p);
    }
    if let Some(k) = key {
        record = record.key(k);
    }
    if let Some(v) = value {
        record = record.payload(v);
    }
    match producer.send(record, Duration::from_secs(15)).await {
        Ok(d) => (d.partition, d.offset),
        Err((e, _)) => panic!("produce to {topic}: {e}"),
    }
}

/// Reads `topic` from offset 0 on every partition until `expected` records
/// arrived or `deadline` passed; returns what it got, ordered by (partition, offset).
pub async fn consume(
    bootstrap: &str,
    topic: &str,
    expected: usize,
    deadline: Duration,
) -> Vec<Consumed> {
    consume_topics(bootstrap, &[topic], expected, deadline).await
}

/// Like [`consume`] for several topics together: stops at `expected` records in all;
/// ordered by (position of the topic in `topics`, partition, offset).
pub async fn consume_topics(
    bootstrap: &str,
    topics: &[&str],
    expected: usize,
    deadline: Duration,
) -> Vec<Consumed> {
    consume_topics_with(client_config(bootstrap), topics, expected, deadline).await
}

/// Like [`consume_topics`] for a client `config` of its own ([`client_config`] plus
/// `security.protocol`, `sasl.*`, `ssl.*`…).
pub async fn consume_topics_with(
    config: ClientConfig,
    topics: &[&str],
    expected: usize,
    deadline: Duration,
) -> Vec<Consumed> {
    let start = Instant::now();
    let mut reader = Reader::start(config, topics).await;
    let mut out: Vec<Consumed> = Vec::new();
    while out.len() < expected {
        let remaining = deadline.saturating_sub(start.elapsed());
        if remaining.is_zero() {
            break;
        }
        if let Some(record) = reader.next(remaining.min(Duration::from_millis(100))).await {
            out.push(record);
        }
    }
    if out.len() < expected {
        eprintln!(
            "[support] consume {topics:?}: got {} of {expected} records within {deadline:?}",
            out.len()
        );
    }
    let rank = |t: &str| topics.iter().position(|x| *x == t).unwrap_or(usize::MAX);
    out.sort_by(|a, b| {
        (rank(&a.topic), a.partition, a.offset).cmp(&(rank(&b.topic), b.partition, b.offset))
    });
    out
}

/// What a [`consume_while`] callback is told.
pub enum Next {
    Record(Consumed),
    /// No record for 100 ms.
    Idle,
}

/// How many records `topic` holds, from its partitions' high watermarks: `None` on tansu (its
/// memory engine reports wrong ones) or while the topic's metadata is not there. Unlike a
/// reader, this answers in a round trip.
pub fn records_in(bootstrap: &str, topic: &str) -> Option<i64> {
    if !matches!(super::broker::Kind::selected(), Ok(super::broker::Kind::Kafka)) {
        return None;
    }
    let client = metadata_client(bootstrap);
    let timeout = Duration::from_secs(5);
    let metadata = client.fetch_metadata(Some(topic), timeout).ok()?;
    let partitions = metadata.topics().first().filter(|t| t.error().is_none())?.partitions().len();
    if partitions == 0 {
        return None;
    }
    let mut total = 0;
    for p in 0..partitions as i32 {
        let (low, high) = client.fetch_watermarks(topic, p, timeout).ok()?;
        total += high - low;
    }
    Some(total)
}

/// One client per bootstrap address for metadata and watermarks, shared by the process.
fn metadata_client(bootstrap: &str) -> Arc<rdkafka::consumer::BaseConsumer> {
    static CLIENTS: OnceLock<Mutex<HashMap<String, Arc<rdkafka::consumer::BaseConsumer>>>> =
        OnceLock::new();
    CLIENTS
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry(bootstrap.to_string())
        .or_insert_with(|| Arc::new(client_config(bootstrap).create().expect("a metadata client")))
        .clone()
}

/// The topics whose names start with `prefix` (blocking; none when the broker does not answer).
pub fn topics_with_prefix(bootstrap: &str, prefix: &str) -> Vec<String> {
    let client = metadata_client(bootstrap);
    match client.fetch_metadata(None, Duration::from_secs(2)) {
        Ok(m) => m
            .topics()
            .iter()
            .map(|t| t.name().to_string())
            .filter(|t| t.starts_with(prefix))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// What the broker holds in the topics whose names start with `prefix`, per partition
/// (`topic[partition]: low..high`), for a failure message: it tells records the relay never
/// delivered from records a reader missed. Blocking; a line saying why when it can't tell.
pub fn holdings(bootstrap: &str, prefix: &str) -> String {
    let client = metadata_client(bootstrap);
    let timeout = Duration::from_secs(5);
    let metadata = match client.fetch_metadata(None, timeout) {
        Ok(m) => m,
        Err(e) => return format!("kafka holdings: no metadata: {e}"),
    };
    let mut lines = Vec::new();
    for t in metadata.topics().iter().filter(|t| t.name().starts_with(prefix)) {
        for p in t.partitions() {
            let marks = client.fetch_watermarks(t.name(), p.id(), timeout);
            lines.push(match marks {
                Ok((low, high)) => format!("{}[{}]: {low}..{high}", t.name(), p.id()),
                Err(e) => format!("{}[{}]: {e}", t.name(), p.id()),
            });
        }
    }
    lines.sort();
    format!(
        "kafka holds (offsets low..high): {}",
        if lines.is_empty() { "no such topic".into() } else { lines.join(", ") }
    )
}

/// Reads `topics` from their start and calls `f` for each record and on every 100 ms without
/// one (also while the topics are not there yet), until `f` returns false or `deadline` passes.
/// Returns whether `f` ended it.
pub async fn consume_while(
    bootstrap: &str,
    topics: &[String],
    deadline: Duration,
    mut f: impl FnMut(Next) -> bool,
) -> bool {
    let start = Instant::now();
    let mut config = client_config(bootstrap);
    // The fault tests take brokers away on purpose: errors only.
    config.set("log_level", "3");
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let mut reader = Reader::start(config, &names).await;
    loop {
        let remaining = deadline.saturating_sub(start.elapsed());
        if remaining.is_zero() {
            return false;
        }
        let next = match reader.next(remaining.min(Duration::from_millis(100))).await {
            Some(record) => Next::Record(record),
            None => Next::Idle,
        };
        if !f(next) {
            return true;
        }
    }
}

/// The one reader every helper here starts: a consumer that assigns itself every partition of
/// its topics from offset 0, and takes in the topics that appear later (the relay creates them
/// when it first produces), reading as a consumer of exactly-once output does
/// (`read_committed`).
///
/// It joins no group: a group's join waits on the coordinator, and on a broker that is loaded,
/// or was frozen or restarted by the test, joins stalled for seconds to minutes, and group
/// readers came up short of records the broker held. What the tests judge is what the topics
/// hold, not how a group hands out partitions.
struct Reader {
    consumer: Arc<StreamConsumer>,
    topics: Vec<String>,
    /// Every assigned partition and the offset to read next.
    next: BTreeMap<(String, i32), i64>,
    /// When the metadata was last asked for topics not seen yet.
    looked: Option<Instant>,
}

/// How often a reader asks again for topics it has not seen yet.
const LOOK_EVERY: Duration = Duration::from_millis(250);

impl Reader {
    async fn start(mut config: ClientConfig, topics: &[&str]) -> Reader {
        config
            // librdkafka wants a group id for a consumer; nothing joins or commits to it.
            .set("group.id", super::unique("walrelay_test_reader"))
            .set("enable.auto.commit", "false")
            // Where librdkafka goes when it finds its position invalid (out of range, or a log
            // truncation it infers from a new leader epoch, as after a broker's restart or
            // thaw): its default is the end, which skipped every record already there. From the
            // start, records read before are passed over by offset (`next`).
            .set("auto.offset.reset", "earliest")
            // As a consumer of exactly-once reads (librdkafka's default, said out loud).
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "false")
            .set("fetch.wait.max.ms", "100");
        let consumer = config.create().map(Arc::new).unwrap_or_else(|e| {
            panic!(
                "create consumer for {}: {e}",
                config.get("bootstrap.servers").unwrap_or_default()
            )
        });
        let mut reader = Reader {
            consumer,
            topics: topics.iter().map(|t| t.to_string()).collect(),
            next: BTreeMap::new(),
            looked: None,
        };
        reader.look().await;
        reader
    }

    /// The next record not read before, or `None` after `wait` without one.
    async fn next(&mut self, wait: Duration) -> Option<Consumed> {
        if self.looked.is_none_or(|t| t.elapsed() >= LOOK_EVERY) && !self.has_every_topic() {
            self.look().await;
        }
        let started = Instant::now();
        while let Some(left) = wait.checked_sub(started.elapsed()) {
            match tokio::time::timeout(left, self.consumer.recv()).await {
                Err(_) => return None,
                Ok(Err(e)) => {
                    eprintln!("[support] consume {:?}: {e}", self.topics);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Ok(Ok(m)) => {
                    // A re-assignment hands back what was prefetched: each offset once.
                    let next = self.next.entry((m.topic().to_string(), m.partition())).or_default();
                    if m.offset() >= *next {
                        *next = m.offset() + 1;
                        return Some(Consumed::from_message(&m));
                    }
                }
            }
        }
        None
    }

    fn has_every_topic(&self) -> bool {
        self.topics.iter().all(|t| self.next.keys().any(|(topic, _)| topic == t))
    }

    /// Asks for the cluster's topics, without naming them (which would create them on tansu's
    /// memory engine), and assigns the partitions of wanted topics not assigned yet, from
    /// offset 0, keeping where the others are.
    async fn look(&mut self) {
        self.looked = Some(Instant::now());
        let c = Arc::clone(&self.consumer);
        // fetch_metadata blocks: keep it off the runtime's threads.
        let metadata = tokio::task::spawn_blocking(move || {
            c.client().fetch_metadata(None, Duration::from_secs(2))
        })
        .await
        .expect("metadata task");
        let Ok(metadata) = metadata else { return };
        let mut added = false;
        for t in metadata.topics().iter().filter(|t| self.topics.iter().any(|w| w == t.name())) {
            for p in t.partitions() {
                if let Entry::Vacant(v) = self.next.entry((t.name().to_string(), p.id())) {
                    v.insert(0);
                    added = true;
                }
            }
        }
        if !added {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), offset) in &self.next {
            tpl.add_partition_offset(topic, *partition, Offset::Offset(*offset))
                .expect("add partition");
        }
        self.consumer.assign(&tpl).unwrap_or_else(|e| panic!("assign {:?}: {e}", self.topics));
    }
}

/// Deletes the records of `topic` [`partition`] before `offset` (Kafka's DeleteRecords): the
/// partition's log start moves there, as retention moves it when it deletes old segments.
pub async fn delete_records_before(bootstrap: &str, topic: &str, partition: i32, offset: i64) {
    let admin: AdminClient<DefaultClientContext> = client_config(bootstrap)
        .create()
        .unwrap_or_else(|e| panic!("create admin client for {bootstrap}: {e}"));
    let mut offsets = rdkafka::TopicPartitionList::new();
    offsets
        .add_partition_offset(topic, partition, rdkafka::Offset::Offset(offset))
        .expect("a partition list");
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let deleted = admin
        .delete_records(&offsets, &opts)
        .await
        .unwrap_or_else(|e| panic!("delete records of {topic} [{partition}] before {offset}: {e}"));
    for e in deleted.elements() {
        assert!(e.error().is_ok(), "delete records of {topic} [{partition}]: {:?}", e.error());
    }
}

/// The log start and end offsets of `topic` [`partition`]: the start is where Kafka's retention
/// (or a deletion) left it.
pub async fn marks(bootstrap: &str, topic: &str, partition: i32) -> (i64, i64) {
    let (bootstrap, topic) = (bootstrap.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        let consumer: rdkafka::consumer::BaseConsumer =
            client_config(&bootstrap).create().expect("a Kafka client");
        consumer.fetch_watermarks(&topic, partition, Duration::from_secs(10)).unwrap_or((0, 0))
    })
    .await
    .unwrap_or((0, 0))
}

/// Sets topic configs of `topic` (Kafka's IncrementalAlterConfigs is what kafka-configs.sh
/// uses; librdkafka's AlterConfigs replaces the topic's set configs, which is the same here for
/// a topic whose configs the test set).
pub async fn alter_topic(bootstrap: &str, topic: &str, configs: &[(&str, &str)]) {
    let admin: AdminClient<DefaultClientContext> = client_config(bootstrap)
        .create()
        .unwrap_or_else(|e| panic!("create admin client for {bootstrap}: {e}"));
    let mut alter =
        rdkafka::admin::AlterConfig::new(rdkafka::admin::ResourceSpecifier::Topic(topic));
    for (k, v) in configs {
        alter = alter.set(k, v);
    }
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = admin
        .alter_configs([&alter], &opts)
        .await
        .unwrap_or_else(|e| panic!("alter configs of {topic}: {e}"));
    for r in results {
        assert!(r.is_ok(), "alter configs of {topic}: {r:?}");
    }
}
