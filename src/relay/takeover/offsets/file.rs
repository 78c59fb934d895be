//! Kafka's `FileOffsetBackingStore` file (`offset.storage.file.filename`, the embedded engine's
//! and Debezium Server's offset store): one Java-serialized `java.util.HashMap<byte[], byte[]>`
//! (`FileOffsetBackingStore.save` turns its `ByteBuffer`s into arrays before `writeObject`).
//!
//! Only what `ObjectOutputStream` writes for that one object is read (Java Object
//! Serialization Specification §6.4): the HashMap's class descriptor and fields, its
//! `writeObject` block (buckets, size), then `size` key/value pairs, each a `byte[]` or null.
//! Anything else is refused rather than guessed at.

use super::Entries;

const MAGIC: [u8; 4] = [0xAC, 0xED, 0x00, 0x05];
const TC_NULL: u8 = 0x70;
const TC_REFERENCE: u8 = 0x71;
const TC_CLASSDESC: u8 = 0x72;
const TC_OBJECT: u8 = 0x73;
const TC_STRING: u8 = 0x74;
const TC_ARRAY: u8 = 0x75;
const TC_BLOCKDATA: u8 = 0x77;
const TC_ENDBLOCKDATA: u8 = 0x78;
const BASE_HANDLE: u32 = 0x7E_0000;

/// A class descriptor, as far as reading its instances needs.
#[derive(Clone)]
struct ClassDesc {
    name: String,
    /// The primitive fields' type codes, in stream order.
    fields: Vec<u8>,
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    /// Objects by handle: only class descriptors are ever referenced back here.
    handles: Vec<Option<ClassDesc>>,
}

/// Reads the file's bytes.
pub fn parse(bytes: &[u8]) -> Result<Entries, String> {
    let mut r = Reader { bytes, at: 0, handles: Vec::new() };
    if r.take(4)? != MAGIC {
        return Err("not a Java serialization stream (no AC ED 00 05 header)".into());
    }
    if r.u8()? != TC_OBJECT {
        return Err("the stream does not start with an object".into());
    }
    let class = r.class_desc()?.ok_or("the object has no class")?;
    if class.name != "java.util.HashMap" {
        return Err(format!("expected a java.util.HashMap, found {}", class.name));
    }
    r.handles.push(None); // the map itself
    for code in &class.fields {
        r.take(primitive_size(*code)?)?;
    }
    // writeObject's own data: a block with the bucket count and the size.
    if r.u8()? != TC_BLOCKDATA || r.u8()? != 8 {
        return Err("the HashMap's size block is missing".into());
    }
    r.take(4)?;
    let size = r.i32()?;
    let size = usize::try_from(size).map_err(|_| format!("negative HashMap size {size}"))?;
    let mut entries = Vec::with_capacity(size.min(1024));
    for _ in 0..size {
        let key = r.byte_array()?;
        let value = r.byte_array()?;
        entries.push((key, value));
    }
    if r.u8()? != TC_ENDBLOCKDATA {
        return Err("the HashMap's entries do not end where its size says".into());
    }
    Ok(entries)
}

fn primitive_size(code: u8) -> Result<usize, String> {
    Ok(match code {
        b'B' | b'Z' => 1,
        b'C' | b'S' => 2,
        b'F' | b'I' => 4,
        b'D' | b'J' => 8,
        other => return Err(format!("unexpected field type {:?}", other as char)),
    })
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.bytes.len());
        let end = end.ok_or_else(|| format!("the file ends early (at byte {})", self.at))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, String> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Result<i32, String> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn utf(&mut self) -> Result<String, String> {
        let n = self.u16()? as usize;
        // Modified UTF-8; class and field names here are ASCII.
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }

    /// `classDesc`: a new descriptor, a reference to one, or null.
    fn class_desc(&mut self) -> Result<Option<ClassDesc>, String> {
        match self.u8()? {
            TC_NULL => Ok(None),
            TC_REFERENCE => {
                let handle = self.i32()? as u32;
                let index = handle.wrapping_sub(BASE_HANDLE) as usize;
                match self.handles.get(index) {
                    Some(Some(desc)) => Ok(Some(desc.clone())),
                    _ => Err(format!("a reference to unknown handle {handle:#x}")),
                }
            }
            TC_CLASSDESC => {
                let name = self.utf()?;
                self.take(8)?; // serialVersionUID
                let handle = self.handles.len();
                self.handles.push(None);
                let _flags = self.u8()?;
                let mut fields = Vec::new();
                for _ in 0..self.u16()? {
                    let code = self.u8()?;
                    let _name = self.utf()?;
                    match code {
                        b'[' | b'L' => return Err(format!("{name} has an object field")),
                        _ => fields.push(code),
                    }
                }
                if self.u8()? != TC_ENDBLOCKDATA {
                    return Err(format!("{name} carries class annotations"));
                }
                if self.class_desc()?.is_some() {
                    return Err(format!("{name} has a serializable superclass"));
                }
                let desc = ClassDesc { name, fields };
                self.handles[handle] = Some(desc.clone());
                Ok(Some(desc))
            }
            TC_STRING => Err("a string where a class was expected".into()),
            other => Err(format!("unexpected type code {other:#04x} at byte {}", self.at - 1)),
        }
    }

    /// A `byte[]` entry or null.
    fn byte_array(&mut self) -> Result<Option<Vec<u8>>, String> {
        match self.u8()? {
            TC_NULL => Ok(None),
            TC_ARRAY => {
                let class = self.class_desc()?.ok_or("an array without a class")?;
                if class.name != "[B" {
                    return Err(format!("expected byte[] entries, found {}", class.name));
                }
                self.handles.push(None);
                let n = self.i32()?;
                let n = usize::try_from(n).map_err(|_| format!("negative array length {n}"))?;
                Ok(Some(self.take(n)?.to_vec()))
            }
            other => Err(format!("expected a byte[] entry, found type code {other:#04x}")),
        }
    }
}
