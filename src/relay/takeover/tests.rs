//! The screen, step by step, against offsets shaped like the recorded ones.

use bytes::Bytes;

use super::*;
use crate::pgoutput::{Relation, Tuple, Value};
use crate::relay::takeover::offsets::InFlight;
use crate::router::Binding;

fn limits(records: usize) -> Limits {
    let text =
        "[source]\nurl = \"postgres://u@h/d\"\n[kafka]\n\"bootstrap.servers\" = \"k:9092\"\n";
    Limits { inflight_records: records, ..crate::config::Config::parse(text).unwrap().limits }
}

fn router() -> Encoder {
    encoder("debezium")
}

fn encoder(format: &str) -> Encoder {
    let envelope = [("format".to_string(), format.to_string())].into();
    let (router, envelope) =
        crate::envelope::parse(Some(&envelope), &Default::default(), &Default::default()).unwrap();
    Encoder::from_parts(router, envelope, "app")
}

fn binding(encoder: &Encoder) -> Binding {
    let relation = Relation::outbox_for_test(16400, "outbox");
    encoder.router().bind(&relation, &[]).unwrap()
}

fn row(id: &str) -> Tuple {
    let t = |s: &str| Value::Text(Bytes::copy_from_slice(s.as_bytes()));
    Tuple(vec![t(id), t("Order"), t("o-1"), t("Created"), t("{}")])
}

/// Offsets after Debezium delivered rows up to `event` of transaction 9, the transaction
/// before it ending at 100.
/// An outbox row of `b` at `lsn` (every test row carries the same event id).
fn row_at(b: &Binding, lsn: u64) -> Step<'_> {
    row_in(b, lsn, Txn::default())
}

/// An outbox row of `b` at `lsn`, read in transaction `txn`.
fn row_in(b: &Binding, lsn: u64, txn: Txn) -> Step<'_> {
    let tuple = row("00000000-0000-0000-0000-000000000001");
    Step::Row { binding: b, tuple, lsn: Lsn(lsn), txn }
}

fn takeover(event: u64, events_at_lsn: Option<u64>) -> Takeover {
    let delivered = Delivered {
        commit: Lsn(100),
        in_flight: Some(InFlight { xid: 9, event: Lsn(event), events_at_lsn }),
        ts_usec: None,
    };
    decide(Ok(delivered), Lsn(50), Lsn(10_000), &limits(100)).unwrap()
}

/// What the screen made of each step: P(ass), T(aken) or R<n> (released n held rows).
fn run(t: &mut Takeover, steps: &[Step<'_>], encoder: &mut Encoder) -> String {
    let mut out = Vec::new();
    for step in steps {
        out.push(match t.screen(step, encoder) {
            Screened::Pass => "P".to_string(),
            Screened::Taken => "T".to_string(),
            Screened::Release(held) => format!("R{}", held.len()),
        });
    }
    out.join(" ")
}

fn begin(final_lsn: u64, xid: u32) -> Step<'static> {
    Step::Begin(Txn { commit_micros: 0, commit_lsn: Lsn(final_lsn), xid })
}

fn commit(end: u64) -> Step<'static> {
    Step::Commit { end_lsn: Lsn(end) }
}

#[test]
fn takeover_skips_transactions_ending_at_lsn_commit_and_the_one_debezium_finished() {
    let mut router = router();
    let b = binding(&router);
    let r = |lsn| row_at(&b, lsn);
    let mut t = takeover(130, None);
    let steps = [
        begin(60, 7),
        r(40),
        r(50),
        commit(70),
        begin(90, 8),
        r(80),
        commit(100),
        begin(140, 9),
        r(120),
        r(130),
        commit(150),
    ];
    assert_eq!(run(&mut t, &steps, &mut router), "P T T P P T P P T T P");
    assert!(t.finished());
    assert_eq!((t.transactions, t.events, t.through), (3, 5, Some(Lsn(150))));
}

