//! Confluent's `ProtobufConverter` (7.0.x, as Debezium Server ships it), with its defaults: the
//! `.proto` text of a Connect schema, written as Confluent's `ProtobufSchema` prints it (the text
//! that is registered), the message indexes of the value's message, and the proto3 binary
//! encoding of a Connect value under it. The registry's framing (magic byte, schema id) is added
//! later (`crate::registry`); the message indexes come first in the body.
//!
//! The mapping (`ProtobufData.fromConnectSchema`), as the registry goldens show it:
//! * a struct is a message named after it: `dbz.public.outbox.Order.Value` is `message Value`
//!   in `package dbz.public.outbox.Order`; a struct field `f` is a nested `message fMessage`,
//!   defined after the fields, and so is the element of an array of structs;
//! * BOOLEAN, INT32, INT64, FLOAT64, STRING, BYTES: `bool`, `int32`, `int64`, `double`,
//!   `string`, `bytes`; an array is `repeated`; optional fields are plain proto3 fields, and
//!   Connect names (`io.debezium.data.Json`) leave no trace;
//! * a value that is not a struct (a payload column that is not expanded) is the matching
//!   wrapper of `google/protobuf/wrappers.proto` (`StringValue`, …), whose text is registered;
//! * fields are numbered from 1 in the struct's order; proto3 leaves out a field at its default
//!   (0, false, "", no elements) and a null one, and packs repeated numbers.
//!
//! What has no Protobuf form here is refused, naming it: an array at the root or inside an
//! array, a null inside an array, INT16 (Confluent marks it with its own `confluent/meta.proto`
//! option, which walrelay does not write), a name Protobuf does not allow.

use std::fmt::Write as _;

use super::column::Cv;
use super::convert::{utf8, Prim, Schema};
use super::expand::Data;
use super::json::{Node, Num};

/// `google/protobuf/wrappers.proto` as Confluent's `ProtobufSchema` prints it: what is
/// registered for a value that is not a struct.
const WRAPPERS: &str = concat!(
    "syntax = \"proto3\";\npackage google.protobuf;\n\n",
    "option java_package = \"com.google.protobuf\";\n",
    "option java_outer_classname = \"WrappersProto\";\n",
    "option java_multiple_files = true;\n",
    "option go_package = \"google.golang.org/protobuf/types/known/wrapperspb\";\n",
    "option cc_enable_arenas = true;\n",
    "option objc_class_prefix = \"GPB\";\n",
    "option csharp_namespace = \"Google.Protobuf.WellKnownTypes\";\n\n",
    "message DoubleValue {\n  double value = 1 [json_name = \"value\"];\n}\n",
    "message FloatValue {\n  float value = 1 [json_name = \"value\"];\n}\n",
    "message Int64Value {\n  int64 value = 1 [json_name = \"value\"];\n}\n",
    "message UInt64Value {\n  uint64 value = 1 [json_name = \"value\"];\n}\n",
    "message Int32Value {\n  int32 value = 1 [json_name = \"value\"];\n}\n",
    "message UInt32Value {\n  uint32 value = 1 [json_name = \"value\"];\n}\n",
    "message BoolValue {\n  bool value = 1 [json_name = \"value\"];\n}\n",
    "message StringValue {\n  string value = 1 [json_name = \"value\"];\n}\n",
    "message BytesValue {\n  bytes value = 1 [json_name = \"value\"];\n}\n",
);

/// The registered text of a value's schema, and the message indexes written before its body
/// (Confluent's encoding: `[0]`, the first message, is the single byte 0).
pub(crate) struct ProtoSchema {
    pub text: String,
    pub indexes: &'static [u8],
}

