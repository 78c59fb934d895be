//! Unit tests: binding, placements, headers, keys, values, tombstones and converters.

use bytes::Bytes;

use super::convert::{java_double_string, write_str};
use super::golden_tests::{fixture_rows, opts, outbox_relation, router_for, NOT_NULL};
use super::*;
use crate::options::ConfigError;

pub(super) fn parse(
    router: &[(&str, &str)],
    debezium: &[(&str, &str)],
) -> Result<RouterConfig, ConfigError> {
    RouterConfig::parse(&opts(router), &opts(debezium))
}

pub(super) fn relation(cols: &[(&str, u32)]) -> Relation {
    Relation::for_test(1, "app", "events", cols)
}

pub(super) fn row(vals: &[Option<&str>]) -> Tuple {
    Tuple(
        vals.iter()
            .map(|v| v.map_or(Value::Null, |s| Value::Text(Bytes::copy_from_slice(s.as_bytes()))))
            .collect(),
    )
}

/// id uuid, aggregatetype text, aggregateid text, payload jsonb + extra columns.
pub(super) fn table_with(extra: &[(&str, u32)]) -> Relation {
    let mut cols =
        vec![("id", 2950), ("aggregatetype", 25), ("aggregateid", 25), ("payload", 3802)];
    cols.extend_from_slice(extra);
    relation(&cols)
}

pub(super) const ID: &str = "00000000-0000-0000-0000-0000000000aa";

pub(super) fn route_one(
    router: &[(&str, &str)],
    debezium: &[(&str, &str)],
    rel: &Relation,
    vals: &[Option<&str>],
) -> Result<Record, RouteError> {
    let mut r = router_for(&opts(router), &opts(debezium));
    let b = r.bind(rel, &[])?;
    r.route(&b, &row(vals))
}

pub(super) fn text(b: &Option<Bytes>) -> Option<&str> {
    b.as_deref().map(|v| std::str::from_utf8(v).unwrap())
}

// ---- binding ----

#[test]
fn bind_reports_missing_columns_with_column_role_and_table() {
    let r = router_for(&opts(&[("table.field.event.key", "aggregate_id")]), &opts(&[]));
    let err = r.bind(&outbox_relation(), &NOT_NULL).unwrap_err();
    assert_eq!(
        err,
        RouteError::MissingColumn {
            column: "aggregate_id".into(),
            role: "event key (`table.field.event.key`)",
            table: "public.outbox".into()
        }
    );
    assert!(err.to_string().contains("public.outbox") && err.to_string().contains("aggregate_id"));
    let r =
        router_for(&opts(&[("table.fields.additional.placement", "tenant:header")]), &opts(&[]));
    assert!(
        matches!(r.bind(&outbox_relation(), &NOT_NULL), Err(RouteError::MissingColumn { column, .. }) if column == "tenant")
    );
}

#[test]
fn missing_additional_columns_are_skipped_when_missing_is_ignore() {
    let mut r = router_for(
        &opts(&[
            ("table.fields.additional.placement", "tenant:header,type:header:eventType"),
            ("table.field.additional.missing", "ignore"),
        ]),
        &opts(&[]),
    );
    let b = r.bind(&outbox_relation(), &NOT_NULL).unwrap();
    let rec = r.route(&b, &fixture_rows()[0].tuple()).unwrap();
    let names: Vec<&str> = rec.headers.iter().map(|(n, _)| &**n).collect();
    assert_eq!(names, ["id", "eventType"]);
}

#[test]
fn bind_rejects_wrong_column_types_for_timestamp_partition_and_route() {
    let rel = table_with(&[("ts", 1184), ("part", 20)]);
    let r = router_for(&opts(&[("table.field.event.timestamp", "ts")]), &opts(&[]));
    assert!(
        matches!(r.bind(&rel, &[]), Err(RouteError::ColumnType { column, .. }) if column == "ts")
    );
    let r =
        router_for(&opts(&[("table.fields.additional.placement", "part:partition")]), &opts(&[]));
    let err = r.bind(&rel, &[]).unwrap_err();
    assert!(matches!(&err, RouteError::ColumnType { expected: "int4", .. }), "{err}");
    let r = router_for(&opts(&[("route.by.field", "part")]), &opts(&[]));
    assert!(matches!(r.bind(&rel, &[]), Err(RouteError::ColumnType { .. })));
}

