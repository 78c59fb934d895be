//! Reading the topics back: counting what each system delivered (every event, none missing,
//! duplicates counted) and tailing topics to time records as they arrive.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The polling relay's and the broker-alone producer's `linger.ms`: walrelay's default, so every
/// producer in the benchmark batches alike.
pub const LINGER_MS: &str = "2";

/// A producer configuration with the settings walrelay owns (idempotence, acks=all, murmur2)
/// and its default `linger.ms`, for every producer in the benchmark that stands in for it.
pub fn relay_like_producer(bootstrap: &str) -> rdkafka::ClientConfig {
    let mut cfg = rdkafka::ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("partitioner", "murmur2_random")
        .set("linger.ms", LINGER_MS);
    cfg
}

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::measure::now_us;
use crate::workload::{parse_event_id, AGGREGATE_TYPES};

pub const PARTITIONS: i32 = 4;

/// The four topics a system with topic prefix `prefix` writes.
pub fn topics(prefix: &str) -> Vec<String> {
    AGGREGATE_TYPES.iter().map(|t| format!("{prefix}.outbox.event.{t}")).collect()
}

/// Creates the topics (4 partitions each) before anything produces to them.
pub async fn create_topics(bootstrap: &str, prefix: &str) {
    for t in topics(prefix) {
        crate::support::create_topic(bootstrap, &t, PARTITIONS).await;
    }
}

fn consumer(bootstrap: &str, prefix: &str, fetch_wait_ms: u32) -> BaseConsumer {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", crate::support::unique("bench_reader"))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("fetch.wait.max.ms", fetch_wait_ms.to_string())
        .set("fetch.message.max.bytes", "4194304")
        .set("queued.min.messages", "200000")
        .set("log_level", "3")
        .create()
        .expect("create consumer");
    let mut tpl = TopicPartitionList::new();
    for t in topics(prefix) {
        for p in 0..PARTITIONS {
            tpl.add_partition_offset(&t, p, Offset::Offset(0)).expect("partition");
        }
    }
    c.assign(&tpl).expect("assign");
    c
}

/// What a system delivered, read back from the broker.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Delivery {
    pub expected: u64,
    pub records: u64,
    pub distinct: u64,
    pub missing: u64,
    pub duplicates: u64,
    /// Records whose `id` header is not an event id of this run, or whose key/topic do not
    /// match the event.
    pub malformed: u64,
}

impl Delivery {
    pub fn complete(&self) -> bool {
        self.missing == 0 && self.malformed == 0
    }
}

/// Reads every record of the prefix's topics and checks that the events `range` of `group` all
/// arrived, with the topic and key the row dictates. Blocking; stops once all arrived and the topics stayed quiet for
/// 500 ms, or nothing arrived for 10 s, or after `deadline`.
pub fn count_delivered(
    bootstrap: &str,
    prefix: &str,
    group: u32,
    range: std::ops::RangeInclusive<u64>,
    aggregates: u32,
    deadline: Duration,
) -> Delivery {
    let c = consumer(bootstrap, prefix, 100);
    let expected = range.end() + 1 - range.start();
    let mut seen = vec![0u8; expected as usize];
    let mut d = Delivery { expected, ..Delivery::default() };
    let start = Instant::now();
    let mut last = Instant::now();
    let topic_of = |n: u64| format!("{prefix}.outbox.event.{}", AGGREGATE_TYPES[(n % 4) as usize]);
    while start.elapsed() < deadline {
        let quiet = last.elapsed();
        if (d.distinct == expected && quiet > Duration::from_millis(500))
            || quiet > Duration::from_secs(10)
        {
            break;
        }
        let Some(m) = c.poll(Duration::from_millis(100)) else { continue };
        let Ok(m) = m else { continue };
        last = Instant::now();
        d.records += 1;
        let id = m
            .headers()
            .and_then(|hs| hs.iter().find(|h| h.key == "id").and_then(|h| h.value))
            .and_then(parse_event_id);
        match id {
            Some((g, n)) if g == group && range.contains(&n) => {
                let text = format!("agg-{:05}", n % aggregates as u64);
                // `avro-keys`: Confluent's framing (0, a 4-byte id), the Avro string's length
                // (one byte for these nine), then the text.
                let key_ok = m.key().is_some_and(|k| {
                    k == text.as_bytes()
                        || (k.len() == text.len() + 6 && k[0] == 0 && k.ends_with(text.as_bytes()))
                });
                if !key_ok || m.topic() != topic_of(n) {
                    d.malformed += 1;
                }
                let s = &mut seen[(n - range.start()) as usize];
                if *s == 0 {
                    d.distinct += 1;
                } else {
                    d.duplicates += 1;
                }
                *s = s.saturating_add(1);
            }
            _ => d.malformed += 1,
        }
    }
    d.missing = expected - d.distinct;
    if d.missing > 0 {
        // Which ones, so a loss can be traced (in the relay's log, in the WAL) rather than counted.
        let first: Vec<u64> = (0..expected)
            .filter(|&i| seen[i as usize] == 0)
            .take(20)
            .map(|i| range.start() + i)
            .collect();
        eprintln!(
            "[bench] {prefix}: {} of {expected} events missing; the first: {first:?}",
            d.missing
        );
    }
    d
}

/// A consumer thread that records, for every steady-group event, when it arrived (µs,
/// [`now_us`]).
pub struct Tail {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Tail {
    /// Starts tailing the prefix's (existing) topics from offset 0; returns once the consumer
    /// has its connection and has fetched once.
    pub fn start(bootstrap: &str, prefix: &str, recv_us: Arc<Vec<AtomicU64>>) -> Tail {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (b, p) = (bootstrap.to_string(), prefix.to_string());
        let st = stop.clone();
        let thread = std::thread::spawn(move || {
            // fetch.wait.max.ms 10: tansu holds a fetch for the whole wait even when records
            // arrive, and at 1 ms the consumer's own request rate slows it; 10 ms measured best
            // (send → consumer − send → ack ≈ 3 ms at p50, 2,000/s). WALRELAY_BENCH_FETCH_WAIT_MS
            // overrides it.
            let wait = std::env::var("WALRELAY_BENCH_FETCH_WAIT_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(10);
            let c = consumer(&b, &p, wait);
            let mut ready = Some(ready_tx);
            // Bounded by the stop flag, which the owner sets (or Drop does).
            while !st.load(Ordering::Relaxed) {
                let m = c.poll(Duration::from_millis(20));
                if let Some(tx) = ready.take() {
                    let _ = tx.send(());
                }
                let Some(Ok(m)) = m else { continue };
                let t = now_us();
                if let Some((_, n)) = m
                    .headers()
                    .and_then(|hs| hs.iter().find(|h| h.key == "id").and_then(|h| h.value))
                    .and_then(parse_event_id)
                {
                    if let Some(slot) = recv_us.get(n as usize) {
                        let _ = slot.compare_exchange(0, t, Ordering::Relaxed, Ordering::Relaxed);
                    }
                }
            }
        });
        let _ = ready_rx.recv_timeout(Duration::from_secs(10));
        // Let the fetch loop settle on every partition.
        std::thread::sleep(Duration::from_millis(500));
        Tail { stop, thread: Some(thread) }
    }

    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        self.stop();
    }
}