#[test]
fn takeover_relays_all_of_a_transaction_debezium_delivered_in_part() {
    let mut router = router();
    let b = binding(&router);
    let r = |lsn| row_at(&b, lsn);
    let mut t = takeover(130, None);
    let steps = [begin(160, 9), r(120), r(130), r(140), r(150), commit(170)];
    assert_eq!(run(&mut t, &steps, &mut router), "P T T R2 P P");
    assert!(t.finished());
    assert_eq!(t.transactions, 0);
}

#[test]
fn takeover_counts_rows_sharing_the_last_delivered_lsn() {
    let mut router = router();
    let b = binding(&router);
    let r = |lsn| row_at(&b, lsn);
    // A COPY's rows share one LSN: without Debezium's count, only one of them is known delivered.
    let mut t = takeover(130, None);
    assert_eq!(run(&mut t, &[begin(160, 9), r(130), r(130), commit(170)], &mut router), "P T R1 P");
    // With lsn_events_processed = 2 (Debezium 3.7+), both are.
    let mut t = takeover(130, Some(2));
    assert_eq!(run(&mut t, &[begin(160, 9), r(130), r(130), commit(170)], &mut router), "P T T P");
    assert_eq!(t.events, 2);
}

#[test]
fn takeover_stops_screening_at_the_first_transaction_debezium_never_saw() {
    let mut router = router();
    let b = binding(&router);
    let r = |lsn| row_at(&b, lsn);
    let mut t = takeover(130, None);
    // Another transaction after lsn_commit (Debezium stopped before transaction 9 committed).
    assert_eq!(run(&mut t, &[begin(110, 4), r(105)], &mut router), "P P");
    assert!(t.finished());
    assert_eq!(t.transactions, 0);
}

#[test]
fn takeover_skips_non_transactional_messages_up_to_lsn_commit() {
    let mut router = router();
    let message = |lsn| {
        Step::Message(super::super::SelectedMessage {
            prefix: "outbox".into(),
            content: Bytes::new(),
            lsn: Lsn(lsn),
            txn: None,
        })
    };
    let mut t = takeover(130, None);
    assert_eq!(run(&mut t, &[message(90), message(100), message(101)], &mut router), "T T P");
    assert!(t.finished());
}

#[test]
fn takeover_is_not_decided_on_offsets_older_than_the_slot_or_ahead_of_the_server() {
    let delivered = Delivered { commit: Lsn(100), in_flight: None, ts_usec: None };
    assert!(decide(Ok(delivered.clone()), Lsn(100), Lsn(1000), &limits(100)).is_some());
    assert!(decide(Ok(delivered.clone()), Lsn(101), Lsn(1000), &limits(100)).is_none());
    assert!(decide(Ok(delivered), Lsn(50), Lsn(99), &limits(100)).is_none());
    let unusable = Unusable { reason: "missing".into(), hint: "h" };
    assert!(decide(Err(unusable), Lsn(50), Lsn(1000), &limits(100)).is_none());
}

#[test]
fn takeover_holds_no_more_than_the_relay_keeps_in_flight() {
    let mut router = router();
    let b = binding(&router);
    let r = |lsn| row_at(&b, lsn);
    let delivered = Delivered {
        commit: Lsn(100),
        in_flight: Some(InFlight { xid: 9, event: Lsn(130), events_at_lsn: None }),
        ts_usec: None,
    };
    let mut t = decide(Ok(delivered), Lsn(50), Lsn(10_000), &limits(2)).unwrap();
    // A third delivered row would pass inflight_records = 2: the whole transaction goes.
    assert_eq!(
        run(&mut t, &[begin(160, 9), r(110), r(120), r(130), commit(170)], &mut router),
        "P T T R2 P"
    );
}

