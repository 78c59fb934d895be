//! What the relay counts, and its Prometheus text rendering for `/metrics`.
//!
//! The relay loop is the only writer of most values; atomics let the HTTP task read them
//! without locking the loop. Per-topic counts sit behind a mutex the loop takes once per batch
//! of delivery reports.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Upper bounds of the latency histograms' buckets, in seconds. Millisecond steps up to 10 ms
/// and narrow ones up to 50 ms, so a p99 read from the histogram is good to about 10 % where
/// latency targets live (a 10 ms p99 must be told apart from 12 ms); coarse above.
const BUCKETS: [f64; 32] = [
    0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.01, 0.0125, 0.015,
    0.0175, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0,
    10.0, 30.0, 60.0,
];

#[derive(Debug, Default)]
pub struct Metrics {
    pub published: Mutex<BTreeMap<Arc<str>, u64>>,
    pub delivery_errors: AtomicU64,
    pub dead_lettered: AtomicU64,
    /// Non-transactional logical messages refused (`[outbox] non_transactional_messages`).
    pub messages_refused: AtomicU64,
    pub inflight_records: AtomicU64,
    pub inflight_bytes: AtomicU64,
    pub confirmed_lsn: AtomicU64,
    /// The newest WAL position the server reported (keepalives, data).
    pub server_wal_end: AtomicU64,
    pub transactions: AtomicU64,
    pub keepalives: AtomicU64,
    pub reconnects: AtomicU64,
    /// A session is streaming from the slot right now.
    pub streaming: AtomicBool,
    /// librdkafka reaches at least one broker (false after "all brokers down").
    pub broker_up: AtomicBool,
    /// Retention (`[retention]`): rows deleted plus the rows of dropped partitions.
    pub purged_rows: AtomicU64,
    pub purged_partitions: AtomicU64,
    /// Unix time of the last purge that went through (0: none yet).
    pub purge_last_success: AtomicU64,
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

    /// Replication lag: the server's WAL end minus what the slot has confirmed.
    pub fn lag_bytes(&self) -> u64 {
        self.server_wal_end.load(Relaxed).saturating_sub(self.confirmed_lsn.load(Relaxed))
    }

    /// Prometheus text exposition format 0.0.4.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        let _ = writeln!(
            out,
            "# HELP walrelay_records_published_total Records acknowledged by Kafka, by topic.\n\
             # TYPE walrelay_records_published_total counter"
        );
        let published = self.published.lock().map(|m| m.clone()).unwrap_or_default();
        for (topic, n) in &published {
            let _ = writeln!(
                out,
                "walrelay_records_published_total{{topic=\"{}\"}} {n}",
                escape(topic)
            );
        }
        let scalar = |out: &mut String, name: &str, kind: &str, help: &str, v: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
        };
        scalar(
            &mut out,
            "walrelay_delivery_errors_total",
            "counter",
            "Delivery reports that failed (the session restarts from the confirmed position).",
            self.delivery_errors.load(Relaxed),
        );
        scalar(
            &mut out,
            "walrelay_dead_lettered_total",
            "counter",
            "Rows and records sent to the dead-letter topic.",
            self.dead_lettered.load(Relaxed),
        );
        scalar(
            &mut out,
            "walrelay_messages_refused_total",
            "counter",
            "Non-transactional logical decoding messages refused (logged; dead-lettered when [dead_letter] is configured): PostgreSQL sends them even when their transaction rolls back.",
            self.messages_refused.load(Relaxed),
        );
        scalar(
            &mut out,
            "walrelay_inflight_records",
            "gauge",
            "Records read from the WAL whose position is not yet confirmable.",
            self.inflight_records.load(Relaxed),
        );
        scalar(
            &mut out,
            "walrelay_inflight_bytes",
            "gauge",
            "Bytes of those records.",
            self.inflight_bytes.load(Relaxed),
        );
        scalar(
            &mut out,
            "walrelay_confirmed_lsn",
            "gauge",
            "The WAL position confirmed to PostgreSQL.",
            self.confirmed_lsn.load(Relaxed),
        );
        scalar(
            &mut out,
            "walrelay_lag_bytes",
            "gauge",
            "Server WAL end minus the confirmed position.",
            self.lag_bytes(),
        );
        scalar(
            &mut out,
            "walrelay_transactions_total",
            "counter",
            "Committed transactions read from the slot.",
            self.transactions.load(Relaxed),
        );
        scalar(
            &mut out,
            "walrelay_keepalives_total",
            "counter",
            "Primary keepalive messages received.",
            self.keepalives.load(Relaxed),
        );
        scalar(
            &mut out,
            "walrelay_reconnects_total",
            "counter",
            "Sessions started after the first one.",
            self.reconnects.load(Relaxed),
        );
        scalar(
            &mut out,
            "walrelay_streaming",
            "gauge",
            "1 while a session streams from the slot.",
            self.streaming.load(Relaxed) as u64,
        );
        scalar(
            &mut out,
            "walrelay_purged_rows_total",
            "counter",
            "Outbox rows purged by [retention]: rows deleted plus the rows of dropped partitions.",
            self.purged_rows.load(Relaxed),
        );
        scalar(
            &mut out,
            "walrelay_purged_partitions_total",
            "counter",
            "Outbox partitions dropped by [retention].",
            self.purged_partitions.load(Relaxed),
        );
        scalar(
            &mut out,
            "walrelay_purge_last_success_seconds",
            "gauge",
            "Unix time of the last [retention] purge that went through (0: none yet).",
            self.purge_last_success.load(Relaxed),
        );

        self.commit_to_ack.render(
            &mut out,
            "walrelay_commit_to_ack_seconds",
            "From the transaction's commit to the broker's acknowledgement of each record.",
        );
        self.commit_to_read.render(
            &mut out,
            "walrelay_commit_to_read_seconds",
            "From the transaction's commit to the relay reading it from the replication stream, per record: PostgreSQL's share of commit to ack, plus the relay's wait to be scheduled.",
        );
        out
    }
}

