#!/usr/bin/env bash
# Runs walrelay end to end on embedded defaults: a throwaway PostgreSQL and a local broker, a few
# sample outbox rows, and the Kafka records printed as they arrive; prints the console's URL and
# keeps the relay running until Ctrl-C. Installs what it needs first: PostgreSQL and the
# in-memory broker, not what only the test suite needs (scripts/test.sh installs that).
#
#   --kafka   run on Apache Kafka 4.4 (KRaft, from Maven Central; Java 17) instead of the
#             in-memory tansu broker, which starts in milliseconds and is the default
#   --no-wait stop once the sample records arrived (the suite's test of the quickstart)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
broker=tansu
args=()
for arg in "$@"; do
  case "$arg" in
    --kafka) broker=kafka ;;
    *) args+=("$arg") ;;
  esac
done
if [ "$broker" = kafka ]; then
  bash scripts/install-test-deps.sh --quickstart --kafka
else
  bash scripts/install-test-deps.sh --quickstart
fi
export WALRELAY_TEST_BROKER=$broker
# The dev profile, not release: optimising walrelay, librdkafka and every dependency took
# about twice the CPU (18.5 against 8.4 min on 2 cores, 2026-12-01) and a demo of a few events
# gains nothing from it; scripts/test.sh then reuses the same build. Only the two binaries: the
# driver is a binary behind the `quickstart` feature, so no dev-dependency is built.
cargo build --features quickstart --bin walrelay --bin walrelay-quickstart
WALRELAY_BIN="$PWD/target/debug/walrelay" exec target/debug/walrelay-quickstart ${args[@]+"${args[@]}"}
