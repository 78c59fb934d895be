//! `[debezium_offsets]`: whether Debezium's offsets are found, where they stand against the
//! slot's confirmed position, and so what the first `walrelay run` will skip. The judgement is the
//! takeover's own (`relay::takeover::judge`), applied to the same reads without streaming.

use super::Report;
use crate::config::{Config, OffsetStore};
use crate::relay::takeover::offsets::{self, Delivered, Unusable};
use crate::relay::takeover::{self, Verdict};
use crate::source::slot::Slot;

const WHAT: &str = "debezium offsets";

pub(super) async fn run(config: &Config, slot: Option<&Slot>, r: &mut Report) {
    let Some(cfg) = &config.debezium_offsets else { return };
    let store = match &cfg.store {
        OffsetStore::File(path) => format!("file {}", path.display()),
        OffsetStore::Topic(topic) => format!("topic {topic}"),
    };
    let at = format!("{store}, connector {} server {}", cfg.connector, cfg.server);
    let loaded = offsets::load(cfg, &config.kafka).await;
    let found = loaded.as_ref().map(describe).unwrap_or_default();
    let Some((confirmed, wal_end)) = slot.and_then(|s| s.confirmed.map(|c| (c, s.server_lsn)))
    else {
        return match loaded {
            Err(Unusable { reason, hint }) => r.warn(
                WHAT,
                format!("not usable ({at}): {reason}; the first run skips nothing and relays everything after the slot's position"),
                hint,
            ),
            Ok(_) => r.warn(
                WHAT,
                format!("found ({at}): {found}; but slot {} does not exist yet, and a new slot starts after them, so nothing is skipped", config.source.slot),
                "point [source] slot at the Debezium connector's slot to take it over",
            ),
        };
    };
    let delivered = match takeover::judge(loaded, confirmed, wal_end) {
        Verdict::Unusable(Unusable { reason, hint }) => {
            return r.warn(
                WHAT,
                format!("not usable ({at}): {reason}; the first run skips nothing and relays everything after the slot's position"),
                hint,
            );
        }
        Verdict::OtherDatabase(_) => {
            return r.warn(
                WHAT,
                format!("found ({at}): {found}; ahead of this server's WAL ({wal_end}), so another database's: the first run skips nothing"),
                "point [debezium_offsets] at the offsets of the connector that streamed from this slot on this server",
            );
        }
        Verdict::Older(_) => {
            return r.ok(
                WHAT,
                format!("found ({at}): {found}; older than the slot's confirmed position {confirmed}, so nothing is skipped (expected once walrelay has confirmed its own; remove the section)"),
            );
        }
        Verdict::Skip(delivered) => delivered,
    };
    let in_flight = match delivered.in_flight {
        Some(f) => format!(
            ", then in transaction {} the rows up to LSN {}{}",
            f.xid,
            f.event,
            f.events_at_lsn.map(|n| format!(" ({n} at that LSN)")).unwrap_or_default()
        ),
        None => String::new(),
    };
    r.ok(
        WHAT,
        format!(
            "found ({at}): {found}; the slot's confirmed position is {confirmed}: the first run skips every transaction ending after {confirmed} and at or before {} ({} of WAL){in_flight}, which Debezium delivered",
            delivered.commit,
            crate::admin::human_bytes(delivered.commit.as_u64().saturating_sub(confirmed.as_u64()) as i64),
        ),
    );
}

fn describe(d: &Delivered) -> String {
    let mut s = format!("lsn_commit {}", d.commit);
    if let Some(f) = d.in_flight {
        s += &format!(", last event {} of transaction {}", f.event, f.xid);
    }
    s
}
