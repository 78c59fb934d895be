//! Audit: is every committed outbox event of a window in Kafka (or, with the NATS sink, in its
//! JetStream stream), once, in order, where the router puts it (`walrelay audit`)?
//!
//! The outbox table is the source of truth for as long as `[retention] keep` keeps its rows. The
//! audit reads the window's rows in one [`crate::snapshot`] and turns each into the record the
//! live relay sends (same router, same envelope, so the same topic, key, partition and event id),
//! then reads those topics from the offsets for the window's start (a margin before it) to their
//! end, with no consumer group (a JetStream stream's subjects from that time, with an ordered
//! consumer: [`jetstream`]; [`readback`] chooses), and compares:
//!
//! * **delivered**: in Kafka once;
//! * **missing**: not in Kafka, committed before `--settle` ago (younger ones are **pending**);
//! * **duplicated**: more than once (how many copies came from `walrelay replay`, by its header);
//! * **out of order**: for one key, Kafka holds the events in another order than they committed
//!   (known only with `track_commit_timestamp = on`);
//! * **misplaced**: in another partition than the router's key gives (Kafka only: a stream has
//!   no partitions);
//! * **unexpected**: a record whose event id is no row of the outbox tables (purged, or never
//!   committed).
//!
//! Kafka is read with `read_committed` under exactly-once, so an aborted Kafka transaction's
//! records are not counted. The event id is found where the envelope puts it ([`id`]): a header
//! (`id`, CloudEvents binary's `ce_id`), a JSON value's `"id"`, or a protobuf value's field 1.
//!
//! * **expired**: not in Kafka, in a partition whose records Kafka's retention deleted from
//!   before the event's commit: whether it was delivered cannot be known, and it is said so.
//!
//! Memory is bounded whatever the window: the expected records and the topics' records are
//! sorted by event id in [`spill::Sorter`]s of [`MEMORY_PER_SORT`] bytes each, which write
//! sorted runs to temporary files past it, and compared as two sorted streams.

mod compare;
mod expect;
mod id;
mod jetstream;
mod kafka;
pub mod lookup;
mod readback;
mod report;
mod spill;
pub mod task;

use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::error::Result;
use crate::snapshot::{self, Selection, Snapshot, BATCH_ROWS};

use self::compare::Judge;
pub use self::readback::ReadFrom;
pub use self::report::{Problem, ProblemKind, Report, TopicReport, PROBLEMS_KEPT};
use self::spill::Sorter;

/// Bytes each of the audit's sorters holds before it writes a run to disk: three of them, and
/// at most two filled at once.
pub const MEMORY_PER_SORT: usize = 8 << 20;

/// What one audit looks at.
#[derive(Debug, Clone)]
pub struct Options {
    pub selection: Selection,
    /// The timestamp column; `None`: `[retention] column` (or its default).
    pub column: Option<String>,
    /// Rows committed less than this long ago are pending, never missing.
    pub settle: Duration,
    /// Read Kafka `read_uncommitted` under exactly-once too: aborted Kafka transactions'
    /// records then count (as duplicates or unexpected).
    pub read_uncommitted: bool,
    /// A window with no rows is a clean report of nothing, not bad input.
    pub allow_empty: bool,
}

