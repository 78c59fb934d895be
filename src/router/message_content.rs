//! Logical decoding messages as outbox events: what Debezium 3.6.3's
//! `DecodeLogicalDecodingMessageContent` makes of a `pg_logical_emit_message` content before the
//! Event Router reads it (`tests/fixtures/debezium/messages/README.md`, rules D3–D7, T1–T7).
//!
//! The content is read as UTF-8 text that must start with `{` (Debezium also lets `[` through,
//! to fail on it next), parsed as Jackson's `readTree` parses (`json.rs`: trailing text ignored,
//! a repeated key keeps its first position and its last value), and its top-level object
//! becomes a Connect struct whose schema Debezium's `JsonSchemaData` infers from the values
//! (`expand.rs`'s inference; the content root is unnamed, so a member `payload` holding an
//! object has a struct schema named `payload`). Each member is then a field the router reads by
//! name, with its inferred schema, exactly as it reads a row's column.
//!
//! Where Debezium 3.6.3 stops its task on a content (not JSON, not an object, a mixed or
//! all-null array, an empty member name, an integer beyond 64 bits, …), [`decode`] returns a
//! [`RouteError`] that says what is wrong: the relay dead-letters the message, or stops at it.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

use super::binding::{Col, Expect, Shape};
use super::column::Cv;
use super::convert::{Prim, Schema};
use super::expand::Infer;
use super::json::{self, Node, Num};
use super::options::{EmptyArrayBehavior, NullBehavior};
use super::RouteError;

/// A message's content as Connect sees it after `DecodeLogicalDecodingMessageContent`: its
/// top-level members (null ones only under `fields.null.include`; empty arrays never), in the
/// order they first appear, each with its inferred schema and its value.
#[derive(Debug)]
pub(crate) struct Decoded {
    pub(super) fields: Vec<(Arc<str>, Schema)>,
    pub(super) values: Vec<Cv>,
}

/// Decodes a message's content; `nulls` is `fields.null.include` (`OptionalBytes` when true).
pub(crate) fn decode(content: &Bytes, nulls: NullBehavior) -> Result<Decoded, RouteError> {
    let text = std::str::from_utf8(content).map_err(|e| {
        refused(format!("it is not valid UTF-8 ({e}); walrelay reads message content as UTF-8"))
    })?;
    match text.chars().next() {
        None => return Err(refused("it is empty".into())),
        Some('{' | '[') => {}
        Some(c) => {
            return Err(refused(format!(
                "it starts with {c:?}; the content must start with `{{` (no whitespace or \
                 byte-order mark before it)"
            )))
        }
    }
    let root = json::parse(text, true).map_err(|e| refused(format!("it is not JSON: {e}")))?;
    let Node::Obj(members) = &root else {
        return Err(refused("it is a JSON array, not an object".into()));
    };
    let infer = Infer { nulls, empty_arrays: EmptyArrayBehavior::Ignore };
    let fields = match infer.schema(None, &root) {
        Ok(Some(Schema::Struct { fields, .. })) => fields,
        Ok(_) => unreachable!("an object always has a struct schema"),
        Err(reason) => return Err(refused(reason)),
    };
    let mut values = Vec::with_capacity(fields.len());
    let mut cursor = 0;
    for (name, schema) in &fields {
        let node = member(members, name, &mut cursor).expect("inferred from these members");
        values.push(to_cv(node, schema, content, &Path::Member(None, name)).map_err(refused)?);
    }
    let fields = fields.into_iter().map(|(name, schema)| (Arc::from(name), schema)).collect();
    Ok(Decoded { fields, values })
}

/// The `id` member's text, if the content gets that far: what a dead letter names the message
/// by when it could not be routed.
pub fn event_id(content: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(content).ok()?;
    if !text.starts_with('{') {
        return None;
    }
    match json::parse(text, true).ok()? {
        Node::Obj(members) => members.into_iter().find_map(|(k, v)| match v {
            Node::Str(s) if k == "id" => Some(s.into_owned()),
            _ => None,
        }),
        _ => None,
    }
}

fn refused(reason: String) -> RouteError {
    RouteError::Content { reason }
}

impl Decoded {
    /// The fields the router binds its options to.
    pub(super) fn shape(&self) -> MessageShape<'_> {
        MessageShape { fields: &self.fields }
    }
}

pub(super) struct MessageShape<'a> {
    fields: &'a [(Arc<str>, Schema)],
}

