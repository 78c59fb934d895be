//! What the catalog says about the outbox tables and the publication: the one place `run`,
//! `check` and `setup` learn them from — by name, and by `[outbox] tables` pattern ([`NAME`]).
//! How tenants' tables join the publication is [`super::tenants`]'s, a floor above: it reads
//! these, never the other way round.
//!
//! Outbox rows are recognised by relation OID, never by name (I8): a table keeps its OID across
//! `ALTER TABLE … RENAME`, and with `publish_via_partition_root` pgoutput names every row of a
//! partitioned outbox by the root's OID. Only `pg_catalog` is read here, never an outbox table
//! (I4).

use super::connect::Control;
use crate::config::{OutboxConfig, TableName};
use crate::error::{Error, Result};
use crate::pgoutput::{Column, Relation};

/// `schema.name` of `pg_class c` joined to `pg_namespace n`: what an `[outbox] tables` pattern
/// is matched against. PostgreSQL decides what a pattern matches, everywhere: the event trigger
/// runs inside it ([`super::tenants`]), so the relay, the watch, `check`, replay and the audit
/// ask it with the same expression (`NAME ~` [`OutboxConfig::pattern_regex`]) instead of
/// matching with a second regex engine that could disagree.
pub const NAME: &str = "(n.nspname || '.' || c.relname)";

/// The tables a pattern may match: ordinary and partitioned tables outside the system schemas,
/// partitions left out (their rows go by their root's name, `publish_via_partition_root`).
pub const CANDIDATE: &str = "c.relkind IN ('r', 'p') AND NOT c.relispartition \
     AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%'";

/// A configured outbox table as the catalog has it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxTable {
    /// As configured.
    pub name: TableName,
    pub oid: u32,
    pub partitioned: bool,
    pub owner: String,
    /// The connected role can act as the owner (needed to add it to a publication).
    pub owned: bool,
    pub columns: Vec<CatalogColumn>,
}

impl OutboxTable {
    /// The table as pgoutput's Relation message describes it, for binding the router to it
    /// where no stream runs (`check`, replay, audit). Replica identity is the default's: only
    /// inserts are relayed, which carry every column whatever it is.
    pub fn relation(&self) -> Relation {
        Relation {
            id: self.oid,
            namespace: self.name.schema.clone(),
            name: self.name.name.clone(),
            replica_identity: b'd',
            columns: self
                .columns
                .iter()
                .map(|c| Column {
                    flags: 0,
                    name: c.name.clone(),
                    type_oid: c.type_oid,
                    type_modifier: c.type_modifier,
                })
                .collect(),
        }
    }
}

/// One live column of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogColumn {
    pub name: String,
    pub type_oid: u32,
    pub type_modifier: i32,
    /// `format_type`, e.g. `character varying(255)`.
    pub type_name: String,
    pub not_null: bool,
}

/// What a name in `[outbox] tables` turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableLookup {
    Found(OutboxTable),
    Missing,
    /// A view, a foreign table…: never published. The text names the kind.
    NotATable(&'static str),
}

/// Looks one configured table up by name.
pub async fn outbox_table(control: &Control, name: &TableName) -> Result<TableLookup> {
    let row = control
        .query_opt(
            "cannot look up the outbox table",
            "SELECT c.oid, c.relkind::text, pg_catalog.pg_get_userbyid(c.relowner)::text, \
             pg_catalog.pg_has_role(current_user, c.relowner, 'USAGE') \
             FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2",
            &[&name.schema, &name.name],
        )
        .await?;
    let Some(row) = row else {
        return Ok(TableLookup::Missing);
    };
    let oid: u32 = row.get(0);
    let relkind: String = row.get(1);
    let partitioned = match relkind.as_str() {
        "r" => false,
        "p" => true,
        "v" => return Ok(TableLookup::NotATable("a view")),
        "m" => return Ok(TableLookup::NotATable("a materialized view")),
        "f" => return Ok(TableLookup::NotATable("a foreign table")),
        _ => return Ok(TableLookup::NotATable("not a table")),
    };
    Ok(TableLookup::Found(OutboxTable {
        name: name.clone(),
        oid,
        partitioned,
        owner: row.get(2),
        owned: row.get(3),
        columns: columns(control, oid).await?,
    }))
}

