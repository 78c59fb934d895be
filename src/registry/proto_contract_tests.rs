use prost_reflect::DynamicMessage;

use super::*;

fn key(number: u32, wire: u8) -> Vec<u8> {
    let mut out = Vec::new();
    key_to(&mut out, number, wire);
    out
}

fn int(number: u32, v: i64) -> Vec<u8> {
    let mut out = key(number, 0);
    varint(&mut out, v as u64);
    out
}

fn bytes(number: u32, b: &[u8]) -> Vec<u8> {
    let mut out = key(number, 2);
    varint(&mut out, b.len() as u64);
    out.extend_from_slice(b);
    out
}

fn contract(derived: &str, registered: &str) -> ProtoContract {
    let (d, r) = (ProtoFile::parse(derived).unwrap(), ProtoFile::parse(registered).unwrap());
    ProtoContract::fit(&d, &r)
}

fn run(c: &ProtoContract, value: &[u8]) -> Result<Vec<u8>, Misfit> {
    let mut out = Vec::new();
    c.transcode(value, &mut out).map(|()| out)
}

/// `out` (indexes, then the body) read as the registered file's message at `index`.
fn decoded(registered: &str, index: usize, out: &[u8], skip: usize) -> DynamicMessage {
    let file = ProtoFile::parse(registered).unwrap().file;
    let m = file.messages().nth(index).unwrap();
    DynamicMessage::decode(m, &out[skip..]).unwrap()
}

/// What the router derives for an expanded `{"orderId", "amount", "items": [{"sku", "qty"}]}`
/// with an `aggregatetype:envelope:aggType` placement (router/protobuf.rs prints it so).
const DERIVED: &str = "syntax = \"proto3\";\npackage walrelay.public.outbox.Order;\n\n\
    message Value {\n  payloadMessage payload = 1;\n  string aggType = 2;\n\n  \
    message payloadMessage {\n    string orderId = 1;\n    int32 amount = 2;\n    \
    repeated itemsMessage items = 3;\n  \n    message itemsMessage {\n      \
    string sku = 1;\n      int32 qty = 2;\n    }\n  }\n}\n";

/// A team's: its own names and numbers, the value's message second, a field the value lacks.
const TEAM: &str = r#"syntax = "proto3";
package com.acme;
import "google/protobuf/timestamp.proto";
message Audit { google.protobuf.Timestamp at = 1; }
message Value {
  string aggType = 7;
  Payload payload = 3;
}
message Payload {
  repeated Line items = 1;
  int64 amount = 20;
  string orderId = 2;
  string currency = 4;
}
message Line { int64 qty = 5; string sku = 16; }
"#;

fn line(sku: &str, qty: i64) -> Vec<u8> {
    [bytes(1, sku.as_bytes()), int(2, qty)].concat()
}

/// The router's value (message index 0, then the body): proto3 leaves out an `amount` of 0.
fn derived_value(amount: i64) -> Vec<u8> {
    let payload = [
        bytes(1, b"o-1"),
        if amount == 0 { vec![] } else { int(2, amount) },
        bytes(3, &line("a", 2)),
        bytes(3, &line("b", 300)),
    ]
    .concat();
    [vec![0], bytes(1, &payload), bytes(2, b"Order")].concat()
}

#[test]
fn fields_take_the_contracts_numbers_by_name_through_nested_and_repeated_messages() {
    let c = contract(DERIVED, TEAM);
    let out = run(&c, &derived_value(-5)).unwrap();
    // `Value` is picked by name: the second message, indexes [1].
    assert_eq!(out[..2], [2, 2]);
    let m = decoded(TEAM, 1, &out, 2);
    assert_eq!(m.get_field_by_name("aggType").unwrap().as_str(), Some("Order"));
    let payload = m.get_field_by_name("payload").unwrap();
    let payload = payload.as_message().unwrap();
    assert_eq!(payload.get_field_by_name("orderId").unwrap().as_str(), Some("o-1"));
    // An int32 is an int64's varint, negative too.
    assert_eq!(payload.get_field_by_name("amount").unwrap().as_i64(), Some(-5));
    assert_eq!(payload.get_field_by_name("currency").unwrap().as_str(), Some(""));
    let items = payload.get_field_by_name("items").unwrap();
    let items: Vec<(String, i64)> = items
        .as_list()
        .unwrap()
        .iter()
        .map(|l| {
            let l = l.as_message().unwrap();
            let sku = l.get_field_by_name("sku").unwrap().as_str().unwrap().to_string();
            (sku, l.get_field_by_name("qty").unwrap().as_i64().unwrap())
        })
        .collect();
    assert_eq!(items, [("a".to_string(), 2), ("b".to_string(), 300)]);
    // The bytes themselves: keys rewritten in the value's order, nested lengths recomputed
    // (`sku` = 16 takes a two-byte key).
    let line_out = |sku: &str, qty| [bytes(16, sku.as_bytes()), int(5, qty)].concat();
    let payload =
        [bytes(2, b"o-1"), int(20, -5), bytes(1, &line_out("a", 2)), bytes(1, &line_out("b", 300))]
            .concat();
    assert_eq!(out[2..], [bytes(3, &payload), bytes(7, b"Order")].concat());
}

