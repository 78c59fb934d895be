//! `walrelay check`: one line per check, `ok` / `warn` / `FAIL … — fix: …`; exit code 1 when any
//! check failed.
//!
//! A missing publication or slot is not a failure — `walrelay run` creates them — but the role
//! must then be allowed to create them, which is checked instead.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::producer::{BaseProducer, Producer};
use tokio_postgres::Client;

use super::{connect, describe_source, human_bytes, SERVER_LSN};
use crate::config::Config;
use crate::pgoutput::{Column, Relation};
use crate::router::Router;

/// How long the broker has to answer a metadata request.
pub(crate) const BROKER_TIMEOUT: Duration = Duration::from_secs(5);

/// Prints check lines as they are decided and counts them.
#[derive(Default)]
struct Report {
    ok: usize,
    warnings: usize,
    problems: usize,
}

impl Report {
    fn ok(&mut self, what: &str, detail: impl AsRef<str>) {
        self.ok += 1;
        line(format!("ok   {what}: {}", detail.as_ref()));
    }

    fn warn(&mut self, what: &str, problem: impl AsRef<str>, fix: impl AsRef<str>) {
        self.warnings += 1;
        line(format!("warn {what}: {} — fix: {}", problem.as_ref(), fix.as_ref()));
    }

    fn fail(&mut self, what: &str, problem: impl AsRef<str>, fix: impl AsRef<str>) {
        self.problems += 1;
        line(format!("FAIL {what}: {} — fix: {}", problem.as_ref(), fix.as_ref()));
    }
}

fn line(text: String) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

