//! Per-row encoding: topic lookup, key and header conversion, and the JsonConverter value
//! (payload alone or the `{payload, …}` envelope, with optional JSON expansion).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::avro::{self, FRAME_RESERVED};
use super::column::Cv;
use super::convert::{
    self, json_bytes, simple_header_bytes, string_bytes, write_cv_json, write_envelope_start, Prim,
    Schema,
};
use super::converters::{Converter, HeaderConverter};
use super::expand::{self, Data, Expanded};
use super::json::{self, Node};
use super::{json_schema, protobuf};
use super::{topic, Binding, Col, EnvelopeKnown, RouteError, Router, SchemaNameKey, Values};
use super::{DEEP_STACK_BYTES, INLINE_DEPTH, SCHEMA_NAME_CACHE_LIMIT, TOPIC_CACHE_LIMIT};

impl Router {
    /// The topic for a route value of a row bound by `b`, cached by the value's bytes — and the
    /// table's name first, when the topic depends on it (`${schema}`, `${table}`).
    pub(super) fn topic(
        &mut self,
        b: &Binding,
        route_value: &[u8],
    ) -> Result<Arc<str>, RouteError> {
        let per_table = self.cfg.topic_router.per_table();
        let key: &[u8] = match per_table {
            false => route_value,
            true => {
                // `schema.table` NUL value: NUL is in neither a name nor a text value.
                self.topic_key.clear();
                self.topic_key.extend_from_slice(b.table.as_bytes());
                self.topic_key.push(0);
                self.topic_key.extend_from_slice(route_value);
                &self.topic_key
            }
        };
        if let Some(t) = self.topics.get(key) {
            return Ok(t.clone());
        }
        let key: Box<[u8]> = key.into();
        let text = convert::utf8(route_value).map_err(|reason| RouteError::InvalidTopic {
            topic: String::from_utf8_lossy(route_value).into(),
            reason,
        })?;
        let topic = self.cfg.topic_router.apply(text, b.relation_name());
        topic::validate_topic(&topic)
            .map_err(|reason| RouteError::InvalidTopic { topic: topic.clone(), reason })?;
        if self.topics.len() >= TOPIC_CACHE_LIMIT {
            self.topics.clear();
        }
        let topic: Arc<str> = Arc::from(topic);
        self.topics.insert(key, topic.clone());
        Ok(topic)
    }

    /// The key's bytes, and with `key.converter = "avro"` or `"protobuf"` the schema they were
    /// written under: the key column's Connect schema, as Confluent's converter maps it (Avro's
    /// `"string"` for a text column that is NOT NULL; Protobuf's `google.protobuf.StringValue`),
    /// the value after [`FRAME_RESERVED`] bytes for the registry's framing (and Protobuf's
    /// message indexes). A NULL key is a null key under every converter.
    pub(super) fn key(
        &mut self,
        col: &Col,
        cv: &Cv,
    ) -> Result<(Option<Bytes>, Option<Arc<str>>), RouteError> {
        match self.cfg.key_converter {
            converter @ (Converter::Avro | Converter::Protobuf) if !matches!(cv, Cv::Null) => {
                let (schema, indexes) = match self.key_schemas.get(&col.schema) {
                    Some(known) => known.clone(),
                    None => {
                        let known: (Arc<str>, &'static [u8]) = match converter {
                            Converter::Protobuf => {
                                let p = protobuf::schema_text(&col.schema)
                                    .map_err(|r| col.invalid(r))?;
                                (Arc::from(p.text), p.indexes)
                            }
                            _ => (
                                Arc::from(
                                    avro::schema_text(&col.schema).map_err(|r| col.invalid(r))?,
                                ),
                                &[],
                            ),
                        };
                        if self.key_schemas.len() >= SCHEMA_NAME_CACHE_LIMIT {
                            self.key_schemas.clear();
                        }
                        self.key_schemas.insert(col.schema.clone(), known.clone());
                        known
                    }
                };
                let mut out = Vec::with_capacity(FRAME_RESERVED + 4 + payload_len(cv));
                out.extend_from_slice(&[0; FRAME_RESERVED]);
                out.extend_from_slice(indexes);
                match converter {
                    Converter::Protobuf => {
                        let fields = protobuf::root_values(&col.schema, protobuf::Value::Cv(cv));
                        protobuf::write_root(&mut out, &col.schema, &fields)
                    }
                    _ => avro::write_cv(&mut out, cv, &col.schema),
                }
                .map_err(|r| col.invalid(r))?;
                Ok((Some(out.into()), Some(schema)))
            }
            // JSON Schema keys are refused when the options are read.
            Converter::String | Converter::Avro | Converter::Protobuf | Converter::JsonSchema => {
                Ok((string_bytes(cv), None))
            }
            Converter::Json { schemas } => json_bytes(cv, schemas.then_some(&*col.schema_json))
                .map(|k| (Some(k), None))
                .map_err(|r| col.invalid(r)),
        }
    }

