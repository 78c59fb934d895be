//! A pure decoder for PostgreSQL's `pgoutput` logical replication protocol, version 1.
//!
//! Bytes in, typed messages out; no I/O. Every message of protocol 1 is covered (Begin, Commit,
//! Origin, Relation, Type, Insert, Update, Delete, Truncate) plus logical decoding messages
//! (`M`, sent with `messages 'true'`). Malformed input returns a [`DecodeError`]; the decoder
//! never panics and never allocates more than the input it was given can justify.
//!
//! Formats: <https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html>.

use bytes::{BufMut, Bytes, BytesMut};

pub use crate::lsn::Lsn;

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

/// Why a message could not be decoded. Carries enough to find the bad byte.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("pgoutput message is empty")]
    Empty,
    #[error("unknown pgoutput message tag {tag:#04x}")]
    UnknownTag { tag: u8 },
    #[error("pgoutput {message} message truncated at byte {offset}: needed {needed} more bytes")]
    Truncated { message: &'static str, offset: usize, needed: usize },
    #[error("pgoutput {message} message has an invalid {field} at byte {offset}: {detail}")]
    Invalid { message: &'static str, field: &'static str, offset: usize, detail: String },
    #[error("pgoutput {message} message has {extra} trailing bytes")]
    TrailingBytes { message: &'static str, extra: usize },
}

/// Decodes one pgoutput message: the payload of an XLogData message, starting at its tag byte.
///
/// Text and binary column values and logical message content are zero-copy slices of `buf`.
/// The whole buffer must be one message; anything after it is [`DecodeError::TrailingBytes`].
pub fn decode(buf: &Bytes) -> Result<Message, DecodeError> {
    let &tag = buf.first().ok_or(DecodeError::Empty)?;
    let message = message_name(tag).ok_or(DecodeError::UnknownTag { tag })?;
    let mut r = Reader { buf, pos: 1, message };
    // Struct fields below are evaluated in the order written, which is the wire order.
    let decoded = match tag {
        b'B' => {
            Message::Begin(Begin { final_lsn: Lsn(r.u64()?), commit_ts: r.i64()?, xid: r.u32()? })
        }
        b'C' => Message::Commit(Commit {
            flags: r.u8()?,
            commit_lsn: Lsn(r.u64()?),
            end_lsn: Lsn(r.u64()?),
            commit_ts: r.i64()?,
        }),
        b'O' => Message::Origin(Origin { commit_lsn: Lsn(r.u64()?), name: r.cstr("origin name")? }),
        b'R' => Message::Relation(relation(&mut r)?),
        b'Y' => Message::Type(TypeInfo {
            id: r.u32()?,
            namespace: r.cstr("namespace")?,
            name: r.cstr("type name")?,
        }),
        b'I' => {
            let relation_id = r.u32()?;
            r.expect_byte(b'N', "new tuple marker")?;
            Message::Insert(Insert { relation_id, new: tuple(&mut r)? })
        }
        b'U' => Message::Update(update(&mut r)?),
        b'D' => {
            let relation_id = r.u32()?;
            let at = r.pos;
            let kind = r.u8()?;
            let old = old_tuple(&mut r, kind)?
                .ok_or_else(|| r.invalid(at, "old tuple marker", expected("'K' or 'O'", kind)))?;
            Message::Delete(Delete { relation_id, old })
        }
        b'T' => Message::Truncate(truncate(&mut r)?),
        _ => Message::LogicalMessage(logical_message(&mut r)?),
    };
    r.finish()?;
    Ok(decoded)
}

fn message_name(tag: u8) -> Option<&'static str> {
    Some(match tag {
        b'B' => "Begin",
        b'C' => "Commit",
        b'O' => "Origin",
        b'R' => "Relation",
        b'Y' => "Type",
        b'I' => "Insert",
        b'U' => "Update",
        b'D' => "Delete",
        b'T' => "Truncate",
        b'M' => "Message",
        _ => return None,
    })
}

