//! `[tracing]`: where the relay's spans go. Trace context propagation needs no
//! section: it follows the `[router]` `tracing.*` options, Debezium's.

use serde::Deserialize;

use super::{invalid, secret, section, ConfigError, Options};

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
    if let Some(why) = carries_secret(rest) {
        // The value is not shown: it is the secret.
        return Err(invalid(
            S,
            "otlp_endpoint",
            "",
            &format!(
                "carries {why}, which would be logged, shown by the console and sent in the clear: \
                 remove it from the URL. walrelay sends no credentials to the receiver: point it \
                 at a collector beside the relay (http://127.0.0.1:4318) that adds them, from its \
                 own secret, on the way out"
            ),
        ));
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

/// What secret the part of an `http://` URL after the scheme holds, if any: user-info
/// (`user:token@`, or a token alone as the user), or a query parameter named like a secret
/// (`?api_key=…`, `?token=…`, `?key=…`).
fn carries_secret(rest: &str) -> Option<&'static str> {
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    if authority.contains('@') {
        return Some("credentials in its user-info (the part before `@`)");
    }
    let query = rest.split_once('?').map_or("", |(_, q)| q);
    let query = query.split('#').next().unwrap_or("");
    query
        .split('&')
        .filter_map(|pair| pair.split('=').next())
        .any(|name| {
            let lower = name.to_ascii_lowercase();
            secret::is_secret_key(&lower) || matches!(lower.as_str(), "key" | "auth" | "sig")
        })
        .then_some("a secret in its query")
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    const MINIMAL: &str = "[source]\nurl = \"postgres://u@h/d\"\n[outbox]\ntable = \"public.outbox\"\n[kafka]\n\"bootstrap.servers\" = \"k:9092\"\n";

    fn endpoint(url: &str) -> Result<String, String> {
        Config::parse(&format!("{MINIMAL}[tracing]\notlp_endpoint = \"{url}\"\n"))
            .map(|c| c.tracing.expect("[tracing]").otlp_endpoint)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn an_otlp_endpoint_with_credentials_is_refused_without_showing_them() {
        for url in [
            "http://walrelay:S3cr3t-tok@collector:4318",
            "http://S3cr3t-tok@collector:4318/v1/traces",
            "http://collector:4318/v1/traces?api_key=S3cr3t-tok",
            "http://collector:4318?token=S3cr3t-tok",
            "http://collector:4318/v1/traces?x=1&key=S3cr3t-tok",
        ] {
            let e = endpoint(url).unwrap_err();
            assert!(e.contains("[tracing] `otlp_endpoint`"), "{url}: {e}");
            assert!(e.contains("remove it from the URL") && e.contains("collector"), "{e}");
            assert!(!e.contains("S3cr3t-tok"), "the message shows the secret: {e}");
        }
        // An `@` in the path is no user-info, and a plain query is no secret.
        assert!(endpoint("http://collector:4318/v1/traces/@x").is_ok());
        assert!(endpoint("http://collector:4318/v1/traces?tenant=a").is_ok());
    }
}
