//! The single integration-test binary: one PostgreSQL + one broker per process, shared by all
//! test modules (see tests/support). Add test modules below.

mod support;

mod common;
mod harness_smoke;

mod admin;
mod audit;
mod auto_topics;
mod backpressure;
mod broker_faults;
mod broker_outages;
mod check_offsets;
mod cli;
mod configuration_docs;
mod connections;
mod console;
mod database;
mod dead_letters;
mod definite_errors;
mod delivery;
mod deploying;
mod durability;
mod envelopes;
mod exactly_once;
mod failover;
mod fuzz;
mod goldens;
mod helm;
mod hints;
mod inbox;
mod kafka_security;
mod messages;
mod migration;
mod ops;
mod ops_docs;
mod quickstart;
mod registry_goldens;
mod replay;
mod reporting;
mod restarts;
mod retention;
mod schema_registry;
mod secure_counts;
mod security;
mod sinks;
mod slot_creation;
mod tables;
mod takeover;
mod tenants;
mod trace_context;
mod two_relays;
