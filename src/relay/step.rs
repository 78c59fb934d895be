//! What the loop does with each step of the assembler: a row goes through the encoder to
//! delivery (or, when it can't be routed, to its dead letter or a definite stop), a Relation
//! the assembler does not know yet is asked of the catalog, and transaction boundaries and
//! keepalives go to delivery. The Debezium takeover screens every step first.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use pgwire_replication::ReplicationEvent;

use super::{takeover, AssembleError, Fate, Handled, Session, Shutdown, Step, UNDECODABLE_HINT};
use crate::config::TableName;
use crate::delivery::{self, Failed};
use crate::error::{Error, Result};
use crate::lsn::Lsn;
use crate::pgoutput::{Relation, Tuple, Value};
use crate::registry::FrameError;
use crate::router::{InvalidOpBehavior, RawColumn};
use crate::source::{catalog, tenants};

/// What a row is called in a stop's message.
const ROW: &str = "outbox row";

impl Session<'_> {
    pub(super) async fn on_event(
        &mut self,
        event: ReplicationEvent,
        shutdown: &mut Shutdown,
    ) -> Result<Handled> {
        match &event {
            ReplicationEvent::XLogData { wal_end, .. } => {
                self.progress.received(Lsn(wal_end.0));
            }
            ReplicationEvent::KeepAlive { wal_end, .. } => {
                self.metrics.keepalives.fetch_add(1, Relaxed);
                self.progress.received(Lsn(wal_end.0));
            }
            _ => {}
        }
        let step = self.assembler.on_event(event).map_err(assemble_error)?;
        if let Some(takeover) = self.takeover.as_mut() {
            match takeover.screen(&step, self.encoder) {
                takeover::Screened::Pass => {}
                takeover::Screened::Taken => return Ok(Handled::Continue),
                takeover::Screened::Release(held) => {
                    for h in held {
                        let r = &h.record;
                        let (key, event_id) = (r.key.clone(), r.event_id.clone());
                        match self.encoder.frame(h.record).await {
                            Ok(framed) => {
                                self.delivery.publish(framed, &h.table, h.lsn, &h.txn).await?
                            }
                            // Refused as the row would be outside a takeover.
                            Err(FrameError::Refused(why)) => {
                                let row = Failed {
                                    key,
                                    event_id: Some(event_id),
                                    ..Failed::new(h.table.clone(), h.lsn, why)
                                };
                                let slot = &self.config.source.slot;
                                let hint = delivery::poison_row_hint(slot, h.txn.commit_lsn);
                                self.delivery.undeliverable(row, &h.txn, ROW, &hint, None).await?;
                            }
                            Err(e) => return Err(frame_error(e)),
                        }
                    }
                }
            }
            if takeover.finished() {
                self.takeover = None;
            }
        }
        match step {
            Step::Skip => {}
            Step::Begin(txn) => self.delivery.begin(&txn),
            Step::Commit { end_lsn } => self.delivery.commit(end_lsn).await?,
            Step::KeepAlive { wal_end } => self.delivery.idle(wal_end),
            Step::Row { binding, tuple, lsn, txn } => {
                let routed = self.encoder.row(binding, &tuple, &txn);
                let refused = match routed {
                    Ok(record) => match self.encoder.frame(record).await {
                        Ok(framed) => {
                            let table = binding.table().clone();
                            self.delivery.publish(framed, &table, lsn, &txn).await?;
                            None
                        }
                        Err(FrameError::Refused(why)) => Some((why, None)),
                        Err(e) => return Err(frame_error(e)),
                    },
                    Err(e) => Some((e.to_string(), Some(Box::new(e) as _))),
                };
                if let Some((reason, cause)) = refused {
                    let raw = |c| self.encoder.router().raw(binding, &tuple, c);
                    let row = Failed {
                        key: raw(RawColumn::Key),
                        value: raw(RawColumn::Payload),
                        event_id: raw(RawColumn::EventId)
                            .map(|t| String::from_utf8_lossy(&t).into_owned()),
                        ..Failed::new(binding.table().clone(), lsn, reason)
                    };
                    let hint = delivery::poison_row_hint(&self.config.source.slot, txn.commit_lsn);
                    self.delivery.undeliverable(row, &txn, ROW, &hint, cause).await?;
                }
            }
            Step::Update { table, lsn } => {
                let behavior = self.encoder.router().config().invalid_op_behavior();
                on_update(behavior, &table.to_string(), lsn)?
            }
            Step::Message(message) => self.on_message(message, false).await?,
            Step::RefusedMessage(message) => self.on_message(message, true).await?,
            Step::Unplaceable { relation, reason, tuple, lsn, txn } => {
                let row = Failed {
                    value: Some(tuple_json(&tuple)),
                    ..Failed::new(Arc::from(relation), lsn, reason)
                };
                let hint = "check which table this is (its rows are sent by the publication but it is not the outbox walrelay resolved at start), fix [outbox] tables or the publication, or configure [dead_letter] topic";
                self.delivery.undeliverable(row, &txn, ROW, hint, None).await?;
            }
            Step::Lookup(relation) => {
                let fate = tokio::select! {
                    fate = self.fate(&relation) => fate?,
                    _ = shutdown.wait() => return Ok(Handled::Interrupted),
                };
                self.assembler
                    .place(relation, fate, self.encoder.router())
                    .map_err(assemble_error)?;
            }
        }
        Ok(Handled::Continue)
    }

    /// What relation `relation` is: an outbox table by OID (or a partition of one), another
    /// table, or one that carries an outbox's name without being it.
    async fn fate(&self, relation: &Relation) -> Result<Fate> {
        let outbox = |oid: u32| self.tables.iter().find(|t| t.oid == oid);
        let table = match outbox(relation.id) {
            Some(t) => Some(t),
            None => catalog::relation(&self.control, relation.id)
                .await?
                .and_then(|now| outbox(now.root)),
        };
        if let Some(table) = table {
            // The relation's own columns (a partition's may be ordered differently).
            let columns = catalog::columns(&self.control, relation.id).await?;
            let tenant = !self.config.outbox.tables.contains(&table.name);
            return Ok(self.outbox_fate(relation, table.name.clone(), &columns, tenant));
        }
        let named_like = self
            .tables
            .iter()
            .find(|t| t.name.schema == relation.namespace && t.name.name == relation.name);
        if let Some(t) = named_like {
            return Ok(Fate::Unplaceable {
                reason: format!(
                    "relation {} (OID {}) carries the name of the outbox table {} but is not it (OID {}): the table was dropped and recreated, or renamed, since the WAL was written",
                    t.name, relation.id, t.name, t.oid
                ),
            });
        }
        // A tenant's table made since the session started (or dropped since its rows were
        // written): PostgreSQL matches the name the WAL gives it against the patterns.
        let name = TableName::new(&relation.namespace, &relation.name);
        if tenants::matches(&self.control, &self.config.outbox, &name).await? {
            // Its columns now; a dropped table has none left, so its columns count as nullable.
            let columns = catalog::columns(&self.control, relation.id).await?;
            tracing::info!(table = %name, oid = relation.id,
                "a new tenant's outbox table (it matches an [outbox] tables pattern): relayed from its first row");
            return Ok(self.outbox_fate(relation, name, &columns, true));
        }
        Ok(Fate::Other)
    }

    /// An outbox table's fate, given its columns as the catalog has them. A tenant's table
    /// (matched by a pattern) that does not fit the router is unplaceable: its rows go to the
    /// dead-letter topic, or stop the relay at the first of them, and the other tenants'
    /// tables are not held by it. A table by name that does not fit stops the relay at once.
    fn outbox_fate(
        &self,
        relation: &Relation,
        table: TableName,
        columns: &[catalog::CatalogColumn],
        tenant: bool,
    ) -> Fate {
        let not_null: Vec<bool> = relation
            .columns
            .iter()
            .map(|c| columns.iter().any(|k| k.not_null && k.name == c.name))
            .collect();
        if tenant {
            if let Err(e) = self.encoder.router().bind(relation, &not_null) {
                return Fate::Unplaceable {
                    reason: format!(
                        "{table} matches an [outbox] tables pattern but does not fit the router: {e}"
                    ),
                };
            }
        }
        Fate::Outbox { table, not_null }
    }
}

