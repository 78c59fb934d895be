//! The connector's `transforms` (the EventRouter, `DecodeLogicalDecodingMessageContent`, the
//! tracing SMT) and its value converter when it is Debezium's CloudEvents converter: what
//! becomes `[router]`, `[debezium]` and `[envelope]`.

use super::{Builder, DECODE_MESSAGE, EVENT_ROUTER};

const TRACING_SPAN: &str = "io.debezium.transforms.tracing.ActivateTracingSpan";
const CLOUDEVENTS_CONVERTER: &str = "io.debezium.converters.CloudEventsConverter";
const TRACING_KEYS: &[&str] =
    &["tracing.span.context.field", "tracing.operation.name", "tracing.with.context.field.only"];

impl Builder {
    /// Whether the connector captures logical decoding messages by a prefix list.
    pub(super) fn messages(&self) -> bool {
        self.get("message.prefix.include.list").is_some()
            || self.get("message.prefix.exclude.list").is_some()
    }

    /// The prefix lists (Debezium's names, same section as walrelay reads them), and what
    /// walrelay does differently with messages.
    fn convert_messages(&mut self, decoder: Option<String>) {
        if !self.messages() {
            if let Some(name) = decoder {
                self.warn(format!(
                    "transform `{name}` decodes logical messages, but neither message.prefix.include.list nor message.prefix.exclude.list is set: walrelay relays no message without one (Debezium captures every prefix); set one in [debezium]"
                ));
            }
            return;
        }
        for key in ["message.prefix.include.list", "message.prefix.exclude.list"] {
            if let Some(v) = self.get(key).map(str::to_string) {
                self.debezium.insert(key.into(), v);
            }
        }
        if decoder.is_none() {
            self.warn(format!(
                "message.prefix.* is set but `transforms` has no {DECODE_MESSAGE}: Debezium sends raw message events (topic <topic.prefix>.message); walrelay routes each selected message's JSON content as an outbox event, as with that transform before the EventRouter"
            ));
        }
        self.warn("Debezium relays non-transactional logical messages (pg_logical_emit_message(false, …)), even when their transaction rolls back; walrelay refuses them unless [outbox] non_transactional_messages = \"relay\"");
    }

    pub(super) fn convert_router(&mut self) {
        let names: Vec<String> = self
            .get("transforms")
            .map(|t| t.split(',').map(|n| n.trim().to_string()).filter(|n| !n.is_empty()).collect())
            .unwrap_or_default();
        let mut router_name: Option<String> = None;
        let mut decoder_name: Option<String> = None;
        for name in &names {
            let ty = self.get(&format!("transforms.{name}.type")).unwrap_or("").to_string();
            if ty == DECODE_MESSAGE && decoder_name.is_none() {
                decoder_name = Some(name.clone());
                self.convert_decoder(name);
            } else if ty == EVENT_ROUTER && router_name.is_none() {
                router_name = Some(name.clone());
            } else if ty == TRACING_SPAN {
                self.convert_tracing_span(name);
            } else if ty == EVENT_ROUTER {
                self.warn(format!(
                    "transform `{name}` is a second EventRouter; walrelay applies only the first (`{}`)",
                    router_name.as_deref().unwrap_or("")
                ));
            } else {
                self.warn(format!(
                    "transform `{name}` ({ty}) is not applied by walrelay: records leave exactly as the EventRouter makes them"
                ));
            }
        }
        self.convert_messages(decoder_name);
        let Some(name) = router_name else {
            self.warn(format!(
                "no {EVENT_ROUTER} transform in `transforms`: [router] is left empty (Debezium's defaults)"
            ));
            return;
        };
        let prefix = format!("transforms.{name}.");
        let options: Vec<(String, String)> = self
            .options
            .iter()
            .filter_map(|(k, v)| k.strip_prefix(&prefix).map(|rest| (rest.to_string(), v.clone())))
            .collect();
        for (key, value) in options {
            if key == "type" {
                continue;
            }
            if key == "predicate" || key == "negate" {
                self.warn(format!(
                    "{prefix}{key} is not needed: walrelay routes only the outbox table's INSERTs"
                ));
            } else {
                self.router.insert(key, value);
            }
        }
        self.note_tracing();
    }

    /// `DecodeLogicalDecodingMessageContent`'s options: `fields.null.include` goes to
    /// [debezium]; walrelay decodes every selected message as that transform does.
    fn convert_decoder(&mut self, name: &str) {
        let prefix = format!("transforms.{name}.");
        let options: Vec<(String, String)> = self
            .options
            .iter()
            .filter_map(|(k, v)| k.strip_prefix(&prefix).map(|rest| (rest.to_string(), v.clone())))
            .collect();
        for (key, value) in options {
            match key.as_str() {
                "type" => {}
                "fields.null.include" => {
                    self.debezium.insert(key, value);
                }
                "predicate" | "negate" => self.warn(format!(
                    "{prefix}{key} is not needed: walrelay decodes only the messages its prefix list selects"
                )),
                _ => self.warn(format!("{prefix}{key} is not an option walrelay knows for {DECODE_MESSAGE}; left out")),
            }
        }
    }

