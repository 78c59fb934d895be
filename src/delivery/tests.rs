//! Delivery against librdkafka's mock cluster: what a refusal does to a graceful stop.

use std::time::{Duration, Instant};

use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

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
    let mut delivery = Delivery::new(&config, Lsn::from(0x100), &metrics).expect("delivery");
    // The broker refuses the next record for good, as it refuses one over the topic's
    // max.message.bytes.
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
    );
    let txn = Txn { commit_micros: unix_micros(), commit_lsn: Lsn::from(0x200), xid: 7 };
    delivery.begin(&txn);
    let table = Arc::from("public.outbox");
    delivery.publish(record(1), &table, Lsn::from(0x180), &txn).await.unwrap();
    delivery.commit(Lsn::from(0x210)).await.unwrap();

    // The stop starts before the refusal is served: the loop serves reports, and it is stopping.
    let grace = Duration::from_secs(10);
    let started = Instant::now();
    delivery.drain(grace).await;
    let took = started.elapsed();
    let confirmable = delivery.progress().lsn;
    println!(
        "stop with a record refused in flight: drain took {took:.1?} (grace {grace:?}); \
         dead letters {}; confirmable {confirmable} (commit at 0/210)",
        metrics.dead_lettered.load(Relaxed)
    );
    assert_eq!(metrics.dead_lettered.load(Relaxed), 1, "the refusal arrived during the stop");
    assert!(took < Duration::from_secs(5), "the stop waited out its grace period: {took:?}");
    assert_eq!(confirmable, Lsn::from(0x210), "the dead letter was not acknowledged");
}
