//! The operational surface while running: /metrics counts what actually happened, /readyz
//! reports streaming.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::Setup;
use crate::support::relay::RelayProcess;
use crate::support::{free_port, wait_until};

async fn get(port: u16, path: &str) -> Option<String> {
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    conn.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes()).await.ok()?;
    let mut response = String::new();
    conn.read_to_string(&mut response).await.ok()?;
    Some(response)
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l[name.len() + 1..].parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_match_the_records_read_back_and_readyz_reports_streaming() {
    let s = Setup::new("metrics").await;
    let port = free_port();
    let config = s.config_with("", "", &format!("[http]\nlisten = \"127.0.0.1:{port}\"\n"));
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let ready = wait_until("/readyz answers 200", Duration::from_secs(30), || async move {
        get(port, "/readyz").await.is_some_and(|r| r.starts_with("HTTP/1.1 200"))
    })
    .await;
    assert!(ready, "{}", s.diagnostics(&relay));
    s.insert_events("Order", "o-1", 40).await;
    let read = s.read("Order", 40).await;
    assert_eq!(read.len(), 40, "{}", s.diagnostics(&relay));

    let topic = s.topic("Order");
    let published = format!("walrelay_records_published_total{{topic=\"{topic}\"}}");
    let last_seen = std::sync::Mutex::new(String::new());
    let (seen, published_ref) = (&last_seen, published.as_str());
    let counted =
        wait_until("metrics count 40 published records", Duration::from_secs(10), || async move {
            let text = get(port, "/metrics").await.unwrap_or_default();
            let done = metric(&text, published_ref) == Some(40.0);
            *seen.lock().unwrap() = text;
            done
        })
        .await;
    let last = last_seen.into_inner().unwrap();
    assert!(counted, "metrics:\n{last}");
    assert_eq!(metric(&last, "walrelay_commit_to_ack_seconds_count"), Some(40.0), "{last}");
    assert!(metric(&last, "walrelay_transactions_total").unwrap() >= 40.0, "{last}");
    assert_eq!(metric(&last, "walrelay_delivery_errors_total"), Some(0.0), "{last}");
    assert_eq!(metric(&last, "walrelay_dead_lettered_total"), Some(0.0), "{last}");
    assert!(metric(&last, "walrelay_confirmed_lsn").unwrap() > 0.0, "{last}");
    assert_eq!(metric(&last, "walrelay_streaming"), Some(1.0), "{last}");
    let p99_bucket = last
        .lines()
        .find(|l| l.starts_with("walrelay_commit_to_ack_seconds_bucket{le=\"1\"}"))
        .unwrap();
    println!("metrics after 40 events: {published} 40; {p99_bucket}");
    let readyz = get(port, "/readyz").await.unwrap();
    assert!(readyz.starts_with("HTTP/1.1 200"), "{readyz}");
    assert_eq!(relay.terminate(), Some(0));
}
