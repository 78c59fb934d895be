//! The schema registry: the id of each registry-encoded value's schema, written into the bytes
//! the router reserved before the value (Confluent's wire format: a magic byte 0, then the id,
//! 4 bytes big-endian). The registry is asked once per subject and schema, never per record:
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

use crate::config::{SchemaRegistryConfig, SubjectNameStrategy};
use crate::metrics::Metrics;
use crate::router::{Record, FRAME_RESERVED};

pub mod client;
mod json_contract;
pub mod proto_contract;
mod resolve;
mod schema;

use self::client::{CallError, SchemaType};
use self::json_contract::JsonContract;
use self::proto_contract::{ProtoContract, ProtoFile};
use self::schema::Parsed;

/// The plans known, per topic and derived schema, for one run.
pub struct Registry {
    cfg: SchemaRegistryConfig,
    /// The value converter's: one per run.
    schema_type: SchemaType,
    plans: HashMap<(Arc<str>, Arc<str>), Arc<Plan>>,
    /// The last (topic, schema, plan) used: records in a row mostly share both, and the same
    /// `Arc`s, so a pointer comparison spares the hashing.
    last: Option<(Arc<str>, Arc<str>, Arc<Plan>)>,
    metrics: Option<Arc<Metrics>>,
}

/// How the values of one topic and derived schema are framed: under `id`, as they are or, with
/// `use_latest_version` and a registered schema other than the derived one, fitted to it first.
struct Plan {
    id: u32,
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
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Refused(why) | FrameError::Unauthorized(why) => f.write_str(why),
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
        Registry { cfg, schema_type, plans: HashMap::new(), last: None, metrics: None }
    }

    /// Registers the values' schemas as the value converter writes them: `converter` is
    /// `RouterConfig::registry_converter` ("avro", "protobuf" or "json-schema").
    pub fn for_converter(mut self, converter: &str) -> Registry {
        self.schema_type = match converter {
            "protobuf" => SchemaType::Protobuf,
            "json-schema" => SchemaType::Json,
            _ => SchemaType::Avro,
        };
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
    /// the value under the registered schema, with `use_latest_version`); a record without a
    /// registry value is left as it is. Waits while the registry is unreachable.
    pub async fn frame(&mut self, record: &mut Record) -> Result<(), FrameError> {
        let (Some(schema), true) = (&record.value_schema, record.value.is_some()) else {
            return Ok(());
        };
        let plan = match &self.last {
            Some((topic, s, plan))
                if Arc::ptr_eq(topic, &record.topic) && Arc::ptr_eq(s, schema) =>
            {
                plan.clone()
            }
            _ => {
                let key = (record.topic.clone(), schema.clone());
                let plan = match self.plans.get(&key) {
                    Some(plan) => plan.clone(),
                    None => {
                        let plan = Arc::new(self.plan(&record.topic, schema).await?);
                        // Bounded (I7): expanded payloads of ever new shapes would each add one.
                        // Asked again, the registry answers the same.
                        if self.plans.len() >= PLAN_CACHE_LIMIT {
                            self.plans.clear();
                        }
                        self.plans.insert(key, plan.clone());
                        plan
                    }
                };
                self.last = Some((record.topic.clone(), schema.clone(), plan.clone()));
                plan
            }
        };
        let value = record.value.take().expect("checked above");
        let misfit = |record: &mut Record, value, subject: &str, misfit: String| {
            record.value = Some(value);
            Err(FrameError::Refused(format!(
                "the value does not fit the latest schema of subject {subject} (id {}): \
                 {misfit}; change the row's payload, or register a schema it fits",
                plan.id
            )))
        };
        let value = match &plan.fit {
            Fit::AsIs => value,
            Fit::Rewrite(r) => {
                let mut out = Vec::with_capacity(value.len() + 16);
                out.resize(FRAME_RESERVED, 0);
                let body = &value[FRAME_RESERVED..];
                if let Err(m) = resolve::transcode(&r.derived, &r.registered, body, &mut out) {
                    return misfit(record, value, &r.subject, m.to_string());
                }
                Bytes::from(out)
            }
            Fit::Validate { subject, contract } => {
                if let Err(m) = contract.check(&value[FRAME_RESERVED..]) {
                    return misfit(record, value, subject, m);
                }
                value
            }
            Fit::Renumber { subject, contract } => {
                let mut out = Vec::with_capacity(value.len() + 8);
                out.resize(FRAME_RESERVED, 0);
                if let Err(m) = contract.transcode(&value[FRAME_RESERVED..], &mut out) {
                    return misfit(record, value, subject, m.to_string());
                }
                Bytes::from(out)
            }
        };
        // Taken, not cloned: the router's buffer is then unique and the id is written in place.
        record.value = Some(framed(value, plan.id));
        Ok(())
    }

    /// How values of `schema` under `topic`'s subject are framed, asked of the registry.
    async fn plan(&self, topic: &str, schema: &str) -> Result<Plan, FrameError> {
        let subject = self.subject(topic, schema)?;
        let (id, latest) = self.ask(&subject, schema).await?;
        let Some(latest) = latest.filter(|l| l != schema) else {
            return Ok(Plan { id, fit: Fit::AsIs });
        };
        let unreadable = |whose: &str, e: String| {
            FrameError::Refused(format!(
                "the latest schema of subject {subject} (id {id}) cannot be used: {whose} {e}"
            ))
        };
        if self.schema_type == SchemaType::Json {
            let contract = JsonContract::parse(&latest).map_err(|e| unreadable("it is", e))?;
            return Ok(Plan { id, fit: Fit::Validate { subject, contract } });
        }
        if self.schema_type == SchemaType::Protobuf {
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
    async fn ask(&self, subject: &str, schema: &str) -> Result<(u32, Option<String>), FrameError> {
        let mut backoff = Duration::from_millis(200);
        let mut warned = false;
        loop {
            let answer = match (self.cfg.use_latest_version, self.cfg.auto_register) {
                (true, _) => client::latest(&self.cfg, subject, self.schema_type)
                    .await
                    .map(|(id, t)| (id, Some(t))),
                (false, true) => client::register(&self.cfg, subject, schema, self.schema_type)
                    .await
                    .map(|id| (id, None)),
                (false, false) => client::lookup(&self.cfg, subject, schema, self.schema_type)
                    .await
                    .map(|id| (id, None)),
            };
            match answer {
                Ok((id, latest)) => {
                    if warned {
                        tracing::info!(%subject, id, "the schema registry answers again");
                    }
                    self.set_unreachable(None);
                    tracing::debug!(%subject, id, "schema id known");
                    return Ok((id, latest));
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
                        self.schema_type.name()
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
                    let fix = match self.schema_type == SchemaType::Json
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

    fn set_unreachable(&self, why: Option<String>) {
        if let Some(m) = &self.metrics {
            m.registry_unreachable.store(why.is_some(), Relaxed);
        }
    }
}

/// `value` (five reserved bytes, then the body) with the magic byte and `id` in front.
fn framed(value: Bytes, id: u32) -> Bytes {
    let mut bytes = match value.try_into_mut() {
        Ok(unique) => unique,
        Err(shared) => bytes::BytesMut::from(&shared[..]),
    };
    bytes[0] = 0;
    bytes[1..5].copy_from_slice(&id.to_be_bytes());
    bytes.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn the_frame_is_the_magic_byte_and_the_id_big_endian_before_the_body() {
        let value = Bytes::from(vec![9, 9, 9, 9, 9, 2, 4, b'h', b'i']);
        assert_eq!(&framed(value, 0x0102_0304)[..], [0, 1, 2, 3, 4, 2, 4, b'h', b'i']);
    }
}
