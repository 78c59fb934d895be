//! Trace context across the outbox: the writer's span context read from the row
//! ([`context`]), carried on as W3C `traceparent` / `tracestate` by the record, and, when
//! `[tracing] otlp_endpoint` is set, one span per relayed event exported over OTLP/HTTP
//! ([`export`]).
//!
//! The router decides a record's [`Trace`] when it builds the record (so the relay's span id is
//! in the header before the record leaves); the envelope decides where the headers go; the
//! relay finishes the span when the broker acknowledges. Knows nothing of the router or Kafka.

pub mod context;

use crate::lsn::Lsn;
use context::SpanContext;

/// The trace a record carries on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    pub trace_id: [u8; 16],
    /// The writer's span; `None` when the relay started the trace itself
    /// (`tracing.with.context.field.only = false` and a row without a context).
    pub parent: Option<[u8; 8]>,
    /// The span the `traceparent` header names as the consumer's parent: the relay's own span
    /// when spans are exported, else the writer's (a span nobody exports would leave the
    /// consumer's span hanging under a parent no backend has).
    pub span_id: [u8; 8],
    /// Whether `span_id` is a relay span to export when sampled.
    pub relay_span: bool,
    pub sampled: bool,
    /// `tracestate`, re-joined; `None` when there is none.
    pub state: Option<String>,
}

impl Trace {
    /// The trace carried on from the writer's context; with `ids`, under a new relay span.
    pub fn child_of(parent: SpanContext, ids: Option<&mut SpanIds>) -> Trace {
        let (span_id, relay_span) = match ids {
            Some(ids) => (ids.span_id(), true),
            None => (parent.span_id, false),
        };
        Trace {
            trace_id: parent.trace_id,
            parent: Some(parent.span_id),
            span_id,
            relay_span,
            sampled: parent.sampled,
            state: parent.state,
        }
    }

    /// A new trace the relay starts, sampled (OpenTelemetry's default sampler samples roots).
    pub fn root(ids: &mut SpanIds, relay_span: bool) -> Trace {
        Trace {
            trace_id: ids.trace_id(),
            parent: None,
            span_id: ids.span_id(),
            relay_span,
            sampled: true,
            state: None,
        }
    }

    /// The `traceparent` header's text: version 00, flags `01` or `00`.
    pub fn traceparent(&self) -> String {
        let mut out = String::with_capacity(55);
        out.push_str("00-");
        context::write_hex(&mut out, &self.trace_id);
        out.push('-');
        context::write_hex(&mut out, &self.span_id);
        out.push_str(if self.sampled { "-01" } else { "-00" });
        out
    }

    /// Whether the relay's span for this record is to be exported.
    pub fn exported(&self) -> bool {
        self.relay_span && self.sampled
    }
}

/// Span and trace ids: SplitMix64 over a randomly seeded counter. Ids need to be unique and
/// unguessable enough for tracing, not cryptographic; one generator per router, no locking.
#[derive(Debug)]
pub struct SpanIds {
    state: u64,
}

impl Default for SpanIds {
    fn default() -> SpanIds {
        let seed = uuid::Uuid::now_v7().as_u64_pair();
        SpanIds { state: seed.0 ^ seed.1.rotate_left(17) }
    }
}

impl SpanIds {
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A non-zero span id.
    pub fn span_id(&mut self) -> [u8; 8] {
        loop {
            let id = self.next();
            if id != 0 {
                return id.to_be_bytes();
            }
        }
    }

    /// A non-zero trace id.
    pub fn trace_id(&mut self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.next().to_be_bytes());
        out[8..].copy_from_slice(&self.span_id());
        out
    }
}

/// What the relay knows of a span when it hands the record to the producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub trace: Trace,
    pub event_id: String,
    /// The row's (or message's) LSN.
    pub lsn: Lsn,
    /// The transaction's commit time, µs since the Unix epoch: the span's start.
    pub commit_micros: i64,
}

impl Pending {
    /// The span of a record with `trace` (at `lsn`, committed at `commit_micros`), when it is
    /// to be exported.
    pub fn of(
        trace: Option<&Trace>,
        id: &str,
        lsn: Lsn,
        commit_micros: i64,
    ) -> Option<Box<Pending>> {
        let trace = trace.filter(|t| t.exported())?.clone();
        Some(Box::new(Pending { trace, event_id: id.to_owned(), lsn, commit_micros }))
    }
}
