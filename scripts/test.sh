#!/usr/bin/env bash
# Runs walrelay's whole test suite: unit tests and the integration tests, which start their own
# PostgreSQL and Kafka-protocol broker, and the benchmark's own unit tests. Installs what they
# need first (idempotent), checks that examples and benchmarks build, and ends with one summary
# line.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/install-test-deps.sh
cargo build --all-targets
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --lib --test main --example walrelay-bench -- --test-threads "${TEST_THREADS:-4}" 2>&1 | tee "$log" || status=$?

awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "walrelay: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
