//! Confluent's `JsonSchemaConverter` (7.0.16): the JSON Schema text it registers for a Connect
//! schema. The value it writes is the Connect value as plain JSON, the bytes `JsonConverter`
//! writes with `schemas.enable = false` (`record.rs`).
//!
//! `JsonSchemaData.fromConnectSchema` builds an everit schema; Confluent registers that schema's
//! `toString()`, read into a Jackson tree and written back compact. So the text follows everit's
//! printer, keyword by keyword, and two Java `HashMap`s decide the order of what is in them:
//! * a struct's `properties` (everit's `ObjectSchema.Builder` keeps them in a `HashMap`, filled in
//!   field order);
//! * the `connect.*` keywords (Confluent's `unprocessedProperties`, copied into a new `HashMap` by
//!   everit's `Schema` constructor).
//!
//! A schema by kind:
//! * boolean `{title?, connect.*, "type":"boolean"}` (everit prints `type` last for it);
//! * int16/int32/int64 `{"type":"integer", title?, connect.*}` with `connect.type` the Connect
//!   type, float64 `"number"` with `"float64"`, string `"string"`, bytes `"string"` with
//!   `"bytes"`;
//! * array `{"type":"array", connect.*, "items": …}`;
//! * struct `{"type":"object", title?, connect.*, "properties": {…}}`, each field with
//!   `connect.index`, its position;
//! * optional: `{connect.index?, "oneOf": [{"type":"null"}, <the schema>]}`, the index moved out.
//!
//! `connect.version` is the Connect version. Strings are written as Jackson writes into a
//! `String`: a character outside the BMP as it is, not as JsonConverter's escaped pair.
//!
//! tests/fixtures/debezium/registry/json_schema_texts.jsonl holds Confluent's own texts for 38
//! schemas: the value schemas Debezium's router made for the fixture rows, and shapes they lack
//! (scripts/debezium-registry-goldens/json-schema).

use super::convert::{write_str_chars as write_str, Prim, Schema};

/// The text Confluent's `JsonSchemaConverter` registers for `schema`.
pub(crate) fn schema_text(schema: &Schema) -> String {
    let mut out = Vec::with_capacity(256);
    write(&mut out, schema, None);
    String::from_utf8(out).expect("JSON Schema text is UTF-8")
}

/// `schema`, a struct's field at `index` (None: the root, or an array's items).
fn write(out: &mut Vec<u8>, schema: &Schema, index: Option<usize>) {
    if !schema.optional() {
        return write_plain(out, schema, index);
    }
    out.push(b'{');
    if let Some(i) = index {
        out.extend_from_slice(format!("\"connect.index\":{i},").as_bytes());
    }
    out.extend_from_slice(b"\"oneOf\":[{\"type\":\"null\"},");
    write_plain(out, schema, None);
    out.extend_from_slice(b"]}");
}

/// One `connect.*` keyword of everit's `unprocessedProperties`.
enum Keyword {
    Type(&'static str),
    Version(i32),
    Index(usize),
}

impl Keyword {
    fn name(&self) -> &'static str {
        match self {
            Keyword::Type(_) => "connect.type",
            Keyword::Version(_) => "connect.version",
            Keyword::Index(_) => "connect.index",
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        write_str(out, self.name());
        out.push(b':');
        match self {
            Keyword::Type(t) => write_str(out, t),
            Keyword::Version(v) => out.extend_from_slice(v.to_string().as_bytes()),
            Keyword::Index(i) => out.extend_from_slice(i.to_string().as_bytes()),
        }
    }
}

/// `schema` without the optional wrapper.
fn write_plain(out: &mut Vec<u8>, schema: &Schema, index: Option<usize>) {
    let (title, version) = match schema {
        Schema::Prim { name, version, .. } => (*name, *version),
        Schema::Struct { name, version, .. } => (name.as_deref(), *version),
        Schema::Array { .. } => (None, None),
    };
    let (ty, connect_type) = match schema {
        Schema::Prim { ty, .. } => match ty {
            Prim::Boolean => ("boolean", None),
            Prim::Int16 => ("integer", Some("int16")),
            Prim::Int32 => ("integer", Some("int32")),
            Prim::Int64 => ("integer", Some("int64")),
            Prim::Float64 => ("number", Some("float64")),
            Prim::String => ("string", None),
            Prim::Bytes => ("string", Some("bytes")),
        },
        Schema::Array { .. } => ("array", None),
        Schema::Struct { .. } => ("object", None),
    };
    // Put in this order by JsonSchemaData: the type in its switch, the version after, the index
    // last.
    let mut keywords: Vec<Keyword> = Vec::with_capacity(3);
    keywords.extend(connect_type.map(Keyword::Type));
    keywords.extend(version.map(Keyword::Version));
    keywords.extend(index.map(Keyword::Index));
    // Confluent's map (`new HashMap<>()`, 16 buckets for these few), then everit's copy of it,
    // filled in the first one's order.
    let names: Vec<&str> = keywords.iter().map(Keyword::name).collect();
    let confluent = java_hash_map_order(names.iter().copied(), 16);
    let copy =
        java_hash_map_order(confluent.iter().map(|&i| names[i]), copied_map_capacity(names.len()));
    let order: Vec<usize> = copy.into_iter().map(|i| confluent[i]).collect();

    let mut object = Object::open(out);
    if ty != "boolean" {
        object.key(b"type").extend_from_slice(format!("\"{ty}\"").as_bytes());
    }
    if let Some(t) = title {
        write_str(object.key(b"title"), t);
    }
    for i in order {
        keywords[i].write(object.next());
    }
    match schema {
        Schema::Array { items, .. } => write(object.key(b"items"), items, None),
        Schema::Struct { fields, .. } if !fields.is_empty() => {
            let out = object.key(b"properties");
            out.push(b'{');
            let order = java_hash_map_order(
                fields.iter().map(|(name, _)| name.as_str()),
                growing_map_capacity(fields.iter().map(|(name, _)| java_hash(name))),
            );
            for (n, i) in order.into_iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                let (name, field) = &fields[i];
                write_str(out, name);
                out.push(b':');
                write(out, field, Some(i));
            }
            out.push(b'}');
        }
        _ => {}
    }
    if ty == "boolean" {
        object.key(b"type").extend_from_slice(b"\"boolean\"");
    }
    object.close();
}

