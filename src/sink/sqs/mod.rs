//! Amazon SQS, standard and FIFO queues, through AWS's SDK: each routed name is a queue (from
//! `[sqs] queue_url`), and a publish of up to 10 records is one SendMessageBatch per queue.
//!
//! Only a batch entry SQS lists as successful is [`Published::Acked`]: SQS stores a message
//! redundantly before it answers. A FIFO queue dedups on `MessageDeduplicationId` (the event id)
//! for 5 minutes and keeps order within a `MessageGroupId` (the key); a standard queue does
//! neither, so a retried record may arrive twice and out of order there.
//!
//! There is no connection to keep: each call is an HTTPS request on the SDK's pooled
//! connections, so an outage ends when a request gets through again.

mod batch;
mod config;
mod message;

use std::sync::Arc;

use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::QueueAttributeName;
use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};

/// `[sqs]`'s serde struct, for the config layer's `keys_of::<Raw>()`.
pub(crate) use config::Raw;
pub use config::{parse, queue_name, SqsConfig};
pub use message::KEY_ATTRIBUTE;

use crate::error::Error;
use crate::router::Record;
use crate::sink::{Publish, Published};

/// The keys `[sqs]` accepts.
pub fn keys() -> &'static [&'static str] {
    crate::options::section::keys_of::<Raw>()
}

/// The SQS sink: a client of the SDK (cheap to share; its connection pool is inside) and the
/// section it was made from.
pub struct Sqs {
    client: aws_sdk_sqs::Client,
    config: SqsConfig,
}

/// The SDK client for `config`. Makes no request: SQS has no session to open, and
/// [`check`] is what tells whether it answers.
pub async fn connect(config: &SqsConfig) -> Result<Sqs, Error> {
    Ok(Sqs { client: client(config).await, config: config.clone() })
}

async fn client(config: &SqsConfig) -> aws_sdk_sqs::Client {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let timeouts = aws_sdk_sqs::config::timeout::TimeoutConfig::builder()
        .operation_timeout(config.timeout)
        .connect_timeout(config.timeout.min(std::time::Duration::from_secs(5)))
        .build();
    // No retries inside the SDK: the relay retries a `Retry` with its own backoff, keeping
    // each key's order, and a publish must answer within `timeout`.
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new(config.region.clone()))
        .http_client(http)
        .timeout_config(timeouts)
        .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled());
    if let Some(endpoint) = &config.endpoint {
        loader = loader.endpoint_url(endpoint);
    }
    if let Some((id, secret)) = &config.credentials {
        loader = loader.credentials_provider(Credentials::new(id, secret, None, None, "[sqs]"));
    }
    aws_sdk_sqs::Client::new(&loader.load().await)
}

impl Publish for Sqs {
    fn name(&self) -> &'static str {
        "sqs"
    }

    fn max_batch(&self) -> usize {
        10
    }

    async fn publish(&self, records: &[Arc<Record>]) -> Vec<Published> {
        let deadline = tokio::time::Instant::now() + self.config.timeout;
        let mut answers: Vec<Option<Published>> = vec![None; records.len()];
        let mut messages = Vec::with_capacity(records.len());
        for (index, record) in records.iter().enumerate() {
            match message::message(&self.config, record, index) {
                Ok(message) => messages.push((index, message)),
                Err(why) => answers[index] = Some(Published::Refused(format!("SQS: {why}"))),
            }
        }
        for batch in batch::batches(messages, self.config.max_message_bytes) {
            for (index, answer) in self.send(batch, deadline).await {
                answers[index] = Some(answer);
            }
        }
        answers
            .into_iter()
            .map(|a| {
                a.unwrap_or_else(|| Published::Retry {
                    reason: "no SendMessageBatch answered for it".into(),
                    after: None,
                })
            })
            .collect()
    }
}

/// Makes sure each routed name's queue exists, creating it (a FIFO queue when `queue_url` ends
/// in `.fifo`): one line a queue.
pub async fn setup(config: &SqsConfig, routed: &[String]) -> Result<Vec<String>, Error> {
    let client = client(config).await;
    let mut lines: Vec<String> = Vec::with_capacity(routed.len());
    let mut done: Vec<String> = Vec::with_capacity(routed.len());
    for routed_name in routed {
        // Several routed names may share a queue (a queue_url without ${topic}).
        let name = config.queue_name_for(routed_name);
        if done.contains(&name) {
            continue;
        }
        done.push(name.clone());
        let expected = config.queue_url_for(routed_name);
        let (url, what) = match client.get_queue_url().queue_name(&name).send().await {
            Ok(found) => (found.queue_url.unwrap_or_default(), "exists"),
            Err(e)
                if e.as_service_error().is_some_and(|s| {
                    s.is_queue_does_not_exist() || batch::is_no_such_queue(s.code().unwrap_or(""))
                }) =>
            {
                let mut create = client.create_queue().queue_name(&name);
                if config.fifo() {
                    create = create.attributes(QueueAttributeName::FifoQueue, "true");
                }
                let created = create.send().await.map_err(|e| failed(&e, "CreateQueue", &name))?;
                (created.queue_url.unwrap_or_default(), "created")
            }
            Err(e) => return Err(failed(&e, "GetQueueUrl", &name)),
        };
        let mut line = format!("SQS queue {name}: {what}, {url}");
        if url != expected {
            line.push_str(&format!(
                " (queue_url gives {expected}: fix queue_url if messages should go here)"
            ));
        }
        lines.push(line);
    }
    Ok(lines)
}

