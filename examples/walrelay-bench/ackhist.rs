//! commit→ack as walrelay itself measures it: the `walrelay_commit_to_ack_seconds` histogram on
//! its `/metrics` (commit time from the transaction's Begin message, ack time when the loop
//! handles the delivery report), and the part until the loop read the transaction,
//! `walrelay_commit_to_read_seconds` (PostgreSQL's share plus the loop's wait to run). Two
//! scrapes bracket a phase; the quantiles come from the difference, interpolated linearly inside
//! a bucket as Prometheus' `histogram_quantile` does. The buckets are 1 ms wide up to 10 ms and
//! 2.5–10 ms wide up to 50 ms, which bounds the error.

const ACK: &str = "walrelay_commit_to_ack_seconds_bucket{le=\"";
const READ: &str = "walrelay_commit_to_read_seconds_bucket{le=\"";

/// Both histograms of one scrape.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    pub ack: Vec<(f64, u64)>,
    pub read: Vec<(f64, u64)>,
}

#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct AckQuantiles {
    /// Acknowledgements counted between the two scrapes.
    pub count: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
}

/// Cumulative buckets (upper bound in seconds, +Inf as infinity, count) of the histogram whose
/// bucket lines start with `prefix`.
pub fn parse(text: &str, prefix: &str) -> Vec<(f64, u64)> {
    text.lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .filter_map(|rest| {
            let (le, count) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
            Some((le, count.trim().parse().ok()?))
        })
        .collect()
}

/// How many acknowledgements the scrape counted (0 when empty).
pub fn count(scrape: &[(f64, u64)]) -> u64 {
    scrape.last().map_or(0, |b| b.1)
}

/// The quantiles of what was acknowledged between `before` and `after` (None: nothing was, or
/// the scrapes don't match).
pub fn between(before: &[(f64, u64)], after: &[(f64, u64)]) -> Option<AckQuantiles> {
    if before.len() != after.len() || after.is_empty() {
        return None;
    }
    let delta: Vec<(f64, u64)> =
        before.iter().zip(after).map(|(b, a)| (a.0, a.1.saturating_sub(b.1))).collect();
    let count = delta.last()?.1;
    if count == 0 {
        return None;
    }
    let q = |q: f64| quantile(&delta, count, q) * 1000.0;
    Some(AckQuantiles { count, p50_ms: q(0.50), p99_ms: q(0.99), p999_ms: q(0.999) })
}

fn quantile(cumulative: &[(f64, u64)], count: u64, q: f64) -> f64 {
    let rank = q * count as f64;
    let (mut lower, mut below) = (0.0, 0u64);
    for &(upper, cum) in cumulative {
        if cum as f64 >= rank {
            if upper.is_infinite() {
                return lower; // beyond the last finite bound: report that bound
            }
            let inside = (cum - below) as f64;
            return lower + (upper - lower) * (rank - below as f64) / inside.max(1.0);
        }
        (lower, below) = (upper, cum);
    }
    lower
}

/// One scrape of walrelay's histograms (empty when it did not answer).
pub async fn scrape(port: u16) -> Scrape {
    let text = crate::support::process::http_get(port, "/metrics").await.unwrap_or_default();
    Scrape { ack: parse(&text, ACK), read: parse(&text, READ) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_each_histogram_by_name_from_one_scrape() {
        let text = "walrelay_commit_to_ack_seconds_bucket{le=\"0.001\"} 3\n\
                    walrelay_commit_to_ack_seconds_bucket{le=\"+Inf\"} 5\n\
                    walrelay_commit_to_ack_seconds_count 5\n\
                    walrelay_commit_to_read_seconds_bucket{le=\"0.001\"} 4\n\
                    walrelay_commit_to_read_seconds_bucket{le=\"+Inf\"} 5\n";
        let ack = super::parse(text, super::ACK);
        let read = super::parse(text, super::READ);
        assert_eq!(ack, vec![(0.001, 3), (f64::INFINITY, 5)]);
        assert_eq!(read, vec![(0.001, 4), (f64::INFINITY, 5)]);
        assert_eq!(super::count(&ack), 5);
    }

    #[test]
    fn interpolates_inside_the_bucket_like_histogram_quantile() {
        let before = [(0.001, 0), (0.01, 0), (f64::INFINITY, 0)];
        // 100 acks: 50 at ≤ 1 ms, 49 in (1, 10] ms, 1 above 10 ms.
        let after = [(0.001, 50), (0.01, 99), (f64::INFINITY, 100)];
        let q = super::between(&before, &after).unwrap();
        assert_eq!(q.count, 100);
        assert!((q.p50_ms - 1.0).abs() < 1e-9, "{q:?}");
        assert!((q.p99_ms - 10.0).abs() < 1e-9, "{q:?}");
        assert_eq!(q.p999_ms, 10.0, "{q:?}");
    }
}
