//! Replication events → what the relay acts on: outbox rows, logical messages, transaction
//! boundaries and idle positions. Pure: no I/O, no clock, no Kafka.
//!
//! Logical decoding messages are selected here ([`MessageSelection`]): a message of a selected
//! prefix is an event ([`Step::Message`]), or refused when it is non-transactional and relaying
//! those is not configured ([`Step::RefusedMessage`]); any other is skipped, as Debezium skips
//! it. A message outside Begin/Commit (a non-transactional one) is `alone`: no Commit follows it,
//! so its own position is where the relay may confirm once it is handled.
//!
//! Rows are placed by relation OID (I8), never by name. A Relation message whose OID this
//! session has not placed yet (or whose columns changed) comes back as [`Step::Lookup`]: the
//! loop asks the catalog what the relation is ([`Fate`]) and hands the answer to
//! [`Assembler::place`]. pgoutput always sends a relation's Relation message before its first
//! row in a session, so every row finds its relation placed.

use std::collections::HashMap;

use bytes::Bytes;
use pgwire_replication::ReplicationEvent;

use crate::config::TableName;
use crate::lsn::Lsn;
use crate::message_selection::{MessageSelection, Verdict};
use crate::pgoutput::{self, DecodeError, Message, Relation, Tuple};
use crate::router::{Binding, RouteError, Router};
use crate::txn::Txn;

/// 2000-01-01 00:00:00 UTC, PostgreSQL's epoch, in Unix microseconds.
pub const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

/// What the catalog says a relation of the stream is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// An outbox table (or a partition of one): its rows are events. `not_null[i]` is
    /// `attnotnull` of the Relation's column `i`.
    Outbox { table: TableName, not_null: Vec<bool> },
    /// Not an outbox table (another table of a `FOR ALL TABLES` publication): skipped.
    Other,
    /// Sent by the publication and looking like an outbox table, but not one the relay can
    /// place (dropped and recreated, an outbox name on another OID): its rows stop the relay
    /// or go to the dead-letter topic, never silently away.
    Unplaceable { reason: String },
}

/// One thing for the loop to do.
#[derive(Debug)]
pub enum Step<'a> {
    /// Nothing for delivery (a skipped relation's row, a DELETE, a cached Relation message).
    Skip,
    /// A transaction starts: each row and message in it carries the same [`Txn`].
    Begin(Txn),
    /// An INSERT into an outbox table, in transaction `txn`.
    Row {
        binding: &'a Binding,
        tuple: Tuple,
        lsn: Lsn,
        txn: Txn,
    },
    /// An UPDATE of an outbox row (`table.op.invalid.behavior` decides).
    Update {
        table: &'a TableName,
        lsn: Lsn,
    },
    /// A logical decoding message (`pg_logical_emit_message`) selected as an outbox event.
    Message(SelectedMessage),
    /// A non-transactional message of a selected prefix, which `[outbox]
    /// non_transactional_messages` refuses.
    RefusedMessage(SelectedMessage),
    Commit {
        end_lsn: Lsn,
    },
    /// The server's position while nothing is sent: confirmable when idle (I3).
    KeepAlive {
        wal_end: Lsn,
    },
    /// Ask the catalog about this relation, then call [`Assembler::place`].
    Lookup(Relation),
    /// A row of a relation the relay cannot place, in transaction `txn`.
    Unplaceable {
        relation: String,
        reason: String,
        tuple: Tuple,
        lsn: Lsn,
        txn: Txn,
    },
}

/// A logical decoding message the relay acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectedMessage {
    pub prefix: String,
    pub content: Bytes,
    /// The message's own WAL position.
    pub lsn: Lsn,
    /// The transaction it was read in; `None` outside any transaction on the stream
    /// (non-transactional): no Commit follows, so once it is handled, its own position may be
    /// confirmed.
    pub txn: Option<Txn>,
}

impl SelectedMessage {
    /// Outside any transaction on the stream (see `txn`).
    pub fn alone(&self) -> bool {
        self.txn.is_none()
    }
}

