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

use futures_util::future::join_all;
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

/// Records one call publishes together on one channel, at most ([`Publish::max_batch`]).
const BATCH: usize = 8;
/// Calls in flight at once ([`Publish::max_calls`]): with [`BATCH`], 64 messages await their
/// confirms, as many as 64 calls of one did, on 8 channels instead of 64.
const CALLS: usize = 8;
/// At most this many channels carry publishes at once (see `link`); a call waits for one,
/// within its timeout. More than [`CALLS`], for calls made beside the dispatch.
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

    /// A call's records go out together on one channel, which the broker confirms with one
    /// `multiple` ack where it can: one confirm frame, and one wake-up, for several messages.
    fn max_batch(&self) -> usize {
        BATCH
    }

    fn max_calls(&self) -> usize {
        CALLS
    }

    async fn publish(&self, records: &[Arc<Record>]) -> Vec<Published> {
        let mut answers: Vec<Option<Published>> = vec![None; records.len()];
        let mut messages = Vec::with_capacity(records.len());
        for (i, record) in records.iter().enumerate() {
            match message::message(record) {
                Ok(message) => messages.push((i, message)),
                Err(reason) => answers[i] = Some(Published::Refused(reason)),
            }
        }
        for group in groups(messages) {
            let at: Vec<usize> = group.iter().map(|(i, _)| *i).collect();
            let published = self.publish_group(records, group).await;
            for (i, published) in at.into_iter().zip(published) {
                answers[i] = Some(published);
            }
        }
        let unanswered = || retry("the RabbitMQ sink gave no answer for it".to_string());
        answers.into_iter().map(|a| a.unwrap_or_else(unanswered)).collect()
    }
}

/// A confirm as it came, before the returned messages are matched to their records.
enum Confirmed {
    Ack,
    Nack,
    NotRequested,
    Failed(lapin::Error),
}

impl RabbitMq {
    /// A group of messages (see [`groups`]) on one channel, answered within the timeout
    /// whatever the broker does.
    async fn publish_group(
        &self,
        records: &[Arc<Record>],
        group: Vec<(usize, message::Message)>,
    ) -> Vec<Published> {
        let n = group.len();
        let mut used = None;
        let attempt = self.attempt(records, group, &mut used);
        match tokio::time::timeout(self.config.timeout, attempt).await {
            Ok(published) => published,
            Err(_) => {
                // A connection that answers nothing in `timeout` is as good as gone (the
                // broker hangs, or a memory or disk alarm blocks publishers): the next publish
                // connects anew rather than queue behind it.
                if let Some(link) = used {
                    link.break_off();
                }
                let reason = format!(
                    "RabbitMQ sent no publisher confirm within {} (the broker is unreachable, \
                     overloaded, or blocks publishers on a memory or disk alarm)",
                    crate::duration::format(self.config.timeout)
                );
                vec![retry(reason); n]
            }
        }
    }

    async fn attempt(
        &self,
        records: &[Arc<Record>],
        group: Vec<(usize, message::Message)>,
        used: &mut Option<Arc<Link>>,
    ) -> Vec<Published> {
        let n = group.len();
        // Never closed, so never an error; the permit is held until the confirms.
        let Ok(_permit) = self.channels.acquire().await else {
            return vec![retry("the RabbitMQ client is shutting down".to_string()); n];
        };
        let link = match self.link().await {
            Ok(link) => link,
            Err(e) => return vec![retry(e.chain()); n],
        };
        *used = Some(link.clone());
        let channel = match link.channel().await {
            Ok(channel) => channel,
            Err(e) => return vec![self.failed(&link, &e); n],
        };
        // `parse` bounds the name; a config built by hand might not, and `into` would panic.
        let Ok(exchange) = ShortString::try_new(self.config.exchange.as_str()) else {
            return vec![
                retry("[rabbitmq] exchange is longer than AMQP's 255 bytes".to_string());
                n
            ];
        };
        let options = BasicPublishOptions { mandatory: true, immediate: false };
        let names: Vec<(ShortString, Option<ShortString>)> = group
            .iter()
            .map(|(_, m)| (m.routing_key.clone(), m.properties.message_id().clone()))
            .collect();
        // Sent together: lapin numbers them in this order and writes them at once, and the
        // broker confirms them together.
        let sent = join_all(group.into_iter().map(|(i, m)| {
            let body = records[i].value.as_deref().unwrap_or_default();
            channel.basic_publish(exchange.clone(), m.routing_key, options, body, m.properties)
        }))
        .await;
        let confirmed = join_all(sent.into_iter().map(|sent| async move {
            match sent {
                Ok(confirm) => confirm.await,
                Err(e) => Err(e),
            }
        }))
        .await;
        let (answers, reuse) = self.answers(&link, confirmed, &names);
        if reuse {
            link.give_back(channel);
        }
        answers
    }

