//! Kafka Connect converters, byte for byte: `StringConverter`, `JsonConverter` (Jackson's
//! compact output, with or without the schema envelope) and `SimpleHeaderConverter`.
//!
//! Jackson details reproduced here:
//! * strings escape `"` and `\`, control characters as `\b \t \n \f \r` or `\u00XX` (upper-case
//!   hex), and characters outside the BMP as escaped UTF-16 surrogate pairs (`\uD83D\uDE00`);
//!   every other character is written as raw UTF-8 (`/` is not escaped);
//! * doubles are written as Java's `Double.toString` (shortest repr, `1.0E-7`, `12.5`);
//! * bytes are Base64 (standard alphabet, padded);
//! * schemas follow `JsonConverter.asJsonSchema`: `type`, `fields`/`items`, `optional`, `name`,
//!   `version`, and `field` last inside struct fields.

use bytes::Bytes;

use super::column::Cv;

/// Connect primitive types used by walrelay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Prim {
    Boolean,
    Int16,
    Int32,
    Int64,
    Float64,
    String,
    Bytes,
}

impl Prim {
    fn json_name(self) -> &'static str {
        match self {
            Prim::Boolean => "boolean",
            Prim::Int16 => "int16",
            Prim::Int32 => "int32",
            Prim::Int64 => "int64",
            Prim::Float64 => "double",
            Prim::String => "string",
            Prim::Bytes => "bytes",
        }
    }
}

/// A Kafka Connect schema (the subset walrelay produces).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Schema {
    Prim {
        ty: Prim,
        optional: bool,
        name: Option<&'static str>,
        version: Option<i32>,
    },
    Array {
        items: Box<Schema>,
        optional: bool,
    },
    Struct {
        name: Option<String>,
        optional: bool,
        version: Option<i32>,
        fields: Vec<(String, Schema)>,
    },
}

impl Schema {
    /// Whether this is the primitive type `ty` (any name, version or optionality).
    pub(crate) fn is_prim(&self, ty: Prim) -> bool {
        matches!(self, Schema::Prim { ty: t, .. } if *t == ty)
    }

    pub(crate) fn optional(&self) -> bool {
        match self {
            Schema::Prim { optional, .. }
            | Schema::Array { optional, .. }
            | Schema::Struct { optional, .. } => *optional,
        }
    }

    /// `JsonConverter.asJsonSchema`, with `"field"` appended for struct members.
    pub(crate) fn write_json(&self, out: &mut Vec<u8>, field: Option<&str>) {
        out.extend_from_slice(b"{\"type\":");
        let (optional, name, version) = match self {
            Schema::Prim { ty, optional, name, version } => {
                write_str(out, ty.json_name());
                (*optional, *name, *version)
            }
            Schema::Array { items, optional } => {
                out.extend_from_slice(b"\"array\",\"items\":");
                items.write_json(out, None);
                (*optional, None, None)
            }
            Schema::Struct { name, optional, version, fields } => {
                out.extend_from_slice(b"\"struct\",\"fields\":[");
                for (i, (fname, fschema)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    fschema.write_json(out, Some(fname));
                }
                out.push(b']');
                (*optional, name.as_deref(), *version)
            }
        };
        out.extend_from_slice(if optional {
            b",\"optional\":true"
        } else {
            b",\"optional\":false"
        });
        if let Some(n) = name {
            out.extend_from_slice(b",\"name\":");
            write_str(out, n);
        }
        if let Some(v) = version {
            out.extend_from_slice(format!(",\"version\":{v}").as_bytes());
        }
        if let Some(f) = field {
            out.extend_from_slice(b",\"field\":");
            write_str(out, f);
        }
        out.push(b'}');
    }

    pub(crate) fn to_json(&self) -> String {
        let mut out = Vec::with_capacity(64);
        self.write_json(&mut out, None);
        String::from_utf8(out).expect("schema JSON is UTF-8")
    }
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Writes `s` as a JSON string literal the way Jackson's `UTF8JsonGenerator` does.
pub(crate) fn write_str(out: &mut Vec<u8>, s: &str) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    write_escaped(out, s);
    out.push(b'"');
}

