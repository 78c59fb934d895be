//! The HTTP webhook sink (`[delivery] sink = "http"`): each record is a POST of its value to
//! the `[webhook] url` its routed name fills in, with the record's headers as HTTP headers,
//! `Idempotency-Key` and Standard Webhooks' `webhook-id` set to the event id, and signed as
//! Standard Webhooks says when a secret is set.
//!
//! The answer decides: 2xx acknowledges; 408, 429 and 5xx (and no answer in time) send the
//! record again after a backoff, honouring `Retry-After`; any other status refuses it for good.
//! Connections are HTTP/1.1, kept alive and reused per origin.

mod config;
mod signature;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;

pub(crate) use self::config::Raw;
pub use self::config::{parse, WebhookConfig};
pub use self::signature::Secret;
use super::{Publish, Published};
use crate::error::chain;
use crate::error::Error;
use crate::router::Record;

/// The header that carries the record's key (the aggregate id).
pub const KEY_HEADER: &str = "walrelay-key";
/// How much of a refusing answer's body the refusal quotes.
const QUOTED_BODY: usize = 300;

pub struct Webhook {
    config: WebhookConfig,
    tls: Option<tokio_rustls::TlsConnector>,
    /// Idle connections per origin (`scheme://host:port`).
    idle: Mutex<HashMap<Arc<str>, Vec<Sender>>>,
    /// Where each routed name's records go, worked out once per name.
    targets: Mutex<HashMap<Arc<str>, Target>>,
}

/// One HTTP/1.1 connection's request half.
type Sender = SendRequest<Full<Bytes>>;

/// The URL a routed name fills in, parsed, and its origin.
#[derive(Clone)]
struct Target {
    url: Arc<str>,
    uri: Uri,
    origin: Arc<str>,
}

/// The client; no connection is made until the first record (`check` makes one).
pub async fn connect(config: &WebhookConfig) -> Result<Webhook, Error> {
    let tls = if config.url.starts_with("https://") {
        let tls = crate::tls::https_client(config.ca.as_deref(), None).map_err(|e| {
            Error::definite(
                format!("[webhook] ca cannot be used: {e}"),
                "set [webhook] ca to a PEM file of the CA that signed the receiver's certificate, or remove it to trust the usual roots",
            )
        })?;
        Some(tokio_rustls::TlsConnector::from(Arc::new(tls)))
    } else {
        None
    };
    Ok(Webhook {
        config: config.clone(),
        tls,
        idle: Mutex::new(HashMap::new()),
        targets: Mutex::new(HashMap::new()),
    })
}

/// `walrelay setup`: a webhook has nothing to create.
pub async fn setup(config: &WebhookConfig, _routed: &[String]) -> Result<Vec<String>, Error> {
    Ok(vec![format!(
        "webhook {}: nothing to create (the receiver serves its own URLs)",
        crate::options::secret::redact_url(&config.url)
    )])
}

/// `walrelay check`: the receiver's origin accepts a connection.
pub async fn check(config: &WebhookConfig) -> Result<String, Error> {
    let hook = connect(config).await?;
    let url = config.url_for("check");
    let uri: Uri = url
        .parse()
        .map_err(|e| Error::definite(format!("[webhook] url: {e}"), "fix [webhook] url"))?;
    let shown = crate::options::secret::redact_url(&config.url);
    match tokio::time::timeout(config.timeout, hook.connection(&uri)).await {
        Ok(Ok(_)) => Ok(format!("webhook {shown}: the receiver accepts connections")),
        Ok(Err(why)) => Err(Error::transient_msg(format!("webhook {shown}: {why}"))),
        Err(_) => Err(Error::transient_msg(format!(
            "webhook {shown}: no connection within {:?}",
            config.timeout
        ))),
    }
}

impl Publish for Webhook {
    fn name(&self) -> &'static str {
        "http"
    }

    async fn publish(&self, records: &[Arc<Record>]) -> Vec<Published> {
        let mut out = Vec::with_capacity(records.len());
        for record in records {
            out.push(self.post(record).await);
        }
        out
    }
}

impl Webhook {
    async fn post(&self, record: &Record) -> Published {
        let target = match self.target(&record.topic) {
            Ok(target) => target,
            Err(reason) => return Published::Refused(reason),
        };
        let url = &target.url;
        let request = match self.request(record, &target.uri) {
            Ok(request) => request,
            Err(reason) => return Published::Refused(reason),
        };
        let answer =
            tokio::time::timeout(self.config.timeout, self.exchange(&target, request)).await;
        match answer {
            Err(_) => Published::Retry {
                reason: format!(
                    "the webhook at {url} gave no answer within {:?}",
                    self.config.timeout
                ),
                after: None,
            },
            Ok(Err(why)) => {
                Published::Retry { reason: format!("the webhook at {url}: {why}"), after: None }
            }
            Ok(Ok((status, retry_after, body))) => verdict(url, status, retry_after, &body),
        }
    }

    /// Where `topic`'s records go: its URL, parsed, and its origin.
    fn target(&self, topic: &Arc<str>) -> Result<Target, String> {
        let mut targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(target) = targets.get(topic) {
            return Ok(target.clone());
        }
        let url = self.config.url_for(topic);
        let uri: Uri = url.parse().map_err(|e| format!("the URL {url} is not valid: {e}"))?;
        let target = Target { origin: origin(&uri).into(), uri, url: url.into() };
        targets.insert(topic.clone(), target.clone());
        Ok(target)
    }

