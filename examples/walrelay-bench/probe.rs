//! `walrelay-bench probe-producer`: how long a fresh librdkafka producer configured like
//! walrelay's takes to deliver its first record (diagnoses first-record latency).

use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::producer::{
    BaseRecord, NoCustomPartitioner, Producer, ProducerContext, ThreadedProducer,
};
use rdkafka::ClientContext;

/// Prints librdkafka's log lines with the time since the producer was created; notes when the
/// first delivery report arrived.
struct Printer(Instant, std::sync::Mutex<Option<Duration>>);

impl ClientContext for Printer {
    fn log(&self, _level: RDKafkaLogLevel, fac: &str, message: &str) {
        eprintln!("[{:>9.3} ms] {fac}: {message}", self.0.elapsed().as_secs_f64() * 1000.0);
    }
}

impl ProducerContext<NoCustomPartitioner> for Printer {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        self.1.lock().unwrap().get_or_insert(self.0.elapsed());
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct ProbeArgs {
    /// Broker to use (default: start the harness's).
    #[arg(long)]
    pub bootstrap: Option<String>,
    /// librdkafka `debug` contexts (e.g. "eos,broker,msg").
    #[arg(long, default_value = "")]
    pub debug: String,
    /// Before the first send, request all-topics metadata every 10 ms this many times (a
    /// metadata response re-runs librdkafka's ProducerId state machine).
    #[arg(long, default_value_t = 0)]
    pub warm_metadata: u32,
    /// Extra producer properties, key=value.
    #[arg(long = "set", value_delimiter = ',')]
    pub set: Vec<String>,
}

pub fn probe_main(a: ProbeArgs) {
    let bootstrap = a
        .bootstrap
        .clone()
        .unwrap_or_else(|| crate::support::services().broker.bootstrap().to_string());
    let topic = crate::support::unique("probe");
    let rt = tokio::runtime::Runtime::new().expect("rt");
    rt.block_on(crate::support::create_topic(&bootstrap, &topic, 4));
    for round in 0..3 {
        let mut cfg = crate::kafka::relay_like_producer(&bootstrap);
        if !a.debug.is_empty() {
            cfg.set("debug", &a.debug);
        }
        for kv in &a.set {
            if let Some((k, v)) = kv.split_once('=') {
                cfg.set(k, v);
            }
        }
        let t0 = Instant::now();
        if !a.debug.is_empty() {
            cfg.set_log_level(RDKafkaLogLevel::Debug);
        }
        let p: ThreadedProducer<Printer> =
            cfg.create_with_context(Printer(t0, Default::default())).expect("producer");
        let created = t0.elapsed();
        for _ in 0..a.warm_metadata {
            let _ = p.client().fetch_metadata(None, Duration::from_millis(200));
            std::thread::sleep(Duration::from_millis(10));
        }
        let warmed = t0.elapsed();
        p.send(BaseRecord::<str, str>::to(&topic).key("k").payload("v"))
            .map_err(|(e, _)| e)
            .expect("send");
        // Wait for the delivery report: flush returns when the queue is empty.
        let _ = p.flush(Duration::from_secs(10));
        eprintln!(
            "[probe] round {round}: producer created in {created:?}, metadata warm-up until {warmed:?}, first delivery report after {:?}",
            p.context().1.lock().unwrap().unwrap_or_default()
        );
    }
}