fn relation(r: &mut Reader<'_>) -> Result<Relation, DecodeError> {
    let id = r.u32()?;
    let namespace = r.cstr("namespace")?;
    let name = r.cstr("relation name")?;
    let replica_identity = r.u8()?;
    // Flags, at least a NUL for the name, type oid and typmod.
    let ncols = r.count16("column count", 1 + 1 + 4 + 4)?;
    let mut columns = Vec::with_capacity(ncols);
    for _ in 0..ncols {
        columns.push(Column {
            flags: r.u8()?,
            name: r.cstr("column name")?,
            type_oid: r.u32()?,
            type_modifier: r.i32()?,
        });
    }
    Ok(Relation { id, namespace, name, replica_identity, columns })
}

fn update(r: &mut Reader<'_>) -> Result<Update, DecodeError> {
    let relation_id = r.u32()?;
    let at = r.pos;
    let kind = r.u8()?;
    // The old tuple is optional: without it the first marker is already the new tuple's 'N'.
    let old = match kind {
        b'N' => None,
        _ => {
            let old = old_tuple(r, kind)?
                .ok_or_else(|| r.invalid(at, "tuple marker", expected("'K', 'O' or 'N'", kind)))?;
            r.expect_byte(b'N', "new tuple marker")?;
            Some(old)
        }
    };
    Ok(Update { relation_id, old, new: tuple(r)? })
}

/// Decodes the tuple after an old-tuple marker `kind`; `None` if `kind` is not 'K' or 'O'.
fn old_tuple(r: &mut Reader<'_>, kind: u8) -> Result<Option<OldTuple>, DecodeError> {
    Ok(match kind {
        b'K' => Some(OldTuple::Key(tuple(r)?)),
        b'O' => Some(OldTuple::Full(tuple(r)?)),
        _ => None,
    })
}

fn tuple(r: &mut Reader<'_>) -> Result<Tuple, DecodeError> {
    // Every column takes at least its kind byte.
    let ncols = r.count16("column count", 1)?;
    let mut values = Vec::with_capacity(ncols);
    for _ in 0..ncols {
        let at = r.pos;
        let value = match r.u8()? {
            b'n' => Value::Null,
            b'u' => Value::Unchanged,
            b't' => Value::Text(r.len_prefixed("column value length")?),
            b'b' => Value::Binary(r.len_prefixed("column value length")?),
            other => return Err(r.invalid(at, "column kind", expected("n, u, t or b", other))),
        };
        values.push(value);
    }
    Ok(Tuple(values))
}

fn truncate(r: &mut Reader<'_>) -> Result<Truncate, DecodeError> {
    let at = r.pos;
    let nrels = r.i32()?;
    let options = r.u8()?;
    // The count precedes the options byte, so it is checked only now, against what follows.
    let nrels = r.check_count(at, "relation count", i64::from(nrels), 4)?;
    let mut relation_ids = Vec::with_capacity(nrels);
    for _ in 0..nrels {
        relation_ids.push(r.u32()?);
    }
    Ok(Truncate { options, relation_ids })
}

fn logical_message(r: &mut Reader<'_>) -> Result<LogicalMessage, DecodeError> {
    // Only bit 1 is defined; other bits are ignored rather than rejected, as the server
    // promises nothing about them.
    let transactional = r.u8()? & 1 != 0;
    let lsn = Lsn(r.u64()?);
    let prefix = r.cstr("prefix")?;
    let content = r.len_prefixed("content length")?;
    Ok(LogicalMessage { transactional, lsn, prefix, content })
}

fn expected(what: &str, found: u8) -> String {
    format!("expected {what}, found {:?} ({found:#04x})", char::from(found))
}

/// A bounds-checked cursor over one message. Every read returns an error instead of panicking.
struct Reader<'a> {
    buf: &'a Bytes,
    pos: usize,
    message: &'static str,
}

