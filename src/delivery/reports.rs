//! Delivery reports into the frontier: what each of librdkafka's reports means for the record
//! it is about — acknowledged (the frontier moves), failed for now (the session ends and the
//! next one resends from the confirmed position), refused for good (its dead letter takes its
//! place, or the relay stops at it), or a missing ACL (the relay stops with the ACL to add).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::dead_letter;
use super::exactly_once::ProgressReport;
use super::fault::{self, Fault};
use super::frontier::{Seq, PROGRESS_SEQ};
use super::producer::{self, Refused, Report};
use super::{Delivery, Failed};
use crate::clock::unix_micros;
use crate::error::{Error, Result};

impl Delivery {
    /// Resolves once librdkafka has delivery reports to serve (cancel-safe).
    pub async fn reports_ready(&self) {
        self.side.reports_ready().await
    }

    /// Runs librdkafka's waiting callbacks and handles the delivery reports they produced.
    /// Returns whether there was any.
    pub fn serve_reports(&mut self) -> Result<bool> {
        self.side.serve_reports(&mut self.reports);
        let any = !self.reports.is_empty();
        while let Some(report) = self.reports.pop_front() {
            self.on_report(report)?;
        }
        Ok(any)
    }

    /// Waits until at least one delivery report was handled.
    pub async fn next_reports(&mut self) -> Result<()> {
        while !self.serve_reports()? {
            self.side.reports_ready().await;
        }
        Ok(())
    }

