//! The writer and the verdict of the fault tests and examples/chaos.rs: a writer that inserts
//! outbox rows in transactions of random size, numbering each aggregate's events in commit
//! order, and survives PostgreSQL restarts without losing track of what committed; the reader of
//! what arrived ([`collect_deliveries`]); and the verdict: lost, reordered aggregates
//! (first-delivery order vs commit order), duplicates.
//!
//! Everything runs on 127.0.0.1; every loop is bounded by a deadline.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::Client;
use walrelay::lsn::Lsn;

use super::kafka::{consume_while, Consumed, Next};
use super::postgres::connect;

/// A small deterministic PRNG (xorshift64*), so fault schedules can be replayed from a seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// Seeded from the clock and the pid; print `seed()` so a failure can be replayed.
    pub fn from_time() -> Rng {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        Rng::new(nanos ^ ((std::process::id() as u64) << 32))
    }

    pub fn seed(&self) -> u64 {
        self.0
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }
}

// ---------------------------------------------------------------------------------------------
// the writer

/// One committed outbox event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub id: String,
    /// `topic/key`, as [`Delivered::aggregate`].
    pub aggregate: String,
    /// Position of the event among its aggregate's events, in commit order (0, 1, 2, …).
    pub seq: u64,
    /// Index of its transaction in [`WriterReport::txns`].
    pub txn: usize,
}

/// One committed transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Txn {
    pub events: usize,
    /// The marker (e.g. the number of relay kills so far) read before the transaction was sent.
    pub marker_before: u64,
    /// `pg_current_wal_insert_lsn()` right after the commit: at or after its commit's end (the write
    /// position, `pg_current_wal_lsn()`, can lag it with synchronous_commit = off). `u64::MAX`
    /// when unknown (the connection broke during COMMIT and the commit was confirmed later).
    pub upper_lsn: Lsn,
}

#[derive(Debug, Clone)]
pub struct WriterConfig {
    pub url: String,
    /// `aggregatetype` values; aggregate `a` uses `types[a % types.len()]`.
    pub types: Vec<String>,
    /// Prefix of the relay's topics: topic = `{topic_prefix}.outbox.event.{type}`.
    pub topic_prefix: String,
    /// Aggregates `{agg_prefix}-0 .. {agg_prefix}-{aggregates-1}`.
    pub agg_prefix: String,
    /// The outbox table written (`outbox`, or a tenant's `t1.outbox`).
    pub table: String,
    pub aggregates: usize,
    /// Rows per transaction: uniform in min_txn..=max_txn.
    pub min_txn: usize,
    pub max_txn: usize,
    /// Stop after this many events (None: until stopped).
    pub max_events: Option<usize>,
    /// Events per second at most (None: as fast as PostgreSQL takes them).
    pub rate: Option<f64>,
    /// Pause after each transaction.
    pub pause: Duration,
    /// Extra bytes of padding in each payload.
    pub pad: usize,
    /// Read before each transaction into [`Txn::marker_before`].
    pub marker: Option<Arc<AtomicU64>>,
    pub seed: u64,
    /// How long to keep trying to reconnect after PostgreSQL went away.
    pub reconnect_for: Duration,
}

impl WriterConfig {
    pub fn new(url: &str, topic_prefix: &str, types: &[&str], aggregates: usize) -> WriterConfig {
        WriterConfig {
            url: url.to_string(),
            types: types.iter().map(|t| t.to_string()).collect(),
            topic_prefix: topic_prefix.to_string(),
            agg_prefix: "agg".into(),
            table: "outbox".into(),
            aggregates,
            min_txn: 1,
            max_txn: 8,
            max_events: None,
            rate: None,
            pause: Duration::ZERO,
            pad: 0,
            marker: None,
            seed: Rng::from_time().seed(),
            reconnect_for: Duration::from_secs(60),
        }
    }

    pub fn topics(&self) -> Vec<String> {
        let mut t: Vec<String> = self
            .types
            .iter()
            .map(|ty| format!("{}.outbox.event.{ty}", self.topic_prefix))
            .collect();
        t.truncate(self.aggregates.min(self.types.len()));
        t
    }
}

#[derive(Debug, Clone, Default)]
pub struct WriterReport {
    pub events: Vec<Event>,
    pub txns: Vec<Txn>,
    /// Times the connection broke and the writer reconnected.
    pub reconnects: usize,
    /// Transactions whose COMMIT outcome was unknown and that turned out committed.
    pub commits_confirmed_after_reconnect: usize,
    pub elapsed: Duration,
}