pub(super) async fn run(config: &Config) -> ExitCode {
    let mut r = Report::default();
    r.ok("config", "parsed and valid");
    postgres(config, &mut r).await;
    broker(config, &mut r).await;
    line(format!(
        "check: {} ok, {} warning{}, {} problem{}",
        r.ok,
        r.warnings,
        if r.warnings == 1 { "" } else { "s" },
        r.problems,
        if r.problems == 1 { "" } else { "s" },
    ));
    if r.problems == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// What the outbox table check learned, for the publication check.
struct Table {
    oid: u32,
    owned: bool,
}

async fn postgres(config: &Config, r: &mut Report) {
    let src = &config.source;
    let target = describe_source(src);
    let client = match connect(src).await {
        Ok(c) => c,
        Err(e) => {
            r.fail(
                "postgres",
                format!("cannot connect to {target}: {}", e.chain()),
                "check [source] url (host, port, database, user), PGPASSWORD, and that pg_hba.conf admits this host; the remaining PostgreSQL checks were skipped",
            );
            return;
        }
    };
    if let Err(e) = postgres_checks(config, &client, &target, r).await {
        r.fail(
            "postgres",
            format!("a catalog query failed: {}", e),
            "check the role's privileges and the server log; the remaining PostgreSQL checks were skipped",
        );
    }
}

async fn postgres_checks(
    config: &Config,
    client: &Client,
    target: &str,
    r: &mut Report,
) -> Result<(), tokio_postgres::Error> {
    let src = &config.source;
    let outbox = &config.outbox;
    let qualified = format!("{}.{}", outbox.schema, outbox.table);

    let row = client
        .query_one(
            "SELECT current_user::text, current_setting('server_version'), \
             current_setting('server_version_num')::int, pg_catalog.pg_is_in_recovery(), \
             current_setting('wal_level'), current_setting('max_replication_slots')::int, \
             current_setting('max_wal_senders')::int, \
             (SELECT count(*)::int FROM pg_catalog.pg_replication_slots), \
             (SELECT count(*)::int FROM pg_catalog.pg_stat_activity WHERE backend_type = 'walsender'), \
             current_setting('max_slot_wal_keep_size')",
            &[],
        )
        .await?;
    let role: String = row.get(0);
    let version: String = row.get(1);
    let version_num: i32 = row.get(2);
    let in_recovery: bool = row.get(3);
    let wal_level: String = row.get(4);
    let max_slots: i32 = row.get(5);
    let max_senders: i32 = row.get(6);
    let used_slots: i32 = row.get(7);
    let used_senders: i32 = row.get(8);
    let keep_size: String = row.get(9);
    r.ok("postgres", format!("connected to {target} as role {role} (PostgreSQL {version})"));
    if version_num < 130000 {
        r.fail(
            "postgres version",
            format!(
                "PostgreSQL {version} is older than 13 (no wal_status, no max_slot_wal_keep_size)"
            ),
            "upgrade PostgreSQL to 13 or later",
        );
        return Ok(());
    }
    if in_recovery {
        r.warn(
            "postgres role",
            "this server is a standby (in recovery): the publication can't be created here and the slot must exist on it",
            "point [source] url at the primary, unless you decode on a PostgreSQL 16+ standby on purpose",
        );
    }

    if wal_level == "logical" {
        r.ok("wal_level", "logical");
    } else {
        r.fail(
            "wal_level",
            format!("is {wal_level}, logical decoding needs logical"),
            "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL",
        );
    }

    // The slot first: whether it exists decides what the other checks require.
    let slot = client
        .query_opt(
            &format!(
                "SELECT plugin::text, slot_type, database::text, database = current_database(), \
                 active, active_pid, wal_status, restart_lsn::text, confirmed_flush_lsn::text, \
                 ({SERVER_LSN} - restart_lsn)::bigint, safe_wal_size \
                 FROM pg_catalog.pg_replication_slots WHERE slot_name = $1"
            ),
            &[&src.slot],
        )
        .await?;
    let slot_active = slot.as_ref().is_some_and(|s| s.get::<_, bool>(4));

    let what = "max_replication_slots";
    if slot.is_some() {
        r.ok(what, format!("{used_slots} of {max_slots} in use, slot {} among them", src.slot));
    } else if used_slots < max_slots {
        r.ok(what, format!("{used_slots} of {max_slots} in use; room for slot {}", src.slot));
    } else {
        r.fail(
            what,
            format!("all {max_slots} in use; slot {} can't be created", src.slot),
            "drop an unused slot (SELECT slot_name, active FROM pg_replication_slots), or raise max_replication_slots and restart PostgreSQL",
        );
    }
    let what = "max_wal_senders";
    if slot_active {
        r.ok(what, format!("{used_senders} of {max_senders} in use, the relay streaming from the slot among them"));
    } else if used_senders < max_senders {
        r.ok(
            what,
            format!("{used_senders} of {max_senders} in use; room for the relay's connection"),
        );
    } else {
        r.fail(
            what,
            format!("all {max_senders} WAL senders are in use; the relay's replication connection would be refused"),
            "raise max_wal_senders and restart PostgreSQL, or stop an idle replication client",
        );
    }

    // Privileges.
    let privs = client
        .query_one(
            "SELECT r.rolsuper, r.rolreplication, \
             EXISTS (SELECT 1 FROM pg_catalog.pg_roles m WHERE m.rolname = 'rds_replication' \
                     AND pg_catalog.pg_has_role(r.oid, m.oid, 'MEMBER')), \
             pg_catalog.has_database_privilege(current_database(), 'CREATE') \
             FROM pg_catalog.pg_roles r WHERE r.rolname = current_user",
            &[],
        )
        .await?;
    let superuser: bool = privs.get(0);
    let replication: bool = privs.get(1);
    let rds_replication: bool = privs.get(2);
    let create_on_db: bool = privs.get(3);
    let what = "role privileges";
    if superuser {
        r.ok(what, format!("{role} is a superuser"));
    } else if replication || rds_replication {
        let how = if replication { "REPLICATION" } else { "member of rds_replication" };
        r.ok(what, format!("{role} has {how}"));
    } else {
        r.fail(
            what,
            format!("{role} has neither REPLICATION nor superuser, so it can't stream from a slot"),
            format!("ALTER ROLE {role} REPLICATION (on RDS/Aurora: GRANT rds_replication TO {role}), and allow `replication` connections for it in pg_hba.conf"),
        );
    }

    let table = outbox_table(client, config, &qualified, r).await?;
    if let Some(t) = &table {
        columns(client, config, t.oid, &qualified, r).await?;
    }
    publication(client, config, table.as_ref(), superuser, create_on_db, &qualified, r).await?;

    // The slot itself.
    let name = &src.slot;
    let what = format!("slot {name}");
    let Some(s) = slot else {
        r.ok(
            &what,
            "does not exist yet — `walrelay run` (or `walrelay setup`) creates it with pgoutput; rows committed before it exists are not relayed",
        );
        return Ok(());
    };
    let plugin: Option<String> = s.get(0);
    let kind: String = s.get(1);
    let database: Option<String> = s.get(2);
    let same_db: Option<bool> = s.get(3);
    let active_pid: Option<i32> = s.get(5);
    let wal_status: Option<String> = s.get(6);
    let restart: Option<String> = s.get(7);
    let confirmed: Option<String> = s.get(8);
    let retained: Option<i64> = s.get(9);
    let safe_size: Option<i64> = s.get(10);
    if kind != "logical" || plugin.as_deref() != Some("pgoutput") {
        r.fail(
            &what,
            format!("is a {kind} slot with plugin {}, walrelay needs a logical pgoutput slot", plugin.as_deref().unwrap_or("none")),
            "set [source] slot to another name (walrelay creates it), or drop this slot if nothing uses it",
        );
    } else if same_db != Some(true) {
        r.fail(
            &what,
            format!("belongs to database {}, not this one", database.as_deref().unwrap_or("?")),
            "use that database in [source] url, or another slot name",
        );
    } else {
        r.ok(
            &what,
            format!("logical, pgoutput, confirmed LSN {}", confirmed.as_deref().unwrap_or("none")),
        );
    }
    let what = format!("slot {name} activity");
    match active_pid {
        Some(pid) if slot_active => r.ok(
            &what,
            format!("active, pid {pid} streams from it (another relay started now stands by until it goes)"),
        ),
        _ => r.ok(&what, "inactive — nothing streams from it now; WAL accumulates until a relay connects"),
    }
    let what = format!("slot {name} WAL");
    let retained_text = match (retained, restart.as_deref()) {
        (Some(b), Some(lsn)) => format!("retains {} (restart LSN {lsn})", human_bytes(b)),
        _ => "retains no WAL".to_string(),
    };
    let limit = if keep_size == "-1" {
        "max_slot_wal_keep_size = -1: no limit, an abandoned slot can fill the disk".to_string()
    } else {
        match safe_size {
            Some(s) => format!(
                "max_slot_wal_keep_size = {keep_size}, {} left before invalidation",
                human_bytes(s)
            ),
            None => format!("max_slot_wal_keep_size = {keep_size}"),
        }
    };
    match wal_status.as_deref() {
        Some("lost") => r.fail(
            &what,
            "wal_status = lost: the WAL the slot needed was removed, events since its confirmed LSN can't be decoded",
            "walrelay teardown --yes, then walrelay setup, and reconcile the outbox with Kafka for the gap",
        ),
        Some("unreserved") => r.warn(
            &what,
            format!("wal_status = unreserved: {retained_text}, beyond max_slot_wal_keep_size; the next checkpoint may invalidate the slot"),
            "start the relay now (or find why it is behind), or raise max_slot_wal_keep_size",
        ),
        Some(status) => r.ok(&what, format!("wal_status = {status}, {retained_text}; {limit}")),
        None => r.ok(&what, format!("{retained_text}; {limit}")),
    }
    Ok(())
}

async fn outbox_table(
    client: &Client,
    config: &Config,
    qualified: &str,
    r: &mut Report,
) -> Result<Option<Table>, tokio_postgres::Error> {
    let outbox = &config.outbox;
    let row = client
        .query_opt(
            "SELECT c.oid, c.relkind::text, pg_catalog.pg_get_userbyid(c.relowner), \
             pg_catalog.pg_has_role(current_user, c.relowner, 'USAGE') \
             FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2",
            &[&outbox.schema, &outbox.table],
        )
        .await?;
    let what = format!("outbox table {qualified}");
    let Some(row) = row else {
        r.fail(
            &what,
            "does not exist",
            "create the table (id uuid, aggregatetype varchar, aggregateid varchar, type varchar, payload jsonb), or set [outbox] table to the existing one",
        );
        return Ok(None);
    };
    let oid: u32 = row.get(0);
    let relkind: String = row.get(1);
    let owner: String = row.get(2);
    let owned: bool = row.get(3);
    match relkind.as_str() {
        "r" => r.ok(&what, format!("exists, owner {owner}")),
        "p" => r.ok(&what, format!("exists (partitioned), owner {owner}; publish it with publish_via_partition_root = true")),
        other => {
            let kind = match other {
                "v" => "a view",
                "m" => "a materialized view",
                "f" => "a foreign table",
                _ => "not a table",
            };
            r.fail(&what, format!("is {kind}; only tables are published"), "set [outbox] table to the table the application writes");
            return Ok(None);
        }
    }
    Ok(Some(Table { oid, owned }))
}

/// The columns the router needs, each with its type; then the router's own binding of the
/// table (the check `walrelay run` makes when the first Relation message arrives).
async fn columns(
    client: &Client,
    config: &Config,
    oid: u32,
    qualified: &str,
    r: &mut Report,
) -> Result<(), tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT attname::text, atttypid, atttypmod, pg_catalog.format_type(atttypid, atttypmod) \
             FROM pg_catalog.pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped \
             ORDER BY attnum",
            &[&oid],
        )
        .await?;
    let cols: Vec<(String, u32, i32, String)> =
        rows.iter().map(|row| (row.get(0), row.get(1), row.get(2), row.get(3))).collect();
    let router = &config.router;
    // Types the router can't read as a string (it reads every other type as its text).
    const NOT_STRING: &[u32] = &[16, 17, 20, 21, 23, 1114];
    let roles: [(&str, &str, &str, bool); 4] = [
        (router.field_event_id.as_str(), "table.field.event.id", "the `id` header", false),
        (router.field_event_key.as_str(), "table.field.event.key", "the record key", false),
        (router.field_payload.as_str(), "table.field.event.payload", "the record value", false),
        (router.route_by_field.as_str(), "route.by.field", "the topic", true),
    ];
    let mut all_ok = true;
    for (name, option, role, string) in roles {
        let what = format!("column {name} ({option})");
        match cols.iter().find(|c| c.0 == name) {
            None => {
                all_ok = false;
                r.fail(
                    &what,
                    format!("{qualified} has no column {name}, which becomes {role}"),
                    format!("add the column, or set [router] \"{option}\" to an existing column"),
                );
            }
            Some((_, type_oid, _, type_name)) if string && NOT_STRING.contains(type_oid) => {
                all_ok = false;
                r.fail(
                    &what,
                    format!("is {type_name}, but {role} is read from a string column"),
                    "make it text or varchar, or point the option at a string column",
                );
            }
            Some((_, _, _, type_name)) => r.ok(&what, format!("{type_name}, becomes {role}")),
        }
    }
    if !all_ok {
        return Ok(());
    }
    // Everything else the router binds (timestamp, schema version, additional placements).
    let relation = Relation {
        id: oid,
        namespace: config.outbox.schema.clone(),
        name: config.outbox.table.clone(),
        replica_identity: b'd',
        columns: cols
            .iter()
            .map(|(name, type_oid, typmod, _)| Column {
                flags: 0,
                name: name.clone(),
                type_oid: *type_oid,
                type_modifier: *typmod,
            })
            .collect(),
    };
    match Router::new(router.clone()).bind(&relation, &[]) {
        Ok(_) => r.ok(
            "router",
            format!("[router] options bind to the {} columns of {qualified}", cols.len()),
        ),
        Err(e) => r.fail("router", e.to_string(), "change the column or the [router] option named"),
    }
    Ok(())
}

