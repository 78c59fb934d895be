//! `walrelay-bench probe-transactions`: does a broker honour Kafka transactions? (Asked
//! before exactly-once delivery is trusted on any broker.) Three checks per broker:
//!
//! 1. an aborted transaction: a `read_committed` consumer sees none of its records;
//! 2. a committed one: it sees all of them;
//! 3. fencing: a second producer with the same `transactional.id` initialises; the first one's
//!    next transaction must fail.
//!
//! Run on Apache Kafka 4.4 (KRaft, one node), tansu's memory engine and librdkafka's mock
//! cluster.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::support::broker::Kind;
use crate::support::{free_port, scratch_dir, unique, Broker};

const TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, Clone, clap::Args)]
pub struct TxnProbeArgs {
    /// Only this broker: kafka, tansu or mock.
    #[arg(long)]
    pub only: Option<String>,
}

pub fn main(a: TxnProbeArgs) {
    let wanted = |name: &str| a.only.as_deref().is_none_or(|o| o == name);
    let mut verdicts = Vec::new();
    for (name, kind, label) in [
        ("kafka", Kind::Kafka, "Apache Kafka 4.4.0, KRaft, one node"),
        ("tansu", Kind::Tansu, "tansu 0.6.0, memory engine"),
    ] {
        if !wanted(name) {
            continue;
        }
        match Broker::start_kind(kind, &scratch_dir(&format!("txn-{name}")), free_port()) {
            Ok(b) => verdicts.push((label, probe(b.bootstrap(), None))),
            Err(e) => verdicts.push((label, vec![format!("not started: {e}")])),
        }
    }
    if wanted("mock") {
        let mock = MockCluster::new(3).expect("mock cluster");
        let lines = probe(&mock.bootstrap_servers(), Some(&mock));
        verdicts.push(("librdkafka 2.12.1 mock cluster", lines));
    }
    println!("\n### Transactions probe\n");
    for (broker, lines) in &verdicts {
        println!("{broker}:");
        for l in lines {
            println!("  {l}");
        }
    }
}

/// The three checks on one broker; one line per check, starting with PASS or FAIL (a panic of
/// the harness, such as a topic it could not create, is a FAIL line too).
/// `mock`: the mock cluster, which creates topics through its own API (it answers no
/// CreateTopics request).
fn probe(bootstrap: &str, mock: Option<&MockCluster<'_, DefaultProducerContext>>) -> Vec<String> {
    let lines = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| checks(bootstrap, mock)))
        .unwrap_or_else(|p| vec![format!("FAIL setup: {}", panic_text(&p))]);
    for l in &lines {
        eprintln!("[txn-probe] {bootstrap}: {l}");
    }
    lines
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

fn checks(bootstrap: &str, mock: Option<&MockCluster<'_, DefaultProducerContext>>) -> Vec<String> {
    let topic = unique("txn_probe");
    match mock {
        Some(m) => m.create_topic(&topic, 1, 1).expect("create the mock topic"),
        None => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(crate::support::create_topic(bootstrap, &topic, 1)),
    }
    // Each check on a producer of its own, so one failure does not decide the next check.
    let fresh = || producer(bootstrap, &unique("txn"));
    let aborted = fresh().and_then(|p| run_txn(&p, &topic, "aborted", false));
    let committed = fresh().and_then(|p| run_txn(&p, &topic, "committed", true));
    let seen = read_committed(bootstrap, &topic, 6);
    let saw = |what: &str| seen.iter().filter(|v| v.starts_with(what)).count();
    let mut out = Vec::new();
    out.push(match aborted {
        Err(e) => format!("FAIL abort: {e}"),
        Ok(()) if saw("aborted") == 0 => {
            "PASS abort: read_committed saw 0 of 3 aborted records".into()
        }
        Ok(()) => format!("FAIL abort: read_committed saw {} of 3 aborted records", saw("aborted")),
    });
    out.push(match committed {
        Err(e) => format!("FAIL commit: {e}"),
        Ok(()) if saw("committed") == 3 => {
            "PASS commit: read_committed saw 3 of 3 committed records".into()
        }
        Ok(()) => {
            format!("FAIL commit: read_committed saw {} of 3 committed records", saw("committed"))
        }
    });
    // 3: fencing. The old producer must have committed once, or its failure proves nothing.
    let txn_id = unique("txn");
    out.push(match producer(bootstrap, &txn_id).and_then(|p| run_txn(&p, &topic, "first", true).map(|()| p)) {
        Err(e) => format!("FAIL fence: not tested, the first producer could not commit: {e}"),
        Ok(old) => match producer(bootstrap, &txn_id) {
            Err(e) => format!("FAIL fence: the second producer did not initialise: {e}"),
            Ok(_new) => match run_txn(&old, &topic, "zombie", true) {
                Err(e) => format!("PASS fence: the old producer's next transaction failed: {e}"),
                Ok(()) => "FAIL fence: the old producer committed after a new one took its transactional.id".into(),
            },
        },
    });
    out
}

fn producer(
    bootstrap: &str,
    txn_id: &str,
) -> Result<ThreadedProducer<DefaultProducerContext>, String> {
    let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("transactional.id", txn_id)
        .set("transaction.timeout.ms", "10000")
        .set("message.timeout.ms", "10000")
        .create()
        .map_err(|e| e.to_string())?;
    p.init_transactions(TIMEOUT).map_err(|e| e.to_string())?;
    Ok(p)
}

/// Three records `<tag>-0..2` in one transaction, committed or aborted.
fn run_txn(
    p: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    tag: &str,
    commit: bool,
) -> Result<(), String> {
    p.begin_transaction().map_err(|e| format!("begin: {e}"))?;
    for i in 0..3 {
        let value = format!("{tag}-{i}");
        p.send(BaseRecord::<(), str>::to(topic).payload(&value))
            .map_err(|(e, _)| format!("send: {e}"))?;
    }
    p.flush(TIMEOUT).map_err(|e| format!("flush: {e}"))?;
    if commit {
        p.commit_transaction(TIMEOUT).map_err(|e| format!("commit: {e}"))
    } else {
        p.abort_transaction(TIMEOUT).map_err(|e| format!("abort: {e}"))
    }
}

/// The values a `read_committed` consumer reads from the topic (partition 0) until `want`
/// arrived or 10 s passed.
fn read_committed(bootstrap: &str, topic: &str, want: usize) -> Vec<String> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique("txn_reader"))
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning).expect("partition");
    c.assign(&tpl).expect("assign");
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.len() < want && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            if let Some(Ok(v)) = m.payload_view::<str>() {
                seen.push(v.to_string());
            }
        }
    }
    seen
}
