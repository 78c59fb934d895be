//! Byte-for-byte parity with Debezium 3.6.3's table-less outbox: the messages of
//! `tests/fixtures/debezium/messages/messages_fixture.sql` go through a real PostgreSQL, walrelay
//! and a real broker under each main golden configuration, and every record read back is
//! compared with what Debezium put on the wire (topic, key, value, headers, partition, and the
//! order within each partition). Non-transactional messages are relayed here
//! (`non_transactional_messages = "relay"`), as Debezium relays them; the fixture README says
//! how the goldens were made.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value;

use crate::common::Setup;
use crate::support::kafka::{consume_topics, Consumed};
use crate::support::process::RelayProcess;
use crate::support::services;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/debezium/messages");
const INCLUDE: &str = "\"message.prefix.include.list\" = \"outbox\"\n";

struct Golden {
    name: &'static str,
    router: &'static str,
    /// `[debezium]` lines, the prefix list included.
    debezium: &'static str,
}

fn golden(name: &str) -> Vec<Value> {
    crate::goldens::golden_in(FIXTURES, name)
}

/// The fixture's statements, one at a time on one connection (BEGIN … COMMIT included).
fn fixture_statements() -> Vec<String> {
    crate::goldens::sql_statements(&format!("{FIXTURES}/messages_fixture.sql"))
}

/// The `id` header of a record as text (a JSON header converter quotes it).
fn id_of(headers: &[(String, Vec<u8>)]) -> String {
    let id = headers.iter().find(|(k, _)| k == "id").map(|(_, v)| v.clone()).unwrap_or_default();
    String::from_utf8_lossy(&id).trim_matches('"').to_string()
}

async fn check(g: Golden) {
    let s = Setup::new(&format!("mgolden_{}", &g.name[9..g.name.len().min(21)])).await;
    s.db.execute("CREATE TABLE not_captured (id serial PRIMARY KEY, note text)").await;
    let expected = golden(g.name);
    let router = format!(
        "\"route.topic.replacement\" = \"{}.outbox.event.${{routedByValue}}\"\n{}",
        s.topic_prefix, g.router
    );
    let config = s
        .config_with(&router, "", &format!("[debezium]\n{}", g.debezium))
        .replace("[outbox]\n", "[outbox]\nnon_transactional_messages = \"relay\"\n");
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;

    let client = s.db.connect().await;
    for stmt in fixture_statements() {
        client.batch_execute(&stmt).await.unwrap_or_else(|e| panic!("{stmt}: {e}"));
    }
    let topics: BTreeSet<String> = expected
        .iter()
        .map(|r| format!("{}.{}", s.topic_prefix, r["topic"].as_str().unwrap()))
        .collect();
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    let got = consume_topics(
        services().broker.bootstrap(),
        &topic_refs,
        expected.len(),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(got.len(), expected.len(), "{}: relay log:\n{}", g.name, relay.log());

    let headers = |r: &Consumed| -> Vec<(String, Vec<u8>)> {
        r.headers.iter().map(|(k, v)| (k.clone(), v.clone().unwrap_or_default())).collect()
    };
    // Per (topic, partition), the ids in the order each side delivered them.
    let mut want_order: BTreeMap<(String, i64), Vec<String>> = BTreeMap::new();
    let mut have_order: BTreeMap<(String, i64), Vec<String>> = BTreeMap::new();
    for want in &expected {
        let want_headers: Vec<(String, Vec<u8>)> = want["headers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                (
                    h["key"].as_str().unwrap().to_string(),
                    crate::goldens::b64(&h["value_b64"]).unwrap_or_default(),
                )
            })
            .collect();
        let id = id_of(&want_headers);
        let have: Vec<&Consumed> = got.iter().filter(|r| id_of(&headers(r)) == id).collect();
        assert_eq!(have.len(), 1, "{}: message {id} delivered {} times", g.name, have.len());
        let have = have[0];
        let what = format!("{} seq {} (message {id})", g.name, want["seq"]);
        let topic = have.topic.strip_prefix(&format!("{}.", s.topic_prefix)).unwrap();
        assert_eq!(topic, want["topic"].as_str().unwrap(), "{what}: topic");
        assert_eq!(have.key, crate::goldens::b64(&want["key_b64"]), "{what}: key");
        let want_value = if want["value_is_null"].as_bool().unwrap() {
            None
        } else {
            crate::goldens::b64(&want["value_b64"])
        };
        assert_eq!(
            have.value.as_deref().map(String::from_utf8_lossy),
            want_value.as_deref().map(String::from_utf8_lossy),
            "{what}: value"
        );
        assert_eq!(have.value, want_value, "{what}: value bytes");
        assert_eq!(headers(have), want_headers, "{what}: headers");
        let partition = want["partition"].as_i64().unwrap();
        assert_eq!(have.partition as i64, partition, "{what}: partition");
        want_order.entry((topic.to_string(), partition)).or_default().push(id);
    }
    for r in &got {
        let topic = r.topic.strip_prefix(&format!("{}.", s.topic_prefix)).unwrap().to_string();
        have_order.entry((topic, r.partition as i64)).or_default().push(id_of(&headers(r)));
    }
    assert_eq!(have_order, want_order, "{}: order within each partition", g.name);
    println!(
        "golden {}: {} records identical to Debezium 3.6.3 (topic, key, value, headers, partition, order in {} partitions)",
        g.name,
        expected.len(),
        want_order.len()
    );
    assert_eq!(relay.terminate(), Some(0));
}

