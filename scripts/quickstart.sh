#!/usr/bin/env bash
# Runs walrelay end to end on embedded defaults: a throwaway PostgreSQL and a local broker, a few
# sample outbox rows, and the Kafka records printed as they arrive. Installs what it needs first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/install-test-deps.sh
cargo build --release --bin walrelay --example quickstart
WALRELAY_BIN="$PWD/target/release/walrelay" exec target/release/examples/quickstart "$@"
