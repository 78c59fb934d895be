//! `walrelay import-debezium`: a Debezium PostgreSQL connector configuration → the equivalent
//! walrelay.toml, plus one warning for every Debezium option walrelay does not honour.
//!
//! Inputs: the Kafka Connect REST form `{"name": …, "config": {…}}`, the flat config object, a
//! Kafka Connect `.properties` file, or a Debezium Server `application.properties`
//! (`debezium.source.*`, `debezium.transforms.*`, `debezium.sink.kafka.producer.*`,
//! `debezium.format.*`).
//!
//! The generated file is loaded with [`Config::parse`] before it is printed: a router,
//! converter or producer option walrelay (or librdkafka) refuses is left out with a warning
//! naming it, so what is printed is a configuration `walrelay run` accepts — except for
//! `bootstrap.servers`, which connector configs usually don't carry (it lives in the Connect
//! worker's config) and which is then left as a commented line to fill in, and a Java store
//! librdkafka can't read, whose converted file's path is a `FILL-IN:` placeholder ([`stores`]).
//! Each comes with a warning, and the loader refuses the file until it is filled in.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;

use crate::config::secret::{self, is_secret_key};
use crate::config::{Config, ConfigError, ENV_PREFIX};

mod parse;
mod registry;
mod render;
mod security;
mod stores;
mod transforms;
mod unhonoured;

use unhonoured::java_producer_hint;
#[cfg(test)]
mod tests;

pub use parse::parse_properties;
use parse::{normalize_debezium_server, parse_json};

/// The generated configuration and what could not be carried over.
#[derive(Debug, Clone)]
pub struct Imported {
    pub toml: String,
    /// One line each, without a `warning:` prefix.
    pub warnings: Vec<String>,
}

/// The input's syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Properties,
}

const EVENT_ROUTER: &str = "io.debezium.transforms.outbox.EventRouter";
const DECODE_MESSAGE: &str =
    "io.debezium.connector.postgresql.transforms.DecodeLogicalDecodingMessageContent";
const JSON_CONVERTER: &str = "org.apache.kafka.connect.json.JsonConverter";
/// Debezium Server's `debezium.format.value = avro`.
const AVRO_CONVERTER: &str = "io.confluent.connect.avro.AvroConverter";
const PROTOBUF_CONVERTER: &str = "io.confluent.connect.protobuf.ProtobufConverter";
const JSON_SCHEMA_CONVERTER: &str = "io.confluent.connect.json.JsonSchemaConverter";
const BOOTSTRAP_PLACEHOLDER: &str = "bootstrap.servers.placeholder:9092";

