//! The console: its JSON API on a running relay (the slot as PostgreSQL reports it, dead letters
//! with their reason, an event found where a Kafka consumer reads it, actions behind their
//! token, no secret in any response), who may see it (the token on a non-loopback listen, the
//! Host check, the off switch, the lookups' rate limit), and its page in headless Chromium
//! (Debian's `chromium`, installed by scripts/install-test-deps.sh), with screenshots kept under
//! target/console-screenshots/.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::common::{release_slot, Setup};
use crate::support::kafka::{self, private_broker_keeping_its_session};
use crate::support::process::{freeze, http_get, thaw, walrelay_async, RelayProcess};
use crate::support::{free_port, services, slot, wait_until};

/// Secrets planted where the relay keeps them (the fuzz oracle's prefix): none may reach a
/// response.
const PG_PASSWORD: &str = "Fz-s3cret-9Qx-pg";
pub(crate) const TOKEN: &str = "Fz-s3cret-9Qx-console-token";

/// A GET's JSON body and status, as a browser on the relay's host asks.
pub(crate) async fn get_json(port: u16, path: &str) -> (u16, serde_json::Value, String) {
    get_json_with(port, path, "").await
}

/// [`get_json`] with more headers (`name: value\r\n` each).
async fn get_json_with(port: u16, path: &str, headers: &str) -> (u16, serde_json::Value, String) {
    let raw = request(port, "GET", path, headers, "").await;
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string();
    (status(&raw), serde_json::from_str(&body).unwrap_or_default(), raw)
}