macro_rules! golden_test {
    ($test:ident, $name:literal, $router:expr, $debezium:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            check(Golden { name: $name, router: $router, debezium: $debezium }).await;
        }
    };
}

golden_test!(
    golden_messages_defaults_match_debezium,
    "messages_defaults",
    "",
    "\"message.prefix.include.list\" = \"outbox\"\n\"extended.headers.enabled\" = true\n\"topic.prefix\" = \"dbz\"\n"
);
golden_test!(
    golden_messages_no_extended_headers_match_debezium,
    "messages_no_extended_headers",
    "",
    INCLUDE
);
golden_test!(
    golden_messages_additional_fields_match_debezium,
    "messages_additional_fields",
    "\"table.fields.additional.placement\" = \"type:header:eventType\"",
    INCLUDE
);
golden_test!(
    golden_messages_additional_fields_envelope_match_debezium,
    "messages_additional_fields_envelope",
    "\"table.fields.additional.placement\" = \"type:header:eventType,aggregatetype:envelope:aggType\"",
    "\"message.prefix.include.list\" = \"outbox\"\n\"value.converter\" = \"json\"\n\"value.converter.schemas.enable\" = false\n"
);
golden_test!(
    golden_messages_expand_json_payload_match_debezium,
    "messages_expand_json_payload",
    "\"table.expand.json.payload\" = true",
    "\"message.prefix.include.list\" = \"outbox\"\n\"value.converter\" = \"json\"\n\"value.converter.schemas.enable\" = false\n"
);
golden_test!(
    golden_messages_json_converters_match_debezium,
    "messages_json_converters",
    "",
    "\"message.prefix.include.list\" = \"outbox\"\n\"key.converter\" = \"json\"\n\"key.converter.schemas.enable\" = false\n\"value.converter\" = \"json\"\n\"value.converter.schemas.enable\" = false\n\"header.converter\" = \"json\"\n"
);
golden_test!(
    golden_messages_json_schemas_converters_match_debezium,
    "messages_json_schemas_converters",
    "",
    "\"message.prefix.include.list\" = \"outbox\"\n\"key.converter\" = \"json\"\n\"value.converter\" = \"json\"\n"
);
golden_test!(
    golden_messages_fields_null_include_match_debezium,
    "messages_fields_null_include",
    "",
    "\"message.prefix.include.list\" = \"outbox\"\n\"fields.null.include\" = true\n"
);
golden_test!(
    golden_messages_tombstone_on_empty_payload_match_debezium,
    "messages_tombstone_on_empty_payload",
    "\"route.tombstone.on.empty.payload\" = true",
    INCLUDE
);
golden_test!(
    golden_messages_prefix_exclude_list_match_debezium,
    "messages_prefix_exclude_list",
    "",
    "\"message.prefix.exclude.list\" = \"audit\"\n"
);
golden_test!(
    golden_messages_prefix_include_regex_list_match_debezium,
    "messages_prefix_include_regex_list",
    "",
    "\"message.prefix.include.list\" = \" outbox , outbox\\\\.v[0-9]+ \"\n"
);
