//! The relay loop: one task owns the replication stream, the ack frontier and the confirmed
//! position, so the order of events, acks and confirmations is the order of this code.
//!
//! ```text
//!  PostgreSQL ──XLogData/keepalive──▶ pgoutput::decode ──▶ Router ──▶ Publisher ──▶ Kafka
//!      ▲                                                      │            │
//!      │                                         Frontier::sent│            │delivery report
//!      └──── update_applied_lsn(confirmed) ◀── Frontier ◀─────┴────────────┘
//! ```
//!
//! A session is one replication connection plus one producer. Anything that breaks either
//! (connection lost, delivery failed, producer fenced) ends the session; the next session starts
//! from the slot's confirmed position, so records are replayed, never skipped (I6).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use pgwire_replication::{Lsn as WireLsn, ReplicationClient, ReplicationEvent};
use tokio::sync::{mpsc, watch};
use tokio_postgres::Client;

use bytes::Bytes;
use rdkafka::error::KafkaError;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::checkpoint::{Frontier, Sent, Seq};
use crate::config::Config;
use crate::dead_letter::{self, Letter};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::pgoutput::{self, Lsn, Message};
use crate::publish::{Publisher, Rejected, Report, SendError};
use crate::router::{Binding, InvalidOpBehavior, Record, Router};
use crate::source::{self, fmt_lsn};

/// How a relay that did not fail ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Stopped on request after confirming everything acknowledged.
    Stopped { confirmed: Lsn },
}

/// A shutdown request: a watch that turns `true` once.
#[derive(Clone)]
pub struct Shutdown(watch::Receiver<bool>);

