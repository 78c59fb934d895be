//! The recent problems: the last warnings and errors walrelay logged, with their hints, kept in
//! a fixed-size ring for the console, so an operator who is paged sees them without the log.
//!
//! A `tracing` layer beside the log's own: the log is written as before, and each WARN or ERROR
//! event is also kept here (its message, its `hint` and its other fields as text). Nothing
//! secret is logged (the configuration's secrets never reach a log line), so nothing secret is
//! kept.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Mutex;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

use crate::metrics::seen::{cut_to, MAX_TEXT};

/// Problems kept, at most: each holds a message and a hint of at most [`MAX_MESSAGE`]
/// characters and fields of at most [`MAX_TEXT`], so the ring stays under 250 KB.
pub const KEPT: usize = 100;
/// Longest message or hint kept: walrelay's messages say what, why and the fix in one line.
pub const MAX_MESSAGE: usize = 1_000;

/// One warning or error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub micros: i64,
    pub level: Level,
    pub target: String,
    pub message: String,
    pub hint: Option<String>,
    /// The event's other fields, `name=value`, space-separated.
    pub fields: String,
}

static RECENT: Mutex<VecDeque<Problem>> = Mutex::new(VecDeque::new());

/// The problems kept, newest first.
pub fn recent() -> Vec<Problem> {
    let ring = RECENT.lock().unwrap_or_else(|e| e.into_inner());
    ring.iter().rev().cloned().collect()
}

/// Keeps every WARN and ERROR event in the ring.
pub struct Keep;

impl<S: Subscriber> Layer<S> for Keep {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let level = *event.metadata().level();
        if level > Level::WARN {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let problem = Problem {
            micros: crate::clock::unix_micros(),
            level,
            target: event.metadata().target().to_string(),
            message: cut_to(&fields.message, MAX_MESSAGE),
            hint: fields.hint.map(|h| cut_to(&h, MAX_MESSAGE)),
            fields: cut_to(fields.rest.trim_start(), MAX_TEXT),
        };
        let mut ring = RECENT.lock().unwrap_or_else(|e| e.into_inner());
        if ring.len() == KEPT {
            ring.pop_front();
        }
        ring.push_back(problem);
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    hint: Option<String>,
    rest: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_string(),
            "hint" => self.hint = Some(value.to_string()),
            name => {
                let _ = write!(self.rest, " {name}={value}");
            }
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "hint" => self.hint = Some(format!("{value:?}").trim_matches('"').to_string()),
            name => {
                if self.rest.len() < MAX_TEXT {
                    let _ = write!(self.rest, " {name}={value:?}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn warnings_and_errors_are_kept_with_their_hint_and_the_ring_is_bounded() {
        let subscriber = tracing_subscriber::registry().with(Keep);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("not a problem");
            tracing::warn!(table = "t1.outbox", hint = "run walrelay setup", "a tenant's table");
            for i in 0..KEPT {
                tracing::error!(n = i, "error {i}");
            }
            tracing::error!(hint = "the fix", "the last one");
        });
        let kept = recent();
        assert_eq!(kept.len(), KEPT);
        assert_eq!(kept[0].message, "the last one");
        assert_eq!(kept[0].hint.as_deref(), Some("the fix"));
        assert_eq!(kept[0].level, Level::ERROR);
        assert!(kept.iter().all(|p| p.message != "not a problem"));
    }
}
