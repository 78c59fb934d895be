//! The NATS JetStream sink: each record is published to the subject of its routed name, and
//! only the stream's PubAck acknowledges it.
//!
//! The event id is the `Nats-Msg-Id` header, so JetStream drops what a restart sends again
//! within the stream's `duplicate_window` (its PubAck then says `duplicate`, and the record is
//! acknowledged all the same: the message is in the stream). Nothing dedupes past that window.
//! A replayed record JetStream drops that way is refused instead, with the window as the reason:
//! its consumers would not get it again.
//!
//! async-nats reconnects by itself, for ever (`max_reconnects(None)`): while the server is
//! away a publish waits for its PubAck until `timeout` and is retried; once the server is
//! back the next publish goes through on the same client.

mod admin;
/// `pub(crate)` so that `crate::config` can list `[nats]`'s keys (`config::Raw`).
pub(crate) mod config;
mod message;
mod read;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::context::GetStreamByNameErrorKind;
use async_nats::{jetstream, ConnectErrorKind, ConnectOptions, Event};

use crate::error::Error;
use crate::router::Record;
use crate::sink::{Publish, Published};

pub use admin::{check, setup};
pub use config::{parse, shown_url, Login, NatsConfig};
pub use message::KEY_HEADER;
pub use read::{read_back, Reader, Start, Stored, StreamState};

use message::{retry, Answer};

/// A JetStream publisher on one connection (NATS multiplexes every request on it).
pub struct Nats {
    jetstream: jetstream::Context,
    timeout: Duration,
    /// The server's URL without its password, for messages.
    url: String,
}

/// Connects to the server of `[nats]`. Unreachable: transient (the relay tries again); a
/// refused login or a bad credentials file: definite.
pub async fn connect(config: &NatsConfig) -> Result<Nats, Error> {
    let client = client(config).await?;
    Ok(Nats {
        jetstream: context(client, config.timeout),
        timeout: config.timeout,
        url: shown_url(&config.url),
    })
}

impl Nats {
    async fn publish_one(&self, record: &Record) -> Published {
        let subject = match message::subject(&record.topic) {
            Ok(subject) => subject,
            Err(reason) => return Published::Refused(reason),
        };
        let headers = match message::headers(record) {
            Ok(headers) => headers,
            Err(reason) => return Published::Refused(reason),
        };
        let payload = record.value.clone().unwrap_or_default();
        let attempt = async {
            let acked = match self
                .jetstream
                .publish_with_headers(subject.to_string(), headers, payload)
                .await
            {
                Ok(ack) => ack.await,
                Err(e) => Err(e),
            };
            match message::answer(subject, record, acked) {
                Answer::Done(published) => published,
                Answer::NoResponders => self.why_no_responders(subject).await,
            }
        };
        // The client's own timeouts are the same; this one bounds the whole attempt.
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(published) => published,
            Err(_) => retry(format!(
                "no PubAck for {subject} from {} within {}",
                self.url,
                crate::duration::format(self.timeout)
            )),
        }
    }

    /// "No responders" means no stream captures the subject, which retrying cannot fix, or
    /// that JetStream is not answering yet (a server just started recovers its streams before
    /// they answer), which it can: JetStream's own stream list tells which.
    async fn why_no_responders(&self, subject: &str) -> Published {
        match self.jetstream.stream_by_subject(subject).await {
            Err(e) if matches!(e.kind(), GetStreamByNameErrorKind::NotFound) => {
                message::no_stream(subject)
            }
            Ok(stream) => retry(format!(
                "stream {stream} captures {subject} but did not answer the publish \
                 (JetStream is starting, or the stream has no leader)"
            )),
            Err(e) => retry(format!(
                "no one answered the publish to {subject} and JetStream did not say which stream \
                 captures it ({}); is JetStream enabled on {} (nats-server -js)?",
                crate::error::chain(&e),
                self.url
            )),
        }
    }
}

impl Publish for Nats {
    fn name(&self) -> &'static str {
        "nats"
    }

    /// JetStream is built for many publishes awaiting their PubAck at once (the client pipelines
    /// them on one connection); a PubAck takes a round trip through the stream's storage, so
    /// 64 at once leave the server idle between them.
    fn max_calls(&self) -> usize {
        256
    }

    async fn publish(&self, records: &[Arc<Record>]) -> Vec<Published> {
        let mut answers = Vec::with_capacity(records.len());
        for record in records {
            answers.push(self.publish_one(record).await);
        }
        answers
    }
}

