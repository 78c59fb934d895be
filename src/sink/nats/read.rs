//! What a JetStream stream holds, read without consuming it: `walrelay audit`'s read-back, and
//! the tests'. An ordered consumer (ephemeral, unacknowledged, no durable state) walks one
//! subject's messages in stream order and hands each to the caller as it comes, so a read holds
//! one message whatever the stream's size, and leaves the stream as it was.

use std::time::Duration;

use async_nats::jetstream::consumer::pull::OrderedConfig;
use async_nats::jetstream::consumer::DeliverPolicy;
use async_nats::jetstream::context::GetStreamByNameErrorKind;
use async_nats::jetstream::Context;
use bytes::Bytes;
use futures_util::StreamExt;

use super::admin::unavailable;
use super::{client, context, NatsConfig};
use crate::error::Error;

/// One message as its stream holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The stream sequence.
    pub sequence: u64,
    pub subject: String,
    /// `Nats-Msg-Id`: the event id.
    pub msg_id: Option<String>,
    /// Every header (`Nats-Msg-Id` included) as (name, value text), sorted by name (values of
    /// one name in their order): async-nats holds headers in a hash map, so neither the
    /// publisher nor the reader keeps the order they were written in.
    pub headers: Vec<(String, String)>,
    pub payload: Bytes,
    /// When the stream stored it (Unix ms).
    pub stored_ms: i64,
}

/// Where a read starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// At this stream sequence (1: the first).
    Sequence(u64),
    /// At the first message stored at or after this time (Unix ms).
    Time(i64),
}

/// What the stream that captures a subject holds, has removed, and keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamState {
    pub name: String,
    /// The lowest sequence still held: every message before it was removed (by the stream's
    /// limits, a purge, or a delete of the first ones).
    pub first_sequence: u64,
    /// When the first message still held was stored (Unix ms); `None` when it holds none.
    pub first_ms: Option<i64>,
    pub last_sequence: u64,
    pub messages: u64,
    /// Messages removed between the first and the last sequence (a delete request, or
    /// `max_msgs_per_subject`).
    pub deleted: u64,
    /// `max_age`; zero: messages are kept whatever their age.
    pub max_age: Duration,
    /// `max_bytes`, `max_msgs`, `max_msgs_per_subject`; -1: no limit.
    pub max_bytes: i64,
    pub max_messages: i64,
    pub max_messages_per_subject: i64,
    pub duplicate_window: Duration,
}

/// A connection that reads streams back.
pub struct Reader {
    js: Context,
    config: NatsConfig,
}

impl Reader {
    pub async fn connect(config: &NatsConfig) -> Result<Reader, Error> {
        let js = context(client(config).await?, config.timeout);
        Ok(Reader { js, config: config.clone() })
    }

    /// The stream that captures `subject`, as it is now.
    pub async fn stream_of(&self, subject: &str) -> Result<StreamState, Error> {
        let config = &self.config;
        let name = self.js.stream_by_subject(subject).await.map_err(|e| match e.kind() {
            GetStreamByNameErrorKind::NotFound => Error::definite(
                format!("no JetStream stream captures {subject}"),
                "run `walrelay setup`, or check [nats] stream_subjects",
            ),
            _ => unavailable(config, &format!("finding the stream of {subject}"), e),
        })?;
        let stream = self
            .js
            .get_stream(&name)
            .await
            .map_err(|e| unavailable(config, &format!("opening stream {name}"), e))?;
        let info = stream
            .get_info()
            .await
            .map_err(|e| unavailable(config, &format!("reading stream {name}'s state"), e))?;
        let (state, limits) = (&info.state, &info.config);
        Ok(StreamState {
            name,
            first_sequence: state.first_sequence,
            first_ms: (state.messages > 0).then(|| unix_ms(state.first_timestamp)),
            last_sequence: state.last_sequence,
            messages: state.messages,
            deleted: state.deleted_count.unwrap_or(0),
            max_age: limits.max_age,
            max_bytes: limits.max_bytes,
            max_messages: limits.max_messages,
            max_messages_per_subject: limits.max_messages_per_subject,
            duplicate_window: limits.duplicate_window,
        })
    }

