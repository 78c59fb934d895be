//! Replay: re-publishing retained outbox rows on demand (`walrelay replay`).
//!
//! A replay reads its rows from a [`Snapshot`] (one consistent snapshot, in commit order when the
//! server records commit times, otherwise by the table's timestamp column and then the event id),
//! routed by the **same router and envelope** as the live relay, so the event id (header `id`),
//! key and partition are the ones consumers already saw. What replay adds:
//!
//! * a header `walrelay.replay` with the replay's own id ([`REPLAY_HEADER`]) on every record,
//!   and `--to-topic` instead of the routed topic;
//! * a producer of its own ([`send`]), at most `--rate` events/s, which never touches the slot,
//!   so it runs beside the live relay;
//! * a dry run that routes and counts per topic ([`Summary`]), and [`Progress`] after each batch.

mod send;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::config::Config;
use crate::encoder::{Encoder, Framed};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::registry::FrameError;
use crate::snapshot::{self, Refused, Selection, Snapshot};

pub use crate::router::REPLAY_HEADER;

/// What one replay does.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub selection: Selection,
    /// The timestamp column; `None`: `[retention] column` (or its default).
    pub column: Option<String>,
    /// Everything to this topic instead of the routed one.
    pub to_topic: Option<String>,
    /// Events per second at most.
    pub rate: Option<u32>,
    /// Count per topic, send nothing.
    pub dry_run: bool,
}

/// How far a replay got, after each batch.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Events the broker acknowledged (routed, in a dry run): a send is not progress until
    /// the broker took it, so a refused replay never shows 100 %.
    pub done: u64,
    pub total: u64,
    pub elapsed: Duration,
}

/// What a replay did (or, dry, would do).
#[derive(Debug, Clone)]
pub struct Summary {
    pub replay_id: String,
    pub dry_run: bool,
    pub events: u64,
    /// Events per topic.
    pub topics: BTreeMap<String, u64>,
    pub elapsed: Duration,
    /// Rows the router refuses, which the live relay dead-lettered (or stops at): not sent,
    /// the first [`UNROUTABLE_LISTED`] listed, and how many.
    pub unroutable: Vec<Refused>,
    pub unroutable_count: u64,
}

/// Rows the router refuses that a replay's summary lists one by one.
pub const UNROUTABLE_LISTED: usize = 20;

impl Summary {
    /// Events per second over the whole replay.
    pub fn rate(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// A replay with its snapshot open and its rows counted, ready to [`Replay::run`].
pub struct Replay<'c> {
    config: &'c Config,
    snapshot: Snapshot,
    to_topic: Option<String>,
    rate: Option<u32>,
    dry_run: bool,
    pub replay_id: String,
}

impl<'c> Replay<'c> {
    /// Opens the snapshot of the selection ([`Snapshot::open`], which fails, before anything is
    /// sent, on bad input or a selection that matches nothing).
    pub async fn open(config: &'c Config, opts: Options) -> Result<Replay<'c>> {
        let Options { selection, column, to_topic, rate, dry_run } = opts;
        let read = snapshot::Options { selection, column, ..snapshot::Options::default() };
        let snapshot = Snapshot::open(config, &read).await?;
        let replay_id = uuid::Uuid::now_v7().to_string();
        Ok(Replay { config, snapshot, to_topic, rate, dry_run, replay_id })
    }

    /// Rows the selection holds in the snapshot, over every table.
    pub fn total(&self) -> u64 {
        self.snapshot.total
    }

    /// The order rows go in, in words.
    pub fn order_text(&self) -> String {
        self.snapshot.order_text()
    }

    /// The index each table is read by, for the operator (`None`: no index, a full scan).
    pub fn indexes(&self) -> Vec<(String, Option<String>)> {
        self.snapshot.indexes()
    }

    /// Sends the selection (or, dry, routes and counts it), calling `progress` after each batch.
    pub async fn run(
        mut self,
        metrics: Arc<Metrics>,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Summary> {
        let started = Instant::now();
        let mut encoder = Encoder::new(self.config);
        let mut sender = match self.dry_run {
            true => None,
            false => Some(send::Sender::new(self.config, metrics, self.rate).await?),
        };
        let to_topic: Option<Arc<str>> = self.to_topic.as_deref().map(Arc::from);
        let header: (Arc<str>, Bytes) =
            (Arc::from(REPLAY_HEADER), Bytes::from(self.replay_id.clone()));
        let mut topics: BTreeMap<String, u64> = BTreeMap::new();
        let mut done = 0u64;
        let (mut unroutable, mut unroutable_count) = (Vec::new(), 0u64);
        let total = self.snapshot.total;
        while let Some(rows) = self.snapshot.next_rows().await? {
            let binding = self.snapshot.binding(rows.table);
            for routed in rows.routed(&mut encoder, binding) {
                // As the live relay: a row the router refuses is no record; it is said, and
                // the replay goes on.
                let record = match routed {
                    Ok((record, _)) => record,
                    Err(refused) => {
                        note(&mut unroutable, &mut unroutable_count, refused);
                        continue;
                    }
                };
                let Some(sender) = sender.as_mut() else {
                    // Dry: routed and counted; the registry is not asked.
                    let topic = to_topic.as_ref().unwrap_or(&record.topic);
                    *topics.entry(topic.to_string()).or_default() += 1;
                    done += 1;
                    continue;
                };
                let event_id = record
                    .headers
                    .iter()
                    .find(|(name, _)| &**name == "id")
                    .map(|(_, id)| String::from_utf8_lossy(id).into_owned());
                // Framed as the live relay frames it: the routed topic's subject, so the same id.
                let mut framed = match encoder.frame(record).await {
                    Ok(framed) => framed,
                    Err(FrameError::Refused(reason)) => {
                        note(&mut unroutable, &mut unroutable_count, Refused { event_id, reason });
                        continue;
                    }
                    Err(FrameError::Unauthorized(why)) => {
                        return Err(Error::definite(
                            why,
                            "fix the credentials, then run the replay again",
                        ))
                    }
                    // The replay's registry waits, as the relay's does.
                    Err(FrameError::Unreachable(why)) => return Err(Error::transient_msg(why)),
                };
                place(&mut framed, &to_topic, &header);
                sender.send(framed.record()).await?;
                *topics.entry(framed.record().topic.to_string()).or_default() += 1;
                done += 1;
            }
            if let Some(sender) = sender.as_mut() {
                sender.serve()?;
            }
            let acked = sender.as_ref().map_or(done, send::Sender::delivered);
            progress(Progress { done: acked, total, elapsed: started.elapsed() });
        }
        if let Some(sender) = sender.as_mut() {
            sender.flush().await?;
            progress(Progress { done, total, elapsed: started.elapsed() });
        }
        self.snapshot.close().await;
        Ok(Summary {
            replay_id: self.replay_id,
            dry_run: self.dry_run,
            events: done,
            topics,
            elapsed: started.elapsed(),
            unroutable,
            unroutable_count,
        })
    }
}

/// A row the router or the registry refuses: counted, and listed up to [`UNROUTABLE_LISTED`].
fn note(unroutable: &mut Vec<Refused>, count: &mut u64, refused: Refused) {
    *count += 1;
    if unroutable.len() < UNROUTABLE_LISTED {
        unroutable.push(refused);
    }
}

/// `--to-topic`, and the replay's header after the router's.
fn place(record: &mut Framed, to_topic: &Option<Arc<str>>, header: &(Arc<str>, Bytes)) {
    if let Some(topic) = to_topic {
        record.retarget(topic.clone());
    }
    record.push_header(header.clone());
}
