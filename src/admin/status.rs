//! `walrelay status`: where the slot stands, as an aligned table or one JSON object.

use std::process::ExitCode;

use serde_json::json;

use super::{connect, describe_source, human_bytes};
use crate::config::Config;
use crate::source::slot::{self, Slot};

/// One slot's state as the server reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotStatus {
    pub slot: String,
    pub database: String,
    pub plugin: Option<String>,
    /// The position the slot resumes from: what a relay confirmed last.
    pub confirmed_lsn: Option<String>,
    /// The server's WAL position (`pg_current_wal_lsn()`; the replayed position on a standby).
    pub server_lsn: String,
    /// `server_lsn - confirmed_lsn`: WAL not yet confirmed by the relay.
    pub lag_bytes: Option<i64>,
    pub restart_lsn: Option<String>,
    /// `server_lsn - restart_lsn`: WAL the server keeps for the slot.
    pub retained_bytes: Option<i64>,
    pub active: bool,
    pub active_pid: Option<i32>,
    /// `active_pid` is creating the slot (not a walsender streaming from it).
    pub creating: bool,
    pub wal_status: Option<String>,
    /// PostgreSQL 17+: a failover slot, synchronised to standbys that ask for it.
    pub failover: Option<bool>,
    /// `pg_stat_replication.reply_time` of the active walsender, ISO-8601 UTC.
    pub last_status_update: Option<String>,
    /// Seconds since `last_status_update`.
    pub last_status_update_age_s: Option<f64>,
    /// Whether this role may see other sessions' replication details (`pg_read_all_stats` or
    /// superuser); without it `pg_stat_replication.reply_time` reads as NULL.
    pub can_read_stats: bool,
}

impl SlotStatus {
    /// The status shown for `slot` as the source module read it.
    pub fn of(slot: &Slot) -> SlotStatus {
        let bytes = |b: Option<u64>| b.map(|b| i64::try_from(b).unwrap_or(i64::MAX));
        SlotStatus {
            slot: slot.name.clone(),
            database: slot.database.clone().unwrap_or_default(),
            plugin: slot.plugin.clone(),
            confirmed_lsn: slot.confirmed.map(|l| l.to_string()),
            server_lsn: slot.server_lsn.to_string(),
            lag_bytes: bytes(slot.lag_bytes()),
            restart_lsn: slot.restart_lsn.map(|l| l.to_string()),
            retained_bytes: bytes(slot.retained_bytes()),
            active: slot.active,
            active_pid: slot.active_pid,
            creating: slot.creating,
            wal_status: slot.wal_status.clone(),
            failover: slot.failover,
            last_status_update: slot.last_status_update.clone(),
            last_status_update_age_s: slot.last_status_update_age_s,
            can_read_stats: slot.can_read_stats,
        }
    }
}

