//! The window's expected records: its rows routed through the live encoder into a sorter by
//! event id. Routing runs on a thread of its own while the next rows are read, so the server
//! produces one batch while the audit routes the one before (in turns, each was idle half the
//! time).

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::compare::Want;
use super::id::IdPlace;
use super::spill::{self, Sorter};
use super::MEMORY_PER_SORT;
use crate::config::Config;
use crate::encoder::Encoder;
use crate::error::{Error, Result};
use crate::registry::FrameError;
use crate::router::Binding;
use crate::snapshot::{Refused, Rows, Snapshot};

/// Batches read ahead of the routing: enough to keep both sides busy, each 1,000 rows.
const READ_AHEAD: usize = 2;

/// Where the live relay puts each of the window's events.
pub(super) struct Expected {
    pub wants: Sorter<Want>,
    /// The topics the rows route to; a [`Want`]'s `topic` indexes it.
    pub topics: Vec<Arc<str>>,
    /// Where the records carry their event id; `None`: the window has no rows.
    pub id_place: Option<IdPlace>,
    /// The earliest commit of the window's rows, or record timestamp the router sets, if
    /// earlier (µs); `i64::MAX` without rows.
    pub since_micros: i64,
    /// Rows the router refuses (the live relay dead-letters them, or stops at them): the
    /// first [`super::PROBLEMS_KEPT`], and how many.
    pub refused: Vec<Refused>,
    pub refused_count: u64,
}

/// Reads the rest of `snapshot`'s selection and routes every row.
pub(super) async fn read(snapshot: &mut Snapshot, config: &Config) -> Result<Expected> {
    let (rows_tx, rows_rx) = mpsc::channel::<Rows>(READ_AHEAD);
    let (done_tx, done_rx) = oneshot::channel();
    let router = Routing {
        encoder: Encoder::for_reading(config),
        bindings: snapshot.bindings(),
        envelope: config.envelope.format.name().to_string(),
        runtime: tokio::runtime::Handle::current(),
    };
    std::thread::Builder::new()
        .name("walrelay-audit-route".into())
        .spawn(move || {
            let _ = done_tx.send(router.route(rows_rx));
        })
        .map_err(|e| Error::transient("cannot start the audit's routing thread", e))?;
    let mut read = Ok(());
    loop {
        match snapshot.next_rows().await {
            Ok(Some(rows)) => {
                // A closed channel: the routing stopped, and says why below.
                if rows_tx.send(rows).await.is_err() {
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => {
                read = Err(e);
                break;
            }
        }
    }
    drop(rows_tx);
    let routed = done_rx.await.unwrap_or_else(|_| {
        Err(Error::transient_msg("the audit's routing thread stopped (a panic, logged above)"))
    });
    read.and(routed)
}

/// What the routing thread owns.
struct Routing {
    encoder: Encoder,
    bindings: Vec<Binding>,
    /// The envelope's name, for messages.
    envelope: String,
    /// To ask the registry for the ids of registry-framed keys (`key.converter` avro or
    /// protobuf), whose bytes, and so partitions, depend on them.
    runtime: tokio::runtime::Handle,
}

impl Routing {
    fn route(mut self, mut rows: mpsc::Receiver<Rows>) -> Result<Expected> {
        let mut x = Expected {
            wants: Sorter::new(MEMORY_PER_SORT),
            topics: Vec::new(),
            id_place: None,
            since_micros: i64::MAX,
            refused: Vec::new(),
            refused_count: 0,
        };
        let mut topic_index: HashMap<Arc<str>, u32> = HashMap::new();
        while let Some(batch) = rows.blocking_recv() {
            let binding = &self.bindings[batch.table];
            for routed in batch.routed(&mut self.encoder, binding) {
                let (mut record, commit) = match routed {
                    Ok(r) => r,
                    Err(refused) => {
                        x.refused_count += 1;
                        if x.refused.len() < super::PROBLEMS_KEPT {
                            x.refused.push(refused);
                        }
                        continue;
                    }
                };
                // Its key as the relay framed it: the partition is the framed bytes' hash. Only a
                // registry key converter's keys are framed; the others skip the runtime.
                let framed = match record.key_schema.is_some() {
                    true => self.runtime.block_on(self.encoder.frame_key(&mut record)),
                    false => Ok(()),
                };
                match framed {
                    Ok(()) => {}
                    // The key's subject holds no such schema: the relay has written no record
                    // with this key schema to this topic (it registers before it writes), so the
                    // event is in no partition; it is judged as one that could be in any.
                    Err(FrameError::Refused(_)) => record.key = None,
                    Err(e) => {
                        return Err(Error::definite(
                            format!("the audit cannot frame event {}'s key: {e}", record.event_id),
                            "the keys are registry-framed (key.converter = avro or protobuf), so where each record went depends on its key schema's id: make the registry reachable with [schema_registry]'s credentials, then audit again",
                        ))
                    }
                }
                let Some(place) = IdPlace::of(&record) else {
                    return Err(Error::definite(
                        format!(
                            "the audit cannot find event {} in its record under the {} envelope",
                            record.event_id, self.envelope
                        ),
                        "audit a relay whose records carry the event id in a header, a JSON value's \"id\" or a protobuf value's field 1 (every walrelay envelope does)",
                    ));
                };
                if x.id_place.as_ref().is_some_and(|p| *p != place) {
                    return Err(Error::definite(
                        "the audit found event ids in two places (two envelopes?)",
                        "audit each outbox table apart with --aggregate-type",
                    ));
                }
                x.id_place = Some(place);
                // The record's own timestamp (`table.field.event.timestamp`) may be older than
                // its commit: the read starts early enough for it too.
                let stamped = record.timestamp_ms.map_or(i64::MAX, |ms| ms.saturating_mul(1000));
                x.since_micros = x.since_micros.min(commit.micros).min(stamped);
                let topic = *topic_index.entry(record.topic.clone()).or_insert_with(|| {
                    x.topics.push(record.topic.clone());
                    x.topics.len() as u32 - 1
                });
                let want = Want {
                    id: record.event_id,
                    commit_order: if commit.exact { commit.micros } else { i64::MIN },
                    topic,
                    partition: record.partition.unwrap_or(-1),
                    key: record.key.map(|k| k.to_vec()),
                    commit_micros: commit.micros,
                };
                x.wants.push(want).map_err(spill::failed)?;
            }
        }
        Ok(x)
    }
}
