//! `[rabbitmq]`: where the RabbitMQ sink publishes, read and checked once at start-up.
//!
//! The URL carries the password, so it is never printed whole: errors and `Debug` show it
//! through [`crate::options::secret::redact_url`], and `WALRELAY_RABBITMQ_URL` sets it from the
//! environment.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use lapin::uri::{AMQPScheme, AMQPUri};
use serde::Deserialize;

use crate::options::secret::redact_url;
use crate::options::{invalid, required, section, ConfigError, Options};

const S: &str = "rabbitmq";

/// AMQP's short strings (exchange names, routing keys, `message_id`, header names): at most
/// 255 bytes on the wire.
pub(super) const SHORT_STRING_MAX: usize = 255;

/// `[rabbitmq]`, resolved.
#[derive(Clone, PartialEq, Eq)]
pub struct RabbitMqConfig {
    /// `amqp://user:password@host:port/vhost` or `amqps://…`; holds the password.
    pub url: String,
    /// Where every record is published; `""` is the default exchange, which routes to the
    /// queue named by the routing key.
    pub exchange: String,
    /// The type `walrelay setup` declares the exchange with.
    pub exchange_type: ExchangeType,
    /// How long one publish may wait for its publisher confirm (connecting included).
    pub timeout: Duration,
    /// `amqps://` only: a PEM file of the CA certificates to trust instead of the public web
    /// roots (a private CA's broker).
    pub ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for RabbitMqConfig {
    /// The URL's password is a secret: masked.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitMqConfig")
            .field("url", &redact_url(&self.url))
            .field("exchange", &self.exchange)
            .field("exchange_type", &self.exchange_type)
            .field("timeout", &self.timeout)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

impl RabbitMqConfig {
    /// The URL as messages may show it: the password masked.
    pub fn shown_url(&self) -> String {
        redact_url(&self.url)
    }
}

/// The exchange types RabbitMQ has without plugins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExchangeType {
    Direct,
    Fanout,
    Topic,
    Headers,
}

impl ExchangeType {
    pub fn name(self) -> &'static str {
        match self {
            ExchangeType::Direct => "direct",
            ExchangeType::Fanout => "fanout",
            ExchangeType::Topic => "topic",
            ExchangeType::Headers => "headers",
        }
    }

