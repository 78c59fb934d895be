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
    let work = scratch_dir("registry_decode");
    let work = work.to_str().expect("a UTF-8 scratch path");
    let lines = run_decoder("registry_decode.py", &[kind, ccompat_url, topic, work], &input);
    let decoded: Vec<Result<Value, String>> = lines
        .into_iter()
        .map(|mut v| match v.get("error").and_then(Value::as_str) {
            Some(e) => Err(e.to_string()),
            None => Ok(v["value"].take()),
        })
        .collect();
    assert_eq!(
        decoded.len(),
        records.len(),
        "registry_decode.py answered {} of {} records",
        decoded.len(),
        records.len(),
    );
    decoded
}

/// Avro values decoded as Apicurio's deserializer reads them (tests/consumers/apicurio_decode.py):
/// the id from the frame or the headers by `handler` ("4-byte", "8-byte", "headers") and `use_id`
/// ("contentId", "globalId"), the writer schema fetched by that id from Apicurio's own API
/// (`api_url`: its `…/apis/registry/v2`), the body read under it with fastavro. Per record, the
/// decoded value and the id read; panics naming every record it could not decode.
pub fn decode_as_apicurio(
    api_url: &str,
    (handler, use_id): (&str, &str),
    records: &[(Vec<u8>, Vec<(String, Vec<u8>)>)],
) -> Vec<(Value, u64)> {
    let hex = |b: &[u8]| b.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let input: String = records
        .iter()
        .map(|(value, headers)| {
            let headers: serde_json::Map<String, Value> =
                headers.iter().map(|(k, v)| (k.clone(), Value::from(hex(v)))).collect();
            format!("{}\n", json!({ "value": hex(value), "headers": headers }))
        })
        .collect();
    let lines = run_decoder("apicurio_decode.py", &[api_url, handler, use_id], &input);
    assert_eq!(lines.len(), records.len(), "apicurio_decode.py answered {lines:?}");
    let failed: Vec<String> = lines
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.get("error").map(|e| format!("record {i}: {e}")))
        .collect();
    assert!(failed.is_empty(), "Apicurio's way of reading refused:\n{}", failed.join("\n"));
    lines.into_iter().map(|mut v| (v["value"].take(), v["id"].as_u64().expect("an id"))).collect()
}

/// Runs tests/consumers/`script` with `args`, `input` on its stdin; one JSON value per line it
/// printed. Gives up after two minutes (the scripts' registry requests have 20 s each).
fn run_decoder(script: &str, args: &[&str], input: &str) -> Vec<Value> {
    let path = format!("{}/tests/consumers/{script}", env!("CARGO_MANIFEST_DIR"));
    let mut child = Command::new(super::pyenv_python())
        .arg(&path)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {script}: {e}"));
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    // Written from a thread: a large input would fill the pipe while the script's answers fill
    // the other one.
    let input = input.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let deadline = Duration::from_secs(120);
    let out = match rx.recv_timeout(deadline) {
        Ok(out) => out.unwrap_or_else(|e| panic!("{script} runs: {e}")),
        Err(_) => {
            super::process::signal(pid, "KILL");
            panic!("{script} {args:?} did not finish within {deadline:?}");
        }
    };
    let _ = writer.join();
    assert!(
        out.status.success(),
        "{script} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{script} printed non-JSON ({e}): {l}"))
        })
        .collect()
}
