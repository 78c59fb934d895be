//! Each sink's broker for the sink bench (sinks.rs): a fresh server with a destination for every
//! routed name, set up as the integration tests do (tests/sinks/*), its walrelay section, and
//! what arrived, read back as [`Msg`]s for the floor.

use crate::sink_floor::Msg;
use crate::support::nats::NatsServer;
use crate::support::rabbitmq::RabbitMqServer;
use crate::support::sqs::SqsServer;
use crate::support::webhook::Receiver;

/// A fresh server of one sink's broker, with a destination for every routed name.
pub enum Broker {
    /// The server, its stream, and the subjects the stream captures.
    Nats(NatsServer, String, Vec<String>),
    /// The server, its exchange, and (routing key, queue) per routed name.
    RabbitMq(RabbitMqServer, String, Vec<(String, String)>),
    Sqs(SqsServer),
    Http(Receiver),
}

impl Broker {
    /// Queue and stream setup go through the harness and walrelay's own `setup`, as the
    /// integration tests do: only the publishing of the floor must be independent of walrelay.
    pub async fn start(sink: &str, prefix: &str, routed: &[String]) -> Broker {
        let routed_refs: Vec<&str> = routed.iter().map(String::as_str).collect();
        match sink {
            "nats" => {
                let server = blocking(crate::support::nats::private_nats).await;
                let stream = prefix.replace('.', "_");
                server.create_stream(&stream, &routed_refs).await;
                Broker::Nats(server, stream, routed.to_vec())
            }
            "rabbitmq" => {
                let server = blocking(crate::support::rabbitmq::private_rabbitmq).await;
                let exchange = format!("{prefix}.x");
                server.declare_exchange(&exchange, lapin::ExchangeKind::Topic).await;
                let mut queues = Vec::new();
                for topic in routed {
                    queues.push((topic.clone(), server.bind_queue(prefix, &exchange, topic).await));
                }
                Broker::RabbitMq(server, exchange, queues)
            }
            "sqs" => {
                let server = blocking(crate::support::sqs::private_sqs).await;
                let options = server.options("", true);
                let config = walrelay::sink::sqs::parse(&options).expect("the harness's [sqs]");
                walrelay::sink::sqs::setup(&config, routed).await.expect("the FIFO queues");
                Broker::Sqs(server)
            }
            _ => Broker::Http(Receiver::start()),
        }
    }

    /// `[…]` of the sink, for walrelay.
    pub fn section(&self) -> String {
        match self {
            Broker::Nats(server, stream, subjects) => {
                let subjects: Vec<&str> = subjects.iter().map(String::as_str).collect();
                server.config_section(stream, &subjects)
            }
            Broker::RabbitMq(server, exchange, _) => server.config_section(exchange),
            Broker::Sqs(server) => server.config_section("", true),
            Broker::Http(receiver) => {
                format!("[webhook]\nurl = \"{}\"\ntimeout = \"10s\"\n", receiver.url())
            }
        }
    }

    /// What the floor's client connects to, and the exchange.
    pub fn target(&self) -> (String, String) {
        match self {
            Broker::Nats(server, ..) => (server.url(), String::new()),
            Broker::RabbitMq(server, exchange, _) => (server.url(), exchange.clone()),
            Broker::Sqs(server) => (server.endpoint(), String::new()),
            Broker::Http(r) => (
                format!("http://127.0.0.1:{}{}", r.port, crate::support::webhook::PREFIX),
                String::new(),
            ),
        }
    }

    /// Everything delivered to the routed names, as it arrived.
    pub async fn read(&self, routed: &[String]) -> Vec<Msg> {
        let plain = |d: crate::support::sinks::Delivered, to: String| Msg {
            to,
            key: None,
            dedup: None,
            headers: d.headers,
            body: String::from_utf8_lossy(&d.body).into_owned(),
            timestamp: None,
        };
        let mut out = Vec::new();
        match self {
            // Nats-Msg-Id and walrelay-key are among the headers.
            Broker::Nats(server, ..) => {
                for subject in routed {
                    out.extend(server.read(subject).await.into_iter().map(|d| {
                        let to = d.routed_to.clone();
                        plain(d, to)
                    }));
                }
            }
            Broker::RabbitMq(server, _, queues) => {
                for (topic, queue) in queues {
                    for raw in server.read_raw(queue).await {
                        let timestamp = *raw.delivery.properties.timestamp();
                        let d = crate::support::rabbitmq::delivered(&raw);
                        let dedup = d.dedup_id.clone();
                        out.push(Msg { dedup, timestamp, ..plain(d, topic.clone()) });
                    }
                }
            }
            Broker::Sqs(server) => {
                let queue = |t: &String| format!("{}.fifo", t.replace('.', "-"));
                let q: Vec<String> = routed.iter().map(queue).collect();
                // The four queues at once: ElasticMQ gives 10 messages a receive.
                let (q0, q1, q2, q3) = tokio::join!(
                    server.read(&q[0]),
                    server.read(&q[1]),
                    server.read(&q[2]),
                    server.read(&q[3])
                );
                for d in [q0, q1, q2, q3].into_iter().flatten() {
                    let (key, dedup, to) = (d.key.clone(), d.dedup_id.clone(), d.routed_to.clone());
                    out.push(Msg { key, dedup, ..plain(d, to) });
                }
            }
            Broker::Http(receiver) => {
                for d in receiver.accepted() {
                    let to = d.routed_to.clone();
                    let mut m = plain(d, to);
                    // Set by the client from the body it sends.
                    m.headers.retain(|(n, _)| n != "content-length");
                    out.push(m);
                }
            }
        }
        out
    }
}

/// The harness starts servers synchronously (it waits for them to answer): off the runtime.
async fn blocking<T: Send + 'static>(f: fn() -> T) -> T {
    tokio::task::spawn_blocking(f).await.expect("start a broker")
}
