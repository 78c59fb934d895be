//! The RabbitMQ sink: each record is published (AMQP 0-9-1, `mandatory`, persistent) to one
//! exchange with the routed name as its routing key, on a channel in confirm mode, and only
//! the broker's publisher confirm of a routed message acknowledges it.
//!
//! What the broker's answers mean here:
//! - an ack of a message that was not returned: [`Published::Acked`] (every queue it was
//!   routed to has it; persistent messages in durable queues are on disk);
//! - `basic.return` before the ack (no queue bound to the routing key: `NO_ROUTE`):
//!   [`Published::Refused`], naming the exchange, the routing key and the fix. RabbitMQ acks a
//!   message it could route nowhere, so without `mandatory` it would read as delivered;
//! - a nack, the channel or the connection closing, no confirm within `timeout`:
//!   [`Published::Retry`]. After a connection error or a timeout the next publish connects
//!   anew (lapin does not reconnect by itself).
//!
//! Nothing here dedupes: RabbitMQ keeps no record of `message_id`, so a record offered again
//! after a lost confirm is delivered again; consumers dedupe by `message_id`.

pub(crate) mod config;
mod link;
mod message;
mod setup;

use std::sync::Arc;

use lapin::message::BasicReturnMessage;
use lapin::options::BasicPublishOptions;
use lapin::types::ShortString;
use lapin::Confirmation;
use tokio::sync::{Mutex, Semaphore};

pub use config::{parse, ExchangeType, RabbitMqConfig};
pub use message::{KEY_HEADER, PERSISTENT};
pub use setup::{check, setup};

use crate::error::Error;
use crate::router::Record;
use crate::sink::{Publish, Published};
use link::Link;

/// At most this many publishes wait for their confirms at once, each on a channel of its own
/// (see `link`); more wait for a channel, within their timeout.
const CHANNELS: usize = 128;

/// The RabbitMQ client: one connection, reopened on the next publish after it failed.
pub struct RabbitMq {
    config: RabbitMqConfig,
    /// The connection in use; `None` or broken: the next publish connects.
    link: Mutex<Option<Arc<Link>>>,
    channels: Semaphore,
}

/// Connects once, so that refused credentials or an unknown vhost stop the relay at start
/// ([`Error::Definite`]); an unreachable broker is [`Error::Transient`].
pub async fn connect(config: &RabbitMqConfig) -> Result<RabbitMq, Error> {
    let link = Link::open(config).await?;
    Ok(RabbitMq {
        config: config.clone(),
        link: Mutex::new(Some(Arc::new(link))),
        channels: Semaphore::new(CHANNELS),
    })
}

impl Publish for RabbitMq {
    fn name(&self) -> &'static str {
        "rabbitmq"
    }

    async fn publish(&self, records: &[Arc<Record>]) -> Vec<Published> {
        let mut answers = Vec::with_capacity(records.len());
        for record in records {
            answers.push(self.publish_one(record).await);
        }
        answers
    }
}

impl RabbitMq {
    /// One record, answered within the timeout whatever the broker does.
    async fn publish_one(&self, record: &Record) -> Published {
        let message = match message::message(record) {
            Ok(message) => message,
            Err(reason) => return Published::Refused(reason),
        };
        let mut used = None;
        let attempt = self.attempt(record, message, &mut used);
        match tokio::time::timeout(self.config.timeout, attempt).await {
            Ok(published) => published,
            Err(_) => {
                // A connection that answers nothing in `timeout` is as good as gone (the
                // broker hangs, or a memory or disk alarm blocks publishers): the next publish
                // connects anew rather than queue behind it.
                if let Some(link) = used {
                    link.break_off();
                }
                retry(format!(
                    "RabbitMQ sent no publisher confirm within {} (the broker is unreachable, \
                     overloaded, or blocks publishers on a memory or disk alarm)",
                    crate::duration::format(self.config.timeout)
                ))
            }
        }
    }