/// `s` as a JSON string literal the way Jackson writes one into a `String`
/// (`writeValueAsString`, its character generator): as [`write_str`], but a character outside
/// the BMP stays as it is (the byte generator, `writeValueAsBytes`, writes an escaped surrogate
/// pair). Confluent's registered JSON Schema texts are written so.
pub(crate) fn write_str_chars(out: &mut Vec<u8>, s: &str) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    let mut rest = s;
    while let Some(i) = rest.find(|c: char| c.len_utf8() == 4) {
        write_escaped(out, &rest[..i]);
        out.extend_from_slice(&rest.as_bytes()[i..i + 4]);
        rest = &rest[i + 4..];
    }
    write_escaped(out, rest);
    out.push(b'"');
}

/// The inside of [`write_str`]'s literal.
fn write_escaped(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    loop {
        // Most text needs no escape: copy runs of it whole.
        i += clean_run(&bytes[i..]);
        let Some(&b) = bytes.get(i) else { break };
        out.extend_from_slice(&bytes[start..i]);
        let short = match b {
            b'"' => Some(b'"'),
            b'\\' => Some(b'\\'),
            0x08 => Some(b'b'),
            b'\t' => Some(b't'),
            b'\n' => Some(b'n'),
            0x0C => Some(b'f'),
            b'\r' => Some(b'r'),
            _ => None,
        };
        if let Some(e) = short {
            out.extend_from_slice(&[b'\\', e]);
            i += 1;
        } else if b < 0x20 {
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 15)],
            ]);
            i += 1;
        } else {
            // A 4-byte UTF-8 sequence: a character outside the BMP, written as a surrogate pair.
            let c = s[i..].chars().next().expect("char boundary");
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.extend_from_slice(b"\\u");
                for shift in [12, 8, 4, 0] {
                    out.push(HEX[usize::from((*u >> shift) & 15)]);
                }
            }
            i += c.len_utf8();
        }
        start = i;
    }
    out.extend_from_slice(&bytes[start..]);
}

/// How many bytes at the start of `bytes` Jackson writes as they are: all but `"`, `\`,
/// control characters and the lead byte of a 4-byte sequence (escaped as a surrogate pair).
fn clean_run(bytes: &[u8]) -> usize {
    // `|`, not `||`: no branch per byte, so a chunk's test becomes a few vector compares.
    let needs_escape = |b: u8| (b < 0x20) | (b == b'"') | (b == b'\\') | (b >= 0xF0);
    let mut n = 0;
    for chunk in bytes.chunks_exact(16) {
        if chunk.iter().fold(false, |any, &b| any | needs_escape(b)) {
            break;
        }
        n += 16;
    }
    n + bytes[n..].iter().take_while(|&&b| !needs_escape(b)).count()
}

/// Java's `Double.toString` (JDK 19+: the shortest decimal that rounds to the value; when that
/// has one digit, the closest of one or two digits), as Jackson writes a double.
pub(crate) fn write_java_double(out: &mut Vec<u8>, v: f64) {
    if v.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
        return;
    }
    if v.is_infinite() {
        out.extend_from_slice(if v > 0.0 { b"\"Infinity\"" } else { b"\"-Infinity\"" });
        return;
    }
    out.extend_from_slice(java_double_string(v).as_bytes());
}

pub(crate) fn java_double_string(v: f64) -> String {
    if v == 0.0 {
        return if v.is_sign_negative() { "-0.0".into() } else { "0.0".into() };
    }
    let sign = if v < 0.0 { "-" } else { "" };
    let a = v.abs();
    let (mut digits, mut exp) = sci_parts(&format!("{a:e}"));
    if digits.len() == 1 {
        let two = format!("{a:.1e}");
        if two.parse::<f64>() == Ok(a) {
            (digits, exp) = sci_parts(&two);
        }
    }
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    let body = if (-3..7).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() > int_len {
                format!("{}.{}", &digits[..int_len], &digits[int_len..])
            } else {
                format!("{digits}{}.0", "0".repeat(int_len - digits.len()))
            }
        } else {
            format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
        }
    } else {
        let frac = if digits.len() > 1 { &digits[1..] } else { "0" };
        format!("{}.{frac}E{exp}", &digits[..1])
    };
    format!("{sign}{body}")
}

