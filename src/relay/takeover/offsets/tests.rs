//! Against offsets recorded from real Debezium 3.6.3 (tests/fixtures/debezium/offsets/README.md).

use super::*;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/debezium/offsets");

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{FIXTURES}/{name}")).unwrap()
}

fn lsn(text: &str) -> Lsn {
    text.parse().unwrap()
}

#[test]
fn offset_file_of_a_delivered_transaction_records_its_last_row() {
    let entries = parse_offset_file(&fixture("file_delivered.dat")).unwrap();
    assert_eq!(entries.len(), 1);
    let delivered = find(&entries, "dbz-outbox-anchor", "dbz").unwrap();
    // file_delivered.wal.txt: tx 731 ends at 0/15588E0, tx 732's only row is at 0/15588E0.
    assert_eq!(delivered.commit, lsn("0/15588E0"));
    assert_eq!(
        delivered.in_flight,
        Some(InFlight { xid: 732, event: lsn("0/15588E0"), events_at_lsn: None })
    );
    assert_eq!(delivered.ts_usec, Some(1_796_152_266_162_882));
}

#[test]
fn offset_file_written_mid_transaction_records_the_last_delivered_row() {
    let entries = parse_offset_file(&fixture("file_in_flight.dat")).unwrap();
    let delivered = find(&entries, "dbz-outbox-anchor", "dbz").unwrap();
    // file_in_flight.wal.txt: tx 742 ends at 0/156DED0; tx 743's second row is at 0/156DF90.
    assert_eq!(delivered.commit, lsn("0/156DED0"));
    assert_eq!(
        delivered.in_flight,
        Some(InFlight { xid: 743, event: lsn("0/156DF90"), events_at_lsn: None })
    );
}

#[test]
fn offsets_topic_record_reads_like_the_file() {
    let text = String::from_utf8(fixture("topic_delivered.records.jsonl")).unwrap();
    let records: Vec<_> = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let bytes = |k: &str| v[k].as_str().map(|s| s.as_bytes().to_vec());
            (bytes("key"), bytes("value"))
        })
        .collect();
    let delivered = find(&records, "dbz-outbox-anchor", "dbz").unwrap();
    assert_eq!(delivered.commit, lsn("0/15649F8"));
    assert_eq!(delivered.in_flight.map(|f| (f.xid, f.event)), Some((737, lsn("0/15649F8"))));
}

#[test]
fn offsets_of_another_connector_or_server_are_not_used() {
    let entries = parse_offset_file(&fixture("file_delivered.dat")).unwrap();
    let e = find(&entries, "other", "dbz").unwrap_err();
    assert!(e.reason.contains("dbz-outbox-anchor/dbz"), "{}", e.reason);
    assert!(find(&entries, "dbz-outbox-anchor", "prod").is_err());
}

#[test]
fn a_deleted_offset_wins_over_an_earlier_one() {
    let key = br#"["c",{"server":"s"}]"#.to_vec();
    let value = br#"{"lsn_proc":100,"lsn_commit":90,"lsn":100,"txId":7,"messageType":"INSERT"}"#;
    let records = vec![(Some(key.clone()), Some(value.to_vec())), (Some(key), None)];
    assert!(find(&records, "c", "s").unwrap_err().reason.contains("deleted"));
    assert_eq!(find(&records[..1], "c", "s").unwrap().commit, Lsn(90));
}

#[test]
fn corrupt_or_truncated_offset_files_are_refused() {
    let whole = fixture("file_delivered.dat");
    for cut in [0, 3, 20, 60, 100, whole.len() - 1] {
        assert!(parse_offset_file(&whole[..cut]).is_err(), "cut at {cut}");
    }
    assert!(parse_offset_file(b"{\"lsn\": 1}").is_err());
}

#[test]
fn offset_values_mean_what_debezium_means_by_them() {
    let parse = |v: &str| parse_value(v.as_bytes());
    // No lsn_commit: lsn_proc stands in (PostgresOffsetContext.Loader).
    let d = parse(r#"{"lsn_proc":100,"lsn":100,"txId":7,"messageType":"INSERT"}"#).unwrap();
    assert_eq!(d.commit, Lsn(100));
    // A heartbeat after a COMMIT: the transaction is whole, nothing is in flight.
    let d = parse(r#"{"lsn_proc":200,"lsn_commit":200,"lsn":200,"txId":8,"messageType":"COMMIT"}"#)
        .unwrap();
    assert_eq!((d.commit, d.in_flight), (Lsn(200), None));
    // A BEGIN record: nothing of its transaction was delivered.
    let d = parse(r#"{"lsn_proc":300,"lsn_commit":250,"lsn":300,"txId":9,"messageType":"BEGIN"}"#)
        .unwrap();
    assert_eq!(d.in_flight, None);
    // 3.7's per-LSN count is kept.
    let d = parse(r#"{"lsn_proc":300,"lsn_commit":250,"lsn":300,"txId":9,"messageType":"INSERT","lsn_events_processed":3}"#).unwrap();
    assert_eq!(d.in_flight.unwrap().events_at_lsn, Some(3));
    assert!(parse(r#"{"snapshot":"INITIAL","lsn":5,"lsn_commit":5}"#).is_err());
    assert!(parse(r#"{"lsn":"x","lsn_commit":5}"#).is_err());
    assert!(parse(r#"{"ts_usec":1}"#).is_err());
    assert!(parse("not json").is_err());
}
