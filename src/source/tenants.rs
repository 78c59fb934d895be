//! Outbox tables by pattern: one schema per tenant, each with its outbox, tenants added and
//! dropped while the relay runs.
//!
//! A table added to a publication after rows were written does not publish those rows, so a
//! new tenant's table must be in the publication from the transaction that creates it. An
//! event trigger does that ([`install_sql`]): at the end of every `CREATE TABLE` (or a rename
//! into a matching name) whose `schema.name` a pattern matches, it adds the table to the
//! publication, inside the creating transaction, before any row of it can be written. pgoutput
//! decodes each change with the catalog as it was at that change, so the rows the creating
//! transaction writes after its `CREATE TABLE` are published. Creating an event trigger needs a
//! superuser once: `walrelay setup` (or `run`, as a superuser) installs it, `check` says
//! whether it is there. A `FOR ALL TABLES` publication needs no trigger: it carries every table
//! from its first row.
//!
//! PostgreSQL decides what a pattern matches, everywhere: the trigger runs inside it, so the
//! relay (placing a new relation of the stream), the watch, `check`, replay and the audit ask
//! it with the same expression ([`NAME`] `~` [`OutboxConfig::pattern_regex`]) instead of
//! matching with a second regex engine that could disagree.
//!
//! A matching table the publication lacks (made before the trigger was installed, or taken out
//! of the publication) is said once, with the fix; a dropped one is said once too. Neither
//! stops the relay: tenant 412 of 1,000 must not stop the others.

use super::catalog::OutboxTable;
use crate::config::{OutboxConfig, TableName};
use crate::error::{Error, Result};
use crate::source::Control;

/// `schema.name` of `pg_class c` joined to `pg_namespace n`: what a pattern is matched against.
pub const NAME: &str = "(n.nspname || '.' || c.relname)";

/// The tables a pattern may match: ordinary and partitioned tables outside the system schemas,
/// partitions left out (their rows go by their root's name, `publish_via_partition_root`).
pub const CANDIDATE: &str = "c.relkind IN ('r', 'p') AND NOT c.relispartition \
     AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%'";

/// What a session (or `setup`) found of the tenants' tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenants {
    pub joining: Joining,
    /// How many tables the patterns match now (beside those by name).
    pub matched: usize,
    /// Tables a pattern matches that the publication does not carry: their rows are not
    /// relayed.
    pub uncovered: Vec<TableName>,
}

/// How new tenants' tables get into the publication from their first row, if they do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Joining {
    /// The event trigger for this publication and these patterns is installed and enabled.
    Trigger,
    /// The publication is `FOR ALL TABLES`: every table is in it from its creation.
    AllTables,
    /// Nothing guarantees it; the text says what is missing.
    NotGuaranteed(String),
}

/// The event trigger's name (and its function's) for `publication`: at most 63 bytes, as
/// PostgreSQL cuts identifiers there.
pub fn trigger_name(publication: &str) -> String {
    let mut name = format!("walrelay_tenants_{publication}");
    name.truncate(63);
    name
}

/// The trigger function's body for `publication` and `regex` (see [`install_sql`]). It does
/// nothing for a `FOR ALL TABLES` publication (which carries the table already) or a missing
/// one (walrelay torn down, the trigger left): neither may fail the tenant's DDL.
fn function_body(publication: &str, regex: &str) -> String {
    let publication = publication.replace('\'', "''");
    let regex = regex.replace('\'', "''");
    format!(
        r#"
DECLARE
  t record;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication
                 WHERE pubname = '{publication}' AND NOT puballtables) THEN
    RETURN;
  END IF;
  FOR t IN
    SELECT DISTINCT c.oid, n.nspname, c.relname
    FROM pg_catalog.pg_event_trigger_ddl_commands() d
    JOIN pg_catalog.pg_class c ON c.oid = d.objid
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE d.classid = 'pg_catalog.pg_class'::regclass AND {CANDIDATE}
      AND {NAME} ~ '{regex}'
      AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_rel pr
                      JOIN pg_catalog.pg_publication p ON p.oid = pr.prpubid
                      WHERE p.pubname = '{publication}' AND pr.prrelid = c.oid)
  LOOP
    EXECUTE pg_catalog.format('ALTER PUBLICATION %I ADD TABLE %I.%I',
                              '{publication}', t.nspname, t.relname);
  END LOOP;
END
"#
    )
}

/// The function and event trigger that add every table created later (or renamed into a
/// match) whose `schema.name` the patterns of `outbox` match to `publication`, in the
/// transaction that creates it. The function runs as its owner (SECURITY DEFINER: the tenant's
/// migration role need not own the publication), with a fixed search_path. A table it cannot
/// add fails its `CREATE TABLE`, rather than exist with its rows unpublished.
///
/// `CREATE SCHEMA … CREATE TABLE …` reports its tables under the tag `CREATE SCHEMA`.
pub fn install_sql(publication: &str, outbox: &OutboxConfig) -> String {
    let name = trigger_name(publication);
    let regex = outbox.pattern_regex().unwrap_or_default();
    let body = function_body(publication, &regex);
    format!(
        r#"CREATE OR REPLACE FUNCTION public."{name}"() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $walrelay${body}$walrelay$;
DROP EVENT TRIGGER IF EXISTS "{name}";
CREATE EVENT TRIGGER "{name}" ON ddl_command_end
  WHEN TAG IN ('CREATE TABLE', 'CREATE TABLE AS', 'SELECT INTO', 'CREATE SCHEMA', 'ALTER TABLE')
  EXECUTE FUNCTION public."{name}"();
"#
    )
}

