//! Bytes to [`Message`]: the decoder proper, with the bounds-checked [`Reader`] every field
//! goes through, so malformed input is an error and never a panic.

use bytes::Bytes;

use super::{
    Begin, Column, Commit, Delete, Insert, LogicalMessage, Lsn, Message, OldTuple, Origin,
    Relation, Truncate, Tuple, TypeInfo, Update, Value,
};

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
