//! `Router::route` on one outbox row (≈ 300-byte JSON payload): the default configuration
//! (StringConverter value, `id` header), with an extra header placement, and with
//! `table.expand.json.payload` + JsonConverter. Run: `cargo bench --bench route`.

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
