//! The command line: bad configuration is refused at start-up, naming the key and the fix.

use std::process::Command;

fn run_with_config(text: &str) -> (Option<i32>, String) {
    let dir = crate::support::scratch_dir("cli");
    let path = dir.join("walrelay.toml");
    std::fs::write(&path, text).unwrap();
    let out = Command::new(crate::support::process::walrelay_bin())
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
    let out = Command::new(crate::support::process::walrelay_bin())
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
    let mut relay = crate::support::process::RelayProcess::start(&config);
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

/// Runs `walrelay <command> --config <text>` (or `import-debezium <file>` with `file_name`)
/// with extra environment; returns the exit code and stdout + stderr.
/// Extra environment variables for one run (names and values may be non-UTF-8).
type Env<'a> = Vec<(&'a std::ffi::OsStr, &'a std::ffi::OsStr)>;

fn walrelay(args: &[&str], file: Option<(&str, &str)>, env: &Env) -> (Option<i32>, String) {
    let dir = crate::support::scratch_dir("cli");
    let mut command = Command::new(crate::support::process::walrelay_bin());
    command.args(args);
    if let Some((name, text)) = file {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        command.arg(&path);
    }
    let out = command.envs(env.iter().copied()).current_dir(&dir).output().unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

#[test]
fn bad_input_exits_2_naming_the_key_and_the_fix_without_printing_the_password() {
    use std::os::unix::ffi::OsStrExt;
    let os = |b: &'static [u8]| std::ffi::OsStr::from_bytes(b);
    let with = |extra: &str| format!("{BASE}{extra}");
    let cases: Vec<(&str, String, Env, &[&str])> = vec![
        (
            "check",
            BASE.replace("[kafka]", "slott = \"x\"\n[kafka]"),
            vec![],
            &["slott", "known keys: url, slot"],
        ),
        (
            "run",
            with("[limits]\ninflight_records = \"many\"\n"),
            vec![],
            &["inflight_records", "whole number"],
        ),
        ("check", with("acks = 1\n"), vec![], &["acks", "remove the key"]),
        (
            "run",
            with("\"compression.type\" = \"brotli\"\n"),
            vec![],
            &["compression.type", "CONFIGURATION.md"],
        ),
        (
            "check",
            "[source]\nurl = \"postgres://walrelay:hunter2@127.0.0.1:1/app\"\n".into(),
            vec![],
            &["bootstrap.servers", "set \"bootstrap.servers\""],
        ),
        ("status", with("[http]\nlisten = \"nowhere\"\n"), vec![], &["listen", "127.0.0.1:9187"]),
        ("check", with("[retention]\nkeep = \"7\"\n"), vec![], &["keep", "7d"]),
        (
            "check",
            BASE.into(),
            vec![(os(b"WALRELAY_SOURCE_SLOTT"), os(b"x"))],
            &["slott", "known keys"],
        ),
        (
            "check",
            BASE.into(),
            vec![(os(b"WALRELAY_KAFKA_SASL__PASSWORD"), os(b"hunter2\xff"))],
            &["WALRELAY_KAFKA_SASL__PASSWORD", "not UTF-8", "set it to UTF-8 text"],
        ),
        // A syntax error in the URL's line must not quote that line, password and all.
        (
            "check",
            BASE.replace("@127.0.0.1", "@127\".0.0.1"),
            vec![],
            &["not valid TOML: line 2, column 40: expected newline"],
        ),
    ];
    for (command, text, env, needles) in cases {
        let (code, out) = walrelay(&[command, "--config"], Some(("walrelay.toml", &text)), &env);
        assert_eq!(code, Some(2), "{command} with\n{text}\n{out}");
        for needle in needles {
            assert!(out.contains(needle), "{command}: {needle:?} not in\n{out}");
        }
        assert!(!out.contains("hunter2"), "{command}: password printed:\n{out}");
    }
}

/// The connector's settings under a misspelt key are named, never printed whole
/// (`"database.password":"secret"` included).
#[test]
fn import_debezium_names_settings_under_a_misspelt_key_without_printing_them() {
    let leak = r#"{"name": "outbox", "config2": {"connector.class": "io.debezium.connector.postgresql.PostgresConnector", "database.user": "dbz", "database.password": "hunter2"}}"#;
    let (code, out) = walrelay(&["import-debezium"], Some(("leak.json", leak)), &Vec::new());
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("option `config2` is an object") && out.contains("\"config\""), "{out}");
    assert!(!out.contains("hunter2"), "{out}");
}

#[test]
fn unreachable_servers_exit_1_with_a_hint_and_an_unrelated_non_utf8_variable_is_ignored() {
    use std::os::unix::ffi::OsStrExt;
    let junk = vec![(
        std::ffi::OsStr::from_bytes(b"UNRELATED_\xff"),
        std::ffi::OsStr::from_bytes(b"\xfe\xff"),
    )];
    for command in ["check", "status"] {
        let (code, out) = walrelay(&[command, "--config"], Some(("walrelay.toml", BASE)), &junk);
        assert_eq!(code, Some(1), "{command}:\n{out}");
        assert!(out.contains("127.0.0.1:1") && out.contains("fix: check [source] url"), "{out}");
        assert!(out.contains("walrelay:****@127.0.0.1:1"), "{command}:\n{out}");
        assert!(!out.contains("hunter2") && !out.contains("panicked"), "{command}:\n{out}");
    }
}