/// What `walrelay teardown` runs: the trigger, then its function.
pub fn drop_sql(publication: &str) -> String {
    let name = trigger_name(publication);
    format!("DROP EVENT TRIGGER IF EXISTS \"{name}\"; DROP FUNCTION IF EXISTS public.\"{name}\"()")
}

/// The state of the event trigger for `publication` against the patterns of `outbox`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    Missing,
    Disabled,
    /// Installed for other patterns (the configuration changed since `setup`).
    Stale,
    Current,
}

pub async fn trigger(
    control: &Control,
    publication: &str,
    outbox: &OutboxConfig,
) -> Result<Trigger> {
    let row = control
        .query_opt(
            "cannot look up the event trigger for tenants' tables",
            "SELECT t.evtenabled <> 'D', p.prosrc FROM pg_catalog.pg_event_trigger t \
             JOIN pg_catalog.pg_proc p ON p.oid = t.evtfoid WHERE t.evtname = $1",
            &[&trigger_name(publication)],
        )
        .await?;
    let Some(row) = row else { return Ok(Trigger::Missing) };
    let expected = function_body(publication, &outbox.pattern_regex().unwrap_or_default());
    Ok(match (row.get::<_, bool>(0), row.get::<_, String>(1) == expected) {
        (false, _) => Trigger::Disabled,
        (true, false) => Trigger::Stale,
        (true, true) => Trigger::Current,
    })
}

/// How new tenants' tables join `publication`: installs (or updates) the event trigger when it
/// is not current and `install` allows, as a superuser. A role that may not is left with
/// [`Joining::NotGuaranteed`], which says what to run.
pub async fn ensure(
    control: &Control,
    publication: &str,
    all_tables: bool,
    outbox: &OutboxConfig,
    install: bool,
) -> Result<Joining> {
    if all_tables {
        return Ok(Joining::AllTables);
    }
    let name = trigger_name(publication);
    let state = trigger(control, publication, outbox).await?;
    if state == Trigger::Current {
        return Ok(Joining::Trigger);
    }
    let superuser: bool = control
        .query_one(
            "cannot read the role's attributes",
            "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user",
            &[],
        )
        .await?
        .get(0);
    if install && superuser && state != Trigger::Disabled {
        let sql = install_sql(publication, outbox);
        if let Err(e) = control.batch(&sql).await? {
            return Err(Error::definite_with(
                format!("cannot install the event trigger {name} that adds new tenants' outbox tables to publication {publication}"),
                format!("run its SQL as a superuser: {}", one_line(&sql)),
                e,
            ));
        }
        tracing::info!(trigger = %name, %publication, "installed the event trigger that adds each new tenant's outbox table to the publication in the transaction that creates it");
        return Ok(Joining::Trigger);
    }
    let missing = match state {
        Trigger::Missing => format!("no event trigger {name}"),
        Trigger::Disabled => format!("event trigger {name} is disabled"),
        Trigger::Stale => {
            format!("event trigger {name} was installed for other [outbox] tables patterns")
        }
        Trigger::Current => unreachable!("returned above"),
    };
    Ok(Joining::NotGuaranteed(missing))
}

/// The fix for [`Joining::NotGuaranteed`].
pub fn install_fix(publication: &str) -> String {
    format!("run `walrelay setup` once as a superuser (CREATE EVENT TRIGGER needs one): it installs the event trigger {} that adds each new tenant's table to publication {publication} in the transaction that creates it — `walrelay setup --print-sql` prints its SQL for a DBA", trigger_name(publication))
}

/// Says, once per start, that tenants created from now on may lose their first rows.
pub fn warn_not_guaranteed(publication: &str, why: &str) {
    tracing::warn!(%publication, "{why}: an outbox table a pattern of [outbox] tables matches that is created from now on joins the publication late, and the rows written before it joins are not relayed; fix: {}", install_fix(publication));
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
/// [`super::tenants`]), in two queries whatever their number: a thousand tenants' tables are
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
    let mut columns = super::catalog::columns_of(control, &oids).await?;
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

/// Whether `table` (a name from the WAL: the table may be gone since) matches a pattern.
pub async fn matches(control: &Control, outbox: &OutboxConfig, table: &TableName) -> Result<bool> {
    let Some(regex) = outbox.pattern_regex() else { return Ok(false) };
    Ok(control
        .query_one(
            "cannot match a table against the [outbox] tables patterns",
            "SELECT $1::text ~ $2",
            &[&table.to_string(), &regex],
        )
        .await?
        .get(0))
}

/// Says that `table` matches a pattern but `publication` does not carry it.
pub fn warn_uncovered(publication: &str, table: &TableName) {
    tracing::warn!(%table, %publication,
        "the table matches an [outbox] tables pattern but is not in the publication, so its rows are not relayed: run `walrelay setup` (it adds the table, and installs the event trigger that adds later tenants' tables as they are created), then re-publish the rows written before with `walrelay audit --since <when the table was created> --repair`");
}

fn one_line(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}
