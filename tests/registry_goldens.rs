//! Byte-for-byte parity with Debezium 3.6.3 and Confluent's `AvroConverter` and
//! `ProtobufConverter` 7.0.16 (the ones Debezium Server ships), against the suite's Apicurio
//! registry. The fixture's rows go through PostgreSQL, walrelay and Kafka, and every record is
//! compared with what the converter wrote (`tests/fixtures/debezium/registry`, made by
//! `scripts/debezium-registry-goldens/run.sh`): the value's bytes after the schema id (for
//! Protobuf, the message indexes first), the schema text registered under that id, the subject
//! and version it is registered as, the key and the headers. The schema id itself depends on
//! what the registry held before, so it is not compared.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use crate::common::{release_slot, Setup};
use crate::dead_letters::dead_letter_section;
use crate::goldens::{assert_same_headers, b64, fixture_statements, golden_in, FIXTURES};
use crate::support::kafka::{consume_topics, Consumed};
use crate::support::registry::registry;
use crate::support::services;

struct Golden {
    name: &'static str,
    /// `[debezium] value.converter`: `avro` or `protobuf`.
    converter: &'static str,
    /// `[debezium] key.converter`: `string` or `avro`.
    key_converter: &'static str,
    /// The fixture rows the golden was made from (every row when empty): see run.sh.
    rows: &'static [&'static str],
    router: &'static str,
    /// Rows Debezium's converter refused that walrelay refuses too (dead-lettered); it delivers
    /// the others Debezium refused.
    dead_lettered: &'static [&'static str],
}

/// The fixture statements that insert `rows` (all when empty), and those that insert none;
/// the same as run.sh's `rows.py`.
fn fixture_rows(rows: &[&str]) -> Vec<String> {
    let inserted = |stmt: &str| -> Vec<String> {
        if !stmt.starts_with("INSERT") {
            return Vec::new();
        }
        stmt.match_indices("'00000000-0000-0000-0000-0000000000")
            .map(|(at, m)| stmt[at + m.len()..at + m.len() + 2].to_string())
            .collect()
    };
    fixture_statements()
        .into_iter()
        .filter(|stmt| {
            let ins = inserted(stmt);
            rows.is_empty() || ins.is_empty() || ins.iter().any(|r| rows.contains(&r.as_str()))
        })
        .collect()
}

/// The record's event id: its `id` header, or a dead letter's `walrelay.event.id`.
fn event_id(r: &Consumed) -> Option<String> {
    let id = r.header_str("id").or_else(|| r.header_str("walrelay.event.id"));
    id.map(|h| h.trim_matches('"').to_string())
}

