//! Which series `/metrics` shows, with their names, types and help: a `prometheus-client`
//! collector over [`Metrics`]' atomics, run on each scrape (on the HTTP thread).
//!
//! A collector rather than the crate's own counter types: the relay loop keeps writing plain
//! atomics (no lock, no allocation per record), and the crate does the encoding (names,
//! `_total` suffixes, label quoting, histogram layout, `# EOF`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::{process, Metrics, Published, AUDIT_RESULTS};
use crate::positions::Positions;

#[derive(Debug)]
pub(super) struct Exposition(pub Arc<Metrics>);

/// A counter kept in one of [`Metrics`]' atomics; `name` without the `_total` the encoder
/// appends.
fn count(e: &mut DescriptorEncoder, name: &str, help: &str, v: &AtomicU64) -> std::fmt::Result {
    let descriptor = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(v.load(Relaxed)).encode(descriptor)
}

fn gauge<N>(e: &mut DescriptorEncoder, name: &str, help: &str, v: N) -> std::fmt::Result
where
    N: prometheus_client::encoding::EncodeGaugeValue,
{
    ConstGauge::new(v).encode(e.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

impl Collector for Exposition {
    /// One function per group of series, called in the order scrapes have always seen them.
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let m = &*self.0;
        // One snapshot: the lag is the server's position and the confirmation of one moment.
        let positions = m.positions();
        let published = m.published.lock().map(|p| p.clone()).unwrap_or_default();
        encode_published(&mut e, &published)?;
        encode_delivery(&mut e, m)?;
        encode_positions(&mut e, m, &positions)?;
        encode_session(&mut e, m)?;
        encode_exactly_once(&mut e, m)?;
        encode_health(&mut e, m)?;
        encode_beside_the_data_path(&mut e, m)?;
        encode_latency(&mut e, m)?;
        encode_process(&mut e, &process::sample())
    }
}

/// Records acknowledged by topic, and events relayed by outbox table (a tenant's, with one
/// outbox per tenant; none with `[http] table_metrics = false`).
fn encode_published(e: &mut DescriptorEncoder, published: &Published) -> std::fmt::Result {
    let mut family = e.encode_descriptor(
        "walrelay_records_published",
        "Records acknowledged by Kafka, by topic (the first 100 topics seen; later ones count under topic=\"(other)\").",
        None,
        MetricType::Counter,
    )?;
    for (topic, n) in &published.topics {
        let topic = escape(topic);
        ConstCounter::new(*n).encode(family.encode_family(&[("topic", topic.as_str())])?)?;
    }
    if published.tables.is_empty() {
        return Ok(());
    }
    let mut family = e.encode_descriptor(
        "walrelay_table_events",
        "Events relayed (acknowledged by Kafka, dead letters left out), by outbox table or message:<prefix> (the first 1100 seen; later ones count under table=\"(other)\").",
        None,
        MetricType::Counter,
    )?;
    for (table, t) in &published.tables {
        let table = escape(table);
        ConstCounter::new(t.events).encode(family.encode_family(&[("table", table.as_str())])?)?;
    }
    let mut family = e.encode_descriptor(
        "walrelay_table_last_event_timestamp_seconds",
        "Commit time (Unix seconds) of the newest event relayed from each outbox table: a tenant that went quiet shows here.",
        None,
        MetricType::Gauge,
    )?;
    for (table, t) in &published.tables {
        let table = escape(table);
        ConstGauge::new(t.last_commit_micros as f64 / 1e6)
            .encode(family.encode_family(&[("table", table.as_str())])?)?;
    }
    Ok(())
}

/// What did not reach Kafka as itself (failed reports, dead letters, refused messages), and
/// the trace context and spans beside the records.
fn encode_delivery(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    count(
        e,
        "walrelay_delivery_errors",
        "Delivery reports that failed (the session restarts from the confirmed position).",
        &m.delivery_errors,
    )?;
    count(
        e,
        "walrelay_dead_lettered",
        "Rows and records sent to the dead-letter topic.",
        &m.dead_lettered,
    )?;
    count(e, "walrelay_trace_context_invalid", "Outbox rows whose span context (tracing.span.context.field) could not be read; they were relayed without trace headers.", &m.trace_context_invalid)?;
    count(
        e,
        "walrelay_spans_exported",
        "Relay spans the OTLP receiver ([tracing] otlp_endpoint) accepted.",
        &m.spans_exported,
    )?;
    count(e, "walrelay_spans_dropped", "Relay spans not exported: the export queue was full, or the receiver refused them or could not be reached.", &m.spans_dropped)?;
    count(e, "walrelay_messages_refused", "Non-transactional logical decoding messages refused (logged; dead-lettered when [dead_letter] is configured): PostgreSQL sends them even when their transaction rolls back.", &m.messages_refused)
}

/// Where the relay stands in the WAL: what is in flight, what is confirmed, and the lag in
/// bytes and seconds, from one [`Positions`] snapshot.
fn encode_positions(e: &mut DescriptorEncoder, m: &Metrics, p: &Positions) -> std::fmt::Result {
    gauge(
        e,
        "walrelay_inflight_records",
        "Records read from the WAL whose position is not yet confirmable.",
        m.inflight_records.load(Relaxed),
    )?;
    gauge(e, "walrelay_inflight_bytes", "Bytes of those records.", m.inflight_bytes.load(Relaxed))?;
    gauge(
        e,
        "walrelay_confirmed_lsn",
        "The WAL position confirmed to PostgreSQL.",
        p.confirmed.as_u64(),
    )?;
    gauge(e, "walrelay_lag_bytes", "Server WAL end minus the confirmed position.", p.lag_bytes())?;
    gauge(e, "walrelay_lag_seconds", "Seconds since the commit of the oldest transaction read but not yet confirmed; 0 when caught up.", p.lag_seconds())?;
    let last = p.last_confirmed_commit.unwrap_or(0) as f64 / 1e6;
    gauge(e, "walrelay_last_confirmed_commit_timestamp_seconds", "Commit time (Unix seconds) of the last transaction confirmed to PostgreSQL; 0 until one is.", last)
}

/// What the replication sessions read: transactions and keepalives, and how often a session
/// started again.
fn encode_session(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    count(
        e,
        "walrelay_transactions",
        "Committed transactions read from the slot.",
        &m.transactions,
    )?;
    count(e, "walrelay_keepalives", "Primary keepalive messages received.", &m.keepalives)?;
    count(e, "walrelay_reconnects", "Sessions started after the first one.", &m.reconnects)?;
    let Some(sink) = m.sink.get() else { return Ok(()) };
    let mut family = e.encode_descriptor(
        "walrelay_sink_info",
        "Where records go ([delivery] sink): always 1, the sink in its label.",
        None,
        MetricType::Gauge,
    )?;
    ConstGauge::new(1).encode(family.encode_family(&[("sink", *sink)])?)
}

/// Exactly-once's Kafka transactions and the position its progress topic holds.
fn encode_exactly_once(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    count(
        e,
        "walrelay_kafka_transactions",
        "Kafka transactions committed (exactly-once).",
        &m.kafka_transactions,
    )?;
    count(
        e,
        "walrelay_kafka_transaction_failures",
        "Kafka transactions whose commit failed; the session resumed from the last committed position (exactly-once).",
        &m.kafka_transactions_failed,
    )?;
    gauge(
        e,
        "walrelay_progress_lsn",
        "Commit LSN of the last PostgreSQL transaction a committed Kafka transaction holds, as a number (exactly-once; 0: none yet).",
        m.progress_lsn.load(Relaxed),
    )
}

/// Whether the relay can work: a session streaming, a broker answering, the partitions of a
/// failed delivery, and the WAL the slot holds against the server's limit.
fn encode_health(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    gauge(
        e,
        "walrelay_streaming",
        "1 while a session streams from the slot.",
        u64::from(m.streaming.load(Relaxed)),
    )?;
    // Left out until a probe asked: 0 would say "down" of a broker nobody asked yet.
    if m.broker_asked.load(Relaxed) {
        gauge(
            e,
            "walrelay_broker_up",
            "1 while a broker answers the relay's metadata probe (every 2 s); absent until the first probe (waiting to create the slot, standing by).",
            u64::from(m.broker_up.load(Relaxed)),
        )?;
    }
    gauge(e, "walrelay_kafka_under_replicated_partitions", "Partitions of the topic of the last failed delivery with fewer in-sync replicas than replicas, read from the cluster's metadata when it failed; 0 again at the next acknowledgement. Below the topic's min.insync.replicas the leader refuses acks=all records (NOT_ENOUGH_REPLICAS).", m.under_replicated_partitions.load(Relaxed))?;
    gauge(e, "walrelay_slot_retained_wal_bytes", "WAL the server keeps for the slot (its position minus the slot's restart_lsn), sampled every 10 s while streaming.", m.slot_retained_wal_bytes.load(Relaxed))?;
    gauge(e, "walrelay_slot_wal_keep_limit_bytes", "The server's max_slot_wal_keep_size in bytes: past it the slot is invalidated. -1: unlimited; 0: not read yet.", m.slot_wal_keep_limit_bytes.load(Relaxed))
}

/// The work beside the data path: `[retention]`'s purges, `walrelay replay`, and the in-run
/// `[audit]` (its series sit between the purge counts and the purge's last success).
fn encode_beside_the_data_path(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    count(
        e,
        "walrelay_purged_rows",
        "Outbox rows purged by [retention]: rows deleted plus the rows of dropped partitions.",
        &m.purged_rows,
    )?;
    count(
        e,
        "walrelay_purged_partitions",
        "Outbox partitions dropped by [retention].",
        &m.purged_partitions,
    )?;
    count(
        e,
        "walrelay_replayed_events",
        "Retained outbox rows `walrelay replay` re-published and the broker acknowledged.",
        &m.replayed_events,
    )?;
    encode_audit(e, m)?;
    gauge(
        e,
        "walrelay_purge_last_success_seconds",
        "Unix time of the last [retention] purge that went through (0: none yet).",
        m.purge_last_success.load(Relaxed),
    )
}

/// The last in-run `[audit]`: its window's events by result, when it last finished, how often
/// it runs, and the runs that could not finish.
fn encode_audit(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    let mut family = e.encode_descriptor(
        "walrelay_audit_events",
        "The last [audit] of walrelay run: its window's events by result (missing, duplicated, out_of_order, misplaced, unexpected are problems; expired: the broker's retention (Kafka's retention.ms, a stream's max_age) deleted what would tell; pending: too young).",
        None,
        MetricType::Gauge,
    )?;
    for (result, n) in AUDIT_RESULTS.iter().zip(&m.audit_events) {
        ConstGauge::new(n.load(Relaxed)).encode(family.encode_family(&[("result", *result)])?)?;
    }
    gauge(
        e,
        "walrelay_audit_last_success_seconds",
        "Unix time of the last [audit] that finished (0: none yet).",
        m.audit_last_success.load(Relaxed),
    )?;
    gauge(
        e,
        "walrelay_audit_interval_seconds",
        "[audit] interval (0: no [audit] section).",
        m.audit_interval_seconds.load(Relaxed),
    )?;
    count(
        e,
        "walrelay_audit_failures",
        "[audit] runs that could not finish (logged; tried again at the next interval).",
        &m.audit_failures,
    )
}

/// The latency histograms: commit to the broker's ack, and commit to the relay's read.
fn encode_latency(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    m.commit_to_ack.encode(e.encode_descriptor(
        "walrelay_commit_to_ack_seconds",
        "From the transaction's commit to the broker's acknowledgement of each record.",
        None,
        MetricType::Histogram,
    )?)?;
    m.commit_to_read.encode(e.encode_descriptor(
        "walrelay_commit_to_read_seconds",
        "From the transaction's commit to the relay reading it from the replication stream, per record: PostgreSQL's share of commit to ack, plus the relay's wait to be scheduled.",
        None,
        MetricType::Histogram,
    )?)
}

fn encode_process(e: &mut DescriptorEncoder, p: &process::Sample) -> std::fmt::Result {
    if let Some(v) = p.cpu_seconds {
        ConstCounter::new(v).encode(e.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            None,
            MetricType::Counter,
        )?)?;
    }
    if let Some(v) = p.resident_bytes {
        gauge(e, "process_resident_memory_bytes", "Resident memory size in bytes.", v)?;
    }
    if let Some(v) = p.virtual_bytes {
        gauge(e, "process_virtual_memory_bytes", "Virtual memory size in bytes.", v)?;
    }
    if let Some(v) = p.start_time_seconds {
        gauge(
            e,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            v,
        )?;
    }
    if let Some(v) = p.open_fds {
        gauge(e, "process_open_fds", "Number of open file descriptors.", v)?;
    }
    if let Some(v) = p.max_fds {
        gauge(e, "process_max_fds", "Maximum number of open file descriptors.", v)?;
    }
    Ok(())
}

/// `prometheus-client` writes label values as given; the text format wants `\`, `"` and
/// newlines escaped. (Topics Kafka accepted cannot hold them; the escape is for what it may
/// accept one day.)
fn escape(label: &str) -> String {
    label.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}