/// Why the stream cannot be assembled.
#[derive(Debug, thiserror::Error)]
pub enum AssembleError {
    #[error("the pgoutput message at LSN {lsn} cannot be decoded (first bytes: {head})")]
    Undecodable {
        lsn: Lsn,
        /// The message's first bytes, in hex.
        head: String,
        #[source]
        error: DecodeError,
    },
    #[error("a change for relation {oid} at LSN {lsn} arrived before its Relation message")]
    UnknownRelation { oid: u32, lsn: Lsn },
    #[error("the outbox table {table} no longer has the columns the router needs")]
    Bind {
        table: String,
        #[source]
        error: RouteError,
    },
}

enum Placed {
    Outbox { table: TableName, binding: Box<Binding>, relation: Relation },
    Other { relation: Relation },
    Unplaceable { name: String, reason: String, relation: Relation },
}

impl Placed {
    fn relation(&self) -> &Relation {
        match self {
            Placed::Outbox { relation, .. }
            | Placed::Other { relation }
            | Placed::Unplaceable { relation, .. } => relation,
        }
    }
}

#[derive(Default)]
pub struct Assembler {
    relations: HashMap<u32, Placed>,
    /// WAL position of the current change, to name rows in errors and dead letters.
    change_lsn: Lsn,
    /// Which logical messages are events; `None`: every message is skipped.
    messages: Option<MessageSelection>,
    /// The transaction being read, from its Begin to its Commit: the one holder of it. Every
    /// step inside it carries a copy, so nothing downstream keeps its own.
    txn: Option<Txn>,
}

/// How many bytes of an undecodable message its error shows.
const HEAD_BYTES: usize = 32;

impl Assembler {
    pub fn new(messages: Option<MessageSelection>) -> Assembler {
        Assembler { messages, ..Assembler::default() }
    }

    /// The WAL position of the change being handled.
    pub fn change_lsn(&self) -> Lsn {
        self.change_lsn
    }

