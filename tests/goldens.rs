//! Byte-for-byte parity with Debezium 3.6.3's Outbox Event Router: the rows of
//! `tests/fixtures/debezium/fixture.sql` go through a real PostgreSQL, walrelay and a real
//! broker, and every record read back is compared with what Debezium put on the wire under the
//! same options (topic, key, value, headers, partition). The fixture README says how the goldens
//! were made.

use std::collections::BTreeSet;
use std::time::Duration;

use base64::Engine;
use serde_json::Value;

use crate::common::Setup;
use crate::support::kafka::{consume_topics, Consumed};
use crate::support::services;

pub(crate) const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/debezium");
/// Every fixture row reaches walrelay's output (20 rows + the sentinel).
const ROWS: usize = 21;

struct Golden {
    name: &'static str,
    router: &'static str,
    debezium: &'static str,
    /// Event ids whose records differ on purpose, with the reason; their value must still be JSON.
    differs: &'static [(&'static str, &'static str)],
}

fn golden(name: &str) -> Vec<Value> {
    golden_in(FIXTURES, name)
}

/// The records of golden `name` (`<dir>/<name>.jsonl`), one JSON object per line.
pub(crate) fn golden_in(dir: &str, name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(format!("{dir}/{name}.jsonl")).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

pub(crate) fn b64(v: &Value) -> Option<Vec<u8>> {
    v.as_str().map(|s| base64::engine::general_purpose::STANDARD.decode(s).unwrap())
}

/// The fixture's statements, one at a time on one connection (rows 16–18 share a transaction).
pub(crate) fn fixture_statements() -> Vec<String> {
    sql_statements(&format!("{FIXTURES}/fixture.sql"))
}

/// The statements of an SQL file, comments dropped, split at `;` line ends (BEGIN … COMMIT
/// stay separate statements, run in order on one connection).
pub(crate) fn sql_statements(path: &str) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let body: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .map(|l| format!("{l}\n"))
        .collect();
    body.split(";\n").map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()
}

fn is_uuid(bytes: &[u8]) -> bool {
    let s = String::from_utf8_lossy(bytes);
    let s = s.trim_matches('"');
    s.len() == 36
        && s.chars().enumerate().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

/// `have`'s headers are `want`'s (a golden's `[{key, value_b64}]`), in the same order; the
/// run id, a fresh UUIDv7 per run, is compared by its format.
pub(crate) fn assert_same_headers(what: &str, have: &Consumed, want: &Value) {
    let want: Vec<(String, Vec<u8>)> = want
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["key"].as_str().unwrap().to_string(), b64(&h["value_b64"]).unwrap_or_default()))
        .collect();
    let have: Vec<(String, Vec<u8>)> =
        have.headers.iter().map(|(k, v)| (k.clone(), v.clone().unwrap_or_default())).collect();
    assert_eq!(
        have.iter().map(|h| &h.0).collect::<Vec<_>>(),
        want.iter().map(|h| &h.0).collect::<Vec<_>>(),
        "{what}: header names and order"
    );
    for ((name, have_v), (_, want_v)) in have.iter().zip(&want) {
        if name == "__debezium.context.runId" {
            assert!(
                is_uuid(have_v) && is_uuid(want_v),
                "{what}: runId {:?}",
                String::from_utf8_lossy(have_v)
            );
        } else {
            assert_eq!(have_v, want_v, "{what}: header {name}");
        }
    }
}

async fn check(g: Golden) {
    let s = Setup::new(&format!("golden_{}", &g.name[..g.name.len().min(12)])).await;
    let expected = golden(g.name);
    let replacement = if g.router.contains("route.topic.replacement") {
        g.router.replace(
            "\"route.topic.replacement\" = \"",
            &format!("\"route.topic.replacement\" = \"{}.", s.topic_prefix),
        )
    } else {
        format!(
            "\"route.topic.replacement\" = \"{}.outbox.event.${{routedByValue}}\"\n{}",
            s.topic_prefix, g.router
        )
    };
    let config = s.config_with(&replacement, "", &format!("[debezium]\n{}", g.debezium));
    let mut relay = crate::support::process::RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;

    let client = s.db.connect().await;
    for stmt in fixture_statements() {
        client.batch_execute(&stmt).await.unwrap_or_else(|e| panic!("{stmt}: {e}"));
    }
    let topics: BTreeSet<String> = golden("no_extended_headers")
        .iter()
        .map(|r| r["topic"].as_str().unwrap().to_string())
        .collect();
    let topics: BTreeSet<String> = if g.router.contains("events.${routedByValue}") {
        topics
            .iter()
            .map(|t| format!("{}.{}", s.topic_prefix, t.replace("outbox.event.", "events.")))
            .collect()
    } else {
        topics.iter().map(|t| format!("{}.{t}", s.topic_prefix)).collect()
    };
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    let got =
        consume_topics(services().broker.bootstrap(), &topic_refs, ROWS, Duration::from_secs(60))
            .await;
    assert_eq!(got.len(), ROWS, "{}: relay log:\n{}", g.name, relay.log());

    let mut compared = 0;
    for want in &expected {
        let id_header =
            want["headers"].as_array().unwrap().iter().find(|h| h["key"] == "id").unwrap();
        let id = b64(&id_header["value_b64"]).unwrap();
        let have: Vec<&Consumed> = got.iter().filter(|r| r.header("id") == Some(&id[..])).collect();
        assert_eq!(
            have.len(),
            1,
            "{}: record for id {} appears {} times",
            g.name,
            String::from_utf8_lossy(&id),
            have.len()
        );
        let have = have[0];
        let what = format!("{} seq {}", g.name, want["seq"]);
        let topic = have.topic.strip_prefix(&format!("{}.", s.topic_prefix)).unwrap();
        assert_eq!(topic, want["topic"].as_str().unwrap(), "{what}: topic");
        assert_eq!(have.key, b64(&want["key_b64"]), "{what}: key");
        let want_value =
            if want["value_is_null"].as_bool().unwrap() { None } else { b64(&want["value_b64"]) };
        assert_eq!(
            have.value.as_deref().map(String::from_utf8_lossy),
            want_value.as_deref().map(String::from_utf8_lossy),
            "{what}: value"
        );
        assert_eq!(have.value, want_value, "{what}: value bytes");
        assert_same_headers(&what, have, &want["headers"]);
        assert_eq!(have.partition as i64, want["partition"].as_i64().unwrap(), "{what}: partition");
        compared += 1;
    }
    for (id, why) in g.differs {
        let r = got
            .iter()
            .find(|r| r.header_str("id").map(|h| h.trim_matches('"')) == Some(*id))
            .unwrap();
        let value = r.value_json();
        println!(
            "{}: {id} differs from Debezium on purpose ({why}); walrelay sent {:?}",
            g.name, value
        );
        assert!(value.is_some(), "{}: {id} must still be delivered as JSON", g.name);
    }
    println!(
        "golden {}: {compared} records identical to Debezium 3.6.3, {} documented differences",
        g.name,
        g.differs.len()
    );
    assert_eq!(relay.terminate(), Some(0));
}

