//! The writer's span context, as the outbox row carries it in `tracing.span.context.field`.
//!
//! Debezium's writers (its Quarkus outbox extension, and anything following its docs) store a
//! `java.util.Properties` serialization of the W3C propagation fields:
//! `traceparent=00-<trace id>-<span id>-<flags>`, optionally `tracestate=…`, in any order, with
//! `#`/`!` comment lines (`Properties.store` writes a date comment first) and Properties
//! escaping. Writers that are not Java often store the `traceparent` value alone; both are read.
//!
//! The rules of W3C Trace Context level 1 are those OpenTelemetry Java's
//! `W3CTraceContextPropagator` applies, which is what Debezium extracts with: lower-case hex, no
//! all-zero ids, version `ff` refused, a later version may append `-…` fields. An invalid
//! `tracestate` is dropped and the `traceparent` kept, as there.
//!
//! Error texts never hold the value: a span context is not a secret, but a column that holds
//! something else by mistake might be.

/// The writer's span: the parent of the relay's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// The `sampled` flag (bit 0 of the trace flags), the only flag level 1 defines.
    pub sampled: bool,
    /// The `tracestate` list members, re-joined with `,` (as OpenTelemetry re-serializes them);
    /// `None` when absent, empty or invalid.
    pub state: Option<String>,
}

/// Why a column value is not a span context. Says what is wrong, never what the value is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("the value is not UTF-8 text")]
    NotText,
    #[error("the Properties text has no `traceparent` key (keys found: {0})")]
    NoTraceparent(String),
    #[error("the Properties text has a malformed \\uXXXX escape")]
    BadEscape,
    #[error("the traceparent {0}")]
    Traceparent(&'static str),
}

/// Reads a context column's text: a bare `traceparent` value or Properties text.
pub fn parse(text: &[u8]) -> Result<SpanContext, Invalid> {
    let text = std::str::from_utf8(text).map_err(|_| Invalid::NotText)?;
    let trimmed = text.trim();
    // A bare value has no Properties separator (`=`, `:`, white space) and no line break;
    // anything else is read the way `Properties.load` reads it.
    let bare = !trimmed.contains(['=', ':', '\n', '\r', ' ', '\t', '\x0c'])
        && !trimmed.starts_with(['#', '!']);
    if bare && !trimmed.is_empty() {
        return traceparent(trimmed).map(|(trace_id, span_id, sampled)| SpanContext {
            trace_id,
            span_id,
            sampled,
            state: None,
        });
    }
    let props = properties(text)?;
    let value = |key: &str| props.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    let Some(parent) = value("traceparent") else {
        let keys: Vec<&str> = props.iter().map(|(k, _)| k.as_str()).take(8).collect();
        let keys = if keys.is_empty() { "none".to_owned() } else { key_list(&keys) };
        return Err(Invalid::NoTraceparent(keys));
    };
    let (trace_id, span_id, sampled) = traceparent(parent.trim())?;
    Ok(SpanContext { trace_id, span_id, sampled, state: value("tracestate").and_then(tracestate) })
}

/// Key names for an error, each cut to 32 characters: a key is the writer's field name, not
/// data, but a value without `=` would be taken whole as a key.
fn key_list(keys: &[&str]) -> String {
    let cut: Vec<String> = keys
        .iter()
        .map(|k| match k.char_indices().nth(32) {
            Some((i, _)) => format!("`{}…`", &k[..i]),
            None => format!("`{k}`"),
        })
        .collect();
    cut.join(", ")
}

/// A `traceparent` value → (trace id, parent id, sampled).
pub fn traceparent(v: &str) -> Result<([u8; 16], [u8; 8], bool), Invalid> {
    let b = v.as_bytes();
    if b.len() < 55 {
        return Err(Invalid::Traceparent("is shorter than the 55 characters of version 00"));
    }
    if b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
        return Err(Invalid::Traceparent(
            "is not `version-traceid-parentid-flags` (2, 32, 16 and 2 hex digits)",
        ));
    }
    let version =
        hex::<1>(&b[0..2]).ok_or(Invalid::Traceparent("version is not lower-case hex"))?;
    match (version[0], b.len()) {
        (0xff, _) => return Err(Invalid::Traceparent("version is ff, which is invalid")),
        (0, 55) => {}
        (0, _) => return Err(Invalid::Traceparent("of version 00 is longer than 55 characters")),
        // A later version may add fields after a `-`.
        (_, 55) => {}
        (_, _) if b[55] == b'-' => {}
        _ => return Err(Invalid::Traceparent("has a version field that runs on")),
    }
    let trace_id =
        hex::<16>(&b[3..35]).ok_or(Invalid::Traceparent("trace id is not lower-case hex"))?;
    let span_id =
        hex::<8>(&b[36..52]).ok_or(Invalid::Traceparent("parent id is not lower-case hex"))?;
    let flags = hex::<1>(&b[53..55]).ok_or(Invalid::Traceparent("flags are not lower-case hex"))?;
    if trace_id == [0; 16] {
        return Err(Invalid::Traceparent("trace id is all zeros"));
    }
    if span_id == [0; 8] {
        return Err(Invalid::Traceparent("parent id is all zeros"));
    }
    Ok((trace_id, span_id, flags[0] & 1 == 1))
}