impl Shape for MessageShape<'_> {
    fn field(&self, name: &str) -> Option<(usize, Schema, bool)> {
        let index = self.fields.iter().position(|(n, _)| &**n == name)?;
        // Jackson keeps the last of repeated keys, in expansion as in decoding.
        Some((index, self.fields[index].1.clone(), true))
    }

    fn missing(&self, name: &str, role: &'static str) -> RouteError {
        RouteError::MissingMember { member: name.to_owned(), role }
    }

    fn wrong_type(&self, col: &Col, role: &'static str, expected: Expect) -> RouteError {
        RouteError::MemberType {
            member: col.name.to_string(),
            role,
            found: describe(&col.schema),
            expected: match expected {
                Expect::String => "a JSON string",
                Expect::Int32 => "a JSON integer within 32 bits",
                Expect::Timestamp => {
                    "a Debezium timestamp, which no JSON value is (Debezium 3.6.3 fails the \
                     same way); unset `table.field.event.timestamp`, or write the events as rows"
                }
            },
        }
    }
}

/// A member's JSON type as its inferred schema says, for error messages.
fn describe(schema: &Schema) -> &'static str {
    match schema {
        Schema::Prim { ty: Prim::String, .. } => "a JSON string",
        Schema::Prim { ty: Prim::Int32, .. } => "a JSON integer (INT32)",
        Schema::Prim { ty: Prim::Int64, .. } => "a JSON integer beyond 32 bits (INT64)",
        Schema::Prim { ty: Prim::Float64, .. } => "a JSON number with a fraction or exponent",
        Schema::Prim { ty: Prim::Boolean, .. } => "a JSON boolean",
        Schema::Prim { .. } => "null",
        Schema::Array { .. } => "a JSON array",
        Schema::Struct { .. } => "a JSON object",
    }
}

