//! The events a skipped slot lost: `walrelay audit` names exactly them, and `--repair`
//! republishes them (also under cloudevents-binary on a partitioned outbox, and protobuf); a
//! repair refuses a compacted topic unless told, and sends nothing the slot has not confirmed.

use super::*;

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
    // The repaired events sit after later events of their keys: repaired, not out of order.
    assert_eq!(after["repaired"], 500, "{run}");
    assert_eq!(after["out_of_order"], 0, "{run}");
    assert_eq!(after["delivered_once"], 100 - dup, "{run}");
    assert_eq!(code, Some(if dup == by_replay { 0 } else { 1 }), "{run}");
    // And a third audit of the same window, on its own, is clean again.
    let (code, again, run) = audit(&s.config(), &[]).await;
    assert_eq!(again["total"]["missing"], 0, "{run}");
    assert_eq!(
        (&again["total"]["repaired"], &again["total"]["out_of_order"]),
        (&500.into(), &0.into()),
        "{run}"
    );
    if dup == by_replay {
        assert_eq!((code, &again["clean"]), (Some(0), &serde_json::json!(true)), "{run}");
    }
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
    assert_eq!(report["after"]["total"]["delivered_once"], 80 - dup, "{run}");
    assert_eq!(report["after"]["total"]["repaired"], 60, "{run}");
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

/// A compacted topic keeps only the latest record of a key: its absent events are unverifiable,
/// and the repair refuses to put an old event after the newest of its key (every compacted
/// reader would take it as the key's state) unless `--allow-compacted-rollback`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_repair_refuses_a_compacted_topic_unless_allowed_to_roll_compacted_readers_back() {
    let s = Setup::new("audit_compacted").await;
    let bootstrap = crate::support::services().broker.bootstrap().to_string();
    let topic = s.topic("Order");
    let compact = [("cleanup.policy", "compact")];
    crate::support::kafka::create_topic_with(&bootstrap, &topic, 2, 1, &compact).await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let written = insert(&s, 10).await;
    assert!(s.read_ids("Order", &written).await.len() >= 10, "{}", relay.log());
    let lost = lose(&s, relay, 6).await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let (code, report, run) = audit(&s.config(), &[]).await;
    assert_eq!((code, &report["total"]["unverifiable"]), (Some(1), &6.into()), "{run}");
    assert_eq!(report["total"]["missing"], 0, "{run}");

    let (code, _, run) = audit(&s.config(), &["--repair", "--yes"]).await;
    assert_eq!(code, Some(2), "{run}");
    assert!(run.contains("--allow-compacted-rollback") && run.contains(&topic), "{run}");
    assert!(held(&s).await.values().all(|(_, replayed)| *replayed == 0), "nothing was sent");

    let allowed = ["--repair", "--yes", "--allow-compacted-rollback"];
    let (code, report, run) = audit(&s.config(), &allowed).await;
    assert_eq!(report["repair"]["sent"], 6, "{run}");
    assert_eq!(report["after"]["total"]["repaired"], 6, "{run}");
    let copies = held(&s).await;
    for id in &lost {
        assert_eq!(copies.get(id).map(|c| c.1), Some(1), "{id}: {run}");
    }
    let (dup, by_replay) = duplicates(&copies);
    assert_eq!(code, Some(if dup == by_replay { 0 } else { 1 }), "{run}");
    assert_eq!(relay.terminate(), Some(0));
    crate::common::release_slot(&s).await;
}

/// The relay is down and its slot behind the events the audit finds absent: they are pending,
/// not lost (the relay sends them when it runs), so the repair sends nothing and says why; once
/// the relay ran, the window is clean with no repair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_repair_sends_nothing_the_slot_has_not_confirmed_past() {
    let s = Setup::new("audit_pending").await;
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    let first = insert(&s, 5).await;
    assert!(s.read_ids("Order", &first).await.len() >= 5, "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0));
    let behind = insert(&s, 5).await;
    let (code, report, run) = audit(&s.config(), &["--repair", "--yes"]).await;
    assert_eq!(code, Some(2), "{run}");
    assert!(run.contains("pending, not lost"), "{run}");
    assert_eq!(report["total"]["missing"], 5, "the audit alone cannot tell: {run}");
    assert!(held(&s).await.values().all(|(_, replayed)| *replayed == 0), "nothing was sent");
    let mut relay = s.start_relay();
    s.wait_streaming(&mut relay).await;
    assert!(s.read_ids("Order", &behind).await.len() >= 5, "{}", relay.log());
    let (_, report, run) = audit(&s.config(), &[]).await;
    assert_eq!(
        (&report["total"]["missing"], &report["total"]["repaired"]),
        (&0.into(), &0.into()),
        "{run}"
    );
    assert_eq!(relay.terminate(), Some(0));
    crate::common::release_slot(&s).await;
}
