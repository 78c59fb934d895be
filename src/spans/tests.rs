use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest as Decoded;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;

use super::*;
use crate::lsn::Lsn;
use crate::trace::Trace;

fn pending(parent: Option<[u8; 8]>) -> Pending {
    Pending {
        trace: Trace {
            trace_id: [7; 16],
            parent,
            span_id: [9; 8],
            relay_span: true,
            sampled: true,
            state: Some("a=1".into()),
        },
        event_id: "e-1".into(),
        lsn: Lsn(0x1_0000_0010),
        commit_micros: 1_000_000,
    }
}

#[test]
fn requests_decode_with_opentelemetry_protos_own_types() {
    let spans = [
        Span {
            pending: pending(Some([3; 8])),
            topic: Arc::from("t"),
            partition: 2,
            offset: 41,
            ack_micros: 1_250_000,
        },
        // A root the relay started; an ack stamped before the commit is clamped.
        Span {
            pending: pending(None),
            topic: Arc::from("t"),
            partition: 0,
            offset: 0,
            ack_micros: 5,
        },
    ];
    let bytes = request(&spans, "svc", "debezium-read").encode_to_vec();
    let decoded = Decoded::decode(bytes.as_slice()).expect("an ExportTraceServiceRequest");
    let rs = &decoded.resource_spans[0];
    let service = &rs.resource.as_ref().unwrap().attributes[0];
    assert_eq!(service.key, "service.name");
    assert_eq!(service.value.as_ref().unwrap().value, Some(Any::StringValue("svc".into())));
    let ss = &rs.scope_spans[0];
    assert_eq!(ss.scope.as_ref().unwrap().name, "walrelay");
    let (a, b) = (&ss.spans[0], &ss.spans[1]);
    assert_eq!((a.trace_id.as_slice(), a.span_id.as_slice()), (&[7; 16][..], &[9; 8][..]));
    assert_eq!(a.parent_span_id, vec![3; 8]);
    assert_eq!((a.name.as_str(), a.kind, a.trace_state.as_str()), ("debezium-read", 4, "a=1"));
    assert_eq!((a.start_time_unix_nano, a.end_time_unix_nano), (1_000_000_000, 1_250_000_000));
    assert_eq!(a.flags, 0x301, "sampled, with a remote parent");
    let attr = |k: &str| {
        a.attributes.iter().find(|x| x.key == k).and_then(|x| x.value.clone()).and_then(|v| v.value)
    };
    assert_eq!(attr("messaging.kafka.offset"), Some(Any::IntValue(41)));
    assert_eq!(attr("messaging.destination.partition.id"), Some(Any::StringValue("2".into())));
    assert_eq!(attr("messaging.message.id"), Some(Any::StringValue("e-1".into())));
    assert_eq!(attr("walrelay.lsn"), Some(Any::StringValue("1/10".into())));
    assert!(b.parent_span_id.is_empty());
    assert_eq!(b.flags, 0x101);
    assert_eq!(b.end_time_unix_nano, b.start_time_unix_nano);
}

#[test]
fn endpoints_split_into_authority_and_path() {
    let e = Endpoint::parse("http://collector:4318/v1/traces");
    assert_eq!((e.authority.as_str(), e.path.as_str()), ("collector:4318", "/v1/traces"));
    assert_eq!(e.host_port(), "collector:4318");
    assert_eq!(Endpoint::parse("http://collector/otlp").host_port(), "collector:80");
}

#[test]
fn a_full_queue_drops_and_counts_without_waiting() {
    let metrics = Metrics::new();
    let cfg = TracingConfig {
        // Nothing listens on port 9 of this host: the thread's first POST fails.
        otlp_endpoint: "http://127.0.0.1:9/v1/traces".into(),
        queue_spans: 1,
        service_name: "walrelay".into(),
    };
    let exporter = Exporter::start(&cfg, "x", metrics.clone());
    let started = Instant::now();
    for _ in 0..1000 {
        exporter.acked(pending(None), &Arc::from("t"), 0, 0, 2_000_000);
    }
    assert!(started.elapsed() < Duration::from_secs(1), "submit never waits");
    // The export thread empties the one-span queue into its batch as fast as it can, so how
    // many got in depends on the scheduler; that the rest were dropped and counted does not.
    let dropped = metrics.spans_dropped.load(Relaxed);
    assert!(dropped > 0 && dropped <= 1000, "dropped {dropped} of 1000");
    drop(exporter);
}
