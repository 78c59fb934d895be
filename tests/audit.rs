//! `walrelay audit` against the real services: a clean window, events a skipped slot lost and
//! their repair, duplicates a replay made on purpose, records Kafka deleted (expired), events
//! in the wrong order, bad input, and the same lost-and-repaired case under cloudevents-binary on
//! a partitioned outbox. The chaos runs of exactly_once.rs audit their cluster too.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::{ids, Setup};
use crate::support::process::{walrelay_async, RelayProcess};

/// `audit --json` on `config`, with every row settled: (exit code, the report).
async fn audit(config: &str, extra: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let mut args = vec!["audit", "--since", "1h", "--settle", "0s", "--json"];
    args.extend_from_slice(extra);
    let run = walrelay_async(&args, Some(config)).await;
    let json = serde_json::from_str(run.stdout.trim()).unwrap_or(serde_json::Value::Null);
    (run.code, json, run.to_string())
}

/// What the topic holds, read by the test itself: per event id, (the relay's copies, a
/// replay's copies). At-least-once may write an event twice (a session that restarts resends what
/// was not confirmed), so the audit is held to this, not to what the test hoped for.
async fn held(s: &Setup) -> std::collections::BTreeMap<String, (u32, u32)> {
    let all = s.read_within("Order", 100_000, Duration::from_secs(5)).await;
    let mut copies = std::collections::BTreeMap::new();
    for r in &all {
        let id = r.event_id().unwrap_or_default();
        let c: &mut (u32, u32) = copies.entry(id).or_default();
        match r.header("walrelay.replay") {
            Some(_) => c.1 += 1,
            None => c.0 += 1,
        }
    }
    copies
}

/// (duplicated, duplicated by replay only) as the audit should count them in `held`.
fn duplicates(held: &std::collections::BTreeMap<String, (u32, u32)>) -> (u64, u64) {
    let dup = held.values().filter(|(r, p)| r + p > 1).count() as u64;
    let by_replay = held.values().filter(|(r, p)| r + p > 1 && *p > 0 && *r <= 1).count() as u64;
    (dup, by_replay)
}

/// Inserts `n` events over four aggregate ids, one transaction each; their ids.
async fn insert(s: &Setup, n: usize) -> Vec<String> {
    let mut written = Vec::with_capacity(n);
    for i in 0..n {
        let aggregate = format!("o-{}", i % 4);
        written.push(s.db.insert_outbox("outbox", "Order", &aggregate, "Tested", Some("{}")).await);
    }
    written
}

/// Inserts `txns` transactions of `rows` events each, over four aggregate ids; their ids.
async fn insert_bulk(s: &Setup, txns: usize, rows: usize) -> Vec<String> {
    let client = s.db.connect().await;
    let mut written = Vec::with_capacity(txns * rows);
    for _ in 0..txns {
        let inserted = client
            .query(
                "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
                 SELECT gen_random_uuid(), 'Order', 'o-' || (g % 4), 'Tested', '{}' \
                 FROM generate_series(1, $1::int) g RETURNING id::text",
                &[&(rows as i32)],
            )
            .await
            .unwrap();
        written.extend(inserted.iter().map(|r| r.get::<_, String>(0)));
    }
    written
}