/// Every configured table, by name (or a definite error naming the first that is not a usable
/// table), then every table a pattern matches now.
pub async fn outbox_tables(control: &Control, outbox: &OutboxConfig) -> Result<Vec<OutboxTable>> {
    let mut tables = named_tables(control, &outbox.tables).await?;
    for table in matching_tables(control, outbox).await? {
        if !tables.iter().any(|t| t.oid == table.oid) {
            tables.push(table);
        }
    }
    Ok(tables)
}

/// PostgreSQL reads the patterns, or a definite error naming them and what it said.
pub async fn check_patterns(control: &Control, outbox: &OutboxConfig) -> Result<()> {
    let Some(regex) = outbox.pattern_regex() else { return Ok(()) };
    let sql = format!("SELECT ''::text ~ '{}'", regex.replace('\'', "''"));
    match control.batch(&sql).await? {
        Ok(()) => Ok(()),
        Err(e) => {
            let patterns: Vec<&str> = outbox.patterns.iter().map(|p| p.text.as_str()).collect();
            Err(Error::definite_with(
                format!("PostgreSQL cannot read the [outbox] tables patterns {}", patterns.join(", ")),
                "keep the patterns to what Java, Rust and PostgreSQL read alike: classes, groups, `|`, quantifiers and `\\.`, `\\d`, `\\w`",
                e,
            ))
        }
    }
}

/// The tables `[outbox] tables` patterns match now (PostgreSQL matches them: see
/// [`NAME`] `~` the regex), in two queries whatever their number: a thousand tenants' tables are
/// read as fast as one.
pub async fn matching_tables(control: &Control, outbox: &OutboxConfig) -> Result<Vec<OutboxTable>> {
    let Some(regex) = outbox.pattern_regex() else { return Ok(Vec::new()) };
    check_patterns(control, outbox).await?;
    let rows = control
        .query(
            "cannot list the tables the [outbox] tables patterns match",
            &format!(
                "SELECT c.oid, n.nspname::text, c.relname::text, c.relkind = 'p', \
                 pg_catalog.pg_get_userbyid(c.relowner)::text, \
                 pg_catalog.pg_has_role(current_user, c.relowner, 'USAGE') \
                 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                 WHERE {} AND {} ~ $1 ORDER BY 2, 3",
                CANDIDATE,
                NAME
            ),
            &[&regex],
        )
        .await?;
    let oids: Vec<u32> = rows.iter().map(|r| r.get(0)).collect();
    let mut columns = columns_of(control, &oids).await?;
    Ok(rows
        .iter()
        .map(|r| {
            let oid: u32 = r.get(0);
            OutboxTable {
                name: TableName { schema: r.get(1), name: r.get(2) },
                oid,
                partitioned: r.get(3),
                owner: r.get(4),
                owned: r.get(5),
                columns: columns.remove(&oid).unwrap_or_default(),
            }
        })
        .collect())
}

/// The live columns of each relation of `oids`, in order, in one query.
pub(super) async fn columns_of(
    control: &Control,
    oids: &[u32],
) -> Result<std::collections::HashMap<u32, Vec<CatalogColumn>>> {
    let rows = control
        .query(
            "cannot read the outbox tables' columns from the catalog",
            "SELECT attrelid, attname::text, atttypid, atttypmod, \
             pg_catalog.format_type(atttypid, atttypmod), attnotnull FROM pg_catalog.pg_attribute \
             WHERE attrelid = ANY($1) AND attnum > 0 AND NOT attisdropped ORDER BY attrelid, attnum",
            &[&oids],
        )
        .await?;
    let mut by_table: std::collections::HashMap<u32, Vec<CatalogColumn>> = Default::default();
    for r in rows {
        by_table.entry(r.get(0)).or_default().push(CatalogColumn {
            name: r.get(1),
            type_oid: r.get(2),
            type_modifier: r.get(3),
            type_name: r.get(4),
            not_null: r.get(5),
        });
    }
    Ok(by_table)
}

