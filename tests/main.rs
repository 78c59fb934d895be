//! The single integration-test binary: one PostgreSQL + one broker per process, shared by all
//! test modules (see tests/support). Add test modules below.

mod support;

mod common;
mod harness_smoke;

mod admin;
mod broker_faults;
mod cli;
mod connections;
mod database;
mod delivery;
mod durability;
mod envelopes;
mod failover;
mod faults;
mod fuzz;
mod goldens;
mod messages;
mod migration;
mod ops;
mod ops_docs;
mod retention;
mod security;
mod tables;
mod takeover;