/// A JetStream context whose requests (PubAcks included) wait `timeout`.
fn context(client: async_nats::Client, timeout: Duration) -> jetstream::Context {
    let mut context = jetstream::new(client);
    context.set_timeout(timeout);
    context
}

/// A connected client that reconnects for ever, logging when the connection drops and returns.
async fn client(config: &NatsConfig) -> Result<async_nats::Client, Error> {
    let url = shown_url(&config.url);
    let logged_url = url.clone();
    let mut options = ConnectOptions::new()
        .name("walrelay")
        .connection_timeout(config.timeout)
        .request_timeout(Some(config.timeout))
        .max_reconnects(None)
        .event_callback(move |event| {
            let url = logged_url.clone();
            async move {
                match event {
                    Event::Connected => tracing::info!(%url, "NATS connection up"),
                    Event::Disconnected => {
                        tracing::warn!(%url, "NATS connection lost; reconnecting")
                    }
                    other => tracing::debug!(%url, event = %other, "NATS client event"),
                }
            }
        });
    options = match &config.login {
        // async-nats reads only host and port from the URL: its login is ours to pass on.
        Login::Url => match url_login(&config.url) {
            Some((user, Some(password))) => options.user_and_password(user, password),
            // `nats://token@host`, as the NATS tools read it.
            Some((token, None)) => options.token(token),
            None => options,
        },
        Login::UserPassword { user, password } => {
            options.user_and_password(user.clone(), password.clone())
        }
        Login::Token(token) => options.token(token.clone()),
        Login::CredentialsFile(path) => options.credentials_file(path).await.map_err(|e| {
            Error::definite_with(
                format!("[nats] credentials_file {} cannot be read", path.display()),
                "give the path of a .creds file as `nsc generate creds` writes it",
                e,
            )
        })?,
    };
    options.connect(config.url.as_str()).await.map_err(|e| match e.kind() {
        ConnectErrorKind::Authentication | ConnectErrorKind::AuthorizationViolation => {
            Error::definite_with(
                format!("the NATS server at {url} refused walrelay's login"),
                refused_login_hint(&config.login),
                e,
            )
        }
        ConnectErrorKind::ServerParse | ConnectErrorKind::Tls => Error::definite_with(
            format!("cannot connect to the NATS server at {url}"),
            "check [nats] url (nats://host:port) and the server's TLS settings",
            e,
        ),
        _ => Error::transient(format!("the NATS server at {url} is unreachable"), e),
    })
}

/// What to look at when the server refuses the login. The server tells the client only
/// "authorization violation"; with a `.creds` file it means one of three things (its log, at
/// `debug`, says which: "account missing", "claim is expired", "Signature not verified").
fn refused_login_hint(login: &Login) -> String {
    match login {
        Login::CredentialsFile(path) => format!(
            "check [nats] credentials_file {}: the server must know the account that signed its \
             user JWT (resolver_preload, or `nsc push` to the account resolver), the JWT must not \
             be expired or revoked, and its seed must be that user's (`nsc generate creds` \
             writes both)",
            path.display()
        ),
        _ => "check [nats] user/password, token or credentials_file \
              (WALRELAY_NATS_PASSWORD, WALRELAY_NATS_TOKEN), or the URL's user:password@"
            .to_string(),
    }
}

/// The user and password (or the token) a `nats://user:password@host` URL carries, decoded.
fn url_login(url: &str) -> Option<(String, Option<String>)> {
    let addr = async_nats::ServerAddr::from_str(url).ok()?;
    let user = addr.username()?;
    Some((percent_decoded(user), addr.password().map(percent_decoded)))
}

/// `%40` → `@`, as a URL's user info is written; a malformed escape stays as it is.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_urls_login_is_read_and_decoded() {
        let login = url_login("nats://relay:p%40ss%2Fword@127.0.0.1:4222");
        assert_eq!(login, Some(("relay".into(), Some("p@ss/word".into()))));
        assert_eq!(url_login("nats://s3cr3t-token@h:4222"), Some(("s3cr3t-token".into(), None)));
        assert_eq!(url_login("nats://h:4222"), None);
        assert_eq!(percent_decoded("100%"), "100%");
    }
}
