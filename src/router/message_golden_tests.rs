//! Golden parity for the table-less outbox, without a database: every `pg_logical_emit_message`
//! of `tests/fixtures/debezium/messages/` is decoded in the order PostgreSQL sends it, selected
//! by the golden configuration's prefix list and routed under its options; topic, key, value
//! and headers must equal what Debezium 3.6.3 put on the broker, byte for byte, and the
//! Connect-side files' bytes under every converter. Where Debezium 3.6.3 stopped, walrelay must
//! refuse the same message with a reason (the relay then dead-letters it or stops at it): each
//! such difference is stated here.

use std::collections::HashMap;

use bytes::Bytes;
use serde_json::Value as J;

use super::golden_tests::b64;
use super::*;
use crate::message_selection::{MessageSelection, Verdict};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/debezium/messages");
const INC: (&str, &str) = ("message.prefix.include.list", "outbox");

/// One `pg_logical_emit_message` call of a fixture file.
#[derive(Debug, Clone)]
struct Emitted {
    transactional: bool,
    prefix: String,
    content: Bytes,
}

impl Emitted {
    fn id(&self) -> Option<String> {
        message_event_id(&self.content)
    }
}

/// The messages of `sql` in the order pgoutput sends them: a non-transactional one at once, a
/// transactional one at its transaction's COMMIT (autocommit: at once), none of a rolled-back
/// transaction's transactional ones.
fn decoded_order(sql: &str) -> Vec<Emitted> {
    let (mut out, mut open): (Vec<Emitted>, Option<Vec<Emitted>>) = (Vec::new(), None);
    for statement in statements(sql) {
        match statement.as_str() {
            "BEGIN" => open = Some(Vec::new()),
            "COMMIT" => out.extend(open.take().expect("COMMIT after BEGIN")),
            "ROLLBACK" => open = None,
            s => {
                let Some(m) = parse_emit(s) else { continue };
                match open.as_mut() {
                    Some(tx) if m.transactional => tx.push(m),
                    _ => out.push(m),
                }
            }
        }
    }
    out
}

