//! walrelay end to end on embedded defaults: a throwaway PostgreSQL and broker (the test
//! harness's), an outbox table, the relay, a few sample events, and each Kafka record printed as
//! it arrives. Run it with `bash scripts/quickstart.sh`.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashSet;
use std::time::Duration;

use support::{consume_topics, services, wait_until, RelayProcess};

const SAMPLES: &[(&str, &str, &str, &str)] = &[
    ("Order", "order-1", "OrderCreated", r#"{"orderId": 1, "customer": "Alice", "total": 12.5}"#),
    ("Customer", "cust-42", "CustomerRegistered", r#"{"name": "Bob", "vip": false}"#),
    ("Order", "order-1", "OrderPaid", r#"{"orderId": 1, "method": "card"}"#),
    ("Shipment", "ship-7", "ShipmentDispatched", r#"{"carrier": "UPS"}"#),
    ("Order", "order-1", "OrderShipped", r#"{"orderId": 1, "shipment": "ship-7"}"#),
];

#[tokio::main]
async fn main() {
    let svc = services();
    let db = svc.pg.create_database("quickstart").await;
    db.create_outbox("outbox").await;
    let config = format!(
        r#"[source]
url = "{url}"
slot = "walrelay"
publication = "walrelay"

[outbox]
table = "public.outbox"

[router]
"table.fields.additional.placement" = "type:header:eventType"

[kafka]
"bootstrap.servers" = "{bootstrap}"
"#,
        url = db.url,
        bootstrap = svc.broker.bootstrap()
    );
    println!("== walrelay.toml\n{config}");
    let mut relay = RelayProcess::start(&config);
    let streaming = wait_until("walrelay streams", Duration::from_secs(30), || async {
        db.slot_active("walrelay").await == Some(true)
    })
    .await;
    if !streaming {
        eprintln!("walrelay did not start; its log:\n{}", relay.log());
        std::process::exit(1);
    }

    let mut topics: Vec<String> = Vec::new();
    let mut shown = HashSet::new();
    println!(
        "== inserting {} outbox rows, one transaction each; records as they arrive:",
        SAMPLES.len()
    );
    for (n, (agg_type, agg_id, event_type, payload)) in SAMPLES.iter().enumerate() {
        db.insert_outbox("outbox", agg_type, agg_id, event_type, Some(payload)).await;
        let topic = format!("outbox.event.{agg_type}");
        if !topics.contains(&topic) {
            topics.push(topic);
        }
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        for r in
            consume_topics(svc.broker.bootstrap(), &names, n + 1, Duration::from_secs(30)).await
        {
            if shown.insert((r.topic.clone(), r.partition, r.offset)) {
                let headers: Vec<String> = r
                    .headers
                    .iter()
                    .map(|(k, v)| {
                        format!("{k}={}", String::from_utf8_lossy(v.as_deref().unwrap_or_default()))
                    })
                    .collect();
                println!(
                    "{}[{}]@{} key={} headers=[{}] value={}",
                    r.topic,
                    r.partition,
                    r.offset,
                    r.key_str().unwrap_or("<null>"),
                    headers.join(", "),
                    r.value_str().unwrap_or("<null>")
                );
            }
        }
    }
    let code = relay.terminate();
    println!(
        "== {} records delivered; walrelay stopped on SIGTERM with exit code {code:?}",
        shown.len()
    );
    println!("== walrelay log:\n{}", relay.log());
    if shown.len() != SAMPLES.len() || code != Some(0) {
        std::process::exit(1);
    }
}
