//! The guarantees every sink beyond Kafka must show, written once and run against each real
//! broker: routing, headers, event id and key; per-key order across concurrent writers; SIGKILLs
//! while rows flow; a 20 s broker outage; a poison record; a SIGTERM's exit.
//!
//! A sink's tests implement [`Broker`] for their server and call these.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::common::Setup;
use crate::support::process::{http_get, metric, RelayProcess};
use crate::support::sinks::Delivered;
use crate::support::writer::{Writer, WriterConfig, WriterReport};
use crate::support::{free_port, wait_until};
use walrelay::lsn::Lsn;

/// One sink's real server, as the scenarios drive it.
pub trait Broker: Sync {
    /// `[delivery] sink = …` and the sink's section for the test's relay, routing its topics
    /// (`s.topic(type)`), its dead letters (`s.topic("dlq")`) and a destination that refuses
    /// records of aggregate type `Poison`.
    fn sections(&self, s: &Setup) -> String;
    /// Everything delivered so far to the test's destinations, in each destination's order.
    async fn delivered(&self, s: &Setup) -> Vec<Delivered>;
    /// Stops the broker (true) or brings it back (false).
    async fn outage(&self, on: bool);
    /// The broker drops a repeated event id by itself (JetStream, SQS FIFO).
    fn dedups(&self) -> bool;
}

/// The relay's config with the sink and an `[http]` listener on `http`.
fn config(b: &impl Broker, s: &Setup, http: u16) -> String {
    let extra = format!(
        "{}\n[dead_letter]\ntopic = \"{}\"\n\n[http]\nlisten = \"127.0.0.1:{http}\"\n",
        b.sections(s),
        s.topic("dlq")
    );
    s.config_with("", "", &extra)
}

/// One delivery of a writer's event: its id, `routed/key` and its number among its
/// aggregate's events.
struct Event {
    id: String,
    aggregate: String,
    seq: u64,
}

fn events(delivered: &[Delivered]) -> Vec<Event> {
    delivered
        .iter()
        .filter_map(|d| {
            let value: serde_json::Value = serde_json::from_slice(&d.body).ok()?;
            Some(Event {
                id: d.header("id")?.to_string(),
                aggregate: format!("{}/{}", d.routed_to, d.key.as_deref()?),
                seq: value.get("seq")?.as_u64()?,
            })
        })
        .collect()
}

