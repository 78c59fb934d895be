//! Apicurio's own framings (`[schema_registry] id_handler` and `use_id`), for consumers on
//! Apicurio's serdes: the globalId in 8 bytes after the magic byte, or in the
//! `apicurio.value.globalId` / `apicurio.value.contentId` header beside an unframed value. Each
//! record is read as Apicurio's deserializer reads it (tests/consumers/apicurio_decode.py): the id
//! from where the handler puts it, the schema by that id from Apicurio's own API, the body under
//! it with fastavro.

use std::time::Duration;

use serde_json::{json, Value};

use super::avro_config;
use crate::common::{release_slot, Setup};
use crate::support::process::{walrelay, RelayProcess};
use crate::support::registry::registry;
use crate::support::registry_decode::decode_as_apicurio;
use crate::support::{free_port, kafka, scratch_dir, services, wait_until};

/// Apicurio's id of the latest version under `subject`: (contentId, globalId), from its own API.
fn apicurio_ids(subject: &str) -> (u64, u64) {
    let (content_id, _) = registry().latest(subject).expect("the subject holds a schema");
    let (status, versions) = registry()
        .request(
            "GET",
            &format!("/apis/registry/v2/groups/default/artifacts/{subject}/versions"),
            None,
        )
        .unwrap();
    assert_eq!(status, 200, "{versions}");
    let versions: Value = serde_json::from_str(&versions).unwrap();
    let latest = versions["versions"].as_array().and_then(|v| v.last()).expect("a version");
    (content_id as u64, latest["globalId"].as_u64().expect("a globalId"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apicurio_framings_carry_the_global_or_content_id_in_8_bytes_or_a_header_and_decode_as_apicurios_deserializer_reads_them(
) {
    let s = Setup::new("apicurio_framing").await;
    let url = registry().ccompat_url();
    let api = format!("{}/apis/registry/v2", registry().base_url());
    // The contentId case first: the same schema under the next subjects keeps its contentId and
    // gets a new globalId, so the two ids differ where the globalId is asserted.
    for (handler, use_id, aggregate) in [
        ("headers", "contentId", "Refund"),
        ("8-byte", "globalId", "Order"),
        ("headers", "globalId", "Invoice"),
    ] {
        let extra = format!("id_handler = \"{handler}\"\nuse_id = \"{use_id}\"\n");
        let config = avro_config(&s, "\"table.expand.json.payload\" = true", &url, &extra);
        let mut relay = RelayProcess::start(&config);
        s.wait_streaming(&mut relay).await;
        s.insert_events(aggregate, "a-1", 2).await;
        let topic = s.topic(aggregate);
        let got =
            kafka::consume(services().broker.bootstrap(), &topic, 2, Duration::from_secs(30)).await;
        assert_eq!(got.len(), 2, "{}", relay.log());
        assert_eq!(relay.terminate(), Some(0), "{}", relay.log());

        let (content_id, global_id) = apicurio_ids(&format!("{topic}-value"));
        let want = match use_id {
            "globalId" => {
                assert_ne!(global_id, content_id, "the test cannot tell the two ids apart");
                global_id
            }
            _ => content_id,
        };
        let header = format!("apicurio.value.{use_id}");
        for r in &got {
            let v = r.value.as_deref().expect("a value");
            match handler {
                "8-byte" => {
                    assert_eq!(v[0], 0, "the magic byte");
                    assert_eq!(u64::from_be_bytes(v[1..9].try_into().unwrap()), want);
                    assert!(r.header(&header).is_none());
                }
                _ => {
                    let id = r.header(&header).unwrap_or_else(|| panic!("no {header}: {r:?}"));
                    assert_eq!(u64::from_be_bytes(id.try_into().expect("8 bytes")), want);
                    assert_eq!(r.header_str("apicurio.value.encoding"), Some("BINARY"));
                }
            }
            assert!(r.header("id").is_some(), "the event id header stays");
        }
        let records: Vec<_> = got
            .iter()
            .map(|r| {
                let headers =
                    r.headers.iter().map(|(k, v)| (k.clone(), v.clone().unwrap_or_default()));
                (r.value.clone().unwrap(), headers.collect())
            })
            .collect();
        let decoded = decode_as_apicurio(&api, (handler, use_id), &records);
        println!(
            "id_handler = {handler}, use_id = {use_id}: contentId {content_id}, globalId \
             {global_id}; read as Apicurio's deserializer does: {decoded:?}"
        );
        assert_eq!(decoded, [(json!({"n": 0}), want), (json!({"n": 1}), want)]);
    }
    release_slot(&s).await;
}

/// `walrelay check` with `use_id = "globalId"` asks Apicurio's own API too: ok with Apicurio's
/// version, and FAIL, naming the API and the fix, where the URL's server answers the
/// Confluent-compatible paths but is no Apicurio (here a static file server holding a subject
/// list, as a gateway in front of another registry would answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_with_global_ids_names_apicurios_api_and_fails_where_only_the_confluent_api_answers()
{
    let s = Setup::new("apicurio_check").await;
    let extra = "id_handler = \"headers\"\n";
    let config = avro_config(&s, "", &registry().ccompat_url(), extra);
    let run =
        tokio::task::spawn_blocking(move || walrelay(&["check"], Some(&config))).await.unwrap();
    let line = run.stdout.lines().find(|l| l.contains("globalIds")).unwrap_or("");
    println!("check against Apicurio: {line}");
    assert!(line.starts_with("ok") && line.contains(registry().version()), "{run}");
    assert!(line.contains("apicurio.value.globalId"), "{line}");

    let root = scratch_dir("apicurio_check");
    std::fs::create_dir_all(root.join("apis/ccompat/v7")).unwrap();
    std::fs::write(root.join("apis/ccompat/v7/subjects"), "[]").unwrap();
    let port = free_port();
    let mut server = std::process::Command::new("python3")
        .args(["-m", "http.server", "--bind", "127.0.0.1", &port.to_string()])
        .current_dir(&root)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("python3 -m http.server");
    let listening = wait_until("the file server listens", Duration::from_secs(20), || async move {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
    .await;
    let other = format!("http://127.0.0.1:{port}/apis/ccompat/v7");
    let config = avro_config(&s, "", &other, extra);
    let run =
        tokio::task::spawn_blocking(move || walrelay(&["check"], Some(&config))).await.unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert!(listening, "the file server did not listen on {port}");
    let line = run.stdout.lines().find(|l| l.contains("globalIds")).unwrap_or("");
    println!("check where only the Confluent-compatible paths answer: {line}");
    assert_eq!(run.code, Some(1), "{run}");
    assert!(line.starts_with("FAIL"), "{run}");
    for named in [format!("127.0.0.1:{port}/apis/registry/v2"), "use_id = \"contentId\"".into()] {
        assert!(line.contains(&named), "{named} not in: {line}");
    }
}
