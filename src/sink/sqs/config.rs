//! `[sqs]`: which region and endpoint, which queue a routed name goes to, the credentials and
//! how long one publish may take.

use std::time::Duration;

use serde::Deserialize;

use crate::options::{invalid, required, section, ConfigError, Options};

const S: &str = "sqs";

/// The one variable `queue_url` may hold.
const TOPIC: &str = "${topic}";

/// `[sqs]`, checked.
#[derive(Clone, PartialEq, Eq)]
pub struct SqsConfig {
    pub region: String,
    /// A local or SQS-compatible server instead of AWS's regional endpoint.
    pub endpoint: Option<String>,
    /// The queue URL with `${topic}` in place of the queue-name form of the routed name.
    pub queue_url: String,
    /// Both or neither: absent, the SDK's default chain (environment, profile, web identity,
    /// container and instance roles) finds them.
    pub credentials: Option<(String, String)>,
    /// How long one publish (all its batches) may take before it answers `Retry`.
    pub timeout: Duration,
    /// The largest message, body and attributes counted as SQS counts them.
    pub max_message_bytes: usize,
}

impl SqsConfig {
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
    /// SQS's limit for a message, and for the sum of one batch's messages, before 2025; a
    /// queue made since may take up to 1 MiB (its `MaximumMessageSize`).
    pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 256 * 1024;
    pub const LARGEST_MAX_MESSAGE_BYTES: usize = 1024 * 1024;
    /// SQS's own limit on a queue name (with `.fifo`).
    pub const MAX_QUEUE_NAME: usize = 80;

    /// A FIFO queue's URL ends in `.fifo` (its name must): group and dedup ids then go with
    /// every message.
    pub fn fifo(&self) -> bool {
        self.queue_url.ends_with(".fifo")
    }

    /// The queue URL for a routed name: `${topic}` becomes the name with each `.` written `-`
    /// (a queue name allows only letters, digits, `-` and `_`; a routed name is a Kafka topic
    /// name, `[A-Za-z0-9._-]`).
    pub fn queue_url_for(&self, routed: &str) -> String {
        self.queue_url.replace(TOPIC, &routed.replace('.', "-"))
    }

    /// The last path segment of [`SqsConfig::queue_url_for`]: what CreateQueue is given.
    pub fn queue_name_for(&self, routed: &str) -> String {
        queue_name(&self.queue_url_for(routed)).to_string()
    }
}

impl std::fmt::Debug for SqsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsConfig")
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("queue_url", &self.queue_url)
            .field("access_key_id", &self.credentials.as_ref().map(|(id, _)| id))
            .field("secret_access_key", &self.credentials.as_ref().map(|_| "****"))
            .field("timeout", &self.timeout)
            .field("max_message_bytes", &self.max_message_bytes)
            .finish()
    }
}

/// The queue name of a queue URL: its last path segment.
pub fn queue_name(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Raw {
    region: Option<String>,
    endpoint: Option<String>,
    queue_url: Option<String>,
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
    timeout: Option<String>,
    max_message_bytes: Option<u64>,
}

/// `[sqs]` from its options; the region falls back to `AWS_REGION`, then `AWS_DEFAULT_REGION`.
pub fn parse(opts: &Options) -> Result<SqsConfig, ConfigError> {
    let env_region = ["AWS_REGION", "AWS_DEFAULT_REGION"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()));
    parse_with(opts, env_region)
}

