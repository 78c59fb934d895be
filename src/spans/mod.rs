//! The relay's spans, exported over OTLP/HTTP with protobuf bodies (`[tracing] otlp_endpoint`).
//!
//! One span per relayed event whose trace is sampled: a child of the writer's span, from the
//! transaction's commit to the broker's acknowledgement. The relay loop hands finished spans to
//! [`Exporter::submit`], which never waits: a bounded queue feeds a thread of the exporter's own
//! that batches them and POSTs `ExportTraceServiceRequest`s; when the queue is full, or the
//! receiver fails, spans are dropped and counted (`walrelay_spans_dropped_total`).
//!
//! The OTLP messages are the few of `opentelemetry/proto/{collector/trace,trace,common,
//! resource}/v1` a span needs, declared here with prost's derive (same field numbers and types)
//! rather than generated with the OpenTelemetry crates, whose exporter stack would add an HTTP
//! client and an SDK to the build for what is one POST; the integration test decodes what is
//! sent with `opentelemetry-proto`'s generated types.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prost::Message;

use crate::config::{Config, TracingConfig};
use crate::metrics::Metrics;
use crate::trace::Pending;

/// Spans sent in one request at most, and how long a batch waits to fill.
const BATCH_SPANS: usize = 512;
const BATCH_WAIT: Duration = Duration::from_millis(100);
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// A failing receiver is logged at most this often.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// A finished span.
#[derive(Debug, Clone)]
pub struct Span {
    pub pending: Pending,
    pub topic: Arc<str>,
    pub partition: i32,
    pub offset: i64,
    /// When the broker's acknowledgement was handled, µs since the Unix epoch.
    pub ack_micros: i64,
}

/// The handle the relay submits finished spans through. Dropping it lets the export thread
/// send what it holds and end.
#[derive(Debug)]
pub struct Exporter {
    queue: SyncSender<Span>,
    metrics: Arc<Metrics>,
}

impl Exporter {
    /// The exporter `config` asks for (`[tracing]`), its thread started.
    pub fn for_config(config: &Config, metrics: &Arc<Metrics>) -> Option<Exporter> {
        let name = &config.router.trace_operation;
        config.tracing.as_ref().map(|t| Exporter::start(t, name, metrics.clone()))
    }

    /// Starts the export thread for `[tracing]`; `name` is `tracing.operation.name`.
    pub fn start(cfg: &TracingConfig, name: &str, metrics: Arc<Metrics>) -> Exporter {
        let (queue, spans) = mpsc::sync_channel(cfg.queue_spans);
        let sender = Sender {
            endpoint: Endpoint::parse(&cfg.otlp_endpoint),
            service_name: cfg.service_name.clone(),
            name: name.to_owned(),
            metrics: metrics.clone(),
            warned: None,
        };
        let spawned = std::thread::Builder::new()
            .name("walrelay-otlp".into())
            .spawn(move || sender.run(spans));
        if let Err(e) = spawned {
            // The receiving end is gone with the closure: every span is then dropped, counted.
            tracing::error!(error = %e, "cannot start the OTLP export thread; spans are dropped");
        }
        Exporter { queue, metrics }
    }

    /// Finishes the span of a record the broker acknowledged, stored at `partition` and
    /// `offset` of `topic`, and queues it.
    pub fn acked(&self, pending: Pending, topic: &Arc<str>, partition: i32, offset: i64, at: i64) {
        let topic = topic.clone();
        self.submit(Span { pending, topic, partition, offset, ack_micros: at });
    }

    /// Queues a span for export; never waits.
    pub fn submit(&self, span: Span) {
        match self.queue.try_send(span) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.metrics.spans_dropped.fetch_add(1, Relaxed);
            }
        }
    }
}

/// `http://host:port/path`, as `[tracing]` validated it.
#[derive(Debug, Clone)]
struct Endpoint {
    authority: String,
    path: String,
}

