//! An OTLP/HTTP receiver for the `tracing-export` shape: answers every POST with 200 and counts
//! the bytes, so the relay's export costs what it would against a collector on the same host.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Starts the receiver; its port and the request bodies' total bytes so far.
pub async fn start() -> (u16, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the OTLP sink");
    let port = listener.local_addr().expect("its address").port();
    let received = Arc::new(AtomicU64::new(0));
    let total = received.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            tokio::spawn(serve(conn, total.clone()));
        }
    });
    (port, received)
}

async fn serve(mut conn: tokio::net::TcpStream, total: Arc<AtomicU64>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    let (head_end, length) = loop {
        match conn.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            break (i + 4, length);
        }
    };
    while buf.len() < head_end + length {
        match conn.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    total.fetch_add(length as u64, Relaxed);
    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
}