impl SlotStatus {
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "slot": self.slot,
            "exists": true,
            "database": self.database,
            "plugin": self.plugin,
            "confirmed_lsn": self.confirmed_lsn,
            "server_lsn": self.server_lsn,
            "lag_bytes": self.lag_bytes,
            "lag": self.lag_bytes.map(human_bytes),
            "restart_lsn": self.restart_lsn,
            "retained_bytes": self.retained_bytes,
            "retained": self.retained_bytes.map(human_bytes),
            "active": self.active,
            "active_pid": self.active_pid,
            "state": if self.creating { "creating" } else if self.active { "active" } else { "inactive" },
            "wal_status": self.wal_status,
            "failover": self.failover,
            "last_status_update": self.last_status_update,
            "last_status_update_age_s": self.last_status_update_age_s.map(|s| (s * 1000.0).round() / 1000.0),
            "can_read_stats": self.can_read_stats,
        })
    }

    /// Aligned `name  value` lines.
    pub fn to_table(&self) -> String {
        self.to_table_with(Vec::new())
    }

    /// The table with `more` rows after the slot's (the delivery guarantee), in one column.
    pub fn to_table_with(&self, more: Vec<(&str, String)>) -> String {
        let bytes = |b: Option<i64>| match b {
            Some(b) => format!("{b} bytes ({})", human_bytes(b)),
            None => "-".to_string(),
        };
        let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_string());
        let rows: Vec<(&str, String)> = vec![
            (
                "slot",
                format!("{} ({}, database {})", self.slot, or_dash(&self.plugin), self.database),
            ),
            ("confirmed LSN", or_dash(&self.confirmed_lsn)),
            ("server WAL LSN", self.server_lsn.clone()),
            ("lag", bytes(self.lag_bytes)),
            (
                "retained WAL",
                match &self.restart_lsn {
                    Some(lsn) => format!("{} (restart LSN {lsn})", bytes(self.retained_bytes)),
                    None => "-".to_string(),
                },
            ),
            (
                "active pid",
                match self.active_pid.filter(|_| self.active) {
                    Some(p) if self.creating => format!(
                        "{p} (creating: the backend creating the slot, waiting for running transactions to end; `walrelay check` names them)"
                    ),
                    Some(p) => format!("{p} (the walsender streaming from the slot)"),
                    None => "- (inactive)".into(),
                },
            ),
            ("wal_status", or_dash(&self.wal_status)),
            (
                "failover",
                match self.failover {
                    Some(true) => {
                        "yes (standbys with sync_replication_slots keep a copy)".to_string()
                    }
                    Some(false) => "no (a failover loses the slot)".to_string(),
                    None => "- (PostgreSQL before 17 has no failover slots)".to_string(),
                },
            ),
            (
                "last status update",
                match (&self.last_status_update, self.last_status_update_age_s) {
                    (Some(t), Some(age)) => format!("{t} ({age:.1} s ago)"),
                    (Some(t), None) => t.clone(),
                    (None, _) if self.active && !self.can_read_stats => {
                        "- (hidden from this role: GRANT pg_read_all_stats to it to see it)"
                            .to_string()
                    }
                    _ => "- (no active walsender)".to_string(),
                },
            ),
        ];
        let rows: Vec<(&str, String)> = rows.into_iter().chain(more).collect();
        let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        rows.iter().map(|(k, v)| format!("{k:<width$}  {v}\n")).collect()
    }
}

pub(super) async fn run(config: &Config, as_json: bool, with_tables: bool) -> ExitCode {
    let src = &config.source;
    let control = match connect(src).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "error: cannot connect to {}: {} — fix: check [source] url and PGPASSWORD",
                describe_source(src),
                e.chain()
            );
            return ExitCode::FAILURE;
        }
    };
    let tables = match with_tables {
        false => None,
        true => match super::table_status::tables(config, &control).await {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("error: cannot list the outbox tables: {}", e.chain());
                return ExitCode::FAILURE;
            }
        },
    };
    match slot::slot(&control, &src.slot).await {
        Ok(Some(slot)) => {
            let status = SlotStatus::of(&slot);
            let delivery = delivery_status(config).await;
            if as_json {
                let mut v = status.to_json();
                v["guarantee"] = json!(config.delivery.guarantee.name());
                v["sink"] = json!(config.delivery.sink.name());
                if let Some((_, progress)) = &delivery {
                    v["progress_topic"] = json!(config.delivery.progress_topic);
                    v["transactional_id"] = json!(config.delivery.transactional_id);
                    v["progress_lsn"] = json!(progress);
                }
                if let Some((rows, note)) = &tables {
                    v["tables"] = json!(rows);
                    v["tables_note"] = json!(note);
                }
                println!("{v}");
            } else {
                let mut more = vec![("sink", config.delivery.sink.name().to_string())];
                match delivery {
                    None => more.push(("guarantee", "at-least-once".to_string())),
                    Some((line, progress)) => {
                        more.extend([("guarantee", line), ("progress LSN", progress)])
                    }
                };
                print!("{}", status.to_table_with(more));
                if let Some((rows, note)) = &tables {
                    print!("\n{}", super::table_status::render(rows, note));
                }
            }
            ExitCode::SUCCESS
        }
        Ok(None) => {
            if as_json {
                println!("{}", json!({ "slot": src.slot, "exists": false }));
            }
            eprintln!(
                "error: replication slot {} does not exist — fix: `walrelay setup` or `walrelay run` creates it",
                src.slot
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: cannot read the slot's status: {}", e.chain());
            ExitCode::FAILURE
        }
    }
}

