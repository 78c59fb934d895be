//! Unit tests: `[router]`/`[debezium]` option parsing and topic routing.

use super::golden_tests::{fixture_rows, opts, outbox_relation, router_for, NOT_NULL};
use super::options::PlacementKind;
use super::route_tests::{parse, route_one, table_with, ID};
use super::*;
use crate::options::ConfigError;

// ---- options ----

#[test]
fn options_defaults_are_debeziums() {
    let c = parse(&[], &[]).unwrap();
    assert_eq!(c.field_event_id, "id");
    assert_eq!(c.field_event_key, "aggregateid");
    assert_eq!(c.field_event_type, "type");
    assert_eq!(c.field_payload, "payload");
    assert_eq!(c.field_timestamp, None);
    assert!(c.placements.is_empty());
    assert_eq!(c.route_by_field, "aggregatetype");
    assert!(!c.tombstone_on_empty_payload && !c.expand_json_payload && !c.extended_headers);
    assert_eq!(c.invalid_op_behavior(), InvalidOpBehavior::Warn);
    assert_eq!(c.topic_prefix, "walrelay");
    assert_eq!(c.key_converter, Converter::String);
    assert_eq!(c.value_converter, Converter::String);
    assert_eq!(c.header_converter, HeaderConverter::Simple);
    assert_eq!(c.topic_router.apply("Order", ("", "")), "outbox.event.Order");
}

#[test]
fn options_dotted_keys_booleans_any_case_and_class_names_parse() {
    let c = parse(
        &[
            ("route.tombstone.on.empty.payload", "TRUE"),
            ("table.op.invalid.behavior", "Fatal"),
            ("table.expand.json.payload", " True "),
        ],
        &[
            ("value.converter", "org.apache.kafka.connect.json.JsonConverter"),
            ("key.converter", "org.apache.kafka.connect.storage.StringConverter"),
            ("header.converter", "org.apache.kafka.connect.storage.SimpleHeaderConverter"),
            ("extended.headers.enabled", "True"),
        ],
    )
    .unwrap();
    assert!(c.tombstone_on_empty_payload && c.expand_json_payload && c.extended_headers);
    assert_eq!(c.invalid_op_behavior(), InvalidOpBehavior::Fatal);
    assert_eq!(
        c.value_converter,
        Converter::Json { schemas: true },
        "JsonConverter writes schemas by default"
    );
    assert_eq!(c.key_converter, Converter::String);
    let h = parse(&[], &[("header.converter", "json")]).unwrap().header_converter;
    assert_eq!(h, HeaderConverter::Json { schemas: false }, "header schemas default off");
}

#[test]
fn options_unknown_key_error_names_the_key_and_suggests_the_closest() {
    let err = parse(&[("table.field.event.paylod", "x")], &[]).unwrap_err();
    let ConfigError::UnknownKey { section, key, hint } = &err else { panic!("{err:?}") };
    assert_eq!((*section, key.as_str()), ("router", "table.field.event.paylod"));
    assert!(hint.contains("did you mean `table.field.event.payload`"), "{hint}");
    assert!(err.to_string().contains("table.field.event.paylod"));
    let err = parse(&[], &[("topic.prefx", "x")]).unwrap_err();
    assert!(err.to_string().contains("did you mean `topic.prefix`"), "{err}");
}

#[test]
fn options_tracing_keys_take_debezium_names_and_defaults() {
    let cfg = parse(&[], &[]).unwrap();
    assert_eq!(cfg.trace_field, "tracingspancontext");
    assert_eq!(cfg.trace_operation, "debezium-read");
    // Absent, the Event Router traces only rows with a context (EventRouterDelegate.configure).
    assert!(cfg.trace_context_only);
    assert!(!cfg.relay_spans);
    let cfg = parse(
        &[
            ("tracing.span.context.field", "span_ctx"),
            ("tracing.operation.name", "outbox-relay"),
            ("tracing.with.context.field.only", "false"),
        ],
        &[],
    )
    .unwrap();
    assert_eq!(
        (cfg.trace_field.as_str(), cfg.trace_operation.as_str()),
        ("span_ctx", "outbox-relay")
    );
    assert!(!cfg.trace_context_only);
    let err = parse(&[("tracing.with.context.field.only", "maybe")], &[]).unwrap_err();
    assert!(err.to_string().contains("tracing.with.context.field.only"), "{err}");
}

#[test]
fn options_prefixed_or_misplaced_keys_get_a_hint_naming_the_fix() {
    let err = parse(&[("transforms.outbox.route.by.field", "x")], &[]).unwrap_err().to_string();
    assert!(err.contains("without the `transforms.outbox.` prefix: `route.by.field`"), "{err}");
    let err = parse(&[("topic.prefix", "x")], &[]).unwrap_err().to_string();
    assert!(err.contains("belongs in the [debezium] section"), "{err}");
}

