//! Which outbox rows a snapshot reads: a time window or event ids, narrowed by aggregate; how
//! an operator writes a window's ends, how it reads in messages, and how its times become SQL.

use std::time::Duration;

use super::literal;
use crate::error::{Error, Result};
use crate::source::Control;

/// Which rows a snapshot reads (a replay sends, an audit checks, a lookup finds).
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub since: Option<TimeBound>,
    pub until: Option<TimeBound>,
    /// Event ids (`table.field.event.id`); empty: select by time.
    pub ids: Vec<String>,
    /// Matched on `route.by.field`.
    pub aggregate_type: Option<String>,
    /// Matched on `table.field.event.key`.
    pub aggregate_id: Option<String>,
}

/// One end of the time window: a duration before now (`6h`), or a time (RFC 3339).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimeBound {
    Ago(Duration),
    At(String),
}

impl TimeBound {
    /// `6h` / `30m` / `7d` is a duration ([`crate::duration::parse`], as `purge` reads one); text
    /// that starts with a date (`2026-12-01`, `2026-12-01T10:00:00Z`) or is `now`, `today` or
    /// `yesterday` is a time, which PostgreSQL then reads. Anything else (`5x`, `1.5h`, `90`) is
    /// refused here, with the duration's rule, rather than handed to PostgreSQL, whose error
    /// would be about date styles.
    pub fn parse(text: &str) -> std::result::Result<TimeBound, String> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(
                "empty: give a duration before now (30m, 6h, 7d) or a time (2026-12-01T10:00:00Z)"
                    .into(),
            );
        }
        match crate::duration::parse(trimmed) {
            Ok(d) => Ok(TimeBound::Ago(d)),
            Err(_) if starts_with_date(trimmed) => Ok(TimeBound::At(trimmed.to_string())),
            Err(_)
                if ["now", "today", "yesterday"]
                    .contains(&trimmed.to_ascii_lowercase().as_str()) =>
            {
                Ok(TimeBound::At(trimmed.to_string()))
            }
            Err(not_a_duration) => Err(format!(
                "{not_a_duration}; or a time, an RFC 3339 date and time like 2026-12-01T10:00:00Z"
            )),
        }
    }
}

/// Why a window of two durations is empty (`--since 1h --until 2h`), known before connecting;
/// windows with a time in them are checked by PostgreSQL when the snapshot opens
/// ([`check_times`]).
pub fn inverted_window(since: Option<&TimeBound>, until: Option<&TimeBound>) -> Option<String> {
    let (Some(TimeBound::Ago(since)), Some(TimeBound::Ago(until))) = (since, until) else {
        return None;
    };
    (until >= since).then(|| {
        format!(
            "--until ({} ago) is not after --since ({} ago): the window is empty; give --until a shorter duration than --since",
            crate::duration::format(*until),
            crate::duration::format(*since)
        )
    })
}

/// `YYYY-MM-DD` at the start: the only way a time given to replay or audit begins.
fn starts_with_date(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() >= 10
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b'-'
        && b[8..10].iter().all(u8::is_ascii_digit)
}

/// The selection in words, for messages.
pub fn describe(sel: &Selection) -> String {
    let mut parts = Vec::new();
    if !sel.ids.is_empty() {
        parts.push(format!("{} event id(s)", sel.ids.len()));
    }
    if let Some(s) = &sel.since {
        parts.push(format!("since {}", show(s)));
    }
    if let Some(u) = &sel.until {
        parts.push(format!("until {}", show(u)));
    }
    if let Some(t) = &sel.aggregate_type {
        parts.push(format!("aggregate type {t}"));
    }
    if let Some(a) = &sel.aggregate_id {
        parts.push(format!("aggregate id {a}"));
    }
    parts.join(", ")
}

/// A window's end in words: `6h ago`, or the time as given.
fn show(bound: &TimeBound) -> String {
    match bound {
        TimeBound::Ago(d) => format!("{} ago", crate::duration::format(*d)),
        TimeBound::At(t) => t.clone(),
    }
}

