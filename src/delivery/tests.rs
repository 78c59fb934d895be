//! Delivery against librdkafka's mock cluster: what a refusal does to a graceful stop.

use std::time::{Duration, Instant};

use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaErrorCode, RDKafkaRespErr};

use bytes::Bytes;

use super::*;

fn record(n: u32) -> Record {
    Record {
        topic: Arc::from("outbox.event.order"),
        key: Some(Bytes::from("o-1")),
        value: Some(Bytes::from(format!("{{\"n\":{n}}}"))),
        headers: vec![(Arc::from("id"), Bytes::from(n.to_string()))],
        partition: None,
        timestamp_ms: None,
        event_id: n.to_string(),
        trace: None,
        value_schema: None,
        key_schema: None,
    }
}

/// A record the broker refuses while the relay stops is replaced by its dead letter before the
/// stop returns: the stop does not wait out its grace period, and the slot may be confirmed
/// past the row, which the dead-letter topic now holds.
#[tokio::test(flavor = "current_thread")]
async fn a_record_refused_while_stopping_is_dead_lettered_and_the_stop_returns_at_once() {
    let mock = MockCluster::new(1).expect("mock cluster");
    mock.create_topic("outbox.event.order", 1, 1).expect("topic");
    mock.create_topic("dead", 1, 1).expect("dead-letter topic");
    let config = Config::parse(&format!(
        "[source]\nurl = \"postgres://walrelay@127.0.0.1:5432/app\"\n\
         [kafka]\n\"bootstrap.servers\" = \"{}\"\n\
         [dead_letter]\ntopic = \"dead\"\n",
        mock.bootstrap_servers()
    ))
    .expect("config");
    let metrics = Metrics::new();
    let mut delivery = Delivery::new(&config, Lsn::from(0x100), &metrics, None).expect("delivery");
    // The broker refuses the next record for good, as it refuses one over the topic's
    // max.message.bytes.
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
    );
    let txn = Txn { commit_micros: unix_micros(), commit_lsn: Lsn::from(0x200), xid: 7 };
    delivery.begin(&txn);
    let table = Arc::from("public.outbox");
    delivery
        .publish(Framed::unregistered(record(1)), &table, Lsn::from(0x180), &txn)
        .await
        .unwrap();
    delivery.commit(Lsn::from(0x210)).await.unwrap();

    // The stop starts before the refusal is served: the loop serves reports, and it is stopping.
    let grace = Duration::from_secs(10);
    let started = Instant::now();
    delivery.drain(tokio::time::Instant::now() + grace).await;
    let took = started.elapsed();
    let confirmable = delivery.progress().confirmable();
    println!(
        "stop with a record refused in flight: drain took {took:.1?} (grace {grace:?}); \
         dead letters {}; confirmable {confirmable} (commit at 0/210)",
        metrics.dead_lettered.load(Relaxed)
    );
    assert_eq!(metrics.dead_lettered.load(Relaxed), 1, "the refusal arrived during the stop");
    assert!(took < Duration::from_secs(5), "the stop waited out its grace period: {took:?}");
    assert_eq!(confirmable, Lsn::from(0x210), "the dead letter was not acknowledged");
}

/// An at-least-once delivery on the mock cluster, with one topic of one partition, resumed at
/// 0/100.
fn at_least_once_on(
    mock: &MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
) -> (Delivery, Arc<Metrics>) {
    mock.create_topic("outbox.event.order", 1, 1).expect("topic");
    let config = Config::parse(&format!(
        "[source]\nurl = \"postgres://walrelay@127.0.0.1:5432/app\"\n\
         [kafka]\n\"bootstrap.servers\" = \"{}\"\n",
        mock.bootstrap_servers()
    ))
    .expect("config");
    let metrics = Metrics::new();
    let delivery = Delivery::new(&config, Lsn::from(0x100), &metrics, None).expect("delivery");
    (delivery, metrics)
}