/// Stops `relay`, inserts `n` events and moves the slot past them, as a dropped slot or an
/// operator's `pg_replication_slot_advance` would: they are never relayed. Their ids.
async fn lose(s: &Setup, mut relay: RelayProcess, n: usize) -> Vec<String> {
    assert_eq!(relay.terminate(), Some(0));
    let inactive = crate::support::slot::wait_inactive(&s.db.url, &s.slot, Duration::from_secs(15));
    assert!(inactive.await, "the slot stayed active");
    let lost = insert(s, n).await;
    // The advance stops at the flushed WAL, and the suite's server commits asynchronously: it
    // is repeated until the slot is past every one of them.
    let client = s.db.connect().await;
    let target: String =
        client.query_one("SELECT pg_current_wal_insert_lsn()::text", &[]).await.unwrap().get(0);
    let (c, slot, target) = (&client, s.slot.as_str(), target.as_str());
    let past = crate::support::wait_until("the slot is past them", Duration::from_secs(20), || async move {
        let sql = "SELECT (pg_replication_slot_advance($1, $2::text::pg_lsn)).end_lsn >= $2::text::pg_lsn";
        c.query_one(sql, &[&slot, &target]).await.unwrap().get::<_, bool>(0)
    })
    .await;
    assert!(past, "the slot never got past {target}");
    lost
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_of_a_clean_window_finds_every_event_once_where_the_router_puts_it() {
    let s = Setup::new("audit_clean").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let written = insert_bulk(&s, 200, 100).await;
    assert!(s.read_ids("Order", &written).await.len() >= written.len(), "{}", relay.log());
    let (code, report, run) = audit(&s.config(), &[]).await;
    let total = &report["total"];
    println!("[audit] clean window: {total} in {} s", report["seconds"]);
    let (dup, _) = duplicates(&held(&s).await);
    assert_eq!(total["expected"], 20_000, "{run}");
    assert_eq!(total["duplicated"], dup, "{run}");
    assert_eq!(total["delivered_once"], 20_000 - dup, "{run}");
    for kind in ["missing", "out_of_order", "misplaced", "unexpected", "pending"] {
        assert_eq!(total[kind], 0, "{kind}: {run}");
    }
    if dup > 0 {
        // The relay's session restarted and resent: a real duplicate, which is not clean.
        println!("[audit] the relay wrote {dup} events twice; the audit says so");
        assert_eq!((code, &report["clean"]), (Some(1), &serde_json::json!(false)), "{run}");
    } else {
        assert_eq!(code, Some(0), "{run}");
        assert_eq!(report["clean"], true, "{run}");
        // The table says the same, for a person.
        let table =
            walrelay_async(&["audit", "--since", "1h", "--settle", "0s"], Some(&s.config())).await;
        assert_eq!(table.code, Some(0), "{table}");
        assert!(table.stdout.contains("clean: every settled event is in Kafka once"), "{table}");
    }
    assert_eq!(relay.terminate(), Some(0));
    crate::common::release_slot(&s).await;
}

/// The slot moved past 500 rows while the relay was down: exactly those are missing, by id,
/// and the audit exits 1; `--repair` re-publishes them and its second audit is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_names_exactly_the_events_a_skipped_slot_lost_and_its_repair_republishes_them() {
    let s = Setup::new("audit_lost").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let mut written = insert(&s, 50).await;
    assert!(s.read_ids("Order", &written).await.len() >= 50, "{}", relay.log());
    let lost = lose(&s, relay, 500).await;
    let mut relay = RelayProcess::start(&s.config());
    s.wait_streaming(&mut relay).await;
    written.extend(insert(&s, 50).await);
    assert!(s.read_ids("Order", &written).await.len() >= 100, "{}", relay.log());

    let (code, report, run) = audit(&s.config(), &["--details", "1000"]).await;
    println!("[audit] after a skipped slot: {}", report["total"]);
    assert_eq!(code, Some(1), "{run}");
    let missing: BTreeSet<String> = report["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .filter(|p| p["kind"] == "missing")
        .map(|p| p["event_id"].as_str().unwrap_or_default().to_string())
        .collect();
    let delivered: Vec<usize> =
        lost.iter().enumerate().filter(|(_, id)| !missing.contains(*id)).map(|(i, _)| i).collect();
    assert_eq!(
        missing,
        lost.iter().cloned().collect::<BTreeSet<_>>(),
        "delivered #{delivered:?}: {run}"
    );
    assert_eq!(report["total"]["missing"], 500, "{run}");
    let (dup, _) = duplicates(&held(&s).await);
    assert_eq!(report["total"]["duplicated"], dup, "{run}");
    assert_eq!(report["total"]["delivered_once"], 100 - dup, "{run}");

    // `--repair --dry-run` says what it would send and sends nothing.
    let dry = ["audit", "--since", "1h", "--settle", "0s", "--repair", "--dry-run", "--json"];
    let dry = walrelay_async(&dry, Some(&s.config())).await;
    let json: serde_json::Value = serde_json::from_str(dry.stdout.trim()).unwrap_or_default();
    assert_eq!((dry.code, &json["repair"]["would_send"]), (Some(1), &500.into()), "{dry}");
    assert_eq!(json["repair"]["sent"], 0, "{dry}");
    // `--repair` re-publishes exactly those, and its second audit is clean.
    let (code, report, run) = audit(&s.config(), &["--repair", "--yes"]).await;
    println!("[audit] repair: {} then {}", report["repair"], report["after"]["total"]);
    assert_eq!(report["before"]["total"]["missing"], 500, "{run}");
    assert_eq!(report["repair"]["sent"], 500, "{run}");
    let (dup, by_replay) = duplicates(&held(&s).await);
    let after = &report["after"]["total"];
    assert_eq!(after["missing"], 0, "{run}");
    assert_eq!(after["duplicated"], dup, "{run}");
    assert_eq!(after["duplicated_by_replay"], by_replay, "{run}");
    assert_eq!(after["delivered_once"], 600 - dup, "{run}");
    assert_eq!(code, Some(if dup == by_replay { 0 } else { 1 }), "{run}");
    // And a third audit, on its own, agrees.
    let (_, again, run) = audit(&s.config(), &[]).await;
    assert_eq!(again["total"]["missing"], 0, "{run}");
    let copies = held(&s).await;
    for id in &lost {
        assert_eq!(copies.get(id).map(|c| c.1), Some(1), "{id}: one copy from the repair: {run}");
    }
    let all: Vec<String> = written.iter().chain(&lost).cloned().collect();
    let consumers: BTreeSet<String> = ids(&s.read_ids("Order", &all).await).into_iter().collect();
    let all: BTreeSet<String> = all.into_iter().collect();
    assert_eq!(consumers, all);
    assert_eq!(relay.terminate(), Some(0));
    crate::common::release_slot(&s).await;
}

/// `walrelay replay --id` of 10 delivered events: 10 duplicates, all from the replay, and the
/// window is still clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_counts_a_replays_copies_as_duplicates_made_on_purpose() {
    let s = Setup::new("audit_replayed").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let written = insert(&s, 100).await;
    assert!(s.read_ids("Order", &written).await.len() >= 100, "{}", relay.log());
    let mut args = vec!["replay", "--yes"];
    for id in &written[..10] {
        args.extend(["--id", id.as_str()]);
    }
    let replay = walrelay_async(&args, Some(&s.config())).await;
    assert_eq!(replay.code, Some(0), "{replay}");
    let (code, report, run) = audit(&s.config(), &[]).await;
    println!("[audit] after a replay of 10: {}", report["total"]);
    let log = relay.log();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("relay session ended") || l.contains(" WARN walrelay::delivery"))
        .collect();
    let copies = held(&s).await;
    let (dup, by_replay) = duplicates(&copies);
    let t = &report["total"];
    let (run, w) = (&run, &warnings);
    assert_eq!(t["duplicated"], dup, "{run}\nrelay warnings: {w:#?}");
    assert_eq!(t["duplicated_by_replay"], by_replay, "{run}\nrelay warnings: {w:#?}");
    assert_eq!(t["delivered_once"], 100 - dup, "{run}");
    // Every replayed event has its replay's copy; those the relay wrote once are on purpose.
    for id in &written[..10] {
        assert_eq!(copies.get(id).map(|c| c.1), Some(1), "{id}: {run}");
    }
    let relay_twice = copies.values().filter(|(relay, _)| *relay > 1).count();
    if relay_twice == 0 {
        assert_eq!((dup, by_replay, code), (10, 10, Some(0)), "{run}");
    } else {
        println!("[audit] the relay itself wrote {relay_twice} events twice: {w:#?}");
    }
    assert_eq!(relay.terminate(), Some(0));
    crate::common::release_slot(&s).await;
}

