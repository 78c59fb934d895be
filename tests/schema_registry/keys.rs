//! `key.converter = "avro"` and `"protobuf"`: the aggregate id as a registry key under
//! `<topic>-key`, framed, so its partition is the framed bytes' murmur2 (as with Debezium's
//! converters; Avro's bytes are checked against its golden in registry_goldens.rs). The audit, its repair and the
//! console's lookup frame the keys the same way, so they place each event where it is.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::audit::{audit, lose};
use crate::common::{release_slot, Setup};
use crate::console::{get_json, TOKEN};
use crate::support::process::{walrelay_async, RelayProcess};
use crate::support::registry::registry;
use crate::support::registry_decode::decode_with_confluent;
use crate::support::{free_port, kafka, services};

/// The 4 aggregates, each in one partition.
fn one_partition_each(partitions: &BTreeMap<String, BTreeSet<i32>>) {
    assert_eq!(partitions.len(), 4);
    assert!(partitions.values().all(|p| p.len() == 1), "{partitions:?}");
}

/// `audit` of `config` finds the `expected` events, none missing, misplaced or out of order,
/// and exits 0 unless the relay wrote one twice.
async fn audit_places_every_event(config: &str, expected: u64, what: &str) {
    let (code, report, run) = audit(config, &[]).await;
    println!("[audit] {what}: {}", report["total"]);
    assert_eq!(report["total"]["expected"], expected, "{run}");
    for kind in ["missing", "misplaced", "out_of_order"] {
        assert_eq!(report["total"][kind], 0, "{kind}: {run}");
    }
    let dup = report["total"]["duplicated"].as_u64().unwrap_or(0);
    assert_eq!(code, Some(if dup == 0 { 0 } else { 1 }), "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_keys_are_framed_under_the_key_subject_and_the_audit_its_repair_and_the_lookup_place_them_in_the_framed_keys_partition(
) {
    let s = Setup::new("avro_keys").await;
    let bootstrap = services().broker.bootstrap();
    let topic = s.topic("Order");
    kafka::create_topic(bootstrap, &topic, 4).await;
    let port = free_port();
    let url = registry().ccompat_url();
    let sections = format!(
        "[debezium]\n\"value.converter\" = \"avro\"\n\"key.converter\" = \"avro\"\n\n\
         [schema_registry]\nurl = \"{url}\"\n\n[http]\nlisten = \"127.0.0.1:{port}\"\n\
         console = \"read\"\n"
    );
    let config = s.config_with("", "", &sections);
    let mut relay =
        RelayProcess::start_with(&config, &[], &[("WALRELAY_HTTP_CONSOLE_TOKEN", TOKEN)]);
    s.wait_streaming(&mut relay).await;
    let mut written = Vec::new();
    for i in 0..40 {
        let aggregate = format!("o-{}", i % 4);
        written.push(s.db.insert_outbox("outbox", "Order", &aggregate, "Tested", Some("{}")).await);
    }
    let got = kafka::consume(bootstrap, &topic, 40, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 40, "{}", relay.log());

    // Framed under the key subject, decoded by confluent-kafka's AvroDeserializer, one partition
    // per aggregate.
    let (key_id, key_schema) = registry().latest(&format!("{topic}-key")).expect("a key subject");
    assert_eq!(key_schema, "\"string\"");
    let keys: Vec<Vec<u8>> = got.iter().map(|r| r.key.clone().expect("a key")).collect();
    for key in &keys {
        assert_eq!((key[0], i32::from_be_bytes(key[1..5].try_into().unwrap())), (0, key_id));
    }
    let decoded = decode_with_confluent("avro", &url, &topic, &keys);
    let mut partitions: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    for (r, key) in got.iter().zip(&decoded) {
        partitions
            .entry(key.as_str().expect("a string key").into())
            .or_default()
            .insert(r.partition);
    }
    println!("key schema id {key_id}; partitions per aggregate: {partitions:?}");
    one_partition_each(&partitions);

    // The audit places each event in its framed key's partition.
    audit_places_every_event(&config, 40, "avro keys").await;

    // The console's lookup finds an event where a consumer reads it, and shows its key's text.
    let consumed = got.iter().find(|r| r.header_str("id") == Some(written[1].as_str())).unwrap();
    let (status, found, _) = get_json(port, &format!("/api/v1/events/{}", written[1])).await;
    println!("lookup: {found}");
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["kafka"]["found"], true, "{found}");
    assert_eq!(found["kafka"]["partition"], consumed.partition, "{found}");
    assert!(found.to_string().contains("\"o-1\""), "the key's text: {found}");

    // Not ok: 4 events the slot skipped are missing; the repair re-publishes them with the same
    // framed keys, into their aggregates' partitions, and its second audit finds none missing.
    let lost = lose(&s, relay, 4).await;
    // The relay runs again and relays 4 more, so its slot confirms past the audit's snapshot, as
    // a repair wants (other tests write WAL meanwhile).
    let mut relay =
        RelayProcess::start_with(&config, &[], &[("WALRELAY_HTTP_CONSOLE_TOKEN", TOKEN)]);
    s.wait_streaming(&mut relay).await;
    for i in 0..4 {
        let aggregate = format!("o-{}", i % 4);
        s.db.insert_outbox("outbox", "Order", &aggregate, "Tested", Some("{}")).await;
    }
    let relayed = kafka::consume(bootstrap, &topic, 44, Duration::from_secs(30)).await;
    assert_eq!(relayed.len(), 44, "{}", relay.log());
    let (code, report, run) = audit(&config, &["--repair", "--yes"]).await;
    println!(
        "[audit] avro keys, 4 skipped, repaired: {} then {}",
        report["before"]["total"], report["after"]["total"]
    );
    assert_eq!(report["before"]["total"]["expected"], 48, "{run}");
    assert_eq!(report["before"]["total"]["missing"], 4, "{run}");
    assert_eq!(report["before"]["clean"], false, "{run}");
    assert_eq!(report["repair"]["sent"], 4, "{run}");
    assert_eq!(report["after"]["total"]["missing"], 0, "{run}");
    assert_eq!(report["after"]["total"]["misplaced"], 0, "{run}");
    let after = &report["after"]["total"];
    let on_purpose = after["duplicated"] == after["duplicated_by_replay"];
    assert_eq!(code, Some(if on_purpose { 0 } else { 1 }), "{run}");
    let all = kafka::consume(bootstrap, &topic, 48, Duration::from_secs(30)).await;
    let repaired: Vec<_> =
        all.iter().filter(|r| lost.iter().any(|id| r.header_str("id") == Some(id))).collect();
    assert_eq!(repaired.len(), 4, "the repaired records");
    for r in repaired {
        let same = got.iter().find(|g| g.key == r.key).expect("a record of the same key before");
        assert_eq!(r.partition, same.partition, "a repaired record in its aggregate's partition");
    }
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// With `use_latest_version`, Avro keys are written under their subject's latest schema too:
/// `walrelay check` fails naming `<topic>-key` until it holds one, then says its id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_with_use_latest_version_and_avro_keys_fails_until_the_key_subject_holds_a_schema() {
    let s = Setup::new("avro_key_check").await;
    let topic = format!("{}_all", s.topic_prefix);
    let sections = format!(
        "[debezium]\n\"value.converter\" = \"avro\"\n\"key.converter\" = \"avro\"\n\n\
         [schema_registry]\nurl = \"{}\"\nauto_register = false\nuse_latest_version = true\n",
        registry().ccompat_url()
    );
    let config =
        s.config_with(&format!("\"route.topic.replacement\" = \"{topic}\""), "", &sections);
    let key_line = |run: &crate::support::process::Run| {
        let line = run.stdout.lines().find(|l| l.contains(&format!("{topic}-key")));
        line.unwrap_or("").to_string()
    };
    let before = walrelay_async(&["check"], Some(&config)).await;
    println!("before the key's schema: {}", key_line(&before));
    assert!(key_line(&before).starts_with("FAIL"), "{before}");
    assert_eq!(before.code, Some(1), "{before}");
    let id = registry().register(&format!("{topic}-key"), "AVRO", "\"string\"");
    let after = walrelay_async(&["check"], Some(&config)).await;
    println!("after: {}", key_line(&after));
    assert!(key_line(&after).starts_with("ok") && key_line(&after).contains(&format!("id {id}")));
}

