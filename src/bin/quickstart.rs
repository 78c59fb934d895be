//! walrelay end to end on embedded defaults: a throwaway PostgreSQL and broker (the test
//! harness's), an outbox table, the relay with its console, a few sample events, and each Kafka
//! record printed as it arrives; then the relay keeps running, printing what arrives, until
//! Ctrl-C (`--no-wait`: stop once the samples arrived). Run it with `bash scripts/quickstart.sh`.
//!
//! A binary of its own behind the `quickstart` feature, not an example: an example builds every
//! dev-dependency (the benchmark's and the tests'), which the demo does not need.

#[path = "../../tests/support/mod.rs"]
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
    let no_wait = std::env::args().skip(1).any(|a| a == "--no-wait");
    let svc = services();
    let db = svc.pg.create_database("quickstart").await;
    db.create_outbox("outbox").await;
    let port = console_port();
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

[http]
listen = "127.0.0.1:{port}"
"#,
        url = db.url,
        bootstrap = svc.broker.bootstrap(),
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

    let console = format!("http://127.0.0.1:{port}/");
    println!("== the console: {console}");
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
            show(&r, &mut shown);
        }
    }
    if !no_wait && shown.len() == SAMPLES.len() {
        println!(
            "== walrelay keeps running; the console is at {console}\n\
             == write more events, and they are printed as they arrive:\n\
             psql '{url}' -c \"INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
             VALUES (gen_random_uuid(), 'Order', 'order-2', 'OrderCreated', '{{}}')\"\n\
             == Ctrl-C stops it",
            url = db.url
        );
        follow(&topics, &mut shown).await;
    }
    let code = relay.terminate();
    println!(
        "== {} records delivered; walrelay stopped on SIGTERM with exit code {code:?}",
        shown.len()
    );
    println!("== walrelay log:\n{}", relay.log());
    if shown.len() < SAMPLES.len() || code != Some(0) {
        std::process::exit(1);
    }
}

/// Prints `r` unless it was shown already.
fn show(r: &support::kafka::Consumed, shown: &mut HashSet<(String, i32, i64)>) {
    if !shown.insert((r.topic.clone(), r.partition, r.offset)) {
        return;
    }
    let headers: Vec<String> = r
        .headers
        .iter()
        .map(|(k, v)| format!("{k}={}", String::from_utf8_lossy(v.as_deref().unwrap_or_default())))
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

/// The console's port: walrelay's usual 9187 when free, else any free one.
fn console_port() -> u16 {
    match std::net::TcpListener::bind("127.0.0.1:9187") {
        Ok(_) => 9187,
        Err(_) => support::free_port(),
    }
}

/// Prints records of `topics` (and of topics the relay creates meanwhile, `outbox.event.*`) as
/// they arrive, until Ctrl-C.
async fn follow(topics: &[String], shown: &mut HashSet<(String, i32, i64)>) {
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    let bootstrap = services().broker.bootstrap();
    let mut topics: Vec<String> = topics.to_vec();
    loop {
        for t in support::kafka::topics_with_prefix(bootstrap, "outbox.event.") {
            if !topics.contains(&t) {
                topics.push(t);
            }
        }
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        let want = shown.len() + 1;
        tokio::select! {
            _ = &mut stop => {
                println!("== Ctrl-C: stopping walrelay");
                return;
            }
            records = consume_topics(bootstrap, &names, want, Duration::from_secs(2)) => {
                for r in records {
                    show(&r, shown);
                }
            }
        }
    }
}
