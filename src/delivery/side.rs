//! Where delivery hands records: Kafka through librdkafka, or a sink beyond Kafka through its
//! dispatch (`crate::sink`). Both answer by sequence number in [`Report`]s, so the frontier, the
//! dead letters, the metrics and the stop are delivery's, once, whichever the sink. Kafka's
//! transactions are not here: `Delivery::exactly_once` holds their calls, taken from the
//! producer when it is made.

use std::collections::VecDeque;
use std::sync::Arc;

use super::frontier::Seq;
use super::producer::{Publisher, Refused, Report, SendError};
use crate::router::Record;
use crate::sink::dispatch::{Dispatch, Outcome};

pub enum Side {
    Kafka(Publisher),
    Broker(Dispatch),
}

impl Side {
    /// `[delivery] sink`'s name.
    pub fn name(&self) -> &'static str {
        match self {
            Side::Kafka(_) => "kafka",
            Side::Broker(d) => d.name(),
        }
    }

    /// Resolves once reports wait (cancel-safe).
    pub async fn reports_ready(&self) {
        match self {
            Side::Kafka(p) => p.reports_ready().await,
            Side::Broker(d) => d.ready().await,
        }
    }

    /// Moves the reports ready now into `reports`.
    pub fn serve_reports(&self, reports: &mut VecDeque<Report>) {
        match self {
            Side::Kafka(p) => p.serve_reports(reports),
            Side::Broker(d) => {
                let mut outcomes = Vec::new();
                d.take(&mut outcomes);
                reports.extend(outcomes.into_iter().map(|outcome| match outcome {
                    Outcome::Acked(seq) => Report::Acked { seq },
                    Outcome::Refused { seq, reason, record } => {
                        Report::Refused { seq, reason, record: Box::new(Refused::of(&record)) }
                    }
                    Outcome::Retrying { reason } => Report::Retrying { reason },
                }));
            }
        }
    }

    /// Kafka: waits for `topic`'s metadata, and returns its partition count. A sink beyond
    /// Kafka has no partitions: its dispatch keeps each key's order itself.
    pub async fn meet(&mut self, topic: &Arc<str>) -> Option<i32> {
        match self {
            Side::Kafka(p) => p.meet(topic).await,
            Side::Broker(_) => None,
        }
    }

    /// Hands `record` over under `seq`. Delivery's own path gives a sink beyond Kafka the
    /// record itself (no copy); this copies it, for the replay's producer.
    pub fn send(&self, record: &Record, seq: Seq) -> Result<(), SendError> {
        match self {
            Side::Kafka(p) => p.send(record, seq),
            Side::Broker(d) => {
                d.send(seq, Arc::new(record.clone()));
                Ok(())
            }
        }
    }

    /// Kafka: the partitions of `topic` short of in-sync replicas, to say why records fail.
    pub fn under_replicated(&self, topic: &str) -> Vec<String> {
        match self {
            Side::Kafka(p) => p.under_replicated(topic),
            Side::Broker(_) => Vec::new(),
        }
    }
}
