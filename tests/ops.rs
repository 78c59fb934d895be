//! The operational surface while running: /metrics counts what actually happened, /readyz
//! reports streaming.

use std::time::Duration;

use crate::common::Setup;
use crate::support::kafka;
use crate::support::kafka::private_broker;
use crate::support::process::{freeze, http_get as get, metric, thaw, RelayProcess};
use crate::support::{free_port, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_match_the_records_read_back_and_readyz_reports_streaming() {
    let s = Setup::new("metrics").await;
    let port = free_port();
    let config = s.config_with("", "", &format!("[http]\nlisten = \"127.0.0.1:{port}\"\n"));
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let ready = wait_until("/readyz answers 200", Duration::from_secs(30), || async move {
        get(port, "/readyz").await.is_some_and(|r| r.starts_with("HTTP/1.1 200"))
    })
    .await;
    assert!(ready, "{}", s.diagnostics(&relay));
    s.insert_events("Order", "o-1", 40).await;
    let read = s.read("Order", 40).await;
    assert_eq!(read.len(), 40, "{}", s.diagnostics(&relay));

    let topic = s.topic("Order");
    let published = format!("walrelay_records_published_total{{topic=\"{topic}\"}}");
    let last_seen = std::sync::Mutex::new(String::new());
    let (seen, published_ref) = (&last_seen, published.as_str());
    let counted =
        wait_until("metrics count 40 published records", Duration::from_secs(10), || async move {
            let text = get(port, "/metrics").await.unwrap_or_default();
            let done = metric(&text, published_ref) == Some(40.0);
            *seen.lock().unwrap() = text;
            done
        })
        .await;
    let last = last_seen.into_inner().unwrap();
    assert!(counted, "metrics:\n{last}");
    assert_eq!(metric(&last, "walrelay_commit_to_ack_seconds_count"), Some(40.0), "{last}");
    // Every record also counts in commit→read, which can't exceed its commit→ack.
    assert_eq!(metric(&last, "walrelay_commit_to_read_seconds_count"), Some(40.0), "{last}");
    let sum = |name: &str| metric(&last, name).unwrap();
    assert!(
        sum("walrelay_commit_to_read_seconds_sum") <= sum("walrelay_commit_to_ack_seconds_sum"),
        "{last}"
    );
    assert!(metric(&last, "walrelay_transactions_total").unwrap() >= 40.0, "{last}");
    assert_eq!(metric(&last, "walrelay_delivery_errors_total"), Some(0.0), "{last}");
    assert_eq!(metric(&last, "walrelay_dead_lettered_total"), Some(0.0), "{last}");
    assert!(metric(&last, "walrelay_confirmed_lsn").unwrap() > 0.0, "{last}");
    assert_eq!(metric(&last, "walrelay_streaming"), Some(1.0), "{last}");
    let p99_bucket = last
        .lines()
        .find(|l| l.starts_with("walrelay_commit_to_ack_seconds_bucket{le=\"1.0\"}"))
        .unwrap();
    println!("metrics after 40 events: {published} 40; {p99_bucket}");
    println!("--- /metrics ---\n{}", last.split("\r\n\r\n").nth(1).unwrap_or(&last));
    let readyz = get(port, "/readyz").await.unwrap();
    assert!(readyz.starts_with("HTTP/1.1 200"), "{readyz}");
    assert_eq!(relay.terminate(), Some(0));
}

/// The counters that only move when something goes wrong move exactly as often as it did: one
/// dead-lettered row, one reconnect after the walsender was terminated; and once everything is
/// acknowledged nothing is in flight and the lag is small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_dead_letters_reconnects_and_show_nothing_in_flight_when_idle() {
    let s = Setup::new("metrics2").await;
    s.db.execute("ALTER TABLE outbox ADD COLUMN event_id uuid").await;
    let port = free_port();
    let dlq = format!("{}.dlq", s.topic_prefix);
    let config = s.config_with(
        "\"table.field.event.id\" = \"event_id\"",
        "",
        &format!("[dead_letter]\ntopic = \"{dlq}\"\n[http]\nlisten = \"127.0.0.1:{port}\"\n"),
    );
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let client = s.db.connect().await;
    for id in ["11111111-1111-1111-1111-111111111111", "", "22222222-2222-2222-2222-222222222222"] {
        client
            .execute(
                "INSERT INTO outbox (id, event_id, aggregatetype, aggregateid, type, payload) \
                 VALUES (gen_random_uuid(), NULLIF($1, '')::uuid, 'Order', 'o-1', 'E', '{}')",
                &[&id],
            )
            .await
            .unwrap();
    }
    assert_eq!(s.read("Order", 2).await.len(), 2, "{}", s.diagnostics(&relay));
    // Everything so far confirmed, so the reconnect replays nothing (a replayed row would be
    // dead-lettered again, and counted again).
    let target: String =
        client.query_one("SELECT pg_current_wal_insert_lsn()::text", &[]).await.unwrap().get(0);
    let (c, slot, t) = (&client, s.slot.as_str(), target.as_str());
    let confirmed = wait_until("slot confirmed past the rows", Duration::from_secs(30), || async move {
        c.query_one(
            "SELECT confirmed_flush_lsn >= $2::text::pg_lsn FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot, &t],
        )
        .await
        .map(|r| r.get::<_, bool>(0))
        .unwrap_or(false)
    })
    .await;
    assert!(confirmed, "{}", s.diagnostics(&relay));
    let terminated: bool = client
        .query_one(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1",
            &[&s.slot],
        )
        .await
        .unwrap()
        .get(0);
    assert!(terminated);
    client
        .execute(
            "INSERT INTO outbox (id, event_id, aggregatetype, aggregateid, type, payload) \
             VALUES (gen_random_uuid(), gen_random_uuid(), 'Order', 'o-1', 'AfterReconnect', '{}')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(s.read("Order", 3).await.len(), 3, "{}", s.diagnostics(&relay));
    let last_seen = std::sync::Mutex::new(String::new());
    let seen = &last_seen;
    let settled = wait_until("metrics settle", Duration::from_secs(30), || async move {
        let text = get(port, "/metrics").await.unwrap_or_default();
        let done = metric(&text, "walrelay_reconnects_total") == Some(1.0)
            && metric(&text, "walrelay_inflight_records") == Some(0.0)
            && metric(&text, "walrelay_streaming") == Some(1.0);
        *seen.lock().unwrap() = text;
        done
    })
    .await;
    let text = last_seen.into_inner().unwrap();
    assert!(settled, "metrics:\n{text}\n{}", s.diagnostics(&relay));
    assert_eq!(metric(&text, "walrelay_dead_lettered_total"), Some(1.0), "{text}");
    assert_eq!(metric(&text, "walrelay_inflight_bytes"), Some(0.0), "{text}");
    assert!(metric(&text, "walrelay_lag_bytes").unwrap() < 16.0 * 1024.0 * 1024.0, "{text}");
    println!(
        "metrics: dead_lettered {:?}, reconnects {:?}, inflight {:?}, lag_bytes {:?}",
        metric(&text, "walrelay_dead_lettered_total"),
        metric(&text, "walrelay_reconnects_total"),
        metric(&text, "walrelay_inflight_records"),
        metric(&text, "walrelay_lag_bytes")
    );
    assert_eq!(relay.terminate(), Some(0));
}

/// `walrelay_lag_seconds` is the age of the oldest transaction read but not confirmed: while the
/// broker is frozen the relay reads the rows and Kafka never acknowledges them, so it climbs
/// with the clock from their commit; once the broker answers, they are confirmed and it falls
/// to 0, and `walrelay_last_confirmed_commit_timestamp_seconds` reaches their commit time. The
/// slot's retained WAL and `max_slot_wal_keep_size` are sampled as the server has them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lag_seconds_rise_while_the_broker_is_paused_and_fall_to_zero_after() {
    let broker = tokio::task::spawn_blocking(|| private_broker(None)).await.unwrap();
    let s = Setup::new("lagsecs").await;
    let port = free_port();
    // Longer than the pause: the records wait in librdkafka rather than fail and replay.
    let config = s.config_for_bootstrap(
        broker.bootstrap(),
        "",
        "\"message.timeout.ms\" = 120000",
        &format!("[http]\nlisten = \"127.0.0.1:{port}\"\n"),
    );
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let scrape = || async move { get(port, "/metrics").await.unwrap_or_default() };
    let value = |text: &str, name: &str| metric(text, name).unwrap_or(f64::NAN);

    s.insert_events("Order", "o-1", 1).await;
    let topic = s.topic("Order");
    assert_eq!(
        kafka::consume(broker.bootstrap(), &topic, 1, Duration::from_secs(60)).await.len(),
        1
    );
    let caught_up = wait_until("lag 0 after the first event", Duration::from_secs(30), || async {
        let text = scrape().await;
        value(&text, "walrelay_lag_seconds") == 0.0
            && value(&text, "walrelay_last_confirmed_commit_timestamp_seconds") > 0.0
    })
    .await;
    assert!(caught_up, "{}\n{}", scrape().await, relay.log());

    freeze(broker.pid());
    let client = s.db.connect().await;
    let epoch = "SELECT extract(epoch FROM clock_timestamp())::float8";
    let committed_after: f64 = client.query_one(epoch, &[]).await.unwrap().get(0);
    s.insert_events("Order", "o-2", 5).await;
    let committed_before: f64 = client.query_one(epoch, &[]).await.unwrap().get(0);
    // Read, not acknowledged: the lag counts from the first of the five commits.
    let first = std::sync::Mutex::new(f64::NAN);
    let first_ref = &first;
    let rising = wait_until("lag seconds pass 3 s", Duration::from_secs(30), || async move {
        let lag = value(&scrape().await, "walrelay_lag_seconds");
        *first_ref.lock().unwrap() = lag;
        lag >= 3.0
    })
    .await;
    let first = first.into_inner().unwrap();
    assert!(rising, "lag {first}\n{}\n{}", scrape().await, relay.log());
    let later = std::sync::Mutex::new(f64::NAN);
    let later_ref = &later;
    let still_rising =
        wait_until("lag seconds keep rising", Duration::from_secs(10), || async move {
            let lag = value(&scrape().await, "walrelay_lag_seconds");
            *later_ref.lock().unwrap() = lag;
            lag >= first + 2.0
        })
        .await;
    let later = later.into_inner().unwrap();
    let since_commit = unix_seconds() - committed_after;
    assert!(still_rising, "lag {first} then {later}\n{}", relay.log());
    assert!(
        later <= since_commit + 1.0,
        "lag {later} s, but the rows committed {since_commit} s ago"
    );
    let text = scrape().await;
    assert!(
        value(&text, "walrelay_last_confirmed_commit_timestamp_seconds") < committed_after,
        "{text}"
    );
    assert!(value(&text, "walrelay_inflight_records") >= 5.0, "{text}");

    thaw(broker.pid());
    let last_text = std::sync::Mutex::new(String::new());
    let last_ref = &last_text;
    let fell = wait_until("lag seconds fall to 0", Duration::from_secs(60), || async move {
        let text = scrape().await;
        let done = value(&text, "walrelay_lag_seconds") == 0.0
            && value(&text, "walrelay_last_confirmed_commit_timestamp_seconds") >= committed_after;
        *last_ref.lock().unwrap() = text;
        done
    })
    .await;
    let text = last_text.into_inner().unwrap();
    assert!(fell, "{text}\n{}", relay.log());
    let last_confirmed = value(&text, "walrelay_last_confirmed_commit_timestamp_seconds");
    assert!(last_confirmed <= committed_before + 1.0, "{last_confirmed} after {committed_before}");
    assert_eq!(
        kafka::consume(broker.bootstrap(), &topic, 6, Duration::from_secs(60)).await.len(),
        6
    );

    let limit_mb: String = client
        .query_one("SELECT setting FROM pg_settings WHERE name = 'max_slot_wal_keep_size'", &[])
        .await
        .unwrap()
        .get(0);
    let limit_mb: f64 = limit_mb.parse().unwrap();
    let expected_limit = if limit_mb < 0.0 { -1.0 } else { limit_mb * 1024.0 * 1024.0 };
    assert_eq!(value(&text, "walrelay_slot_wal_keep_limit_bytes"), expected_limit, "{text}");
    assert!(value(&text, "walrelay_slot_retained_wal_bytes") > 0.0, "{text}");
    println!(
        "broker frozen: walrelay_lag_seconds {first:.1} then {later:.1} (rows committed {since_commit:.1} s before); after thaw 0, last confirmed commit {:.3} s after the first paused row",
        last_confirmed - committed_after
    );
    assert_eq!(relay.terminate(), Some(0));
}

