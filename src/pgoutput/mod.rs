//! A pure decoder for PostgreSQL's `pgoutput` logical replication protocol, version 1.
//!
//! Bytes in, typed messages out; no I/O. Every message of protocol 1 is covered (Begin, Commit,
//! Origin, Relation, Type, Insert, Update, Delete, Truncate) plus logical decoding messages
//! (`M`, sent with `messages 'true'`). Malformed input returns a [`DecodeError`]; the decoder
//! never panics and never allocates more than the input it was given can justify.
//!
//! Formats: <https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html>.
//!
//! This file holds the messages; `decode.rs` turns bytes into them. `encode.rs` is the inverse,
//! for tests, fuzzing and benchmarks only (feature `pgoutput-encoder`, on in dev builds): the
//! relay itself never encodes.

mod decode;
#[cfg(any(test, feature = "pgoutput-encoder"))]
mod encode;

use bytes::Bytes;

pub use crate::lsn::Lsn;
pub use decode::{decode, DecodeError};
#[cfg(any(test, feature = "pgoutput-encoder"))]
pub use encode::encode;

/// Microseconds since 2000-01-01 00:00:00 UTC (PostgreSQL's epoch).
pub type PgTimestamp = i64;

/// One decoded pgoutput message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Begin(Begin),
    Commit(Commit),
    Origin(Origin),
    Relation(Relation),
    Type(TypeInfo),
    Insert(Insert),
    Update(Update),
    Delete(Delete),
    Truncate(Truncate),
    /// A logical decoding message from `pg_logical_emit_message`.
    LogicalMessage(LogicalMessage),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Begin {
    /// LSN of the transaction's commit record.
    pub final_lsn: Lsn,
    pub commit_ts: PgTimestamp,
    pub xid: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub flags: u8,
    /// LSN of the commit record.
    pub commit_lsn: Lsn,
    /// End of the commit record: the position to confirm once the transaction is durable.
    pub end_lsn: Lsn,
    pub commit_ts: PgTimestamp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub commit_lsn: Lsn,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    pub id: u32,
    pub namespace: String,
    pub name: String,
    /// `d` default, `n` nothing, `f` full, `i` index.
    pub replica_identity: u8,
    pub columns: Vec<Column>,
}

#[cfg(test)]
impl Relation {
    /// A relation for tests: `columns` as (name, type OID), without type modifiers or key flags.
    pub(crate) fn for_test(
        id: u32,
        namespace: &str,
        name: &str,
        columns: &[(&str, u32)],
    ) -> Relation {
        Relation {
            id,
            namespace: namespace.into(),
            name: name.into(),
            replica_identity: b'd',
            columns: columns
                .iter()
                .map(|&(name, type_oid)| Column {
                    flags: 0,
                    name: name.into(),
                    type_oid,
                    type_modifier: -1,
                })
                .collect(),
        }
    }

    /// Debezium's outbox table (`id uuid`, three `varchar`s, `payload jsonb`) as `public.name`.
    pub(crate) fn outbox_for_test(id: u32, name: &str) -> Relation {
        let columns = [
            ("id", 2950),
            ("aggregatetype", 1043),
            ("aggregateid", 1043),
            ("type", 1043),
            ("payload", 3802),
        ];
        Relation::for_test(id, "public", name, &columns)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Bit 1 marks the column as part of the replica identity key.
    pub flags: u8,
    pub name: String,
    pub type_oid: u32,
    pub type_modifier: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeInfo {
    pub id: u32,
    pub namespace: String,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insert {
    pub relation_id: u32,
    pub new: Tuple,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    pub relation_id: u32,
    /// The old key (`K`) or old row (`O`), when the replica identity sends one.
    pub old: Option<OldTuple>,
    pub new: Tuple,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delete {
    pub relation_id: u32,
    pub old: OldTuple,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OldTuple {
    /// `K`: the replica identity key columns only.
    Key(Tuple),
    /// `O`: the whole old row (`REPLICA IDENTITY FULL`).
    Full(Tuple),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncate {
    /// Bit 1 = CASCADE, bit 2 = RESTART IDENTITY.
    pub options: u8,
    pub relation_ids: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogicalMessage {
    pub transactional: bool,
    pub lsn: Lsn,
    pub prefix: String,
    pub content: Bytes,
}

/// The columns of one row, in the order of the relation's columns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tuple(pub Vec<Value>);

/// One column value as pgoutput sends it. Text and binary values are zero-copy slices of the
/// message buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `n`
    Null,
    /// `u`: an unchanged TOASTed value, not sent (UPDATE/DELETE old tuples only).
    Unchanged,
    /// `t`: the type's text output.
    Text(Bytes),
    /// `b`: the type's binary send format (only with `binary 'true'`).
    Binary(Bytes),
}

#[cfg(test)]
mod tests;
