//! Debezium's own offsets: what a Debezium PostgreSQL connector recorded as delivered, read from
//! Kafka Connect's offsets topic or from an offset file, so that walrelay taking over the
//! connector's slot can skip what Debezium already delivered (see `relay::takeover`).
//!
//! Each store holds JSON pairs (Kafka Connect's internal `JsonConverter`, schemas off):
//! key `["<connector name>",{"server":"<topic.prefix>"}]`, value the connector's offset,
//! written by `PostgresOffsetContext.getOffset()` (debezium-connector-postgres):
//!
//! | field | meaning |
//! |---|---|
//! | `lsn_commit` | end LSN of the last transaction whose COMMIT Debezium had processed when it produced the stored record: every transaction ending at or before it was delivered whole |
//! | `lsn_proc` | "last completely processed" event's LSN (for pgoutput, every event is complete: the stored record's own LSN) |
//! | `lsn` | the stored record's LSN (a row's change LSN; a commit's end LSN for a heartbeat) |
//! | `txId` | the stored record's transaction id |
//! | `messageType` | the stored record's kind: INSERT, UPDATE, DELETE, MESSAGE, BEGIN, COMMIT… |
//! | `lsn_events_processed` | (3.7+) how many events at `lsn` were processed, when several share it |
//! | `ts_usec` | the transaction's commit time |
//! | `snapshot`, `last_snapshot_record` | present while a snapshot runs |
//!
//! Debezium resumes from them the same way (`PostgresOffsetContext.Loader`, `WalPositionLocator`):
//! `lsn_commit` falls back to `lsn_proc`, the last event to `lsn`.

mod file;
mod topic;

use std::path::PathBuf;

use crate::config::{DebeziumOffsetsConfig, KafkaConfig, OffsetStore};
use crate::lsn::Lsn;

#[cfg(test)]
pub use file::parse as parse_offset_file;

/// A store's record: (key bytes, value bytes); a null is `None`.
pub type Entry = (Option<Vec<u8>>, Option<Vec<u8>>);
/// A store's records in store order.
pub type Entries = Vec<Entry>;

/// What Debezium's offsets say it delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// Every transaction that ends at or before this LSN was delivered whole (`lsn_commit`, else
    /// `lsn_proc`).
    pub commit: Lsn,
    /// The transaction of the last record Debezium delivered, if that record was a row of one
    /// whose COMMIT Debezium had not processed: its rows up to `event` were delivered.
    pub in_flight: Option<InFlight>,
    /// Commit time of the stored record's transaction (`ts_usec`), for the log.
    pub ts_usec: Option<i64>,
}

/// The transaction Debezium was inside of when it stored its offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlight {
    pub xid: u32,
    /// The last delivered event's LSN (`lsn_proc`, else `lsn`).
    pub event: Lsn,
    /// How many events at `event` were delivered, when Debezium counts them
    /// (`lsn_events_processed`, 3.7+); `None`: not recorded.
    pub events_at_lsn: Option<u64>,
}

/// Why the offsets can't be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unusable {
    pub reason: String,
    pub hint: &'static str,
}

impl Unusable {
    fn new(reason: impl Into<String>, hint: &'static str) -> Unusable {
        Unusable { reason: reason.into(), hint }
    }
}

const WHERE_HINT: &str = "check [debezium_offsets]: the offset file, or the offsets topic, the connector name and server (topic.prefix) of the Debezium connector whose slot this is";

/// Reads the configured store and finds the connector's offset.
pub async fn load(
    config: &DebeziumOffsetsConfig,
    kafka: &KafkaConfig,
) -> Result<Delivered, Unusable> {
    let records = match &config.store {
        OffsetStore::File(path) => read_file(path)?,
        OffsetStore::Topic(topic) => {
            let (topic, kafka, timeout) = (topic.clone(), kafka.clone(), config.timeout);
            tokio::task::spawn_blocking(move || topic::read(&topic, &kafka, timeout))
                .await
                .map_err(|e| {
                    Unusable::new(format!("reading the offsets topic failed: {e}"), WHERE_HINT)
                })??
        }
    };
    find(&records, &config.connector, &config.server)
}

fn read_file(path: &PathBuf) -> Result<Entries, Unusable> {
    let bytes = std::fs::read(path).map_err(|e| {
        Unusable::new(format!("cannot read the offset file {}: {e}", path.display()), WHERE_HINT)
    })?;
    file::parse(&bytes).map_err(|e| {
        Unusable::new(
            format!(
                "the offset file {} is not a Kafka FileOffsetBackingStore file: {e}",
                path.display()
            ),
            "point [debezium_offsets] file at the connector's offset.storage.file.filename",
        )
    })
}