/// Waits until every id of `want` was delivered (60 s at most), then a moment more for
/// trailing copies; returns every delivery.
async fn wait_for(b: &impl Broker, s: &Setup, want: &HashSet<String>) -> Vec<Delivered> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let got = b.delivered(s).await;
        let seen: HashSet<&str> = got.iter().filter_map(|d| d.header("id")).collect();
        if want.iter().all(|id| seen.contains(id.as_str())) || Instant::now() > deadline {
            tokio::time::sleep(Duration::from_millis(500)).await;
            return b.delivered(s).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Lost, duplicated and out-of-order counts of what arrived against what was committed: per
/// aggregate, the first deliveries must come in commit order.
struct Verdict {
    lost: Vec<String>,
    duplicates: usize,
    reordered: Vec<String>,
}

fn verdict(committed: &WriterReport, delivered: &[Delivered]) -> Verdict {
    let got = events(delivered);
    let mut count: HashMap<&str, usize> = HashMap::new();
    for e in &got {
        *count.entry(e.id.as_str()).or_default() += 1;
    }
    let lost = committed
        .events
        .iter()
        .filter(|e| !count.contains_key(e.id.as_str()))
        .map(|e| format!("{} ({} #{})", e.id, e.aggregate, e.seq))
        .collect();
    let duplicates = count.values().map(|n| n - 1).sum();
    let mut first_seen = HashSet::new();
    let mut last: HashMap<&str, u64> = HashMap::new();
    let mut reordered = Vec::new();
    for e in &got {
        if !first_seen.insert(e.id.as_str()) {
            continue;
        }
        if let Some(before) = last.insert(e.aggregate.as_str(), e.seq) {
            if e.seq < before {
                reordered.push(format!("{}: #{} after #{before}", e.aggregate, e.seq));
            }
        }
    }
    Verdict { lost, duplicates, reordered }
}

fn writer(s: &Setup, agg_prefix: &str, max_events: usize) -> WriterConfig {
    let mut cfg = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order", "Invoice"], 8);
    cfg.agg_prefix = agg_prefix.into();
    cfg.max_events = Some(max_events);
    cfg.max_txn = 4;
    cfg
}

/// Routing, the Debezium headers, the event id in the broker's dedup key, and the key.
pub async fn routes_headers_event_id_and_key(b: &impl Broker, s: &Setup) {
    let mut relay = RelayProcess::start(&config(b, s, free_port()));
    s.wait_streaming(&mut relay).await;
    let orders = s.insert_events("Order", "o-1", 2).await;
    let invoice = s.insert_events("Invoice", "i-9", 1).await;
    let want: HashSet<String> = orders.iter().chain(&invoice).cloned().collect();
    let got = wait_for(b, s, &want).await;
    assert_eq!(got.len(), 3, "{got:#?}\nrelay log:\n{}", relay.log());
    for d in &got {
        let id = d.header("id").expect("Debezium's id header").to_string();
        assert_eq!(
            d.dedup_id.as_deref(),
            Some(id.as_str()),
            "the broker's dedup key is the event id: {d:?}"
        );
        let (topic, key) = if orders.contains(&id) { ("Order", "o-1") } else { ("Invoice", "i-9") };
        assert_eq!(d.routed_to, s.topic(topic), "{d:?}");
        assert_eq!(d.key.as_deref(), Some(key), "{d:?}");
        let body: serde_json::Value =
            serde_json::from_slice(&d.body).expect("the payload, as JSON");
        assert!(body.get("n").is_some(), "the value is the row's payload: {body}");
    }
    let order_ids: Vec<&str> = got
        .iter()
        .filter(|d| d.routed_to == s.topic("Order"))
        .filter_map(|d| d.header("id"))
        .collect();
    assert_eq!(order_ids, orders.iter().map(String::as_str).collect::<Vec<_>>(), "in commit order");
    println!(
        "routing: {} records, routed to {:?}, dedup key = id header, key as documented",
        got.len(),
        got.iter().map(|d| d.routed_to.as_str()).collect::<HashSet<_>>()
    );
    assert_eq!(relay.terminate(), Some(0), "relay log:\n{}", relay.log());
}

/// Four writers commit concurrently; every aggregate's events arrive in commit order.
pub async fn per_key_order_across_four_writers(b: &impl Broker, s: &Setup) {
    let mut relay = RelayProcess::start(&config(b, s, free_port()));
    s.wait_streaming(&mut relay).await;
    let writers: Vec<Writer> =
        (0..4).map(|w| Writer::spawn(writer(s, &format!("w{w}"), 150))).collect();
    let mut committed = WriterReport::default();
    for w in writers {
        committed.events.extend(w.join().await.events);
    }
    let want: HashSet<String> = committed.events.iter().map(|e| e.id.clone()).collect();
    let got = wait_for(b, s, &want).await;
    let v = verdict(&committed, &got);
    println!(
        "4 writers: committed {}, delivered {}, lost {}, reordered {}, duplicates {}",
        committed.events.len(),
        got.len(),
        v.lost.len(),
        v.reordered.len(),
        v.duplicates
    );
    assert!(
        v.lost.is_empty() && v.reordered.is_empty(),
        "lost {:?}\nreordered {:?}\nrelay log:\n{}",
        v.lost,
        v.reordered,
        relay.log()
    );
    assert_eq!(relay.terminate(), Some(0), "relay log:\n{}", relay.log());
}

/// Five SIGKILLs while rows flow: nothing lost, order kept, and no duplicate where the broker
/// deduplicates by event id.
pub async fn five_sigkills_lose_nothing(b: &impl Broker, s: &Setup) {
    let http = free_port();
    let cfg = config(b, s, http);
    let mut w = writer(s, "k", 1_500);
    w.rate = Some(300.0);
    // The relay creates the publication: rows committed before it would be in none.
    let mut relay = RelayProcess::start(&cfg);
    s.wait_streaming(&mut relay).await;
    let writer = Writer::spawn(w);
    for kill in 0..5 {
        if kill > 0 {
            relay = RelayProcess::start(&cfg);
            s.wait_streaming(&mut relay).await;
        }
        writer.wait_committed(150 * (kill + 1), Duration::from_secs(60)).await;
        relay.kill();
        let (slot, db) = (s.slot.as_str(), &s.db);
        wait_until("the killed relay's slot is free", Duration::from_secs(30), || async move {
            db.slot_active(slot).await != Some(true)
        })
        .await;
    }
    relay = RelayProcess::start(&cfg);
    let committed = writer.join().await;
    let want: HashSet<String> = committed.events.iter().map(|e| e.id.clone()).collect();
    let got = wait_for(b, s, &want).await;
    let v = verdict(&committed, &got);
    println!(
        "5 SIGKILLs: committed {}, delivered {}, lost {}, duplicates delivered {}, reordered {}",
        committed.events.len(),
        got.len(),
        v.lost.len(),
        v.duplicates,
        v.reordered.len()
    );
    assert!(v.lost.is_empty(), "lost {:?}\nrelay log:\n{}", v.lost, relay.log());
    assert!(v.reordered.is_empty(), "reordered {:?}", v.reordered);
    if b.dedups() {
        assert_eq!(v.duplicates, 0, "the broker dedups by event id, yet duplicates arrived");
    }
    assert_eq!(relay.terminate(), Some(0), "relay log:\n{}", relay.log());
}

/// The broker away 20 s while rows are written: the slot is not confirmed past the first
/// record it did not take, `/readyz` says not ready and the lag grows, and once it is back
/// everything arrives.
pub async fn a_twenty_second_outage_loses_nothing_and_confirms_nothing_past_it(
    b: &impl Broker,
    s: &Setup,
) {
    let http = free_port();
    let mut relay = RelayProcess::start(&config(b, s, http));
    s.wait_streaming(&mut relay).await;
    let before = s.insert_events("Order", "o-1", 5).await;
    wait_for(b, s, &before.iter().cloned().collect()).await;

    b.outage(true).await;
    let first = s.insert_events("Order", "o-1", 1).await;
    let first_end: Lsn = pg_wal_insert_lsn(s).await;
    let mut during = first.clone();
    let began = Instant::now();
    let (mut not_ready, mut lag_seen, mut confirmed_max) = (None, 0.0f64, Lsn::default());
    while began.elapsed() < Duration::from_secs(20) {
        during.extend(s.insert_events("Order", "o-1", 1).await);
        if let Some(r) = http_get(http, "/readyz").await {
            if !r.contains(" 200") {
                not_ready.get_or_insert(r.lines().last().unwrap_or_default().to_string());
            }
        }
        if let Some(m) = http_get(http, "/metrics").await {
            lag_seen = lag_seen.max(metric(&m, "walrelay_lag_seconds").unwrap_or(0.0));
        }
        if let Some(c) = s.db.confirmed_flush_lsn(&s.slot).await {
            confirmed_max = confirmed_max.max(c.parse().unwrap());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "outage 20 s: {} rows written, slot confirmed at most {confirmed_max} (first unacked commit ends ≤ {first_end}), /readyz: {not_ready:?}, lag up to {lag_seen:.1} s",
        during.len()
    );
    assert!(confirmed_max < first_end, "the slot was confirmed to {confirmed_max}, past the first record the broker never took (≤ {first_end})");
    assert!(not_ready.is_some(), "/readyz said ready all through the outage");
    assert!(lag_seen >= 5.0, "walrelay_lag_seconds stayed at {lag_seen} while records waited");
    b.outage(false).await;
    let want: HashSet<String> = before.iter().chain(&during).cloned().collect();
    let got = wait_for(b, s, &want).await;
    let seen: HashSet<&str> = got.iter().filter_map(|d| d.header("id")).collect();
    let lost: Vec<&String> = want.iter().filter(|id| !seen.contains(id.as_str())).collect();
    assert!(lost.is_empty(), "lost after the outage: {lost:?}\nrelay log:\n{}", relay.log());
    let ready = wait_until("/readyz is ready again", Duration::from_secs(30), || async move {
        http_get(http, "/readyz").await.is_some_and(|r| r.contains(" 200"))
    })
    .await;
    assert!(ready, "/readyz never recovered\nrelay log:\n{}", relay.log());
    assert_eq!(relay.terminate(), Some(0), "relay log:\n{}", relay.log());
}

/// A record the sink refuses for good goes to the dead-letter destination, and the rows after
/// it flow.
pub async fn a_poison_record_is_dead_lettered_and_later_rows_flow(b: &impl Broker, s: &Setup) {
    let mut relay = RelayProcess::start(&config(b, s, free_port()));
    s.wait_streaming(&mut relay).await;
    let poison = s.insert_events("Poison", "p-1", 1).await;
    let after = s.insert_events("Order", "o-1", 3).await;
    let got = wait_for(b, s, &after.iter().cloned().collect()).await;
    let dead: Vec<&Delivered> = got.iter().filter(|d| d.routed_to == s.topic("dlq")).collect();
    assert!(
        dead.iter().any(|d| d.header("walrelay.event.id") == Some(poison[0].as_str())),
        "no dead letter names {}: {dead:?}\nrelay log:\n{}",
        poison[0],
        relay.log()
    );
    println!(
        "poison: event {} dead-lettered to {}; {} later rows delivered",
        poison[0],
        s.topic("dlq"),
        after.len()
    );
    assert_eq!(relay.terminate(), Some(0), "relay log:\n{}", relay.log());
}

/// SIGTERM while rows flow: the relay drains and exits 0 within 10 s.
pub async fn sigterm_exits_within_ten_seconds(b: &impl Broker, s: &Setup) {
    let mut relay = RelayProcess::start(&config(b, s, free_port()));
    s.wait_streaming(&mut relay).await;
    let mut w = writer(s, "t", 100_000);
    w.rate = Some(500.0);
    let writer = Writer::spawn(w);
    writer.wait_committed(300, Duration::from_secs(60)).await;
    let began = Instant::now();
    let code = relay.terminate();
    let took = began.elapsed();
    let committed = writer.stop().await;
    println!("SIGTERM while {} rows flowed: exit {code:?} after {took:?}", committed.events.len());
    assert_eq!(code, Some(0), "relay log:\n{}", relay.log());
    assert!(took <= Duration::from_secs(10), "took {took:?}");
}

async fn pg_wal_insert_lsn(s: &Setup) -> Lsn {
    let row =
        s.db.connect()
            .await
            .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
            .await
            .unwrap();
    row.get::<_, String>(0).parse().unwrap()
}