fn unix_seconds() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

/// Exactly-once through a 45 s broker outage (the broker killed, then started again on its
/// data): `walrelay_lag_seconds` rises with the outage from the first row committed in it, as
/// it does at-least-once, though no Kafka transaction can start meanwhile (the relay reads up
/// to the first waiting Begin while its transactions start), and falls to 0 once the rows are
/// in a committed Kafka transaction; `walrelay_lag_bytes` grows as the server's WAL does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_lag_seconds_rise_through_a_45_s_broker_outage_and_fall_to_zero_after() {
    const OUTAGE: Duration = Duration::from_secs(45);
    let broker = tokio::task::spawn_blocking(|| private_broker(None)).await.unwrap();
    let s = Setup::new("eolag").await;
    let port = free_port();
    let config = s.config_for_bootstrap(
        broker.bootstrap(),
        "",
        "",
        &format!(
            "[delivery]\nguarantee = \"exactly-once\"\n[http]\nlisten = \"127.0.0.1:{port}\"\n"
        ),
    );
    let mut relay = RelayProcess::start(&config);
    s.wait_streaming(&mut relay).await;
    let scrape = || async move { get(port, "/metrics").await.unwrap_or_default() };
    let value = |text: &str, name: &str| metric(text, name).unwrap_or(f64::NAN);
    s.insert_events("Order", "o-1", 1).await;
    let topic = s.topic("Order");
    let got = kafka::consume(broker.bootstrap(), &topic, 1, Duration::from_secs(60)).await;
    assert_eq!(got.len(), 1, "{}", relay.log());
    let caught_up = wait_until("lag 0 after the first event", Duration::from_secs(30), || async {
        value(&scrape().await, "walrelay_lag_seconds") == 0.0
    })
    .await;
    assert!(caught_up, "{}\n{}", scrape().await, relay.log());

    tokio::task::block_in_place(|| broker.kill());
    let went = std::time::Instant::now();
    s.insert_events("Order", "o-2", 5).await;
    let mut samples: Vec<(f64, f64, f64)> = Vec::new();
    while went.elapsed() < OUTAGE {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let text = scrape().await;
        samples.push((
            went.elapsed().as_secs_f64(),
            value(&text, "walrelay_lag_seconds"),
            value(&text, "walrelay_lag_bytes"),
        ));
    }
    let shown: Vec<String> =
        samples.iter().map(|(t, lag, bytes)| format!("{t:.0}s: {lag:.1} s / {bytes} B")).collect();
    let (_, last_lag, last_bytes) = *samples.last().expect("samples");
    let (_, _, first_bytes) = samples[0];
    tokio::task::block_in_place(|| broker.restart()).unwrap_or_else(|e| panic!("restart: {e}"));
    let fell = wait_until("lag seconds fall to 0", Duration::from_secs(90), || async {
        value(&scrape().await, "walrelay_lag_seconds") == 0.0
    })
    .await;
    let got = kafka::consume(broker.bootstrap(), &topic, 6, Duration::from_secs(60)).await;
    println!(
        "exactly-once, broker down {OUTAGE:?}: walrelay_lag_seconds / lag_bytes every 3 s: {}; after the restart lag 0: {fell}; {} of 6 records read_committed",
        shown.join(", "),
        got.len()
    );
    assert!(
        last_lag >= OUTAGE.as_secs_f64() - 10.0,
        "the lag did not rise with the outage: {}\n{}",
        shown.join(", "),
        relay.log()
    );
    let rising = samples.windows(2).filter(|w| w[1].1 > w[0].1).count();
    assert!(rising + 2 >= samples.len(), "the lag did not rise steadily: {}", shown.join(", "));
    assert!(last_bytes >= first_bytes, "lag bytes fell during the outage: {}", shown.join(", "));
    assert!(fell, "{}\n{}", scrape().await, relay.log());
    assert_eq!(got.len(), 6, "{}", relay.log());
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
}
