//! The schema registry in `walrelay check`: with a registry converter, the registry answers at
//! `[schema_registry] url` and takes walrelay's credentials, as `run` will need the first time a
//! value's schema is not cached; with `use_latest_version`, that the subjects hold the contracts
//! values are written under, where they can be known in advance. Only reads are made: a check
//! registers nothing.

use super::{plural, Report};
use crate::config::{Config, SchemaRegistryConfig, SubjectNameStrategy, UseId};
use crate::registry::client::{self, CallError};
use crate::registry::proto_contract::ProtoFile;

pub(super) async fn run(config: &Config, r: &mut Report) {
    let Some(cfg) = &config.schema_registry else { return };
    let what = "schema registry";
    let urls = cfg.urls.join(", ");
    let user = cfg.user.as_deref();
    match client::subjects(cfg).await {
        Ok(subjects) => {
            let level = client::compatibility(cfg).await.unwrap_or_else(|_| "(not said)".into());
            let who = user.map_or("without credentials".to_string(), |u| format!("as user {u}"));
            let registers = match (cfg.use_latest_version, cfg.auto_register) {
                (true, _) => "writes each value under its subject's latest schema (use_latest_version)",
                (false, true) => "registers each new value schema under its subject (auto_register)",
                (false, false) => "looks each value schema up under its subject (auto_register = false)",
            };
            r.ok(
                what,
                format!(
                    "{urls} answers {who}: {} subject{}, default compatibility {level}; walrelay {registers}",
                    subjects.len(),
                    plural(subjects.len())
                ),
            );
            if cfg.use_latest_version {
                contracts(config, cfg, &subjects, r).await;
            }
            if cfg.use_id == UseId::GlobalId {
                apicurio(cfg, r).await;
            }
        }
        Err(CallError::Unauthorized(why)) if why.contains("client certificate") => r.fail(
            what,
            why,
            match &cfg.identity {
                Some(_) => "the registry's TLS front does not take [schema_registry] certificate: check that the CA it trusts signed it, that it has not expired, and that key is its key",
                None => "the registry asks for a client certificate: set [schema_registry] certificate and key to a client certificate (PEM) the CA it trusts signed, and its key",
            },
        ),
        Err(CallError::Unauthorized(why)) => r.fail(
            what,
            format!(
                "the registry refused walrelay's credentials (user {}): {why}",
                user.unwrap_or("(none: no user is set)")
            ),
            match user {
                Some(_) => "check [schema_registry] user, and the password in WALRELAY_SCHEMA_REGISTRY_PASSWORD",
                None => "the registry wants credentials: set [schema_registry] user, and the password in WALRELAY_SCHEMA_REGISTRY_PASSWORD",
            },
        ),
        Err(CallError::Unreachable(why)) if why.contains("TLS handshake") => r.fail(
            what,
            format!("no TLS session with {urls}: {why}"),
            "set [schema_registry] ca to the PEM file of the CA that signed the registry's certificate (without it, only the public Mozilla roots are trusted), or check that the URL's host is a name the certificate holds",
        ),
        Err(CallError::Unreachable(why)) => r.fail(
            what,
            format!("no registry answers at {urls}: {why}"),
            "start the registry or correct [schema_registry] url (the Confluent-compatible API's base, e.g. Apicurio's http://host:8080/apis/ccompat/v7); while it is down, run holds delivery at the first value whose schema id it does not know",
        ),
        Err(CallError::Refused { status, message }) => r.fail(
            what,
            format!("{urls} answered HTTP {status} to a subject list: {message}"),
            "[schema_registry] url must be the Confluent-compatible API's base (Apicurio: http://host:8080/apis/ccompat/v7)",
        ),
    }
}