    fn on_report(&mut self, report: Report) -> Result<()> {
        match report {
            // The commit of its transaction is what counts: it fails too, and tells why.
            Report::Delivered { seq: PROGRESS_SEQ, .. } => {
                self.progress_reported(ProgressReport::Delivered);
                Ok(())
            }
            Report::Failed { seq: PROGRESS_SEQ, error }
            | Report::Rejected { seq: PROGRESS_SEQ, error, .. } => {
                self.progress_reported(ProgressReport::Failed(error));
                Ok(())
            }
            Report::Delivered { seq, partition, offset } => {
                if let Some(sent) = self.frontier.sent_of(seq) {
                    if let Err(e) = self.offsets.reported(&sent.topic, partition, offset) {
                        self.metrics.delivery_errors.fetch_add(1, Relaxed);
                        return Err(Error::transient_msg(format!(
                            "kafka reported record #{seq} delivered to {} [{partition}] at offset {offset}, \
                             {e}; it is not confirmed and the next session sends it again",
                            sent.topic
                        )));
                    }
                }
                if let Some(mut sent) = self.frontier.ack(seq) {
                    if let (Some(span), Some(exporter)) = (sent.span.take(), &self.exporter) {
                        exporter.acked(*span, &sent.topic, partition, offset, unix_micros());
                    }
                    self.acked.push(sent);
                }
                Ok(())
            }
            // Never skipped: the session ends, confirming only the acked prefix, and the next one
            // replays from there.
            Report::Failed { seq, error } => {
                self.metrics.delivery_errors.fetch_add(1, Relaxed);
                self.metrics.broker_failed(&error.to_string());
                self.metrics.delivery_failing.store(true, Relaxed);
                // librdkafka's report says only "Message timed out" when the leader kept
                // refusing the record: the cluster's metadata says why.
                let topic = self.frontier.sent_of(seq).map(|s| s.topic.clone());
                let short = topic.as_deref().map_or(Vec::new(), |t| self.side.under_replicated(t));
                self.metrics.under_replicated_partitions.store(short.len() as u64, Relaxed);
                let what = match topic {
                    Some(topic) if !short.is_empty() => format!(
                        "kafka did not acknowledge record #{seq} of topic {topic}, whose {}: \
                         below the topic's min.insync.replicas the leader refuses acks=all records \
                         (NOT_ENOUGH_REPLICAS) until enough replicas are back in sync",
                        short.join(", ")
                    ),
                    _ => match self.metrics.login_refused() {
                        Some(why) => format!("kafka did not acknowledge record #{seq}: {why}"),
                        None => format!("kafka did not acknowledge record #{seq}"),
                    },
                };
                Err(Error::transient(what, error))
            }
            Report::Rejected { seq, error, record } if fault::classify(&error) != Fault::Record => {
                Err(self.not_the_records_fault(
                    seq,
                    &record.topic,
                    record.event_id.as_deref(),
                    error,
                ))
            }
            // Exactly-once: librdkafka fails the whole Kafka transaction with the record, so its
            // dead letter cannot go in its place; every retry would meet the same refusal. Counted
            // as refused: the transaction is lost, so a stop aborts it at once instead of
            // committing it (a refusal librdkafka makes itself leaves the producer willing to
            // try) and waiting for an acknowledgement that never comes.
            Report::Rejected { seq, error, record }
                if self.exactly_once.as_ref().is_some_and(|t| t.policy.is_open()) =>
            {
                self.refused += 1;
                let what = format!(
                    "kafka refused the record of outbox row {} at LSN {} (topic {}) inside a Kafka transaction, which fails the transaction",
                    record.event_id.as_deref().unwrap_or("(no event id)"),
                    self.frontier.lsn_of(seq).unwrap_or_default(),
                    record.topic
                );
                let fix = format!(
                    "{}; with exactly-once a refused record can be dead-lettered only when librdkafka refuses it before sending it, so keep [kafka] message.max.bytes at or below the topic's max.message.bytes; nothing after the transaction's start was confirmed",
                    record_fix(&error, &record.topic)
                );
                Err(Error::definite_with(what, fix, error))
            }
            Report::Rejected { seq, error, record } => self.on_rejected(seq, error, *record),
            Report::Acked { seq } => {
                if let Some(mut sent) = self.frontier.ack(seq) {
                    if let (Some(span), Some(exporter)) = (sent.span.take(), &self.exporter) {
                        // No partition or offset beyond Kafka.
                        exporter.acked(*span, &sent.topic, -1, -1, unix_micros());
                    }
                    self.acked.push(sent);
                }
                Ok(())
            }
            // The sink holds the records and offers them again; the frontier stays before them.
            Report::Retrying { reason } => {
                self.metrics.delivery_errors.fetch_add(1, Relaxed);
                self.metrics.broker_failed(&reason);
                self.metrics.delivery_failing.store(true, Relaxed);
                tracing::warn!(
                    sink = self.side.name(),
                    unacked = self.frontier.unacked(),
                    "{reason}; the records wait and are sent again, and nothing after them is confirmed"
                );
                Ok(())
            }
            Report::Refused { seq, reason, record } => {
                let sink = self.side.name();
                let fix = format!("{reason}, or configure [dead_letter] topic; nothing after this row was confirmed");
                let dead_letter_fix = format!(
                    "the {sink} sink refused the dead letter too ({reason}): make [dead_letter] topic a destination the sink takes"
                );
                self.refused_for_good(
                    seq,
                    &format!("the {sink} sink refused"),
                    *record,
                    reason.clone(),
                    fix,
                    dead_letter_fix,
                    None,
                )
            }
            Report::Fatal(reason) => Err(Error::transient_msg(format!(
                "the kafka producer hit a fatal error and must be rebuilt: {reason}"
            ))),
        }
    }

    /// A refusal that is not the record's: a missing ACL (a stop with the `kafka-acls.sh` line
    /// that fixes it; a dead letter would hide it), or what the Kafka transaction or the
    /// producer went through (the session ends and the next resumes from the last commit).
    pub(super) fn not_the_records_fault(
        &mut self,
        seq: Seq,
        topic: &str,
        event_id: Option<&str>,
        error: KafkaError,
    ) -> Error {
        let what = match (seq, self.frontier.lsn_of(seq)) {
            (PROGRESS_SEQ, _) => {
                format!("kafka refused the progress record of the open Kafka transaction (topic {topic})")
            }
            (_, None) => format!("kafka refused record #{seq} (topic {topic})"),
            (_, Some(lsn)) => format!(
                "kafka refused the record of outbox row {} at LSN {lsn} (topic {topic})",
                event_id.unwrap_or("(no event id)")
            ),
        };
        match fault::classify(&error) {
            Fault::Authorization => {
                // Never acknowledged: the stop that follows does not wait for it.
                if seq != PROGRESS_SEQ {
                    self.refused += 1;
                }
                let fix = producer::refusal_fix(&error, topic, &self.principal)
                    .unwrap_or_else(|| format!("grant {} the ACL the error names", self.principal));
                Error::definite_with(
                    format!("{what}: an ACL is missing"),
                    format!("{fix}; nothing after this record was confirmed"),
                    error,
                )
            }
            Fault::Fenced => Error::Fenced {
                what: format!("{what}: this relay's producer was fenced ({error})"),
            },
            Fault::Record | Fault::Transaction | Fault::Transient => Error::transient(what, error),
        }
    }

