//! PostgreSQL column types as Debezium's PostgreSQL connector presents them to Kafka Connect,
//! and the conversion of pgoutput's text values into those Connect values.
//!
//! Values arrive in PostgreSQL's text output with the walsender session pinned to
//! `DateStyle=ISO`, `TimeZone=UTC`, `IntervalStyle=postgres`, `extra_float_digits=3`.

use std::sync::Arc;

use bytes::Bytes;

use super::convert::{Prim, Schema};
use crate::pgoutput::Value;

/// How Debezium maps a column's PostgreSQL type (by OID) to a Connect schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `uuid`: STRING `io.debezium.data.Uuid`.
    Uuid,
    /// `text`, `varchar`, `bpchar`, `name`: STRING. Every type not listed here is also sent as
    /// its PostgreSQL text in a STRING (Debezium maps e.g. `numeric` or `date` to other logical
    /// types; walrelay does not reproduce those).
    Text,
    /// `json`, `jsonb`: STRING `io.debezium.data.Json`.
    Json,
    /// `bytea`: BYTES.
    Bytea,
    Int16,
    Int32,
    Int64,
    Bool,
    /// `timestamp(0..=3)`: INT64 `io.debezium.time.Timestamp` (milliseconds since the epoch).
    TimestampMillis,
    /// `timestamp`, `timestamp(4..=6)`: INT64 `io.debezium.time.MicroTimestamp`.
    TimestampMicros,
    /// `timestamptz`: STRING `io.debezium.time.ZonedTimestamp` (ISO-8601 in UTC).
    TimestampTz,
}

impl Kind {
    /// The kind for a pgoutput Relation column (`time.precision.mode=adaptive`, Debezium's
    /// default, decides between Timestamp and MicroTimestamp by the declared precision).
    pub(crate) fn from_pg(type_oid: u32, type_modifier: i32) -> Kind {
        match type_oid {
            2950 => Kind::Uuid,
            114 | 3802 => Kind::Json,
            17 => Kind::Bytea,
            21 => Kind::Int16,
            23 => Kind::Int32,
            20 => Kind::Int64,
            16 => Kind::Bool,
            1114 if (0..=3).contains(&type_modifier) => Kind::TimestampMillis,
            1114 => Kind::TimestampMicros,
            1184 => Kind::TimestampTz,
            _ => Kind::Text,
        }
    }

    /// A short description for error messages.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Kind::Uuid => "uuid",
            Kind::Text => "text-like",
            Kind::Json => "json/jsonb",
            Kind::Bytea => "bytea",
            Kind::Int16 => "int2",
            Kind::Int32 => "int4",
            Kind::Int64 => "int8",
            Kind::Bool => "boolean",
            Kind::TimestampMillis | Kind::TimestampMicros => "timestamp",
            Kind::TimestampTz => "timestamptz",
        }
    }

    /// The column's Connect schema, as Debezium builds it.
    pub(crate) fn schema(self, optional: bool) -> Schema {
        let (ty, name) = match self {
            Kind::Uuid => (Prim::String, Some("io.debezium.data.Uuid")),
            Kind::Text => (Prim::String, None),
            Kind::Json => (Prim::String, Some("io.debezium.data.Json")),
            Kind::Bytea => (Prim::Bytes, None),
            Kind::Int16 => (Prim::Int16, None),
            Kind::Int32 => (Prim::Int32, None),
            Kind::Int64 => (Prim::Int64, None),
            Kind::Bool => (Prim::Boolean, None),
            Kind::TimestampMillis => (Prim::Int64, Some("io.debezium.time.Timestamp")),
            Kind::TimestampMicros => (Prim::Int64, Some("io.debezium.time.MicroTimestamp")),
            Kind::TimestampTz => (Prim::String, Some("io.debezium.time.ZonedTimestamp")),
        };
        Schema::Prim { ty, optional, name, version: name.map(|_| 1) }
    }
}