/// Splits Rust's `{:e}` output (`1.2345e-7`) into significant digits and the decimal exponent.
fn sci_parts(s: &str) -> (String, i32) {
    let (mantissa, exp) = s.split_once('e').expect("exponent format");
    (mantissa.replace('.', ""), exp.parse().expect("exponent"))
}

/// Base64 with the standard alphabet and padding (Java's `Base64.getEncoder()`, Jackson's
/// default variant).
pub(crate) fn write_base64(out: &mut Vec<u8>, data: &[u8]) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for chunk in data.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        out.push(ALPHABET[(n >> 18) as usize & 63]);
        out.push(ALPHABET[(n >> 12) as usize & 63]);
        out.push(if chunk.len() > 1 { ALPHABET[(n >> 6) as usize & 63] } else { b'=' });
        out.push(if chunk.len() > 2 { ALPHABET[n as usize & 63] } else { b'=' });
    }
}

/// Validates that a Connect STRING's bytes are UTF-8.
pub(crate) fn utf8(b: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(b).map_err(|e| format!("text is not valid UTF-8 ({e})"))
}

/// `StringConverter.fromConnectData`: `value.toString()` as UTF-8; text passes through without a
/// copy. A `bytea` passes through as its raw bytes (what Kafka Connect users get from
/// `ByteArrayConverter`; Connect's StringConverter would write Java's `[B@…` object text).
/// Structures are Java's `toString`: `Struct{a=1,b=x}` (null fields left out), lists
/// `[1, 2]` — which is what Debezium emits for a message whose payload is a JSON object.
pub(crate) fn string_bytes(cv: &Cv) -> Option<Bytes> {
    match cv {
        Cv::Null => None,
        Cv::Text(b) | Cv::Int(b) | Cv::Bin(b) => Some(b.clone()),
        Cv::Bool(true) => Some(Bytes::from_static(b"true")),
        Cv::Bool(false) => Some(Bytes::from_static(b"false")),
        Cv::Ts(v) => Some(Bytes::from(v.to_string())),
        Cv::Double(_) | Cv::Array(_) | Cv::Struct(_) => {
            let mut out = Vec::with_capacity(64);
            write_java_to_string(&mut out, cv);
            Some(out.into())
        }
    }
}

/// Java's `toString` of a Connect value (`Struct.toString`, `ArrayList.toString`,
/// `Double.toString`); a null is `null`, as a list prints it.
fn write_java_to_string(out: &mut Vec<u8>, cv: &Cv) {
    match cv {
        Cv::Null => out.extend_from_slice(b"null"),
        Cv::Text(b) | Cv::Int(b) | Cv::Bin(b) => out.extend_from_slice(b),
        Cv::Bool(v) => out.extend_from_slice(if *v { b"true" } else { b"false" }),
        Cv::Ts(v) => out.extend_from_slice(v.to_string().as_bytes()),
        Cv::Double(v) => out.extend_from_slice(java_double_to_string(*v).as_bytes()),
        Cv::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b", ");
                }
                write_java_to_string(out, item);
            }
            out.push(b']');
        }
        Cv::Struct(fields) => {
            out.extend_from_slice(b"Struct{");
            let mut first = true;
            for (name, value) in fields.iter().filter(|(_, v)| *v != Cv::Null) {
                if !first {
                    out.push(b',');
                }
                first = false;
                out.extend_from_slice(name.as_bytes());
                out.push(b'=');
                write_java_to_string(out, value);
            }
            out.push(b'}');
        }
    }
}

