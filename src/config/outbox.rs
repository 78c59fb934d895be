//! `[outbox]`: the tables whose INSERTs become records.

use std::fmt;

use serde::Deserialize;

use super::{check_identifier, invalid, section, ConfigError, Options};

/// `[outbox]`: the tables whose INSERTs become records. One slot and one publication serve
/// them all, so their events keep the WAL's commit order across tables (and with the logical
/// messages [`super::Config::messages`] selects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxConfig {
    /// No duplicates, in the order configured; empty for a message-only relay, or one of
    /// patterns only.
    pub tables: Vec<TableName>,
    /// Tables by pattern (one schema per tenant, each with its outbox): every table whose
    /// `schema.name` a pattern matches whole, now or created later, is an outbox table.
    pub patterns: Vec<TablePattern>,
    /// `tenant_header`: the header that carries each row's schema name (the tenant, when each
    /// tenant has a schema).
    pub tenant_header: Option<String>,
}

impl OutboxConfig {
    /// No outbox table, by name or pattern: the events are logical decoding messages.
    pub fn is_message_only(&self) -> bool {
        self.tables.is_empty() && self.patterns.is_empty()
    }

    /// The patterns as one regular expression for PostgreSQL's `~`, anchored at both ends:
    /// `^(?:(?:p1)|(?:p2))$`. PostgreSQL is the one judge of what a pattern matches — the
    /// event trigger that adds new tenants' tables to the publication runs inside it — so the
    /// relay, `check`, replay and the audit ask it too (`source::tenants`), and no two engines
    /// can disagree about a table.
    pub fn pattern_regex(&self) -> Option<String> {
        if self.patterns.is_empty() {
            return None;
        }
        let alternatives: Vec<String> =
            self.patterns.iter().map(|p| format!("(?:{})", p.text)).collect();
        Some(format!("^(?:{})$", alternatives.join("|")))
    }
}

/// A pattern of `[outbox] tables`, in the regex syntax of Debezium's `table.include.list`,
/// anchored at both ends and matched against `schema.name`: `tenant_.*\.outbox`. Its syntax is
/// checked here; PostgreSQL matches it (see [`OutboxConfig::pattern_regex`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablePattern {
    /// As configured.
    pub text: String,
}

impl TablePattern {
    /// Regex syntax makes an item of `[outbox] tables` a pattern; a name is letters, digits, `_`
    /// and one dot.
    pub fn looks_like(item: &str) -> bool {
        item.contains(['*', '+', '?', '[', '(', '|', '{', '\\', '^', '$'])
    }

    /// The pattern, if both regex dialects read it the same way: the common syntax of Java
    /// (Debezium), Rust and PostgreSQL — classes, groups, alternation, quantifiers, `\.`,
    /// `\d`, `\w`, `\s` — and none of what only one of them has.
    pub fn new(text: &str) -> Result<TablePattern, String> {
        if let Err(e) = regex::Regex::new(&format!("^(?:{text})$")) {
            return Err(format!("is not a regular expression ({e})"));
        }
        if let Some(bad) = ["(?", "\\p", "\\P", "\\b", "\\B", "\\A", "\\z", "\\Q"]
            .into_iter()
            .find(|bad| text.contains(bad))
        {
            return Err(format!(
                "uses `{bad}`, which PostgreSQL's regular expressions (which match it) read \
                 otherwise or not at all: keep to classes, groups, `|`, quantifiers and \
                 `\\.`, `\\d`, `\\w`, `\\s`"
            ));
        }
        Ok(TablePattern { text: text.to_string() })
    }
}

/// A schema-qualified table name as configured (plain lower-case identifiers).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableName {
    pub schema: String,
    pub name: String,
}

impl TableName {
    pub fn new(schema: &str, name: &str) -> TableName {
        TableName { schema: schema.to_string(), name: name.to_string() }
    }

    /// `"schema"."name"`, for SQL (quotes doubled: a partition's name is not checked like a
    /// configured one).
    pub fn quoted(&self) -> String {
        let quote = |s: &str| s.replace('"', "\"\"");
        format!("\"{}\".\"{}\"", quote(&self.schema), quote(&self.name))
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.schema, self.name)
    }
}

/// The section as written. `tables` is the comma-joined list (see `document`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Raw {
    table: Option<String>,
    tables: Option<String>,
    non_transactional_messages: Option<String>,
    tenant_header: Option<String>,
}

/// `[outbox]`, and its `non_transactional_messages` (checked with the message selection).
pub(super) fn parse(opts: &Options) -> Result<(OutboxConfig, Option<String>), ConfigError> {
    const S: &str = "outbox";
    let raw: Raw = section::from_options(S, opts)?;
    let non_transactional = raw.non_transactional_messages;
    let tenant_header = raw.tenant_header;
    if let Some(h) = &tenant_header {
        if h.is_empty() {
            return Err(invalid(S, "tenant_header", h, "must name a header, e.g. tenant"));
        }
    }
    let (key, list) = match (raw.table, raw.tables) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                S,
                "table/tables",
                "",
                "set one of them: `table` for one outbox table, `tables` for several",
            ))
        }
        (Some(one), None) => ("table", one),
        // `tables = []`: a message-only relay (checked against the message selection).
        (None, Some(many)) if many.trim().is_empty() => {
            return Ok((
                OutboxConfig { tables: Vec::new(), patterns: Vec::new(), tenant_header },
                non_transactional,
            ))
        }
        (None, Some(many)) => ("tables", many),
        (None, None) => ("table", "public.outbox".to_string()),
    };
    let mut tables: Vec<TableName> = Vec::new();
    let mut patterns: Vec<TablePattern> = Vec::new();
    for item in list.split(',').map(str::trim) {
        if TablePattern::looks_like(item) {
            let pattern = TablePattern::new(item).map_err(|e| {
                invalid(S, key, item, &format!("{e}; write a regular expression that matches schema.name whole, e.g. tenant_.*\\.outbox (without a comma: the list is split at commas, as Debezium's table.include.list is)"))
            })?;
            if patterns.contains(&pattern) {
                return Err(invalid(S, key, &list, &format!("lists the pattern {item} twice")));
            }
            patterns.push(pattern);
            continue;
        }
        let (schema, name) = item.split_once('.').unwrap_or(("public", item));
        check_identifier(S, key, schema)?;
        check_identifier(S, key, name)?;
        let table = TableName::new(schema, name);
        if tables.contains(&table) {
            return Err(invalid(S, key, &list, &format!("names {table} twice")));
        }
        tables.push(table);
    }
    Ok((OutboxConfig { tables, patterns, tenant_header }, non_transactional))
}