impl WriterReport {
    pub fn ids(&self) -> HashSet<String> {
        self.events.iter().map(|e| e.id.clone()).collect()
    }
}

pub struct Writer {
    stop: Arc<AtomicBool>,
    committed: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<Result<WriterReport, String>>,
}

impl Writer {
    /// Starts writing on the current runtime.
    pub fn spawn(cfg: WriterConfig) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let committed = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(write(cfg, Arc::clone(&stop), Arc::clone(&committed)));
        Writer { stop, committed, task }
    }

    /// Events committed so far.
    pub fn committed(&self) -> u64 {
        self.committed.load(Ordering::Relaxed)
    }

    /// Waits until at least `n` events are committed: a fault is injected mid-stream, not
    /// before the first row or after the last.
    pub async fn wait_committed(&self, n: u64, deadline: Duration) -> bool {
        super::wait_until(&format!("{n} events committed"), deadline, || async move {
            self.committed() >= n
        })
        .await
    }

    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Asks it to stop after the current transaction and waits for its report.
    pub async fn stop(self) -> WriterReport {
        self.stop.store(true, Ordering::Relaxed);
        self.join().await
    }

    /// Waits until it has written `max_events`.
    pub async fn join(self) -> WriterReport {
        match self.task.await {
            Ok(Ok(report)) => report,
            Ok(Err(e)) => panic!("outbox writer failed: {e}"),
            Err(e) => panic!("outbox writer panicked: {e}"),
        }
    }
}

fn uuid_for(seed: u64, n: u64) -> String {
    uuid::Uuid::from_u128(((seed as u128) << 64) | n as u128).to_string()
}

async fn write(
    cfg: WriterConfig,
    stop: Arc<AtomicBool>,
    committed: Arc<AtomicU64>,
) -> Result<WriterReport, String> {
    let started = Instant::now();
    let mut rng = Rng::new(cfg.seed);
    // The ids' upper 64 bits: distinct per writer even with equal seeds.
    let id_tag = rng.next_u64();
    let mut report = WriterReport::default();
    let mut next_seq = vec![0u64; cfg.aggregates];
    let mut client = connect(&cfg.url).await.map_err(|e| format!("connect: {e}"))?;
    let pad = "x".repeat(cfg.pad);
    let mut n: u64 = 0;
    loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let remaining = cfg.max_events.map(|m| m.saturating_sub(report.events.len()));
        if remaining == Some(0) {
            break;
        }
        if let Some(rate) = cfg.rate {
            let due = Duration::from_secs_f64(report.events.len() as f64 / rate);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                tokio::time::sleep(wait).await;
            }
        }
        let low = cfg.min_txn.clamp(1, cfg.max_txn.max(1)) as u64;
        let mut size = rng.range(low, cfg.max_txn.max(1) as u64) as usize;
        if let Some(r) = remaining {
            size = size.min(r);
        }
        // The transaction's rows: (id, aggregate index, seq).
        let rows: Vec<(String, usize, u64)> = (0..size)
            .map(|i| {
                let a = rng.range(0, cfg.aggregates as u64 - 1) as usize;
                (uuid_for(id_tag, n + i as u64), a, 0)
            })
            .collect();
        // Sequence numbers: taken in row order (the WAL order inside the transaction).
        let mut seqs = next_seq.clone();
        let rows: Vec<(String, usize, u64)> = rows
            .into_iter()
            .map(|(id, a, _)| {
                let s = seqs[a];
                seqs[a] += 1;
                (id, a, s)
            })
            .collect();
        let mut sql = format!(
            "BEGIN; INSERT INTO {} (id, aggregatetype, aggregateid, type, payload) VALUES ",
            cfg.table
        );
        for (i, (id, a, s)) in rows.iter().enumerate() {
            if i > 0 {
                sql.push(',');
            }
            sql.push_str(&format!(
                "('{id}', '{ty}', '{p}-{a}', 'E', '{{\"seq\": {s}, \"n\": {nn}, \"pad\": \"{pad}\"}}')",
                ty = cfg.types[a % cfg.types.len()],
                p = cfg.agg_prefix,
                nn = n + i as u64,
            ));
        }
        sql.push_str("; COMMIT; SELECT pg_current_wal_insert_lsn()::text;");
        let marker_before = cfg.marker.as_ref().map_or(0, |m| m.load(Ordering::SeqCst));
        let upper_lsn = match client.simple_query(&sql).await {
            Ok(messages) => messages
                .iter()
                .find_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => {
                        r.get(0).map(|t| t.parse().expect("pg_current_wal_insert_lsn is an LSN"))
                    }
                    _ => None,
                })
                .unwrap_or(Lsn(u64::MAX)),
            // The connection broke, or the server is restarting (57xxx: admin shutdown, cannot
            // connect now): the COMMIT may or may not have happened.
            Err(e)
                if e.code().is_none()
                    || client.is_closed()
                    || e.code().map(|c| c.code()).is_some_and(|c| c.starts_with("57")) =>
            {
                report.reconnects += 1;
                client = reconnect(&cfg.url, cfg.reconnect_for).await?;
                let exists = client
                    .query_opt(
                        &format!("SELECT 1 FROM {} WHERE id = $1::text::uuid", cfg.table),
                        &[&rows[0].0],
                    )
                    .await
                    .map_err(|e| format!("check commit after reconnect: {e}"))?;
                if exists.is_none() {
                    // Rolled back: write the same rows again (same ids, same numbers).
                    continue;
                }
                report.commits_confirmed_after_reconnect += 1;
                Lsn(u64::MAX)
            }
            Err(e) => {
                let detail = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
                return Err(format!("insert failed: {e}: {detail}"));
            }
        };
        let txn = report.txns.len();
        report.txns.push(Txn { events: rows.len(), marker_before, upper_lsn });
        for (id, a, s) in rows {
            report.events.push(Event {
                id,
                aggregate: format!(
                    "{}.outbox.event.{}/{}-{a}",
                    cfg.topic_prefix,
                    cfg.types[a % cfg.types.len()],
                    cfg.agg_prefix
                ),
                seq: s,
                txn,
            });
        }
        next_seq = seqs;
        n += size as u64;
        committed.store(report.events.len() as u64, Ordering::Relaxed);
        if !cfg.pause.is_zero() {
            tokio::time::sleep(cfg.pause).await;
        }
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

