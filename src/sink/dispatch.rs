//! What every sink beyond Kafka needs around its client, written once: records in by sequence
//! number, outcomes out by sequence number, per-key order through retries, bounded concurrency.
//!
//! A key's records go out one call at a time, in order: the next is offered only once the one
//! before is acknowledged or refused for good, so a retried record is never overtaken by a later
//! one of its key (I5), whatever the broker does with concurrent publishes. Records of different
//! keys go out concurrently, up to [`Publish::max_calls`] calls at once, each call carrying up to
//! [`Publish::max_batch`] records of distinct keys. A record without a key has no order to keep.
//!
//! A record the broker could not take this time is offered again after a backoff (doubling from
//! [`FIRST_BACKOFF`] to [`MAX_BACKOFF`], or the broker's own `Retry-After`), for as long as it
//! takes: it is never acknowledged meanwhile, so the slot is not confirmed past it, and the
//! relay's in-flight limits stop the reading of the WAL while it waits.

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{Publish, Published};
use crate::router::Record;

/// Publish calls in flight at once, across keys, unless the sink says otherwise
/// ([`Publish::max_calls`]).
pub const MAX_CALLS: usize = 64;
pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// A broker's own `Retry-After` is honoured up to this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// How many ready lanes a batch looks through for records of its destination.
const BATCH_LOOKAHEAD: usize = 64;
/// While a broker keeps failing, how often the relay hears about it again.
const RETRY_NOTE_EVERY: Duration = Duration::from_secs(5);

/// What became of a record handed to the dispatch, or of the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Acked(u64),
    /// Refused for good: `reason` names why and the fix.
    Refused {
        seq: u64,
        reason: String,
        record: Arc<Record>,
    },
    /// Records wait for the broker: the first failure of a streak, then every few seconds while
    /// it lasts. Nothing is lost; the next [`Outcome::Acked`] ends the streak.
    Retrying {
        reason: String,
    },
}

/// The dispatch's handle, owned by delivery. Dropping it stops the task and drops what is in
/// flight (unacknowledged, so replayed by the next session).
pub struct Dispatch {
    name: &'static str,
    inbox: mpsc::UnboundedSender<(u64, Arc<Record>)>,
    outcomes: Arc<Outcomes>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Outcomes {
    ready: Mutex<Vec<Outcome>>,
    notify: Notify,
}

impl Drop for Dispatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Dispatch {
    /// Starts the dispatch of `client`'s records on a task of its own.
    pub fn spawn<P: Publish>(client: P) -> Dispatch {
        let name = client.name();
        let (inbox, rx) = mpsc::unbounded_channel();
        let outcomes = Arc::new(Outcomes::default());
        let state = Keyed::new(Arc::new(client), outcomes.clone());
        let task = tokio::spawn(state.run(rx));
        Dispatch { name, inbox, outcomes, task }
    }

    /// The sink's name, as `[delivery] sink` says it.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Hands `record` over under `seq`; its [`Outcome`] comes back with that number. Never
    /// waits: the relay's in-flight limits bound what is handed over.
    pub fn send(&self, seq: u64, record: Arc<Record>) {
        // The task ends only when this handle drops, so a send never finds it gone.
        let _ = self.inbox.send((seq, record));
    }

    /// Resolves once outcomes wait (cancel-safe: a wake-up not taken stays stored).
    pub async fn ready(&self) {
        if !self.is_empty() {
            return;
        }
        self.outcomes.notify.notified().await;
    }

    fn is_empty(&self) -> bool {
        self.outcomes.ready.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
    }

    /// Moves the outcomes ready now into `out`, in the order they came.
    pub fn take(&self, out: &mut Vec<Outcome>) {
        out.append(&mut self.outcomes.ready.lock().unwrap_or_else(|e| e.into_inner()));
    }
}

/// Which records wait on which: records of one key, in order; a keyless record is a key of its
/// own (its sequence number), so it waits on nothing. `Ord` only because the backoff heap's
/// entries need one: their tie counter decides first.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Lane {
    Key(Bytes),
    Alone(u64),
}

struct Queue {
    records: VecDeque<(u64, Arc<Record>)>,
    /// Consecutive retries of the head, for its backoff.
    attempts: u32,
}

struct Keyed<P> {
    client: Arc<P>,
    outcomes: Arc<Outcomes>,
    lanes: HashMap<Lane, Queue>,
    /// Lanes whose head may go out now, in the order they became ready.
    ready: VecDeque<Lane>,
    /// Lanes waiting out a backoff, by when they may go again.
    backoff: BinaryHeap<Reverse<(Instant, u64, Lane)>>,
    calls: JoinSet<Vec<(Lane, Published)>>,
    /// Outcomes of this trip of the loop, not yet handed to delivery.
    settled: Vec<Outcome>,
    /// When the relay last heard that the broker fails; `None`: it does not.
    failing_since_note: Option<Instant>,
    ties: u64,
}

impl<P: Publish> Keyed<P> {
    fn new(client: Arc<P>, outcomes: Arc<Outcomes>) -> Keyed<P> {
        Keyed {
            client,
            outcomes,
            lanes: HashMap::new(),
            ready: VecDeque::new(),
            backoff: BinaryHeap::new(),
            calls: JoinSet::new(),
            settled: Vec::new(),
            failing_since_note: None,
            ties: 0,
        }
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<(u64, Arc<Record>)>) {
        loop {
            let next_backoff = self.backoff.peek().map(|Reverse((at, _, _))| *at);
            tokio::select! {
                received = rx.recv() => match received {
                    Some((seq, record)) => {
                        self.enqueue(seq, record);
                        // Take whatever else waits before launching: fuller batches.
                        while let Ok((seq, record)) = rx.try_recv() {
                            self.enqueue(seq, record);
                        }
                    }
                    None => return,
                },
                Some(done) = self.calls.join_next(), if !self.calls.is_empty() => {
                    self.finished(done);
                    // Every call done meanwhile, before launching: one trip for many.
                    while let Some(done) = self.calls.try_join_next() {
                        self.finished(done);
                    }
                }
                _ = sleep_until_some(next_backoff) => self.wake_backoffs(),
            }
            self.launch();
            self.hand_back();
        }
    }

