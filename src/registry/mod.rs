//! The schema registry: the id of each registry-encoded value's schema, written into the bytes
//! the router reserved before the value (Confluent's wire format: a magic byte 0, then the id,
//! 4 bytes big-endian), or as Apicurio's serdes carry it (`[schema_registry] id_handler`: 8
//! bytes, or a header beside the unframed value; `use_id`: its contentId or its globalId).
//! The registry is asked once per subject and schema, never per record:
//! ids are cached for the whole run, so a registry that is down while every id is known costs
//! nothing.
//!
//! With `use_latest_version`, the id is that of the subject's latest schema, and a value whose
//! derived schema differs from it is rewritten under it (Avro, `resolve`; Protobuf, its fields
//! renumbered by name, `proto_contract`) or validated against it (JSON Schema, `json_contract`):
//! a value that does not fit is refused, naming the field.
//!
//! A registry that is down when a new id is needed holds the record, like a broker outage:
//! [`Registry::frame`] asks again until it answers (the relay loop's stop ends the wait), so
//! nothing after it is sent or confirmed, `/readyz` says why, and the lag rises. A refusal —
//! an incompatible schema (409), an invalid one (422) — is the record's: it is dead-lettered
//! or stops the relay, like any row the router refuses.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::config::{SchemaRegistryConfig, SubjectNameStrategy, UseId};
use crate::metrics::Metrics;
use crate::router::{Record, FRAME_RESERVED};

pub mod client;
mod json_contract;
pub mod proto_contract;
mod resolve;
mod schema;
mod wire;

use self::client::{CallError, SchemaType};
use self::json_contract::JsonContract;
use self::proto_contract::{ProtoContract, ProtoFile};
use self::schema::Parsed;
use self::wire::{Part, Wire};

/// The plans known, per part, topic and derived schema, for one run.
pub struct Registry {
    cfg: SchemaRegistryConfig,
    /// The value converter's and the key converter's: one each per run.
    schema_type: SchemaType,
    key_type: SchemaType,
    plans: HashMap<(Part, Arc<str>, Arc<str>), Arc<Plan>>,
    /// Per part, the last (topic, schema, plan) used: records in a row mostly share both, and
    /// the same `Arc`s, so a pointer comparison spares the hashing.
    last: [Option<(Arc<str>, Arc<str>, Arc<Plan>)>; 2],
    metrics: Option<Arc<Metrics>>,
    /// Where the ids go (`id_handler`).
    wire: Wire,
    /// Whether an unreachable registry is waited for (the relay: delivery holds) or said at
    /// once (what reads the records back, `Registry::read_only`).
    patient: bool,
}

/// How the values of one topic and derived schema are framed: under `id`, as they are or, with
/// `use_latest_version` and a registered schema other than the derived one, fitted to it first.
struct Plan {
    /// The id values carry: the Confluent-compatible API's, or Apicurio's globalId.
    id: u64,
    fit: Fit,
}

enum Fit {
    AsIs,
    /// Avro: the value rewritten under the registered schema.
    Rewrite(Rewrite),
    /// JSON Schema: the value kept, once it validates against the registered schema.
    Validate {
        subject: String,
        contract: JsonContract,
    },
    /// Protobuf: the value's fields under the registered message's numbers.
    Renumber {
        subject: String,
        contract: ProtoContract,
    },
}

struct Rewrite {
    subject: String,
    /// The schema the router wrote the value under, and the subject's latest.
    derived: Parsed,
    registered: Parsed,
}

/// Why a record could not be framed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The registry refused the schema, or the value does not fit the registered one: the
    /// record's fault.
    Refused(String),
    /// The registry refused walrelay's credentials: nothing framed until they are fixed.
    Unauthorized(String),
    /// A read-only registry ([`Registry::read_only`]) did not answer.
    Unreachable(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Refused(why)
            | FrameError::Unauthorized(why)
            | FrameError::Unreachable(why) => f.write_str(why),
        }
    }
}

/// Plans kept at most; beyond, the cache starts again.
const PLAN_CACHE_LIMIT: usize = 10_000;

/// How long to wait before asking a registry that did not answer again, at most.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

impl Registry {
    pub fn new(cfg: SchemaRegistryConfig) -> Registry {
        let schema_type = SchemaType::Avro;
        let wire = Wire::new(cfg.id_handler, cfg.use_id);
        Registry {
            cfg,
            schema_type,
            key_type: SchemaType::Avro,
            plans: HashMap::new(),
            last: [None, None],
            metrics: None,
            wire,
            patient: true,
        }
    }

    /// Registers the values' schemas as the value converter writes them: `converter` is
    /// `RouterConfig::registry_converter` ("avro", "protobuf" or "json-schema").
    pub fn for_converter(mut self, converter: &str) -> Registry {
        self.schema_type = SchemaType::of_converter(converter);
        self
    }

