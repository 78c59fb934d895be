//! What `walrelay setup` and `walrelay check` ask of JetStream: the stream that captures the
//! routed subjects, and whether the server answers. What a stream holds is `read.rs`'s.

use async_nats::jetstream::context::{AccountErrorKind, CreateStreamErrorKind, GetStreamErrorKind};
use async_nats::jetstream::stream::{Config, StorageType};
use async_nats::jetstream::ErrorCode;

use super::{client, context, message, shown_url, NatsConfig};
use crate::error::Error;

/// Creates the `[nats] stream` (file storage) capturing `stream_subjects`, or the `routed`
/// subjects when none are set, with the configured `duplicate_window`; or, when it exists,
/// adds the subjects it lacks and sets its window. One line per stream.
pub async fn setup(config: &NatsConfig, routed: &[String]) -> Result<Vec<String>, Error> {
    let subjects = wanted_subjects(config, routed)?;
    let js = context(client(config).await?, config.timeout);
    let name = &config.stream;
    let window = crate::duration::format(config.duplicate_window);
    let existing = match js.get_stream(name).await {
        Ok(mut stream) => Some(
            stream
                .info()
                .await
                .map_err(|e| Error::transient(format!("reading stream {name}'s configuration"), e))?
                .config
                .clone(),
        ),
        Err(e) => match e.kind() {
            GetStreamErrorKind::JetStream(js_err)
                if js_err.error_code() == ErrorCode::STREAM_NOT_FOUND =>
            {
                None
            }
            _ => return Err(unavailable(config, &format!("looking up stream {name}"), e)),
        },
    };
    let line = match existing {
        None => {
            let stream = Config {
                name: name.clone(),
                subjects: subjects.clone(),
                storage: StorageType::File,
                duplicate_window: config.duplicate_window,
                ..Default::default()
            };
            js.create_stream(stream).await.map_err(|e| refused(config, name, e))?;
            format!(
                "stream {name}: created (file storage), subjects {}, duplicate window {window}",
                subjects.join(", ")
            )
        }
        Some(mut stream) => {
            // A subject the stream captures already, by a wildcard too, is not added again:
            // JetStream refuses a stream whose subjects overlap.
            let missing: Vec<String> = subjects
                .iter()
                .filter(|s| !stream.subjects.iter().any(|p| covers(p, s)))
                .cloned()
                .collect();
            let window_differs = stream.duplicate_window != config.duplicate_window;
            if missing.is_empty() && !window_differs {
                format!(
                    "stream {name}: found, subjects {}, duplicate window {window}",
                    stream.subjects.join(", ")
                )
            } else {
                // An added wildcard takes the place of the subjects it covers: JetStream refuses
                // subjects that overlap within one stream too.
                let (replaced, kept): (Vec<String>, Vec<String>) =
                    std::mem::take(&mut stream.subjects)
                        .into_iter()
                        .partition(|s| missing.iter().any(|m| covers(m, s)));
                stream.subjects = kept.into_iter().chain(missing.iter().cloned()).collect();
                stream.duplicate_window = config.duplicate_window;
                js.update_stream(stream.clone()).await.map_err(|e| refused(config, name, e))?;
                let list =
                    |l: &[String]| if l.is_empty() { "none".to_string() } else { l.join(", ") };
                format!(
                    "stream {name}: updated, subjects {} (added: {}; replaced: {}), duplicate window {window}",
                    stream.subjects.join(", "),
                    list(&missing),
                    list(&replaced)
                )
            }
        }
    };
    Ok(vec![line])
}

/// Whether the stream subject `pattern` captures every subject `subject` stands for: `*`
/// matches one token (or a `*`), `>` one or more (or a `>`).
fn covers(pattern: &str, subject: &str) -> bool {
    let mut wanted = subject.split('.');
    for p in pattern.split('.') {
        match (p, wanted.next()) {
            (">", Some(_)) => return true,
            (_, None) => return false,
            ("*", Some(w)) if w != ">" => {}
            (p, Some(w)) if p == w => {}
            _ => return false,
        }
    }
    wanted.next().is_none()
}

