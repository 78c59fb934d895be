//! `table.expand.json.payload`: Debezium's `JsonSchemaData` schema inference over a Jackson
//! tree, and the Connect value built from it, rendered as `JsonConverter` would.
//!
//! Reproduced from Debezium 3.6.3:
//! * only a string payload starting with `{` or `[` is parsed (Jackson `readTree`: the first
//!   value; trailing text ignored; duplicate keys keep the first position and the last value;
//!   at most 1000 nesting levels and 1000-character numbers, Jackson's read constraints);
//! * numbers: integers that fit `int` are INT32, that fit `long` INT64, everything else FLOAT64;
//! * `null` fields are dropped (`ignore`) or become optional BYTES (`optional_bytes`); empty
//!   arrays are dropped (`ignore`) or become `ARRAY<optional STRING>` (`optional_string`);
//! * arrays must be homogeneous (same JSON type; numbers of the same Connect type); arrays of
//!   objects merge the element schemas; an array of nulls has no member schema;
//! * when inference fails, the payload stays the JSON string (and Debezium logs a warning);
//! * a top-level `[]` under `ignore` infers no schema: the payload stays a string whose schema is
//!   null (`{"schema":null,"payload":"[]"}` under schemas).
//!
//! **Where walrelay differs, on purpose.** Debezium 3.6.3 replaces the payload schema before it
//! builds the value, so when building the value fails the record carries the new schema and the
//! old string, and the JsonConverter then fails the record (the task stops, or the record is
//! dropped with `errors.tolerance=all`). That happens for a top-level array whose members have a
//! schema (fixture row 06, "Not a struct schema"), an integer beyond `long` (row 14, a
//! `BigDecimal` in a FLOAT64 field), a null element in an array whose merged element schema is
//! required, and values whose type differs from the merged schema of an array of objects.
//! walrelay instead emits the payload as valid JSON: the value under the inferred schema, where a
//! value that does not fit its schema is written as Jackson writes the parsed node (integers
//! beyond `long` keep all their digits). `Expanded::Value::debezium_fails` says when this
//! happened. Merged array-of-object schemas list fields in first-seen order (Debezium iterates a
//! `HashSet`, so its order is not defined).

use super::convert::{write_str, Prim, Schema};
use super::json::{write_node, Node, Num};
use super::options::{EmptyArrayBehavior, NullBehavior};

/// The Connect value of an expanded payload, borrowing the parsed tree.
#[derive(Debug)]
pub(crate) enum Data<'t, 'a> {
    Null,
    /// A leaf, or a node written as Jackson writes the parsed tree.
    Node(&'t Node<'a>),
    Array(Vec<Data<'t, 'a>>),
    /// Values parallel to the struct schema's fields (absent keys are null).
    Struct(Vec<Data<'t, 'a>>),
}

/// The outcome of expanding one payload.
#[derive(Debug)]
pub(crate) enum Expanded<'t, 'a> {
    /// Not expandable: the payload stays the string with its column schema. Debezium logs
    /// `JSON expansion failed` with this cause.
    Kept {
        reason: String,
    },
    /// Inference gave no schema (a top-level `[]` under `ignore`): the payload stays the string,
    /// with a null schema.
    NullSchema {
        reason: String,
    },
    Value {
        schema: Schema,
        data: Data<'t, 'a>,
        debezium_fails: Option<String>,
    },
}

/// Infers the schema and builds the value, or says why the payload stays a string.
pub(crate) fn expand<'t, 'a>(
    root: &'t Node<'a>,
    field_payload: &str,
    nulls: NullBehavior,
    empty_arrays: EmptyArrayBehavior,
) -> Expanded<'t, 'a> {
    let inf = Infer { nulls, empty_arrays };
    let schema = match inf.schema(Some(field_payload), root) {
        Err(reason) => return Expanded::Kept { reason },
        Ok(None) => {
            return Expanded::NullSchema {
                reason: "the payload has no inferable schema (an empty array)".into(),
            }
        }
        Ok(Some(s)) => s,
    };
    let mut fails = None;
    if !matches!(schema, Schema::Struct { .. }) {
        fails = Some("Not a struct schema: the top-level payload is an array".to_owned());
    }
    let data = build(root, &schema, &mut fails);
    Expanded::Value { schema, data, debezium_fails: fails }
}

