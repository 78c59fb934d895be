//! The console: a page at `/` and the JSON API it reads (`/api/v1/...`), served by the HTTP
//! endpoint on its own thread, for an operator who wants to look rather than read metrics.
//!
//! * `/` — the page (`src/http/console/`: HTML, CSS and JavaScript embedded in the binary, no
//!   external asset), with the overview rendered as text by the server, so it reads without
//!   JavaScript too;
//! * `/api/v1/overview` — the guarantee, the slot as PostgreSQL reports it, the relay's positions
//!   and lag, the broker as the relay sees it, in-flight records, counts;
//! * `/api/v1/history` — the last hour of lag, throughput and in-flight records ([`history`]);
//! * `/api/v1/problems` — the last warnings and errors with their hints ([`log`]), dead letters by
//!   reason and the latest ones;
//! * `/api/v1/tables` — events relayed per outbox table;
//! * `/api/v1/events/<id>` — where one event is: its row, where the router puts it, where Kafka
//!   has it ([`crate::audit::lookup`]);
//! * `/api/v1/actions` — a dry-run replay or an audit, only with `[http] console_actions` and
//!   its bearer token ([`actions`]).
//!
//! Nothing here touches the relay's thread: values are read from [`Metrics`] (atomics and
//! snapshots the relay publishes), and what needs PostgreSQL or Kafka (a lookup, an action)
//! uses connections of its own. No secret reaches a response: the source URL is shown as
//! `check` shows it, and log lines never hold secrets.

pub mod actions;
pub mod history;
pub mod log;

use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

use self::actions::{Actions, Kind};
use self::history::History;
use crate::config::{redact_url, Config};
use crate::duration::rfc3339;
use crate::metrics::{unix_micros, Metrics};

const PAGE: &str = include_str!("../http/console/index.html");
const SCRIPT: &str = include_str!("../http/console/console.js");
const STYLE: &str = include_str!("../http/console/console.css");

/// How long a lookup may take: within the endpoint's connection timeout (10 s).
const LOOKUP_WITHIN: Duration = Duration::from_secs(8);
/// The largest request body read (an action's window).
const MAX_BODY: usize = 4096;

pub struct Console {
    config: Arc<Config>,
    metrics: Arc<Metrics>,
    history: Arc<History>,
    actions: Option<Actions>,
    started_micros: i64,
    /// One lookup at a time: each opens a connection and a Kafka reader.
    lookups: Semaphore,
}

impl Console {
    /// The console of the relay running `config`, read from `config_path`.
    pub fn new(config: Arc<Config>, config_path: PathBuf, metrics: Arc<Metrics>) -> Console {
        let actions =
            config.http.as_ref().and_then(|h| match (h.console_actions, &h.console_token) {
                (true, Some(token)) => Some(Actions::new(config_path, token.clone())),
                _ => None,
            });
        Console {
            config,
            metrics,
            history: Arc::new(History::default()),
            actions,
            started_micros: unix_micros(),
            lookups: Semaphore::new(1),
        }
    }

    /// Samples the history, on the runtime of the endpoint's thread.
    pub fn start_history(&self) {
        tokio::spawn(self.history.clone().sample(self.metrics.clone()));
    }

    /// Whether `path` is the console's.
    pub fn owns(path: &str) -> bool {
        matches!(path, "/" | "/console.js" | "/console.css") || path.starts_with("/api/v1/")
    }

    pub async fn respond(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let path = request.uri().path().to_string();
        let method = request.method().clone();
        if method == Method::POST {
            return match path.strip_prefix("/api/v1/actions/").and_then(Kind::parse) {
                Some(kind) => self.start_action(kind, request).await,
                None => error(StatusCode::METHOD_NOT_ALLOWED, "only GET here"),
            };
        }
        if !matches!(method, Method::GET | Method::HEAD) {
            return error(StatusCode::METHOD_NOT_ALLOWED, "GET, or POST to /api/v1/actions/<kind>");
        }
        match path.as_str() {
            "/" => self.page(),
            "/console.js" => asset(SCRIPT, "text/javascript; charset=utf-8"),
            "/console.css" => asset(STYLE, "text/css; charset=utf-8"),
            "/api/v1/overview" => ok(self.overview()),
            "/api/v1/history" => ok(self.history_json()),
            "/api/v1/problems" => ok(self.problems()),
            "/api/v1/tables" => ok(tables(&self.metrics)),
            "/api/v1/actions" => ok(json!({
                "enabled": self.actions.is_some(),
                "current": self.actions.as_ref().map_or(Value::Null, Actions::current),
            })),
            _ => match path.strip_prefix("/api/v1/events/") {
                Some(id) => self.lookup(id).await,
                None => error(StatusCode::NOT_FOUND, "no such page: the API is under /api/v1/"),
            },
        }
    }

