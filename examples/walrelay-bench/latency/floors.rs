//! The floors each latency is read against, for the same layout, arrivals and record size: the
//! broker alone, the dual write the outbox replaces, and a bare pgoutput reader.

use super::*;

/// A producer with walrelay's settings (acks=all, idempotent, `linger.ms`, murmur2) and records
/// like walrelay's (key, `id` header, a ~300-byte value) into the shape's layout.
pub(super) struct FloorProducer {
    producer: FutureProducer,
    topics: Vec<String>,
    value: String,
}

impl FloorProducer {
    pub(super) async fn new(bootstrap: &str, shape: Shape) -> FloorProducer {
        let prefix = unique("floor");
        if shape == Shape::Pipelined {
            crate::kafka::create_topics(bootstrap, &prefix).await;
        }
        let producer: FutureProducer =
            crate::kafka::relay_like_producer(bootstrap).create().expect("producer");
        let value = format!("{{\"pad\": \"{}\"}}", "x".repeat(290));
        FloorProducer { producer, topics: shape.topics(&prefix), value }
    }

    /// Hands event `n`'s record to librdkafka; `None` if it refused it.
    pub(super) fn send(&self, n: u64) -> Option<rdkafka::producer::DeliveryFuture> {
        let key = format!("agg-{:05}", n % 1000);
        let id = format!("{:08x}-0000-4000-8000-{n:012x}", STEADY_GROUP);
        let record: FutureRecord<'_, str, str> =
            FutureRecord::to(&self.topics[n as usize % self.topics.len()])
                .key(key.as_str())
                .payload(self.value.as_str())
                .headers(
                    OwnedHeaders::new().insert(Header { key: "id", value: Some(id.as_str()) }),
                );
        self.producer.send_result(record).ok()
    }
}

/// The broker alone on an idle machine: records produced at `rate`, arriving as the shape's
/// do; send → delivery report, the first second not counted.
pub(super) async fn floor(bootstrap: &str, shape: Shape, rate: u64, seconds: f64) -> Quantiles {
    checkpoint().await;
    let producer = FloorProducer::new(bootstrap, shape).await;
    let mut rng = SplitMix(now_us());
    let start = Instant::now();
    let mut due = 0.0f64;
    let mut pending = Vec::new();
    let mut n = 0u64;
    while due < seconds {
        due += match shape {
            Shape::Pipelined => 1.0 / rate as f64,
            Shape::Clients => rng.exponential(1.0 / rate as f64),
        };
        let wait = due - start.elapsed().as_secs_f64();
        if wait > 0.0005 {
            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
        }
        n += 1;
        let sent = Instant::now();
        let counted = start.elapsed() > Duration::from_secs(1);
        if let Some(delivery) = producer.send(n) {
            pending.push(tokio::spawn(async move {
                let ok = matches!(delivery.await, Ok(Ok(_)));
                (ok && counted).then(|| sent.elapsed().as_secs_f64() * 1000.0)
            }));
        }
    }
    let mut ms = Vec::with_capacity(pending.len());
    for p in pending {
        if let Ok(Some(v)) = p.await {
            ms.push(v);
        }
    }
    Quantiles::of(ms)
}

/// Flushes what earlier phases left dirty, so a checkpoint they caused doesn't land in the next
/// phase's tail (a 20,000/s phase writes hundreds of MB of WAL).
pub(super) async fn checkpoint() {
    let c = crate::support::services().pg.connect_to("postgres").await;
    c.batch_execute("CHECKPOINT").await.expect("checkpoint");
}