impl Endpoint {
    fn parse(url: &str) -> Endpoint {
        let rest = url.strip_prefix("http://").unwrap_or(url);
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/v1/traces"),
        };
        Endpoint { authority: authority.to_owned(), path: path.to_owned() }
    }

    fn host_port(&self) -> String {
        match self.authority.rsplit_once(':') {
            Some((_, port)) if port.bytes().all(|b| b.is_ascii_digit()) => self.authority.clone(),
            _ => format!("{}:80", self.authority),
        }
    }
}

struct Sender {
    endpoint: Endpoint,
    service_name: String,
    name: String,
    metrics: Arc<Metrics>,
    warned: Option<Instant>,
}

impl Sender {
    fn run(mut self, spans: mpsc::Receiver<Span>) {
        while let Ok(first) = spans.recv() {
            let mut batch = vec![first];
            let deadline = Instant::now() + BATCH_WAIT;
            let mut closed = false;
            while batch.len() < BATCH_SPANS {
                match spans.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                    Ok(span) => batch.push(span),
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => {
                        closed = true;
                        break;
                    }
                }
            }
            self.send(&batch);
            if closed {
                return;
            }
        }
    }

    fn send(&mut self, batch: &[Span]) {
        let body = request(batch, &self.service_name, &self.name).encode_to_vec();
        let n = batch.len() as u64;
        match self.post(&body) {
            Ok(()) => {
                self.metrics.spans_exported.fetch_add(n, Relaxed);
            }
            Err(reason) => {
                self.metrics.spans_dropped.fetch_add(n, Relaxed);
                if self.warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                    self.warned = Some(Instant::now());
                    tracing::warn!(endpoint = %self.endpoint.authority, path = %self.endpoint.path,
                        spans = n, %reason, "OTLP export failed; these spans are dropped (counted in walrelay_spans_dropped_total; logged at most once a minute)");
                }
            }
        }
    }

    /// One HTTP/1.1 POST on a connection of its own; any 2xx is success.
    fn post(&self, body: &[u8]) -> Result<(), String> {
        let addr = self
            .endpoint
            .host_port()
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {}: {e}", self.endpoint.authority))?
            .next()
            .ok_or_else(|| format!("{} resolves to no address", self.endpoint.authority))?;
        let mut conn = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
            .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        let io = |e: std::io::Error| format!("{addr}: {e}");
        conn.set_read_timeout(Some(IO_TIMEOUT)).map_err(io)?;
        conn.set_write_timeout(Some(IO_TIMEOUT)).map_err(io)?;
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-protobuf\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            self.endpoint.path,
            self.endpoint.authority,
            body.len()
        );
        conn.write_all(head.as_bytes()).map_err(io)?;
        conn.write_all(body).map_err(io)?;
        let mut response = Vec::new();
        let mut buf = [0u8; 1024];
        // The status line is all that is read; the body (an ExportTraceServiceResponse) is not.
        while !response.windows(2).any(|w| w == b"\r\n") && response.len() < 8192 {
            match conn.read(&mut buf).map_err(io)? {
                0 => break,
                n => response.extend_from_slice(&buf[..n]),
            }
        }
        let status = String::from_utf8_lossy(&response);
        let status = status.lines().next().unwrap_or("");
        match status.split(' ').nth(1) {
            Some(code) if code.starts_with('2') => Ok(()),
            _ => Err(format!("the receiver answered {status:?}")),
        }
    }
}

/// The request for one batch.
fn request(batch: &[Span], service_name: &str, name: &str) -> otlp::ExportTraceServiceRequest {
    let spans = batch.iter().map(|s| span(s, name)).collect();
    otlp::ExportTraceServiceRequest {
        resource_spans: vec![otlp::ResourceSpans {
            resource: Some(otlp::Resource { attributes: vec![text("service.name", service_name)] }),
            scope_spans: vec![otlp::ScopeSpans {
                scope: Some(otlp::InstrumentationScope {
                    name: "walrelay".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                }),
                spans,
            }],
        }],
    }
}

/// `SPAN_KIND_PRODUCER`: the relay sends the event to Kafka.
const SPAN_KIND_PRODUCER: i32 = 4;
/// `SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK` and `SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK`.
const HAS_IS_REMOTE: u32 = 0x100;
const IS_REMOTE: u32 = 0x200;

