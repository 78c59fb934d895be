//! `[schema_registry]`: the Confluent-compatible registry a registry converter
//! (`[debezium] value.converter = "avro"`) registers its schemas with and frames its values by
//! (Confluent's, Apicurio's `/apis/ccompat/v7`, Karapace, Redpanda's).

use std::path::PathBuf;

use serde::Deserialize;

use super::{invalid, required, section, ConfigError, Options};

/// `[schema_registry]`.
#[derive(Clone, PartialEq, Eq)]
pub struct SchemaRegistryConfig {
    /// Base URLs, tried in order (`url` takes one or several, comma-separated, as the
    /// converters' `schema.registry.url` does), without a trailing `/`.
    pub urls: Vec<String>,
    /// HTTP basic auth: the user, and the password (a secret:
    /// `WALRELAY_SCHEMA_REGISTRY_PASSWORD`).
    pub user: Option<String>,
    pub password: Option<String>,
    /// `auto.register.schemas`: the value's schema is registered under its subject.
    pub auto_register: bool,
    /// `use.latest.version`: the value is written under its subject's latest registered schema
    /// (with `auto_register = false`), not the one derived from it.
    pub use_latest_version: bool,
    /// For `https://` URLs: the CA that signed the registry's certificate (PEM; the Mozilla
    /// roots without one), and a client certificate and its key (PEM) for a registry that asks.
    pub ca: Option<PathBuf>,
    pub identity: Option<(PathBuf, PathBuf)>,
    /// How a value's subject is named.
    pub subject_name_strategy: SubjectNameStrategy,
    /// Where the schema's id goes (Apicurio's `apicurio.registry.id-handler` and
    /// `headers.enabled`), and which id (its `use-id`).
    pub id_handler: IdHandler,
    pub use_id: UseId,
}

/// Where a framed value's schema id goes: Confluent's framing, or one of Apicurio's serdes'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdHandler {
    /// A magic byte 0, then the id in 4 bytes, big-endian: Confluent's framing, and Apicurio 3's
    /// serdes' default (`Default4ByteIdHandler`).
    FourByte,
    /// A magic byte 0, then the id in 8 bytes: Apicurio 2's serdes with headers off
    /// (`DefaultIdHandler`), Apicurio 3's `Legacy8ByteIdHandler`.
    EightByte,
    /// The value unframed, the id in an 8-byte header (`apicurio.value.globalId` or
    /// `apicurio.value.contentId`), and Avro's `apicurio.value.encoding`: Apicurio 2's serdes'
    /// default in Kafka Connect (`apicurio.registry.headers.enabled`).
    Headers,
}

/// Which of a registered schema's ids a value carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UseId {
    /// The id the Confluent-compatible API answers: Confluent's schema id, Apicurio's contentId.
    ContentId,
    /// Apicurio's globalId (one per artifact version), read from Apicurio's own API.
    GlobalId,
}

impl IdHandler {
    pub fn as_str(self) -> &'static str {
        match self {
            IdHandler::FourByte => "4-byte",
            IdHandler::EightByte => "8-byte",
            IdHandler::Headers => "headers",
        }
    }
}

impl UseId {
    pub fn as_str(self) -> &'static str {
        match self {
            UseId::ContentId => "contentId",
            UseId::GlobalId => "globalId",
        }
    }
}

impl SchemaRegistryConfig {
    /// Whether values are framed as Confluent's converters frame them.
    pub fn confluent_framing(&self) -> bool {
        (self.id_handler, self.use_id) == (IdHandler::FourByte, UseId::ContentId)
    }

    /// Apicurio's own API beside its Confluent-compatible one (`…/apis/ccompat/v7` →
    /// `…/apis/registry/v2`), where globalIds are read: parse refuses a `use_id = "globalId"`
    /// whose URLs are not Apicurio's.
    pub fn apicurio_api(base: &str) -> Option<String> {
        let at = base.find("/apis/ccompat/")?;
        Some(format!("{}/apis/registry/v2", &base[..at]))
    }
}

