//! `[tracing]`: where the relay's spans go. Trace context propagation needs no
//! section: it follows the `[router]` `tracing.*` options, Debezium's.

use serde::Deserialize;

use super::{invalid, section, ConfigError, Options};

/// `[tracing]`: export one span per relayed event over OTLP/HTTP (protobuf).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracingConfig {
    /// `http://host:port/path`: the path as given, or `/v1/traces` when there is none (OTLP's
    /// rule for a base endpoint).
    pub otlp_endpoint: String,
    /// Spans waiting for export at most; more are dropped and counted, never waited for.
    pub queue_spans: usize,
    /// The `service.name` resource attribute.
    pub service_name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Raw {
    otlp_endpoint: Option<String>,
    queue_spans: Option<u64>,
    service_name: Option<String>,
}

pub(super) fn parse(opts: &Options) -> Result<Option<TracingConfig>, ConfigError> {
    const S: &str = "tracing";
    let raw: Raw = section::from_options(S, opts)?;
    let Some(endpoint) = raw.otlp_endpoint.map(|e| e.trim().to_owned()) else { return Ok(None) };
    let Some(rest) = endpoint.strip_prefix("http://") else {
        return Err(invalid(
            S,
            "otlp_endpoint",
            &endpoint,
            "must be an http:// URL of an OTLP/HTTP receiver (e.g. a collector beside the relay at \
             http://127.0.0.1:4318); https is not supported yet",
        ));
    };
    if rest.is_empty() || rest.starts_with('/') {
        return Err(invalid(S, "otlp_endpoint", &endpoint, "has no host"));
    }
    let otlp_endpoint = match rest.find('/') {
        Some(i) if rest.len() > i + 1 => endpoint,
        Some(_) => format!("{endpoint}v1/traces"),
        None => format!("{endpoint}/v1/traces"),
    };
    let queue_spans = raw.queue_spans.unwrap_or(8192);
    if queue_spans == 0 || queue_spans > 1 << 24 {
        return Err(invalid(S, "queue_spans", &queue_spans.to_string(), "must be 1 to 16777216"));
    }
    Ok(Some(TracingConfig {
        otlp_endpoint,
        queue_spans: queue_spans as usize,
        service_name: raw.service_name.unwrap_or_else(|| "walrelay".to_owned()),
    }))
}
