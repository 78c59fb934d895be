//! walrelay relays transactional-outbox events from PostgreSQL to Kafka by streaming the WAL.
//!
//! The data path, one module each: `source` (the slot) → [`pgoutput`] (decoding) → [`encoder`]
//! (route with [`router`], Debezium's Outbox Event Router, then wrap with [`envelope`], the
//! format) → `delivery` (librdkafka, dead letters and the ack frontier: what may be confirmed) —
//! driven by the loop in [`relay`], whose `Progress` alone confirms the slot and publishes where
//! the relay stands in the WAL ([`positions::Positions`]). `message_selection` selects the logical
//! decoding messages that are events too. [`config`] reads the TOML file; [`retention`] purges
//! relayed outbox rows, off the data path; [`snapshot`] reads the retained ones in one snapshot, for
//! [`replay`], [`audit`] and the console's lookup.

pub mod admin;
pub mod audit;
pub mod clock;
pub mod config;
pub mod console;
pub(crate) mod delivery;
pub(crate) mod duration;
pub mod encoder;
pub mod envelope;
pub(crate) mod error;
pub mod http;
pub mod import;
#[cfg(test)]
mod layering_tests;
pub(crate) mod libpq;
pub mod lsn;
pub(crate) mod message_selection;
pub mod metrics;
pub(crate) mod options;
pub mod pgoutput;
pub mod positions;
pub mod registry;
pub mod relay;
pub mod replay;
pub mod retention;
pub mod router;
pub mod sink;
pub mod snapshot;
pub(crate) mod source;
pub(crate) mod spans;
pub(crate) mod tls;
pub(crate) mod trace;
pub mod txn;