#[test]
fn a_contract_numbered_as_the_value_is_takes_its_bytes_as_they_are() {
    let same = DERIVED.replace("package walrelay.public.outbox.Order", "package com.acme");
    let value = derived_value(3);
    assert_eq!(run(&contract(DERIVED, &same), &value).unwrap(), value);
}

#[test]
fn a_field_the_contract_lacks_or_types_otherwise_is_refused_naming_its_path() {
    let lacks = TEAM.replace("string orderId = 2;", "");
    let e = run(&contract(DERIVED, &lacks), &derived_value(1)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "field `payload.orderId`: the contract's message com.acme.Payload has no such field"
    );
    let typed = TEAM.replace("int64 qty = 5;", "string qty = 5;");
    let e = run(&contract(DERIVED, &typed), &derived_value(1)).unwrap_err();
    assert_eq!(e.path, ["payload", "items", "qty"]);
    assert_eq!(
        e.what,
        "the value's field is int32, the contract's (com.acme.Line.qty = 5) is string"
    );
    let single = TEAM.replace("repeated Line items", "Line items");
    let e = run(&contract(DERIVED, &single), &derived_value(1)).unwrap_err();
    assert!(
        e.what.contains(
            "repeated message walrelay.public.outbox.Order.Value.payloadMessage.itemsMessage"
        ),
        "{e}"
    );
    let map = TEAM.replace("repeated Line items = 1;", "map<string, Line> items = 1;");
    let e = run(&contract(DERIVED, &map), &derived_value(1)).unwrap_err();
    assert!(e.what.ends_with("is a map"), "{e}");
    let scalar = TEAM.replace("Payload payload = 3;", "string payload = 3;");
    let e = run(&contract(DERIVED, &scalar), &derived_value(1)).unwrap_err();
    assert_eq!(e.path, ["payload"]);
    assert!(e.what.ends_with("is string"), "{e}");
}

#[test]
fn a_field_is_judged_only_when_the_value_has_it() {
    // proto3 writes no 0: a value whose `amount` is 0 has no `amount`, which fits a contract
    // without one.
    let lacks = TEAM.replace("int64 amount = 20;", "");
    let c = contract(DERIVED, &lacks);
    assert!(run(&c, &derived_value(0)).is_ok());
    let e = run(&c, &derived_value(2)).unwrap_err();
    assert_eq!(e.path, ["payload", "amount"]);
}

#[test]
fn integers_widen_to_doubles_and_floats_singular_and_packed() {
    let derived = "syntax = \"proto3\";\n\nmessage payload {\n  int64 price = 1;\n  \
                   repeated int32 nums = 2;\n}\n";
    let registered =
        "syntax = \"proto3\";\nmessage P { float price = 3; repeated double nums = 4; }";
    let packed = {
        let mut b = Vec::new();
        for v in [1u64, 300] {
            varint(&mut b, v);
        }
        b
    };
    let value = [vec![0], int(1, 7), bytes(2, &packed)].concat();
    let out = run(&contract(derived, registered), &value).unwrap();
    let doubles: Vec<u8> = [1.0f64, 300.0].iter().flat_map(|d| d.to_le_bytes()).collect();
    let want = [vec![0], key(3, 5), 7f32.to_le_bytes().to_vec(), bytes(4, &doubles)].concat();
    assert_eq!(out, want);
}

