//! The relay loop: one task owns the replication stream, the ack frontier and the confirmed
//! position, so the order of events, acks and confirmations is the order of this code.
//!
//! ```text
//!  PostgreSQL ──events──▶ Assembler ──rows─▶ Encoder ──records──▶ Delivery ──▶ Kafka
//!      ▲                  (assembler.rs)  (route, then wrap)      (delivery/)     │
//!      │                                                               ▲          │ reports
//!      └── Progress::report(min(acked, vouched)) ◀──── Delivery::progress ◀───┴──────────┘
//!                                   ▲
//!                   source::watch ──┘ (the catalog checks vouch for WAL positions)
//! ```
//!
//! This file keeps the select, the timeouts and the I/O: when to read, when to serve reports,
//! what to confirm, when to stop. What each step of the assembler asks (a row to encode and
//! deliver, a Relation to look up in the catalog) is `step.rs`; logical messages are
//! `selected_message.rs`. The [`Encoder`] is the run's: each session borrows it. A session is one
//! replication connection plus one producer; anything that breaks either ends the session, and
//! the next one starts from the slot's confirmed position, so records are replayed, never
//! skipped (I6).

mod assembler;
mod progress;
mod selected_message;
mod step;
mod stop;
pub(crate) mod takeover;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pgwire_replication::ReplicationClient;

use self::progress::{Progress, Reported};
use crate::config::Config;
use crate::delivery::producer::Publisher;
use crate::encoder::Encoder;
use crate::error::{Error, Result};
use crate::lsn::Lsn;
use crate::metrics::Metrics;
use crate::source::{self, slot, watch, OutboxTable};

pub use self::assembler::{AssembleError, Assembler, Fate, SelectedMessage, Step};
use crate::delivery::Delivery;

/// How a relay that did not fail ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Stopped on request after confirming everything acknowledged.
    Stopped { confirmed: Lsn },
}

/// A shutdown request: a watch that turns `true` once.
#[derive(Clone)]
pub struct Shutdown(tokio::sync::watch::Receiver<bool>);

impl Shutdown {
    pub fn new() -> (tokio::sync::watch::Sender<bool>, Shutdown) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (tx, Shutdown(rx))
    }

    pub fn requested(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once shutdown is requested (or every sender is gone).
    pub async fn wait(&mut self) {
        let _ = self.0.wait_for(|stop| *stop).await;
    }
}

/// How often a standby relay retries a slot that another process streams from.
const STANDBY_POLL: Duration = Duration::from_secs(2);
/// How often a standby relay says again that it still stands by.
const STANDBY_REPEAT: Duration = Duration::from_secs(60);
/// Reconnect backoff: from 250 ms, doubling, never over 5 s. Short, so that a relay configured
/// with a primary and its standby finds the promoted server seconds after a failover.
///
/// backon's jitter adds up to the delay itself (a wait falls in `[d, 2d)`), so the doubling
/// stops at 2.5 s to keep every wait under 5 s; relays that lost the same server spread out
/// instead of reconnecting in lockstep.
fn backoff() -> backon::ExponentialBackoff {
    use backon::BackoffBuilder;
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(250))
        .with_factor(2.0)
        .with_max_delay(Duration::from_millis(2500))
        .with_jitter()
        .without_max_times()
        .build()
}