impl Reader<'_> {
    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn truncated(&self, needed: usize) -> DecodeError {
        DecodeError::Truncated { message: self.message, offset: self.pos, needed }
    }

    fn invalid(&self, offset: usize, field: &'static str, detail: String) -> DecodeError {
        DecodeError::Invalid { message: self.message, field, offset, detail }
    }

    /// Advances past `len` bytes and returns their start.
    fn advance(&mut self, len: usize) -> Result<usize, DecodeError> {
        let remaining = self.remaining();
        if len > remaining {
            return Err(self.truncated(len - remaining));
        }
        let start = self.pos;
        self.pos += len;
        Ok(start)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let start = self.advance(N)?;
        self.buf
            .get(start..start + N)
            .and_then(|s| <[u8; N]>::try_from(s).ok())
            .ok_or_else(|| self.truncated(N))
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    fn i16(&mut self) -> Result<i16, DecodeError> {
        self.array().map(i16::from_be_bytes)
    }

    fn i32(&mut self) -> Result<i32, DecodeError> {
        self.array().map(i32::from_be_bytes)
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_be_bytes)
    }

    fn i64(&mut self) -> Result<i64, DecodeError> {
        self.array().map(i64::from_be_bytes)
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_be_bytes)
    }

    /// A zero-copy slice of the next `len` bytes.
    fn bytes(&mut self, len: usize) -> Result<Bytes, DecodeError> {
        let start = self.advance(len)?;
        Ok(self.buf.slice(start..start + len))
    }

    /// An Int32 length followed by that many bytes. pgoutput never sends -1 here (NULL has
    /// its own kind byte), so any negative length is corruption.
    fn len_prefixed(&mut self, field: &'static str) -> Result<Bytes, DecodeError> {
        let at = self.pos;
        let len = self.i32()?;
        let len = usize::try_from(len)
            .map_err(|_| self.invalid(at, field, format!("negative length {len}")))?;
        self.bytes(len)
    }

    /// A NUL-terminated UTF-8 string.
    fn cstr(&mut self, field: &'static str) -> Result<String, DecodeError> {
        let start = self.pos;
        let rest = self.buf.get(start..).unwrap_or_default();
        let Some(len) = rest.iter().position(|&b| b == 0) else {
            self.pos = self.buf.len();
            return Err(self.truncated(1));
        };
        let text = rest.get(..len).unwrap_or_default();
        let text = std::str::from_utf8(text)
            .map_err(|e| self.invalid(start + e.valid_up_to(), field, format!("not UTF-8: {e}")))?;
        self.pos = start + len + 1;
        Ok(text.to_owned())
    }

    /// An Int16 count of items that each take at least `min_each` bytes.
    fn count16(&mut self, field: &'static str, min_each: usize) -> Result<usize, DecodeError> {
        let at = self.pos;
        let count = self.i16()?;
        self.check_count(at, field, i64::from(count), min_each)
    }

    /// Rejects a negative count, and one the rest of the message is too short to hold, before
    /// anyone sizes an allocation by it.
    fn check_count(
        &self,
        at: usize,
        field: &'static str,
        count: i64,
        min_each: usize,
    ) -> Result<usize, DecodeError> {
        let count = usize::try_from(count)
            .map_err(|_| self.invalid(at, field, format!("negative count {count}")))?;
        let needed = count.saturating_mul(min_each);
        let remaining = self.remaining();
        if needed > remaining {
            return Err(self.truncated(needed - remaining));
        }
        Ok(count)
    }

    fn expect_byte(&mut self, want: u8, field: &'static str) -> Result<(), DecodeError> {
        let at = self.pos;
        let found = self.u8()?;
        if found != want {
            let want = format!("{:?}", char::from(want));
            return Err(self.invalid(at, field, expected(&want, found)));
        }
        Ok(())
    }

    fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(DecodeError::TrailingBytes { message: self.message, extra }),
        }
    }
}