/// A payload that is not expanded is a `google.protobuf.StringValue` under wrappers.proto (the
/// same text for every wrapper: the message index says which). Its contract is a message with a
/// `string value` field, as StringValue has, under any number and message name.
#[test]
fn a_wrapper_value_fits_a_message_with_a_string_field_named_value() {
    let wrappers = "syntax = \"proto3\";\npackage google.protobuf;\n\n\
        message DoubleValue {\n  double value = 1;\n}\nmessage FloatValue {\n  float value = 1;\n}\n\
        message Int64Value {\n  int64 value = 1;\n}\nmessage UInt64Value {\n  uint64 value = 1;\n}\n\
        message Int32Value {\n  int32 value = 1;\n}\nmessage UInt32Value {\n  uint32 value = 1;\n}\n\
        message BoolValue {\n  bool value = 1;\n}\nmessage StringValue {\n  string value = 1;\n}\n\
        message BytesValue {\n  bytes value = 1;\n}\n";
    // [7] as Confluent frames it: a count of 1, then 7, zig-zag.
    let value = [vec![2, 14], bytes(1, b"{\"n\": 1}")].concat();
    let team = "syntax = \"proto3\";\npackage com.acme;\nmessage OrderJson { string value = 3; }";
    let out = run(&contract(wrappers, team), &value).unwrap();
    assert_eq!(out, [vec![0], bytes(3, b"{\"n\": 1}")].concat());
    // wrappers.proto itself, however it is printed: StringValue, picked by name.
    let wkt = "syntax = \"proto3\";\npackage google.protobuf;\nimport \"google/protobuf/timestamp.proto\";\n\
               message BoolValue { bool value = 1; }\nmessage StringValue { string value = 1; }";
    let out = run(&contract(wrappers, wkt), &value).unwrap();
    assert_eq!(out, [vec![2, 2], bytes(1, b"{\"n\": 1}")].concat());
    let other = "syntax = \"proto3\";\nmessage OrderJson { string json = 1; }";
    let e = run(&contract(wrappers, other), &value).unwrap_err();
    assert_eq!(e.to_string(), "field `value`: the contract's message OrderJson has no such field");
    let typed = "syntax = \"proto3\";\nmessage OrderJson { bytes value = 1; }";
    let e = run(&contract(wrappers, typed), &value).unwrap_err();
    assert!(
        e.to_string().contains("is string, the contract's (OrderJson.value = 1) is bytes"),
        "{e}"
    );
}

#[test]
fn the_message_is_the_one_confluent_picks_by_name_or_else_the_first() {
    let file = |text| ProtoFile::parse(text).unwrap().file;
    let f = file(
        "syntax = \"proto3\";\nmessage A {}\nmessage B { message Value {} map<string, A> m = 1; }",
    );
    let (path, m) = pick(&f, "payload");
    assert_eq!((path, m.full_name()), (vec![0], "A"));
    // Parts no message has are skipped: the package, here.
    let (path, m) = pick(&f, "walrelay.public.outbox.B");
    assert_eq!((path, m.full_name()), (vec![1], "B"));
    // A map's entry message is not counted among B's nested messages.
    let (path, m) = pick(&f, "x.B.Value");
    assert_eq!((path, m.full_name()), (vec![1, 0], "B.Value"));
    assert_eq!(encode_indexes(&[1, 0]), [4, 2, 0]);
    assert_eq!(encode_indexes(&[0]), [0]);
}

#[test]
fn a_proto2_required_field_the_value_lacks_is_refused() {
    let derived =
        "syntax = \"proto3\";\n\nmessage payload {\n  string id = 1;\n  int32 n = 2;\n}\n";
    let registered =
        "syntax = \"proto2\";\nmessage P { required int64 n = 5; optional string id = 1; }";
    let c = contract(derived, registered);
    let ok = run(&c, &[vec![0], bytes(1, b"x"), int(2, 4)].concat()).unwrap();
    assert_eq!(ok, [vec![0], bytes(1, b"x"), int(5, 4)].concat());
    let e = run(&c, &[vec![0], bytes(1, b"x")].concat()).unwrap_err();
    assert_eq!(e.path, ["n"]);
    assert!(e.what.contains("required"), "{e}");
}

#[test]
fn a_registered_text_walrelay_cannot_read_is_refused_with_why() {
    let e = ProtoFile::parse("message {").err().unwrap();
    assert!(e.starts_with("it is not a .proto"), "{e}");
    let e = ProtoFile::parse("syntax = \"proto3\";\nimport \"acme/money.proto\";\nmessage M {}")
        .err()
        .unwrap();
    assert!(e.contains("\"acme/money.proto\"") && e.contains("google/protobuf"), "{e}");
    let e = ProtoFile::parse("syntax = \"proto3\";\nmessage M { Missing m = 1; }").err().unwrap();
    assert!(e.starts_with("it is not a valid .proto") && e.contains("Missing"), "{e}");
    let e = ProtoFile::parse("syntax = \"proto3\";\nenum E { A = 0; }").err().unwrap();
    assert_eq!(e, "it defines no message");
    // Bytes the derived schema does not describe are not guessed at.
    let c = contract(DERIVED, TEAM);
    assert!(run(&c, &[vec![0], int(9, 1)].concat()).is_err());
    assert!(run(&c, &derived_value(1)[..6]).is_err());
}
