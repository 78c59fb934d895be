//! The operator commands against the real services: `check`, `setup`, `teardown`, `status` and
//! `import-debezium` (docs/configuration.md and docker/ are checked against the code in
//! tests/configuration_docs.rs).

use std::time::{Duration, Instant};

use crate::common::Setup;
use crate::support::process::{walrelay, walrelay_async};
use crate::support::{free_port, scratch_dir, services, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_passes_on_a_ready_database_and_names_each_problem_otherwise() {
    let s = Setup::new("check").await;
    let ready = s.config();

    // Table and slot exist, the publication not yet: that is not a problem.
    let run = walrelay_async(&["check"], Some(&ready)).await;
    assert_eq!(run.code, Some(0), "{run}");
    for line in run.stdout.lines() {
        assert!(
            line.starts_with("ok   ") || line.starts_with("warn ") || line.starts_with("check: "),
            "every line is one check: {line}\n{run}"
        );
    }
    for expected in [
        "ok   wal_level: logical",
        "ok   max_replication_slots: ",
        "ok   max_wal_senders: ",
        "ok   role privileges: postgres is a superuser",
        "ok   outbox table public.outbox: exists",
        "ok   column id (table.field.event.id): uuid",
        "ok   column aggregateid (table.field.event.key): character varying(255)",
        "ok   column payload (table.field.event.payload): jsonb",
        "ok   column aggregatetype (route.by.field): character varying(255)",
        "ok   router: ",
        &format!("ok   publication {}: does not exist yet", s.publication),
        &format!("ok   slot {}: logical, pgoutput", s.slot),
        &format!("ok   slot {} activity: inactive", s.slot),
        &format!("ok   slot {} WAL: wal_status = reserved, retains ", s.slot),
        &format!("ok   broker {}: answers", services().broker.bootstrap()),
        "check: ",
    ] {
        assert!(run.stdout.contains(expected), "missing {expected:?}\n{run}");
    }
    assert!(run.stdout.contains(", 0 problems"), "{run}");

    // A publication made the way Debezium makes it by default: still no problem, two warnings.
    s.db.execute(&format!("CREATE PUBLICATION {} FOR ALL TABLES", s.publication)).await;
    let run = walrelay_async(&["check"], Some(&ready)).await;
    assert_eq!(run.code, Some(0), "{run}");
    let p = &s.publication;
    assert!(run.stdout.contains(&format!("ok   publication {p}: covers public.outbox (all tables), publishes insert, update, delete, truncate")), "{run}");
    assert!(
        run.stdout.contains(&format!("warn publication {p} scope: is FOR ALL TABLES")),
        "{run}"
    );
    assert!(
        run.stdout.contains(&format!(
            "warn publication {p} operations: also publishes update, delete, truncate"
        )),
        "{run}"
    );

    // Missing table: named, with the fix; the checks after it still run.
    let missing = ready.replace("table = \"public.outbox\"", "table = \"public.no_such_outbox\"");
    let run = walrelay_async(&["check"], Some(&missing)).await;
    assert_eq!(run.code, Some(1), "{run}");
    let fails = run.lines_starting("FAIL ");
    assert!(
        fails
            .iter()
            .any(|l| l
                .starts_with("FAIL outbox table public.no_such_outbox: does not exist — fix: ")),
        "{run}"
    );
    assert!(
        run.stdout.contains(&format!("ok   broker {}", services().broker.bootstrap())),
        "{run}"
    );

    // A table missing the key column and with a numeric route column, and a broker that
    // doesn't answer: three problems, one line each.
    s.db.execute(
        "CREATE TABLE outbox_bad (id uuid PRIMARY KEY, aggregatetype integer NOT NULL, payload jsonb)",
    )
    .await;
    let dead_broker = format!("127.0.0.1:{}", free_port());
    let bad = s
        .config_for_bootstrap(&dead_broker, "", "", "")
        .replace("table = \"public.outbox\"", "table = \"public.outbox_bad\"");
    let started = std::time::Instant::now();
    let run = walrelay_async(&["check"], Some(&bad)).await;
    assert_eq!(run.code, Some(1), "{run}");
    let fails = run.lines_starting("FAIL ");
    assert_eq!(fails.len(), 3, "{run}");
    assert!(fails[0].starts_with(
        "FAIL column aggregateid (table.field.event.key): public.outbox_bad has no column aggregateid, which becomes the record key — fix: "
    ), "{run}");
    assert!(
        fails[1].starts_with("FAIL column aggregatetype (route.by.field): is integer"),
        "{run}"
    );
    assert!(
        fails[2].starts_with(&format!("FAIL broker {dead_broker}: no answer within 5 s")),
        "{run}"
    );
    assert!(fails.iter().all(|l| l.contains(" — fix: ")), "{run}");
    assert!(run.stdout.contains("ok   column id (table.field.event.id): uuid"), "{run}");
    assert!(run.stdout.contains(", 3 problems"), "{run}");
    assert!(started.elapsed() < Duration::from_secs(30), "check took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_creates_and_teardown_drops_publication_and_slot() {
    let s = Setup::new("setup").await;
    // A slot of its own: Setup already made one for relays.
    let slot = unique("setup_slot");
    let config =
        s.config().replace(&format!("slot = \"{}\"", s.slot), &format!("slot = \"{slot}\""));
    let client = s.db.connect().await;

    let run = walrelay_async(&["setup"], Some(&config)).await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        run.stdout.contains(&format!(
            "created publication {} FOR TABLE public.outbox WITH (publish = 'insert', publish_via_partition_root = true)",
            s.publication
        )),
        "{run}"
    );
    assert!(
        // "(pgoutput, failover slot)" on PostgreSQL 17+.
        run.stdout.contains(&format!("created replication slot {slot} (pgoutput")),
        "{run}"
    );
    let row = client
        .query_one(
            "SELECT puballtables, pubinsert, pubupdate, pubdelete, pubtruncate, \
             (SELECT array_agg(tablename::text) FROM pg_publication_tables t WHERE t.pubname = p.pubname) \
             FROM pg_publication p WHERE pubname = $1",
            &[&s.publication],
        )
        .await
        .unwrap();
    let flags: (bool, bool, bool, bool, bool) =
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    assert_eq!(
        flags,
        (false, true, false, false, false),
        "publish = 'insert' only, not all tables"
    );
    assert_eq!(row.get::<_, Vec<String>>(5), vec!["outbox".to_string()]);
    let plugin: String = client
        .query_one("SELECT plugin::text FROM pg_replication_slots WHERE slot_name = $1", &[&slot])
        .await
        .unwrap()
        .get(0);
    assert_eq!(plugin, "pgoutput");

    // Idempotent: a second run changes nothing.
    let run = walrelay_async(&["setup"], Some(&config)).await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        run.stdout.contains(&format!(
            "publication {} exists and covers public.outbox (unchanged)",
            s.publication
        )),
        "{run}"
    );
    assert!(
        run.stdout.contains(&format!("replication slot {slot} exists, confirmed LSN ")),
        "{run}"
    );

    let run = walrelay_async(&["teardown", "--yes"], Some(&config)).await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains(&format!("dropped replication slot {slot}")), "{run}");
    assert!(run.stdout.contains(&format!("dropped publication {}", s.publication)), "{run}");
    let left: i64 = client
        .query_one(
            "SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1) \
             + (SELECT count(*) FROM pg_publication WHERE pubname = $2)",
            &[&slot, &s.publication],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);

    let run = walrelay_async(&["teardown", "--yes"], Some(&config)).await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains("nothing to drop"), "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teardown_without_yes_refuses() {
    let s = Setup::new("teardown_no").await;
    s.db.execute(&format!(
        "CREATE PUBLICATION {} FOR TABLE outbox WITH (publish = 'insert')",
        s.publication
    ))
    .await;
    let run = walrelay_async(&["teardown"], Some(&s.config())).await;
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stdout.starts_with("refusing to drop without --yes"), "{run}");
    assert!(run.stdout.contains(&format!("replication slot {} (confirmed LSN ", s.slot)), "{run}");
    assert!(run.stdout.contains(&format!("publication {}", s.publication)), "{run}");
    assert!(run.stdout.contains("--yes"), "{run}");
    assert_eq!(s.db.slot_active(&s.slot).await, Some(false), "the slot is still there");
    let client = s.db.connect().await;
    let pubs = client
        .query("SELECT 1 FROM pg_publication WHERE pubname = $1", &[&s.publication])
        .await
        .unwrap();
    assert_eq!(pubs.len(), 1, "the publication is still there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teardown_with_yes_refuses_while_a_relay_streams_naming_its_pid() {
    let s = Setup::new("teardown_active").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let pid = active_pid(&s).await.expect("active pid");
    let run = walrelay_async(&["teardown", "--yes"], Some(&s.config())).await;
    assert_eq!(run.code, Some(1), "{run}");
    assert!(
        run.stdout
            .contains(&format!("replication slot {} is active, pid {pid} streams from it", s.slot)),
        "{run}"
    );
    assert_eq!(s.db.slot_active(&s.slot).await, Some(true), "the slot is untouched");
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
}

