//! A token bucket: the bound on event lookups, each of which costs a PostgreSQL query and a
//! Kafka read, so that a script (or a stranger) driving them cannot load either.

use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Bucket {
    capacity: f64,
    /// Tokens added per second.
    rate: f64,
    /// Tokens left, as of when.
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    /// A full bucket of `capacity` tokens, one more every `every`.
    pub fn new(capacity: u32, every: Duration) -> Bucket {
        Bucket {
            capacity: f64::from(capacity),
            rate: 1.0 / every.as_secs_f64(),
            state: Mutex::new((f64::from(capacity), Instant::now())),
        }
    }

    /// Takes a token, or says how long until there is one.
    pub fn take(&self) -> Result<(), Duration> {
        self.take_at(Instant::now())
    }

    fn take_at(&self, now: Instant) -> Result<(), Duration> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, since) = *state;
        let tokens = (tokens + now.saturating_duration_since(since).as_secs_f64() * self.rate)
            .min(self.capacity);
        if tokens >= 1.0 {
            *state = (tokens - 1.0, now);
            return Ok(());
        }
        *state = (tokens, now);
        Err(Duration::from_secs_f64((1.0 - tokens) / self.rate))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_up_to_the_capacity_passes_then_one_token_per_interval() {
        let bucket = Bucket::new(3, Duration::from_secs(2));
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(bucket.take_at(t0), Ok(()));
        }
        let wait = bucket.take_at(t0).unwrap_err();
        assert_eq!(wait.as_secs_f64().round(), 2.0, "{wait:?}");
        // Half an interval later: half a token, a second to wait.
        let wait = bucket.take_at(t0 + Duration::from_secs(1)).unwrap_err();
        assert_eq!(wait.as_secs_f64().round(), 1.0, "{wait:?}");
        assert_eq!(bucket.take_at(t0 + Duration::from_secs(2)), Ok(()));
        assert!(bucket.take_at(t0 + Duration::from_secs(2)).is_err());
        // A long pause refills it to the capacity, no more.
        let later = t0 + Duration::from_secs(600);
        for _ in 0..3 {
            assert_eq!(bucket.take_at(later), Ok(()));
        }
        assert!(bucket.take_at(later).is_err());
    }
}