/// The status of a raw response.
fn status(raw: &str) -> u16 {
    raw.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// A request with a method, headers and a body, as a browser on the relay's host sends it
/// (`Host: 127.0.0.1:<port>`); the raw response.
async fn request(port: u16, method: &str, path: &str, headers: &str, body: &str) -> String {
    request_as(&format!("127.0.0.1:{port}"), port, method, path, headers, body).await
}

/// [`request`] with the Host header given.
async fn request_as(
    host: &str,
    port: u16,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{headers}\r\n",
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

/// Waits until the console shows a slot position PostgreSQL reached after everything written so
/// far was confirmed, and no further than PostgreSQL's now; returns it. Not an equality: the
/// sampler reads every 10 s while the idle slot moves on as the shared server's other databases
/// write WAL (I3), so on a busy machine a sample and PostgreSQL's value may never be seen equal.
async fn wait_slot_sampled(s: &Setup, port: u16) -> String {
    use walrelay::lsn::Lsn;
    let client = s.db.connect().await;
    let written: String =
        client.query_one("SELECT pg_current_wal_insert_lsn()::text", &[]).await.unwrap().get(0);
    let written: Lsn = written.parse().unwrap();
    let confirmed =
        slot::wait_confirmed(&s.db.url, &s.slot, written, Duration::from_secs(40)).await;
    assert!(confirmed, "the slot never confirmed {written}: {}", confirmed_lsn(s).await);
    let floor: Lsn = confirmed_lsn(s).await.parse().unwrap();
    let seen = std::sync::Mutex::new((String::new(), String::new()));
    let seen_ref = &seen;
    let settled = wait_until(
        "the console shows the slot's confirmed LSN",
        Duration::from_secs(40),
        || async move {
            let (_, o, _) = get_json(port, "/api/v1/overview").await;
            let console = o["slot"]["confirmed_lsn"].as_str().unwrap_or("").to_string();
            let pg = confirmed_lsn(s).await;
            let shown = console.parse::<Lsn>().ok();
            let within = shown.is_some_and(|c| c >= floor && Some(c) <= pg.parse().ok());
            *seen_ref.lock().unwrap() = (console, pg);
            within
        },
    )
    .await;
    let (console, pg) = seen.into_inner().unwrap();
    assert!(settled, "console {console}, not between {floor} and PostgreSQL's {pg}");
    console
}

/// What the console shows of the slot, read after [`wait_slot_sampled`] returned `matched`:
/// that position or a later sample, never past what PostgreSQL reports now.
async fn assert_slot_shown(s: &Setup, shown: Option<&str>, matched: &str, context: &str) {
    use walrelay::lsn::Lsn;
    let now = confirmed_lsn(s).await;
    let parse = |t: &str| t.parse::<Lsn>().ok();
    let (shown_lsn, low, high) = (shown.and_then(parse), parse(matched), parse(&now));
    assert!(
        shown_lsn.is_some() && shown_lsn >= low && shown_lsn <= high,
        "the console shows {shown:?}, not between {matched} and PostgreSQL's {now}: {context}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_api_reports_the_slot_dead_letters_and_where_an_event_is_and_never_a_secret() {
    let s = Setup::new("console_api").await;
    let port = free_port();
    let dead = format!("{}_dead_letters", s.topic_prefix);
    let url = s.db.url.replace("postgres@", &format!("postgres:{PG_PASSWORD}@"));
    let extra = format!(
        "[dead_letter]\ntopic = \"{dead}\"\n[http]\nlisten = \"127.0.0.1:{port}\"\nconsole = \"actions\"\n"
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
    assert_slot_shown(&s, overview["slot"]["confirmed_lsn"].as_str(), &pg, "overview").await;
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
    // The outbox's id column is a uuid: text that is not one is no id of it.
    let (status, bad, _) = get_json(port, "/api/v1/events/order-42").await;
    println!("lookup of a non-UUID id: {status} {bad}");
    assert_eq!(status, 400, "{bad}");
    assert!(bad["error"].as_str().unwrap_or("").contains("is not a UUID"), "{bad}");
    // The dead-lettered row: what the lookup knows of it, not an error.
    let (status, unroutable, raw) = get_json(port, &format!("/api/v1/events/{poison}")).await;
    bodies.push(raw);
    println!("lookup of the dead-lettered event: {unroutable}");
    assert_eq!(status, 200, "{unroutable}");
    assert_eq!(unroutable["row"]["table"], "public.outbox");
    assert_eq!(unroutable["unroutable"]["dead_letter_topic"], dead.as_str());
    let reason = unroutable["unroutable"]["reason"].as_str().unwrap_or("");
    assert!(reason.contains("not a valid Kafka topic name"), "{unroutable}");

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
        bodies.push(request(port, "GET", path, "", "").await);
    }
    for body in &bodies {
        for secret in [PG_PASSWORD, TOKEN] {
            assert!(!body.contains(secret), "a response holds a secret:\n{body}");
        }
    }
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// A relay whose endpoint listens on every address (`0.0.0.0`, not a loopback one) with the
/// console's token set, `http` added to its `[http]` section; asked through 127.0.0.1: the rule
/// is about the listen address, not where a request comes from.
async fn relay_listening_everywhere(s: &Setup, port: u16, http: &str) -> RelayProcess {
    let extra = format!("[http]\nlisten = \"0.0.0.0:{port}\"\n{http}");
    let config = s.config_with("", "", &extra);
    let mut relay =
        RelayProcess::start_with(&config, &[], &[("WALRELAY_HTTP_CONSOLE_TOKEN", TOKEN)]);
    s.wait_streaming(&mut relay).await;
    // The slot can be active before the relay's own state says streaming and a broker has
    // answered; the page and `/readyz` below read that state, so wait for it too.
    let ready = wait_until("the relay is ready", Duration::from_secs(30), || async move {
        http_get(port, "/readyz").await.is_some_and(|r| status(&r) == 200)
    })
    .await;
    assert!(ready, "the relay never answered /readyz 200; its log:\n{}", relay.log());
    relay
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_reads_on_a_non_loopback_listen_need_the_token_while_probes_and_metrics_stay_open()
{
    let s = Setup::new("console_token").await;
    let port = free_port();
    let mut relay = relay_listening_everywhere(&s, port, "").await;
    let auth = format!("authorization: Bearer {TOKEN}\r\n");
    let mut bodies = Vec::new();
    for path in ["/api/v1/overview", "/api/v1/problems", "/api/v1/tables", "/api/v1/actions"] {
        let refused = request(port, "GET", path, "", "").await;
        assert_eq!(status(&refused), 401, "{path}: {refused}");
        assert!(refused.to_ascii_lowercase().contains("www-authenticate: bearer"), "{refused}");
        let wrong = request(port, "GET", path, "authorization: Bearer not-the-token\r\n", "").await;
        assert_eq!(status(&wrong), 401, "{path}: {wrong}");
        let (code, body, raw) = get_json_with(port, path, &auth).await;
        assert_eq!(code, 200, "{path}: {raw}");
        assert!(body.is_object(), "{raw}");
        bodies.push(refused);
    }
    let lookup =
        request(port, "GET", "/api/v1/events/0b9c3b0e-8f7e-4c1e-9d2a-000000000000", "", "");
    assert_eq!(status(&lookup.await), 401);
    // The page without the token: its shell, no summary (the slot's name is in its title).
    let page = request(port, "GET", "/", "", "").await;
    println!("the page without the token: {}", page.lines().next().unwrap_or(""));
    assert_eq!(status(&page), 200, "{page}");
    assert!(page.contains("needs its token") && !page.contains(&s.slot), "{page}");
    let full = request(port, "GET", "/", &auth, "").await;
    assert!(full.contains(&s.slot) && full.contains("streaming"), "{full}");
    bodies.push(page);
    // In a browser, the refused reads bring up the form that asks for the token.
    let url = format!("http://127.0.0.1:{port}/");
    let dom = tokio::task::spawn_blocking(move || chromium_dom(&url)).await.unwrap();
    assert!(dom.contains("id=\"token-form\"") && !dom.contains(&s.slot), "{dom}");
    // Probes and scrapers carry no token (and name the pod by any Host).
    for path in ["/healthz", "/readyz", "/metrics"] {
        let open = http_get(port, path).await.unwrap_or_default();
        assert_eq!(status(&open), 200, "{path}: {open}");
    }
    for body in &bodies {
        assert!(!body.contains(TOKEN), "a response holds the token:\n{body}");
    }
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_answers_421_to_a_host_that_is_not_one_of_the_relays_names() {
    let s = Setup::new("console_host").await;
    let port = free_port();
    let mut relay = relay_listening_everywhere(&s, port, "hosts = [\"walrelay.internal\"]\n").await;
    let auth = format!("authorization: Bearer {TOKEN}\r\n");
    // A DNS-rebinding page's requests name the attacker's host, the token notwithstanding.
    for path in ["/", "/api/v1/overview", "/api/v1/events/0b9c3b0e-8f7e-4c1e-9d2a-000000000000"] {
        for host in [format!("evil.example:{port}"), "walrelay.internal.evil.example".to_string()] {
            let misdirected = request_as(&host, port, "GET", path, &auth, "").await;
            assert_eq!(status(&misdirected), 421, "{host}{path}: {misdirected}");
        }
    }
    let posted =
        request_as("evil.example", port, "POST", "/api/v1/actions/audit", &auth, "{}").await;
    assert_eq!(status(&posted), 421, "{posted}");
    // The relay's names pass: loopback ones, an address, and the configured one.
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        "walrelay.internal:8080".to_string(),
    ] {
        let raw = request_as(&host, port, "GET", "/api/v1/overview", &auth, "").await;
        assert_eq!(status(&raw), 200, "{host}: {raw}");
    }
    // The endpoint's own paths answer whatever the Host.
    let metrics = request_as("evil.example", port, "GET", "/metrics", "", "").await;
    assert_eq!(status(&metrics), 200, "{metrics}");
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_off_answers_404_on_the_page_and_the_api_while_metrics_answer() {
    let s = Setup::new("console_off").await;
    let port = free_port();
    let extra = format!("[http]\nlisten = \"127.0.0.1:{port}\"\nconsole = \"off\"\n");
    let mut relay = s.start_streaming(&s.config_with("", "", &extra)).await;
    for path in ["/", "/console.js", "/api/v1/overview", "/api/v1/events/x"] {
        let gone = request(port, "GET", path, "", "").await;
        assert_eq!(status(&gone), 404, "{path}: {gone}");
    }
    let metrics = request(port, "GET", "/metrics", "", "").await;
    assert!(status(&metrics) == 200 && metrics.contains("walrelay_lag_bytes"), "{metrics}");
    assert!(relay.log().contains("the console is off"), "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_read_refuses_actions_even_with_the_token() {
    let s = Setup::new("console_read").await;
    let port = free_port();
    let mut relay = relay_listening_everywhere(&s, port, "console = \"read\"\n").await;
    let auth = format!("authorization: Bearer {TOKEN}\r\n");
    let window = r#"{"since": "1h", "until": null}"#;
    for kind in ["audit", "replay-dry-run"] {
        let path = format!("/api/v1/actions/{kind}");
        let refused = request(port, "POST", &path, &auth, window).await;
        println!("{kind} on a read-only console: {}", refused.lines().next().unwrap_or(""));
        assert_eq!(status(&refused), 403, "{refused}");
        assert!(refused.contains("console = \\\"actions\\\""), "{refused}");
    }
    let (code, actions, _) = get_json_with(port, "/api/v1/actions", &auth).await;
    assert_eq!(
        (code, &actions["enabled"], &actions["current"]),
        (200, &false.into(), &serde_json::Value::Null)
    );
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_lookups_over_the_rate_limit_get_429_with_retry_after() {
    let s = Setup::new("console_rate").await;
    let port = free_port();
    let extra = format!("[http]\nlisten = \"127.0.0.1:{port}\"\n");
    let mut relay = s.start_streaming(&s.config_with("", "", &extra)).await;
    let absent = |i: usize| format!("/api/v1/events/0b9c3b0e-8f7e-4c1e-9d2a-{i:012}");
    // Ten at once: the bucket holds five, and refills one every 2 s.
    let mut asked = tokio::task::JoinSet::new();
    for i in 0..10 {
        let path = absent(i);
        asked.spawn(async move { request(port, "GET", &path, "", "").await });
    }
    let answers = asked.join_all().await;
    let codes: Vec<u16> = answers.iter().map(|a| status(a)).collect();
    println!("ten lookups at once: {codes:?}");
    let limited: Vec<&String> = answers.iter().filter(|a| status(a) == 429).collect();
    let looked = codes.iter().filter(|c| **c == 404).count();
    assert!((5..=7).contains(&looked) && looked + limited.len() == 10, "{codes:?}");
    for answer in &limited {
        let retry = answer
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("retry-after: ").map(str::to_owned))
            .and_then(|v| v.trim().parse::<u64>().ok());
        assert!(retry.is_some_and(|r| (1..=2).contains(&r)), "{answer}");
    }
    // And once the bucket refilled, lookups pass again.
    let passes =
        wait_until("a lookup passes the rate limit again", Duration::from_secs(10), || {
            let path = absent(99);
            async move { status(&request(port, "GET", &path, "", "").await) == 404 }
        })
        .await;
    assert!(passes, "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_otlp_endpoint_with_credentials_is_refused_by_check_and_run_with_exit_2() {
    let secret = "Fz-s3cret-9Qx-otlp";
    let config = format!(
        "[source]\nurl = \"postgres://walrelay@127.0.0.1:1/app\"\n[outbox]\ntable = \"public.outbox\"\n[kafka]\n\"bootstrap.servers\" = \"127.0.0.1:1\"\n[tracing]\notlp_endpoint = \"http://walrelay:{secret}@collector:4318\"\n"
    );
    for command in ["check", "run"] {
        let run = walrelay_async(&[command], Some(&config)).await;
        println!("walrelay {command}: exit {:?}: {}", run.code, run.stderr.trim());
        assert_eq!(run.code, Some(2), "{run}");
        assert!(run.stderr.contains("[tracing] `otlp_endpoint`"), "{run}");
        assert!(run.stderr.contains("remove it from the URL"), "{run}");
        assert!(!run.stderr.contains(secret) && !run.stdout.contains(secret), "{run}");
    }
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
    // Frozen below for longer than Kafka's 9 s broker session: kept, so that the thaw is a
    // broker answering again, not a single node fencing itself (which is not what this tests).
    let broker = tokio::task::spawn_blocking(private_broker_keeping_its_session).await.unwrap();
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
    assert_slot_shown(&s, shown.as_deref(), &pg, &dom).await;
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
    if !fallen {
        // Whose is the outage: a client of the test's own, new, asks the broker directly.
        let (bootstrap, topic) = (broker.bootstrap().to_string(), topic.clone());
        let read = tokio::task::spawn_blocking(move || kafka::records_in(&bootstrap, &topic));
        println!("a new client of the test reads {}: {:?} record(s)", s.topic("Order"), read.await);
    }
    assert!(
        fallen && max.is_some_and(|m| m > 8.0),
        "last {last:?}, max {max:?}\n{dom}\n--- the relay's log ---\n{}\n--- the broker's log ---\n{}",
        relay.log(),
        crate::support::tail_file(broker.log_path(), 60)
    );
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}