/// The `.proto` text of `schema` and its message indexes.
pub(crate) fn schema_text(schema: &Schema) -> Result<ProtoSchema, String> {
    match schema {
        Schema::Struct { name, fields, .. } => {
            let full = name.as_deref().ok_or("a struct without a name has no message name")?;
            let (package, message) = match full.rsplit_once('.') {
                Some((p, m)) => (Some(p), m),
                None => (None, full),
            };
            for part in package.iter().flat_map(|p| p.split('.')).chain([message]) {
                check_name(part).map_err(|why| format!("message name `{full}`: {why}"))?;
            }
            let mut text = String::from("syntax = \"proto3\";\n");
            if let Some(p) = package {
                let _ = writeln!(text, "package {p};");
            }
            text.push('\n');
            message_text(&mut text, message, fields)?;
            Ok(ProtoSchema { text, indexes: &[0] })
        }
        Schema::Prim { ty, .. } => {
            // The wrapper's index in wrappers.proto, as a zig-zag count (1) and index.
            let indexes: &'static [u8] = match ty {
                Prim::Float64 => &[2, 0],
                Prim::Int64 => &[2, 4],
                Prim::Int32 => &[2, 8],
                Prim::Boolean => &[2, 12],
                Prim::String => &[2, 14],
                Prim::Bytes => &[2, 16],
                Prim::Int16 => return Err(INT16.into()),
            };
            Ok(ProtoSchema { text: WRAPPERS.to_owned(), indexes })
        }
        Schema::Array { .. } => Err("Protobuf has no message for an array at the root (Debezium's \
                                     ProtobufConverter refuses it too: \"Unsupported root schema of \
                                     type ARRAY\")"
            .into()),
    }
}

const INT16: &str = "an INT16 field (a smallint column) is written by Confluent's \
                     ProtobufConverter with its own confluent/meta.proto option, which walrelay \
                     does not write: use an integer or bigint column, or value.converter = \"avro\"";

/// `message <name> { fields; nested messages }`, as wire-schema's `MessageElement` prints it.
fn message_text(out: &mut String, name: &str, fields: &[(String, Schema)]) -> Result<(), String> {
    let _ = write!(out, "message {name} {{");
    if fields.is_empty() {
        out.push_str("}\n");
        return Ok(());
    }
    out.push('\n');
    let mut nested = Vec::new();
    for (i, (fname, fschema)) in fields.iter().enumerate() {
        check_name(fname).map_err(|why| format!("field `{fname}` of message {name}: {why}"))?;
        let (repeated, element) = match fschema {
            Schema::Array { items, .. } => (true, &**items),
            other => (false, other),
        };
        let ty = match element {
            Schema::Prim { ty, .. } => scalar(*ty)?.to_owned(),
            Schema::Struct { fields: inner, .. } => {
                let message = format!("{fname}Message");
                let mut text = String::new();
                message_text(&mut text, &message, inner)?;
                nested.push(text);
                message
            }
            Schema::Array { .. } => {
                return Err(format!(
                    "field `{fname}` of message {name}: an array of arrays has no Protobuf field"
                ))
            }
        };
        let label = if repeated { "repeated " } else { "" };
        let _ = writeln!(out, "  {label}{ty} {fname} = {};", i + 1);
    }
    if !nested.is_empty() {
        out.push('\n');
        for text in nested {
            for line in text.lines() {
                let _ = writeln!(out, "  {line}");
            }
        }
    }
    out.push_str("}\n");
    Ok(())
}

fn scalar(ty: Prim) -> Result<&'static str, String> {
    Ok(match ty {
        Prim::Boolean => "bool",
        Prim::Int32 => "int32",
        Prim::Int64 => "int64",
        Prim::Float64 => "double",
        Prim::String => "string",
        Prim::Bytes => "bytes",
        Prim::Int16 => return Err(INT16.into()),
    })
}

/// Protobuf identifiers: a letter or `_`, then letters, digits and `_`.
fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    match ok {
        true => Ok(()),
        false => Err(format!(
            "`{name}` is not a Protobuf identifier (a letter or _, then letters, digits and _): \
             rename the JSON member or column, or use value.converter = \"json\""
        )),
    }
}

/// A value or field to encode: a row's column value, or part of an expanded payload.
pub(crate) enum Value<'v, 't, 'a> {
    Cv(&'v Cv),
    Data(&'v Data<'t, 'a>),
}

impl Value<'_, '_, '_> {
    fn is_null(&self) -> bool {
        match self {
            Value::Cv(cv) => matches!(cv, Cv::Null),
            Value::Data(d) => matches!(d, Data::Null | Data::Node(Node::Null)),
        }
    }
}