#[test]
fn a_row_with_a_different_column_count_than_its_relation_is_an_error() {
    let mut r = router_for(&opts(&[]), &opts(&[]));
    let b = r.bind(&table_with(&[]), &[]).unwrap();
    let err = r.route(&b, &row(&[Some(ID), Some("A"), Some("k")])).unwrap_err();
    assert_eq!(err, RouteError::ColumnCount { table: "app.events".into(), expected: 4, found: 3 });
}

// ---- placements, timestamps, headers ----

#[test]
fn partition_placement_sets_the_record_partition() {
    let rel = table_with(&[("part", 23)]);
    let cfg = [("table.fields.additional.placement", "part:partition")];
    let rec = route_one(&cfg, &[], &rel, &[Some(ID), Some("A"), Some("k"), Some("{}"), Some("3")])
        .unwrap();
    assert_eq!(rec.partition, Some(3));
    let rec =
        route_one(&cfg, &[], &rel, &[Some(ID), Some("A"), Some("k"), Some("{}"), None]).unwrap();
    assert_eq!(rec.partition, None, "a NULL partition leaves it to the producer");
}

#[test]
fn event_timestamp_column_gives_the_record_timestamp_in_millis() {
    let mut rel = table_with(&[("occurred_at", 1114)]);
    let cfg = [("table.field.event.timestamp", "occurred_at")];
    let rec = route_one(
        &cfg,
        &[],
        &rel,
        &[Some(ID), Some("A"), Some("k"), Some("{}"), Some("2024-01-01 00:00:01.123456")],
    )
    .unwrap();
    assert_eq!(rec.timestamp_ms, Some(1_704_067_201_123));
    let rec =
        route_one(&cfg, &[], &rel, &[Some(ID), Some("A"), Some("k"), Some("{}"), None]).unwrap();
    assert_eq!(rec.timestamp_ms, None);
    rel.columns[4].type_modifier = 3; // timestamp(3): io.debezium.time.Timestamp, already millis
    let rec = route_one(
        &cfg,
        &[],
        &rel,
        &[Some(ID), Some("A"), Some("k"), Some("{}"), Some("1969-12-31 23:59:59.5")],
    )
    .unwrap();
    assert_eq!(rec.timestamp_ms, Some(-500));
}

#[test]
fn header_placements_follow_id_in_configuration_order_with_typed_text() {
    let rel = table_with(&[("n", 20), ("flag", 16), ("at", 1184), ("raw", 17), ("ts", 1114)]);
    let cfg = [(
        "table.fields.additional.placement",
        "ts:header,raw:header,at:header:when,flag:header,n:header",
    )];
    let vals = [
        Some(ID),
        Some("A"),
        Some("k"),
        Some("{}"),
        Some("-42"),
        Some("t"),
        Some("2024-02-29 23:59:59.12+00"),
        Some("\\x00ff"),
        Some("2024-01-01 00:00:00"),
    ];
    let rec = route_one(&cfg, &[], &rel, &vals).unwrap();
    let got: Vec<(&str, &str)> =
        rec.headers.iter().map(|(n, v)| (&**n, std::str::from_utf8(v).unwrap())).collect();
    assert_eq!(
        got,
        [
            ("id", ID),
            ("ts", "1704067200000000"),
            ("raw", "AP8="),
            ("when", "2024-02-29T23:59:59.12Z"),
            ("flag", "true"),
            ("n", "-42")
        ]
    );
    let rec = route_one(&cfg, &[("header.converter", "json")], &rel, &vals).unwrap();
    let got: Vec<&str> = rec.headers.iter().map(|(_, v)| std::str::from_utf8(v).unwrap()).collect();
    assert_eq!(
        got,
        [
            &format!("\"{ID}\"")[..],
            "1704067200000000",
            "\"AP8=\"",
            "\"2024-02-29T23:59:59.12Z\"",
            "true",
            "-42"
        ]
    );
}

