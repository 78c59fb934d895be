//! `[webhook]` (for `[delivery] sink = "http"`): where each record is POSTed, and how it is
//! signed.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::signature::Secret;
use crate::options::{invalid, required, section, ConfigError, Options};

const S: &str = "webhook";

/// `[webhook]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// The URL template: `${topic}` is the routed name, percent-encoded.
    pub url: String,
    /// Standard Webhooks' signing secret; `None`: requests go unsigned.
    pub secret: Option<Secret>,
    /// How long one request may take before it counts as failed and is sent again.
    pub timeout: Duration,
    /// A PEM file of the CA that signed the receiver's certificate (https), instead of the
    /// Mozilla roots.
    pub ca: Option<PathBuf>,
}

impl WebhookConfig {
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

    /// The URL for a record routed to `topic`.
    pub fn url_for(&self, topic: &str) -> String {
        self.url.replace("${topic}", &percent_encode(topic))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Raw {
    url: Option<String>,
    secret: Option<String>,
    timeout: Option<String>,
    ca: Option<String>,
}

pub fn parse(opts: &Options) -> Result<WebhookConfig, ConfigError> {
    let raw: Raw = section::from_options(S, opts)?;
    let url = required(
        S,
        raw.url,
        "url",
        "set url = \"https://hooks.example.com/outbox/${topic}\" (${topic} is the routed name)",
    )?;
    check_template(&url)?;
    let secret = match raw.secret {
        Some(text) => {
            Some(Secret::parse(&text).map_err(|reason| invalid(S, "secret", "****", &reason))?)
        }
        None => None,
    };
    let timeout = match raw.timeout {
        Some(text) => {
            crate::duration::parse(&text).map_err(|reason| invalid(S, "timeout", &text, &reason))?
        }
        None => WebhookConfig::DEFAULT_TIMEOUT,
    };
    if timeout.is_zero() {
        return Err(invalid(S, "timeout", "0", "must be more than 0, e.g. \"10s\""));
    }
    Ok(WebhookConfig { url, secret, timeout, ca: raw.ca.map(PathBuf::from) })
}

/// The template names no variable but `${topic}`, and makes an http(s) URL with a host.
fn check_template(url: &str) -> Result<(), ConfigError> {
    let shown = crate::options::secret::redact_url(url);
    let mut rest = url;
    while let Some(at) = rest.find("${") {
        let after = &rest[at + 2..];
        let name = after.split('}').next().unwrap_or(after);
        if name != "topic" || !after.contains('}') {
            return Err(invalid(
                S,
                "url",
                &shown,
                &format!(
                    "names the variable ${{{name}}}; the only one is ${{topic}} (the routed name)"
                ),
            ));
        }
        rest = &after[name.len() + 1..];
    }
    let sample = url.replace("${topic}", "t");
    let uri: hyper::Uri = sample.parse().map_err(|e| {
        invalid(
            S,
            "url",
            &shown,
            &format!("is not a URL ({e}); e.g. \"https://hooks.example.com/${{topic}}\""),
        )
    })?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(_)) => Ok(()),
        _ => Err(invalid(S, "url", &shown, "must be an http:// or https:// URL with a host")),
    }
}

/// The routed name as one path segment: everything but RFC 3986's unreserved characters is
/// percent-encoded.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_text(pairs: &[(&str, &str)]) -> Result<WebhookConfig, ConfigError> {
        parse(&pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    #[test]
    fn the_topic_fills_the_template_percent_encoded() {
        let c = parse_text(&[("url", "http://127.0.0.1:9/in/${topic}")]).unwrap();
        assert_eq!(c.url_for("outbox.event.Order"), "http://127.0.0.1:9/in/outbox.event.Order");
        assert_eq!(c.url_for("a b/c"), "http://127.0.0.1:9/in/a%20b%2Fc");
        assert_eq!(c.timeout, WebhookConfig::DEFAULT_TIMEOUT);
        assert!(c.secret.is_none());
    }

    #[test]
    fn an_unknown_variable_a_missing_url_and_a_bad_secret_are_refused_naming_the_fix() {
        let e = parse_text(&[("url", "http://h/${tenant}/x")]).unwrap_err().to_string();
        assert!(e.contains("${tenant}") && e.contains("${topic}"), "{e}");
        let e = parse_text(&[]).unwrap_err().to_string();
        assert!(e.contains("url") && e.contains("${topic}"), "{e}");
        let e = parse_text(&[("url", "ftp://h/x")]).unwrap_err().to_string();
        assert!(e.contains("http://"), "{e}");
        let e = parse_text(&[("url", "http://h/x"), ("secret", "plaintextsecret")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("whsec_") && !e.contains("plaintextsecret"), "{e}");
    }
}