    /// The same for the keys (`RouterConfig::registry_key_converter`).
    pub fn for_key_converter(mut self, converter: &str) -> Registry {
        self.key_type = SchemaType::of_converter(converter);
        self
    }

    /// For what reads records back (the audit, the lookup) and needs the ids the relay framed
    /// them with: schemas are looked up, never registered, and a registry that does not answer
    /// is an error at once ([`FrameError::Unreachable`]), not a wait.
    pub fn read_only(mut self) -> Registry {
        self.cfg.auto_register = false;
        self.patient = false;
        self
    }

    /// Says in `metrics` while the registry is unreachable (`/readyz`).
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Registry {
        self.metrics = Some(metrics);
        self
    }

    /// The subject of a value of `topic` with `schema`, by `[schema_registry]
    /// subject_name_strategy`, as Confluent's strategies name it: `<topic>-value`, the record's
    /// full name, or `<topic>-<record's full name>`. The last two need a record schema (not the
    /// `["null", record]` of an optional payload), as Confluent's refuse anything else.
    fn subject(&self, topic: &str, schema: &str) -> Result<String, FrameError> {
        let strategy = self.cfg.subject_name_strategy;
        if strategy == SubjectNameStrategy::Topic {
            return Ok(format!("{topic}-value"));
        }
        let name = Parsed::parse(schema).ok().and_then(|p| match p.node(p.root) {
            schema::Node::Record { name, .. } => Some(name.clone()),
            _ => None,
        });
        let Some(name) = name else {
            return Err(FrameError::Refused(format!(
                "subject_name_strategy = \"{}\" names the subject after the value's record, and \
                 this value's schema is not a record (an optional payload is [\"null\", …]): \
                 use envelope placements (a record value), or subject_name_strategy = \"topic\"",
                strategy.as_str()
            )));
        };
        Ok(match strategy {
            SubjectNameStrategy::Record => name,
            _ => format!("{topic}-{name}"),
        })
    }

    /// Writes the id of `record`'s value schema into its value's first bytes (after rewriting
    /// the value under the registered schema, with `use_latest_version`), then the same for its
    /// key (`key.converter` avro or protobuf); a record without registry bytes is left as it
    /// is. Waits while the registry is unreachable. A refused value leaves the record as it was.
    pub async fn frame(&mut self, record: &mut Record) -> Result<(), FrameError> {
        self.frame_part(Part::Value, record).await?;
        self.frame_key(record).await
    }

    /// Frames `record`'s key alone: what reads records back needs the partition its framed
    /// key hashes to, not its value.
    pub async fn frame_key(&mut self, record: &mut Record) -> Result<(), FrameError> {
        self.frame_part(Part::Key, record).await
    }

    /// Frames `part` of `record` when a registry converter wrote it. Its schema is taken out of
    /// the record while the part is framed and put back after, not cloned per record.
    async fn frame_part(&mut self, part: Part, record: &mut Record) -> Result<(), FrameError> {
        let (schema, present) = match part {
            Part::Key => (record.key_schema.take(), record.key.is_some()),
            Part::Value => (record.value_schema.take(), record.value.is_some()),
        };
        let Some(schema) = schema else { return Ok(()) };
        let framed = match present {
            true => self.frame_with(part, record, &schema).await,
            false => Ok(()),
        };
        match part {
            Part::Key => record.key_schema = Some(schema),
            Part::Value => record.value_schema = Some(schema),
        }
        framed
    }