async fn named_tables(control: &Control, names: &[TableName]) -> Result<Vec<OutboxTable>> {
    let mut tables = Vec::with_capacity(names.len());
    for name in names {
        match outbox_table(control, name).await? {
            TableLookup::Found(table) => tables.push(table),
            TableLookup::Missing => {
                return Err(Error::definite(
                    format!("outbox table {name} does not exist (or was dropped)"),
                    "create the table, or point [outbox] table / tables at the existing one",
                ))
            }
            TableLookup::NotATable(kind) => {
                return Err(Error::definite(
                    format!("outbox table {name} is {kind}; only tables are published"),
                    "point [outbox] table / tables at the table the application writes",
                ))
            }
        }
    }
    Ok(tables)
}

/// The live columns of relation `oid`, in order.
pub async fn columns(control: &Control, oid: u32) -> Result<Vec<CatalogColumn>> {
    Ok(columns_of(control, &[oid]).await?.remove(&oid).unwrap_or_default())
}

/// A relation as the catalog has it now, found by OID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationNow {
    pub name: TableName,
    /// The root of its partition tree (itself when it is not a partition).
    pub root: u32,
}

/// Relation `oid` now, or `None` when it no longer exists (dropped since the WAL being decoded
/// was written).
pub async fn relation(control: &Control, oid: u32) -> Result<Option<RelationNow>> {
    let row = control
        .query_opt(
            "cannot look up a relation the publication sends",
            "SELECT n.nspname::text, c.relname::text, \
             COALESCE(pg_catalog.pg_partition_root(c.oid), c.oid)::oid \
             FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.oid = $1",
            &[&oid],
        )
        .await?;
    Ok(row.map(|r| RelationNow {
        name: TableName { schema: r.get(0), name: r.get(1) },
        root: r.get(2),
    }))
}

/// A publication's settings and what it sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    pub name: String,
    pub all_tables: bool,
    pub insert: bool,
    pub update: bool,
    pub delete: bool,
    pub truncate: bool,
    /// `publish_via_partition_root`: rows of partitions are sent as the root's.
    pub via_root: bool,
    /// Every relation it sends (`pg_publication_tables`: explicit tables, `FOR TABLES IN
    /// SCHEMA`, `FOR ALL TABLES`).
    pub tables: Vec<PublishedTable>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedTable {
    pub oid: u32,
    /// Root of its partition tree (itself when not a partition).
    pub root: u32,
    pub name: TableName,
    /// PostgreSQL 15+ row filter: rows it rejects are never sent.
    pub row_filter: Option<String>,
    /// PostgreSQL 15+ column list; `None` = all columns.
    pub columns: Option<Vec<String>>,
}

impl Publication {
    /// The published relation that carries `table`'s rows: the table itself or, for a
    /// partitioned table published without `publish_via_partition_root`, one of its partitions.
    pub fn entry_for(&self, table: &OutboxTable) -> Option<&PublishedTable> {
        self.tables
            .iter()
            .find(|t| t.oid == table.oid)
            .or_else(|| self.tables.iter().find(|t| t.root == table.oid))
    }

    /// The operations it publishes, for messages.
    pub fn operations(&self) -> Vec<&'static str> {
        [
            (self.insert, "insert"),
            (self.update, "update"),
            (self.delete, "delete"),
            (self.truncate, "truncate"),
        ]
        .into_iter()
        .filter_map(|(on, op)| on.then_some(op))
        .collect()
    }

    /// What stops `walrelay run` from relaying `tables` through this publication, each with
    /// its fix. Empty when it can.
    pub fn problems(&self, tables: &[OutboxTable]) -> Vec<Problem> {
        let name = &self.name;
        let mut problems = Vec::new();
        // A message-only relay needs no table: pgoutput sends logical messages whatever the
        // publication publishes.
        if !self.insert && !tables.is_empty() {
            problems.push(Problem {
                what: format!(
                    "publication {name} does not publish INSERTs (publishes: {})",
                    list(&self.operations())
                ),
                fix: format!("ALTER PUBLICATION {name} SET (publish = 'insert')"),
            });
        }
        for table in tables {
            if self.entry_for(table).is_none() {
                problems.push(Problem {
                    what: format!("publication {name} does not include {}", table.name),
                    fix: format!("ALTER PUBLICATION {name} ADD TABLE {}", table.name),
                });
            } else if table.partitioned && !self.via_root {
                problems.push(Problem {
                    what: format!(
                        "publication {name} sends the rows of the partitioned outbox {} under each partition's name (publish_via_partition_root is off)",
                        table.name
                    ),
                    fix: format!("ALTER PUBLICATION {name} SET (publish_via_partition_root = true)"),
                });
            }
        }
        problems
    }
}