fn hex<const N: usize>(digits: &[u8]) -> Option<[u8; N]> {
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        out[i] = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

/// Writes `bytes` as lower-case hex.
pub fn write_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
}

/// A `tracestate` value, checked against W3C's list rules (at most 32 members, `key=value`,
/// keys `[a-z0-9_\-*/]` with one optional `@`, values of printable ASCII without `,` and `=`),
/// re-joined with `,`. `None` when empty or invalid.
pub fn tracestate(v: &str) -> Option<String> {
    let members: Vec<&str> =
        v.split(',').map(|m| m.trim_matches([' ', '\t'])).filter(|m| !m.is_empty()).collect();
    if members.is_empty() || members.len() > 32 {
        return None;
    }
    for m in &members {
        let (key, value) = m.split_once('=')?;
        let key_ok = !key.is_empty()
            && key.len() <= 256
            && key.bytes().next().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            && key.bytes().filter(|&c| c == b'@').count() <= 1
            && key
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-*/@".contains(&c));
        let value_ok = !value.is_empty()
            && value.len() <= 256
            && !value.ends_with(' ')
            && value.bytes().all(|c| (0x20..=0x7e).contains(&c) && c != b',' && c != b'=');
        if !key_ok || !value_ok {
            return None;
        }
    }
    Some(members.join(","))
}

/// `java.util.Properties.load(Reader)`: logical lines (a line ending in an odd number of
/// backslashes continues on the next, whose leading white space is skipped), comment lines
/// (`#` or `!` first), the key up to the first unescaped `=`, `:` or white space, escapes
/// `\t \n \r \f \uXXXX` and `\<any>` = that character. Keys in order of appearance; a key given
/// twice is read as the last one by the caller.
pub fn properties(text: &str) -> Result<Vec<(String, String)>, Invalid> {
    let mut out = Vec::new();
    let mut lines = text.split('\n').flat_map(|l| l.split('\r')).peekable();
    // '\r\n' splits into a line and an empty one; an empty line is blank, so harmless.
    while let Some(first) = lines.next() {
        let line = first.trim_start_matches([' ', '\t', '\x0c']);
        if line.is_empty() || line.starts_with(['#', '!']) {
            continue;
        }
        let mut logical = String::from(line);
        while ends_in_odd_backslashes(&logical) {
            logical.pop();
            match lines.next() {
                Some(next) => logical.push_str(next.trim_start_matches([' ', '\t', '\x0c'])),
                None => break,
            }
        }
        out.push(key_value(&logical)?);
    }
    Ok(out)
}

fn ends_in_odd_backslashes(s: &str) -> bool {
    s.bytes().rev().take_while(|&b| b == b'\\').count() % 2 == 1
}

fn key_value(line: &str) -> Result<(String, String), Invalid> {
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    let mut key_end = chars.len();
    let mut value_start = chars.len();
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '=' | ':' => {
                key_end = i;
                value_start = i + 1;
                break;
            }
            ' ' | '\t' | '\x0c' => {
                key_end = i;
                // White space, then at most one `=` or `:`, then white space.
                let mut j = i;
                while j < chars.len() && matches!(chars[j], ' ' | '\t' | '\x0c') {
                    j += 1;
                }
                if j < chars.len() && matches!(chars[j], '=' | ':') {
                    j += 1;
                }
                value_start = j;
                break;
            }
            _ => i += 1,
        }
    }
    let key_end = key_end.min(chars.len());
    let mut v = value_start.min(chars.len());
    while v < chars.len() && matches!(chars[v], ' ' | '\t' | '\x0c') {
        v += 1;
    }
    Ok((unescape(&chars[..key_end])?, unescape(&chars[v..])?))
}

fn unescape(chars: &[char]) -> Result<String, Invalid> {
    let mut out = String::with_capacity(chars.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(&e) = chars.get(i) else { break };
        i += 1;
        match e {
            't' => out.push('\t'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            'f' => out.push('\x0c'),
            'u' => {
                let digits: String =
                    chars.get(i..i + 4).ok_or(Invalid::BadEscape)?.iter().collect();
                let code = u32::from_str_radix(&digits, 16).map_err(|_| Invalid::BadEscape)?;
                // A surrogate pair is two escapes; a lone surrogate cannot be Rust text.
                out.push(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER));
                i += 4;
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
