//! An idempotent consumer of walrelay's topics: the inbox pattern, done for real (see
//! docs/consumers.md).
//!
//! Duplicates are normal: a relay that crashes after publishing and before confirming sends
//! those events again, and `walrelay replay` sends a window again on purpose. Each record carries
//! its event id in the `id` header, the same every time it is sent. So, per record:
//!
//! 1. `BEGIN`;
//! 2. `INSERT INTO inbox (event_id) VALUES ($1) ON CONFLICT DO NOTHING` — the primary key decides,
//!    inside the transaction, whether this event was seen (a `SELECT` first would race with a
//!    second consumer of the same partition after a rebalance);
//! 3. only if that inserted a row: apply the effect (here, a row in `effects`);
//! 4. `COMMIT` — the inbox row and the effect commit together, or neither does;
//! 5. only then commit the Kafka offset. A crash between 4 and 5 re-delivers the record; step 2
//!    discards it.
//!
//! Run it against a relay's topic:
//!
//! ```text
//! cargo run --example inbox-consumer -- --brokers localhost:9092 --group billing \
//!     --topic outbox.event.Order --database-url postgres://app@localhost/billing
//! ```

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::ClientConfig;
use tokio::sync::watch;
use tokio_postgres::{Client, NoTls};

#[derive(Parser, Debug, Clone)]
pub struct Args {
    /// Kafka bootstrap servers.
    #[arg(long)]
    pub brokers: String,
    /// The consumer group: its members share the topic's partitions.
    #[arg(long)]
    pub group: String,
    /// The topics to consume (repeatable).
    #[arg(long = "topic", required = true)]
    pub topics: Vec<String>,
    /// Where the inbox and the effects live.
    #[arg(long)]
    pub database_url: String,
}

/// What the consumer did, shared with whoever watches it.
#[derive(Debug, Default)]
pub struct Counts {
    /// Records received.
    pub received: AtomicU64,
    /// Records whose effect was applied (first time their event id was seen).
    pub applied: AtomicU64,
    /// Records discarded because the inbox already had their event id.
    pub duplicates: AtomicU64,
}

/// The inbox (one row per event id ever applied) and the table the effect writes.
pub const SCHEMA: &str = "\
    CREATE TABLE IF NOT EXISTS inbox (\
        event_id text PRIMARY KEY, \
        received_at timestamptz NOT NULL DEFAULT now()); \
    CREATE TABLE IF NOT EXISTS effects (\
        n bigserial PRIMARY KEY, \
        event_id text NOT NULL, \
        aggregate_id text, \
        payload text)";

/// Consumes until `stop` turns true, applying each event's effect once.
pub async fn run(
    args: &Args,
    counts: Arc<Counts>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    let (mut db, connection) = tokio_postgres::connect(&args.database_url, NoTls)
        .await
        .map_err(|e| format!("cannot connect to {}: {e}", args.database_url))?;
    tokio::spawn(connection);
    db.batch_execute(SCHEMA).await.map_err(|e| format!("cannot create the inbox: {e}"))?;

    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &args.brokers)
        .set("group.id", &args.group)
        // Offsets are committed by hand, after the database commit (step 5).
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        // With [delivery] guarantee = "exactly-once", records of aborted Kafka transactions are
        // skipped; without it this changes nothing (walrelay's records are then not
        // transactional). The inbox stays necessary either way: see docs/consumers.md.
        .set("isolation.level", "read_committed")
        .create()
        .map_err(|e| format!("cannot create the consumer: {e}"))?;
    let topics: Vec<&str> = args.topics.iter().map(String::as_str).collect();
    consumer.subscribe(&topics).map_err(|e| format!("cannot subscribe to {topics:?}: {e}"))?;

    loop {
        let message = tokio::select! {
            m = consumer.recv() => match m {
                Ok(m) => m,
                Err(e @ KafkaError::MessageConsumptionFatal(_)) => {
                    return Err(format!("consumer error: {e}"))
                }
                // librdkafka recovers from the rest by itself: a topic the relay has not created
                // yet (UnknownTopicOrPartition), a broker restarting, a rebalance.
                Err(e) => {
                    eprintln!("consumer: {e} (librdkafka retries)");
                    continue;
                }
            },
            _ = stop.wait_for(|s| *s) => return Ok(()),
        };
        counts.received.fetch_add(1, Relaxed);
        if handle(&mut db, &message).await? {
            counts.applied.fetch_add(1, Relaxed);
        } else {
            counts.duplicates.fetch_add(1, Relaxed);
        }
        // After the database commit: a crash before this line re-delivers the record, and the
        // inbox discards it. Async is enough: a lost commit only means one more redelivery.
        consumer
            .commit_message(&message, CommitMode::Async)
            .map_err(|e| format!("cannot commit the offset: {e}"))?;
    }
}

/// Applies one record in one transaction; false when its event id was already in the inbox.
async fn handle(db: &mut Client, message: &BorrowedMessage<'_>) -> Result<bool, String> {
    let Some(event_id) = header(message, "id") else {
        // Not from walrelay (or from a router without the id header): nothing to deduplicate
        // by. A real consumer would dead-letter it; this one stops.
        return Err(format!(
            "record at {}/{}@{} has no `id` header",
            message.topic(),
            message.partition(),
            message.offset()
        ));
    };
    let key = message.key().map(|k| String::from_utf8_lossy(k).into_owned());
    let payload = message.payload().map(|p| String::from_utf8_lossy(p).into_owned());
    let tx = db.transaction().await.map_err(|e| format!("BEGIN: {e}"))?;
    let inserted = tx
        .execute("INSERT INTO inbox (event_id) VALUES ($1) ON CONFLICT DO NOTHING", &[&event_id])
        .await
        .map_err(|e| format!("inbox insert: {e}"))?;
    if inserted == 1 {
        // The effect. In a real service: the order's state change, the email queued, ….
        tx.execute(
            "INSERT INTO effects (event_id, aggregate_id, payload) VALUES ($1, $2, $3)",
            &[&event_id, &key, &payload],
        )
        .await
        .map_err(|e| format!("effect: {e}"))?;
    }
    tx.commit().await.map_err(|e| format!("COMMIT: {e}"))?;
    Ok(inserted == 1)
}

fn header(message: &BorrowedMessage<'_>, name: &str) -> Option<String> {
    let headers = message.headers()?;
    headers
        .iter()
        .find(|h| h.key == name)
        .and_then(|h| h.value)
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

#[allow(dead_code)] // Tests include this file for `run` and have a main of their own.
#[tokio::main]
async fn main() {
    let args = Args::parse();
    let counts = Arc::new(Counts::default());
    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        let _ = stop_tx.send(true);
    });
    let report = Arc::clone(&counts);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            eprintln!(
                "received {}, applied {}, duplicates discarded {}",
                report.received.load(Relaxed),
                report.applied.load(Relaxed),
                report.duplicates.load(Relaxed)
            );
        }
    });
    if let Err(e) = run(&args, Arc::clone(&counts), stop).await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
    eprintln!(
        "stopped: received {}, applied {}, duplicates discarded {}",
        counts.received.load(Relaxed),
        counts.applied.load(Relaxed),
        counts.duplicates.load(Relaxed)
    );
}