/// Appends the body of a value under the root `schema`: a struct's fields (`fields` pairs each
/// with its value), or a wrapper's single field.
pub(crate) fn write_root(
    out: &mut Vec<u8>,
    schema: &Schema,
    fields: &[Value<'_, '_, '_>],
) -> Result<(), String> {
    match schema {
        Schema::Struct { fields: schemas, .. } => {
            for (i, ((name, fschema), value)) in schemas.iter().zip(fields).enumerate() {
                write_field(out, i as u32 + 1, value, fschema)
                    .map_err(|why| format!("field `{name}`: {why}"))?;
            }
            Ok(())
        }
        _ => match fields {
            [value] => write_field(out, 1, value, schema),
            _ => Err("a wrapper holds one value".into()),
        },
    }
}

/// The values [`write_root`] takes for `value` at the root: a struct's fields, in the order of
/// `schema`'s (an expanded payload's, or a logical message's decoded object), or the value
/// itself, for a wrapper.
pub(crate) fn root_values<'v, 't, 'a>(
    schema: &Schema,
    value: Value<'v, 't, 'a>,
) -> Vec<Value<'v, 't, 'a>> {
    match (schema, value) {
        (Schema::Struct { .. }, Value::Data(d @ Data::Struct(_))) => {
            struct_values(d).expect("a struct")
        }
        (Schema::Struct { fields, .. }, Value::Cv(Cv::Struct(values))) => fields
            .iter()
            .map(|(name, _)| {
                let v = values.iter().find(|(n, _)| **n == **name).map(|(_, v)| v);
                Value::Cv(v.unwrap_or(&Cv::Null))
            })
            .collect(),
        (_, value) => vec![value],
    }
}

/// The fields of an expanded struct value, paired with its schema's fields.
fn struct_values<'v, 't, 'a>(data: &'v Data<'t, 'a>) -> Option<Vec<Value<'v, 't, 'a>>> {
    match data {
        Data::Struct(values) => Some(values.iter().map(Value::Data).collect()),
        _ => None,
    }
}

fn write_field(
    out: &mut Vec<u8>,
    number: u32,
    value: &Value,
    schema: &Schema,
) -> Result<(), String> {
    if value.is_null() {
        return Ok(());
    }
    match schema {
        Schema::Prim { ty, .. } => write_scalar(out, number, value, *ty),
        Schema::Struct { fields, .. } => {
            let values = match value {
                Value::Cv(Cv::Struct(values)) => fields
                    .iter()
                    .map(|(name, _)| {
                        let v = values.iter().find(|(n, _)| **n == **name).map(|(_, v)| v);
                        Value::Cv(v.unwrap_or(&Cv::Null))
                    })
                    .collect(),
                Value::Data(d) => struct_values(d).ok_or("a value that is not an object")?,
                _ => return Err(mismatch(value, schema)),
            };
            key(out, number, 2);
            delimited(out, |out| write_root(out, schema, &values))
        }
        Schema::Array { items, .. } => {
            let elements: Vec<Value> = match value {
                Value::Cv(Cv::Array(items)) => items.iter().map(Value::Cv).collect(),
                Value::Data(Data::Array(items)) => items.iter().map(Value::Data).collect(),
                _ => return Err(mismatch(value, schema)),
            };
            if elements.iter().any(Value::is_null) {
                return Err("a null inside an array: a repeated Protobuf field has no null".into());
            }
            match &**items {
                Schema::Prim { ty, .. } if !matches!(ty, Prim::String | Prim::Bytes) => {
                    // proto3 packs repeated numbers and booleans: one length-delimited field.
                    if elements.is_empty() {
                        return Ok(());
                    }
                    key(out, number, 2);
                    delimited(out, |out| {
                        elements.iter().try_for_each(|e| scalar_bytes(out, e, *ty))
                    })
                }
                Schema::Array { .. } => Err("an array of arrays has no Protobuf field".into()),
                element => {
                    for e in &elements {
                        // Each element is written even when it is the default: repeated
                        // fields keep every element.
                        write_element(out, number, e, element)?;
                    }
                    Ok(())
                }
            }
        }
    }
}

/// One element of a repeated string, bytes or message field.
fn write_element(
    out: &mut Vec<u8>,
    number: u32,
    value: &Value,
    schema: &Schema,
) -> Result<(), String> {
    match schema {
        Schema::Struct { .. } => write_field(out, number, value, schema),
        Schema::Prim { ty, .. } => {
            key(out, number, 2);
            scalar_bytes(out, value, *ty)
        }
        Schema::Array { .. } => Err("an array of arrays has no Protobuf field".into()),
    }
}