    /// Hands `visit` the messages of `subject` in `stream`, in stream order, from `start` to
    /// the last one stored when the read began (or the first past `until`), until it answers
    /// `false`. A read that brings nothing for `[nats] timeout` while messages are left fails.
    pub async fn read(
        &self,
        stream: &str,
        subject: &str,
        start: Start,
        until: u64,
        visit: &mut (dyn FnMut(Stored) -> Result<bool, Error> + Send),
    ) -> Result<(), Error> {
        let config = &self.config;
        let reading = || format!("reading {subject} of stream {stream}");
        let handle = self
            .js
            .get_stream(stream)
            .await
            .map_err(|e| unavailable(config, &format!("opening stream {stream}"), e))?;
        let deliver_policy = match start {
            Start::Sequence(from) if from <= 1 => DeliverPolicy::All,
            Start::Sequence(start_sequence) => DeliverPolicy::ByStartSequence { start_sequence },
            Start::Time(ms) => match async_nats::datetime::from_nanos(i128::from(ms) * 1_000_000) {
                Ok(start_time) if ms > 0 => DeliverPolicy::ByStartTime { start_time },
                _ => DeliverPolicy::All,
            },
        };
        let consumer = handle
            .create_consumer(OrderedConfig {
                filter_subject: subject.to_string(),
                deliver_policy,
                ..Default::default()
            })
            .await
            .map_err(|e| unavailable(config, &reading(), e))?;
        let pending = consumer.cached_info().num_pending;
        if pending == 0 {
            return Ok(());
        }
        let mut messages =
            consumer.messages().await.map_err(|e| unavailable(config, &reading(), e))?;
        let mut read = 0u64;
        loop {
            let message = match tokio::time::timeout(config.timeout, messages.next()).await {
                Ok(Some(Ok(message))) => message,
                Ok(Some(Err(e))) => return Err(unavailable(config, &reading(), e)),
                Ok(None) => return Ok(()),
                Err(_) => {
                    return Err(Error::transient_msg(format!(
                        "stream {stream} stopped delivering {subject}: {read} of {pending} read \
                         in {}",
                        crate::duration::format(config.timeout)
                    )))
                }
            };
            let info = message.info().map_err(|e| {
                Error::transient_msg(format!("a message of {stream} without its metadata: {e}"))
            })?;
            let (sequence, left) = (info.stream_sequence, info.pending);
            let stored_ms = unix_ms(info.published);
            read += 1;
            let more = visit(stored(sequence, stored_ms, &message.message))?;
            if !more || left == 0 || sequence >= until {
                // The ephemeral consumer goes away by itself once idle.
                return Ok(());
            }
        }
    }
}

/// Up to `limit` messages of `subject`, from stream sequence `from` (1: the first).
pub async fn read_back(
    config: &NatsConfig,
    subject: &str,
    from: u64,
    limit: usize,
) -> Result<Vec<Stored>, Error> {
    let mut out = Vec::new();
    if limit == 0 {
        return Ok(out);
    }
    let reader = Reader::connect(config).await?;
    let stream = reader.stream_of(subject).await?;
    let mut keep = |m: Stored| {
        out.push(m);
        Ok(out.len() < limit)
    };
    reader.read(&stream.name, subject, Start::Sequence(from), u64::MAX, &mut keep).await?;
    Ok(out)
}

fn unix_ms(t: async_nats::datetime::DateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

fn stored(sequence: u64, stored_ms: i64, message: &async_nats::Message) -> Stored {
    let mut headers: Vec<(String, String)> = message
        .headers
        .iter()
        .flat_map(|map| map.iter())
        .flat_map(|(name, values)| {
            values.iter().map(move |v| (name.to_string(), v.as_str().to_string()))
        })
        .collect();
    headers.sort_by(|a, b| a.0.cmp(&b.0));
    let msg_id =
        headers.iter().find(|(n, _)| n.eq_ignore_ascii_case("Nats-Msg-Id")).map(|(_, v)| v.clone());
    Stored {
        sequence,
        subject: message.subject.to_string(),
        msg_id,
        headers,
        payload: message.payload.clone(),
        stored_ms,
    }
}
