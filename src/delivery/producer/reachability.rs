//! Whether the producer reaches a broker, asked of the broker itself.
//!
//! librdkafka's events do not say it: "all brokers down" comes once when the last connection
//! fails and nothing comes when one is back, and a hung broker (accepting connections, never
//! answering) fires no event for a minute. Delivery reports only come while records flow, so a
//! quiet outbox would read "down" long after the broker returned. Instead a thread of its own
//! asks for metadata every [`PROBE_EVERY`], bounded by [`PROBE_TIMEOUT`]: an answer means up,
//! anything else down, with or without traffic. The request names only the topics this producer
//! already writes to (none at first: then it asks for the broker list alone), so it stays cheap
//! on a cluster with many topics and creates nothing.
//!
//! Transitions are logged, once each: "unreachable" with librdkafka's reason (at the second
//! failed probe, so that one lost answer is not an outage), "reachable again" with how long it
//! was not. The outage is kept in [`Metrics::broker_outage`], not here, so that one outage
//! across several sessions (each with its own producer) is logged and measured once.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use rdkafka::bindings as rdsys;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::{BaseProducer, Producer};

use super::RelayContext;
use crate::metrics::{Metrics, Outage};

/// How often the broker is asked.
pub const PROBE_EVERY: Duration = Duration::from_secs(2);
/// How long an answer may take before the broker counts as unreachable. Metadata is answered
/// in milliseconds even under load; a broker that takes seconds is not serving records either.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(4);

/// Probes the producer's brokers until the producer is gone, keeping `metrics.broker_up`.
pub(super) fn watch(producer: Weak<BaseProducer<RelayContext>>, metrics: Arc<Metrics>) {
    let spawned = std::thread::Builder::new().name("walrelay-kafka-probe".into()).spawn(move || {
        loop {
            let Some(strong) = producer.upgrade() else { return };
            let asked = Instant::now();
            let answer = probe(&strong, PROBE_TIMEOUT);
            drop(strong);
            metrics.broker_up.store(answer.is_ok(), Relaxed);
            metrics.broker_asked.store(true, Relaxed);
            // The outage is the relay's, not this producer's: each session builds a new
            // producer (and a new probe), and an outage that spans sessions is one outage,
            // measured from the first failed probe to the first answer.
            let mut outage = metrics.broker_outage.lock().unwrap_or_else(|p| p.into_inner());
            match (outage.as_mut(), &answer) {
                (None, Err(_)) => *outage = Some(Outage { since: asked, said: false }),
                // Said at the second failed probe: by then a refused login has been said, with
                // its fix, and "unreachable" would send the operator to the network instead.
                (Some(o), Err(code)) if !o.said => {
                    o.said = true;
                    if metrics.login_refused().is_none() {
                        tracing::warn!(error = %code,
                            "kafka broker unreachable: no metadata answer for {} s; /readyz is not ready until one answers (librdkafka keeps reconnecting)",
                            o.since.elapsed().as_secs());
                    }
                }
                (Some(o), Ok(())) => {
                    if o.said {
                        tracing::info!(
                            unreachable_for_s = o.since.elapsed().as_secs(),
                            "kafka broker reachable again"
                        );
                    }
                    *outage = None;
                }
                _ => {}
            }
            drop(outage);
            if answer.is_ok() {
                *metrics.broker_login_refused.lock().unwrap_or_else(|e| e.into_inner()) = None;
            }
            std::thread::sleep(PROBE_EVERY);
        }
    });
    if let Err(e) = spawned {
        // Without the probe, readiness keeps its last value; the relay itself works on.
        tracing::warn!(error = %e, "cannot start the kafka reachability probe");
    }
}

/// One metadata round trip on the producer's connections.
fn probe(producer: &BaseProducer<RelayContext>, timeout: Duration) -> Result<(), RDKafkaErrorCode> {
    let mut metadata: *const rdsys::rd_kafka_metadata_t = std::ptr::null();
    let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: the client is alive for the call (the caller holds it); `all_topics = 0` with no
    // topic handle asks for the topics the client knows, and what librdkafka returns is freed
    // here with its own destructor.
    let err = unsafe {
        let err = rdsys::rd_kafka_metadata(
            producer.client().native_ptr(),
            0,
            std::ptr::null_mut(),
            &mut metadata,
            timeout_ms,
        );
        if !metadata.is_null() {
            rdsys::rd_kafka_metadata_destroy(metadata);
        }
        err
    };
    match RDKafkaErrorCode::from(err) {
        RDKafkaErrorCode::NoError => Ok(()),
        code => Err(code),
    }
}