/// A JSON object written member by member: the comma between members is its business.
struct Object<'o> {
    out: &'o mut Vec<u8>,
    empty: bool,
}

impl<'o> Object<'o> {
    fn open(out: &'o mut Vec<u8>) -> Object<'o> {
        out.push(b'{');
        Object { out, empty: true }
    }

    /// Where the next member goes (after a comma if it is not the first).
    fn next(&mut self) -> &mut Vec<u8> {
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        self.out
    }

    /// Writes `"name":` and returns where its value goes.
    fn key(&mut self, name: &[u8]) -> &mut Vec<u8> {
        let out = self.next();
        out.push(b'"');
        out.extend_from_slice(name);
        out.extend_from_slice(b"\":");
        out
    }

    fn close(self) {
        self.out.push(b'}');
    }
}

/// Java's `String.hashCode`: over UTF-16 code units, wrapping.
fn java_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The bucket of a hash in a `HashMap` table of `capacity` (a power of two): `HashMap.hash`
/// spreads the high half into the low one.
fn bucket(hash: i32, capacity: usize) -> usize {
    let h = hash as u32;
    ((h ^ (h >> 16)) as usize) & (capacity - 1)
}

/// The order a `HashMap` of `capacity` iterates keys put in the given order: by bucket, and in
/// a bucket in the order they were put (a resize splits each bucket keeping that order, so the
/// final capacity is all that matters).
fn java_hash_map_order<'k>(keys: impl Iterator<Item = &'k str>, capacity: usize) -> Vec<usize> {
    let mut order: Vec<(usize, usize)> =
        keys.enumerate().map(|(i, k)| (bucket(java_hash(k), capacity), i)).collect();
    order.sort_by_key(|&(b, i)| (b, i));
    order.into_iter().map(|(_, i)| i).collect()
}

/// The capacity of `new HashMap<>(m)` for a map of `n` entries on Java 19 and later (Debezium 3
/// needs Java 21): the power of two at or above `ceil(n / 0.75)`.
fn copied_map_capacity(n: usize) -> usize {
    (4 * n).div_ceil(3).next_power_of_two()
}

/// The capacity of a `new HashMap<>()` after the keys of `hashes` were put in order: 16,
/// doubled when the size passes three quarters of it, and when a ninth key lands in one bucket
/// of a table under 64 (`treeifyBin` resizes rather than make a tree). A bucket of nine at 64 or
/// more becomes a red-black tree whose order is not this one; struct fields don't get there.
fn growing_map_capacity(hashes: impl Iterator<Item = i32>) -> usize {
    let mut capacity = 16;
    let mut seen: Vec<i32> = Vec::new();
    for h in hashes {
        let in_bucket =
            seen.iter().filter(|&&s| bucket(s, capacity) == bucket(h, capacity)).count();
        seen.push(h);
        if in_bucket >= 8 && capacity < 64 {
            capacity *= 2;
        }
        if seen.len() > capacity * 3 / 4 {
            capacity *= 2;
        }
    }
    capacity
}

#[cfg(test)]
#[path = "json_schema_tests.rs"]
mod tests;
