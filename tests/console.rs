//! The console: its JSON API on a running relay (the slot as PostgreSQL reports it, dead letters
//! with their reason, an event found where a Kafka consumer reads it, actions behind their
//! token, no secret in any response), and its page in headless Chromium (Debian's `chromium`,
//! installed by scripts/install-test-deps.sh), with screenshots kept under
//! target/console-screenshots/.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::common::{release_slot, Setup};
use crate::support::kafka::{self, private_broker};
use crate::support::process::{freeze, http_get, thaw, RelayProcess};
use crate::support::{free_port, services, wait_until};

/// Secrets planted where the relay keeps them (the fuzz oracle's prefix): none may reach a
/// response.
const PG_PASSWORD: &str = "Fz-s3cret-9Qx-pg";
const TOKEN: &str = "Fz-s3cret-9Qx-console-token";

/// A GET's JSON body and status.
async fn get_json(port: u16, path: &str) -> (u16, serde_json::Value, String) {
    let raw = http_get(port, path).await.unwrap_or_default();
    let status = raw.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string();
    (status, serde_json::from_str(&body).unwrap_or_default(), raw)
}

/// A request with a method, headers and a body; the raw response.
async fn request(port: u16, method: &str, path: &str, headers: &str, body: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{headers}\r\n",
        body.len()
    );
    conn.write_all(format!("{head}{body}").as_bytes()).await.unwrap();
    let mut response = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), conn.read_to_string(&mut response)).await;
    response
}

/// The slot's confirmed LSN as PostgreSQL reports it.
async fn confirmed_lsn(s: &Setup) -> String {
    s.db.confirmed_flush_lsn(&s.slot).await.expect("the slot exists")
}

