//! The registry's Confluent-compatible REST API, the calls walrelay makes: register a schema
//! under a subject (which answers the id of an identical schema already there), look a schema
//! up under a subject without registering it, and, for `walrelay check`, list the subjects and
//! read the default compatibility level. One HTTP/1.1 connection per call: they happen once per
//! new schema.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use serde_json::Value;

use crate::config::SchemaRegistryConfig;
use crate::error::chain;

/// How long one call may take before the registry counts as unreachable.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a call did not give an id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// No registry answered (refused, timed out, 5xx, a 404 or a redirect that is no registry
    /// API's): ask again later.
    Unreachable(String),
    /// The credentials were refused (401, 403): no retry helps until they are fixed.
    Unauthorized(String),
    /// The registry refused this schema or subject (409 incompatible, 422 invalid, a 404 with
    /// the registry's error code): the record's fault, with the registry's own words.
    Refused { status: u16, message: String },
}

/// A schema's type, as the registry's API names it; Avro is its default and goes unnamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaType {
    Avro,
    Protobuf,
    Json,
}

impl SchemaType {
    /// A registry converter's, by its short name ("avro", "protobuf", "json-schema").
    pub fn of_converter(converter: &str) -> SchemaType {
        match converter {
            "protobuf" => SchemaType::Protobuf,
            "json-schema" => SchemaType::Json,
            _ => SchemaType::Avro,
        }
    }

    /// The registry API's `schemaType`.
    pub fn name(self) -> &'static str {
        match self {
            SchemaType::Avro => "AVRO",
            SchemaType::Protobuf => "PROTOBUF",
            SchemaType::Json => "JSON",
        }
    }
}

/// Registers `schema` under `subject`; returns its id.
pub async fn register(
    cfg: &SchemaRegistryConfig,
    subject: &str,
    schema: &str,
    ty: SchemaType,
) -> Result<u32, CallError> {
    schema_id(cfg, &format!("/subjects/{}/versions", encode_path(subject)), schema, ty).await
}

/// The id of `schema` if it is registered under `subject` already; a 404 refuses it.
pub async fn lookup(
    cfg: &SchemaRegistryConfig,
    subject: &str,
    schema: &str,
    ty: SchemaType,
) -> Result<u32, CallError> {
    schema_id(cfg, &format!("/subjects/{}", encode_path(subject)), schema, ty).await
}

/// The latest schema registered under `subject`: its id and its text. A subject without one,
/// or one of another type than `ty`, is refused.
pub async fn latest(
    cfg: &SchemaRegistryConfig,
    subject: &str,
    ty: SchemaType,
) -> Result<(u32, String), CallError> {
    let path = format!("/subjects/{}/versions/latest", encode_path(subject));
    let answer = call(cfg, Method::GET, &path, None).await?;
    let kind = answer.get("schemaType").and_then(Value::as_str).unwrap_or("AVRO");
    if kind != ty.name() {
        return Err(CallError::Refused {
            status: 200,
            message: format!("the latest schema is {kind}, not {}", ty.name()),
        });
    }
    let id = answer.get("id").and_then(Value::as_u64).and_then(|id| u32::try_from(id).ok());
    let text = answer.get("schema").and_then(Value::as_str);
    match (id, text) {
        (Some(id), Some(text)) => Ok((id, text.to_string())),
        _ => Err(CallError::Unreachable(format!(
            "the registry's answer has no id or schema: {answer}"
        ))),
    }
}

/// The subjects the registry holds: what `walrelay check` asks to prove the URL and the
/// credentials (the call needs the same read right as a lookup).
pub async fn subjects(cfg: &SchemaRegistryConfig) -> Result<Vec<String>, CallError> {
    let answer = call(cfg, Method::GET, "/subjects", None).await?;
    let list = answer.as_array().ok_or_else(|| {
        CallError::Unreachable(format!("the registry's subject list is not a list: {answer}"))
    })?;
    Ok(list.iter().filter_map(Value::as_str).map(str::to_string).collect())
}

