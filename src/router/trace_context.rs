//! The record's trace: the writer's span context read from `tracing.span.context.field`, carried
//! on as W3C `traceparent` / `tracestate` headers where Debezium's tracing SMT puts them (after
//! the `__debezium.context.*` headers, before `id`), converted by the header converter as its
//! `STRING` headers are.
//!
//! A context that cannot be read never stops the relay: the record goes without a trace, the
//! first such row of each relation is logged (with the reason, not the value), and every one is
//! counted (`walrelay_trace_context_invalid_total`).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bytes::Bytes;

use super::binding::{Binding, Values};
use super::column::{Cv, Kind};
use super::convert::{json_bytes, simple_header_bytes, string_bytes};
use super::converters::HeaderConverter;
use super::options::PlacementKind;
use super::{RouteError, Router};
use crate::trace::{context, Trace};

impl Router {
    /// The event's trace, with its headers pushed onto `headers` unless an envelope carries them
    /// (every format but Debezium's) or a `header` placement already sends a `traceparent`.
    pub(super) fn trace(
        &mut self,
        b: &Binding,
        vals: Values<'_>,
        headers: &mut Vec<(Arc<str>, Bytes)>,
    ) -> Result<Option<Trace>, RouteError> {
        let text = match &b.trace {
            Some(col) => string_bytes(&*vals.read(col)?),
            None => None,
        };
        let relay_spans = self.cfg.relay_spans;
        let trace = match text {
            Some(text) => match context::parse(&text) {
                Ok(parent) => {
                    Some(Trace::child_of(parent, relay_spans.then_some(&mut self.span_ids)))
                }
                Err(invalid) => {
                    self.invalid_context(b, text.len(), &invalid);
                    None
                }
            },
            None if self.cfg.trace_context_only => None,
            None => Some(Trace::root(&mut self.span_ids, relay_spans)),
        };
        let Some(trace) = trace else { return Ok(None) };
        if !self.cfg.event_envelope && !self.placed_traceparent() {
            headers.push((Arc::from("traceparent"), self.trace_header(trace.traceparent())));
            if let Some(state) = &trace.state {
                headers.push((Arc::from("tracestate"), self.trace_header(state.clone())));
            }
        }
        Ok(Some(trace))
    }

    /// A `header` placement named `traceparent` (Debezium users without OpenTelemetry on the
    /// Connect classpath placed the context column so) keeps its bytes; the router then adds
    /// no second `traceparent`, which consumers would read instead of it (the last one wins).
    fn placed_traceparent(&self) -> bool {
        self.cfg
            .placements
            .iter()
            .any(|p| p.kind == PlacementKind::Header && p.alias.eq_ignore_ascii_case("traceparent"))
    }

    /// A header value as Kafka Connect's header converter writes a `STRING` header.
    fn trace_header(&self, text: String) -> Bytes {
        let cv = Cv::Text(Bytes::from(text));
        match self.cfg.header_converter {
            HeaderConverter::Simple => simple_header_bytes(&cv).expect("not null"),
            HeaderConverter::Json { schemas } => {
                let schema = schemas.then(|| Kind::Text.schema(false).to_json());
                json_bytes(&cv, schema.as_deref()).expect("UTF-8 text")
            }
        }
    }

    fn invalid_context(&mut self, b: &Binding, len: usize, invalid: &context::Invalid) {
        if let Some(m) = &self.metrics {
            m.trace_context_invalid.fetch_add(1, Relaxed);
        }
        if self.trace_warned.len() < 1_000 && self.trace_warned.insert(b.table().clone()) {
            let column = b.trace.as_ref().map_or("", |c| &*c.name);
            tracing::warn!(table = %b.table(), column, bytes = len, reason = %invalid,
                "span context unreadable; the record is relayed without trace headers (logged once \
                 per table, counted in walrelay_trace_context_invalid_total)");
        }
    }
}
