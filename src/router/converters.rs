//! The Kafka Connect converters a key, a value and the headers are written with, by the names
//! and classes `[debezium]` takes for them.

pub(super) const STRING_CONVERTER_CLASS: &str = "org.apache.kafka.connect.storage.StringConverter";
pub(super) const JSON_CONVERTER_CLASS: &str = "org.apache.kafka.connect.json.JsonConverter";
/// Confluent's Avro converter, and Apicurio's (with `apicurio.registry.as-confluent`, its
/// framing is Confluent's).
pub(super) const AVRO_CONVERTER_CLASSES: [&str; 2] = [
    "io.confluent.connect.avro.AvroConverter",
    "io.apicurio.registry.utils.converter.AvroConverter",
];
pub(super) const PROTOBUF_CONVERTER_CLASS: &str = "io.confluent.connect.protobuf.ProtobufConverter";
pub(super) const JSON_SCHEMA_CONVERTER_CLASS: &str =
    "io.confluent.connect.json.JsonSchemaConverter";
pub(super) const SIMPLE_HEADER_CONVERTER_CLASS: &str =
    "org.apache.kafka.connect.storage.SimpleHeaderConverter";

/// A Kafka Connect key or value converter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Converter {
    /// `StringConverter`: the value's text as UTF-8 (a `bytea` passes through as raw bytes).
    String,
    /// `JsonConverter`, with or without the `{"schema":…,"payload":…}` envelope.
    Json { schemas: bool },
    /// Confluent's `AvroConverter`: Avro binary, framed with the schema's registry id
    /// (`avro.rs`, `crate::registry`). Values and keys.
    Avro,
    /// Confluent's `ProtobufConverter`: proto3 binary after the message indexes, framed the
    /// same way (`protobuf.rs`). Values and keys.
    Protobuf,
    /// Confluent's `JsonSchemaConverter`: the value as plain JSON, framed the same way, under
    /// the JSON Schema `json_schema.rs` derives. Values only (`options.rs` says why).
    JsonSchema,
}

/// A registry converter by its short name or Connect class, and what it writes.
pub(super) fn registry_converter(name: &str) -> Option<(Converter, &'static str)> {
    if AVRO_CONVERTER_CLASSES.contains(&name) || name == "avro" {
        Some((Converter::Avro, "Avro"))
    } else if name == PROTOBUF_CONVERTER_CLASS || name == "protobuf" {
        Some((Converter::Protobuf, "Protobuf"))
    } else if name == JSON_SCHEMA_CONVERTER_CLASS || name == "json-schema" {
        Some((Converter::JsonSchema, "JSON Schema"))
    } else {
        None
    }
}

/// A Kafka Connect header converter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderConverter {
    /// `SimpleHeaderConverter`: `Values.convertToString` as UTF-8.
    Simple,
    Json {
        schemas: bool,
    },
}