fn span(s: &Span, name: &str) -> otlp::Span {
    let t = &s.pending.trace;
    let nanos = |micros: i64| (micros.max(0) as u64).saturating_mul(1000);
    let remote = match t.parent {
        Some(_) => HAS_IS_REMOTE | IS_REMOTE,
        None => HAS_IS_REMOTE,
    };
    otlp::Span {
        trace_id: t.trace_id.to_vec(),
        span_id: t.span_id.to_vec(),
        trace_state: t.state.clone().unwrap_or_default(),
        parent_span_id: t.parent.map(|p| p.to_vec()).unwrap_or_default(),
        name: name.to_owned(),
        kind: SPAN_KIND_PRODUCER,
        start_time_unix_nano: nanos(s.pending.commit_micros),
        end_time_unix_nano: nanos(s.ack_micros.max(s.pending.commit_micros)),
        attributes: vec![
            text("messaging.system", "kafka"),
            text("messaging.operation.type", "send"),
            text("messaging.destination.name", &s.topic),
            text("messaging.destination.partition.id", &s.partition.to_string()),
            int("messaging.kafka.offset", s.offset),
            text("messaging.message.id", &s.pending.event_id),
            text("walrelay.lsn", &s.pending.lsn.to_string()),
        ],
        flags: u32::from(t.sampled) | remote,
    }
}

fn text(key: &str, value: &str) -> otlp::KeyValue {
    otlp::KeyValue {
        key: key.to_owned(),
        value: Some(otlp::AnyValue { value: Some(otlp::any_value::Value::String(value.into())) }),
    }
}

fn int(key: &str, value: i64) -> otlp::KeyValue {
    otlp::KeyValue {
        key: key.to_owned(),
        value: Some(otlp::AnyValue { value: Some(otlp::any_value::Value::Int(value)) }),
    }
}

/// The OTLP messages a span export needs, field for field as in opentelemetry-proto v1.
mod otlp {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExportTraceServiceRequest {
        #[prost(message, repeated, tag = "1")]
        pub resource_spans: Vec<ResourceSpans>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResourceSpans {
        #[prost(message, optional, tag = "1")]
        pub resource: Option<Resource>,
        #[prost(message, repeated, tag = "2")]
        pub scope_spans: Vec<ScopeSpans>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Resource {
        #[prost(message, repeated, tag = "1")]
        pub attributes: Vec<KeyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ScopeSpans {
        #[prost(message, optional, tag = "1")]
        pub scope: Option<InstrumentationScope>,
        #[prost(message, repeated, tag = "2")]
        pub spans: Vec<Span>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct InstrumentationScope {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub version: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Span {
        #[prost(bytes = "vec", tag = "1")]
        pub trace_id: Vec<u8>,
        #[prost(bytes = "vec", tag = "2")]
        pub span_id: Vec<u8>,
        #[prost(string, tag = "3")]
        pub trace_state: String,
        #[prost(bytes = "vec", tag = "4")]
        pub parent_span_id: Vec<u8>,
        #[prost(string, tag = "5")]
        pub name: String,
        #[prost(int32, tag = "6")]
        pub kind: i32,
        #[prost(fixed64, tag = "7")]
        pub start_time_unix_nano: u64,
        #[prost(fixed64, tag = "8")]
        pub end_time_unix_nano: u64,
        #[prost(message, repeated, tag = "9")]
        pub attributes: Vec<KeyValue>,
        #[prost(fixed32, tag = "16")]
        pub flags: u32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValue {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<AnyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AnyValue {
        #[prost(oneof = "any_value::Value", tags = "1, 3")]
        pub value: Option<any_value::Value>,
    }

    pub mod any_value {
        #[derive(Clone, PartialEq, prost::Oneof)]
        pub enum Value {
            #[prost(string, tag = "1")]
            String(String),
            #[prost(int64, tag = "3")]
            Int(i64),
        }
    }
}

#[cfg(test)]
mod tests;
