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
