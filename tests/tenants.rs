//! Outbox tables by pattern, one schema per tenant: a tenant created while the relay streams is
//! relayed from the first row of the transaction that creates its table, a dropped tenant stops
//! only itself, a tenant whose table does not fit goes to the dead-letter topic alone, and many
//! tenants written at once keep each aggregate's order, each in its own topic. `creation.rs`: the
//! ways a tenant's table comes to hold rows under the pattern (CREATE TABLE AS, INSERT … SELECT,
//! a rename), relayed in full or refused with the fix.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::{ids, release_slot, Setup};
use crate::support::kafka::{self, Consumed};
use crate::support::process::{walrelay_async, RelayProcess};
use crate::support::readback::{assert_no_loss_in_order, read_back, QUIET};
use crate::support::writer::{Writer, WriterConfig};
use crate::support::{free_port, services, wait_until};

mod creation;

/// Every tenant test relays `public.outbox` by name and tenants `t<n>.outbox` by pattern.
const TABLES: &str = r#"tables = ["public.outbox", "t[0-9]+\\.outbox"]"#;

fn tenant_config(s: &Setup, router: &str, extra: &str) -> String {
    s.config_with(router, "", extra).replace("table = \"public.outbox\"", TABLES)
}

/// `walrelay setup`, which creates the publication with every matching table and installs the
/// event trigger (the suite's role is a superuser).
async fn setup(config: &str) -> String {
    let run = walrelay_async(&["setup"], Some(config)).await;
    println!("setup: {}", run.stdout.trim());
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains("event trigger walrelay_tenants_"), "{run}");
    run.stdout
}

/// Creates tenant `schema` and writes `first` rows in the transaction that creates its outbox
/// table; returns their ids.
async fn create_tenant_with_rows(s: &Setup, schema: &str, first: usize) -> Vec<String> {
    let mut client = s.db.connect().await;
    let tx = client.transaction().await.unwrap();
    tx.batch_execute(&format!(
        "CREATE SCHEMA {schema}; CREATE TABLE {schema}.outbox (LIKE public.outbox INCLUDING ALL)"
    ))
    .await
    .unwrap();
    let mut sent = Vec::new();
    for _ in 0..first {
        let row = tx
            .query_one(
                &format!(
                    "INSERT INTO {schema}.outbox (id, aggregatetype, aggregateid, type, payload) \
                     VALUES (gen_random_uuid(), 'Tenant', $1, 'Created', '{{}}') RETURNING id::text"
                ),
                &[&schema],
            )
            .await
            .unwrap();
        sent.push(row.get(0));
    }
    tx.commit().await.unwrap();
    sent
}

