//! Taking over Debezium's slot with Debezium's own offsets: what Debezium delivered is
//! skipped, nothing else. No Debezium runs here: "Debezium" delivers rows by writing its offset
//! in the exact format recorded from Debezium 3.6.3 (tests/fixtures/debezium/offsets), with the
//! LSNs and transaction ids of this test's database, read from the slot itself.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use crate::common::{ids, Setup};
use crate::support::postgres::insert_numbered_row;
use crate::support::process::RelayProcess;
use crate::support::{kafka, scratch_dir, services, unique};
use walrelay::lsn::Lsn;

/// One transaction as the slot sends it.
#[derive(Debug, Clone)]
struct Tx {
    xid: u32,
    /// Its COMMIT's end LSN.
    end: u64,
    /// (event id, change LSN), in order.
    rows: Vec<(String, u64)>,
}

impl Tx {
    fn ids(&self) -> Vec<String> {
        self.rows.iter().map(|(id, _)| id.clone()).collect()
    }
}

/// Inserts `n` outbox rows in one transaction; returns their ids.
async fn insert_tx(s: &Setup, n: usize) -> Vec<String> {
    let mut client = s.db.connect().await;
    let tx = client.transaction().await.unwrap();
    // Flushed at commit (the cluster runs synchronous_commit = off): a peek at the slot reads
    // only flushed WAL.
    tx.batch_execute("SET LOCAL synchronous_commit = on").await.unwrap();
    let mut out = Vec::new();
    for i in 0..n {
        out.push(insert_numbered_row(&tx, "Tested", i).await);
    }
    tx.commit().await.unwrap();
    out
}

/// The transactions the (inactive) slot would send, with their LSNs: what Debezium saw.
async fn pending_transactions(s: &Setup) -> Vec<Tx> {
    let sql = format!(
        "SELECT lsn::text, xid::text, data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, \
         'proto_version', '1', 'publication_names', '{}')",
        s.publication
    );
    let rows = s.db.connect().await.query(&sql, &[&s.slot]).await.unwrap();
    let mut txs = Vec::new();
    let mut open: Option<Tx> = None;
    for r in rows {
        let (lsn, xid, data): (String, String, Vec<u8>) = (r.get(0), r.get(1), r.get(2));
        match data.first() {
            Some(b'B') => open = Some(Tx { xid: xid.parse().unwrap(), end: 0, rows: Vec::new() }),
            Some(b'I') => {
                let text = String::from_utf8_lossy(&data);
                // The first column is the uuid id, as text.
                let id = text
                    .split(|c: char| !(c.is_ascii_hexdigit() || c == '-'))
                    .find(|w| w.len() == 36)
                    .unwrap()
                    .to_string();
                open.as_mut().unwrap().rows.push((id, u64::from(lsn.parse::<Lsn>().unwrap())));
            }
            Some(b'C') => {
                let mut tx = open.take().unwrap();
                tx.end = u64::from(lsn.parse::<Lsn>().unwrap());
                txs.push(tx);
            }
            _ => {}
        }
    }
    txs
}

/// Debezium's offset value after it delivered `last` (a row of `tx`), with the field order and
/// types of the recorded files: `lsn_commit` is the end of the last transaction before it.
fn offset_value(tx: &Tx, last: u64, lsn_commit: u64) -> String {
    format!(
        r#"{{"lsn_proc":{last},"messageType":"INSERT","lsn_commit":{lsn_commit},"lsn":{last},"txId":{},"ts_usec":1796152266162882}}"#,
        tx.xid
    )
}