/// Runs the audit of the window `opts` selects.
pub async fn run(config: &Config, opts: Options) -> Result<Report> {
    let read = snapshot::Options {
        selection: opts.selection.clone(),
        column: opts.column.clone(),
        allow_empty: opts.allow_empty,
        places_only: true,
    };
    // Every row committed before this is in the snapshot Snapshot::open takes.
    let before_snapshot = crate::clock::unix_micros();
    let started = std::time::Instant::now();
    let mut snapshot = Snapshot::open(config, &read).await?;
    tracing::debug!(rows = snapshot.total, peak_rss_mb = peak_rss_mb(), "audit: snapshot open");
    // How far behind the relay is: what it has not confirmed may not be in Kafka yet (the slot
    // view reads shared memory, not the snapshot, so it is the present).
    let slot = crate::source::slot::slot(snapshot.control(), &config.source.slot).await;
    let slot_behind_bytes = slot.ok().flatten().and_then(|s| s.lag_bytes());
    // Every row of the snapshot committed before this position.
    let snapshot_lsn = snapshot_lsn(snapshot.control()).await;
    let expect::Expected { wants, topics, id_place, since_micros, refused, refused_count } =
        expect::read(&mut snapshot, config).await?;
    let commit_ordered = snapshot.commit_ordered();
    tracing::debug!(
        events = wants.len(),
        topics = topics.len(),
        peak_rss_mb = peak_rss_mb(),
        seconds = started.elapsed().as_secs_f64(),
        "audit: the window's rows read"
    );
    let read_committed = config.delivery.exactly_once() && !opts.read_uncommitted;
    let Some(id_place) = id_place else {
        // No rows (allowed by `allow_empty`), or none the router takes: nothing to compare.
        snapshot.close().await;
        let read_from = ReadFrom::of(config);
        let mut report = Report {
            order_checked: commit_ordered,
            read_committed,
            read_from,
            ..Report::default()
        };
        report.refused(config, refused, refused_count);
        report.finish();
        return Ok(report);
    };
    // A minute before the first row: the relay sends a record after its row committed, and
    // Kafka's timestamp is the send's unless the router sets one.
    let from_ms = since_micros / 1000 - 60_000;
    let copies = Sorter::new(MEMORY_PER_SORT);
    let (shape, copies) =
        readback::read(config, &topics, &id_place, from_ms, read_committed, copies).await?;
    tracing::debug!(
        records = shape.records,
        peak_rss_mb = peak_rss_mb(),
        seconds = started.elapsed().as_secs_f64(),
        "audit: the topics read"
    );
    let judge = Judge {
        topics: &topics,
        shape: &shape,
        settled_before: before_snapshot - opts.settle.as_micros() as i64,
        commit_ordered,
        read_committed,
        budget: MEMORY_PER_SORT,
        now_ms: before_snapshot / 1000,
    };
    let (mut report, strangers) = compare::compare(wants, copies, &judge)?;
    report.refused(config, refused, refused_count);
    report.read_from = shape.read_from;
    report.event_id_in = shape.event_id_in.clone();
    report.slot_behind_bytes = slot_behind_bytes;
    report.snapshot_lsn = snapshot_lsn;
    report.notes = shape.notes.clone();
    report.compacted_topics = (topics.iter().zip(&shape.configs))
        .filter(|(_, c)| c.compacted)
        .map(|(t, _)| t.to_string())
        .collect();
    for &(topic, partition, offset) in &shape.foreign {
        let why = format!("no event id in {}: another producer's record", shape.event_id_in);
        report.foreign("(none)", &topics[topic as usize], format!("{partition}@{offset}"), &why);
    }
    for (index, count) in shape.foreign_counts.iter().enumerate() {
        let listed = shape.foreign.iter().filter(|f| f.0 == index as u32).count() as u64;
        if *count > listed {
            // Counted, not listed one by one.
            let t = report.topics.entry(topics[index].to_string()).or_default();
            t.foreign += count - listed;
            report.problems_not_listed += count - listed;
        }
    }
    for (index, topic) in topics.iter().enumerate() {
        if let Some(t) = report.topics.get_mut(topic.as_ref()) {
            if t.expired > 0 || t.unverifiable > 0 {
                t.retention_ms = shape.configs.get(index).and_then(|c| c.retention_ms);
            }
        }
    }
    let who = compare::Strangers {
        messages: config.messages.is_some(),
        tenants: !config.outbox.patterns.is_empty(),
    };
    // Records of no row of the window: of a row outside it, or of none (unexpected).
    let mut batch: Vec<readback::Held> = Vec::new();
    let mut distinct = 0;
    let strangers = strangers.sorted().map_err(spill::failed)?;
    for c in strangers {
        let c = c.map_err(spill::failed)?;
        if batch.last().is_none_or(|l| l.id != c.id) {
            distinct += 1;
        }
        if distinct > BATCH_ROWS {
            look_up(&snapshot, &mut report, &mut batch, &topics, who).await?;
            distinct = 1;
        }
        batch.push(c);
    }
    look_up(&snapshot, &mut report, &mut batch, &topics, who).await?;
    snapshot.close().await;
    report.finish();
    tracing::debug!(
        seconds = started.elapsed().as_secs_f64(),
        peak_rss_mb = peak_rss_mb(),
        clean = report.clean(),
        "audit: compared"
    );
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The process's peak resident memory so far (Linux's VmHWM), for the debug log; 0 elsewhere.
fn peak_rss_mb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
    kb.unwrap_or(0) / 1024
}

/// Which of `batch`'s event ids are rows outside the window; the others are unexpected.
async fn look_up(
    snapshot: &Snapshot,
    report: &mut Report,
    batch: &mut Vec<readback::Held>,
    topics: &[Arc<str>],
    who: compare::Strangers,
) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let mut ids: Vec<String> = batch.iter().map(|c| c.id.clone()).collect();
    ids.dedup();
    let present = snapshot.present_ids(&ids).await?;
    let could_be_id = |id: &str| snapshot.could_be_id(id);
    compare::strangers(report, batch, &present, &could_be_id, who, topics);
    batch.clear();
    Ok(())
}

/// The server's WAL insert position, read inside the snapshot; `None` where it cannot say (a
/// standby).
async fn snapshot_lsn(control: &crate::source::Control) -> Option<crate::lsn::Lsn> {
    let row = control
        .query_one("cannot read the WAL position", "SELECT pg_current_wal_insert_lsn()", &[])
        .await
        .ok()?;
    row.try_get(0).ok()
}
