//! What a Kafka error means for what happens next, decided here once for every path that meets
//! one: a record librdkafka refused at once (`Publisher::send`) or in its delivery report, and
//! the transactional calls (`producer/transactions.rs`).

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// What an error from Kafka calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// This record can never be produced as it is (too large, an unknown topic or partition):
    /// it is dead-lettered, or the relay stops at it.
    Record,
    /// An ACL is missing: no retry helps and a dead letter would hide it; the relay stops with
    /// the `kafka-acls.sh` line that fixes it.
    Authorization,
    /// The Kafka transaction cannot go on (librdkafka put it in an abortable or fatal state):
    /// it is aborted, and the next session resumes from the last committed one.
    Transaction,
    /// Another producer of this `transactional.id` took over, or the broker aborted this one's
    /// transaction on its timeout, which Kafka reports the same way (KIP-588): who holds the
    /// slot tells which (`relay::Session::run`).
    Fenced,
    /// Retrying may cure it (a timeout, brokers away): the session ends and the next resumes
    /// from the confirmed position.
    Transient,
}

/// The one classification of a Kafka error.
pub fn classify(error: &KafkaError) -> Fault {
    // librdkafka says itself what a transactional call's failure requires.
    if let KafkaError::Transaction(e) = error {
        if let Some(fault) = by_code(e.code()) {
            return fault;
        }
        if e.is_fatal() || e.txn_requires_abort() {
            return Fault::Transaction;
        }
        return Fault::Transient;
    }
    error.rdkafka_error_code().and_then(by_code).unwrap_or(Fault::Transient)
}

fn by_code(code: RDKafkaErrorCode) -> Option<Fault> {
    use RDKafkaErrorCode as C;
    Some(match code {
        C::MessageSizeTooLarge
        | C::InvalidMessage
        | C::InvalidMessageSize
        | C::InvalidRecord
        | C::UnknownPartition
        | C::InvalidTopic
        // Reported only after `topic.metadata.propagation.max.ms` without the topic in the
        // cluster's metadata: the brokers don't create it (auto.create.topics.enable is off) and
        // a replay would wait as long again, for ever.
        | C::UnknownTopicOrPartition
        | C::UnknownTopic => Fault::Record,
        C::TopicAuthorizationFailed
        | C::ClusterAuthorizationFailed
        | C::TransactionalIdAuthorizationFailed
        | C::GroupAuthorizationFailed => Fault::Authorization,
        C::Fenced | C::ProducerFenced | C::InvalidProducerEpoch => Fault::Fenced,
        // `__STATE`: a call the transaction's state does not allow (it failed earlier);
        // `__FATAL`: the producer must be rebuilt. Neither is the record's fault.
        C::State
        | C::Fatal
        | C::InvalidTransactionalState
        | C::OutOfOrderSequenceNumber
        | C::PurgeQueue
        | C::PurgeInflight => Fault::Transaction,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(code: RDKafkaErrorCode) -> Fault {
        classify(&KafkaError::MessageProduction(code))
    }

    #[test]
    fn a_transaction_state_is_never_blamed_on_the_record() {
        assert_eq!(fault(RDKafkaErrorCode::State), Fault::Transaction);
        assert_eq!(fault(RDKafkaErrorCode::Fatal), Fault::Transaction);
        assert_eq!(fault(RDKafkaErrorCode::PurgeInflight), Fault::Transaction);
    }

    #[test]
    fn refusals_of_the_record_acls_and_fences_are_told_apart() {
        assert_eq!(fault(RDKafkaErrorCode::MessageSizeTooLarge), Fault::Record);
        assert_eq!(fault(RDKafkaErrorCode::UnknownTopicOrPartition), Fault::Record);
        assert_eq!(fault(RDKafkaErrorCode::TopicAuthorizationFailed), Fault::Authorization);
        assert_eq!(
            fault(RDKafkaErrorCode::TransactionalIdAuthorizationFailed),
            Fault::Authorization
        );
        assert_eq!(fault(RDKafkaErrorCode::ProducerFenced), Fault::Fenced);
        assert_eq!(fault(RDKafkaErrorCode::Fenced), Fault::Fenced);
        assert_eq!(fault(RDKafkaErrorCode::MessageTimedOut), Fault::Transient);
        assert_eq!(fault(RDKafkaErrorCode::AllBrokersDown), Fault::Transient);
    }
}
