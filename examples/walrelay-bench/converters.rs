//! The value converters' shapes, `json-expanded` and `avro` (shapes.rs), and issue 49's figures:
//! the same backlog drained with the value written as JSON without schemas (what a Debezium team
//! on the JsonConverter runs) and as Avro against a schema registry (the AvroConverter, schemas
//! registered on first use), both with the payload expanded. Issue 49 asks for Avro's drain at
//! ≥ 0.9× JSON's and its peak RSS ≤ JSON's + 10 MB; the bench prints the figures beside those
//! targets, never a verdict.
//!
//! The registry is the test harness's shared Apicurio (tests/support/registry.rs), started once
//! before the first repetition when `avro` is asked for, so its JVM's start-up is in no drain.
//! Every avro drain writes to topics of its own, so walrelay registers each subject anew, as a
//! relay does once per subject and run.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::report::{thousands, Stat};
use crate::support::registry::registry;
use crate::Rep;

pub const JSON_EXPANDED: &str = "json-expanded";
pub const AVRO: &str = "avro";
pub const AVRO_LATEST: &str = "avro-latest";
/// `avro` with Avro keys (`key.converter = "avro"`).
pub const AVRO_KEYS: &str = "avro-keys";
/// `avro` with Apicurio's headers framing (`id_handler = "headers"`, `use_id = "globalId"`).
pub const AVRO_APICURIO: &str = "avro-apicurio";
/// Confluent's `ProtobufConverter` (`value.converter = "protobuf"`); `protobuf` is the envelope.
pub const PROTOBUF_REGISTRY: &str = "protobuf-registry";
/// Confluent's `JsonSchemaConverter` (`value.converter = "json-schema"`).
pub const JSON_SCHEMA_REGISTRY: &str = "json-schema-registry";

/// `avro-latest`'s contract, registered under every topic's subject before the drain: a name of
/// its own, some of the payload's fields (the others are skipped), numbers in unions the
/// payload's types widen into, and a field the payload lacks, with a default.
const CONTRACT: &str = r#"{"type":"record","name":"OrderEvent","namespace":"bench","fields":[{"name":"orderId","type":["null","long"],"default":null},{"name":"customerId","type":["null","string"],"default":null},{"name":"amount","type":["null","double"],"default":null},{"name":"currency","type":["null","string"],"default":null},{"name":"channel","type":"string","default":"web"}]}"#;

/// `json-expanded`: the plain table, the payload expanded into a structure, the value written by
/// the JsonConverter without the `{"schema": …, "payload": …}` wrapper.
pub const JSON_EXPANDED_OUTBOX: &str = r#"[outbox]
table = "public.outbox"

[router]
"table.expand.json.payload" = true

[debezium]
"value.converter" = "json"
"value.converter.schemas.enable" = false
"#;

/// `avro`: the same with the AvroConverter; [`registry_section`] follows it.
pub const AVRO_OUTBOX: &str = r#"[outbox]
table = "public.outbox"

[router]
"table.expand.json.payload" = true

[debezium]
"value.converter" = "avro"
"#;

/// `avro-keys`: `avro` with the keys written by the AvroConverter too.
pub const AVRO_KEYS_OUTBOX: &str = r#"[outbox]
table = "public.outbox"

[router]
"table.expand.json.payload" = true

[debezium]
"value.converter" = "avro"
"key.converter" = "avro"
"#;

/// `protobuf-registry`: the same with Confluent's ProtobufConverter.
pub const PROTOBUF_OUTBOX: &str = r#"[outbox]
table = "public.outbox"

[router]
"table.expand.json.payload" = true

[debezium]
"value.converter" = "protobuf"
"#;

/// `json-schema-registry`: the same with Confluent's JsonSchemaConverter, and `aggregatetype`
/// in an envelope field: Apicurio refuses the bare `oneOf` Confluent's converter writes for an
/// optional (expanded) payload at the root, and takes the envelope's object.
pub const JSON_SCHEMA_OUTBOX: &str = r#"[outbox]
table = "public.outbox"

[router]
"table.expand.json.payload" = true
"table.fields.additional.placement" = "aggregatetype:envelope:aggType"

[debezium]
"value.converter" = "json-schema"
"#;