    fn page(&self) -> Response<Full<Bytes>> {
        let src = &self.config.source;
        let title = format!("walrelay · slot {} · publication {}", src.slot, src.publication);
        let html = PAGE
            .replace("{{TITLE}}", &escape_html(&title))
            .replace("{{SERVER_TEXT}}", &escape_html(&self.server_text()));
        asset(html, "text/html; charset=utf-8")
    }

    /// The overview as lines of text: the page without JavaScript.
    fn server_text(&self) -> String {
        let o = self.overview();
        let mut lines = vec![
            format!("as of      {}", o["now"].as_str().unwrap_or("-")),
            format!("guarantee  {}", o["guarantee"].as_str().unwrap_or("-")),
            format!("streaming  {}", o["streaming"]),
            format!("source     {}", o["source"]["url"].as_str().unwrap_or("-")),
        ];
        let p = &o["positions"];
        lines.push(format!(
            "lag        {:.1} s, {} bytes (confirmed {}, received {})",
            p["lag_seconds"].as_f64().unwrap_or(0.0),
            p["lag_bytes"],
            p["confirmed_lsn"].as_str().unwrap_or("-"),
            p["received_lsn"].as_str().unwrap_or("-")
        ));
        match o["slot"].as_object() {
            Some(s) => lines.push(format!(
                "slot       confirmed {} as PostgreSQL reports it, wal_status {}, active pid {}, retained {} bytes",
                s["confirmed_lsn"].as_str().unwrap_or("-"),
                s["wal_status"].as_str().unwrap_or("-"),
                s["active_pid"],
                s["retained_bytes"]
            )),
            None => lines.push("slot       not sampled yet".into()),
        }
        let b = &o["broker"];
        lines.push(format!(
            "broker     {} reachable {}{}",
            b["bootstrap"].as_str().unwrap_or("-"),
            b["reachable"],
            b["last_error"].as_str().map_or(String::new(), |e| format!(", last error: {e}"))
        ));
        let c = &o["counts"];
        lines.push(format!(
            "counts     published {}, dead-lettered {}, delivery errors {}, reconnects {}",
            c["published"], c["dead_lettered"], c["delivery_errors"], c["reconnects"]
        ));
        for problem in log::recent().iter().take(5) {
            lines.push(format!(
                "{:<10} {} {}",
                problem.level.as_str(),
                rfc3339(problem.micros),
                problem.message
            ));
        }
        lines.join("\n")
    }

