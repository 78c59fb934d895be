//! walrelay's own sections on serde: a section's flattened options (`key → text`, from the file
//! and the environment alike) deserialize into a `#[serde(deny_unknown_fields)]` struct.
//!
//! The deserializer is ours rather than toml's so that an error knows its key and never holds
//! the value: serde's default wording (`invalid type: string "…", expected …`) would print it,
//! and a value may be a password. Values are text because the environment overlay can only
//! give text and because `linger.ms = 5` and `linger.ms = "5"` mean the same in every section.

use std::fmt;

use serde::de::{self, DeserializeOwned, IntoDeserializer, MapAccess, Visitor};

use super::{ConfigError, Options};

/// Deserializes `section`'s options into `T`. Unknown keys, and values of the wrong type, are
/// [`ConfigError`]s naming the key.
pub(crate) fn from_options<T: DeserializeOwned>(
    section: &'static str,
    opts: &Options,
) -> Result<T, ConfigError> {
    T::deserialize(SectionDeserializer { opts }).map_err(|e| e.into_config_error(section, opts))
}

/// The keys `T` accepts, as its serde derive declares them: the derive hands its field names to
/// `deserialize_struct`, where a probe takes them and stops.
pub(crate) fn keys_of<T: DeserializeOwned>() -> &'static [&'static str] {
    let fields = std::cell::Cell::new(&[][..]);
    let _ = T::deserialize(KeyProbe(&fields));
    fields.get()
}

struct KeyProbe<'a>(&'a std::cell::Cell<&'static [&'static str]>);

impl<'de> de::Deserializer<'de> for KeyProbe<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Error> {
        Err(Error::invalid("not a section struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Error> {
        self.0.set(fields);
        Err(Error::invalid("keys taken"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// A deserialization failure, value-free by construction.
#[derive(Debug)]
pub(crate) struct Error {
    key: Option<String>,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Unknown { expected: &'static [&'static str] },
    Missing,
    Invalid(String),
}

impl Error {
    fn invalid(reason: impl Into<String>) -> Error {
        Error { key: None, kind: Kind::Invalid(reason.into()) }
    }

    fn at(mut self, key: &str) -> Error {
        self.key.get_or_insert_with(|| key.to_string());
        self
    }

    fn into_config_error(self, section: &'static str, opts: &Options) -> ConfigError {
        let key = self.key.unwrap_or_default();
        match self.kind {
            Kind::Unknown { expected } => ConfigError::UnknownKey {
                section,
                key,
                hint: format!("known keys: {}", expected.join(", ")),
            },
            Kind::Missing => {
                ConfigError::Missing { section, key, hint: "set it in the section".into() }
            }
            Kind::Invalid(reason) => {
                let value = opts.get(&key).cloned().unwrap_or_default();
                ConfigError::InvalidValue { section, key, value, reason }
            }
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = self.key.as_deref().unwrap_or("?");
        match &self.kind {
            Kind::Unknown { .. } => write!(f, "unknown key `{key}`"),
            Kind::Missing => write!(f, "missing key `{key}`"),
            Kind::Invalid(reason) => write!(f, "`{key}` {reason}"),
        }
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Error {
        Error::invalid(msg.to_string())
    }

    // The overrides below keep the value (`unexp`, `variant`) out of the message.
    fn invalid_type(_unexp: de::Unexpected, exp: &dyn de::Expected) -> Error {
        Error::invalid(format!("must be {exp}"))
    }

    fn invalid_value(_unexp: de::Unexpected, exp: &dyn de::Expected) -> Error {
        Error::invalid(format!("must be {exp}"))
    }

    fn invalid_length(_len: usize, exp: &dyn de::Expected) -> Error {
        Error::invalid(format!("must be {exp}"))
    }

    fn unknown_variant(_variant: &str, expected: &'static [&'static str]) -> Error {
        Error::invalid(format!("must be one of {}", expected.join(", ")))
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Error {
        Error { key: Some(field.to_string()), kind: Kind::Unknown { expected } }
    }

    fn missing_field(field: &'static str) -> Error {
        Error { key: Some(field.to_string()), kind: Kind::Missing }
    }

    fn duplicate_field(field: &'static str) -> Error {
        Error::invalid("is set twice").at(field)
    }
}

struct SectionDeserializer<'a> {
    opts: &'a Options,
}

impl<'de> de::Deserializer<'de> for SectionDeserializer<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_map(Entries { entries: self.opts.iter(), key: None, value: None })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier
        ignored_any
    }
}

struct Entries<'a> {
    entries: std::collections::btree_map::Iter<'a, String, String>,
    key: Option<&'a str>,
    value: Option<&'a str>,
}

impl<'de> MapAccess<'de> for Entries<'_> {
    type Error = Error;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.entries.next() else { return Ok(None) };
        self.key = Some(key);
        self.value = Some(value);
        let deserializer: de::value::StrDeserializer<'_, Error> = key.as_str().into_deserializer();
        seed.deserialize(deserializer).map(Some).map_err(|e| e.at(key))
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let key = self.key.unwrap_or_default();
        let text = self.value.take().unwrap_or_default();
        seed.deserialize(Text(text)).map_err(|e| e.at(key))
    }
}

/// One option's text, read as the type the field asks for.
struct Text<'a>(&'a str);

impl Text<'_> {
    fn number<T: std::str::FromStr>(&self) -> Result<T, Error> {
        self.0.trim().parse().map_err(|_| Error::invalid("must be a non-negative whole number"))
    }
}

macro_rules! unsigned {
    ($($method:ident => $visit:ident: $ty:ty),*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            visitor.$visit(self.number::<$ty>()?)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for Text<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_string(self.0.to_string())
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0.trim() {
            "true" => visitor.visit_bool(true),
            "false" => visitor.visit_bool(false),
            _ => Err(Error::invalid("must be true or false")),
        }
    }

    unsigned!(
        deserialize_u8 => visit_u8: u8,
        deserialize_u16 => visit_u16: u16,
        deserialize_u32 => visit_u32: u32,
        deserialize_u64 => visit_u64: u64
    );

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        i8 i16 i32 i64 i128 u128 f32 f64 char str string bytes byte_buf unit unit_struct seq
        tuple tuple_struct map struct enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Sample {
        name: Option<String>,
        count: Option<u64>,
        on: Option<bool>,
    }

    fn opts(pairs: &[(&str, &str)]) -> Options {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn section_text_deserializes_into_typed_fields() {
        let s: Sample =
            from_options("x", &opts(&[("name", "a"), ("count", " 7 "), ("on", "true")])).unwrap();
        assert_eq!(s, Sample { name: Some("a".into()), count: Some(7), on: Some(true) });
        let empty: Sample = from_options("x", &Options::new()).unwrap();
        assert_eq!(empty, Sample { name: None, count: None, on: None });
        assert_eq!(keys_of::<Sample>(), ["name", "count", "on"]);
    }

    #[test]
    fn section_errors_name_the_key_and_never_the_value() {
        let e = from_options::<Sample>("x", &opts(&[("nmae", "hunter2")])).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("[x] unknown key `nmae`") && text.contains("name, count, on"),
            "{text}"
        );
        assert!(!text.contains("hunter2"), "{text}");
        let e = from_options::<Sample>("x", &opts(&[("count", "many")])).unwrap_err();
        assert!(matches!(&e, ConfigError::InvalidValue { key, .. } if key == "count"), "{e:?}");
        let e = from_options::<Sample>("x", &opts(&[("on", "maybe")])).unwrap_err().to_string();
        assert!(e.contains("`on`") && e.contains("true or false"), "{e}");
    }
}
