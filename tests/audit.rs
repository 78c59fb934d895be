//! `walrelay audit` against the real services: a clean window, events a skipped slot lost, and
//! duplicates a replay made on purpose.

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
        let id = r.header_str("id").unwrap_or_default().to_string();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_of_a_clean_window_finds_every_event_once_where_the_router_puts_it() {
    let s = Setup::new("audit_clean").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let written = insert(&s, 2_000).await;
    assert!(s.read_ids("Order", &written).await.len() >= written.len(), "{}", relay.log());
    let (code, report, run) = audit(&s.config(), &[]).await;
    let total = &report["total"];
    println!("[audit] clean window: {total}");
    let (dup, _) = duplicates(&held(&s).await);
    assert_eq!(total["expected"], 2_000, "{run}");
    assert_eq!(total["duplicated"], dup, "{run}");
    assert_eq!(total["delivered_once"], 2_000 - dup, "{run}");
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
/// and the audit exits 1; a replay of them makes the next audit clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_names_exactly_the_events_a_skipped_slot_lost_and_a_replay_of_them_cleans_it() {
    let s = Setup::new("audit_lost").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let mut written = insert(&s, 50).await;
    assert!(s.read_ids("Order", &written).await.len() >= 50, "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0));
    let inactive = crate::support::slot::wait_inactive(&s.db.url, &s.slot, Duration::from_secs(15));
    assert!(inactive.await, "the slot stayed active");
    let lost = insert(&s, 500).await;
    // The advance stops at the flushed WAL, and the suite's server commits asynchronously: it
    // is repeated until the slot is past every one of the 500.
    let client = s.db.connect().await;
    let target: String =
        client.query_one("SELECT pg_current_wal_insert_lsn()::text", &[]).await.unwrap().get(0);
    let (c, slot, target) = (&client, s.slot.as_str(), target.as_str());
    let past = crate::support::wait_until("the slot is past the 500", Duration::from_secs(20), || async move {
        let sql = "SELECT (pg_replication_slot_advance($1, $2::text::pg_lsn)).end_lsn >= $2::text::pg_lsn";
        c.query_one(sql, &[&slot, &target]).await.unwrap().get::<_, bool>(0)
    })
    .await;
    assert!(past, "the slot never got past {target}");
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

    // What the audit found, replayed: the next audit is clean.
    let ids_file = crate::support::scratch_dir("audit_ids").join("lost.txt");
    std::fs::write(&ids_file, lost.join("\n")).unwrap();
    let replay = walrelay_async(
        &["replay", "--ids", ids_file.to_str().unwrap(), "--yes"],
        Some(&s.config()),
    )
    .await;
    assert_eq!(replay.code, Some(0), "{replay}");
    let (code, report, run) = audit(&s.config(), &[]).await;
    let (dup, by_replay) = duplicates(&held(&s).await);
    assert_eq!(report["total"]["missing"], 0, "{run}");
    assert_eq!(report["total"]["duplicated"], dup, "{run}");
    assert_eq!(report["total"]["duplicated_by_replay"], by_replay, "{run}");
    assert_eq!(report["total"]["delivered_once"], 600 - dup, "{run}");
    assert_eq!(code, Some(if dup == by_replay { 0 } else { 1 }), "{run}");
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