/// `Double.toString`, infinities and NaN included (unquoted, unlike JSON).
fn java_double_to_string(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        java_double_string(v)
    }
}

/// `SimpleHeaderConverter.fromConnectHeader`: `Values.convertToString` as UTF-8 (`byte[]` as
/// Base64); `None` for a null value.
pub(crate) fn simple_header_bytes(cv: &Cv) -> Option<Bytes> {
    match cv {
        Cv::Null => None,
        Cv::Bin(b) => {
            let mut out = Vec::with_capacity(b.len() * 4 / 3 + 4);
            write_base64(&mut out, b);
            Some(out.into())
        }
        Cv::Double(_) | Cv::Array(_) | Cv::Struct(_) => {
            let mut out = Vec::with_capacity(64);
            write_values_string(&mut out, cv, false);
            Some(out.into())
        }
        other => string_bytes(other),
    }
}

/// Kafka Connect's `Values.append`: text as is at the top level, quoted (with `\` and `"`
/// escaped) inside a list or struct; lists `[a,b]`; structs `{"name":value,…}` with every field,
/// null ones as `null`.
fn write_values_string(out: &mut Vec<u8>, cv: &Cv, embedded: bool) {
    let quoted = |out: &mut Vec<u8>, text: &[u8]| {
        out.push(b'"');
        for &c in text {
            if c == b'\\' || c == b'"' {
                out.push(b'\\');
            }
            out.push(c);
        }
        out.push(b'"');
    };
    match cv {
        Cv::Text(b) if embedded => quoted(out, b),
        Cv::Bin(b) => {
            let mut text = Vec::with_capacity(b.len() * 4 / 3 + 4);
            write_base64(&mut text, b);
            if embedded {
                quoted(out, &text);
            } else {
                out.extend_from_slice(&text);
            }
        }
        Cv::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_values_string(out, item, true);
            }
            out.push(b']');
        }
        Cv::Struct(fields) => {
            out.push(b'{');
            for (i, (name, value)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                quoted(out, name.as_bytes());
                out.push(b':');
                write_values_string(out, value, true);
            }
            out.push(b'}');
        }
        other => write_java_to_string(out, other),
    }
}

/// `JsonConverter.convertToJson` of one value.
pub(crate) fn write_cv_json(out: &mut Vec<u8>, cv: &Cv) -> Result<(), String> {
    match cv {
        Cv::Null => out.extend_from_slice(b"null"),
        Cv::Text(b) => write_str(out, utf8(b)?),
        Cv::Int(b) => out.extend_from_slice(b),
        Cv::Bool(v) => out.extend_from_slice(if *v { b"true" } else { b"false" }),
        Cv::Bin(b) => {
            out.push(b'"');
            write_base64(out, b);
            out.push(b'"');
        }
        Cv::Ts(v) => out.extend_from_slice(v.to_string().as_bytes()),
        Cv::Double(v) => write_java_double(out, *v),
        Cv::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_cv_json(out, item)?;
            }
            out.push(b']');
        }
        Cv::Struct(fields) => {
            out.push(b'{');
            for (i, (name, value)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, name);
                out.push(b':');
                write_cv_json(out, value)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

/// Wraps an already-rendered payload in JsonConverter's schema envelope.
pub(crate) fn write_envelope_start(out: &mut Vec<u8>, schema_json: Option<&str>) {
    out.extend_from_slice(b"{\"schema\":");
    out.extend_from_slice(schema_json.unwrap_or("null").as_bytes());
    out.extend_from_slice(b",\"payload\":");
}

/// A JSON-converted column value, with or without the schema envelope.
pub(crate) fn json_bytes(cv: &Cv, schema_json: Option<&str>) -> Result<Bytes, String> {
    let mut out = Vec::with_capacity(32);
    if let Some(s) = schema_json {
        write_envelope_start(&mut out, Some(s));
        write_cv_json(&mut out, cv)?;
        out.push(b'}');
    } else {
        write_cv_json(&mut out, cv)?;
    }
    Ok(out.into())
}