/// Runs sessions until shutdown or a definite error, retrying transient failures with capped,
/// jittered exponential backoff.
pub async fn run(config: Config, metrics: Arc<Metrics>, mut shutdown: Shutdown) -> Result<Outcome> {
    Publisher::validate(&config.kafka)?;
    // Route, then wrap, for every session of the run (see `crate::encoder`).
    let mut encoder = Encoder::new(&config).with_metrics(metrics.clone());
    let mut delays = backoff();
    // Once this process has streamed, the publication and slot must not vanish: recreating
    // them would hide the events in between.
    let mut streamed = false;
    // Until a session finds the slot past Debezium's offsets (see `takeover`).
    let mut debezium_offsets = config.debezium_offsets.is_some();
    // While another process streams from the slot: since when, and when that was last said.
    let mut standing_by: Option<(Instant, Instant)> = None;
    loop {
        if shutdown.requested() {
            return Ok(stopped_between_sessions());
        }
        let started = Instant::now();
        let opened = tokio::select! {
            opened = Session::open(&config, &mut encoder, !streamed, &metrics, &mut debezium_offsets) => opened,
            _ = shutdown.wait() => return Ok(stopped_between_sessions()),
        };
        let result = match opened {
            Ok(mut session) => {
                standing_by = None;
                if streamed {
                    metrics.reconnects.fetch_add(1, Relaxed);
                }
                streamed = true;
                // `broker_up` is the producer's probe's (delivery::producer::reachability); what the last
                // session left unacknowledged is read again by this one.
                metrics.oldest_unacked_sent_micros.store(0, Relaxed);
                metrics.streaming.store(true, Relaxed);
                let result = session.run(&mut shutdown).await;
                metrics.streaming.store(false, Relaxed);
                result
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(outcome) => return Ok(outcome),
            Err(Error::Busy { what } | Error::Fenced { what }) => {
                // The documented HA pair keeps one relay here for days: say it once, then
                // once a minute, not at every retry.
                let now = Instant::now();
                match &mut standing_by {
                    None => {
                        tracing::info!(retry_every_ms = STANDBY_POLL.as_millis() as u64, "{what}");
                        standing_by = Some((now, now));
                    }
                    Some((since, said)) if now.duration_since(*said) >= STANDBY_REPEAT => {
                        tracing::info!(
                            standing_by_s = now.duration_since(*since).as_secs(),
                            "{what}"
                        );
                        *said = now;
                    }
                    Some(_) => {}
                }
                tokio::select! {
                    _ = tokio::time::sleep(STANDBY_POLL) => {}
                    _ = shutdown.wait() => {}
                }
            }
            Err(e) if e.is_transient() => {
                standing_by = None;
                // A session that streamed a while ended on a new problem: start over short.
                if started.elapsed() > Duration::from_secs(60) {
                    delays = backoff();
                }
                let wait = delays.next().unwrap_or(Duration::from_secs(5));
                tracing::warn!(error = %e.chain(), retry_in_ms = wait.as_millis() as u64,
                    "relay session ended; resuming from the slot's confirmed position");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shutdown.wait() => {}
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// A stop asked for while no session streams (in the backoff between sessions, standing by,
/// opening one): nothing is in flight, and the slot keeps what the last session confirmed.
fn stopped_between_sessions() -> Outcome {
    tracing::info!("stopped between sessions: nothing was in flight; the slot keeps the position the last session confirmed");
    Outcome::Stopped { confirmed: Lsn::ZERO }
}

/// What handling one event asks of the loop.
enum Handled {
    Continue,
    /// Shutdown was requested while the event waited on the catalog.
    Interrupted,
}

struct Session<'c> {
    config: &'c Config,
    control: source::Control,
    stream: ReplicationClient,
    tables: Vec<OutboxTable>,
    assembler: Assembler,
    delivery: Delivery,
    /// Routes and wraps rows and messages; the run's, lent to each session.
    encoder: &'c mut Encoder,
    /// Checks the publication and the outbox tables while streaming, on a task of its own so a
    /// slow catalog never holds the loop; the position it vouches for caps what is confirmed
    /// (see `source::watch`), and it ends with the error that ends the session.
    watch: watch::Watch,
    /// Samples the slot's retained WAL for `/metrics` (see `source::retained`).
    retained: tokio::task::JoinHandle<()>,
    /// What may be confirmed, and what was handed to the replication client.
    progress: Progress,
    /// Skips what Debezium delivered, on the first run on its slot (see `takeover`).
    takeover: Option<takeover::Takeover>,
    /// The pid of the walsender streaming to this session.
    walsender: Option<i32>,
    metrics: Arc<Metrics>,
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        self.watch.task.abort();
        self.retained.abort();
    }
}

impl<'c> Session<'c> {
    async fn open(
        config: &'c Config,
        encoder: &'c mut Encoder,
        create: bool,
        metrics: &Arc<Metrics>,
        debezium_offsets: &mut bool,
    ) -> Result<Session<'c>> {
        let prepared = source::prepare(&config.source, &config.outbox, create).await?;
        // A stand-by learns here that the slot is busy, before it builds a producer (with its
        // warm-up thread and broker connections) only to drop it at every retry. The slot may
        // still be taken in between: START_REPLICATION below is the test that counts.
        if let Some(pid) = prepared.in_use_by {
            return Err(slot::in_use(&config.source.slot, Some(pid)));
        }
        // The producer before the stream: it connects to Kafka while START_REPLICATION runs.
        let dispatch = crate::sink::start(&config.delivery.sink).await?;
        let mut delivery = Delivery::new(config, prepared.confirmed, metrics, dispatch)?;
        let stream =
            source::stream::start(&config.source, &prepared.control, prepared.confirmed).await?;
        // Exactly-once: only now that the slot is ours, so a stand-by never fences the relay
        // that streams. It runs beside the loop, which reads up to the first Begin meanwhile.
        delivery.start();
        let tables = prepared.describe_tables(&config.outbox);
        let control = prepared.control;
        // Our walsender, to tell a fence by a successor (which took the slot) from the broker
        // aborting our transaction (the slot is still ours).
        let walsender = slot::slot(&control, &config.source.slot).await?.and_then(|s| s.active_pid);
        // Read once the slot is ours, so Debezium has stopped streaming. It writes its final
        // offsets as it stops; read a moment before that write, they are older and skip less.
        let takeover = match (&config.debezium_offsets, *debezium_offsets) {
            (Some(offsets), true) => {
                let read = crate::relay::takeover::offsets::load(offsets, &config.kafka).await;
                let wal_end: Lsn = control
                    .query_one("read the server's WAL position", takeover::WAL_END_SQL, &[])
                    .await?
                    .get(0);
                let decided = takeover::decide(read, prepared.confirmed, wal_end, &config.limits);
                *debezium_offsets = decided.is_some();
                decided
            }
            _ => None,
        };
        tracing::info!(
            version = env!("CARGO_PKG_VERSION"),
            server = %control.endpoint,
            postgres = %control.server.version,
            slot = %config.source.slot,
            publication = %config.source.publication,
            %tables,
            messages = %config.messages.as_ref().map_or("ignored (no prefix list)".to_string(), |m| m.describe()),
            resume_lsn = %prepared.confirmed,
            "streaming"
        );
        let watch = watch::start(
            control.client_handle(),
            config.source.publication.clone(),
            // Tables by name must stay what they are; tenants' tables by pattern come and go
            // (the watch says so, and stops nothing for them).
            prepared
                .tables
                .iter()
                .filter(|t| config.outbox.tables.contains(&t.name))
                .cloned()
                .collect(),
            config.outbox.pattern_regex(),
            prepared.confirmed,
            control.timeout,
            control.server.version_num,
        );
        let retained = source::retained::start(
            control.client_handle(),
            config.source.slot.clone(),
            metrics.clone(),
            control.timeout,
        );
        Ok(Session {
            config,
            retained,
            control,
            stream,
            tables: prepared.tables,
            assembler: Assembler::new(config.messages.clone()),
            delivery,
            encoder,
            watch,
            progress: Progress::new(prepared.confirmed, metrics),
            takeover,
            walsender,
            metrics: metrics.clone(),
        })
    }

    async fn run(&mut self, shutdown: &mut Shutdown) -> Result<Outcome> {
        match self.stream_until_stop(shutdown).await {
            // Stopping for good on a row or a misconfiguration: the records before it are
            // already with librdkafka; deliver and confirm them first, so a restart resumes at
            // the row that stopped the relay and replays nothing before it.
            Err(e @ Error::Definite { .. }) => {
                self.stop().await?;
                Err(e)
            }
            // A stop asked for while something failed: the graceful stop still confirms what
            // may be confirmed (the ceiling holds whatever did not commit).
            Err(_) if shutdown.requested() => self.stop().await,
            Err(Error::Fenced { what }) => {
                self.delivery.abandon_transaction();
                Err(self.fenced(what).await)
            }
            Err(e) => {
                self.delivery.abandon_transaction();
                Err(e)
            }
            ok => ok,
        }
    }

    /// A fence is a successor's only if another process holds the slot now; while it is still
    /// ours, the broker aborted this relay's transaction on its timeout: retry (and count it).
    async fn fenced(&self, what: String) -> Error {
        let holder = slot::slot(&self.control, &self.config.source.slot)
            .await
            .ok()
            .flatten()
            .and_then(|s| s.active_pid);
        if holder.is_some() && holder == self.walsender {
            return Error::transient_msg(format!(
                "{what}; this relay still holds the slot, so the broker aborted its Kafka transaction (it stayed open past transaction.timeout.ms, or the coordinator moved): resuming from the last committed position"
            ));
        }
        Error::Busy {
            what: format!(
                "{what}; the slot is held by pid {} now: another relay took over; standing by, then resuming from the last committed position if the slot is free",
                holder.map_or("(none)".to_string(), |p| p.to_string())
            ),
        }
    }

    async fn stream_until_stop(&mut self, shutdown: &mut Shutdown) -> Result<Outcome> {
        // Every wait below also ends on a stop, so SIGTERM is served within the grace period
        // whatever Kafka does. Cutting a step short is safe: nothing it left half-done is
        // confirmable (the frontier and the ceiling only move when it completes).
        let mut stop = shutdown.clone();
        loop {
            // Backpressure (I7): stop reading WAL while too much is unconfirmed. The replication
            // worker keeps answering keepalives meanwhile, and PostgreSQL buffers the WAL.
            let room = self.delivery.has_room();
            tokio::select! {
                biased;
                _ = shutdown.wait() => return self.stop().await,
                _ = self.delivery.reports_ready() => {
                    self.delivery.serve_reports()?;
                }
                event = self.stream.recv(), if room => {
                    // Events already buffered are handled without another trip through
                    // select!: at 100k+ events/s that trip is a good part of the cost. An event
                    // is taken from the stream only to be handled here: one taken and then
                    // dropped is a row lost.
                    let mut next = Some(event);
                    let mut handled = 0;
                    while let Some(event) = next.take() {
                        let event = match event {
                            Ok(Some(event)) => event,
                            Ok(None) => return Err(Error::transient_msg("the replication stream ended")),
                            // pgwire-replication reads Begin, Commit and Message itself; one it
                            // cannot read is as undecodable as any other message.
                            Err(pgwire_replication::PgWireError::Protocol(what)) if what.starts_with("pgoutput") => {
                                return Err(Error::definite(
                                    format!("the pgoutput message after LSN {} cannot be decoded: {what}", self.assembler.change_lsn()),
                                    UNDECODABLE_HINT,
                                ))
                            }
                            Err(e) => {
                                return Err(source::stream::classify(e, &self.config.source, &self.control).await)
                            }
                        };
                        let handled_now = tokio::select! {
                            biased;
                            handled = self.on_event(event, shutdown) => handled?,
                            _ = stop.wait() => Handled::Interrupted,
                        };
                        if let Handled::Interrupted = handled_now {
                            return self.stop().await;
                        }
                        handled += 1;
                        if handled < BATCH && self.delivery.has_room() {
                            next = ready_now(self.stream.recv());
                        }
                        // Exactly-once: commit the open Kafka transaction now that more is
                        // known to be waiting or not (never due at-least-once).
                        if self.delivery.commit_due() {
                            tokio::select! {
                                biased;
                                done = self.delivery.commit_kafka_if_due() => done?,
                                _ = stop.wait() => return self.stop().await,
                            }
                        }
                    }
                }
                // PostgreSQL is going away: end the session now rather than hold up a fast
                // shutdown until the next query notices (the walsender waits for this client).
                _ = self.control.closed() => {
                    return Err(Error::transient_msg("the control connection to PostgreSQL closed"));
                }
                ended = &mut self.watch.task => {
                    return Err(ended.unwrap_or_else(|e| Error::transient("the catalog check failed", e)));
                }
                // A check vouched for more: what was held back may be confirmed now.
                _ = self.watch.vouched.changed() => {}
                // Exactly-once: the transactions started (or failed to).
                _ = self.delivery.start_finished() => {
                    self.delivery.started().await?;
                }
                // Exactly-once: the open Kafka transaction is old enough to commit, or the
                // PostgreSQL transaction it is inside has kept it open too long.
                _ = sleep_until_some(self.delivery.transaction_deadline()) => {
                    tokio::select! {
                        done = self.delivery.on_transaction_deadline() => done?,
                        _ = stop.wait() => return self.stop().await,
                    }
                }
            }
            tokio::select! {
                sent = self.delivery.send_waiting() => sent?,
                _ = stop.wait() => return self.stop().await,
            }
            self.report_position();
        }
    }

    /// Hands the replication client what may be confirmed: acknowledged (I2) and vouched for by
    /// the catalog watch. When acknowledgements are ahead, asks for a check now.
    fn report_position(&mut self) -> Reported {
        let acked = self.delivery.progress();
        let vouched = *self.watch.vouched.borrow();
        let reported = self.progress.report(acked, vouched);
        if let Some(target) = reported.moved {
            self.stream.update_applied_lsn(target.into());
        }
        if reported.check_wanted {
            self.watch.ask.notify_one();
        }
        reported
    }
}

const UNDECODABLE_HINT: &str = "this is a walrelay bug or a server walrelay does not support: report it with the message's bytes and the PostgreSQL version; nothing after this position was confirmed";

/// Replication events handled per wake-up at most, so acks and shutdown are never starved.
const BATCH: usize = 256;

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until_some(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The future's output if it is ready without waiting.
fn ready_now<F: std::future::Future>(future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(output) => Some(output),
        std::task::Poll::Pending => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_starts_at_250_ms_doubles_and_never_waits_over_5_s() {
        for _ in 0..50 {
            let waits: Vec<Duration> = backoff().take(12).collect();
            assert!(
                waits[0] >= Duration::from_millis(250) && waits[0] < Duration::from_millis(500),
                "{waits:?}"
            );
            assert!(
                waits[1] >= Duration::from_millis(500) && waits[1] < Duration::from_secs(1),
                "{waits:?}"
            );
            assert!(waits.iter().all(|w| *w <= Duration::from_secs(5)), "{waits:?}");
            assert!(waits[11] >= Duration::from_millis(2500), "{waits:?}");
        }
        let spread: std::collections::HashSet<Duration> =
            (0..20).map(|_| backoff().next().unwrap()).collect();
        assert!(spread.len() > 1, "jittered: {spread:?}");
    }
}