pub(crate) fn offset_key(connector: &str, server: &str) -> String {
    format!(r#"["{connector}",{{"server":"{server}"}}]"#)
}

/// Kafka's FileOffsetBackingStore file for one entry, as `ObjectOutputStream` writes a
/// `HashMap<byte[],byte[]>` of one entry (byte for byte as in the recorded files).
pub(crate) fn offset_file(key: &str, value: &str) -> Vec<u8> {
    let mut out = vec![0xAC, 0xED, 0x00, 0x05, 0x73, 0x72, 0x00, 0x11];
    out.extend_from_slice(b"java.util.HashMap");
    out.extend_from_slice(&[0x05, 0x07, 0xDA, 0xC1, 0xC3, 0x16, 0x60, 0xD1, 0x03, 0x00, 0x02]);
    out.extend_from_slice(&[0x46, 0x00, 0x0A]);
    out.extend_from_slice(b"loadFactor");
    out.extend_from_slice(&[0x49, 0x00, 0x09]);
    out.extend_from_slice(b"threshold");
    out.extend_from_slice(&[0x78, 0x70, 0x3F, 0x40, 0, 0, 0, 0, 0, 0x0C]);
    out.extend_from_slice(&[0x77, 0x08, 0, 0, 0, 0x10, 0, 0, 0, 0x01]);
    out.extend_from_slice(&[0x75, 0x72, 0x00, 0x02, b'[', b'B']);
    out.extend_from_slice(&[
        0xAC, 0xF3, 0x17, 0xF8, 0x06, 0x08, 0x54, 0xE0, 0x02, 0x00, 0x00, 0x78, 0x70,
    ]);
    out.extend_from_slice(&(key.len() as u32).to_be_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(&[0x75, 0x71, 0x00, 0x7E, 0x00, 0x02]);
    out.extend_from_slice(&(value.len() as u32).to_be_bytes());
    out.extend_from_slice(value.as_bytes());
    out.push(0x78);
    out
}

/// Moves the slot to `lsn`, where Debezium's last offset flush left it.
async fn set_slot(s: &Setup, lsn: u64) {
    let t = Lsn(lsn).to_string();
    assert!(s.db.advance_slot(&s.slot, &t).await, "could not advance the slot to {t}");
}

/// Where "Debezium" keeps its offsets in a test.
enum Store {
    /// An offset file with these bytes.
    File(Vec<u8>),
    /// A file that isn't there.
    Absent,
    /// Kafka Connect's offsets topic with this record.
    Topic { key: String, value: String },
}

const CONNECTOR: &str = "outbox-connector";
const SERVER: &str = "dbserver1";

/// The `[debezium_offsets]` section for `store`, written to where the relay finds it.
async fn offsets_section(store: &Store) -> String {
    match store {
        Store::File(bytes) => {
            let path = scratch_dir("dbzoffsets").join("offsets.dat");
            std::fs::write(&path, bytes).unwrap();
            format!(
                "[debezium_offsets]\nfile = \"{}\"\nconnector = \"{CONNECTOR}\"\nserver = \"{SERVER}\"\n",
                path.display()
            )
        }
        Store::Absent => format!(
            "[debezium_offsets]\nfile = \"{}\"\nconnector = \"{CONNECTOR}\"\nserver = \"{SERVER}\"\n",
            scratch_dir("dbzoffsets").join("never-written.dat").display()
        ),
        Store::Topic { key, value } => {
            let topic = unique("connect_offsets");
            let bootstrap = services().broker.bootstrap();
            kafka::create_topic(bootstrap, &topic, 1).await;
            // Another connector's offset first, as in a shared offsets topic.
            let other = offset_key("another-connector", SERVER);
            kafka::produce(
                bootstrap,
                &topic,
                Some(0),
                Some(other.as_bytes()),
                Some(b"{\"lsn\":1}"),
                &[],
            )
            .await;
            kafka::produce(
                bootstrap,
                &topic,
                Some(0),
                Some(key.as_bytes()),
                Some(value.as_bytes()),
                &[],
            )
            .await;
            format!("[debezium_offsets]\ntopic = \"{topic}\"\nconnector = \"{CONNECTOR}\"\n\n[debezium]\n\"topic.prefix\" = \"{SERVER}\"\n")
        }
    }
}

/// Debezium relayed `delivered` transactions and stopped; `quiet` were written while nothing
/// ran; walrelay takes over with `store` (and `extra` sections); one more transaction follows.
/// Returns what reached the topic, the relay, and the rows written after the takeover.
async fn take_over(
    s: &Setup,
    store: &Store,
    quiet: &[Tx],
    extra: &str,
) -> (Vec<String>, RelayProcess, Vec<String>) {
    let section = offsets_section(store).await;
    let mut relay = RelayProcess::start(&s.config_with("", "", &format!("{section}\n{extra}")));
    s.wait_streaming(&mut relay).await;
    let after = insert_tx(s, 2).await;
    let expected = quiet.iter().map(|t| t.rows.len()).sum::<usize>() + after.len();
    let got = s.read("Order", expected).await;
    // Then nothing more: a record beyond the expected ones is one delivered twice.
    let more = s.read_within("Order", expected + 1, Duration::from_secs(3)).await;
    let all = if more.len() > got.len() { ids(&more) } else { ids(&got) };
    (all, relay, after)
}

/// The relay's lines about Debezium's offsets, for the test output.
fn takeover_lines(relay: &RelayProcess) -> String {
    relay.log().lines().filter(|l| l.contains("Debezium")).collect::<Vec<_>>().join("\n")
}

/// Counts what walrelay delivered against what it had to: rows missing, and rows delivered
/// twice (by Debezium and by walrelay, or twice by walrelay).
fn tally(got: &[String], must: &[String], debezium: &[String]) -> (usize, usize) {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for id in got {
        *seen.entry(id).or_default() += 1;
    }
    let missing = must.iter().filter(|id| !seen.contains_key(id.as_str())).count();
    let twice = seen.values().map(|n| n - 1).sum::<usize>()
        + debezium.iter().filter(|id| seen.contains_key(id.as_str())).count();
    (missing, twice)
}

/// The scenario before the takeover: transactions of 1, 3 and `last` rows that Debezium
/// relays, then two written while nothing runs. Returns (Debezium's, quiet).
async fn history(s: &Setup, last: usize) -> (Vec<Tx>, Vec<Tx>) {
    s.db.execute(&format!("CREATE PUBLICATION {} FOR TABLE outbox", s.publication)).await;
    let mut ids = Vec::new();
    for n in [1, 3, last, 1, 2] {
        ids.push(insert_tx(s, n).await);
    }
    let txs = pending_transactions(s).await;
    assert_eq!(txs.iter().map(Tx::ids).collect::<Vec<_>>(), ids, "the slot's transactions");
    (txs[..3].to_vec(), txs[3..].to_vec())
}

fn all_ids(txs: &[Tx]) -> Vec<String> {
    txs.iter().flat_map(Tx::ids).collect()
}

async fn zero_replay(store: fn(&[Tx]) -> Store, name: &str, extra: &str) {
    let s = Setup::new(name).await;
    let (debezium, quiet) = history(&s, 2).await;
    // Debezium confirmed its first transaction only: the slot lags its offsets.
    set_slot(&s, debezium[0].end).await;
    let (got, mut relay, after) = take_over(&s, &store(&debezium), &quiet, extra).await;
    let must: Vec<String> = all_ids(&quiet).into_iter().chain(after).collect();
    let (missing, twice) = tally(&got, &must, &all_ids(&debezium));
    let skipped_line = format!(
        "skipped 2 transactions (5 events) Debezium had delivered, up to LSN {}",
        Lsn(debezium[2].end)
    );
    let logged = relay.wait_for_log(&skipped_line, Duration::from_secs(5)).await;
    println!(
        "{name}: {skipped_line}: {} delivered, {missing} missing, {twice} delivered twice",
        got.len()
    );
    println!("{}", takeover_lines(&relay));
    assert!(logged, "{}", s.diagnostics(&relay));
    assert_eq!((missing, twice), (0, 0), "{got:?}\n{}", s.diagnostics(&relay));
    // The slot moves past what was skipped and relayed.
    assert_eq!(relay.terminate(), Some(0));
    let confirmed =
        s.db.connect()
            .await
            .query_one(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                &[&s.slot],
            )
            .await
            .unwrap();
    assert!(confirmed.get::<_, String>(0).parse::<Lsn>().unwrap() > Lsn(quiet[1].end));
}

/// The offset Debezium stores after delivering all of `debezium`: on the last transaction's
/// last row, `lsn_commit` at the end of the one before.
fn delivered_all(debezium: &[Tx]) -> (String, String) {
    let (last, before) = (&debezium[2], &debezium[1]);
    let value = offset_value(last, last.rows.last().unwrap().1, before.end);
    (offset_key(CONNECTOR, SERVER), value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_with_debeziums_offset_file_skips_what_debezium_delivered_and_nothing_else() {
    zero_replay(
        |d| {
            let (key, value) = delivered_all(d);
            Store::File(offset_file(&key, &value))
        },
        "dbzfile",
        "",
    )
    .await;
}

/// The same takeover with `[delivery] guarantee = "exactly-once"`: Debezium's offsets decide
/// what is skipped on the first run, the progress topic from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_in_exactly_once_mode_skips_what_debezium_delivered_and_nothing_else() {
    let delivery = format!(
        "[delivery]\nguarantee = \"exactly-once\"\ntransactional_id = \"{}\"\nprogress_topic = \"{}\"\n",
        unique("dbzeos"),
        unique("dbzeos_progress")
    );
    zero_replay(
        |d| {
            let (key, value) = delivered_all(d);
            Store::File(offset_file(&key, &value))
        },
        "dbzeos",
        &delivery,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_with_connects_offsets_topic_skips_what_debezium_delivered_and_nothing_else() {
    zero_replay(
        |d| {
            let (key, value) = delivered_all(d);
            Store::Topic { key, value }
        },
        "dbztopic",
        "",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_relays_the_whole_transaction_debezium_stopped_in() {
    let s = Setup::new("dbzinflight").await;
    let (debezium, quiet) = history(&s, 3).await;
    set_slot(&s, debezium[0].end).await;
    // Debezium stopped after the 2nd of the 3 rows of its last transaction (as in
    // file_in_flight.dat).
    let stopped_in = &debezium[2];
    let value = offset_value(stopped_in, stopped_in.rows[1].1, debezium[1].end);
    let store = Store::File(offset_file(&offset_key(CONNECTOR, SERVER), &value));
    let (got, mut relay, after) =
        take_over(&s, &store, &[stopped_in.clone(), quiet[0].clone(), quiet[1].clone()], "").await;
    let must: Vec<String> =
        stopped_in.ids().into_iter().chain(all_ids(&quiet)).chain(after).collect();
    let (missing, twice) = tally(&got, &must, &debezium[1].ids());
    let skipped_line = format!(
        "skipped 1 transactions (3 events) Debezium had delivered, up to LSN {}",
        Lsn(debezium[1].end)
    );
    let logged = relay.wait_for_log(&skipped_line, Duration::from_secs(5)).await;
    let partial = relay.log().contains("because Debezium delivered it only in part");
    let again = got.iter().filter(|id| stopped_in.ids()[..2].contains(id)).count();
    println!("dbzinflight: {skipped_line}; the transaction Debezium stopped in went whole ({again} of its rows Debezium had delivered went again): {missing} missing, {twice} delivered twice outside it");
    println!("{}", takeover_lines(&relay));
    assert!(logged && partial, "{}", s.diagnostics(&relay));
    assert_eq!((missing, twice), (0, 0), "{got:?}\n{}", s.diagnostics(&relay));
    assert_eq!(again, 2);
    assert_eq!(relay.terminate(), Some(0));
}

/// The rows of the transaction Debezium stopped in, held back and then released, go out in the
/// configured envelope like every other row, not in Debezium's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_releases_held_rows_in_the_configured_envelope() {
    let s = Setup::new("dbzenvelope").await;
    let (debezium, quiet) = history(&s, 3).await;
    set_slot(&s, debezium[0].end).await;
    let stopped_in = &debezium[2];
    let value = offset_value(stopped_in, stopped_in.rows[1].1, debezium[1].end);
    let store = Store::File(offset_file(&offset_key(CONNECTOR, SERVER), &value));
    let section = offsets_section(&store).await;
    let envelope = "[envelope]\nformat = \"cloudevents-binary\"\n";
    let mut relay = RelayProcess::start(&s.config_with("", "", &format!("{section}\n{envelope}")));
    s.wait_streaming(&mut relay).await;
    let got = s.read("Order", stopped_in.rows.len() + all_ids(&quiet).len()).await;
    let format = |id: &str| {
        let r = got.iter().find(|r| r.header_str("id") == Some(id));
        match r.and_then(|r| r.header_str("ce_specversion")) {
            Some(v) => format!("cloudevents {v}"),
            None if r.is_some() => "debezium (no ce_* headers)".to_string(),
            None => "missing".to_string(),
        }
    };
    let released: Vec<String> = stopped_in.ids().iter().map(|id| format(id)).collect();
    println!(
        "dbzenvelope: the 3 rows of the transaction Debezium stopped in went out as {released:?}"
    );
    assert!(relay.log().contains("because Debezium delivered it only in part"), "{}", relay.log());
    let wrong: Vec<String> =
        ids(&got).into_iter().filter(|id| !format(id).starts_with("cloudevents")).collect();
    assert!(wrong.is_empty(), "not in the configured envelope: {wrong:?}\n{}", relay.log());
    assert_eq!(relay.terminate(), Some(0));
}

/// The fallbacks: nothing is skipped, the relay says why, nothing is lost.
async fn falls_back(name: &str, store: Store, slot_at: fn(&[Tx]) -> u64, why: &str) {
    let s = Setup::new(name).await;
    let (debezium, quiet) = history(&s, 2).await;
    let slot = slot_at(&debezium);
    set_slot(&s, slot).await;
    let after_slot: Vec<Tx> =
        debezium.iter().chain(&quiet).filter(|t| t.end > slot).cloned().collect();
    let (got, mut relay, after) = take_over(&s, &store, &after_slot, "").await;
    let must: Vec<String> = all_ids(&after_slot).into_iter().chain(after).collect();
    let (missing, _) = tally(&got, &must, &[]);
    let redelivered = all_ids(&debezium).iter().filter(|id| got.contains(id)).count();
    let warned = relay.wait_for_log(why, Duration::from_secs(5)).await;
    println!("{name}: fell back ({why}): {} delivered, {missing} missing, {redelivered} of Debezium's rows again", got.len());
    println!("{}", takeover_lines(&relay));
    assert!(warned, "{}", s.diagnostics(&relay));
    assert!(!relay.log().contains("Debezium had delivered, up to LSN"), "{}", relay.log());
    assert_eq!(missing, 0, "{got:?}\n{}", s.diagnostics(&relay));
    assert_eq!(got.len(), must.len(), "{got:?}");
    assert_eq!(got.iter().collect::<BTreeSet<_>>().len(), got.len(), "{got:?}");
    assert_eq!(relay.terminate(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_ignores_offsets_older_than_the_slot() {
    // walrelay (or Debezium) already confirmed past the offsets' position.
    let store = |d: &[Tx]| {
        let (key, value) = delivered_all(d);
        Store::File(offset_file(&key, &value))
    };
    let s_name = "dbzolder";
    // The offsets are built from this test's own transactions, after they exist.
    let s = Setup::new(s_name).await;
    let (debezium, quiet) = history(&s, 2).await;
    set_slot(&s, debezium[2].end).await;
    let (got, mut relay, after) = take_over(&s, &store(&debezium), &quiet, "").await;
    let must: Vec<String> = all_ids(&quiet).into_iter().chain(after).collect();
    let (missing, twice) = tally(&got, &must, &all_ids(&debezium));
    let why = "Debezium's offsets are older than the slot's confirmed position";
    let warned = relay.wait_for_log(why, Duration::from_secs(5)).await;
    println!(
        "{s_name}: fell back ({why}): {} delivered, {missing} missing, {twice} delivered twice",
        got.len()
    );
    println!("{}", takeover_lines(&relay));
    assert!(warned, "{}", s.diagnostics(&relay));
    assert_eq!((missing, twice), (0, 0), "{got:?}\n{}", s.diagnostics(&relay));
    assert_eq!(relay.terminate(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_without_an_offset_file_relays_everything_after_the_slot() {
    falls_back("dbzmissing", Store::Absent, |d| d[0].end, "cannot read the offset file").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_with_a_corrupt_offset_file_relays_everything_after_the_slot() {
    let mut bytes = offset_file(&offset_key(CONNECTOR, SERVER), "{}");
    bytes.truncate(bytes.len() / 2);
    falls_back(
        "dbzcorrupt",
        Store::File(bytes),
        |d| d[0].end,
        "is not a Kafka FileOffsetBackingStore file",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_with_no_offset_for_the_connector_relays_everything_after_the_slot() {
    let other =
        offset_file(&offset_key("another-connector", SERVER), r#"{"lsn":1,"lsn_commit":1}"#);
    falls_back(
        "dbznooffset",
        Store::File(other),
        |d| d[0].end,
        "no offset for connector outbox-connector",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_with_another_databases_offsets_relays_everything_after_the_slot() {
    // lsn_commit far beyond this server's WAL: offsets of a connector on another server.
    let value = r#"{"lsn_proc":280375465082880,"messageType":"INSERT","lsn_commit":280375465082880,"lsn":280375465082880,"txId":5,"ts_usec":1}"#;
    let store = Store::File(offset_file(&offset_key(CONNECTOR, SERVER), value));
    falls_back("dbzahead", store, |d| d[0].end, "ahead of this server's WAL").await;
}

#[test]
fn offset_file_writer_matches_the_recorded_debezium_file() {
    let recorded = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/debezium/offsets/file_delivered.dat"
    ))
    .unwrap();
    let value = r#"{"lsn_proc":22382816,"messageType":"INSERT","lsn_commit":22382816,"lsn":22382816,"txId":732,"ts_usec":1796152266162882}"#;
    assert_eq!(offset_file(&offset_key("dbz-outbox-anchor", "dbz"), value), recorded);
}
