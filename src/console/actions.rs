//! The console's actions, off unless `[http] console = "actions"` (which needs `console_token`,
//! the bearer token each start carries: see [`super::access`]): a dry-run replay or an audit of
//! a window, started from the page. Each runs as a `walrelay
//! replay --dry-run` or `walrelay audit` child process on the relay's own configuration file, so
//! it reads with connections, memory and a Kafka reader of its own and can never hold the relay
//! up; one at a time, its last lines of output kept for the page.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use crate::clock::unix_micros;
use crate::duration::rfc3339;
use crate::metrics::seen::cut;
use crate::snapshot::{inverted_window, TimeBound};

/// Lines of an action's output kept.
pub const KEPT_LINES: usize = 200;

/// What may be started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    ReplayDryRun,
    Audit,
}

impl Kind {
    pub fn parse(name: &str) -> Option<Kind> {
        match name {
            "replay-dry-run" => Some(Kind::ReplayDryRun),
            "audit" => Some(Kind::Audit),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::ReplayDryRun => "replay-dry-run",
            Kind::Audit => "audit",
        }
    }
}

/// The action running or last run.
#[derive(Debug, Clone)]
struct Job {
    kind: Kind,
    started_micros: i64,
    output: VecDeque<String>,
    exit_code: Option<i32>,
    running: bool,
}

pub struct Actions {
    /// The relay's configuration file, which the child reads too.
    config_path: PathBuf,
    job: Arc<Mutex<Option<Job>>>,
}

impl Actions {
    pub fn new(config_path: PathBuf) -> Actions {
        Actions { config_path, job: Arc::new(Mutex::new(None)) }
    }

    /// Starts `kind` over `since`..`until` (replay's durations and times), unless one runs.
    pub fn start(&self, kind: Kind, since: &str, until: Option<&str>) -> Result<(), String> {
        // Checked as the command will read them, so the page gets the command's own error.
        let window = (TimeBound::parse(since)?, until.map(TimeBound::parse).transpose()?);
        if let Some(why) = inverted_window(Some(&window.0), window.1.as_ref()) {
            return Err(why);
        }
        let mut job = self.job.lock().unwrap_or_else(|e| e.into_inner());
        if job.as_ref().is_some_and(|j| j.running) {
            return Err("an action is running: wait for it to finish".into());
        }
        let exe =
            std::env::current_exe().map_err(|e| format!("cannot find walrelay's binary: {e}"))?;
        let mut args: Vec<String> = match kind {
            Kind::ReplayDryRun => vec!["replay".into(), "--dry-run".into()],
            Kind::Audit => vec!["audit".into()],
        };
        args.extend(["--config".into(), self.config_path.display().to_string()]);
        args.extend(["--since".into(), since.to_string()]);
        if let Some(until) = until {
            args.extend(["--until".into(), until.to_string()]);
        }
        let mut child = Command::new(exe)
            .args(&args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start walrelay {}: {e}", args[0]))?;
        *job = Some(Job {
            kind,
            started_micros: unix_micros(),
            output: VecDeque::from([format!("$ walrelay {}", args.join(" "))]),
            exit_code: None,
            running: true,
        });
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let shared = self.job.clone();
        let keep = move |line: String| {
            if let Some(j) = shared.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                if j.output.len() == KEPT_LINES {
                    j.output.pop_front();
                }
                j.output.push_back(cut(&line));
            }
        };
        let keep_err = keep.clone();
        let shared = self.job.clone();
        std::thread::Builder::new()
            .name("walrelay-console-action".into())
            .spawn(move || {
                let errors = stderr.map(|e| {
                    std::thread::spawn(move || {
                        BufReader::new(e).lines().map_while(Result::ok).for_each(keep_err)
                    })
                });
                if let Some(out) = stdout {
                    BufReader::new(out).lines().map_while(Result::ok).for_each(keep);
                }
                if let Some(e) = errors {
                    let _ = e.join();
                }
                let code = child.wait().ok().and_then(|s| s.code());
                if let Some(j) = shared.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                    j.exit_code = code;
                    j.running = false;
                }
            })
            .map_err(|e| format!("cannot start the action's thread: {e}"))?;
        Ok(())
    }

    /// The action running or last run, for `/api/v1/actions`.
    pub fn current(&self) -> serde_json::Value {
        let job = self.job.lock().unwrap_or_else(|e| e.into_inner());
        match job.as_ref() {
            None => serde_json::Value::Null,
            Some(j) => serde_json::json!({
                "kind": j.kind.name(),
                "started_at": rfc3339(j.started_micros),
                "running": j.running,
                "output": j.output,
                "exit_code": j.exit_code,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_that_could_be_an_option_is_refused() {
        let a = Actions::new("w.toml".into());
        let e = a.start(Kind::Audit, "--yes", None).unwrap_err();
        assert!(e.contains("not a duration"), "{e}");
    }
}
