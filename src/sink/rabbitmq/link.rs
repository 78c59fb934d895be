//! One AMQP connection and its confirm-mode channels, each carrying one group of publishes at
//! a time (one publish call's records: `super::RabbitMq::publish`).
//!
//! Why not one channel for all: a publisher confirm names a
//! delivery tag, but a `basic.return` (an unroutable message) names none. lapin hands the
//! oldest unclaimed return to whichever confirm it resolves next, and when the broker confirms
//! several tags with one `multiple` ack it resolves them in no fixed order: with two publishes
//! in flight on one channel, the returned record could read as acked and the routed one as
//! returned. Measured against RabbitMQ 3.10.8: 2,000 concurrent mandatory publishes on one
//! channel, half of them unroutable, came back with 230 answers on the wrong record (115
//! unroutable messages read as plain acks: silent losses). On a channel with one group in
//! flight, a return can only be one of that group's, and the returned message itself (its
//! routing key and message_id, distinct within a group) says which.
//! Channels are cheap (RabbitMQ allows 2,047 per connection); idle ones are kept for reuse.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use lapin::options::ConfirmSelectOptions;
use lapin::tcp::OwnedTLSConfig;
use lapin::{Channel, Connection, ConnectionProperties, ErrorKind};

use super::config::RabbitMqConfig;
use crate::error::Error;

/// A connection, the channels it has idle, and whether a publish found it broken.
pub(super) struct Link {
    pub(super) connection: Connection,
    idle: Mutex<Vec<Channel>>,
    broken: AtomicBool,
}

impl Link {
    /// Connects within the configured timeout. Refused credentials and a vhost the user may
    /// not use are definite; anything else (refused, reset, no answer) is transient.
    pub(super) async fn open(config: &RabbitMqConfig) -> Result<Link, Error> {
        let properties = ConnectionProperties::default().with_connection_name("walrelay".into());
        let tls = tls_config(config)?;
        let runtime = lapin::runtime::default_runtime()
            .map_err(|e| Error::transient("lapin found no tokio runtime", e))?;
        let connecting = Connection::connect_with_config(&config.url, properties, tls, runtime);
        let connection = match tokio::time::timeout(config.timeout, connecting).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(e)) => return Err(connect_error(config, e)),
            Err(_) => {
                return Err(Error::transient_msg(format!(
                    "RabbitMQ at {} did not complete the AMQP handshake within {}",
                    config.shown_url(),
                    crate::duration::format(config.timeout)
                )))
            }
        };
        Ok(Link { connection, idle: Mutex::new(Vec::new()), broken: AtomicBool::new(false) })
    }

    /// Whether publishes may still use it: connected, and no publish found it broken.
    pub(super) fn is_usable(&self) -> bool {
        !self.broken.load(Ordering::Acquire) && self.connection.status().connected()
    }

    /// Marks it unusable: the next publish connects anew. Its channels close when the last
    /// publish using them lets go (lapin closes a dropped connection).
    pub(super) fn break_off(&self) {
        self.broken.store(true, Ordering::Release);
        self.lock_idle().clear();
    }

    /// An open channel in confirm mode with nothing in flight: an idle one, or a new one.
    pub(super) async fn channel(&self) -> lapin::Result<Channel> {
        loop {
            let Some(channel) = self.lock_idle().pop() else { break };
            if channel.status().connected() {
                return Ok(channel);
            }
        }
        let channel = self.connection.create_channel().await?;
        channel.confirm_select(ConfirmSelectOptions::default()).await?;
        Ok(channel)
    }

    /// Takes back a channel whose publish was answered, for the next publish.
    pub(super) fn give_back(&self, channel: Channel) {
        if self.is_usable() && channel.status().connected() {
            self.lock_idle().push(channel);
        }
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<Channel>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The AMQP reply code of a broker's error (`403`, `404`, `406`, `530`…), if it is one.
pub(super) fn reply_code(e: &lapin::Error) -> Option<u16> {
    match e.kind() {
        ErrorKind::ProtocolError(amqp) => Some(amqp.get_id()),
        _ => None,
    }
}

/// Whether the error ended the connection rather than one channel: after it the link is
/// broken off and the next publish reconnects.
pub(super) fn ends_connection(e: &lapin::Error) -> bool {
    !e.is_amqp_soft_error() || e.is_io_error()
}

/// The CA certificates of `ca_file`, or none (the public web roots).
fn tls_config(config: &RabbitMqConfig) -> Result<OwnedTLSConfig, Error> {
    let Some(file) = &config.ca_file else { return Ok(OwnedTLSConfig::default()) };
    let pem = std::fs::read_to_string(file).map_err(|e| {
        Error::definite_with(
            format!("cannot read [rabbitmq] ca_file {}", file.display()),
            "point ca_file at a readable PEM file of the CA certificates that signed the \
             broker's certificate",
            e,
        )
    })?;
    Ok(OwnedTLSConfig { identity: None, cert_chain: Some(pem) })
}

fn connect_error(config: &RabbitMqConfig, e: lapin::Error) -> Error {
    let url = config.shown_url();
    // rustls's verdict on the broker's certificate comes as an I/O error: retrying cannot
    // change it.
    let text = e.to_string();
    if text.contains("certificate") {
        return Error::definite_with(
            format!("the TLS certificate of RabbitMQ at {url} is not trusted"),
            "set [rabbitmq] ca_file to the PEM file of the CA that signed it (without it, only \
             the public web roots are trusted), and check that it names the URL's host",
            e,
        );
    }
    match reply_code(&e) {
        Some(403) => Error::definite_with(
            format!("RabbitMQ at {url} refused the login"),
            "check the user and password in [rabbitmq] url (or WALRELAY_RABBITMQ_URL), and that \
             the user may log in from this host (RabbitMQ's guest user works from localhost only)",
            e,
        ),
        Some(530) => Error::definite_with(
            format!("RabbitMQ at {url} does not let this user open the vhost"),
            "check the vhost in [rabbitmq] url (\"/\" is written %2f) and the user's \
             permissions on it (rabbitmqctl set_permissions)",
            e,
        ),
        _ => Error::transient(format!("cannot connect to RabbitMQ at {url}"), e),
    }
}
