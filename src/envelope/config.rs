//! The `[envelope]` section, and the router options an envelope cannot honour.
//!
//! Parsed together with `[router]` and `[debezium]`: every format but Debezium's writes the
//! value itself, so the Kafka Connect options that shape a value (`value.converter`, JSON
//! expansion, schema versions) are refused with the key named, and `envelope` placements become
//! the event's own fields.

use std::collections::BTreeMap;

use crate::options::ConfigError;
use crate::router::RouterConfig;

const SECTION: &str = "envelope";
const KEYS: &[&str] = &["format", "source", "content_type"];

/// The default `source` (CloudEvents) template.
pub const DEFAULT_SOURCE: &str = "/walrelay/${database}/${table}";

/// What the Kafka record's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Debezium's Outbox Event Router output, byte for byte (the default).
    Debezium,
    /// CloudEvents 1.0, Kafka binding, binary content mode: the payload as the value, the
    /// attributes in `ce_*` headers.
    CloudEventsBinary,
    /// CloudEvents 1.0, Kafka binding, structured content mode, JSON event format.
    CloudEventsStructured,
    /// CloudEvents 1.0, Kafka binding, structured content mode, protobuf event format.
    CloudEventsProtobuf,
    /// walrelay's `walrelay.v1.Event` (proto/walrelay/v1/event.proto).
    Protobuf,
}

impl Format {
    const NAMES: &'static [(&'static str, Format)] = &[
        ("debezium", Format::Debezium),
        ("cloudevents-binary", Format::CloudEventsBinary),
        ("cloudevents-structured", Format::CloudEventsStructured),
        ("cloudevents-protobuf", Format::CloudEventsProtobuf),
        ("protobuf", Format::Protobuf),
    ];

    /// Every format, the default first.
    pub fn all() -> impl Iterator<Item = Format> {
        Format::NAMES.iter().map(|(_, f)| *f)
    }

    /// The name `[envelope] format` takes.
    pub fn name(self) -> &'static str {
        Format::NAMES.iter().find(|(_, f)| *f == self).map(|(n, _)| *n).expect("every format")
    }

    fn is_cloudevents(self) -> bool {
        matches!(
            self,
            Format::CloudEventsBinary | Format::CloudEventsStructured | Format::CloudEventsProtobuf
        )
    }
}

/// The parsed `[envelope]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvelopeConfig {
    pub format: Format,
    /// CloudEvents `source`, with `${database}` and `${table}` (`schema.table`, or
    /// `message:<prefix>` for a logical message) replaced per event.
    pub source: String,
    /// Overrides the payload's content type (which otherwise follows the payload column's type).
    pub content_type: Option<String>,
}

impl Default for EnvelopeConfig {
    fn default() -> Self {
        EnvelopeConfig {
            format: Format::Debezium,
            source: DEFAULT_SOURCE.into(),
            content_type: None,
        }
    }
}

/// Parses `[envelope]`, then `[router]` and `[debezium]` for that format. `envelope` is the
/// flattened section (`key` → value text), `None` when the file has none.
pub fn parse(
    envelope: Option<&BTreeMap<String, String>>,
    router: &BTreeMap<String, String>,
    debezium: &BTreeMap<String, String>,
) -> Result<(RouterConfig, EnvelopeConfig), ConfigError> {
    let empty = BTreeMap::new();
    let opts = envelope.unwrap_or(&empty);
    if let Some(key) = opts.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(ConfigError::UnknownKey {
            section: SECTION,
            key: key.clone(),
            hint: format!("[envelope] takes {}", KEYS.join(", ")),
        });
    }
    let format = match opts.get("format").map(|v| v.trim()) {
        None => Format::Debezium,
        Some(v) => {
            Format::NAMES.iter().find(|(n, _)| *n == v).map(|(_, f)| *f).ok_or_else(|| {
                let names: Vec<&str> = Format::NAMES.iter().map(|(n, _)| *n).collect();
                invalid("format", v, format!("expected one of {}", names.join(", ")))
            })?
        }
    };
    let mut cfg = EnvelopeConfig { format, ..EnvelopeConfig::default() };
    if format == Format::Debezium {
        if let Some(key) = ["source", "content_type"].into_iter().find(|k| opts.contains_key(*k)) {
            return Err(invalid(
                key,
                &opts[key],
                "applies only to the cloudevents-* and protobuf formats; remove it, or set \
                 [envelope] format"
                    .into(),
            ));
        }
        return Ok((RouterConfig::parse(router, debezium)?, cfg));
    }

    refuse_value_options(format, router, debezium)?;
    if let Some(source) = opts.get("source") {
        if source.trim().is_empty() {
            return Err(invalid(
                "source",
                source,
                "must not be empty (CloudEvents require a source); remove the key for the default"
                    .into(),
            ));
        }
        let unknown = source
            .match_indices("${")
            .map(|(at, _)| &source[at..])
            .find(|rest| !rest.starts_with("${database}") && !rest.starts_with("${table}"));
        if let Some(rest) = unknown {
            let name = &rest[..rest.find('}').map_or(rest.len(), |end| end + 1)];
            return Err(invalid(
                "source",
                source,
                format!("{name} is not a placeholder; use ${{database}} and ${{table}} only"),
            ));
        }
        cfg.source = source.trim().to_owned();
    }
    if let Some(ct) = opts.get("content_type") {
        if !is_media_type(ct.trim()) {
            return Err(invalid(
                "content_type",
                ct,
                "expected a media type such as \"application/json\" or \
                 \"text/plain; charset=utf-8\""
                    .into(),
            ));
        }
        cfg.content_type = Some(ct.trim().to_owned());
    }
    let mut router_cfg = RouterConfig::parse_for(router, debezium, true)?;
    router_cfg.event_type_required = format.is_cloudevents();
    if format.is_cloudevents() {
        check_cloudevents_names(&router_cfg, router)?;
    }
    Ok((router_cfg, cfg))
}

