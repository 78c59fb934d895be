//! Framed record values decoded as an independent consumer does: confluent-kafka's Python
//! deserializers (tests/consumers/registry_decode.py) against a registry's Confluent-compatible
//! API, an implementation that shares nothing with walrelay.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use super::scratch_dir;

/// Decodes framed record values (magic byte 0, 4-byte schema id, for protobuf the message
/// indexes, then the payload) the way a Python consumer does, with confluent-kafka's
/// `AvroDeserializer`, `JSONDeserializer` or `ProtobufDeserializer` against `ccompat_url`
/// (`kind`: "avro", "json" or "protobuf"; `topic` makes the `SerializationContext`). One JSON
/// value per record, bytes as base64; protobuf as `json_format.MessageToDict` with the .proto
/// field names (so int64 is a string). Panics naming every record the deserializer refused:
/// [`try_decode_with_confluent`] returns them.
pub fn decode_with_confluent(
    kind: &str,
    ccompat_url: &str,
    topic: &str,
    records: &[Vec<u8>],
) -> Vec<Value> {
    let decoded = try_decode_with_confluent(kind, ccompat_url, topic, records);
    let failed: Vec<String> = decoded
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.as_ref().err().map(|e| format!("record {i}: {e}")))
        .collect();
    assert!(
        failed.is_empty(),
        "confluent-kafka's {kind} deserializer refused:\n{}",
        failed.join("\n")
    );
    decoded.into_iter().map(Result::unwrap).collect()
}

/// [`decode_with_confluent`], each record's refusal as Err (the Python exception's type and
/// message). Gives up after two minutes (the script's registry client has 20 s per request).
pub fn try_decode_with_confluent(
    kind: &str,
    ccompat_url: &str,
    topic: &str,
    records: &[Vec<u8>],
) -> Vec<Result<Value, String>> {
    // Hex, not base64: src/bin/quickstart.rs builds this module too, without the dev-dependencies.
    let input: String = records
        .iter()
        .map(|r| {
            let value: String = r.iter().map(|b| format!("{b:02x}")).collect();
            format!("{}\n", json!({ "value": value }))
        })
        .collect();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/consumers/registry_decode.py");
    let work = scratch_dir("registry_decode");
    let mut child = Command::new(super::pyenv_python())
        .arg(script)
        .args([kind, ccompat_url, topic])
        .arg(&work)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start registry_decode.py");
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    // Written from a thread: a large input would fill the pipe while the script's answers fill
    // the other one.
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let deadline = Duration::from_secs(120);
    let out = match rx.recv_timeout(deadline) {
        Ok(out) => out.expect("registry_decode.py runs"),
        Err(_) => {
            super::process::signal(pid, "KILL");
            panic!("registry_decode.py {kind} {ccompat_url} did not finish within {deadline:?}");
        }
    };
    let _ = writer.join();
    assert!(
        out.status.success(),
        "registry_decode.py {kind} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let decoded: Vec<Result<Value, String>> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("registry_decode.py printed non-JSON ({e}): {l}"));
            match v.get("error").and_then(Value::as_str) {
                Some(e) => Err(e.to_string()),
                None => Ok(v["value"].take()),
            }
        })
        .collect();
    assert_eq!(
        decoded.len(),
        records.len(),
        "registry_decode.py answered {} of {} records; stderr:\n{}",
        decoded.len(),
        records.len(),
        String::from_utf8_lossy(&out.stderr)
    );
    decoded
}
