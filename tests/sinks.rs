//! The sinks beyond Kafka, each against its real server: `scenarios` holds what every sink must
//! show, each sink's module runs them and tests what is its own.

mod nats;
mod rabbitmq;
mod scenarios;
mod sqs;
mod webhook;