    pub(super) fn header(&self, col: &Col, cv: &Cv) -> Result<Option<Bytes>, RouteError> {
        match self.cfg.header_converter {
            HeaderConverter::Simple => Ok(simple_header_bytes(cv)),
            HeaderConverter::Json { schemas } => {
                json_bytes(cv, schemas.then_some(&*col.schema_json))
                    .map(Some)
                    .map_err(|r| col.invalid(r))
            }
        }
    }

    /// The value under JsonConverter: the payload alone, or the `{payload, …}` envelope.
    pub(super) fn json_value(
        &mut self,
        b: &Binding,
        vals: Values<'_>,
        payload: &Cv,
        schemas: bool,
        route_text: &str,
        event_id: &str,
    ) -> Result<Bytes, RouteError> {
        let text = self.expandable(b, payload)?;
        self.on_a_deep_enough_stack(b, text, |r| {
            r.json_value_on_this_stack(b, vals, payload, text, schemas, route_text, event_id)
        })
    }

    /// The value under a registry converter (`avro.rs`, `protobuf.rs`, `json_schema.rs`): its
    /// body, after five bytes the registry's framing fills in, and the schema text it was
    /// written with.
    pub(super) fn registry_value(
        &mut self,
        b: &Binding,
        vals: Values<'_>,
        payload: &Cv,
        route_text: &str,
        event_id: &str,
    ) -> Result<(Bytes, Arc<str>), RouteError> {
        let text = self.expandable(b, payload)?;
        self.on_a_deep_enough_stack(b, text, |r| {
            r.registry_value_on_this_stack(b, vals, payload, text, route_text, event_id)
        })
    }