/// Something about the publication that must change, and the statement that changes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub what: String,
    pub fix: String,
}

/// The publication named `name`, or `None` when it does not exist.
pub async fn publication(control: &Control, name: &str) -> Result<Option<Publication>> {
    let row = control
        .query_opt(
            "cannot look up the publication",
            "SELECT puballtables, pubinsert, pubupdate, pubdelete, pubtruncate, pubviaroot \
             FROM pg_catalog.pg_publication WHERE pubname = $1",
            &[&name],
        )
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    // Row filters and column lists exist from PostgreSQL 15 on.
    let (filter, cols) = if control.server.version_num >= 150000 {
        ("t.rowfilter", "t.attnames::text[]")
    } else {
        ("NULL::text", "NULL::text[]")
    };
    let rows = control
        .query(
            "cannot list the publication's tables",
            &format!(
                "SELECT c.oid, COALESCE(pg_catalog.pg_partition_root(c.oid), c.oid)::oid, \
                 t.schemaname::text, t.tablename::text, {filter}, {cols} \
                 FROM pg_catalog.pg_publication_tables t \
                 JOIN pg_catalog.pg_namespace n ON n.nspname = t.schemaname \
                 JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename \
                 WHERE t.pubname = $1"
            ),
            &[&name],
        )
        .await?;
    let tables = rows
        .iter()
        .map(|r| PublishedTable {
            oid: r.get(0),
            root: r.get(1),
            name: TableName { schema: r.get(2), name: r.get(3) },
            row_filter: r.get(4),
            columns: r.get(5),
        })
        .collect();
    Ok(Some(Publication {
        name: name.to_string(),
        all_tables: row.get(0),
        insert: row.get(1),
        update: row.get(2),
        delete: row.get(3),
        truncate: row.get(4),
        via_root: row.get(5),
        tables,
    }))
}

/// What the publication's comment starts with when it names the slots that decoded with it.
const SLOTS_COMMENT: &str = "walrelay slots: ";

/// The slots walrelay recorded as decoding with publication `name` ([`record_slot`]).
pub async fn publication_slots(control: &Control, name: &str) -> Result<Vec<String>> {
    let row = control
        .query_opt(
            "cannot read the publication's comment",
            "SELECT pg_catalog.obj_description(oid, 'pg_publication') FROM pg_catalog.pg_publication WHERE pubname = $1",
            &[&name],
        )
        .await?;
    let comment: Option<String> = row.and_then(|r| r.get(0));
    Ok(comment
        .and_then(|c| c.strip_prefix(SLOTS_COMMENT).map(str::to_owned))
        .map(|list| list.split(", ").map(str::to_owned).collect())
        .unwrap_or_default())
}

/// Records in publication `name`'s comment that `slot` decodes with it, beside `before`: the
/// evidence that tells a lost slot from a first one. Best effort: a role that does not own the
/// publication cannot comment on it, and is then never warned of a lost slot by this.
pub async fn record_slot(control: &Control, name: &str, slot: &str, before: &[String]) {
    if before.iter().any(|s| s == slot) {
        return;
    }
    let mut slots = before.to_vec();
    slots.push(slot.to_string());
    let comment = format!("{SLOTS_COMMENT}{}", slots.join(", ")).replace('\'', "''");
    let sql = format!("COMMENT ON PUBLICATION \"{}\" IS '{comment}'", name.replace('"', "\"\""));
    let refused = match control.batch(&sql).await {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.chain(),
    };
    tracing::debug!(publication = %name, error = %refused, "cannot record the slot in the publication's comment");
}

