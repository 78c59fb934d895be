//! Kafka client helpers for tests (rdkafka / librdkafka).
//!
//! On Apache Kafka the readers are consumers in a group of their own that subscribe from the
//! earliest offset, as users' consumers are. On tansu (`WALRELAY_TEST_BROKER=tansu`) they
//! `assign()` every partition from offset 0 instead (a classic JoinGroup there waits
//! session.timeout.ms/2). Either way they count records rather than trust high watermarks
//! (tansu's memory engine reports wrong ones).

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::{HashMap, HashSet};
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

/// A client of `bootstrap` as every helper here starts one (IPv4, warnings and worse logged).
pub fn client_config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap).set("broker.address.family", "v4").set("log_level", "4");
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

/// Reads `topic` from offset 0 on every partition with assign() until `expected` records
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
///
/// On Kafka it subscribes in a fresh consumer group; on tansu it waits (within the deadline) for
/// the topics to appear in the broker's metadata and assigns their partitions, rather than
/// naming them in a metadata request, which would create them on tansu's memory engine.
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
    let consumer = reader(config);
    let mut out: Vec<Consumed> = Vec::new();
    if !matches!(
        start_reading(Join::for_broker(), &consumer, topics, start, deadline, || true).await,
        Start::Reading
    ) {
        return out;
    }
    // A topic the relay creates after the subscription rebalances the group, and a partition
    // handed back may be read again from the last commit: a record is counted once, by where it
    // is, so only the relay's own duplicates (new offsets) show.
    let mut seen: HashSet<(String, i32, i64)> = HashSet::new();

    while out.len() < expected {
        let remaining = deadline.saturating_sub(start.elapsed());
        if remaining.is_zero() {
            break;
        }
        match tokio::time::timeout(remaining, consumer.recv()).await {
            Err(_) => break,
            Ok(Err(e)) => {
                eprintln!("[support] consume {topics:?}: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(Ok(m)) => {
                if seen.insert((m.topic().to_string(), m.partition(), m.offset())) {
                    out.push(Consumed::from_message(&m));
                }
            }
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
/// reader, which joins a group first (seconds on Kafka), this answers in a round trip.
pub fn records_in(bootstrap: &str, topic: &str) -> Option<i64> {
    if !matches!(super::broker::Kind::selected(), Ok(super::broker::Kind::Kafka)) {
        return None;
    }
    static CLIENTS: OnceLock<Mutex<HashMap<String, Arc<rdkafka::consumer::BaseConsumer>>>> =
        OnceLock::new();
    let client = CLIENTS
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry(bootstrap.to_string())
        .or_insert_with(|| Arc::new(client_config(bootstrap).create().expect("a metadata client")))
        .clone();
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

/// Reads `topics` from their start and calls `f` for each record and on every 100 ms without
/// one (also while the topics are not there yet), until `f` returns false or `deadline` passes.
/// A record read twice because a rebalance handed its partition back is passed on once (by
/// topic, partition and offset), so only the relay's own duplicates show. Returns whether `f`
/// ended it.
pub async fn consume_while(
    bootstrap: &str,
    topics: &[String],
    deadline: Duration,
    f: impl FnMut(Next) -> bool,
) -> bool {
    consume_while_by(Join::for_broker(), bootstrap, topics, deadline, f).await
}

/// How a reader gets its partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// Subscribes in a group of its own, as a user's consumer does (Apache Kafka).
    Group,
    /// Assigns itself every partition from the metadata, with no group coordinator: tansu, and a
    /// read-back from a broker that was frozen for seconds, whose group joins can stall (one
    /// CI run read nothing in 90 s while the watermarks held every record).
    Assign,
}

impl Join {
    /// [`Join::Group`] on Apache Kafka, [`Join::Assign`] on tansu (its readers don't join).
    pub fn for_broker() -> Join {
        match super::broker::Kind::selected() {
            Ok(super::broker::Kind::Kafka) => Join::Group,
            _ => Join::Assign,
        }
    }
}

/// [`consume_while`], joining as `join` says.
pub async fn consume_while_by(
    join: Join,
    bootstrap: &str,
    topics: &[String],
    deadline: Duration,
    mut f: impl FnMut(Next) -> bool,
) -> bool {
    let start = Instant::now();
    let mut config = client_config(bootstrap);
    // The fault tests take brokers away on purpose: errors only.
    config.set("log_level", "3");
    let consumer = reader(config);
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    match start_reading(join, &consumer, &names, start, deadline, || f(Next::Idle)).await {
        Start::Reading => {}
        Start::Stopped => return true,
        Start::NoTopic => return false,
    }
    let mut seen: HashSet<(String, i32, i64)> = HashSet::new();
    loop {
        let remaining = deadline.saturating_sub(start.elapsed());
        if remaining.is_zero() {
            return false;
        }
        let wait = remaining.min(Duration::from_millis(100));
        match tokio::time::timeout(wait, consumer.recv()).await {
            Err(_) => {
                if !f(Next::Idle) {
                    return true;
                }
            }
            Ok(Err(e)) => {
                eprintln!("[support] consume {topics:?}: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(Ok(m)) => {
                if !seen.insert((m.topic().to_string(), m.partition(), m.offset())) {
                    continue;
                }
                if !f(Next::Record(Consumed::from_message(&m))) {
                    return true;
                }
            }
        }
    }
}

/// The one reader every helper here starts: on `config`, a consumer in a group of its own that
/// reads from the earliest offset and commits offsets as records are handed out, as a user's
/// consumer does, so a rebalance resumes where the reader was.
fn reader(mut config: ClientConfig) -> Arc<StreamConsumer> {
    let bootstrap = config.get("bootstrap.servers").unwrap_or_default().to_string();
    config
        .set("group.id", super::unique("walrelay_test_reader"))
        // As a consumer of exactly-once reads (librdkafka's default, said out loud).
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "200")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        .set("fetch.wait.max.ms", "100")
        .set("topic.metadata.refresh.interval.ms", "1000")
        .create()
        .map(Arc::new)
        .unwrap_or_else(|e| panic!("create consumer for {bootstrap}: {e}"))
}

/// How [`start_reading`] ended.
enum Start {
    Reading,
    /// tansu: none of the topics appeared within the deadline.
    NoTopic,
    /// `waiting` returned false.
    Stopped,
}

/// Points `consumer` at the start of `topics`. On Apache Kafka it subscribes. On tansu it
/// assigns every partition from offset 0 once the topics are in the metadata (within
/// `deadline`), without naming them, which would create them on tansu's memory engine;
/// `waiting` is called on every round they are not all there yet (they appear when the relay
/// first produces to them), and ends the wait when it returns false.
async fn start_reading(
    join: Join,
    consumer: &Arc<StreamConsumer>,
    topics: &[&str],
    start: Instant,
    deadline: Duration,
    mut waiting: impl FnMut() -> bool,
) -> Start {
    if join == Join::Group {
        consumer.subscribe(topics).unwrap_or_else(|e| panic!("subscribe {topics:?}: {e}"));
        return Start::Reading;
    }
    let mut partitions: HashMap<String, Vec<i32>> = HashMap::new();
    loop {
        let remaining = deadline.saturating_sub(start.elapsed());
        let timeout = remaining.clamp(Duration::from_millis(100), Duration::from_secs(5));
        let c = Arc::clone(consumer);
        // fetch_metadata blocks: keep it off the runtime's threads.
        let md = tokio::task::spawn_blocking(move || c.client().fetch_metadata(None, timeout))
            .await
            .expect("metadata task");
        if let Ok(md) = md {
            for t in md.topics() {
                if topics.contains(&t.name()) && !t.partitions().is_empty() {
                    partitions.insert(
                        t.name().to_string(),
                        t.partitions().iter().map(|p| p.id()).collect(),
                    );
                }
            }
        }
        if topics.iter().all(|t| partitions.contains_key(*t)) || start.elapsed() >= deadline {
            break;
        }
        if !waiting() {
            return Start::Stopped;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let missing: Vec<&str> =
        topics.iter().copied().filter(|t| !partitions.contains_key(*t)).collect();
    if !missing.is_empty() {
        eprintln!(
            "[support] consume: topics not found in metadata within {deadline:?}: {missing:?}"
        );
    }
    let mut tpl = TopicPartitionList::new();
    for (topic, ps) in &partitions {
        for p in ps {
            tpl.add_partition_offset(topic, *p, Offset::Offset(0)).expect("add partition");
        }
    }
    if tpl.count() == 0 {
        return Start::NoTopic;
    }
    consumer.assign(&tpl).unwrap_or_else(|e| panic!("assign {topics:?}: {e}"));
    Start::Reading
}