async fn check(g: Golden) {
    let s = Setup::new(&format!("reggold_{}", &g.name[..g.name.len().min(12)])).await;
    let expected = golden_in(&format!("{FIXTURES}/registry"), g.name);
    let registry = registry();
    let dead = s.topic("dead_letters");
    let sections = format!(
        "[debezium]\n\"extended.headers.enabled\" = true\n\"topic.prefix\" = \"dbz\"\n\
         \"value.converter\" = \"{}\"\n\"key.converter\" = \"{}\"\n\n[schema_registry]\n\
         url = \"{}\"\n\n{}",
        g.converter,
        g.key_converter,
        registry.ccompat_url(),
        dead_letter_section(&dead)
    );
    let config = s.config_with(g.router, "", &sections);
    let mut relay = crate::support::process::RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let client = s.db.connect().await;
    for stmt in fixture_rows(g.rows) {
        client.batch_execute(&stmt).await.unwrap_or_else(|e| panic!("{stmt}: {e}"));
    }
    let mut topics: BTreeSet<String> = expected
        .iter()
        .map(|r| format!("{}.{}", s.topic_prefix, r["topic"].as_str().unwrap()))
        .collect();
    topics.insert(dead.clone());
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    let bootstrap = services().broker.bootstrap();
    let got = consume_topics(bootstrap, &topic_refs, expected.len(), Duration::from_secs(60)).await;
    assert_eq!(got.len(), expected.len(), "{}: relay log:\n{}", g.name, relay.log());

    let subject = |topic: &str, part: &str| format!("{}.{topic}-{part}", s.topic_prefix);
    // A subject walrelay registers a schema under that Debezium did not (a row Debezium's
    // converter refused) numbers its later versions differently: those are not compared.
    let mut shifted: HashSet<String> = HashSet::new();
    let (mut compared, mut refused) = (0, 0);
    for want in &expected {
        let id = want["event_id"].as_str().unwrap();
        let what = format!("{} seq {} ({id})", g.name, want["seq"]);
        let have: Vec<&Consumed> =
            got.iter().filter(|r| event_id(r).as_deref() == Some(id)).collect();
        assert_eq!(have.len(), 1, "{what}: {} records", have.len());
        let have = have[0];
        if want["sent"] == false {
            // Debezium's converter refused it (errors.tolerance=all skipped it). walrelay
            // refuses it too, or its expansion takes it (router/mod.rs says which rows and why)
            // and delivers it to its topic.
            refused += 1;
            println!(
                "{what}: Debezium's converter refused it ({}); walrelay sent it to {} ({} bytes)",
                want["conversion_error"].as_str().unwrap_or_default(),
                have.topic,
                have.value.as_ref().map_or(0, Vec::len)
            );
            let row = &id[id.len() - 2..];
            assert_eq!(have.topic == dead, g.dead_lettered.contains(&row), "{what}: {have:?}");
            if have.topic != dead {
                shifted.insert(subject(want["topic"].as_str().unwrap(), "value"));
            }
            continue;
        }
        let topic = have.topic.strip_prefix(&format!("{}.", s.topic_prefix)).unwrap();
        assert_eq!(topic, want["topic"].as_str().unwrap(), "{what}: topic");
        match g.key_converter {
            "avro" => {
                let subject = subject(topic, "key");
                same_framed(&what, have.key.as_deref(), &want["key"], (topic, &subject), true)
            }
            _ => assert_eq!(have.key, b64(&want["key"]["bytes_b64"]), "{what}: key"),
        }
        assert_same_headers(&what, have, &want["headers"]);
        let w = &want["value"];
        if w["is_null"] == true {
            assert_eq!(have.value, None, "{what}: a tombstone");
            compared += 1;
            continue;
        }
        let subject = subject(topic, "value");
        let version = !shifted.contains(&subject);
        same_framed(&what, have.value.as_deref(), w, (topic, &subject), version);
        compared += 1;
    }
    println!(
        "registry golden {}: {compared} records identical to Debezium 3.6.3 + Confluent's {} \
         converter 7.0.16 (value bytes, schema, subject version, key, headers); {refused} rows \
         Debezium's converter refused, {} of them dead-lettered by walrelay too",
        g.name,
        g.converter,
        g.dead_lettered.len()
    );
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// A framed key or value against the golden's: the bytes after the schema id (not compared: it
/// depends on what the registry held before), the schema registered under the id, and, with
/// `version`, its version under `subject` (the golden's under `topic`'s same subject).
fn same_framed(
    what: &str,
    have: Option<&[u8]>,
    want: &serde_json::Value,
    (topic, subject): (&str, &str),
    version: bool,
) {
    let part = subject.rsplit('-').next().unwrap_or_default();
    let bytes = have.unwrap_or_else(|| panic!("{what}: no {part}"));
    assert!(bytes.len() >= 5 && bytes[0] == 0, "{what}: {part} not Confluent-framed: {bytes:?}");
    assert_eq!(Some(bytes[5..].to_vec()), b64(&want["after_id_b64"]), "{what}: {part} bytes");
    let schema_id = i32::from_be_bytes(bytes[1..5].try_into().unwrap());
    let schema = registry().schema_by_id(schema_id).expect("the schema is registered");
    assert_eq!(schema, want["schema"].as_str().unwrap(), "{what}: {part} schema");
    let golden = want["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["subject"] == format!("{topic}-{part}"))
        .and_then(|v| v["version"].as_i64())
        .unwrap_or_else(|| panic!("{what}: the golden has no {topic}-{part}"));
    let versions = registry().versions_of(schema_id);
    let ours = versions.iter().find(|(s, _)| *s == subject).map(|(_, v)| *v);
    assert!(ours.is_some(), "{what}: schema {schema_id} is not under {subject}: {versions:?}");
    if version {
        assert_eq!(ours, Some(golden), "{what}: version under {subject}");
    }
}

macro_rules! registry_golden_test {
    ($test:ident, $name:literal, $converter:literal, $rows:expr, $router:expr, $dead:expr) => {
        registry_golden_test!($test, $name, $converter, "string", $rows, $router, $dead);
    };
    ($test:ident, $name:literal, $converter:literal, $key:literal, $rows:expr, $router:expr, $dead:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let (name, converter, key_converter, rows, router) =
                ($name, $converter, $key, $rows, $router);
            let golden =
                Golden { name, converter, key_converter, rows, router, dead_lettered: $dead };
            check(golden).await;
        }
    };
}

const EXPAND: &str = "\"table.expand.json.payload\" = true";
const PLACEMENTS: &str = "\"table.expand.json.payload\" = true\n\
     \"table.fields.additional.placement\" = \"type:header:eventType,aggregatetype:envelope:aggType\"";
/// With an envelope, Debezium halts at the first row it cannot expand: run.sh says which rows
/// it takes.
const PLACEMENT_ROWS: &[&str] =
    &["01", "02", "07", "08", "09", "11", "16", "17", "18", "19", "20", "99"];

registry_golden_test!(
    registry_golden_avro_plain_payload_matches_debeziums_avro_converter,
    "avro_defaults",
    "avro",
    &[],
    "",
    &[]
);
registry_golden_test!(
    registry_golden_avro_expanded_payload_matches_debeziums_avro_converter,
    "avro_expand_json_payload",
    "avro",
    &[],
    EXPAND,
    &[]
);
// Rows 16–18 share the payload schema `{"n": int}`: Debezium names the envelopes of 17
// (Shipment) and 18 (Order) after 16's routed value, Invoice (it caches the envelope's schema
// by the payload's), and so does walrelay.
registry_golden_test!(
    registry_golden_avro_expanded_payload_with_placements_matches_debeziums_avro_converter,
    "avro_expand_json_payload_placements",
    "avro",
    PLACEMENT_ROWS,
    PLACEMENTS,
    &[]
);
// Avro keys: the aggregate id as an Avro "string" under <topic>-key, framed (so its partition is
// the framed bytes' murmur2, as Debezium's).
registry_golden_test!(
    registry_golden_avro_keys_match_debeziums_avro_key_converter,
    "avro_keys",
    "avro",
    "avro",
    &[],
    "",
    &[]
);
// A payload that is not expanded is a google.protobuf.StringValue, wrappers.proto registered.
registry_golden_test!(
    registry_golden_protobuf_plain_payload_matches_debeziums_protobuf_converter,
    "protobuf_defaults",
    "protobuf",
    &[],
    "",
    &[]
);
// Rows 06 (an array at the root) and 12 (`[]`: no schema) have no Protobuf message, for
// Debezium's converter as for walrelay.
registry_golden_test!(
    registry_golden_protobuf_expanded_payload_matches_debeziums_protobuf_converter,
    "protobuf_expand_json_payload",
    "protobuf",
    &[],
    EXPAND,
    &["06", "12"]
);
registry_golden_test!(
    registry_golden_protobuf_expanded_payload_with_placements_matches_debeziums_protobuf_converter,
    "protobuf_expand_json_payload_placements",
    "protobuf",
    PLACEMENT_ROWS,
    PLACEMENTS,
    &[]
);