    fn request(&self, record: &Record, uri: &Uri) -> Result<Request<Full<Bytes>>, String> {
        let body = record.value.clone().unwrap_or_default();
        let mut builder = Request::builder().method(Method::POST).uri(uri.clone());
        let headers = builder.headers_mut().expect("a fresh builder has headers");
        for (name, value) in &record.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("header {name:?} is not a valid HTTP header name"))?;
            let value = HeaderValue::from_bytes(value)
                .map_err(|_| format!("header {name} has a value HTTP cannot carry (a control character or a line break)"))?;
            headers.append(name, value);
        }
        if let Some(key) = &record.key {
            let value = HeaderValue::from_bytes(key)
                .map_err(|_| "the key has bytes HTTP cannot carry in a header".to_string())?;
            headers.insert(KEY_HEADER, value);
        }
        let id = HeaderValue::from_str(&record.event_id)
            .map_err(|_| "the event id has characters HTTP cannot carry in a header".to_string())?;
        headers.insert("idempotency-key", id.clone());
        headers.insert("webhook-id", id);
        if !headers.contains_key(hyper::header::CONTENT_TYPE) {
            let json = matches!(body.iter().find(|b| !b.is_ascii_whitespace()), Some(b'{' | b'['));
            let ty = if json { "application/json" } else { "application/octet-stream" };
            headers.insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static(ty));
        }
        if let Some(secret) = &self.config.secret {
            let now = crate::clock::unix_micros() / 1_000_000;
            let signature = secret.sign(&record.event_id, now, &body);
            headers.insert("webhook-timestamp", HeaderValue::from(now));
            headers.insert(
                "webhook-signature",
                HeaderValue::from_str(&signature).expect("base64 is header-safe"),
            );
        }
        builder.body(Full::new(body)).map_err(|e| format!("the request cannot be built: {e}"))
    }

    /// Sends `request` on an idle connection to its origin, or a new one.
    async fn exchange(
        &self,
        target: &Target,
        request: Request<Full<Bytes>>,
    ) -> Result<(StatusCode, Option<Duration>, Bytes), String> {
        let mut sender = match self.take_idle(&target.origin) {
            Some(sender) => sender,
            None => self.connection(&target.uri).await?,
        };
        let response = sender.send_request(request).await.map_err(|e| chain(&e))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(hyper::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = response.into_body().collect().await.map_err(|e| chain(&e))?.to_bytes();
        if !sender.is_closed() {
            self.idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(target.origin.clone())
                .or_default()
                .push(sender);
        }
        Ok((status, retry_after, body))
    }

    fn take_idle(&self, origin: &str) -> Option<SendRequest<Full<Bytes>>> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let senders = idle.get_mut(origin)?;
        while let Some(sender) = senders.pop() {
            if sender.is_ready() {
                return Some(sender);
            }
        }
        None
    }

    async fn connection(&self, uri: &Uri) -> Result<SendRequest<Full<Bytes>>, String> {
        let host = uri.host().ok_or("the URL has no host")?.trim_matches(['[', ']']);
        let https = uri.scheme_str() == Some("https");
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tcp = tokio::net::TcpStream::connect((host, port))
            .await
            .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?;
        let _ = tcp.set_nodelay(true);
        match (&self.tls, https) {
            (Some(tls), true) => {
                let name = rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(|e| format!("{host} is no TLS server name: {e}"))?;
                let stream = tls
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS handshake with {host}:{port}: {e}"))?;
                handshake(TokioIo::new(stream)).await
            }
            _ => handshake(TokioIo::new(tcp)).await,
        }
    }
}

async fn handshake<IO>(io: IO) -> Result<SendRequest<Full<Bytes>>, String>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (sender, connection) =
        hyper::client::conn::http1::handshake(io).await.map_err(|e| chain(&e))?;
    tokio::spawn(async move {
        // Ends when the receiver closes the connection or every sender is dropped.
        let _ = connection.await;
    });
    Ok(sender)
}

/// What an answer means for the record.
fn verdict(url: &str, status: StatusCode, retry_after: Option<Duration>, body: &[u8]) -> Published {
    if status.is_success() {
        return Published::Acked;
    }
    let quoted = String::from_utf8_lossy(&body[..body.len().min(QUOTED_BODY)]).into_owned();
    let said =
        if quoted.trim().is_empty() { String::new() } else { format!(": {}", quoted.trim()) };
    let retry = status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error();
    if retry {
        return Published::Retry {
            reason: format!("the webhook at {url} answered {status}{said}"),
            after: retry_after,
        };
    }
    Published::Refused(format!(
        "the webhook at {url} answered {status}{said}: a 4xx other than 408 and 429 (or a redirect, which walrelay does not follow) refuses the record for good; fix the receiver or [webhook] url"
    ))
}

fn origin(uri: &Uri) -> String {
    format!(
        "{}://{}:{}",
        uri.scheme_str().unwrap_or("http"),
        uri.host().unwrap_or(""),
        uri.port_u16().unwrap_or(0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_xx_acks_408_429_and_5xx_retry_honouring_retry_after_and_other_4xx_refuse() {
        let v =
            |s: u16, after| verdict("http://h/t", StatusCode::from_u16(s).unwrap(), after, b"no");
        assert_eq!(v(204, None), Published::Acked);
        for s in [408, 429, 500, 503] {
            assert!(matches!(v(s, None), Published::Retry { .. }), "{s}");
        }
        let after = Some(Duration::from_secs(7));
        assert!(
            matches!(v(503, after), Published::Retry { after: Some(d), .. } if d.as_secs() == 7)
        );
        for s in [400, 401, 404, 410, 422, 301] {
            assert!(
                matches!(v(s, None), Published::Refused(r) if r.contains(&s.to_string())),
                "{s}"
            );
        }
    }
}