    pub fn on_event(&mut self, event: ReplicationEvent) -> Result<Step<'_>, AssembleError> {
        Ok(match event {
            ReplicationEvent::Begin { final_lsn, xid, commit_time_micros } => {
                self.change_lsn = final_lsn.into();
                let txn = Txn {
                    commit_micros: commit_time_micros + PG_EPOCH_UNIX_MICROS,
                    commit_lsn: final_lsn.into(),
                    xid,
                };
                self.txn = Some(txn);
                Step::Begin(txn)
            }
            ReplicationEvent::Commit { end_lsn, .. } => {
                self.txn = None;
                Step::Commit { end_lsn: end_lsn.into() }
            }
            ReplicationEvent::KeepAlive { wal_end, .. } => {
                Step::KeepAlive { wal_end: wal_end.into() }
            }
            ReplicationEvent::Message { transactional, lsn, prefix, content } => {
                self.change_lsn = lsn.into();
                let Some(selection) = &self.messages else { return Ok(Step::Skip) };
                let verdict = selection.verdict(transactional, &prefix);
                let message = SelectedMessage { prefix, content, lsn: lsn.into(), txn: self.txn };
                match verdict {
                    Verdict::Filtered => Step::Skip,
                    Verdict::Event => Step::Message(message),
                    Verdict::Refused => Step::RefusedMessage(message),
                }
            }
            ReplicationEvent::XLogData { wal_start, data, .. } => {
                if wal_start.0 != 0 {
                    self.change_lsn = wal_start.into();
                }
                let message =
                    pgoutput::decode(&data).map_err(|error| AssembleError::Undecodable {
                        lsn: self.change_lsn,
                        head: hex_head(&data),
                        error,
                    })?;
                return self.on_message(message);
            }
            ReplicationEvent::StoppedAt { .. } => Step::Skip,
            // pgwire-replication's event enum may grow; nothing new is an outbox row.
            #[allow(unreachable_patterns)]
            _ => Step::Skip,
        })
    }

    fn on_message(&mut self, message: Message) -> Result<Step<'_>, AssembleError> {
        let lsn = self.change_lsn;
        // pgoutput sends changes between a Begin and its Commit only.
        let txn = self.txn.unwrap_or_default();
        Ok(match message {
            Message::Relation(relation) => match self.relations.get(&relation.id) {
                // pgoutput resends a relation after every cache invalidation (ANALYZE, …); the
                // same columns keep the same placement.
                Some(placed) if *placed.relation() == relation => Step::Skip,
                _ => Step::Lookup(relation),
            },
            Message::Insert(insert) => match self.relations.get(&insert.relation_id) {
                Some(Placed::Outbox { binding, .. }) => {
                    Step::Row { binding, tuple: insert.new, lsn, txn }
                }
                Some(Placed::Other { .. }) => Step::Skip,
                Some(Placed::Unplaceable { name, reason, .. }) => Step::Unplaceable {
                    relation: name.clone(),
                    reason: reason.clone(),
                    tuple: insert.new,
                    lsn,
                    txn,
                },
                None => {
                    return Err(AssembleError::UnknownRelation { oid: insert.relation_id, lsn })
                }
            },
            Message::Update(update) => match self.relations.get(&update.relation_id) {
                Some(Placed::Outbox { table, .. }) => Step::Update { table, lsn },
                _ => Step::Skip,
            },
            // DELETEs of outbox rows are the usual clean-up and are dropped, as Debezium does;
            // TRUNCATE is never an event.
            Message::Delete(_) | Message::Truncate(_) | Message::Type(_) | Message::Origin(_) => {
                Step::Skip
            }
            // pgwire-replication hands these over as their own events.
            Message::Begin(_) | Message::Commit(_) | Message::LogicalMessage(_) => Step::Skip,
        })
    }

    /// Records what the catalog said about `relation`, binding outbox tables to the router.
    pub fn place(
        &mut self,
        relation: Relation,
        fate: Fate,
        router: &Router,
    ) -> Result<(), AssembleError> {
        let placed = match fate {
            Fate::Outbox { table, not_null } => {
                let binding = router
                    .bind(&relation, &not_null)
                    .map_err(|error| AssembleError::Bind { table: table.to_string(), error })?;
                Placed::Outbox { table, binding: Box::new(binding), relation }
            }
            Fate::Other => Placed::Other { relation },
            Fate::Unplaceable { reason } => Placed::Unplaceable {
                name: format!("{}.{}", relation.namespace, relation.name),
                reason,
                relation,
            },
        };
        self.relations.insert(placed.relation().id, placed);
        Ok(())
    }
}