/// Kafka's retention deleted every record of a partition (`retention.ms` 1 s, 1 MiB segments;
/// the suite's broker checks retention every second, and rolls and deletes the active segment
/// too once it is past retention): the events are "expired", not missing, the topic's
/// `retention.ms` is given, and the window is clean. (A partition only partly deleted:
/// `audit_reports_events_whose_records_were_deleted_as_expired_not_missing`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_reports_events_kafkas_retention_deleted_as_expired_not_missing() {
    let s = Setup::new("audit_expired").await;
    let bootstrap = crate::support::services().broker.bootstrap().to_string();
    let topic = s.topic("Order");
    let short = [("retention.ms", "1000"), ("segment.bytes", "1048576")];
    crate::support::kafka::create_topic_with(&bootstrap, &topic, 1, 1, &short).await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    // ~1.3 MB of records: more than one segment.
    let written = insert_bulk(&s, 40, 100).await;
    assert!(s.read_ids("Order", &written).await.len() >= written.len(), "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0));
    let (b, t) = (bootstrap.as_str(), topic.as_str());
    let deleted = crate::support::wait_until(
        "retention deletes every segment",
        Duration::from_secs(60),
        || async move {
            let (low, high) = crate::support::kafka::marks(b, t, 0).await;
            low > 0 && low == high
        },
    )
    .await;
    let marks = crate::support::kafka::marks(b, t, 0).await;
    assert!(deleted, "retention did not delete all of {topic}: {marks:?}");
    let gone = written.len() as u64;

    let (code, report, run) = audit(&s.config(), &[]).await;
    println!("[audit] after retention deleted offsets below {}: {}", marks.0, report["total"]);
    let total = &report["total"];
    assert_eq!(
        (&total["expired"], &total["missing"]),
        (&serde_json::json!(gone), &serde_json::json!(0)),
        "{run}"
    );
    assert_eq!(report["topics"][&topic]["retention_ms"], 1_000, "{run}");
    let table =
        walrelay_async(&["audit", "--since", "1h", "--settle", "0s"], Some(&s.config())).await;
    assert!(table.stdout.contains(&format!("{gone} event(s) expired")), "{table}");
    assert!(table.stdout.contains("retention.ms=1000"), "{table}");
    let (dup, _) = duplicates(&held(&s).await);
    if dup == 0 {
        assert_eq!(code, Some(0), "expired is said, not judged: {run}");
    }
    crate::common::release_slot(&s).await;
}

