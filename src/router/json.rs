//! A JSON reader with Jackson's `ObjectMapper.readTree` semantics, for payload expansion.
//!
//! Numbers are typed as Jackson types them (`int`, `long`, `BigInteger`, `double`); duplicate keys
//! keep the first position and the last value (only `json` text can repeat keys, `jsonb` cannot);
//! text after the first value is ignored; Jackson's default read constraints apply (1000 nesting
//! levels, 1000-character numbers). Strings borrow from the payload text unless they contain
//! escapes.

use std::borrow::Cow;
use std::collections::HashMap;

use super::convert::{write_java_double, write_str};

/// Jackson's default `StreamReadConstraints`.
const MAX_DEPTH: usize = 1000;
const MAX_NUMBER_LEN: usize = 1000;
/// Objects with fewer members than this find repeated keys by a linear scan.
const SMALL_OBJECT: usize = 16;

/// A parsed JSON number, typed as Jackson types it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Num<'a> {
    Int(i32),
    Long(i64),
    /// An integer beyond `long` (Jackson's `BigIntegerNode`): its digits.
    Big(&'a str),
    Double(f64),
}

impl Num<'_> {
    /// The number as a FLOAT64 field holds it (`Number.doubleValue()`).
    pub(crate) fn as_f64(&self) -> Result<f64, String> {
        Ok(match self {
            Num::Int(v) => f64::from(*v),
            Num::Long(v) => *v as f64,
            Num::Double(v) => *v,
            Num::Big(digits) => digits.parse::<f64>().map_err(|e| e.to_string())?,
        })
    }
}

/// A parsed JSON value (Jackson's `JsonNode`), borrowing from the payload text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node<'a> {
    Null,
    Bool(bool),
    Num(Num<'a>),
    Str(Cow<'a, str>),
    Arr(Vec<Node<'a>>),
    Obj(Vec<(Cow<'a, str>, Node<'a>)>),
}

impl Node<'_> {
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Node::Null => "NULL",
            Node::Bool(_) => "BOOLEAN",
            Node::Num(_) => "NUMBER",
            Node::Str(_) => "STRING",
            Node::Arr(_) => "ARRAY",
            Node::Obj(_) => "OBJECT",
        }
    }

    pub(crate) fn same_type(&self, other: &Node) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

/// Whether the JSON text nests arrays/objects deeper than `limit` (a linear scan that skips
/// string contents; the text need not be valid).
pub(crate) fn nesting_exceeds(text: &str, limit: usize) -> bool {
    let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
    for &c in text.as_bytes() {
        if in_str {
            match c {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            b'"' => in_str = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// Parses a payload the way `parseJsonPayload` does. `Err` is the warning Debezium would log.
pub(crate) fn parse(text: &str, dedupe_keys: bool) -> Result<Node<'_>, String> {
    match text.as_bytes().first() {
        Some(b'{') | Some(b'[') => {}
        Some(_) => {
            let c = text.chars().next().unwrap_or(' ');
            return Err(format!("Unable to parse payload starting with '{c}'"));
        }
        None => return Err("Unable to parse an empty payload".into()),
    }
    let mut p = Parser { s: text, b: text.as_bytes(), i: 0, dedupe: dedupe_keys };
    p.value(0)
}

/// Jackson's serialization of a parsed tree (all keys, nulls kept).
pub(crate) fn write_node(out: &mut Vec<u8>, n: &Node) {
    match n {
        Node::Null => out.extend_from_slice(b"null"),
        Node::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Node::Num(Num::Int(v)) => out.extend_from_slice(v.to_string().as_bytes()),
        Node::Num(Num::Long(v)) => out.extend_from_slice(v.to_string().as_bytes()),
        Node::Num(Num::Big(d)) => out.extend_from_slice(d.as_bytes()),
        Node::Num(Num::Double(v)) => write_java_double(out, *v),
        Node::Str(s) => write_str(out, s),
        Node::Arr(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_node(out, item);
            }
            out.push(b']');
        }
        Node::Obj(fields) => {
            out.push(b'{');
            for (i, (k, v)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, k);
                out.push(b':');
                write_node(out, v);
            }
            out.push(b'}');
        }
    }
}

struct Parser<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
    dedupe: bool,
}

