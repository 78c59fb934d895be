//! A partitioned outbox as the catalog has it: how it is partitioned, its partitions and their
//! bounds, and the leaf tables under a partition. For `purge`, which drops whole partitions
//! where the scheme allows it. Only `pg_catalog` is read here.

use super::connect::Control;
use crate::config::TableName;
use crate::error::Result;

/// How a partitioned table is partitioned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheme {
    /// `pg_get_partkeydef`, e.g. `RANGE (created_at)`, for messages.
    pub key: String,
    /// `PARTITION BY RANGE` on exactly the one column asked about: its partitions' upper
    /// bounds say how old their rows are.
    pub range_on_column: bool,
}

/// One partition of a partitioned table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    pub name: TableName,
    pub oid: u32,
    /// Partitioned itself (sub-partitions).
    pub partitioned: bool,
    pub bound: Bound,
}

/// A partition's bound, from `pg_get_expr(relpartbound)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    /// The DEFAULT partition: rows no other partition takes.
    Default,
    /// `FOR VALUES FROM (…) TO (upper)` on one column.
    Range { upper: Upper },
    /// Anything else (LIST, HASH, a multi-column range), as the catalog writes it.
    Other(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upper {
    MaxValue,
    /// The bound's value as text (the SQL literal unquoted), to be cast to the key's type.
    Value(String),
}

/// How `oid` (a partitioned table) is partitioned, with respect to `column`.
pub async fn scheme(control: &Control, oid: u32, column: &str) -> Result<Scheme> {
    let row = control
        .query_one(
            "cannot read how the outbox table is partitioned",
            "SELECT pg_catalog.pg_get_partkeydef(p.partrelid), \
             p.partstrat = 'r' AND p.partnatts = 1 AND p.partattrs[0] = \
               (SELECT a.attnum FROM pg_catalog.pg_attribute a \
                WHERE a.attrelid = p.partrelid AND a.attname = $2 AND NOT a.attisdropped) \
             FROM pg_catalog.pg_partitioned_table p WHERE p.partrelid = $1",
            &[&oid, &column],
        )
        .await?;
    Ok(Scheme { key: row.get(0), range_on_column: row.get::<_, Option<bool>>(1).unwrap_or(false) })
}

/// The partitions directly under `oid`, by name.
pub async fn partitions(control: &Control, oid: u32) -> Result<Vec<Partition>> {
    let rows = control
        .query(
            "cannot list the outbox table's partitions",
            "SELECT c.oid, n.nspname::text, c.relname::text, c.relkind = 'p', \
             pg_catalog.pg_get_expr(c.relpartbound, c.oid) \
             FROM pg_catalog.pg_inherits i \
             JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE i.inhparent = $1 ORDER BY n.nspname, c.relname",
            &[&oid],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Partition {
            oid: r.get(0),
            name: TableName { schema: r.get(1), name: r.get(2) },
            partitioned: r.get(3),
            bound: parse_bound(&r.get::<_, String>(4)),
        })
        .collect())
}

/// The leaf tables under `oid` (itself when it is a leaf), by name.
pub async fn leaves(control: &Control, oid: u32) -> Result<Vec<TableName>> {
    let rows = control
        .query(
            "cannot list the leaf partitions",
            "SELECT n.nspname::text, c.relname::text \
             FROM pg_catalog.pg_partition_tree($1::oid) t \
             JOIN pg_catalog.pg_class c ON c.oid = t.relid \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE t.isleaf ORDER BY n.nspname, c.relname",
            &[&oid],
        )
        .await?;
    Ok(rows.iter().map(|r| TableName { schema: r.get(0), name: r.get(1) }).collect())
}

/// Whether a range bound `upper` is at or before `cutoff` (both as text), compared as
/// `type_name` — the key column's type, so the server does the comparison its way.
pub async fn upper_at_or_before(
    control: &Control,
    upper: &str,
    cutoff: &str,
    type_name: &str,
) -> Result<bool> {
    let row = control
        .query_one(
            "cannot compare a partition bound with the cut-off",
            &format!("SELECT $1::text::{type_name} <= $2::text::{type_name}"),
            &[&upper, &cutoff],
        )
        .await?;
    Ok(row.get(0))
}

/// Reads `DEFAULT`, `FOR VALUES FROM (a) TO (b)` with one value each; anything else is kept
/// as text.
pub fn parse_bound(text: &str) -> Bound {
    if text == "DEFAULT" {
        return Bound::Default;
    }
    let range = text
        .strip_prefix("FOR VALUES FROM (")
        .and_then(|rest| rest.strip_suffix(')'))
        .and_then(|rest| split_values(rest, ") TO ("));
    let Some((_, upper)) = range else {
        return Bound::Other(text.to_string());
    };
    if upper == "MAXVALUE" {
        return Bound::Range { upper: Upper::MaxValue };
    }
    match unquote(upper) {
        Some(value) => Bound::Range { upper: Upper::Value(value) },
        // Several columns, or a value that isn't a quoted literal (a number): not a time.
        None => Bound::Other(text.to_string()),
    }
}

/// Splits `from) TO (to` at the separator outside quotes.
fn split_values<'a>(text: &'a str, separator: &str) -> Option<(&'a str, &'a str)> {
    let mut quoted = false;
    for (i, c) in text.char_indices() {
        if c == '\'' {
            quoted = !quoted;
        } else if !quoted && text[i..].starts_with(separator) {
            return Some((&text[..i], &text[i + separator.len()..]));
        }
    }
    None
}

/// `'it''s'` → `it's`; None unless the whole text is one SQL string literal.
fn unquote(text: &str) -> Option<String> {
    let inner = text.strip_prefix('\'')?.strip_suffix('\'')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            // Inside the literal a quote is only ever doubled.
            if chars.next() != Some('\'') {
                return None;
            }
        }
        out.push(c);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(v: &str) -> Bound {
        Bound::Range { upper: Upper::Value(v.into()) }
    }

    #[test]
    fn partitions_range_bounds_give_their_upper_value() {
        assert_eq!(
            parse_bound("FOR VALUES FROM ('2026-01-01 00:00:00+00') TO ('2026-01-02 00:00:00+00')"),
            value("2026-01-02 00:00:00+00")
        );
        assert_eq!(
            parse_bound("FOR VALUES FROM (MINVALUE) TO ('2026-01-01')"),
            value("2026-01-01")
        );
        assert_eq!(
            parse_bound("FOR VALUES FROM ('2026-01-01 00:00:00+00') TO (MAXVALUE)"),
            Bound::Range { upper: Upper::MaxValue }
        );
        assert_eq!(parse_bound("FOR VALUES FROM ('a) TO (b') TO ('c''d')"), value("c'd"));
    }

    #[test]
    fn partitions_default_and_other_schemes_are_told_apart() {
        assert_eq!(parse_bound("DEFAULT"), Bound::Default);
        for other in [
            "FOR VALUES IN (1, 2)",
            "FOR VALUES WITH (modulus 4, remainder 0)",
            "FOR VALUES FROM ('2026-01-01', 1) TO ('2026-02-01', 5)",
            "FOR VALUES FROM (1) TO (100)",
        ] {
            assert_eq!(parse_bound(other), Bound::Other(other.into()), "{other}");
        }
    }
}