/// Writes an expanded value as JsonConverter does (compact).
pub(crate) fn write_data(out: &mut Vec<u8>, data: &Data, schema: &Schema) {
    match (data, schema) {
        (Data::Null, _) => out.extend_from_slice(b"null"),
        (Data::Node(n), _) => write_node(out, n),
        (Data::Array(items), Schema::Array { items: item_schema, .. }) => {
            out.push(b'[');
            for (i, d) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_data(out, d, item_schema);
            }
            out.push(b']');
        }
        (Data::Struct(values), Schema::Struct { fields, .. }) => {
            out.push(b'{');
            for (i, (d, (name, fschema))) in values.iter().zip(fields).enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, name);
                out.push(b':');
                write_data(out, d, fschema);
            }
            out.push(b'}');
        }
        _ => unreachable!("expanded data is built from its schema"),
    }
}

/// `JsonSchemaData`'s schema inference, with its null and empty-array behaviours.
pub(crate) struct Infer {
    pub(crate) nulls: NullBehavior,
    pub(crate) empty_arrays: EmptyArrayBehavior,
}

fn opt(ty: Prim) -> Schema {
    Schema::Prim { ty, optional: true, name: None, version: None }
}

fn num_schema(n: &Num) -> Prim {
    match n {
        Num::Int(_) => Prim::Int32,
        Num::Long(_) => Prim::Int64,
        Num::Big(_) | Num::Double(_) => Prim::Float64,
    }
}

impl Infer {
    /// `JsonSchemaData.toConnectSchema`: `None` for what it drops (a null under `ignore`, an
    /// empty array under `ignore`); `Err` for what it fails on, with Debezium's text.
    pub(crate) fn schema(&self, key: Option<&str>, node: &Node) -> Result<Option<Schema>, String> {
        Ok(match node {
            Node::Str(_) => Some(opt(Prim::String)),
            Node::Bool(_) => Some(opt(Prim::Boolean)),
            Node::Num(n) => Some(opt(num_schema(n))),
            Node::Null => (self.nulls == NullBehavior::OptionalBytes).then(|| opt(Prim::Bytes)),
            Node::Arr(items) if items.is_empty() => (self.empty_arrays
                == EmptyArrayBehavior::OptionalString)
                .then(|| Schema::Array { items: Box::new(opt(Prim::String)), optional: true }),
            Node::Arr(items) => Some(Schema::Array {
                items: Box::new(self.array_member(key, items)?),
                optional: true,
            }),
            Node::Obj(fields) => {
                let mut out: Vec<(String, Schema)> = Vec::with_capacity(fields.len());
                for (name, value) in fields {
                    if name.is_empty() {
                        return Err("fieldName cannot be null.".into());
                    }
                    let field_key = match key {
                        Some(k) if !k.trim().is_empty() => format!("{k}.{name}"),
                        _ => name.to_string(),
                    };
                    if let Some(s) = self.schema(Some(&field_key), value)? {
                        if !out.iter().any(|(n, _)| n == name) {
                            out.push((name.to_string(), s));
                        }
                    }
                }
                Some(Schema::Struct {
                    name: key.map(str::to_owned),
                    optional: true,
                    version: None,
                    fields: out,
                })
            }
        })
    }

    /// `toConnectSchemaWithCycles` + `getFirstArrayElement`.
    fn array_member(&self, key: Option<&str>, items: &[Node]) -> Result<Schema, String> {
        let mut sample: Option<&Node> = None;
        let mut sample_num: Option<Prim> = None;
        for el in items.iter().filter(|e| !matches!(e, Node::Null)) {
            let s = *sample.get_or_insert(el);
            if !el.same_type(s) {
                return Err(format!(
                    "Field is not a homogenous array ({} x {}).",
                    as_text(s),
                    el.type_name()
                ));
            }
            if let (Node::Num(a), Node::Num(b)) = (s, el) {
                let ra = *sample_num.get_or_insert(num_schema(a));
                if ra != num_schema(b) {
                    return Err(format!(
                        "Field is not a homogenous array ({} x {}), different number types",
                        as_text(s),
                        as_text(el)
                    ));
                }
            }
        }
        match sample {
            Some(Node::Obj(_)) => {
                let mut distinct: Vec<Schema> = Vec::new();
                for el in items.iter().filter(|e| matches!(e, Node::Obj(_))) {
                    let s = self.schema(key, el)?.expect("objects always have a schema");
                    if !distinct.contains(&s) {
                        distinct.push(s);
                    }
                }
                let mut merged = distinct.remove(0);
                for s in distinct {
                    merged = merge(merged, s);
                }
                Ok(merged)
            }
            other => self
                .schema(None, other.unwrap_or(&Node::Null))?
                .ok_or_else(|| "Array '' has unrecognized member schema.".to_owned()),
        }
    }
}