/// `stream_subjects`, or else the routed names (each one a subject to publish to).
fn wanted_subjects(config: &NatsConfig, routed: &[String]) -> Result<Vec<String>, Error> {
    if !config.stream_subjects.is_empty() {
        return Ok(config.stream_subjects.clone());
    }
    let mut subjects: Vec<String> = Vec::new();
    for name in routed {
        let subject = message::subject(name)
            .map_err(|reason| Error::definite(reason, "or set [nats] stream_subjects"))?;
        if !subjects.iter().any(|s| s == subject) {
            subjects.push(subject.to_string());
        }
    }
    if subjects.is_empty() {
        return Err(Error::definite(
            format!("no subjects for the [nats] stream {}", config.stream),
            "set [nats] stream_subjects (e.g. \"outbox.event.>\"), or route to fixed names",
        ));
    }
    Ok(subjects)
}

/// One line for `walrelay check`: the server answers, the login works, JetStream is there.
pub async fn check(config: &NatsConfig) -> Result<String, Error> {
    let client = client(config).await?;
    let server = client.server_info();
    let js = context(client, config.timeout);
    let account = js.query_account().await.map_err(|e| match e.kind() {
        AccountErrorKind::TimedOut => Error::transient(
            format!("JetStream at {} did not answer within the timeout", shown_url(&config.url)),
            e,
        ),
        _ => no_jetstream(config, e),
    })?;
    Ok(format!(
        "NATS {} at {} answers; JetStream: {} streams, {} bytes stored, max_payload {} bytes",
        server.version,
        shown_url(&config.url),
        account.streams,
        account.storage,
        server.max_payload
    ))
}

/// JetStream could not be asked: the server is away (transient), or answers without JetStream.
pub(super) fn unavailable(
    config: &NatsConfig,
    what: &str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> Error {
    Error::transient(
        format!("{what} at {}: {}", shown_url(&config.url), crate::error::chain(&e)),
        e,
    )
}

fn no_jetstream(config: &NatsConfig, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::definite_with(
        format!("JetStream does not answer at {}: {}", shown_url(&config.url), crate::error::chain(&e)),
        "enable JetStream on the server (nats-server -js, or a jetstream {} block) for walrelay's account",
        e,
    )
}

/// Creating or updating the stream failed: JetStream's refusal (subjects that overlap another
/// stream's, a window longer than max_age) is definite; no answer is transient.
fn refused(
    config: &NatsConfig,
    name: &str,
    e: async_nats::error::Error<CreateStreamErrorKind>,
) -> Error {
    match e.kind() {
        CreateStreamErrorKind::JetStream(js_err) => {
            let hint = if js_err.error_code() == ErrorCode::STREAM_SUBJECT_OVERLAP {
                "another stream captures some of these subjects: set [nats] stream to that \
                 stream's name, or stream_subjects to subjects no other stream holds"
            } else {
                "fix the stream's settings in [nats] (stream, stream_subjects, duplicate_window)"
            };
            Error::definite_with(format!("JetStream refused stream {name}: {js_err}"), hint, e)
        }
        CreateStreamErrorKind::JetStreamUnavailable => no_jetstream(config, e),
        _ => unavailable(config, &format!("creating stream {name}"), e),
    }
}

#[cfg(test)]
mod tests {
    use super::covers;

    #[test]
    fn a_wildcard_covers_what_it_captures() {
        assert!(covers("outbox.>", "outbox.event.order"));
        assert!(covers("outbox.>", "outbox.event.>"));
        assert!(covers("outbox.*.order", "outbox.event.order"));
        assert!(covers("outbox.*", "outbox.*"));
        assert!(covers("a.b", "a.b"));
        assert!(!covers("outbox.>", "outbox"));
        assert!(!covers("outbox.*", "outbox.a.b"));
        assert!(!covers("outbox.*", "outbox.>"));
        assert!(!covers("a.b", "a.b.c"));
        assert!(!covers("a.b.c", "a.b"));
    }
}