/// Replays a recorded scenario: what the server sends after the slot Debezium left
/// (`<name>.slot.txt`), as logged by the test_decoding slot beside it (`<name>.wal.txt`), against
/// the offsets Debezium wrote (`<name>.dat`).
fn replay_recorded(name: &str) -> (String, Takeover) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/debezium/offsets");
    let read = |file: String| std::fs::read_to_string(format!("{dir}/{file}")).unwrap();
    let entries = crate::relay::takeover::offsets::parse_offset_file(
        &std::fs::read(format!("{dir}/{name}.dat")).unwrap(),
    )
    .unwrap();
    let delivered =
        crate::relay::takeover::offsets::find(&entries, "dbz-outbox-anchor", "dbz").unwrap();
    let slot: Lsn =
        read(format!("{name}.slot.txt")).trim().split('|').nth(1).unwrap().parse().unwrap();
    let mut t = decide(Ok(delivered), slot, Lsn(u64::MAX), &limits(100)).unwrap();
    let mut router = router();
    let b = binding(&router);
    // Transactions as (xid, rows, commit end), in commit order.
    type Recorded = (u32, Vec<(String, Lsn)>, Lsn);
    let mut txs: Vec<Recorded> = Vec::new();
    for line in read(format!("{name}.wal.txt")).lines() {
        let mut parts = line.splitn(3, '|');
        let (lsn, xid, what) = (
            parts.next().unwrap().parse::<Lsn>().unwrap(),
            parts.next().unwrap().parse().unwrap(),
            parts.next().unwrap(),
        );
        if what.starts_with("BEGIN") {
            txs.push((xid, Vec::new(), Lsn(0)));
        } else if let Some(id) = what.strip_prefix("INSERT ") {
            txs.last_mut().unwrap().1.push((id.to_string(), lsn));
        } else {
            txs.last_mut().unwrap().2 = lsn;
        }
    }
    let mut verdicts = Vec::new();
    // The server sends the transactions that end after the slot's confirmed position.
    for (xid, rows, end) in txs.into_iter().filter(|(_, _, end)| *end > slot) {
        // The commit record starts between the last change and the end.
        let final_lsn = Lsn((rows.last().map_or(end.0, |r| r.1 .0) + end.0) / 2);
        let mut steps = vec![begin(final_lsn.0, xid)];
        steps.extend(rows.iter().map(|(id, lsn)| Step::Row {
            binding: &b,
            tuple: row(id),
            lsn: *lsn,
            txn: Txn { commit_micros: 0, commit_lsn: final_lsn, xid },
        }));
        steps.push(commit(end.0));
        verdicts.push(run(&mut t, &steps, &mut router));
    }
    (verdicts.join(" | "), t)
}

#[test]
fn takeover_replaying_the_recorded_graceful_stop_skips_debeziums_last_transaction() {
    // Debezium delivered transaction 732 (row …099) and stopped; the slot sat at 731's end.
    let (verdicts, t) = replay_recorded("file_delivered");
    assert_eq!(verdicts, "P T P");
    assert!(t.finished());
    assert_eq!((t.transactions, t.events), (1, 1));
}

#[test]
fn takeover_replaying_the_recorded_stop_mid_transaction_relays_that_transaction_whole() {
    // Debezium stopped after rows …010 and …099 of 743's five.
    let (verdicts, t) = replay_recorded("file_in_flight");
    assert_eq!(verdicts, "P T T R2 P P P");
    assert!(t.finished());
    assert_eq!(t.transactions, 0);
}

/// Held rows are encoded as every other row is: released, they are in the configured format
/// (not the router's Debezium records).
#[test]
fn takeover_holds_rows_in_the_configured_envelope() {
    let mut encoder = encoder("cloudevents-binary");
    let b = binding(&encoder);
    let mut t = takeover(130, None);
    let txn = Txn { commit_micros: 1_764_612_000_000_000, commit_lsn: Lsn(160), xid: 9 };
    for step in [begin(160, 9), row_in(&b, 120, txn), row_in(&b, 130, txn)] {
        t.screen(&step, &mut encoder);
    }
    let Screened::Release(held) = t.screen(&row_in(&b, 140, txn), &mut encoder) else {
        panic!("the row past Debezium's releases the held ones");
    };
    assert_eq!(held.len(), 2);
    for Held { record, txn: held_in, .. } in &held {
        assert_eq!(*held_in, txn, "released in the transaction it was read in");
        let spec = record.headers.iter().find(|(name, _)| &**name == "ce_specversion");
        assert_eq!(spec.map(|(_, v)| &v[..]), Some(&b"1.0"[..]), "{record:?}");
    }
}
