//! `walrelay check` with `[debezium_offsets]`: found or not, their LSNs against the
//! slot's confirmed position, and what the first run will skip.

use crate::common::Setup;
use crate::support::process::walrelay_async;
use crate::support::scratch_dir;
use crate::takeover::{offset_file, offset_key};

async fn lsn(s: &Setup, sql: &str) -> u64 {
    let text: String = s.db.connect().await.query_one(sql, &[]).await.unwrap().get(0);
    let (hi, lo) = text.split_once('/').unwrap();
    (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap()
}

/// Runs `walrelay check` with the offsets file holding `lsn_commit`; the offsets line.
async fn check_with(s: &Setup, lsn_commit: Option<u64>) -> String {
    let path = scratch_dir("check_offsets").join(format!("{}.offsets", s.slot));
    if let Some(lsn_commit) = lsn_commit {
        let value = format!(
            r#"{{"lsn_proc":{lsn_commit},"messageType":"COMMIT","lsn_commit":{lsn_commit},"lsn":{lsn_commit},"txId":1,"ts_usec":1796152266162882}}"#
        );
        std::fs::write(&path, offset_file(&offset_key("dbz", "shop"), &value)).unwrap();
    } else {
        let _ = std::fs::remove_file(&path);
    }
    let extra = format!(
        "[debezium_offsets]\nfile = \"{}\"\nconnector = \"dbz\"\nserver = \"shop\"\n",
        path.display()
    );
    let run = walrelay_async(&["check"], Some(&s.config_with("", "", &extra))).await;
    let line = run.stdout.lines().find(|l| l.contains("debezium offsets")).map(str::to_owned);
    line.unwrap_or_else(|| panic!("no debezium offsets line:\n{run}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_debeziums_offsets_against_the_slot() {
    let s = Setup::new("check_offsets").await;
    s.insert_events("Order", "o-1", 2).await;
    let confirmed = lsn(
        &s,
        &format!(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = '{}'",
            s.slot
        ),
    )
    .await;
    let wal = lsn(&s, "SELECT pg_current_wal_lsn()::text").await;
    let text = |l: u64| format!("{:X}/{:X}", l >> 32, l & 0xffff_ffff);

    let ahead = check_with(&s, Some(wal)).await;
    println!("{ahead}");
    assert!(ahead.starts_with("ok   debezium offsets: found"), "{ahead}");
    assert!(
        ahead.contains(&format!(
            "skips every transaction ending after {} and at or before {}",
            text(confirmed),
            text(wal)
        )),
        "{ahead}"
    );

    let older = check_with(&s, Some(confirmed - 1)).await;
    println!("{older}");
    assert!(
        older.contains("older than the slot's confirmed position")
            && older.contains("nothing is skipped"),
        "{older}"
    );

    let future = check_with(&s, Some(wal + (1 << 40))).await;
    println!("{future}");
    assert!(future.starts_with("warn ") && future.contains("another database's"), "{future}");

    let missing = check_with(&s, None).await;
    println!("{missing}");
    assert!(
        missing.starts_with("warn debezium offsets: not usable")
            && missing.contains("skips nothing"),
        "{missing}"
    );
}
