//! `[retention]`, when configured: what a purge would do to each outbox table, or why it can't
//! (no age column, or one that holds no time) — the checks `walrelay purge` makes first.

use super::Report;
use crate::config::Config;
use crate::duration::format;
use crate::error::Result;
use crate::retention;
use crate::source::catalog::OutboxTable;
use crate::source::Control;

pub(super) async fn run(
    config: &Config,
    control: &Control,
    table: &OutboxTable,
    r: &mut Report,
) -> Result<()> {
    let Some(retention) = &config.retention else {
        return Ok(());
    };
    let what = format!("retention {}", table.name);
    match retention::plan(control, table, &retention.column, retention::RETENTION_COLUMN).await {
        Ok(plan) => r.ok(
            &what,
            format!(
                "keep {}, purged every {} (rows whose events the slot confirmed): {}",
                format(retention.keep),
                format(retention.interval),
                plan.describe()
            ),
        ),
        Err(e) if !e.is_transient() => r.fail(&what, e.to_string(), e.hint().unwrap_or("")),
        Err(e) => return Err(e),
    }
    Ok(())
}
