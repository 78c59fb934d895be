//! Each sink's floor: a plain client of its broker (async-nats, lapin, aws-sdk-sqs, hyper — not
//! walrelay's sink code) publishing the records walrelay delivered, as they arrived (body,
//! headers, destination, dedup id), with the same per-message ack, `--inflight` at once.
//!
//! It runs as a child process (`walrelay-bench sink-floor`), so its CPU and peak RSS are the
//! client's alone: the bench's own process also holds the webhook receiver, the readers and a
//! PostgreSQL connection. The clock and the CPU counters start once the client is connected
//! and the records are in memory, and stop at the last acknowledgement.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::measure::{machine_busy, peak_rss_mb, proc_cpu};

/// One message as walrelay delivered it, read back from the broker.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Msg {
    /// Subject, routing key, queue name, or the webhook path under the receiver's prefix.
    pub to: String,
    /// SQS FIFO's MessageGroupId (the other sinks carry the key in a header).
    pub key: Option<String>,
    /// AMQP message_id, SQS MessageDeduplicationId (NATS and HTTP carry it in a header).
    pub dedup: Option<String>,
    pub headers: Vec<(String, String)>,
    /// The bodies are JSON text.
    pub body: String,
    /// AMQP's timestamp property, seconds.
    pub timestamp: Option<u64>,
}

/// What the floor prints on its `FLOOR` line.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct FloorOut {
    pub events: u64,
    pub acked: u64,
    pub seconds: f64,
    pub cpu_s: f64,
    /// VmHWM of the child, which holds all the records in memory.
    pub peak_rss_mb: Option<f64>,
    /// Busy cores of the whole machine meanwhile (2.0 = saturated here).
    pub machine_cores: f64,
}

#[derive(clap::Args, Debug)]
pub struct FloorArgs {
    /// nats, rabbitmq, sqs or http.
    #[arg(long)]
    sink: String,
    /// The NATS URL, the AMQP URL, the SQS endpoint, or the receiver's base URL (path prefix).
    #[arg(long)]
    url: String,
    /// The RabbitMQ exchange.
    #[arg(long, default_value = "")]
    exchange: String,
    /// A JSON array of [`Msg`].
    #[arg(long)]
    records: PathBuf,
    #[arg(long, default_value_t = 64)]
    inflight: usize,
}

pub fn main(args: FloorArgs) {
    let text = std::fs::read_to_string(&args.records).expect("read the floor's records");
    let msgs: Arc<Vec<Msg>> = Arc::new(serde_json::from_str(&text).expect("records JSON"));
    // Two workers, as walrelay's own runtime has on this 2-core machine.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let out = rt.block_on(async {
        match args.sink.as_str() {
            "nats" => nats(&args, msgs).await,
            "rabbitmq" => rabbitmq(&args, msgs).await,
            "sqs" => sqs(&args, msgs).await,
            "http" => http(&args, msgs).await,
            other => panic!("no floor for sink {other:?}"),
        }
    });
    println!("FLOOR {}", serde_json::to_string(&out).expect("json"));
}

/// The counters at the start of the timed part.
struct Clock {
    at: Instant,
    cpu: f64,
    machine: f64,
    events: u64,
}

impl Clock {
    fn start(events: usize) -> Clock {
        let cpu = proc_cpu(std::process::id()).unwrap_or(0.0);
        Clock { at: Instant::now(), cpu, machine: machine_busy(), events: events as u64 }
    }

    fn stop(self, acked: u64) -> FloorOut {
        let pid = std::process::id();
        let seconds = self.at.elapsed().as_secs_f64();
        FloorOut {
            events: self.events,
            acked,
            seconds,
            machine_cores: (machine_busy() - self.machine) / seconds,
            cpu_s: proc_cpu(pid).unwrap_or(0.0) - self.cpu,
            peak_rss_mb: peak_rss_mb(pid),
        }
    }
}