/// Someone deleted a partition's first records (`kafka-delete-records.sh`, which moves the log
/// start as retention does): the same, with the topic's own `retention.ms`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_reports_events_whose_records_were_deleted_as_expired_not_missing() {
    let s = Setup::new("audit_deleted").await;
    let bootstrap = crate::support::services().broker.bootstrap().to_string();
    let topic = s.topic("Order");
    let retention = [("retention.ms", "86400000")];
    crate::support::kafka::create_topic_with(&bootstrap, &topic, 1, 1, &retention).await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let written = insert(&s, 100).await;
    assert!(s.read_ids("Order", &written).await.len() >= 100, "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0));
    crate::support::kafka::delete_records_before(&bootstrap, &topic, 0, 50).await;
    let left: BTreeSet<String> = held(&s).await.into_keys().collect();
    let gone = written.iter().filter(|id| !left.contains(*id)).count() as u64;
    assert!(gone >= 40, "only {gone} events were before offset 50");
    let (_, report, run) = audit(&s.config(), &[]).await;
    let total = &report["total"];
    assert_eq!(
        (&total["expired"], &total["missing"]),
        (&serde_json::json!(gone), &serde_json::json!(0)),
        "{run}"
    );
    assert_eq!(report["topics"][&topic]["retention_ms"], 86_400_000, "{run}");
    crate::common::release_slot(&s).await;
}

