//! `use_latest_version` with Protobuf values: a value the router wrote under the `.proto` it
//! derives (fields numbered 1, 2, … in the Connect struct's order) rewritten under the subject's
//! latest registered `.proto`, a team's contract with its own numbers.
//!
//! Confluent's serializer with `use.latest.version` frames the value with the latest schema's id
//! and with the message indexes of the message in it that has the value's message's name
//! (`ProtobufSchema.toMessageIndexes`: each part of the full name looked up among the messages
//! of the level reached so far, parts no message has skipped; none found is the first message).
//! walrelay picks the registered message the same way ([`pick`]). Confluent then writes the
//! value's bytes under the derived numbering, which a reader of the contract misreads when its
//! numbers differ; walrelay writes them under the contract's: each field of the value goes to
//! the registered field of the same name, with its number, recursively through nested messages.
//!
//! What does not fit is refused when a value has it, naming the field's path: a field the
//! registered message lacks, a type that differs (string against int64, a message against a
//! scalar, repeated against singular; an int32 is taken as an int64, an integer as a double or
//! float, as Avro's resolution widens them), a proto2 `required` field the value lacks. proto3
//! writes neither a null nor a default value (0, "", false), so a field is judged only when a
//! value has it, and a field of the contract the value lacks is simply absent: proto3 has no
//! required fields.
//!
//! Both texts are compiled once per plan (protox, in memory); per record, one pass over the
//! value's bytes, keys rewritten, payloads copied. A contract that numbers every field as the
//! value does is a copy of the bytes.

use prost_reflect::{Cardinality, FieldDescriptor, FileDescriptor, Kind, MessageDescriptor};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};

use super::resolve::Misfit;
use crate::router::{protobuf_delimited as delimited, protobuf_varint as varint};

/// A `.proto` text, compiled with the `google/protobuf/*.proto` files it imports.
pub struct ProtoFile {
    file: FileDescriptor,
}

/// The name the compiled text goes by (imports are resolved against it).
const FILE_NAME: &str = "subject.proto";

impl ProtoFile {
    /// Compiles `text`; an import walrelay cannot resolve is refused naming it.
    pub fn parse(text: &str) -> Result<ProtoFile, String> {
        let parsed =
            File::from_source(FILE_NAME, text).map_err(|e| format!("it is not a .proto: {e}"))?;
        let google = GoogleFileResolver::new();
        for import in &parsed.file_descriptor_proto().dependency {
            if google.open_file(import).is_err() {
                return Err(format!(
                    "it imports \"{import}\", which walrelay cannot resolve: only the \
                     google/protobuf/*.proto well-known files are (a schema's registry \
                     references are not followed); define those messages in the subject's \
                     .proto itself"
                ));
            }
        }
        let mut resolver = ChainFileResolver::new();
        resolver.add(OneFile(parsed));
        resolver.add(google);
        let mut compiler = protox::Compiler::with_file_resolver(resolver);
        compiler.open_file(FILE_NAME).map_err(|e| format!("it is not a valid .proto: {e}"))?;
        let file = compiler.descriptor_pool().get_file_by_name(FILE_NAME).expect("just compiled");
        if file.messages().len() == 0 {
            return Err("it defines no message".into());
        }
        Ok(ProtoFile { file })
    }
}

/// The subject's text, as protox's compiler opens files.
struct OneFile(File);

impl FileResolver for OneFile {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        match name == FILE_NAME {
            true => Ok(self.0.clone()),
            false => Err(protox::Error::file_not_found(name)),
        }
    }
}

/// How values of a derived `.proto` are rewritten under a registered one.
pub struct ProtoContract {
    /// Per top-level message of the derived file, by its index there (the value's message
    /// index): several for `google/protobuf/wrappers.proto`, whose text is the same for every
    /// wrapper.
    roots: Vec<Root>,
}

struct Root {
    /// The registered message's indexes, encoded as they are framed.
    indexes: Vec<u8>,
    message: Message,
}

