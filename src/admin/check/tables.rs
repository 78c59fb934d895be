//! The outbox tables (each one's columns against the router options) and the publication that
//! must carry them, as `walrelay run` reads them ([`crate::source::catalog`]).

use super::postgres::Privileges;
use super::Report;
use crate::config::Config;
use crate::error::Result;
use crate::router::Router;
use crate::source::catalog::{self, list, OutboxTable, Publication, TableLookup};
use crate::source::Control;

pub(super) async fn run(
    config: &Config,
    control: &Control,
    privileges: &Privileges,
    r: &mut Report,
) -> Result<()> {
    let mut found = Vec::new();
    let mut all_found = true;
    if config.outbox.is_message_only() {
        r.ok(
            "outbox tables",
            "none ([outbox] tables = []): a message-only relay, whose events are logical messages",
        );
    }
    for name in &config.outbox.tables {
        let what = format!("outbox table {name}");
        match catalog::outbox_table(control, name).await? {
            TableLookup::Found(table) => {
                if table.partitioned {
                    r.ok(&what, format!("exists (partitioned), owner {}; its partitions' rows are relayed under its name (publish_via_partition_root)", table.owner));
                } else {
                    r.ok(&what, format!("exists, owner {}", table.owner));
                }
                columns(config, &table, r);
                super::retention::run(config, control, &table, r).await?;
                super::replay::run(config, control, &table, r).await?;
                found.push(table);
            }
            TableLookup::Missing => {
                all_found = false;
                r.fail(
                    &what,
                    "does not exist",
                    "create the table (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL, aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb, and optionally created_at timestamptz NOT NULL DEFAULT now() for purge, replay and the audit: README.md, Configuration), or set [outbox] table / tables to the existing one",
                );
            }
            TableLookup::NotATable(kind) => {
                all_found = false;
                r.fail(
                    &what,
                    format!("is {kind}; only tables are published"),
                    "set [outbox] table / tables to the table the application writes",
                );
            }
        }
    }
    publication(config, control, &found, all_found, privileges, r).await
}

/// The columns the router needs, each with its type; then the router's own binding of the
/// table (the check `walrelay run` makes when the first Relation message arrives).
fn columns(config: &Config, table: &OutboxTable, r: &mut Report) {
    let qualified = table.name.to_string();
    let router = &config.router;
    // Types the router can't read as a string (it reads every other type as its text).
    const NOT_STRING: &[u32] = &[16, 17, 20, 21, 23, 1114];
    let roles: [(&str, &str, &str, bool); 4] = [
        (router.field_event_id.as_str(), "table.field.event.id", "the `id` header", false),
        (router.field_event_key.as_str(), "table.field.event.key", "the record key", false),
        (router.field_payload.as_str(), "table.field.event.payload", "the record value", false),
        (router.route_by_field.as_str(), "route.by.field", "the topic", true),
    ];
    // With one table the column lines read as before; with several they name the table.
    let prefix =
        if config.outbox.tables.len() > 1 { format!("{qualified} ") } else { String::new() };
    let mut all_ok = true;
    for (name, option, role, string) in roles {
        let what = format!("{prefix}column {name} ({option})");
        match table.columns.iter().find(|c| c.name == name) {
            None => {
                all_ok = false;
                r.fail(
                    &what,
                    format!("{qualified} has no column {name}, which becomes {role}"),
                    format!("add the column, or set [router] \"{option}\" to an existing column"),
                );
            }
            Some(c) if string && NOT_STRING.contains(&c.type_oid) => {
                all_ok = false;
                r.fail(
                    &what,
                    format!("is {}, but {role} is read from a string column", c.type_name),
                    "make it text or varchar, or point the option at a string column",
                );
            }
            Some(c) => r.ok(&what, format!("{}, becomes {role}", c.type_name)),
        }
    }
    if !all_ok {
        return;
    }
    // Everything else the router binds (timestamp, schema version, additional placements).
    let relation = table.relation();
    match Router::new(router.clone()).bind(&relation, &[]) {
        Ok(_) => r.ok(
            &format!("{prefix}router"),
            format!("[router] options bind to the {} columns of {qualified}", table.columns.len()),
        ),
        Err(e) => r.fail(
            &format!("{prefix}router"),
            e.to_string(),
            "change the column or the [router] option named",
        ),
    }
}