    /// A record refused for good: queue its dead letter, or stop naming the row. `record` is
    /// what the refusal knew of it; the row's source and position are the frontier's, by `seq`.
    pub(super) fn on_rejected(
        &mut self,
        seq: Seq,
        error: KafkaError,
        record: Refused,
    ) -> Result<()> {
        let topic = record.topic.clone();
        let acl_fix = producer::refusal_fix(&error, &topic, &self.principal);
        let fix = acl_fix.clone().unwrap_or_else(|| record_fix(&error, &topic));
        let fix = format!(
            "{fix}, or configure [dead_letter] topic; nothing after this row was confirmed"
        );
        let dead_letter_fix = acl_fix.unwrap_or_else(|| "check that the dead-letter topic exists and accepts records of [dead_letter] max_value_bytes".into());
        let reason = error.to_string();
        self.refused_for_good(
            seq,
            "kafka refused",
            record,
            reason,
            fix,
            dead_letter_fix,
            Some(Box::new(error)),
        )
    }

    /// A record its sink refused for good (`who`: "kafka refused"): its dead letter takes its
    /// number, or the relay stops with `fix` (`dead_letter_fix` when the letter itself was).
    #[allow(clippy::too_many_arguments)]
    fn refused_for_good(
        &mut self,
        seq: Seq,
        who: &str,
        record: Refused,
        reason: String,
        fix: String,
        dead_letter_fix: String,
        error: Option<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Result<()> {
        let lsn = self.frontier.lsn_of(seq).unwrap_or_default();
        let source = self.frontier.sent_of(seq).map_or_else(|| Arc::from(""), |s| s.table.clone());
        let topic = record.topic.clone();
        let rejected = Failed {
            topic: Some(record.topic),
            key: record.key,
            value: record.value,
            event_id: record.event_id,
            ..Failed::new(source, lsn, reason.clone())
        };
        let what = format!(
            "{who} the record of outbox row {} at LSN {} (topic {topic})",
            rejected.event_id_or_none(),
            rejected.lsn,
        );
        if self.dead_letter.as_ref().is_none_or(|dl| *dl.topic == *topic) {
            self.refused += 1;
        }
        // Kafka's refusal carries its error as the chain's source; another sink's says it here.
        let stopped = if error.is_some() { what.clone() } else { format!("{what}: {reason}") };
        let stop = |what: String, fix: String| match error {
            Some(error) => Error::definite_with(what, fix, error),
            None => Error::definite(what, fix),
        };
        let dl = match &self.dead_letter {
            Some(dl) if *dl.topic != *topic => dl,
            Some(_) => {
                return Err(stop(
                    format!("{what}: the dead-letter record itself was refused"),
                    dead_letter_fix,
                ));
            }
            None => return Err(stop(stopped, fix)),
        };
        tracing::warn!(error = %reason, topic = %dl.topic, "{what}; sent to the dead-letter topic");
        self.metrics.note_dead_letter(rejected.seen());
        let letter = dead_letter::record(dl, rejected);
        self.frontier.redirect(seq, letter.topic.clone());
        self.pending_dead.push((seq, letter));
        Ok(())
    }
}

/// What makes Kafka take a record it refused for good, by the refusal.
fn record_fix(error: &KafkaError, topic: &str) -> String {
    match error.rdkafka_error_code() {
        Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic) => {
            format!(
                "create topic {topic} (the brokers do not create topics on first use: \
                 auto.create.topics.enable=false), or route the row to a topic that exists"
            )
        }
        Some(RDKafkaErrorCode::MessageSizeTooLarge) => format!(
            "make the record fit: raise topic {topic}'s max.message.bytes (the broker's \
             message.max.bytes by default) above its size, and librdkafka's message.max.bytes \
             in [kafka] (1,000,000 by default) if that is smaller; the broker refuses a whole \
             batch over the topic's limit, so keep [kafka] batch.size under it too"
        ),
        _ => "make the record fit (message.max.bytes, the topic's partitions)".to_string(),
    }
}