/// Starts the shared registry if `shapes` has a registry shape: before any measurement, and not
/// at all otherwise.
pub async fn start_registry_if_asked(shapes: &[String]) {
    if shapes.iter().filter_map(|s| crate::shapes::Shape::parse(s)).any(|s| s.uses_registry()) {
        let r = tokio::task::spawn_blocking(registry).await.expect("start the schema registry");
        eprintln!("[bench] avro: {}", r.describe());
    }
}

/// The registry shapes' `[schema_registry]`: the registry's Confluent-compatible API and the
/// shape's `mode` lines (`auto_register = true`, the default, said all the same; for
/// `avro-latest`, values written under the subjects' latest schemas; for `avro-apicurio`,
/// Apicurio's framing).
pub async fn registry_section(mode: &str) -> String {
    let url = tokio::task::spawn_blocking(|| registry().ccompat_url()).await.expect("registry");
    format!("\n[schema_registry]\nurl = \"{url}\"\n{mode}\n")
}

/// `avro-latest`: [`CONTRACT`] under the subject of every topic of the drain with `prefix`,
/// before walrelay starts (systems.rs calls it when the config asks for the latest version).
pub async fn register_contracts(prefix: &str) {
    let subjects: Vec<String> = crate::workload::AGGREGATE_TYPES
        .iter()
        .map(|t| format!("{prefix}.outbox.event.{t}-value"))
        .collect();
    tokio::task::spawn_blocking(move || {
        for subject in &subjects {
            registry().register(subject, "AVRO", CONTRACT);
        }
    })
    .await
    .expect("register the contracts");
}

/// The registry's subjects now.
pub async fn subjects() -> Vec<String> {
    tokio::task::spawn_blocking(|| registry().subjects()).await.expect("registry subjects")
}

/// `json-expanded`, `avro` first and second, swapped every other repetition (as the plain
/// drains are), so neither always runs first; every other shape keeps its place.
pub fn order(shapes: &[String], repetition: u32) -> Vec<String> {
    let mut out = shapes.to_vec();
    let json = out.iter().position(|s| s == JSON_EXPANDED);
    let avro = out.iter().position(|s| s == AVRO);
    if let (Some(j), Some(a), 1) = (json, avro, repetition % 2) {
        out.swap(j, a);
    }
    out
}

/// After a drain, while its broker still runs: one record of its `Order` topic, described, so
/// that a run shows the values are what the shape says (JSON: its first bytes; Avro: Confluent's
/// framing, and whether the schema walrelay registered holds the expanded payload's fields).
/// `subjects_before`: the registry's subjects before an avro drain (None for JSON).
pub async fn describe_value(system: &str, subjects_before: Option<Vec<String>>) {
    let bootstrap = crate::fresh::bootstrap().to_string();
    let record = tokio::task::spawn_blocking(move || first_order_value(&bootstrap))
        .await
        .expect("read one value");
    let Some((topic, value)) = record else {
        eprintln!("[bench] {system}: no record of an Order topic could be read back");
        return;
    };
    let Some(before) = subjects_before else {
        let head = String::from_utf8_lossy(&value[..value.len().min(120)]).into_owned();
        eprintln!("[bench] {system}: a value ({} B): {head}…", value.len());
        return;
    };
    let framed = value.len() > 5 && value[0] == 0;
    let id = framed.then(|| i32::from_be_bytes([value[1], value[2], value[3], value[4]]));
    let subject = format!("{topic}-value");
    let latest = tokio::task::spawn_blocking({
        let subject = subject.clone();
        move || registry().latest(&subject)
    })
    .await
    .expect("registry latest");
    let new = subjects().await.into_iter().filter(|s| !before.contains(s)).count();
    let expanded = latest.as_ref().is_some_and(|(_, schema)| schema.contains("orderId"));
    eprintln!(
        "[bench] {system}: a value ({} B): magic byte 0 {framed}, schema id {id:?}; {subject}: \
         id {:?}, {new} subjects registered by this drain, the schema holds the expanded \
         payload (orderId): {expanded}",
        value.len(),
        latest.as_ref().map(|(id, _)| *id),
    );
}