    /// Each record's answer from the group's confirms, and whether the channel may be used
    /// again (every confirm came, in confirm mode).
    fn answers(
        &self,
        link: &Link,
        confirmed: Vec<lapin::Result<Confirmation>>,
        names: &[(ShortString, Option<ShortString>)],
    ) -> (Vec<Published>, bool) {
        let n = names.len();
        let mut returned = Vec::new();
        let confirmed: Vec<Confirmed> = confirmed
            .into_iter()
            .map(|c| match c {
                Ok(Confirmation::Ack(r)) => {
                    returned.extend(r);
                    Confirmed::Ack
                }
                Ok(Confirmation::Nack(r)) => {
                    returned.extend(r);
                    Confirmed::Nack
                }
                Ok(Confirmation::NotRequested) => Confirmed::NotRequested,
                Err(e) => Confirmed::Failed(e),
            })
            .collect();
        // lapin hands a returned message to whichever confirm it resolves next, not always
        // its own (see `link`); every confirm of the group is in, so every return of the group
        // is too, and the message itself says whose it is.
        let mut whose: Vec<Option<BasicReturnMessage>> = (0..n).map(|_| None).collect();
        let mut stray = false;
        for r in returned {
            let id = r.delivery.properties.message_id();
            let at =
                names.iter().position(|(key, mid)| *key == r.delivery.routing_key && mid == id);
            match at {
                Some(j) if whose[j].is_none() => whose[j] = Some(r),
                _ => stray = true,
            }
        }
        let reuse = confirmed.iter().all(|c| matches!(c, Confirmed::Ack | Confirmed::Nack));
        let answers = confirmed
            .into_iter()
            .zip(whose)
            .zip(names)
            .map(|((confirmed, returned), (key, _))| match (confirmed, returned) {
                (Confirmed::Ack, Some(returned)) => {
                    Published::Refused(self.returned(key.as_str(), &returned))
                }
                // Not one of this group's messages: which record was returned is unknown, so
                // none is taken as delivered.
                (Confirmed::Ack, None) if stray => retry(
                    "RabbitMQ returned a message that none of the records published with it \
                     matches; each is sent again"
                        .to_string(),
                ),
                (Confirmed::Ack, None) => Published::Acked,
                (Confirmed::Nack, _) => retry(
                    "RabbitMQ nacked the message (a queue could not take it: full with \
                     overflow = reject-publish, or an internal error)"
                        .to_string(),
                ),
                // Only a channel that is not in confirm mode answers this; it is not reused.
                (Confirmed::NotRequested, _) => {
                    retry("the channel was not in confirm mode".to_string())
                }
                (Confirmed::Failed(e), _) => self.failed(link, &e),
            })
            .collect();
        (answers, reuse)
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

/// `messages` in groups of distinct (routing key, message_id), in their order: a returned
/// message names its record within its group only by those. Records of a call are of distinct
/// keys, so a second group is rare (two rows with the same event id).
fn groups(messages: Vec<(usize, message::Message)>) -> Vec<Vec<(usize, message::Message)>> {
    let mut groups: Vec<Vec<(usize, message::Message)>> = Vec::new();
    for (i, m) in messages {
        let alike = |o: &message::Message| {
            o.routing_key == m.routing_key && o.properties.message_id() == m.properties.message_id()
        };
        match groups.iter_mut().find(|g| !g.iter().any(|(_, o)| alike(o))) {
            Some(group) => group.push((i, m)),
            None => groups.push(vec![(i, m)]),
        }
    }
    groups
}

fn retry(reason: String) -> Published {
    Published::Retry { reason, after: None }
}