fn parse_with(opts: &Options, env_region: Option<String>) -> Result<SqsConfig, ConfigError> {
    let raw: Raw = section::from_options(S, opts)?;
    let region = required(
        S,
        raw.region.or(env_region),
        "region",
        "set region = \"eu-west-1\" (the queues' region), or AWS_REGION in the environment",
    )?;
    if region.trim().is_empty() || region.contains(char::is_whitespace) {
        return Err(invalid(S, "region", &region, "must be a region name such as \"eu-west-1\""));
    }
    let endpoint = match raw.endpoint {
        Some(url) if !is_http_url(&url) => {
            return Err(invalid(
                S,
                "endpoint",
                &url,
                "must be an http:// or https:// URL, e.g. \"http://127.0.0.1:9324\"",
            ))
        }
        other => other,
    };
    let queue_url = required(
        S,
        raw.queue_url,
        "queue_url",
        "set queue_url = \"https://sqs.eu-west-1.amazonaws.com/123456789012/${topic}\" \
         (${topic} is the routed name with each `.` written `-`; end it in .fifo for FIFO queues)",
    )?;
    check_queue_url(&queue_url)?;
    let credentials = match (raw.access_key_id, raw.secret_access_key) {
        (Some(id), Some(secret)) => Some((id, secret)),
        (None, None) => None,
        (Some(_), None) => {
            return Err(ConfigError::Missing {
                section: S,
                key: "secret_access_key".into(),
                hint: "set it with access_key_id (WALRELAY_SQS_SECRET_ACCESS_KEY), or remove \
                       access_key_id to use the SDK's default credential chain"
                    .into(),
            })
        }
        (None, Some(_)) => {
            return Err(ConfigError::Missing {
                section: S,
                key: "access_key_id".into(),
                hint: "set it with secret_access_key (WALRELAY_SQS_ACCESS_KEY_ID), or remove \
                       secret_access_key to use the SDK's default credential chain"
                    .into(),
            })
        }
    };
    let timeout = match raw.timeout {
        Some(text) => {
            crate::duration::parse(&text).map_err(|reason| invalid(S, "timeout", &text, &reason))?
        }
        None => SqsConfig::DEFAULT_TIMEOUT,
    };
    if timeout.is_zero() {
        return Err(invalid(S, "timeout", "0s", "must be at least 1s, e.g. \"10s\""));
    }
    let max_message_bytes = match raw.max_message_bytes {
        None => SqsConfig::DEFAULT_MAX_MESSAGE_BYTES,
        Some(n) if (1024..=SqsConfig::LARGEST_MAX_MESSAGE_BYTES as u64).contains(&n) => n as usize,
        Some(n) => {
            return Err(invalid(
                S,
                "max_message_bytes",
                &n.to_string(),
                "must be from 1024 to 1048576 (1 MiB, SQS's largest), and at most the queues' \
                 MaximumMessageSize",
            ))
        }
    };
    Ok(SqsConfig { region, endpoint, queue_url, credentials, timeout, max_message_bytes })
}

fn is_http_url(url: &str) -> bool {
    ["http://", "https://"]
        .iter()
        .any(|scheme| url.strip_prefix(scheme).is_some_and(|rest| !rest.is_empty()))
}