#[test]
fn null_header_placement_is_omitted_by_the_simple_converter_and_null_under_json() {
    let rel = table_with(&[("tenant", 25)]);
    let cfg = [("table.fields.additional.placement", "tenant:header")];
    let vals = [Some(ID), Some("A"), Some("k"), Some("{}"), None];
    let rec = route_one(&cfg, &[], &rel, &vals).unwrap();
    assert_eq!(rec.headers.len(), 1);
    let rec = route_one(&cfg, &[("header.converter", "json")], &rel, &vals).unwrap();
    assert_eq!(&rec.headers[1].1[..], b"null");
    let rec = route_one(
        &cfg,
        &[("header.converter", "json"), ("header.converter.schemas.enable", "true")],
        &rel,
        &vals,
    )
    .unwrap();
    assert_eq!(
        &rec.headers[1].1[..],
        br#"{"schema":{"type":"string","optional":true},"payload":null}"#
    );
}

#[test]
fn extended_headers_come_first_with_topic_prefix_and_a_uuid_v7_run_id() {
    let rel = table_with(&[]);
    let mut r = router_for(
        &opts(&[]),
        &opts(&[("extended.headers.enabled", "true"), ("topic.prefix", "shop")]),
    );
    let b = r.bind(&rel, &[]).unwrap();
    let rec = r.route(&b, &row(&[Some(ID), Some("A"), Some("k"), Some("{}")])).unwrap();
    let got: Vec<(&str, &str)> =
        rec.headers.iter().map(|(n, v)| (&**n, std::str::from_utf8(v).unwrap())).collect();
    assert_eq!(got[0], ("__debezium.context.connectorLogicalName", "shop"));
    assert_eq!(got[1], ("__debezium.context.taskId", "0"));
    assert_eq!(got[2], ("__debezium.context.connectorName", "postgresql"));
    assert_eq!(got[3], ("__debezium.context.runId", r.run_id()));
    assert_eq!(uuid::Uuid::parse_str(got[3].1).unwrap().get_version_num(), 7);
    assert_eq!(got[4], ("id", ID));
    let rec2 = r.route(&b, &row(&[Some(ID), Some("A"), Some("k"), Some("{}")])).unwrap();
    assert_eq!(rec.headers[3], rec2.headers[3], "the run id is fixed per router");
}

#[test]
fn a_null_event_id_is_a_route_error() {
    let err = route_one(&[], &[], &table_with(&[]), &[None, Some("A"), Some("k"), Some("{}")])
        .unwrap_err();
    assert!(matches!(err, RouteError::NullValue { ref column, .. } if column == "id"), "{err}");
}

// ---- values, keys, tombstones ----

#[test]
fn string_converter_passes_key_value_and_id_through_without_copying() {
    let mut r = router_for(&opts(&[]), &opts(&[]));
    let b = r.bind(&table_with(&[]), &[]).unwrap();
    let tuple = row(&[Some(ID), Some("A"), Some("k-1"), Some("{\"a\": 1}")]);
    let rec = r.route(&b, &tuple).unwrap();
    let Value::Text(payload) = &tuple.0[3] else { unreachable!() };
    let Value::Text(key) = &tuple.0[2] else { unreachable!() };
    let Value::Text(id) = &tuple.0[0] else { unreachable!() };
    assert_eq!(rec.value.as_ref().unwrap().as_ptr(), payload.as_ptr());
    assert_eq!(rec.key.as_ref().unwrap().as_ptr(), key.as_ptr());
    assert_eq!(rec.headers[0].1.as_ptr(), id.as_ptr());
    assert_eq!(rec.event_id, ID);
}

#[test]
fn tombstone_option_turns_null_and_blank_payloads_into_null_values_under_every_converter() {
    let rel =
        relation(&[("id", 2950), ("aggregatetype", 25), ("aggregateid", 25), ("payload", 25)]);
    let convs: [&[(&str, &str)]; 3] = [
        &[],
        &[("value.converter", "json"), ("value.converter.schemas.enable", "false")],
        &[("value.converter", "json")],
    ];
    for conv in convs {
        for payload in [None, Some(""), Some(" \t\n")] {
            let rec = route_one(
                &[("route.tombstone.on.empty.payload", "true")],
                conv,
                &rel,
                &[Some(ID), Some("A"), Some("k"), payload],
            )
            .unwrap();
            assert_eq!(rec.value, None, "{conv:?} {payload:?}");
            assert_eq!(text(&rec.key), Some("k"), "the key is kept");
        }
        let rec = route_one(
            &[("route.tombstone.on.empty.payload", "true")],
            conv,
            &rel,
            &[Some(ID), Some("A"), Some("k"), Some(" x ")],
        )
        .unwrap();
        assert!(rec.value.is_some());
    }
}