/// Two events of one aggregate put in Kafka against their commit order (each sent alone by
/// `walrelay replay --id`, the later first): with `track_commit_timestamp = on` the earlier one
/// is reported out of order, and the audit exits 1. Two rows of one transaction, in Kafka in
/// the order they were inserted but not in their ids' order, are not: their commit is one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_reports_two_events_of_one_aggregate_sent_in_the_wrong_order() {
    use crate::support::postgres::PrivatePostgres;
    use crate::support::servers::Server;
    let private = tokio::task::spawn_blocking(|| {
        let server = Server::selected().expect("a PostgreSQL server");
        PrivatePostgres::start_on("auditorder", &server, &[("track_commit_timestamp", "on")])
    })
    .await
    .unwrap();
    let s = Setup::on(&private.pg, "auditorder").await;
    let bootstrap = crate::support::services().broker.bootstrap().to_string();
    crate::support::kafka::create_topic(&bootstrap, &s.topic("Order"), 2).await;
    let first = s.db.insert_outbox("outbox", "Order", "o-1", "Created", Some("{}")).await;
    let second = s.db.insert_outbox("outbox", "Order", "o-1", "Paid", Some("{}")).await;
    let (inserted_first, inserted_next) =
        ("ffffffff-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002");
    s.db.execute(&format!(
        "BEGIN; \
         INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
           VALUES ('{inserted_first}', 'Order', 'o-2', 'Created', '{{}}'); \
         INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
           VALUES ('{inserted_next}', 'Order', 'o-2', 'Paid', '{{}}'); \
         COMMIT;"
    ))
    .await;
    for id in [&second, &first, &inserted_first.to_string(), &inserted_next.to_string()] {
        let sent = walrelay_async(&["replay", "--yes", "--id", id], Some(&s.config())).await;
        assert_eq!(sent.code, Some(0), "{sent}");
    }
    let (code, report, run) = audit(&s.config(), &[]).await;
    println!("[audit] two events sent in the wrong order: {}", report["total"]);
    assert_eq!(report["order_checked"], true, "{run}");
    assert_eq!(report["total"]["out_of_order"], 1, "{run}");
    assert_eq!(report["total"]["delivered_once"], 4, "{run}");
    let problem = &report["problems"][0];
    assert_eq!(
        (&problem["kind"], &problem["event_id"]),
        (&serde_json::json!("out_of_order"), &serde_json::json!(first)),
        "{run}"
    );
    assert_eq!(code, Some(1), "{run}");
    crate::common::release_slot(&s).await;
}

/// Bad input exits 2 with the fix: `--until` before `--since`, a column that is not there, a
/// window with no rows; `--dry-run` needs `--repair`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_refuses_bad_input_with_exit_code_2_and_the_fix() {
    let s = Setup::new("audit_input").await;
    s.db.insert_outbox("outbox", "Order", "o-1", "Created", Some("{}")).await;
    let config = s.config();
    for (args, says) in [
        (&["--since", "1h", "--until", "2h"][..], "is not after --since"),
        (
            &["--since", "2026-12-02T00:00:00Z", "--until", "2026-12-01T00:00:00Z"][..],
            "is not after --since",
        ),
        (&["--since", "1h", "--column", "nosuch"][..], "nosuch"),
        (
            &["--since", "2000-01-01T00:00:00Z", "--until", "2000-01-02T00:00:00Z"][..],
            "no outbox rows match",
        ),
        (&["--since", "1h", "--dry-run"][..], "--repair"),
    ] {
        let mut all = vec!["audit"];
        all.extend_from_slice(args);
        let run = walrelay_async(&all, Some(&config)).await;
        assert_eq!(run.code, Some(2), "{args:?}: {run}");
        assert!(run.stderr.contains(says), "{args:?} should say {says:?}: {run}");
    }
    crate::common::release_slot(&s).await;
}

