//! The console: a page at `/` and the JSON API it reads (`/api/v1/...`), served by the HTTP
//! endpoint on its own thread, for an operator who wants to look rather than read metrics.
//!
//! * `/` — the page (`assets/`: HTML, CSS and JavaScript embedded in the binary, no external
//!   asset), with the overview rendered as text by the server, so it reads without JavaScript
//!   too;
//! * `/api/v1/overview` — the guarantee, the slot as PostgreSQL reports it, the relay's positions
//!   and lag, the broker as the relay sees it, in-flight records, counts;
//! * `/api/v1/history` — the last hour of lag, throughput and in-flight records ([`history`]);
//! * `/api/v1/problems` — the last warnings and errors with their hints ([`log`]), dead letters by
//!   reason and the latest ones;
//! * `/api/v1/tables` — events relayed per outbox table;
//! * `/api/v1/events/<id>` — where one event is: its row, where the router puts it, where Kafka
//!   has it (`events.rs`, [`crate::audit::lookup`]); rate-limited ([`rate`]);
//! * `/api/v1/actions` — a dry-run replay or an audit, only with `[http] console = "actions"`
//!   and its bearer token ([`actions`]).
//!
//! It is mounted on the HTTP endpoint ([`crate::http::Routes`]) unless `[http] console` resolved
//! to off. Every request passes the Host check first, and on a non-loopback listen every
//! request for data needs the token ([`access`]).
//!
//! Nothing here touches the relay's thread: values are read from [`Metrics`] (atomics and
//! snapshots the relay publishes), and what needs PostgreSQL or Kafka (a lookup, an action)
//! uses connections of its own. No secret reaches a response: the source URL is shown as
//! `check` shows it, and log lines never hold secrets.

pub mod access;
pub mod actions;
mod events;
pub mod history;
pub mod log;
pub mod rate;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

use self::access::Access;
use self::actions::{Actions, Kind};
use self::history::History;
use self::rate::Bucket;
use crate::clock::unix_micros;
use crate::config::{redact_url, Config, ConsoleMode};
use crate::duration::rfc3339;
use crate::http::{Reply, Routes};
use crate::metrics::Metrics;

const PAGE: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/console.js");
const STYLE: &str = include_str!("assets/console.css");

/// The largest request body read (an action's window).
const MAX_BODY: usize = 4096;

/// The console of the relay running `config` (read from `config_path`), to mount on its HTTP
/// endpoint; `None` when `[http] console` resolved to off, which is logged with why.
pub fn mount(
    config: Arc<Config>,
    config_path: PathBuf,
    metrics: Arc<Metrics>,
) -> Option<Box<dyn Routes>> {
    let http = config.http.as_ref()?;
    match http.console {
        ConsoleMode::Off if http.console_needs_token() && http.console_token.is_none() => {
            tracing::info!(
                listen = %http.listen,
                "the console is off: [http] listen is not a loopback address and no console_token is set (set WALRELAY_HTTP_CONSOLE_TOKEN to serve it behind the token)"
            );
            None
        }
        ConsoleMode::Off => {
            tracing::info!("the console is off: [http] console = \"off\"");
            None
        }
        ConsoleMode::Read | ConsoleMode::Actions => {
            Some(Box::new(Console::new(config.clone(), config_path, metrics)))
        }
    }
}

struct Console {
    config: Arc<Config>,
    metrics: Arc<Metrics>,
    history: Arc<History>,
    access: Access,
    actions: Option<Actions>,
    started_micros: i64,
    /// One lookup at a time: each opens a connection and a Kafka reader.
    lookups: Semaphore,
    lookup_rate: Bucket,
}

impl Routes for Console {
    fn owns(&self, path: &str) -> bool {
        matches!(path, "/" | "/console.js" | "/console.css") || path.starts_with("/api/v1/")
    }

    fn respond(
        &self,
        request: Request<Incoming>,
    ) -> Pin<Box<dyn Future<Output = Reply> + Send + '_>> {
        Box::pin(self.guarded(request))
    }

    /// Samples the history, on the runtime of the endpoint's thread.
    fn start(&self) {
        tokio::spawn(self.history.clone().sample(self.metrics.clone()));
    }
}