/// A record librdkafka reports delivered at an offset of its partition already reported for an
/// earlier record was not written (a sequence number the broker took for a duplicate, or a log
/// that started again): it is not confirmed, and the session ends with the error that says so.
#[tokio::test(flavor = "current_thread")]
async fn a_report_at_an_offset_already_reported_is_not_confirmed_and_ends_the_session() {
    let mock = MockCluster::new(1).expect("mock cluster");
    let (mut delivery, _metrics) = at_least_once_on(&mock);
    read_transaction(&mut delivery, 2, true).await;
    await_acks(&mut delivery, Lsn::from(0x210)).await;
    // The next record's report, as librdkafka gives it when the broker took the record's
    // sequence number for a duplicate of the first: delivered, at the first record's offset.
    let txn = Txn { commit_micros: unix_micros(), commit_lsn: Lsn::from(0x300), xid: 3 };
    delivery.begin(&txn);
    let topic = Arc::from("outbox.event.order");
    let seq = delivery.frontier.sent(10, Lsn::from(0x280), Sent { topic, ..Sent::default() });
    assert_eq!(seq, 1);
    delivery.commit(Lsn::from(0x310)).await.unwrap();
    delivery.reports.push_back(Report::Delivered { seq: 1, partition: 0, offset: 0 });
    let error = delivery.serve_reports().expect_err("a report at offset 0 twice");
    println!("{error}");
    assert!(error.to_string().contains("did not write it"), "{error}");
    assert!(error.to_string().contains("outbox.event.order [0] at offset 0"), "{error}");
    assert_eq!(
        delivery.progress().confirmable(),
        Lsn::from(0x210),
        "the second commit was confirmed"
    );
}

/// At-least-once, Kafka's transactions are not there at all: the producer was made without a
/// `transactional.id`, so it hands out no transactional calls; nothing caps what the
/// acknowledgements allow to be confirmed; no Kafka transaction is ever due or has a deadline.
#[tokio::test(flavor = "current_thread")]
async fn at_least_once_holds_no_kafka_transactions_and_nothing_caps_what_is_acknowledged() {
    let mock = MockCluster::new(1).expect("mock cluster");
    let (mut delivery, _metrics) = at_least_once_on(&mock);
    assert!(delivery.exactly_once.is_none(), "at-least-once made Kafka transactions");
    match &delivery.side {
        Side::Kafka(publisher) => assert!(publisher.transactional().is_none()),
        Side::Broker(_) => panic!("no sink was configured: Kafka is the side"),
    }
    delivery.start();
    read_transaction(&mut delivery, 2, true).await;
    assert!(!delivery.commit_due() && delivery.transaction_deadline().is_none());
    await_acks(&mut delivery, Lsn::from(0x210)).await;
    let progress = delivery.progress();
    assert_eq!((progress.ceiling, progress.confirmable()), (None, Lsn::from(0x210)));
}

/// An exactly-once delivery on the mock cluster, started, resumed at 0/100: Kafka transactions
/// commit only when told to (a minute, a million records).
async fn exactly_once_on(
    mock: &MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
) -> (Delivery, Arc<Metrics>) {
    mock.create_topic("outbox.event.order", 2, 1).expect("topic");
    mock.create_topic("progress", 1, 1).expect("progress topic");
    let config = Config::parse(&format!(
        "[source]\nurl = \"postgres://walrelay@127.0.0.1:5432/app\"\n\
         [kafka]\n\"bootstrap.servers\" = \"{}\"\n\"transaction.timeout.ms\" = 300000\n\
         [delivery]\nguarantee = \"exactly-once\"\nprogress_topic = \"progress\"\n\
         transaction_max_ms = 60000\ntransaction_max_records = 1000000\n",
        mock.bootstrap_servers()
    ))
    .expect("config");
    let metrics = Metrics::new();
    let mut delivery = Delivery::new(&config, Lsn::from(0x100), &metrics, None).expect("delivery");
    delivery.start();
    tokio::time::timeout(Duration::from_secs(20), delivery.started())
        .await
        .expect("the transactions started within 20 s")
        .expect("the transactions started");
    (delivery, metrics)
}

/// Reads PostgreSQL transaction `n` (one record), committing at 0/n00 and ending at 0/n10.
async fn read_transaction(delivery: &mut Delivery, n: u64, commit: bool) {
    let txn = Txn { commit_micros: unix_micros(), commit_lsn: Lsn::from(n * 0x100), xid: n as u32 };
    delivery.begin(&txn);
    let table = Arc::from("public.outbox");
    delivery
        .publish(Framed::unregistered(record(n as u32)), &table, Lsn::from(n * 0x100 - 0x80), &txn)
        .await
        .unwrap();
    if commit {
        delivery.commit(Lsn::from(n * 0x100 + 0x10)).await.unwrap();
    }
}

