//! `Router::route` on one outbox row (≈ 300-byte JSON payload): the default configuration
//! (StringConverter value, `id` header), with an extra header placement, and with
//! `table.expand.json.payload` + JsonConverter; and `Router::route_message` on the same event as
//! a logical message's content (payload as JSON text in a string, as `outbox_emit` sends it, and
//! as a JSON object). `expand_<converter>[_envelope]` expand the payload under each value
//! converter, JSON and the registry ones, with and without an `envelope` field beside the
//! payload (the registry converters need the value's schema per row). The `envelope_*` cases
//! route the same row and wrap it in each
//! `[envelope] format` (`Encoder::row`, as the relay calls it; `envelope_debezium` is the
//! default format through the same call). `expand_protobuf_contract` is `expand_protobuf` and
//! then, as `use_latest_version` does per record, the value rewritten under a team's `.proto`
//! that numbers its fields otherwise (`walrelay::registry::proto_contract`; the registry's frame
//! aside). Run: `cargo bench --bench route`.

mod common;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use walrelay::config::Options;
use walrelay::encoder::Encoder;
use walrelay::envelope::{self, Format};
use walrelay::lsn::Lsn;
use walrelay::registry::proto_contract::{ProtoContract, ProtoFile};
use walrelay::router::{Router, RouterConfig};
use walrelay::txn::Txn;

/// A team's contract for common::PAYLOAD: its own names for the nested messages, fields declared
/// and numbered otherwise than the router's (1, 2, … in the payload's order), one the payload
/// lacks, integers as int64.
const TEAM_PROTO: &str = r#"syntax = "proto3";
package com.acme.orders;
message OrderCreated {
  int64 orderId = 1;
  string customerId = 2;
  string status = 3;
  double amount = 4;
  string currency = 5;
  repeated Line items = 6;
  Address shippingAddress = 7;
  string note = 20;
  string channel = 21;
}
message Line { string sku = 1; int64 qty = 2; double price = 3; }
message Address { string street = 1; string city = 2; string zip = 3; string country = 4; }
"#;

/// A registry value's body: the router's value after the bytes reserved for the frame.
fn body(record: &walrelay::router::Record) -> &[u8] {
    &record.value.as_ref().expect("a value")[5..]
}

fn router(router: &[(&str, &str)], debezium: &[(&str, &str)]) -> Router {
    let opts = |kv: &[(&str, &str)]| -> Options {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    let cfg = RouterConfig::parse(&opts(router), &opts(debezium)).expect("valid router config");
    Router::new(cfg)
}

/// A case's name, kept for the run.
fn leak(name: String) -> &'static str {
    Box::leak(name.into_boxed_str())
}

fn route(c: &mut Criterion) {
    let relation = common::relation();
    let not_null = common::not_null();
    let row = common::tuple(common::PAYLOAD);
    let cases: Vec<(&str, Router)> = vec![
        ("default", router(&[], &[])),
        (
            "header_placement",
            router(&[("table.fields.additional.placement", "type:header:eventType")], &[]),
        ),
        (
            "expand_json_payload",
            router(
                &[("table.expand.json.payload", "true")],
                &[("value.converter", "json"), ("value.converter.schemas.enable", "false")],
            ),
        ),
        (
            "expand_json_payload_with_schemas",
            router(&[("table.expand.json.payload", "true")], &[("value.converter", "json")]),
        ),
    ];
    // The registry converters (the value before the registry's frame), and each converter with
    // an envelope field beside the payload, whose schema a registry value also needs.
    let envelope = ("table.fields.additional.placement", "aggregatetype:envelope:aggType");
    let expand = ("table.expand.json.payload", "true");
    let schemas_off = ("value.converter.schemas.enable", "false");
    let mut cases = cases;
    for (name, converter) in [
        ("json", "json"),
        ("avro", "avro"),
        ("protobuf", "protobuf"),
        ("json_schema", "json-schema"),
    ] {
        let value = [("value.converter", converter), schemas_off];
        cases.push((leak(format!("expand_{name}")), router(&[expand], &value)));
        cases.push((leak(format!("expand_{name}_envelope")), router(&[expand, envelope], &value)));
    }
    let mut g = c.benchmark_group("router_route");
    g.throughput(Throughput::Elements(1));
    for (name, mut r) in cases {
        let binding = r.bind(&relation, &not_null).expect("bind the outbox relation");
        r.route(&binding, &row).expect("route the row");
        g.bench_function(name, |b| {
            b.iter(|| r.route(black_box(&binding), black_box(&row)).unwrap())
        });
    }
    {
        let value = [("value.converter", "protobuf"), schemas_off];
        let mut r = router(&[expand], &value);
        let binding = r.bind(&relation, &not_null).expect("bind the outbox relation");
        let record = r.route(&binding, &row).expect("route the row");
        let derived = record.value_schema.as_deref().expect("a registry value's schema");
        let derived = ProtoFile::parse(derived).expect("the derived .proto");
        let team = ProtoFile::parse(TEAM_PROTO).expect("the team's .proto");
        let contract = ProtoContract::fit(&derived, &team);
        let mut out = Vec::new();
        contract.transcode(body(&record), &mut out).expect("the payload fits the contract");
        g.bench_function("expand_protobuf_contract", |b| {
            b.iter(|| {
                let record = r.route(black_box(&binding), black_box(&row)).unwrap();
                let mut out = Vec::with_capacity(record.value.as_ref().unwrap().len() + 8);
                contract.transcode(body(&record), &mut out).unwrap();
                out
            })
        });
    }
    for (name, payload) in [
        ("message_payload_string", serde_json::Value::String(common::PAYLOAD.into())),
        ("message_payload_object", serde_json::from_str(common::PAYLOAD).unwrap()),
    ] {
        let content = bytes::Bytes::from(
            serde_json::json!({
                "id": "00000000-0000-4000-8000-00000001e240",
                "aggregatetype": "Order",
                "aggregateid": "agg-457",
                "type": "EventHappened",
                "payload": payload,
            })
            .to_string(),
        );
        let mut r = router(&[], &[]);
        r.route_message(&content).expect("route the message");
        g.bench_function(name, |b| b.iter(|| r.route_message(black_box(&content)).unwrap()));
    }
    let txn = Txn { commit_micros: 1_764_612_000_123_456, commit_lsn: Lsn(0x16B_3748), xid: 771 };
    for format in Format::all().map(Format::name) {
        let envelope_opts: Options = [("format".to_string(), format.to_string())].into();
        let (cfg, env_cfg) =
            envelope::parse(Some(&envelope_opts), &Options::new(), &Options::new())
                .expect("valid envelope config");
        let mut encoder = Encoder::from_parts(cfg, env_cfg, "shop");
        let binding =
            encoder.router().bind(&relation, &not_null).expect("bind the outbox relation");
        encoder.row(&binding, &row, &txn).expect("route and wrap the row");
        g.bench_function(format!("envelope_{}", format.replace('-', "_")), |b| {
            b.iter(|| encoder.row(black_box(&binding), black_box(&row), &txn).unwrap())
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = route
}
criterion_main!(benches);
