//! `[outbox]`: the tables whose INSERTs become records.

use std::fmt;

use serde::Deserialize;

use super::{check_identifier, invalid, section, ConfigError, Options};

/// `[outbox]`: the tables whose INSERTs become records. One slot and one publication serve
/// them all, so their events keep the WAL's commit order across tables (and with the logical
/// messages [`super::Config::messages`] selects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxConfig {
    /// No duplicates, in the order configured; empty only for a message-only relay.
    pub tables: Vec<TableName>,
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
}

/// `[outbox]`, and its `non_transactional_messages` (checked with the message selection).
pub(super) fn parse(opts: &Options) -> Result<(OutboxConfig, Option<String>), ConfigError> {
    const S: &str = "outbox";
    let raw: Raw = section::from_options(S, opts)?;
    let non_transactional = raw.non_transactional_messages;
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
            return Ok((OutboxConfig { tables: Vec::new() }, non_transactional))
        }
        (None, Some(many)) => ("tables", many),
        (None, None) => ("table", "public.outbox".to_string()),
    };
    let mut tables: Vec<TableName> = Vec::new();
    for item in list.split(',').map(str::trim) {
        let (schema, name) = item.split_once('.').unwrap_or(("public", item));
        check_identifier(S, key, schema)?;
        check_identifier(S, key, name)?;
        let table = TableName::new(schema, name);
        if tables.contains(&table) {
            return Err(invalid(S, key, &list, &format!("names {table} twice")));
        }
        tables.push(table);
    }
    Ok((OutboxConfig { tables }, non_transactional))
}
