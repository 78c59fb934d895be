//! Audit: is every committed outbox event of a window in Kafka, once, in order, where the router
//! puts it (`walrelay audit`)?
//!
//! The outbox table is the source of truth for as long as `[retention] keep` keeps its rows. The
//! audit reads the window's rows in one snapshot and turns each into the record the live relay
//! sends (the replay's reading and routing: same router, same envelope, so the same topic, key,
//! partition and event id), then reads those topics from the offsets for the window's start (a
//! margin before it) to their end, with no consumer group, and compares:
//!
//! * **delivered**: in Kafka once;
//! * **missing**: not in Kafka, committed before `--settle` ago (younger ones are **pending**);
//! * **duplicated**: more than once (how many copies came from `walrelay replay`, by its header);
//! * **out of order**: for one key, Kafka holds the events in another order than they committed
//!   (known only with `track_commit_timestamp = on`);
//! * **misplaced**: in another partition than the router's key gives;
//! * **unexpected**: a record whose event id is no row of the outbox tables (purged, or never
//!   committed).
//!
//! Kafka is read with `read_committed` under exactly-once, so an aborted Kafka transaction's
//! records are not counted. The event id is found in the header the envelope puts it in (`id`,
//! or CloudEvents' `ce_id`); envelopes that carry it only inside the value are not audited yet.
//!
//! Memory: every expected event id of the window is held (about 100 bytes each); a window of
//! millions of events wants a narrower `--since/--until`.

mod compare;
mod kafka;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::Config;
use crate::encoder::Encoder;
use crate::error::{Error, Result};
use crate::replay::{Options as ReplayOptions, Replay, Selection};

pub use self::compare::{Problem, ProblemKind, Report, TopicReport};

/// What one audit looks at.
#[derive(Debug, Clone)]
pub struct Options {
    pub selection: Selection,
    /// The timestamp column; `None`: `[retention] column` (or its default).
    pub column: Option<String>,
    /// Rows committed less than this long ago are pending, never missing.
    pub settle: Duration,
}

/// One expected record: where the live relay puts the event.
#[derive(Debug, Clone)]
pub(crate) struct Expected {
    pub topic: std::sync::Arc<str>,
    pub key: Option<bytes::Bytes>,
    /// From a partition placement; `None`: the key's partition (murmur2), or any without a key.
    pub partition: Option<i32>,
    pub commit_micros: i64,
}

/// Runs the audit of the window `opts` selects.
pub async fn run(config: &Config, opts: Options) -> Result<Report> {
    let replay_opts = ReplayOptions {
        selection: opts.selection.clone(),
        column: opts.column.clone(),
        dry_run: true,
        ..ReplayOptions::default()
    };
    // Every row committed before this is in the snapshot Replay::open takes.
    let before_snapshot = crate::metrics::unix_micros();
    let mut replay = Replay::open(config, replay_opts).await?;
    let mut encoder = Encoder::new(config);
    // Event id → (its place in replay order, the record's placement).
    let mut expected: BTreeMap<String, (usize, Expected)> = BTreeMap::new();
    let mut id_header: Option<std::sync::Arc<str>> = None;
    let mut since_micros = i64::MAX;
    while let Some(records) = replay.next_records(&mut encoder).await? {
        for (record, commit_micros) in records {
            let header = record
                .headers
                .iter()
                .find(|(_, v)| v.as_ref() == record.event_id.as_bytes())
                .map(|(k, _)| k.clone());
            let Some(header) = header else {
                return Err(Error::definite(
                    format!(
                        "the audit cannot find event {} in its record: the envelope ({}) carries the id only inside the value",
                        record.event_id,
                        config.envelope.format.name()
                    ),
                    "audit a relay whose records carry the event id in a header (the default envelope's `id`, cloudevents-binary's `ce_id`); other envelopes are not audited yet",
                ));
            };
            if id_header.as_ref().is_some_and(|h| *h != header) {
                return Err(Error::definite(
                    "the audit found event ids in two different headers",
                    "audit each outbox table apart with --aggregate-type",
                ));
            }
            id_header = Some(header);
            since_micros = since_micros.min(commit_micros);
            let place = expected.len();
            let e = Expected {
                topic: record.topic.clone(),
                key: record.key.clone(),
                partition: record.partition,
                commit_micros,
            };
            expected.insert(record.event_id, (place, e));
        }
    }
    let commit_ordered = replay.commit_ordered();
    let id_header = id_header.expect("a window with no rows is refused by Replay::open");
    let topics: Vec<std::sync::Arc<str>> = {
        let mut t: Vec<_> = expected.values().map(|(_, e)| e.topic.clone()).collect();
        t.sort();
        t.dedup();
        t
    };
    // A minute before the first row: the relay sends a record after its row committed, and
    // Kafka's timestamp is the send's unless the router sets one.
    let from_ms = since_micros / 1000 - 60_000;
    let held = kafka::read(config, &topics, &id_header, from_ms).await?;
    let unknown: Vec<String> =
        held.ids().filter(|id| !expected.contains_key(*id)).map(str::to_string).collect();
    let present = replay.present_ids(&unknown).await?;
    replay.close().await;
    let settled_before = before_snapshot - opts.settle.as_micros() as i64;
    Ok(compare::compare(
        &expected,
        &held,
        &present,
        settled_before,
        commit_ordered,
        config.delivery.exactly_once(),
    ))
}
