//! Generates the protobuf envelopes' Rust types from `proto/walrelay/v1/event.proto` (walrelay's
//! own `Event`) and `proto/io/cloudevents/v1/cloudevents.proto` (the CloudEvents protobuf
//! format).
//!
//! The `.proto` is parsed by `protox`, a pure-Rust compiler, into the descriptor set that
//! `prost-build` generates code from: building walrelay needs no `protoc` on the machine, and
//! the same file stays the input of every other language's code generator.

fn main() {
    println!("cargo:rerun-if-changed=proto");
    let files = ["walrelay/v1/event.proto", "io/cloudevents/v1/cloudevents.proto"];
    let descriptors = protox::compile(files, ["proto"])
        .unwrap_or_else(|e| panic!("the .proto files under proto/ do not compile: {e}"));
    prost_build::Config::new()
        // `bytes` fields as `Bytes`: the payload goes into the Event without a copy.
        .bytes(["."])
        // Maps as `BTreeMap`: encoded in key order, so one event always encodes to the same
        // bytes (a `HashMap` would differ from run to run).
        .btree_map(["."])
        .compile_fds(descriptors)
        .unwrap_or_else(|e| panic!("prost-build cannot generate code from proto/: {e}"));
}
