//! Outbox tables by pattern: one schema per tenant, each with its outbox, tenants added and
//! dropped while the relay runs — how their tables join the publication, and what is said when
//! they may not. (Which tables a pattern matches is the catalog's: [`super::catalog::NAME`].)
//!
//! A table added to a publication after rows were written does not publish those rows, so a
//! new tenant's table must be in the publication from the transaction that creates it, before
//! it holds a row. An event trigger does that ([`install_sql`]): at the end of every `CREATE
//! TABLE` (or a rename or move into a matching name) whose `schema.name` a pattern matches, it
//! adds the table to the publication, inside the creating transaction. pgoutput decodes each
//! change with the catalog as it was at that change, so the rows the creating transaction
//! writes after its `CREATE TABLE` are published.
//!
//! A table that would join holding rows is refused instead: `CREATE TABLE … AS` and `SELECT …
//! INTO` write their rows before the trigger runs, and a table renamed into a match may hold
//! rows from before; those rows would never be published. The command fails with the fix
//! (create the table, then insert), so no such table exists with rows walrelay never saw.
//!
//! Creating an event trigger needs a superuser once: `walrelay setup` (or `run`, as a
//! superuser) installs it, or replaces one an older walrelay installed. Whether it is there and
//! current is decided in one place ([`trigger`]) and said in the same words everywhere
//! ([`not_guaranteed`]): `check`, `setup`, the start of `run` and the watch. A `FOR ALL TABLES`
//! publication needs no trigger: it carries every table from its first row.
//!
//! A matching table the publication lacks (made before the trigger was installed, or taken out
//! of the publication) is said once, with the fix; a dropped one is said once too. Neither
//! stops the relay: tenant 412 of 1,000 must not stop the others.

use std::time::Duration;

use tokio_postgres::types::ToSql;
use tokio_postgres::Client;

use super::catalog::{CANDIDATE, NAME};
use super::error::classify_pg;
use crate::config::{OutboxConfig, TableName};
use crate::error::{Error, Result};
use crate::source::Control;

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
    /// Nothing guarantees it; the text says what is missing ([`Trigger::problem`]).
    NotGuaranteed(String),
}

/// The event trigger's name (and its function's) for `publication`: at most 63 bytes, as
/// PostgreSQL cuts identifiers there.
pub fn trigger_name(publication: &str) -> String {
    let mut name = format!("walrelay_tenants_{publication}");
    name.truncate(63);
    name
}

/// The SQLSTATE of a refused command: `object_not_in_prerequisite_state` (the table is not
/// empty, as joining the publication requires).
pub const REFUSED: &str = "55000";

/// The trigger function's body for `publication` and `regex` (see [`install_sql`]). It does
/// nothing for a `FOR ALL TABLES` publication (which carries the table already) or a missing
/// one (walrelay torn down, the trigger left): neither may fail the tenant's DDL.
///
/// A table joins only while it holds no row: `EXISTS` reads at most one row, under a SHARE
/// lock taken first, which waits for the transactions writing to the table and keeps any other
/// from adding a row before the join commits. (A new table no one else sees, and a rename or a
/// move, which holds ACCESS EXCLUSIVE, wait for nothing; an `ALTER TABLE` of a lighter lock on
/// a matching table the publication lacks waits for its writers.)
fn function_body(publication: &str, regex: &str) -> String {
    let publication = publication.replace('\'', "''");
    let regex = regex.replace('\'', "''");
    format!(
        r#"
DECLARE
  t record;
  holds_rows boolean;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication
                 WHERE pubname = '{publication}' AND NOT puballtables) THEN
    RETURN;
  END IF;
  FOR t IN
    SELECT c.oid, n.nspname, c.relname, pg_catalog.min(d.command_tag)
             FILTER (WHERE d.command_tag IN ('CREATE TABLE AS', 'SELECT INTO')) AS filled_by
    FROM pg_catalog.pg_event_trigger_ddl_commands() d
    JOIN pg_catalog.pg_class c ON c.oid = d.objid
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE d.classid = 'pg_catalog.pg_class'::regclass AND {CANDIDATE}
      AND {NAME} ~ '{regex}'
      AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_rel pr
                      JOIN pg_catalog.pg_publication p ON p.oid = pr.prpubid
                      WHERE p.pubname = '{publication}' AND pr.prrelid = c.oid)
    GROUP BY c.oid, n.nspname, c.relname
  LOOP
    EXECUTE pg_catalog.format('LOCK TABLE %I.%I IN SHARE MODE', t.nspname, t.relname);
    EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %I.%I)', t.nspname, t.relname)
      INTO holds_rows;
    IF holds_rows AND t.filled_by IS NOT NULL THEN
      RAISE EXCEPTION USING ERRCODE = '{REFUSED}',
        MESSAGE = pg_catalog.format('%s would create %I.%I holding rows that walrelay never relays: the table matches an [outbox] tables pattern, and rows written before a table joins publication %I are not published', t.filled_by, t.nspname, t.relname, '{publication}'),
        HINT = pg_catalog.format('create the table empty with CREATE TABLE (or CREATE TABLE ... AS ... WITH NO DATA), then fill it with INSERT INTO %I.%I SELECT ...', t.nspname, t.relname);
    ELSIF holds_rows THEN
      RAISE EXCEPTION USING ERRCODE = '{REFUSED}',
        MESSAGE = pg_catalog.format('ALTER TABLE would add %I.%I, which holds rows, to publication %I: the table matches an [outbox] tables pattern, and rows written before a table joins the publication are not published, so walrelay would never relay them', t.nspname, t.relname, '{publication}'),
        HINT = 'rename or move a table into a matching name while it is empty, then insert; to relay the rows a matching table holds already, add it with `walrelay setup`, then re-publish them with `walrelay audit --since <when they were written> --repair`';
    END IF;
    EXECUTE pg_catalog.format('ALTER PUBLICATION %I ADD TABLE %I.%I',
                              '{publication}', t.nspname, t.relname);
  END LOOP;