/// The dual write, which the outbox replaces: the shape's writers commit the same load into a
/// database of their own that has no slot, and each writer produces its event's record itself
/// as soon as its commit returns. Measured from when the writer sent the transaction to the
/// delivery report, the first second not counted. This is the floor for commit→ack: the same
/// commits, WAL flushes, arrivals, broker and cores, without the walsender and walrelay. It
/// starts its clock a little earlier than walrelay's commit→ack does (which starts at the
/// commit timestamp, after the row was inserted), so it slightly favours walrelay's margin.
pub(super) async fn dual_write_floor(
    meter: &Meter,
    shape: Shape,
    rate: u64,
    seconds: f64,
) -> (Quantiles, CpuDelta) {
    let db = workload::create_db("bench_floor").await;
    let capacity = (rate as f64 * seconds * 1.3) as usize + 1000;
    let commit_us = Arc::new((0..capacity).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
    let producer = FloorProducer::new(crate::fresh::bootstrap(), shape).await;
    let (on_commit, rx) = dual_write_hook(producer, Instant::now() + Duration::from_secs(1), 1);
    checkpoint().await;
    let a = meter.snap(None);
    write(&db, shape, rate, seconds, 1, commit_us, Some(on_commit)).await;
    let cpu = delta(&a, &meter.snap(None));
    let ms = latencies(rx, capacity).await;
    workload::drop_db(&db).await;
    (Quantiles::of(ms), cpu)
}

/// The writers' hook of a dual write: every `sample`th event's record produced with `producer`
/// when its commit returns; each delivered one sends its latency (transaction sent → delivery
/// report, ms) to the receiver, unless it was sent before `counted_from`.
pub(super) fn dual_write_hook(
    producer: FloorProducer,
    counted_from: Instant,
    sample: u64,
) -> (workload::OnCommit, tokio::sync::mpsc::UnboundedReceiver<f64>) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<f64>();
    let on_commit: workload::OnCommit = Arc::new(move |n, sent| {
        if n % sample.max(1) != 0 {
            return;
        }
        let Some(delivery) = producer.send(n) else { return };
        let tx = tx.clone();
        tokio::spawn(async move {
            if matches!(delivery.await, Ok(Ok(_))) && sent >= counted_from {
                let _ = tx.send(sent.elapsed().as_secs_f64() * 1000.0);
            }
        });
    });
    (on_commit, rx)
}

/// What a dual write hook measured. The channel closes once the hook and every delivery it
/// awaits are gone.
pub(super) async fn latencies(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<f64>,
    capacity: usize,
) -> Vec<f64> {
    let mut ms = Vec::with_capacity(capacity);
    while let Some(v) = rx.recv().await {
        ms.push(v);
    }
    ms
}

/// PostgreSQL's share, the floor of commit→read: a bare pgoutput reader (pgwire-replication,
/// no decoding, no Kafka; standby status every second like walrelay's default) on a slot of a
/// database of its own while the shape's writers commit the same load into it. commit (the
/// transaction's commit timestamp) → its Begin read, exactly as walrelay's commit→read; the
/// first second not counted. Also its CPU, so the walsender's share shows.
pub(super) async fn wal_read_floor(
    meter: &Meter,
    shape: Shape,
    rate: u64,
    seconds: f64,
) -> (Quantiles, CpuDelta) {
    /// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
    const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;
    let db = workload::create_db("bench_walfloor").await;
    let (publication, slot) = (unique("walfloor_pub"), unique("walfloor"));
    workload::create_publication_and_slots(&db, &publication, &[&slot]).await;
    let cfg =
        ReplicationConfig::new("127.0.0.1", "postgres", "", db.name.clone(), slot, publication)
            .with_port(crate::support::services().pg.port())
            .with_tls(TlsConfig::disabled())
            .with_start_lsn(Lsn(0))
            .with_status_interval(Duration::from_secs(1));
    let mut stream = ReplicationClient::connect(cfg).await.expect("replication connection");
    let capacity = (rate as f64 * seconds * 1.3) as usize + 1000;
    let commit_us = Arc::new((0..capacity).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
    let (read_tx, read_rx) = tokio::sync::watch::channel(0u64);
    let counted_from = SystemTime::now() + Duration::from_secs(1);
    let reader = tokio::spawn(async move {
        let (mut ms, mut begins) = (Vec::with_capacity(capacity), 0u64);
        loop {
            // Ends when the measurement is over (losing an event then is harmless).
            let event = tokio::select! {
                event = stream.recv() => event,
                _ = read_tx.closed() => break,
            };
            match event {
                Ok(Some(ReplicationEvent::Begin { commit_time_micros, .. })) => {
                    let now = SystemTime::now();
                    let unix_us = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros());
                    if now >= counted_from {
                        let commit = commit_time_micros + PG_EPOCH_UNIX_MICROS;
                        ms.push((unix_us as i64 - commit) as f64 / 1000.0);
                    }
                    begins += 1;
                    let _ = read_tx.send(begins);
                }
                Ok(Some(ReplicationEvent::Commit { end_lsn, .. })) => {
                    stream.update_applied_lsn(end_lsn)
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        let _ = stream.shutdown().await;
        ms
    });
    checkpoint().await;
    let a = meter.snap(None);
    let (events, _) = write(&db, shape, rate, seconds, 1, commit_us, None).await;
    let cpu = delta(&a, &meter.snap(None));
    let mut read = read_rx;
    let caught_up = Duration::from_secs_f64(30.0 + 2.0 * seconds);
    let _ = tokio::time::timeout(caught_up, read.wait_for(|&n| n >= events)).await;
    drop(read);
    let ms = reader.await.unwrap_or_default();
    workload::drop_db(&db).await;
    (Quantiles::of(ms), cpu)
}