impl Shutdown {
    pub fn new() -> (watch::Sender<bool>, Shutdown) {
        let (tx, rx) = watch::channel(false);
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

/// 2000-01-01 00:00:00 UTC, PostgreSQL's epoch, in Unix microseconds.
const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

fn unix_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// How often a standby relay retries a slot that another process streams from.
const STANDBY_POLL: Duration = Duration::from_secs(2);
/// How often the control connection checks that the outbox table still exists.
const TABLE_CHECK: Duration = Duration::from_secs(5);

/// Runs sessions until shutdown or a definite error, retrying transient failures with capped
/// exponential backoff.
pub async fn run(config: Config, metrics: Arc<Metrics>, mut shutdown: Shutdown) -> Result<Outcome> {
    Publisher::validate(&config.kafka)?;
    let mut router = Router::new(config.router.clone());
    let mut delay = Duration::from_millis(250);
    // Once this process has streamed, the publication and slot must not vanish: recreating
    // them would hide the events in between.
    let mut streamed = false;
    loop {
        if shutdown.requested() {
            return Ok(Outcome::Stopped { confirmed: 0 });
        }
        let started = Instant::now();
        let result = match Session::open(&config, !streamed, &metrics).await {
            Ok(mut session) => {
                if streamed {
                    metrics.reconnects.fetch_add(1, Relaxed);
                }
                streamed = true;
                // Reachable until librdkafka says all brokers are down.
                metrics.broker_up.store(true, Relaxed);
                metrics.streaming.store(true, Relaxed);
                let result = session.run(&mut router, &mut shutdown).await;
                metrics.streaming.store(false, Relaxed);
                result
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(outcome) => return Ok(outcome),
            Err(Error::Busy { what }) => {
                tracing::info!(retry_in_ms = STANDBY_POLL.as_millis() as u64, "{what}");
                tokio::select! {
                    _ = tokio::time::sleep(STANDBY_POLL) => {}
                    _ = shutdown.wait() => {}
                }
            }
            Err(e) if e.is_transient() => {
                if started.elapsed() > Duration::from_secs(60) {
                    delay = Duration::from_millis(250);
                }
                tracing::warn!(error = %e.chain(), retry_in_ms = delay.as_millis() as u64,
                    "relay session ended; resuming from the slot's confirmed position");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = shutdown.wait() => {}
                }
                delay = (delay * 2).min(Duration::from_secs(30));
            }
            Err(e) => return Err(e),
        }
    }
}

enum RelationState {
    Outbox(Box<Binding>),
    Other,
}

struct Session<'c> {
    config: &'c Config,
    control: Client,
    /// Resolves when the control connection ends (server shutting down, network gone).
    control_closed: tokio::sync::oneshot::Receiver<()>,
    stream: ReplicationClient,
    publisher: Publisher,
    reports: mpsc::UnboundedReceiver<Report>,
    frontier: Frontier,
    relations: HashMap<u32, RelationState>,
    /// Position of the current change, for messages that name a row.
    change_lsn: Lsn,
    /// Last position handed to the replication client.
    reported: Lsn,
    outbox_relid: u32,
    /// `schema.table`, for dead letters.
    table: String,
    /// Dead letters for refused records, waiting to be sent under the refused record's number.
    pending_dead: Vec<(Seq, Record)>,
    /// The current transaction's commit time, microseconds since the Unix epoch.
    commit_micros: i64,
    /// How long after its commit the current transaction was read, in seconds.
    read_lag: f64,
    /// Records of the current transaction, counted into commit→read at its Commit.
    read_records: u64,
    /// Acknowledged records not yet counted in the metrics.
    acked: Vec<Sent>,
    metrics: Arc<Metrics>,
}

impl<'c> Session<'c> {
    async fn open(config: &'c Config, create: bool, metrics: &Arc<Metrics>) -> Result<Session<'c>> {
        // The producer first: it connects to Kafka while PostgreSQL is checked.
        let capture = config.dead_letter.as_ref().map_or(0, |d| d.max_value_bytes);
        let (publisher, reports) = Publisher::new(&config.kafka, capture, metrics.clone())?;
        let (control, control_closed) = source::connect_control(&config.source).await?;
        let slot = source::prepare(&control, &config.source, &config.outbox, create).await?;
        let stream = source::start_stream(&config.source, slot.confirmed_flush).await?;
        tracing::info!(
            version = env!("CARGO_PKG_VERSION"),
            slot = %config.source.slot,
            publication = %config.source.publication,
            table = %format!("{}.{}", config.outbox.schema, config.outbox.table),
            resume_lsn = %fmt_lsn(slot.confirmed_flush),
            "streaming"
        );
        Ok(Session {
            config,
            control,
            control_closed,
            stream,
            publisher,
            reports,
            frontier: Frontier::new(slot.confirmed_flush),
            relations: HashMap::new(),
            change_lsn: 0,
            reported: slot.confirmed_flush,
            outbox_relid: slot.outbox_relid,
            table: format!("{}.{}", config.outbox.schema, config.outbox.table),
            pending_dead: Vec::new(),
            commit_micros: 0,
            read_lag: 0.0,
            read_records: 0,
            acked: Vec::new(),
            metrics: metrics.clone(),
        })
    }

    async fn run(&mut self, router: &mut Router, shutdown: &mut Shutdown) -> Result<Outcome> {
        match self.stream_until_stop(router, shutdown).await {
            // Stopping for good on a row or a misconfiguration: the records before it are
            // already with librdkafka; deliver and confirm them first, so a restart resumes at
            // the row that stopped the relay and replays nothing before it.
            Err(e @ Error::Definite { .. }) => {
                self.stop().await?;
                Err(e)
            }
            other => other,
        }
    }

    async fn stream_until_stop(
        &mut self,
        router: &mut Router,
        shutdown: &mut Shutdown,
    ) -> Result<Outcome> {
        let mut table_check = tokio::time::interval(TABLE_CHECK);
        loop {
            // Backpressure (I7): stop reading WAL while too much is unconfirmed. The replication
            // worker keeps answering keepalives meanwhile, and PostgreSQL buffers the WAL.
            let room = self.has_room();
            tokio::select! {
                biased;
                _ = shutdown.wait() => return self.stop().await,
                _ = self.publisher.reports_ready() => {
                    self.serve_reports()?;
                }
                event = self.stream.recv(), if room => {
                    // Events already buffered are handled without another trip through
                    // select!: at 100k+ events/s that trip is a good part of the cost. An event
                    // is taken from the stream only to be handled here: one taken and then
                    // dropped is a row lost. (If the worker ends during such a poll its error
                    // can be lost; the session then ends as transient and the next one's checks
                    // find any definite cause.)
                    let mut next = Some(event);
                    let mut handled = 0;
                    while let Some(event) = next.take() {
                        match event.map_err(source::classify_wire)? {
                            Some(e) => self.on_event(e, router).await?,
                            None => return Err(Error::transient_msg("the replication stream ended")),
                        }
                        handled += 1;
                        if handled < BATCH && self.has_room() {
                            next = ready_now(self.stream.recv());
                        }
                    }
                }
                // PostgreSQL is going away: end the session now rather than hold up a fast
                // shutdown until the next query notices (the walsender waits for this client).
                _ = &mut self.control_closed => {
                    return Err(Error::transient_msg("the control connection to PostgreSQL closed"));
                }
                // A dropped table sends nothing on the stream; ask the catalog now and then.
                _ = table_check.tick() => {
                    source::check_table(&self.control, &self.config.outbox, self.outbox_relid).await?;
                }
            }
            self.send_dead_letters().await?;
            self.report_progress();
        }
    }

    fn has_room(&self) -> bool {
        let limits = &self.config.limits;
        self.frontier.inflight_records() < limits.inflight_records
            && self.frontier.inflight_bytes() < limits.inflight_bytes
    }

    fn report_progress(&mut self) {
        if !self.acked.is_empty() {
            let now = unix_micros();
            let mut published = self.metrics.published.lock().unwrap_or_else(|e| e.into_inner());
            for sent in self.acked.drain(..) {
                *published.entry(sent.topic).or_insert(0) += 1;
                self.metrics.observe_commit_to_ack((now - sent.commit_micros).max(0) as f64 / 1e6);
            }
        }
        let m = &self.metrics;
        m.inflight_records.store(self.frontier.inflight_records() as u64, Relaxed);
        m.inflight_bytes.store(self.frontier.inflight_bytes() as u64, Relaxed);
        m.confirmed_lsn.store(self.frontier.confirmed(), Relaxed);
        let confirmed = self.frontier.confirmed();
        if confirmed > self.reported {
            self.stream.update_applied_lsn(WireLsn(confirmed));
            self.reported = confirmed;
        }
    }

    /// Runs librdkafka's waiting callbacks and handles the delivery reports they produced.
    /// Returns whether there was any.
    fn serve_reports(&mut self) -> Result<bool> {
        self.publisher.serve_reports();
        let mut any = false;
        loop {
            match self.reports.try_recv() {
                Ok(report) => self.on_report(Some(report))?,
                Err(mpsc::error::TryRecvError::Empty) => return Ok(any),
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    return self.on_report(None).map(|_| any)
                }
            }
            any = true;
        }
    }

