//! `[delivery] sink = "http"` against a real HTTP receiver (tests/support/webhook.rs).

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use super::scenarios::{self, Broker};
use crate::common::Setup;
use crate::support::process::walrelay;
use crate::support::sinks::Delivered;
use crate::support::webhook::Receiver;

/// A signing secret in Standard Webhooks' form (24 random bytes, base64).
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// One receiver per test: its requests are the test's alone.
struct Hook(Receiver);

impl Hook {
    fn new() -> Hook {
        let r = Receiver::start();
        r.refuse_paths_with("Poison");
        Hook(r)
    }
}

impl Broker for Hook {
    fn sections(&self, _s: &Setup) -> String {
        format!(
            "[delivery]\nsink = \"http\"\n\n[webhook]\nurl = \"{}\"\nsecret = \"{SECRET}\"\ntimeout = \"2s\"\n",
            self.0.url()
        )
    }

    async fn delivered(&self, _s: &Setup) -> Vec<Delivered> {
        self.0.accepted()
    }

    async fn outage(&self, on: bool) {
        self.0.set_unavailable(on);
    }

    fn dedups(&self) -> bool {
        false
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_routes_headers_event_id_and_key() {
    scenarios::routes_headers_event_id_and_key(&Hook::new(), &Setup::new("wh_route").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_keeps_per_key_order_across_four_writers() {
    scenarios::per_key_order_across_four_writers(&Hook::new(), &Setup::new("wh_order").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_five_sigkills_lose_nothing() {
    scenarios::five_sigkills_lose_nothing(&Hook::new(), &Setup::new("wh_kills").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_answering_503_for_20_s_loses_nothing_and_confirms_nothing_past_it() {
    let s = Setup::new("wh_outage").await;
    scenarios::a_twenty_second_outage_loses_nothing_and_confirms_nothing_past_it(&Hook::new(), &s)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_a_422_dead_letters_the_record_and_later_rows_flow() {
    let s = Setup::new("wh_poison").await;
    scenarios::a_poison_record_is_dead_lettered_and_later_rows_flow(&Hook::new(), &s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_sigterm_exits_within_ten_seconds() {
    scenarios::sigterm_exits_within_ten_seconds(&Hook::new(), &Setup::new("wh_term").await).await;
}

/// Every request's signature verifies with the `standardwebhooks` package (PyPI), an
/// implementation of the specification that is not ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_signatures_verify_with_the_standardwebhooks_package() {
    let s = Setup::new("wh_sign").await;
    let hook = Hook::new();
    scenarios::routes_headers_event_id_and_key(&hook, &s).await;
    let got = hook.0.accepted();
    let requests: Vec<serde_json::Value> = got
        .iter()
        .map(|d| {
            serde_json::json!({
                "headers": d.headers.iter().cloned().collect::<std::collections::HashMap<_, _>>(),
                "body": String::from_utf8_lossy(&d.body),
            })
        })
        .collect();
    let verified = verify_with_standardwebhooks(&serde_json::Value::from(requests).to_string());
    println!("standardwebhooks verified {verified} of {} requests", got.len());
    assert_eq!(verified, got.len());
    // A body changed in transit no longer verifies: the check is real.
    let tampered = serde_json::json!([{
        "headers": got[0].headers.iter().cloned().collect::<std::collections::HashMap<_, _>>(),
        "body": "{\"n\": 999}",
    }]);
    assert_eq!(verify_with_standardwebhooks(&tampered.to_string()), 0);
}

/// Runs the package over `requests` (a JSON list of {headers, body}); how many verified.
fn verify_with_standardwebhooks(requests: &str) -> usize {
    const SCRIPT: &str = r#"
import json, sys
from standardwebhooks.webhooks import Webhook
hook = Webhook(sys.argv[1])
ok = 0
for r in json.load(sys.stdin):
    try:
        hook.verify(r["body"], r["headers"])
        ok += 1
    except Exception as e:
        print("refused:", e, file=sys.stderr)
print(ok)
"#;
    let mut child = Command::new(crate::support::pyenv_python())
        .args(["-c", SCRIPT, SECRET])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the pyenv's python");
    child.stdin.take().unwrap().write_all(requests.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "standardwebhooks failed: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Bad configuration exits 2 naming the option and the fix, before anything is reached.
#[test]
fn a_bad_sink_configuration_exits_2_naming_the_option_and_the_fix() {
    static BASE: OnceLock<String> = OnceLock::new();
    let base = BASE.get_or_init(|| {
        "[source]\nurl = \"postgres://u@127.0.0.1:1/db\"\nslot = \"s\"\npublication = \"p\"\n\n[outbox]\ntable = \"public.outbox\"\n".to_string()
    });
    let cases = [
        ("[delivery]\nsink = \"pigeon\"\n", "pigeon", "one of kafka, nats, rabbitmq, sqs, http"),
        ("[delivery]\nsink = \"http\"\n", "[webhook]", "add [webhook]"),
        (
            "[delivery]\nsink = \"http\"\n[webhook]\nurl = \"http://h/${tenant}\"\n",
            "${tenant}",
            "the only one is ${topic}",
        ),
        (
            "[delivery]\nsink = \"http\"\nguarantee = \"exactly-once\"\n[webhook]\nurl = \"http://h/${topic}\"\n",
            "exactly-once",
            "Idempotency-Key",
        ),
        (
            "[kafka]\n\"bootstrap.servers\" = \"k:9092\"\n[webhook]\nurl = \"http://h/${topic}\"\n",
            "[webhook]",
            "set sink = \"http\"",
        ),
    ];
    for (section, names, fix) in cases {
        let run = walrelay(&["check"], Some(&format!("{base}{section}")));
        println!("{section:?} → {}", run.stderr.trim());
        assert_eq!(run.code, Some(2), "{section}\n{run}");
        assert!(run.stderr.contains(names) && run.stderr.contains(fix), "{section}\n{run}");
    }
}

/// `walrelay replay` re-sends retained rows through the sink the relay uses: the receiver gets
/// them again, with their event id and the `walrelay.replay` header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_replay_resends_retained_rows_through_the_sink() {
    let s = Setup::new("wh_replay").await;
    let hook = Hook::new();
    let config = s.config_with("", "", &hook.sections(&s));
    let mut relay = crate::support::process::RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let ids = s.insert_events("Order", "o-1", 4).await;
    let live = hook.delivered(&s).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while hook.0.accepted().len() < 4 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(relay.terminate(), Some(0), "relay log:\n{}", relay.log());
    let run =
        crate::support::process::walrelay_async(&["replay", "--since", "1h"], Some(&config)).await;
    println!("{run}\nlive before the replay: {}", live.len());
    assert_eq!(run.code, Some(0), "{run}");
    let replayed: Vec<Delivered> =
        hook.0.accepted().into_iter().filter(|d| d.header("walrelay.replay").is_some()).collect();
    let got: Vec<&str> = replayed.iter().filter_map(|d| d.dedup_id.as_deref()).collect();
    assert_eq!(got, ids.iter().map(String::as_str).collect::<Vec<_>>(), "{replayed:?}");
    assert!(replayed
        .iter()
        .all(|d| d.routed_to == s.topic("Order") && d.key.as_deref() == Some("o-1")));
}

/// `/metrics`, the console's overview and `walrelay status` name the sink; `walrelay audit`
/// says it cannot read a webhook back, and `[audit]` is refused with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_console_and_status_name_the_sink_and_the_audit_and_lookup_say_they_cannot_read_it_back(
) {
    use crate::support::process::{http_get, walrelay_async, RelayProcess};
    let s = Setup::new("wh_names").await;
    let hook = Hook::new();
    let port = crate::support::free_port();
    let config = s.config_with(
        "",
        "",
        &format!("{}\n[http]\nlisten = \"127.0.0.1:{port}\"\n", hook.sections(&s)),
    );
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let metrics = http_get(port, "/metrics").await.unwrap_or_default();
    assert!(metrics.contains("walrelay_sink_info{sink=\"http\"} 1"), "{metrics}");
    let (_, overview, raw) = crate::console::get_json(port, "/api/v1/overview").await;
    assert_eq!(overview["sink"], "http", "{raw}");
    let status = walrelay_async(&["status", "--json"], Some(&config)).await;
    assert!(status.stdout.contains("\"sink\":\"http\""), "{status}");
    // The console's lookup cannot read a webhook back: whether the receiver has the event is
    // not known, and it says so rather than "not found".
    let ids = s.insert_events("Order", "o-1", 1).await;
    hook.delivered(&s).await;
    let (code, looked, raw) =
        crate::console::get_json(port, &format!("/api/v1/events/{}", ids[0])).await;
    println!("lookup with sink = http: {looked}");
    assert_eq!(code, 200, "{raw}");
    assert_eq!(looked["kafka"]["found"], serde_json::Value::Null, "{raw}");
    assert_eq!(looked["kafka"]["in"], "http", "{raw}");
    let searched = looked["kafka"]["searched"].as_str().unwrap_or("");
    assert!(searched.contains("cannot be read back without consuming them"), "{raw}");
    let audit = walrelay_async(&["audit", "--since", "1h"], Some(&config)).await;
    println!("audit with sink = http: exit {:?}: {}", audit.code, audit.stderr.trim());
    assert_eq!(audit.code, Some(2), "{audit}");
    assert!(audit.stderr.contains("cannot be read back without consuming them"), "{audit}");
    let with_audit = format!("{config}\n[audit]\ninterval = \"1h\"\nwindow = \"1h\"\n");
    let run = walrelay_async(&["check"], Some(&with_audit)).await;
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains("remove [audit]"), "{run}");
    assert_eq!(relay.terminate(), Some(0), "relay log:\n{}", relay.log());
}