/// Exactly-once: how the guarantee is set up, and the commit LSN the progress topic holds (the
/// slot's confirmed LSN trails it by at most one Kafka transaction). `None` at-least-once.
async fn delivery_status(config: &Config) -> Option<(String, String)> {
    let d = &config.delivery;
    if !d.exactly_once() {
        return None;
    }
    let line = format!(
        "exactly-once (transactional.id {}, progress topic {})",
        d.transactional_id, d.progress_topic
    );
    // `status` answers within seconds with the broker down: the read gives up at its timeout.
    let within = std::time::Duration::from_secs(2);
    let read = crate::delivery::exactly_once::read_progress(&config.kafka, d, false, within);
    let progress = match tokio::time::timeout(within * 2, read).await {
        Ok(Ok(Some(lsn))) => lsn.to_string(),
        Ok(Ok(None)) => "- (no Kafka transaction committed yet)".to_string(),
        Ok(Err(e)) => format!("- (cannot read the progress topic: {})", e.chain()),
        Err(_) => {
            format!("- (the progress topic did not answer within {} s)", (within * 2).as_secs())
        }
    };
    Some((line, progress))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SlotStatus {
        SlotStatus {
            slot: "walrelay".into(),
            database: "app".into(),
            plugin: Some("pgoutput".into()),
            confirmed_lsn: Some("0/1A2B3C4".into()),
            server_lsn: "0/1A2B7C4".into(),
            lag_bytes: Some(1024),
            restart_lsn: Some("0/1A00000".into()),
            retained_bytes: Some(3 * 1024 * 1024),
            active: true,
            active_pid: Some(4242),
            creating: false,
            wal_status: Some("reserved".into()),
            failover: Some(true),
            last_status_update: Some("2026-11-30T12:00:00.000Z".into()),
            last_status_update_age_s: Some(0.4),
            can_read_stats: true,
        }
    }

    #[test]
    fn admin_status_table_aligns_values_and_shows_human_sizes() {
        let table = sample().to_table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 9, "{table}");
        let column = lines[0].find("walrelay").unwrap();
        assert!(lines.iter().all(|l| l[column - 2..column] == *"  "), "{table}");
        assert!(table.contains("lag                 1024 bytes (1.0 KiB)"), "{table}");
        assert!(table.contains("3145728 bytes (3.0 MiB) (restart LSN 0/1A00000)"), "{table}");
        assert!(table.contains("active pid          4242"), "{table}");
    }

    #[test]
    fn admin_status_json_has_every_field() {
        let v = sample().to_json();
        assert_eq!(v["lag_bytes"], 1024);
        assert_eq!(v["lag"], "1.0 KiB");
        assert_eq!(v["active_pid"], 4242);
        assert_eq!(v["retained"], "3.0 MiB");
        assert_eq!(v["last_status_update"], "2026-11-30T12:00:00.000Z");
    }

    #[test]
    fn admin_status_says_why_the_last_status_update_is_hidden() {
        let hidden = SlotStatus {
            last_status_update: None,
            last_status_update_age_s: None,
            can_read_stats: false,
            ..sample()
        };
        assert!(hidden.to_table().contains("GRANT pg_read_all_stats"), "{}", hidden.to_table());
        let inactive = SlotStatus { active: false, active_pid: None, ..hidden };
        assert!(inactive.to_table().contains("- (no active walsender)"));
    }
}
