//! The producer's context: librdkafka's callbacks (delivery reports, errors, log lines), which
//! turn into [`Report`]s for the relay loop and into log lines an operator can act on.
//!
//! librdkafka repeats a failing connection's error at every reconnect; each kind of line is
//! logged once per [`QUIET_FOR`]. A refused SASL login is the one error it cannot tell from an
//! outage by its later symptoms (records time out, metadata requests go unanswered), so it is
//! said once, here, naming the user and where the password comes from, and kept in
//! [`Metrics::broker_login_refused`] for `/readyz`, the probe and the session's end.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Headers;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::{ClientContext, Message};

use super::{Refused, Report};
use crate::config::KafkaConfig;
use crate::delivery::fault::Fault;
use crate::delivery::frontier::Seq;
use crate::metrics::Metrics;

pub struct RelayContext {
    /// Reports the callbacks produced, until [`Publisher::serve_reports`] hands them over. The
    /// callbacks run on the relay's thread, inside that serve, except while a transactional call
    /// flushes (on its own thread) or the producer is dropped; either way one report per record
    /// in flight at most, which the in-flight limits bound (I7).
    reports: Mutex<Vec<Report>>,
    /// How much of a refused record's value to keep for its dead letter.
    capture_bytes: usize,
    /// The broker acknowledged a record of this producer (ends the start-up metadata requests).
    acked: AtomicBool,
    /// librdkafka repeats a failing connection's error at every reconnect (several a second
    /// with the broker down): each kind is logged once per [`QUIET_FOR`], with a count of
    /// the repeats left out.
    quiet: Mutex<HashMap<String, Quieted>>,
    /// Who this producer logs in as, for the line a refused login gets.
    login: Login,
    metrics: Arc<Metrics>,
}

/// How long a repeated librdkafka error or log line stays out of the log.
const QUIET_FOR: Duration = Duration::from_secs(60);

struct Quieted {
    logged: Instant,
    repeats: u64,
}

impl RelayContext {
    pub(super) fn new(kafka: &KafkaConfig, capture_bytes: usize, metrics: Arc<Metrics>) -> Self {
        RelayContext {
            reports: Mutex::new(Vec::new()),
            capture_bytes,
            acked: AtomicBool::new(false),
            quiet: Mutex::new(HashMap::new()),
            login: Login::of(kafka),
            metrics,
        }
    }

    /// The broker acknowledged a record of this producer.
    pub(super) fn has_acked(&self) -> bool {
        self.acked.load(Relaxed)
    }

    /// Whether a line of this kind goes to the log now; `Some(n)`: yes, after `n` repeats
    /// left out since the last one.
    fn admit(&self, kind: &str) -> Option<u64> {
        let mut quiet = self.quiet.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        match quiet.get_mut(kind) {
            Some(q) if now.duration_since(q.logged) < QUIET_FOR => {
                q.repeats += 1;
                None
            }
            Some(q) => {
                let repeats = std::mem::take(&mut q.repeats);
                q.logged = now;
                Some(repeats)
            }
            None => {
                quiet.insert(kind.to_string(), Quieted { logged: now, repeats: 0 });
                Some(0)
            }
        }
    }
}

/// Errors that no retry can cure for this record, as its delivery report says: the record's
/// own (dead letter or stop) and a missing ACL (stop), by the one classification.
pub(super) fn is_permanent(error: &KafkaError) -> bool {
    matches!(crate::delivery::fault::classify(error), Fault::Record | Fault::Authorization)
}

impl RelayContext {
    /// Hands over the reports the callbacks produced since the last call.
    pub(super) fn take_reports(&self, into: &mut VecDeque<Report>) {
        into.extend(self.reports.lock().unwrap_or_else(|e| e.into_inner()).drain(..));
    }

    fn collect(&self, report: Report) {
        self.reports.lock().unwrap_or_else(|e| e.into_inner()).push(report);
    }
}