/// The connector's offset among a store's records (in store order: the last one counts, as in
/// a compacted topic; a null value deletes it).
pub fn find(records: &[Entry], connector: &str, server: &str) -> Result<Delivered, Unusable> {
    let mut found = None;
    let mut others = Vec::new();
    for (key, value) in records {
        let Some(key) = key.as_deref() else { continue };
        match parse_key(key) {
            Some((name, srv)) if name == connector && srv == server => found = Some(value.clone()),
            Some((name, srv)) => others.push(format!("{name}/{srv}")),
            None => {}
        }
    }
    match found {
        Some(Some(value)) => parse_value(&value),
        Some(None) => Err(Unusable::new(
            format!(
                "the offset of connector {connector} (server {server}) was deleted (a null record)"
            ),
            WHERE_HINT,
        )),
        None => {
            others.sort();
            others.dedup();
            let seen = match others.is_empty() {
                true => "no Debezium PostgreSQL offsets at all".to_string(),
                false => format!("offsets for {}", others.join(", ")),
            };
            Err(Unusable::new(
                format!("no offset for connector {connector} with server {server} (the store holds {seen})"),
                WHERE_HINT,
            ))
        }
    }
}

/// `["<name>",{"server":"<prefix>"}]`; other keys (other connectors' kinds) are `None`.
fn parse_key(key: &[u8]) -> Option<(String, String)> {
    let value: serde_json::Value = serde_json::from_slice(key).ok()?;
    let [name, partition] = value.as_array()?.as_slice() else { return None };
    Some((name.as_str()?.to_string(), partition.get("server")?.as_str()?.to_string()))
}

/// A PostgreSQL connector's offset value.
pub fn parse_value(value: &[u8]) -> Result<Delivered, Unusable> {
    const HINT: &str = "this is not a Debezium PostgreSQL connector's offset, or a newer format: report it with the record (it holds no secret)";
    let json: serde_json::Value = serde_json::from_slice(value)
        .map_err(|e| Unusable::new(format!("the offset is not JSON: {e}"), HINT))?;
    let map =
        json.as_object().ok_or_else(|| Unusable::new("the offset is not a JSON object", HINT))?;
    let number = |key: &str| -> Result<Option<u64>, Unusable> {
        match map.get(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                Unusable::new(format!("the offset's {key} is not a non-negative integer"), HINT)
            }),
        }
    };
    let snapshot_running = map
        .get("snapshot")
        .is_some_and(|s| !s.is_null() && s != "false" && s != &serde_json::Value::Bool(false))
        && map.get("snapshot_completed").and_then(|c| c.as_bool()) != Some(true);
    if snapshot_running {
        return Err(Unusable::new(
            "Debezium stopped during a snapshot: its offset records a snapshot position, not what it streamed",
            "walrelay never snapshots; let Debezium finish its snapshot and stream, or start walrelay without [debezium_offsets]",
        ));
    }
    let proc = number("lsn_proc")?;
    let lsn = number("lsn")?;
    let commit = number("lsn_commit")?
        .or(proc)
        .ok_or_else(|| Unusable::new("the offset has neither lsn_commit nor lsn_proc", HINT))?;
    let xid = number("txId")?;
    let event = proc.or(lsn);
    let kind = map.get("messageType").and_then(|t| t.as_str()).unwrap_or("");
    // A BEGIN record (transaction metadata) carries the transaction's first LSN, which its
    // first row may share: nothing of that transaction was delivered yet. A COMMIT or a
    // non-transactional message ends where `lsn_commit` does.
    let in_flight = match (xid, event, kind) {
        (_, _, "BEGIN" | "COMMIT") => None,
        (Some(xid), Some(event), _) if event > commit || kind != "MESSAGE" => {
            let xid = u32::try_from(xid).map_err(|_| {
                Unusable::new(
                    format!("the offset's txId {xid} is not a 32-bit transaction id"),
                    HINT,
                )
            })?;
            Some(InFlight {
                xid,
                event: Lsn(event),
                events_at_lsn: number("lsn_events_processed")?,
            })
        }
        _ => None,
    };
    let ts_usec = map.get("ts_usec").and_then(|t| t.as_i64());
    Ok(Delivered { commit: Lsn(commit), in_flight, ts_usec })
}

#[cfg(test)]
mod tests;