/// One derived message fitted to one registered message.
struct Message {
    /// By the value's field number (the derived numbering starts at 1; 0 is never one).
    fields: Vec<Option<Field>>,
    /// Every field keeps its number and its bytes, and the contract requires nothing: the
    /// value's bytes are the contract's.
    same: bool,
    /// proto2 `required` fields of the registered message: their name, and the value's field
    /// that fills them, if it has one.
    required: Vec<(String, Option<u32>)>,
}

struct Field {
    /// The value's name for it, for a misfit's path.
    name: String,
    fit: FieldFit,
}

enum FieldFit {
    /// The same bytes under the registered number.
    Renumber(u32),
    /// An integer (varint) written as a double or a float, under the registered number.
    Widen { number: u32, to_double: bool },
    /// A nested message, rewritten field by field.
    Message { number: u32, message: Box<Message> },
    /// Why a value with this field does not fit.
    Refuse(String),
}

impl ProtoContract {
    /// Fits every message of `derived` (the value's text) to the message of `registered`
    /// Confluent's serializer would pick for it. Misfits are kept, and said when a value has the
    /// field.
    pub fn fit(derived: &ProtoFile, registered: &ProtoFile) -> ProtoContract {
        let roots = derived
            .file
            .messages()
            .map(|d| {
                let (path, r) = pick(&registered.file, d.full_name());
                Root { indexes: encode_indexes(&path), message: fit_message(&d, &r) }
            })
            .collect();
        ProtoContract { roots }
    }

    /// Writes `value` (the message indexes, then the body, as the router wrote them) to `out`
    /// under the contract: its message indexes, then the body with the contract's numbers.
    pub fn transcode(&self, value: &[u8], out: &mut Vec<u8>) -> Result<(), Misfit> {
        let mut input = Input { bytes: value, at: 0 };
        let index = match input.zigzag()? {
            0 => 0,
            1 => input.zigzag()?,
            n => return Err(misfit(format!("{n} message indexes: walrelay writes one"))),
        };
        let root = usize::try_from(index).ok().and_then(|i| self.roots.get(i));
        let root = root.ok_or_else(|| misfit(format!("message index {index} out of range")))?;
        out.extend_from_slice(&root.indexes);
        root.message.rewrite(&value[input.at..], out)
    }
}

/// The registered message Confluent's `toMessageIndexes(name)` picks for a value's message of
/// full name `name`, and its index path.
fn pick(file: &FileDescriptor, name: &str) -> (Vec<usize>, MessageDescriptor) {
    let mut level: Vec<MessageDescriptor> = file.messages().collect();
    let mut path = Vec::new();
    let mut found = None;
    for part in name.split('.') {
        if let Some(i) = level.iter().position(|m| m.name() == part) {
            path.push(i);
            let m = level[i].clone();
            // A map field's entry is a nested message in a descriptor, not in the text
            // Confluent indexes.
            level = m.child_messages().filter(|c| !c.is_map_entry()).collect();
            found = Some(m);
        }
    }
    match found {
        Some(m) => (path, m),
        None => (vec![0], file.messages().next().expect("a file with messages")),
    }
}

/// Confluent's framing of message indexes: their count and each, zig-zag varints; `[0]`, the
/// first message, is the single byte 0.
fn encode_indexes(path: &[usize]) -> Vec<u8> {
    if path == [0] {
        return vec![0];
    }
    let mut out = Vec::new();
    varint(&mut out, (path.len() as u64) << 1);
    for &i in path {
        varint(&mut out, (i as u64) << 1);
    }
    out
}