    async fn frame_with(
        &mut self,
        part: Part,
        record: &mut Record,
        schema: &Arc<str>,
    ) -> Result<(), FrameError> {
        let plan = match &self.last[part as usize] {
            Some((topic, s, plan))
                if Arc::ptr_eq(topic, &record.topic) && Arc::ptr_eq(s, schema) =>
            {
                plan.clone()
            }
            _ => {
                let key = (part, record.topic.clone(), schema.clone());
                let plan = match self.plans.get(&key) {
                    Some(plan) => plan.clone(),
                    None => {
                        let plan = Arc::new(self.plan(part, &record.topic, schema).await?);
                        // Bounded (I7): expanded payloads of ever new shapes would each add one.
                        // Asked again, the registry answers the same.
                        if self.plans.len() >= PLAN_CACHE_LIMIT {
                            self.plans.clear();
                        }
                        self.plans.insert(key, plan.clone());
                        plan
                    }
                };
                self.last[part as usize] =
                    Some((record.topic.clone(), schema.clone(), plan.clone()));
                plan
            }
        };
        let slot = match part {
            Part::Key => &mut record.key,
            Part::Value => &mut record.value,
        };
        let bytes = slot.take().expect("checked by the caller");
        let fitted = match &plan.fit {
            Fit::AsIs => Ok(bytes),
            Fit::Rewrite(r) => {
                let mut out = Vec::with_capacity(bytes.len() + 16);
                out.resize(FRAME_RESERVED, 0);
                let body = &bytes[FRAME_RESERVED..];
                match resolve::transcode(&r.derived, &r.registered, body, &mut out) {
                    Ok(()) => Ok(Bytes::from(out)),
                    Err(m) => Err((bytes, &r.subject, m.to_string())),
                }
            }
            Fit::Validate { subject, contract } => match contract.check(&bytes[FRAME_RESERVED..]) {
                Ok(()) => Ok(bytes),
                Err(m) => Err((bytes, subject, m)),
            },
            Fit::Renumber { subject, contract } => {
                let mut out = Vec::with_capacity(bytes.len() + 8);
                out.resize(FRAME_RESERVED, 0);
                match contract.transcode(&bytes[FRAME_RESERVED..], &mut out) {
                    Ok(()) => Ok(Bytes::from(out)),
                    Err(m) => Err((bytes, subject, m.to_string())),
                }
            }
        };
        let bytes = match fitted {
            Ok(bytes) => bytes,
            Err((bytes, subject, misfit)) => {
                *slot = Some(bytes);
                return Err(FrameError::Refused(format!(
                    "the {} does not fit the latest schema of subject {subject} (id {}): \
                     {misfit}; change the row's {}, or register a schema it fits",
                    part.name(),
                    plan.id,
                    match part {
                        Part::Key => "key",
                        Part::Value => "payload",
                    }
                )));
            }
        };
        self.wire.place(part, record, bytes, plan.id);
        Ok(())
    }

    /// How `part`s of `schema` under `topic`'s subject are framed, asked of the registry. A
    /// key's subject is always the topic's (`key.subject.name.strategy`'s default: walrelay's
    /// strategy option is the value's).
    async fn plan(&self, part: Part, topic: &str, schema: &str) -> Result<Plan, FrameError> {
        let (subject, ty) = match part {
            Part::Key => (format!("{topic}-key"), self.key_type),
            Part::Value => (self.subject(topic, schema)?, self.schema_type),
        };
        let (id, latest) = self.ask(&subject, schema, ty).await?;
        let Some(latest) = latest.filter(|l| l != schema) else {
            return Ok(Plan { id, fit: Fit::AsIs });
        };
        let unreadable = |whose: &str, e: String| {
            FrameError::Refused(format!(
                "the latest schema of subject {subject} (id {id}) cannot be used: {whose} {e}"
            ))
        };
        if ty == SchemaType::Json {
            let contract = JsonContract::parse(&latest).map_err(|e| unreadable("it is", e))?;
            return Ok(Plan { id, fit: Fit::Validate { subject, contract } });
        }
        if ty == SchemaType::Protobuf {
            let registered = ProtoFile::parse(&latest).map_err(|e| {
                FrameError::Refused(format!(
                    "the latest schema of subject {subject} (id {id}) cannot be used: {e}"
                ))
            })?;
            let derived =
                ProtoFile::parse(schema).map_err(|e| unreadable("the value's own schema:", e))?;
            let contract = ProtoContract::fit(&derived, &registered);
            return Ok(Plan { id, fit: Fit::Renumber { subject, contract } });
        }
        let registered = Parsed::parse(&latest).map_err(|e| unreadable("it is not read:", e))?;
        let derived = Parsed::parse(schema)
            .map_err(|e| unreadable("the value's own schema is not read:", e))?;
        Ok(Plan { id, fit: Fit::Rewrite(Rewrite { subject, derived, registered }) })
    }

