//! `walrelay purge`: one retention run from the command line (see [`crate::retention`]). The
//! report goes to stdout; exit code 1 when the slot had not confirmed the current WAL position
//! (nothing was deleted) or anything failed, 2 for an invalid configuration or option.

use std::process::ExitCode;
use std::time::Duration;

use tokio::sync::watch;

use crate::config::{Config, RetentionConfig};
use crate::duration;
use crate::retention::{self, Options, Outcome, Unconfirmed};

pub(super) async fn run(
    config: &Config,
    older_than: Option<Duration>,
    dry_run: bool,
    wait: Duration,
    force: bool,
) -> ExitCode {
    let Some(older_than) = older_than.or(config.retention.as_ref().map(|r| r.keep)) else {
        eprintln!("error: purge needs an age — fix: pass --older-than 7d, or set [retention] keep in the configuration");
        return ExitCode::from(2);
    };
    let column = config
        .retention
        .as_ref()
        .map_or(RetentionConfig::DEFAULT_COLUMN.to_string(), |r| r.column.clone());
    let opts = Options { older_than, column, dry_run, confirm_wait: wait, before_join: force };
    // Nothing stops a command-line purge but the process ending.
    let (_never, stop) = watch::channel(false);
    match retention::purge(config, &opts, &stop).await {
        Ok(Outcome::Purged(report)) => {
            print!("{}", report.render());
            match &report.unconfirmed {
                Some(behind) => {
                    eprintln!("error: {}", unconfirmed(behind, wait));
                    ExitCode::FAILURE
                }
                None => ExitCode::SUCCESS,
            }
        }
        Ok(Outcome::Unconfirmed(behind)) => {
            eprintln!("error: nothing purged: {}", unconfirmed(&behind, wait));
            ExitCode::FAILURE
        }
        Ok(Outcome::Busy { pid }) => {
            let who = pid.map_or("another session".to_string(), |p| format!("pid {p}"));
            eprintln!("error: nothing purged: another purge for slot {} runs ({who}) — fix: let it finish (the other relay of a pair purges too with [retention]), then run purge again if needed", config.source.slot);
            ExitCode::FAILURE
        }
        Err(e) => {
            match e.hint() {
                Some(hint) => eprintln!("error: {} — fix: {hint}", e.chain()),
                None => {
                    eprintln!("error: {} (nothing more was purged; run purge again)", e.chain())
                }
            }
            ExitCode::FAILURE
        }
    }
}

/// Why the slot's position stops a purge, and the fix.
fn unconfirmed(behind: &Unconfirmed, wait: Duration) -> String {
    let Unconfirmed { needed, confirmed, active, slot } = behind;
    let confirmed = confirmed.map_or("nothing".to_string(), |c| c.to_string());
    let (why, fix) = if *active {
        (
            format!("a relay streams from it but is behind (catching up, or the broker is slow) after {}", duration::format(wait)),
            "wait for the lag to shrink (`walrelay status`), then run purge again",
        )
    } else {
        (
            "no relay streams from it: walrelay is down".to_string(),
            "start walrelay and let it catch up, then run purge again",
        )
    };
    format!("slot {slot} has confirmed {confirmed}, short of {needed} (the WAL when the purge began); {why}, so rows written since its confirmed position may not be in Kafka yet — fix: {fix}")
}
