//! The types `build.rs` generates from `proto/walrelay/v1/event.proto` with prost.

#![allow(clippy::all, missing_docs)]

include!(concat!(env!("OUT_DIR"), "/walrelay.v1.rs"));
