//! `walrelay audit` against the real services, its verdicts: a clean window, duplicates a replay
//! made on purpose, records Kafka deleted (expired, unverifiable), events in the wrong order,
//! foreign records, bad input. `repair.rs` holds the events a skipped slot lost and their repair
//! (also under cloudevents-binary on a partitioned outbox, and protobuf), `inside_run.rs` the
//! audit `walrelay run` makes on its own. The chaos runs of exactly_once.rs audit their cluster
//! too.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::{ids, Setup};
use crate::support::process::{walrelay_async, RelayProcess};

mod inside_run;
mod repair;

/// `audit --json` on `config`, with every row settled: (exit code, the report).
pub(crate) async fn audit(
    config: &str,
    extra: &[&str],
) -> (Option<i32>, serde_json::Value, String) {
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
pub(crate) async fn lose(s: &Setup, mut relay: RelayProcess, n: usize) -> Vec<String> {
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
/// start as retention does) while the topic keeps records for a day: time retention does not
/// explain the events gone, so they are unverifiable, with the reason and the log start, and
/// the window is not clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_reports_events_a_delete_records_request_removed_as_unverifiable_not_clean() {
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
    let (code, report, run) = audit(&s.config(), &[]).await;
    let total = &report["total"];
    assert_eq!(
        (&total["unverifiable"], &total["expired"], &total["missing"]),
        (&serde_json::json!(gone), &serde_json::json!(0), &serde_json::json!(0)),
        "{run}"
    );
    assert_eq!((code, &report["clean"]), (Some(1), &serde_json::json!(false)), "{run}");
    let problem =
        report["problems"].as_array().unwrap().iter().find(|p| p["kind"] == "unverifiable");
    let detail = problem.map_or(String::new(), |p| p["detail"].to_string());
    assert!(detail.contains("before offset 50") && detail.contains("delete-records"), "{run}");
    assert_eq!(report["topics"][&topic]["retention_ms"], 86_400_000, "{run}");
    crate::common::release_slot(&s).await;
}

/// A partition idle for longer than its topic's retention had every record deleted; then the
/// topic keeps records for a day and an event of the last minutes never reached it (the slot
/// skipped it). Nothing explains its absence but a loss or a deletion the audit cannot see:
/// not clean (it was "expired", and the window clean).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_of_an_idle_partition_retention_emptied_is_not_clean_when_a_recent_event_is_absent() {
    let s = Setup::new("audit_idle").await;
    let bootstrap = crate::support::services().broker.bootstrap().to_string();
    let topic = s.topic("Order");
    let short = [("retention.ms", "1000"), ("segment.bytes", "1048576")];
    crate::support::kafka::create_topic_with(&bootstrap, &topic, 1, 1, &short).await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let old = insert(&s, 20).await;
    assert!(s.read_ids("Order", &old).await.len() >= 20, "{}", relay.log());
    let (b, t) = (bootstrap.as_str(), topic.as_str());
    let emptied = crate::support::wait_until(
        "retention empties the partition",
        Duration::from_secs(60),
        || async move {
            let (low, high) = crate::support::kafka::marks(b, t, 0).await;
            low > 0 && low == high
        },
    )
    .await;
    assert!(emptied, "{:?}", crate::support::kafka::marks(b, t, 0).await);
    let day = [("retention.ms", "86400000"), ("segment.bytes", "1048576")];
    crate::support::kafka::alter_topic(&bootstrap, &topic, &day).await;
    let lost = lose(&s, relay, 3).await;
    let (code, report, run) = audit(&s.config(), &["--details", "100"]).await;
    println!("[audit] an idle partition emptied by retention: {}", report["total"]);
    assert_eq!((code, &report["clean"]), (Some(1), &serde_json::json!(false)), "{run}");
    let judged: BTreeSet<String> = report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "unverifiable" || p["kind"] == "missing")
        .map(|p| p["event_id"].as_str().unwrap_or_default().to_string())
        .collect();
    for id in &lost {
        assert!(judged.contains(id), "{id} is not called missing or unverifiable: {run}");
    }
    assert_eq!(report["total"]["expired"], 0, "{run}");
    crate::common::release_slot(&s).await;
}

