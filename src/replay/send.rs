//! A replay's producer: the relay's sink; for Kafka the relay's [`Publisher`] (so the `[kafka]` properties — idempotence,
//! `acks=all`, `murmur2_random` — and thus keys' partitions are the live relay's), a producer of
//! its own, paced to `--rate`.
//!
//! A replay confirms nothing anywhere: it only counts acknowledgements, and any failed delivery
//! stops it. Running it again is safe, since every record carries its event id.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::delivery::producer::{self, Publisher, Report, SendError};
use crate::delivery::side::Side;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::router::Record;

/// Pacing sleeps only once this far ahead: shorter sleeps cost more than they smooth.
const PACE_SLACK: Duration = Duration::from_millis(5);

/// How long the end of a replay waits for the last acknowledgements, beyond
/// `message.timeout.ms` (librdkafka reports every record by then).
const FLUSH_SLACK: Duration = Duration::from_secs(10);

const RETRY_HINT: &str = "fix the cause, then run the same replay again: consumers that deduplicate by the `id` header discard what this one already sent";

pub(super) struct Sender {
    /// Kafka, or the dispatch of the relay's sink beyond it.
    publisher: Side,
    /// Delivery reports served and not yet taken in.
    reports: VecDeque<Report>,
    metrics: Arc<Metrics>,
    /// Who the broker sees (`User:<sasl.username>`), for the ACL a refusal asks for.
    principal: String,
    sent: u64,
    delivered: u64,
    /// `--rate`: the first send's time and the events per second.
    pace: Option<(Instant, f64)>,
    flush_timeout: Duration,
}

impl Sender {
    pub async fn new(config: &Config, metrics: Arc<Metrics>, rate: Option<u32>) -> Result<Sender> {
        let publisher = match crate::sink::start(&config.delivery.sink).await? {
            Some(dispatch) => Side::Broker(dispatch),
            None => Side::Kafka(Publisher::new(&config.kafka, 0, metrics.clone(), None)?),
        };
        let timeout_ms = config
            .kafka
            .properties
            .get("message.timeout.ms")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(300_000);
        Ok(Sender {
            publisher,
            reports: VecDeque::new(),
            metrics,
            principal: producer::principal(&config.kafka),
            sent: 0,
            delivered: 0,
            pace: rate.map(|r| (Instant::now(), f64::from(r.max(1)))),
            flush_timeout: Duration::from_millis(timeout_ms) + FLUSH_SLACK,
        })
    }

    /// Hands `record` to librdkafka, after waiting for `--rate` and for room in its queue.
    pub async fn send(&mut self, record: &Record) -> Result<()> {
        if let Some((start, rate)) = self.pace {
            let due = start + Duration::from_secs_f64(self.sent as f64 / rate);
            if due > Instant::now() + PACE_SLACK {
                tokio::time::sleep_until(due.into()).await;
                self.serve()?;
            }
        }
        loop {
            match self.publisher.send(record, self.sent) {
                Ok(()) => {
                    self.sent += 1;
                    return Ok(());
                }
                Err(SendError::QueueFull) => {
                    let _ = tokio::time::timeout(
                        Duration::from_millis(100),
                        self.publisher.reports_ready(),
                    )
                    .await;
                    self.serve()?;
                }
                Err(SendError::Rejected(e)) => {
                    let fix = producer::refusal_fix(&e, &record.topic, &self.principal);
                    return Err(self.refused(
                        &format!(
                            "event {} to {} was refused by librdkafka: {e}",
                            record.event_id, record.topic
                        ),
                        fix,
                    ));
                }
            }
        }
    }

    /// Records the broker acknowledged so far.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Takes in delivery reports; the first failure ends the replay.
    pub fn serve(&mut self) -> Result<()> {
        self.publisher.serve_reports(&mut self.reports);
        while let Some(report) = self.reports.pop_front() {
            match report {
                Report::Delivered { .. } | Report::Acked { .. } => {
                    self.delivered += 1;
                    self.metrics.replayed_events.fetch_add(1, Relaxed);
                }
                Report::Failed { error, .. } => {
                    return Err(self.stopped(&format!("a record was not delivered: {error}")))
                }
                Report::Rejected { error, record, .. } => {
                    let id = record.event_id.as_deref().unwrap_or("(no id)");
                    let fix = producer::refusal_fix(&error, &record.topic, &self.principal);
                    return Err(self.refused(
                        &format!(
                            "event {id} to {} was refused by the broker: {error}",
                            record.topic
                        ),
                        fix,
                    ));
                }
                Report::Refused { reason, record, .. } => {
                    let id = record.event_id.as_deref().unwrap_or("(no id)");
                    return Err(
                        self.refused(&format!("event {id} to {}: {reason}", record.topic), None)
                    );
                }
                // The sink offers the records again itself; the flush's deadline bounds the wait.
                Report::Retrying { reason } => {
                    tracing::warn!(%reason, "replay: records wait for the sink")
                }
                Report::Fatal(why) => {
                    return Err(self.stopped(&format!("the producer failed: {why}")))
                }
            }
        }
        Ok(())
    }

    /// Waits until the broker acknowledged everything sent.
    pub async fn flush(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.flush_timeout;
        while self.delivered < self.sent {
            if Instant::now() >= deadline {
                return Err(self.stopped("the broker did not acknowledge the last records in time"));
            }
            let _ =
                tokio::time::timeout(Duration::from_millis(200), self.publisher.reports_ready())
                    .await;
            self.serve()?;
        }
        Ok(())
    }

    fn stopped(&self, why: &str) -> Error {
        self.refused(why, None)
    }

    /// The replay's end, with the ACL to add first when a missing one was the cause.
    fn refused(&self, why: &str, acl_fix: Option<String>) -> Error {
        let what = format!(
            "replay stopped after {} of {} events sent were acknowledged: {why}",
            self.delivered, self.sent
        );
        match acl_fix {
            Some(fix) => Error::definite(what, format!("{fix}; then {RETRY_HINT}")),
            None => Error::definite(what, RETRY_HINT),
        }
    }
}