/// Confluent's `value.subject.name.strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubjectNameStrategy {
    /// `TopicNameStrategy`: `<topic>-value`.
    Topic,
    /// `RecordNameStrategy`: the record's full name.
    Record,
    /// `TopicRecordNameStrategy`: `<topic>-<record's full name>`.
    TopicRecord,
}

impl SubjectNameStrategy {
    /// The short name, or Confluent's class name.
    pub fn parse(text: &str) -> Option<SubjectNameStrategy> {
        let short = text.strip_prefix("io.confluent.kafka.serializers.subject.").unwrap_or(text);
        Some(match short {
            "topic" | "TopicNameStrategy" => SubjectNameStrategy::Topic,
            "record" | "RecordNameStrategy" => SubjectNameStrategy::Record,
            "topic-record" | "TopicRecordNameStrategy" => SubjectNameStrategy::TopicRecord,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SubjectNameStrategy::Topic => "topic",
            SubjectNameStrategy::Record => "record",
            SubjectNameStrategy::TopicRecord => "topic-record",
        }
    }
}

impl std::fmt::Debug for SchemaRegistryConfig {
    /// The password is a secret: its presence only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchemaRegistryConfig")
            .field("urls", &self.urls)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| crate::options::secret::MASK))
            .field("auto_register", &self.auto_register)
            .field("use_latest_version", &self.use_latest_version)
            .field("ca", &self.ca)
            .field("identity", &self.identity)
            .field("subject_name_strategy", &self.subject_name_strategy)
            .field("id_handler", &self.id_handler)
            .field("use_id", &self.use_id)
            .finish()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Raw {
    /// Comma-joined, as every list (see `document`).
    url: Option<String>,
    user: Option<String>,
    password: Option<String>,
    auto_register: Option<bool>,
    use_latest_version: Option<bool>,
    ca: Option<String>,
    certificate: Option<String>,
    key: Option<String>,
    subject_name_strategy: Option<String>,
    id_handler: Option<String>,
    use_id: Option<String>,
}

const S: &str = "schema_registry";