/// A singular scalar field, left out at its default value, as proto3 does: written, then taken
/// back when its bytes are the default's (a varint 0, an empty string, +0.0).
fn write_scalar(out: &mut Vec<u8>, number: u32, value: &Value, ty: Prim) -> Result<(), String> {
    let wire = match ty {
        Prim::Float64 => 1,
        Prim::String | Prim::Bytes => 2,
        _ => 0,
    };
    let start = out.len();
    key(out, number, wire);
    let at = out.len();
    scalar_bytes(out, value, ty)?;
    let default = match ty {
        Prim::Float64 => out[at..] == [0; 8],
        _ => out[at..] == [0],
    };
    if default {
        out.truncate(start);
    }
    Ok(())
}

/// A length-delimited body written by `body` straight into `out`, its length put in front after
/// (one byte reserved: most bodies are shorter than 128 bytes). The registry's contract rewrite
/// (`crate::registry`) writes its nested messages with it too.
pub(crate) fn delimited<E>(
    out: &mut Vec<u8>,
    body: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    let at = out.len();
    out.push(0);
    body(out)?;
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
    } else {
        let mut prefix = Vec::with_capacity(4);
        varint(&mut prefix, len as u64);
        out.splice(at..at + 1, prefix);
    }
    Ok(())
}

/// A scalar's bytes after its key: a varint, 8 little-endian bytes for a double, or a length
/// and the bytes for a string.
fn scalar_bytes(out: &mut Vec<u8>, value: &Value, ty: Prim) -> Result<(), String> {
    match (value, ty) {
        (Value::Cv(Cv::Text(b)), Prim::String) => length_delimited(out, utf8(b)?.as_bytes()),
        (Value::Cv(Cv::Bin(b)), Prim::Bytes) => length_delimited(out, b),
        (Value::Cv(Cv::Int(b)), Prim::Int32 | Prim::Int64) => {
            let v = std::str::from_utf8(b)
                .ok()
                .and_then(|t| t.parse::<i64>().ok())
                .ok_or_else(|| format!("{:?} is not an integer", String::from_utf8_lossy(b)))?;
            varint(out, v as u64);
        }
        (Value::Cv(Cv::Ts(v)), Prim::Int64) => varint(out, *v as u64),
        (Value::Cv(Cv::Bool(v)), Prim::Boolean) => out.push(u8::from(*v)),
        (Value::Cv(Cv::Double(v)), Prim::Float64) => out.extend_from_slice(&v.to_le_bytes()),
        (Value::Data(Data::Node(node)), ty) => leaf(out, node, ty)?,
        (value, ty) => return Err(format!("{} does not fit {}", kind(value), scalar(ty)?)),
    }
    Ok(())
}

fn leaf(out: &mut Vec<u8>, node: &Node, ty: Prim) -> Result<(), String> {
    match (node, ty) {
        (Node::Str(s), Prim::String) => length_delimited(out, s.as_bytes()),
        (Node::Bool(v), Prim::Boolean) => out.push(u8::from(*v)),
        (Node::Num(Num::Int(v)), Prim::Int32 | Prim::Int64) => varint(out, i64::from(*v) as u64),
        (Node::Num(Num::Long(v)), Prim::Int64) => varint(out, *v as u64),
        (Node::Num(n), Prim::Float64) => out.extend_from_slice(&n.as_f64()?.to_le_bytes()),
        (node, ty) => {
            return Err(format!(
                "a JSON {} does not fit its inferred type {}",
                node.type_name().to_ascii_lowercase(),
                scalar(ty)?
            ))
        }
    }
    Ok(())
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Cv(Cv::Text(_)) => "a text value",
        Value::Cv(Cv::Int(_)) => "an integer",
        Value::Cv(Cv::Bool(_)) => "a boolean",
        Value::Cv(Cv::Bin(_)) => "bytes",
        Value::Cv(Cv::Ts(_)) => "a timestamp",
        Value::Cv(Cv::Double(_)) => "a double",
        Value::Cv(Cv::Array(_)) | Value::Data(Data::Array(_)) => "an array",
        Value::Cv(Cv::Struct(_)) | Value::Data(Data::Struct(_)) => "a struct",
        Value::Cv(Cv::Null) | Value::Data(Data::Null) => "null",
        Value::Data(Data::Node(_)) => "a JSON value",
    }
}