fn on_update(behavior: InvalidOpBehavior, table: &str, lsn: Lsn) -> Result<()> {
    match behavior {
        InvalidOpBehavior::Warn => {
            tracing::warn!(%lsn, %table, "unexpected UPDATE of an outbox row ignored (table.op.invalid.behavior = warn)")
        }
        InvalidOpBehavior::Error => {
            tracing::error!(%lsn, %table, "unexpected UPDATE of an outbox row ignored (table.op.invalid.behavior = error)")
        }
        InvalidOpBehavior::Fatal => {
            return Err(Error::definite(
                format!("UPDATE of an outbox row of {table} at LSN {lsn} (table.op.invalid.behavior = fatal)"),
                "outbox rows must only be inserted; find the writer that updates them",
            ))
        }
    }
    Ok(())
}

/// What the assembler could not do, as the relay's error: each stops the relay with a hint,
/// since retrying reads the same WAL again.
fn assemble_error(e: AssembleError) -> Error {
    let hint = match &e {
        AssembleError::Undecodable { .. } => UNDECODABLE_HINT,
        AssembleError::UnknownRelation { .. } => "the server sent a row before describing its table, which pgoutput never does: report it with the PostgreSQL version",
        AssembleError::Bind { .. } => "restore the columns, or change the [router] column options to match the table",
    };
    Error::definite_with(e.to_string(), hint, e)
}

/// A row's columns as a JSON array of their text (for the dead letter of a row no binding
/// could read).
fn tuple_json(tuple: &Tuple) -> bytes::Bytes {
    let values: Vec<serde_json::Value> = tuple
        .0
        .iter()
        .map(|v| match v {
            Value::Text(t) | Value::Binary(t) => {
                serde_json::Value::String(String::from_utf8_lossy(t).into_owned())
            }
            Value::Null | Value::Unchanged => serde_json::Value::Null,
        })
        .collect();
    bytes::Bytes::from(serde_json::Value::Array(values).to_string())
}

/// A framing failure that is no record's fault: the registry refused walrelay's credentials.
pub(super) fn frame_error(e: FrameError) -> Error {
    match e {
        FrameError::Unauthorized(why) => Error::definite(
            why,
            "fix the credentials, then start walrelay again; nothing after this record was confirmed",
        ),
        FrameError::Refused(why) => Error::definite(
            why,
            "change the schema or the subject's compatibility, then start walrelay again; nothing after this record was confirmed",
        ),
        // The relay's registry waits for an unreachable registry; only a read-only one says it.
        FrameError::Unreachable(why) => Error::transient_msg(why),
    }
}