/// One field's Connect value: a row's column, or a member of a message's JSON content. Text is
/// kept as the input `Bytes` (zero-copy).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cv {
    Null,
    /// A Connect STRING: UTF-8 text (not yet validated).
    Text(Bytes),
    /// INT16/INT32/INT64: PostgreSQL's canonical decimal digits, which equal Java's `toString`.
    Int(Bytes),
    Bool(bool),
    /// BYTES: the decoded bytes.
    Bin(Bytes),
    /// INT64 timestamps (millis or micros since the epoch, by kind).
    Ts(i64),
    /// FLOAT64: a JSON number with a fraction or an exponent (message content only).
    Double(f64),
    /// ARRAY (message content only); a null element is [`Cv::Null`].
    Array(Vec<Cv>),
    /// STRUCT (message content only): every field of its schema, in schema order, with its
    /// value ([`Cv::Null`] for a JSON null kept by `fields.null.include`, or a member an element
    /// of an array of objects lacks).
    Struct(Vec<(Arc<str>, Cv)>),
}

impl Cv {
    /// `true` for `null` or a string that Java's `trim()` leaves empty (every char ≤ U+0020):
    /// Debezium's `route.tombstone.on.empty.payload` test.
    pub(crate) fn is_blank(&self) -> bool {
        match self {
            Cv::Null => true,
            Cv::Text(b) => b.iter().all(|&c| c <= b' '),
            _ => false,
        }
    }
}

/// Reads a pgoutput value as a Connect value of the given kind.
pub(crate) fn read(kind: Kind, v: &Value) -> Result<Cv, String> {
    let text = match v {
        Value::Null => return Ok(Cv::Null),
        Value::Text(t) => t,
        Value::Unchanged => {
            return Err("the value was not sent (unchanged TOASTed value); INSERTs always carry it, so this row is not an INSERT".into())
        }
        Value::Binary(_) => {
            return Err("the value is in binary format; start replication without `binary 'true'`".into())
        }
    };
    Ok(match kind {
        Kind::Uuid | Kind::Text | Kind::Json => Cv::Text(text.clone()),
        Kind::Int16 | Kind::Int32 | Kind::Int64 => Cv::Int(text.clone()),
        Kind::Bool => match text.as_ref() {
            b"t" | b"true" => Cv::Bool(true),
            b"f" | b"false" => Cv::Bool(false),
            other => return Err(format!("{:?} is not a boolean", String::from_utf8_lossy(other))),
        },
        Kind::Bytea => Cv::Bin(decode_bytea(text)?.into()),
        Kind::TimestampMicros => Cv::Ts(parse_timestamp(text, false)?),
        Kind::TimestampMillis => Cv::Ts(parse_timestamp(text, false)?.div_euclid(1000)),
        Kind::TimestampTz => Cv::Text(format_zoned(parse_timestamp(text, true)?).into()),
    })
}

/// `bytea` hex output (`\x0a1b…`) to raw bytes.
pub(crate) fn decode_bytea(text: &[u8]) -> Result<Vec<u8>, String> {
    let hex = text.strip_prefix(b"\\x").ok_or_else(|| {
        "bytea is not in hex format; set bytea_output = 'hex' (PostgreSQL's default)".to_owned()
    })?;
    if hex.len() % 2 != 0 {
        return Err("bytea hex text has an odd number of digits".into());
    }
    let nibble = |c: u8| -> Result<u8, String> {
        match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(format!("bytea hex text contains {:?}", c as char)),
        }
    };
    hex.chunks_exact(2).map(|p| Ok(nibble(p[0])? << 4 | nibble(p[1])?)).collect()
}