END
"#
    )
}

/// The function and event trigger that add every table created later (or renamed into a
/// match) whose `schema.name` the patterns of `outbox` match to `publication`, in the
/// transaction that creates it, and refuse one that would join holding rows. The function runs
/// as its owner (SECURITY DEFINER: the tenant's migration role need not own the publication,
/// nor read the table), with a fixed search_path. A table it cannot add fails its `CREATE
/// TABLE`, rather than exist with its rows unpublished. `CREATE OR REPLACE` replaces the
/// function an older walrelay installed.
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

/// How new tenants' tables join the publication, as the catalog has it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The publication is `FOR ALL TABLES`: no trigger is needed.
    NotNeeded,
    /// This walrelay's trigger, for these patterns, enabled.
    Current,
    Missing,
    Disabled,
    /// Its function is not the one this walrelay installs: an older walrelay's (which lets a
    /// table join holding rows), or one for other patterns.
    Stale,
}

impl Trigger {
    /// What is wrong, in the words `check`, `setup`, `run` and the watch all use; `None` when
    /// nothing is.
    pub fn problem(self, publication: &str) -> Option<String> {
        let name = trigger_name(publication);
        match self {
            Trigger::NotNeeded | Trigger::Current => None,
            Trigger::Missing => Some(format!("no event trigger {name}")),
            Trigger::Disabled => Some(format!("event trigger {name} is disabled")),
            Trigger::Stale => Some(format!("event trigger {name} is stale: its function is not the one this walrelay installs (an older walrelay installed it, or [outbox] tables changed since)")),
        }
    }
}

/// The one reading of the trigger's state: run by `check`, `setup` and `run` ([`ensure`]) on
/// the control connection, and by the watch on the session's, with the same query and the same
/// judgement.
pub async fn trigger(
    client: &Client,
    timeout: Duration,
    publication: &str,
    regex: &str,
) -> Result<Trigger> {
    let what = "cannot look up the event trigger for tenants' tables";
    let name = trigger_name(publication);
    let params: [&(dyn ToSql + Sync); 2] = [&publication, &name];
    let query = client.query_one(
        "SELECT COALESCE((SELECT puballtables FROM pg_catalog.pg_publication WHERE pubname = $1), \
         false), t.evtenabled <> 'D', p.prosrc FROM (VALUES (1)) one \
         LEFT JOIN pg_catalog.pg_event_trigger t ON t.evtname = $2 \
         LEFT JOIN pg_catalog.pg_proc p ON p.oid = t.evtfoid",
        &params,
    );
    let row = match tokio::time::timeout(timeout, query).await {
        Ok(row) => row.map_err(|e| classify_pg(what, e))?,
        Err(_) => {
            return Err(Error::transient_msg(format!(
                "{what}: no answer within {} s",
                timeout.as_secs()
            )))
        }
    };
    let (all_tables, enabled, body): (bool, Option<bool>, Option<String>) =
        (row.get(0), row.get(1), row.get(2));
    Ok(match (all_tables, enabled) {
        (true, _) => Trigger::NotNeeded,
        (false, None) => Trigger::Missing,
        (false, Some(false)) => Trigger::Disabled,
        (false, Some(true)) if body.as_deref() == Some(&function_body(publication, regex)) => {
            Trigger::Current
        }
        (false, Some(true)) => Trigger::Stale,
    })
}