async fn active_pid(s: &Setup) -> Option<i32> {
    s.db.connect()
        .await
        .query_one("SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", &[&s.slot])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_lag_and_active_pid_as_table_and_json() {
    let s = Setup::new("status").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    s.insert_events("Order", "o-1", 5).await;
    assert_eq!(s.read("Order", 5).await.len(), 5, "{}", s.diagnostics(&relay));
    let config = s.config();

    // While the relay streams: its walsender's pid and its last status update.
    let pid = active_pid(&s).await.expect("the relay streams");
    let deadline = Instant::now() + Duration::from_secs(20);
    let run = loop {
        let run = walrelay_async(&["status", "--json"], Some(&config)).await;
        let reported = run.code == Some(0)
            && serde_json::from_str::<serde_json::Value>(&run.stdout)
                .is_ok_and(|v| !v["last_status_update"].is_null());
        if reported || Instant::now() > deadline {
            break run;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let v: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(run.stdout.trim().lines().count(), 1, "one JSON object: {run}");
    assert_eq!(v["slot"], s.slot.as_str());
    assert_eq!(v["active"], true);
    assert_eq!(v["active_pid"], pid);
    assert_eq!(v["plugin"], "pgoutput");
    assert_eq!(v["wal_status"], "reserved");
    let lag = v["lag_bytes"].as_i64().expect("lag_bytes");
    let retained = v["retained_bytes"].as_i64().expect("retained_bytes");
    assert!(lag >= 0 && retained >= lag, "{v}");
    assert!(v["lag"].as_str().unwrap().ends_with('B'), "{v}");
    assert!(v["confirmed_lsn"].as_str().unwrap().contains('/'), "{v}");
    assert!(v["server_lsn"].as_str().unwrap().contains('/'), "{v}");
    assert!(v["last_status_update_age_s"].as_f64().unwrap() < 30.0, "{v}");

    let run = walrelay_async(&["status"], Some(&config)).await;
    assert_eq!(run.code, Some(0), "{run}");
    let lines: Vec<&str> = run.stdout.lines().collect();
    let labels = [
        "slot",
        "confirmed LSN",
        "server WAL LSN",
        "lag",
        "retained WAL",
        "active pid",
        "wal_status",
        "failover",
        "last status update",
        "sink",
        "guarantee",
    ];
    assert_eq!(lines.len(), labels.len(), "{run}");
    // Labels padded to the longest ("last status update") plus two spaces.
    let column = "last status update".len() + 2;
    for (line, label) in lines.iter().zip(labels) {
        assert_eq!(line[..column].trim_end(), label, "{run}");
        assert_ne!(line.as_bytes()[column], b' ', "values start in one column: {run}");
    }
    assert!(run.stdout.contains(&format!("active pid          {pid} (the walsender")), "{run}");
    assert_eq!(lines.last().map(|l| l.split_whitespace().last()), Some(Some("at-least-once")));
    assert!(lines[3].contains(" bytes (") && lines[3].ends_with("B)"), "{run}");

    // Stopped relay, WAL written elsewhere: no active pid, and the lag grows.
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    s.db.execute("CREATE TABLE busy (x int); INSERT INTO busy SELECT generate_series(1, 20000);")
        .await;
    let run = walrelay_async(&["status", "--json"], Some(&config)).await;
    assert_eq!(run.code, Some(0), "{run}");
    let v: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(v["active"], false, "{v}");
    assert!(v["active_pid"].is_null() && v["last_status_update"].is_null(), "{v}");
    assert!(v["lag_bytes"].as_i64().unwrap() > 100_000, "{v}");
    assert!(
        v["lag"].as_str().unwrap().ends_with("KiB") || v["lag"].as_str().unwrap().ends_with("MiB"),
        "{v}"
    );
    let run = walrelay_async(&["status"], Some(&config)).await;
    assert!(run.stdout.contains("active pid          - (inactive)"), "{run}");

    // A slot that doesn't exist: exit 1 and say so.
    let other = config.replace(&format!("slot = \"{}\"", s.slot), "slot = \"no_such_slot\"");
    let run = walrelay_async(&["status", "--json"], Some(&other)).await;
    assert_eq!(run.code, Some(1), "{run}");
    assert!(run.stdout.contains("\"exists\":false"), "{run}");
    assert!(run.stderr.contains("no_such_slot does not exist"), "{run}");
}

#[test]
fn import_debezium_prints_toml_on_stdout_and_one_warning_line_per_option_on_stderr() {
    let dir = scratch_dir("import");
    let path = dir.join("connector.json");
    std::fs::write(
        &path,
        r#"{"name": "inventory-outbox", "config": {
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "database.hostname": "pg", "database.user": "dbz", "database.password": "hunter2",
            "database.dbname": "inventory", "plugin.name": "pgoutput", "topic.prefix": "inv",
            "slot.name": "inv_slot", "table.include.list": "inventory.outboxevent",
            "snapshot.mode": "initial", "heartbeat.action.query": "INSERT INTO hb VALUES (now())",
            "publication.autocreate.mode": "filtered",
            "transforms": "outbox",
            "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
            "transforms.outbox.route.by.field": "aggregatetype",
            "producer.override.bootstrap.servers": "kafka:9092"}}"#,
    )
    .unwrap();
    let run = walrelay(&["import-debezium", path.to_str().unwrap()], None);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(!format!("{run}").contains("hunter2"), "{run}");
    let config =
        walrelay::config::Config::parse(&run.stdout).unwrap_or_else(|e| panic!("{e}\n{run}"));
    assert_eq!(config.source.slot, "inv_slot");
    assert_eq!(
        config.outbox.tables,
        [walrelay::config::TableName::new("inventory", "outboxevent")]
    );
    let warnings: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("warning: ")).collect();
    assert!(warnings.iter().any(|w| w.contains("snapshot.mode = initial")), "{run}");
    assert!(warnings.iter().any(|w| w.contains("heartbeat.action.query")), "{run}");
    assert!(warnings.iter().any(|w| w.contains("database.password")), "{run}");

    let run = walrelay(&["import-debezium", "/nonexistent/connector.json"], None);
    assert_eq!(run.code, Some(2), "{run}");
}