impl ClientContext for RelayContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        // Connection failures arrive here and again through `error` below: they are logged
        // there, rate-limited, and the outage itself by the reachability probe.
        if matches!(fac, "FAIL" | "ERROR") {
            tracing::debug!(target: "librdkafka", fac, "{message}");
            return;
        }
        // The records of a transaction this relay aborts fail as "Purged": that is the abort.
        if message.contains("in state BeginAbort")
            || message.contains("in state AbortingTransaction")
        {
            tracing::debug!(target: "librdkafka", fac, "{message}");
            return;
        }
        // Asked for with `[kafka] debug`: every line, none left out as a repeat.
        if matches!(level, RDKafkaLogLevel::Debug) {
            tracing::debug!(target: "librdkafka", fac, "{message}");
            return;
        }
        let Some(repeats) = self.admit(fac) else { return };
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", fac, repeats, "{message}")
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "librdkafka", fac, repeats, "{message}")
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", fac, repeats, "{message}")
            }
            RDKafkaLogLevel::Debug => {}
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let code = error.rdkafka_error_code();
        if code == Some(RDKafkaErrorCode::Fatal) {
            self.collect(Report::Fatal(format!("{error}: {reason}")));
        } else if code == Some(RDKafkaErrorCode::Authentication) {
            let cause = self.login.refused();
            let mut refused =
                self.metrics.broker_login_refused.lock().unwrap_or_else(|e| e.into_inner());
            *refused = Some(cause.clone());
            drop(refused);
            if self.admit("login").is_some() {
                tracing::error!(
                    reason,
                    "{cause}; records wait unconfirmed, and each session logs in again"
                );
            }
        } else if code == Some(RDKafkaErrorCode::AllBrokersDown) {
            // The reachability probe logs the outage and its end, once each.
            tracing::debug!(%error, reason, "kafka client error");
        } else if let Some(repeats) = self.admit(&format!("{code:?}")) {
            // Transport errors are retried by librdkafka; the relay only acts on delivery
            // reports.
            tracing::warn!(%error, reason, repeats, "kafka client error (repeats of it are logged once a minute)");
        }
    }
}

impl ProducerContext for RelayContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, seq: usize) {
        let seq = seq as Seq;
        let report = match result {
            Ok(m) => {
                self.acked.store(true, Relaxed);
                Report::Delivered { seq, partition: m.partition(), offset: m.offset() }
            }
            Err((error, m)) if is_permanent(error) => {
                let event_id = m.headers().and_then(|h| {
                    h.iter()
                        .find(|h| h.key == "id")
                        .and_then(|h| h.value)
                        .map(|v| String::from_utf8_lossy(v).into_owned())
                });
                let record = Refused {
                    topic: Arc::from(m.topic()),
                    key: m.key().map(bytes::Bytes::copy_from_slice),
                    value: m.payload().map(|v| {
                        bytes::Bytes::copy_from_slice(&v[..v.len().min(self.capture_bytes)])
                    }),
                    event_id,
                };
                Report::Rejected { seq, error: error.clone(), record: Box::new(record) }
            }
            Err((error, _)) => Report::Failed { seq, error: error.clone() },
        };
        self.collect(report);
    }
}

/// Who the producer logs in as: `sasl.username` and `sasl.mechanism` of `[kafka]`.
struct Login {
    user: Option<String>,
    mechanism: String,
}

impl Login {
    fn of(kafka: &KafkaConfig) -> Login {
        let get = |k: &str| kafka.properties.get(k).filter(|v| !v.is_empty()).cloned();
        Login {
            user: get("sasl.username"),
            // librdkafka's default mechanism.
            mechanism: get("sasl.mechanism").unwrap_or_else(|| "GSSAPI".into()),
        }
    }

    /// What a refused login means and its fix, in one sentence (no secret in it).
    fn refused(&self) -> String {
        match &self.user {
            Some(user) => format!(
                "kafka refuses walrelay's SASL login as user {user} ({}): fix the password in WALRELAY_KAFKA_SASL__PASSWORD (or [kafka] sasl.password), or sasl.username and sasl.mechanism",
                self.mechanism
            ),
            None => format!(
                "kafka refuses walrelay's SASL login ({}): fix [kafka] sasl.username and the password in WALRELAY_KAFKA_SASL__PASSWORD, or the mechanism",
                self.mechanism
            ),
        }
    }
}
