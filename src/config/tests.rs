//! The configuration file as operators write it: defaults, spellings, and the errors that name the key.
use std::time::Duration;

use super::*;

const MINIMAL: &str = r#"
    [source]
    url = "postgres://walrelay:s3cret@127.0.0.1:5432/app"
    [kafka]
    "bootstrap.servers" = "127.0.0.1:9092"
"#;

#[test]
fn linger_defaults_to_two_ms_unless_either_spelling_is_set() {
    let own = Config::parse(&format!("{MINIMAL}\n\"linger.ms\" = 20\n")).unwrap();
    assert_eq!(own.kafka.properties["linger.ms"], "20");
    let alias = Config::parse(&format!("{MINIMAL}\n\"queue.buffering.max.ms\" = 7\n")).unwrap();
    assert!(!alias.kafka.properties.contains_key("linger.ms"), "{:?}", alias.kafka.properties);
}

#[test]
fn minimal_config_gets_defaults_and_relay_owned_producer_settings() {
    let c = Config::parse(MINIMAL).unwrap();
    assert_eq!(c.source.slot, "walrelay");
    assert_eq!(c.source.publication, "walrelay");
    assert_eq!(
        c.outbox,
        OutboxConfig {
            tables: vec![TableName::new("public", "outbox")],
            patterns: Vec::new(),
            tenant_header: None,
        }
    );
    assert_eq!(c.kafka.properties["enable.idempotence"], "true");
    assert_eq!(c.kafka.properties["acks"], "all");
    assert_eq!(c.kafka.properties["linger.ms"], "2");
    assert_eq!(c.kafka.properties["partitioner"], "murmur2_random");
    assert_eq!(c.kafka.properties["message.timeout.ms"], "30000");
    assert_eq!(c.kafka.properties["topic.metadata.propagation.max.ms"], "10000");
    assert!(c.http.is_none());
}

#[test]
fn dotted_and_quoted_keys_and_numbers_mean_the_same() {
    let dotted = format!("{MINIMAL}\nlinger.ms = 5\n");
    let quoted = format!("{MINIMAL}\n\"linger.ms\" = \"5\"\n");
    let a = Config::parse(&dotted).unwrap();
    let b = Config::parse(&quoted).unwrap();
    assert_eq!(a.kafka.properties["linger.ms"], "5");
    assert_eq!(a.kafka.properties, b.kafka.properties);
}

#[test]
fn both_spellings_of_one_key_are_rejected_as_duplicate() {
    let text = format!("{MINIMAL}\n\"linger.ms\" = 5\nlinger.ms = 6\n");
    let err = Config::parse(&text);
    // TOML itself or our flattening must refuse it; either way the key is named.
    let msg = err.unwrap_err().to_string();
    assert!(msg.contains("linger"), "{msg}");
}

