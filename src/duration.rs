//! Durations as operators write them for retention: a whole number and one unit, `7d`, `12h`,
//! `30m`, `45s`. A day is 24 hours (86,400 s), whatever the calendar or the time zone does.
//!
//! One unit only, and a unit always: `7` (seconds? days?) and `1h30m` are refused rather than
//! guessed, since a misread retention deletes rows.
//!
//! And points in time as walrelay writes them: RFC 3339 in UTC ([`rfc3339`]).

use std::time::Duration;

const UNITS: [(char, u64); 4] = [('d', 86_400), ('h', 3_600), ('m', 60), ('s', 1)];

/// Parses `7d`, `12h`, `30m` or `45s` (spaces around the number are allowed: `7 d`).
pub fn parse(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!("{text:?} is not a duration: write a whole number and one unit, d (days), h, m or s, e.g. \"7d\" or \"12h\"")
    };
    let trimmed = text.trim();
    let unit = trimmed.chars().last().ok_or_else(bad)?;
    let (_, seconds) = UNITS.iter().find(|(u, _)| *u == unit).ok_or_else(bad)?;
    let number = trimmed[..trimmed.len() - 1].trim();
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: u64 = number.parse().map_err(|_| bad())?;
    n.checked_mul(*seconds).map(Duration::from_secs).ok_or_else(|| format!("{text:?} is too long"))
}

/// The duration in the largest unit that divides it exactly: `7d`, `36h`, `90m`, `45s`.
pub fn format(duration: Duration) -> String {
    let secs = duration.as_secs();
    for (unit, seconds) in UNITS {
        if secs > 0 && secs.is_multiple_of(seconds) {
            return format!("{}{unit}", secs / seconds);
        }
    }
    "0s".to_string()
}

/// `micros` since the Unix epoch as RFC 3339 in UTC, with microseconds
/// (`2026-12-01T18:17:39.123456Z`).
pub fn rfc3339(micros: i64) -> String {
    let (secs, frac) = (micros.div_euclid(1_000_000), micros.rem_euclid(1_000_000));
    let (days, day_secs) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss) = (day_secs / 3600, day_secs / 60 % 60, day_secs % 60);
    format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{frac:06}Z")
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, <https://howardhinnant.github.io/date_algorithms.html>).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_takes_one_whole_number_and_one_unit() {
        assert_eq!(parse("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse("12h"), Ok(Duration::from_secs(12 * 3_600)));
        assert_eq!(parse("30m"), Ok(Duration::from_secs(1_800)));
        assert_eq!(parse("45s"), Ok(Duration::from_secs(45)));
        assert_eq!(parse(" 7 d "), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn duration_without_a_unit_or_with_anything_else_is_refused() {
        for bad in
            ["", "7", "d", "7w", "7D", "1h30m", "-1d", "+1d", "1.5h", "7 days", "h7", "0x10s"]
        {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("not a duration") && e.contains("\"7d\""), "{bad}: {e}");
        }
        assert!(parse("99999999999999999999d").is_err());
        assert!(parse("999999999999999999d").unwrap_err().contains("too long"));
    }

    #[test]
    fn duration_is_formatted_in_its_largest_exact_unit() {
        assert_eq!(format(Duration::from_secs(7 * 86_400)), "7d");
        assert_eq!(format(Duration::from_secs(36 * 3_600)), "36h");
        assert_eq!(format(Duration::from_secs(90 * 60)), "90m");
        assert_eq!(format(Duration::from_secs(45)), "45s");
        assert_eq!(format(Duration::ZERO), "0s");
        for text in ["7d", "12h", "30m", "45s"] {
            assert_eq!(format(parse(text).unwrap()), text);
        }
    }

    #[test]
    fn commit_times_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(rfc3339(951_782_400_000_001), "2000-02-29T00:00:00.000001Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59.999999Z");
        assert_eq!(rfc3339(4_102_444_799_999_999), "2099-12-31T23:59:59.999999Z");
    }
}
