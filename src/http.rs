//! The operational HTTP endpoint: `/healthz` (the process is alive), `/readyz` (streaming,
//! broker reachable, lag under the limit) and `/metrics` (Prometheus text).
//!
//! Hand-written on purpose: three fixed GET routes do not justify an HTTP framework.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::config::HttpConfig;
use crate::error::{Error, Result};
use crate::metrics::Metrics;

/// Binds `[http] listen` and serves in a background task; returns the bound address.
pub async fn serve(cfg: &HttpConfig, metrics: Arc<Metrics>) -> Result<SocketAddr> {
    let listener = TcpListener::bind(cfg.listen).await.map_err(|e| {
        Error::definite_with(
            format!("cannot listen on {}", cfg.listen),
            "change [http] listen, or free the port",
            e,
        )
    })?;
    let bound = listener.local_addr().map_err(|e| Error::transient("http listener", e))?;
    let max_lag = cfg.ready_max_lag_bytes;
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { continue };
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let n = socket.read(&mut buf).await.unwrap_or(0);
                let response = respond(&buf[..n], &metrics, max_lag);
                let _ = socket.write_all(response.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    tracing::info!(%bound, "http endpoint listening");
    Ok(bound)
}

fn respond(request: &[u8], metrics: &Metrics, max_lag: u64) -> String {
    let line = request.split(|&b| b == b'\r' || b == b'\n').next().unwrap_or_default();
    let path = line.strip_prefix(b"GET ").and_then(|rest| rest.split(|&b| b == b' ').next());
    let (status, kind, body) = match path {
        Some(b"/healthz") => ("200 OK", "text/plain", "ok\n".to_string()),
        Some(b"/readyz") => match not_ready(metrics, max_lag) {
            None => ("200 OK", "text/plain", "ready\n".to_string()),
            Some(why) => ("503 Service Unavailable", "text/plain", format!("not ready: {why}\n")),
        },
        Some(b"/metrics") => ("200 OK", "text/plain; version=0.0.4", metrics.render()),
        _ => ("404 Not Found", "text/plain", "not found\n".to_string()),
    };
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn not_ready(m: &Metrics, max_lag: u64) -> Option<String> {
    if !m.streaming.load(Relaxed) {
        return Some("not streaming from the slot".into());
    }
    if !m.broker_up.load(Relaxed) {
        return Some("no Kafka broker reachable".into());
    }
    let lag = m.lag_bytes();
    (lag > max_lag)
        .then(|| format!("lag {lag} bytes is over [http] ready_max_lag_bytes = {max_lag}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_is_ok_metrics_render_and_anything_else_is_not_found() {
        let m = Metrics::new();
        assert!(respond(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n", &m, 0)
            .starts_with("HTTP/1.1 200 OK"));
        let metrics = respond(b"GET /metrics HTTP/1.1\r\n\r\n", &m, 0);
        assert!(metrics.starts_with("HTTP/1.1 200 OK") && metrics.contains("walrelay_lag_bytes 0"));
        assert!(respond(b"GET /nope HTTP/1.1\r\n\r\n", &m, 0).starts_with("HTTP/1.1 404"));
        assert!(respond(b"", &m, 0).starts_with("HTTP/1.1 404"));
    }

    #[test]
    fn readyz_needs_streaming_a_broker_and_lag_under_the_limit() {
        let m = Metrics::new();
        let ready = |m: &Metrics| respond(b"GET /readyz HTTP/1.1\r\n\r\n", m, 100);
        assert!(ready(&m).contains("not streaming"));
        m.streaming.store(true, Relaxed);
        assert!(ready(&m).contains("no Kafka broker"));
        m.broker_up.store(true, Relaxed);
        m.server_wal_end.store(1000, Relaxed);
        assert!(ready(&m).contains("lag 1000 bytes"));
        m.confirmed_lsn.store(950, Relaxed);
        assert!(ready(&m).starts_with("HTTP/1.1 200 OK"));
    }
}