pub(super) fn parse(opts: &Options) -> Result<SchemaRegistryConfig, ConfigError> {
    let raw: Raw = section::from_options(S, opts)?;
    let url = required(
        S,
        raw.url,
        "url",
        "set url = \"http://registry:8081\" (Apicurio: \"http://registry:8080/apis/ccompat/v7\")",
    )?;
    let mut urls = Vec::new();
    for one in url.split(',').map(str::trim).filter(|u| !u.is_empty()) {
        let host = one.strip_prefix("https://").or_else(|| one.strip_prefix("http://"));
        if host.is_none_or(|h| h.is_empty() || h.starts_with('/')) {
            return Err(invalid(
                S,
                "url",
                one,
                "must start with http:// or https:// and name a host",
            ));
        }
        if one.contains('@') {
            return Err(invalid(
                S,
                "url",
                "(not shown: it holds credentials)",
                "must not hold credentials: set [schema_registry] user, and the password in \
                 WALRELAY_SCHEMA_REGISTRY_PASSWORD",
            ));
        }
        urls.push(one.trim_end_matches('/').to_string());
    }
    if urls.is_empty() {
        return Err(invalid(S, "url", &url, "names no URL"));
    }
    let user = raw.user.filter(|u| !u.is_empty());
    let password = raw.password.filter(|p| !p.is_empty());
    if password.is_some() && user.is_none() {
        return Err(invalid(
            S,
            "password",
            crate::options::secret::MASK,
            "is set without a user: set [schema_registry] user too",
        ));
    }
    let https = urls.iter().any(|u| u.starts_with("https://"));
    let file = |v: Option<String>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    let (ca, certificate, key) = (file(raw.ca), file(raw.certificate), file(raw.key));
    let identity = match (certificate, key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        (Some(_), None) => {
            return Err(invalid(
                S,
                "certificate",
                "(set)",
                "needs `key` too: the certificate's private key (PEM)",
            ))
        }
        (None, Some(_)) => {
            return Err(invalid(
                S,
                "key",
                "(set)",
                "needs `certificate` too: the client certificate (PEM)",
            ))
        }
    };
    if !https && (ca.is_some() || identity.is_some()) {
        let which = if ca.is_some() { "ca" } else { "certificate" };
        return Err(invalid(
            S,
            which,
            "(set)",
            "is for https:// registry URLs, and url names none",
        ));
    }
    if https {
        // Read now, so that a wrong file stops the start, not the first record.
        let identity = identity.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
        crate::tls::https_client(ca.as_deref(), identity).map_err(|e| {
            let which = if e.starts_with("cannot read ca") || e.starts_with("ca ") {
                "ca"
            } else {
                "certificate"
            };
            invalid(S, which, "(a file)", &format!("cannot be used: {e}"))
        })?;
    }
    let subject_name_strategy = match raw.subject_name_strategy.as_deref() {
        None => SubjectNameStrategy::Topic,
        Some(text) => SubjectNameStrategy::parse(text).ok_or_else(|| {
            invalid(
                S,
                "subject_name_strategy",
                text,
                "must be topic, record or topic-record (or Confluent's TopicNameStrategy, \
                 RecordNameStrategy, TopicRecordNameStrategy)",
            )
        })?,
    };
    let auto_register = raw.auto_register.unwrap_or(true);
    let use_latest_version = raw.use_latest_version.unwrap_or(false);
    if use_latest_version && auto_register {
        return Err(invalid(
            S,
            "use_latest_version",
            "true",
            "writes each value under its subject's latest registered schema and registers \
             nothing: set auto_register = false beside it (Confluent's converters want the same)",
        ));
    }
    let (id_handler, use_id) = id_options(raw.id_handler.as_deref(), raw.use_id.as_deref())?;
    if use_id == UseId::GlobalId {
        if let Some(other) = urls.iter().find(|u| SchemaRegistryConfig::apicurio_api(u).is_none()) {
            return Err(invalid(
                S,
                "use_id",
                "globalId",
                &format!(
                    "is Apicurio's, read from its own API beside the Confluent-compatible one, \
                     and {other} is not Apicurio's …/apis/ccompat/v7: set url to it, or use_id \
                     = \"contentId\" (the id the Confluent-compatible API answers)"
                ),
            ));
        }
    }
    Ok(SchemaRegistryConfig {
        urls,
        user,
        password,
        auto_register,
        use_latest_version,
        ca,
        identity,
        subject_name_strategy,
        id_handler,
        use_id,
    })
}

