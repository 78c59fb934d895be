//! Confluent's `AvroConverter`, as Debezium's value converter runs it with its defaults
//! (`AvroData` with `connect.meta.data` on, `enhanced.avro.schema.support` off, names not
//! scrubbed): the Avro schema of a Connect schema, written as Avro's `Schema.toString()` writes
//! it (the text that is registered), and the Avro binary encoding of a Connect value under it.
//! The registry's framing is added later, once the schema's id is known (`crate::registry`).
//!
//! The mapping (`AvroData.fromConnectSchema`):
//! * BOOLEAN, INT32, INT64, FLOAT64, STRING, BYTES: `boolean`, `int`, `long`, `double`,
//!   `string`, `bytes`; INT16 is an `int` with `"connect.type":"int16"`;
//! * a named or versioned schema becomes `{"type":…,"connect.version":v,"connect.name":n}`;
//!   a struct becomes a record named after it (namespace up to its last dot), or
//!   `io.confluent.connect.avro.ConnectDefault` (then `ConnectDefault2`, …) without a name;
//! * an optional schema is the union `["null", …]`; an optional field defaults to `null`;
//! * a name Avro does not allow (`order-id`) is refused, as Avro refuses it under Debezium.

use std::collections::HashSet;
use std::fmt::Write as _;

use super::column::Cv;
use super::convert::{utf8, write_str, Prim, Schema};
use super::expand::Data;
use super::json::{Node, Num};

/// The bytes before an Avro body that the registry's framing fills in: Confluent's wire format,
/// a magic byte 0 and the schema's id, 4 bytes big-endian (`crate::registry`).
pub(crate) const FRAME_RESERVED: usize = 5;

/// The namespace and name `AvroData` gives a struct without a name.
const DEFAULT_NAMESPACE: &str = "io.confluent.connect.avro";
const DEFAULT_NAME: &str = "ConnectDefault";

/// The Avro schema of `schema`, as the text Avro's `Schema.toString()` gives: compact JSON,
/// keys in Avro's order.
pub(crate) fn schema_text(schema: &Schema) -> Result<String, String> {
    let mut w = SchemaWriter { out: Vec::with_capacity(128), defined: HashSet::new(), unnamed: 0 };
    w.schema(schema, None)?;
    Ok(String::from_utf8(w.out).expect("schema text is UTF-8"))
}

struct SchemaWriter {
    out: Vec<u8>,
    /// Full names of the records written so far: a second one is written as a reference.
    defined: HashSet<String>,
    /// Structs without a name so far (`ConnectDefault`, `ConnectDefault2`, …).
    unnamed: u32,
}

impl SchemaWriter {
    /// `schema` inside the namespace `space` (the enclosing record's).
    fn schema(&mut self, schema: &Schema, space: Option<&str>) -> Result<(), String> {
        if schema.optional() {
            self.out.extend_from_slice(b"[\"null\",");
            self.required(schema, space)?;
            self.out.push(b']');
            return Ok(());
        }
        self.required(schema, space)
    }