    /// The payload's text when `table.expand.json.payload` expands it (only string payloads; a
    /// null payload is left untouched, as in Debezium).
    fn expandable<'p>(&self, b: &Binding, payload: &'p Cv) -> Result<Option<&'p str>, RouteError> {
        match payload {
            Cv::Text(t)
                if self.cfg.expand_json_payload && b.payload.schema.is_prim(Prim::String) =>
            {
                Ok(Some(convert::utf8(t).map_err(|r| b.payload.invalid(r))?))
            }
            _ => Ok(None),
        }
    }

    /// Runs `value` here, or — for a payload nested deeper than [`INLINE_DEPTH`] — on a
    /// short-lived thread with a stack large enough for any depth Jackson accepts (1000
    /// levels): expansion recurses once per level, so no payload can overflow the caller's stack.
    fn on_a_deep_enough_stack<T: Send>(
        &mut self,
        b: &Binding,
        text: Option<&str>,
        value: impl FnOnce(&mut Self) -> Result<T, RouteError> + Send,
    ) -> Result<T, RouteError> {
        if !text.is_some_and(|t| json::nesting_exceeds(t, INLINE_DEPTH)) {
            return value(self);
        }
        std::thread::scope(|scope| {
            let worker = std::thread::Builder::new()
                .name("walrelay-expand".into())
                .stack_size(DEEP_STACK_BYTES)
                .spawn_scoped(scope, || value(self))
                .map_err(|e| {
                    b.payload.invalid(format!(
                        "cannot start a thread to expand a deeply nested payload: {e}"
                    ))
                })?;
            worker.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// The expanded payload of `tree` (its schema and value), or why it stays the string:
    /// `(schema, data, null_schema)`, `null_schema` when Debezium leaves it without a schema.
    fn expanded<'t, 'a>(
        &self,
        b: &Binding,
        tree: Option<&'t Node<'a>>,
        event_id: &str,
    ) -> (Option<Schema>, Option<Data<'t, 'a>>, bool) {
        let expanded = tree.map(|t| {
            expand::expand(
                t,
                &b.payload.name,
                self.cfg.null_behavior,
                self.cfg.empty_array_behavior,
            )
        });
        match expanded {
            Some(Expanded::Value { schema, data, debezium_fails }) => {
                if let Some(why) = debezium_fails {
                    tracing::debug!(event_id, %why, "payload expanded where Debezium 3.6.3 fails the record");
                }
                (Some(schema), Some(data), false)
            }
            Some(Expanded::NullSchema { reason }) => {
                tracing::warn!(event_id, cause = %reason, "JSON expansion failed; the payload stays a JSON string");
                (None, None, true)
            }
            Some(Expanded::Kept { reason }) => {
                tracing::warn!(event_id, cause = %reason, "JSON expansion failed; the payload stays a JSON string");
                (None, None, false)
            }
            None => (None, None, false),
        }
    }

    /// The parsed payload, or `None` (with Debezium's warning) when it is not JSON.
    fn parsed<'a>(b: &Binding, text: Option<&'a str>, event_id: &str) -> Option<Node<'a>> {
        text.and_then(|t| match json::parse(t, b.payload.dedupe_json) {
            Ok(tree) => Some(tree),
            Err(cause) => {
                tracing::warn!(event_id, %cause, "JSON expansion failed; the payload stays a JSON string");
                None
            }
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn json_value_on_this_stack(
        &mut self,
        b: &Binding,
        vals: Values<'_>,
        payload: &Cv,
        text: Option<&str>,
        schemas: bool,
        route_text: &str,
        event_id: &str,
    ) -> Result<Bytes, RouteError> {
        let tree = Self::parsed(b, text, event_id);
        let (payload_schema, data, null_schema) = self.expanded(b, tree.as_ref(), event_id);
        let mut out = Vec::with_capacity(payload_len(payload) + 64);
        if schemas {
            let schema_json = match (self.cfg.has_envelope(), &payload_schema, null_schema) {
                (true, _, _) => {
                    let payload_schema =
                        payload_schema.clone().unwrap_or_else(|| b.payload.schema.clone());
                    Some(self.envelope_schema(b, vals, payload_schema, route_text)?.to_json())
                }
                (false, Some(s), _) => Some(s.to_json()),
                (false, None, true) => None,
                (false, None, false) => Some(b.payload.schema_json.to_string()),
            };
            write_envelope_start(&mut out, schema_json.as_deref());
        }
        let expanded = data.as_ref().zip(payload_schema.as_ref());
        self.write_plain_json(&mut out, b, vals, payload, expanded)?;
        if schemas {
            out.push(b'}');
        }
        Ok(out.into())
    }

    /// The value as plain JSON, as JsonConverter writes it without schemas and
    /// JsonSchemaConverter always: the payload (`expanded`, or the column's value), or the
    /// `{payload, <envelope aliases>…}` struct.
    fn write_plain_json(
        &self,
        out: &mut Vec<u8>,
        b: &Binding,
        vals: Values<'_>,
        payload: &Cv,
        expanded: Option<(&Data<'_, '_>, &Schema)>,
    ) -> Result<(), RouteError> {
        let write_payload = |out: &mut Vec<u8>| match expanded {
            Some((data, schema)) => {
                expand::write_data(out, data, schema);
                Ok(())
            }
            None => write_cv_json(out, payload).map_err(|r| b.payload.invalid(r)),
        };
        if !self.cfg.has_envelope() {
            return write_payload(out);
        }
        out.extend_from_slice(b"{\"payload\":");
        write_payload(out)?;
        for (alias, col) in &b.envelope {
            out.push(b',');
            convert::write_str(out, alias);
            out.push(b':');
            write_cv_json(out, &*vals.read(col)?).map_err(|r| col.invalid(r))?;
        }
        out.push(b'}');
        Ok(())
    }

    /// The value under a registry converter, on this stack (see [`Router::registry_value`]).
    fn registry_value_on_this_stack(
        &mut self,
        b: &Binding,
        vals: Values<'_>,
        payload: &Cv,
        text: Option<&str>,
        route_text: &str,
        event_id: &str,
    ) -> Result<(Bytes, Arc<str>), RouteError> {
        let converter = self.cfg.value_converter;
        let tree = Self::parsed(b, text, event_id);
        let (payload_schema, data, null_schema) = self.expanded(b, tree.as_ref(), event_id);
        if null_schema {
            // Debezium's value is then the payload's text without a schema, which AvroConverter
            // writes as its catch-all `Anything` record (ProtobufConverter and
            // JsonSchemaConverter fail on it).
            let text = match (text, self.cfg.has_envelope() || converter != Converter::Avro) {
                (Some(text), false) => text,
                _ => {
                    return Err(b.payload.invalid(
                        "the expanded payload has no schema (a top-level empty array under \
                         `table.expand.json.payload.empty.array.behavior` = ignore), which an \
                         Avro envelope's `payload` field, Protobuf and JSON Schema cannot have"
                            .into(),
                    ))
                }
            };
            let mut out = Vec::with_capacity(text.len() + FRAME_RESERVED + 10);
            out.extend_from_slice(&[0; FRAME_RESERVED]);
            avro::write_anything_string(&mut out, text);
            return Ok((out.into(), Arc::from(avro::ANYTHING_SCHEMA)));
        }
        // Borrowed, not cloned: a row builds a schema only when the registry's caches lack it.
        let payload_schema = payload_schema.as_ref().unwrap_or(&b.payload.schema);
        let (known, built): (Arc<Schema>, Schema);
        let (schema, text, indexes): (&Schema, Arc<str>, &'static [u8]) =
            match (self.cfg.has_envelope(), &b.schema_version) {
                (true, None) => {
                    let (schema, text, indexes) =
                        self.envelope_known(b, vals, payload_schema, route_text)?;
                    known = schema;
                    (&*known, text, indexes)
                }
                (true, Some(_)) => {
                    built = self.envelope_schema(b, vals, payload_schema.clone(), route_text)?;
                    let (text, indexes) =
                        self.registry_schema(&built).map_err(|r| b.payload.invalid(r))?;
                    (&built, text, indexes)
                }
                (false, _) => {
                    let (text, indexes) =
                        self.registry_schema(payload_schema).map_err(|r| b.payload.invalid(r))?;
                    (payload_schema, text, indexes)
                }
            };
        let mut out = Vec::with_capacity(payload_len(payload) + 16);
        out.extend_from_slice(&[0; FRAME_RESERVED]);
        out.extend_from_slice(indexes);
        // The payload's own schema (inside the envelope's, when there is one).
        let payload_schema = match schema {
            Schema::Struct { fields, .. } if self.cfg.has_envelope() => &fields[0].1,
            s => s,
        };
        if self.cfg.value_converter == Converter::JsonSchema {
            let expanded = data.as_ref().map(|d| (d, payload_schema));
            self.write_plain_json(&mut out, b, vals, payload, expanded)?;
            return Ok((out.into(), text));
        }
        let envelope: Vec<_> =
            b.envelope.iter().map(|(_, col)| vals.read(col)).collect::<Result<_, _>>()?;
        if converter == Converter::Protobuf {
            let payload_value = match &data {
                Some(d) => protobuf::Value::Data(d),
                None => protobuf::Value::Cv(payload),
            };
            let fields: Vec<protobuf::Value> = match (self.cfg.has_envelope(), &data) {
                (true, _) => std::iter::once(payload_value)
                    .chain(envelope.iter().map(|v| protobuf::Value::Cv(v)))
                    .collect(),
                // The payload is the message: its fields are the root's.
                (false, _) => protobuf::root_values(schema, payload_value),
            };
            protobuf::write_root(&mut out, schema, &fields).map_err(|r| b.payload.invalid(r))?;
            return Ok((out.into(), text));
        }
        // Avro writes a record's fields one after the other: the payload, then the aliases.
        match &data {
            Some(d) => avro::write_data(&mut out, d, payload_schema),
            None => avro::write_cv(&mut out, payload, payload_schema),
        }
        .map_err(|r| b.payload.invalid(r))?;
        for ((alias, col), value) in b.envelope.iter().zip(&envelope) {
            avro::write_cv(&mut out, value, &col.schema)
                .map_err(|r| col.invalid(format!("envelope field `{alias}`: {r}")))?;
        }
        Ok((out.into(), text))
    }

    /// The registered text of `schema` under the value converter, and the message indexes
    /// written before a Protobuf body; cached: the registry's cache is keyed by the text, and a
    /// payload's schema repeats from record to record.
    fn registry_schema(&mut self, schema: &Schema) -> Result<(Arc<str>, &'static [u8]), String> {
        if let Some(known) = self.registry_schemas.get(schema) {
            return Ok(known.clone());
        }
        let known: (Arc<str>, &'static [u8]) = match self.cfg.value_converter {
            Converter::Protobuf => {
                let p = protobuf::schema_text(schema)?;
                (Arc::from(p.text), p.indexes)
            }
            Converter::JsonSchema => (Arc::from(json_schema::schema_text(schema)), &[]),
            _ => (Arc::from(avro::schema_text(schema)?), &[]),
        };
        if self.registry_schemas.len() >= SCHEMA_NAME_CACHE_LIMIT {
            self.registry_schemas.clear();
        }
        self.registry_schemas.insert(schema.clone(), known.clone());
        Ok(known)
    }

    /// With envelope placements (and no schema version column): the envelope's schema and its
    /// registered text, kept per table and payload schema, so a row whose payload's schema is
    /// known builds, clones and hashes no envelope schema. A relation whose envelope columns
    /// changed finds its entry stale and replaces it.
    fn envelope_known(
        &mut self,
        b: &Binding,
        vals: Values<'_>,
        payload_schema: &Schema,
        route_text: &str,
    ) -> Result<EnvelopeKnown, RouteError> {
        let current = |known: &EnvelopeKnown| match &*known.0 {
            Schema::Struct { fields, .. } => {
                fields.len() == b.envelope.len() + 1
                    && fields[1..].iter().zip(&b.envelope).all(|((name, schema), (alias, col))| {
                        name.as_str() == &**alias && *schema == col.schema
                    })
            }
            _ => false,
        };
        let known = self.envelope_schemas.get(&b.table).and_then(|m| m.get(payload_schema));
        if let Some(known) = known.filter(|k| current(k)) {
            return Ok(known.clone());
        }
        let schema = self.envelope_schema(b, vals, payload_schema.clone(), route_text)?;
        let (text, indexes) = self.registry_schema(&schema).map_err(|r| b.payload.invalid(r))?;
        let known: EnvelopeKnown = (Arc::new(schema), text, indexes);
        if self.envelope_schemas.values().map(HashMap::len).sum::<usize>()
            >= SCHEMA_NAME_CACHE_LIMIT
        {
            self.envelope_schemas.clear();
        }
        let per_table = self.envelope_schemas.entry(b.table.clone()).or_default();
        per_table.insert(payload_schema.clone(), known.clone());
        Ok(known)
    }

    /// The `{payload, <envelope aliases>…}` struct's schema, named as Debezium names it.
    fn envelope_schema(
        &mut self,
        b: &Binding,
        vals: Values<'_>,
        payload_schema: Schema,
        route_text: &str,
    ) -> Result<Schema, RouteError> {
        let name = self.envelope_name(b, vals, &payload_schema, route_text)?;
        let mut fields = vec![("payload".to_owned(), payload_schema)];
        fields
            .extend(b.envelope.iter().map(|(alias, col)| (alias.to_string(), col.schema.clone())));
        let version = match &b.schema_version {
            Some(col) => version_of(col, vals)?,
            None => None,
        };
        Ok(Schema::Struct { name: Some(name.to_string()), optional: false, version, fields })
    }

    /// Debezium names the envelope schema `<prefix>.<schema>.<table>.<routedByValue>.Value` with the
    /// route value of the *first* record that needed it, cached per payload schema (or per schema
    /// version when `table.field.event.schema.version` is set).
    fn envelope_name(
        &mut self,
        b: &Binding,
        vals: Values<'_>,
        payload_schema: &Schema,
        routed: &str,
    ) -> Result<Arc<str>, RouteError> {
        let key = match &b.schema_version {
            Some(col) => SchemaNameKey::Version(version_of(col, vals)?),
            None => SchemaNameKey::Payload(payload_schema.clone()),
        };
        if let Some(n) = self.schema_names.get(&key) {
            return Ok(n.clone());
        }
        if self.schema_names.len() >= SCHEMA_NAME_CACHE_LIMIT {
            self.schema_names.clear();
        }
        let (start, end) = &b.envelope_name;
        let name: Arc<str> = Arc::from(format!("{start}{routed}{end}"));
        self.schema_names.insert(key, name.clone());
        Ok(name)
    }
}

fn version_of(col: &Col, vals: Values<'_>) -> Result<Option<i32>, RouteError> {
    match &*vals.read(col)? {
        Cv::Int(t) => std::str::from_utf8(t)
            .ok()
            .and_then(|s| s.parse().ok())
            .map(Some)
            .ok_or_else(|| col.invalid("not an int4 value".into())),
        _ => Ok(None),
    }
}

fn payload_len(cv: &Cv) -> usize {
    match cv {
        Cv::Text(b) | Cv::Int(b) | Cv::Bin(b) => b.len() + b.len() / 8,
        _ => 8,
    }
}