#[test]
fn options_bad_enum_boolean_and_converter_values_list_the_choices() {
    let err = parse(&[("table.op.invalid.behavior", "ignore")], &[]).unwrap_err().to_string();
    assert!(
        err.contains("table.op.invalid.behavior") && err.contains("warn, error, fatal"),
        "{err}"
    );
    let err = parse(&[("table.json.payload.null.behavior", "drop")], &[]).unwrap_err().to_string();
    assert!(err.contains("ignore, optional_bytes"), "{err}");
    let err = parse(&[("route.tombstone.on.empty.payload", "yes")], &[]).unwrap_err().to_string();
    assert!(err.contains("expected true or false"), "{err}");
    let err = parse(&[], &[("value.converter", "jsonschema")]).unwrap_err().to_string();
    assert!(
        err.contains("\"string\"")
            && err.contains("\"json\"")
            && err.contains("\"avro\"")
            && err.contains("\"protobuf\"")
            && err.contains("\"json-schema\" (io.confluent.connect.json.JsonSchemaConverter)"),
        "{err}"
    );
    let avro_keys = parse(&[], &[("key.converter", "avro")]).expect("Avro keys are written");
    assert_eq!(avro_keys.registry_key_converter(), Some("avro"));
    assert!(avro_keys.registry_converter().is_none());
    let proto_keys = parse(&[], &[("key.converter", "protobuf")]).expect("Protobuf keys");
    assert_eq!(proto_keys.registry_key_converter(), Some("protobuf"));
    let err = parse(&[], &[("key.converter", "json-schema")]).unwrap_err().to_string();
    assert!(err.contains("JSON Schema values only"), "{err}");
    let err = parse(&[], &[("topic.prefix", "a b")]).unwrap_err().to_string();
    assert!(err.contains("topic.prefix"), "{err}");
}

#[test]
fn options_envelope_or_expansion_with_string_value_converter_is_an_error_naming_the_fix() {
    let err = parse(&[("table.fields.additional.placement", "type:envelope:t")], &[]).unwrap_err();
    assert!(matches!(err, ConfigError::InvalidValue { .. }));
    assert!(err.to_string().contains("set value.converter = \"json\""), "{err}");
    let err = parse(&[("table.expand.json.payload", "true")], &[]).unwrap_err().to_string();
    assert!(err.contains("set value.converter = \"json\""), "{err}");
    assert!(parse(
        &[("table.fields.additional.placement", "type:envelope:t")],
        &[("value.converter", "json")]
    )
    .is_ok());
}

#[test]
fn options_placements_parse_with_aliases_and_reject_bad_entries() {
    let c = parse(
        &[(
            "table.fields.additional.placement",
            " type:HEADER:eventType , part:partition,agg:envelope ",
        )],
        &[("value.converter", "json")],
    )
    .unwrap();
    let got: Vec<(&str, PlacementKind, &str)> =
        c.placements.iter().map(|p| (p.column.as_str(), p.kind, p.alias.as_str())).collect();
    assert_eq!(
        got,
        [
            ("type", PlacementKind::Header, "eventType"),
            ("part", PlacementKind::Partition, "part"),
            ("agg", PlacementKind::Envelope, "agg")
        ]
    );
    for bad in ["type", "type:body", "a:header:b:c", "type::x"] {
        let err =
            parse(&[("table.fields.additional.placement", bad)], &[]).unwrap_err().to_string();
        assert!(err.contains("table.fields.additional.placement"), "{bad}: {err}");
    }
    let err = parse(
        &[("table.fields.additional.placement", "a:envelope:payload")],
        &[("value.converter", "json")],
    )
    .unwrap_err();
    assert!(err.to_string().contains("appears twice"), "{err}");
}

#[test]
fn options_invalid_regex_or_replacement_is_an_error_naming_the_key() {
    let err = parse(&[("route.topic.regex", "(?=x).*")], &[]).unwrap_err().to_string();
    assert!(err.contains("route.topic.regex") && err.contains("look-around"), "{err}");
    for (rep, needle) in [
        ("$2", "group 2"),
        ("${other}", "group `other`"),
        ("x$", "group index is missing"),
        ("a\\", "escaped"),
        ("$x", "illegal group reference"),
    ] {
        let err = parse(&[("route.topic.replacement", rep)], &[]).unwrap_err().to_string();
        assert!(err.contains("route.topic.replacement") && err.contains(needle), "{rep}: {err}");
    }
}

// ---- topic routing ----

#[test]
fn regex_that_does_not_match_the_whole_value_leaves_the_raw_value_as_topic() {
    let c = parse(
        &[("route.topic.regex", "order-(.*)"), ("route.topic.replacement", "orders.$1")],
        &[],
    )
    .unwrap();
    assert_eq!(c.topic_router.apply("order-eu", ("", "")), "orders.eu");
    assert_eq!(c.topic_router.apply("Customer", ("", "")), "Customer");
    assert_eq!(
        c.topic_router.apply("xorder-eu", ("", "")),
        "xorder-eu",
        "matches() needs the whole value"
    );
}