/// How new tenants' tables join `publication`: installs (or replaces) the event trigger when it
/// is not current and `install` allows, as a superuser. A role that may not is left with
/// [`Joining::NotGuaranteed`], which says what is wrong.
pub async fn ensure(
    control: &Control,
    publication: &str,
    outbox: &OutboxConfig,
    install: bool,
) -> Result<Joining> {
    let regex = outbox.pattern_regex().unwrap_or_default();
    let state = trigger(control.client(), control.timeout, publication, &regex).await?;
    match state {
        Trigger::NotNeeded => return Ok(Joining::AllTables),
        Trigger::Current => return Ok(Joining::Trigger),
        _ => {}
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
        let name = trigger_name(publication);
        let sql = install_sql(publication, outbox);
        if let Err(e) = control.batch(&sql).await? {
            return Err(Error::definite_with(
                format!("cannot install the event trigger {name} that adds new tenants' outbox tables to publication {publication}"),
                format!("run its SQL as a superuser: {}", one_line(&sql)),
                e,
            ));
        }
        let what = match state {
            Trigger::Stale => "replaced the stale event trigger",
            _ => "installed the event trigger",
        };
        tracing::info!(trigger = %name, %publication, "{what} that adds each new tenant's outbox table to the publication in the transaction that creates it, and refuses one that would join holding rows");
        return Ok(Joining::Trigger);
    }
    let problem = state.problem(publication).expect("the trigger does not guarantee the join");
    Ok(Joining::NotGuaranteed(problem))
}

/// What a [`Trigger::problem`] means for the tenants, the same sentence everywhere.
pub fn not_guaranteed(problem: &str, publication: &str) -> String {
    format!("{problem}: a table an [outbox] tables pattern matches that is created (or renamed into a match) from now on may join publication {publication} late or holding rows, and the rows written before it joins are never relayed")
}

/// The fix for [`Joining::NotGuaranteed`].
pub fn install_fix(publication: &str) -> String {
    format!("run `walrelay setup` once as a superuser (CREATE EVENT TRIGGER needs one): it installs (or replaces) the event trigger {} that adds each new tenant's table to publication {publication} in the transaction that creates it — `walrelay setup --print-sql` prints its SQL for a DBA", trigger_name(publication))
}

/// Logs [`not_guaranteed`] with its fix: once per start, and by the watch at each change.
pub fn warn_not_guaranteed(publication: &str, problem: &str) {
    tracing::warn!(%publication, "{}; fix: {}", not_guaranteed(problem, publication), install_fix(publication));
}

/// The tables the patterns (`$2`, the regex) match now, by OID, with their names and whether
/// publication `$1` carries each: what the watch lists every few seconds. `FOR TABLES IN
/// SCHEMA` is PostgreSQL 15's.
pub fn coverage_sql(version_num: i32) -> String {
    let in_schema = if version_num >= 150000 {
        "EXISTS (SELECT 1 FROM pg_catalog.pg_publication_namespace pn \
         WHERE pn.pnpubid = p.oid AND pn.pnnspid = c.relnamespace)"
    } else {
        "false"
    };
    format!(
        "SELECT c.oid, n.nspname::text, c.relname::text, \
             p.puballtables OR EXISTS (SELECT 1 FROM pg_catalog.pg_publication_rel pr \
               WHERE pr.prpubid = p.oid AND pr.prrelid = c.oid) OR {in_schema} \
             FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             CROSS JOIN (SELECT oid, puballtables FROM pg_catalog.pg_publication WHERE pubname = $1) p \
             WHERE {CANDIDATE} AND {NAME} ~ $2"
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_the_trigger_locks_the_table_and_refuses_one_holding_rows_before_it_joins() {
        let body = function_body("p", "^(?:t[0-9]+\\.outbox)$");
        let at = |needle: &str| body.find(needle).unwrap_or_else(|| panic!("{needle}\n{body}"));
        assert!(at("IN SHARE MODE") < at("SELECT EXISTS (SELECT 1 FROM %I.%I)"));
        assert!(at("SELECT EXISTS (SELECT 1 FROM %I.%I)") < at("RAISE EXCEPTION"));
        assert!(at("RAISE EXCEPTION") < at("ALTER PUBLICATION %I ADD TABLE"));
        assert!(body.contains(&format!("ERRCODE = '{REFUSED}'")), "{body}");
        assert!(body.contains("then fill it with INSERT INTO %I.%I SELECT"), "{body}");
    }

    #[test]
    fn tenants_a_stale_trigger_is_said_with_what_it_costs_and_a_current_one_not_at_all() {
        assert_eq!(Trigger::Current.problem("p"), None);
        assert_eq!(Trigger::NotNeeded.problem("p"), None);
        let stale = Trigger::Stale.problem("p").expect("stale is a problem");
        assert!(stale.starts_with("event trigger walrelay_tenants_p is stale"), "{stale}");
        let said = not_guaranteed(&stale, "p");
        assert!(said.contains("may join publication p late or holding rows"), "{said}");
    }
}