fn hex_head(data: &[u8]) -> String {
    let mut text: String =
        data.iter().take(HEAD_BYTES).map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ");
    if data.len() > HEAD_BYTES {
        text.push_str(&format!(" … ({} bytes)", data.len()));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pgoutput::{encode, Insert, Update, Value};
    use crate::router::RouterConfig;
    use pgwire_replication::Lsn as WireLsn;

    fn row(id: &str) -> Tuple {
        let t = |s: &str| Value::Text(Bytes::copy_from_slice(s.as_bytes()));
        Tuple(vec![t(id), t("Order"), t("o-1"), t("Created"), t("{}")])
    }

    fn xlog(message: Message, at: u64) -> ReplicationEvent {
        ReplicationEvent::XLogData {
            wal_start: WireLsn(at),
            wal_end: WireLsn(at),
            server_time_micros: 0,
            data: encode(&message),
        }
    }

    fn assembler() -> Assembler {
        Assembler::new(None)
    }

    fn router() -> Router {
        Router::new(RouterConfig::parse(&Default::default(), &Default::default()).unwrap())
    }

    fn outbox_fate() -> Fate {
        Fate::Outbox { table: TableName::new("public", "outbox"), not_null: vec![] }
    }

    #[test]
    fn assembler_asks_the_catalog_once_per_relation_and_places_rows_by_oid() {
        let (mut a, router) = (assembler(), router());
        let rel = Relation::outbox_for_test(16400, "outbox");
        let Step::Lookup(asked) = a.on_event(xlog(Message::Relation(rel.clone()), 10)).unwrap()
        else {
            panic!("an unknown relation needs the catalog");
        };
        a.place(asked, outbox_fate(), &router).unwrap();
        // Resent unchanged (after ANALYZE, say): no second lookup.
        assert!(matches!(
            a.on_event(xlog(Message::Relation(rel.clone()), 11)).unwrap(),
            Step::Skip
        ));
        // The same OID under a new name (ALTER TABLE … RENAME) is still the outbox: only the
        // columns' shape is compared, and a changed Relation is looked up again.
        let renamed = Relation { name: "outbox_renamed".into(), ..rel };
        let Step::Lookup(asked) = a.on_event(xlog(Message::Relation(renamed), 12)).unwrap() else {
            panic!("a changed relation is looked up again");
        };
        a.place(asked, outbox_fate(), &router).unwrap();
        let insert = Message::Insert(Insert {
            relation_id: 16400,
            new: row("00000000-0000-0000-0000-000000000001"),
        });
        match a.on_event(xlog(insert, 42)).unwrap() {
            Step::Row { lsn, tuple, .. } => {
                assert_eq!(lsn, Lsn(42));
                assert_eq!(tuple, row("00000000-0000-0000-0000-000000000001"));
            }
            other => panic!("expected a row, got {other:?}"),
        }
    }

    #[test]
    fn assembler_skips_other_tables_but_never_an_unplaceable_one() {
        let (mut a, router) = (assembler(), router());
        a.place(Relation::outbox_for_test(500, "audit"), Fate::Other, &router).unwrap();
        let reason = "an outbox name on OID 501".to_string();
        a.place(
            Relation::outbox_for_test(501, "outbox"),
            Fate::Unplaceable { reason: reason.clone() },
            &router,
        )
        .unwrap();
        let other = Message::Insert(Insert { relation_id: 500, new: row("a") });
        assert!(matches!(a.on_event(xlog(other, 1)).unwrap(), Step::Skip));
        let stray = Message::Insert(Insert { relation_id: 501, new: row("b") });
        match a.on_event(xlog(stray, 2)).unwrap() {
            Step::Unplaceable { relation, reason: why, lsn, .. } => {
                assert_eq!((relation.as_str(), why, lsn), ("public.outbox", reason, Lsn(2)));
            }
            other => panic!("expected unplaceable, got {other:?}"),
        }
    }

    #[test]
    fn assembler_reports_updates_of_outbox_rows_and_drops_deletes() {
        let (mut a, router) = (assembler(), router());
        a.place(Relation::outbox_for_test(7, "outbox"), outbox_fate(), &router).unwrap();
        let update = Message::Update(Update { relation_id: 7, old: None, new: row("x") });
        assert!(matches!(a.on_event(xlog(update, 5)).unwrap(), Step::Update { lsn: Lsn(5), .. }));
        let delete = Message::Delete(crate::pgoutput::Delete {
            relation_id: 7,
            old: crate::pgoutput::OldTuple::Key(row("x")),
        });
        assert!(matches!(a.on_event(xlog(delete, 6)).unwrap(), Step::Skip));
    }

    #[test]
    fn assembler_row_before_its_relation_is_an_error_not_a_skip() {
        let mut a = assembler();
        let insert = Message::Insert(Insert { relation_id: 99, new: row("x") });
        let e = a.on_event(xlog(insert, 77)).unwrap_err();
        assert!(matches!(e, AssembleError::UnknownRelation { oid: 99, lsn: Lsn(77) }), "{e}");
    }

    #[test]
    fn assembler_names_the_lsn_and_first_bytes_of_an_undecodable_message() {
        let mut a = assembler();
        let event = ReplicationEvent::XLogData {
            wal_start: WireLsn(0x1_0000_00A0),
            wal_end: WireLsn(0),
            server_time_micros: 0,
            data: Bytes::from_static(b"I\x00\x00"),
        };
        let e = a.on_event(event).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("1/A0") && text.contains("49 00 00"), "{text}");
    }

    #[test]
    fn assembler_binding_failure_names_the_table() {
        let (mut a, router) = (assembler(), router());
        let mut rel = Relation::outbox_for_test(8, "outbox");
        rel.columns.retain(|c| c.name != "aggregateid");
        let e = a.place(rel, outbox_fate(), &router).unwrap_err();
        assert!(e.to_string().contains("public.outbox"), "{e}");
        assert!(std::error::Error::source(&e).unwrap().to_string().contains("aggregateid"));
    }

    fn message(transactional: bool, prefix: &str, at: u64) -> ReplicationEvent {
        ReplicationEvent::Message {
            transactional,
            lsn: WireLsn(at),
            prefix: prefix.into(),
            content: Bytes::from_static(b"{}"),
        }
    }

    fn selecting(pairs: &[(&str, &str)], non_transactional: Option<&str>) -> Assembler {
        let opts = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Assembler::new(MessageSelection::parse(&opts, non_transactional).unwrap())
    }

    fn begin(at: u64) -> ReplicationEvent {
        ReplicationEvent::Begin { final_lsn: WireLsn(at), xid: 1, commit_time_micros: 0 }
    }

    fn commit(at: u64) -> ReplicationEvent {
        ReplicationEvent::Commit {
            lsn: WireLsn(at),
            end_lsn: WireLsn(at + 8),
            commit_time_micros: 0,
        }
    }

    #[test]
    fn assembler_turns_boundaries_into_steps() {
        let mut a = assembler();
        let txn = Txn { commit_micros: PG_EPOCH_UNIX_MICROS, commit_lsn: Lsn(90), xid: 1 };
        assert!(matches!(a.on_event(begin(90)).unwrap(), Step::Begin(t) if t == txn));
        assert!(matches!(a.on_event(commit(92)).unwrap(), Step::Commit { end_lsn: Lsn(100) }));
    }

    #[test]
    fn assembler_skips_every_message_when_no_prefix_list_is_configured() {
        let mut a = assembler();
        assert!(matches!(a.on_event(message(true, "outbox", 91)).unwrap(), Step::Skip));
        assert!(matches!(a.on_event(message(false, "outbox", 92)).unwrap(), Step::Skip));
    }

    #[test]
    fn assembler_selects_messages_by_prefix_inside_their_transaction() {
        let mut a = selecting(&[("message.prefix.include.list", "outbox")], None);
        a.on_event(begin(90)).unwrap();
        match a.on_event(message(true, "OUTBOX", 91)).unwrap() {
            Step::Message(m) => {
                assert_eq!((m.prefix.as_str(), m.lsn, m.alone()), ("OUTBOX", Lsn(91), false));
                assert_eq!(m.txn.map(|t| t.commit_lsn), Some(Lsn(90)), "its transaction's");
                assert_eq!(m.content, Bytes::from_static(b"{}"));
            }
            other => panic!("expected a message, got {other:?}"),
        }
        assert!(matches!(a.on_event(message(true, "audit", 92)).unwrap(), Step::Skip));
        assert_eq!(a.change_lsn(), Lsn(92), "a skipped message still names the position");
    }

    #[test]
    fn assembler_refuses_non_transactional_messages_alone_unless_relaying_is_configured() {
        let include = [("message.prefix.include.list", "outbox")];
        let mut a = selecting(&include, None);
        match a.on_event(message(false, "outbox", 50)).unwrap() {
            Step::RefusedMessage(m) => assert!(m.alone() && m.lsn == Lsn(50)),
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert!(matches!(a.on_event(message(false, "audit", 51)).unwrap(), Step::Skip));
        let mut a = selecting(&include, Some("relay"));
        match a.on_event(message(false, "outbox", 52)).unwrap() {
            Step::Message(m) => assert!(m.alone(), "outside Begin/Commit"),
            other => panic!("expected a message, got {other:?}"),
        }
        // pgoutput never sends one inside a transaction's Begin/Commit, but if it did, the
        // transaction's Commit would confirm it.
        a.on_event(begin(60)).unwrap();
        assert!(
            matches!(a.on_event(message(false, "outbox", 61)).unwrap(), Step::Message(m) if !m.alone())
        );
    }
}