    fn finished(&mut self, done: Result<Vec<(Lane, Published)>, tokio::task::JoinError>) {
        match done {
            Ok(results) => self.settle(results),
            // A publish call panicked: its records were not acknowledged and stay so; the
            // relay hears it, and replays them in its next session.
            Err(e) => self.settled.push(Outcome::Retrying {
                reason: format!("a publish call of the {} sink failed: {e}", self.client.name()),
            }),
        }
    }

    /// Hands what was settled in this trip to delivery, with one wake-up.
    fn hand_back(&mut self) {
        if self.settled.is_empty() {
            return;
        }
        let outcomes = &self.outcomes;
        outcomes.ready.lock().unwrap_or_else(|e| e.into_inner()).append(&mut self.settled);
        outcomes.notify.notify_one();
    }

    fn enqueue(&mut self, seq: u64, record: Arc<Record>) {
        let lane = match &record.key {
            Some(key) => Lane::Key(key.clone()),
            None => Lane::Alone(seq),
        };
        match self.lanes.entry(lane.clone()) {
            Entry::Occupied(mut queue) => queue.get_mut().records.push_back((seq, record)),
            Entry::Vacant(vacant) => {
                let records = VecDeque::from([(seq, record)]);
                vacant.insert(Queue { records, attempts: 0 });
                self.ready.push_back(lane);
            }
        }
    }

    /// Starts publish calls while calls are free and lanes are ready.
    fn launch(&mut self) {
        let (batch, calls) = (self.client.max_batch().max(1), self.client.max_calls().max(1));
        while self.calls.len() < calls && !self.ready.is_empty() {
            let (lanes, records) = self.next_batch(batch);
            if lanes.is_empty() {
                return;
            }
            let client = self.client.clone();
            self.calls.spawn(async move {
                let mut answers = client.publish(&records).await;
                // A client that answers fewer outcomes than records leaves the rest unsettled:
                // they are offered again rather than taken as delivered.
                answers.resize(
                    records.len(),
                    Published::Retry {
                        reason: "the sink gave no answer for it".into(),
                        after: None,
                    },
                );
                lanes.into_iter().zip(answers).collect()
            });
        }
    }

    /// The heads of up to `batch` ready lanes. A batch goes to one destination where it can
    /// (SQS sends one request per queue): the first ready lane's topic, then the ready lanes
    /// of the same topic among the next few, in their order; the others keep their place.
    fn next_batch(&mut self, batch: usize) -> (Vec<Lane>, Vec<Arc<Record>>) {
        let mut lanes = Vec::with_capacity(batch);
        let mut records: Vec<Arc<Record>> = Vec::with_capacity(batch);
        let mut skipped = Vec::new();
        let mut looked = 0;
        while lanes.len() < batch && looked < BATCH_LOOKAHEAD {
            let Some(lane) = self.ready.pop_front() else { break };
            looked += 1;
            let Some((_, record)) = self.lanes.get(&lane).and_then(|q| q.records.front()) else {
                continue;
            };
            if records.first().is_some_and(|first| first.topic != record.topic) {
                skipped.push(lane);
                continue;
            }
            records.push(record.clone());
            lanes.push(lane);
        }
        for lane in skipped.into_iter().rev() {
            self.ready.push_front(lane);
        }
        (lanes, records)
    }

    fn settle(&mut self, results: Vec<(Lane, Published)>) {
        for (lane, published) in results {
            let Some(queue) = self.lanes.get_mut(&lane) else { continue };
            match published {
                Published::Acked | Published::Refused(_) => {
                    let Some((seq, record)) = queue.records.pop_front() else { continue };
                    queue.attempts = 0;
                    let outcome = match published {
                        Published::Refused(reason) => Outcome::Refused { seq, reason, record },
                        _ => {
                            self.failing_since_note = None;
                            Outcome::Acked(seq)
                        }
                    };
                    self.settled.push(outcome);
                    if queue.records.is_empty() {
                        self.lanes.remove(&lane);
                    } else {
                        self.ready.push_back(lane);
                    }
                }
                Published::Retry { reason, after } => {
                    queue.attempts = queue.attempts.saturating_add(1);
                    let doubled = FIRST_BACKOFF.saturating_mul(1 << (queue.attempts - 1).min(16));
                    let wait = after.map_or(doubled.min(MAX_BACKOFF), |a| a.min(MAX_RETRY_AFTER));
                    self.ties += 1;
                    self.backoff.push(Reverse((Instant::now() + wait, self.ties, lane)));
                    let due =
                        self.failing_since_note.is_none_or(|at| at.elapsed() >= RETRY_NOTE_EVERY);
                    if due {
                        self.failing_since_note = Some(Instant::now());
                        self.settled.push(Outcome::Retrying { reason });
                    }
                }
            }
        }
    }

    fn wake_backoffs(&mut self) {
        let now = Instant::now();
        while let Some(Reverse((at, _, _))) = self.backoff.peek() {
            if *at > now {
                break;
            }
            let Some(Reverse((_, _, lane))) = self.backoff.pop() else { break };
            self.ready.push_back(lane);
        }
    }
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
#[path = "dispatch_tests.rs"]
mod tests;
