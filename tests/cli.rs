//! The command line: bad configuration is refused at start-up, naming the key and the fix.

use std::process::Command;

fn run_with_config(text: &str) -> (Option<i32>, String) {
    let dir = crate::support::scratch_dir("cli");
    let path = dir.join("walrelay.toml");
    std::fs::write(&path, text).unwrap();
    let out = Command::new(crate::support::relay::walrelay_bin())
        .args(["run", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

const BASE: &str = "[source]\nurl = \"postgres://walrelay:hunter2@127.0.0.1:1/app\"\n[kafka]\n\"bootstrap.servers\" = \"127.0.0.1:1\"\n";

#[test]
fn unknown_router_key_is_refused_with_its_name() {
    let (code, err) =
        run_with_config(&format!("{BASE}[router]\n\"route.topic.replacment\" = \"x\"\n"));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("route.topic.replacment"), "{err}");
}

#[test]
fn unsafe_acks_setting_is_refused_and_the_password_is_not_printed() {
    let (code, err) = run_with_config(&format!("{BASE}acks = 1\n"));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("acks") && err.contains("remove the key"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}

#[test]
fn missing_config_file_is_reported_with_its_path() {
    let out = Command::new(crate::support::relay::walrelay_bin())
        .args(["run", "--config", "/nonexistent/walrelay.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/walrelay.toml"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_ok_while_the_relay_runs() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = crate::common::Setup::new("healthz").await;
    let port = crate::support::free_port();
    let config = s.config_with("", "", &format!("[http]\nlisten = \"127.0.0.1:{port}\"\n"));
    let mut relay = crate::support::relay::RelayProcess::start(&config);
    let ok = crate::support::wait_until(
        "/healthz answers 200",
        std::time::Duration::from_secs(30),
        || async move {
            let Ok(mut conn) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
                return false;
            };
            if conn.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await.is_err() {
                return false;
            }
            let mut response = String::new();
            let _ = conn.read_to_string(&mut response).await;
            response.starts_with("HTTP/1.1 200 OK") && response.ends_with("ok\n")
        },
    )
    .await;
    assert!(ok, "relay log:\n{}", relay.log());
    assert_eq!(relay.terminate(), Some(0));
}

#[test]
fn invalid_librdkafka_property_stops_at_start_up_naming_it() {
    // PostgreSQL at port 1 is unreachable: the error must come before any connection attempt,
    // and it is bad input, so exit code 2 like every configuration error.
    let (code, err) = run_with_config(&format!("{BASE}\"compression.type\" = \"brotli\"\n"));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("compression.type") && err.contains("[kafka]"), "{err}");
}