/// Encodes a message exactly as pgoutput would send it: `decode(&encode(m)) == Ok(m)`.
///
/// Exists for tests, fuzzing and benchmarks; the relay itself never encodes.
///
/// # Panics
///
/// On messages that have no wire form, which [`decode`] never produces: a string containing
/// NUL, more columns than an Int16 can count, or more relations or bytes than an Int32 can.
#[doc(hidden)]
pub fn encode(msg: &Message) -> Bytes {
    let mut out = BytesMut::with_capacity(64);
    match msg {
        Message::Begin(m) => {
            out.put_u8(b'B');
            out.put_u64(m.final_lsn.0);
            out.put_i64(m.commit_ts);
            out.put_u32(m.xid);
        }
        Message::Commit(m) => {
            out.put_u8(b'C');
            out.put_u8(m.flags);
            out.put_u64(m.commit_lsn.0);
            out.put_u64(m.end_lsn.0);
            out.put_i64(m.commit_ts);
        }
        Message::Origin(m) => {
            out.put_u8(b'O');
            out.put_u64(m.commit_lsn.0);
            put_cstr(&mut out, &m.name);
        }
        Message::Relation(m) => {
            out.put_u8(b'R');
            out.put_u32(m.id);
            put_cstr(&mut out, &m.namespace);
            put_cstr(&mut out, &m.name);
            out.put_u8(m.replica_identity);
            put_i16_count(&mut out, m.columns.len());
            for c in &m.columns {
                out.put_u8(c.flags);
                put_cstr(&mut out, &c.name);
                out.put_u32(c.type_oid);
                out.put_i32(c.type_modifier);
            }
        }
        Message::Type(m) => {
            out.put_u8(b'Y');
            out.put_u32(m.id);
            put_cstr(&mut out, &m.namespace);
            put_cstr(&mut out, &m.name);
        }
        Message::Insert(m) => {
            out.put_u8(b'I');
            out.put_u32(m.relation_id);
            out.put_u8(b'N');
            put_tuple(&mut out, &m.new);
        }
        Message::Update(m) => {
            out.put_u8(b'U');
            out.put_u32(m.relation_id);
            if let Some(old) = &m.old {
                put_old_tuple(&mut out, old);
            }
            out.put_u8(b'N');
            put_tuple(&mut out, &m.new);
        }
        Message::Delete(m) => {
            out.put_u8(b'D');
            out.put_u32(m.relation_id);
            put_old_tuple(&mut out, &m.old);
        }
        Message::Truncate(m) => {
            out.put_u8(b'T');
            put_i32_len(&mut out, m.relation_ids.len());
            out.put_u8(m.options);
            for &id in &m.relation_ids {
                out.put_u32(id);
            }
        }
        Message::LogicalMessage(m) => {
            out.put_u8(b'M');
            out.put_u8(u8::from(m.transactional));
            out.put_u64(m.lsn.0);
            put_cstr(&mut out, &m.prefix);
            put_i32_len(&mut out, m.content.len());
            out.put_slice(&m.content);
        }
    }
    out.freeze()
}

fn put_cstr(out: &mut BytesMut, s: &str) {
    assert!(!s.contains('\0'), "pgoutput strings cannot contain NUL: {s:?}");
    out.put_slice(s.as_bytes());
    out.put_u8(0);
}

fn put_i16_count(out: &mut BytesMut, n: usize) {
    out.put_i16(i16::try_from(n).expect("pgoutput column counts are Int16"));
}

fn put_i32_len(out: &mut BytesMut, n: usize) {
    out.put_i32(i32::try_from(n).expect("pgoutput lengths and counts are Int32"));
}

fn put_old_tuple(out: &mut BytesMut, old: &OldTuple) {
    let (kind, tuple) = match old {
        OldTuple::Key(t) => (b'K', t),
        OldTuple::Full(t) => (b'O', t),
    };
    out.put_u8(kind);
    put_tuple(out, tuple);
}

fn put_tuple(out: &mut BytesMut, tuple: &Tuple) {
    put_i16_count(out, tuple.0.len());
    for value in &tuple.0 {
        match value {
            Value::Null => out.put_u8(b'n'),
            Value::Unchanged => out.put_u8(b'u'),
            Value::Text(bytes) => put_len_prefixed(out, b't', bytes),
            Value::Binary(bytes) => put_len_prefixed(out, b'b', bytes),
        }
    }
}

