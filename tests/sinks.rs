//! The sinks beyond Kafka, each against its real server.

mod nats;
