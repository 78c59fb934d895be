//! What the relay counts, and its exposition for `/metrics` (encoded by `prometheus-client`
//! in [`exposition`]).
//!
//! The relay loop is the only writer of most values; atomics let the HTTP thread read them
//! without locking the loop, and the loop never pays for a scrape. Per-topic counts sit behind
//! a mutex the loop takes once per batch of delivery reports.

mod exposition;
pub mod process;
pub mod seen;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::encoding::{MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::clock::unix_micros;
use crate::positions::Positions;

/// Upper bounds of the latency histograms' buckets, in seconds. Millisecond steps up to 10 ms
/// and narrow ones up to 50 ms, so a p99 read from the histogram is good to about 10 % where
/// latency targets live (a 10 ms p99 must be told apart from 12 ms); coarse above.
const BUCKETS: [f64; 32] = [
    0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.01, 0.0125, 0.015,
    0.0175, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0,
    10.0, 30.0, 60.0,
];

/// A broker outage as the reachability probe saw it.
#[derive(Debug)]
pub struct Outage {
    /// When the first failed probe was sent.
    pub since: Instant,
    /// Whether it was logged yet.
    pub said: bool,
}

#[derive(Debug, Default)]
pub struct Metrics {
    /// `[delivery] sink`, once the relay runs: `walrelay_sink_info{sink}`.
    pub sink: std::sync::OnceLock<&'static str>,
    /// Acknowledged records by topic and events by source table, through
    /// [`Metrics::count_published`] (which bounds both).
    published: Mutex<Published>,
    pub delivery_errors: AtomicU64,
    pub dead_lettered: AtomicU64,
    /// Non-transactional logical messages refused (`[outbox] non_transactional_messages`).
    pub messages_refused: AtomicU64,
    /// Span contexts (`tracing.span.context.field`) that could not be read: relayed without.
    pub trace_context_invalid: AtomicU64,
    /// Relay spans sent to `[tracing] otlp_endpoint`, and those dropped: the export queue was
    /// full, or the receiver refused or could not be reached.
    pub spans_exported: AtomicU64,
    pub spans_dropped: AtomicU64,
    pub inflight_records: AtomicU64,
    pub inflight_bytes: AtomicU64,
    /// Where the relay stands in the WAL: one snapshot, published by the relay loop's
    /// `Progress` only.
    positions: Mutex<Positions>,
    pub transactions: AtomicU64,
    /// Exactly-once: Kafka transactions committed, and those whose commit failed.
    pub kafka_transactions: AtomicU64,
    pub kafka_transactions_failed: AtomicU64,
    /// Exactly-once: the commit LSN the progress topic holds (0: none yet).
    pub progress_lsn: AtomicU64,
    pub keepalives: AtomicU64,
    pub reconnects: AtomicU64,
    /// A session is streaming from the slot right now.
    pub streaming: AtomicBool,
    /// A broker answered the producer's last metadata probe (`delivery::producer::reachability`).
    pub broker_up: AtomicBool,
    /// A probe has asked the broker at least once: until then (waiting to create the slot,
    /// standing by) whether it is up is not known, and `walrelay_broker_up` is left out.
    pub broker_asked: AtomicBool,
    /// The current broker outage, across sessions; `None` while a broker answers. Kept by
    /// `delivery::producer::reachability` only.
    pub broker_outage: Mutex<Option<Outage>>,
    /// Why the broker refuses the producer's SASL login, with the fix, while it does: set by
    /// the producer's error callback, cleared by the next probe a broker answers.
    pub broker_login_refused: Mutex<Option<String>>,
    /// The last delivery report was a failure and no record has been acknowledged since. Kept
    /// across sessions: a broker that refuses records (NOT_ENOUGH_REPLICAS) answers metadata
    /// requests, so `broker_up` alone would call the relay ready while nothing gets through.
    pub delivery_failing: AtomicBool,
    /// The schema registry does not answer while a record waits for its schema's id
    /// (`crate::registry`): delivery is held.
    pub registry_unreachable: AtomicBool,
    /// Under-replicated partitions (ISR smaller than the replica set) of the topic of the last
    /// failed delivery, read from the cluster's metadata then; 0 again at the next ack.
    pub under_replicated_partitions: AtomicU64,
    /// Retention (`[retention]`): rows deleted plus the rows of dropped partitions.
    pub purged_rows: AtomicU64,
    pub purged_partitions: AtomicU64,
    /// Unix time of the last purge that went through (0: none yet).
    pub purge_last_success: AtomicU64,
    /// Events `walrelay replay` sent and the broker acknowledged.
    pub replayed_events: AtomicU64,
    /// `[audit]` in `walrelay run`: the last audit's counts, by [`AUDIT_RESULTS`].
    pub audit_events: [AtomicU64; AUDIT_RESULTS.len()],
    /// Unix time of the last audit that finished (0: none yet).
    pub audit_last_success: AtomicU64,
    pub audit_failures: AtomicU64,
    /// `[audit] interval` in seconds (0: no `[audit]`), for the staleness alert.
    pub audit_interval_seconds: AtomicU64,
    /// When the oldest record not yet acknowledged by the broker was handed to the producer
    /// (µs since the Unix epoch); 0 when none waits. `/readyz` compares its age with
    /// `[http] ready_max_unacked_s`.
    pub oldest_unacked_sent_micros: AtomicI64,
    /// The slot's retained WAL (server position minus `restart_lsn`), sampled while streaming.
    pub slot_retained_wal_bytes: AtomicU64,
    /// `max_slot_wal_keep_size` in bytes: -1 unlimited, 0 not read yet.
    pub slot_wal_keep_limit_bytes: AtomicI64,
    /// When the relay's runtime last ran its heartbeat task (µs since the Unix epoch; 0: it
    /// has not started). `/healthz` fails when this stops moving: see [`crate::http::heartbeat`].
    pub relay_heartbeat_micros: AtomicI64,
    /// The slot as PostgreSQL last reported it (`source::retained`), for the console.
    pub slot: Mutex<Option<seen::SlotSample>>,
    /// Dead letters by reason and the latest ones, for the console.
    pub dead_letters: Mutex<seen::DeadLetters>,
    /// The last error Kafka gave a delivery (µs since the Unix epoch, the text), for the
    /// console; a refused login is [`Metrics::broker_login_refused`].
    pub broker_error: Mutex<Option<(i64, String)>>,
    commit_to_ack: Histogram,
    /// commit → the relay loop read the transaction from the stream: PostgreSQL's share of
    /// commit→ack, plus the loop's own wait to be scheduled.
    commit_to_read: Histogram,
}

#[derive(Debug)]
struct Histogram {
    /// Per bucket (not cumulative), plus one for +Inf.
    counts: [AtomicU64; BUCKETS.len() + 1],
    count: AtomicU64,
    /// Sum in microseconds.
    sum_micros: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }
}

