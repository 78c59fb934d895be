#!/usr/bin/env bash
# Records the JSON Schema text Confluent's JsonSchemaConverter 7.0.16 registers for Connect
# schemas: tests/fixtures/debezium/registry/json_schema_texts.jsonl, one line per schema, for the
# value schemas Debezium 3.6.3's router produced for the fixture rows and shapes they lack
# (connect_inputs.py writes them into json_schema_connect.jsonl beside it).
#
# Confluent's converter is not on Maven Central, nor in the Debezium Server wheel the other
# registry goldens come from (run.sh one level up). So this builds its JsonSchemaData from
# Confluent's source at tag v7.0.16 (json-schema-converter: JsonSchemaData.java and
# JsonSchemaDataConfig.java, copied from a checkout of github.com/confluentinc/schema-registry),
# against everit-json-schema 1.14.3 (the version that tag builds with) and Kafka's connect-api from
# Maven Central; stubs/ stands in for three small classes of modules that are not on Maven Central
# (JsonSchema: the text is the everit schema's toString, read into a Jackson tree and written
# back, as JsonSchema's constructor and canonicalString() do).
#
# usage: scripts/debezium-registry-goldens/json-schema/run.sh SCHEMA_REGISTRY_GIT_DIR
set -euo pipefail
SR=${1:?usage: $0 SCHEMA_REGISTRY_GIT_DIR (a clone of github.com/confluentinc/schema-registry)}
TAG=${TAG:-$(git --git-dir="$SR" tag | grep '^v7\.0\.16' | sort -V | tail -n 1)}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FIXTURES=$(cd "$HERE/../../../tests/fixtures/debezium/registry" && pwd)
WORK=${WORK:-/tmp/walrelay-json-schema-texts}
JAVA_HOME=${JAVA_HOME:-/usr/lib/jvm/temurin-25-jdk-amd64}
export JAVA_HOME

rm -rf "$WORK" && mkdir -p "$WORK/src/main/java/io/confluent/connect/json" \
  "$WORK/src/main/java/io/confluent/kafka/schemaregistry/json/jackson" \
  "$WORK/src/main/java/io/confluent/kafka/schemaregistry/utils" "$WORK/src/main/java/walrelay/goldens"
for f in JsonSchemaData JsonSchemaDataConfig; do
  git --git-dir="$SR" show "$TAG:json-schema-converter/src/main/java/io/confluent/connect/json/$f.java" \
    >"$WORK/src/main/java/io/confluent/connect/json/$f.java"
done
# Kafka's Utils.join (gone from the connect-api on Maven Central) only formats a config error.
sed -i 's/Utils\.join(validStrings, ", ")/String.join(", ", validStrings)/' \
  "$WORK/src/main/java/io/confluent/connect/json/JsonSchemaDataConfig.java"
cp "$HERE/pom.xml" "$WORK/"
cp "$HERE/stubs/JsonSchema.java" "$WORK/src/main/java/io/confluent/kafka/schemaregistry/json/"
cp "$HERE/stubs/Jackson.java" "$WORK/src/main/java/io/confluent/kafka/schemaregistry/json/jackson/"
cp "$HERE/stubs/BoundedConcurrentHashMap.java" "$WORK/src/main/java/io/confluent/kafka/schemaregistry/utils/"
cp "$HERE/stubs/Texts.java" "$WORK/src/main/java/walrelay/goldens/"
python3 "$HERE/connect_inputs.py" "$FIXTURES/.." >"$FIXTURES/json_schema_connect.jsonl"
(cd "$WORK" && mvn -q compile && mvn -q dependency:build-classpath -Dmdep.outputFile=cp.txt)
"$JAVA_HOME/bin/java" -cp "$WORK/target/classes:$(cat "$WORK/cp.txt")" walrelay.goldens.Texts \
  <"$FIXTURES/json_schema_connect.jsonl" >"$FIXTURES/json_schema_texts.jsonl"
echo "$(wc -l <"$FIXTURES/json_schema_texts.jsonl") texts from Confluent's JsonSchemaData at $TAG: $FIXTURES/json_schema_texts.jsonl"
