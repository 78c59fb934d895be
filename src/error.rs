//! Errors split by what happens next: retry after a backoff, or stop and tell the operator.
//!
//! Shutdown is not an error: see [`crate::relay::Outcome`].

use std::error::Error as StdError;

type Source = Box<dyn StdError + Send + Sync + 'static>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The relay can carry on from the slot's confirmed position after a backoff: a connection
    /// dropped, the broker timed out, the replication stream ended.
    #[error("{what}")]
    Transient {
        what: String,
        #[source]
        source: Option<Source>,
    },
    /// Another process streams from the slot. This relay is a standby: it waits and tries again
    /// soon, so it takes over shortly after the active one goes away.
    #[error("{what}")]
    Busy { what: String },
    /// Exactly-once: this relay's Kafka producer was fenced. Either a successor initialised the
    /// same `transactional.id` (it took the slot: stand by, as [`Error::Busy`]) or the broker
    /// aborted the open transaction on its timeout, which Kafka reports the same way (KIP-588):
    /// retry. Who holds the slot tells which (`relay::Session::run`).
    #[error("{what}")]
    Fenced { what: String },
    /// Retrying cannot help; an operator has to act. `hint` says what to do.
    #[error("{what}")]
    Definite {
        what: String,
        hint: String,
        #[source]
        source: Option<Source>,
    },
}

impl Error {
    pub fn transient(what: impl Into<String>, source: impl Into<Source>) -> Error {
        Error::Transient { what: what.into(), source: Some(source.into()) }
    }

    pub fn transient_msg(what: impl Into<String>) -> Error {
        Error::Transient { what: what.into(), source: None }
    }

    pub fn definite(what: impl Into<String>, hint: impl Into<String>) -> Error {
        Error::Definite { what: what.into(), hint: hint.into(), source: None }
    }

    pub fn definite_with(
        what: impl Into<String>,
        hint: impl Into<String>,
        source: impl Into<Source>,
    ) -> Error {
        Error::Definite { what: what.into(), hint: hint.into(), source: Some(source.into()) }
    }

    /// Worth another attempt: everything but [`Error::Definite`].
    pub fn is_transient(&self) -> bool {
        !matches!(self, Error::Definite { .. })
    }

    pub fn hint(&self) -> Option<&str> {
        match self {
            Error::Definite { hint, .. } => Some(hint),
            Error::Transient { .. } | Error::Busy { .. } | Error::Fenced { .. } => None,
        }
    }

    /// The message followed by every cause, `: `-separated, for one log line.
    pub fn chain(&self) -> String {
        chain(self)
    }
}

/// Any error followed by its causes, `: `-separated, each said once: hyper's "connection error"
/// alone hides the TLS alert beneath it, and a client's "request failed" the refusal.
pub fn chain(e: &(dyn StdError + '_)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(err) = cur {
        let text = err.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = err.source();
    }
    out
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