    /// Waits until at least one delivery report was handled.
    async fn next_reports(&mut self) -> Result<()> {
        while !self.serve_reports()? {
            self.publisher.reports_ready().await;
        }
        Ok(())
    }

    fn on_report(&mut self, report: Option<Report>) -> Result<()> {
        match report {
            Some(Report::Delivered { seq }) => {
                if let Some(sent) = self.frontier.ack(seq) {
                    self.acked.push(sent);
                }
                Ok(())
            }
            // Never skipped: the session ends, confirming only the acked prefix, and the next one
            // replays from there.
            Some(Report::Failed { seq, error }) => {
                self.metrics.delivery_errors.fetch_add(1, Relaxed);
                Err(Error::transient(format!("kafka did not acknowledge record #{seq}"), error))
            }
            Some(Report::Rejected { seq, error, record }) => self.on_rejected(seq, error, *record),
            Some(Report::Fatal(reason)) => Err(Error::transient_msg(format!(
                "the kafka producer hit a fatal error and must be rebuilt: {reason}"
            ))),
            None => Err(Error::transient_msg("the kafka producer went away")),
        }
    }

    async fn on_event(&mut self, event: ReplicationEvent, router: &mut Router) -> Result<()> {
        match event {
            ReplicationEvent::Begin { final_lsn, commit_time_micros, .. } => {
                self.frontier.begin();
                self.change_lsn = final_lsn.0;
                self.commit_micros = commit_time_micros + PG_EPOCH_UNIX_MICROS;
                self.read_lag = (unix_micros() - self.commit_micros).max(0) as f64 / 1e6;
            }
            ReplicationEvent::XLogData { wal_start, wal_end, data, .. } => {
                if wal_start.0 != 0 {
                    self.change_lsn = wal_start.0;
                }
                self.metrics.server_wal_end.fetch_max(wal_end.0, Relaxed);
                let message = pgoutput::decode(&data).map_err(|e| {
                    Error::transient(
                        format!(
                            "undecodable pgoutput message near LSN {}",
                            fmt_lsn(self.change_lsn)
                        ),
                        e,
                    )
                })?;
                self.on_message(message, router).await?;
            }
            ReplicationEvent::Commit { end_lsn, .. } => {
                self.frontier.commit(end_lsn.0);
                if self.read_records > 0 {
                    // Once per transaction: its records share the read time.
                    self.metrics.observe_commit_to_read(self.read_lag, self.read_records);
                    self.read_records = 0;
                }
                self.metrics.transactions.fetch_add(1, Relaxed);
                tracing::debug!(end_lsn = %fmt_lsn(end_lsn.0), inflight = self.frontier.inflight_records(), "transaction read");
            }
            ReplicationEvent::KeepAlive { wal_end, .. } => {
                self.frontier.idle(wal_end.0);
                self.metrics.keepalives.fetch_add(1, Relaxed);
                self.metrics.server_wal_end.fetch_max(wal_end.0, Relaxed);
            }
            // Logical decoding messages are not outbox rows; nothing to publish.
            ReplicationEvent::Message { .. } | ReplicationEvent::StoppedAt { .. } => {}
        }
        Ok(())
    }