/// One line saying SQS answers and the credentials may list the queues: GetQueueAttributes of
/// a fixed `queue_url`, else ListQueues with the queue names' fixed prefix.
pub async fn check(config: &SqsConfig) -> Result<String, Error> {
    let client = client(config).await;
    let at = config.endpoint.clone().unwrap_or_else(|| format!("region {}", config.region));
    let name = queue_name(&config.queue_url);
    if !config.queue_url.contains("${topic}") {
        let attributes = client
            .get_queue_attributes()
            .queue_url(&config.queue_url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .send()
            .await
            .map_err(|e| failed(&e, "GetQueueAttributes", name))?;
        let waiting = attributes
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::ApproximateNumberOfMessages))
            .map_or("?", String::as_str);
        return Ok(format!("SQS at {at} answers: queue {name} holds ~{waiting} messages"));
    }
    let prefix = name.split("${topic}").next().unwrap_or_default();
    let mut list = client.list_queues().max_results(1000);
    if !prefix.is_empty() {
        list = list.queue_name_prefix(prefix);
    }
    let listed = list.send().await.map_err(|e| failed(&e, "ListQueues", &format!("{prefix}*")))?;
    let count = listed.queue_urls().len();
    Ok(format!(
        "SQS at {at} answers: {count}{} queues named {prefix}* ({})",
        if listed.next_token().is_some() { "+" } else { "" },
        if config.fifo() { "FIFO" } else { "standard" }
    ))
}

/// A failed administrative call as walrelay's error: unreachable is transient, everything SQS
/// refused is definite with what to fix.
fn failed<E>(e: &SdkError<E, HttpResponse>, call: &str, queue: &str) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let Some(service) = e.as_service_error() else {
        return Error::transient_msg(format!(
            "SQS did not answer {call} for {queue}: {}",
            batch::causes(e)
        ));
    };
    let code = service.code().unwrap_or("no code");
    let said = format!("{code}: {}", service.message().unwrap_or("no message"));
    if batch::is_access_problem(code) {
        return Error::definite(
            format!("SQS denied {call} for {queue} ({said})"),
            "check [sqs] access_key_id and secret_access_key (WALRELAY_SQS_ACCESS_KEY_ID, \
             WALRELAY_SQS_SECRET_ACCESS_KEY), or the SDK's default credentials, and that their \
             IAM policy allows sqs:SendMessage, sqs:ListQueues and sqs:GetQueueAttributes (and \
             sqs:GetQueueUrl and sqs:CreateQueue for `walrelay setup`)",
        );
    }
    let status = e.raw_response().map(|r| r.status());
    if code.contains("Throttl") || status.is_some_and(|s| s.is_server_error()) {
        return Error::transient_msg(format!("SQS failed {call} for {queue} ({said})"));
    }
    if batch::is_no_such_queue(code) {
        return Error::definite(
            format!("SQS has no queue {queue} ({said})"),
            "`walrelay setup` creates it, or fix [sqs] queue_url",
        );
    }
    Error::definite(format!("SQS refused {call} for {queue} ({said})"), "see SQS's message")
}

#[cfg(test)]
mod tests {
    use aws_sdk_sqs::error::ErrorMetadata;
    use aws_sdk_sqs::operation::list_queues::ListQueuesError;

    use super::*;

    fn after(status: u16, code: &str) -> Error {
        let meta = ErrorMetadata::builder().code(code).message("said").build();
        let raw = HttpResponse::new(status.try_into().unwrap(), "".into());
        failed(&SdkError::service_error(ListQueuesError::generic(meta), raw), "ListQueues", "q*")
    }

    #[test]
    fn check_fails_for_good_on_credentials_and_for_now_on_outages() {
        let denied = after(403, "AccessDenied");
        assert!(!denied.is_transient(), "{denied:?}");
        let text = format!("{denied:?}");
        assert!(text.contains("WALRELAY_SQS_ACCESS_KEY_ID") && text.contains("sqs:ListQueues"));
        assert!(!after(400, "InvalidClientTokenId").is_transient());
        assert!(after(500, "InternalError").is_transient());
        assert!(after(400, "RequestThrottled").is_transient());
    }
}
