//! What the audited subjects hold in their JetStream streams: every message stored from a time
//! to the last one each stream had when the audit began, read with an ordered consumer (no
//! durable consumer, nothing acknowledged: the stream is unchanged), each message's event id
//! (its `Nats-Msg-Id`, which the NATS sink always sets) and place handed to a [`Sorter`]
//! instead of held.
//!
//! A stream has no partitions: every message of a subject is in partition 0 of the audit's
//! view, its stream sequence the offset, so per-key order is the stream's order and nothing
//! is misplaced. What a stream removed is told from its state: messages before its first
//! sequence are gone (`max_age`, `max_msgs`, `max_bytes`, a purge), and an event that
//! committed before the first message left may have been among them. With
//! `max_msgs_per_subject`, so may one that committed before its subject's first message left.

use std::collections::HashMap;
use std::sync::Arc;

use super::readback::{Held, ReadFrom, Shape, TopicConfig, Trimmed, FOREIGN_KEPT};
use super::spill::Sorter;
use crate::error::{Error, Result};
use crate::replay::REPLAY_HEADER;
use crate::sink::nats::{NatsConfig, Reader, Start, StreamState};

/// Reads `topics` (subjects) from the first message stored at or after `from_ms` (Unix ms) to
/// the last one their stream held when the audit began, into `copies`.
pub(crate) async fn read(
    config: &NatsConfig,
    topics: &[Arc<str>],
    from_ms: i64,
    mut copies: Sorter<Held>,
) -> Result<(Shape, Sorter<Held>)> {
    let reader = Reader::connect(config).await?;
    let mut shape = Shape {
        read_from: ReadFrom::JetStream,
        event_id_in: "header Nats-Msg-Id".into(),
        ..Shape::default()
    };
    // Each stream's state once, however many subjects it captures.
    let mut streams: HashMap<String, StreamState> = HashMap::new();
    for (index, subject) in topics.iter().enumerate() {
        let index = index as u32;
        let stream = reader.stream_of(subject).await?;
        shape.partitions.push(1);
        shape.foreign_counts.push(0);
        shape.configs.push(limits(&stream));
        // Messages before the first sequence are gone: the events that committed before the
        // first one left may have been among them. `max_msgs_per_subject` also removes a
        // subject's oldest messages from the middle of a stream that captures other subjects
        // too: then the subject's own first message left says from when its events may be gone.
        let per_subject = stream.max_messages_per_subject > 0
            && (stream.deleted > 0 || stream.first_sequence > 1);
        let trimmed = if per_subject {
            Some(subject_trimmed(&reader, &stream, subject).await?)
        } else {
            (stream.first_sequence > 1).then(|| Trimmed {
                log_start: stream.first_sequence as i64,
                first_left_ms: stream.first_ms.unwrap_or(i64::MAX),
                of_subject: false,
            })
        };
        if let Some(trimmed) = trimmed {
            shape.trimmed.insert((index, 0), trimmed);
        }
        let mut visit = |m: crate::sink::nats::Stored| {
            shape.records += 1;
            let replayed = m.headers.iter().any(|(name, _)| name == REPLAY_HEADER);
            let Some(id) = m.msg_id else {
                shape.foreign_counts[index as usize] += 1;
                if shape.foreign.len() < FOREIGN_KEPT {
                    shape.foreign.push((index, 0, m.sequence as i64));
                }
                return Ok(true);
            };
            let copy = Held {
                id,
                topic: index,
                partition: 0,
                offset: m.sequence as i64,
                replayed,
                timestamp_ms: m.stored_ms,
            };
            copies.push(copy).map_err(super::spill::failed)?;
            Ok::<_, Error>(true)
        };
        let (name, until) = (stream.name.clone(), stream.last_sequence);
        reader.read(&name, subject, Start::Time(from_ms), until, &mut visit).await?;
        streams.entry(name).or_insert(stream);
    }
    for stream in streams.values().filter(|s| s.deleted > 0) {
        shape.notes.push(format!(
            "stream {} has {} message(s) deleted between its first and last sequence (a delete \
             request, or max_msgs_per_subject): an event missing from it may have been one of \
             them",
            stream.name, stream.deleted
        ));
    }
    Ok((shape, copies))
}

/// Where `subject`'s messages left in `stream` begin: its first message's sequence and store
/// time (none left: past the last sequence, and `i64::MAX`).
async fn subject_trimmed(reader: &Reader, stream: &StreamState, subject: &str) -> Result<Trimmed> {
    let mut first = None;
    let mut take_first = |m: crate::sink::nats::Stored| {
        first = Some((m.sequence as i64, m.stored_ms));
        Ok(false)
    };
    let until = stream.last_sequence;
    reader.read(&stream.name, subject, Start::Sequence(1), until, &mut take_first).await?;
    let (log_start, first_left_ms) = first.unwrap_or((stream.last_sequence as i64 + 1, i64::MAX));
    Ok(Trimmed { log_start, first_left_ms, of_subject: true })
}

/// What the stream's limits say about messages that are gone, as a topic's configuration.
fn limits(stream: &StreamState) -> TopicConfig {
    let age = match stream.max_age.as_millis() {
        0 => -1,
        ms => ms as i64,
    };
    let mut count_limits = Vec::new();
    if stream.max_messages > 0 {
        count_limits.push(format!("max_msgs={}", stream.max_messages));
    }
    if stream.max_messages_per_subject > 0 {
        count_limits.push(format!("max_msgs_per_subject={}", stream.max_messages_per_subject));
    }
    TopicConfig {
        retention_ms: Some(age),
        retention_bytes: Some(if stream.max_bytes > 0 { stream.max_bytes } else { -1 }),
        count_limits,
        compacted: false,
    }
}
