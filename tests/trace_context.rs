//! Trace context across the outbox: rows carrying the writer's span context in
//! `tracingspancontext` — as Java `Properties` text, as a bare `traceparent`, none, malformed —
//! read back from the broker under the Debezium and the CloudEvents binary formats.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::common::Setup;
use crate::support::kafka::Consumed;
use crate::support::process::{http_get, metric, RelayProcess};
use crate::support::{free_port, wait_until};

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
    router: &str,
    extra: &str,
) -> (Setup, RelayProcess, Vec<Consumed>, Vec<String>, u16) {
    let s = Setup::new(name).await;
    s.db.execute("ALTER TABLE outbox ADD COLUMN tracingspancontext text").await;
    let http = free_port();
    let extra = format!("[http]\nlisten = \"127.0.0.1:{http}\"\n{extra}");
    let mut relay = RelayProcess::start(&s.config_with(router, "", &extra));
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
    let (_s, mut relay, records, ids, http) = relay_contexts("trace_dbz", "", "").await;
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
    let (_s, mut relay, records, _ids, http) = relay_contexts("trace_ce", "", extra).await;
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

/// A minimal OTLP/HTTP receiver: answers every POST with 200 and hands over its body.
async fn otlp_receiver() -> (u16, mpsc::UnboundedReceiver<(String, Vec<u8>)>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let (head_end, length) = loop {
                    let n = conn.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..i]).to_ascii_lowercase();
                        let length = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        break (i + 4, length);
                    }
                };
                while buf.len() < head_end + length {
                    let n = conn.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
                let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
                let _ = tx.send((head, buf[head_end..head_end + length].to_vec()));
            });
        }
    });
    (port, rx)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exported_spans_are_the_parents_in_traceparent_children_of_the_writers_from_commit_to_ack()
{
    let (port, mut bodies) = otlp_receiver().await;
    let router = "\"tracing.operation.name\" = \"outbox-relay\"";
    let extra = format!("[tracing]\notlp_endpoint = \"http://127.0.0.1:{port}\"\n");
    let before = now_ms();
    let (_s, mut relay, records, ids, http) = relay_contexts("trace_otlp", router, &extra).await;
    let after = now_ms();

    // The records name the relay's spans, in the writer's traces.
    let parent_of =
        |r: &Consumed| r.header_str("traceparent").unwrap().split('-').nth(2).unwrap().to_owned();
    let (relay_1, relay_2) = (parent_of(&records[0]), parent_of(&records[1]));
    assert!(records[0].header_str("traceparent").unwrap().starts_with(&format!("00-{TRACE_1}-")));
    assert!(records[1].header_str("traceparent").unwrap().starts_with(&format!("00-{TRACE_2}-")));
    assert_ne!(relay_1, SPAN_1, "the header names the relay's span, not the writer's");
    assert_ne!(relay_2, SPAN_2);
    assert!(records[1].header_str("traceparent").unwrap().ends_with("-00"));

    // Only the sampled one is exported; wait for it, then a little for any other.
    let mut spans = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while spans.is_empty() || tokio::time::Instant::now() + Duration::from_millis(1500) < deadline {
        let wait = if spans.is_empty() {
            deadline
        } else {
            tokio::time::Instant::now() + Duration::from_millis(1500)
        };
        let Ok(Some((head, body))) = tokio::time::timeout_at(wait, bodies.recv()).await else {
            break;
        };
        assert!(head.starts_with("POST /v1/traces HTTP/1.1"), "{head}");
        assert!(
            head.to_ascii_lowercase().contains("content-type: application/x-protobuf"),
            "{head}"
        );
        let request = ExportTraceServiceRequest::decode(body.as_slice()).expect("an OTLP request");
        for rs in request.resource_spans {
            let service =
                rs.resource.unwrap().attributes.into_iter().find(|a| a.key == "service.name");
            assert!(
                matches!(service.and_then(|a| a.value).and_then(|v| v.value), Some(Any::StringValue(s)) if s == "walrelay")
            );
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
        if !spans.is_empty() {
            break;
        }
    }
    assert_eq!(spans.len(), 1, "one sampled traced record: {spans:?}\n{}", relay.log());
    let span = &spans[0];
    println!(
        "span {} name {} trace {} parent {} start {} end {} ({} µs) attributes {:?}",
        hex(&span.span_id),
        span.name,
        hex(&span.trace_id),
        hex(&span.parent_span_id),
        span.start_time_unix_nano,
        span.end_time_unix_nano,
        (span.end_time_unix_nano - span.start_time_unix_nano) / 1000,
        span.attributes
            .iter()
            .map(|a| (a.key.as_str(), a.value.as_ref().and_then(|v| v.value.clone())))
            .collect::<Vec<_>>()
    );
    assert_eq!(span.name, "outbox-relay");
    assert_eq!(hex(&span.trace_id), TRACE_1);
    assert_eq!(hex(&span.parent_span_id), SPAN_1, "a child of the writer's span");
    assert_eq!(hex(&span.span_id), relay_1, "the parent the record's traceparent names");
    assert_eq!(span.trace_state, "vendor=opaque");
    assert_eq!(span.flags & 0xff, 1);
    let attr = |k: &str| {
        span.attributes
            .iter()
            .find(|a| a.key == k)
            .and_then(|a| a.value.clone())
            .and_then(|v| v.value)
    };
    let r = &records[0];
    assert_eq!(attr("messaging.destination.name"), Some(Any::StringValue(r.topic.clone())));
    assert_eq!(
        attr("messaging.destination.partition.id"),
        Some(Any::StringValue(r.partition.to_string()))
    );
    assert_eq!(attr("messaging.kafka.offset"), Some(Any::IntValue(r.offset)));
    assert_eq!(attr("messaging.message.id"), Some(Any::StringValue(ids[0].clone())));
    assert!(matches!(attr("walrelay.lsn"), Some(Any::StringValue(l)) if l.contains('/')));
    // Commit → ack: the commit is before the producer stamped the record (CreateTime), the
    // ack after it; both within the test's own clock readings.
    let (start_ms, end_ms) = (
        (span.start_time_unix_nano / 1_000_000) as i64,
        span.end_time_unix_nano.div_ceil(1_000_000) as i64,
    );
    let stamped = r.timestamp_ms.expect("a record timestamp");
    assert!(
        before <= start_ms && start_ms <= stamped && stamped <= end_ms && end_ms <= after + 5_000,
        "before {before} start {start_ms} record {stamped} end {end_ms} after {after}"
    );
    // Counted once the collector answered the export, which can be after the test read the
    // span the collector received.
    let exported = || async {
        metric(
            &http_get(http, "/metrics").await.unwrap_or_default(),
            "walrelay_spans_exported_total",
        )
    };
    wait_until("the export counted", Duration::from_secs(10), || async {
        exported().await == Some(1.0)
    })
    .await;
    assert_eq!(exported().await, Some(1.0));
    relay.terminate();
}