async fn publication(
    client: &Client,
    config: &Config,
    table: Option<&Table>,
    superuser: bool,
    create_on_db: bool,
    qualified: &str,
    r: &mut Report,
) -> Result<(), tokio_postgres::Error> {
    let name = &config.source.publication;
    let what = format!("publication {name}");
    let row = client
        .query_opt(
            "SELECT puballtables, pubinsert, pubupdate, pubdelete, pubtruncate, \
             EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables t \
                     WHERE t.pubname = p.pubname AND t.schemaname = $2 AND t.tablename = $3) \
             FROM pg_catalog.pg_publication p WHERE p.pubname = $1",
            &[name, &config.outbox.schema, &config.outbox.table],
        )
        .await?;
    let Some(row) = row else {
        let create =
            format!("CREATE PUBLICATION {name} FOR TABLE {qualified} WITH (publish = 'insert')");
        let owns = superuser || table.is_some_and(|t| t.owned);
        if table.is_some() && !(superuser || (create_on_db && owns)) {
            let mut missing = Vec::new();
            if !create_on_db {
                missing.push("CREATE on the database");
            }
            if !owns {
                missing.push("ownership of the outbox table");
            }
            r.fail(
                &what,
                format!(
                    "does not exist, and the role can't create it: it lacks {}",
                    missing.join(" and ")
                ),
                format!("have the table's owner run: {create}"),
            );
        } else {
            r.ok(&what, format!("does not exist yet — `walrelay run` (or `walrelay setup`) creates it: {create}"));
        }
        return Ok(());
    };
    let all_tables: bool = row.get(0);
    let ops: Vec<&str> = [(1, "insert"), (2, "update"), (3, "delete"), (4, "truncate")]
        .into_iter()
        .filter(|(i, _)| row.get::<_, bool>(*i))
        .map(|(_, op)| op)
        .collect();
    let covers: bool = row.get(5);
    if !covers {
        r.fail(
            &what,
            format!("does not include {qualified}"),
            format!("ALTER PUBLICATION {name} ADD TABLE {qualified}"),
        );
    } else if !ops.contains(&"insert") {
        r.fail(
            &what,
            format!("covers {qualified} but does not publish INSERTs (publishes: {})", list(&ops)),
            format!("ALTER PUBLICATION {name} SET (publish = 'insert')"),
        );
    } else {
        let scope = if all_tables { "all tables" } else { "the table" };
        r.ok(&what, format!("covers {qualified} ({scope}), publishes {}", list(&ops)));
    }
    if all_tables {
        r.warn(
            &format!("{what} scope"),
            "is FOR ALL TABLES: every table's changes are decoded and sent to walrelay, which skips them and confirms past them",
            format!("a dedicated publication: CREATE PUBLICATION walrelay FOR TABLE {qualified} WITH (publish = 'insert'), then set [source] publication"),
        );
    }
    let extra: Vec<&str> = ops.iter().copied().filter(|op| *op != "insert").collect();
    if covers && !extra.is_empty() {
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

fn list(items: &[&str]) -> String {
    if items.is_empty() {
        "nothing".into()
    } else {
        items.join(", ")
    }
}

async fn broker(config: &Config, r: &mut Report) {
    let props = &config.kafka.properties;
    let servers = props
        .get("bootstrap.servers")
        .or_else(|| props.get("metadata.broker.list"))
        .cloned()
        .unwrap_or_default();
    let what = format!("broker {servers}");
    let mut cfg = ClientConfig::new();
    for (k, v) in props {
        cfg.set(k, v);
    }
    // The outcome is reported on the check line; librdkafka's own log lines would repeat it.
    cfg.set_log_level(RDKafkaLogLevel::Emerg);
    let result = tokio::task::spawn_blocking(move || {
        let producer: BaseProducer = cfg.create().map_err(|e| (true, e.to_string()))?;
        let metadata = producer
            .client()
            .fetch_metadata(None, BROKER_TIMEOUT)
            .map_err(|e| (false, e.to_string()))?;
        Ok::<_, (bool, String)>((metadata.brokers().len(), metadata.topics().len()))
    })
    .await;
    match result {
        Ok(Ok((brokers, topics))) => r.ok(
            &what,
            format!("answers: {brokers} broker{}, {topics} topic{}", plural(brokers), plural(topics)),
        ),
        Ok(Err((true, e))) => r.fail(
            &what,
            format!("librdkafka rejects the [kafka] properties: {e}"),
            "fix the property named; names and values are librdkafka's (CONFIGURATION.md)",
        ),
        Ok(Err((false, e))) => r.fail(
            &what,
            format!("no answer within {} s: {e}", BROKER_TIMEOUT.as_secs()),
            "check [kafka] bootstrap.servers, the network path, and security.protocol / sasl.* / ssl.* settings",
        ),
        Err(e) => r.fail(&what, format!("the metadata request crashed: {e}"), "report this as a bug"),
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