/// Two events of one aggregate put in Kafka against their commit order (written by the test's
/// producer, the later first, on a one-partition topic): with `track_commit_timestamp = on` the earlier one
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
    crate::support::kafka::create_topic(&bootstrap, &s.topic("Order"), 1).await;
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
    // Written by hand as the relay would write them (a re-published copy is exempt from the
    // order check by design: it comes after later events of its key).
    for (id, key) in [
        (second.as_str(), "o-1"),
        (first.as_str(), "o-1"),
        (inserted_first, "o-2"),
        (inserted_next, "o-2"),
    ] {
        let headers = [("id", Some(id.as_bytes()))];
        let topic = s.topic("Order");
        crate::support::kafka::produce(
            &bootstrap,
            &topic,
            Some(0),
            Some(key.as_bytes()),
            Some(b"{}"),
            &headers,
        )
        .await;
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

/// Bad input exits 2 with the fix: `--until` before `--since`, a column that is not there;
/// `--dry-run` needs `--repair`.
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

/// The topics of a window hold a record with an id no outbox table can hold and one with no
/// id at all (another producer's): both are counted as foreign and named, and the audit runs
/// on and judges the outbox's events (it used to stop on the first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_counts_foreign_records_and_runs_on() {
    let s = Setup::new("audit_foreign").await;
    let bootstrap = crate::support::services().broker.bootstrap().to_string();
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let written = insert(&s, 10).await;
    assert!(s.read_ids("Order", &written).await.len() >= 10, "{}", relay.log());
    let topic = s.topic("Order");
    let kafka = crate::support::kafka::produce;
    kafka(&bootstrap, &topic, None, Some(b"k"), Some(b"{}"), &[("id", Some(b"order-17"))]).await;
    kafka(&bootstrap, &topic, None, Some(b"k"), Some(b"{}"), &[("type", Some(b"x"))]).await;
    let (code, report, run) = audit(&s.config(), &[]).await;
    println!("[audit] with two foreign records: {}", report["total"]);
    let total = &report["total"];
    assert_eq!(total["foreign"], 2, "{run}");
    assert_eq!(total["unexpected"], 0, "{run}");
    let foreign: Vec<&str> = report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "foreign")
        .map(|p| p["event_id"].as_str().unwrap_or_default())
        .collect();
    assert!(foreign.contains(&"order-17") && foreign.contains(&"(none)"), "{run}");
    let (dup, _) = duplicates(&held(&s).await);
    assert_eq!(total["delivered_once"], 10 - dup, "{run}");
    if dup == 0 {
        assert_eq!(code, Some(0), "foreign records are said, not judged: {run}");
    }
    assert_eq!(relay.terminate(), Some(0));
    crate::common::release_slot(&s).await;
}

/// With `table.field.event.timestamp`, a record carries its row's event time, here two hours
/// before the window's rows were written: the read starts early enough for it, and nothing is
/// missing (the read started at the rows' commit, and found none of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_with_event_timestamps_older_than_the_window_finds_every_event() {
    let s = Setup::new("audit_event_time").await;
    s.db.execute("ALTER TABLE outbox ADD COLUMN occurred_at timestamp").await;
    let config = s.config_with("\"table.field.event.timestamp\" = \"occurred_at\"\n", "", "");
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let client = s.db.connect().await;
    let rows = client
        .query(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, occurred_at) \
             SELECT gen_random_uuid(), 'Order', 'o-' || (g % 4), 'Tested', '{}', \
                    (now() - interval '2 hours') AT TIME ZONE 'UTC' \
             FROM generate_series(1, 20) g RETURNING id::text",
            &[],
        )
        .await
        .unwrap();
    let written: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    let got = s.read_ids("Order", &written).await;
    assert!(got.len() >= 20, "{}", relay.log());
    let (code, report, run) = audit(&config, &[]).await;
    println!("[audit] events stamped 2 h before the window: {}", report["total"]);
    assert_eq!(report["total"]["missing"], 0, "{run}");
    let (dup, _) = duplicates(&held(&s).await);
    assert_eq!(report["total"]["delivered_once"], 20 - dup, "{run}");
    if dup == 0 {
        assert_eq!(code, Some(0), "{run}");
    }
    assert_eq!(relay.terminate(), Some(0));
    crate::common::release_slot(&s).await;
}