impl Histogram {
    /// `n` observations of the same value.
    fn observe(&self, seconds: f64, n: u64) {
        let i = BUCKETS.partition_point(|&b| b < seconds);
        self.counts[i].fetch_add(n, Relaxed);
        self.count.fetch_add(n, Relaxed);
        self.sum_micros.fetch_add((seconds.max(0.0) * 1e6) as u64 * n, Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, bound) in BUCKETS.iter().enumerate() {
            cumulative += self.counts[i].load(Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        cumulative += self.counts[BUCKETS.len()].load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
        let _ = writeln!(out, "{name}_sum {}", self.sum_micros.load(Relaxed) as f64 / 1e6);
        let _ = writeln!(out, "{name}_count {}", self.count.load(Relaxed));
    }
}

fn escape(label: &str) -> String {
    label.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_by_topic_and_a_cumulative_histogram() {
        let m = Metrics::new();
        m.published.lock().unwrap().insert(Arc::from("outbox.event.Order"), 3);
        m.observe_commit_to_ack(0.004);
        m.observe_commit_to_ack(0.2);
        m.observe_commit_to_ack(0.005);
        m.observe_commit_to_ack(61.0);
        m.server_wal_end.store(1000, Relaxed);
        m.confirmed_lsn.store(400, Relaxed);
        let text = m.render();
        assert!(
            text.contains("walrelay_records_published_total{topic=\"outbox.event.Order\"} 3"),
            "{text}"
        );
        // Upper bounds are inclusive (le): 0.004 and 0.005 are both at or below 0.005.
        assert!(text.contains("walrelay_commit_to_ack_seconds_bucket{le=\"0.003\"} 0"), "{text}");
        assert!(text.contains("walrelay_commit_to_ack_seconds_bucket{le=\"0.005\"} 2"), "{text}");
        assert!(text.contains("walrelay_commit_to_ack_seconds_bucket{le=\"0.2\"} 3"), "{text}");
        assert!(text.contains("walrelay_commit_to_ack_seconds_bucket{le=\"60\"} 3"), "{text}");
        assert!(text.contains("walrelay_commit_to_ack_seconds_bucket{le=\"+Inf\"} 4"), "{text}");
        assert!(text.contains("walrelay_commit_to_ack_seconds_count 4"), "{text}");
        assert!(text.contains("walrelay_lag_bytes 600"), "{text}");
        m.purged_rows.fetch_add(1_500, Relaxed);
        m.purged_partitions.fetch_add(1, Relaxed);
        let text = m.render();
        assert!(
            text.contains(
                "# TYPE walrelay_purged_rows_total counter\nwalrelay_purged_rows_total 1500\n"
            ),
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
    }
}