/// The `result` label of `walrelay_audit_events`: the audit report's counts, in its order.
/// (`unroutable`, last, is the report's rows the router refuses, beside its topic counts.)
pub const AUDIT_RESULTS: [&str; 13] = [
    "delivered_once",
    "pending",
    "missing",
    "expired",
    "unverifiable",
    "duplicated",
    "duplicated_by_replay",
    "repaired",
    "out_of_order",
    "misplaced",
    "unexpected",
    "foreign",
    "unroutable",
];

impl Metrics {
    pub fn new() -> Arc<Metrics> {
        Arc::new(Metrics::default())
    }

    pub fn observe_commit_to_ack(&self, seconds: f64) {
        self.commit_to_ack.observe(seconds, 1);
    }

    /// `records` records of one transaction, all read `seconds` after its commit.
    pub fn observe_commit_to_read(&self, seconds: f64, records: u64) {
        self.commit_to_read.observe(seconds, records);
    }

    /// Where the relay stands in the WAL, all of it from one moment.
    /// How long the current broker outage has lasted, `None` while a broker answers.
    pub fn broker_down_for(&self) -> Option<std::time::Duration> {
        self.broker_outage
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|o| o.since.elapsed())
    }

    /// The sink as a sentence names it: "Kafka", or "the http sink".
    pub fn sink_named(&self) -> String {
        match self.sink.get() {
            None | Some(&"kafka") => "Kafka".to_string(),
            Some(sink) => format!("the {sink} sink"),
        }
    }

    /// Why the broker refuses the producer's login, while it does.
    pub fn login_refused(&self) -> Option<String> {
        self.broker_login_refused.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn positions(&self) -> Positions {
        *self.positions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes where the relay stands: the relay loop's `Progress` alone calls this.
    pub fn publish_positions(&self, positions: Positions) {
        *self.positions.lock().unwrap_or_else(|e| e.into_inner()) = positions;
    }

    /// Counts acknowledged records — `(topic, table, commit µs)` each: the record's topic and,
    /// when given, the outbox table (or `message:<prefix>`) whose event it relayed and its
    /// commit time — under one lock for the whole batch. Consecutive records of one topic (or
    /// table) are counted with one lookup: names are compared by pointer, as the router and
    /// the assembler hand out one `Arc` per name.
    ///
    /// Past [`MAX_TOPIC_LABELS`] topics (and [`MAX_TABLE_LABELS`] tables), those not seen yet
    /// count under [`OTHER_TOPICS`]: a label is a time series, and `route.topic.replacement`
    /// can derive topics from row data without bound. The first seen keep their own series for
    /// the life of the process, so a counter never changes series halfway (which would read as
    /// a reset to `rate()`).
    pub fn count_published<'a>(
        &self,
        acked: impl IntoIterator<Item = (&'a Arc<str>, Option<&'a Arc<str>>, i64)>,
    ) {
        let mut p = self.published.lock().unwrap_or_else(|e| e.into_inner());
        let mut topic_run: Option<(&Arc<str>, u64)> = None;
        let mut table_run: Option<(&Arc<str>, u64, i64)> = None;
        for (topic, table, commit) in acked {
            match &mut topic_run {
                Some((t, n)) if Arc::ptr_eq(t, topic) => *n += 1,
                run => {
                    if let Some((t, n)) = run.replace((topic, 1)) {
                        *bounded(&mut p.topics, t, MAX_TOPIC_LABELS) += n;
                    }
                }
            }
            let Some(table) = table else { continue };
            match &mut table_run {
                Some((t, n, last)) if Arc::ptr_eq(t, table) => {
                    *n += 1;
                    *last = (*last).max(commit);
                }
                run => {
                    if let Some((t, n, last)) = run.replace((table, 1, commit)) {
                        bounded(&mut p.tables, t, MAX_TABLE_LABELS).add(n, last);
                    }
                }
            }
        }
        if let Some((t, n)) = topic_run {
            *bounded(&mut p.topics, t, MAX_TOPIC_LABELS) += n;
        }
        if let Some((t, n, last)) = table_run {
            bounded(&mut p.tables, t, MAX_TABLE_LABELS).add(n, last);
        }
    }

    /// Every record acknowledged so far, all topics together.
    pub fn published_total(&self) -> u64 {
        self.published.lock().map(|p| p.topics.values().sum()).unwrap_or(0)
    }

    /// Notes a dead letter for the console.
    pub fn note_dead_letter(&self, seen: seen::DeadLetterSeen) {
        self.dead_lettered.fetch_add(1, Relaxed);
        self.dead_letters.lock().unwrap_or_else(|e| e.into_inner()).add(seen);
    }

    /// Notes the error of a failed delivery for the console.
    pub fn broker_failed(&self, error: &str) {
        *self.broker_error.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((unix_micros(), seen::cut(error)));
    }

    /// Events relayed by source table, as [`Metrics::count_published`] counted them.
    pub fn tables(&self) -> BTreeMap<Arc<str>, TableEvents> {
        self.published.lock().map(|p| p.tables.clone()).unwrap_or_default()
    }

    /// How long the oldest record not yet acknowledged has waited for the broker; zero when
    /// none waits.
    pub fn oldest_unacked_age(&self) -> std::time::Duration {
        match self.oldest_unacked_sent_micros.load(Relaxed) {
            0 => std::time::Duration::ZERO,
            sent => std::time::Duration::from_micros((unix_micros() - sent).max(0) as u64),
        }
    }

    /// The OpenMetrics text exposition (which Prometheus scrapes), encoded by
    /// `prometheus-client` from the values of this moment.
    pub fn render(self: &Arc<Self>) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(exposition::Exposition(self.clone())));
        let mut out = String::with_capacity(8192);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

