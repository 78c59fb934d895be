//! The outbox row both micro-benchmarks use: Debezium's outbox columns plus the two a polling
//! relay needs (`seq`, `published_at`), as pgoutput sends them (text format), with a ~300-byte
//! JSON payload like the end-to-end benchmark's.
#![allow(dead_code)] // each bench uses part of it

use bytes::Bytes;
use walrelay::pgoutput::{Column, Insert, Message, Relation, Tuple, Value};

pub const RELATION_ID: u32 = 16_385;

/// (name, type oid, type modifier)
const COLUMNS: &[(&str, u32, i32)] = &[
    ("id", 2950, -1),             // uuid
    ("aggregatetype", 1043, 259), // varchar(255)
    ("aggregateid", 1043, 259),
    ("type", 1043, 259),
    ("payload", 3802, -1),    // jsonb
    ("created_at", 1184, -1), // timestamptz
    ("seq", 20, -1),          // bigint
    ("published_at", 1184, -1),
];

pub const PAYLOAD: &str = r#"{"note": "benchmark event", "items": [{"qty": 3, "sku": "SKU-00042", "price": 19.99}, {"qty": 1, "sku": "SKU-00913", "price": 4.5}], "amount": 64.47, "status": "CREATED", "orderId": 123456, "currency": "EUR", "customerId": "customer-00457", "shippingAddress": {"zip": "10115", "city": "Berlin", "street": "457 Main Street", "country": "DE"}}"#;

pub fn relation() -> Relation {
    Relation {
        id: RELATION_ID,
        namespace: "public".into(),
        name: "outbox".into(),
        replica_identity: b'd',
        columns: COLUMNS
            .iter()
            .map(|&(name, type_oid, type_modifier)| Column {
                flags: u8::from(name == "id"),
                name: name.into(),
                type_oid,
                type_modifier,
            })
            .collect(),
    }
}

pub fn not_null() -> Vec<bool> {
    COLUMNS.iter().map(|(name, ..)| *name != "payload" && *name != "published_at").collect()
}

pub fn tuple(payload: &str) -> Tuple {
    let text = |s: &str| Value::Text(Bytes::copy_from_slice(s.as_bytes()));
    Tuple(vec![
        text("00000000-0000-4000-8000-00000001e240"),
        text("Order"),
        text("agg-457"),
        text("EventHappened"),
        text(payload),
        text("2026-12-01 10:15:30.123456+00"),
        text("123456"),
        Value::Null,
    ])
}

/// The Insert message as PostgreSQL sends it.
pub fn insert_bytes(payload: &str) -> Bytes {
    walrelay::pgoutput::encode(&Message::Insert(Insert {
        relation_id: RELATION_ID,
        new: tuple(payload),
    }))
}