    fn overview(&self) -> Value {
        let m = &self.metrics;
        let positions = m.positions();
        let slot = m.slot.lock().map(|s| s.clone()).unwrap_or_default();
        let slot = slot.map_or(Value::Null, |s| {
            json!({
                "sampled_at": rfc3339(s.sampled_micros),
                "confirmed_lsn": s.confirmed.map(|l| l.to_string()),
                "restart_lsn": s.restart.map(|l| l.to_string()),
                "retained_bytes": s.retained_bytes,
                "wal_status": s.wal_status,
                "active_pid": s.active_pid,
                "failover": s.failover,
            })
        });
        let reachable = m.broker_asked.load(Relaxed).then(|| m.broker_up.load(Relaxed));
        let outage =
            m.broker_outage.lock().ok().and_then(|o| o.as_ref().map(|o| o.since.elapsed()));
        let last_error = m.broker_login_refused.lock().ok().and_then(|l| l.clone()).or_else(|| {
            m.broker_error
                .lock()
                .ok()
                .and_then(|e| e.as_ref().map(|(at, text)| format!("{} ({})", text, rfc3339(*at))))
        });
        let src = &self.config.source;
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "guarantee": self.config.delivery.guarantee.name(),
            "started_at": rfc3339(self.started_micros),
            "now": rfc3339(unix_micros()),
            "source": {"url": redact_url(&src.url), "slot": src.slot, "publication": src.publication},
            "streaming": m.streaming.load(Relaxed),
            "positions": {
                "received_lsn": positions.received.to_string(),
                "acked_lsn": positions.acked.to_string(),
                "confirmed_lsn": positions.confirmed.to_string(),
                "lag_bytes": positions.lag_bytes(),
                "lag_seconds": positions.lag_seconds(),
            },
            "slot": slot,
            "broker": {
                "bootstrap": self.config.kafka.properties.get("bootstrap.servers"),
                "reachable": reachable,
                "last_error": last_error,
                "unreachable_for_s": outage.map(|d| d.as_secs()),
            },
            "inflight": {
                "records": m.inflight_records.load(Relaxed),
                "bytes": m.inflight_bytes.load(Relaxed),
            },
            "counts": {
                "published": m.published_total(),
                "dead_lettered": m.dead_lettered.load(Relaxed),
                "delivery_errors": m.delivery_errors.load(Relaxed),
                "reconnects": m.reconnects.load(Relaxed),
            },
            "actions": self.actions.is_some(),
        })
    }

    fn history_json(&self) -> Value {
        let samples: Vec<Value> = self
            .history
            .samples()
            .iter()
            .map(|s| {
                json!({
                    "t": s.t,
                    "lag_seconds": s.lag_seconds,
                    "lag_bytes": s.lag_bytes,
                    "events_per_s": s.events_per_s,
                    "inflight_records": s.inflight_records,
                })
            })
            .collect();
        json!({ "interval_s": history::EVERY.as_secs(), "samples": samples })
    }

    fn problems(&self) -> Value {
        let log: Vec<Value> = log::recent()
            .iter()
            .map(|p| {
                json!({
                    "time": rfc3339(p.micros),
                    "level": p.level.as_str(),
                    "target": p.target,
                    "message": p.message,
                    "hint": p.hint,
                    "fields": p.fields,
                })
            })
            .collect();
        let dead = self.metrics.dead_letters.lock().map(|d| d.clone()).unwrap_or_default();
        let mut by_reason: Vec<(&String, &u64)> = dead.by_reason.iter().collect();
        by_reason.sort_by_key(|(_, n)| std::cmp::Reverse(**n));
        json!({
            "log": log,
            "dead_letters": {
                "total": self.metrics.dead_lettered.load(Relaxed),
                "by_reason": by_reason.iter().map(|(r, n)| json!({"reason": r, "count": n})).collect::<Vec<_>>(),
                "recent": dead.recent.iter().rev().map(|d| json!({
                    "time": rfc3339(d.micros),
                    "event_id": d.event_id,
                    "source": d.source,
                    "topic": d.topic,
                    "reason": d.reason,
                })).collect::<Vec<_>>(),
            },
        })
    }

    async fn lookup(&self, raw: &str) -> Response<Full<Bytes>> {
        let id = percent_decode(raw);
        let Some(id) =
            id.filter(|i| !i.is_empty() && i.len() <= 200 && !i.chars().any(char::is_control))
        else {
            return error(StatusCode::BAD_REQUEST, "not an event id: give the id as it is in the outbox table (at most 200 characters)");
        };
        let Ok(_one) = tokio::time::timeout(LOOKUP_WITHIN, self.lookups.acquire()).await else {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "another lookup is running: try again in a few seconds",
            );
        };
        let looked = tokio::time::timeout(
            LOOKUP_WITHIN,
            crate::audit::lookup::lookup(&self.config, &id, LOOKUP_WITHIN),
        )
        .await;
        let found = match looked {
            Err(_) => return error(StatusCode::SERVICE_UNAVAILABLE, &format!("the lookup took longer than {} s", LOOKUP_WITHIN.as_secs())),
            Ok(Err(e)) => return error(StatusCode::SERVICE_UNAVAILABLE, &e.chain()),
            Ok(Ok(None)) => {
                return error(StatusCode::NOT_FOUND, &format!("event {id} is in no outbox table (purged by retention, never committed, or a logical message, which no table keeps)"))
            }
            Ok(Ok(Some(found))) => found,
        };
        // Confirmed once the slot passed its commit: compared by commit time, which replay
        // reads exactly with track_commit_timestamp on. Without it: an event in Kafka while
        // the relay has nothing read and unconfirmed was confirmed with what it read.
        let positions = self.metrics.positions();
        let caught_up = positions.oldest_unconfirmed_commit.is_none()
            && positions.last_confirmed_commit.is_some();
        let confirmed = match (found.exact, positions.last_confirmed_commit) {
            (true, Some(last)) => Value::Bool(found.commit_micros <= last),
            _ if found.found.is_some() && caught_up => Value::Bool(true),
            _ => Value::Null,
        };
        let kafka = match &found.found {
            Some(f) => json!({
                "found": true,
                "topic": found.topic,
                "partition": f.partition,
                "offset": f.offset,
                "timestamp": f.timestamp_ms.map(|ms| rfc3339(ms * 1000)),
            }),
            None => json!({ "found": false, "searched": found.searched }),
        };
        let note = (!found.exact && confirmed.is_null()).then_some("the commit time is the row's timestamp column (track_commit_timestamp is off), and the relay has events not yet confirmed: whether this one is, is not known");
        ok(json!({
            "id": found.id,
            "row": { "table": found.table, "created": rfc3339(found.commit_micros) },
            "expected": { "topic": found.topic, "partition": found.partition, "key": found.key },
            "kafka": kafka,
            "confirmed": confirmed,
            "note": note,
        }))
    }

    async fn start_action(&self, kind: Kind, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let Some(actions) = &self.actions else {
            return error(StatusCode::FORBIDDEN, "actions are off: set [http] console_actions = true and console_token to allow them");
        };
        let authorization =
            request.headers().get(hyper::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if !actions.authorized(authorization) {
            return error(
                StatusCode::UNAUTHORIZED,
                "the bearer token is missing or wrong: it is [http] console_token",
            );
        }
        let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "the body is not a JSON object of at most 4 KB",
                )
            }
        };
        let window: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let Some(since) = window["since"].as_str() else {
            return error(
                StatusCode::BAD_REQUEST,
                "give the window as {\"since\": \"1h\", \"until\": null}",
            );
        };
        match actions.start(kind, since, window["until"].as_str()) {
            Ok(()) => {
                let mut r = ok(json!({"started": true}));
                *r.status_mut() = StatusCode::ACCEPTED;
                r
            }
            Err(e) => error(StatusCode::CONFLICT, &e),
        }
    }
}