    /// `schema` as if it were required (the union around it is the caller's).
    fn required(&mut self, schema: &Schema, space: Option<&str>) -> Result<(), String> {
        match schema {
            Schema::Prim { ty, name, version, .. } => {
                let avro = match ty {
                    Prim::Boolean => "boolean",
                    Prim::Int16 | Prim::Int32 => "int",
                    Prim::Int64 => "long",
                    Prim::Float64 => "double",
                    Prim::String => "string",
                    Prim::Bytes => "bytes",
                };
                let int16 = *ty == Prim::Int16;
                if name.is_none() && version.is_none() && !int16 {
                    write_str(&mut self.out, avro);
                    return Ok(());
                }
                self.out.extend_from_slice(b"{\"type\":");
                write_str(&mut self.out, avro);
                self.props(*version, name.as_deref());
                if int16 {
                    self.out.extend_from_slice(b",\"connect.type\":\"int16\"");
                }
                self.out.push(b'}');
            }
            Schema::Array { items, .. } => {
                self.out.extend_from_slice(b"{\"type\":\"array\",\"items\":");
                self.schema(items, space)?;
                self.out.push(b'}');
            }
            Schema::Struct { name, version, fields, .. } => {
                let (namespace, short) = match name {
                    Some(full) => split_name(full)?,
                    None => {
                        self.unnamed += 1;
                        let short = match self.unnamed {
                            1 => DEFAULT_NAME.to_string(),
                            n => format!("{DEFAULT_NAME}{n}"),
                        };
                        (Some(DEFAULT_NAMESPACE), short)
                    }
                };
                let full = match namespace {
                    Some(ns) => format!("{ns}.{short}"),
                    None => short.clone(),
                };
                if !self.defined.insert(full.clone()) {
                    // Avro writes a record it has written once by its name.
                    write_str(&mut self.out, if namespace == space { &short } else { &full });
                    return Ok(());
                }
                self.out.extend_from_slice(b"{\"type\":\"record\",\"name\":");
                write_str(&mut self.out, &short);
                match (namespace, space) {
                    (Some(ns), _) if Some(ns) != space => {
                        self.out.extend_from_slice(b",\"namespace\":");
                        write_str(&mut self.out, ns);
                    }
                    (None, Some(_)) => self.out.extend_from_slice(b",\"namespace\":\"\""),
                    _ => {}
                }
                self.out.extend_from_slice(b",\"fields\":[");
                for (i, (fname, fschema)) in fields.iter().enumerate() {
                    check_name(fname)
                        .map_err(|why| format!("field `{fname}` of record {full}: {why}"))?;
                    if i > 0 {
                        self.out.push(b',');
                    }
                    self.out.extend_from_slice(b"{\"name\":");
                    write_str(&mut self.out, fname);
                    self.out.extend_from_slice(b",\"type\":");
                    self.schema(fschema, namespace)?;
                    if fschema.optional() {
                        self.out.extend_from_slice(b",\"default\":null");
                    }
                    self.out.push(b'}');
                }
                self.out.push(b']');
                self.props(*version, name.as_deref());
                self.out.push(b'}');
            }
        }
        Ok(())
    }

    /// `connect.version` then `connect.name`, in the order `AvroData` adds them.
    fn props(&mut self, version: Option<i32>, name: Option<&str>) {
        if let Some(v) = version {
            let _ = write!(Text(&mut self.out), ",\"connect.version\":{v}");
        }
        if let Some(n) = name {
            self.out.extend_from_slice(b",\"connect.name\":");
            write_str(&mut self.out, n);
        }
    }
}

/// `fmt::Write` into a byte buffer.
struct Text<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Text<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// A Connect full name split as Avro splits it: the namespace up to the last dot, and the name.
fn split_name(full: &str) -> Result<(Option<&str>, String), String> {
    let (namespace, name) = match full.rsplit_once('.') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, full),
    };
    check_name(name).map_err(|why| format!("record name `{full}`: {why}"))?;
    for part in namespace.iter().flat_map(|ns| ns.split('.')) {
        check_name(part).map_err(|why| format!("namespace of record `{full}`: {why}"))?;
    }
    Ok((namespace, name.to_string()))
}

/// Avro's rule for names: `[A-Za-z_][A-Za-z0-9_]*`.
fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        return Ok(());
    }
    Err(format!(
        "`{name}` is not an Avro name (letters, digits and `_`, not starting with a digit), so \
         Avro refuses it as it would under Debezium's AvroConverter; rename the JSON member or \
         column, or use value.converter = \"json\""
    ))
}

