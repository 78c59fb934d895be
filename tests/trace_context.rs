//! Trace context across the outbox (issue 28): rows carrying the writer's span context in
//! `tracingspancontext` — as Java `Properties` text, as a bare `traceparent`, none, malformed —
//! read back from the broker under the Debezium and the CloudEvents binary formats.

use std::time::Duration;

use crate::common::Setup;
use crate::support::free_port;
use crate::support::kafka::Consumed;
use crate::support::relay::{http_get, metric, RelayProcess};

pub const TRACE_1: &str = "0af7651916cd43dd8448eb211c80319c";
pub const SPAN_1: &str = "b7ad6b7169203331";
pub const TRACE_2: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
pub const SPAN_2: &str = "00f067aa0ba902b7";
/// What a malformed context holds; never to be printed whole.
const MALFORMED: &str = "00-NOT-A-TRACE-CONTEXT-secret-looking-text-0123456789abcdef";

/// The contexts the rows carry, in commit order: Properties text as `Properties.store` writes
/// it (a date comment, `=` escaped in values), a bare unsampled `traceparent`, none, and two
/// malformed ones (logged once, counted twice).
pub fn contexts() -> Vec<Option<String>> {
    vec![
        Some(format!(
            "#Tue Dec 02 09:00:00 UTC 2026\ntracestate=vendor\\=opaque\ntraceparent=00-{TRACE_1}-{SPAN_1}-01\n"
        )),
        Some(format!("00-{TRACE_2}-{SPAN_2}-00")),
        None,
        Some(MALFORMED.to_owned()),
        Some("traceparent=00-00000000000000000000000000000000-b7ad6b7169203331-01".to_owned()),
    ]
}

/// Starts a relay over a fresh outbox with a context column, writes [`contexts`], reads the
/// five records back. `extra` is extra config sections.
pub async fn relay_contexts(
    name: &str,
    extra: &str,
) -> (Setup, RelayProcess, Vec<Consumed>, Vec<String>, u16) {
    let s = Setup::new(name).await;
    s.db.execute("ALTER TABLE outbox ADD COLUMN tracingspancontext text").await;
    let http = free_port();
    let extra = format!("[http]\nlisten = \"127.0.0.1:{http}\"\n{extra}");
    let mut relay = RelayProcess::start(&s.config_with("", "", &extra));
    s.wait_streaming(&mut relay).await;
    let client = s.db.connect().await;
    let mut ids = Vec::new();
    // One key, so one partition: read back in commit order.
    for context in contexts() {
        let row = client
            .query_one(
                "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, \
                 tracingspancontext) VALUES (gen_random_uuid(), 'Order', $1, 'Placed', \
                 '{\"n\": 1}', $2) RETURNING id::text",
                &[&"order-1", &context],
            )
            .await
            .expect("insert an outbox row");
        ids.push(row.get::<_, String>(0));
    }
    let records = s.read("Order", 5).await;
    assert_eq!(records.len(), 5, "{}", s.diagnostics(&relay));
    (s, relay, records, ids, http)
}

fn names(r: &Consumed) -> Vec<&str> {
    r.headers.iter().map(|(n, _)| n.as_str()).collect()
}

/// The malformed rows went through without trace headers, were counted, and were logged once,
/// without their value.
async fn assert_malformed_reported(relay: &RelayProcess, http: u16, records: &[Consumed]) {
    for r in &records[2..] {
        assert!(!names(r).iter().any(|n| n.contains("trace")), "{:?}", names(r));
    }
    let mut count = None;
    for _ in 0..50 {
        let text = http_get(http, "/metrics").await.unwrap_or_default();
        count = metric(&text, "walrelay_trace_context_invalid_total");
        if count == Some(2.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(count, Some(2.0), "walrelay_trace_context_invalid_total");
    let log = relay.log();
    let warned = log.matches("span context unreadable").count();
    assert_eq!(warned, 1, "logged once per table:\n{log}");
    assert!(!log.contains("NOT-A-TRACE") && !log.contains("secret-looking"), "{log}");
    println!("{}", log.lines().find(|l| l.contains("span context unreadable")).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_format_carries_the_writers_context_in_w3c_headers_before_id() {
    let (_s, mut relay, records, ids, http) = relay_contexts("trace_dbz", "").await;
    // Without exported spans the header names the writer's span: the consumer's span hangs
    // under it. Where Debezium's tracing SMT puts them: before `id`.
    let r = &records[0];
    assert_eq!(names(r), ["traceparent", "tracestate", "id"]);
    assert_eq!(r.header_str("traceparent"), Some(format!("00-{TRACE_1}-{SPAN_1}-01").as_str()));
    assert_eq!(r.header_str("tracestate"), Some("vendor=opaque"));
    assert_eq!(r.header_str("id"), Some(ids[0].as_str()));
    let r = &records[1];
    assert_eq!(names(r), ["traceparent", "id"]);
    assert_eq!(r.header_str("traceparent"), Some(format!("00-{TRACE_2}-{SPAN_2}-00").as_str()));
    // No context: no trace (the Event Router's effective `tracing.with.context.field.only`).
    assert_eq!(names(&records[2]), ["id"]);
    assert_malformed_reported(&relay, http, &records).await;
    for r in &records {
        println!(
            "{:?}",
            r.headers
                .iter()
                .map(|(n, v)| (n, v.as_deref().map(String::from_utf8_lossy)))
                .collect::<Vec<_>>()
        );
    }
    relay.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloudevents_binary_carries_it_in_the_distributed_tracing_extension() {
    let extra = "[envelope]\nformat = \"cloudevents-binary\"\n";
    let (_s, mut relay, records, _ids, http) = relay_contexts("trace_ce", extra).await;
    let r = &records[0];
    assert_eq!(r.header_str("ce_traceparent"), Some(format!("00-{TRACE_1}-{SPAN_1}-01").as_str()));
    assert_eq!(r.header_str("ce_tracestate"), Some("vendor=opaque"));
    assert_eq!(r.header("traceparent"), None, "the extension carries it: {:?}", names(r));
    let r = &records[1];
    assert_eq!(r.header_str("ce_traceparent"), Some(format!("00-{TRACE_2}-{SPAN_2}-00").as_str()));
    assert_eq!(r.header("ce_tracestate"), None);
    assert_malformed_reported(&relay, http, &records).await;
    println!("{:?}", names(&records[0]));
    relay.terminate();
}