/// Waits until the console's slot sample equals what PostgreSQL reports (the sampler reads
/// every 10 s; nothing is written meanwhile, so both settle).
async fn wait_slot_sampled(s: &Setup, port: u16) -> String {
    let seen = std::sync::Mutex::new(String::new());
    let seen_ref = &seen;
    let settled = wait_until(
        "the console shows the slot's confirmed LSN",
        Duration::from_secs(40),
        || async move {
            let (_, o, _) = get_json(port, "/api/v1/overview").await;
            let console = o["slot"]["confirmed_lsn"].as_str().unwrap_or("").to_string();
            let pg = confirmed_lsn(s).await;
            *seen_ref.lock().unwrap() = format!("console {console}, PostgreSQL {pg}");
            console == pg
        },
    )
    .await;
    let seen = seen.into_inner().unwrap();
    assert!(settled, "{seen}");
    confirmed_lsn(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_api_reports_the_slot_dead_letters_and_where_an_event_is_and_never_a_secret() {
    let s = Setup::new("console_api").await;
    let port = free_port();
    let dead = format!("{}_dead_letters", s.topic_prefix);
    let url = s.db.url.replace("postgres@", &format!("postgres:{PG_PASSWORD}@"));
    let extra = format!(
        "[dead_letter]\ntopic = \"{dead}\"\n[http]\nlisten = \"127.0.0.1:{port}\"\nconsole_actions = true\n"
    );
    let config = s.config_with("", "", &extra).replace(&s.db.url, &url);
    let mut relay =
        RelayProcess::start_with(&config, &[], &[("WALRELAY_HTTP_CONSOLE_TOKEN", TOKEN)]);
    s.wait_streaming(&mut relay).await;
    let sent = s.insert_events("Order", "o-1", 3).await;
    let poison = s.db.insert_outbox("outbox", "Bad Topic", "o-2", "E", Some("{}")).await;
    let got = s.read("Order", 3).await;
    let letters =
        kafka::consume(services().broker.bootstrap(), &dead, 1, Duration::from_secs(30)).await;
    assert_eq!((got.len(), letters.len()), (3, 1), "{}", relay.log());
    let pg = wait_slot_sampled(&s, port).await;

    let mut bodies = Vec::new();
    let (status, overview, raw) = get_json(port, "/api/v1/overview").await;
    bodies.push(raw);
    println!("overview: {overview}");
    assert_eq!(status, 200);
    assert_eq!(overview["slot"]["confirmed_lsn"], pg.as_str());
    assert_eq!(overview["streaming"], true);
    assert_eq!(overview["broker"]["reachable"], true);
    assert_eq!(overview["counts"]["dead_lettered"], 1);
    assert!(overview["source"]["url"].as_str().unwrap().contains("****"), "{overview}");

    let (_, problems, raw) = get_json(port, "/api/v1/problems").await;
    bodies.push(raw);
    let recent = &problems["dead_letters"]["recent"][0];
    println!("dead letter: {recent}");
    assert_eq!(recent["event_id"], poison.as_str());
    assert!(
        recent["reason"].as_str().unwrap().contains("not a valid Kafka topic name"),
        "{recent}"
    );
    assert_eq!(problems["dead_letters"]["by_reason"].as_array().map(Vec::len), Some(1));
    let warned = problems["log"].as_array().unwrap().iter().any(|p| {
        p["level"] == "WARN"
            && p["message"].as_str().unwrap_or("").contains("cannot be turned into a record")
    });
    assert!(warned, "{problems}");

    // The event where a consumer reads it.
    let consumed = got.iter().find(|r| r.header_str("id") == Some(sent[1].as_str())).unwrap();
    let (status, found, raw) = get_json(port, &format!("/api/v1/events/{}", sent[1])).await;
    bodies.push(raw);
    println!("lookup: {found}");
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["kafka"]["found"], true, "{found}");
    assert_eq!(found["kafka"]["topic"], consumed.topic.as_str());
    assert_eq!(found["kafka"]["partition"], consumed.partition);
    assert_eq!(found["kafka"]["offset"], consumed.offset);
    assert_eq!(found["row"]["table"], "public.outbox");
    let (status, missing, _) =
        get_json(port, "/api/v1/events/0b9c3b0e-8f7e-4c1e-9d2a-000000000000").await;
    assert_eq!(status, 404, "{missing}");
    let (status, bad, _) = get_json(port, "/api/v1/events/%zz").await;
    assert_eq!(status, 400, "{bad}");

    // Actions: refused without the token, run with it.
    let window = r#"{"since": "1h", "until": null}"#;
    let refused = request(port, "POST", "/api/v1/actions/audit", "", window).await;
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    let auth = format!("authorization: Bearer {TOKEN}\r\n");
    let started = request(port, "POST", "/api/v1/actions/audit", &auth, window).await;
    assert!(started.starts_with("HTTP/1.1 202"), "{started}");
    let done = wait_until("the audit action finishes", Duration::from_secs(60), || async move {
        let (_, a, _) = get_json(port, "/api/v1/actions").await;
        a["current"]["running"] == false
    })
    .await;
    let (_, action, raw) = get_json(port, "/api/v1/actions").await;
    bodies.push(raw);
    let output = action["current"]["output"].as_array().map(|l| l.len()).unwrap_or(0);
    println!("audit action: exit {} after {output} line(s)", action["current"]["exit_code"]);
    assert!(done, "{action}");
    // The poison row is in no routed topic: said as unroutable, by design not a loss (exit 0).
    assert_eq!(action["current"]["exit_code"], 0, "{action}");
    assert!(action.to_string().contains("unroutable"), "{action}");

    for path in ["/", "/api/v1/history", "/api/v1/tables", "/metrics"] {
        bodies.push(http_get(port, path).await.unwrap_or_default());
    }
    for body in &bodies {
        for secret in [PG_PASSWORD, TOKEN] {
            assert!(!body.contains(secret), "a response holds a secret:\n{body}");
        }
    }
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// Headless Chromium with the page's JavaScript run; the DOM after it.
fn chromium_dom(url: &str) -> String {
    let out = Command::new("chromium")
        .args(["--headless=new", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=8000"])
        .args(["--dump-dom", url])
        .output()
        .expect("run chromium (scripts/install-test-deps.sh installs Debian's)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A screenshot of `url`, kept as a test artefact.
fn screenshot(url: &str, name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/console-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{name}.png"));
    let _ = Command::new("chromium")
        .args(["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
        .args(["--virtual-time-budget=8000", "--window-size=1280,2200"])
        .arg(format!("--screenshot={}", file.display()))
        .arg(url)
        .output();
    file
}

/// The value of `attribute` on the element whose opening tag holds `marker` (an id or a class).
fn attribute(dom: &str, marker: &str, attribute: &str) -> Option<String> {
    let at = dom.find(marker)?;
    let start = dom[..at].rfind('<')?;
    let tag = &dom[start..start + dom[start..].find('>')?];
    let key = format!("{attribute}=\"");
    let from = tag.find(&key)? + key.len();
    Some(tag[from..from + tag[from..].find('"')?].replace("&amp;", "&"))
}

/// The text of the element whose opening tag holds `marker`.
fn text(dom: &str, marker: &str) -> Option<String> {
    let at = dom.find(marker)?;
    let from = at + dom[at..].find('>')? + 1;
    Some(dom[from..from + dom[from..].find('<')?].to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_page_in_chromium_shows_the_slot_lag_rising_and_falling_a_dead_letter_and_a_lookup()
{
    let broker = tokio::task::spawn_blocking(|| private_broker(None)).await.unwrap();
    let s = Setup::new("console_page").await;
    let port = free_port();
    let dead = format!("{}_dead_letters", s.topic_prefix);
    let extra =
        format!("[dead_letter]\ntopic = \"{dead}\"\n[http]\nlisten = \"127.0.0.1:{port}\"\n");
    // Longer than the pause: the records wait in librdkafka rather than fail and replay.
    let config =
        s.config_for_bootstrap(broker.bootstrap(), "", "\"message.timeout.ms\" = 120000", &extra);
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let page = format!("http://127.0.0.1:{port}/");

    let sent = s.insert_events("Order", "o-1", 2).await;
    s.db.insert_outbox("outbox", "Bad Topic", "o-2", "E", Some("{}")).await;
    let topic = s.topic("Order");
    let got = kafka::consume(broker.bootstrap(), &topic, 2, Duration::from_secs(60)).await;
    assert_eq!(got.len(), 2, "{}", relay.log());
    let pg = wait_slot_sampled(&s, port).await;
    let dom = chromium_dom(&page);
    let shown = text(&dom, "id=\"slot-confirmed-lsn\"");
    let reason = attribute(&dom, "class=\"dead-letter-reason\"", "data-reason");
    println!("page: slot confirmed LSN {shown:?} (PostgreSQL {pg}); dead letter reason {reason:?}");
    screenshot(&page, "overview");
    assert_eq!(shown.as_deref(), Some(pg.as_str()), "{dom}");
    assert!(reason.is_some_and(|r| r.contains("not a valid Kafka topic name")), "{dom}");

    // The lookup, as a consumer reads the event.
    let consumed = got.iter().find(|r| r.header_str("id") == Some(sent[0].as_str())).unwrap();
    let lookup = format!("{page}?lookup={}", sent[0]);
    let dom = chromium_dom(&lookup);
    let place = ["data-topic", "data-partition", "data-offset"]
        .map(|a| attribute(&dom, "id=\"lookup-result\"", a).unwrap_or_default());
    println!(
        "lookup in the page: {place:?}; the consumer read {} [{}] @{}",
        consumed.topic, consumed.partition, consumed.offset
    );
    screenshot(&lookup, "lookup");
    assert_eq!(
        place,
        [consumed.topic.clone(), consumed.partition.to_string(), consumed.offset.to_string()],
        "{dom}"
    );

    // The lag chart rises while the broker is paused, and falls after.
    freeze(broker.pid());
    s.insert_events("Order", "o-3", 3).await;
    let chart = |dom: &str, a: &str| {
        attribute(dom, "id=\"lag-chart\"", a).and_then(|v| v.parse::<f64>().ok())
    };
    let page_ref = &page;
    let risen =
        wait_until("the lag chart shows a lag over 8 s", Duration::from_secs(60), || async move {
            let dom = tokio::task::spawn_blocking({
                let page = page_ref.clone();
                move || chromium_dom(&page)
            })
            .await
            .unwrap();
            chart(&dom, "data-last-lag-seconds").is_some_and(|lag| lag > 8.0)
        })
        .await;
    let dom = chromium_dom(&page);
    let high = chart(&dom, "data-max-lag-seconds");
    screenshot(&page, "lag-during-pause");
    thaw(broker.pid());
    assert!(risen, "lag chart during the pause: max {high:?}\n{}", relay.log());
    let fallen =
        wait_until("the lag chart falls back under 2 s", Duration::from_secs(60), || async move {
            let dom = tokio::task::spawn_blocking({
                let page = page_ref.clone();
                move || chromium_dom(&page)
            })
            .await
            .unwrap();
            chart(&dom, "data-last-lag-seconds").is_some_and(|lag| lag < 2.0)
        })
        .await;
    let dom = chromium_dom(&page);
    let (last, max) = (chart(&dom, "data-last-lag-seconds"), chart(&dom, "data-max-lag-seconds"));
    println!(
        "lag chart: rose to {high:?} s while the broker was paused; now {last:?} s (max {max:?})"
    );
    screenshot(&page, "lag-after-pause");
    assert!(fallen && max.is_some_and(|m| m > 8.0), "last {last:?}, max {max:?}\n{dom}");
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}