/// Where a value sits in the content, for error messages; built without allocating.
enum Path<'p> {
    Member(Option<&'p Path<'p>>, &'p str),
    Element(&'p Path<'p>, usize),
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Member(None, name) => write!(f, "{name}"),
            Path::Member(Some(parent), name) => write!(f, "{parent}.{name}"),
            Path::Element(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

/// The member called `name`, looked for from `cursor` on first (a schema's fields usually
/// follow the object's key order), then from the start (merged array-element schemas don't).
fn member<'n, 'a>(
    members: &'n [(std::borrow::Cow<'a, str>, Node<'a>)],
    name: &str,
    cursor: &mut usize,
) -> Option<&'n Node<'a>> {
    let start = (*cursor).min(members.len());
    let at = members[start..]
        .iter()
        .position(|(k, _)| k == name)
        .map(|p| start + p)
        .or_else(|| members[..start].iter().position(|(k, _)| k == name))?;
    *cursor = at + 1;
    Some(&members[at].1)
}

/// `JsonSchemaData`'s value for `node` under its inferred `schema`, with Connect's validation:
/// a value that does not fit is what makes Debezium 3.6.3 fail the message.
fn to_cv(node: &Node, schema: &Schema, content: &Bytes, path: &Path) -> Result<Cv, String> {
    Ok(match (node, schema) {
        (Node::Null, s) if s.optional() => Cv::Null,
        (Node::Null, _) => {
            return Err(format!(
                "`{path}` is null, in an array of objects whose merged element schema requires \
                 a value (Debezium 3.6.3 fails on it: \"null used for required field\")"
            ))
        }
        (Node::Str(s), Schema::Prim { ty: Prim::String, .. }) => Cv::Text(match s {
            std::borrow::Cow::Borrowed(b) => content.slice_ref(b.as_bytes()),
            std::borrow::Cow::Owned(o) => Bytes::copy_from_slice(o.as_bytes()),
        }),
        (Node::Bool(v), Schema::Prim { ty: Prim::Boolean, .. }) => Cv::Bool(*v),
        (Node::Num(Num::Int(v)), Schema::Prim { ty: Prim::Int32, .. }) => {
            Cv::Int(Bytes::from(v.to_string()))
        }
        (Node::Num(Num::Long(v)), Schema::Prim { ty: Prim::Int64, .. }) => {
            Cv::Int(Bytes::from(v.to_string()))
        }
        (Node::Num(Num::Double(v)), Schema::Prim { ty: Prim::Float64, .. }) => Cv::Double(*v),
        (Node::Num(Num::Big(digits)), _) => {
            return Err(format!(
                "`{path}` is the integer {digits}, which does not fit 64 bits (Debezium 3.6.3 \
                 fails on it: \"Invalid Java object for schema with type FLOAT64: class \
                 java.math.BigDecimal\"); send it as a string"
            ))
        }
        (Node::Arr(items), Schema::Array { items: item_schema, .. }) => Cv::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, n)| to_cv(n, item_schema, content, &Path::Element(path, i)))
                .collect::<Result<_, _>>()?,
        ),
        (Node::Obj(children), Schema::Struct { fields, .. }) => {
            let mut cursor = 0;
            let mut values = Vec::with_capacity(fields.len());
            for (name, field_schema) in fields {
                let value = match member(children, name, &mut cursor) {
                    Some(n) => to_cv(n, field_schema, content, &Path::Member(Some(path), name))?,
                    None => Cv::Null,
                };
                values.push((Arc::from(name.as_str()), value));
            }
            Cv::Struct(values)
        }
        (n, s) => {
            return Err(format!(
                "`{path}` is a JSON {} in an array whose elements Debezium typed {} from the \
                 others (Debezium 3.6.3 fails on it)",
                n.type_name(),
                s.to_json()
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::{Router, RouterConfig};
    use super::*;

    fn router(router: &[(&str, &str)], debezium: &[(&str, &str)]) -> Router {
        let opts =
            |kv: &[(&str, &str)]| kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Router::new(RouterConfig::parse(&opts(router), &opts(debezium)).unwrap())
    }

    fn content(payload: &str, extra: &str) -> Bytes {
        Bytes::from(format!(
            r#"{{"id": "e-1", "aggregatetype": "Order", "aggregateid": "o-1"{extra}, "payload": {payload}}}"#
        ))
    }

    #[test]
    fn deeply_nested_content_is_routed_on_a_large_stack_and_jacksons_limit_is_refused() {
        let mut r = router(&[], &[]);
        let nested = |depth: usize| format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        let rec = r.route_message(&content(&nested(990), "")).unwrap();
        let value = rec.value.unwrap();
        assert!(value.starts_with(b"[[[") && value.ends_with(b"]]]"), "List.toString nests");
        let err = r.route_message(&content(&nested(1000), "")).unwrap_err().to_string();
        assert!(err.contains("nesting depth exceeds the maximum allowed (1000)"), "{err}");
    }

    #[test]
    fn content_that_is_not_utf8_is_refused_not_repaired() {
        let mut bytes = content("\"x\"", "").to_vec();
        bytes[9] = 0xFF;
        let err = router(&[], &[]).route_message(&Bytes::from(bytes)).unwrap_err().to_string();
        assert!(err.contains("not valid UTF-8"), "{err}");
    }

    #[test]
    fn structures_placed_in_headers_are_written_as_kafka_connect_values_writes_them() {
        // SimpleHeaderConverter: Values.convertToString — a struct as {"name":value,…} with
        // nulls, a list as [a,b] with quoted strings, a double as Double.toString.
        let extra = r#", "meta": {"tenant": "a\"b", "n": 2, "gone": null}, "tags": ["x", "y"], "ratio": 1e3"#;
        let mut r = router(
            &[("table.fields.additional.placement", "meta:header,tags:header,ratio:header")],
            &[("fields.null.include", "true")],
        );
        let rec = r.route_message(&content("{}", extra)).unwrap();
        let headers: Vec<(&str, &str)> =
            rec.headers.iter().map(|(k, v)| (&**k, std::str::from_utf8(v).unwrap())).collect();
        assert_eq!(
            headers,
            [
                ("id", "e-1"),
                ("meta", r#"{"tenant":"a\"b","n":2,"gone":null}"#),
                ("tags", r#"["x","y"]"#),
                ("ratio", "1000.0"),
            ]
        );
        // StringConverter's Struct.toString leaves the null field out.
        assert_eq!(rec.value.as_deref(), Some(&b"Struct{}"[..]));
    }

    #[test]
    fn decoded_members_keep_first_positions_and_last_values_and_drop_nulls_and_empty_arrays() {
        let text = Bytes::from_static(br#"{"b": 1, "a": [], "c": null, "b": "two"} trailing"#);
        let d = decode(&text, NullBehavior::Ignore).unwrap();
        let names: Vec<&str> = d.fields.iter().map(|(n, _)| &**n).collect();
        assert_eq!(names, ["b"]);
        assert_eq!(d.values, [Cv::Text(Bytes::from_static(b"two"))]);
        let d = decode(&text, NullBehavior::OptionalBytes).unwrap();
        let names: Vec<&str> = d.fields.iter().map(|(n, _)| &**n).collect();
        assert_eq!(names, ["b", "c"], "a null is kept as an optional BYTES field");
        assert_eq!(d.values[1], Cv::Null);
    }
}