/// The registry's default compatibility level (`BACKWARD` unless set otherwise).
pub async fn compatibility(cfg: &SchemaRegistryConfig) -> Result<String, CallError> {
    let answer = call(cfg, Method::GET, "/config", None).await?;
    Ok(answer
        .get("compatibilityLevel")
        .or_else(|| answer.get("compatibility"))
        .and_then(Value::as_str)
        .unwrap_or("(not said)")
        .to_string())
}

/// POSTs `schema` to `path` and reads the `id` of the answer: both calls answer so.
async fn schema_id(
    cfg: &SchemaRegistryConfig,
    path: &str,
    schema: &str,
    ty: SchemaType,
) -> Result<u32, CallError> {
    let answer = call(cfg, Method::POST, path, Some(schema_body(schema, ty))).await?;
    answer
        .get("id")
        .and_then(Value::as_u64)
        .and_then(|id| u32::try_from(id).ok())
        .ok_or_else(|| CallError::Unreachable(format!("the registry's answer has no id: {answer}")))
}

fn schema_body(schema: &str, ty: SchemaType) -> String {
    match ty {
        SchemaType::Avro => serde_json::json!({ "schema": schema }),
        other => serde_json::json!({ "schema": schema, "schemaType": other.name() }),
    }
    .to_string()
}

/// Apicurio's globalId of `schema` under `subject` (`[schema_registry] use_id = "globalId"`):
/// the version the Confluent-compatible API finds it in, then that version's metadata from
/// Apicurio's own API, `…/apis/registry/v2`, which Apicurio 2 and 3 both serve (a subject is an
/// artifact of the default group). Asked once per plan, like the id itself.
pub async fn global_id(
    cfg: &SchemaRegistryConfig,
    subject: &str,
    schema: &str,
    ty: SchemaType,
) -> Result<u64, CallError> {
    let subject = encode_path(subject);
    let path = format!("/subjects/{subject}");
    let found = call(cfg, Method::POST, &path, Some(schema_body(schema, ty))).await?;
    let version = found.get("version").and_then(Value::as_u64).ok_or_else(|| {
        CallError::Unreachable(format!("the registry's answer has no version: {found}"))
    })?;
    let path = format!("/groups/default/artifacts/{subject}/versions/{version}/meta");
    let meta = call_api(cfg, Api::Apicurio, Method::GET, &path, None).await?;
    meta.get("globalId").and_then(Value::as_u64).ok_or_else(|| {
        CallError::Unreachable(format!("Apicurio's version metadata has no globalId: {meta}"))
    })
}

/// The version of the Apicurio registry beside the Confluent-compatible API (its own API's
/// `/system/info`): what `walrelay check` asks when values carry a globalId.
pub async fn apicurio_version(cfg: &SchemaRegistryConfig) -> Result<String, CallError> {
    let info = call_api(cfg, Api::Apicurio, Method::GET, "/system/info", None).await?;
    Ok(info.get("version").and_then(Value::as_str).unwrap_or("(not said)").to_string())
}

/// Whose API a path is of: each URL is the Confluent-compatible API's base, and Apicurio's own
/// sits beside its `…/apis/ccompat/v7`.
#[derive(Clone, Copy)]
enum Api {
    Confluent,
    Apicurio,
}

/// Asks every URL in turn, until one answers.
async fn call(
    cfg: &SchemaRegistryConfig,
    method: Method,
    path: &str,
    body: Option<String>,
) -> Result<Value, CallError> {
    call_api(cfg, Api::Confluent, method, path, body).await
}

