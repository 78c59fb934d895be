//! Registry converters against a real schema registry (Apicurio, its Confluent-compatible API).
//! `value.converter = "avro"`: what walrelay writes is decoded by confluent-kafka's own
//! `AvroDeserializer`, a registry that does not answer holds delivery without losing a record, a
//! schema the registry refuses is dead-lettered with the subject, `use_latest_version` writes
//! under a team's registered contract (and dead-letters a row that does not fit it, naming the
//! field), and a wrong password is named by `check` and `run` without being printed. Then
//! `"protobuf"` under a registered .proto, and `"json-schema"` registered, looked up or validated
//! against a team's contract, each decoded by confluent-kafka's deserializer of its kind.
//! `tls.rs`: HTTPS to the registry, its CA and a client certificate; `protobuf.rs`: Protobuf
//! values under a team's registered `.proto` (`use_latest_version`); `apicurio.rs`: Apicurio's
//! own framings (`id_handler`, `use_id`), read as its deserializer reads them; `keys.rs`: Avro
//! keys (`key.converter = "avro"`), placed by the audit and the lookup.

use std::time::Duration;

use serde_json::json;

use crate::common::{release_slot, Setup};
use crate::dead_letters::dead_letter_section;
use crate::support::process::{walrelay_async, walrelay_with_env, RelayProcess};
use crate::support::registry::{private_registry, private_registry_with_login, registry};
use crate::support::registry_decode::decode_with_confluent;
use crate::support::{kafka, services, unique};

mod apicurio;
mod keys;
mod protobuf;
mod tls;

pub(crate) fn avro_config(s: &Setup, router: &str, registry_url: &str, extra: &str) -> String {
    let sections = format!(
        "[debezium]\n\"value.converter\" = \"avro\"\n\n[schema_registry]\nurl = \"{registry_url}\"\n\n{extra}"
    );
    s.config_with(router, "", &sections)
}

fn values(records: &[kafka::Consumed]) -> Vec<Vec<u8>> {
    records.iter().map(|r| r.value.clone().expect("a value")).collect()
}