/// The next unit of work for a worker, until there is none.
fn next(counter: &AtomicUsize, n: usize) -> Option<usize> {
    let i = counter.fetch_add(1, Ordering::Relaxed);
    (i < n).then_some(i)
}

/// Sums the acks the workers counted.
async fn join(mut workers: tokio::task::JoinSet<u64>) -> u64 {
    let mut acked = 0;
    while let Some(n) = workers.join_next().await {
        acked += n.expect("a floor worker panicked");
    }
    acked
}

/// JetStream: publish, then await the PubAck; `Nats-Msg-Id` is among the headers read back.
async fn nats(args: &FloorArgs, msgs: Arc<Vec<Msg>>) -> FloorOut {
    let client = async_nats::connect(args.url.as_str()).await.expect("connect to NATS");
    let js = async_nats::jetstream::new(client);
    let counter = Arc::new(AtomicUsize::new(0));
    let clock = Clock::start(msgs.len());
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..args.inflight {
        let (js, msgs, counter) = (js.clone(), msgs.clone(), counter.clone());
        workers.spawn(async move {
            let mut acked = 0;
            while let Some(i) = next(&counter, msgs.len()) {
                let m = &msgs[i];
                let mut headers = async_nats::HeaderMap::new();
                for (name, value) in &m.headers {
                    headers.append(name.as_str(), value.as_str());
                }
                let body = Bytes::from(m.body.clone());
                let sent = js.publish_with_headers(m.to.clone(), headers, body).await;
                if let Ok(ack) = sent {
                    acked += ack.await.is_ok() as u64;
                }
            }
            acked
        });
    }
    let acked = join(workers).await;
    clock.stop(acked)
}

/// AMQP 0-9-1 on one channel in confirm mode, mandatory and persistent, as walrelay publishes;
/// a message counts once its confirm is an ack and it was not returned.
async fn rabbitmq(args: &FloorArgs, msgs: Arc<Vec<Msg>>) -> FloorOut {
    use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
    use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
    use lapin::{BasicProperties, Confirmation, Connection, ConnectionProperties};
    let connection = Connection::connect(&args.url, ConnectionProperties::default())
        .await
        .expect("connect to RabbitMQ");
    let channel = connection.create_channel().await.expect("a channel");
    channel.confirm_select(ConfirmSelectOptions::default()).await.expect("confirm mode");
    let counter = Arc::new(AtomicUsize::new(0));
    let clock = Clock::start(msgs.len());
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..args.inflight {
        let (channel, msgs, counter) = (channel.clone(), msgs.clone(), counter.clone());
        let exchange = args.exchange.clone();
        workers.spawn(async move {
            let mut acked = 0;
            while let Some(i) = next(&counter, msgs.len()) {
                let m = &msgs[i];
                let mut headers = FieldTable::default();
                for (name, value) in &m.headers {
                    let value = AMQPValue::LongString(LongString::from(value.as_str()));
                    headers.insert(ShortString::from(name.as_str()), value);
                }
                let mut properties = BasicProperties::default()
                    .with_delivery_mode(2)
                    .with_message_id(ShortString::from(m.dedup.as_deref().unwrap_or_default()))
                    .with_headers(headers);
                if let Some(ts) = m.timestamp {
                    properties = properties.with_timestamp(ts);
                }
                let options = BasicPublishOptions { mandatory: true, immediate: false };
                let published = channel
                    .basic_publish(
                        exchange.as_str().into(),
                        m.to.as_str().into(),
                        options,
                        m.body.as_bytes(),
                        properties,
                    )
                    .await;
                if let Ok(confirm) = published {
                    acked += matches!(confirm.await, Ok(Confirmation::Ack(None))) as u64;
                }
            }
            acked
        });
    }
    let acked = join(workers).await;
    clock.stop(acked)
}