/// With `use_latest_version`, every value is written under its subject's latest schema, so the
/// subjects must hold one before the first row: checked when the subject is known in advance (a
/// fixed topic under the topic strategy), and said when it is not.
async fn contracts(
    config: &Config,
    cfg: &SchemaRegistryConfig,
    subjects: &[String],
    r: &mut Report,
) {
    let what = "schema registry contracts";
    let fixed = config.router.topic_router.fixed_topic();
    // Registry keys are written under their subject's latest schema too; their subject is
    // always the topic's.
    if let (Some(converter), Some(topic)) = (config.router.registry_key_converter(), &fixed) {
        let (subject, ty) = (format!("{topic}-key"), client::SchemaType::of_converter(converter));
        match client::latest(cfg, &subject, ty).await {
            Ok((id, _)) => r.ok(what, format!("subject {subject} holds a schema (id {id}), which every key is written under")),
            Err(e) => r.fail(
                what,
                format!("subject {subject} has no {} schema to write keys under: {}", ty.name(), said(&e)),
                format!("register the keys' schema under {subject} (Avro: \"string\" for a text aggregate id; Protobuf: google/protobuf/wrappers.proto) before the first row; until then every row is refused"),
            ),
        }
    }
    match (cfg.subject_name_strategy, fixed) {
        (SubjectNameStrategy::Topic, Some(topic)) => {
            let subject = format!("{topic}-value");
            let ty = match config.router.registry_converter() {
                Some("json-schema") => client::SchemaType::Json,
                Some("protobuf") => client::SchemaType::Protobuf,
                _ => client::SchemaType::Avro,
            };
            match client::latest(cfg, &subject, ty).await {
                // A .proto is compiled as run will compile it: a text it cannot read would
                // refuse every row.
                Ok((id, text)) if ty == client::SchemaType::Protobuf => match ProtoFile::parse(&text) {
                    Ok(_) => r.ok(what, format!("subject {subject} holds a .proto (id {id}), which every value is written under")),
                    Err(why) => r.fail(
                        what,
                        format!("subject {subject} holds a PROTOBUF schema (id {id}) walrelay cannot read: {why}"),
                        format!("register under {subject} a .proto that compiles on its own (imports of google/protobuf/*.proto only); until then every row is refused"),
                    ),
                },
                Ok((id, _)) => r.ok(what, format!("subject {subject} holds a schema (id {id}), which every value is written under")),
                Err(e) => r.fail(
                    what,
                    format!("subject {subject} has no {} schema to write values under: {}", ty.name(), said(&e)),
                    format!("register the events' contract under {subject} before the first row; until then every row is refused"),
                ),
            }
        }
        (strategy, _) => {
            let why = match strategy {
                SubjectNameStrategy::Topic => {
                    "the topic depends on each row (route.topic.replacement names a group)"
                        .to_string()
                }
                other => format!(
                    "subject_name_strategy = \"{}\" names subjects after each value's record",
                    other.as_str()
                ),
            };
            let shown: Vec<&str> = subjects.iter().take(10).map(String::as_str).collect();
            r.warn(
                what,
                format!(
                    "which subjects rows need cannot be known before they come: {why}; the registry holds {} subject{}{}",
                    subjects.len(),
                    plural(subjects.len()),
                    if shown.is_empty() { String::new() } else { format!(" ({}{})", shown.join(", "), if subjects.len() > 10 { ", …" } else { "" }) }
                ),
                "register each contract before the first row it applies to; a row whose subject holds none is refused (dead-lettered, or the relay stops at it)",
            );
        }
    }
}

/// With `use_id = "globalId"`, each new schema's globalId is read from Apicurio's own API
/// beside the Confluent-compatible one: it must answer too.
async fn apicurio(cfg: &SchemaRegistryConfig, r: &mut Report) {
    let what = "schema registry globalIds";
    let api: Vec<String> =
        cfg.urls.iter().filter_map(|u| SchemaRegistryConfig::apicurio_api(u)).collect();
    let framing = match cfg.id_handler.as_str() {
        "headers" => "in the apicurio.value.globalId header".to_string(),
        size => format!("in {size} after the magic byte"),
    };
    match client::apicurio_version(cfg).await {
        Ok(version) => r.ok(
            what,
            format!("Apicurio {version} answers at {}: values carry their schema's globalId {framing}", api.join(", ")),
        ),
        Err(e) => r.fail(
            what,
            format!("Apicurio's own API does not answer at {}: {}", api.join(", "), said(&e)),
            "use_id = \"globalId\" reads each schema's globalId from Apicurio's API beside /apis/ccompat/v7 (Apicurio 2 or 3): make it reachable with the same credentials, or set use_id = \"contentId\" if the consumers' deserializers read the contentId",
        ),
    }
}

/// A call's failure, in a check line.
fn said(e: &CallError) -> String {
    match e {
        CallError::Refused { status, message } => format!("HTTP {status}: {message}"),
        CallError::Unreachable(why) | CallError::Unauthorized(why) => why.clone(),
    }
}