/// Relays Order events of `rows` (payloads) under `config`, all but one delivered framed with
/// schema `id` and one dead-lettered to `dlq`. Returns the relay, the delivered values decoded by
/// confluent-kafka's `kind` deserializer, and the dead letter's `walrelay.error`.
async fn contract_run(
    s: &Setup,
    config: &str,
    (dlq, id, kind): (&str, i32, &str),
    rows: &[&str],
) -> (RelayProcess, Vec<serde_json::Value>, String) {
    let relay = s.start_streaming(config).await;
    for payload in rows {
        s.db.insert_outbox("outbox", "Order", "o", "OrderCreated", Some(payload)).await;
    }
    let (bootstrap, topic) = (services().broker.bootstrap(), s.topic("Order"));
    let got = kafka::consume(bootstrap, &topic, rows.len() - 1, Duration::from_secs(30)).await;
    let letters = kafka::consume(bootstrap, dlq, 1, Duration::from_secs(30)).await;
    assert_eq!((got.len(), letters.len()), (rows.len() - 1, 1), "{}", relay.log());
    for r in &got {
        let v = r.value.as_ref().unwrap();
        assert_eq!(i32::from_be_bytes(v[1..5].try_into().unwrap()), id, "the subject's id");
    }
    let decoded = decode_with_confluent(kind, &registry().ccompat_url(), &topic, &values(&got));
    println!("confluent-kafka's {kind} deserializer: {decoded:?}");
    let error = letters[0].header_str("walrelay.error").unwrap_or("").to_string();
    println!("dead letter: {error}");
    (relay, decoded, error)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_values_with_an_expanded_payload_decode_with_confluents_deserializer_and_the_subject_exists(
) {
    let s = Setup::new("avro_expanded").await;
    let url = registry().ccompat_url();
    let config = avro_config(&s, "\"table.expand.json.payload\" = true", &url, "");
    let mut relay = s.start_streaming(&config).await;
    s.insert_events("Order", "o-1", 3).await;
    let topic = s.topic("Order");
    let got =
        kafka::consume(services().broker.bootstrap(), &topic, 3, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 3, "{}", relay.log());
    for r in &got {
        assert_eq!(r.value.as_ref().unwrap()[0], 0, "Confluent's magic byte");
    }
    let decoded = decode_with_confluent("avro", &url, &topic, &values(&got));
    println!("confluent-kafka's AvroDeserializer: {decoded:?}");
    assert_eq!(decoded, [json!({"n": 0}), json!({"n": 1}), json!({"n": 2})]);
    let subject = format!("{topic}-value");
    let (_, schema) = registry().latest(&subject).expect("the subject exists");
    println!("{subject}: {schema}");
    assert!(schema.contains("\"connect.name\":\"payload\""), "{schema}");
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_does_not_answer_holds_delivery_confirms_nothing_past_it_and_loses_nothing()
{
    let s = Setup::new("avro_down").await;
    let own = tokio::task::spawn_blocking(private_registry).await.unwrap();
    let url = own.ccompat_url();
    let config = avro_config(&s, "", &url, "");
    let mut relay = s.start_streaming(&config).await;
    own.pause();
    // The first row alone, then where the WAL was after its commit: the slot must not be
    // confirmed that far while the row waits for its schema's id.
    s.insert_events("Order", "o-1", 1).await;
    let client = s.db.connect().await;
    let first: String =
        client.query_one("SELECT pg_current_wal_insert_lsn()::text", &[]).await.unwrap().get(0);
    s.insert_events("Order", "o-1", 4).await;
    let topic = s.topic("Order");
    let bootstrap = services().broker.bootstrap();
    // The first record needs its schema's id: nothing goes out while the registry is down.
    let held = kafka::consume(bootstrap, &topic, 1, Duration::from_secs(15)).await;
    let waiting = relay.log().contains("the schema registry does not answer");
    let confirmed = s.db.confirmed_flush_lsn(&s.slot).await.expect("the slot");
    own.resume();
    println!("while the registry was paused: confirmed {confirmed}, the first row's commit before {first}");
    assert!(held.is_empty(), "records went out with the registry down: {held:?}");
    assert!(waiting, "the log does not say why delivery waits:\n{}", relay.log());
    use walrelay::lsn::Lsn;
    let (confirmed, first): (Lsn, Lsn) = (confirmed.parse().unwrap(), first.parse().unwrap());
    assert!(confirmed < first, "the slot was confirmed past the held row: {confirmed} ≥ {first}");
    let got = kafka::consume(bootstrap, &topic, 5, Duration::from_secs(60)).await;
    assert_eq!(got.len(), 5, "{}", relay.log());
    let decoded = decode_with_confluent("avro", &url, &topic, &values(&got));
    println!("after the registry answered again: {decoded:?}");
    assert_eq!(decoded.len(), 5);
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_the_subjects_compatibility_refuses_is_dead_lettered_naming_the_subject() {
    let s = Setup::new("avro_refused").await;
    let url = registry().ccompat_url();
    let topic = s.topic("Order");
    let subject = format!("{topic}-value");
    // What the subject holds: `n` a string. walrelay's value has `n` an optional int, which
    // BACKWARD compatibility refuses.
    let old = r#"{"type":"record","name":"payload","fields":[{"name":"n","type":"string"}]}"#;
    registry().register(&subject, "AVRO", old);
    registry().set_compatibility(&subject, "BACKWARD");
    let dlq = unique("avro_dlq");
    let config =
        avro_config(&s, "\"table.expand.json.payload\" = true", &url, &dead_letter_section(&dlq));
    let mut relay = s.start_streaming(&config).await;
    s.insert_events("Order", "o-1", 1).await;
    let letters =
        kafka::consume(services().broker.bootstrap(), &dlq, 1, Duration::from_secs(30)).await;
    assert_eq!(letters.len(), 1, "{}", relay.log());
    let error = letters[0].header_str("walrelay.error").unwrap_or("").to_string();
    println!("dead letter: {error}");
    assert!(error.contains(&subject) && error.contains("409"), "{error}");
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn use_latest_version_writes_under_the_registered_schema_and_dead_letters_a_row_missing_a_required_field(
) {
    let s = Setup::new("avro_latest").await;
    let url = registry().ccompat_url();
    let topic = s.topic("Order");
    let subject = format!("{topic}-value");
    // The team's contract: its own name, `amount` required, `currency` with a default.
    let contract = r#"{"type":"record","name":"OrderCreated","namespace":"com.acme","fields":[{"name":"orderId","type":"string"},{"name":"amount","type":"long"},{"name":"currency","type":"string","default":"EUR"}]}"#;
    let id = registry().register(&subject, "AVRO", contract);
    let dlq = unique("avro_latest_dlq");
    let extra = format!(
        "auto_register = false\nuse_latest_version = true\n\n{}",
        dead_letter_section(&dlq)
    );
    let config = avro_config(&s, "\"table.expand.json.payload\" = true", &url, &extra);
    let rows = [
        r#"{"orderId": "o-1", "amount": 3}"#,
        r#"{"orderId": "o-2"}"#,
        r#"{"orderId": "o-3", "amount": 5, "note": "not in the contract"}"#,
    ];
    let (mut relay, decoded, error) = contract_run(&s, &config, (&dlq, id, "avro"), &rows).await;
    assert_eq!(
        decoded,
        [
            json!({"orderId": "o-1", "amount": 3, "currency": "EUR"}),
            json!({"orderId": "o-3", "amount": 5, "currency": "EUR"}),
        ]
    );
    assert!(error.contains("`amount`") && error.contains(&subject), "{error}");
    // Nothing was registered over the contract.
    assert_eq!(registry().latest(&subject).map(|(latest, _)| latest), Some(id));
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_registry_password_is_named_by_check_and_run_with_the_user_and_the_variable_and_never_printed(
) {
    const GOOD: &str = "Fz-s3cret-9Qx-registry-good";
    const WRONG: &str = "Fz-s3cret-9Qx-registry-wrong";
    let s = Setup::new("avro_login").await;
    let own =
        tokio::task::spawn_blocking(|| private_registry_with_login("relay", GOOD)).await.unwrap();
    let url = own.ccompat_url();
    let config = avro_config(&s, "", &url, "user = \"relay\"\n");
    let check = |password: &'static str| {
        let config = config.clone();
        tokio::task::spawn_blocking(move || {
            walrelay_with_env(
                &["check"],
                &config,
                &[("WALRELAY_SCHEMA_REGISTRY_PASSWORD", password)],
            )
        })
    };
    let refused = check(WRONG).await.unwrap();
    println!("check with the wrong password: {refused}");
    let line = refused.stdout.lines().find(|l| l.contains("schema registry")).unwrap_or("");
    assert_eq!(refused.code, Some(1), "{refused}");
    assert!(line.starts_with("FAIL"), "{refused}");
    for named in ["relay", "WALRELAY_SCHEMA_REGISTRY_PASSWORD", url.as_str(), "401"] {
        assert!(line.contains(named), "{named} not in: {line}");
    }
    let accepted = check(GOOD).await.unwrap();
    let line = accepted.stdout.lines().find(|l| l.contains("schema registry")).unwrap_or("");
    println!("check with the right password: {line}");
    assert!(line.starts_with("ok") && line.contains("as user relay"), "{accepted}");

    let mut relay =
        RelayProcess::start_with(&config, &[], &[("WALRELAY_SCHEMA_REGISTRY_PASSWORD", WRONG)]);
    s.wait_streaming(&mut relay).await;
    s.insert_events("Order", "o-1", 1).await;
    let code = tokio::task::block_in_place(|| relay.wait_exit(Duration::from_secs(60)));
    let log = relay.log();
    let stop = log.lines().find(|l| l.contains("refused walrelay's credentials")).unwrap_or("");
    println!("run with the wrong password: exit {code:?}: {stop}");
    assert!(matches!(code, Some(c) if c != 0), "{log}");
    for named in ["relay", "WALRELAY_SCHEMA_REGISTRY_PASSWORD", url.as_str()] {
        assert!(stop.contains(named), "{named} not in: {stop}");
    }
    for output in [&refused.to_string(), &accepted.to_string(), &log] {
        assert!(!output.contains(GOOD) && !output.contains(WRONG), "a password was printed");
    }
    // Nothing was sent or confirmed past the row.
    let topic = s.topic("Order");
    let got =
        kafka::consume(services().broker.bootstrap(), &topic, 1, Duration::from_secs(5)).await;
    assert!(got.is_empty(), "{got:?}");
    release_slot(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_re_publishes_avro_values_framed_with_the_live_relays_schema_id() {
    let s = Setup::new("avro_replay").await;
    let url = registry().ccompat_url();
    let config = avro_config(&s, "\"table.expand.json.payload\" = true", &url, "");
    let mut relay = s.start_streaming(&config).await;
    s.insert_events("Order", "o-1", 3).await;
    let topic = s.topic("Order");
    let bootstrap = services().broker.bootstrap();
    let live = kafka::consume(bootstrap, &topic, 3, Duration::from_secs(30)).await;
    assert_eq!(live.len(), 3, "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    let side = format!("{}_replayed", s.topic_prefix);
    let run =
        walrelay_async(&["replay", "--since", "1h", "--to-topic", &side, "--yes"], Some(&config))
            .await;
    assert_eq!(run.code, Some(0), "{run}");
    let replayed = kafka::consume(bootstrap, &side, 3, Duration::from_secs(30)).await;
    assert_eq!(replayed.len(), 3, "{run}");
    let frame = |r: &kafka::Consumed| r.value.as_ref().map(|v| v[..5].to_vec());
    let ids: Vec<_> = replayed.iter().map(frame).collect();
    println!("live frames {:?}, replayed {ids:?}", live.iter().map(frame).collect::<Vec<_>>());
    assert!(ids.iter().all(|f| f == &frame(&live[0]) && f.as_ref().unwrap()[1..] != [0; 4]));
    let decoded = decode_with_confluent("avro", &url, &side, &values(&replayed));
    assert_eq!(decoded, [json!({"n": 0}), json!({"n": 1}), json!({"n": 2})]);
    release_slot(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_record_subjects_name_the_envelope_record_and_an_optional_payload_is_refused() {
    let s = Setup::new("avro_subjects").await;
    let url = registry().ccompat_url();
    let topic = s.topic("Order");
    let dlq = unique("avro_subjects_dlq");
    let strategy =
        format!("subject_name_strategy = \"topic-record\"\n\n{}", dead_letter_section(&dlq));
    // An envelope placement makes the value a record, named as Debezium names it.
    let envelope = "\"table.fields.additional.placement\" = \"type:envelope:eventType\"";
    let config = avro_config(&s, envelope, &url, &strategy);
    let mut relay = s.start_streaming(&config).await;
    s.insert_events("Order", "o-1", 2).await;
    let bootstrap = services().broker.bootstrap();
    let got = kafka::consume(bootstrap, &topic, 2, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 2, "{}", relay.log());
    let decoded = decode_with_confluent("avro", &url, &topic, &values(&got));
    println!("decoded: {decoded:?}");
    let prefix = format!("{topic}-");
    let subjects: Vec<String> =
        registry().subjects().into_iter().filter(|s| s.starts_with(&prefix)).collect();
    println!("subjects of {topic}: {subjects:?}");
    assert_eq!(subjects.len(), 1, "{subjects:?}");
    let record = subjects[0].strip_prefix(&prefix).unwrap();
    assert!(record.ends_with(".Value") && record != "value", "{subjects:?}");
    let (_, schema) = registry().latest(&subjects[0]).unwrap();
    let name = serde_json::from_str::<serde_json::Value>(&schema).unwrap();
    let full = format!(
        "{}.{}",
        name["namespace"].as_str().unwrap_or(""),
        name["name"].as_str().unwrap_or("")
    );
    assert_eq!(full, record, "{schema}");
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());

    // Without the placement the value is an optional payload: no record to name the subject.
    let config = avro_config(&s, "", &url, &strategy);
    let mut relay = s.start_streaming(&config).await;
    s.insert_events("Order", "o-2", 1).await;
    let letters = kafka::consume(bootstrap, &dlq, 1, Duration::from_secs(30)).await;
    assert_eq!(letters.len(), 1, "{}", relay.log());
    let error = letters[0].header_str("walrelay.error").unwrap_or("").to_string();
    println!("dead letter: {error}");
    assert!(error.contains("not a record") && error.contains("topic-record"), "{error}");
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_with_use_latest_version_fails_until_the_fixed_topics_subject_holds_a_contract() {
    let s = Setup::new("avro_contract_check").await;
    let url = registry().ccompat_url();
    let topic = format!("{}_all", s.topic_prefix);
    let router = format!("\"route.topic.replacement\" = \"{topic}\"");
    let latest = "auto_register = false\nuse_latest_version = true\n";
    let config = avro_config(&s, &router, &url, latest);
    let line = |run: &crate::support::process::Run| {
        run.stdout
            .lines()
            .find(|l| l.contains("schema registry contracts"))
            .unwrap_or("")
            .to_string()
    };
    let before = walrelay_async(&["check"], Some(&config)).await;
    println!("before the contract: {}", line(&before));
    assert!(
        line(&before).starts_with("FAIL") && line(&before).contains(&format!("{topic}-value")),
        "{before}"
    );
    assert_eq!(before.code, Some(1), "{before}");
    let contract = r#"{"type":"record","name":"Event","fields":[{"name":"n","type":"long"}]}"#;
    let id = registry().register(&format!("{topic}-value"), "AVRO", contract);
    let after = walrelay_async(&["check"], Some(&config)).await;
    println!("after: {}", line(&after));
    assert!(
        line(&after).starts_with("ok") && line(&after).contains(&format!("id {id}")),
        "{after}"
    );
    // Routed by each row's value: said, not guessed.
    let routed = avro_config(&s, "", &url, latest);
    let run = walrelay_async(&["check"], Some(&routed)).await;
    println!("routed by value: {}", line(&run));
    assert!(line(&run).starts_with("warn") && line(&run).contains("cannot be known"), "{run}");
}

/// `value.converter = "protobuf"` with `auto_register = false`: a team registered the `.proto`
/// first, walrelay looks the same text up and frames its values with its id and the message
/// index, and confluent-kafka's `ProtobufDeserializer` decodes them (proto3 leaves a 0 out, so
/// the first event reads `{}`). A plain payload, not expanded, is a `StringValue` under
/// `google/protobuf/wrappers.proto`, registered by walrelay itself, and decodes too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_values_under_a_registered_proto_decode_with_confluents_deserializer() {
    let s = Setup::new("proto_registered").await;
    let url = registry().ccompat_url();
    let topic = s.topic("Order");
    let proto = "syntax = \"proto3\";\n\nmessage payload {\n  int32 n = 1;\n}\n";
    let id = registry().register(&format!("{topic}-value"), "PROTOBUF", proto);
    let sections = format!(
        "[debezium]\n\"value.converter\" = \"protobuf\"\n\n[schema_registry]\nurl = \"{url}\"\n\
         auto_register = false\n"
    );
    let config = s.config_with("\"table.expand.json.payload\" = true", "", &sections);
    let mut relay = s.start_streaming(&config).await;
    s.insert_events("Order", "o-1", 3).await;
    let got =
        kafka::consume(services().broker.bootstrap(), &topic, 3, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 3, "{}", relay.log());
    for r in &got {
        let v = r.value.as_ref().unwrap();
        assert_eq!(
            (v[0], u32::from_be_bytes(v[1..5].try_into().unwrap()), v[5]),
            (0, id as u32, 0)
        );
    }
    let decoded = decode_with_confluent("protobuf", &url, &topic, &values(&got));
    println!("confluent-kafka's ProtobufDeserializer: {decoded:?}");
    assert_eq!(decoded, [json!({}), json!({"n": 1}), json!({"n": 2})]);
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());

    // Not expanded: the payload is a google.protobuf.StringValue.
    let config = s.config_with(
        "",
        "",
        &format!("[debezium]\n\"value.converter\" = \"protobuf\"\n\n[schema_registry]\nurl = \"{url}\"\n"),
    );
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let plain = s.topic("Plain");
    s.insert_events("Plain", "p-1", 1).await;
    let got =
        kafka::consume(services().broker.bootstrap(), &plain, 1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1, "{}", relay.log());
    let decoded = decode_with_confluent("protobuf", &url, &plain, &values(&got));
    println!("confluent-kafka's ProtobufDeserializer, a plain payload: {decoded:?}");
    assert_eq!(decoded, [json!({"value": "{\"n\": 0}"})]);
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

fn json_schema_config(s: &Setup, router: &str, registry_url: &str, extra: &str) -> String {
    let sections = format!(
        "[debezium]\n\"value.converter\" = \"json-schema\"\n\n[schema_registry]\nurl = \"{registry_url}\"\n\n{extra}"
    );
    s.config_with(router, "", &sections)
}

/// The text Confluent's JsonSchemaConverter registers for an expanded `{"n": <int>}` payload
/// with an `aggregatetype:envelope:aggType` placement, topic prefix `dbz` (walrelay's default is
/// `walrelay`): the last
/// line of tests/fixtures/debezium/registry/json_schema_texts.jsonl, written by Confluent's own
/// JsonSchemaData.
const ENVELOPE_JSON_SCHEMA: &str = r#"{"type":"object","title":"dbz.public.outbox.Order.Value","properties":{"payload":{"connect.index":0,"oneOf":[{"type":"null"},{"type":"object","title":"payload","properties":{"n":{"connect.index":0,"oneOf":[{"type":"null"},{"type":"integer","connect.type":"int32"}]}}}]},"aggType":{"type":"string","connect.index":1}}}"#;

const EXPANDED_WITH_ENVELOPE: &str = "\"table.expand.json.payload\" = true\n\
     \"table.fields.additional.placement\" = \"aggregatetype:envelope:aggType\"";

/// `value.converter = "json-schema"`: walrelay registers the JSON Schema Confluent's
/// JsonSchemaConverter derives (byte for byte Confluent's text), frames the plain JSON value with
/// its id, and confluent-kafka's `JSONDeserializer` decodes each record and validates it against
/// the schema it fetches by id. A value whose schema is a `oneOf` at the root (an optional
/// payload, here not expanded) is refused by Apicurio, and the dead letter says what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_schema_values_register_confluents_schema_and_decode_and_validate_with_confluents_deserializer(
) {
    let s = Setup::new("json_schema").await;
    let url = registry().ccompat_url();
    let config = json_schema_config(&s, EXPANDED_WITH_ENVELOPE, &url, "");
    let mut relay = s.start_streaming(&config).await;
    s.insert_events("Order", "o-1", 3).await;
    let topic = s.topic("Order");
    let bootstrap = services().broker.bootstrap();
    let got = kafka::consume(bootstrap, &topic, 3, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 3, "{}", relay.log());
    let subject = format!("{topic}-value");
    let (id, schema) = registry().latest(&subject).expect("the subject exists");
    println!("{subject}: {schema}");
    assert_eq!(schema, ENVELOPE_JSON_SCHEMA.replace("\"dbz.public.", "\"walrelay.public."));
    for (i, r) in got.iter().enumerate() {
        let v = r.value.as_ref().unwrap();
        assert_eq!((v[0], i32::from_be_bytes(v[1..5].try_into().unwrap())), (0, id));
        let body = format!("{{\"payload\":{{\"n\":{i}}},\"aggType\":\"Order\"}}");
        assert_eq!(std::str::from_utf8(&v[5..]), Ok(body.as_str()), "plain JSON after the frame");
    }
    let decoded = decode_with_confluent("json", &url, &topic, &values(&got));
    println!("confluent-kafka's JSONDeserializer: {decoded:?}");
    let expected: Vec<_> =
        (0..3).map(|n| json!({"payload": {"n": n}, "aggType": "Order"})).collect();
    assert_eq!(decoded, expected);
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());

    // Not expanded, no placement: the value's schema is {"oneOf":[null, string]}.
    let dlq = unique("json_schema_oneof_dlq");
    let config = json_schema_config(&s, "", &url, &dead_letter_section(&dlq));
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    s.insert_events("Plain", "p-1", 1).await;
    let letters = kafka::consume(bootstrap, &dlq, 1, Duration::from_secs(30)).await;
    assert_eq!(letters.len(), 1, "{}", relay.log());
    let error = letters[0].header_str("walrelay.error").unwrap_or("").to_string();
    println!("dead letter: {error}");
    assert!(error.contains("422") && error.contains("envelope placement"), "{error}");
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// Contract-first without auto-registration: the subject holds the JSON Schema Debezium's
/// converter registered, walrelay looks up the schema it derives for each payload, and a payload
/// of another shape (`n` a string) is refused and dead-lettered naming the subject, while later
/// rows flow under the registered id and validate with confluent-kafka's `JSONDeserializer`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_schema_without_auto_register_dead_letters_a_payload_the_registered_schema_does_not_hold(
) {
    let s = Setup::new("json_schema_lookup").await;
    let url = registry().ccompat_url();
    let topic = s.topic("Order");
    let subject = format!("{topic}-value");
    let registered = ENVELOPE_JSON_SCHEMA.replace("\"dbz.public.", "\"walrelay.public.");
    let id = registry().register(&subject, "JSON", &registered);
    let dlq = unique("json_schema_dlq");
    let extra = format!("auto_register = false\n\n{}", dead_letter_section(&dlq));
    let config = json_schema_config(&s, EXPANDED_WITH_ENVELOPE, &url, &extra);
    let rows = [r#"{"n": 1}"#, r#"{"n": "one"}"#, r#"{"n": 2}"#];
    let (mut relay, decoded, error) = contract_run(&s, &config, (&dlq, id, "json"), &rows).await;
    let expected: Vec<_> = [1, 2].map(|n| json!({"payload": {"n": n}, "aggType": "Order"})).into();
    assert_eq!(decoded, expected);
    assert!(error.contains(&subject) && error.contains("404"), "{error}");
    assert_eq!(registry().latest(&subject).map(|(latest, _)| latest), Some(id));
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// Contract-first with `use_latest_version`: the subject holds a team's hand-written JSON Schema
/// (required fields, types); each value is written as it is under the contract's id once it
/// validates, and one that does not is dead-lettered naming the field, while later rows flow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_schema_use_latest_version_validates_against_the_registered_contract_and_dead_letters_a_misfit_naming_the_field(
) {
    let s = Setup::new("json_schema_latest").await;
    let url = registry().ccompat_url();
    let topic = s.topic("Order");
    let subject = format!("{topic}-value");
    let contract = r#"{"$schema":"http://json-schema.org/draft-07/schema#","title":"OrderCreated","type":"object","properties":{"orderId":{"type":"string"},"amount":{"type":"integer","minimum":0}},"required":["orderId","amount"]}"#;
    let id = registry().register(&subject, "JSON", contract);
    let dlq = unique("json_schema_latest_dlq");
    let extra = format!(
        "auto_register = false\nuse_latest_version = true\n\n{}",
        dead_letter_section(&dlq)
    );
    let config = json_schema_config(&s, "\"table.expand.json.payload\" = true", &url, &extra);
    let rows = [
        r#"{"orderId": "o-1", "amount": 3}"#,
        r#"{"orderId": "o-2", "amount": -1}"#,
        r#"{"orderId": "o-3", "amount": 5, "note": "not in the contract"}"#,
    ];
    let (mut relay, decoded, error) = contract_run(&s, &config, (&dlq, id, "json"), &rows).await;
    let note = "not in the contract";
    assert_eq!(
        decoded,
        [
            json!({"orderId": "o-1", "amount": 3}),
            json!({"orderId": "o-3", "amount": 5, "note": note})
        ]
    );
    assert!(error.contains("at /amount") && error.contains(&subject), "{error}");
    assert_eq!(registry().latest(&subject).map(|(latest, _)| latest), Some(id));
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}