fn fit_message(d: &MessageDescriptor, r: &MessageDescriptor) -> Message {
    let mut fields: Vec<Option<Field>> = Vec::new();
    let mut same = true;
    for f in d.fields() {
        let fit = match r.get_field_by_name(f.name()) {
            None => FieldFit::Refuse(format!(
                "the contract's message {} has no such field",
                r.full_name()
            )),
            Some(rf) => fit_field(&f, &rf),
        };
        same &= match &fit {
            FieldFit::Renumber(n) => *n == f.number(),
            FieldFit::Message { number, message } => *number == f.number() && message.same,
            _ => false,
        };
        let at = f.number() as usize;
        if fields.len() <= at {
            fields.resize_with(at + 1, || None);
        }
        fields[at] = Some(Field { name: f.name().to_string(), fit });
    }
    let required: Vec<(String, Option<u32>)> = r
        .fields()
        .filter(|rf| rf.cardinality() == Cardinality::Required)
        .map(|rf| (rf.name().to_string(), d.get_field_by_name(rf.name()).map(|f| f.number())))
        .collect();
    same &= required.is_empty();
    Message { fields, same, required }
}

fn fit_field(d: &FieldDescriptor, r: &FieldDescriptor) -> FieldFit {
    let number = r.number();
    // A proto2 group is delimited by start and end keys, not a length: not a message's bytes.
    if r.is_map() || r.is_group() || d.is_list() != r.is_list() {
        return differs(d, r);
    }
    match (d.kind(), r.kind()) {
        (Kind::Message(dm), Kind::Message(rm)) => {
            FieldFit::Message { number, message: Box::new(fit_message(&dm, &rm)) }
        }
        (a, b) if scalar(&a).is_some() && scalar(&a) == scalar(&b) => FieldFit::Renumber(number),
        // The same varint: an int32 is written as a 64-bit two's complement.
        (Kind::Int32, Kind::Int64) => FieldFit::Renumber(number),
        (Kind::Int32 | Kind::Int64, Kind::Double) => FieldFit::Widen { number, to_double: true },
        (Kind::Int32 | Kind::Int64, Kind::Float) => FieldFit::Widen { number, to_double: false },
        _ => differs(d, r),
    }
}

fn differs(d: &FieldDescriptor, r: &FieldDescriptor) -> FieldFit {
    FieldFit::Refuse(format!(
        "the value's field is {}, the contract's ({} = {}) is {}",
        type_name(d),
        r.full_name(),
        r.number(),
        type_name(r)
    ))
}

/// A scalar kind's name, `None` for a message or an enum.
fn scalar(kind: &Kind) -> Option<&'static str> {
    Some(match kind {
        Kind::Double => "double",
        Kind::Float => "float",
        Kind::Int32 => "int32",
        Kind::Int64 => "int64",
        Kind::Uint32 => "uint32",
        Kind::Uint64 => "uint64",
        Kind::Sint32 => "sint32",
        Kind::Sint64 => "sint64",
        Kind::Fixed32 => "fixed32",
        Kind::Fixed64 => "fixed64",
        Kind::Sfixed32 => "sfixed32",
        Kind::Sfixed64 => "sfixed64",
        Kind::Bool => "bool",
        Kind::String => "string",
        Kind::Bytes => "bytes",
        Kind::Message(_) | Kind::Enum(_) => return None,
    })
}

/// A field's type as a .proto writes it: `repeated int64`, `message acme.Line`, `map<…>`.
fn type_name(f: &FieldDescriptor) -> String {
    if f.is_map() || f.is_group() {
        return if f.is_map() { "a map" } else { "a group" }.into();
    }
    let kind = f.kind();
    let ty = match (&kind, scalar(&kind)) {
        (_, Some(s)) => s.to_string(),
        (Kind::Message(m), _) => format!("message {}", m.full_name()),
        (Kind::Enum(e), _) => format!("enum {}", e.full_name()),
        _ => unreachable!("scalar() names the rest"),
    };
    match f.is_list() {
        true => format!("repeated {ty}"),
        false => ty,
    }
}

