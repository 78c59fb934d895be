//! One event looked up, with the audit's machinery: its outbox row (read by id in a
//! [`crate::snapshot`]), where the live configuration's router and envelope put it, and where
//! the sink has it. Kafka: read from the offset for its commit time, less a margin, to the
//! partition's end, in the partition its key (or its placement) gives, or in each partition
//! when it has neither. JetStream: its subject, from the message stored at that time to the
//! stream's last. The other sinks' messages cannot be read without consuming them: not
//! searched, and said so.
//! For the console's event lookup, which answers what it knows in every case: an id that cannot
//! be an event id of these tables, an event no table holds, a row the router refuses (which the
//! live relay dead-lettered), a routed event found in Kafka or not.

use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use super::id::IdPlace;
use super::ReadFrom;
use crate::config::Config;
use crate::delivery::partition_read::{self, Stop};
use crate::delivery::partitioner::key_partition;
use crate::encoder::Encoder;
use crate::error::{Error, Result};
use crate::registry::FrameError;
use crate::router::{Record, FRAME_RESERVED};
use crate::sink::nats::{NatsConfig, Reader, Start, Stored};
use crate::sink::SinkConfig;
use crate::snapshot::{Options, Selection, Snapshot};
use crate::source::{self, catalog};

/// How far before the row's commit time the read starts: the record's timestamp is when the
/// relay sent it, after the commit, but clocks of two hosts differ.
const MARGIN_MS: i64 = 60_000;

/// PostgreSQL's `uuid` type.
const UUID_OID: u32 = 2950;

/// What a lookup answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Its row, routed as the live relay routes it, and where Kafka has it (or not).
    Routed(Lookup),
    /// Its row, which the router refuses, and why: the live relay dead-lettered it (or, without
    /// `[dead_letter]`, stopped at it), so no routed topic holds it.
    Unroutable { id: String, table: String, reason: String },
    /// No outbox table's retained rows hold it.
    Absent,
    /// It cannot be an event id of these tables: why, and the fix.
    NotAnId(String),
}

/// What a lookup found of a routed event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    pub id: String,
    /// `schema.table` of its row.
    pub table: String,
    /// When the row committed (µs since the Unix epoch): the commit timestamp when `exact`,
    /// else the row's timestamp column.
    pub commit_micros: i64,
    pub exact: bool,
    pub topic: String,
    pub key: Option<String>,
    /// The partition its key (or placement) gives; `None` without either.
    pub partition: Option<i32>,
    /// Where the sink has it, when it does.
    pub found: Option<Found>,
    /// What was read, in words.
    pub searched: String,
    /// What was read: Kafka or JetStream; `None`: nothing, the sink's messages cannot be read
    /// back (`searched` says why), so whether it is there is not known.
    pub read_from: Option<ReadFrom>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: Option<i64>,
}

/// Looks `id` up. Gives up after `within`.
pub async fn lookup(config: &Config, id: &str, within: Duration) -> Result<Outcome> {
    let started = Instant::now();
    if uuid::Uuid::parse_str(id).is_err() {
        if let Some(table) = uuid_id_table(config).await? {
            return Ok(Outcome::NotAnId(format!(
                "{id:?} is not a UUID, which event ids of {table} are: give the id as the record's `id` header shows it, e.g. 0190a3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
            )));
        }
    }
    let opts = Options {
        selection: Selection { ids: vec![id.to_string()], ..Selection::default() },
        allow_empty: true,
        places_only: true,
        ..Options::default()
    };
    let mut snapshot = Snapshot::open(config, &opts).await?;
    let tables = snapshot.indexes();
    let mut encoder = Encoder::for_reading(config);
    let mut row = None;
    while let Some(rows) = snapshot.next_rows().await? {
        let table = rows.table;
        if let Some(first) = rows.routed(&mut encoder, snapshot.binding(table)).into_iter().next() {
            row = Some((tables[table].0.clone(), first));
            break;
        }
    }
    snapshot.close().await;
    let Some((table, routed)) = row else { return Ok(Outcome::Absent) };
    let (mut record, commit) = match routed {
        Ok(routed) => routed,
        Err(refused) => {
            return Ok(Outcome::Unroutable { id: id.to_string(), table, reason: refused.reason })
        }
    };
    let Some(place) = IdPlace::of(&record) else {
        return Err(Error::definite(
            format!("event {id}'s record carries its id in no place the lookup reads"),
            "every walrelay envelope keeps it in a header, a JSON \"id\" or protobuf field 1",
        ));
    };
    // Shown as the row holds it; searched for framed as the relay framed it (with
    // a registry key converter), whose bytes give the partition.
    let shown_key = shown_key(&record);
    if let Err(e) = encoder.frame_key(&mut record).await {
        match e {
            // No record under this key schema was written to the topic: any partition.
            FrameError::Refused(_) => record.key = None,
            e => {
                return Err(Error::definite(
                    format!("the lookup cannot frame event {id}'s key: {e}"),
                    "the keys are registry-framed (key.converter = avro or protobuf): make the registry reachable with [schema_registry]'s credentials",
                ))
            }
        }
    }
    let mut lookup = Lookup {
        id: id.to_string(),
        table,
        commit_micros: commit.micros,
        exact: commit.exact,
        topic: record.topic.to_string(),
        key: shown_key,
        partition: record.partition,
        found: None,
        searched: String::new(),
        read_from: None,
    };
    let left = within.saturating_sub(started.elapsed());
    match &config.delivery.sink {
        SinkConfig::Kafka => {}
        SinkConfig::Nats(nats) => {
            lookup.read_from = Some(ReadFrom::JetStream);
            tokio::time::timeout(left, search_stream(nats, &mut lookup, &record.event_id))
                .await
                .map_err(|_| {
                Error::transient_msg(format!(
                    "the lookup read {} for {} s without reaching the stream's end",
                    lookup.topic,
                    within.as_secs()
                ))
            })??;
            return Ok(Outcome::Routed(lookup));
        }
        sink => {
            lookup.searched = format!(
                "nothing: the {} sink's messages cannot be read back without consuming them",
                sink.name()
            );
            return Ok(Outcome::Routed(lookup));
        }
    }
    lookup.read_from = Some(ReadFrom::Kafka);
    let (config, key) = (config.clone(), record.key.clone());
    tokio::task::spawn_blocking(move || {
        search(&config, &mut lookup, key.as_deref(), &place, left)?;
        Ok(Outcome::Routed(lookup))
    })
    .await
    .map_err(|e| Error::transient("the lookup's Kafka reader stopped", e))?
}