    async fn on_message(&mut self, message: Message, router: &mut Router) -> Result<()> {
        match message {
            Message::Relation(rel) => {
                let outbox = &self.config.outbox;
                let state = if rel.namespace == outbox.schema && rel.name == outbox.table {
                    let columns = source::not_null_columns(&self.control, rel.id).await?;
                    let not_null: Vec<bool> = rel
                        .columns
                        .iter()
                        .map(|c| columns.iter().any(|(name, nn)| *nn && name == &c.name))
                        .collect();
                    let binding = router.bind(&rel, &not_null).map_err(|e| {
                        Error::definite_with(
                            format!("the outbox table {}.{} no longer has the columns the router needs", outbox.schema, outbox.table),
                            "restore the columns, or change the [router] column options to match the table",
                            e,
                        )
                    })?;
                    RelationState::Outbox(Box::new(binding))
                } else {
                    RelationState::Other
                };
                self.relations.insert(rel.id, state);
            }
            Message::Insert(insert) => {
                let binding = match self.relations.get(&insert.relation_id) {
                    Some(RelationState::Outbox(b)) => b,
                    Some(RelationState::Other) => return Ok(()),
                    None => {
                        return Err(Error::transient_msg(format!(
                            "INSERT for relation {} arrived before its Relation message",
                            insert.relation_id
                        )))
                    }
                };
                let record = match router.route(binding, &insert.new) {
                    Ok(record) => record,
                    Err(e) => {
                        let raw = router.raw(binding, &insert.new);
                        let what = format!(
                            "outbox row {} at LSN {} cannot be turned into a record",
                            raw.event_id.as_deref().unwrap_or("(no event id)"),
                            fmt_lsn(self.change_lsn)
                        );
                        let Some(dl) = &self.config.dead_letter else {
                            return Err(Error::definite_with(
                                what,
                                "fix the row's cause (see the reason), or configure [dead_letter] topic; nothing after this row was confirmed",
                                e,
                            ));
                        };
                        tracing::warn!(error = %e, topic = %dl.topic, "{what}; sent to the dead-letter topic");
                        self.metrics.dead_lettered.fetch_add(1, Relaxed);
                        dead_letter::record(
                            dl,
                            Letter {
                                reason: e.to_string(),
                                table: &raw.table,
                                lsn: self.change_lsn,
                                topic: None,
                                key: raw.key,
                                value: raw.payload,
                                event_id: raw.event_id,
                            },
                        )
                    }
                };
                self.publish(record).await?;
            }
            Message::Update(update) => {
                if matches!(self.relations.get(&update.relation_id), Some(RelationState::Outbox(_)))
                {
                    self.on_update()?;
                }
            }
            // DELETEs of outbox rows are the usual clean-up and are dropped, as Debezium does.
            Message::Delete(_) | Message::Truncate(_) | Message::Type(_) | Message::Origin(_) => {}
            Message::Begin(_) | Message::Commit(_) | Message::LogicalMessage(_) => {}
        }
        Ok(())
    }