impl Console {
    fn new(config: Arc<Config>, config_path: PathBuf, metrics: Arc<Metrics>) -> Console {
        let http = config.http.as_ref().expect("mounted only with [http]");
        let actions = (http.console == ConsoleMode::Actions).then(|| Actions::new(config_path));
        Console {
            access: Access::new(http),
            config,
            metrics,
            history: Arc::new(History::default()),
            actions,
            started_micros: unix_micros(),
            lookups: Semaphore::new(1),
            lookup_rate: Bucket::new(events::BURST, events::EVERY),
        }
    }

    /// The Host check, then the token where data needs it, then the route.
    async fn guarded(&self, request: Request<Incoming>) -> Reply {
        if !self.access.host_allowed(&request) {
            return error(
                StatusCode::MISDIRECTED_REQUEST,
                "this Host is not one of this relay's names: open the console at localhost or an address of the relay, or add the name to [http] hosts",
            );
        }
        if self.access.reads_need_token() && !self.access.authorized(&request) {
            // The page's code and style hold no data; the page itself is sent without the
            // server's summary, and its script asks for the token.
            return match request.uri().path() {
                "/console.js" | "/console.css" | "/" => self.respond(request, false).await,
                _ => unauthorized(
                    "this console listens on a non-loopback address: every request needs the bearer token, [http] console_token",
                ),
            };
        }
        self.respond(request, true).await
    }

    /// Answers a request that passed [`Console::guarded`]; `with_data` false: only the page's
    /// code, style and a page without the summary.
    async fn respond(&self, request: Request<Incoming>, with_data: bool) -> Reply {
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
            "/" => self.page(with_data),
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

    /// The page; without data, its summary says the token is needed (and the title names no
    /// slot).
    fn page(&self, with_data: bool) -> Reply {
        let src = &self.config.source;
        let (title, text) = match with_data {
            true => (
                format!("walrelay · slot {} · publication {}", src.slot, src.publication),
                self.server_text(),
            ),
            false => (
                "walrelay".to_string(),
                "This console needs its token on this address: enter it above ([http] console_token), or send it as Authorization: Bearer ….".to_string(),
            ),
        };
        let html = PAGE
            .replace("{{TITLE}}", &escape_html(&title))
            .replace("{{SERVER_TEXT}}", &escape_html(&text));
        asset(html, "text/html; charset=utf-8")
    }

    /// The overview as lines of text: the page without JavaScript.
    fn server_text(&self) -> String {
        let o = self.overview();
        let mut lines = vec![
            format!("as of      {}", o["now"].as_str().unwrap_or("-")),
            format!("guarantee  {}", o["guarantee"].as_str().unwrap_or("-")),
            format!("sink       {}", o["sink"].as_str().unwrap_or("-")),
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
            "sink": self.config.delivery.sink.name(),
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

    async fn start_action(&self, kind: Kind, request: Request<Incoming>) -> Reply {
        let Some(actions) = &self.actions else {
            return error(StatusCode::FORBIDDEN, "actions are off: set [http] console = \"actions\" (with console_token) to allow them");
        };
        if !self.access.authorized(&request) {
            return unauthorized(
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

fn ok(body: Value) -> Reply {
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

fn error(status: StatusCode, message: &str) -> Reply {
    let mut response = ok(json!({ "error": message }));
    *response.status_mut() = status;
    response
}

/// 401, with the scheme the token is asked by.
fn unauthorized(message: &str) -> Reply {
    let mut response = error(StatusCode::UNAUTHORIZED, message);
    response
        .headers_mut()
        .insert(hyper::header::WWW_AUTHENTICATE, hyper::header::HeaderValue::from_static("Bearer"));
    response
}

/// An embedded file (a `&'static str`, not copied) or the page as filled in.
fn asset(body: impl Into<Bytes>, content_type: &'static str) -> Reply {
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