async fn call_api(
    cfg: &SchemaRegistryConfig,
    api: Api,
    method: Method,
    path: &str,
    body: Option<String>,
) -> Result<Value, CallError> {
    let mut last = CallError::Unreachable("no registry URL".into());
    for base in &cfg.urls {
        let url = match api {
            Api::Confluent => format!("{base}{path}"),
            // Config refuses a use_id = "globalId" beside a URL that is not Apicurio's.
            Api::Apicurio => match SchemaRegistryConfig::apicurio_api(base) {
                Some(api) => format!("{api}{path}"),
                None => continue,
            },
        };
        match tokio::time::timeout(CALL_TIMEOUT, once(cfg, &method, &url, body.clone())).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e @ (CallError::Refused { .. } | CallError::Unauthorized(_)))) => return Err(e),
            Ok(Err(e)) => last = e,
            Err(_) => {
                last = CallError::Unreachable(format!(
                    "{url}: no answer within {} s",
                    CALL_TIMEOUT.as_secs()
                ))
            }
        }
    }
    Err(last)
}

async fn once(
    cfg: &SchemaRegistryConfig,
    method: &Method,
    url: &str,
    body: Option<String>,
) -> Result<Value, CallError> {
    let unreachable = |e: &dyn std::fmt::Display| CallError::Unreachable(format!("{url}: {e}"));
    let (https, rest) = match url.strip_prefix("https://") {
        Some(rest) => (true, rest),
        None => (
            false,
            url.strip_prefix("http://").ok_or_else(|| unreachable(&"not an http(s):// URL"))?,
        ),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
    let address = match authority.contains(':') {
        true => authority.to_string(),
        false => format!("{authority}:{}", if https { 443 } else { 80 }),
    };
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, authority)
        .header(hyper::header::ACCEPT, "application/vnd.schemaregistry.v1+json, application/json")
        .header(hyper::header::CONTENT_TYPE, "application/vnd.schemaregistry.v1+json");
    if let Some(user) = &cfg.user {
        let pair = format!("{user}:{}", cfg.password.as_deref().unwrap_or(""));
        let mut encoded = Vec::with_capacity(pair.len() * 4 / 3 + 4);
        crate::router::write_base64(&mut encoded, pair.as_bytes());
        let encoded = String::from_utf8(encoded).expect("base64 is ASCII");
        request = request.header(hyper::header::AUTHORIZATION, format!("Basic {encoded}"));
    }
    let request = request
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(|e| unreachable(&e))?;
    let stream = tokio::net::TcpStream::connect(&address).await.map_err(|e| unreachable(&e))?;
    let (status, bytes) = match https {
        false => exchange(stream, request).await.map_err(|e| unreachable(&e))?,
        true => {
            // Built per call from the files: calls happen once per new schema.
            let identity = cfg.identity.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
            let tls = crate::tls::https_client(cfg.ca.as_deref(), identity)
                .map_err(|e| unreachable(&e))?;
            let name = rustls::pki_types::ServerName::try_from(host.to_string())
                .map_err(|e| unreachable(&format!("{host} is no TLS server name: {e}")))?;
            let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls));
            let stream = connector
                .connect(name, stream)
                .await
                .map_err(|e| unreachable(&format!("TLS handshake: {e}")))?;
            exchange(stream, request).await.map_err(|e| match refused_certificate(cfg, &e) {
                Some(why) => CallError::Unauthorized(format!("{url}: {why}")),
                None => unreachable(&e),
            })?
        }
    };
    answer(url, status, &bytes)
}

/// TLS alerts by which a server refuses the client's certificate, or its lack of one. In TLS
/// 1.3 they come after the handshake, on the connection's first read.
const CERTIFICATE_ALERTS: [&str; 7] = [
    "CertificateRequired",
    "BadCertificate",
    "UnknownCA",
    "CertificateUnknown",
    "CertificateExpired",
    "CertificateRevoked",
    "AccessDenied",
];

/// Why the registry refused the TLS session at walrelay's client certificate, when `why` (an
/// exchange's error) is such a refusal: no retry helps until the configuration changes.
fn refused_certificate(cfg: &SchemaRegistryConfig, why: &str) -> Option<String> {
    let alert = CERTIFICATE_ALERTS.iter().find(|a| why.contains(&format!("alert: {a}")))?;
    let sent = match &cfg.identity {
        Some((certificate, _)) => format!("the client certificate {}", certificate.display()),
        None => "no client certificate".to_string(),
    };
    Some(format!(
        "the registry refused the TLS session at walrelay's client certificate ({alert}; walrelay \
         sent {sent}): {why}"
    ))
}