    async fn attempt(
        &self,
        record: &Record,
        message: message::Message,
        used: &mut Option<Arc<Link>>,
    ) -> Published {
        // Never closed, so never an error; the permit is held until the confirm.
        let Ok(_permit) = self.channels.acquire().await else {
            return retry("the RabbitMQ client is shutting down".to_string());
        };
        let link = match self.link().await {
            Ok(link) => link,
            Err(e) => return retry(e.chain()),
        };
        *used = Some(link.clone());
        let channel = match link.channel().await {
            Ok(channel) => channel,
            Err(e) => return self.failed(&link, &e),
        };
        let options = BasicPublishOptions { mandatory: true, immediate: false };
        let body = record.value.as_deref().unwrap_or_default();
        // `parse` bounds the name; a config built by hand might not, and `into` would panic.
        let Ok(exchange) = ShortString::try_new(self.config.exchange.as_str()) else {
            return retry("[rabbitmq] exchange is longer than AMQP's 255 bytes".to_string());
        };
        let routing_key = message.routing_key.clone();
        let confirm = match channel
            .basic_publish(exchange, routing_key, options, body, message.properties)
            .await
        {
            Ok(confirm) => confirm,
            Err(e) => return self.failed(&link, &e),
        };
        let published = match confirm.await {
            Ok(Confirmation::Ack(None)) => Published::Acked,
            Ok(Confirmation::Ack(Some(returned))) => {
                Published::Refused(self.returned(message.routing_key.as_str(), &returned))
            }
            Ok(Confirmation::Nack(_)) => retry(
                "RabbitMQ nacked the message (a queue could not take it: full with \
                 overflow = reject-publish, or an internal error)"
                    .to_string(),
            ),
            Ok(Confirmation::NotRequested) => {
                // Only a channel that is not in confirm mode answers this; it is not reused.
                return retry("the channel was not in confirm mode".to_string());
            }
            Err(e) => return self.failed(&link, &e),
        };
        link.give_back(channel);
        published
    }

    /// The connection in use, or a new one when there is none or it broke.
    async fn link(&self) -> Result<Arc<Link>, Error> {
        let mut current = self.link.lock().await;
        if let Some(link) = current.as_ref().filter(|link| link.is_usable()) {
            return Ok(link.clone());
        }
        let link = Arc::new(Link::open(&self.config).await?);
        *current = Some(link.clone());
        Ok(link)
    }

    /// What a lapin error during a publish means for the record (the channel it happened on
    /// is dropped, which closes it).
    fn failed(&self, link: &Link, e: &lapin::Error) -> Published {
        if link::ends_connection(e) {
            link.break_off();
        }
        let exchange = &self.config.exchange;
        let text = e.to_string();
        match link::reply_code(e) {
            Some(404) => retry(format!(
                "exchange {exchange:?} does not exist on the broker: run `walrelay setup`, or \
                 declare it ({text})"
            )),
            Some(403) => retry(format!(
                "the user may not publish to exchange {exchange:?}: grant it write permission \
                 on the exchange ({text})"
            )),
            // The broker's `max_message_size` (128 MiB by default) is the record's own limit.
            Some(406) if text.contains("message size") => Published::Refused(format!(
                "RabbitMQ refused the message as too large ({text}): raise max_message_size \
                 on the broker, or keep the event's payload smaller"
            )),
            _ => retry(format!("publishing to RabbitMQ failed: {text}")),
        }
    }

    /// Why a returned message is refused, and what would route it.
    fn returned(&self, routing_key: &str, returned: &BasicReturnMessage) -> String {
        let code = format!("{} {}", returned.reply_code, returned.reply_text);
        if self.config.exchange.is_empty() {
            format!(
                "RabbitMQ returned the message ({code}): no queue is named {routing_key:?}, and \
                 the default exchange routes only to the queue named by the routing key; \
                 declare that queue"
            )
        } else {
            format!(
                "RabbitMQ returned the message ({code}): no queue is bound to exchange {:?} \
                 with a binding that matches routing key {routing_key:?}; bind a queue to it, \
                 or give the exchange an alternate exchange (the alternate-exchange argument \
                 or policy) to catch what nothing else routes",
                self.config.exchange
            )
        }
    }
}

fn retry(reason: String) -> Published {
    Published::Retry { reason, after: None }
}