/// Parses `YYYY-MM-DD HH:MM:SS[.ffffff][±HH[:MM[:SS]]][ BC]` (DateStyle ISO) into microseconds
/// since 1970-01-01 00:00:00 UTC. The offset is required for `timestamptz` and converted to UTC.
pub(crate) fn parse_timestamp(text: &[u8], with_zone: bool) -> Result<i64, String> {
    let s = std::str::from_utf8(text).map_err(|_| "timestamp text is not UTF-8".to_owned())?;
    let bad = || format!("{s:?} is not a timestamp in ISO DateStyle");
    if s == "infinity" || s == "-infinity" {
        return Err(format!(
            "{s:?}: infinite timestamps have no Kafka representation; store a finite value"
        ));
    }
    let (s_main, bc) = match s.strip_suffix(" BC") {
        Some(rest) => (rest, true),
        None => (s, false),
    };
    let (date, rest) = s_main.split_once(' ').ok_or_else(bad)?;
    let mut d = date.rsplitn(3, '-');
    let day: i64 = num(d.next(), 2).ok_or_else(bad)?;
    let month: i64 = num(d.next(), 2).ok_or_else(bad)?;
    let year_text = d.next().ok_or_else(bad)?;
    let mut year: i64 = year_text.parse().map_err(|_| bad())?;
    if bc {
        year = 1 - year;
    }
    // Time, then an optional offset that starts at the first '+' or '-'.
    let (time, offset) = match rest.find(['+', '-']) {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    if with_zone != offset.is_some() {
        return Err(bad());
    }
    let (hms, frac) = match time.split_once('.') {
        Some((a, b)) => (a, Some(b)),
        None => (time, None),
    };
    let mut t = hms.split(':');
    let h: i64 = num(t.next(), 2).ok_or_else(bad)?;
    let mi: i64 = num(t.next(), 2).ok_or_else(bad)?;
    let sec: i64 = num(t.next(), 2).ok_or_else(bad)?;
    let mut micros: i64 = 0;
    if let Some(f) = frac {
        if f.is_empty() || f.len() > 6 || !f.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        micros = f.parse::<i64>().map_err(|_| bad())? * 10_i64.pow(6 - f.len() as u32);
    }
    let mut off_secs = 0;
    if let Some(o) = offset {
        let sign = if o.starts_with('-') { -1 } else { 1 };
        let mut parts = o[1..].split(':');
        let oh: i64 = num(parts.next(), 2).ok_or_else(bad)?;
        let om: i64 = parts.next().map_or(Some(0), |p| num(Some(p), 2)).ok_or_else(bad)?;
        let os: i64 = parts.next().map_or(Some(0), |p| num(Some(p), 2)).ok_or_else(bad)?;
        off_secs = sign * (oh * 3600 + om * 60 + os);
    }
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || h > 24 || mi > 59 || sec > 60 {
        return Err(bad());
    }
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - off_secs;
    secs.checked_mul(1_000_000).and_then(|v| v.checked_add(micros)).ok_or_else(bad)
}

fn num(part: Option<&str>, width: usize) -> Option<i64> {
    let p = part?;
    (p.len() == width && p.bytes().all(|b| b.is_ascii_digit())).then(|| p.parse().ok())?
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Java's `DateTimeFormatter.ISO_OFFSET_DATE_TIME` of a UTC instant, as Debezium's
/// `ZonedTimestamp` writes it: `2024-01-01T00:00:01Z`, fraction without trailing zeros.
pub(crate) fn format_zoned(micros: i64) -> String {
    let secs = micros.div_euclid(1_000_000);
    let frac = micros.rem_euclid(1_000_000);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    let mut out = String::with_capacity(32);
    if y > 9999 {
        out.push_str(&format!("+{y}"));
    } else if y < 0 {
        out.push_str(&format!("-{:04}", -y));
    } else {
        out.push_str(&format!("{y:04}"));
    }
    out.push_str(&format!(
        "-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    ));
    if frac != 0 {
        let f = format!(".{frac:06}");
        out.push_str(f.trim_end_matches('0'));
    }
    out.push('Z');
    out
}