/// Statements, split at `;` outside quotes and `$j$` strings; comment lines dropped.
fn statements(sql: &str) -> Vec<String> {
    let body: String = sql
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .map(|l| format!("{l}\n"))
        .collect();
    let (mut out, mut cur, mut rest) = (Vec::new(), String::new(), body.as_str());
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("$j$") {
            let end = after.find("$j$").expect("closed $j$") + 3;
            cur.push_str(&rest[..end + 3]);
            rest = &after[end..];
        } else if c == '\'' {
            let end = rest[1..].find('\'').expect("closed quote") + 2;
            cur.push_str(&rest[..end]);
            rest = &rest[end..];
        } else if c == ';' {
            out.push(std::mem::take(&mut cur).trim().to_string());
            rest = &rest[1..];
        } else {
            cur.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

/// `SELECT pg_logical_emit_message(<bool>, '<prefix>', <'text' | $j$text$j$>)`.
fn parse_emit(statement: &str) -> Option<Emitted> {
    let args = statement.strip_prefix("SELECT pg_logical_emit_message(")?.strip_suffix(')')?;
    let (flag, rest) = args.split_once(", ")?;
    let rest = rest.strip_prefix('\'')?;
    let (prefix, rest) = rest.split_once("', ")?;
    let content = match rest.strip_prefix("$j$") {
        Some(r) => r.strip_suffix("$j$")?.to_string(),
        None => rest.strip_prefix('\'')?.strip_suffix('\'')?.replace("''", "'"),
    };
    Some(Emitted {
        transactional: flag == "true",
        prefix: prefix.to_string(),
        content: Bytes::from(content),
    })
}

fn fixture() -> Vec<Emitted> {
    decoded_order(&std::fs::read_to_string(format!("{DIR}/messages_fixture.sql")).unwrap())
}

/// The messages of `-- @case NAME` in messages_fatal_cases.sql.
fn case(name: &str) -> Vec<Emitted> {
    let sql = std::fs::read_to_string(format!("{DIR}/messages_fatal_cases.sql")).unwrap();
    let marker = format!("-- @case {name}\n");
    let start = sql.find(&marker).unwrap_or_else(|| panic!("no case {name}")) + marker.len();
    let end = sql[start..].find("-- @case ").map_or(sql.len(), |e| start + e);
    decoded_order(&sql[start..end])
}

fn golden(name: &str) -> Vec<J> {
    let path = format!("{DIR}/{name}");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("read {path}: {e}"))
        .lines()
        .map(|l| serde_json::from_str(l).expect("golden line is JSON"))
        .collect()
}

fn opts(pairs: &[(&str, &str)]) -> Options {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

const JSON_VALUE: [(&str, &str); 2] =
    [("value.converter", "json"), ("value.converter.schemas.enable", "false")];

/// `[router]` and `[debezium]` for each golden configuration (the fixture README's tables).
fn golden_config(name: &str) -> (Options, Options) {
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut d = vec![INC];
        d.extend_from_slice(extra);
        opts(&d)
    };
    let additional = ("table.fields.additional.placement", "type:header:eventType");
    match name {
        // Debezium's default extended.headers.enabled = true: message records carry none of
        // them anyway (README rule H1), so both goldens are the same bytes.
        "messages_defaults" => {
            (opts(&[]), with(&[("extended.headers.enabled", "true"), ("topic.prefix", "dbz")]))
        }
        "messages_no_extended_headers" => (opts(&[]), with(&[])),
        "messages_additional_fields" => (opts(&[additional]), with(&[])),
        "messages_additional_fields_envelope" => (
            opts(&[(
                "table.fields.additional.placement",
                "type:header:eventType,aggregatetype:envelope:aggType",
            )]),
            with(&JSON_VALUE),
        ),
        "messages_expand_json_payload" => {
            (opts(&[("table.expand.json.payload", "true")]), with(&JSON_VALUE))
        }
        "messages_json_converters" => (
            opts(&[]),
            with(&[
                ("key.converter", "json"),
                ("key.converter.schemas.enable", "false"),
                JSON_VALUE[0],
                JSON_VALUE[1],
                ("header.converter", "json"),
            ]),
        ),
        "messages_json_schemas_converters" => {
            (opts(&[]), with(&[("key.converter", "json"), ("value.converter", "json")]))
        }
        "messages_fields_null_include" => (opts(&[]), with(&[("fields.null.include", "true")])),
        "messages_tombstone_on_empty_payload" => {
            (opts(&[("route.tombstone.on.empty.payload", "true")]), with(&[]))
        }
        "messages_prefix_exclude_list" => {
            (opts(&[]), opts(&[("message.prefix.exclude.list", "audit")]))
        }
        "messages_prefix_include_regex_list" => {
            (opts(&[]), opts(&[("message.prefix.include.list", r" outbox , outbox\.v[0-9]+ ")]))
        }
        other => panic!("no configuration for golden {other}"),
    }
}

fn router_for(r: &Options, d: &Options) -> Router {
    Router::new(RouterConfig::parse(r, d).expect("golden configuration parses"))
}

/// Debezium relays non-transactional messages; the parity runs relay them too.
fn selection(d: &Options) -> MessageSelection {
    MessageSelection::parse(d, Some("relay")).unwrap().expect("a prefix list is set")
}

/// The messages walrelay relays under `d`'s selection, in the order it relays them.
fn selected(messages: &[Emitted], d: &Options) -> Vec<Emitted> {
    let s = selection(d);
    messages
        .iter()
        .filter(|m| s.verdict(m.transactional, &m.prefix) == Verdict::Event)
        .cloned()
        .collect()
}

/// Compares one message record with one line of a `.jsonl` golden, as rows are compared.
/// Message records carry no `__debezium.context.*` headers, so there is no run id to match.
fn assert_record(rec: &Record, g: &J, ctx: &str) {
    super::golden_tests::assert_record(rec, g, ctx, "(none: message records carry no run id)");
}

/// Routes `messages` (already selected) and compares them, in order, with `NAME.jsonl`.
/// Returns the ids compared.
fn check_golden(name: &str, messages: &[Emitted]) -> Vec<String> {
    let (r, d) = golden_config(name);
    let mut router = router_for(&r, &d);
    let want = golden(&format!("{name}.jsonl"));
    let want_ids: Vec<String> = want
        .iter()
        .map(|g| g["event_id_header"].as_str().unwrap().trim_matches('"').to_owned())
        .collect();
    let ours: Vec<String> = messages.iter().map(|m| m.id().unwrap()).collect();
    assert_eq!(ours, want_ids, "{name}: the messages relayed and their order");
    for (m, g) in messages.iter().zip(&want) {
        let ctx = format!("{name}, message {}", m.id().unwrap());
        let rec = router.route_message(&m.content).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_record(&rec, g, &ctx);
    }
    ours
}

const MAIN: [&str; 11] = [
    "messages_defaults",
    "messages_no_extended_headers",
    "messages_additional_fields",
    "messages_additional_fields_envelope",
    "messages_expand_json_payload",
    "messages_json_converters",
    "messages_json_schemas_converters",
    "messages_fields_null_include",
    "messages_tombstone_on_empty_payload",
    "messages_prefix_exclude_list",
    "messages_prefix_include_regex_list",
];

#[test]
fn message_goldens_match_byte_for_byte_for_every_main_configuration() {
    let all = fixture();
    for name in MAIN {
        let (_, d) = golden_config(name);
        let ids = check_golden(name, &selected(&all, &d));
        let expected = match name {
            "messages_prefix_exclude_list" => 31,
            "messages_prefix_include_regex_list" => 30,
            _ => 29,
        };
        assert_eq!(ids.len(), expected, "{name}");
    }
}

#[test]
fn message_order_is_the_order_pgoutput_decodes_them_as_debezium_relayed_them() {
    let ids: Vec<String> =
        selected(&fixture(), &opts(&[INC])).iter().map(|m| m.id().unwrap()).collect();
    let at = |n: &str| ids.iter().position(|i| i.ends_with(n));
    // 24 is non-transactional inside 23's transaction: decoded before 23's commit.
    assert!(at("0024") < at("0023"), "{ids:?}");
    // 25 (non-transactional) is relayed although its transaction rolled back; 26 is not.
    assert!(at("0025").is_some() && at("0026").is_none(), "{ids:?}");
    // Prefix outbox: OUTBOX (19) in, outboxes (40), outbox.v2 (41), audit (42, 43) out.
    assert!(at("0019").is_some() && at("0040").is_none() && at("0041").is_none());
}

/// With the JVM's default charset US-ASCII (JDK 17 in a C/POSIX locale), Debezium turns every
/// non-ASCII byte of message 08 into U+FFFD; walrelay always reads content as UTF-8 and equals
/// the UTF-8 run. Every other message is the same bytes.
#[test]
fn message_08_differs_from_the_posix_locale_golden_because_walrelay_always_reads_utf8() {
    let (r, d) = golden_config("messages_defaults");
    let mut router = router_for(&r, &d);
    let posix = golden("messages_defaults_jdk17_posix_locale.jsonl");
    let utf8 = golden("messages_defaults.jsonl");
    let messages = selected(&fixture(), &d);
    for (m, (p, u)) in messages.iter().zip(posix.iter().zip(&utf8)) {
        let id = m.id().unwrap();
        let rec = router.route_message(&m.content).unwrap();
        assert_record(&rec, u, &format!("UTF-8 golden, message {id}"));
        if id.ends_with("0008") {
            assert_ne!(p["key_b64"], u["key_b64"]);
            println!(
                "message {id}: walrelay sends key {:?}; Debezium under a US-ASCII default charset \
                 sent {:?} (documented difference: content is read as UTF-8)",
                u["key_utf8"], p["key_utf8"]
            );
        } else {
            assert_record(&rec, p, &format!("POSIX-locale golden, message {id}"));
        }
    }
}

/// The Connect-side files: the key, value and header bytes of every message under every
/// converter (StringConverter, JsonConverter with and without schemas, SimpleHeaderConverter).
#[test]
fn message_connect_side_bytes_match_every_converter_for_every_main_configuration() {
    let all = fixture();
    let variants = [
        ("string", "simple", None),
        ("json", "json", Some("false")),
        ("json-schemas", "json-schemas", Some("true")),
    ];
    let mut checked = 0;
    for name in MAIN {
        let (r, base) = golden_config(name);
        let messages: HashMap<String, Emitted> =
            selected(&all, &base).into_iter().map(|m| (m.id().unwrap(), m)).collect();
        // walrelay refuses StringConverter for a struct value built by the router (Debezium
        // would write `Struct{…}` of the envelope); those values are not compared as strings.
        let struct_value = r.contains_key("table.expand.json.payload")
            || r.get("table.fields.additional.placement").is_some_and(|p| p.contains("envelope"));
        for (conv, hconv, schemas) in variants {
            let mut d: Options =
                base.iter().filter(|(k, _)| !k.contains("converter")).map(clone_pair).collect();
            if let Some(s) = schemas {
                d.insert("key.converter".into(), "json".into());
                d.insert("key.converter.schemas.enable".into(), s.into());
                d.insert("header.converter".into(), "json".into());
                d.insert("header.converter.schemas.enable".into(), s.into());
            }
            let compare_value = !(conv == "string" && struct_value);
            let value_conv = if conv == "string" && !struct_value { "string" } else { "json" };
            d.insert("value.converter".into(), value_conv.into());
            d.insert("value.converter.schemas.enable".into(), schemas.unwrap_or("false").into());
            let mut router = router_for(&r, &d);
            for c in golden(&format!("{name}.connect.jsonl")) {
                let headers = c["headers"].as_array().unwrap();
                let id = headers.iter().find(|h| h["key"] == "id").unwrap()["value"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                let ctx = format!("{name} ({conv}/{hconv}), message {id}");
                let rec = router.route_message(&messages[&id].content).unwrap();
                assert_eq!(&*rec.topic, c["topic"].as_str().unwrap(), "{ctx}: topic");
                assert_eq!(
                    rec.key.as_deref(),
                    b64(&c["key_b64_by_converter"][conv]).as_deref(),
                    "{ctx}: key"
                );
                if compare_value {
                    assert_eq!(
                        rec.value.as_deref().map(String::from_utf8_lossy),
                        b64(&c["value_b64_by_converter"][conv])
                            .as_deref()
                            .map(String::from_utf8_lossy),
                        "{ctx}: value"
                    );
                }
                assert_eq!(rec.headers.len(), headers.len(), "{ctx}: header count");
                for ((hname, bytes), h) in rec.headers.iter().zip(headers) {
                    assert_eq!(&**hname, h["key"].as_str().unwrap(), "{ctx}: header order");
                    let want = b64(&h["bytes_b64_by_header_converter"][hconv]);
                    assert_eq!(Some(bytes.to_vec()), want, "{ctx}: header {hname}");
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 3 * (9 * 29 + 31 + 30));
}

fn clone_pair((k, v): (&String, &String)) -> (String, String) {
    (k.clone(), v.clone())
}

/// What Debezium 3.6.3 did with a case's message `...02`.
enum Debezium {
    /// Relayed it: walrelay must produce the same bytes.
    Relayed,
    /// Stopped on it with this exception: walrelay refuses the message with a reason containing
    /// the text given (the relay dead-letters it, or stops at it with its LSN).
    Died(&'static str, &'static str),
}

struct Case {
    golden: &'static str,
    section: &'static str,
    router: &'static [(&'static str, &'static str)],
    debezium: &'static [(&'static str, &'static str)],
    outcome: Debezium,
}

const CASES: &[Case] = &[
    Case {
        golden: "content_not_json",
        section: "content_not_json",
        router: &[],
        debezium: &[],
        outcome: Debezium::Died(
            "Unable to parse logical decoding message content JSON string",
            "starts with 'h'",
        ),
    },
    Case {
        golden: "content_invalid_json",
        section: "content_invalid_json",
        router: &[],
        debezium: &[],
        outcome: Debezium::Died("JsonEOFException: Unexpected end-of-input", "is not JSON"),
    },
    Case {
        golden: "content_leading_whitespace",
        section: "content_leading_whitespace",
        router: &[],
        debezium: &[],
        outcome: Debezium::Died(
            "Unable to parse logical decoding message content JSON string",
            "starts with ' '",
        ),
    },
    Case {
        golden: "content_json_array",
        section: "content_json_array",
        router: &[],
        debezium: &[],
        outcome: Debezium::Died("Not a struct schema", "a JSON array, not an object"),
    },
    Case {
        golden: "content_empty_json_array",
        section: "content_empty_json_array",
        router: &[],
        debezium: &[],
        outcome: Debezium::Died("NullPointerException", "a JSON array, not an object"),
    },
    Case {
        golden: "content_json_string",
        section: "content_json_string",
        router: &[],
        debezium: &[],
        outcome: Debezium::Died(
            "Unable to parse logical decoding message content JSON string",
            "starts with '\"'",
        ),
    },
    Case {
        golden: "content_empty",
        section: "content_empty",
        router: &[],
        debezium: &[],
        outcome: Debezium::Died(
            "Unable to parse logical decoding message content JSON string ''",
            "it is empty",
        ),
    },
    Case {
        golden: "content_empty_object",
        section: "content_empty_object",
        router: &[],
        debezium: &[],
        outcome: Debezium::Died("Unable to find payload field payload", "no member `payload`"),
    },
    Case {
        golden: "payload_missing",
        section: "payload_missing",
        router: &[],
        debezium: &[],
        outcome: Debezium::Died("Unable to find payload field payload", "no member `payload`"),
    },
    Case {
        golden: "payload_null",
        section: "payload_null",
        router: &[],
        debezium: &[],
        outcome: Debezium::Died("Unable to find payload field payload", "no member `payload`"),
    },
    Case {
        golden: "payload_null_fields_null_include",
        section: "payload_null",
        router: &[],
        debezium: &[("fields.null.include", "true")],
        outcome: Debezium::Relayed,
    },
    Case {
        golden: "payload_null_fields_null_include_json",
        section: "payload_null",
        router: &[],
        debezium: &[("fields.null.include", "true"), JSON_VALUE[0], JSON_VALUE[1]],
        outcome: Debezium::Relayed,
    },
    Case {
        golden: "id_missing",
        section: "id_missing",
        router: &[],
        debezium: &[],
        outcome: Debezium::Died("id is not a valid field name", "no member `id`"),
    },
    Case {
        golden: "aggregatetype_missing",
        section: "aggregatetype_missing",
        router: &[],
        debezium: &[],
        outcome: Debezium::Died(
            "aggregatetype is not a valid field name",
            "no member `aggregatetype`",
        ),
    },
    Case {
        golden: "aggregateid_missing",
        section: "aggregateid_missing",
        router: &[],
        debezium: &[],
        outcome: Debezium::Died("aggregateid is not a valid field name", "no member `aggregateid`"),
    },
    Case {
        golden: "aggregatetype_number",
        section: "aggregatetype_number",
        router: &[],
        debezium: &[],
        outcome: Debezium::Died(
            "Field 'aggregatetype' is not of type STRING",
            "`aggregatetype` of the message content is a JSON integer (INT32), but the topic route",
        ),
    },
    Case {
        golden: "number_beyond_int64",
        section: "number_beyond_int64",
        router: &[],
        debezium: &[],
        outcome: Debezium::Died(
            "Invalid Java object for schema with type FLOAT64",
            "`payload.n` is the integer 9223372036854775808",
        ),
    },
    Case {
        golden: "array_mixed_types",
        section: "array_mixed_types",
        router: &[],
        debezium: &[],
        outcome: Debezium::Died(
            "Field is not a homogenous array (1 x STRING).",
            "Field is not a homogenous array (1 x STRING).",
        ),
    },
    Case {
        golden: "array_int_and_double",
        section: "array_int_and_double",
        router: &[],
        debezium: &[],
        outcome: Debezium::Died(
            "Field is not a homogenous array (1 x 2.5), different number types",
            "Field is not a homogenous array (1 x 2.5), different number types",
        ),
    },
    Case {
        golden: "array_int32_and_int64",
        section: "array_int32_and_int64",
        router: &[],
        debezium: &[],
        outcome: Debezium::Died(
            "different number types (Schema{INT32} x Schema{INT64})",
            "(1 x 3000000000), different number types",
        ),
    },
    Case {
        golden: "array_only_nulls",
        section: "array_only_nulls",
        router: &[],
        debezium: &[],
        outcome: Debezium::Died(
            "Array '' has unrecognized member schema.",
            "Array '' has unrecognized member schema.",
        ),
    },
    Case {
        golden: "empty_field_name",
        section: "empty_field_name",
        router: &[],
        debezium: &[],
        outcome: Debezium::Died("fieldName cannot be null.", "fieldName cannot be null."),
    },
    Case {
        golden: "type_missing",
        section: "type_missing",
        router: &[],
        debezium: &[],
        outcome: Debezium::Relayed,
    },
    Case {
        golden: "type_missing_additional_fields",
        section: "type_missing",
        router: &[("table.fields.additional.placement", "type:header:eventType")],
        debezium: &[],
        outcome: Debezium::Died("type is not a valid field name", "no member `type`"),
    },
    Case {
        golden: "type_missing_additional_fields_missing_ignore",
        section: "type_missing",
        router: &[
            ("table.fields.additional.placement", "type:header:eventType"),
            ("table.field.additional.missing", "ignore"),
        ],
        debezium: &[],
        outcome: Debezium::Relayed,
    },
    Case {
        golden: "array_of_objects_different_keys",
        section: "array_of_objects_different_keys",
        router: &[],
        debezium: &[],
        outcome: Debezium::Relayed,
    },
];

#[test]
fn message_cases_match_where_debezium_relays_and_are_refused_with_a_reason_where_it_dies() {
    for c in CASES {
        let name = format!("messages_case_{}", c.golden);
        let mut d = opts(c.debezium);
        d.insert(INC.0.into(), INC.1.into());
        let mut router = router_for(&opts(c.router), &d);
        let messages = selected(&case(c.section), &d);
        assert_eq!(messages.len(), 3, "{name}: good, case, sentinel");
        let want = golden(&format!("{name}.jsonl"));
        match c.outcome {
            Debezium::Relayed => {
                assert_eq!(want.len(), 3, "{name}");
                for (m, g) in messages.iter().zip(&want) {
                    let ctx = format!("{name}, message {:?}", m.id());
                    let rec =
                        router.route_message(&m.content).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                    assert_record(&rec, g, &ctx);
                }
            }
            Debezium::Died(theirs, ours) => {
                let log = std::fs::read_to_string(format!("{DIR}/{name}.log.txt")).unwrap();
                assert!(log.contains(theirs), "{name}: Debezium's log names {theirs:?}:\n{log}");
                assert!(log.contains("ENGINE EXIT CODE 2"), "{name}: Debezium stopped");
                assert_eq!(want.len(), 1, "{name}: Debezium delivered message 01 only");
                let good = router.route_message(&messages[0].content).unwrap();
                assert_record(&good, &want[0], &format!("{name}, message 01"));
                let err = router.route_message(&messages[1].content).unwrap_err().to_string();
                assert!(err.contains(ours), "{name}: walrelay's reason {err:?} names {ours:?}");
                // The sentinel after it is fine: the relay moves on once the message is
                // dead-lettered (Debezium never read it).
                router.route_message(&messages[2].content).unwrap();
                println!(
                    "{name}: Debezium 3.6.3 stops ({theirs}); walrelay refuses the message: {err}"
                );
            }
        }
    }
}

/// `table.field.event.timestamp`: no JSON value has a Debezium timestamp schema, so Debezium
/// stops on the first message and walrelay refuses every message, saying why.
#[test]
fn message_case_event_timestamp_field_refuses_every_message_as_debezium_stops_on_the_first() {
    let d = opts(&[INC]);
    let mut router = router_for(&opts(&[("table.field.event.timestamp", "ts")]), &d);
    assert!(golden("messages_case_event_timestamp_field.jsonl").is_empty());
    for m in selected(&case("event_timestamp_field"), &d) {
        let err = router.route_message(&m.content).unwrap_err();
        assert!(
            matches!(err, RouteError::MemberType { ref member, .. } if member == "ts"),
            "{err}"
        );
    }
}

/// Without a prefix list Debezium captures every prefix and stops at the first foreign message
/// (42, prefix `audit`, not JSON); walrelay ignores messages unless a list is set. Routed
/// anyway, the messages Debezium delivered before it stopped match, and 42 is refused.
#[test]
fn message_case_no_prefix_filter_matches_up_to_the_message_debezium_stops_at() {
    let (r, d) = golden_config("messages_no_extended_headers");
    let mut router = router_for(&r, &d);
    let want = golden("messages_case_no_prefix_filter.jsonl");
    let all = fixture();
    for (m, g) in all.iter().zip(&want) {
        let rec = router.route_message(&m.content).unwrap();
        assert_record(&rec, g, &format!("no prefix filter, message {:?}", m.id()));
    }
    let audit = all.iter().find(|m| m.prefix == "audit" && m.id().is_none()).unwrap();
    let err = router.route_message(&audit.content).unwrap_err().to_string();
    assert!(err.contains("starts with 'n'"), "{err}");
}

/// Arrays of objects with different keys: Debezium merges the element schemas in `HashSet`
/// order, which differs between JVM runs; walrelay keeps first-seen order. StringConverter's
/// output is the same either way (checked above); the JsonConverter value lists the merged
/// fields in walrelay's order.
#[test]
fn message_case_objects_with_different_keys_list_merged_fields_in_first_seen_order() {
    let d = opts(&[INC, JSON_VALUE[0], JSON_VALUE[1]]);
    let mut router = router_for(&opts(&[]), &d);
    let m = &selected(&case("array_of_objects_different_keys"), &d)[1];
    let rec = router.route_message(&m.content).unwrap();
    assert_eq!(
        std::str::from_utf8(rec.value.as_deref().unwrap()).unwrap(),
        r#"{"objs":[{"a":1,"c":2,"b":null,"d":null},{"a":null,"c":null,"b":"x","d":null},{"a":null,"c":null,"b":null,"d":true}]}"#
    );
    let theirs = golden("messages_case_array_of_objects_different_keys.connect.jsonl");
    let json = b64(&theirs[1]["value_b64_by_converter"]["json"]).unwrap();
    println!(
        "array of objects with different keys: Debezium (one JVM run) {}; walrelay {}",
        String::from_utf8_lossy(&json),
        String::from_utf8_lossy(rec.value.as_deref().unwrap())
    );
}