impl Message {
    /// Writes `body` (this message's fields, derived numbering) to `out` under the contract's.
    fn rewrite(&self, body: &[u8], out: &mut Vec<u8>) -> Result<(), Misfit> {
        if self.same {
            out.extend_from_slice(body);
            return Ok(());
        }
        let mut seen: Vec<u32> = Vec::new();
        let mut input = Input { bytes: body, at: 0 };
        while input.at < body.len() {
            let key = input.varint()?;
            let (number, wire) = ((key >> 3) as u32, (key & 7) as u8);
            let field = self.fields.get(number as usize).and_then(Option::as_ref);
            let field = field.ok_or_else(|| {
                misfit(format!(
                    "field number {number} is not the derived schema's: the value was not \
                     written under it"
                ))
            })?;
            if !self.required.is_empty() {
                seen.push(number);
            }
            let within = |mut m: Misfit| {
                m.path.insert(0, field.name.clone());
                m
            };
            match &field.fit {
                FieldFit::Refuse(why) => return Err(within(misfit(why.clone()))),
                FieldFit::Renumber(n) => {
                    key_to(out, *n, wire);
                    let start = input.at;
                    input.skip(wire)?;
                    out.extend_from_slice(&body[start..input.at]);
                }
                FieldFit::Widen { number, to_double } => {
                    widen(&mut input, wire, *number, *to_double, out).map_err(within)?
                }
                FieldFit::Message { number, message } => {
                    if wire != 2 {
                        return Err(within(misfit(format!("wire type {wire} for a message"))));
                    }
                    let n = input.len()?;
                    let inner = input.take(n)?;
                    key_to(out, *number, 2);
                    delimited(out, |out| message.rewrite(inner, out)).map_err(within)?;
                }
            }
        }
        for (name, from) in &self.required {
            if !from.is_some_and(|n| seen.contains(&n)) {
                return Err(Misfit {
                    path: vec![name.clone()],
                    what: "required by the contract (proto2 `required`), and the value has no \
                           such field, or it is at its default, which proto3 does not write"
                        .into(),
                });
            }
        }
        Ok(())
    }
}

/// An integer field (a varint, or packed varints) written as doubles or floats.
fn widen(
    input: &mut Input,
    wire: u8,
    number: u32,
    to_double: bool,
    out: &mut Vec<u8>,
) -> Result<(), Misfit> {
    let write = |out: &mut Vec<u8>, v: u64| match to_double {
        true => out.extend_from_slice(&(v as i64 as f64).to_le_bytes()),
        false => out.extend_from_slice(&(v as i64 as f32).to_le_bytes()),
    };
    match wire {
        0 => {
            key_to(out, number, if to_double { 1 } else { 5 });
            write(out, input.varint()?);
            Ok(())
        }
        2 => {
            let n = input.len()?;
            let mut packed = Input { bytes: input.take(n)?, at: 0 };
            key_to(out, number, 2);
            delimited(out, |out| {
                while packed.at < packed.bytes.len() {
                    write(out, packed.varint()?);
                }
                Ok(())
            })
        }
        _ => Err(misfit(format!("wire type {wire} for an integer"))),
    }
}

fn misfit(what: impl Into<String>) -> Misfit {
    Misfit { path: Vec::new(), what: what.into() }
}

struct Input<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Input<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Misfit> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| misfit("the value's bytes end early"))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn varint(&mut self) -> Result<u64, Misfit> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.take(1)?[0];
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(misfit("a varint longer than 10 bytes"))
    }

    fn zigzag(&mut self) -> Result<i64, Misfit> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    fn len(&mut self) -> Result<usize, Misfit> {
        usize::try_from(self.varint()?).map_err(|_| misfit("a length beyond memory"))
    }

    /// Past one field's payload of wire type `wire`.
    fn skip(&mut self, wire: u8) -> Result<(), Misfit> {
        match wire {
            0 => self.varint().map(drop),
            1 => self.take(8).map(drop),
            2 => {
                let n = self.len()?;
                self.take(n).map(drop)
            }
            5 => self.take(4).map(drop),
            w => Err(misfit(format!("wire type {w}, which proto3 does not write"))),
        }
    }
}

fn key_to(out: &mut Vec<u8>, number: u32, wire: u8) {
    varint(out, (u64::from(number) << 3) | u64::from(wire));
}

#[cfg(test)]
#[path = "proto_contract_tests.rs"]
mod tests;