async fn publication(
    config: &Config,
    control: &Control,
    tables: &[OutboxTable],
    all_found: bool,
    privileges: &Privileges,
    r: &mut Report,
) -> Result<()> {
    let name = &config.source.publication;
    let what = format!("publication {name}");
    let names: Vec<String> = tables.iter().map(|t| t.name.to_string()).collect();
    let qualified = names.join(", ");
    let Some(publication) = catalog::publication(control, name).await? else {
        let create = catalog::create_publication_sql(name, &config.outbox.tables).replace('"', "");
        let owns = privileges.superuser || tables.iter().all(|t| t.owned);
        if all_found && !(privileges.superuser || (privileges.create_on_db && owns)) {
            let mut missing = Vec::new();
            if !privileges.create_on_db {
                missing.push("CREATE on the database");
            }
            if !owns {
                missing.push("ownership of the outbox tables");
            }
            r.fail(
                &what,
                format!(
                    "does not exist, and the role can't create it: it lacks {}",
                    missing.join(" and ")
                ),
                format!("have the tables' owner run: {create}"),
            );
        } else {
            r.ok(&what, format!("does not exist yet — `walrelay run` (or `walrelay setup`) creates it: {create}"));
        }
        return Ok(());
    };
    let ops = publication.operations();
    let problems = publication.problems(tables);
    for problem in &problems {
        r.fail(&what, &problem.what, &problem.fix);
    }
    if config.outbox.is_message_only() {
        r.ok(&what, "exists; a message-only relay needs no table in it (pgoutput sends logical messages whatever it publishes)");
        if !publication.tables.is_empty() {
            r.warn(
                &format!("{what} scope"),
                format!(
                    "publishes {} table{}: a message-only relay skips their rows, yet each change is decoded and sent",
                    publication.tables.len(),
                    super::plural(publication.tables.len())
                ),
                format!(
                    "a dedicated publication: {}, then set [source] publication",
                    catalog::create_publication_sql("walrelay", &[]).replace('"', "")
                ),
            );
        }
        return Ok(());
    }
    if problems.is_empty() && !tables.is_empty() {
        let scope = if publication.all_tables {
            "all tables"
        } else if tables.len() == 1 {
            "the table"
        } else {
            "the tables"
        };
        let via_root = match (tables.iter().any(|t| t.partitioned), publication.via_root) {
            (true, _) => ", partitions via their root",
            // Harmless without a partitioned outbox table: said, not warned about.
            (false, false) if config.outbox.patterns.is_empty() => {
                " (publish_via_partition_root is off: fine while no outbox table is partitioned)"
            }
            _ => "",
        };
        r.ok(&what, format!("covers {qualified} ({scope}), publishes {}{via_root}", list(&ops)));
    }
    filters(&publication, tables, &what, r);
    if publication.all_tables {
        r.warn(
            &format!("{what} scope"),
            "is FOR ALL TABLES: every table's changes are decoded and sent to walrelay, which skips them and confirms past them",
            format!(
                "a dedicated publication: {}, then set [source] publication",
                catalog::create_publication_sql("walrelay", &config.outbox.tables).replace('"', "")
            ),
        );
    }
    // A tenant's table created later may be partitioned: its rows would come under each
    // partition's name, which the patterns need not match.
    if !publication.via_root && !config.outbox.patterns.is_empty() {
        r.warn(
            &format!("{what} partitions"),
            "publish_via_partition_root is off: a tenant's partitioned outbox table would be sent under its partitions' names, which the patterns may not match",
            format!("ALTER PUBLICATION {name} SET (publish_via_partition_root = true)"),
        );
    }
    let extra: Vec<&str> = ops.iter().copied().filter(|op| *op != "insert").collect();
    if problems.is_empty() && !extra.is_empty() {
        r.warn(
            &format!("{what} operations"),
            format!(
                "also publishes {}: walrelay routes only INSERTs (an UPDATE of an outbox row follows table.op.invalid.behavior, DELETE and TRUNCATE are skipped), yet each is decoded and sent",
                list(&extra)
            ),
            format!("ALTER PUBLICATION {name} SET (publish = 'insert'), unless another consumer needs them"),
        );
    }
    Ok(())
}

/// Row filters and column lists (PostgreSQL 15+) on an outbox table: a filter drops events
/// before walrelay sees them, a column list may leave out what the router reads.
fn filters(publication: &Publication, tables: &[OutboxTable], what: &str, r: &mut Report) {
    for table in tables {
        let Some(entry) = publication.entry_for(table) else {
            continue;
        };
        if let Some(filter) = &entry.row_filter {
            r.warn(
                &format!("{what} row filter"),
                format!("{} is published WHERE {filter}: rows it rejects are never relayed", table.name),
                format!("ALTER PUBLICATION {} SET TABLE {} (without WHERE), unless dropping those events is intended", publication.name, table.name),
            );
        }
        if let Some(columns) = &entry.columns {
            let left_out: Vec<&str> = table
                .columns
                .iter()
                .map(|c| c.name.as_str())
                .filter(|c| !columns.iter().any(|k| k == c))
                .collect();
            if !left_out.is_empty() {
                r.warn(
                    &format!("{what} column list"),
                    format!(
                        "{} is published without columns {}: the router cannot read them",
                        table.name,
                        left_out.join(", ")
                    ),
                    format!(
                        "ALTER PUBLICATION {} SET TABLE {} (without a column list)",
                        publication.name, table.name
                    ),
                );
            }
        }
    }
}