/// `id_handler` and `use_id`, by walrelay's names or Apicurio's classes and option values.
/// Without `use_id`, the id is the one Apicurio's serdes write by default beside the handler:
/// its contentId with 4 bytes (Apicurio 3), its globalId with 8 bytes or headers (Apicurio 2).
fn id_options(
    handler: Option<&str>,
    use_id: Option<&str>,
) -> Result<(IdHandler, UseId), ConfigError> {
    let handler = match handler.map(|h| h.rsplit('.').next().unwrap_or(h)) {
        None | Some("4-byte" | "confluent" | "Default4ByteIdHandler" | "Legacy4ByteIdHandler") => {
            IdHandler::FourByte
        }
        Some("8-byte" | "Legacy8ByteIdHandler" | "DefaultIdHandler") => IdHandler::EightByte,
        Some("headers") => IdHandler::Headers,
        Some(_) => {
            return Err(invalid(
                S,
                "id_handler",
                handler.unwrap_or_default(),
                "must be 4-byte (Confluent's framing, the default), 8-byte or headers \
                 (Apicurio's serdes': apicurio.registry.id-handler, headers.enabled)",
            ))
        }
    };
    let use_id = match use_id {
        None if handler == IdHandler::FourByte => UseId::ContentId,
        None => UseId::GlobalId,
        Some("contentId") => UseId::ContentId,
        Some("globalId") => UseId::GlobalId,
        Some(other) => {
            return Err(invalid(
                S,
                "use_id",
                other,
                "must be contentId (the id the Confluent-compatible API answers) or globalId \
                 (Apicurio's, one per version)",
            ))
        }
    };
    Ok((handler, use_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> Options {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn urls_are_split_trimmed_and_credentials_in_them_refused() {
        let c = parse(&opts(&[("url", "http://a:8081/, http://b:8081")])).unwrap();
        assert_eq!(c.urls, ["http://a:8081", "http://b:8081"]);
        assert!(c.auto_register);
        let e = parse(&opts(&[("url", "http://u:secret@a:8081")])).unwrap_err().to_string();
        assert!(e.contains("WALRELAY_SCHEMA_REGISTRY_PASSWORD") && !e.contains("secret@"), "{e}");
        let e = parse(&opts(&[])).unwrap_err().to_string();
        assert!(e.contains("url"), "{e}");
        let e = parse(&opts(&[("url", "ftp://a")])).unwrap_err().to_string();
        assert!(e.contains("https://"), "{e}");
        let c = parse(&opts(&[("url", "https://a:8081, http://b")])).unwrap();
        assert_eq!((c.urls.len(), c.ca), (2, None));
    }

    #[test]
    fn tls_files_are_read_at_start_and_only_for_https() {
        let e = parse(&opts(&[("url", "http://a"), ("ca", "/etc/ca.pem")])).unwrap_err();
        assert!(e.to_string().contains("https://"), "{e}");
        let e = parse(&opts(&[("url", "https://a"), ("ca", "/nonexistent/ca.pem")])).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
        let e = parse(&opts(&[("url", "https://a"), ("certificate", "/c.pem")])).unwrap_err();
        assert!(e.to_string().contains("key"), "{e}");
    }

    #[test]
    fn use_latest_version_wants_auto_register_off() {
        let e = parse(&opts(&[("url", "http://a"), ("use_latest_version", "true")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("auto_register = false"), "{e}");
        let c = parse(&opts(&[
            ("url", "http://a"),
            ("use_latest_version", "true"),
            ("auto_register", "false"),
        ]))
        .unwrap();
        assert!(c.use_latest_version && !c.auto_register);
    }

    #[test]
    fn id_handlers_take_apicurios_names_and_a_global_id_wants_apicurios_api() {
        let apicurio = "http://r:8080/apis/ccompat/v7";
        let c = parse(&opts(&[("url", "http://a")])).unwrap();
        assert!(c.confluent_framing());
        let c = parse(&opts(&[("url", apicurio), ("id_handler", "headers")])).unwrap();
        assert_eq!((c.id_handler, c.use_id), (IdHandler::Headers, UseId::GlobalId));
        let legacy = "io.apicurio.registry.serde.Legacy8ByteIdHandler";
        let c = parse(&opts(&[("url", apicurio), ("id_handler", legacy), ("use_id", "contentId")]))
            .unwrap();
        assert_eq!((c.id_handler, c.use_id), (IdHandler::EightByte, UseId::ContentId));
        let e = parse(&opts(&[("url", "http://a:8081"), ("id_handler", "8-byte")])).unwrap_err();
        assert!(e.to_string().contains("use_id") && e.to_string().contains("ccompat"), "{e}");
        let e = parse(&opts(&[("url", "http://a"), ("id_handler", "2-byte")])).unwrap_err();
        assert!(e.to_string().contains("4-byte"), "{e}");
        let e = parse(&opts(&[("url", apicurio), ("use_id", "id")])).unwrap_err();
        assert!(e.to_string().contains("globalId"), "{e}");
        assert_eq!(
            SchemaRegistryConfig::apicurio_api(apicurio).unwrap(),
            "http://r:8080/apis/registry/v2"
        );
    }

    #[test]
    fn the_password_is_never_shown() {
        let c = parse(&opts(&[("url", "http://a"), ("user", "u"), ("password", "hunter2hunter2")]))
            .unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
        let e = parse(&opts(&[("url", "http://a"), ("password", "hunter2hunter2")]))
            .unwrap_err()
            .to_string();
        assert!(!e.contains("hunter2") && e.contains("user"), "{e}");
    }
}
