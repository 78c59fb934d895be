//! walrelay relays transactional-outbox events from PostgreSQL to Kafka by streaming the WAL.
//!
//! The data path, one module each: [`source`] (the slot) → [`pgoutput`] (decoding) →
//! [`router`] (Debezium's Outbox Event Router) → [`envelope`] (the format), both through one
//! [`encoder`] → [`publish`] (librdkafka) → [`checkpoint`]
//! (what may be confirmed) — driven by the loop in [`relay`]. [`messages`] selects the logical
//! decoding messages that are events too. [`config`] reads the TOML file; [`retention`] purges
//! relayed outbox rows, off the data path.

pub mod admin;
pub mod checkpoint;
pub mod config;
pub mod dead_letter;
pub mod duration;
pub mod encoder;
pub mod envelope;
pub mod error;
pub mod http;
pub mod import;
pub mod lsn;
pub mod messages;
pub mod metrics;
pub mod pgoutput;
pub mod publish;
pub mod relay;
pub mod replay;
pub mod retention;
pub mod router;
pub mod source;
pub mod tls;