/// `walrelay status` of an exactly-once relay answers within 5 s with no broker
/// listening, says the progress topic could not be read, and prints no librdkafka lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_of_an_exactly_once_relay_answers_within_5_s_with_the_broker_down_and_prints_no_librdkafka_lines(
) {
    let s = Setup::new("status_eo_down").await;
    let nobody = format!("127.0.0.1:{}", crate::support::free_port());
    let config =
        s.config_for_bootstrap(&nobody, "", "", "[delivery]\nguarantee = \"exactly-once\"\n");
    let started = std::time::Instant::now();
    let run = crate::support::process::walrelay_async(&["status"], Some(&config)).await;
    let took = started.elapsed();
    println!("status with the broker down: {took:.1?}, exit {:?}\n{run}", run.code);
    assert!(took < std::time::Duration::from_secs(5), "status took {took:.1?}:\n{run}");
    let all = run.to_string();
    assert!(!all.contains("librdkafka") && !all.contains("rdkafka::"), "{all}");
    assert!(
        run.stdout.contains("cannot read the progress topic")
            || run.stdout.contains("did not answer"),
        "{run}"
    );
}

/// Exactly-once, `setup` also creates the progress topic as `run` would at its first start
/// (compacted, one partition), so a relay whose principal may not CREATE finds it; a second
/// `setup` leaves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_under_exactly_once_creates_the_progress_topic_compacted_with_one_partition() {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    use rdkafka::client::DefaultClientContext;

    let s = Setup::new("setup_eos").await;
    let topic = unique("setup_progress");
    let delivery = format!(
        "[delivery]\nguarantee = \"exactly-once\"\nprogress_topic = \"{topic}\"\ntransactional_id = \"{}\"\n",
        unique("setup_txn")
    );
    let config = s.config_with("", "", &delivery);
    let run = walrelay_async(&["setup"], Some(&config)).await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        run.stdout.contains(&format!(
            "created progress topic {topic} (compacted, one partition, 1 replica(s))"
        )),
        "{run}"
    );
    let bootstrap = services().broker.bootstrap();
    let admin: AdminClient<DefaultClientContext> =
        crate::support::kafka::client_config(bootstrap).create().expect("admin client");
    // A broker answers for a topic created a moment ago once its metadata has the configs.
    let (admin_ref, topic_ref) = (&admin, &topic);
    crate::support::wait_until("the topic's configs", Duration::from_secs(15), || async {
        let configs = admin_ref
            .describe_configs([&ResourceSpecifier::Topic(topic_ref)], &AdminOptions::new())
            .await;
        let found = configs
            .ok()
            .and_then(|c| c.into_iter().next())
            .and_then(|r| r.ok())
            .and_then(|r| r.get("cleanup.policy").and_then(|e| e.value.clone()));
        found.is_some()
    })
    .await;
    let configs = admin
        .describe_configs([&ResourceSpecifier::Topic(&topic)], &AdminOptions::new())
        .await
        .expect("describe the progress topic");
    let resource = configs.into_iter().next().expect("one answer").expect("the topic's configs");
    let policy = resource.get("cleanup.policy").and_then(|e| e.value.clone());
    assert_eq!(policy.as_deref(), Some("compact"), "{resource:?}");
    let metadata = admin
        .inner()
        .fetch_metadata(Some(&topic), Duration::from_secs(10))
        .expect("the progress topic's metadata");
    assert_eq!(metadata.topics()[0].partitions().len(), 1);

    let run = walrelay_async(&["setup"], Some(&config)).await;
    assert_eq!(run.code, Some(0), "{run}");
    assert!(run.stdout.contains(&format!("progress topic {topic} exists (unchanged)")), "{run}");
}