impl<'a> Parser<'a> {
    fn err<T>(&self, what: &str) -> Result<T, String> {
        Err(format!("invalid JSON at byte {}: {what}", self.i))
    }

    fn ws(&mut self) {
        while matches!(self.b.get(self.i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Result<Node<'a>, String> {
        self.ws();
        match self.b.get(self.i) {
            Some(b'{') | Some(b'[') if depth >= MAX_DEPTH => {
                self.err(&format!("nesting depth exceeds the maximum allowed ({MAX_DEPTH})"))
            }
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => Ok(Node::Str(self.string()?)),
            Some(b't') => self.literal("true", Node::Bool(true)),
            Some(b'f') => self.literal("false", Node::Bool(false)),
            Some(b'n') => self.literal("null", Node::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => self.err("expected a value"),
        }
    }

    fn literal(&mut self, word: &str, node: Node<'a>) -> Result<Node<'a>, String> {
        if self.b[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(node)
        } else {
            self.err("unrecognized token")
        }
    }

    fn object(&mut self, depth: usize) -> Result<Node<'a>, String> {
        self.i += 1;
        let mut fields: Vec<(Cow<'a, str>, Node<'a>)> = Vec::new();
        // Repeated keys are looked up linearly in small objects (no allocation, no hashing: an
        // outbox event has a handful of members) and through an index in large ones.
        let mut index: Option<HashMap<Cow<'a, str>, usize>> = None;
        self.ws();
        if self.b.get(self.i) == Some(&b'}') {
            self.i += 1;
            return Ok(Node::Obj(fields));
        }
        loop {
            self.ws();
            if self.b.get(self.i) != Some(&b'"') {
                return self.err("expected a field name");
            }
            let key = self.string()?;
            self.ws();
            if self.b.get(self.i) != Some(&b':') {
                return self.err("expected ':'");
            }
            self.i += 1;
            let value = self.value(depth)?;
            if self.dedupe {
                if index.is_none() && fields.len() >= SMALL_OBJECT {
                    index =
                        Some(fields.iter().enumerate().map(|(i, (k, _))| (k.clone(), i)).collect());
                }
                let seen = match &index {
                    Some(index) => index.get(&key).copied(),
                    None => fields.iter().position(|(k, _)| *k == key),
                };
                match seen {
                    Some(at) => fields[at].1 = value,
                    None => {
                        if let Some(index) = &mut index {
                            index.insert(key.clone(), fields.len());
                        }
                        fields.push((key, value));
                    }
                }
            } else {
                fields.push((key, value));
            }
            self.ws();
            match self.b.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(Node::Obj(fields));
                }
                _ => return self.err("expected ',' or '}'"),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Node<'a>, String> {
        self.i += 1;
        let mut items = Vec::new();
        self.ws();
        if self.b.get(self.i) == Some(&b']') {
            self.i += 1;
            return Ok(Node::Arr(items));
        }
        loop {
            items.push(self.value(depth)?);
            self.ws();
            match self.b.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(Node::Arr(items));
                }
                _ => return self.err("expected ',' or ']'"),
            }
        }
    }

    /// Where the run of string bytes from `self.i` that need no decoding ends: at the next `"`,
    /// `\`, control character or the end of the text (searched a word at a time, not a byte).
    fn plain_run_end(&self) -> usize {
        let rest = &self.b[self.i..];
        let stop = memchr::memchr2(b'"', b'\\', rest).unwrap_or(rest.len());
        self.i + rest[..stop].iter().position(|&c| c < 0x20).unwrap_or(stop)
    }

    fn string(&mut self) -> Result<Cow<'a, str>, String> {
        self.i += 1;
        let start = self.i;
        self.i = self.plain_run_end();
        match self.b.get(self.i) {
            Some(b'"') => {
                self.i += 1;
                Ok(Cow::Borrowed(&self.s[start..self.i - 1]))
            }
            Some(b'\\') => self.string_escaped(start),
            Some(_) => self.err("unescaped control character in a string"),
            None => self.err("unterminated string"),
        }
    }