/// Reads the event's subject from the message stored at its commit time, less the margin, to
/// the stream's last, until a message's `Nats-Msg-Id` is `event_id`.
async fn search_stream(nats: &NatsConfig, lookup: &mut Lookup, event_id: &str) -> Result<()> {
    let reader = Reader::connect(nats).await?;
    let subject = lookup.topic.clone();
    let stream = reader.stream_of(&subject).await?;
    let from_ms = (lookup.commit_micros / 1000 - MARGIN_MS).max(0);
    let mut found = None;
    let mut visit = |m: Stored| {
        if m.msg_id.as_deref() == Some(event_id) {
            found = Some(Found {
                partition: 0,
                offset: m.sequence as i64,
                timestamp_ms: Some(m.stored_ms),
            });
        }
        Ok(found.is_none())
    };
    reader
        .read(&stream.name, &subject, Start::Time(from_ms), stream.last_sequence, &mut visit)
        .await?;
    lookup.partition = None;
    lookup.found = found;
    lookup.searched = format!(
        "subject {subject} of stream {} from the message stored a minute before the event's commit to sequence {}",
        stream.name, stream.last_sequence
    );
    Ok(())
}

/// An outbox table whose event id column is a `uuid`, which no other text can match: the
/// snapshot read refuses a selection holding such text for it.
async fn uuid_id_table(config: &Config) -> Result<Option<String>> {
    let control = source::connect(&config.source).await?;
    let tables = catalog::outbox_tables(&control, &config.outbox).await?;
    let id = &config.router.field_event_id;
    Ok(tables
        .iter()
        .find(|t| t.columns.iter().any(|c| &c.name == id && c.type_oid == UUID_OID))
        .map(|t| t.name.to_string()))
}

