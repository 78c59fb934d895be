//! `Router::route` on one outbox row (≈ 300-byte JSON payload): the default configuration
//! (StringConverter value, `id` header), with an extra header placement, and with
//! `table.expand.json.payload` + JsonConverter; and `Router::route_message` on the same event as
//! a logical message's content (payload as JSON text in a string, as `outbox_emit` sends it, and
//! as a JSON object). Run: `cargo bench --bench route`.

mod common;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use walrelay::config::Options;
use walrelay::router::{Router, RouterConfig};

fn router(router: &[(&str, &str)], debezium: &[(&str, &str)]) -> Router {
    let opts = |kv: &[(&str, &str)]| -> Options {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    let cfg = RouterConfig::parse(&opts(router), &opts(debezium)).expect("valid router config");
    Router::new(cfg)
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
