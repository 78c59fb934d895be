//! Memory under load: the in-flight limit holds while the broker is frozen, and one
//! transaction of 100,000 rows is delivered and confirmed only after its last acknowledgement.

use std::time::{Duration, Instant};

use crate::common::{release_slot, Setup};
use crate::support::kafka::{self, consume_while, private_broker, Next};
use crate::support::process::{first_read_after, freeze, hwm_kb, mb, rss_kb, thaw};
use crate::support::readback::{
    assert_no_loss_in_order, read_back, write_and_await_delivery, QUIET,
};
use crate::support::services;
use crate::support::slot::{slot_active_pid, slot_confirmed, wait_confirmed};
use crate::support::writer::{collect_deliveries, verify, Event, Writer, WriterConfig};

/// `[limits] inflight_records = 2000` and a frozen broker with a long `message.timeout.ms`:
/// 30,000 rows of ~2 KB (60 MB) are committed, the relay stops reading at the limit, keeps its
/// walsender alive beyond wal_sender_timeout, and its RSS grows by less than the in-flight bound
/// plus a constant; after SIGCONT everything arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backpressure_with_hung_broker_keeps_memory_bounded_and_delivers_everything() {
    const ROWS: usize = 30_000;
    const PAD: usize = 2000;
    const INFLIGHT: usize = 2000;
    const CONSTANT_KB: u64 = 32 * 1024;
    let broker = tokio::task::spawn_blocking(|| private_broker(None)).await.unwrap();
    let s = Setup::new("backpressure").await;
    let config = s.config_for_bootstrap(
        broker.bootstrap(),
        "",
        "\"message.timeout.ms\" = 120000",
        &format!("[limits]\ninflight_records = {INFLIGHT}\n"),
    );
    let mut relay = s.start_streaming(&config).await;
    // Warm up (producer, topic, router caches), then take the baseline.
    let mut warm = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 10);
    warm.agg_prefix = "warm".into();
    warm.max_events = Some(50);
    warm.pad = PAD;
    let topics = warm.topics();
    let warm = write_and_await_delivery(broker.bootstrap(), warm, &relay).await;
    let baseline = rss_kb(relay.pid()).unwrap();
    let walsender = slot_active_pid(&s.db.url, &s.slot).await.unwrap();

    freeze(broker.pid());
    let hung_at = Instant::now();
    let mut wcfg = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 100);
    wcfg.max_events = Some(ROWS);
    wcfg.max_txn = 1000;
    wcfg.pad = PAD;
    let writer = Writer::spawn(wcfg);
    let mut peak = baseline;
    let mut inactive_samples = 0;
    let mut samples = 0;
    while hung_at.elapsed() < Duration::from_secs(14) || !writer.is_finished() {
        assert!(hung_at.elapsed() < Duration::from_secs(60), "writer too slow");
        peak = peak.max(rss_kb(relay.pid()).unwrap_or(0));
        samples += 1;
        if slot_active_pid(&s.db.url, &s.slot).await != Some(walsender) {
            inactive_samples += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let report = writer.join().await;
    let hung_for = hung_at.elapsed();
    thaw(broker.pid());
    let resumed = Instant::now();

    let all = [&warm, &report];
    let bootstrap = broker.bootstrap();
    let deadline = Duration::from_secs(90);
    let v = read_back(bootstrap, &topics, &all, QUIET, deadline).await.verdict;
    let record_kb = ((PAD + 200) as u64).div_ceil(1024);
    let bound = INFLIGHT as u64 * record_kb;
    let growth = peak.saturating_sub(baseline);
    println!(
        "backpressure: {ROWS} rows × {PAD} B committed during a {hung_for:.1?} broker hang; relay RSS baseline {:.1} MB, peak {:.1} MB (+{:.1} MB); in-flight bound {INFLIGHT} records ≈ {:.1} MB, allowed growth bound + {:.0} MB; walsender changed in {inactive_samples}/{samples} samples; delivered {:.1?} after SIGCONT; {}",
        mb(baseline),
        mb(peak),
        mb(growth),
        mb(bound),
        mb(CONSTANT_KB),
        resumed.elapsed(),
        v.summary()
    );
    if !v.ok() {
        // Whether the relay or the reader fell short: what the broker holds, by watermarks
        // (failed once in CI with 524 of 30,050 read back after 90 s; cause not yet known).
        let (b, t) = (broker.bootstrap().to_string(), topics.clone());
        let held = tokio::task::spawn_blocking(move || {
            t.iter().map(|t| (t.clone(), kafka::records_in(&b, t))).collect::<Vec<_>>()
        })
        .await
        .unwrap();
        let log = relay.log();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        panic!(
            "{}\nthe broker holds {held:?}\nlost (first): {:?}\nreordered: {:?}\nrelay log, last 40 lines (newest first):\n{}",
            v.summary(),
            v.lost_ids.iter().take(5).collect::<Vec<_>>(),
            v.reordered_detail,
            tail.join("\n")
        );
    }
    assert!(
        growth < bound + CONSTANT_KB,
        "relay RSS grew {:.1} MB during the hang, above the in-flight bound {:.1} MB + {:.0} MB",
        mb(growth),
        mb(bound),
        mb(CONSTANT_KB)
    );
    assert_eq!(
        inactive_samples,
        0,
        "the relay lost its walsender while backpressured:\n{}",
        relay.log()
    );
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}

/// 100,000 outbox rows in one transaction. The relay is frozen (SIGSTOP) as soon as the first
/// record of it is in Kafka: at that moment part of the transaction is acknowledged and the
/// slot is not confirmed past its commit. Then everything arrives, in order per aggregate, and
/// only then is the commit confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_transaction_of_100000_rows_is_delivered_and_confirmed_only_after_the_last_ack() {
    const ROWS: i64 = 100_000;
    const AGGREGATES: i64 = 100;
    let s = Setup::new("hugetx").await;
    let topic = s.topic("Order");
    kafka::create_topic(services().broker.bootstrap(), &topic, 4).await;
    // Small produce requests, one at a time: the transaction then takes seconds to deliver, so
    // the relay is frozen part-way however busy the machine is (with librdkafka's defaults it
    // once delivered all 100,000 rows before the watermarks were read).
    let kafka = "\"batch.size\" = 4096\n\"max.in.flight.requests.per.connection\" = 1\n";
    let config = s.config_with("", kafka, "");
    let mut relay = s.start_streaming(&config).await;
    let c0 = slot_confirmed(&s.db.url, &s.slot).await.unwrap();

    let started = Instant::now();
    s.db.execute(&format!(
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) \
         SELECT gen_random_uuid(), 'Order', 'agg-' || (i % {AGGREGATES}), 'E', \
                jsonb_build_object('seq', i / {AGGREGATES}, 'n', i) \
         FROM generate_series(0, {} - 1) AS i",
        ROWS
    ))
    .await;
    let committed_in = started.elapsed();
    // Freeze the relay at the first record of the transaction in Kafka. On Kafka the topic's
    // high watermarks say so within a round trip; a reader would first spend seconds joining
    // its group, long enough for the relay to deliver the whole transaction (tansu's
    // watermarks are wrong, and its readers assign instead of joining).
    let bootstrap = services().broker.bootstrap().to_string();
    let topics = vec![topic.clone()];
    let pid = relay.pid();
    let mut frozen_at = None;
    if kafka::records_in(&bootstrap, &topic).is_some() {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(90) {
            let (b, t) = (bootstrap.clone(), topic.clone());
            let n = tokio::task::spawn_blocking(move || kafka::records_in(&b, &t)).await.unwrap();
            if n.unwrap_or(0) > 0 {
                freeze(pid);
                frozen_at = Some(Instant::now());
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    } else {
        consume_while(&bootstrap, &topics, Duration::from_secs(90), |next| {
            if let Next::Record(_) = next {
                freeze(pid);
                frozen_at = Some(Instant::now());
                return false;
            }
            true
        })
        .await;
    }
    assert!(frozen_at.is_some(), "nothing of the transaction reached Kafka:\n{}", relay.log());
    // Let what was already on the wire land, then count what Kafka holds and what the slot says.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let confirmed_frozen = slot_confirmed(&s.db.url, &s.slot).await.unwrap();
    let (b, t) = (bootstrap.clone(), topic.clone());
    let in_kafka =
        match tokio::task::spawn_blocking(move || kafka::records_in(&b, &t)).await.unwrap() {
            Some(n) => n as usize,
            None => kafka::consume(&bootstrap, &topic, ROWS as usize, Duration::from_secs(2))
                .await
                .len(),
        };
    let hwm_frozen = hwm_kb(pid).unwrap_or(0);
    // Read while the relay is frozen, not before it is watched: reading 100,000 rows took long
    // enough for the relay to deliver the whole transaction first.
    let truth: Vec<(String, String, i64)> = s
        .db
        .connect()
        .await
        .query("SELECT id::text, aggregateid, (payload->>'seq')::bigint FROM outbox ORDER BY (payload->>'n')::bigint", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    thaw(pid);

    let want = truth.iter().map(|t| t.0.clone()).collect();
    let got = collect_deliveries(
        &bootstrap,
        &topics,
        &want,
        Duration::from_millis(500),
        Duration::from_secs(120),
    )
    .await;
    let delivered_in = started.elapsed();
    let events: Vec<Event> = truth
        .iter()
        .map(|(id, agg, seq)| Event {
            id: id.clone(),
            aggregate: format!("{topic}/{agg}"),
            seq: *seq as u64,
            txn: 0,
        })
        .collect();
    let v = verify(&events, &got);
    let end = first_read_after(&relay.log(), c0).expect("the transaction's commit in the log");
    let confirmed_after = wait_confirmed(&s.db.url, &s.slot, end, Duration::from_secs(20)).await;
    let hwm = hwm_kb(pid).unwrap_or(0);
    println!(
        "one transaction of {ROWS} rows committed in {committed_in:.1?}; relay frozen with {in_kafka} of them in Kafka and the slot at {} (commit ends at {}); all delivered {delivered_in:.1?} after the insert began; relay peak RSS (VmHWM) {:.1} MB ({:.1} MB when frozen); {}",
        confirmed_frozen,
        end,
        mb(hwm),
        mb(hwm_frozen),
        v.summary()
    );
    assert!(
        in_kafka < ROWS as usize,
        "the relay delivered the whole transaction before it could be frozen; nothing was shown"
    );
    assert!(
        confirmed_frozen < end,
        "with {in_kafka} of {ROWS} rows acknowledged the slot was already confirmed to {} (commit end {})",
        confirmed_frozen,
        end
    );
    assert_no_loss_in_order(&v, "");
    assert!(
        confirmed_after,
        "the slot never confirmed the delivered transaction:\n{}",
        relay.log()
    );
    assert_eq!(relay.terminate(), Some(0), "{}", relay.log());
    release_slot(&s).await;
}
