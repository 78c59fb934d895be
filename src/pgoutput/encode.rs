//! [`Message`] to bytes, exactly as pgoutput sends them: the inverse of [`super::decode`], for
//! tests, fuzzing and benchmarks.

use bytes::{BufMut, Bytes, BytesMut};

use super::{Message, OldTuple, Tuple, Value};

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