/// Serves reports until every record sent is acknowledged (bounded).
async fn await_acks(delivery: &mut Delivery, acked: Lsn) {
    let waited = tokio::time::timeout(Duration::from_secs(20), async {
        while delivery.progress().acked < acked {
            delivery.next_reports().await.unwrap();
        }
    });
    assert!(waited.await.is_ok(), "acknowledged up to {acked} within 20 s");
}

/// A stop inside a PostgreSQL transaction aborts the open Kafka transaction, which
/// also holds two earlier PostgreSQL transactions, acknowledged whole. The frontier passed them;
/// the ceiling must not: nothing past where that Kafka transaction began is confirmable, or
/// their events — aborted, so invisible to read_committed consumers — would be lost.
#[tokio::test(flavor = "current_thread")]
async fn a_stop_inside_a_postgresql_transaction_confirms_nothing_past_where_the_open_kafka_transaction_began(
) {
    let mock = MockCluster::new(1).expect("mock cluster");
    let (mut delivery, metrics) = exactly_once_on(&mock).await;
    read_transaction(&mut delivery, 2, true).await;
    read_transaction(&mut delivery, 3, true).await;
    await_acks(&mut delivery, Lsn::from(0x310)).await;
    let before = delivery.progress();
    assert_eq!(
        (before.acked, before.confirmable()),
        (Lsn::from(0x310), Lsn::from(0x100)),
        "acknowledged, not committed"
    );
    read_transaction(&mut delivery, 4, false).await;
    delivery.drain(tokio::time::Instant::now() + Duration::from_secs(5)).await;
    let after = delivery.progress();
    println!(
        "stop inside a PostgreSQL transaction: acked {}, confirmable {} (the Kafka transaction began at 0/100); kafka transactions committed {}, failed {}",
        after.acked,
        after.confirmable(),
        metrics.kafka_transactions.load(Relaxed),
        metrics.kafka_transactions_failed.load(Relaxed)
    );
    assert_eq!(after.acked, Lsn::from(0x310), "the frontier passed the two whole transactions");
    assert_eq!(
        after.confirmable(),
        Lsn::from(0x100),
        "the aborted Kafka transaction lifted the ceiling"
    );
    assert_eq!(metrics.kafka_transactions.load(Relaxed), 0);
    assert_eq!(metrics.kafka_transactions_failed.load(Relaxed), 1, "the abort is counted");
}

/// A Kafka transaction whose commit fails holds the ceiling where it began for the rest of
/// the session, though the next one commits.
#[tokio::test(flavor = "current_thread")]
async fn a_failed_kafka_commit_holds_the_ceiling_where_that_transaction_began() {
    let mock = MockCluster::new(1).expect("mock cluster");
    let (mut delivery, metrics) = exactly_once_on(&mock).await;
    read_transaction(&mut delivery, 2, true).await;
    await_acks(&mut delivery, Lsn::from(0x210)).await;
    mock.request_errors(
        RDKafkaApiKey::EndTxn,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_TXN_STATE],
    );
    let failed = delivery.commit_kafka(Duration::from_secs(10)).await;
    assert!(failed.is_err(), "the broker refused the commit");
    assert_eq!(delivery.progress().confirmable(), Lsn::from(0x100));
    assert_eq!(metrics.kafka_transactions_failed.load(Relaxed), 1);
}

