//! `use_latest_version`: a value the router wrote under the schema it derived (the writer's)
//! rewritten under the subject's latest registered schema (the reader's), as Confluent's
//! serializer writes a Connect value with `use.latest.version`: fields are matched by name, in
//! the registered schema's order; a field the value lacks takes the schema's default, or the
//! value does not fit; a field the schema lacks is left out; numbers widen as Avro's resolution
//! allows (int → long → float → double), and a value goes into the first union branch that
//! takes it. Record names are not compared: a team's `com.acme.OrderCreated` takes the value of
//! Debezium's `ConnectDefault` if their fields agree.
//!
//! One pass over the Avro binary; the plan (both schemas read) is built once per pair.

use serde_json::Value;

use super::schema::{Node, Parsed};

/// Why a value does not fit the registered schema: the field's path and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Misfit {
    /// Field names from the root, outermost first.
    pub path: Vec<String>,
    pub what: String,
}

impl std::fmt::Display for Misfit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.path.is_empty() {
            true => write!(f, "the value: {}", self.what),
            false => write!(f, "field `{}`: {}", self.path.join("."), self.what),
        }
    }
}

fn misfit(what: impl Into<String>) -> Misfit {
    Misfit { path: Vec::new(), what: what.into() }
}

/// In a field: the path gets its name in front.
fn within(name: &str) -> impl FnOnce(Misfit) -> Misfit + '_ {
    move |mut m| {
        m.path.insert(0, name.to_string());
        m
    }
}

/// Writes `body` (Avro binary under `writer`) to `out` under `reader`.
pub fn transcode(
    writer: &Parsed,
    reader: &Parsed,
    body: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), Misfit> {
    let mut input = Input { bytes: body, at: 0 };
    let t = Transcoder { w: writer, r: reader };
    t.value(writer.root, reader.root, &mut input, out)?;
    if input.at != body.len() {
        return Err(misfit(format!(
            "{} byte(s) left after the value: it was not written under the derived schema",
            body.len() - input.at
        )));
    }
    Ok(())
}

struct Input<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Input<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], Misfit> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| misfit("the value's bytes end early"))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn long(&mut self) -> Result<i64, Misfit> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.take(1)?[0];
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok((v >> 1) as i64 ^ -((v & 1) as i64));
            }
        }
        Err(misfit("a varint longer than 10 bytes"))
    }

    fn len(&mut self) -> Result<usize, Misfit> {
        usize::try_from(self.long()?).map_err(|_| misfit("a negative length"))
    }
}

fn write_long(out: &mut Vec<u8>, v: i64) {
    crate::router::write_avro_long(out, v)
}

fn write_len_bytes(out: &mut Vec<u8>, b: &[u8]) {
    write_long(out, b.len() as i64);
    out.extend_from_slice(b);
}

struct Transcoder<'a> {
    w: &'a Parsed,
    r: &'a Parsed,
}

/// What a type is called in a refusal.
fn kind(n: &Node) -> String {
    match n {
        Node::Null => "null".into(),
        Node::Boolean => "boolean".into(),
        Node::Int => "int".into(),
        Node::Long => "long".into(),
        Node::Float => "float".into(),
        Node::Double => "double".into(),
        Node::Bytes => "bytes".into(),
        Node::String => "string".into(),
        Node::Fixed(n) => format!("fixed({n})"),
        Node::Enum { .. } => "enum".into(),
        Node::Array(_) => "array".into(),
        Node::Map(_) => "map".into(),
        Node::Union(_) => "union".into(),
        Node::Record { name, .. } => format!("record {name}"),
    }
}

