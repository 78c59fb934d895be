//! The operational HTTP endpoint. `/healthz` answers while the process is alive.
//!
//! Hand-written on purpose: a few fixed GET routes do not justify an HTTP framework.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::error::{Error, Result};

/// Binds `listen` and serves in a background task.
pub async fn serve(listen: SocketAddr) -> Result<SocketAddr> {
    let listener = TcpListener::bind(listen).await.map_err(|e| {
        Error::definite_with(
            format!("cannot listen on {listen}"),
            "change [http] listen, or free the port",
            e,
        )
    })?;
    let bound = listener.local_addr().map_err(|e| Error::transient("http listener", e))?;
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { continue };
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let n = socket.read(&mut buf).await.unwrap_or(0);
                let response = respond(&buf[..n]);
                let _ = socket.write_all(response.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    tracing::info!(%bound, "http endpoint listening");
    Ok(bound)
}

fn respond(request: &[u8]) -> String {
    let line = request.split(|&b| b == b'\r' || b == b'\n').next().unwrap_or_default();
    let (status, body) = match line {
        b"GET /healthz HTTP/1.1" | b"GET /healthz HTTP/1.0" => ("200 OK", "ok\n"),
        _ => ("404 Not Found", "not found\n"),
    };
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_is_ok_and_anything_else_is_not_found() {
        assert!(respond(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").starts_with("HTTP/1.1 200 OK"));
        assert!(respond(b"GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(respond(b"").starts_with("HTTP/1.1 404"));
    }
}
