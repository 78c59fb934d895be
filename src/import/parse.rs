//! The inputs `import-debezium` reads: Kafka Connect JSON (REST form or flat), `.properties`
//! files, and Debezium Server's `application.properties` key layout.

use std::collections::BTreeMap;

use super::{AVRO_CONVERTER, JSON_CONVERTER, PROTOBUF_CONVERTER};

/// `{"name": …, "config": {…}}` or the flat `{…}`; values as text.
pub(super) fn parse_json(text: &str) -> Result<(Option<String>, BTreeMap<String, String>), String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let serde_json::Value::Object(top) = value else {
        return Err("the JSON is not an object".into());
    };
    let name = top.get("name").and_then(|n| n.as_str()).map(str::to_owned);
    let (config, top_level) = match top.get("config") {
        Some(serde_json::Value::Object(c)) => (c.clone(), false),
        _ => (top, true),
    };
    let mut out = BTreeMap::new();
    for (k, v) in config {
        let text = match v {
            serde_json::Value::String(s) => s,
            serde_json::Value::Null => continue,
            serde_json::Value::Bool(_) | serde_json::Value::Number(_) => v.to_string(),
            // Never the value itself: an object here is often the connector's settings
            // under a misspelt key, passwords included.
            serde_json::Value::Object(_) if top_level => {
                return Err(format!(
                    "option `{k}` is an object, expected a string, number or boolean; the connector's settings go under \"config\" (Kafka Connect's REST form) or at the top level"
                ))
            }
            other => {
                return Err(format!(
                    "option `{k}` is {}, expected a string, number or boolean",
                    json_type(&other)
                ))
            }
        };
        out.insert(k, text);
    }
    Ok((name, out))
}

/// A JSON value's type, for messages that may not show the value.
fn json_type(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Java `.properties`: `key=value`, `key: value` or `key value`; `#`/`!` comments; a trailing
/// backslash continues the line; `\t`, `\n`, `\uXXXX` and escaped separators.
pub fn parse_properties(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut logical = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if logical.is_empty()
            && (trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!'))
        {
            continue;
        }
        logical.push_str(trimmed);
        // An odd number of trailing backslashes continues the line.
        let trailing = logical.chars().rev().take_while(|&c| c == '\\').count();
        if trailing % 2 == 1 {
            logical.pop();
            if lines.clone().next().is_some() {
                continue;
            }
        }
        let entry = std::mem::take(&mut logical);
        let (key, value) = split_property(&entry);
        if !key.is_empty() {
            out.insert(key, value);
        }
    }
    out
}

fn split_property(entry: &str) -> (String, String) {
    let chars: Vec<char> = entry.chars().collect();
    let mut i = 0;
    let mut key_end = chars.len();
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '=' | ':' | ' ' | '\t' | '\u{c}' => {
                key_end = i;
                break;
            }
            _ => i += 1,
        }
    }
    let key: String = chars[..key_end.min(chars.len())].iter().collect();
    let mut j = key_end;
    while j < chars.len() && matches!(chars[j], ' ' | '\t' | '\u{c}') {
        j += 1;
    }
    if j < chars.len() && matches!(chars[j], '=' | ':') {
        j += 1;
    }
    while j < chars.len() && matches!(chars[j], ' ' | '\t' | '\u{c}') {
        j += 1;
    }
    let value: String = chars[j.min(chars.len())..].iter().collect();
    (unescape(&key), unescape(&value))
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\u{c}'),
            Some('u') => {
                let hex: String = it.by_ref().take(4).collect();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(ch) => out.push(ch),
                    None => {
                        out.push_str("\\u");
                        out.push_str(&hex);
                    }
                }
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

/// Debezium Server's `application.properties` → connector-style names. Returns whether the
/// input was one.
pub(super) fn normalize_debezium_server(
    options: BTreeMap<String, String>,
    warnings: &mut Vec<String>,
) -> (BTreeMap<String, String>, bool) {
    if !options.keys().any(|k| k.starts_with("debezium.source.")) {
        return (options, false);
    }
    let mut out = BTreeMap::new();
    for (k, v) in options {
        let mapped = if let Some(rest) = k.strip_prefix("debezium.source.") {
            rest.to_string()
        } else if k == "debezium.transforms" {
            "transforms".to_string()
        } else if let Some(rest) = k.strip_prefix("debezium.transforms.") {
            format!("transforms.{rest}")
        } else if let Some(rest) = k.strip_prefix("debezium.sink.kafka.producer.") {
            format!("producer.{rest}")
        } else if k == "debezium.sink.type" {
            if v != "kafka" {
                warnings.push(format!("debezium.sink.type = {v}: walrelay writes to Kafka only"));
            }
            continue;
        } else if let Some(rest) = k.strip_prefix("debezium.format.") {
            // debezium.format.value = json, debezium.format.value.schemas.enable = false
            let (which, tail) = rest.split_once('.').unwrap_or((rest, ""));
            if !["key", "value", "header"].contains(&which) {
                warnings.push(format!("`{k}` is not used by walrelay"));
                continue;
            }
            if tail.is_empty() {
                if v == "json" {
                    out.insert(format!("{which}.converter"), JSON_CONVERTER.to_string());
                } else if v == "avro" {
                    // Debezium Server's `avro` is Confluent's AvroConverter; its
                    // `debezium.format.value.*` options are the converter's (below).
                    out.insert(format!("{which}.converter"), AVRO_CONVERTER.to_string());
                } else if v == "protobuf" {
                    // Debezium Server's `protobuf` is Confluent's ProtobufConverter.
                    out.insert(format!("{which}.converter"), PROTOBUF_CONVERTER.to_string());
                } else {
                    warnings.push(format!(
                        "`{k}` = {v}: walrelay writes json, string and (values) avro and protobuf only; using json"
                    ));
                    out.insert(format!("{which}.converter"), JSON_CONVERTER.to_string());
                }
                continue;
            }
            format!("{which}.converter.{tail}")
        } else {
            k.clone()
        };
        out.insert(mapped, v);
    }
    // Debezium Server's formats default to JSON with schemas, headers included.
    for which in ["key", "value", "header"] {
        out.entry(format!("{which}.converter")).or_insert_with(|| JSON_CONVERTER.to_string());
        out.entry(format!("{which}.converter.schemas.enable"))
            .or_insert_with(|| "true".to_string());
    }
    warnings.push(
        "Debezium Server drops the router's partition and timestamp; walrelay sets them as Kafka Connect does (only matters with a `partition` placement or table.field.event.timestamp)"
            .into(),
    );
    (out, true)
}