/// A window bound as SQL: now() is the snapshot's start, so `6h` means the same all along.
pub(super) fn bound_sql(bound: &TimeBound) -> String {
    match bound {
        TimeBound::Ago(d) => format!("now() - interval '{} seconds'", d.as_secs()),
        TimeBound::At(t) => format!("{}::timestamptz", literal(t)),
    }
}

/// Checks that every time of the selection is one PostgreSQL reads, before anything else.
pub(super) async fn check_times(control: &Control, sel: &Selection) -> Result<()> {
    for (flag, bound) in [("--since", &sel.since), ("--until", &sel.until)] {
        let Some(TimeBound::At(text)) = bound else { continue };
        let sql = format!("SELECT {}::timestamptz", literal(text));
        if let Err(e) = control.client().simple_query(&sql).await {
            return Err(Error::definite_with(
                format!("{flag} {text:?} is neither a duration nor a time"),
                "give a duration before now (30m, 6h, 7d) or an RFC 3339 time (2026-12-01T10:00:00Z)",
                e,
            ));
        }
    }
    if let (Some(since), Some(until)) = (&sel.since, &sel.until) {
        let sql = format!("SELECT ({}) >= ({})", bound_sql(since), bound_sql(until));
        let row = control.client().query_one(sql.as_str(), &[]).await;
        if row.is_ok_and(|r| r.get::<_, bool>(0)) {
            return Err(Error::definite(
                format!("--until ({}) is not after --since ({}): the window is empty", show(until), show(since)),
                "give --until a later time than --since (a duration is before now: --since 6h --until 1h)",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_time_bound_is_a_duration_or_a_time() {
        assert_eq!(TimeBound::parse("6h"), Ok(TimeBound::Ago(Duration::from_secs(6 * 3600))));
        assert_eq!(
            TimeBound::parse("2026-12-01T10:00:00Z"),
            Ok(TimeBound::At("2026-12-01T10:00:00Z".into()))
        );
        assert!(TimeBound::parse(" ").is_err());
        assert_eq!(TimeBound::parse("2026-12-01"), Ok(TimeBound::At("2026-12-01".into())));
        assert_eq!(TimeBound::parse("now"), Ok(TimeBound::At("now".into())));
    }

    #[test]
    fn replay_time_bound_refuses_what_is_neither_with_the_duration_rule() {
        for bad in ["5x", "1.5h", "90", "6 hours", "12/01/2026", "1h30m"] {
            let err = TimeBound::parse(bad).unwrap_err();
            assert!(err.contains("is not a duration") && err.contains("RFC 3339"), "{bad}: {err}");
            assert!(!err.to_lowercase().contains("datestyle"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_window_of_two_durations_is_empty_when_until_is_not_after_since() {
        let ago = |s| TimeBound::Ago(Duration::from_secs(s));
        let why = inverted_window(Some(&ago(3600)), Some(&ago(7200))).unwrap();
        assert!(why.starts_with("--until (2h ago) is not after --since (1h ago)"), "{why}");
        assert!(inverted_window(Some(&ago(3600)), Some(&ago(3600))).is_some());
        assert_eq!(inverted_window(Some(&ago(7200)), Some(&ago(3600))), None);
        assert_eq!(inverted_window(Some(&ago(60)), Some(&TimeBound::At("now".into()))), None);
        assert_eq!(inverted_window(None, Some(&ago(60))), None);
    }

    #[test]
    fn replay_describe_names_every_part_of_the_selection() {
        let sel = Selection {
            since: Some(TimeBound::Ago(Duration::from_secs(3600))),
            aggregate_type: Some("Order".into()),
            ..Selection::default()
        };
        assert_eq!(describe(&sel), "since 1h ago, aggregate type Order");
    }

    #[test]
    fn replay_bound_is_relative_to_the_snapshot() {
        assert_eq!(
            bound_sql(&TimeBound::Ago(Duration::from_secs(90))),
            "now() - interval '90 seconds'"
        );
        assert_eq!(bound_sql(&TimeBound::At("2026-01-01".into())), "'2026-01-01'::timestamptz");
    }
}
