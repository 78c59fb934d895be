//! Per-row encoding: topic lookup, key and header conversion, and the JsonConverter value
//! (payload alone or the `{payload, …}` envelope, with optional JSON expansion).

use std::sync::Arc;

use bytes::Bytes;

use super::column::Cv;
use super::convert::{
    self, json_bytes, simple_header_bytes, string_bytes, write_cv_json, write_envelope_start, Prim,
    Schema,
};
use super::expand::{self, Expanded};
use super::json::{self, Node};
use super::options::{Converter, HeaderConverter};
use super::{topic, Binding, Col, RouteError, Router, SchemaNameKey, Values};
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

    pub(super) fn key(&self, col: &Col, cv: &Cv) -> Result<Option<Bytes>, RouteError> {
        match self.cfg.key_converter {
            Converter::String => Ok(string_bytes(cv)),
            Converter::Json { schemas } => json_bytes(cv, schemas.then_some(&*col.schema_json))
                .map(Some)
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
    ///
    /// Expansion recurses once per nesting level, and Jackson accepts 1000 levels; a payload
    /// nested deeper than [`INLINE_DEPTH`] is therefore expanded on a short-lived thread with a
    /// stack large enough for any accepted depth, so no payload can overflow the caller's stack.
    pub(super) fn json_value(
        &mut self,
        b: &Binding,
        vals: Values<'_>,
        payload: &Cv,
        schemas: bool,
        route_text: &str,
        event_id: &str,
    ) -> Result<Bytes, RouteError> {
        // Expansion (only string payloads; a null payload is left untouched, as in Debezium).
        let text = match payload {
            Cv::Text(t)
                if self.cfg.expand_json_payload && b.payload.schema.is_prim(Prim::String) =>
            {
                Some(convert::utf8(t).map_err(|r| b.payload.invalid(r))?)
            }
            _ => None,
        };
        if !text.is_some_and(|t| json::nesting_exceeds(t, INLINE_DEPTH)) {
            return self
                .json_value_on_this_stack(b, vals, payload, text, schemas, route_text, event_id);
        }
        std::thread::scope(|scope| {
            let worker = std::thread::Builder::new()
                .name("walrelay-expand".into())
                .stack_size(DEEP_STACK_BYTES)
                .spawn_scoped(scope, || {
                    self.json_value_on_this_stack(
                        b, vals, payload, text, schemas, route_text, event_id,
                    )
                })
                .map_err(|e| {
                    b.payload.invalid(format!(
                        "cannot start a thread to expand a deeply nested payload: {e}"
                    ))
                })?;
            worker.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
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
        let tree: Option<Node> = text.and_then(|t| match json::parse(t, b.payload.dedupe_json) {
            Ok(tree) => Some(tree),
            Err(cause) => {
                tracing::warn!(event_id, %cause, "JSON expansion failed; the payload stays a JSON string");
                None
            }
        });
        let expanded = tree.as_ref().map(|t| {
            expand::expand(
                t,
                &b.payload.name,
                self.cfg.null_behavior,
                self.cfg.empty_array_behavior,
            )
        });
        let (payload_schema, data, null_schema) = match expanded {
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
        };
        let write_payload = |out: &mut Vec<u8>| -> Result<(), RouteError> {
            match (&data, &payload_schema) {
                (Some(d), Some(s)) => {
                    expand::write_data(out, d, s);
                    Ok(())
                }
                _ => write_cv_json(out, payload).map_err(|r| b.payload.invalid(r)),
            }
        };

        let mut out = Vec::with_capacity(payload_len(payload) + 64);
        if !self.cfg.has_envelope() {
            if schemas {
                let schema_json = match (&payload_schema, null_schema) {
                    (Some(s), _) => Some(s.to_json()),
                    (None, true) => None,
                    (None, false) => Some(b.payload.schema_json.to_string()),
                };
                write_envelope_start(&mut out, schema_json.as_deref());
                write_payload(&mut out)?;
                out.push(b'}');
            } else {
                write_payload(&mut out)?;
            }
            return Ok(out.into());
        }

        // Envelope struct: {payload, <envelope aliases>…}.
        if schemas {
            let payload_schema = payload_schema.clone().unwrap_or_else(|| b.payload.schema.clone());
            let name = self.envelope_name(b, vals, &payload_schema, route_text)?;
            let mut fields = vec![("payload".to_owned(), payload_schema)];
            fields.extend(
                b.envelope.iter().map(|(alias, col)| (alias.to_string(), col.schema.clone())),
            );
            let version = match &b.schema_version {
                Some(col) => version_of(col, vals)?,
                None => None,
            };
            let schema =
                Schema::Struct { name: Some(name.to_string()), optional: false, version, fields };
            write_envelope_start(&mut out, Some(&schema.to_json()));
        }
        out.extend_from_slice(b"{\"payload\":");
        write_payload(&mut out)?;
        for (alias, col) in &b.envelope {
            out.push(b',');
            convert::write_str(&mut out, alias);
            out.push(b':');
            write_cv_json(&mut out, &*vals.read(col)?).map_err(|r| col.invalid(r))?;
        }
        out.push(b'}');
        if schemas {
            out.push(b'}');
        }
        Ok(out.into())
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