impl Transcoder<'_> {
    /// Whether a writer value of type `w` can be written as reader type `r` (not a union).
    fn takes(&self, w: usize, r: usize) -> bool {
        use Node::*;
        match (self.w.node(w), self.r.node(r)) {
            (Null, Null) | (Boolean, Boolean) | (Int, Int) | (Long, Long) => true,
            (Float, Float) | (Double, Double) => true,
            (Int, Long | Float | Double) | (Long, Float | Double) | (Float, Double) => true,
            (Bytes | String, Bytes | String) => true,
            (Fixed(a), Fixed(b)) => a == b,
            (Enum { .. }, Enum { .. }) | (Array(_), Array(_)) | (Map(_), Map(_)) => true,
            (Record { .. }, Record { .. }) => true,
            _ => false,
        }
    }

    fn value(
        &self,
        w: usize,
        r: usize,
        input: &mut Input,
        out: &mut Vec<u8>,
    ) -> Result<(), Misfit> {
        use Node::*;
        if let Union(branches) = self.w.node(w) {
            let i = input.long()?;
            let branch = usize::try_from(i).ok().and_then(|i| branches.get(i));
            let branch = branch.ok_or_else(|| misfit(format!("union branch {i} out of range")))?;
            return self.value(*branch, r, input, out);
        }
        if let Union(branches) = self.r.node(r) {
            let found = branches.iter().position(|&b| self.takes(w, b));
            let Some(i) = found else {
                let wants: Vec<std::string::String> =
                    branches.iter().map(|&b| kind(self.r.node(b))).collect();
                return Err(misfit(format!(
                    "the value is a {}, the schema wants one of [{}]",
                    kind(self.w.node(w)),
                    wants.join(", ")
                )));
            };
            write_long(out, i as i64);
            return self.value(w, branches[i], input, out);
        }
        // The leaves: each writes what it read; the containers below return on their own.
        match (self.w.node(w), self.r.node(r)) {
            (Null, Null) => {}
            (Boolean, Boolean) => out.extend_from_slice(input.take(1)?),
            (Int, Int) | (Long, Long) | (Int, Long) => write_long(out, input.long()?),
            (Int | Long, Float) => out.extend_from_slice(&(input.long()? as f32).to_le_bytes()),
            (Int | Long, Double) => out.extend_from_slice(&(input.long()? as f64).to_le_bytes()),
            (Float, Float) => out.extend_from_slice(input.take(4)?),
            (Double, Double) => out.extend_from_slice(input.take(8)?),
            (Float, Double) => {
                let b: [u8; 4] = input.take(4)?.try_into().expect("4 bytes");
                out.extend_from_slice(&f64::from(f32::from_le_bytes(b)).to_le_bytes())
            }
            (Bytes | String, Bytes | String) => {
                let n = input.len()?;
                write_len_bytes(out, input.take(n)?)
            }
            (Fixed(a), Fixed(b)) if a == b => out.extend_from_slice(input.take(*a)?),
            (wn, rn) => return self.container(wn, rn, input, out),
        }
        Ok(())
    }

    /// Enums, arrays, maps and records, or a value the schema does not take.
    fn container(
        &self,
        wn: &Node,
        rn: &Node,
        input: &mut Input,
        out: &mut Vec<u8>,
    ) -> Result<(), Misfit> {
        use Node::*;
        match (wn, rn) {
            (Enum { symbols: ws, .. }, Enum { symbols: rs, default }) => {
                let i = input.long()?;
                let symbol = usize::try_from(i).ok().and_then(|i| ws.get(i));
                let symbol =
                    symbol.ok_or_else(|| misfit(format!("enum index {i} out of range")))?;
                let at = rs.iter().position(|s| s == symbol).or(*default);
                let at = at.ok_or_else(|| {
                    misfit(format!(
                        "{symbol} is not a symbol of the schema's enum [{}]",
                        rs.join(", ")
                    ))
                })?;
                write_long(out, at as i64);
                Ok(())
            }
            (Array(wi), Array(ri)) => {
                self.blocks(input, out, |t, input, out| t.value(*wi, *ri, input, out))
            }
            (Map(wv), Map(rv)) => self.blocks(input, out, |t, input, out| {
                let n = input.len()?;
                write_len_bytes(out, input.take(n)?);
                t.value(*wv, *rv, input, out)
            }),
            (Record { fields: wf, .. }, Record { fields: rf, .. }) => {
                // The value's fields, each written under the reader's type, in the writer's
                // order, straight into `out`; where each reader field's bytes are.
                let base = out.len();
                let mut spans: Vec<Option<(usize, usize)>> = vec![None; rf.len()];
                for f in wf {
                    let start = out.len();
                    match rf.iter().position(|r| r.name == f.name) {
                        Some(i) => {
                            self.value(f.ty, rf[i].ty, input, out).map_err(within(&f.name))?;
                            spans[i] = Some((start - base, out.len() - base));
                        }
                        None => {
                            // Read past it, leaving nothing behind.
                            self.skip(f.ty, input, out).map_err(within(&f.name))?;
                            out.truncate(start);
                        }
                    }
                }
                // Already in the reader's order when every field came, in order: the usual case
                // of a contract that lists the value's fields as the value does.
                let mut end = 0;
                let in_order = spans.iter().all(|span| match span {
                    Some((start, stop)) if *start == end => {
                        end = *stop;
                        true
                    }
                    _ => false,
                });
                if in_order {
                    return Ok(());
                }
                let written = out.split_off(base);
                for (field, span) in rf.iter().zip(spans) {
                    match (span, &field.default) {
                        (Some((start, stop)), _) => out.extend_from_slice(&written[start..stop]),
                        (None, Some(default)) => write_default(self.r, field.ty, default, out)
                            .map_err(within(&field.name))?,
                        (None, None) => {
                            return Err(within(&field.name)(misfit(
                                "required by the schema (it has no default), and the value has no such field",
                            )))
                        }
                    }
                }
                Ok(())
            }
            (wn, rn) => {
                Err(misfit(format!("the value is a {}, the schema wants a {}", kind(wn), kind(rn))))
            }
        }
    }

    /// Array and map blocks: a count, its items, until a count of 0 (a negative count is
    /// followed by the block's size in bytes).
    fn blocks(
        &self,
        input: &mut Input,
        out: &mut Vec<u8>,
        mut item: impl FnMut(&Self, &mut Input, &mut Vec<u8>) -> Result<(), Misfit>,
    ) -> Result<(), Misfit> {
        loop {
            let count = input.long()?;
            if count == 0 {
                out.push(0);
                return Ok(());
            }
            if count < 0 {
                input.long()?;
            }
            write_long(out, count.unsigned_abs() as i64);
            for _ in 0..count.unsigned_abs() {
                item(self, input, out)?;
            }
        }
    }

    /// Reads past a value of writer type `w`, written to `scratch` (the caller truncates it).
    fn skip(&self, w: usize, input: &mut Input, scratch: &mut Vec<u8>) -> Result<(), Misfit> {
        let same = Transcoder { w: self.w, r: self.w };
        same.value(w, w, input, scratch)
    }
}