/// Under `envelope` (and on a range-partitioned outbox when `partitioned`): the events a
/// skipped slot lost are missing by id, the others delivered once, and a repair makes the window
/// clean.
async fn lost_and_repaired_under(name: &str, envelope: &str, partitioned: bool) {
    let s = Setup::new(name).await;
    if partitioned {
        crate::common::partitioned_outbox(&s).await;
    }
    let config = s.config_with("", "", &format!("[envelope]\nformat = \"{envelope}\"\n"));
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let mut written = insert(&s, 40).await;
    assert!(s.read_ids("Order", &written).await.len() >= 40, "{}", relay.log());
    let lost = lose(&s, relay, 60).await;
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    written.extend(insert(&s, 40).await);
    assert!(s.read_ids("Order", &written).await.len() >= 80, "{}", relay.log());

    let (code, report, run) = audit(&config, &["--details", "100"]).await;
    println!(
        "[audit] {envelope}, partitioned {partitioned}, 60 lost: {} (ids from {})",
        report["total"], report["event_id_in"]
    );
    assert_eq!(code, Some(1), "{run}");
    let missing: BTreeSet<String> = report["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .filter(|p| p["kind"] == "missing")
        .map(|p| p["event_id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(missing, lost.iter().cloned().collect::<BTreeSet<_>>(), "{run}");
    let (dup, _) = duplicates(&held(&s).await);
    assert_eq!(report["total"]["delivered_once"], 80 - dup, "{run}");

    let (code, report, run) = audit(&config, &["--repair", "--yes"]).await;
    assert_eq!(report["repair"]["sent"], 60, "{run}");
    assert_eq!(report["after"]["total"]["missing"], 0, "{run}");
    let (dup, by_replay) = duplicates(&held(&s).await);
    assert_eq!(report["after"]["total"]["delivered_once"], 140 - dup, "{run}");
    assert_eq!(code, Some(if dup == by_replay { 0 } else { 1 }), "{run}");
    assert_eq!(relay.terminate(), Some(0));
    crate::common::release_slot(&s).await;
}

/// cloudevents-binary carries the id in the `ce_id` header; the outbox is range-partitioned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_under_cloudevents_binary_of_a_partitioned_outbox_names_the_lost_and_repairs_them() {
    lost_and_repaired_under("audit_ce_parted", "cloudevents-binary", true).await;
}

/// protobuf carries the id only in the value (`walrelay.v1.Event` field 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_under_protobuf_names_the_lost_and_repairs_them() {
    lost_and_repaired_under("audit_proto", "protobuf", false).await;
}

/// `[audit]` inside `walrelay run`: the relay audits its trailing window every 2 s, the last
/// audit's counts reach `/metrics`, and events a skipped slot lost show there as missing, with a
/// warning in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_inside_run_exports_the_last_audits_counts_and_a_loss_as_missing() {
    use crate::support::process::{http_get, metric};
    let s = Setup::new("audit_in_run").await;
    let port = crate::support::free_port();
    let extra = format!(
        "[http]\nlisten = \"127.0.0.1:{port}\"\n\n[audit]\ninterval = \"2s\"\nwindow = \"1h\"\nsettle = \"0s\"\n"
    );
    let config = s.config_with("", "", &extra);
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let written = insert(&s, 30).await;
    assert!(s.read_ids("Order", &written).await.len() >= 30, "{}", relay.log());
    let gauge = |text: &str, result: &str| {
        metric(text, &format!("walrelay_audit_events{{result=\"{result}\"}}")).unwrap_or(-1.0)
    };
    let counted =
        crate::support::wait_until("an audit counts the 30", Duration::from_secs(30), || async {
            let text = http_get(port, "/metrics").await.unwrap_or_default();
            gauge(&text, "delivered_once") + gauge(&text, "duplicated") == 30.0
        })
        .await;
    let text = http_get(port, "/metrics").await.unwrap_or_default();
    assert!(
        counted,
        "{}\n{}",
        text.lines().filter(|l| l.contains("audit")).collect::<Vec<_>>().join("\n"),
        relay.log()
    );
    assert_eq!(metric(&text, "walrelay_audit_interval_seconds"), Some(2.0), "{text}");
    assert!(metric(&text, "walrelay_audit_last_success_seconds").unwrap_or(0.0) > 0.0, "{text}");

    let lost = lose(&s, relay, 20).await;
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let missing = crate::support::wait_until(
        "an audit counts the 20 missing",
        Duration::from_secs(30),
        || async {
            let text = http_get(port, "/metrics").await.unwrap_or_default();
            gauge(&text, "missing") == 20.0
        },
    )
    .await;
    let text = http_get(port, "/metrics").await.unwrap_or_default();
    assert!(
        missing,
        "lost {}: {}\n{}",
        lost.len(),
        text.lines().filter(|l| l.contains("audit")).collect::<Vec<_>>().join("\n"),
        relay.log()
    );
    let log = relay.log();
    assert!(log.contains("audit: the last 1h is not clean"), "{log}");
    assert!(
        log.contains(&lost[0]) || lost.iter().any(|id| log.contains(id.as_str())),
        "the warning names a lost event: {log}"
    );
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    crate::common::release_slot(&s).await;
}