    fn string_escaped(&mut self, start: usize) -> Result<Cow<'a, str>, String> {
        let mut out = String::with_capacity(self.s.len().min(64 + 2 * (self.i - start)));
        out.push_str(&self.s[start..self.i]);
        loop {
            let run = self.i;
            self.i = self.plain_run_end();
            out.push_str(&self.s[run..self.i]);
            match self.b.get(self.i) {
                Some(b'"') => {
                    self.i += 1;
                    return Ok(Cow::Owned(out));
                }
                Some(b'\\') => {
                    let e = self.b.get(self.i + 1).copied();
                    self.i += 2;
                    match e {
                        Some(b'"') => out.push('"'),
                        Some(b'\\') => out.push('\\'),
                        Some(b'/') => out.push('/'),
                        Some(b'b') => out.push('\u{8}'),
                        Some(b'f') => out.push('\u{c}'),
                        Some(b'n') => out.push('\n'),
                        Some(b'r') => out.push('\r'),
                        Some(b't') => out.push('\t'),
                        Some(b'u') => {
                            let hi = self.hex4()?;
                            let c = if (0xD800..0xDC00).contains(&hi)
                                && self.b[self.i..].starts_with(b"\\u")
                            {
                                self.i += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return self.err("invalid surrogate pair");
                                }
                                char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))
                            } else {
                                char::from_u32(hi)
                            };
                            // A lone surrogate has no UTF-8 form; Jackson would keep it.
                            out.push(c.unwrap_or('\u{FFFD}'));
                        }
                        _ => return self.err("invalid escape"),
                    }
                }
                Some(_) => return self.err("unescaped control character in a string"),
                None => return self.err("unterminated string"),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let digits =
            self.s.get(self.i..self.i + 4).ok_or_else(|| "truncated \\u escape".to_owned())?;
        let v = u32::from_str_radix(digits, 16).map_err(|_| "invalid \\u escape".to_owned())?;
        self.i += 4;
        Ok(v)
    }

    fn number(&mut self) -> Result<Node<'a>, String> {
        let start = self.i;
        if self.b[self.i] == b'-' {
            self.i += 1;
        }
        let digits = |p: &mut Self| {
            let s = p.i;
            while matches!(p.b.get(p.i), Some(b'0'..=b'9')) {
                p.i += 1;
            }
            p.i - s
        };
        let int_digits = digits(self);
        if int_digits == 0 || (int_digits > 1 && self.b[self.i - int_digits] == b'0') {
            return self.err("invalid number");
        }
        let mut float = false;
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            float = true;
            if digits(self) == 0 {
                return self.err("invalid number: no digits after '.'");
            }
        }
        if matches!(self.b.get(self.i), Some(b'e' | b'E')) {
            self.i += 1;
            float = true;
            if matches!(self.b.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if digits(self) == 0 {
                return self.err("invalid number: no digits in the exponent");
            }
        }
        let text = &self.s[start..self.i];
        if text.trim_start_matches('-').len() > MAX_NUMBER_LEN {
            return self
                .err(&format!("number length exceeds the maximum allowed ({MAX_NUMBER_LEN})"));
        }
        if float {
            return text
                .parse::<f64>()
                .map(|v| Node::Num(Num::Double(v)))
                .or_else(|_| self.err("invalid number"));
        }
        Ok(Node::Num(match text.parse::<i64>() {
            Ok(v) => i32::try_from(v).map_or(Num::Long(v), Num::Int),
            Err(_) => Num::Big(text),
        }))
    }
}