/// A window with no row is clean, and says it was empty: the hourly CronJob does not alert on
/// a quiet hour (it exited 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_of_an_empty_window_exits_0_and_says_it_was_empty() {
    let s = Setup::new("audit_empty").await;
    s.db.insert_outbox("outbox", "Order", "o-1", "Created", Some("{}")).await;
    let window = ["--since", "2000-01-01T00:00:00Z", "--until", "2000-01-02T00:00:00Z"];
    let mut args = vec!["audit"];
    args.extend_from_slice(&window);
    let table = walrelay_async(&args, Some(&s.config())).await;
    assert_eq!(table.code, Some(0), "{table}");
    assert!(table.stdout.contains("the window holds no outbox row"), "{table}");
    args.push("--json");
    let json = walrelay_async(&args, Some(&s.config())).await;
    let report: serde_json::Value = serde_json::from_str(json.stdout.trim()).unwrap_or_default();
    assert_eq!((json.code, &report["clean"]), (Some(0), &serde_json::json!(true)), "{json}");
    assert_eq!(report["total"]["expected"], 0, "{json}");
    crate::common::release_slot(&s).await;
}

/// On the quickstart's broker (tansu), whose end offsets lag its records, a clean window of
/// 2,000 events audits clean: the audit reads past the end offsets it is told (it found "97
/// missing" of 20,000 there, and "34 missing" of 2,000).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_of_a_clean_window_on_the_quickstarts_broker_is_clean() {
    use crate::support::broker::{Broker, Kind};
    let port = crate::support::free_port();
    let dir = crate::support::scratch_dir("audit-tansu");
    let broker = tokio::task::spawn_blocking(move || Broker::start_kind(Kind::Tansu, &dir, port))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("tansu: {e}"));
    let s = Setup::new("audit_tansu").await;
    let config = s.config_for_bootstrap(broker.bootstrap(), "", "", "");
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let written = insert_bulk(&s, 20, 100).await;
    let mut left: std::collections::HashSet<String> = written.iter().cloned().collect();
    let mut copies: std::collections::BTreeMap<String, u32> = Default::default();
    let topics = [s.topic("Order")];
    crate::support::kafka::consume_while(
        broker.bootstrap(),
        &topics,
        Duration::from_secs(60),
        |next| {
            if let crate::support::kafka::Next::Record(r) = next {
                let id = r.event_id().unwrap_or_default();
                left.remove(&id);
                *copies.entry(id).or_default() += 1;
            }
            !left.is_empty()
        },
    )
    .await;
    assert!(left.is_empty(), "{} never arrived: {}", left.len(), relay.log());
    let (code, report, run) = audit(&config, &[]).await;
    println!("[audit] tansu, 2,000 events: {} notes {}", report["total"], report["notes"]);
    let total = &report["total"];
    assert_eq!(total["expected"], 2_000, "{run}");
    assert_eq!((&total["missing"], &total["unverifiable"]), (&0.into(), &0.into()), "{run}");
    let dup = copies.values().filter(|n| **n > 1).count();
    assert_eq!(total["duplicated"], dup, "{run}");
    if dup == 0 {
        assert_eq!((code, &report["clean"]), (Some(0), &serde_json::json!(true)), "{run}");
    }
    assert_eq!(relay.terminate(), Some(0));
    crate::common::release_slot(&s).await;
    drop(broker);
}