#[test]
fn null_payload_without_the_tombstone_option_depends_on_the_value_converter() {
    let rel = table_with(&[]);
    let vals = [Some(ID), Some("A"), Some("k"), None];
    assert_eq!(route_one(&[], &[], &rel, &vals).unwrap().value, None);
    let json = [("value.converter", "json"), ("value.converter.schemas.enable", "false")];
    assert_eq!(text(&route_one(&[], &json, &rel, &vals).unwrap().value), Some("null"));
    let rec = route_one(&[], &[("value.converter", "json")], &rel, &vals).unwrap();
    assert_eq!(
        text(&rec.value),
        Some(
            r#"{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":null}"#
        )
    );
    let env = [("table.fields.additional.placement", "aggregatetype:envelope:t")];
    assert_eq!(
        text(&route_one(&env, &json, &rel, &vals).unwrap().value),
        Some(r#"{"payload":null,"t":"A"}"#)
    );
    // AvroConverter serializes a null value as no bytes, and registers nothing; with envelope
    // placements the value is a struct whose payload is null.
    let avro = [("value.converter", "avro")];
    let rec = route_one(&[], &avro, &rel, &vals).unwrap();
    assert_eq!((rec.value, rec.value_schema), (None, None));
    let rec = route_one(&env, &avro, &rel, &vals).unwrap();
    assert!(rec.value.is_some() && rec.value_schema.is_some(), "{rec:?}");
}

#[test]
fn bytea_key_and_payload_are_raw_bytes_under_the_string_converter() {
    let rel =
        relation(&[("id", 2950), ("aggregatetype", 25), ("aggregateid", 17), ("payload", 17)]);
    let rec =
        route_one(&[], &[], &rel, &[Some(ID), Some("A"), Some("\\x00ff10"), Some("\\xdeadBEEF")])
            .unwrap();
    assert_eq!(rec.key.as_deref(), Some(&[0x00, 0xff, 0x10][..]));
    assert_eq!(rec.value.as_deref(), Some(&[0xde, 0xad, 0xbe, 0xef][..]));
    let rec = route_one(
        &[],
        &[("key.converter", "json"), ("key.converter.schemas.enable", "false")],
        &rel,
        &[Some(ID), Some("A"), Some("\\x00ff10"), Some("\\x")],
    )
    .unwrap();
    assert_eq!(text(&rec.key), Some("\"AP8Q\""), "JsonConverter writes BYTES as Base64");
    let err =
        route_one(&[], &[], &rel, &[Some(ID), Some("A"), Some("\\x0"), Some("\\x")]).unwrap_err();
    assert!(
        matches!(err, RouteError::InvalidValue { ref column, .. } if column == "aggregateid"),
        "{err}"
    );
}

#[test]
fn int8_key_is_its_digits_under_string_and_json_converters() {
    let rel =
        relation(&[("id", 20), ("aggregatetype", 25), ("aggregateid", 20), ("payload", 3802)]);
    let vals = [Some("9007199254740993"), Some("A"), Some("-12"), Some("{}")];
    let rec = route_one(&[], &[], &rel, &vals).unwrap();
    assert_eq!((text(&rec.key), rec.event_id.as_str()), (Some("-12"), "9007199254740993"));
    assert_eq!(&rec.headers[0].1[..], b"9007199254740993");
    let rec = route_one(&[], &[("key.converter", "json")], &rel, &vals).unwrap();
    assert_eq!(
        text(&rec.key),
        Some(r#"{"schema":{"type":"int64","optional":true},"payload":-12}"#)
    );
}

#[test]
fn envelope_with_schemas_is_named_after_the_first_routed_value_and_carries_the_version() {
    let rel = table_with(&[("v", 23)]);
    let cfg = [
        ("table.fields.additional.placement", "aggregatetype:envelope:type"),
        ("table.field.event.schema.version", "v"),
    ];
    let mut r =
        router_for(&opts(&cfg), &opts(&[("value.converter", "json"), ("topic.prefix", "dbz")]));
    let b = r.bind(&rel, &[true, true, true, false, true]).unwrap();
    let first =
        r.route(&b, &row(&[Some(ID), Some("Order"), Some("k"), Some("{}"), Some("2")])).unwrap();
    let second =
        r.route(&b, &row(&[Some(ID), Some("Customer"), Some("k"), Some("{}"), Some("2")])).unwrap();
    let want = |t: &str| {
        format!(
            r#"{{"schema":{{"type":"struct","fields":[{{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"}},{{"type":"string","optional":false,"field":"type"}}],"optional":false,"name":"dbz.app.events.Order.Value","version":2}},"payload":{{"payload":"{{}}","type":"{t}"}}}}"#
        )
    };
    assert_eq!(text(&first.value).unwrap(), want("Order"));
    assert_eq!(text(&second.value).unwrap(), want("Customer"));
}

// ---- converters ----

#[test]
fn jackson_string_escaping_matches_json_converter() {
    let mut out = Vec::new();
    write_str(&mut out, "a\"b\\c/\u{8}\u{c}\n\r\t\u{1}\u{1f}\u{7f} é – 😀");
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "\"a\\\"b\\\\c/\\b\\f\\n\\r\\t\\u0001\\u001F\u{7f} é – \\uD83D\\uDE00\""
    );
}

proptest::proptest! {
    /// The run-copying escaper against Jackson's rule stated per character, on strings long
    /// enough to cross its 16-byte chunks with escapes anywhere.
    #[test]
    fn jackson_string_escaping_matches_the_per_character_rule(
        s in "([a-z\u{7f}é–]{0,40}[\"\\\\\u{0}-\u{1f}😀]?){0,5}"
    ) {
        let mut want = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => want.push_str("\\\""),
                '\\' => want.push_str("\\\\"),
                '\u{8}' => want.push_str("\\b"),
                '\u{c}' => want.push_str("\\f"),
                '\n' => want.push_str("\\n"),
                '\r' => want.push_str("\\r"),
                '\t' => want.push_str("\\t"),
                c if (c as u32) < 0x20 => want.push_str(&format!("\\u{:04X}", c as u32)),
                c if (c as u32) > 0xFFFF => {
                    for u in c.encode_utf16(&mut [0; 2]) {
                        want.push_str(&format!("\\u{:04X}", u));
                    }
                }
                c => want.push(c),
            }
        }
        want.push('"');
        let mut out = Vec::new();
        write_str(&mut out, &s);
        proptest::prop_assert_eq!(String::from_utf8(out).unwrap(), want);
    }
}