/// Forgets `slot` in publication `name`'s comment (`walrelay teardown` of a slot whose
/// publication other slots keep).
pub async fn forget_slot(control: &Control, name: &str, slot: &str) -> Result<()> {
    let slots: Vec<String> =
        publication_slots(control, name).await?.into_iter().filter(|s| s != slot).collect();
    let comment = match slots.is_empty() {
        true => "NULL".to_string(),
        false => format!("'{}{}'", SLOTS_COMMENT, slots.join(", ").replace('\'', "''")),
    };
    let sql = format!("COMMENT ON PUBLICATION \"{}\" IS {comment}", name.replace('"', "\"\""));
    let _ = control.batch(&sql).await?;
    Ok(())
}

/// `CREATE PUBLICATION` for the outbox tables: INSERTs only (UPDATE, DELETE and TRUNCATE of
/// outbox rows are never events, so they are not even decoded), and rows of partitions under
/// the root's OID. Without a table (a message-only relay) the publication is empty: pgoutput
/// still needs one to start, and sends logical messages whatever it publishes.
pub fn create_publication_sql(name: &str, tables: &[TableName]) -> String {
    let with = "WITH (publish = 'insert', publish_via_partition_root = true)";
    if tables.is_empty() {
        return format!("CREATE PUBLICATION \"{name}\" {with}");
    }
    let list = tables.iter().map(TableName::quoted).collect::<Vec<_>>().join(", ");
    format!("CREATE PUBLICATION \"{name}\" FOR TABLE {list} {with}")
}

/// Makes sure the publication exists and can carry every outbox table: creates it when missing
/// (and `create` allows), refuses one that cannot, with the statement that fixes it.
///
/// `create` is false once the relay has streamed: a publication that disappears later was
/// dropped by someone, and recreating it would hide the events in between.
pub async fn ensure_publication(
    control: &Control,
    name: &str,
    tables: &[OutboxTable],
    create: bool,
) -> Result<Publication> {
    if let Some(publication) = publication(control, name).await? {
        let problems = publication.problems(tables);
        if let Some(first) = problems.first() {
            let fixes: Vec<&str> = problems.iter().map(|p| p.fix.as_str()).collect();
            return Err(Error::definite(first.what.clone(), fixes.join("; ")));
        }
        for table in tables {
            if let Some(filter) = publication.entry_for(table).and_then(|t| t.row_filter.as_ref()) {
                tracing::warn!(publication = %name, table = %table.name, %filter,
                    "the publication has a row filter on an outbox table: rows it rejects are never relayed");
            }
        }
        return Ok(publication);
    }
    if !create {
        return Err(Error::definite(
            format!("publication {name} was dropped while walrelay was running"),
            "changes written while it was missing cannot be decoded with it: recreate the publication, move the slot past the gap (pg_replication_slot_advance) or create a new slot, and reconcile the outbox rows of the gap with Kafka",
        ));
    }
    let names: Vec<TableName> = tables.iter().map(|t| t.name.clone()).collect();
    let sql = create_publication_sql(name, &names);
    if let Err(e) = control.batch(&sql).await? {
        return Err(Error::definite_with(
            format!("cannot create publication {name}"),
            format!("grant the role CREATE on the database and ownership of the outbox tables, or create the publication yourself: {sql}"),
            e,
        ));
    }
    tracing::info!(publication = %name, "created publication");
    publication(control, name).await?.ok_or_else(|| {
        Error::transient_msg(format!("publication {name} vanished right after it was created"))
    })
}

pub fn list(items: &[&str]) -> String {
    if items.is_empty() {
        "nothing".into()
    } else {
        items.join(", ")
    }
}

#[cfg(test)]
#[path = "catalog_tests.rs"]
mod tests;