/// The `walrelay check` lines about tenants.
async fn check_lines(config: &str) -> String {
    let check = walrelay_async(&["check"], Some(config)).await;
    let lines: Vec<&str> = check
        .stdout
        .lines()
        .filter(|l| l.contains("pattern") || l.contains("tenant") || l.contains("event trigger"))
        .collect();
    lines.join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_created_while_the_relay_streams_is_relayed_from_the_first_row_of_its_creating_transaction(
) {
    let s = Setup::new("tenant_new").await;
    let port = free_port();
    let config = tenant_config(&s, "", &format!("[http]\nlisten = \"127.0.0.1:{port}\"\n"));
    setup(&config).await;
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;

    // The table and its first rows in one transaction: a table that joined the publication
    // after that transaction, even by a millisecond, would lose these three.
    let mut sent = create_tenant_with_rows(&s, "t1", 3).await;
    for _ in 0..2 {
        sent.push(s.db.insert_outbox("t1.outbox", "Tenant", "t1", "Updated", Some("{}")).await);
    }
    let got = s.read("Tenant", 5).await;
    println!(
        "a tenant created while streaming: {} of 5 events, its first row first: {}",
        got.len(),
        got.first().is_some_and(|r| r.header_str("id") == Some(sent[0].as_str()))
    );
    assert_eq!(ids(&got), sent, "{}", relay.log());
    assert!(relay.log().contains("a new tenant's outbox table"), "{}", relay.log());

    let check = check_lines(&config).await;
    println!("check:\n{check}");
    assert!(check.contains("match 1 table(s) now: t1.outbox"), "{check}");
    assert!(check.contains("ok   new tenants' tables: event trigger"), "{check}");

    // status --tables: the tenant's table, carried, with the events the relay counted.
    let (cfg, s_ref) = (&config, &s);
    let counted = wait_until(
        "status --tables counts t1's 5 events",
        Duration::from_secs(10),
        || async move {
            let status = walrelay_async(&["status", "--tables", "--json"], Some(cfg)).await;
            let v: serde_json::Value =
                serde_json::from_str(status.stdout.trim()).unwrap_or_default();
            let _ = s_ref;
            v["tables"].as_array().is_some_and(|rows| {
                rows.iter().any(|r| {
                    r["table"] == "t1.outbox" && r["events"] == 5 && r["in_publication"] == true
                })
            })
        },
    )
    .await;
    let table = walrelay_async(&["status", "--tables"], Some(&config)).await;
    println!("status --tables:\n{}", table.stdout);
    assert!(counted, "{table}");
    assert!(table.stdout.contains("t1.outbox"), "{table}");
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_one_tenants_outbox_while_others_write_keeps_the_others_flowing_and_is_logged_once(
) {
    let s = Setup::new("tenant_drop").await;
    for t in ["t1", "t2"] {
        s.db.create_outbox(&format!("{t}.outbox")).await;
    }
    let config = tenant_config(&s, "", "");
    setup(&config).await;
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let before = s.db.insert_outbox("t1.outbox", "Gone", "t1", "Created", Some("{}")).await;

    // t2 writes throughout; t1 is dropped in the middle.
    let mut w = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 4);
    w.table = "t2.outbox".into();
    w.agg_prefix = "t2".into();
    w.max_events = Some(600);
    w.rate = Some(300.0);
    let writer = Writer::spawn(w);
    // Dropped while t2 is a quarter of the way through its events.
    assert!(writer.wait_committed(150, Duration::from_secs(30)).await, "t2's writer stalled");
    s.db.execute("DROP SCHEMA t1 CASCADE").await;
    let report = writer.join().await;

    let dropped =
        relay.wait_for_log("a tenant's outbox table was dropped", Duration::from_secs(20)).await;
    let topics = vec![s.topic("Order")];
    let read = read_back(
        services().broker.bootstrap(),
        &topics,
        &[&report],
        QUIET,
        Duration::from_secs(60),
    )
    .await;
    let gone = s.read("Gone", 1).await;
    let log = relay.log();
    println!(
        "t1 dropped while t2 wrote: t2 {}; t1's row before the drop delivered: {}; relay running: {}; drop lines: {}",
        read.verdict.summary(),
        ids(&gone) == [before.clone()],
        relay.is_running(),
        log.matches("outbox table was dropped").count()
    );
    assert!(dropped, "the drop was not logged:\n{log}");
    assert_no_loss_in_order(&read.verdict, &log);
    assert_eq!(ids(&gone), [before], "{log}");
    assert!(relay.is_running(), "the relay stopped for one tenant:\n{log}");
    assert_eq!(log.matches("outbox table was dropped").count(), 1, "{log}");
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// `${schema}` in `route.topic.replacement` sends each tenant's events to a topic of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_tenants_matched_by_a_pattern_written_at_once_are_all_delivered_in_commit_order_each_in_its_tenants_topic(
) {
    const TENANTS: usize = 50;
    let s = Setup::new("tenant_many").await;
    let mut sql = String::new();
    for t in 1..=TENANTS {
        sql += &format!(
            "CREATE SCHEMA t{t}; CREATE TABLE t{t}.outbox (LIKE public.outbox INCLUDING ALL);\n"
        );
    }
    s.db.execute(&sql).await;
    let router = format!(
        "\"route.topic.replacement\" = \"{}.${{schema}}.outbox.event.${{routedByValue}}\"\n",
        s.topic_prefix
    );
    let config = tenant_config(&s, &router, "");
    let out = setup(&config).await;
    assert!(out.contains("created publication"), "{out}");
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;

    // One writer per tenant table, all at once, each its aggregates in commit order; each
    // writer expects its events in `<prefix>.t<n>.outbox.event.Order`.
    let mut writers = Vec::new();
    let mut topics = Vec::new();
    for t in 1..=TENANTS {
        let tenant_prefix = format!("{}.t{t}", s.topic_prefix);
        let mut w = WriterConfig::new(&s.db.url, &tenant_prefix, &["Order"], 2);
        w.table = format!("t{t}.outbox");
        w.agg_prefix = format!("t{t}");
        w.max_events = Some(20);
        topics.push(format!("{tenant_prefix}.outbox.event.Order"));
        writers.push(Writer::spawn(w));
    }
    let mut written = Vec::new();
    for w in writers {
        written.push(w.join().await);
    }
    let all: Vec<_> = written.iter().collect();
    let read =
        read_back(services().broker.bootstrap(), &topics, &all, QUIET, Duration::from_secs(120))
            .await;
    // Each event in the topic its writer expects: `topic/key` as committed.
    let expected: HashMap<&str, &str> =
        read.events.iter().map(|e| (e.id.as_str(), e.aggregate.as_str())).collect();
    let misplaced: Vec<String> = read
        .got
        .iter()
        .filter(|d| expected.get(d.id.as_str()).is_some_and(|a| *a != d.aggregate))
        .map(|d| format!("{} in {}", d.id, d.aggregate))
        .collect();
    println!(
        "{TENANTS} tenants written at once, a topic each: {}; in another tenant's topic: {}",
        read.verdict.summary(),
        misplaced.len()
    );
    assert_no_loss_in_order(&read.verdict, &relay.log());
    assert_eq!(read.verdict.committed, TENANTS * 20);
    assert!(misplaced.is_empty(), "{misplaced:?}");
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// A tenant's table that lacks a column the router needs goes to the dead-letter topic, alone:
/// the other tenants' events flow, each with its tenant in the `tenant` header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_table_that_does_not_fit_the_router_is_dead_lettered_and_the_others_flow_with_their_tenant_header(
) {
    let s = Setup::new("tenant_misfit").await;
    s.db.create_outbox("t1.outbox").await;
    let dead = format!("{}_dead_letters", s.topic_prefix);
    let extra = format!("[dead_letter]\ntopic = \"{dead}\"\n");
    let config = tenant_config(&s, "", &extra)
        .replace(TABLES, &format!("{TABLES}\ntenant_header = \"tenant\""));
    setup(&config).await;
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    // t2's table has no aggregatetype, which route.by.field needs.
    s.db.execute(
        "CREATE SCHEMA t2; CREATE TABLE t2.outbox (id uuid PRIMARY KEY, aggregateid text, \
         type text, payload jsonb); \
         INSERT INTO t2.outbox VALUES (gen_random_uuid(), 'x', 'Created', '{}')",
    )
    .await;
    let sent = s.db.insert_outbox("t1.outbox", "Tenant", "t1", "Created", Some("{}")).await;
    let got = s.read("Tenant", 1).await;
    let letters =
        kafka::consume(services().broker.bootstrap(), &dead, 1, Duration::from_secs(30)).await;
    let reason = letters.first().and_then(|l| header(l, "walrelay.error")).unwrap_or_default();
    println!(
        "t2 does not fit: {} dead letter(s) ({reason}); t1 delivered with tenant header {:?}",
        letters.len(),
        got.first().and_then(|r| r.header_str("tenant"))
    );
    assert_eq!(ids(&got), [sent], "{}", relay.log());
    assert_eq!(got[0].header_str("tenant"), Some("t1"));
    assert_eq!(letters.len(), 1, "{}", relay.log());
    assert!(reason.contains("t2.outbox") && reason.contains("aggregatetype"), "{reason}");
    assert!(relay.is_running(), "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// Without the event trigger (disabled here), `check` warns with the fix, the relay warns once
/// that new tenants join late, and a tenant created meanwhile is named as not relayed — never
/// silence. `walrelay setup` then adds it and installs the trigger again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_event_trigger_check_and_the_relay_say_that_new_tenants_join_late_and_setup_fixes_it(
) {
    let s = Setup::new("tenant_late").await;
    let config = tenant_config(&s, "", "");
    setup(&config).await;
    let trigger = format!("walrelay_tenants_{}", s.publication);
    s.db.execute(&format!("ALTER EVENT TRIGGER {trigger} DISABLE")).await;
    let check = check_lines(&config).await;
    println!("check, trigger disabled:\n{check}");
    assert!(
        check.contains(&format!("warn new tenants' tables: event trigger {trigger} is disabled")),
        "{check}"
    );
    assert!(check.contains("walrelay setup"), "{check}");

    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    assert!(
        relay.wait_for_log("late or holding rows", Duration::from_secs(10)).await,
        "{}",
        relay.log()
    );
    s.db.create_outbox("t5.outbox").await;
    let named = relay.wait_for_log("t5.outbox", Duration::from_secs(20)).await;
    let log = relay.log();
    let line = log.lines().find(|l| l.contains("t5.outbox")).unwrap_or_default();
    println!("a tenant created without the trigger: {line}");
    assert!(named && line.contains("not in the publication"), "{log}");
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());

    // setup: enables nothing by hand; it adds t5 and installs the trigger again.
    s.db.execute(&format!("DROP EVENT TRIGGER {trigger}")).await;
    let out = setup(&config).await;
    assert!(out.contains("added t5.outbox to publication"), "{out}");
    let check = check_lines(&config).await;
    assert!(check.contains("ok   new tenants' tables: event trigger"), "{check}");
    release_slot(&s).await;
}

/// Debezium's `table.include.list` regex becomes an `[outbox] tables` pattern: the imported file,
/// run as it is, relays a tenant created after the import from its first row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debezium_include_list_regex_imports_to_a_pattern_that_relays_a_new_tenant() {
    let s = Setup::new("tenant_import").await;
    // postgres://postgres@127.0.0.1:PORT/NAME
    let port = s.db.url.rsplit(':').next().and_then(|p| p.split('/').next()).unwrap().to_string();
    let connector = serde_json::json!({
        "name": "outbox-connector",
        "config": {
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "database.hostname": "127.0.0.1",
            "database.port": port,
            "database.user": "postgres",
            "database.dbname": s.db.name,
            "plugin.name": "pgoutput",
            "slot.name": s.slot,
            "publication.name": s.publication,
            "table.include.list": "public\\.outbox,t[0-9]+\\.outbox",
            "producer.override.bootstrap.servers": services().broker.bootstrap(),
            "transforms": "outbox",
            "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
            "transforms.outbox.route.topic.replacement": format!("{}.outbox.event.${{routedByValue}}", s.topic_prefix),
        }
    });
    let file = crate::support::scratch_dir("tenant_import").join("connector.json");
    std::fs::write(&file, connector.to_string()).unwrap();
    let imported = walrelay_async(&["import-debezium", file.to_str().unwrap()], None).await;
    println!("import-debezium: {}", imported.stderr.trim());
    assert_eq!(imported.code, Some(0), "{imported}");
    let tables = imported.stdout.lines().find(|l| l.starts_with("tables = ")).unwrap_or_default();
    assert_eq!(tables, r#"tables = ["public.outbox", 't[0-9]+\.outbox']"#, "{imported}");
    assert!(imported.stderr.contains("is a pattern"), "{imported}");

    setup(&imported.stdout).await;
    let mut relay = RelayProcess::start(&imported.stdout);
    s.wait_streaming(&mut relay).await;
    let sent = create_tenant_with_rows(&s, "t9", 2).await;
    let got = s.read("Tenant", 2).await;
    println!("imported config, new tenant t9: {} of 2 events", got.len());
    assert_eq!(ids(&got), sent, "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// An older walrelay's trigger function (one that lets a table join holding rows) is stale:
/// `check` and the running relay's watch say so in the same words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_event_trigger_is_reported_in_the_same_words_by_check_and_by_the_running_relay() {
    let s = Setup::new("tenant_stale").await;
    let config = tenant_config(&s, "", "");
    setup(&config).await;
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    // The watch has checked the trigger once the slot confirms a first event: a check vouches
    // for every confirmed position.
    let confirmed = s.db.confirmed_flush_lsn(&s.slot).await;
    s.db.insert_outbox("public.outbox", "Tenant", "t0", "Created", Some("{}")).await;
    assert_eq!(s.read("Tenant", 1).await.len(), 1, "{}", relay.log());
    let (db, slot, before) = (&s.db, &s.slot, &confirmed);
    let moved =
        wait_until("the slot confirms the first event", Duration::from_secs(20), || async move {
            db.confirmed_flush_lsn(slot).await != *before
        })
        .await;
    assert!(moved, "{}", relay.log());

    let trigger = format!("walrelay_tenants_{}", s.publication);
    s.db.execute(&format!(
        "CREATE OR REPLACE FUNCTION public.\"{trigger}\"() RETURNS event_trigger LANGUAGE plpgsql \
         AS $$ BEGIN RAISE NOTICE 'an older body'; END $$"
    ))
    .await;
    let said = format!("event trigger {trigger} is stale: its function is not the one this walrelay installs (an older walrelay installed it, or [outbox] tables changed since): a table an [outbox] tables pattern matches that is created (or renamed into a match) from now on may join publication {} late or holding rows, and the rows written before it joins are never relayed", s.publication);
    let logged = relay.wait_for_log("is stale", Duration::from_secs(20)).await;
    let log = relay.log();
    let check = check_lines(&config).await;
    println!(
        "check:\n{check}\nrelay: {}",
        log.lines().find(|l| l.contains("is stale")).unwrap_or_default()
    );
    assert!(logged && log.contains(&said), "{log}");
    assert!(check.contains(&format!("warn new tenants' tables: {said}")), "{check}");
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());

    // `setup` replaces it, and check says so.
    setup(&config).await;
    let check = check_lines(&config).await;
    assert!(check.contains("ok   new tenants' tables: event trigger"), "{check}");
    release_slot(&s).await;
}

/// Inserts `n` rows into `table` written `age` ago (an SQL interval), in one transaction;
/// returns their ids.
async fn insert_aged(s: &Setup, table: &str, n: i64, age: &str) -> Vec<String> {
    let sql = format!(
        "INSERT INTO {table} (id, aggregatetype, aggregateid, type, payload, created_at) \
         SELECT gen_random_uuid(), 'Aged', 'a-' || g, 'Aged', '{{}}'::jsonb, now() - $2::text::interval \
         FROM generate_series(1, $1::bigint) g RETURNING id::text"
    );
    let rows = s.db.connect().await.query(&sql, &[&n, &age]).await.unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

/// `walrelay purge --older-than 7d` (and `extra`) until its output says `expect`: another test
/// on the shared server may hold a transaction open for a moment, which makes a purge keep rows
/// for a later run. Returns the last output.
async fn purge_until(config: &str, extra: &[&str], expect: &str) -> String {
    let mut args = vec!["purge", "--older-than", "7d"];
    args.extend_from_slice(extra);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let run = walrelay_async(&args, Some(config)).await;
        if run.stdout.contains(expect) || std::time::Instant::now() >= deadline {
            assert_eq!(run.code, Some(0), "{run}");
            return run.stdout;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn ids_in(s: &Setup, table: &str) -> Vec<String> {
    let sql = format!("SELECT id::text FROM {table} ORDER BY id");
    s.db.connect().await.query(&sql, &[]).await.unwrap().iter().map(|r| r.get(0)).collect()
}

/// A tenant's table made while the event trigger was off holds rows that were never relayed:
/// the purge keeps them while the publication lacks the table, and after `walrelay setup` adds
/// it, deletes only the rows written since (relayed), keeping those from before until a repair
/// re-published them and `purge --force` says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_purge_never_deletes_the_rows_a_tenants_table_held_before_it_joined_the_publication() {
    let s = Setup::new("tenant_purge").await;
    let config = tenant_config(&s, "", "");
    setup(&config).await;
    let trigger = format!("walrelay_tenants_{}", s.publication);
    s.db.execute(&format!("ALTER EVENT TRIGGER {trigger} DISABLE")).await;
    s.db.create_outbox("t7.outbox").await;
    let mut before = insert_aged(&s, "t7.outbox", 3, "10 days").await;
    before.sort();
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;

    let uncarried = format!("t7.outbox: kept: publication {} does not carry it", s.publication);
    let out = purge_until(&config, &[], &uncarried).await;
    println!("purge, t7.outbox outside the publication:\n{out}");
    assert_eq!(ids_in(&s, "t7.outbox").await, before, "{out}");
    assert!(out.contains(&uncarried), "{out}");

    // setup adds it: the rows written from then on are relayed, and may go.
    s.db.execute(&format!("ALTER EVENT TRIGGER {trigger} ENABLE")).await;
    let added = setup(&config).await;
    assert!(added.contains("added t7.outbox to publication"), "{added}");
    let after = insert_aged(&s, "t7.outbox", 2, "10 days").await;
    let got = s.read("Aged", 2).await;
    assert_eq!(ids(&got), after, "{}", relay.log());

    let dry = purge_until(&config, &["--dry-run"], "t7.outbox: would delete 2 rows").await;
    let run = purge_until(&config, &[], "t7.outbox: deleted 2 rows").await;
    println!("purge --dry-run after setup added t7.outbox:\n{dry}\npurge:\n{run}");
    assert!(dry.contains("t7.outbox: kept 3 rows older than the cut-off: written before the table joined the publication, so never relayed"), "{dry}");
    assert!(run.contains("t7.outbox: deleted 2 rows"), "{run}");
    assert_eq!(ids_in(&s, "t7.outbox").await, before, "the rows from before it joined stay");

    // The documented way out: the audit re-publishes them (they are missing), then
    // `purge --force` may delete them.
    let audit = ["audit", "--since", "11d", "--settle", "0s", "--repair", "--yes", "--json"];
    let repaired = walrelay_async(&audit, Some(&config)).await;
    let json: serde_json::Value = serde_json::from_str(repaired.stdout.trim()).unwrap_or_default();
    assert_eq!(json["repair"]["sent"], 3, "{repaired}");
    let forced = purge_until(&config, &["--force"], "t7.outbox: deleted 3 rows").await;
    println!("purge --force after the repair:\n{forced}");
    assert!(ids_in(&s, "t7.outbox").await.is_empty(), "{forced}");
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

fn header(record: &Consumed, name: &str) -> Option<String> {
    record
        .headers
        .iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| v.as_ref())
        .map(|v| String::from_utf8_lossy(v).into_owned())
}