/// The first record of the topic ending in `.outbox.event.Order` on `bootstrap`: (topic, value).
fn first_order_value(bootstrap: &str) -> Option<(String, Vec<u8>)> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", crate::support::unique("bench_peek"))
        .set("enable.auto.commit", "false")
        .set("log_level", "3")
        .create()
        .ok()?;
    let metadata = c.fetch_metadata(None, Duration::from_secs(10)).ok()?;
    let topic = metadata
        .topics()
        .iter()
        .map(|t| t.name().to_string())
        .find(|t| t.ends_with(".outbox.event.Order"))?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..crate::kafka::PARTITIONS {
        tpl.add_partition_offset(&topic, p, Offset::Beginning).ok()?;
    }
    c.assign(&tpl).ok()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            return Some((topic, m.payload()?.to_vec()));
        }
    }
    None
}

/// Issue 49's figures, when JSON and an Avro shape drained: per repetition the Avro drain ÷
/// JSON's and its peak RSS − JSON's, then the median [min–max], for `avro` and `avro-latest`
/// each. Empty otherwise.
pub fn render(reps: &[Rep]) -> String {
    use crate::shapes::Shape;
    let json = Shape::JsonExpanded.system();
    let mut rows = String::new();
    let mut repetitions = 0;
    for (avro, label) in [
        (Shape::Avro, "Avro, registry auto-register (`avro`)"),
        (Shape::AvroLatest, "Avro under registered contracts (`avro-latest`)"),
        (Shape::AvroApicurio, "Avro, the globalId in a header (`avro-apicurio`)"),
        (Shape::AvroKeys, "Avro values and keys (`avro-keys`)"),
        (Shape::ProtobufRegistry, "Protobuf, registry auto-register (`protobuf-registry`)"),
        (
            Shape::JsonSchemaRegistry,
            "JSON Schema in an envelope, registry auto-register (`json-schema-registry`)",
        ),
    ] {
        let avro = avro.system();
        let pairs: Vec<_> = reps
            .iter()
            .filter_map(|r| {
                let find = |name: &str| r.drains.iter().find(|d| d.system == name);
                Some((find(json)?, find(avro)?))
            })
            .collect();
        if pairs.is_empty() {
            continue;
        }
        repetitions = repetitions.max(pairs.len());
        let json_eps = Stat::of(pairs.iter().map(|(j, _)| j.events_per_s));
        let avro_eps = Stat::of(pairs.iter().map(|(_, a)| a.events_per_s));
        let ratio = Stat::of(pairs.iter().map(|(j, a)| a.events_per_s / j.events_per_s));
        let json_rss = Stat::of(pairs.iter().filter_map(|(j, _)| j.peak_rss_mb));
        let avro_rss = Stat::of(pairs.iter().filter_map(|(_, a)| a.peak_rss_mb));
        let more =
            Stat::of(pairs.iter().filter_map(|(j, a)| Some(a.peak_rss_mb? - j.peak_rss_mb?)));
        let mb = |x: f64| format!("{x:.1} MB");
        let _ = writeln!(
            rows,
            "| {label}: drain ≥ 0.90 × JSON's | {} events/s | {} events/s | {} |",
            json_eps.show(thousands),
            avro_eps.show(thousands),
            ratio.show(|x| format!("{x:.2}×"))
        );
        let _ = writeln!(
            rows,
            "| {label}: peak RSS ≤ JSON's + 10 MB | {} | {} | {} |",
            json_rss.show(mb),
            avro_rss.show(mb),
            more.show(|x| format!("{x:+.1} MB"))
        );
        if !pairs.iter().all(|(j, a)| j.ok && a.ok) {
            let _ = writeln!(
                rows,
                "| {label}: **not every event was delivered: see the drain table** | | | |"
            );
        }
    }
    if rows.is_empty() {
        return String::new();
    }
    let mut o = String::new();
    let _ = writeln!(
        o,
        "\n### Registry values (Avro, Protobuf, JSON Schema) against JSON values (issue 49): the same backlog, payload expanded, {repetitions} repetition(s)\n"
    );
    let _ = writeln!(o, "| issue 49's target | JSON, schemas off (`json-expanded`) | registry format | measured, within each repetition |");
    let _ = writeln!(o, "|---|---|---|---|");
    o.push_str(&rows);
    o.push('\n');
    o
}
