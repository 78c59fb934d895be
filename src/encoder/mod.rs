//! Route, then wrap: one outbox row or logical message becomes one record of the configured
//! format, in that order, always. The router (`crate::router`) decides what Debezium's Event
//! Router decides — topic, key, partition, timestamp, headers — and hands the event's fields
//! beside the record; the envelope (`crate::envelope`) then decides the value and its
//! describing headers. Neither calls the other.
//!
//! The relay's rows and messages, the rows it holds back while taking over from Debezium, and
//! `walrelay replay` all go through one [`Encoder`], so no record skips a step. One lives for
//! the whole run, across sessions: the router's run id (`__debezium.context.runId`) stays the
//! same after a reconnect, and the caches stay warm.

use bytes::Bytes;

use crate::config::Config;
use crate::envelope::{Envelope, EnvelopeConfig, Origin};
use crate::pgoutput::Tuple;
use crate::registry::{FrameError, Registry};
use crate::router::{Binding, Record, RouteError, Router, RouterConfig};
use crate::txn::Txn;

/// A record as it goes on the wire: routed, wrapped, and its value framed with its schema's id
/// when a registry converter wrote it. Only [`Encoder::frame`] makes one, and what sends a
/// record takes one (`Delivery::publish`, `walrelay replay`), so no path can send a registry
/// value without its id.
#[derive(Debug)]
pub struct Framed(Record);

impl Framed {
    pub fn record(&self) -> &Record {
        &self.0
    }

    pub fn into_record(self) -> Record {
        self.0
    }

    /// Sends it to `topic` instead (`walrelay replay --to-topic`): the value and its schema id
    /// stay those of the routed topic's subject, as the live relay wrote them.
    pub fn retarget(&mut self, topic: std::sync::Arc<str>) {
        self.0.topic = topic;
    }

    /// A header after the router's.
    pub fn push_header(&mut self, header: (std::sync::Arc<str>, Bytes)) {
        self.0.headers.push(header);
    }

    /// A record of tests that write no registry value.
    #[cfg(test)]
    pub(crate) fn unregistered(record: Record) -> Framed {
        assert!(record.value_schema.is_none(), "a registry value must be framed");
        Framed(record)
    }
}

/// The router, the envelope and the schema registry of one run.
pub struct Encoder {
    router: Router,
    envelope: Envelope,
    /// `[schema_registry]`: frames registry-encoded values with their schema's id.
    registry: Option<Registry>,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("router", &self.router)
            .field("envelope", &self.envelope)
            .field("registry", &self.registry.is_some())
            .finish()
    }
}

impl Encoder {
    pub fn new(config: &Config) -> Encoder {
        // The database the events come from, as the envelopes name it: libpq's default is the
        // user's name.
        let conn = &config.source.conn;
        let database = conn.get_dbname().or(conn.get_user()).unwrap_or_default();
        let mut encoder =
            Encoder::from_parts(config.router.clone(), config.envelope.clone(), database);
        let converter = config.router.registry_converter().unwrap_or("avro");
        let key_converter = config.router.registry_key_converter().unwrap_or("avro");
        encoder.registry = config.schema_registry.clone().map(|cfg| {
            Registry::new(cfg).for_converter(converter).for_key_converter(key_converter)
        });
        encoder
    }

    /// For what reads the relay's records back (the audit, the lookup): the same router and
    /// envelope, and a registry that only looks ids up and does not wait
    /// ([`Registry::read_only`]).
    pub fn for_reading(config: &Config) -> Encoder {
        let mut encoder = Encoder::new(config);
        encoder.registry = encoder.registry.take().map(Registry::read_only);
        encoder
    }

    /// From the two sections alone (tests, benchmarks).
    pub fn from_parts(router: RouterConfig, envelope: EnvelopeConfig, database: &str) -> Encoder {
        let envelope = Envelope::new(envelope, &router, database);
        Encoder { router: Router::new(router), envelope, registry: None }
    }

    /// Counts what the router finds wrong in rows into `metrics` (an unreadable span context).
    pub fn with_metrics(mut self, metrics: std::sync::Arc<crate::metrics::Metrics>) -> Encoder {
        self.router = self.router.with_metrics(metrics.clone());
        self.registry = self.registry.take().map(|r| r.with_metrics(metrics));
        self
    }

    /// `record` as it goes on the wire: with the registry id of its value schema written into
    /// its value (`crate::registry`); waits while the registry is unreachable. A record with no
    /// registry value passes as it is.
    pub async fn frame(&mut self, mut record: Record) -> Result<Framed, FrameError> {
        if let Some(registry) = &mut self.registry {
            registry.frame(&mut record).await?;
        }
        Ok(Framed(record))
    }

    /// `record`'s key framed as the relay frames it (`key.converter = "avro"` or `"protobuf"`), so
    /// its bytes, and the partition they hash to, are the ones in Kafka; other keys pass as they
    /// are.
    pub async fn frame_key(&mut self, record: &mut Record) -> Result<(), FrameError> {
        match &mut self.registry {
            Some(registry) => registry.frame_key(record).await,
            None => Ok(()),
        }
    }

    /// The router, for what is decided once per relation ([`Router::bind`]) and for the raw
    /// columns of a row that cannot be routed ([`Router::raw`]).
    pub fn router(&self) -> &Router {
        &self.router
    }

    /// An outbox row of `binding`'s table, committed in `txn`, as its record. With the
    /// `debezium` format the router's record is the record, and the router gathers no event
    /// fields for it: the default format costs what routing alone costs.
    pub fn row(&mut self, binding: &Binding, row: &Tuple, txn: &Txn) -> Result<Record, RouteError> {
        if self.envelope.is_debezium() {
            return self.router.route(binding, row);
        }
        let (record, fields) = self.router.route_event(binding, row)?;
        let (schema, table) = binding.relation_name();
        self.envelope.wrap(record, fields, txn, Origin::table(binding.table(), schema, table))
    }

    /// A logical decoding message's content as its record. `label` is `message:<prefix>`.
    pub fn message(
        &mut self,
        content: &Bytes,
        label: &str,
        prefix: &str,
        txn: &Txn,
    ) -> Result<Record, RouteError> {
        if self.envelope.is_debezium() {
            return self.router.route_message(content);
        }
        let (record, fields) = self.router.route_message_event(content)?;
        self.envelope.wrap(record, fields, txn, Origin::message(label, prefix))
    }
}

#[cfg(test)]
mod tests;