    pub(super) fn kind(self) -> lapin::ExchangeKind {
        match self {
            ExchangeType::Direct => lapin::ExchangeKind::Direct,
            ExchangeType::Fanout => lapin::ExchangeKind::Fanout,
            ExchangeType::Topic => lapin::ExchangeKind::Topic,
            ExchangeType::Headers => lapin::ExchangeKind::Headers,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Raw {
    url: Option<String>,
    exchange: Option<String>,
    exchange_type: Option<String>,
    timeout: Option<String>,
    ca_file: Option<String>,
}

pub fn parse(opts: &Options) -> Result<RabbitMqConfig, ConfigError> {
    let raw: Raw = section::from_options(S, opts)?;
    let url = required(
        S,
        raw.url,
        "url",
        "set url = \"amqp://user:password@host:5672/vhost\" (the password is better given as \
         WALRELAY_RABBITMQ_URL in the environment)",
    )?;
    check_url(&url)?;
    let exchange = required(
        S,
        raw.exchange,
        "exchange",
        "set exchange = \"outbox\" (the exchange every record is published to; \"\" is the \
         default exchange, which routes to the queue named by the routed name)",
    )?;
    if exchange.len() > SHORT_STRING_MAX {
        return Err(invalid(S, "exchange", &exchange, "is longer than AMQP's 255 bytes"));
    }
    let exchange_type = match raw.exchange_type.as_deref().map(str::trim) {
        None | Some("topic") => ExchangeType::Topic,
        Some("direct") => ExchangeType::Direct,
        Some("fanout") => ExchangeType::Fanout,
        Some("headers") => ExchangeType::Headers,
        Some(other) => {
            return Err(invalid(
                S,
                "exchange_type",
                other,
                "must be one of topic, direct, fanout, headers",
            ))
        }
    };
    let timeout = match raw.timeout {
        None => Duration::from_secs(10),
        Some(text) => {
            let timeout = crate::duration::parse(&text)
                .map_err(|reason| invalid(S, "timeout", &text, &reason))?;
            if timeout.is_zero() {
                return Err(invalid(S, "timeout", &text, "must be at least 1s"));
            }
            timeout
        }
    };
    let ca_file = match raw.ca_file.filter(|f| !f.trim().is_empty()) {
        None => None,
        Some(_) if !url.starts_with("amqps:") => {
            return Err(invalid(
                S,
                "ca_file",
                "",
                "applies to amqps:// URLs only: use amqps:// or remove ca_file",
            ))
        }
        Some(file) => Some(PathBuf::from(file)),
    };
    Ok(RabbitMqConfig { url, exchange, exchange_type, timeout, ca_file })
}

/// Refuses what lapin would refuse later, or misread: not a URL, another scheme.
fn check_url(url: &str) -> Result<(), ConfigError> {
    let fix = "write it as amqp://user:password@host:5672/vhost (amqps:// for TLS; the vhost \
               \"/\" is %2f or left out; percent-encode special characters in the password)";
    let parsed = AMQPUri::from_str(url).map_err(|_| invalid(S, "url", url, fix))?;
    if !matches!(parsed.scheme, AMQPScheme::AMQP | AMQPScheme::AMQPS) {
        return Err(invalid(S, "url", url, fix));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> Options {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn base() -> Vec<(&'static str, &'static str)> {
        vec![("url", "amqp://relay:hunter2@mq.example:5672/%2f"), ("exchange", "outbox")]
    }

    fn refusal(extra: &[(&'static str, &'static str)]) -> String {
        let mut pairs = base();
        for (k, v) in extra {
            pairs.retain(|(key, _)| key != k);
            pairs.push((k, v));
        }
        pairs.retain(|(_, v)| *v != "<unset>");
        parse(&opts(&pairs)).expect_err("refused").to_string()
    }

    #[test]
    fn defaults_are_a_topic_exchange_and_ten_seconds() {
        let config = parse(&opts(&base())).expect("valid");
        assert_eq!(config.exchange, "outbox");
        assert_eq!(config.exchange_type, ExchangeType::Topic);
        assert_eq!(config.timeout, Duration::from_secs(10));
        let debug = format!("{config:?}");
        assert!(!debug.contains("hunter2") && debug.contains("****"), "{debug}");
    }

    #[test]
    fn the_default_exchange_and_amqps_are_accepted() {
        let config = parse(&opts(&[
            ("url", "amqps://relay:pw@mq.example/prod"),
            ("exchange", ""),
            ("exchange_type", "direct"),
            ("timeout", "30s"),
        ]))
        .expect("valid");
        assert_eq!(config.exchange, "");
        assert_eq!(config.exchange_type, ExchangeType::Direct);
        assert_eq!(config.timeout, Duration::from_secs(30));
        let mut pairs = base();
        pairs.push(("ca_file", "/etc/walrelay/ca.pem"));
        let e = parse(&opts(&pairs)).expect_err("ca_file without amqps").to_string();
        assert!(e.contains("`ca_file`") && e.contains("amqps://"), "{e}");
        pairs[0] = ("url", "amqps://relay:pw@mq.example/prod");
        let config = parse(&opts(&pairs)).expect("ca_file with amqps");
        assert_eq!(config.ca_file, Some(PathBuf::from("/etc/walrelay/ca.pem")));
    }

    #[test]
    fn url_and_exchange_are_required() {
        let e = refusal(&[("url", "<unset>")]);
        assert!(e.contains("missing required key `url`") && e.contains("WALRELAY_RABBITMQ_URL"));
        let e = refusal(&[("exchange", "<unset>")]);
        assert!(e.contains("missing required key `exchange`") && e.contains("default exchange"));
    }

    #[test]
    fn a_bad_url_is_refused_without_its_password() {
        for url in ["http://relay:hunter2@mq.example/", "relay:hunter2@mq"] {
            let e = refusal(&[("url", url)]);
            assert!(e.contains("`url`") && e.contains("amqp://user:password@host"), "{e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
    }

    #[test]
    fn bad_exchange_type_timeout_and_names_are_refused() {
        let e = refusal(&[("exchange_type", "x-delayed")]);
        assert!(e.contains("`exchange_type`") && e.contains("topic, direct, fanout"), "{e}");
        let e = refusal(&[("timeout", "10")]);
        assert!(e.contains("`timeout`") && e.contains("one unit"), "{e}");
        let e = refusal(&[("timeout", "0s")]);
        assert!(e.contains("at least 1s"), "{e}");
        let long: &'static str = Box::leak("x".repeat(256).into_boxed_str());
        let e = refusal(&[("exchange", long)]);
        assert!(e.contains("255 bytes"), "{e}");
        let e = refusal(&[("exchnage", "x")]);
        assert!(e.contains("unknown key `exchnage`"), "{e}");
    }
}