const EXT: &str = "\"extended.headers.enabled\" = true\n\"topic.prefix\" = \"dbz\"\n";

macro_rules! golden_test {
    ($test:ident, $name:literal, $router:expr, $debezium:expr, $differs:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            check(Golden { name: $name, router: $router, debezium: $debezium, differs: $differs })
                .await;
        }
    };
}

const EXPANSION_DIFFERS: &[(&str, &str)] = &[
    (
        "00000000-0000-0000-0000-000000000006",
        "Debezium 3.6.3 fails on a top-level array of objects",
    ),
    (
        "00000000-0000-0000-0000-000000000014",
        "Debezium 3.6.3 fails on numbers too large for a long",
    ),
];

golden_test!(
    golden_no_extended_headers_is_walrelays_default_output,
    "no_extended_headers",
    "",
    "",
    &[]
);
golden_test!(golden_defaults_with_extended_headers_match_debezium, "defaults", "", EXT, &[]);
golden_test!(
    golden_route_by_aggregatetype_events_matches_debezium,
    "route_by_aggregatetype_events",
    "\"route.by.field\" = \"aggregatetype\"\n\"route.topic.replacement\" = \"events.${routedByValue}\"",
    EXT,
    &[]
);
golden_test!(
    golden_tombstone_on_empty_payload_matches_debezium,
    "tombstone_on_empty_payload",
    "\"route.tombstone.on.empty.payload\" = true",
    EXT,
    &[]
);
golden_test!(
    golden_tombstone_with_envelope_field_matches_debezium,
    "tombstone_on_empty_payload_with_envelope_field",
    "\"route.tombstone.on.empty.payload\" = true\n\"table.fields.additional.placement\" = \"aggregatetype:envelope:aggType\"",
    "\"extended.headers.enabled\" = true\n\"topic.prefix\" = \"dbz\"\n\"value.converter\" = \"json\"\n\"value.converter.schemas.enable\" = false\n",
    &[]
);
golden_test!(
    golden_additional_fields_match_debezium,
    "additional_fields",
    "\"table.fields.additional.placement\" = \"type:header:eventType,aggregatetype:envelope:aggType\"",
    "\"extended.headers.enabled\" = true\n\"topic.prefix\" = \"dbz\"\n\"value.converter\" = \"json\"\n\"value.converter.schemas.enable\" = false\n",
    &[]
);
// Debezium halted at row 06 under this configuration, so its golden has rows 01–05 only; walrelay
// delivers all rows and the first five must match.
golden_test!(
    golden_expand_json_payload_matches_debezium_where_debezium_did_not_halt,
    "expand_json_payload",
    "\"table.expand.json.payload\" = true",
    "\"extended.headers.enabled\" = true\n\"topic.prefix\" = \"dbz\"\n\"value.converter\" = \"json\"\n\"value.converter.schemas.enable\" = false\n",
    EXPANSION_DIFFERS
);
golden_test!(
    golden_expand_json_payload_matches_debezium_except_the_rows_debezium_drops,
    "expand_json_payload_errors_tolerance_all",
    "\"table.expand.json.payload\" = true",
    "\"extended.headers.enabled\" = true\n\"topic.prefix\" = \"dbz\"\n\"value.converter\" = \"json\"\n\"value.converter.schemas.enable\" = false\n",
    EXPANSION_DIFFERS
);
golden_test!(
    golden_json_converters_match_debezium,
    "json_converters",
    "",
    "\"extended.headers.enabled\" = true\n\"topic.prefix\" = \"dbz\"\n\"key.converter\" = \"json\"\n\"key.converter.schemas.enable\" = false\n\"value.converter\" = \"json\"\n\"value.converter.schemas.enable\" = false\n\"header.converter\" = \"json\"\n",
    &[]
);
golden_test!(
    golden_json_schemas_converters_match_debezium,
    "json_schemas_converters",
    "",
    "\"extended.headers.enabled\" = true\n\"topic.prefix\" = \"dbz\"\n\"key.converter\" = \"json\"\n\"value.converter\" = \"json\"\n",
    &[]
);
