//! `value.converter = "protobuf"` contract-first (`use_latest_version`): a team's registered
//! `.proto`, with its own field numbers, is what values are written under; confluent-kafka's
//! `ProtobufDeserializer` reads them with classes compiled from that `.proto`. `check` compiles
//! the subject's `.proto` as `run` will.

use super::*;

/// A team's contract for an expanded `{"orderId", "amount"}` payload with an
/// `aggregatetype:envelope:aggType` placement: its own package, a message before the value's,
/// the fields declared in another order under other numbers (two-byte keys among them), and a
/// field (`currency`) the values lack.
const TEAM_PROTO: &str = r#"syntax = "proto3";
package com.acme.orders;

import "google/protobuf/timestamp.proto";

message Audit {
  google.protobuf.Timestamp at = 1;
}

message Value {
  string aggType = 3;
  Payload payload = 17;
}

message Payload {
  string currency = 1;
  int64 amount = 7;
  string orderId = 20;
}
"#;

fn protobuf_config(s: &Setup, url: &str, extra: &str) -> String {
    let sections = format!(
        "[debezium]\n\"value.converter\" = \"protobuf\"\n\n[schema_registry]\nurl = \"{url}\"\n\
         auto_register = false\nuse_latest_version = true\n\n{extra}"
    );
    s.config_with(EXPANDED_WITH_ENVELOPE, "", &sections)
}

/// The values walrelay derives number `orderId` 1 and `amount` 2 inside `payload` = 1, beside
/// `aggType` = 2: written under the team's numbers instead, framed with the contract's id and
/// the message index of its `Value` (the second message, picked by name as Confluent's
/// serializer picks it), they decode with confluent-kafka's deserializer to the row's payload.
/// A row with a field the contract lacks, and one with a string where it wants an int64, are
/// dead-lettered naming the field; the rows after them flow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_use_latest_version_writes_under_the_teams_numbers_and_dead_letters_a_misfit_naming_the_field(
) {
    let s = Setup::new("proto_latest").await;
    let url = registry().ccompat_url();
    let topic = s.topic("Order");
    let subject = format!("{topic}-value");
    let id = registry().register(&subject, "PROTOBUF", TEAM_PROTO);
    let dlq = unique("proto_latest_dlq");
    let mut relay = s.start_streaming(&protobuf_config(&s, &url, &dead_letter_section(&dlq))).await;
    let rows = [
        r#"{"orderId": "o-1", "amount": 3}"#,
        r#"{"orderId": "o-2", "amount": 4, "note": "not in the contract"}"#,
        r#"{"orderId": "o-3", "amount": "four"}"#,
        r#"{"orderId": "o-4", "amount": 5}"#,
    ];
    for payload in rows {
        s.db.insert_outbox("outbox", "Order", "o", "OrderCreated", Some(payload)).await;
    }
    let bootstrap = services().broker.bootstrap();
    let got = kafka::consume(bootstrap, &topic, 2, Duration::from_secs(30)).await;
    let letters = kafka::consume(bootstrap, &dlq, 2, Duration::from_secs(30)).await;
    assert_eq!((got.len(), letters.len()), (2, 2), "{}", relay.log());
    for r in &got {
        let v = r.value.as_ref().unwrap();
        let frame = (v[0], i32::from_be_bytes(v[1..5].try_into().unwrap()), &v[5..7]);
        assert_eq!(frame, (0, id, &[2u8, 2][..]), "magic byte, the contract's id, indexes [1]");
    }
    let decoded = decode_with_confluent("protobuf", &url, &topic, &values(&got));
    println!("confluent-kafka's ProtobufDeserializer: {decoded:?}");
    // json_format prints an int64 as a string, and leaves out the empty `currency`.
    let order = |id: &str, amount: &str| json!({"aggType": "Order", "payload": {"orderId": id, "amount": amount}});
    assert_eq!(decoded, [order("o-1", "3"), order("o-4", "5")]);
    let errors: Vec<String> =
        letters.iter().map(|l| l.header_str("walrelay.error").unwrap_or("").to_string()).collect();
    println!("dead letters: {errors:#?}");
    let lacks = errors.iter().find(|e| e.contains("`payload.note`")).expect("`note` named");
    assert!(lacks.contains(&subject) && lacks.contains("has no such field"), "{lacks}");
    let typed = errors.iter().find(|e| e.contains("`payload.amount`")).expect("`amount` named");
    assert!(typed.contains("is string") && typed.contains("is int64"), "{typed}");
    // Nothing was registered over the contract.
    assert_eq!(registry().latest(&subject).map(|(latest, _)| latest), Some(id));
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// `check` with Protobuf contract-first: a fixed topic's subject without a schema fails; one
/// holding a `.proto` that imports what walrelay cannot resolve fails naming the import; a
/// `.proto` that compiles passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_compiles_the_subjects_proto_and_names_an_import_it_cannot_resolve() {
    let s = Setup::new("proto_contract_check").await;
    let url = registry().ccompat_url();
    let topic = format!("{}_all", s.topic_prefix);
    let subject = format!("{topic}-value");
    let sections = format!(
        "[debezium]\n\"value.converter\" = \"protobuf\"\n\n[schema_registry]\nurl = \"{url}\"\n\
         auto_register = false\nuse_latest_version = true\n"
    );
    let router = format!("\"route.topic.replacement\" = \"{topic}\"");
    let config = s.config_with(&router, "", &sections);
    let check = || async {
        let run = walrelay_async(&["check"], Some(&config)).await;
        let line = run.stdout.lines().find(|l| l.contains("schema registry contracts"));
        (run.code, line.unwrap_or("").to_string(), run.to_string())
    };
    let (code, line, run) = check().await;
    println!("before the contract: {line}");
    assert!(line.starts_with("FAIL") && line.contains(&subject), "{run}");
    assert_eq!(code, Some(1), "{run}");

    let unresolved = "syntax = \"proto3\";\nimport \"acme/money.proto\";\n\n\
                      message Order {\n  acme.Money total = 1;\n}\n";
    match registry().try_register(&subject, "PROTOBUF", unresolved) {
        Ok(_) => {
            let (code, line, run) = check().await;
            println!("an unresolvable import: {line}");
            assert!(line.starts_with("FAIL") && line.contains("\"acme/money.proto\""), "{run}");
            assert!(line.contains("google/protobuf"), "the fix says what resolves: {run}");
            assert_eq!(code, Some(1), "{run}");
        }
        // A registry that compiles what it stores refuses it itself.
        Err((status, body)) => println!("the registry refused the import: HTTP {status}: {body}"),
    }
    let id = registry().register(&subject, "PROTOBUF", TEAM_PROTO);
    let (_, line, run) = check().await;
    println!("after: {line}");
    assert!(line.starts_with("ok") && line.contains(&format!("id {id}")), "{run}");
}
