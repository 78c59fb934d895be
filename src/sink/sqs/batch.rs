//! One publish call as SendMessageBatch calls: the messages grouped by queue, packed under
//! SQS's batch size, sent in turn before one deadline, and each entry's answer read back as a
//! [`Published`].

use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchError;
use tokio::time::Instant;

use super::message::Outgoing;
use super::Sqs;
use crate::sink::Published;

/// One SendMessageBatch: messages of one queue, each with its index in the publish call.
type Batch = Vec<(usize, Outgoing)>;

/// What a whole call's failure means for every entry of it.
enum Failure {
    Retry(String),
    Refused(String),
    /// A refusal of the request that one entry may have caused: each is sent alone, so that
    /// only the culprit is refused.
    OneByOne(String),
}

/// Groups `messages` by queue (in order of first appearance) and packs each queue's into
/// batches of at most 10 whose sizes add up to at most `max_bytes` (SQS's limit on a batch is
/// its limit on a message).
pub(super) fn batches(messages: Vec<(usize, Outgoing)>, max_bytes: usize) -> Vec<Batch> {
    let mut queues: Vec<(String, Vec<Batch>)> = Vec::new();
    for (index, message) in messages {
        let at = match queues.iter().position(|(url, _)| *url == message.queue_url) {
            Some(at) => at,
            None => {
                queues.push((message.queue_url.clone(), vec![Vec::new()]));
                queues.len() - 1
            }
        };
        let open = &mut queues[at].1;
        let last = open.last_mut().filter(|b| {
            b.len() < 10 && b.iter().map(|(_, m)| m.size).sum::<usize>() + message.size <= max_bytes
        });
        match last {
            Some(batch) => batch.push((index, message)),
            None => open.push(vec![(index, message)]),
        }
    }
    queues.into_iter().flat_map(|(_, batches)| batches).filter(|b| !b.is_empty()).collect()
}

impl Sqs {
    /// Sends `batch` and answers for each of its entries: (index, answer). Never waits past
    /// `deadline`.
    pub(super) async fn send(&self, batch: Batch, deadline: Instant) -> Vec<(usize, Published)> {
        let queue = batch.first().map(|(_, m)| m.queue_url.clone()).unwrap_or_default();
        let call = self
            .client
            .send_message_batch()
            .queue_url(&queue)
            .set_entries(Some(batch.iter().map(|(_, m)| m.entry.clone()).collect()))
            .send();
        let failure = match tokio::time::timeout_at(deadline, call).await {
            Ok(Ok(output)) => {
                // Entry ids are the records' indexes in the publish call.
                let answer_of = |index: usize| {
                    let id = index.to_string();
                    if output.successful().iter().any(|s| s.id() == id) {
                        return Published::Acked;
                    }
                    match output.failed().iter().find(|f| f.id() == id) {
                        Some(f) if f.sender_fault() => Published::Refused(format!(
                            "SQS refused it ({}: {})",
                            f.code(),
                            f.message().unwrap_or("no message")
                        )),
                        Some(f) => retry(format!(
                            "SQS failed it on its side ({}: {})",
                            f.code(),
                            f.message().unwrap_or("no message")
                        )),
                        None => retry("SQS's answer to the batch did not mention it".into()),
                    }
                };
                return batch.iter().map(|(i, _)| (*i, answer_of(*i))).collect();
            }
            Ok(Err(e)) => failure(&e, &queue),
            Err(_) => Failure::Retry(format!(
                "SQS did not answer within {:?} (the [sqs] timeout)",
                self.config.timeout
            )),
        };
        match failure {
            Failure::Retry(reason) => {
                batch.iter().map(|(i, _)| (*i, retry(reason.clone()))).collect()
            }
            Failure::Refused(reason) => {
                batch.iter().map(|(i, _)| (*i, Published::Refused(reason.clone()))).collect()
            }
            Failure::OneByOne(reason) if batch.len() == 1 => {
                batch.iter().map(|(i, _)| (*i, Published::Refused(reason.clone()))).collect()
            }
            Failure::OneByOne(_) => {
                let mut answers = Vec::with_capacity(batch.len());
                for (index, message) in batch {
                    answers.extend(Box::pin(self.send(vec![(index, message)], deadline)).await);
                }
                answers
            }
        }
    }
}

fn retry(reason: String) -> Published {
    Published::Retry { reason, after: None }
}