/// An http(s) URL whose path ends in a queue name; `${topic}` only there, no other variable.
fn check_queue_url(url: &str) -> Result<(), ConfigError> {
    let refuse = |reason: &str| Err(invalid(S, "queue_url", url, reason));
    if !is_http_url(url) {
        return refuse(
            "must be an http:// or https:// queue URL, e.g. \
             \"https://sqs.eu-west-1.amazonaws.com/123456789012/${topic}\"",
        );
    }
    let without_topic = url.replace(TOPIC, "");
    if let Some(start) = without_topic.find("${") {
        let end = without_topic[start..].find('}').map_or(without_topic.len(), |e| start + e + 1);
        return refuse(&format!(
            "has the variable {} but only ${{topic}} is known (the routed name)",
            &without_topic[start..end]
        ));
    }
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let Some((_, path)) = after_scheme.split_once('/') else {
        return refuse("has no path: a queue URL ends in /<account id>/<queue name>");
    };
    let name = queue_name(path);
    if path.rsplit_once('/').is_some_and(|(dirs, _)| dirs.contains(TOPIC)) {
        return refuse(
            "has ${topic} before its last path segment: it may only be in the queue name",
        );
    }
    let example = name.replace(TOPIC, "orders-created");
    let stem = example.strip_suffix(".fifo").unwrap_or(&example);
    if stem.is_empty() || !stem.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return refuse(
            "ends in a queue name with characters SQS does not allow: only letters, digits, `-` \
             and `_`, and `.fifo` at the end of a FIFO queue's",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> Options {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    const URL: &str = "https://sqs.eu-west-1.amazonaws.com/123456789012/app-${topic}";

    fn parsed(pairs: &[(&str, &str)]) -> Result<SqsConfig, ConfigError> {
        parse_with(&opts(pairs), None)
    }

    #[test]
    fn defaults_and_the_queue_of_a_routed_name() {
        let c = parsed(&[("region", "eu-west-1"), ("queue_url", URL)]).unwrap();
        assert_eq!(c.timeout, Duration::from_secs(10));
        assert_eq!(c.max_message_bytes, 262_144);
        assert_eq!(c.credentials, None);
        assert!(!c.fifo());
        assert_eq!(
            c.queue_url_for("orders.created"),
            "https://sqs.eu-west-1.amazonaws.com/123456789012/app-orders-created"
        );
        assert_eq!(c.queue_name_for("orders.created"), "app-orders-created");
        let fifo = parsed(&[("region", "x-1"), ("queue_url", &format!("{URL}.fifo"))]).unwrap();
        assert!(fifo.fifo());
        assert_eq!(fifo.queue_name_for("a.b"), "app-a-b.fifo");
    }

    #[test]
    fn region_comes_from_the_section_or_the_environment() {
        let e = parsed(&[("queue_url", URL)]).unwrap_err().to_string();
        assert!(e.contains("`region`") && e.contains("AWS_REGION"), "{e}");
        let c = parse_with(&opts(&[("queue_url", URL)]), Some("us-east-2".into())).unwrap();
        assert_eq!(c.region, "us-east-2");
    }

    #[test]
    fn queue_url_refusals_name_the_problem() {
        let refused = |url: &str| {
            parsed(&[("region", "eu-west-1"), ("queue_url", url)]).unwrap_err().to_string()
        };
        let e = refused("https://sqs.x.amazonaws.com/1/${tenant}-${topic}");
        assert!(e.contains("${tenant}") && e.contains("only ${topic}"), "{e}");
        let e = refused("sqs.x.amazonaws.com/1/${topic}");
        assert!(e.contains("http:// or https://"), "{e}");
        let e = refused("https://sqs.x.amazonaws.com/${topic}/q");
        assert!(e.contains("only be in the queue name"), "{e}");
        let e = refused("https://sqs.x.amazonaws.com/1/orders.${topic}");
        assert!(e.contains("characters SQS does not allow"), "{e}");
        let e = parsed(&[("region", "eu-west-1")]).unwrap_err().to_string();
        assert!(e.contains("missing required key `queue_url`"), "{e}");
        // A fixed queue for every routed name is fine.
        parsed(&[("region", "r"), ("queue_url", "http://127.0.0.1:9324/0/all.fifo")]).unwrap();
    }

    #[test]
    fn credentials_come_in_pairs_and_never_show() {
        let e = parsed(&[("region", "r"), ("queue_url", URL), ("access_key_id", "AKIA")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("`secret_access_key`") && e.contains("default credential chain"), "{e}");
        let c = parsed(&[
            ("region", "r"),
            ("queue_url", URL),
            ("access_key_id", "AKIA"),
            ("secret_access_key", "hunter2"),
        ])
        .unwrap();
        assert_eq!(c.credentials, Some(("AKIA".into(), "hunter2".into())));
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn other_refusals() {
        let base = [("region", "r"), ("queue_url", URL)];
        let with = |key: &str, value: &str| {
            let mut pairs = base.to_vec();
            pairs.push((key, value));
            parsed(&pairs).unwrap_err().to_string()
        };
        assert!(with("timeout", "soon").contains("`timeout`"));
        assert!(with("timeout", "0s").contains("at least 1s"));
        assert!(with("max_message_bytes", "2000000").contains("1048576"));
        assert!(with("endpoint", "localhost:9324").contains("http://"));
        let e = with("queue", "x");
        assert!(e.contains("unknown key `queue`") && e.contains("queue_url"), "{e}");
    }
}
