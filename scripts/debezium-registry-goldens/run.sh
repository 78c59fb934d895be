#!/usr/bin/env bash
# Records what Debezium 3.6.3.Final's Outbox Event Router writes through Confluent's registry
# converters (AvroConverter and ProtobufConverter 7.0.16, the ones Debezium Server ships) for the
# rows of tests/fixtures/debezium/fixture.sql, into tests/fixtures/debezium/registry/.
#
# It runs the Debezium harness the goldens of tests/fixtures/debezium came from (the project's
# anchors/debezium: an embedded engine, PostgreSQL 15 on 127.0.0.1:55432) on a copy of it, with
# converters.patch applied (two converter kinds: avro, protobuf), its null sink (the converted
# bytes are what matters here; no broker), and a fresh Apicurio Registry 3.3.3 per configuration,
# the one scripts/install-test-deps.sh installs, on 127.0.0.1:28081. Its Confluent-compatible API
# is what the converters (and walrelay) talk to.
#
# usage: scripts/debezium-registry-goldens/run.sh ANCHOR_DIR [NAME...]   (default: every configuration)
#
# Writes, per configuration NAME, tests/fixtures/debezium/registry/NAME.jsonl: one line per
# record, in Debezium's order (see ../../tests/fixtures/debezium/registry/README.md).
set -euo pipefail
ANCHOR=$(cd "${1:?usage: $0 ANCHOR_DIR [NAME...]}" && pwd)
shift
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export LAB=${LAB:-/tmp/dbzlab}
OUT=$REPO/tests/fixtures/debezium/registry
HARNESS=$LAB/registry-harness
REGISTRY_PORT=28081
REGISTRY=http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7
APICURIO=${WALRELAY_APICURIO_HOME:-$HOME/.local/walrelay-apicurio}/3.3.3
JAVA25=/usr/lib/jvm/temurin-25-jdk-amd64/bin/java

rm -rf "$HARNESS" && mkdir -p "$LAB" && cp -r "$ANCHOR" "$HARNESS" && chmod -R u+w "$HARNESS"
patch -s -d "$HARNESS" -p1 <"$REPO/scripts/debezium-registry-goldens/converters.patch"
source "$HARNESS/lib.sh"
CLASSES=$LAB/registry-classes
# The anchor's classpath, and what Confluent's converters need besides.
eval "anchor_$(declare -f classpath)"
classpath() {
  local cp j
  cp=$(anchor_classpath)
  for j in kafka-connect-avro-converter-7.0.16 kafka-connect-avro-data-7.0.16 kafka-avro-serializer-7.0.16 \
    kafka-connect-protobuf-converter-7.0.16 kafka-protobuf-provider-7.0.16 kafka-protobuf-serializer-7.0.16 \
    kafka-protobuf-types-7.0.16 kafka-schema-serializer-7.0.16 kafka-schema-registry-client-7.0.16 \
    common-utils-7.0.16 avro-1.11.3 protobuf-java-3.25.5 protobuf-java-util-3.25.5 wire-schema-jvm-4.9.7 \
    wire-runtime-jvm-4.9.7 okio-jvm-3.4.0 kotlin-stdlib-1.9.10 kotlin-stdlib-common-1.9.10 \
    kotlin-stdlib-jdk7-1.9.10 kotlin-stdlib-jdk8-1.9.10 kotlin-reflect-1.9.22 guava-24.1.1-jre \
    failureaccess-1.0.2 swagger-annotations-1.6.12 commons-compress-1.26.1 \
    jackson-datatype-jdk8-2.21.2 jackson-datatype-jsr310-2.21.2; do
    cp="$cp:$LIBS_ALL/$j.jar"
  done
  echo "$cp:$EXTRA/proto-google-common-protos-2.41.0.jar"
}
# ProtobufConverter needs Google's common protos newer than the wheel's 1.17.0 (DateTime).
EXTRA=$LAB/extra
if [ ! -f "$EXTRA/proto-google-common-protos-2.41.0.jar" ]; then
  mvn -q -B dependency:copy -Dartifact=com.google.api.grpc:proto-google-common-protos:2.41.0 \
    -DoutputDirectory="$EXTRA" >"$LAB/mvn.log" 2>&1 || { echo "mvn failed; see $LAB/mvn.log" >&2; exit 1; }
fi