/// Exactly-once, a record refused inside the open Kafka transaction (here a topic librdkafka
/// reports missing, a refusal that leaves the producer willing to send more) counts as
/// refused: the stop that follows aborts that transaction at once instead of committing it
/// and waiting for an acknowledgement that never comes, and nothing past where it began is
/// confirmable (I9).
#[tokio::test(flavor = "current_thread")]
async fn a_refusal_inside_a_kafka_transaction_makes_the_stop_abort_it_at_once() {
    let mock = MockCluster::new(1).expect("mock cluster");
    let (mut delivery, metrics) = exactly_once_on(&mock).await;
    read_transaction(&mut delivery, 2, true).await;
    await_acks(&mut delivery, Lsn::from(0x210)).await;
    // The next PostgreSQL transaction's record, in the same open Kafka transaction, and its
    // refusal as librdkafka reports it.
    let txn = Txn { commit_micros: unix_micros(), commit_lsn: Lsn::from(0x300), xid: 3 };
    delivery.begin(&txn);
    let topic: Arc<str> = Arc::from("outbox.event.missing");
    let sent = Sent { topic: topic.clone(), ..Sent::default() };
    let seq = delivery.frontier.sent(10, Lsn::from(0x280), sent);
    delivery.commit(Lsn::from(0x310)).await.unwrap();
    let refused = Refused { topic, key: None, value: None, event_id: Some("e-3".into()) };
    let error = rdkafka::error::KafkaError::MessageProduction(RDKafkaErrorCode::UnknownTopic);
    delivery.reports.push_back(Report::Rejected { seq, error, record: Box::new(refused) });
    let stopped = delivery.serve_reports().expect_err("a refusal inside a Kafka transaction");
    assert!(matches!(stopped, Error::Definite { .. }), "{stopped}");
    assert!(stopped.to_string().contains("outbox row e-3 at LSN 0/280"), "{stopped}");

    let started = Instant::now();
    delivery.drain(tokio::time::Instant::now() + Duration::from_secs(10)).await;
    let took = started.elapsed();
    println!(
        "stop after a refusal inside a Kafka transaction: drain took {took:.1?} (window 10 s)"
    );
    assert!(took < Duration::from_secs(2), "the stop waited for the refused record: {took:?}");
    assert_eq!(delivery.progress().confirmable(), Lsn::from(0x100), "past the aborted start");
    assert_eq!(metrics.kafka_transactions.load(Relaxed), 0, "the lost transaction committed");
    assert_eq!(metrics.kafka_transactions_failed.load(Relaxed), 1);
}

/// The records of a key after a partition's first write are held, in order, until that write
/// is reported with an offset (`offsets.rs`, I5); the relay reads on meanwhile (publish does
/// not wait), and then they go out and are acknowledged.
#[tokio::test(flavor = "current_thread")]
async fn records_after_a_partitions_first_write_are_held_until_it_is_reported_then_all_are_acknowledged(
) {
    let mock = MockCluster::new(1).expect("mock cluster");
    mock.create_topic("outbox.event.order", 3, 1).expect("topic");
    let config = Config::parse(&format!(
        "[source]\nurl = \"postgres://walrelay@127.0.0.1:5432/app\"\n\
         [kafka]\n\"bootstrap.servers\" = \"{}\"\n",
        mock.bootstrap_servers()
    ))
    .expect("config");
    let metrics = Metrics::new();
    let mut delivery = Delivery::new(&config, Lsn::from(0x100), &metrics, None).expect("delivery");
    let txn = Txn { commit_micros: unix_micros(), commit_lsn: Lsn::from(0x200), xid: 7 };
    let table = Arc::from("public.outbox");
    delivery.begin(&txn);
    for n in 1..=4 {
        delivery
            .publish(Framed::unregistered(record(n)), &table, Lsn::from(0x180 + u64::from(n)), &txn)
            .await
            .unwrap();
    }
    delivery.commit(Lsn::from(0x210)).await.unwrap();
    let held: usize = delivery.held.values().map(VecDeque::len).sum();
    assert_eq!(held, 3, "the first write goes alone; the next three wait behind it");
    assert_eq!(delivery.held_records, 3);
    let deadline = Instant::now() + Duration::from_secs(10);
    while delivery.progress().confirmable() < Lsn::from(0x210) {
        assert!(Instant::now() < deadline, "not all acknowledged; held: {:?}", delivery.held.len());
        delivery.next_reports().await.unwrap();
        delivery.send_waiting().await.unwrap();
    }
    assert!(delivery.held.is_empty());
    // Once written, the partition takes records together: nothing is held.
    delivery.begin(&txn);
    delivery
        .publish(Framed::unregistered(record(5)), &table, Lsn::from(0x220), &txn)
        .await
        .unwrap();
    delivery
        .publish(Framed::unregistered(record(6)), &table, Lsn::from(0x221), &txn)
        .await
        .unwrap();
    assert!(delivery.held.is_empty(), "a written partition holds nothing");
}