/// What [`Metrics::count_published`] counts.
#[derive(Debug, Default, Clone)]
struct Published {
    topics: BTreeMap<Arc<str>, u64>,
    tables: BTreeMap<Arc<str>, TableEvents>,
}

/// Events relayed from one outbox table.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TableEvents {
    pub events: u64,
    /// The newest commit time of those events (µs since the Unix epoch).
    pub last_commit_micros: i64,
}

impl TableEvents {
    fn add(&mut self, events: u64, last_commit_micros: i64) {
        self.events += events;
        self.last_commit_micros = self.last_commit_micros.max(last_commit_micros);
    }
}

/// The entry of `key`, or — once `max` keys have their own — of [`OTHER_TOPICS`].
fn bounded<'a, V: Default>(
    map: &'a mut BTreeMap<Arc<str>, V>,
    key: &Arc<str>,
    max: usize,
) -> &'a mut V {
    let key = match map.contains_key(key) || map.len() < max {
        true => key.clone(),
        false => Arc::from(OTHER_TOPICS),
    };
    map.entry(key).or_default()
}

/// Topics with a `walrelay_records_published_total` series of their own, at most.
pub const MAX_TOPIC_LABELS: usize = 100;
/// Outbox tables with `walrelay_table_*` series of their own, at most: a thousand tenants'
/// tables, and a few more.
pub const MAX_TABLE_LABELS: usize = 1_100;
/// The `topic` label of the records of every topic past those: parentheses cannot occur in a
/// Kafka topic name, so it never collides with one.
pub const OTHER_TOPICS: &str = "(other)";