/// A field's JSON `default` as Avro binary under reader type `r` (a union's default is its first
/// branch's, as the specification says).
fn write_default(p: &Parsed, r: usize, d: &Value, out: &mut Vec<u8>) -> Result<(), Misfit> {
    let bad =
        || misfit(format!("the schema's default {d} does not fit its type {}", kind(p.node(r))));
    match (p.node(r), d) {
        (Node::Union(b), _) => {
            out.push(0);
            return write_default(p, b[0], d, out);
        }
        (Node::Null, Value::Null) => {}
        (Node::Boolean, Value::Bool(b)) => out.push(u8::from(*b)),
        (Node::Int | Node::Long, Value::Number(n)) => write_long(out, n.as_i64().ok_or_else(bad)?),
        (Node::Float, Value::Number(n)) => {
            out.extend_from_slice(&(n.as_f64().ok_or_else(bad)? as f32).to_le_bytes())
        }
        (Node::Double, Value::Number(n)) => {
            out.extend_from_slice(&n.as_f64().ok_or_else(bad)?.to_le_bytes())
        }
        (Node::String, Value::String(s)) => write_len_bytes(out, s.as_bytes()),
        // Bytes and fixed defaults are strings of code points 0–255, one per byte.
        (Node::Bytes | Node::Fixed(_), Value::String(s)) => {
            let bytes: Option<Vec<u8>> =
                s.chars().map(|c| u8::try_from(u32::from(c)).ok()).collect();
            let bytes = bytes.ok_or_else(bad)?;
            match p.node(r) {
                Node::Fixed(n) if bytes.len() != *n => return Err(bad()),
                Node::Fixed(_) => out.extend_from_slice(&bytes),
                _ => write_len_bytes(out, &bytes),
            }
        }
        (Node::Enum { symbols, .. }, Value::String(s)) => {
            let i = symbols.iter().position(|x| x == s).ok_or_else(bad)?;
            write_long(out, i as i64)
        }
        (Node::Array(items), Value::Array(list)) => {
            if !list.is_empty() {
                write_long(out, list.len() as i64);
                for v in list {
                    write_default(p, *items, v, out)?;
                }
            }
            out.push(0)
        }
        (Node::Map(values), Value::Object(map)) => {
            if !map.is_empty() {
                write_long(out, map.len() as i64);
                for (k, v) in map {
                    write_len_bytes(out, k.as_bytes());
                    write_default(p, *values, v, out)?;
                }
            }
            out.push(0)
        }
        (Node::Record { fields, .. }, Value::Object(map)) => {
            for f in fields {
                let v = map.get(&f.name).or(f.default.as_ref()).ok_or_else(bad)?;
                write_default(p, f.ty, v, out).map_err(within(&f.name))?;
            }
        }
        _ => return Err(bad()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long(v: i64) -> Vec<u8> {
        let mut out = Vec::new();
        write_long(&mut out, v);
        out
    }

    fn string(s: &str) -> Vec<u8> {
        let mut out = long(s.len() as i64);
        out.extend_from_slice(s.as_bytes());
        out
    }

    fn run(writer: &str, reader: &str, body: &[u8]) -> Result<Vec<u8>, Misfit> {
        let (w, r) = (Parsed::parse(writer).unwrap(), Parsed::parse(reader).unwrap());
        let mut out = Vec::new();
        transcode(&w, &r, body, &mut out).map(|()| out)
    }

    const DERIVED: &str = r#"{"type":"record","name":"ConnectDefault","namespace":"io.confluent.connect.avro","fields":[
        {"name":"id","type":["null","string"],"default":null},
        {"name":"qty","type":["null","int"],"default":null},
        {"name":"note","type":["null","string"],"default":null}]}"#;

    #[test]
    fn fields_are_matched_by_name_reordered_widened_and_defaulted() {
        let reader = r#"{"type":"record","name":"OrderCreated","namespace":"com.acme","fields":[
            {"name":"qty","type":"long"},
            {"name":"id","type":"string"},
            {"name":"currency","type":"string","default":"EUR"}]}"#;
        // id = "o-1", qty = 3, note = null
        let body = [vec![2], string("o-1"), vec![2], long(3), vec![0]].concat();
        let out = run(DERIVED, reader, &body).unwrap();
        assert_eq!(out, [long(3), string("o-1"), string("EUR")].concat());
    }

    #[test]
    fn a_required_field_the_value_lacks_is_named_and_so_is_a_wrong_type() {
        let reader = r#"{"type":"record","name":"R","fields":[
            {"name":"id","type":"string"},{"name":"customer","type":"string"}]}"#;
        let body = [vec![2], string("o-1"), vec![0], vec![0]].concat();
        let e = run(DERIVED, reader, &body).unwrap_err();
        assert_eq!(e.path, ["customer"]);
        assert!(e.to_string().contains("required"), "{e}");
        // A null where the schema wants a string.
        let reader = r#"{"type":"record","name":"R","fields":[{"name":"note","type":"string"}]}"#;
        let body = [vec![2], string("o-1"), vec![0], vec![0]].concat();
        let e = run(DERIVED, reader, &body).unwrap_err();
        assert_eq!(e.to_string(), "field `note`: the value is a null, the schema wants a string");
    }

    #[test]
    fn nested_records_arrays_maps_and_enums_carry_over() {
        let writer = r#"{"type":"record","name":"W","fields":[
            {"name":"lines","type":{"type":"array","items":{"type":"record","name":"L","fields":[
                {"name":"sku","type":"string"},{"name":"n","type":"int"}]}}},
            {"name":"attrs","type":{"type":"map","values":"float"}},
            {"name":"state","type":{"type":"enum","name":"S","symbols":["NEW","PAID"]}}]}"#;
        let reader = r#"{"type":"record","name":"R","fields":[
            {"name":"state","type":{"type":"enum","name":"S2","symbols":["PAID","NEW"]}},
            {"name":"attrs","type":{"type":"map","values":"double"}},
            {"name":"lines","type":{"type":"array","items":{"type":"record","name":"L2","fields":[
                {"name":"n","type":"long"},{"name":"sku","type":"string"}]}}}]}"#;
        let body = [
            long(1),
            string("a"),
            long(2),
            vec![0],
            long(1),
            string("k"),
            1.5f32.to_le_bytes().to_vec(),
            vec![0],
            long(1),
        ]
        .concat();
        let out = run(writer, reader, &body).unwrap();
        let want = [
            long(0),
            long(1),
            string("k"),
            1.5f64.to_le_bytes().to_vec(),
            vec![0],
            long(1),
            long(2),
            string("a"),
            vec![0],
        ]
        .concat();
        assert_eq!(out, want);
        let deep = r#"{"type":"record","name":"R","fields":[
            {"name":"lines","type":{"type":"array","items":{"type":"record","name":"L2","fields":[
                {"name":"sku","type":"int"}]}}}]}"#;
        let e = run(writer, deep, &body).unwrap_err();
        assert_eq!(e.path, ["lines", "sku"]);
    }

    #[test]
    fn a_field_the_schema_lacks_is_left_out_between_the_ones_it_keeps() {
        let reader = r#"{"type":"record","name":"R","fields":[
            {"name":"id","type":["null","string"]},{"name":"note","type":["null","string"]}]}"#;
        let body = [vec![2], string("o-1"), vec![2], long(3), vec![2], string("n")].concat();
        let out = run(DERIVED, reader, &body).unwrap();
        assert_eq!(out, [vec![2], string("o-1"), vec![2], string("n")].concat());
    }

    #[test]
    fn the_same_schema_gives_the_same_bytes_and_garbage_is_refused() {
        let body = [vec![2], string("o-1"), vec![0], vec![2], string("n")].concat();
        assert_eq!(run(DERIVED, DERIVED, &body).unwrap(), body);
        assert!(run(DERIVED, DERIVED, &body[..3]).is_err());
        assert!(run(DERIVED, DERIVED, &[body.clone(), vec![7]].concat()).is_err());
    }
}
