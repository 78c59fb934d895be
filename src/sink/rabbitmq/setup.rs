//! `walrelay setup` and `walrelay check` for RabbitMQ: declare the exchange (or, for the
//! default exchange, the queues it routes to), and say whether the broker answers.
//!
//! Queues bound to a named exchange are the consumers' to declare: walrelay cannot know their
//! names, types or bindings, so setup names the routing keys they must match instead.

use lapin::options::{ExchangeDeclareOptions, QueueDeclareOptions};
use lapin::types::{FieldTable, ShortString};
use lapin::{Channel, ExchangeKind};

use super::config::RabbitMqConfig;
use super::link::{reply_code, Link};
use crate::error::Error;

/// Declares what publishing needs and returns one line per thing declared or found.
///
/// A named exchange is declared durable with `exchange_type` (`amq.*` exchanges are the
/// broker's own and only checked). With the default exchange `""`, each routed name is a
/// queue's name: those queues are declared durable.
pub async fn setup(config: &RabbitMqConfig, routed: &[String]) -> Result<Vec<String>, Error> {
    let exchange_name = exchange_name(config)?;
    let link = Link::open(config).await?;
    let exchange = &config.exchange;
    let mut lines = Vec::new();
    if exchange.is_empty() {
        for name in routed {
            let queue = ShortString::try_new(name.as_str()).map_err(|_| {
                Error::definite(
                    format!("routed name {name:?} is longer than AMQP's 255 bytes"),
                    "route to shorter names",
                )
            })?;
            let channel = open_channel(config, &link).await?;
            let declare = channel.queue_declare(
                queue,
                QueueDeclareOptions { durable: true, ..Default::default() },
                FieldTable::default(),
            );
            match within(config, declare).await? {
                Ok(_) => lines.push(format!(
                    "queue {name:?}: durable, declared or found (the default exchange routes \
                     routing key {name:?} to it)"
                )),
                // 406: it exists with other arguments (a quorum queue, say): it routes all the same.
                Err(e) if reply_code(&e) == Some(406) => lines.push(format!(
                    "queue {name:?}: exists with other arguments than a plain durable queue, \
                     used as it is ({e})"
                )),
                Err(e) => {
                    return Err(broker_error(config, &format!("declaring queue {name:?}"), e))
                }
            }
        }
        return Ok(lines);
    }
    let kind = config.exchange_type.name();
    if exchange.starts_with("amq.") {
        passive_exchange(config, &link).await?;
        lines.push(format!("exchange {exchange:?}: RabbitMQ's own, exists"));
    } else {
        let channel = open_channel(config, &link).await?;
        let declare = channel.exchange_declare(
            exchange_name,
            config.exchange_type.kind(),
            ExchangeDeclareOptions { durable: true, ..Default::default() },
            FieldTable::default(),
        );
        match within(config, declare).await? {
            Ok(()) => {
                lines.push(format!("exchange {exchange:?}: durable {kind}, declared or found"))
            }
            // 406 PRECONDITION_FAILED: it exists with another type or other arguments, which
            // walrelay does not change; publishing to it works as it is.
            Err(e) if reply_code(&e) == Some(406) => {
                passive_exchange(config, &link).await?;
                lines.push(format!(
                    "exchange {exchange:?}: exists, but not as a durable {kind} exchange ({e}); \
                     walrelay publishes to it as it is (set exchange_type to its type to \
                     silence this)"
                ));
            }
            Err(e) => {
                return Err(broker_error(config, &format!("declaring exchange {exchange:?}"), e))
            }
        }
    }
    if !routed.is_empty() {
        lines.push(format!(
            "bind your queues to exchange {exchange:?} with binding keys that match the routing \
             keys {}: a record no queue matches is refused (NO_ROUTE)",
            routed.join(", ")
        ));
    }
    Ok(lines)
}

/// One line for `walrelay check`: the broker answers, the login works, the exchange exists.
pub async fn check(config: &RabbitMqConfig) -> Result<String, Error> {
    let link = Link::open(config).await?;
    let url = config.shown_url();
    if config.exchange.is_empty() {
        open_channel(config, &link).await?;
        return Ok(format!(
            "RabbitMQ at {url} answers; publishing to the default exchange (each routed name \
             must be a queue's name)"
        ));
    }
    passive_exchange(config, &link).await?;
    Ok(format!("RabbitMQ at {url} answers; exchange {:?} exists", config.exchange))
}

/// Checks that the exchange exists, without declaring it.
async fn passive_exchange(config: &RabbitMqConfig, link: &Link) -> Result<(), Error> {
    let channel = open_channel(config, link).await?;
    let declare = channel.exchange_declare(
        exchange_name(config)?,
        ExchangeKind::Topic,
        ExchangeDeclareOptions { passive: true, ..Default::default() },
        FieldTable::default(),
    );
    match within(config, declare).await? {
        Ok(()) => Ok(()),
        Err(e) if reply_code(&e) == Some(404) => Err(Error::definite_with(
            format!(
                "exchange {:?} does not exist on RabbitMQ at {}",
                config.exchange,
                config.shown_url()
            ),
            format!(
                "run `walrelay setup` (it declares it as a durable {} exchange), or declare it \
                 yourself",
                config.exchange_type.name()
            ),
            e,
        )),
        Err(e) => Err(broker_error(config, "checking the exchange", e)),
    }
}

/// The exchange's name as AMQP carries it (`parse` bounds it; a config built by hand might
/// not).
fn exchange_name(config: &RabbitMqConfig) -> Result<ShortString, Error> {
    ShortString::try_new(config.exchange.as_str()).map_err(|_| {
        Error::definite("[rabbitmq] exchange is longer than AMQP's 255 bytes", "use a shorter name")
    })
}

async fn open_channel(config: &RabbitMqConfig, link: &Link) -> Result<Channel, Error> {
    within(config, link.connection.create_channel())
        .await?
        .map_err(|e| broker_error(config, "opening a channel", e))
}

/// `step` within the configured timeout; running out of it is transient.
async fn within<T>(
    config: &RabbitMqConfig,
    step: impl std::future::Future<Output = T>,
) -> Result<T, Error> {
    tokio::time::timeout(config.timeout, step).await.map_err(|_| {
        Error::transient_msg(format!(
            "RabbitMQ at {} did not answer within {}",
            config.shown_url(),
            crate::duration::format(config.timeout)
        ))
    })
}

fn broker_error(config: &RabbitMqConfig, doing: &str, e: lapin::Error) -> Error {
    let what = format!("{doing} on RabbitMQ at {} failed", config.shown_url());
    match reply_code(&e) {
        Some(403) => Error::definite_with(
            what,
            "grant the user configure and write permissions on the exchange (rabbitmqctl \
             set_permissions)",
            e,
        ),
        _ => Error::transient(what, e),
    }
}