/// The schema `AvroData` gives a value without a Connect schema (`ANYTHING_SCHEMA`): one
/// optional field per kind, as `Schema.toString()` writes it.
pub(crate) const ANYTHING_SCHEMA: &str = concat!(
    r#"{"type":"record","name":"Anything","namespace":"io.confluent.connect.avro","fields":["#,
    r#"{"name":"boolean","type":["null","boolean"],"default":null},"#,
    r#"{"name":"bytes","type":["null","bytes"],"default":null},"#,
    r#"{"name":"double","type":["null","double"],"default":null},"#,
    r#"{"name":"float","type":["null","float"],"default":null},"#,
    r#"{"name":"int","type":["null","int"],"default":null},"#,
    r#"{"name":"long","type":["null","long"],"default":null},"#,
    r#"{"name":"string","type":["null","string"],"default":null},"#,
    r#"{"name":"array","type":["null",{"type":"array","items":"Anything"}],"default":null},"#,
    r#"{"name":"map","type":["null",{"type":"array","items":{"type":"record","name":"MapEntry","#,
    r#""fields":[{"name":"key","type":"Anything"},{"name":"value","type":"Anything"}]}}],"default":null}]}"#
);

/// Appends a string without a Connect schema as an [`ANYTHING_SCHEMA`] record: its `string`
/// field set, the eight others null.
pub(crate) fn write_anything_string(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(&[0; 6]); // boolean, bytes, double, float, int, long: null
    out.push(2); // string: the union's second branch
    write_bytes(out, text.as_bytes());
    out.extend_from_slice(&[0; 2]); // array, map: null
}

/// Appends `v` as Avro's `long` (and `int`): zig-zag, then a base-128 varint.
pub(crate) fn write_long(out: &mut Vec<u8>, v: i64) {
    let mut n = ((v << 1) ^ (v >> 63)) as u64;
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn write_bytes(out: &mut Vec<u8>, b: &[u8]) {
    write_long(out, b.len() as i64);
    out.extend_from_slice(b);
}

/// Appends the union branch of a value under `schema`: 0 for null, 1 for a value, when optional.
fn branch(out: &mut Vec<u8>, schema: &Schema, null: bool) -> Result<bool, String> {
    match (schema.optional(), null) {
        (true, true) => {
            out.push(0);
            Ok(false)
        }
        (true, false) => {
            out.push(2); // zig-zag 1
            Ok(true)
        }
        (false, true) => Err("null in a field that is not optional".into()),
        (false, false) => Ok(true),
    }
}

/// Appends the Avro binary encoding of the column value `cv` under its Connect `schema`.
pub(crate) fn write_cv(out: &mut Vec<u8>, cv: &Cv, schema: &Schema) -> Result<(), String> {
    if !branch(out, schema, matches!(cv, Cv::Null))? {
        return Ok(());
    }
    match (cv, schema) {
        (Cv::Text(b), Schema::Prim { ty: Prim::String, .. }) => {
            write_bytes(out, utf8(b)?.as_bytes())
        }
        (Cv::Bin(b), Schema::Prim { ty: Prim::Bytes, .. }) => write_bytes(out, b),
        (Cv::Int(b), Schema::Prim { ty: Prim::Int16 | Prim::Int32 | Prim::Int64, .. }) => {
            let v = std::str::from_utf8(b)
                .ok()
                .and_then(|t| t.parse::<i64>().ok())
                .ok_or_else(|| format!("{:?} is not an integer", String::from_utf8_lossy(b)))?;
            write_long(out, v);
        }
        (Cv::Ts(v), Schema::Prim { ty: Prim::Int64, .. }) => write_long(out, *v),
        (Cv::Bool(v), Schema::Prim { ty: Prim::Boolean, .. }) => out.push(u8::from(*v)),
        (Cv::Double(v), Schema::Prim { ty: Prim::Float64, .. }) => {
            out.extend_from_slice(&v.to_le_bytes())
        }
        (Cv::Array(items), Schema::Array { items: item_schema, .. }) => {
            if !items.is_empty() {
                write_long(out, items.len() as i64);
                for item in items {
                    write_cv(out, item, item_schema)?;
                }
            }
            out.push(0);
        }
        (Cv::Struct(values), Schema::Struct { fields, .. }) => {
            for (name, fschema) in fields {
                let value = values.iter().find(|(n, _)| **n == **name).map(|(_, v)| v);
                write_cv(out, value.unwrap_or(&Cv::Null), fschema)
                    .map_err(|why| format!("field `{name}`: {why}"))?;
            }
        }
        (cv, schema) => {
            return Err(format!(
                "a {} value does not fit the schema {}",
                cv_kind(cv),
                schema.to_json()
            ))
        }
    }
    Ok(())
}

fn cv_kind(cv: &Cv) -> &'static str {
    match cv {
        Cv::Null => "null",
        Cv::Text(_) => "text",
        Cv::Int(_) => "integer",
        Cv::Bool(_) => "boolean",
        Cv::Bin(_) => "bytes",
        Cv::Ts(_) => "timestamp",
        Cv::Double(_) => "double",
        Cv::Array(_) => "array",
        Cv::Struct(_) => "struct",
    }
}