/// `walrelay import-debezium FILE` (`-`: standard input): the TOML on stdout, warnings on
/// stderr; exit code 2, and nothing on stdout, when it can't be read or converted without
/// weakening a connection's protection.
pub fn run_cli(path: &Path) -> ExitCode {
    // `-` is standard input, as for most tools that read a file.
    let read = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    };
    let text = match read {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let format = match path.extension().and_then(|e| e.to_str()) {
        Some("json") => Some(Format::Json),
        Some("properties") | Some("conf") => Some(Format::Properties),
        _ => None,
    };
    let source = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    match import(&text, format, &source) {
        Ok(imported) => {
            print!("{}", imported.toml);
            for w in &imported.warnings {
                eprintln!("warning: {w}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}: {e}", path.display());
            ExitCode::from(2)
        }
    }
}

/// Converts a connector configuration. `format: None` tries JSON, then properties. `source`
/// names the input in the generated header comment.
///
/// Nothing returned holds a secret of the input: secret options are not copied (the file says
/// which `WALRELAY_*` variable or `PGPASSWORD` takes each), no message shows a secret option's
/// value, and everything is scrubbed of the secrets [`secret::secrets_in`] finds in `text`.
pub fn import(text: &str, format: Option<Format>, source: &str) -> Result<Imported, String> {
    let secrets = secret::secrets_in(text);
    match convert(text, format, source) {
        Ok(imported) => Ok(Imported {
            toml: secret::scrub(&imported.toml, &secrets),
            warnings: imported.warnings.iter().map(|w| secret::scrub(w, &secrets)).collect(),
        }),
        Err(e) => Err(secret::scrub(&e, &secrets)),
    }
}

fn convert(text: &str, format: Option<Format>, source: &str) -> Result<Imported, String> {
    let (name, options) = match format {
        Some(Format::Json) => parse_json(text)?,
        Some(Format::Properties) => (None, parse_properties(text)),
        None => match parse_json(text) {
            Ok(parsed) => parsed,
            Err(json_error) if text.trim_start().starts_with('{') => return Err(json_error),
            Err(_) => (None, parse_properties(text)),
        },
    };
    if options.is_empty() {
        return Err("no options found: expected connector JSON or a .properties file".into());
    }
    let mut warnings = Vec::new();
    let (options, server) = normalize_debezium_server(options, &mut warnings);
    let name = name.or_else(|| options.get("name").cloned());
    let mut out = Builder::new(options, server, warnings);
    out.name = name.clone();
    out.convert();
    out.validate();
    if !out.refused.is_empty() {
        return Err(format!(
            "nothing written: the generated file would protect a connection less than the connector does:\n  {}",
            out.refused.join("\n  ")
        ));
    }
    Ok(Imported { toml: out.render(name.as_deref(), source, false), warnings: out.warnings })
}

struct Builder {
    options: BTreeMap<String, String>,
    server: bool,
    warnings: Vec<String>,
    source: Vec<(String, String)>,
    /// Comment lines at the top of [source].
    source_notes: Vec<String>,
    /// `schema.table` names; one unless the include list names several.
    outbox_tables: Vec<String>,
    router: BTreeMap<String, String>,
    debezium: BTreeMap<String, String>,
    kafka: BTreeMap<String, String>,
    /// `[envelope]`: only when Debezium's CloudEvents converter maps to a format.
    envelope: BTreeMap<String, String>,
    /// `[delivery]`: only when the connector ran exactly-once (KIP-618).
    delivery: BTreeMap<String, String>,
    /// `[schema_registry]`: only when the value converter is an Avro converter.
    schema_registry: BTreeMap<String, String>,
    /// Extra `# …` lines per section (by name) for keys left out.
    dropped: BTreeMap<&'static str, Vec<String>>,
    /// `[debezium_offsets]`, and whether it is only a commented template (the store is not
    /// in the connector config).
    offsets: Vec<(String, String)>,
    offsets_template: bool,
    /// The connector's name (Kafka Connect's REST form has it beside the config).
    name: Option<String>,
    /// What protects a connection and can't be carried: the import fails with these.
    refused: Vec<String>,
}

impl Builder {
    fn new(options: BTreeMap<String, String>, server: bool, warnings: Vec<String>) -> Builder {
        Builder {
            options,
            server,
            warnings,
            source: Vec::new(),
            source_notes: Vec::new(),
            outbox_tables: vec!["public.outbox".into()],
            router: BTreeMap::new(),
            debezium: BTreeMap::new(),
            envelope: BTreeMap::new(),
            kafka: BTreeMap::new(),
            delivery: BTreeMap::new(),
            schema_registry: BTreeMap::new(),
            dropped: BTreeMap::new(),
            offsets: Vec::new(),
            offsets_template: false,
            name: None,
            refused: Vec::new(),
        }
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.options.get(key).map(|v| v.trim()).filter(|v| !v.is_empty())
    }

    fn warn(&mut self, text: impl Into<String>) {
        self.warnings.push(text.into());
    }

    fn convert(&mut self) {
        self.convert_source();
        self.convert_outbox();
        self.convert_router();
        self.convert_cloudevents();
        self.convert_debezium();
        self.convert_kafka();
        self.convert_delivery();
        self.convert_offsets();
        self.warn_unhonoured();
    }

    /// Kafka Connect's exactly-once source support (KIP-618): the connector's
    /// `exactly.once.support = required`, or the worker's `exactly.once.source.support =
    /// enabled` when its config is given too, is walrelay's `[delivery] guarantee =
    /// "exactly-once"`. `requested` (Connect's default) depends on the worker, which the
    /// connector config does not show.
    fn convert_delivery(&mut self) {
        let connector = self.get("exactly.once.support").map(str::to_ascii_lowercase);
        let worker = self.get("exactly.once.source.support").map(str::to_ascii_lowercase);
        let exactly_once =
            connector.as_deref() == Some("required") || worker.as_deref() == Some("enabled");
        if exactly_once {
            self.delivery.insert("guarantee".into(), "exactly-once".into());
            if let Some(b) = self.get("transaction.boundary").filter(|b| *b != "poll") {
                let b = b.to_string();
                self.warn(format!(
                    "transaction.boundary = {b}: walrelay's Kafka transactions hold whole PostgreSQL transactions, committed every [delivery] transaction_max_ms (like Connect's `poll` boundary)"
                ));
            }
        } else if connector.as_deref() == Some("requested") {
            self.warn("exactly.once.support = requested: exactly-once applied only if the Connect worker had exactly.once.source.support = enabled, which the connector config does not show; if it did, set [delivery] guarantee = \"exactly-once\"");
        }
    }

    /// `[debezium_offsets]` from where the connector keeps its offsets, so the first run skips
    /// what Debezium already delivered. Kafka Connect's offsets topic is in the worker's config,
    /// not the connector's: then the section is a commented template with the usual name.
    fn convert_offsets(&mut self) {
        let file = self.get("offset.storage.file.filename").map(str::to_owned);
        let topic = self.get("offset.storage.topic").map(str::to_owned);
        match (file, topic) {
            (Some(file), _) => self.offsets.push(("file".into(), file)),
            (None, Some(topic)) => self.offsets.push(("topic".into(), topic)),
            (None, None) => {
                self.offsets_template = true;
                self.offsets.push(("topic".into(), "connect-offsets".into()));
            }
        }
        match self.name.clone() {
            Some(name) => self.offsets.push(("connector".into(), name)),
            None => {
                self.offsets_template = true;
                self.offsets.push(("connector".into(), "<the connector's name>".into()));
            }
        }
    }

    fn convert_source(&mut self) {
        let host = self.get("database.hostname").unwrap_or("localhost").to_string();
        if self.get("database.hostname").is_none() {
            self.warn("database.hostname is not set; [source] url uses localhost");
        }
        let port = self.get("database.port").unwrap_or("5432").to_string();
        let user = self.get("database.user").unwrap_or("postgres").to_string();
        let dbname = match self.get("database.dbname") {
            Some(d) => d.to_string(),
            None => {
                self.warn("database.dbname is not set; [source] url names database postgres");
                "postgres".to_string()
            }
        };
        let host =
            if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host };
        let mut url =
            format!("postgres://{}@{host}:{port}/{}", url_encode(&user), url_encode(&dbname));
        match security::postgres_tls(&self.options) {
            Ok(params) if !params.is_empty() => {
                // Taken out of the URL as written (crate::tls), so not percent-encoded.
                let query: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
                url += &format!("?{}", query.join("&"));
            }
            Ok(_) => {}
            Err(e) => self.refused.push(e),
        }
        self.source_notes.push(
            "The password is not copied: walrelay reads it from the PGPASSWORD environment variable (${PGPASSWORD})."
                .into(),
        );
        if self.get("database.password").is_some() {
            self.warn("database.password is not copied into the file: set PGPASSWORD in walrelay's environment");
        }
        self.source.push(("url".into(), url));
        let slot = self.get("slot.name").unwrap_or("debezium").to_string();
        // A decoderbufs slot (Debezium's default plugin) can't be streamed with pgoutput:
        // walrelay needs a slot of its own.
        let pgoutput = match self.get("plugin.name") {
            Some(plugin) => plugin == "pgoutput",
            None => self.server,
        };
        let slot = if pgoutput { slot } else { format!("{slot}_walrelay") };
        let publication = self.get("publication.name").unwrap_or("dbz_publication").to_string();
        self.source.push(("slot".into(), slot));
        self.source.push(("publication".into(), publication));
    }

    fn convert_outbox(&mut self) {
        let list = self.get("table.include.list").or_else(|| self.get("table.whitelist"));
        let Some(list) = list.map(str::to_string) else {
            if self.messages() {
                self.outbox_tables.clear();
                self.warn("table.include.list is not set and message prefixes are: a message-only relay ([outbox] tables = []); name the outbox table(s) if rows are events too");
            } else {
                self.warn("table.include.list is not set; [outbox] table = public.outbox");
            }
            return;
        };
        // A name escapes its dot (`public\\.outbox`); anything else regex-like is a pattern,
        // which walrelay takes in the same syntax, anchored the same way.
        let tables: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| match is_pattern(t) {
                true => t.to_string(),
                false => t.replace("\\.", "."),
            })
            .collect();
        if tables.is_empty() {
            return;
        }
        for table in tables.iter().filter(|t| is_pattern(t)) {
            self.warn(format!(
                "table.include.list entry `{table}` is a pattern, kept as one in [outbox] tables: a table created later that it matches is relayed from its first row once `walrelay setup`, run once as a superuser, has installed the event trigger that adds such tables to the publication as they are created (docs/operations.md, \"Tenant outboxes\"); `walrelay check` says whether it is there"
            ));
        }
        self.outbox_tables = tables;
    }

    fn convert_debezium(&mut self) {
        match self.get("topic.prefix").or_else(|| self.get("database.server.name")) {
            Some(p) => {
                let p = p.to_string();
                self.debezium.insert("topic.prefix".into(), p);
            }
            None => self.warn(
                "topic.prefix is not set; [debezium] topic.prefix defaults to walrelay (the __debezium.context.connectorLogicalName header)",
            ),
        }
        let extended = self.get("extended.headers.enabled").unwrap_or("true").to_string();
        self.debezium.insert("extended.headers.enabled".into(), extended);
        let mut missing = Vec::new();
        for which in ["key", "value", "header"] {
            let key = format!("{which}.converter");
            match self.get(&key) {
                Some(v) => {
                    let v = v.to_string();
                    self.debezium.insert(key.clone(), v);
                }
                None => missing.push(key.clone()),
            }
            let schemas = format!("{key}.schemas.enable");
            if let Some(v) = self.get(&schemas) {
                let v = v.to_string();
                self.debezium.insert(schemas, v);
            }
        }
        self.convert_registry();
        if !missing.is_empty() && !self.server {
            self.warn(format!(
                "{} not set in the connector config (the Connect worker's setting applied); walrelay's defaults are StringConverter (key, value) and SimpleHeaderConverter (headers) — if the worker sets others, set them in [debezium]",
                missing.join(", ")
            ));
        }
    }

    fn convert_kafka(&mut self) {
        let mut props = BTreeMap::new();
        // producer.* first, producer.override.* wins (Connect's precedence).
        for (k, v) in &self.options {
            if let Some(rest) = k.strip_prefix("producer.") {
                if !rest.starts_with("override.") {
                    props.insert(rest.to_string(), v.clone());
                }
            }
        }
        for (k, v) in &self.options {
            if let Some(rest) = k.strip_prefix("producer.override.") {
                props.insert(rest.to_string(), v.clone());
            }
        }
        if let Some(b) = self.get("bootstrap.servers") {
            props.entry("bootstrap.servers".into()).or_insert_with(|| b.to_string());
        }
        for (k, v) in &props {
            if v.contains("${") && !is_secret_key(k) {
                self.warnings.push(format!(
                    "[kafka] {k} holds a Kafka Connect config-provider reference ({v}); walrelay does not resolve it: put the value in"
                ));
            }
        }
        security::carry_jaas(&mut props, &mut self.refused);
        self.carry_stores(&mut props);
        // A secret stays out of the file (which gets reviewed, committed, printed): it is
        // named with the variable that supplies it, as the database password is.
        let secret_keys: Vec<String> = props.keys().filter(|k| is_secret_key(k)).cloned().collect();
        for key in secret_keys {
            props.remove(&key);
            let variable = kafka_env_variable(&key);
            self.dropped.entry("kafka").or_default().push(format!(
                "{} is a secret and is not copied: set {variable} in walrelay's environment",
                toml_key(&key)
            ));
            self.warn(format!(
                "[kafka] {key} is a secret and is not copied into the file: set {variable} in walrelay's environment"
            ));
        }
        if !props.contains_key("bootstrap.servers") && !props.contains_key("metadata.broker.list") {
            self.warn("bootstrap.servers is not in the connector config (it lives in the Connect worker's config): fill in [kafka] \"bootstrap.servers\"");
        }
        self.kafka = props;
    }

    /// Loads the generated file; options walrelay or librdkafka refuse are left out with a
    /// warning, until it loads (or fails for a reason no option removal can fix).
    fn validate(&mut self) {
        for _ in 0..64 {
            let text = self.render(None, "", true);
            match Config::parse(&text) {
                Ok(config) => {
                    let mut cfg = ClientConfig::new();
                    for (k, v) in &config.kafka.properties {
                        cfg.set(k, v);
                    }
                    match cfg.create_native_config() {
                        Ok(_) => return,
                        Err(KafkaError::ClientConfig(_, desc, key, _))
                            if self.kafka.contains_key(&key) && security::is_protective(&key) =>
                        {
                            let hint = java_producer_hint(&key)
                                .map(|h| format!("; {h}"))
                                .unwrap_or_default();
                            self.refused.push(format!(
                                "[kafka] {key}: librdkafka refuses it ({desc}){hint}"
                            ));
                            // Out of the file being checked only, to name every refusal.
                            self.kafka.remove(&key);
                        }
                        Err(KafkaError::ClientConfig(_, desc, key, _))
                            if self.kafka.contains_key(&key) =>
                        {
                            let hint = java_producer_hint(&key)
                                .map(|h| format!("; {h}"))
                                .unwrap_or_default();
                            self.drop_key("kafka", &key, &format!("librdkafka: {desc}{hint}"));
                        }
                        Err(e) => {
                            self.warn(format!("librdkafka rejects the [kafka] properties: {e}"));
                            return;
                        }
                    }
                }
                Err(ConfigError::UnknownKey { section, key, hint })
                    if self.droppable(section, &key) =>
                {
                    self.drop_key(section, &key, &hint);
                }
                Err(ConfigError::InvalidValue { section, key, reason, .. })
                    if self.droppable(section, &key) =>
                {
                    self.drop_key(section, &key, &reason);
                }
                Err(e) => {
                    self.warn(format!("the generated file does not load as it is: {e}"));
                    return;
                }
            }
        }
    }

    fn droppable(&self, section: &str, key: &str) -> bool {
        match section {
            "router" => self.router.contains_key(key),
            "debezium" => self.debezium.contains_key(key),
            "kafka" => self.kafka.contains_key(key),
            _ => false,
        }
    }

    fn drop_key(&mut self, section: &str, key: &str, reason: &str) {
        let (map, name): (&mut BTreeMap<String, String>, &'static str) = match section {
            "router" => (&mut self.router, "router"),
            "debezium" => (&mut self.debezium, "debezium"),
            _ => (&mut self.kafka, "kafka"),
        };
        let value = map.remove(key).unwrap_or_default();
        let shown = if is_secret_key(key) { secret::MASK.to_string() } else { value };
        self.dropped.entry(name).or_default().push(format!("{key} = {shown} (left out: {reason})"));
        self.warnings.push(format!("[{name}] {key} = {shown} left out: {reason}"));
    }
}

/// Regex syntax beyond an escaped dot: an `[outbox] tables` pattern, not a name.
fn is_pattern(entry: &str) -> bool {
    crate::config::TablePattern::looks_like(&entry.replace("\\.", "."))
}

/// The `WALRELAY_*` variable that sets `[kafka] key` (see `config::env`).
fn kafka_env_variable(key: &str) -> String {
    format!("{ENV_PREFIX}KAFKA_{}", key.to_ascii_uppercase().replace('.', "__"))
}

fn toml_string(v: &str) -> String {
    toml::Value::String(v.to_string()).to_string()
}

fn toml_key(k: &str) -> String {
    if !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
        k.to_string()
    } else {
        toml_string(k)
    }
}

/// Booleans and plain integers unquoted, the rest as strings (walrelay reads both alike).
fn toml_value(key: &str, v: &str) -> String {
    let t = v.trim();
    if t == "true" || t == "false" {
        return t.to_string();
    }
    let plain_int = !t.is_empty()
        && t.len() < 16
        && t.bytes().all(|b| b.is_ascii_digit())
        && (t == "0" || !t.starts_with('0'));
    if plain_int && !key.contains("regex") && !key.contains("replacement") {
        return t.to_string();
    }
    toml_string(v)
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