/// Reads the partitions the event may be in until it is found, filling `found` and `searched`.
fn search(
    config: &Config,
    lookup: &mut Lookup,
    key: Option<&[u8]>,
    place: &IdPlace,
    within: Duration,
) -> Result<()> {
    let started = Instant::now();
    let consumer = super::kafka::reader(config, config.delivery.exactly_once())?;
    let client = consumer.client();
    let topic = lookup.topic.clone();
    let metadata = client
        .fetch_metadata(Some(&topic), within)
        .map_err(|e| Error::transient(format!("no metadata for topic {topic}"), e))?;
    let count = metadata.topics().first().map_or(0, |t| t.partitions().len() as i32);
    if count == 0 {
        lookup.searched = format!("topic {topic}, which Kafka does not have");
        return Ok(());
    }
    let partitions: Vec<i32> = match (lookup.partition, key) {
        (Some(p), _) => vec![p],
        (None, Some(key)) => vec![key_partition(key, count)],
        (None, None) => (0..count).collect(),
    };
    if lookup.partition.is_none() && key.is_some() {
        lookup.partition = partitions.first().copied();
    }
    let mut by_time = TopicPartitionList::new();
    for &p in &partitions {
        let from_ms = (lookup.commit_micros / 1000 - MARGIN_MS).max(0);
        by_time
            .add_partition_offset(&topic, p, Offset::Offset(from_ms))
            .map_err(|e| Error::transient("the lookup's partition list", e))?;
    }
    let starts = consumer
        .offsets_for_times(by_time, within)
        .map_err(|e| Error::transient("Kafka did not say where the event's time starts", e))?;
    let mut searched = Vec::new();
    for e in starts.elements() {
        let p = e.partition();
        let (_, end) = client
            .fetch_watermarks(&topic, p, within)
            .map_err(|e| Error::transient(format!("no watermarks for {topic} [{p}]"), e))?;
        let Offset::Offset(from) = e.offset() else {
            searched.push(format!("partition {p} (no record since the event's commit)"));
            continue;
        };
        searched.push(format!("partition {p} of {topic} from offset {from} to {end}"));
        let mut found = None;
        let mut wait = |_: Duration| match started.elapsed() > within {
            true => Err(Error::transient_msg(format!(
                "the lookup read {topic} [{p}] for {} s without reaching offset {end}",
                within.as_secs()
            ))),
            false => Ok(()),
        };
        let mut visit = |r: &partition_read::Raw<'_>| {
            if place.find(r.headers(), r.value).as_deref() == Some(lookup.id.as_str()) {
                found =
                    Some(Found { partition: p, offset: r.offset, timestamp_ms: r.timestamp_ms });
                // Found: the read stops here (the caller's error ends it).
                return Err(Error::transient_msg("found"));
            }
            Ok(())
        };
        match partition_read::read(client, &topic, p, from, end, &mut wait, &mut visit) {
            Ok(()) => {}
            Err(Stop::Caller(_)) if found.is_some() => {}
            Err(Stop::Caller(e)) => return Err(e),
            Err(Stop::NotAllowed) => {
                return Err(Error::definite_with(
                    format!("the lookup may not read topic {topic}"),
                    "grant the relay's principal Read on the topic (the audit needs the same ACL)",
                    KafkaError::MessageConsumption(RDKafkaErrorCode::TopicAuthorizationFailed),
                ))
            }
            Err(Stop::Failed(k)) => {
                return Err(Error::transient(
                    format!("the lookup's read of {topic} [{p}] failed"),
                    k,
                ))
            }
        }
        if found.is_some() {
            lookup.found = found;
            break;
        }
    }
    lookup.searched = searched.join("; ");
    Ok(())
}

/// The key as its row holds it: the text, also under a registry key converter with a string
/// key: Avro's string is its length then the UTF-8; Protobuf's `StringValue` is the message
/// indexes, then field 1's key (0x0a), its length and the UTF-8. Another key is said by its
/// schema.
fn shown_key(record: &Record) -> Option<String> {
    let key = record.key.as_deref()?;
    let Some(schema) = record.key_schema.as_deref() else {
        return Some(String::from_utf8_lossy(key).into_owned());
    };
    let body = key.get(FRAME_RESERVED..).unwrap_or_default();
    let text = match schema {
        "\"string\"" => varint_end(body).map(|at| &body[at..]),
        // The indexes of `StringValue` in wrappers.proto (`[7]`), then its one field.
        s if s.contains("message StringValue") => body
            .strip_prefix(&[0x02, 0x0e, 0x0a][..])
            .and_then(|rest| varint_end(rest).map(|at| &rest[at..])),
        _ => None,
    };
    Some(match text {
        Some(text) => String::from_utf8_lossy(text).into_owned(),
        None => format!("({} bytes under the key schema {schema})", body.len()),
    })
}

/// Where the varint `bytes` start with ends.
fn varint_end(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|b| b & 0x80 == 0).map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyed(key: &[u8], schema: Option<&str>) -> Record {
        Record {
            key: Some(bytes::Bytes::copy_from_slice(key)),
            key_schema: schema.map(std::sync::Arc::from),
            ..Record::bare("t", "e")
        }
    }

    #[test]
    fn a_registry_keys_text_is_shown_as_its_row_holds_it() {
        let frame = [0, 0, 0, 0, 7];
        assert_eq!(shown_key(&keyed(b"o-1", None)).as_deref(), Some("o-1"));
        let avro = [&frame[..], &[6], b"o-1"].concat();
        assert_eq!(shown_key(&keyed(&avro, Some("\"string\""))).as_deref(), Some("o-1"));
        let wrappers = "syntax = \"proto3\";\nmessage StringValue {\n  string value = 1;\n}\n";
        let proto = [&frame[..], &[0x02, 0x0e, 0x0a, 3], b"o-1"].concat();
        assert_eq!(shown_key(&keyed(&proto, Some(wrappers))).as_deref(), Some("o-1"));
        let long = shown_key(&keyed(&[&frame[..], &[2, 4]].concat(), Some("\"long\""))).unwrap();
        assert!(long.contains("2 bytes") && long.contains("\"long\""), "{long}");
    }
}