/// One request on a connection: the status and the body.
async fn exchange<IO>(io: IO, request: Request<Full<Bytes>>) -> Result<(StatusCode, Bytes), String>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
            .await
            .map_err(|e| chain(&e))?;
    tokio::spawn(conn);
    let response = sender.send_request(request).await.map_err(|e| chain(&e))?;
    let status = response.status();
    let body = response.into_body().collect().await.map_err(|e| chain(&e))?.to_bytes();
    Ok((status, body))
}

/// What a response says: its JSON, or why it gave none.
fn answer(url: &str, status: StatusCode, bytes: &[u8]) -> Result<Value, CallError> {
    let value: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    let message = || {
        value
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| String::from_utf8_lossy(bytes).chars().take(300).collect())
    };
    let unreachable = |why: String| CallError::Unreachable(format!("{url}: {why}"));
    match status {
        s if s.is_success() => Ok(value),
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
            Err(CallError::Unauthorized(format!("{url} answered {status}: {}", message())))
        }
        s if s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS => {
            Err(unreachable(format!("answered {status}: {}", message())))
        }
        // A registry's 404 says what it lacks (`error_code` 40401 subject, 40403 schema); one
        // without is a URL that is no registry API, which must hold delivery rather than make
        // every record undeliverable. So is a redirect: walrelay follows none.
        s if s.is_redirection()
            || (s == StatusCode::NOT_FOUND && value.get("error_code").is_none()) =>
        {
            let likely = match url.contains("/apis/registry/v2/") {
                true => "the server beside [schema_registry] url is likely no Apicurio registry",
                false => {
                    "[schema_registry] url is likely not the Confluent-compatible API's base \
                     (Confluent: http://host:8081, Apicurio: http://host:8080/apis/ccompat/v7)"
                }
            };
            Err(unreachable(format!("answered {status} with no registry error code: {likely}")))
        }
        s => Err(CallError::Refused { status: s.as_u16(), message: message() }),
    }
}

/// A subject in a URL path: topic names hold `.`, `_`, `-` and letters, which need no escape;
/// anything else is percent-encoded.
fn encode_path(subject: &str) -> String {
    let mut out = String::with_capacity(subject.len());
    for b in subject.bytes() {
        if b.is_ascii_alphanumeric() || b"._-".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_404_is_the_records_only_with_the_registrys_error_code() {
        let url = "http://r/apis/ccompat/v7/subjects/t-value";
        let registry = br#"{"message":"Subject 't-value' not found.","error_code":40401}"#;
        let refused = answer(url, StatusCode::NOT_FOUND, registry).unwrap_err();
        assert!(matches!(refused, CallError::Refused { status: 404, .. }), "{refused:?}");
        let wrong_path = br#"{"detail":"NotFoundException: RESTEASY003210","status":404}"#;
        let held = answer(url, StatusCode::NOT_FOUND, wrong_path).unwrap_err();
        assert!(matches!(&held, CallError::Unreachable(w) if w.contains("ccompat")), "{held:?}");
        let moved = answer(url, StatusCode::MOVED_PERMANENTLY, b"").unwrap_err();
        assert!(matches!(moved, CallError::Unreachable(_)), "{moved:?}");
        let conflict = answer(url, StatusCode::CONFLICT, br#"{"message":"incompatible"}"#);
        assert!(matches!(conflict, Err(CallError::Refused { status: 409, .. })));
        let login = answer(url, StatusCode::UNAUTHORIZED, b"").unwrap_err();
        assert!(matches!(login, CallError::Unauthorized(_)));
        assert_eq!(answer(url, StatusCode::OK, br#"{"id":7}"#).unwrap()["id"], 7);
    }
}
