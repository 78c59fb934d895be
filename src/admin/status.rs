//! `walrelay status`: where the slot stands, as an aligned table or one JSON object.

use std::process::ExitCode;

use serde_json::json;
use tokio_postgres::Client;

use super::{connect, describe_source, human_bytes, SERVER_LSN};
use crate::config::Config;

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
    pub wal_status: Option<String>,
    /// `pg_stat_replication.reply_time` of the active walsender, ISO-8601 UTC.
    pub last_status_update: Option<String>,
    /// Seconds since `last_status_update`.
    pub last_status_update_age_s: Option<f64>,
    /// Whether this role may see other sessions' replication details (`pg_read_all_stats` or
    /// superuser); without it `pg_stat_replication.reply_time` reads as NULL.
    pub can_read_stats: bool,
}

/// The slot's status, `None` when there is no such slot.
pub async fn slot_status(
    client: &Client,
    slot: &str,
) -> Result<Option<SlotStatus>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            &format!(
                "SELECT s.slot_name::text, s.database::text, s.plugin::text, \
                 s.confirmed_flush_lsn::text, ({SERVER_LSN})::text, \
                 ({SERVER_LSN} - s.confirmed_flush_lsn)::bigint, s.restart_lsn::text, \
                 ({SERVER_LSN} - s.restart_lsn)::bigint, s.active, s.active_pid, s.wal_status, \
                 to_char(r.reply_time AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), \
                 extract(epoch FROM clock_timestamp() - r.reply_time)::float8, \
                 pg_catalog.pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') \
                 FROM pg_catalog.pg_replication_slots s \
                 LEFT JOIN pg_catalog.pg_stat_replication r ON s.active AND r.pid = s.active_pid \
                 WHERE s.slot_name = $1"
            ),
            &[&slot],
        )
        .await?;
    Ok(row.map(|row| SlotStatus {
        slot: row.get(0),
        database: row.get::<_, Option<String>>(1).unwrap_or_default(),
        plugin: row.get(2),
        confirmed_lsn: row.get(3),
        server_lsn: row.get(4),
        lag_bytes: row.get(5),
        restart_lsn: row.get(6),
        retained_bytes: row.get(7),
        active: row.get(8),
        active_pid: row.get(9),
        wal_status: row.get(10),
        last_status_update: row.get(11),
        last_status_update_age_s: row.get(12),
        can_read_stats: row.get(13),
    }))
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
            "wal_status": self.wal_status,
            "last_status_update": self.last_status_update,
            "last_status_update_age_s": self.last_status_update_age_s.map(|s| (s * 1000.0).round() / 1000.0),
            "can_read_stats": self.can_read_stats,
        })
    }

    /// Aligned `name  value` lines.
    pub fn to_table(&self) -> String {
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
                self.active_pid
                    .filter(|_| self.active)
                    .map_or("- (inactive)".into(), |p| p.to_string()),
            ),
            ("wal_status", or_dash(&self.wal_status)),
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
        let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        rows.iter().map(|(k, v)| format!("{k:<width$}  {v}\n")).collect()
    }
}

pub(super) async fn run(config: &Config, as_json: bool) -> ExitCode {
    let src = &config.source;
    let client = match connect(src).await {
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
    match slot_status(&client, &src.slot).await {
        Ok(Some(status)) => {
            if as_json {
                println!("{}", status.to_json());
            } else {
                print!("{}", status.to_table());
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
            eprintln!("error: cannot read the slot's status: {e}");
            ExitCode::FAILURE
        }
    }
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
            wal_status: Some("reserved".into()),
            last_status_update: Some("2026-11-30T12:00:00.000Z".into()),
            last_status_update_age_s: Some(0.4),
            can_read_stats: true,
        }
    }

    #[test]
    fn admin_status_table_aligns_values_and_shows_human_sizes() {
        let table = sample().to_table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 8, "{table}");
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
