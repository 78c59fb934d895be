//! The consumer side end to end: a relay SIGKILLed while events are written, then a replay of
//! the same window, into examples/inbox-consumer.rs. Every event's effect is applied exactly
//! once, however many times it arrived.

use std::collections::HashSet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::common::Setup;
use crate::replay::replay;
use crate::support::process::RelayProcess;
use crate::support::readback::read_back;
use crate::support::slot::assert_released_after_kill;
use crate::support::writer::{Rng, Writer, WriterConfig};
use crate::support::{services, unique, wait_until};

#[allow(dead_code)]
#[path = "../examples/inbox-consumer.rs"]
mod inbox_consumer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_consumer_applies_each_event_once_through_relay_kills_and_a_replay() {
    const KILLS: usize = 3;
    let s = Setup::new("inbox").await;
    let app = services().pg.create_database("inbox_app").await;
    let mut relay = s.start_streaming(&s.config()).await;

    let mut rng = Rng::from_time();
    let mut wcfg = WriterConfig::new(&s.db.url, &s.topic_prefix, &["Order"], 10);
    wcfg.pause = Duration::from_millis(5);
    wcfg.seed = rng.next_u64();
    let topics = wcfg.topics();
    let writer = Writer::spawn(wcfg);

    // The consumer runs from the start, as a service would, through the kills and the replay.
    let args = inbox_consumer::Args {
        brokers: services().broker.bootstrap().to_string(),
        group: unique("inbox_group"),
        topics: topics.clone(),
        database_url: app.url.clone(),
    };
    let counts = Arc::new(inbox_consumer::Counts::default());
    let (stop, stopped) = watch::channel(false);
    let consumer = {
        let counts = Arc::clone(&counts);
        tokio::spawn(async move { inbox_consumer::run(&args, counts, stopped).await })
    };

    for _ in 0..KILLS {
        tokio::time::sleep(rng.millis(600, 1800)).await;
        relay.kill();
        assert_released_after_kill(&s.db.url, &s.slot).await;
        relay = RelayProcess::start(&s.config());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let report = writer.stop().await;
    let want = report.ids();
    let (bootstrap, quiet) = (services().broker.bootstrap(), Duration::from_secs(1));
    let got = read_back(bootstrap, &topics, &[&report], quiet, Duration::from_secs(60)).await.got;
    let relayed: HashSet<&str> = got.iter().map(|d| d.id.as_str()).collect();
    let missing: Vec<&String> = want.iter().filter(|id| !relayed.contains(id.as_str())).collect();
    assert!(
        missing.is_empty(),
        "{} of {} committed events never arrived (first: {:?})\n{}",
        missing.len(),
        want.len(),
        missing.first(),
        s.diagnostics(&relay)
    );
    let relay_duplicates = got.len() - relayed.len();

    // The same window again, as an operator would after a consumer bug.
    let run = replay(&s.config(), &["--since", "1h", "--yes"]).await;
    assert_eq!(run.code, Some(0), "{run}");
    let sent = format!("sent {} events", want.len());
    assert!(run.stdout.replace(',', "").contains(&sent), "{run}");

    // Everything the topic holds reaches the consumer: the relay's records and the replay's.
    let total = (got.len() + want.len()) as u64;
    let c = Arc::clone(&counts);
    let done =
        wait_until("the consumer has received every record", Duration::from_secs(90), || {
            let c = Arc::clone(&c);
            async move { c.received.load(Relaxed) >= total }
        })
        .await;
    let _ = stop.send(true);
    consumer.await.unwrap().expect("the consumer failed");
    let (received, applied, duplicates) = (
        counts.received.load(Relaxed),
        counts.applied.load(Relaxed),
        counts.duplicates.load(Relaxed),
    );
    println!(
        "inbox consumer: {} events committed, relay killed {KILLS}×; {} records from the relay ({relay_duplicates} duplicates) + {} replayed; consumer received {received}, applied {applied}, discarded {duplicates} duplicates",
        want.len(),
        got.len(),
        want.len()
    );
    assert!(done, "the consumer received {received} of {total} records");

    let db = app.connect().await;
    let row =
        db.query_one("SELECT count(*), count(DISTINCT event_id) FROM effects", &[]).await.unwrap();
    let (effects, distinct): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!(effects as usize, want.len(), "one effect per committed event");
    assert_eq!(distinct, effects, "no effect applied twice");
    let applied_ids: HashSet<String> = db
        .query("SELECT event_id FROM effects", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(applied_ids, want, "the effects are exactly the committed events");
    assert_eq!(applied, want.len() as u64);
    assert_eq!(duplicates, received - applied);
    assert!(duplicates >= want.len() as u64, "the replay alone re-sent every event");
    assert_eq!(relay.terminate(), Some(0));
}
