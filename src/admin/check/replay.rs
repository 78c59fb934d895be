//! What `walrelay replay` would read each outbox table by: the index on its timestamp column (or
//! why it would scan the whole table), and the order it would send rows in.

use super::Report;
use crate::config::{Config, RetentionConfig};
use crate::error::Result;
use crate::snapshot;
use crate::source::catalog::OutboxTable;
use crate::source::Control;

pub(super) async fn run(
    config: &Config,
    control: &Control,
    table: &OutboxTable,
    r: &mut Report,
) -> Result<()> {
    let what = format!("replay {}", table.name);
    let column = config
        .retention
        .as_ref()
        .map_or(RetentionConfig::DEFAULT_COLUMN.to_string(), |c| c.column.clone());
    let id = &config.router.field_event_id;
    if !table.columns.iter().any(|c| c.name == column) {
        r.warn(
            &what,
            format!("{} has no column {column}: replay can select its rows by event id (--id, --ids) but not by time", table.name),
            format!("add a timestamptz column written at insert (ALTER TABLE {} ADD COLUMN {column} timestamptz NOT NULL DEFAULT now()), or set [retention] column to the one it has", table.name),
        );
        return Ok(());
    }
    let order = snapshot::order(control).await?.describe(&column, id);
    match snapshot::index_for(control, table.oid, &column).await? {
        Some(index) => r.ok(&what, format!("by index {index}; {order}")),
        None => r.warn(
            &what,
            format!("no index starts with {column}: a replay by time would read the whole table; {order}"),
            format!("CREATE INDEX CONCURRENTLY ON {} ({column}, {id})", table.name),
        ),
    }
    Ok(())
}