/// The options that shape a Kafka Connect value, which every other format replaces.
fn refuse_value_options(
    format: Format,
    router: &BTreeMap<String, String>,
    debezium: &BTreeMap<String, String>,
) -> Result<(), ConfigError> {
    let name = format.name();
    if let Some(v) = debezium.get("value.converter") {
        let v = v.trim();
        if v != "string" && v != "org.apache.kafka.connect.storage.StringConverter" {
            return Err(ConfigError::InvalidValue {
                section: "debezium",
                key: "value.converter".into(),
                value: v.into(),
                reason: format!(
                    "[envelope] format = \"{name}\" writes the value itself, so no Kafka Connect \
                     converter applies to it; remove value.converter (the key and headers keep \
                     their converters), or use format = \"debezium\""
                ),
            });
        }
    }
    if let Some(v) = debezium.get("value.converter.schemas.enable") {
        return Err(ConfigError::InvalidValue {
            section: "debezium",
            key: "value.converter.schemas.enable".into(),
            value: v.clone(),
            reason: format!(
                "[envelope] format = \"{name}\" writes the value itself, with no Connect schema; \
                 remove the key, or use format = \"debezium\""
            ),
        });
    }
    for key in [
        "table.expand.json.payload",
        "table.json.payload.null.behavior",
        "table.json.payload.empty.array.behavior",
        "table.field.event.schema.version",
    ] {
        if let Some(v) = router.get(key) {
            return Err(ConfigError::InvalidValue {
                section: "router",
                key: key.into(),
                value: v.clone(),
                reason: format!(
                    "it shapes a JsonConverter value, and [envelope] format = \"{name}\" carries \
                     the payload unchanged (a JSON payload is already JSON in the event); remove \
                     the key, or use format = \"debezium\""
                ),
            });
        }
    }
    Ok(())
}

/// CloudEvents attribute names are lower-case ASCII letters and digits; an `envelope`
/// placement becomes one (an extension), and a `header` placement must not shadow the binding's
/// own headers.
fn check_cloudevents_names(
    cfg: &RouterConfig,
    router: &BTreeMap<String, String>,
) -> Result<(), ConfigError> {
    const RESERVED: &[&str] = &[
        "specversion",
        "id",
        "source",
        "type",
        "subject",
        "time",
        "datacontenttype",
        "dataschema",
        "data",
    ];
    let key = "table.fields.additional.placement";
    let value = || router.get(key).cloned().unwrap_or_default();
    for alias in cfg.placement_aliases("envelope") {
        let valid = !alias.is_empty()
            && alias.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        if !valid {
            return Err(invalid_router(
                key,
                value(),
                format!(
                "envelope field `{alias}` becomes a CloudEvents extension attribute, whose name \
                 must be lower-case letters a-z and digits only; give it such an alias \
                 (`column:envelope:alias`)"
            ),
            ));
        }
        if RESERVED.contains(&alias) {
            return Err(invalid_router(
                key,
                value(),
                format!(
                "envelope field `{alias}` would replace the CloudEvents attribute of that name; \
                 give it another alias (`column:envelope:alias`)"
            ),
            ));
        }
    }
    for alias in cfg.placement_aliases("header") {
        let lower = alias.to_ascii_lowercase();
        if lower.starts_with("ce_") || lower == "content-type" {
            return Err(invalid_router(
                key,
                value(),
                format!(
                "header `{alias}` would be read as a CloudEvents attribute by consumers of the \
                 Kafka binding; give it another alias, or place the column as \
                 `column:envelope:alias` to make it an extension attribute"
            ),
            ));
        }
    }
    Ok(())
}

/// `type/subtype`, optionally followed by `; parameters` (RFC 2045 shape, loosely).
fn is_media_type(v: &str) -> bool {
    let essence = v.split(';').next().unwrap_or("").trim();
    let mut parts = essence.split('/');
    let token = |s: Option<&str>| {
        s.is_some_and(|s| {
            !s.is_empty()
                && s.bytes().all(|c| c.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&c))
        })
    };
    token(parts.next()) && token(parts.next()) && parts.next().is_none()
}

fn invalid(key: &str, value: &str, reason: String) -> ConfigError {
    ConfigError::InvalidValue { section: SECTION, key: key.into(), value: value.into(), reason }
}

fn invalid_router(key: &str, value: String, reason: String) -> ConfigError {
    ConfigError::InvalidValue { section: "router", key: key.into(), value, reason }
}