/// `key.converter = "protobuf"`: the aggregate id as a `google.protobuf.StringValue` (Confluent's
/// ProtobufConverter's mapping of a string), `wrappers.proto` registered under `<topic>-key`,
/// framed with the message indexes `[7]`: confluent-kafka's ProtobufDeserializer reads each
/// key, every aggregate keeps one partition, and the audit finds none misplaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_keys_are_string_values_under_the_key_subject_and_decode_with_confluents_deserializer(
) {
    let s = Setup::new("proto_keys").await;
    let bootstrap = services().broker.bootstrap();
    let topic = s.topic("Order");
    kafka::create_topic(bootstrap, &topic, 4).await;
    let url = registry().ccompat_url();
    let sections = format!(
        "[debezium]\n\"value.converter\" = \"protobuf\"\n\"key.converter\" = \"protobuf\"\n\n\
         [schema_registry]\nurl = \"{url}\"\n"
    );
    let config = s.config_with("\"table.expand.json.payload\" = true", "", &sections);
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    for i in 0..20 {
        let aggregate = format!("o-{}", i % 4);
        s.db.insert_outbox("outbox", "Order", &aggregate, "Tested", Some("{\"n\": 1}")).await;
    }
    let got = kafka::consume(bootstrap, &topic, 20, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 20, "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());

    let (key_id, key_schema) = registry().latest(&format!("{topic}-key")).expect("a key subject");
    assert!(key_schema.contains("message StringValue"), "{key_schema}");
    let keys: Vec<Vec<u8>> = got.iter().map(|r| r.key.clone().expect("a key")).collect();
    for key in &keys {
        let framing = (key[0], i32::from_be_bytes(key[1..5].try_into().unwrap()), &key[5..7]);
        assert_eq!(framing, (0, key_id, &[0x02, 0x0e][..]), "the message indexes [7]");
    }
    let decoded = decode_with_confluent("protobuf", &url, &topic, &keys);
    let mut partitions: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    for (r, key) in got.iter().zip(&decoded) {
        let text = key["value"].as_str().unwrap_or_else(|| panic!("a StringValue: {key}"));
        partitions.entry(text.into()).or_default().insert(r.partition);
    }
    println!("Protobuf key schema id {key_id}; partitions per aggregate: {partitions:?}");
    one_partition_each(&partitions);
    audit_places_every_event(&config, 20, "Protobuf keys").await;
    release_slot(&s).await;
}