    /// The standalone tracing SMT (`ActivateTracingSpan`) traces the change event before the
    /// router sees it, as the EventRouter's own tracing does: its options are the router's.
    /// Standalone, `tracing.with.context.field.only` defaults to false (the EventRouter sets
    /// true when the key is absent), so the default is written out.
    fn convert_tracing_span(&mut self, name: &str) {
        let prefix = format!("transforms.{name}.");
        for key in TRACING_KEYS {
            let default = (*key == "tracing.with.context.field.only").then_some("false");
            let value = self.get(&format!("{prefix}{key}")).or(default).map(str::to_owned);
            if let Some(value) = value {
                self.router.entry(key.to_string()).or_insert(value);
            }
        }
        self.warn(format!(
            "transform `{name}` ({TRACING_SPAN}): its options are carried to [router] (walrelay traces as part of routing)"
        ));
    }

    /// What differs in tracing, said once when the connector configures any.
    fn note_tracing(&mut self) {
        let field = self
            .router
            .get("tracing.span.context.field")
            .cloned()
            .unwrap_or_else(|| "tracingspancontext".into());
        let placed = self.router.get("table.fields.additional.placement").is_some_and(|p| {
            p.split(',').any(|e| {
                let parts: Vec<&str> = e.split(':').map(str::trim).collect();
                parts.first() == Some(&field.as_str())
                    && parts.get(1).is_some_and(|k| k.eq_ignore_ascii_case("header"))
                    && parts.get(2).is_some_and(|a| a.eq_ignore_ascii_case("traceparent"))
            })
        });
        if placed {
            self.warn(format!(
                "table.fields.additional.placement sends column {field} as header traceparent: kept, so consumers see the same bytes, and walrelay then adds no traceparent of its own; remove that entry to have walrelay send the W3C traceparent and tracestate it reads from the column (Properties text or a bare traceparent)"
            ));
        }
        if TRACING_KEYS.iter().any(|k| self.router.contains_key(*k)) {
            self.warn(format!(
                "tracing: walrelay sends traceparent/tracestate from column {field} whenever the table has it (Debezium only with OpenTelemetry on the Connect classpath), naming the writer's span as parent; for spans of the relay's own set [tracing] otlp_endpoint (docs/migrating-from-debezium.md#tracing)"
            ));
        }
    }

    /// Debezium's `CloudEventsConverter` after the EventRouter is walrelay's
    /// `cloudevents-structured` when it writes JSON (`serializer.type`, `data.serializer.type`)
    /// and reads its metadata from headers (`metadata.source = header`, the only way it can
    /// read the router's records): then `id` is the event id and `type` the `type` header in
    /// both. Anything else is left out with a warning. The converter's keys are taken out of
    /// the options so nothing else reads them.
    pub(super) fn convert_cloudevents(&mut self) {
        if self.get("value.converter") != Some(CLOUDEVENTS_CONVERTER) {
            return;
        }
        let keys: Vec<String> =
            self.options.keys().filter(|k| k.starts_with("value.converter")).cloned().collect();
        let opts: std::collections::BTreeMap<String, String> = keys
            .iter()
            .filter_map(|k| self.options.remove(k).map(|v| (k.clone(), v.trim().to_owned())))
            .collect();
        let get = |k: &str| opts.get(&format!("value.converter.{k}")).map(String::as_str);
        let json = |k: &str| get(k).is_none_or(|v| v.eq_ignore_ascii_case("json"));
        let router = self
            .get("transforms")
            .unwrap_or("")
            .split(',')
            .any(|n| self.get(&format!("transforms.{}.type", n.trim())) == Some(EVENT_ROUTER));
        let from_headers =
            get("metadata.source").is_some_and(|m| m.split(',').next() == Some("header"));
        let why_not = if !router {
            Some("walrelay maps it only after the EventRouter")
        } else if !json("serializer.type") || !json("data.serializer.type") {
            Some("walrelay writes CloudEvents JSON only (serializer.type and data.serializer.type json)")
        } else if !from_headers {
            Some("after the EventRouter Debezium's converter can read its metadata only from headers (metadata.source = header)")
        } else {
            None
        };
        if let Some(why) = why_not {
            self.warn(format!(
                "value.converter = {CLOUDEVENTS_CONVERTER} is not mapped: {why}; [envelope] is left at Debezium's format, so the value is the payload alone — set [envelope] format yourself"
            ));
            return;
        }
        self.envelope.insert("format".into(), "cloudevents-structured".into());
        let prefix = self.get("topic.prefix").unwrap_or("walrelay").to_owned();
        self.envelope.insert("source".into(), format!("/debezium/postgresql/{prefix}"));
        self.warn(format!(
            "value.converter = {CLOUDEVENTS_CONVERTER} (JSON, metadata from headers) is [envelope] format = \"cloudevents-structured\" with Debezium's source /debezium/postgresql/{prefix}: id is the event id and type the table.field.event.type column (Debezium: the `type` header, so keep the type:header placement); walrelay sends no iodebezium* extension attributes, time is the commit time (Debezium: source.ts_ms, the same instant) and traceparent is an attribute whenever the row has a context (Debezium: with opentelemetry.tracing.attributes.enable)"
        ));
        for (k, v) in &opts {
            let known = [
                "value.converter",
                "value.converter.serializer.type",
                "value.converter.data.serializer.type",
                "value.converter.metadata.source",
                "value.converter.opentelemetry.tracing.attributes.enable",
            ];
            if !known.contains(&k.as_str()) {
                self.warn(format!("{k} = {v}: no equivalent in walrelay's CloudEvents; left out"));
            }
        }
    }
}