async fn reconnect(url: &str, within: Duration) -> Result<Client, String> {
    let start = Instant::now();
    loop {
        match connect(url).await {
            Ok(c) => return Ok(c),
            Err(e) if start.elapsed() < within => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(format!("could not reconnect within {within:?}: {e}")),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// what arrived

/// One delivered outbox event, as the writer's payload describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub id: String,
    /// `topic/key`: the aggregate.
    pub aggregate: String,
    pub seq: u64,
    pub partition: i32,
    pub offset: i64,
    /// The record's timestamp: when walrelay handed it to librdkafka (CreateTime).
    pub timestamp_ms: Option<i64>,
}

impl Delivered {
    /// From a record whose value is a writer payload (`{"seq": n, …}`); None otherwise.
    pub fn from_record(r: &Consumed) -> Option<Delivered> {
        let id = r.header_str("id")?.to_string();
        let key = r.key_str()?;
        let value: serde_json::Value = serde_json::from_slice(r.value.as_deref()?).ok()?;
        Some(Delivered {
            id,
            aggregate: format!("{}/{key}", r.topic),
            seq: value.get("seq")?.as_u64()?,
            partition: r.partition,
            offset: r.offset,
            timestamp_ms: r.timestamp_ms,
        })
    }
}

/// Reads `topics` until every id in `want` was delivered, then `quiet` more without a new
/// record (to catch trailing duplicates), or until `deadline`. Keeps only what the verdict
/// needs (no payloads), so a million records fit.
pub async fn collect_deliveries(
    bootstrap: &str,
    topics: &[String],
    want: &HashSet<String>,
    quiet: Duration,
    deadline: Duration,
) -> Vec<Delivered> {
    let mut out = Vec::with_capacity(want.len());
    let mut seen: HashSet<String> = HashSet::with_capacity(want.len());
    let mut missing = want.len();
    let mut last_new = Instant::now();
    consume_while(bootstrap, topics, deadline, |next| {
        match next {
            Next::Record(r) => {
                last_new = Instant::now();
                if let Some(d) = Delivered::from_record(&r) {
                    if seen.insert(d.id.clone()) && want.contains(&d.id) {
                        missing -= 1;
                    }
                    out.push(d);
                }
            }
            Next::Idle => {}
        }
        !(missing == 0 && last_new.elapsed() >= quiet)
    })
    .await;
    out
}

// ---------------------------------------------------------------------------------------------
// the verdict

#[derive(Debug, Clone, Default)]
pub struct Verdict {
    pub committed: usize,
    pub delivered: usize,
    pub unique: usize,
    /// Committed events never delivered (at most 20 listed; `lost` counts all).
    pub lost: usize,
    pub lost_ids: Vec<String>,
    /// Aggregates whose first deliveries are not in commit order, or that span two partitions.
    pub reordered: usize,
    pub reordered_detail: Vec<String>,
    /// Deliveries beyond the first of an id.
    pub duplicates: usize,
    /// Ids delivered more than once, with the number of deliveries.
    pub duplicated: HashMap<String, usize>,
    /// Deliveries of ids nobody committed.
    pub unexpected: usize,
    /// What a second reader, assigned every partition from offset 0, found of the lost events
    /// (set by [`super::readback::read_back`] when some were lost): it tells a
    /// reader that missed records from records Kafka never had.
    pub second_look: Option<String>,
}

impl Verdict {
    pub fn ok(&self) -> bool {
        self.lost == 0 && self.reordered == 0 && self.unexpected == 0
    }

    pub fn summary(&self) -> String {
        format!(
            "committed {}, delivered {} ({} unique), lost {}, reordered aggregates {}, duplicates {}, unexpected {}",
            self.committed,
            self.delivered,
            self.unique,
            self.lost,
            self.reordered,
            self.duplicates,
            self.unexpected
        ) + &self.second_look.as_ref().map_or(String::new(), |s| format!("; {s}"))
    }
}

/// Compares what was delivered with what was committed: every committed id delivered; per
/// aggregate one partition and the order of first deliveries equal to commit order (the
/// writer's sequence numbers).
pub fn verify(committed: &[Event], delivered: &[Delivered]) -> Verdict {
    let mut v =
        Verdict { committed: committed.len(), delivered: delivered.len(), ..Verdict::default() };
    let committed_ids: HashMap<&str, &Event> =
        committed.iter().map(|e| (e.id.as_str(), e)).collect();
    let mut count: HashMap<&str, usize> = HashMap::with_capacity(delivered.len());
    for d in delivered {
        *count.entry(d.id.as_str()).or_default() += 1;
    }
    v.unique = count.len();
    for (id, n) in &count {
        if *n > 1 {
            v.duplicates += n - 1;
            v.duplicated.insert(id.to_string(), *n);
        }
        if !committed_ids.contains_key(id) {
            v.unexpected += n;
        }
    }
    for e in committed {
        if !count.contains_key(e.id.as_str()) {
            v.lost += 1;
            if v.lost_ids.len() < 20 {
                v.lost_ids.push(format!("{} ({} #{})", e.id, e.aggregate, e.seq));
            }
        }
    }
    // Per aggregate, in log order.
    let mut by_agg: HashMap<&str, Vec<&Delivered>> = HashMap::new();
    for d in delivered {
        if committed_ids.contains_key(d.id.as_str()) {
            by_agg.entry(d.aggregate.as_str()).or_default().push(d);
        }
    }
    for (agg, mut ds) in by_agg {
        ds.sort_by_key(|d| (d.partition, d.offset));
        let partitions: HashSet<i32> = ds.iter().map(|d| d.partition).collect();
        if partitions.len() > 1 {
            v.reordered += 1;
            if v.reordered_detail.len() < 20 {
                v.reordered_detail.push(format!("{agg}: spread over partitions {partitions:?}"));
            }
            continue;
        }
        let mut first: Vec<u64> = Vec::new();
        let mut seen = HashSet::new();
        for d in &ds {
            if seen.insert(d.id.as_str()) {
                first.push(d.seq);
            }
        }
        if let Some(w) = first.windows(2).position(|w| w[0] >= w[1]) {
            v.reordered += 1;
            if v.reordered_detail.len() < 20 {
                let lo = w.saturating_sub(3);
                let hi = (w + 5).min(first.len());
                v.reordered_detail.push(format!(
                    "{agg}: first deliveries out of commit order at position {w}: … {:?} …",
                    &first[lo..hi]
                ));
            }
        }
    }
    v
}