/// Jackson's `asText()` for the warning texts.
fn as_text(n: &Node) -> String {
    match n {
        Node::Str(s) => s.to_string(),
        Node::Bool(b) => b.to_string(),
        Node::Null => "null".into(),
        Node::Num(_) => {
            let mut out = Vec::new();
            write_node(&mut out, n);
            String::from_utf8(out).unwrap_or_default()
        }
        Node::Arr(_) | Node::Obj(_) => String::new(),
    }
}

/// `JsonSchemaData.mergeSchema`: fields of `left`, then new fields of `right`; a BYTES (null)
/// field is replaced by a typed one. Like `SchemaUtil.copySchemaBasics`, the result is required.
fn merge(left: Schema, right: Schema) -> Schema {
    let (Schema::Struct { name, version, fields: mut lf, .. }, Schema::Struct { fields: rf, .. }) =
        (left, right)
    else {
        unreachable!("only struct schemas are merged")
    };
    for (rname, rschema) in rf {
        match lf.iter_mut().find(|(n, _)| *n == rname) {
            None => lf.push((rname, rschema)),
            Some((_, old)) => {
                let old_bytes = matches!(old, Schema::Prim { ty: Prim::Bytes, .. });
                let new_bytes = matches!(rschema, Schema::Prim { ty: Prim::Bytes, .. });
                if *old != rschema && old_bytes && !new_bytes {
                    *old = rschema;
                }
            }
        }
    }
    Schema::Struct { name, optional: false, version, fields: lf }
}

/// `toConnectData`/`getStructFieldValue`, recording where Connect's validation would reject it.
fn build<'t, 'a>(node: &'t Node<'a>, schema: &Schema, fails: &mut Option<String>) -> Data<'t, 'a> {
    match (node, schema) {
        (Node::Null, s) => {
            if !s.optional() {
                fails.get_or_insert_with(|| "Invalid value: null used for required field".into());
            }
            Data::Null
        }
        (Node::Str(_), Schema::Prim { ty: Prim::String, .. })
        | (Node::Bool(_), Schema::Prim { ty: Prim::Boolean, .. })
        | (Node::Num(Num::Int(_)), Schema::Prim { ty: Prim::Int32, .. })
        | (Node::Num(Num::Long(_)), Schema::Prim { ty: Prim::Int64, .. })
        | (Node::Num(Num::Double(_)), Schema::Prim { ty: Prim::Float64, .. }) => Data::Node(node),
        (Node::Arr(items), Schema::Array { items: item_schema, .. }) => {
            Data::Array(items.iter().map(|n| build(n, item_schema, fails)).collect())
        }
        (Node::Obj(children), Schema::Struct { fields, .. }) => {
            // Schema fields usually follow the object's key order: look ahead from the last hit.
            let mut cursor = 0;
            let mut values = Vec::with_capacity(fields.len());
            for (name, fs) in fields {
                let found = children[cursor..]
                    .iter()
                    .position(|(k, _)| k == name)
                    .map(|p| cursor + p)
                    .or_else(|| children[..cursor].iter().position(|(k, _)| k == name));
                values.push(match found {
                    Some(at) => {
                        cursor = at + 1;
                        build(&children[at].1, fs, fails)
                    }
                    None => Data::Null,
                });
            }
            Data::Struct(values)
        }
        (n, s) => {
            fails.get_or_insert_with(|| {
                format!("Invalid Java object for schema {}: JSON {}", s.to_json(), n.type_name())
            });
            Data::Node(n)
        }
    }
}