#[test]
fn doubles_are_written_as_java_double_to_string() {
    let cases = [
        (12.5, "12.5"),
        (0.1, "0.1"),
        (2.5, "2.5"),
        (1000.0, "1000.0"),
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (1.5e-7, "1.5E-7"),
        (1e-7, "1.0E-7"),
        (0.001, "0.001"),
        (1e-4, "1.0E-4"),
        (9999999.0, "9999999.0"),
        (1e7, "1.0E7"),
        (1.2345678901234568e29, "1.2345678901234568E29"),
        (std::f64::consts::PI, "3.141592653589793"),
        (-42.25, "-42.25"),
        (5e-324, "4.9E-324"),
        (f64::MAX, "1.7976931348623157E308"),
        (1e23, "1.0E23"),
    ];
    for (v, want) in cases {
        assert_eq!(java_double_string(v), want, "{v:e}");
    }
}

#[test]
fn timestamptz_values_become_debezium_zoned_timestamps() {
    use super::column::{format_zoned, parse_timestamp};
    let cases = [
        ("2024-01-01 00:00:01+00", "2024-01-01T00:00:01Z"),
        ("2024-01-01 00:00:01.500+00", "2024-01-01T00:00:01.5Z"),
        ("2024-01-01 02:00:00.000001+02", "2024-01-01T00:00:00.000001Z"),
        ("2024-01-01 05:30:00+05:30", "2024-01-01T00:00:00Z"),
        ("0001-01-01 00:00:00+00 BC", "0000-01-01T00:00:00Z"),
        ("10000-01-01 00:00:00+00", "+10000-01-01T00:00:00Z"),
        ("1969-12-31 23:59:59.999999+00", "1969-12-31T23:59:59.999999Z"),
    ];
    for (pg, want) in cases {
        assert_eq!(format_zoned(parse_timestamp(pg.as_bytes(), true).unwrap()), want, "{pg}");
    }
    assert!(parse_timestamp(b"infinity", true).unwrap_err().contains("infinite"));
    assert!(parse_timestamp(b"2024-01-01 00:00:00", true).is_err(), "timestamptz needs an offset");
}