registry_pid=
stop_registry() { if [ -n "$registry_pid" ]; then kill "$registry_pid" 2>/dev/null || true; wait "$registry_pid" 2>/dev/null || true; registry_pid=; fi; }
trap stop_registry EXIT
start_registry() { # a fresh, empty registry (in-memory storage)
  stop_registry
  [ -f "$APICURIO/quarkus-run.jar" ] || { echo "no Apicurio 3.3.3 in $APICURIO: run scripts/install-test-deps.sh" >&2; exit 1; }
  mkdir -p "$LAB/registry"
  (cd "$LAB/registry" && exec "$JAVA25" -Xmx256m -XX:TieredStopAtLevel=1 \
    -Dquarkus.http.port=$REGISTRY_PORT -Dquarkus.http.host=127.0.0.1 -Dquarkus.management.port=$((REGISTRY_PORT + 1)) \
    -Dquarkus.management.host=127.0.0.1 -Dapicurio.storage.kind=sql -Dapicurio.storage.sql.kind=h2 \
    -jar "$APICURIO/quarkus-run.jar" >"$LAB/registry/registry.log" 2>&1) &
  registry_pid=$!
  for _ in $(seq 600); do
    curl -fsS "$REGISTRY/subjects" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "the registry did not start; see $LAB/registry/registry.log" >&2
  exit 1
}

ensure_jars
build_java
ensure_pg
CP="$(classpath)"
SLOT=dbz_registry_golden
mkdir -p "$OUT" "$LAB/golden"

# name | key converter | value converter | space-separated k=v overrides | fixture rows (all if empty)
#
# With an envelope placement Debezium's router halts the engine at the first row whose payload
# it cannot expand (the fallback string does not fit the struct it builds), so that
# configuration runs the rows it expands; tests/registry_goldens.rs runs the same rows.
CONFIGS=(
  'avro_defaults|string|avro|'
  'avro_expand_json_payload|string|avro|transforms.outbox.table.expand.json.payload=true'
  'avro_expand_json_payload_placements|string|avro|transforms.outbox.table.expand.json.payload=true transforms.outbox.table.fields.additional.placement=type:header:eventType,aggregatetype:envelope:aggType|01 02 07 08 09 11 16 17 18 19 20 99'
  'avro_keys|avro|avro|'
  'protobuf_defaults|string|protobuf|'
  'protobuf_expand_json_payload|string|protobuf|transforms.outbox.table.expand.json.payload=true'
  'protobuf_expand_json_payload_placements|string|protobuf|transforms.outbox.table.expand.json.payload=true transforms.outbox.table.fields.additional.placement=type:header:eventType,aggregatetype:envelope:aggType|01 02 07 08 09 11 16 17 18 19 20 99'
)

wanted=("$@")
for entry in "${CONFIGS[@]}"; do
  IFS='|' read -r name kc vc sets rows <<<"$entry"
  if [ ${#wanted[@]} -gt 0 ] && [[ ! " ${wanted[*]} " == *" $name "* ]]; then continue; fi
  log "registry golden: $name"
  start_registry
  prepare_table >/dev/null 2>&1
  psql_lab -c "SELECT pg_drop_replication_slot('$SLOT') FROM pg_replication_slots WHERE slot_name='$SLOT'" >/dev/null
  off="$LAB/offsets/registry-golden-$name.dat"; mkdir -p "$LAB/offsets"; rm -f "$off"
  setargs=(--set "slot.name=$SLOT" --set "offset.storage.file.filename=$off")
  for kv in $sets; do setargs+=(--set "$kv"); done
  connect="$LAB/golden/$name.connect.jsonl"
  # errors.tolerance=all: a row the converter refuses is recorded with its error, and the rest go on.
  java -cp "$CP" DbzRelay --props "$HARNESS/engine.properties" "${setargs[@]}" --sink null \
    --key-converter "$kc" --value-converter "$vc" --header-converter simple --errors-tolerance all \
    --registry-url "http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7" \
    --stop-on-id 00000000-0000-0000-0000-000000000099 --golden-out "$connect" \
    --max-wait-s 180 >"$LAB/golden/$name.out" 2>"$LAB/golden/$name.err" &
  epid=$!
  for _ in $(seq 600); do
    [ "$(psql_lab -Atc "SELECT active FROM pg_replication_slots WHERE slot_name='$SLOT'")" = "t" ] && break
    kill -0 "$epid" 2>/dev/null || break
    sleep 0.1
  done
  fixture="$LAB/golden/$name.fixture.sql"
  python3 "$REPO/scripts/debezium-registry-goldens/rows.py" "$REPO/tests/fixtures/debezium/fixture.sql" $rows >"$fixture"
  psql_lab -f "$fixture" >/dev/null
  # Debezium halts at a row its router cannot take (errors.tolerance covers the converter
  # only): the golden then holds the records before that row, as the JSON goldens do.
  wait "$epid" || log "  the engine stopped on an error; the golden ends before it ($(grep -m1 '^ENGINE COMPLETED' "$LAB/golden/$name.err" | cut -c1-200))"
  python3 "$REPO/scripts/debezium-registry-goldens/record.py" "$REGISTRY" "$connect" "$OUT/$name.jsonl" "$kc" "$vc"
done
