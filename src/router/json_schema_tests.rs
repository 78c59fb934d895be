//! The JSON Schema texts against Confluent's own (JsonSchemaData 7.0.16, recorded by
//! scripts/debezium-registry-goldens/json-schema/run.sh) for the value schemas Debezium's router
//! made for the fixture rows and for shapes they lack.

use serde_json::Value;

use super::super::convert::{Prim, Schema};
use super::*;

const TEXTS: &str = include_str!("../../tests/fixtures/debezium/registry/json_schema_texts.jsonl");

/// A Connect schema in JsonConverter's form, as walrelay's [`Schema`].
fn connect(v: &Value) -> Schema {
    let optional = v["optional"].as_bool().expect("optional");
    let version = v.get("version").map(|n| n.as_i64().expect("version") as i32);
    let name = v.get("name").map(|n| n.as_str().expect("name").to_owned());
    let prim = |ty| Schema::Prim {
        ty,
        optional,
        // The router's names are static; a test's may leak.
        name: name.clone().map(|n| &*Box::leak(n.into_boxed_str())),
        version,
    };
    match v["type"].as_str().expect("type") {
        "boolean" => prim(Prim::Boolean),
        "int16" => prim(Prim::Int16),
        "int32" => prim(Prim::Int32),
        "int64" => prim(Prim::Int64),
        "double" => prim(Prim::Float64),
        "string" => prim(Prim::String),
        "bytes" => prim(Prim::Bytes),
        "array" => Schema::Array { items: Box::new(connect(&v["items"])), optional },
        "struct" => Schema::Struct {
            name,
            optional,
            version,
            fields: v["fields"]
                .as_array()
                .expect("fields")
                .iter()
                .map(|f| (f["field"].as_str().expect("field").to_owned(), connect(f)))
                .collect(),
        },
        other => panic!("no Connect type {other} in walrelay's schemas"),
    }
}

#[test]
fn json_schema_texts_match_confluents_byte_for_byte() {
    let mut checked = 0;
    for line in TEXTS.lines() {
        let golden: Value = serde_json::from_str(line).unwrap();
        let text = golden["connect"].as_str().unwrap();
        let schema = connect(&serde_json::from_str(text).unwrap());
        // JsonConverter's bytes escape a character outside the BMP; the input has it as is.
        let read_back = serde_json::from_str::<Value>(&schema.to_json()).unwrap();
        assert_eq!(read_back, serde_json::from_str::<Value>(text).unwrap(), "the test's reading");
        assert_eq!(schema_text(&schema), golden["json_schema"].as_str().unwrap(), "for {text}");
        checked += 1;
    }
    // 13 value schemas of Debezium's router for the fixture rows, 25 shapes they lack.
    assert_eq!(checked, 38);
}

#[test]
fn java_string_hashes_and_hash_map_capacities_are_javas() {
    // "hello".hashCode() and "Aa"/"BB", Java's classic collision.
    assert_eq!(java_hash("hello"), 99_162_322);
    assert_eq!(java_hash("Aa"), java_hash("BB"));
    assert_eq!(java_hash("😀"), 55_357 * 31 + 56_832);
    assert_eq!([1, 2, 3].map(copied_map_capacity), [2, 4, 4]);
    let names = |n: usize| (0..n).map(|i| java_hash(&format!("f{i}"))).collect::<Vec<_>>();
    assert_eq!(growing_map_capacity(names(12).into_iter()), 16);
    assert_eq!(growing_map_capacity(names(13).into_iter()), 32);
    assert_eq!(growing_map_capacity(names(25).into_iter()), 64);
    // Nine keys in one bucket of 16 (all hash to multiples of 16, spread leaves them so) make
    // treeifyBin double the table instead of making a tree.
    let same_bucket: Vec<i32> = (0..9).map(|i| i * 16).collect();
    assert_eq!(growing_map_capacity(same_bucket.into_iter()), 32);
}