/// What a failed SendMessageBatch call means. Credentials and permissions are the operator's
/// to fix, not the records': those are retried (with a reason that says so) so that nothing is
/// dead-lettered for a configuration mistake, and `walrelay check` fails on them.
fn failure(e: &SdkError<SendMessageBatchError, HttpResponse>, queue_url: &str) -> Failure {
    let SdkError::ServiceError(context) = e else {
        // Dispatch (connection refused or reset), timeouts, unreadable answers.
        return Failure::Retry(format!("SQS could not be reached: {}", causes(e)));
    };
    let err = context.err();
    let code = err.code().unwrap_or("no code");
    let said = format!("{code}: {}", err.message().unwrap_or("no message"));
    let queue = super::config::queue_name(queue_url);
    if err.is_queue_does_not_exist() || err.is_invalid_address() || is_no_such_queue(code) {
        return Failure::Refused(format!(
            "SQS has no queue {queue} ({said}): `walrelay setup` creates it, or fix [sqs] queue_url"
        ));
    }
    if is_access_problem(code) || err.is_invalid_security() || err.is_kms_access_denied() {
        return Failure::Retry(format!(
            "SQS denied access to {queue} ({said}): fix the credentials or their IAM policy \
             (sqs:SendMessage on the queue); `walrelay check` tells"
        ));
    }
    if err.is_request_throttled() || err.is_kms_throttled() || code.contains("Throttl") {
        return Failure::Retry(format!("SQS throttled the batch ({said})"));
    }
    let kms = code.starts_with("Kms") || code.starts_with("KMS");
    if context.raw().status().is_client_error() && !kms {
        // A refusal of the request (BatchRequestTooLong, InvalidParameterValue, …) may be one
        // entry's doing.
        return Failure::OneByOne(format!("SQS refused it ({said})"));
    }
    // 5xx, and the queue's KMS key's state: the service's side; it may pass.
    Failure::Retry(format!("SQS failed the batch ({said})"))
}

/// An error and its sources, each once, as one line ("dispatch failure: io error: … Connection
/// refused"): the SDK's `DisplayErrorContext` adds a `Debug` dump, too long for a reason.
pub(super) fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(e);
    while let Some(err) = next {
        let text = err.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = err.source();
    }
    parts.join(": ")
}

/// Error codes of a missing queue: the JSON protocol's, and the query protocol's that the SDK
/// may report instead (SQS sends both; servers that emulate it, one or the other).
pub(super) fn is_no_such_queue(code: &str) -> bool {
    ["QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", "NonExistentQueue"]
        .contains(&code)
}

/// Error codes that say the credentials are wrong or lack a permission, in the query and the
/// JSON protocols' spellings.
pub(super) fn is_access_problem(code: &str) -> bool {
    [
        "AccessDenied",
        "AccessDeniedException",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "SignatureDoesNotMatch",
        "IncompleteSignature",
        "MissingAuthenticationToken",
        "ExpiredToken",
        "InvalidSecurity",
    ]
    .contains(&code)
}

#[cfg(test)]
mod tests {
    use aws_sdk_sqs::types::SendMessageBatchRequestEntry;

    use super::*;

    fn message(queue: &str, size: usize) -> Outgoing {
        Outgoing {
            queue_url: queue.into(),
            entry: SendMessageBatchRequestEntry::builder()
                .id("x")
                .message_body("b")
                .build()
                .unwrap(),
            size,
        }
    }

    /// What `failure` makes of SQS answering `status` with `code`.
    fn after(status: u16, code: &str) -> Failure {
        let meta = aws_sdk_sqs::error::ErrorMetadata::builder().code(code).message("said").build();
        let raw = HttpResponse::new(status.try_into().unwrap(), "".into());
        failure(&SdkError::service_error(SendMessageBatchError::generic(meta), raw), "http://h/1/q")
    }

    #[test]
    fn whole_call_failures_retry_refuse_or_split() {
        for code in ["AccessDenied", "InvalidClientTokenId", "SignatureDoesNotMatch"] {
            match after(403, code) {
                Failure::Retry(why) => {
                    assert!(why.contains("walrelay check") && why.contains(code))
                }
                _ => panic!("{code}: not a Retry"),
            }
        }
        for code in ["QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue"] {
            match after(400, code) {
                Failure::Refused(why) => {
                    assert!(why.contains("no queue q") && why.contains("setup"))
                }
                _ => panic!("{code}: not Refused"),
            }
        }
        assert!(matches!(after(400, "RequestThrottled"), Failure::Retry(_)));
        assert!(matches!(after(400, "ThrottlingException"), Failure::Retry(_)));
        assert!(matches!(after(503, "ServiceUnavailable"), Failure::Retry(_)));
        assert!(matches!(after(400, "KmsThrottled"), Failure::Retry(_)));
        assert!(matches!(after(400, "InvalidParameterValue"), Failure::OneByOne(_)));
        assert!(matches!(after(400, "BatchRequestTooLong"), Failure::OneByOne(_)));
    }

    #[test]
    fn messages_group_by_queue_and_pack_under_the_batch_size() {
        let messages = vec![
            (0, message("a", 100)),
            (1, message("b", 100)),
            (2, message("a", 900)),
            (3, message("a", 100)),
        ];
        let shape: Vec<Vec<usize>> =
            batches(messages, 1000).iter().map(|b| b.iter().map(|(i, _)| *i).collect()).collect();
        assert_eq!(shape, vec![vec![0, 2], vec![3], vec![1]]);
    }
}