/// SendMessageBatch of up to 10 messages of one queue, with the group and dedup ids read back;
/// a message counts when its entry is among the batch's successful ones.
async fn sqs(args: &FloorArgs, msgs: Arc<Vec<Msg>>) -> FloorOut {
    use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
    use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(crate::support::sqs::REGION))
        .endpoint_url(&args.url)
        .credentials_provider(Credentials::new("bench", "bench", None, None, "bench"))
        .http_client(http)
        .build();
    let client = aws_sdk_sqs::Client::from_conf(config);
    // Batches of one queue each, 10 messages at most, in the order the records came.
    let mut batches: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        match batches.iter_mut().rev().find(|(to, b)| *to == m.to && b.len() < 10) {
            Some((_, b)) => b.push(i),
            None => batches.push((m.to.clone(), vec![i])),
        }
    }
    let account = crate::support::sqs::ACCOUNT;
    let batches: Arc<Vec<(String, Vec<usize>)>> = Arc::new(
        batches.into_iter().map(|(to, b)| (format!("{}/{account}/{to}", args.url), b)).collect(),
    );
    let counter = Arc::new(AtomicUsize::new(0));
    let clock = Clock::start(msgs.len());
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..args.inflight {
        let (client, msgs, batches) = (client.clone(), msgs.clone(), batches.clone());
        let counter = counter.clone();
        workers.spawn(async move {
            let mut acked = 0;
            while let Some(b) = next(&counter, batches.len()) {
                let (url, indexes) = &batches[b];
                let entries = indexes.iter().enumerate().map(|(n, &i)| {
                    let m = &msgs[i];
                    let mut entry = SendMessageBatchRequestEntry::builder()
                        .id(n.to_string())
                        .message_body(&m.body)
                        .set_message_group_id(m.key.clone())
                        .set_message_deduplication_id(m.dedup.clone());
                    for (name, value) in &m.headers {
                        let value = MessageAttributeValue::builder()
                            .data_type("String")
                            .string_value(value)
                            .build()
                            .expect("an attribute");
                        entry = entry.message_attributes(name, value);
                    }
                    entry.build().expect("an entry")
                });
                let sent = client
                    .send_message_batch()
                    .queue_url(url)
                    .set_entries(Some(entries.collect()))
                    .send()
                    .await;
                if let Ok(output) = sent {
                    acked += output.successful().len() as u64;
                }
            }
            acked
        });
    }
    let acked = join(workers).await;
    clock.stop(acked)
}

/// HTTP/1.1 POSTs, one keep-alive connection per worker; a 2xx acknowledges.
async fn http(args: &FloorArgs, msgs: Arc<Vec<Msg>>) -> FloorOut {
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::TokioIo;
    let uri: hyper::Uri = args.url.parse().expect("the receiver's URL");
    let addr = format!("{}:{}", uri.host().expect("host"), uri.port_u16().unwrap_or(80));
    // Connected before the clock starts, as the other clients are.
    let mut senders = Vec::new();
    for _ in 0..args.inflight {
        let tcp = tokio::net::TcpStream::connect(&addr).await.expect("connect to the receiver");
        let _ = tcp.set_nodelay(true);
        let (sender, connection) =
            hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(tcp))
                .await
                .expect("HTTP handshake");
        tokio::spawn(connection);
        senders.push(sender);
    }
    let counter = Arc::new(AtomicUsize::new(0));
    let clock = Clock::start(msgs.len());
    let mut workers = tokio::task::JoinSet::new();
    for mut sender in senders {
        let (msgs, counter, base) = (msgs.clone(), counter.clone(), args.url.clone());
        workers.spawn(async move {
            let mut acked = 0;
            while let Some(i) = next(&counter, msgs.len()) {
                let m = &msgs[i];
                let mut request = hyper::Request::post(format!("{base}{}", m.to));
                for (name, value) in &m.headers {
                    request = request.header(name.as_str(), value.as_str());
                }
                let body = Full::new(Bytes::from(m.body.clone()));
                let request = request.body(body).expect("a request");
                if let Ok(response) = sender.send_request(request).await {
                    let ok = response.status().is_success();
                    acked += (response.into_body().collect().await.is_ok() && ok) as u64;
                }
            }
            acked
        });
    }
    let acked = join(workers).await;
    clock.stop(acked)
}
