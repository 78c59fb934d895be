#!/usr/bin/env bash
# Runs walrelay's whole test suite: unit tests and the integration tests, which start their own
# PostgreSQL and Kafka-protocol broker. Installs what they need first (idempotent).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/install-test-deps.sh
cargo test --all-targets -- --test-threads "${TEST_THREADS:-4}"