fn mismatch(value: &Value, schema: &Schema) -> String {
    format!("{} does not fit the schema {}", kind(value), schema.to_json())
}

fn key(out: &mut Vec<u8>, number: u32, wire: u8) {
    varint(out, (u64::from(number) << 3) | u64::from(wire));
}

fn length_delimited(out: &mut Vec<u8>, b: &[u8]) {
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A base-128 varint; a negative int32 or int64 is its 64-bit two's complement (10 bytes).
pub(crate) fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prim(ty: Prim) -> Schema {
        Schema::Prim { ty, optional: true, name: None, version: None }
    }

    #[test]
    fn nested_messages_are_indented_as_confluents_protobuf_schema_prints_them() {
        let items = Schema::Struct {
            name: Some("payload.items".into()),
            optional: true,
            version: None,
            fields: vec![("qty".into(), prim(Prim::Int32)), ("sku".into(), prim(Prim::String))],
        };
        let payload = Schema::Struct {
            name: Some("payload".into()),
            optional: true,
            version: None,
            fields: vec![(
                "items".into(),
                Schema::Array { items: Box::new(items), optional: true },
            )],
        };
        let value = Schema::Struct {
            name: Some("dbz.public.outbox.Order.Value".into()),
            optional: false,
            version: None,
            fields: vec![("payload".into(), payload), ("aggType".into(), prim(Prim::String))],
        };
        let s = schema_text(&value).unwrap();
        assert_eq!(
            s.text,
            "syntax = \"proto3\";\npackage dbz.public.outbox.Order;\n\nmessage Value {\n  \
             payloadMessage payload = 1;\n  string aggType = 2;\n\n  message payloadMessage {\n    \
             repeated itemsMessage items = 1;\n  \n    message itemsMessage {\n      \
             int32 qty = 1;\n      string sku = 2;\n    }\n  }\n}\n"
        );
        assert_eq!(s.indexes, [0]);
    }

    #[test]
    fn defaults_are_left_out_and_repeated_numbers_packed() {
        let schema = Schema::Struct {
            name: Some("payload".into()),
            optional: true,
            version: None,
            fields: vec![
                ("zero".into(), prim(Prim::Int32)),
                ("no".into(), prim(Prim::Boolean)),
                ("neg".into(), prim(Prim::Int64)),
                (
                    "nums".into(),
                    Schema::Array { items: Box::new(prim(Prim::Int32)), optional: true },
                ),
            ],
        };
        let ints = [Cv::Int("1".into()), Cv::Int("300".into())];
        let (zero, no, neg) = (Cv::Int("0".into()), Cv::Bool(false), Cv::Int("-1".into()));
        let nums = Cv::Array(ints.to_vec());
        let mut out = Vec::new();
        write_root(
            &mut out,
            &schema,
            &[Value::Cv(&zero), Value::Cv(&no), Value::Cv(&neg), Value::Cv(&nums)],
        )
        .unwrap();
        let mut want = vec![0x18];
        want.extend([0xff; 9]);
        want.push(0x01);
        want.extend([0x22, 3, 1, 0xac, 0x02]);
        assert_eq!(out, want);
    }

    #[test]
    fn a_decoded_message_object_at_the_root_gives_its_fields_in_the_schemas_order() {
        let schema = Schema::Struct {
            name: Some("payload".into()),
            optional: true,
            version: None,
            fields: vec![("a".into(), prim(Prim::String)), ("b".into(), prim(Prim::Int64))],
        };
        let object =
            Cv::Struct(vec![("b".into(), Cv::Int("2".into())), ("a".into(), Cv::Text("x".into()))]);
        let mut out = Vec::new();
        write_root(&mut out, &schema, &root_values(&schema, Value::Cv(&object))).unwrap();
        assert_eq!(out, [0x0a, 1, b'x', 0x10, 2]);
    }

    #[test]
    fn a_string_at_the_root_is_a_string_value_wrapper() {
        let s = schema_text(&prim(Prim::String)).unwrap();
        assert!(s.text.contains("message StringValue"));
        assert_eq!(s.indexes, [2, 14]);
        let mut out = Vec::new();
        write_root(&mut out, &prim(Prim::String), &[Value::Cv(&Cv::Text("{}".into()))]).unwrap();
        assert_eq!(out, [0x0a, 2, b'{', b'}']);
    }
}