/// Appends the Avro binary encoding of an expanded payload under the schema it was inferred with.
pub(crate) fn write_data(out: &mut Vec<u8>, data: &Data, schema: &Schema) -> Result<(), String> {
    let null = matches!(data, Data::Null | Data::Node(Node::Null));
    if !branch(out, schema, null)? {
        return Ok(());
    }
    match (data, schema) {
        (Data::Node(node), Schema::Prim { ty, .. }) => write_leaf(out, node, *ty)?,
        (Data::Array(items), Schema::Array { items: item_schema, .. }) => {
            if !items.is_empty() {
                write_long(out, items.len() as i64);
                for item in items {
                    write_data(out, item, item_schema)?;
                }
            }
            out.push(0);
        }
        (Data::Struct(values), Schema::Struct { fields, .. }) => {
            for (value, (name, fschema)) in values.iter().zip(fields) {
                write_data(out, value, fschema).map_err(|why| format!("`{name}`: {why}"))?;
            }
        }
        (Data::Node(node), schema) => {
            return Err(format!(
                "a JSON {} does not fit the schema inferred for it, {}",
                node.type_name().to_ascii_lowercase(),
                schema.to_json()
            ))
        }
        _ => return Err(format!("a value does not fit the schema {}", schema.to_json())),
    }
    Ok(())
}

