//! An Avro schema read from its JSON text: what `use_latest_version` needs to write a value
//! under a schema walrelay did not derive (the subject's latest, registered by a team that owns
//! its contracts). Types are kept in an arena, so a named type used twice, or inside itself, is
//! one node that its references point to.

use std::collections::HashMap;

use serde_json::Value;

/// One Avro type; children are indices into [`Parsed::nodes`]. Logical types and properties
/// (`connect.*`) are their underlying type's: they do not change the binary encoding.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Fixed(usize),
    Enum { symbols: Vec<String>, default: Option<usize> },
    Array(usize),
    Map(usize),
    Union(Vec<usize>),
    Record { name: String, fields: Vec<Field> },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    pub ty: usize,
    /// The field's `default`, as JSON: written when a value has no such field.
    pub default: Option<Value>,
}

/// A schema: its types, and the root's index.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub nodes: Vec<Node>,
    pub root: usize,
}

impl Parsed {
    pub fn node(&self, i: usize) -> &Node {
        &self.nodes[i]
    }

    /// Reads an Avro schema's JSON text.
    pub fn parse(text: &str) -> Result<Parsed, String> {
        let json: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let mut p = Parser { nodes: Vec::new(), named: HashMap::new() };
        let root = p.parse(&json, None)?;
        Ok(Parsed { nodes: p.nodes, root })
    }
}

struct Parser {
    nodes: Vec<Node>,
    /// Full names of the named types defined so far.
    named: HashMap<String, usize>,
}

impl Parser {
    fn push(&mut self, node: Node) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    /// `json` inside the namespace `space`.
    fn parse(&mut self, json: &Value, space: Option<&str>) -> Result<usize, String> {
        match json {
            Value::String(name) => self.named_or_primitive(name, space),
            Value::Array(branches) => {
                let at = self.push(Node::Union(Vec::new()));
                let mut list = Vec::with_capacity(branches.len());
                for b in branches {
                    list.push(self.parse(b, space)?);
                }
                self.nodes[at] = Node::Union(list);
                Ok(at)
            }
            Value::Object(o) => {
                let ty = o.get("type").ok_or("a schema object without \"type\"")?;
                let Some(kind) = ty.as_str() else {
                    // {"type": {...}} or {"type": [...]}: the inner schema, with properties.
                    return self.parse(ty, space);
                };
                match kind {
                    "record" | "error" | "enum" | "fixed" => {
                        let name = o
                            .get("name")
                            .and_then(Value::as_str)
                            .ok_or_else(|| format!("a {kind} without a name"))?;
                        let own = o.get("namespace").and_then(Value::as_str);
                        let full = full_name(name, own.or(space));
                        let inner = full.rsplit_once('.').map(|(s, _)| s.to_string());
                        let at = self.push(Node::Null);
                        self.named.insert(full.clone(), at);
                        let node = match kind {
                            "enum" => enumeration(o)?,
                            "fixed" => {
                                let size = o.get("size").and_then(Value::as_u64);
                                Node::Fixed(size.ok_or("a fixed without a size")? as usize)
                            }
                            _ => self.record(full, o, inner.as_deref())?,
                        };
                        self.nodes[at] = node;
                        Ok(at)
                    }
                    "array" => {
                        let items = o.get("items").ok_or("an array without \"items\"")?;
                        let items = self.parse(items, space)?;
                        Ok(self.push(Node::Array(items)))
                    }
                    "map" => {
                        let values = o.get("values").ok_or("a map without \"values\"")?;
                        let values = self.parse(values, space)?;
                        Ok(self.push(Node::Map(values)))
                    }
                    other => self.named_or_primitive(other, space),
                }
            }
            other => Err(format!("{other} is not an Avro schema")),
        }
    }

    fn record(
        &mut self,
        name: String,
        o: &serde_json::Map<String, Value>,
        space: Option<&str>,
    ) -> Result<Node, String> {
        let list = o.get("fields").and_then(Value::as_array).ok_or("a record without fields")?;
        let mut fields = Vec::with_capacity(list.len());
        for f in list {
            let fname = f.get("name").and_then(Value::as_str).ok_or("a field without a name")?;
            let ty = f.get("type").ok_or_else(|| format!("field {fname} has no type"))?;
            let ty = self.parse(ty, space)?;
            fields.push(Field { name: fname.to_string(), ty, default: f.get("default").cloned() });
        }
        Ok(Node::Record { name, fields })
    }

    fn named_or_primitive(&mut self, name: &str, space: Option<&str>) -> Result<usize, String> {
        let node = match name {
            "null" => Node::Null,
            "boolean" => Node::Boolean,
            "int" => Node::Int,
            "long" => Node::Long,
            "float" => Node::Float,
            "double" => Node::Double,
            "bytes" => Node::Bytes,
            "string" => Node::String,
            _ => {
                let found =
                    self.named.get(&full_name(name, space)).or_else(|| self.named.get(name));
                return found.copied().ok_or_else(|| format!("unknown type {name}"));
            }
        };
        Ok(self.push(node))
    }
}

fn enumeration(o: &serde_json::Map<String, Value>) -> Result<Node, String> {
    let symbols: Vec<String> = o
        .get("symbols")
        .and_then(Value::as_array)
        .ok_or("an enum without symbols")?
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    let default =
        o.get("default").and_then(Value::as_str).and_then(|d| symbols.iter().position(|s| s == d));
    Ok(Node::Enum { symbols, default })
}

/// `name` in namespace `space`, unless it has a dot already.
fn full_name(name: &str, space: Option<&str>) -> String {
    match space {
        Some(space) if !name.contains('.') && !space.is_empty() => format!("{space}.{name}"),
        _ => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_unions_references_and_recursion_are_one_node_each() {
        let text = r#"{"type":"record","name":"Node","namespace":"a.b","fields":[
            {"name":"v","type":{"type":"int","connect.type":"int16"}},
            {"name":"next","type":["null","Node"],"default":null},
            {"name":"tags","type":{"type":"array","items":"string"}},
            {"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B"],"default":"B"}},
            {"name":"again","type":"a.b.Kind"}]}"#;
        let p = Parsed::parse(text).unwrap();
        let Node::Record { name, fields } = p.node(p.root) else { panic!("{p:?}") };
        assert_eq!(name, "a.b.Node");
        assert_eq!(p.node(fields[0].ty), &Node::Int);
        let Node::Union(b) = p.node(fields[1].ty) else { panic!() };
        assert_eq!((p.node(b[0]), b[1]), (&Node::Null, p.root));
        assert_eq!(fields[1].default, Some(Value::Null));
        assert_eq!(fields[3].ty, fields[4].ty);
        assert!(matches!(p.node(fields[3].ty), Node::Enum { default: Some(1), .. }));
        assert!(Parsed::parse(
            r#"{"type":"record","name":"R","fields":[{"name":"x","type":"Nope"}]}"#
        )
        .unwrap_err()
        .contains("Nope"));
    }
}