    fn on_update(&self) -> Result<()> {
        let lsn = fmt_lsn(self.change_lsn);
        match self.config.router.invalid_op_behavior() {
            InvalidOpBehavior::Warn => {
                tracing::warn!(%lsn, "unexpected UPDATE of an outbox row ignored (table.op.invalid.behavior = warn)")
            }
            InvalidOpBehavior::Error => {
                tracing::error!(%lsn, "unexpected UPDATE of an outbox row ignored (table.op.invalid.behavior = error)")
            }
            InvalidOpBehavior::Fatal => {
                return Err(Error::definite(
                    format!(
                        "UPDATE of an outbox row at LSN {lsn} (table.op.invalid.behavior = fatal)"
                    ),
                    "outbox rows must only be inserted; find the writer that updates them",
                ))
            }
        }
        Ok(())
    }

    async fn publish(&mut self, record: Record) -> Result<()> {
        let bytes = record.key.as_ref().map_or(0, |k| k.len())
            + record.value.as_ref().map_or(0, |v| v.len())
            + record.headers.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        let sent = Sent { topic: record.topic.clone(), commit_micros: self.commit_micros };
        self.read_records += 1;
        let seq = self.frontier.sent(bytes, self.change_lsn, sent);
        self.send(seq, record).await
    }

    /// Hands a record to librdkafka under `seq`; its delivery report settles that number.
    async fn send(&mut self, seq: Seq, mut record: Record) -> Result<()> {
        loop {
            match self.publisher.send(&record, seq) {
                Ok(()) => return Ok(()),
                // librdkafka's own queue is full: wait for a delivery report, then retry.
                Err(SendError::QueueFull) => self.next_reports().await?,
                // Refused before it left the process (too large, unknown partition): replaced by
                // its dead letter under the same number, or the relay stops here.
                Err(SendError::Rejected(e)) => {
                    let rejected = Rejected {
                        topic: record.topic.to_string(),
                        key: record.key.as_deref().map(<[u8]>::to_vec),
                        value: record.value.as_deref().map(<[u8]>::to_vec),
                        event_id: Some(record.event_id.clone()).filter(|id| !id.is_empty()),
                    };
                    self.on_rejected(seq, e, rejected)?;
                    match self.pending_dead.pop() {
                        Some((_, letter)) => record = letter,
                        None => return Ok(()),
                    }
                }
            }
        }
    }