#[test]
fn unknown_section_and_key_are_named_in_the_error() {
    let e = Config::parse(&format!("{MINIMAL}\n[sorce]\nx=1\n")).unwrap_err().to_string();
    assert!(e.contains("sorce") && e.contains("[source]"), "{e}");
    let e = Config::parse(&MINIMAL.replace("[kafka]", "slott = \"x\"\n[kafka]"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("[source] unknown key `slott`"), "{e}");
}

#[test]
fn unsafe_relay_owned_kafka_setting_is_an_error_not_an_override() {
    let e = Config::parse(&format!("{MINIMAL}\nacks = 1\n")).unwrap_err().to_string();
    assert!(e.contains("acks") && e.contains("remove the key"), "{e}");
    let e = Config::parse(&format!("{MINIMAL}\n\"enable.idempotence\" = false\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("enable.idempotence"), "{e}");
    assert!(Config::parse(&format!("{MINIMAL}\nacks = \"all\"\n")).is_ok());
}

#[test]
fn missing_bootstrap_servers_says_what_to_set() {
    let e = Config::parse("[source]\nurl=\"postgres://a@b/c\"\n").unwrap_err().to_string();
    assert!(e.contains("bootstrap.servers"), "{e}");
}

#[test]
fn source_without_url_connects_from_the_libpq_environment() {
    let env = |k: &str| match k {
        "PGHOST" => Some("db1,db2".to_string()),
        "PGDATABASE" => Some("app".to_string()),
        "PGUSER" => Some("relay".to_string()),
        "PGTARGETSESSIONATTRS" => Some("read-write".to_string()),
        _ => None,
    };
    let src = source::parse_with(&Options::new(), &env).unwrap();
    assert_eq!(src.conn.get_hosts().len(), 2);
    assert_eq!((src.conn.get_dbname(), src.conn.get_user()), (Some("app"), Some("relay")));
    assert_eq!(src.failover, None);
}

#[test]
fn source_failover_is_a_boolean() {
    let c = Config::parse(&MINIMAL.replace("[kafka]", "failover = false\n[kafka]")).unwrap();
    assert_eq!(c.source.failover, Some(false));
    let e = Config::parse(&MINIMAL.replace("[kafka]", "failover = \"maybe\"\n[kafka]"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("failover") && e.contains("true or false"), "{e}");
}

#[test]
fn outbox_tables_take_a_list_or_one_table_but_not_both() {
    let c = Config::parse(&format!(
        "{MINIMAL}\n[outbox]\ntables = [\"public.outbox\", \"billing.outbox\"]\n"
    ))
    .unwrap();
    assert_eq!(
        c.outbox.tables,
        [TableName::new("public", "outbox"), TableName::new("billing", "outbox")]
    );
    let one = Config::parse(&format!("{MINIMAL}\n[outbox]\ntable = \"events\"\n")).unwrap();
    assert_eq!(one.outbox.tables, [TableName::new("public", "events")]);
    let e = Config::parse(&format!("{MINIMAL}\n[outbox]\ntable = \"a\"\ntables = [\"b\"]\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("table/tables"), "{e}");
    let e = Config::parse(&format!("{MINIMAL}\n[outbox]\ntables = [\"a\", \"public.a\"]\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("twice"), "{e}");
}

#[test]
fn outbox_tables_take_patterns_anchored_at_both_ends_and_refuse_a_broken_one() {
    let c =
        Config::parse(&format!("{MINIMAL}\n[outbox]\ntables = [\"tenant_[0-9]+\\\\.outbox\"]\n"))
            .unwrap();
    assert!(c.outbox.tables.is_empty() && !c.outbox.is_message_only());
    // PostgreSQL matches it (source::tenants), anchored at both ends.
    assert_eq!(c.outbox.pattern_regex().as_deref(), Some(r"^(?:(?:tenant_[0-9]+\.outbox))$"));
    let e = Config::parse(&format!("{MINIMAL}\n[outbox]\ntables = [\"tenant_(.*\\\\.outbox\"]\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not a regular expression"), "{e}");
    // What PostgreSQL's regular expressions read otherwise is refused, naming it.
    let e =
        Config::parse(&format!("{MINIMAL}\n[outbox]\ntables = [\"(?i)tenant_.*\\\\.outbox\"]\n"))
            .unwrap_err()
            .to_string();
    assert!(e.contains("(?") && e.contains("PostgreSQL"), "{e}");
    // A comma splits the list, as in Debezium's table.include.list: the error says so.
    let e = Config::parse(&format!("{MINIMAL}\n[outbox]\ntables = \"t[0-9]{{1,3}}\\\\.outbox\"\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("without a comma"), "{e}");
}

#[test]
fn messages_are_selected_by_prefix_lists_and_may_be_the_only_events() {
    let none = Config::parse(MINIMAL).unwrap();
    assert!(none.messages.is_none(), "without a prefix list, messages are ignored");
    let only = format!(
        "{MINIMAL}\n[outbox]\ntables = []\nnon_transactional_messages = \"relay\"\n\
         [debezium]\n\"message.prefix.include.list\" = \"outbox\"\n"
    );
    let c = Config::parse(&only).unwrap();
    assert!(c.outbox.tables.is_empty());
    let selection = c.messages.expect("selected");
    assert_eq!(selection.verdict(false, "OUTBOX"), crate::message_selection::Verdict::Event);
    let e = Config::parse(&format!("{MINIMAL}\n[outbox]\ntables = []\n")).unwrap_err().to_string();
    assert!(e.contains("tables") && e.contains("message.prefix.include.list"), "{e}");
    let e = Config::parse(&format!(
        "{MINIMAL}\n[debezium]\n\"message.prefix.include.list\" = \"a\"\n\
         \"message.prefix.exclude.list\" = \"b\"\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("message.prefix.include.list") && e.contains("message.prefix.exclude.list"),
        "{e}"
    );
}

#[test]
fn names_that_could_inject_sql_are_rejected() {
    for bad in ["walrelay; drop table x", "Walrelay", "a-b", "", "x\"y"] {
        let text = MINIMAL.replace("[kafka]", &format!("slot = {bad:?}\n[kafka]"));
        let e = Config::parse(&text).unwrap_err().to_string();
        assert!(e.contains("slot"), "{bad}: {e}");
    }
    let text = format!("{MINIMAL}\n[outbox]\ntable = \"public.outbox; select 1\"\n");
    assert!(Config::parse(&text).is_err());
}

#[test]
fn password_never_appears_in_debug_or_errors() {
    let c = Config::parse(MINIMAL).unwrap();
    let dbg = format!("{c:?}");
    assert!(!dbg.contains("s3cret"), "{dbg}");
    assert!(dbg.contains("walrelay:****@127.0.0.1"), "{dbg}");
    let bad = MINIMAL.replace(
        "postgres://walrelay:s3cret@127.0.0.1:5432/app",
        "postgres://u:s3cret@h:notaport/app",
    );
    let e = Config::parse(&bad).unwrap_err().to_string();
    assert!(!e.contains("s3cret"), "{e}");
    assert_eq!(redact_url("host=h password=s3cret user=u"), "host=h password=**** user=u");
}

#[test]
fn environment_overrides_file_keys_with_dotted_names_spelled_double_underscore() {
    let env = [
        ("WALRELAY_SOURCE_URL", "postgres://other@db:5433/app2"),
        ("WALRELAY_KAFKA_LINGER__MS", "7"),
        ("WALRELAY_ROUTER_ROUTE__TOPIC__REPLACEMENT", "events.${routedByValue}"),
        ("WALRELAY_DEAD_LETTER_TOPIC", "dlq"),
        ("WALRELAY_BIN", "/not/a/section"),
    ];
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    let c = Config::parse_with_env(MINIMAL, env).unwrap();
    assert_eq!(c.source.conn.get_dbname(), Some("app2"));
    assert_eq!(c.kafka.properties["linger.ms"], "7");
    assert_eq!(c.dead_letter.unwrap().topic, "dlq");
    let typo = [("WALRELAY_SOURCE_SLOTT".to_string(), "x".to_string())];
    let e = Config::parse_with_env(MINIMAL, typo).unwrap_err().to_string();
    assert!(e.contains("slott") && e.contains("(set by WALRELAY_SOURCE_SLOTT)"), "{e}");
}

#[test]
fn dead_letter_section_parses_and_caps_its_payload_to_half_the_message_limit() {
    let text = format!("{MINIMAL}\"message.max.bytes\" = 10000\n[dead_letter]\ntopic = \"dlq\"\n");
    let d = Config::parse(&text).unwrap().dead_letter.unwrap();
    assert_eq!((d.topic.as_str(), d.max_value_bytes), ("dlq", 5000));
    let e = Config::parse(&format!("{MINIMAL}[dead_letter]\ntopic = \"bad topic\"\n")).unwrap_err();
    assert!(e.to_string().contains("topic"), "{e}");
}

#[test]
fn kafka_secrets_are_hidden_in_debug() {
    let c = Config::parse(&format!("{MINIMAL}\n\"sasl.password\" = \"hunter2\"\n")).unwrap();
    assert!(!format!("{c:?}").contains("hunter2"));
}

#[test]
fn retention_takes_durations_and_a_column_with_defaults() {
    let c = Config::parse(&format!("{MINIMAL}\n[retention]\nkeep = \"7d\"\n")).unwrap();
    assert_eq!(
        c.retention,
        Some(RetentionConfig {
            keep: Duration::from_secs(7 * 86_400),
            interval: Duration::from_secs(3_600),
            column: "created_at".into(),
        })
    );
    let c = Config::parse(&format!(
        "{MINIMAL}\n[retention]\nkeep = \"12h\"\ninterval = \"30m\"\ncolumn = \"written_at\"\n"
    ))
    .unwrap()
    .retention
    .unwrap();
    assert_eq!((c.keep.as_secs(), c.interval.as_secs()), (43_200, 1_800));
    assert_eq!(c.column, "written_at");
    assert!(Config::parse(MINIMAL).unwrap().retention.is_none());
}

#[test]
fn bad_retention_values_are_refused_with_the_key_named() {
    for (lines, key) in [
        ("interval = \"1h\"", "`keep`"),
        ("keep = \"7\"", "`keep`"),
        ("keep = \"1w\"", "`keep`"),
        ("keep = \"0d\"", "`keep`"),
        ("keep = \"7d\"\ninterval = \"soon\"", "`interval`"),
        ("keep = \"7d\"\ninterval = \"0s\"", "`interval`"),
        ("keep = \"7d\"\ncolumn = \"Created At\"", "`column`"),
        ("keep = \"7d\"\nkeep_for = \"7d\"", "`keep_for`"),
    ] {
        let e =
            Config::parse(&format!("{MINIMAL}\n[retention]\n{lines}\n")).unwrap_err().to_string();
        assert!(e.starts_with("[retention]") && e.contains(key), "{lines}: {e}");
    }
}

#[test]
fn limits_and_http_parse_and_validate() {
    let c = Config::parse(&format!(
        "{MINIMAL}\n[limits]\ninflight_records = 10\ninflight_bytes = 4096\n[http]\nlisten = \"127.0.0.1:9187\"\n"
    ))
    .unwrap();
    assert_eq!(c.limits.inflight_records, 10);
    assert_eq!(c.http.unwrap().listen.port(), 9187);
    let e = Config::parse(&format!("{MINIMAL}\n[limits]\ninflight_records = \"many\"\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("inflight_records"), "{e}");
    let e = Config::parse(&format!("{MINIMAL}\n[http]\nlisten = \"nowhere\"\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("listen"), "{e}");
}

#[test]
fn debezium_offsets_takes_a_file_or_a_topic_and_the_connectors_key() {
    let base =
        "[source]\nurl = \"postgres://u@h/db\"\n[kafka]\n\"bootstrap.servers\" = \"k:9092\"\n";
    let parse = |extra: &str| Config::parse(&format!("{base}{extra}"));
    let c = parse("[debezium]\n\"topic.prefix\" = \"dbz\"\n[debezium_offsets]\ntopic = \"connect-offsets\"\nconnector = \"c\"\n").unwrap();
    let o = c.debezium_offsets.unwrap();
    assert_eq!(o.store, OffsetStore::Topic("connect-offsets".into()));
    assert_eq!((o.connector.as_str(), o.server.as_str()), ("c", "dbz"));
    assert_eq!(o.timeout, std::time::Duration::from_secs(10));
    let c = parse("[debezium_offsets]\nfile = \"/x.dat\"\nconnector = \"c\"\nserver = \"s\"\ntimeout_ms = 500\n").unwrap();
    assert_eq!(c.debezium_offsets.unwrap().store, OffsetStore::File("/x.dat".into()));
    for bad in [
        "[debezium_offsets]\nfile = \"/x\"\ntopic = \"t\"\nconnector = \"c\"\nserver = \"s\"\n",
        "[debezium_offsets]\nconnector = \"c\"\nserver = \"s\"\n",
        "[debezium_offsets]\nfile = \"/x\"\nserver = \"s\"\n",
        "[debezium_offsets]\nfile = \"/x\"\nconnector = \"c\"\n",
        "[debezium_offsets]\nfile = \"/x\"\nconnector = \"c\"\nserver = \"s\"\nlsn = 5\n",
    ] {
        assert!(parse(bad).is_err(), "{bad}");
    }
    assert!(parse("").unwrap().debezium_offsets.is_none());
}

#[test]
fn delivery_defaults_to_at_least_once_and_exactly_once_derives_its_id_from_the_slot() {
    let c = Config::parse(MINIMAL).unwrap();
    assert_eq!(c.delivery.guarantee, Guarantee::AtLeastOnce);
    let eos = Config::parse(&format!(
        "{MINIMAL}\n[delivery]\nguarantee = \"exactly-once\"\ntransaction_max_records = 500\n"
    ))
    .unwrap();
    assert!(eos.delivery.exactly_once());
    assert_eq!(eos.delivery.transactional_id, "walrelay-walrelay");
    assert_eq!(eos.delivery.progress_topic, "walrelay.progress.walrelay", "the relay's own");
    assert_eq!(eos.delivery.legacy_progress_topic(), Some("walrelay.progress"));
    let named = Config::parse(&format!(
        "{MINIMAL}\n[delivery]\nguarantee = \"exactly-once\"\nprogress_topic = \"shared\"\n"
    ))
    .unwrap();
    assert_eq!(
        (named.delivery.progress_topic.as_str(), named.delivery.legacy_progress_topic()),
        ("shared", None)
    );
    assert_eq!(eos.delivery.transaction_max, Duration::from_millis(100));
    assert_eq!(eos.delivery.transaction_max_records, 500);
    assert_eq!(eos.delivery.transaction_timeout, Duration::from_secs(60));
}

#[test]
fn delivery_refuses_an_unknown_guarantee_a_transactional_id_in_kafka_and_a_batch_near_the_timeout()
{
    let err = |extra: &str| Config::parse(&format!("{MINIMAL}{extra}")).unwrap_err().to_string();
    let e = err("\n[delivery]\nguarantee = \"exactly_once\"\n");
    assert!(e.contains("guarantee") && e.contains("\"exactly-once\""), "{e}");
    let e = err("\n\"transactional.id\" = \"mine\"\n");
    assert!(e.contains("transactional.id") && e.contains("[delivery] transactional_id"), "{e}");
    let e = err("\n\"transaction.timeout.ms\" = 1000\n[delivery]\ntransaction_max_ms = 600\n");
    assert!(e.contains("transaction_max_ms") && e.contains("1000 ms"), "{e}");
    let e = err("\n\"message.timeout.ms\" = 90000\n[delivery]\nguarantee = \"exactly-once\"\n");
    assert!(e.contains("message.timeout.ms") && e.contains("60000 ms"), "{e}");
    let alo = Config::parse(&format!("{MINIMAL}\n\"message.timeout.ms\" = 90000\n"));
    assert!(alo.is_ok(), "at-least-once has no Kafka transactions to outlive");
}

#[test]
fn tracing_section_takes_an_http_otlp_endpoint_and_turns_relay_spans_on() {
    let c = Config::parse(MINIMAL).unwrap();
    assert!(c.tracing.is_none() && !c.router.relay_spans);
    for (given, used) in [
        ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
        ("http://collector:4318/", "http://collector:4318/v1/traces"),
        ("http://collector:4318/custom/path", "http://collector:4318/custom/path"),
    ] {
        let c =
            Config::parse(&format!("{MINIMAL}\n[tracing]\notlp_endpoint = \"{given}\"\n")).unwrap();
        let t = c.tracing.expect("[tracing]");
        assert_eq!((t.otlp_endpoint.as_str(), t.queue_spans), (used, 8192));
        assert_eq!(t.service_name, "walrelay");
        assert!(c.router.relay_spans);
    }
    for (section, needle) in [
        ("otlp_endpoint = \"https://collector:4318\"", "https is not supported"),
        ("otlp_endpoint = \"http:///v1/traces\"", "has no host"),
        ("otlp_endpoint = \"http://c\"\nqueue_spans = 0", "queue_spans"),
        ("otlp_endpont = \"http://c\"", "otlp_endpont"),
    ] {
        let err = Config::parse(&format!("{MINIMAL}\n[tracing]\n{section}\n")).unwrap_err();
        assert!(err.to_string().contains(needle), "{section}: {err}");
    }
}

#[test]
fn protobuf_and_json_schema_values_take_use_latest_version_and_refuse_record_subjects_naming_the_key(
) {
    for (converter, what) in [("protobuf", "Protobuf"), ("json-schema", "JSON Schema")] {
        let base = format!(
            "{MINIMAL}\n[debezium]\n\"value.converter\" = \"{converter}\"\n[schema_registry]\nurl = \"http://r\"\n"
        );
        let ok = Config::parse(&base).unwrap();
        assert_eq!(ok.router.registry_converter(), Some(converter));
        // Contract-first: JSON Schema validates values against the latest schema, Protobuf
        // renumbers them under it.
        let latest = "auto_register = false\nuse_latest_version = true\n";
        let contract_first = Config::parse(&format!("{base}{latest}")).unwrap();
        assert!(contract_first.schema_registry.is_some_and(|r| r.use_latest_version));
        // Record-named subjects are Avro's, and so are Apicurio's framings (its AvroConverter's).
        for (line, key) in [
            ("subject_name_strategy = \"record\"\n", "subject_name_strategy"),
            ("id_handler = \"8-byte\"\nuse_id = \"contentId\"\n", "id_handler"),
        ] {
            let e = Config::parse(&format!("{base}{line}")).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains("avro") && e.contains(converter), "{e}");
        }
        let key = Config::parse(&format!(
            "{MINIMAL}\n[debezium]\n\"key.converter\" = \"{converter}\"\n[schema_registry]\nurl = \"http://r\"\n"
        ));
        match converter {
            // Protobuf keys are written (a google.protobuf wrapper under <topic>-key).
            "protobuf" => {
                assert_eq!(key.unwrap().router.registry_key_converter(), Some("protobuf"))
            }
            _ => {
                let key = key.unwrap_err().to_string();
                assert!(key.contains(&format!("{what} values only")), "{key}");
            }
        }
        // A registry key converter wants [schema_registry] as a value converter does.
        let alone = format!("{MINIMAL}\n[debezium]\n\"key.converter\" = \"avro\"\n");
        let e = Config::parse(&alone).unwrap_err().to_string();
        assert!(e.contains("key.converter") && e.contains("[schema_registry] url"), "{e}");
    }
}

#[test]
fn audit_is_accepted_with_kafka_and_nats_and_refused_with_sinks_that_cannot_be_read_back() {
    let audit = "\n[audit]\ninterval = \"1h\"\nwindow = \"2h\"\n";
    let nats = "\n[delivery]\nsink = \"nats\"\n[nats]\nurl = \"nats://127.0.0.1:4222\"\n";
    let with_nats = Config::parse(&format!("{MINIMAL}{nats}{audit}")).unwrap();
    assert!(with_nats.audit.is_some() && with_nats.delivery.sink.why_no_audit().is_none());
    assert!(Config::parse(&format!("{MINIMAL}{audit}")).unwrap().audit.is_some());
    let http = "\n[delivery]\nsink = \"http\"\n[webhook]\nurl = \"http://127.0.0.1:9/hook\"\n";
    let e = Config::parse(&format!("{MINIMAL}{http}{audit}")).unwrap_err().to_string();
    assert!(e.contains("cannot be read back without consuming them"), "{e}");
    assert!(e.contains("remove [audit]"), "{e}");
}

#[test]
fn a_sinks_list_key_takes_a_list_and_its_other_keys_and_unknown_sections_are_refused_naming_them() {
    let nats = "\n[delivery]\nsink = \"nats\"\n[nats]\nurl = \"nats://127.0.0.1:4222\"\n";
    let listed = format!("{MINIMAL}{nats}stream_subjects = [\"orders.>\", \"invoices.>\"]\n");
    let config = Config::parse(&listed).unwrap();
    let crate::sink::SinkConfig::Nats(nats_config) = &config.delivery.sink else {
        panic!("not the nats sink: {:?}", config.delivery.sink)
    };
    assert_eq!(nats_config.stream_subjects, ["orders.>", "invoices.>"]);
    let one = format!("{MINIMAL}{nats}stream = [\"walrelay\"]\n");
    let e = Config::parse(&one).unwrap_err().to_string();
    assert!(e.contains("stream") && e.contains("takes one value, not a list"), "{e}");
    // Every sink's section is a section of the file; a misspelt one is named with the list.
    let e = Config::parse(&format!("{MINIMAL}\n[natss]\nurl = \"x\"\n")).unwrap_err().to_string();
    assert!(e.contains("natss") && e.contains("[nats], [rabbitmq], [sqs], [webhook]"), "{e}");
}
