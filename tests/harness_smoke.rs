//! Smoke tests of the test harness itself (tests/support).

use crate::support::cluster::{self, create_standby, start_instance, wait_caught_up};
use crate::support::servers::server_with;
use crate::support::{
    self, consume, consume_topics, create_topic, produce, services, unique, wait_until, Capability,
    Server,
};
use std::collections::HashSet;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_starts_with_logical_wal_level() {
    let pg = &services().pg;
    let db = pg.create_database("smoke").await;
    assert_eq!(db.url, format!("postgres://postgres@127.0.0.1:{}/{}", pg.port(), db.name));
    let client = db.connect().await;
    let preload =
        if pg.server().has(Capability::PgStatStatements) { "pg_stat_statements" } else { "" };
    // The values the harness wrote (postgresql.conf quotes units; SHOW does not).
    let written = support::postgres::SETTINGS
        .iter()
        .map(|(setting, value)| (*setting, value.trim_matches('\'')));
    for (setting, want) in written.chain([
        // Preloaded when the server has it (PostgreSQL 16's wheel has no contrib).
        ("shared_preload_libraries", preload),
    ]) {
        let row = client.query_one(&format!("SHOW {setting}"), &[]).await.unwrap();
        assert_eq!(row.get::<_, String>(0), want, "setting {setting}");
    }

    let slot = unique("smoke_slot");
    let publication = unique("smoke_pub");
    // Slot first: see tests/common.rs Setup::new for why, on a busy shared cluster.
    client
        .query_one(
            "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await
        .unwrap();
    db.create_outbox("outbox").await;
    db.execute(&format!("CREATE PUBLICATION {publication} FOR TABLE outbox")).await;
    assert_eq!(db.slot_active(&slot).await, Some(false));
    assert!(db.confirmed_flush_lsn(&slot).await.is_some());
    assert_eq!(db.slot_lag_bytes("no_such_slot").await, None);
    assert_eq!(db.confirmed_flush_lsn("no_such_slot").await, None);

    let id =
        db.insert_outbox("outbox", "order", "42", "OrderCreated", Some(r#"{"total": 1}"#)).await;
    // synchronous_commit=off: the commit reaches pg_current_wal_lsn() once the WAL writer
    // has written it (wal_writer_delay), so poll.
    assert!(
        wait_until("slot lag > 0 after an insert", Duration::from_secs(10), || async {
            db.slot_lag_bytes(&slot).await.expect("slot lag") > 0
        })
        .await
    );

    // pgoutput decodes the insert (begin, relation, insert, commit) once its WAL is flushed
    // (synchronous_commit=off), so poll.
    let peek = format!(
        "SELECT count(*) FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, \
         'proto_version', '1', 'publication_names', '{publication}')"
    );
    let (c, slot_ref) = (&client, slot.as_str());
    let decoded = wait_until("pgoutput decodes the insert", Duration::from_secs(10), || {
        let peek = peek.clone();
        async move { c.query_one(&peek, &[&slot_ref]).await.unwrap().get::<_, i64>(0) >= 3 }
    })
    .await;
    assert!(decoded, "pgoutput never sent the insert");
    let row = client
        .query_one(
            "SELECT aggregateid, payload::text FROM outbox WHERE id = $1::text::uuid",
            &[&id],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "42");
    assert_eq!(row.get::<_, String>(1), r#"{"total": 1}"#);
    client.execute("SELECT pg_drop_replication_slot($1)", &[&slot]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_round_trips_a_record_with_headers() {
    let bootstrap = services().broker.bootstrap();
    let topic = unique("smoke_topic");
    create_topic(bootstrap, &topic, 1).await;
    create_topic(bootstrap, &topic, 1).await; // "already exists" is tolerated
    let headers: [(&str, Option<&[u8]>); 4] = [
        ("id", Some(b"7f0c".as_slice())),
        ("empty", Some(b"".as_slice())),
        ("null", None),
        ("id", Some(b"second".as_slice())),
    ];
    let (partition, offset) =
        produce(bootstrap, &topic, None, Some(b"order-42"), Some(br#"{"a":1}"#), &headers).await;
    assert_eq!((partition, offset), (0, 0));
    produce(bootstrap, &topic, None, Some(b"tomb"), None, &[]).await;

    let got = consume(bootstrap, &topic, 2, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 2, "{got:?}");
    let r = &got[0];
    assert_eq!((r.topic.as_str(), r.partition, r.offset), (topic.as_str(), 0, 0));
    assert_eq!(r.key.as_deref(), Some(b"order-42".as_slice()));
    assert_eq!(r.value_json(), Some(serde_json::json!({"a": 1})));
    let want: Vec<(String, Option<Vec<u8>>)> =
        headers.iter().map(|(k, v)| (k.to_string(), v.map(<[u8]>::to_vec))).collect();
    assert_eq!(r.headers, want);
    assert_eq!(r.header("id"), Some(b"7f0c".as_slice()));
    assert_eq!(r.header("empty"), Some(b"".as_slice()));
    assert_eq!(r.header("null"), None);
    assert_eq!(r.header("missing"), None);
    assert!(r.timestamp_ms.is_some_and(|t| t > 1_600_000_000_000), "{:?}", r.timestamp_ms);
    let t = &got[1];
    assert_eq!((t.offset, t.key_str(), t.value.as_deref()), (1, Some("tomb"), None));
    assert!(t.headers.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_counts_records_across_partitions_and_topics() {
    let bootstrap = services().broker.bootstrap();
    let a = unique("smoke_multi_a");
    let b = unique("smoke_multi_b");
    create_topic(bootstrap, &a, 4).await;
    create_topic(bootstrap, &b, 2).await;
    for i in 0..40 {
        let key = format!("key-{}", i % 7);
        let value = format!("{i}");
        produce(bootstrap, &a, None, Some(key.as_bytes()), Some(value.as_bytes()), &[]).await;
    }
    for i in 0..5 {
        produce(bootstrap, &b, Some(i % 2), None, Some(b"x"), &[]).await;
    }
    let got = consume(bootstrap, &a, 40, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 40);
    let partitions: HashSet<i32> = got.iter().map(|r| r.partition).collect();
    assert!(
        partitions.len() > 1 && partitions.iter().all(|p| (0..4).contains(p)),
        "{partitions:?}"
    );
    // ordered by (partition, offset), offsets 0.. without gaps per partition, key order kept
    for p in &partitions {
        let offsets: Vec<i64> =
            got.iter().filter(|r| r.partition == *p).map(|r| r.offset).collect();
        assert_eq!(offsets, (0..offsets.len() as i64).collect::<Vec<_>>(), "partition {p}");
    }
    for k in 0..7 {
        let key = format!("key-{k}");
        let values: Vec<i32> = got
            .iter()
            .filter(|r| r.key_str() == Some(key.as_str()))
            .map(|r| r.value_str().unwrap().parse().unwrap())
            .collect();
        assert!(values.windows(2).all(|w| w[0] < w[1]), "{key}: {values:?}");
    }

    let both = consume_topics(bootstrap, &[&b, &a], 45, Duration::from_secs(30)).await;
    assert_eq!(both.len(), 45);
    assert!(both[..5].iter().all(|r| r.topic == b) && both[5..].iter().all(|r| r.topic == a));

    // Asking for more than there is returns what there is once the deadline passes.
    let extra = consume(bootstrap, &b, 6, Duration::from_secs(2)).await;
    assert_eq!(extra.len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_names_and_wait_until() {
    let names: Vec<String> = (0..100).map(|_| unique("Smoke-Name.X")).collect();
    assert_eq!(names.iter().collect::<HashSet<_>>().len(), 100);
    let pid = std::process::id().to_string();
    for n in &names {
        assert!(n.starts_with("smoke_name_x_"), "{n}");
        assert!(n.contains(&pid), "{n}");
        assert!(n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'), "{n}");
    }
    let mut calls = 0;
    assert!(
        wait_until("third call", Duration::from_secs(5), || {
            calls += 1;
            let done = calls >= 3;
            async move { done }
        })
        .await
    );
    let start = std::time::Instant::now();
    assert!(!wait_until("never", Duration::from_millis(200), || async { false }).await);
    assert!(start.elapsed() >= Duration::from_millis(200));
    assert!(support::scratch_root().is_dir());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_process_controls_a_stand_in_child() {
    // The real binary is tested elsewhere; this checks the process plumbing only.
    let dir = support::scratch_dir("fake_relay");
    let fake = dir.join("fake-walrelay");
    std::fs::write(
        &fake,
        // The trap comes first: the test sends SIGTERM as soon as the config is printed.
        "#!/bin/sh\n\
         trap 'echo got TERM; exit 3' TERM\n\
         echo \"args: $*\"; echo \"log=$RUST_LOG\" >&2; cat \"$3\"\n\
         [ \"$4\" = exit7 ] && exit 7\n\
         while :; do sleep 0.05; done\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();

    let mut relay = support::RelayProcess::start_program(&fake, "[source]\nx = 1\n", &[], &[]);
    assert!(relay.wait_for_log("x = 1", Duration::from_secs(10)).await, "{}", relay.log());
    assert!(relay.is_running());
    let log = relay.log();
    assert!(log.contains("args: run --config /"), "{log}");
    assert!(log.contains("log=walrelay=debug,info"), "{log}");
    assert_eq!(relay.terminate(), Some(3));
    assert!(!relay.is_running());
    assert!(relay.log().contains("got TERM"));

    let mut relay = support::RelayProcess::start_program(&fake, "", &[], &[]);
    relay.kill();
    assert!(!relay.is_running());
    assert_eq!(relay.wait_exit(Duration::ZERO), Some(128 + 9));

    let mut relay = support::RelayProcess::start_program(&fake, "", &["exit7"], &[]);
    assert_eq!(relay.wait_exit(Duration::from_secs(10)), Some(7));
    drop(relay);

    let mut relay = support::RelayProcess::start_program(&fake, "", &[], &[]);
    assert_eq!(relay.wait_exit(Duration::from_millis(200)), None);
    let pid = relay.pid();
    drop(relay); // SIGKILLs it
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_streams_and_is_promoted_after_the_primary_crashes() {
    let server = Server::selected().unwrap();
    let primary = start_instance("primary", &server, &[]).await;
    let standby = create_standby(&primary, "standby").await;
    let p = primary.pg.connect_to("postgres").await;
    p.batch_execute("CREATE TABLE t (n int); INSERT INTO t SELECT generate_series(1, 100)")
        .await
        .unwrap();
    let caught_up = wait_caught_up(&primary.pg, &standby.pg.pg, Duration::from_secs(30)).await;
    assert!(caught_up, "standby log:\n{}", standby.pg.log_tail(30));
    let streaming: i64 = p
        .query_one(
            "SELECT count(*) FROM pg_stat_replication r JOIN pg_replication_slots s \
             ON s.active_pid = r.pid WHERE s.slot_name = $1 AND r.state = 'streaming'",
            &[&standby.slot],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(streaming, 1, "the standby streams through its slot");
    let s = standby.pg.pg.connect_to("postgres").await;
    let row =
        s.query_one("SELECT pg_is_in_recovery(), (SELECT count(*) FROM t)", &[]).await.unwrap();
    assert_eq!((row.get::<_, bool>(0), row.get::<_, i64>(1)), (true, 100));

    primary.stop_immediate().unwrap();
    standby.pg.promote().unwrap();
    let s = standby.pg.pg.connect_to("postgres").await;
    s.batch_execute("INSERT INTO t VALUES (101)").await.unwrap();
    let row =
        s.query_one("SELECT pg_is_in_recovery(), (SELECT count(*) FROM t)", &[]).await.unwrap();
    assert_eq!((row.get::<_, bool>(0), row.get::<_, i64>(1)), (false, 101));
    println!("standby of {} streamed, caught up and was promoted", server.describe());
}

/// PostgreSQL 17+ (the selected server, else 18 from its wheel, printed): a logical slot made
/// with `failover => true` is copied to the standby by its slot sync worker, cannot be used
/// there while it is synchronized, and can be once the standby is promoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_slot_is_synced_to_the_standby_and_usable_after_promotion() {
    let server = server_with(Capability::FailoverSlots).unwrap_or_else(|e| panic!("{e}"));
    let primary = start_instance("fo_primary", &server, &[]).await;
    let standby = create_standby(&primary, "fo_standby").await;
    let p = primary.pg.connect_to("postgres").await;
    // (name, plugin, temporary, two_phase, failover)
    p.execute(
        "SELECT pg_create_logical_replication_slot('fo_slot', 'pgoutput', false, false, true)",
        &[],
    )
    .await
    .unwrap();
    let url = standby.pg.pg.url("postgres");
    let url = url.as_str();
    let synced =
        wait_until("fo_slot synced on the standby", Duration::from_secs(30), || async move {
            let Ok(c) = support::postgres::connect(url).await else { return false };
            c.query_opt(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = 'fo_slot' \
             AND synced AND failover AND NOT temporary",
                &[],
            )
            .await
            .is_ok_and(|r| r.is_some())
        })
        .await;
    assert!(synced, "standby log:\n{}", standby.pg.log_tail(30));
    let peek = "SELECT count(*) FROM pg_logical_slot_peek_binary_changes('fo_slot', NULL, NULL, \
                'proto_version', '1', 'publication_names', 'none')";
    let s = standby.pg.pg.connect_to("postgres").await;
    let err = s.query_one(peek, &[]).await.expect_err("a synced slot is not usable on a standby");
    println!("on the standby: {err}");

    primary.stop_immediate().unwrap();
    standby.pg.promote().unwrap();
    let s = standby.pg.pg.connect_to("postgres").await;
    s.query_one(peek, &[]).await.unwrap_or_else(|e| panic!("fo_slot after promotion: {e}"));
    println!("failover slot synced and usable after promotion on {}", server.describe());
}

/// The harness can start a server whose messages are translated (for tests of how walrelay
/// reports them): Debian's, built with NLS, with the de_DE.UTF-8 locale install-test-deps.sh
/// generates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn translated_instance_reports_errors_in_german() {
    let pg =
        cluster::start_translated("nls", "de_DE.UTF-8", &[("application_name", "'nls'")]).await;
    let c = pg.pg.connect_to("postgres").await;
    let row = c
        .query_one(
            "SELECT current_setting('lc_messages'), current_setting('application_name')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, String>(1)),
        ("de_DE.UTF-8".into(), "nls".into())
    );
    let err = c.query_one("SELECT 1/0", &[]).await.expect_err("division by zero");
    let db = err.as_db_error().expect("a server error");
    assert_eq!(
        db.message(),
        "Division durch Null",
        "{} on {}",
        db.message(),
        pg.pg.server().describe()
    );
}

// ---------------------------------------------------------------------------------------------
// the schema registry (tests/support/registry.rs)

const ORDER_AVRO: &str = r#"{"type":"record","name":"Order","namespace":"io.example","fields":[{"name":"id","type":"string"},{"name":"n","type":["null","long"],"default":null}]}"#;

/// Avro's zigzag varint (int and long).
fn avro_long(n: i64, out: &mut Vec<u8>) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    loop {
        let byte = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Magic byte 0 and the schema id big-endian: the frame every Confluent deserializer expects.
fn framed(id: i32) -> Vec<u8> {
    let mut v = vec![0u8];
    v.extend_from_slice(&id.to_be_bytes());
    v
}

/// An `io.example.Order` in Avro's binary encoding, framed: the string's length then its bytes,
/// the union's branch (0 null, 1 long) then the long.
fn avro_order(id: i32, order_id: &str, n: Option<i64>) -> Vec<u8> {
    let mut v = framed(id);
    avro_long(order_id.len() as i64, &mut v);
    v.extend_from_slice(order_id.as_bytes());
    match n {
        None => avro_long(0, &mut v),
        Some(n) => {
            avro_long(1, &mut v);
            avro_long(n, &mut v);
        }
    }
    v
}

#[test]
fn registry_registers_an_avro_schema_and_confluents_deserializer_decodes_a_framed_record() {
    let registry = support::registry();
    println!("{}", registry.describe());
    let topic = unique("smoke");
    let subject = format!("{topic}-value");
    let id = registry.register(&subject, "AVRO", ORDER_AVRO);
    // Registering the same schema again is idempotent: the same id.
    assert_eq!(registry.register(&subject, "AVRO", ORDER_AVRO), id);
    let (latest_id, schema) = registry.latest(&subject).expect("the subject exists");
    assert_eq!(latest_id, id);
    let as_json = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
    assert_eq!(as_json(&schema), as_json(ORDER_AVRO));
    assert_eq!(registry.schema_by_id(id).map(|s| as_json(&s)), Some(as_json(ORDER_AVRO)));
    assert!(registry.subjects().contains(&subject), "{:?}", registry.subjects());
    assert_eq!(registry.latest(&format!("{topic}-none")), None);

    let records = vec![
        avro_order(id, "o-1", Some(7)),
        avro_order(id, "o-2", None),
        avro_order(id, "ö-3", Some(-1_234_567_890_123)),
    ];
    assert_eq!(records[0], [&[0u8][..], &id.to_be_bytes(), b"\x06o-1\x02\x0e"].concat());
    let decoded = support::decode_with_confluent("avro", &registry.ccompat_url(), &topic, &records);
    println!("decoded by confluent-kafka's AvroDeserializer: {decoded:?}");
    assert_eq!(decoded[0], serde_json::json!({"id": "o-1", "n": 7}));
    assert_eq!(decoded[1], serde_json::json!({"id": "o-2", "n": null}));
    assert_eq!(decoded[2], serde_json::json!({"id": "ö-3", "n": -1_234_567_890_123i64}));

    // A frame naming an id the registry never gave is the deserializer's error, not a hang.
    let unknown = support::registry_decode::try_decode_with_confluent(
        "avro",
        &registry.ccompat_url(),
        &topic,
        &[avro_order(id + 1000, "o-4", None)],
    );
    println!("an unknown schema id: {unknown:?}");
    assert!(unknown[0].is_err(), "{unknown:?}");
}

#[test]
fn registry_refuses_an_incompatible_schema_with_409_under_backward() {
    let registry = support::registry();
    let subject = format!("{}-value", unique("smoke_compat"));
    let first = registry.register(&subject, "AVRO", ORDER_AVRO);
    registry.set_compatibility(&subject, "BACKWARD");
    // A new field without a default: a reader of the new schema cannot read the old records.
    let required = ORDER_AVRO.replace(
        r#"{"name":"n","type":["null","long"],"default":null}"#,
        r#"{"name":"n","type":["null","long"],"default":null},{"name":"total","type":"long"}"#,
    );
    let refused = registry.try_register(&subject, "AVRO", &required);
    println!("incompatible schema under BACKWARD: {refused:?}");
    let (status, message) = refused.expect_err("the incompatible schema was accepted");
    assert_eq!(status, 409, "{message}");
    assert!(
        message.contains("409") || message.to_lowercase().contains("incompatible"),
        "{message}"
    );
    assert_eq!(registry.latest(&subject).map(|(id, _)| id), Some(first));
    // With a default it is compatible: a new version and id.
    let optional = required.replace(r#""type":"long"}"#, r#""type":"long","default":0}"#);
    let second = registry.register(&subject, "AVRO", &optional);
    assert_ne!(second, first);
    assert_eq!(registry.latest(&subject).map(|(id, _)| id), Some(second));
}

#[test]
fn registry_json_and_protobuf_records_decode_with_confluents_deserializers() {
    let registry = support::registry();
    let url = registry.ccompat_url();

    let topic = unique("smoke_json");
    let schema = r#"{"type":"object","properties":{"id":{"type":"string"},"n":{"type":"integer"}},"required":["id"]}"#;
    let id = registry.register(&format!("{topic}-value"), "JSON", schema);
    let record = |value: &str| [framed(id), value.as_bytes().to_vec()].concat();
    let decoded = support::registry_decode::try_decode_with_confluent(
        "json",
        &url,
        &topic,
        &[record(r#"{"id":"o-1","n":7}"#), record(r#"{"n":7}"#)],
    );
    println!("decoded by confluent-kafka's JSONDeserializer: {decoded:?}");
    assert_eq!(decoded[0], Ok(serde_json::json!({"id": "o-1", "n": 7})));
    // The deserializer validates against the registered schema.
    assert!(decoded[1].as_ref().is_err_and(|e| e.contains("'id' is a required property")));

    let topic = unique("smoke_proto");
    let proto = "syntax = \"proto3\";\npackage io.example;\n\
                 import \"google/protobuf/timestamp.proto\";\n\
                 message Other { string x = 1; }\n\
                 message Order {\n  string id = 1;\n  int64 n = 2;\n  bytes b = 3;\n  \
                 google.protobuf.Timestamp at = 4;\n  message Line { int32 k = 1; }\n  \
                 Line line = 5;\n}\n";
    let id = registry.register(&format!("{topic}-value"), "PROTOBUF", proto);
    // Message indexes: a zigzag-varint count, then the path ([1] is Order, [1, 0] Order.Line).
    let order = [
        framed(id),
        vec![2, 2],
        b"\x0a\x03o-1\x10\x07\x1a\x02\x00\xff\x22\x06\x08\x80\xf2\xd6\xca\x06\x2a\x02\x08\x03"
            .to_vec(),
    ]
    .concat();
    let line = [framed(id), vec![4, 2, 0], b"\x08\x05".to_vec()].concat();
    let decoded = support::decode_with_confluent("protobuf", &url, &topic, &[order, line]);
    println!("decoded by confluent-kafka's ProtobufDeserializer: {decoded:?}");
    assert_eq!(
        decoded[0],
        serde_json::json!({"id": "o-1", "n": "7", "b": "AP8=", "at": "2026-01-01T00:00:00Z", "line": {"k": 3}})
    );
    assert_eq!(decoded[1], serde_json::json!({"k": 5}));
}

#[test]
fn registry_paused_then_resumed_answers_again_and_a_restarted_one_is_empty() {
    let registry = support::private_registry();
    println!("private: {}", registry.describe());
    let subject = format!("{}-value", unique("smoke_pause"));
    let id = registry.register(&subject, "AVRO", ORDER_AVRO);

    registry.pause();
    let asked = std::time::Instant::now();
    let answer =
        registry.request_within("GET", "/apis/ccompat/v7/subjects", None, Duration::from_secs(3));
    println!("GET while paused: {answer:?} after {:.1?}", asked.elapsed());
    assert!(answer.is_err(), "a paused registry answered: {answer:?}");
    assert!(!registry.answers(Duration::from_secs(2)));

    let resumed = std::time::Instant::now();
    registry.resume();
    println!("answering again {:.1?} after SIGCONT", resumed.elapsed());
    assert_eq!(registry.latest(&subject).map(|(i, _)| i), Some(id), "SIGSTOP kept the schema");

    registry.kill();
    assert!(!registry.answers(Duration::from_secs(2)));
    registry.restart().unwrap_or_else(|e| panic!("restart: {e}"));
    println!("restarted on the same port in {:.1?}", registry.started_in());
    assert!(registry.subjects().is_empty(), "in-memory storage kept {:?}", registry.subjects());
}