    /// The id under `subject` (registered, looked up, or the latest's, by the configuration),
    /// and with `use_latest_version` the latest's text; asked until the registry answers.
    async fn ask(
        &self,
        subject: &str,
        schema: &str,
        ty: SchemaType,
    ) -> Result<(u64, Option<String>), FrameError> {
        let mut backoff = Duration::from_millis(200);
        let mut warned = false;
        loop {
            match self.answer(subject, schema, ty).await {
                Ok((id, latest)) => {
                    if warned {
                        tracing::info!(%subject, id, "the schema registry answers again");
                    }
                    self.set_unreachable(None);
                    tracing::debug!(%subject, id, "schema id known");
                    return Ok((id, latest));
                }
                Err(CallError::Unreachable(why)) if !self.patient => {
                    return Err(FrameError::Unreachable(format!(
                        "the schema registry does not answer for subject {subject}: {why}"
                    )));
                }
                Err(CallError::Unreachable(why)) => {
                    if !warned {
                        tracing::warn!(%subject, cause = %why, "the schema registry does not answer; delivery waits for it (nothing after this record is sent or confirmed)");
                        warned = true;
                    }
                    self.set_unreachable(Some(why));
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(CallError::Unauthorized(why)) if why.contains("client certificate") => {
                    self.set_unreachable(None);
                    return Err(FrameError::Unauthorized(format!(
                        "{why}; set [schema_registry] certificate and key to a client \
                         certificate (PEM) the registry's CA signed, and its key"
                    )));
                }
                Err(CallError::Unauthorized(why)) => {
                    self.set_unreachable(None);
                    return Err(FrameError::Unauthorized(format!(
                        "the schema registry refused walrelay's credentials (user {}): {why}; \
                         check [schema_registry] user and WALRELAY_SCHEMA_REGISTRY_PASSWORD",
                        self.cfg.user.as_deref().unwrap_or("(none)")
                    )));
                }
                Err(CallError::Refused { status, message }) => {
                    self.set_unreachable(None);
                    let latest = format!(
                        "with use_latest_version the subject must hold a registered {} schema: \
                         register one",
                        ty.name()
                    );
                    let fix = match (self.cfg.use_latest_version, self.cfg.auto_register) {
                        (true, _) => latest.as_str(),
                        (false, true) => {
                            "a schema the subject's compatibility level refuses is refused: \
                             change the payload, or the subject's compatibility"
                        }
                        (false, false) => {
                            "with auto_register = false the schema must be registered \
                             under the subject already: register it, or change the payload"
                        }
                    };
                    // Apicurio takes a JSON Schema only with top-level `properties` or a
                    // json-schema.org `$schema`; Confluent's text for an optional value is a
                    // bare `oneOf`.
                    let apicurio_json = "an Apicurio registry takes a JSON Schema only with \
                        top-level `properties` (or a json-schema.org `$schema`), and Confluent's \
                        JsonSchemaConverter writes an optional value's (a nullable payload \
                        column, an expanded payload) as a bare `oneOf`: add an envelope \
                        placement (table.fields.additional.placement = \"…:envelope:…\", the \
                        value becomes a required object), or use a registry that takes any JSON \
                        Schema (Confluent's, Karapace)";
                    let fix = match ty == SchemaType::Json
                        && message.contains("discover artifact type")
                    {
                        true => apicurio_json,
                        false => fix,
                    };
                    return Err(FrameError::Refused(format!(
                        "the schema registry refused the value's schema under subject {subject} \
                         (HTTP {status}: {message}); {fix}"
                    )));
                }
            }
        }
    }

    /// One try of [`Registry::ask`]: the id the configuration names, and the latest's text.
    async fn answer(
        &self,
        subject: &str,
        schema: &str,
        ty: SchemaType,
    ) -> Result<(u64, Option<String>), CallError> {
        let cfg = &self.cfg;
        let (id, latest) = match (cfg.use_latest_version, cfg.auto_register) {
            (true, _) => client::latest(cfg, subject, ty).await.map(|(id, t)| (id, Some(t)))?,
            (false, true) => (client::register(cfg, subject, schema, ty).await?, None),
            (false, false) => (client::lookup(cfg, subject, schema, ty).await?, None),
        };
        if cfg.use_id == UseId::GlobalId {
            let text = latest.as_deref().unwrap_or(schema);
            return Ok((client::global_id(cfg, subject, text, ty).await?, latest));
        }
        Ok((u64::from(id), latest))
    }

    fn set_unreachable(&self, why: Option<String>) {
        if let Some(m) = &self.metrics {
            m.registry_unreachable.store(why.is_some(), Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::IdHandler;

    fn registry(strategy: SubjectNameStrategy) -> Registry {
        Registry::new(SchemaRegistryConfig {
            urls: vec!["http://r".into()],
            user: None,
            password: None,
            auto_register: true,
            use_latest_version: false,
            ca: None,
            identity: None,
            subject_name_strategy: strategy,
            id_handler: IdHandler::FourByte,
            use_id: UseId::ContentId,
        })
    }

    #[test]
    fn subjects_are_named_as_confluents_strategies_name_them() {
        let record =
            r#"{"type":"record","name":"Value","namespace":"app.public.outbox.Order","fields":[]}"#;
        let optional = r#"["null",{"type":"record","name":"payload","fields":[]}]"#;
        let topic = registry(SubjectNameStrategy::Topic);
        assert_eq!(topic.subject("t", optional).unwrap(), "t-value");
        let by_record = registry(SubjectNameStrategy::Record);
        assert_eq!(by_record.subject("t", record).unwrap(), "app.public.outbox.Order.Value");
        let both = registry(SubjectNameStrategy::TopicRecord);
        assert_eq!(both.subject("t", record).unwrap(), "t-app.public.outbox.Order.Value");
        let refused = both.subject("t", optional).unwrap_err().to_string();
        assert!(refused.contains("not a record") && refused.contains("envelope"), "{refused}");
        assert!(by_record.subject("t", "\"string\"").is_err());
    }
}
