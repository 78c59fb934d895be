//! `walrelay status --tables`: each outbox table (by name, and what the patterns match now),
//! whether the publication carries it, and — from the running relay's `/api/v1/tables` — how
//! many events it relayed and when the newest was committed.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use serde_json::{json, Value};

use crate::config::Config;
use crate::error::Result;
use crate::source::{catalog, Control};

/// How long the relay's endpoint has to answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// The tables as rows of JSON objects, and a note on where the counts came from.
pub(super) async fn tables(config: &Config, control: &Control) -> Result<(Vec<Value>, String)> {
    let tables = catalog::outbox_tables(control, &config.outbox).await?;
    let publication = catalog::publication(control, &config.source.publication).await?;
    let (counts, note) = match &config.http {
        None => {
            (Value::Null, "events: - (no [http] listen: the relay serves no counts)".to_string())
        }
        Some(http) => match ask_relay(http.listen, http.console_token.as_deref()).await {
            Ok(v) => (v, format!("events: from the relay at {}", http.listen)),
            Err(e) => (
                Value::Null,
                format!("events: - (the relay at {} did not answer: {e})", http.listen),
            ),
        },
    };
    // By table name: a thousand tenants' tables are matched in one pass, not one search each.
    let by_table: std::collections::HashMap<&str, &Value> = counts["tables"]
        .as_array()
        .map(|rows| rows.iter().filter_map(|r| Some((r["table"].as_str()?, r))).collect())
        .unwrap_or_default();
    let rows = tables
        .iter()
        .map(|t| {
            let name = t.name.to_string();
            let carried = publication.as_ref().map(|p| p.all_tables || p.entry_for(t).is_some());
            let by = if config.outbox.tables.contains(&t.name) { "name" } else { "pattern" };
            let c = by_table.get(name.as_str());
            json!({
                "table": name,
                "by": by,
                "in_publication": carried,
                "events": c.map(|c| c["events"].clone()),
                "last_event_commit": c.map(|c| c["last_event_commit"].clone()),
                "last_event_age_s": c.map(|c| c["last_event_age_s"].clone()),
            })
        })
        .collect();
    Ok((rows, note))
}

/// The rows as an aligned table.
pub(super) fn render(rows: &[Value], note: &str) -> String {
    let mut lines = vec![[
        "table".to_string(),
        "by".to_string(),
        "publication".to_string(),
        "events".to_string(),
        "last event (commit)".to_string(),
    ]];
    for r in rows {
        let text = |v: &Value| match v {
            Value::Null => "-".to_string(),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let publication = match r["in_publication"].as_bool() {
            Some(true) => "yes".to_string(),
            Some(false) => "NO: not relayed".to_string(),
            None => "- (no publication)".to_string(),
        };
        let last = match (r["last_event_commit"].as_str(), r["last_event_age_s"].as_f64()) {
            (Some(t), Some(age)) => format!("{t} ({age:.0} s ago)"),
            _ => "-".to_string(),
        };
        lines.push([text(&r["table"]), text(&r["by"]), publication, text(&r["events"]), last]);
    }
    let widths: Vec<usize> =
        (0..5).map(|i| lines.iter().map(|l| l[i].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for l in &lines {
        let cells: Vec<String> =
            l.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}", w = *w)).collect();
        out += cells.join("  ").trim_end();
        out.push('\n');
    }
    out += note;
    out.push('\n');
    out
}

/// `GET /api/v1/tables` of the relay listening on `listen` (an unspecified address is asked
/// on the loopback), with the console's token when there is one (a non-loopback console needs
/// it).
async fn ask_relay(listen: SocketAddr, token: Option<&str>) -> std::result::Result<Value, String> {
    let mut addr = listen;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let ask = async {
        let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let io = hyper_util::rt::TokioIo::new(stream);
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(io).await.map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let mut request =
            hyper::Request::get("/api/v1/tables").header(hyper::header::HOST, addr.to_string());
        if let Some(token) = token {
            request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request.body(Empty::<Bytes>::new()).map_err(|e| e.to_string())?;
        let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("HTTP {}", response.status()));
        }
        let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        serde_json::from_slice(&body).map_err(|e| format!("not JSON: {e}"))
    };
    match tokio::time::timeout(ASK_TIMEOUT, ask).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {} s", ASK_TIMEOUT.as_secs())),
    }
}