    /// A record refused for good: queue its dead letter, or stop naming the row.
    fn on_rejected(&mut self, seq: Seq, error: KafkaError, rejected: Rejected) -> Result<()> {
        let lsn = self.frontier.lsn_of(seq).unwrap_or(self.change_lsn);
        let what = format!(
            "kafka refused the record of outbox row {} at LSN {} (topic {})",
            rejected.event_id.as_deref().unwrap_or("(no event id)"),
            fmt_lsn(lsn),
            rejected.topic
        );
        let dl = match &self.config.dead_letter {
            Some(dl) if dl.topic != rejected.topic => dl,
            Some(_) => {
                return Err(Error::definite_with(
                    format!("{what}: the dead-letter record itself was refused"),
                    "check that the dead-letter topic exists and accepts records of [dead_letter] max_value_bytes",
                    error,
                ))
            }
            None => {
                return Err(Error::definite_with(
                    what,
                    "make the record fit (message.max.bytes, the topic's partitions) or configure [dead_letter] topic; nothing after this row was confirmed",
                    error,
                ))
            }
        };
        tracing::warn!(%error, topic = %dl.topic, "{what}; sent to the dead-letter topic");
        let letter = dead_letter::record(
            dl,
            Letter {
                reason: error.to_string(),
                table: &self.table,
                lsn,
                topic: Some(&rejected.topic),
                key: rejected.key.map(Bytes::from),
                value: rejected.value.map(Bytes::from),
                event_id: rejected.event_id,
            },
        );
        self.metrics.dead_lettered.fetch_add(1, Relaxed);
        self.pending_dead.push((seq, letter));
        Ok(())
    }

    async fn send_dead_letters(&mut self) -> Result<()> {
        while let Some((seq, letter)) = self.pending_dead.pop() {
            self.send(seq, letter).await?;
        }
        Ok(())
    }

    /// Graceful stop: read no more, wait for outstanding acks, confirm the acked prefix.
    async fn stop(&mut self) -> Result<Outcome> {
        let grace = self.config.limits.shutdown_grace;
        let deadline = tokio::time::Instant::now() + grace;
        while self.frontier.unacked() > 0 {
            tokio::select! {
                result = self.next_reports() => {
                    if let Err(e) = result {
                        tracing::warn!(error = %e.chain(), "delivery failed during shutdown; those records will be replayed");
                        break;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(unacked = self.frontier.unacked(), "shutdown grace period over; unacknowledged records will be replayed");
                    break;
                }
            }
        }
        self.report_progress();
        let target = self.frontier.confirmed();
        self.confirm_on_server(target).await;
        tracing::info!(confirmed_lsn = %fmt_lsn(target), "stopped");
        Ok(Outcome::Stopped { confirmed: target })
    }

    /// Makes sure the server holds `target` before the process exits: the replication client
    /// sends it within one status interval; if the stream closes first, advance the slot.
    async fn confirm_on_server(&mut self, target: Lsn) {
        let slot = self.config.source.slot.as_str();
        let control = &self.control;
        let wait = self.config.source.status_interval * 2 + Duration::from_millis(500);
        let reached = poll_until(wait, || async move {
            matches!(source::slot_confirmed(control, slot).await, Ok(Some((lsn, _))) if lsn >= target)
        })
        .await;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.stream.shutdown()).await;
        if reached {
            return;
        }
        let control = &self.control;
        let inactive = poll_until(Duration::from_secs(5), || async move {
            matches!(source::slot_confirmed(control, slot).await, Ok(Some((_, false))))
        })
        .await;
        if inactive {
            if let Err(e) = source::advance_slot(control, slot, target).await {
                tracing::warn!(error = %e.chain(), "could not confirm the final position; a restart will replay from the previous one");
            }
        }
    }
}

/// Replication events handled per wake-up at most, so acks and shutdown are never starved.
const BATCH: usize = 256;

/// The future's output if it is ready without waiting.
fn ready_now<F: std::future::Future>(future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(output) => Some(output),
        std::task::Poll::Pending => None,
    }
}

/// Polls `check` every 50 ms until it holds or `within` has passed.
async fn poll_until<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
