//! The types `build.rs` generates with prost: `walrelay.v1` (`proto/walrelay/v1/event.proto`)
//! here, the CloudEvents protobuf format (`proto/io/cloudevents/v1/cloudevents.proto`) in
//! [`cloudevents`].

#![allow(clippy::all, missing_docs)]

include!(concat!(env!("OUT_DIR"), "/walrelay.v1.rs"));

/// `io.cloudevents.v1`: the CloudEvents specification's protobuf schema.
pub mod cloudevents {
    include!(concat!(env!("OUT_DIR"), "/io.cloudevents.v1.rs"));
}