#[test]
fn replacement_supports_numbered_and_named_groups_and_backslash_escapes() {
    let c = parse(
        &[
            ("route.topic.regex", "(?<kind>[a-z]+)_(\\d+)"),
            ("route.topic.replacement", "t.${kind}.$2\\$$12"),
        ],
        &[],
    )
    .unwrap();
    // `$12` is group 1 followed by a literal 2 (there is no group 12).
    assert_eq!(c.topic_router.apply("order_7", ("", "")), "t.order.7$order2");
}

#[test]
fn replace_first_replaces_the_first_match_and_keeps_the_rest_like_java() {
    // matches() succeeds on the whole value, but replaceFirst() replaces the lazy first match.
    let c =
        parse(&[("route.topic.regex", "(.*?)"), ("route.topic.replacement", "p.")], &[]).unwrap();
    assert_eq!(c.topic_router.apply("abc", ("", "")), "p.abc");
    // A group that did not participate expands to nothing.
    let c = parse(&[("route.topic.regex", "(a)|(b)"), ("route.topic.replacement", "x$2y")], &[])
        .unwrap();
    assert_eq!(c.topic_router.apply("a", ("", "")), "xy");
}

#[test]
fn a_replacement_without_groups_is_a_fixed_topic() {
    let fixed = parse(&[("route.topic.replacement", "all\\$events")], &[]).unwrap();
    assert_eq!(fixed.topic_router.fixed_topic().as_deref(), Some("all$events"));
    let routed = parse(&[], &[]).unwrap();
    assert_eq!(routed.topic_router.fixed_topic(), None);
}

#[test]
fn topic_cache_returns_the_same_arc_for_the_same_route_value() {
    let mut r = router_for(&opts(&[]), &opts(&[]));
    let b = r.bind(&outbox_relation(), &NOT_NULL).unwrap();
    let rows = fixture_rows();
    let a = r.route(&b, &rows[0].tuple()).unwrap().topic;
    let again = r.route(&b, &rows[2].tuple()).unwrap().topic;
    assert!(Arc::ptr_eq(&a, &again));
    assert_eq!(&*a, "outbox.event.Order");
}

#[test]
fn illegal_topic_names_are_route_errors() {
    let rel = table_with(&[]);
    for (agg, needle) in [("has space", "contains ' '"), ("ü", "contains 'ü'")] {
        let err =
            route_one(&[], &[], &rel, &[Some(ID), Some(agg), Some("k"), Some("{}")]).unwrap_err();
        assert!(
            matches!(&err, RouteError::InvalidTopic { reason, .. } if reason.contains(needle)),
            "{err}"
        );
    }
    let long = "x".repeat(250);
    let err = route_one(
        &[("route.topic.replacement", "${routedByValue}")],
        &[],
        &rel,
        &[Some(ID), Some(&long), Some("k"), Some("{}")],
    )
    .unwrap_err();
    assert!(err.to_string().contains("at most 249"), "{err}");
    for dots in [".", ".."] {
        let err = route_one(
            &[("route.topic.replacement", "${routedByValue}")],
            &[],
            &rel,
            &[Some(ID), Some(dots), Some("k"), Some("{}")],
        )
        .unwrap_err();
        assert!(matches!(err, RouteError::InvalidTopic { .. }), "{dots}");
    }
    let ok = route_one(
        &[("route.topic.replacement", "${routedByValue}")],
        &[],
        &rel,
        &[Some(ID), Some(&"x".repeat(249)), Some("k"), Some("{}")],
    );
    assert!(ok.is_ok());
    let err = route_one(&[], &[], &rel, &[Some(ID), None, Some("k"), Some("{}")]).unwrap_err();
    assert!(
        matches!(err, RouteError::NullValue { ref column, .. } if column == "aggregatetype"),
        "{err}"
    );
}

#[test]
fn schema_and_table_in_the_replacement_are_the_rows_table_unless_the_regex_names_them() {
    let c =
        parse(&[("route.topic.replacement", "${schema}.events.${routedByValue}")], &[]).unwrap();
    assert!(c.topic_router.per_table());
    assert_eq!(c.topic_router.fixed_topic(), None);
    assert_eq!(c.topic_router.apply("Order", ("tenant_7", "outbox")), "tenant_7.events.Order");
    let t = parse(&[("route.topic.replacement", "${table}")], &[]).unwrap();
    assert_eq!(t.topic_router.apply("Order", ("tenant_7", "outbox")), "outbox");
    // A group of the regex named `schema` is the group, as in Java.
    let g = parse(
        &[("route.topic.regex", "(?<schema>.*)"), ("route.topic.replacement", "x.${schema}")],
        &[],
    )
    .unwrap();
    assert!(!g.topic_router.per_table());
    assert_eq!(g.topic_router.apply("Order", ("tenant_7", "outbox")), "x.Order");
}