#[test]
fn router_binding_and_record_can_move_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Router>();
    send_sync::<Binding>();
    send_sync::<Record>();
    send_sync::<RouteError>();
    send_sync::<RouterConfig>();
}

#[test]
fn route_trace_headers_follow_the_header_converter_and_context_only() {
    const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let rel = table_with(&[("tracingspancontext", 25)]);
    let vals =
        |ctx: Option<&'static str>| vec![Some(ID), Some("Order"), Some("o-1"), Some("{}"), ctx];
    let header = |r: &Record, n: &str| {
        r.headers
            .iter()
            .find(|(h, _)| &**h == n)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    };
    // JsonConverter headers: Connect's STRING header as JSON text, as Debezium's would be.
    let json = [("header.converter", "json")];
    let r = route_one(&[], &json, &rel, &vals(Some(TP))).unwrap();
    assert_eq!(header(&r, "traceparent"), Some(format!("\"{TP}\"")));
    // No context: no trace by default; a new sampled root with context-only off.
    let r = route_one(&[], &[], &rel, &vals(None)).unwrap();
    assert_eq!((header(&r, "traceparent"), r.trace), (None, None));
    let off = [("tracing.with.context.field.only", "false")];
    let r = route_one(&off, &[], &rel, &vals(None)).unwrap();
    let tp = header(&r, "traceparent").expect("a new trace");
    assert!(tp.starts_with("00-") && tp.ends_with("-01") && tp.len() == 55, "{tp}");
    assert_eq!(r.trace.unwrap().parent, None);
    // A placement named traceparent keeps its bytes, alone.
    let placed = [("table.fields.additional.placement", "tracingspancontext:header:traceparent")];
    let r = route_one(&placed, &[], &rel, &vals(Some("traceparent=x"))).unwrap();
    let tps: Vec<&str> = r
        .headers
        .iter()
        .filter(|(h, _)| &**h == "traceparent")
        .map(|(_, v)| std::str::from_utf8(v).unwrap())
        .collect();
    assert_eq!(tps, ["traceparent=x"]);
}

/// docs/envelopes.md, "The example row as Avro": its bytes and its schema, as written there.
#[test]
fn the_avro_example_of_the_envelopes_doc_is_what_the_router_writes() {
    let rel = table_with(&[("type", 25)]);
    let payload = r#"{"lines": [{"qty": 2, "sku": "A-1"}], "total": 12.5}"#;
    let vals = [Some(ID), Some("Order"), Some("order-1"), Some(payload), Some("OrderCreated")];
    let router = [
        ("table.fields.additional.placement", "type:header:eventType"),
        ("table.expand.json.payload", "true"),
    ];
    let rec = route_one(&router, &[("value.converter", "avro")], &rel, &vals).unwrap();
    let body: Vec<String> =
        rec.value.as_ref().unwrap()[5..].iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        body.join(" "),
        "02 02 02 02 02 04 02 06 41 2d 31 00 02 00 00 00 00 00 00 29 40",
        "the doc's value bytes after the frame"
    );
    let schema = r#"["null",{"type":"record","name":"payload","fields":[{"name":"lines","type":["null",{"type":"array","items":["null",{"type":"record","name":"lines","namespace":"payload","fields":[{"name":"qty","type":["null","int"],"default":null},{"name":"sku","type":["null","string"],"default":null}],"connect.name":"payload.lines"}]}],"default":null},{"name":"total","type":["null","double"],"default":null}],"connect.name":"payload"}]"#;
    assert_eq!(rec.value_schema.as_deref(), Some(schema));
}
