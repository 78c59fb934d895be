//! Unit tests: `table.expand.json.payload` rules.

use super::route_tests::{relation, route_one, text, ID};

// ---- JSON expansion ----

fn expanded(payload: &str, router: &[(&str, &str)], schemas: bool) -> String {
    let mut cfg = vec![("table.expand.json.payload", "true")];
    cfg.extend_from_slice(router);
    let s = if schemas { "true" } else { "false" };
    let rel =
        relation(&[("id", 2950), ("aggregatetype", 25), ("aggregateid", 25), ("payload", 114)]);
    let rec = route_one(
        &cfg,
        &[("value.converter", "json"), ("value.converter.schemas.enable", s)],
        &rel,
        &[Some(ID), Some("A"), Some("k"), Some(payload)],
    )
    .unwrap();
    text(&rec.value).unwrap().to_owned()
}

#[test]
fn expansion_drops_null_fields_and_empty_arrays_under_ignore() {
    assert_eq!(
        expanded(r#"{"a": null, "b": [], "c": {"d": null, "e": 1}}"#, &[], false),
        r#"{"c":{"e":1}}"#
    );
}

#[test]
fn expansion_keeps_nulls_as_optional_bytes_and_empty_arrays_as_optional_strings_when_configured() {
    let cfg = [
        ("table.json.payload.null.behavior", "optional_bytes"),
        ("table.json.payload.empty.array.behavior", "optional_string"),
    ];
    assert_eq!(
        expanded(r#"{"a": null, "b": [], "n": [null]}"#, &cfg, false),
        r#"{"a":null,"b":[],"n":[null]}"#
    );
    assert_eq!(
        expanded(r#"{"a": null, "b": []}"#, &cfg, true),
        r#"{"schema":{"type":"struct","fields":[{"type":"bytes","optional":true,"field":"a"},{"type":"array","items":{"type":"string","optional":true},"optional":true,"field":"b"}],"optional":true,"name":"payload"},"payload":{"a":null,"b":[]}}"#
    );
}

#[test]
fn expansion_merges_object_array_members_and_writes_absent_fields_as_null() {
    assert_eq!(
        expanded(r#"{"o": [{"x": 1}, {"y": "2"}, {"x": 3}]}"#, &[], false),
        r#"{"o":[{"x":1,"y":null},{"x":null,"y":"2"},{"x":3,"y":null}]}"#
    );
    // Merged member schemas are required (SchemaUtil.copySchemaBasics drops `optional`).
    assert!(expanded(r#"{"o": [{"x": 1}, {"y": "2"}]}"#, &[], true)
        .contains(r#""optional":false,"name":"payload.o"}"#));
}

#[test]
fn expansion_keeps_non_expandable_payloads_as_json_strings() {
    for (payload, want) in [
        (r#""s""#, r#""\"s\"""#),
        ("null", r#""null""#),
        ("[1, 2.5]", r#""[1, 2.5]""#),
        ("[1, 10000000000]", r#""[1, 10000000000]""#),
        (r#"{"a": [null]}"#, r#""{\"a\": [null]}""#),
        (r#"{"": 1}"#, r#""{\"\": 1}""#),
        ("  {}", r#""  {}""#),
    ] {
        assert_eq!(expanded(payload, &[], false), want, "{payload}");
    }
    assert_eq!(expanded("[]", &[], true), r#"{"schema":null,"payload":"[]"}"#);
}

#[test]
fn expansion_of_json_text_keeps_the_first_key_position_and_last_value_and_ignores_trailing_text() {
    assert_eq!(expanded(r#"{"b": 1, "a": 2, "b": 3} trailing"#, &[], false), r#"{"b":3,"a":2}"#);
}

#[test]
fn expansion_types_numbers_as_jackson_does() {
    assert_eq!(
        expanded(
            r#"{"i": 2147483647, "l": 2147483648, "d": 2.50, "e": 1e3, "n": -0.0}"#,
            &[],
            true
        ),
        r#"{"schema":{"type":"struct","fields":[{"type":"int32","optional":true,"field":"i"},{"type":"int64","optional":true,"field":"l"},{"type":"double","optional":true,"field":"d"},{"type":"double","optional":true,"field":"e"},{"type":"double","optional":true,"field":"n"}],"optional":true,"name":"payload"},"payload":{"i":2147483647,"l":2147483648,"d":2.5,"e":1000.0,"n":-0.0}}"#
    );
}

#[test]
fn expansion_respects_jacksons_nesting_and_number_length_limits() {
    let deep = format!("{}{}", "[".repeat(1001), "]".repeat(1001));
    assert!(expanded(&deep, &[], false).starts_with("\"[[["), "too deep: stays a string");
    let ok = format!("{{\"a\":{}1{}}}", "[".repeat(998), "]".repeat(998));
    assert!(expanded(&ok, &[], false).starts_with("{\"a\":[[["));
    let long = format!("{{\"n\": {}}}", "9".repeat(1001));
    assert!(expanded(&long, &[], false).starts_with("\"{"), "a 1001-digit number: stays a string");
}
