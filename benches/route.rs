//! `Router::route` on one outbox row (≈ 300-byte JSON payload): the default configuration
//! (StringConverter value, `id` header), with an extra header placement, and with
//! `table.expand.json.payload` + JsonConverter; and `Router::route_message` on the same event as
//! a logical message's content (payload as JSON text in a string, as `outbox_emit` sends it, and
//! as a JSON object). `expand_<converter>[_envelope]` expand the payload under each value
//! converter, JSON and the registry ones, with and without an `envelope` field beside the
//! payload (the registry converters need the value's schema per row). The `envelope_*` cases
//! route the same row and wrap it in each
//! `[envelope] format` (`Encoder::row`, as the relay calls it; `envelope_debezium` is the
//! default format through the same call). Run: `cargo bench --bench route`.

mod common;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use walrelay::config::Options;
use walrelay::encoder::Encoder;
use walrelay::envelope::{self, Format};
use walrelay::lsn::Lsn;
use walrelay::router::{Router, RouterConfig};
use walrelay::txn::Txn;

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
