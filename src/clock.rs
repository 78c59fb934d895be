//! The wall clock, as the relay reads it: microseconds since the Unix epoch, the unit of
//! PostgreSQL's commit times. A leaf, so whatever needs "now" (the positions' lag, the metrics,
//! the console, the audit) imports it without importing each other.

/// Microseconds since the Unix epoch.
pub fn unix_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}
