//! The last hour of the relay, for the console's charts with no Prometheus: lag in seconds and
//! bytes, events per second and records in flight, sampled every [`EVERY`] into a fixed-size
//! ring (720 samples of 40 bytes: 29 KB). Sampled on the HTTP thread from the relay's atomics
//! and its positions snapshot, never on the relay's thread.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::unix_micros;
use crate::metrics::Metrics;

/// How often a sample is taken.
pub const EVERY: Duration = Duration::from_secs(5);
/// Samples kept: one hour.
pub const KEPT: usize = 720;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Unix seconds.
    pub t: f64,
    pub lag_seconds: f64,
    pub lag_bytes: u64,
    /// Records acknowledged per second since the sample before.
    pub events_per_s: f64,
    pub inflight_records: u64,
}

#[derive(Debug, Default)]
pub struct History {
    samples: Mutex<VecDeque<Sample>>,
}

impl History {
    /// The samples, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples.lock().unwrap_or_else(|e| e.into_inner()).iter().copied().collect()
    }

    fn push(&self, sample: Sample) {
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        if samples.len() == KEPT {
            samples.pop_front();
        }
        samples.push_back(sample);
    }

    /// Samples `metrics` every [`EVERY`], for as long as the runtime it is spawned on runs.
    pub async fn sample(self: Arc<Self>, metrics: Arc<Metrics>) {
        let mut last: Option<(f64, u64)> = None;
        let mut tick = tokio::time::interval(EVERY);
        loop {
            tick.tick().await;
            let t = unix_micros() as f64 / 1e6;
            let published = metrics.published_total();
            let positions = metrics.positions();
            let events_per_s = match last {
                Some((t0, n0)) if t > t0 => published.saturating_sub(n0) as f64 / (t - t0),
                _ => 0.0,
            };
            last = Some((t, published));
            self.push(Sample {
                t,
                lag_seconds: positions.lag_seconds(),
                lag_bytes: positions.lag_bytes(),
                events_per_s,
                inflight_records: metrics.inflight_records.load(Relaxed),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_last_hour_only() {
        let h = History::default();
        for i in 0..KEPT + 10 {
            h.push(Sample {
                t: i as f64,
                lag_seconds: 0.0,
                lag_bytes: 0,
                events_per_s: 0.0,
                inflight_records: 0,
            });
        }
        let s = h.samples();
        assert_eq!(s.len(), KEPT);
        assert_eq!(s[0].t, 10.0);
        assert_eq!(std::mem::size_of::<Sample>(), 40);
    }
}
