#!/usr/bin/env bash
# Runs walrelay end to end on embedded defaults: a throwaway PostgreSQL and a local broker, a few
# sample outbox rows, and the Kafka records printed as they arrive; stops by itself once they all
# arrived. Installs what it needs first: PostgreSQL and the in-memory broker, not what only the
# test suite needs (scripts/test.sh installs that).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/install-test-deps.sh --quickstart
cargo build --release --bin walrelay --example quickstart
WALRELAY_BIN="$PWD/target/release/walrelay" exec target/release/examples/quickstart "$@"