impl Histogram {
    /// `n` observations of the same value.
    fn observe(&self, seconds: f64, n: u64) {
        let i = BUCKETS.partition_point(|&b| b < seconds);
        self.counts[i].fetch_add(n, Relaxed);
        self.count.fetch_add(n, Relaxed);
        self.sum_micros.fetch_add((seconds.max(0.0) * 1e6) as u64 * n, Relaxed);
    }

    /// Non-cumulative counts per upper bound, `+Inf` (as `f64::MAX`) last, as the encoder
    /// wants them.
    fn buckets(&self) -> Vec<(f64, u64)> {
        let bounds = BUCKETS.iter().copied().chain([f64::MAX]);
        bounds.zip(self.counts.iter().map(|c| c.load(Relaxed))).collect()
    }
}

impl prometheus_client::encoding::EncodeMetric for Histogram {
    fn encode(&self, mut encoder: MetricEncoder) -> std::fmt::Result {
        let sum = self.sum_micros.load(Relaxed) as f64 / 1e6;
        let count = self.count.load(Relaxed);
        encoder.encode_histogram::<NoLabelSet>(sum, count, &self.buckets(), None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lsn::Lsn;

    #[test]
    fn renders_counters_by_topic_and_a_cumulative_histogram() {
        let m = Metrics::new();
        let topic: Arc<str> = Arc::from("outbox.event.Order");
        m.count_published([(&topic, None, 0), (&topic, None, 0), (&topic, None, 0)]);
        m.observe_commit_to_ack(0.004);
        m.observe_commit_to_ack(0.2);
        m.observe_commit_to_ack(0.005);
        m.observe_commit_to_ack(61.0);
        m.publish_positions(Positions {
            received: Lsn(1000),
            confirmed: Lsn(400),
            ..Positions::default()
        });
        let text = m.render();
        assert!(
            text.contains("walrelay_records_published_total{topic=\"outbox.event.Order\"} 3"),
            "{text}"
        );
        // Upper bounds are inclusive (le): 0.004 and 0.005 are both at or below 0.005.
        assert!(text.contains("walrelay_commit_to_ack_seconds_bucket{le=\"0.003\"} 0"), "{text}");
        assert!(text.contains("walrelay_commit_to_ack_seconds_bucket{le=\"0.005\"} 2"), "{text}");
        assert!(text.contains("walrelay_commit_to_ack_seconds_bucket{le=\"0.2\"} 3"), "{text}");
        assert!(text.contains("walrelay_commit_to_ack_seconds_bucket{le=\"60.0\"} 3"), "{text}");
        assert!(text.contains("walrelay_commit_to_ack_seconds_bucket{le=\"+Inf\"} 4"), "{text}");
        assert!(text.contains("walrelay_commit_to_ack_seconds_count 4"), "{text}");
        assert!(text.contains("walrelay_lag_bytes 600"), "{text}");
        m.purged_rows.fetch_add(1_500, Relaxed);
        m.purged_partitions.fetch_add(1, Relaxed);
        let text = m.render();
        assert!(
            text.contains("# TYPE walrelay_purged_rows counter\nwalrelay_purged_rows_total 1500\n"),
            "{text}"
        );
        assert!(text.contains("\nwalrelay_purged_partitions_total 1\n"), "{text}");
        assert!(text.contains("\nwalrelay_purge_last_success_seconds 0\n"), "{text}");
        // Nothing read yet: the second histogram is there, empty.
        assert!(text.contains("walrelay_commit_to_read_seconds_bucket{le=\"+Inf\"} 0"), "{text}");
        m.observe_commit_to_read(0.0007, 1);
        let text = m.render();
        assert!(text.contains("walrelay_commit_to_read_seconds_bucket{le=\"0.0005\"} 0"), "{text}");
        assert!(text.contains("walrelay_commit_to_read_seconds_bucket{le=\"0.001\"} 1"), "{text}");
        assert!(text.contains("walrelay_commit_to_read_seconds_count 1"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn process_metrics_and_lag_in_seconds_are_shown() {
        let m = Metrics::new();
        let text = m.render();
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_max_fds ",
            "process_start_time_seconds ",
            "walrelay_lag_seconds 0.0\n",
            "walrelay_last_confirmed_commit_timestamp_seconds 0.0\n",
        ] {
            assert!(text.contains(name), "{name} missing:\n{text}");
        }
        let oldest =
            |commit| Positions { oldest_unconfirmed_commit: commit, ..Positions::default() };
        let lag = oldest(Some(unix_micros() - 3_000_000)).lag_seconds();
        assert!((3.0..4.0).contains(&lag), "{lag}");
        assert_eq!(oldest(None).lag_seconds(), 0.0);
        // A commit "in the future" (PostgreSQL's clock ahead of this host's) is no lag.
        assert_eq!(oldest(Some(unix_micros() + 60_000_000)).lag_seconds(), 0.0);
        m.publish_positions(oldest(Some(unix_micros() - 3_000_000)));
        assert!(m.render().contains("walrelay_lag_seconds 3."), "{}", m.render());
    }

    #[test]
    fn records_count_per_topic_and_events_per_table_across_runs() {
        let m = Metrics::new();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("ta"), Arc::from("tb"));
        let (t1, t2): (Arc<str>, Arc<str>) = (Arc::from("t1.outbox"), Arc::from("t2.outbox"));
        m.count_published([
            (&a, Some(&t1), 10),
            (&a, Some(&t1), 30),
            (&b, Some(&t2), 20),
            (&a, None, 99),
            (&a, Some(&t1), 25),
        ]);
        let tables = m.tables();
        assert_eq!(tables[&t1], TableEvents { events: 3, last_commit_micros: 30 });
        assert_eq!(tables[&t2], TableEvents { events: 1, last_commit_micros: 20 });
        assert_eq!(m.published_total(), 5);
        // Another Arc of the same name counts under the same series.
        m.count_published([(&Arc::from("ta"), None, 0)]);
        assert!(m.render().contains("walrelay_records_published_total{topic=\"ta\"} 5\n"));
    }

    #[test]
    fn topics_past_the_bound_count_under_one_other_label() {
        let m = Metrics::new();
        for i in 0..MAX_TOPIC_LABELS + 50 {
            m.count_published([(&Arc::from(format!("t{i:03}")), None, 0)]);
        }
        // A topic seen before the bound keeps its own series.
        m.count_published([(&Arc::from("t000"), None, 0)]);
        let text = m.render();
        let series =
            text.lines().filter(|l| l.starts_with("walrelay_records_published_total{")).count();
        assert_eq!(series, MAX_TOPIC_LABELS + 1, "{text}");
        assert!(
            text.contains("walrelay_records_published_total{topic=\"(other)\"} 50\n"),
            "{text}"
        );
        assert!(text.contains("walrelay_records_published_total{topic=\"t000\"} 2\n"), "{text}");
    }
}