fn put_len_prefixed(out: &mut BytesMut, kind: u8, bytes: &[u8]) {
    out.put_u8(kind);
    put_i32_len(out, bytes.len());
    out.put_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn cat(parts: &[&[u8]]) -> Bytes {
        Bytes::from(parts.concat())
    }

    fn text(s: &str) -> Value {
        Value::Text(Bytes::copy_from_slice(s.as_bytes()))
    }

    fn decode_parts(parts: &[&[u8]]) -> Result<Message, DecodeError> {
        decode(&cat(parts))
    }

    const OUTBOX: [u8; 4] = [0, 0, 0x40, 0x01]; // relation id 16385
    const LSN: [u8; 8] = [0, 0, 0, 0x01, 0x6B, 0x37, 0x4D, 0x48]; // 1/6B374D48
    const TS: [u8; 8] = [0, 0x02, 0xC3, 0x1A, 0x5E, 0x7F, 0x10, 0x00];

    // Fixture bytes are laid out one protocol field (or column) per group, as in the spec.
    #[rustfmt::skip]
    fn insert_fixture() -> Bytes {
        cat(&[
            b"I", &OUTBOX, b"N", &[0, 3],                     // three columns:
            b"n",                                             // NULL
            b"t", &[0, 0, 0, 2], b"42",                       // text "42"
            b"b", &[0, 0, 0, 4], &[0xDE, 0xAD, 0xBE, 0xEF],   // 4 binary bytes
        ])
    }

    /// Messages built by hand from the protocol documentation, with what they must decode to.
    #[rustfmt::skip]
    fn fixtures() -> Vec<(Bytes, Message)> {
        let (id, lsn, ts) = (16385, Lsn(0x0000_0001_6B37_4D48), 0x0002_C31A_5E7F_1000);
        let end_lsn = [0, 0, 0, 0x01, 0x6B, 0x37, 0x4D, 0x78];
        let seven: &[u8] = &[b't', 0, 0, 0, 1, b'7'];
        let key7 = Tuple(vec![text("7")]);
        let column = |flags, name: &str, type_oid| {
            Column { flags, name: name.into(), type_oid, type_modifier: -1 }
        };
        vec![
            (
                cat(&[b"B", &LSN, &TS, &[0, 0, 0x02, 0xF1]]),
                Message::Begin(Begin { final_lsn: lsn, commit_ts: ts, xid: 753 }),
            ),
            (
                cat(&[b"C", &[0], &LSN, &end_lsn, &TS]),
                Message::Commit(Commit {
                    flags: 0, commit_lsn: lsn, end_lsn: Lsn(0x0000_0001_6B37_4D78), commit_ts: ts,
                }),
            ),
            (
                cat(&[b"O", &LSN, b"node_a\0"]),
                Message::Origin(Origin { commit_lsn: lsn, name: "node_a".into() }),
            ),
            (
                cat(&[
                    b"R", &OUTBOX, b"public\0", b"outbox\0", b"d", &[0, 2],
                    &[1], b"id\0", &[0, 0, 0, 20], &[0xFF; 4],               // key, int8, typmod -1
                    &[0], b"payload\0", &[0, 0, 0x0E, 0xDA], &[0xFF; 4],     // jsonb (3802)
                ]),
                Message::Relation(Relation {
                    id, namespace: "public".into(), name: "outbox".into(), replica_identity: b'd',
                    columns: vec![column(1, "id", 20), column(0, "payload", 3802)],
                }),
            ),
            (
                cat(&[b"Y", &[0, 0, 0x40, 0x10], b"public\0", b"mood\0"]),
                Message::Type(TypeInfo { id: 16400, namespace: "public".into(), name: "mood".into() }),
            ),
            (
                insert_fixture(),
                Message::Insert(Insert { relation_id: id, new: Tuple(vec![
                    Value::Null, text("42"), Value::Binary(Bytes::from_static(&[0xDE, 0xAD, 0xBE, 0xEF])),
                ]) }),
            ),
            (
                cat(&[b"U", &OUTBOX, b"K", &[0, 1], seven, b"N", &[0, 2], seven, b"u"]),
                Message::Update(Update {
                    relation_id: id,
                    old: Some(OldTuple::Key(key7.clone())),
                    new: Tuple(vec![text("7"), Value::Unchanged]),
                }),
            ),
            (
                cat(&[b"U", &OUTBOX, b"N", &[0, 1], b"n"]),
                Message::Update(Update { relation_id: id, old: None, new: Tuple(vec![Value::Null]) }),
            ),
            (
                cat(&[b"D", &OUTBOX, b"O", &[0, 2], seven, b"n"]),
                Message::Delete(Delete {
                    relation_id: id,
                    old: OldTuple::Full(Tuple(vec![text("7"), Value::Null])),
                }),
            ),
            (
                cat(&[b"D", &OUTBOX, b"K", &[0, 1], seven]),
                Message::Delete(Delete { relation_id: id, old: OldTuple::Key(key7) }),
            ),
            (
                cat(&[b"T", &[0, 0, 0, 2], &[3], &OUTBOX, &[0, 0, 0x40, 0x02]]),
                Message::Truncate(Truncate { options: 3, relation_ids: vec![16385, 16386] }),
            ),
            (
                cat(&[b"M", &[1], &LSN, b"outbox\0", &[0, 0, 0, 3], b"abc"]),
                Message::LogicalMessage(LogicalMessage {
                    transactional: true, lsn, prefix: "outbox".into(), content: Bytes::from_static(b"abc"),
                }),
            ),
        ]
    }

    #[test]
    fn insert_with_null_text_and_binary_columns_decodes_to_spec() {
        let Ok(Message::Insert(insert)) = decode(&insert_fixture()) else {
            panic!("not an Insert")
        };
        assert_eq!(insert.relation_id, 16385);
        assert_eq!(
            insert.new.0,
            [Value::Null, text("42"), Value::Binary(Bytes::from_static(&[0xDE, 0xAD, 0xBE, 0xEF]))]
        );
    }

    #[test]
    fn every_hand_built_fixture_decodes_to_its_spec_message() {
        for (bytes, expected) in fixtures() {
            assert_eq!(decode(&bytes), Ok(expected), "fixture {bytes:?}");
        }
    }

    #[test]
    fn encode_reproduces_every_hand_built_fixture_byte_for_byte() {
        for (bytes, message) in fixtures() {
            assert_eq!(encode(&message), bytes, "{message:?}");
        }
    }

    #[test]
    fn text_binary_and_message_content_are_zero_copy_slices_of_the_input() {
        let mut slices = Vec::new();
        for (bytes, _) in fixtures() {
            let start = bytes.as_ptr() as usize;
            let within = start..start + bytes.len();
            match decode(&bytes) {
                Ok(Message::Insert(Insert { new: Tuple(values), .. })) => {
                    for value in values {
                        if let Value::Text(b) | Value::Binary(b) = value {
                            slices.push((within.clone(), b));
                        }
                    }
                }
                Ok(Message::LogicalMessage(m)) => slices.push((within, m.content)),
                _ => {}
            }
        }
        assert_eq!(slices.len(), 3);
        for (within, slice) in slices {
            assert!(within.contains(&(slice.as_ptr() as usize)), "{slice:?} was copied");
        }
    }

    #[test]
    fn empty_buffer_is_an_empty_error() {
        assert_eq!(decode(&Bytes::new()), Err(DecodeError::Empty));
    }

    #[test]
    fn unknown_tag_is_reported_with_its_value() {
        assert_eq!(decode_parts(&[b"S"]), Err(DecodeError::UnknownTag { tag: b'S' }));
    }

    #[test]
    fn byte_after_a_complete_message_is_trailing_bytes() {
        assert_eq!(
            decode_parts(&[b"B", &LSN, &TS, &[0, 0, 0x02, 0xF1], &[0]]),
            Err(DecodeError::TrailingBytes { message: "Begin", extra: 1 })
        );
    }

    #[test]
    fn truncated_begin_reports_offset_and_missing_byte_count() {
        assert_eq!(
            decode_parts(&[b"B", &LSN, &[0]]),
            Err(DecodeError::Truncated { message: "Begin", offset: 9, needed: 7 })
        );
    }

    fn invalid_field(result: Result<Message, DecodeError>) -> (&'static str, usize) {
        match result {
            Err(DecodeError::Invalid { field, offset, .. }) => (field, offset),
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn negative_lengths_and_counts_are_invalid_at_their_offset() {
        let neg = [0xFF, 0xFF, 0xFF, 0xFF];
        let cases: [(&[&[u8]], &str, usize); 4] = [
            (&[b"I", &OUTBOX, b"N", &[0, 1], b"t", &neg], "column value length", 9),
            (&[b"I", &OUTBOX, b"N", &[0xFF, 0xFF]], "column count", 6),
            (&[b"T", &neg, &[0]], "relation count", 1),
            (&[b"M", &[0], &LSN, b"p\0", &neg], "content length", 12),
        ];
        for (parts, field, offset) in cases {
            assert_eq!(invalid_field(decode_parts(parts)), (field, offset), "{parts:?}");
        }
    }

    #[test]
    fn unexpected_marker_and_kind_bytes_are_invalid() {
        let cases: [(&[&[u8]], &str, usize); 5] = [
            (&[b"I", &OUTBOX, b"K", &[0, 0]], "new tuple marker", 5),
            (&[b"U", &OUTBOX, b"X", &[0, 0]], "tuple marker", 5),
            (&[b"U", &OUTBOX, b"K", &[0, 0], b"K", &[0, 0]], "new tuple marker", 8),
            (&[b"D", &OUTBOX, b"N", &[0, 0]], "old tuple marker", 5),
            (&[b"I", &OUTBOX, b"N", &[0, 1], b"x"], "column kind", 8),
        ];
        for (parts, field, offset) in cases {
            assert_eq!(invalid_field(decode_parts(parts)), (field, offset), "{parts:?}");
        }
    }

    #[test]
    fn invalid_utf8_in_a_string_is_invalid_at_the_bad_byte() {
        let result = decode_parts(&[b"Y", &[0, 0, 0, 1], b"ok\0", b"ab\xFF\0"]);
        assert_eq!(invalid_field(result), ("type name", 10));
    }

    #[test]
    fn unterminated_string_is_truncated() {
        let result = decode_parts(&[b"O", &LSN, b"node"]);
        assert_eq!(
            result,
            Err(DecodeError::Truncated { message: "Origin", offset: 13, needed: 1 })
        );
    }

    #[test]
    fn every_truncation_prefix_of_every_fixture_is_an_error() {
        for (bytes, _) in fixtures() {
            for len in 0..bytes.len() {
                assert!(decode(&bytes.slice(..len)).is_err(), "prefix {len} of {bytes:?}");
            }
        }
    }

    #[test]
    fn huge_counts_and_lengths_in_a_short_buffer_are_truncated_before_allocating() {
        let max32: &[u8] = &[0x7F, 0xFF, 0xFF, 0xFF];
        let max16: &[u8] = &[0x7F, 0xFF];
        let cases: [&[&[u8]]; 6] = [
            &[b"I", &OUTBOX, b"N", max16, b"nnnnnnnnnn"],
            &[b"R", &OUTBOX, b"s\0", b"t\0", b"d", max16, &[0; 10]],
            &[b"T", max32, &[0], &[0; 10]],
            &[b"I", &OUTBOX, b"N", &[0, 1], b"t", max32, &[0; 10]],
            &[b"D", &OUTBOX, b"O", &[0, 1], b"b", max32],
            &[b"M", &[0], &LSN, b"p\0", max32, b"abc"],
        ];
        for parts in cases {
            let result = decode_parts(parts);
            assert!(matches!(result, Err(DecodeError::Truncated { .. })), "{parts:?}: {result:?}");
        }
    }

    fn arb_name() -> impl Strategy<Value = String> {
        "[^\\x00]{0,6}"
    }

    fn arb_bytes() -> impl Strategy<Value = Bytes> {
        vec(any::<u8>(), 0..6).prop_map(Bytes::from)
    }

    fn arb_tuple() -> impl Strategy<Value = Tuple> {
        let value = prop_oneof![
            Just(Value::Null),
            Just(Value::Unchanged),
            arb_bytes().prop_map(Value::Text),
            arb_bytes().prop_map(Value::Binary),
        ];
        vec(value, 0..4).prop_map(Tuple)
    }

    fn arb_old_tuple() -> impl Strategy<Value = OldTuple> {
        prop_oneof![arb_tuple().prop_map(OldTuple::Key), arb_tuple().prop_map(OldTuple::Full)]
    }

    fn arb_message() -> impl Strategy<Value = Message> {
        let column = (any::<u8>(), arb_name(), any::<u32>(), any::<i32>()).prop_map(
            |(flags, name, type_oid, type_modifier)| Column {
                flags,
                name,
                type_oid,
                type_modifier,
            },
        );
        prop_oneof![
            (any::<u64>(), any::<i64>(), any::<u32>()).prop_map(|(final_lsn, commit_ts, xid)| {
                Message::Begin(Begin { final_lsn: Lsn(final_lsn), commit_ts, xid })
            }),
            (any::<u8>(), any::<u64>(), any::<u64>(), any::<i64>()).prop_map(
                |(flags, commit_lsn, end_lsn, commit_ts)| {
                    Message::Commit(Commit {
                        flags,
                        commit_lsn: Lsn(commit_lsn),
                        end_lsn: Lsn(end_lsn),
                        commit_ts,
                    })
                }
            ),
            (any::<u64>(), arb_name()).prop_map(|(commit_lsn, name)| Message::Origin(Origin {
                commit_lsn: Lsn(commit_lsn),
                name
            })),
            (any::<u32>(), arb_name(), arb_name(), any::<u8>(), vec(column, 0..4)).prop_map(
                |(id, namespace, name, replica_identity, columns)| {
                    Message::Relation(Relation { id, namespace, name, replica_identity, columns })
                }
            ),
            (any::<u32>(), arb_name(), arb_name())
                .prop_map(|(id, namespace, name)| Message::Type(TypeInfo { id, namespace, name })),
            (any::<u32>(), arb_tuple())
                .prop_map(|(relation_id, new)| Message::Insert(Insert { relation_id, new })),
            (any::<u32>(), proptest::option::of(arb_old_tuple()), arb_tuple()).prop_map(
                |(relation_id, old, new)| Message::Update(Update { relation_id, old, new })
            ),
            (any::<u32>(), arb_old_tuple())
                .prop_map(|(relation_id, old)| Message::Delete(Delete { relation_id, old })),
            (any::<u8>(), vec(any::<u32>(), 0..4)).prop_map(|(options, relation_ids)| {
                Message::Truncate(Truncate { options, relation_ids })
            }),
            (any::<bool>(), any::<u64>(), arb_name(), arb_bytes()).prop_map(
                |(transactional, lsn, prefix, content)| {
                    Message::LogicalMessage(LogicalMessage {
                        transactional,
                        lsn: Lsn(lsn),
                        prefix,
                        content,
                    })
                }
            ),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn arbitrary_messages_of_every_variant_round_trip_through_encode(m in arb_message()) {
            prop_assert_eq!(decode(&encode(&m)), Ok(m));
        }
    }

    /// Runs `cases` cases of `strategy` through `check` on proptest's runner (a panic fails the
    /// case, and a failure is shrunk), then writes `fuzz <input>: N cases, …` to the real stderr,
    /// which libtest does not capture, so the count shows in every test run.
    fn fuzz<S: Strategy>(
        input: &str,
        cases: u32,
        strategy: S,
        check: impl Fn(S::Value) -> Result<(), TestCaseError>,
    ) {
        use std::io::Write;
        let count = std::cell::Cell::new(0u32);
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(cases));
        let result = runner.run(&strategy, |value| {
            count.set(count.get() + 1);
            check(value)
        });
        let failures = u32::from(result.is_err());
        // No secret oracle here: WAL bytes carry row data, never walrelay's configuration.
        let line = format!(
            "fuzz {input}: {} cases, {failures} panics or failures (no secret oracle: row data, not configuration)\n",
            count.get()
        );
        let _ = std::io::stderr().write_all(line.as_bytes());
        if let Err(e) = result {
            panic!("fuzz {input}: {e}");
        }
    }

    #[test]
    fn fuzz_pgoutput_mutated_messages_never_panic_and_whatever_decodes_round_trips() {
        let edits = vec((0u8..3, any::<prop::sample::Index>(), any::<u8>()), 1..4);
        fuzz("pgoutput (mutated messages)", 1000, (arb_message(), edits), |(m, edits)| {
            let mut buf = encode(&m).to_vec();
            for (kind, at, byte) in edits {
                let i = at.index(buf.len() + 1);
                match kind {
                    0 => {
                        if let Some(b) = buf.get_mut(i) {
                            *b ^= byte | 1
                        }
                    }
                    1 => buf.truncate(i),
                    _ => buf.insert(i, byte),
                }
            }
            if let Ok(decoded) = decode(&Bytes::from(buf)) {
                prop_assert_eq!(decode(&encode(&decoded)), Ok(decoded));
            }
            Ok(())
        });
    }

    #[test]
    fn fuzz_pgoutput_random_bytes_after_a_valid_tag_never_panic() {
        let strategy = (proptest::sample::select(b"BCORYIUDTM".to_vec()), vec(any::<u8>(), 0..48));
        fuzz("pgoutput (random bodies)", 1000, strategy, |(tag, body)| {
            let _ = decode(&cat(&[&[tag], &body]));
            Ok(())
        });
    }
}