/// Events relayed per outbox table (`[http] table_metrics`), newest first; `walrelay status
/// --tables` reads it too.
pub fn tables(metrics: &Metrics) -> Value {
    let mut tables: Vec<_> = metrics.tables().into_iter().collect();
    tables.sort_by_key(|t| std::cmp::Reverse(t.1.last_commit_micros));
    let now = unix_micros();
    let rows: Vec<Value> = tables
        .iter()
        .map(|(table, t)| {
            json!({
                "table": &**table,
                "events": t.events,
                "last_event_commit": rfc3339(t.last_commit_micros),
                "last_event_age_s": (now - t.last_commit_micros).max(0) as f64 / 1e6,
            })
        })
        .collect();
    json!({ "tables": rows })
}

fn ok(body: Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
        .headers_mut()
        .insert(hyper::header::CACHE_CONTROL, hyper::header::HeaderValue::from_static("no-store"));
    response
}

fn error(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let mut response = ok(json!({ "error": message }));
    *response.status_mut() = status;
    response
}

/// An embedded file (a `&'static str`, not copied) or the page as filled in.
fn asset(body: impl Into<Bytes>, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    let headers = response.headers_mut();
    headers
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static(content_type));
    // The page loads nothing from anywhere else.
    headers.insert(
        hyper::header::CONTENT_SECURITY_POLICY,
        hyper::header::HeaderValue::from_static(
            "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:",
        ),
    );
    response
}

fn escape_html(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// `%XX` escapes decoded; `None` when they do not make UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_escapes_are_decoded_and_broken_ones_refused() {
        assert_eq!(percent_decode("a%2Fb%20c").as_deref(), Some("a/b c"));
        assert_eq!(percent_decode("plain-id").as_deref(), Some("plain-id"));
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%ff"), None);
        assert_eq!(percent_decode("ab%2"), None);
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(
            escape_html("<a href=\"x\">&</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;"
        );
    }
}
