//! The file's TOML document → one flat `dotted.key → text` map per section.
//!
//! `[router]`, `[debezium]` and `[kafka]` take other projects' option names verbatim (Debezium's,
//! librdkafka's), so their keys contain dots. TOML reads `a.b = 1` as nested tables and
//! `"a.b" = 1` as one key; both spellings are flattened to the same dotted name here, and every
//! scalar (string, integer, float, boolean) becomes its text, so `"linger.ms" = 5` and
//! `"linger.ms" = "5"` mean the same.

use std::collections::BTreeMap;

use super::{invalid, section_names, ConfigError, Options};

/// Parses `text` and flattens each section; a section a colleague module owns whole (its
/// table as TOML, e.g. a nested structure) can be taken from the returned document first.
pub(super) fn parse(text: &str) -> Result<toml::Table, ConfigError> {
    text.parse().map_err(|e: toml::de::Error| syntax_error(text, &e))
}

/// The parser's message with the line and column, but without the source line toml's own
/// `Display` quotes: that line may be `url = "postgres://user:password@…"`.
fn syntax_error(text: &str, e: &toml::de::Error) -> ConfigError {
    let start = e.span().map(|s| s.start).unwrap_or(0).min(text.len());
    let before = &text.as_bytes()[..start];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before.iter().rposition(|&b| b == b'\n').map(|i| i + 1).unwrap_or(0);
    let column = String::from_utf8_lossy(&before[line_start..]).chars().count() + 1;
    let message = e.message().lines().map(str::trim).collect::<Vec<_>>().join("; ");
    ConfigError::Syntax { line, column, message }
}

/// Removes every walrelay section from `doc` and returns their options; a top-level key that
/// is no section is an error.
pub(super) fn sections(
    doc: &mut toml::Table,
) -> Result<BTreeMap<&'static str, Options>, ConfigError> {
    if let Some(key) = doc.keys().find(|k| !section_names().any(|s| s == k.as_str())) {
        let names: Vec<&str> = section_names().collect();
        return Err(ConfigError::UnknownKey {
            section: "top level",
            key: key.clone(),
            hint: format!("the sections are [{}]", names.join("], [")),
        });
    }
    let mut out = BTreeMap::new();
    for section in section_names() {
        match doc.remove(section) {
            None => {}
            Some(toml::Value::Table(table)) => {
                let mut options = Options::new();
                flatten(section, "", &table, &mut options)?;
                out.insert(section, options);
            }
            Some(other) => {
                return Err(invalid(
                    section,
                    section,
                    "",
                    &format!("must be a [section] table, not {}", type_name(&other)),
                ))
            }
        }
    }
    Ok(out)
}

fn flatten(
    section: &'static str,
    prefix: &str,
    table: &toml::Table,
    out: &mut Options,
) -> Result<(), ConfigError> {
    for (key, value) in table {
        let name = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        let text = match value {
            toml::Value::Table(inner) => {
                flatten(section, &name, inner, out)?;
                continue;
            }
            // A list is written as the comma-separated text Debezium and librdkafka use for
            // their list options (`tables = ["a", "b"]` is `tables = "a,b"`).
            toml::Value::Array(_) if !takes_list(section, &name) => {
                return Err(invalid(
                    section,
                    &name,
                    "",
                    "takes one value, not a list; write it without the brackets",
                ))
            }
            toml::Value::Array(items) => {
                let mut texts = Vec::with_capacity(items.len());
                for item in items {
                    match scalar_text(item) {
                        Some(text) => texts.push(text),
                        None => {
                            return Err(invalid(
                                section,
                                &name,
                                "",
                                &format!(
                                    "list items must be strings, numbers or booleans, not {}",
                                    type_name(item)
                                ),
                            ))
                        }
                    }
                }
                texts.join(",")
            }
            other => match scalar_text(other) {
                Some(text) => text,
                None => {
                    return Err(invalid(
                        section,
                        &name,
                        "",
                        &format!(
                            "values must be strings, numbers, booleans or lists of them, not {}",
                            type_name(other)
                        ),
                    ))
                }
            },
        };
        if out.insert(name.clone(), text).is_some() {
            return Err(invalid(section, &name, "", "is set twice (quoted and dotted spellings)"));
        }
    }
    Ok(())
}

/// Whether a key may be written as a list: `[outbox] tables`, `[http] hosts`, and the sections that take
/// other projects' options (Debezium's and librdkafka's list options are comma-separated
/// text). Every other key of walrelay's own takes one value.
fn takes_list(section: &str, key: &str) -> bool {
    match section {
        "outbox" => key == "tables",
        "http" => key == "hosts",
        "router" | "debezium" | "kafka" | "envelope" => true,
        sink => crate::sink::sections().iter().any(|s| s.section == sink && s.lists.contains(&key)),
    }
}

fn scalar_text(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A TOML value's type, for messages that may not show the value.
fn type_name(value: &toml::Value) -> &'static str {
    match value {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a date-time",
        toml::Value::Array(_) => "a list",
        toml::Value::Table(_) => "a table",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_syntax_errors_give_line_and_column_without_the_source_line() {
        let text = "[source]\nurl = \"postgres://walrelay:secret@127\".0.0.1:1/app\"\n";
        let e = parse(text).unwrap_err();
        let ConfigError::Syntax { line, column, .. } = &e else { panic!("{e:?}") };
        assert_eq!((*line, *column), (2, 39), "{e}");
        assert!(!e.to_string().contains("secret"), "{e}");
    }

    #[test]
    fn document_values_of_the_wrong_shape_are_named_by_type() {
        let mut doc = parse("source = \"postgres://u:pw123@h/d\"\n").unwrap();
        let e = sections(&mut doc).unwrap_err().to_string();
        assert!(e.contains("[source]") && e.contains("not a string"), "{e}");
        assert!(!e.contains("pw123"), "{e}");
        let mut doc = parse("[kafka]\nx = [{ a = \"pw123\" }]\n").unwrap();
        let e = sections(&mut doc).unwrap_err().to_string();
        assert!(e.contains("`x`") && e.contains("not a table"), "{e}");
        assert!(!e.contains("pw123"), "{e}");
    }
}