fn write_leaf(out: &mut Vec<u8>, node: &Node, ty: Prim) -> Result<(), String> {
    match (node, ty) {
        (Node::Str(s), Prim::String) => write_bytes(out, s.as_bytes()),
        (Node::Bool(v), Prim::Boolean) => out.push(u8::from(*v)),
        (Node::Num(Num::Int(v)), Prim::Int16 | Prim::Int32 | Prim::Int64) => {
            write_long(out, i64::from(*v))
        }
        (Node::Num(Num::Long(v)), Prim::Int64) => write_long(out, *v),
        (Node::Num(n), Prim::Float64) => out.extend_from_slice(&n.as_f64()?.to_le_bytes()),
        (node, ty) => {
            return Err(format!(
                "a JSON {} does not fit its inferred type {ty:?}",
                node.type_name().to_ascii_lowercase()
            ))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn prim(ty: Prim, optional: bool) -> Schema {
        Schema::Prim { ty, optional, name: None, version: None }
    }

    #[test]
    fn a_string_without_a_schema_is_the_anything_records_string_branch() {
        // Row 12 of the registry golden avro_expand_json_payload (a top-level `[]`).
        let mut out = Vec::new();
        write_anything_string(&mut out, "[]");
        assert_eq!(out, [0, 0, 0, 0, 0, 0, 2, 4, b'[', b']', 0, 0]);
        assert!(ANYTHING_SCHEMA.starts_with(r#"{"type":"record","name":"Anything","#));
    }

    #[test]
    fn primitives_named_and_optional_schemas_are_written_as_avro_writes_them() {
        assert_eq!(schema_text(&prim(Prim::String, false)).unwrap(), "\"string\"");
        assert_eq!(schema_text(&prim(Prim::String, true)).unwrap(), "[\"null\",\"string\"]");
        let json = Schema::Prim {
            ty: Prim::String,
            optional: true,
            name: Some("io.debezium.data.Json"),
            version: Some(1),
        };
        assert_eq!(
            schema_text(&json).unwrap(),
            r#"["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}]"#
        );
        assert_eq!(
            schema_text(&prim(Prim::Int16, false)).unwrap(),
            r#"{"type":"int","connect.type":"int16"}"#
        );
    }

    #[test]
    fn structs_become_records_with_nullable_defaults_and_nested_namespaces() {
        let address = Schema::Struct {
            name: Some("payload.address".into()),
            optional: true,
            version: None,
            fields: vec![("city".into(), prim(Prim::String, true))],
        };
        let payload = Schema::Struct {
            name: Some("payload".into()),
            optional: true,
            version: None,
            fields: vec![
                ("id".into(), prim(Prim::Int32, true)),
                ("address".into(), address),
                (
                    "tags".into(),
                    Schema::Array { items: Box::new(prim(Prim::String, true)), optional: true },
                ),
            ],
        };
        assert_eq!(
            schema_text(&payload).unwrap(),
            concat!(
                r#"["null",{"type":"record","name":"payload","fields":["#,
                r#"{"name":"id","type":["null","int"],"default":null},"#,
                r#"{"name":"address","type":["null",{"type":"record","name":"address","namespace":"payload","fields":["#,
                r#"{"name":"city","type":["null","string"],"default":null}],"connect.name":"payload.address"}],"default":null},"#,
                r#"{"name":"tags","type":["null",{"type":"array","items":["null","string"]}],"default":null}"#,
                r#"],"connect.name":"payload"}]"#
            )
        );
        let unnamed =
            Schema::Struct { name: None, optional: false, version: Some(2), fields: vec![] };
        assert_eq!(
            schema_text(&unnamed).unwrap(),
            r#"{"type":"record","name":"ConnectDefault","namespace":"io.confluent.connect.avro","fields":[],"connect.version":2}"#
        );
    }

    #[test]
    fn a_name_avro_refuses_is_refused_with_the_field() {
        let s = Schema::Struct {
            name: Some("payload".into()),
            optional: false,
            version: None,
            fields: vec![("order-id".into(), prim(Prim::String, true))],
        };
        let err = schema_text(&s).unwrap_err();
        assert!(err.contains("`order-id`") && err.contains("not an Avro name"), "{err}");
    }

    #[test]
    fn values_are_avro_binary_with_union_branches() {
        let mut out = Vec::new();
        write_long(&mut out, 0);
        write_long(&mut out, -1);
        write_long(&mut out, 1);
        write_long(&mut out, 64);
        write_long(&mut out, i64::MIN);
        assert_eq!(
            out,
            [0, 1, 2, 0x80, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
        let mut out = Vec::new();
        write_cv(&mut out, &Cv::Text(Bytes::from_static(b"hi")), &prim(Prim::String, true))
            .unwrap();
        assert_eq!(out, [2, 4, b'h', b'i']);
        let mut out = Vec::new();
        write_cv(&mut out, &Cv::Null, &prim(Prim::String, true)).unwrap();
        assert_eq!(out, [0]);
        let err = write_cv(&mut Vec::new(), &Cv::Null, &prim(Prim::String, false)).unwrap_err();
        assert!(err.contains("not optional"), "{err}");
        let mut out = Vec::new();
        write_cv(&mut out, &Cv::Int(Bytes::from_static(b"-3")), &prim(Prim::Int64, false)).unwrap();
        assert_eq!(out, [5]);
    }
}
