//! Outbox table shapes beside the default one, each drained from the same rows in the same
//! invocation by pg_recvlogical (that shape's decoding ceiling: what PostgreSQL itself pays for
//! it) and by walrelay, so a shape's cost reads as a ratio to the plain table's drain and to its
//! own ceiling:
//!
//! * `partitioned` — the outbox `PARTITION BY RANGE (created_at)`, four partitions, published
//!   with `publish_via_partition_root` (every row names the root's relation);
//! * `two-tables` — two outbox tables in one relay, transactions alternating between them;
//! * `messages` — no table: the same events emitted as transactional logical decoding messages
//!   (`pg_logical_emit_message(true, 'outbox', …)`, the same number per transaction), drained
//!   by a message-only walrelay (`[outbox] tables = []`, an empty publication). Their records
//!   are byte for byte the plain table's;
//! * `debezium`, `cloudevents-binary`, `cloudevents-structured`, `cloudevents-protobuf`,
//!   `protobuf` — the plain table, relayed under that `[envelope] format`. `debezium` is the
//!   default format drained exactly as the others are (a database of its own, its own ceiling
//!   just before), so the formats compare to it like for like. The read-back checks the same
//!   topic, key and `id` header, which every format keeps;
//! * `exactly-once` — the plain table with `[delivery] guarantee = "exactly-once"`: Kafka
//!   transactions of whole PostgreSQL transactions plus the progress record, read back with
//!   `read_committed`;
//! * `tenants-1`, `tenants-1000` — outbox tables by pattern (`[outbox] tables =
//!   ["t[0-9]+\\.outbox"]`), one schema per tenant: 1 tenant's table, and 1,000 with the
//!   transactions spread over them in turn, so the cost of a thousand relations (their
//!   Relation messages, catalog lookups, bindings and per-table counts) reads beside one;
//! * `tracing-off`, `tracing`, `tracing-export` — the plain table with a span context column
//!   whose every row holds the same Properties text (`traceparent=…`, `tracestate=…`, as
//!   Debezium's writers store it), so the WAL is the same in all three: `tracing-off` names the
//!   column `tracing_unused` (walrelay reads no context), `tracing` names it
//!   `tracingspancontext` (parsed, `traceparent`/`tracestate` headers), `tracing-export` adds
//!   `[tracing] otlp_endpoint` to an OTLP/HTTP receiver in the bench (a relay span per event);
//! * `json-expanded`, `avro` — the value converters (converters.rs, issue 49): the plain table
//!   with `[router] table.expand.json.payload`, its value written by the JsonConverter without
//!   schemas (`value.converter = "json"`, `value.converter.schemas.enable = false`: what a
//!   Debezium team on JSON runs) and by the AvroConverter (`value.converter = "avro"`) against
//!   the harness's Apicurio registry with `auto_register`, each record framed with its schema id.
//!   `avro-latest` is `avro` with `auto_register = false` and `use_latest_version = true`: before
//!   the drain a contract (its own record name, a subset of the payload's fields, one field the
//!   payload lacks with a default) is registered under each topic's subject, so every value is
//!   rewritten under it — the contract-first path's cost. `protobuf-registry` is `avro` with
//!   Confluent's ProtobufConverter (`value.converter = "protobuf"`; `protobuf` is the envelope),
//!   `avro-apicurio` is `avro` framed as Apicurio 2's AvroConverter does by default (the
//!   globalId, read once per schema from Apicurio's own API, in a header; the value unframed);
//!   `avro-keys` is `avro` with `key.converter = "avro"` (each key framed under `<topic>-key`);
//!   `json-schema-registry` with its JsonSchemaConverter (`value.converter = "json-schema"`) and
//!   `aggregatetype` as an envelope field (Apicurio refuses the bare `oneOf` schema of an
//!   optional payload at the root).
//!   The registry starts before the first repetition, only when a registry shape is asked for, and the two
//!   swap places every other repetition. The read-back checks topic, key and `id` header, which
//!   neither converter touches; after each drain one record's value is described (JSON's first
//!   bytes; Avro's framing and whether its registered schema holds the expanded payload).

use crate::support::{services, unique, TestDb};
use crate::systems::{walrelay_drain, Ctx, Drain};
use crate::workload::{self, Loaded};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Partitioned,
    TwoTables,
    Messages,
    Debezium,
    CloudEventsBinary,
    CloudEventsStructured,
    CloudEventsProtobuf,
    Protobuf,
    ExactlyOnce,
    TracingOff,
    Tracing,
    TracingExport,
    /// Outbox tables by pattern: this many tenants' tables.
    Tenants(u32),
    JsonExpanded,
    /// `avro` written under contracts registered before the drain (`use_latest_version`).
    AvroLatest,
    Avro,
    /// `avro` framed as Apicurio 2's AvroConverter frames by default: the value unframed, its
    /// schema's globalId in a header (`id_handler = "headers"`, `use_id = "globalId"`).
    AvroApicurio,
    /// `avro` with Avro keys too (`key.converter = "avro"`, registered under `<topic>-key`).
    AvroKeys,
    /// Confluent's ProtobufConverter against the registry (not the `protobuf` envelope).
    ProtobufRegistry,
    /// Confluent's JsonSchemaConverter against the registry.
    JsonSchemaRegistry,
}

impl Shape {
    pub fn parse(name: &str) -> Option<Shape> {
        match name.trim() {
            "partitioned" => Some(Shape::Partitioned),
            "two-tables" => Some(Shape::TwoTables),
            "messages" => Some(Shape::Messages),
            "debezium" => Some(Shape::Debezium),
            "cloudevents-binary" => Some(Shape::CloudEventsBinary),
            "cloudevents-structured" => Some(Shape::CloudEventsStructured),
            "cloudevents-protobuf" => Some(Shape::CloudEventsProtobuf),
            "protobuf" => Some(Shape::Protobuf),
            "exactly-once" => Some(Shape::ExactlyOnce),
            "tracing-off" => Some(Shape::TracingOff),
            "tracing" => Some(Shape::Tracing),
            "tracing-export" => Some(Shape::TracingExport),
            "tenants-1" => Some(Shape::Tenants(1)),
            "tenants-1000" => Some(Shape::Tenants(1000)),
            crate::converters::JSON_EXPANDED => Some(Shape::JsonExpanded),
            crate::converters::AVRO => Some(Shape::Avro),
            crate::converters::AVRO_LATEST => Some(Shape::AvroLatest),
            crate::converters::AVRO_APICURIO => Some(Shape::AvroApicurio),
            crate::converters::AVRO_KEYS => Some(Shape::AvroKeys),
            crate::converters::PROTOBUF_REGISTRY => Some(Shape::ProtobufRegistry),
            crate::converters::JSON_SCHEMA_REGISTRY => Some(Shape::JsonSchemaRegistry),
            _ => None,
        }
    }

    /// The drain table's row name.
    pub fn system(self) -> &'static str {
        match self {
            Shape::Tenants(1) => "walrelay, 1 tenant table by pattern",
            Shape::Tenants(_) => "walrelay, 1000 tenant tables by pattern",
            Shape::Partitioned => "walrelay, partitioned outbox",
            Shape::TwoTables => "walrelay, two outbox tables",
            Shape::Messages => "walrelay, logical messages (no table)",
            Shape::Debezium => "walrelay, envelope debezium (the default)",
            Shape::CloudEventsBinary => "walrelay, envelope cloudevents-binary",
            Shape::CloudEventsStructured => "walrelay, envelope cloudevents-structured",
            Shape::CloudEventsProtobuf => "walrelay, envelope cloudevents-protobuf",
            Shape::Protobuf => "walrelay, envelope protobuf",
            Shape::ExactlyOnce => "walrelay, exactly-once",
            Shape::TracingOff => "walrelay, context column, tracing off",
            Shape::Tracing => "walrelay, tracing (propagation)",
            Shape::TracingExport => "walrelay, tracing + OTLP span export",
            Shape::JsonExpanded => "walrelay, JSON values, payload expanded, schemas off",
            Shape::Avro => "walrelay, Avro values, payload expanded, registry auto-register",
            Shape::AvroLatest => "walrelay, Avro values rewritten under registered contracts",
            Shape::AvroApicurio => "walrelay, Avro values, the globalId in a header (Apicurio)",
            Shape::AvroKeys => "walrelay, Avro values and Avro keys",
            Shape::ProtobufRegistry => {
                "walrelay, Protobuf values, payload expanded, registry auto-register"
            }
            Shape::JsonSchemaRegistry => {
                "walrelay, JSON Schema values, payload expanded in an envelope, registry auto-register"
            }
        }
    }

    /// Whether the shape's values are framed with a schema registry's ids.
    pub fn uses_registry(self) -> bool {
        matches!(
            self,
            Shape::Avro
                | Shape::AvroLatest
                | Shape::AvroApicurio
                | Shape::AvroKeys
                | Shape::ProtobufRegistry
                | Shape::JsonSchemaRegistry
        )
    }

    /// The row name of the shape's decoding ceiling.
    pub fn ceiling_system(self) -> String {
        self.system().replacen("walrelay", "ceiling", 1)
    }

    fn tables(self) -> Vec<String> {
        match self {
            Shape::Partitioned
            | Shape::Debezium
            | Shape::CloudEventsBinary
            | Shape::CloudEventsStructured
            | Shape::CloudEventsProtobuf
            | Shape::Protobuf
            | Shape::ExactlyOnce
            | Shape::TracingOff
            | Shape::Tracing
            | Shape::TracingExport
            | Shape::JsonExpanded
            | Shape::Avro
            | Shape::AvroLatest
            | Shape::AvroApicurio
            | Shape::AvroKeys
            | Shape::ProtobufRegistry
            | Shape::JsonSchemaRegistry => vec!["outbox".into()],
            Shape::TwoTables => vec!["outbox".into(), "billing.outbox".into()],
            Shape::Messages => Vec::new(),
            Shape::Tenants(n) => (1..=n).map(|t| format!("t{t}.outbox")).collect(),
        }
    }

    fn outbox_toml(self) -> &'static str {
        match self {
            Shape::Partitioned => "[outbox]\ntable = \"public.outbox\"\n",
            Shape::TwoTables => "[outbox]\ntables = [\"public.outbox\", \"billing.outbox\"]\n",
            Shape::Messages => {
                "[outbox]\ntables = []\n\n[debezium]\n\"message.prefix.include.list\" = \"outbox\"\n"
            }
            Shape::Debezium => {
                "[outbox]\ntable = \"public.outbox\"\n\n[envelope]\nformat = \"debezium\"\n"
            }
            Shape::CloudEventsBinary => {
                "[outbox]\ntable = \"public.outbox\"\n\n[envelope]\nformat = \"cloudevents-binary\"\n"
            }
            Shape::CloudEventsStructured => {
                "[outbox]\ntable = \"public.outbox\"\n\n[envelope]\nformat = \"cloudevents-structured\"\n"
            }
            Shape::CloudEventsProtobuf => {
                "[outbox]\ntable = \"public.outbox\"\n\n[envelope]\nformat = \"cloudevents-protobuf\"\n"
            }
            Shape::Protobuf => {
                "[outbox]\ntable = \"public.outbox\"\n\n[envelope]\nformat = \"protobuf\"\n"
            }
            Shape::ExactlyOnce => crate::systems::EXACTLY_ONCE_OUTBOX,
            Shape::TracingOff | Shape::Tracing | Shape::TracingExport => {
                "[outbox]\ntable = \"public.outbox\"\n"
            }
            Shape::Tenants(_) => "[outbox]\ntables = [\"t[0-9]+\\\\.outbox\"]\n",
            Shape::JsonExpanded => crate::converters::JSON_EXPANDED_OUTBOX,
            // Its [schema_registry] section is added in `drain`, with the registry's URL.
            Shape::Avro | Shape::AvroLatest | Shape::AvroApicurio => {
                crate::converters::AVRO_OUTBOX
            }
            Shape::AvroKeys => crate::converters::AVRO_KEYS_OUTBOX,
            Shape::ProtobufRegistry => crate::converters::PROTOBUF_OUTBOX,
            Shape::JsonSchemaRegistry => crate::converters::JSON_SCHEMA_OUTBOX,
        }
    }
}

/// The tracing shapes' span context, as `Properties.store` writes it (a date comment first).
const SPAN_CONTEXT: &str = "#Tue Dec 02 09:00:00 UTC 2026
tracestate=vendor\\=opaque
traceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
";

const PARTITIONED_OUTBOX: &str = "CREATE TABLE outbox (
  id uuid NOT NULL,
  aggregatetype varchar(255) NOT NULL,
  aggregateid varchar(255) NOT NULL,
  type varchar(255) NOT NULL,
  payload jsonb,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);
CREATE TABLE outbox_p0 PARTITION OF outbox FOR VALUES FROM (MINVALUE) TO (now() - interval '30 days');
CREATE TABLE outbox_p1 PARTITION OF outbox FOR VALUES FROM (now() - interval '30 days') TO (now() + interval '1 day');
CREATE TABLE outbox_p2 PARTITION OF outbox FOR VALUES FROM (now() + interval '1 day') TO (now() + interval '30 days');
CREATE TABLE outbox_p3 PARTITION OF outbox FOR VALUES FROM (now() + interval '30 days') TO (MAXVALUE);";

/// Creates the shape's tables, publication and two slots, loads `events` rows, and drains them
/// with pg_recvlogical, then walrelay (the ceiling's row is named [`Shape::ceiling_system`]).
pub async fn drain(ctx: &Ctx<'_>, shape: Shape, events: u64, per_txn: u64) -> (Loaded, Vec<Drain>) {
    let db: TestDb = services().pg.create_database("bench_shape").await;
    match shape {
        Shape::Partitioned => db.execute(PARTITIONED_OUTBOX).await,
        Shape::TwoTables => {
            db.create_outbox("outbox").await;
            db.create_outbox("billing.outbox").await;
        }
        Shape::Messages => {}
        Shape::Debezium
        | Shape::CloudEventsBinary
        | Shape::CloudEventsStructured
        | Shape::CloudEventsProtobuf
        | Shape::Protobuf
        | Shape::ExactlyOnce
        | Shape::JsonExpanded
        | Shape::Avro
        | Shape::AvroLatest
        | Shape::AvroApicurio
        | Shape::AvroKeys
        | Shape::ProtobufRegistry
        | Shape::JsonSchemaRegistry => db.create_outbox("outbox").await,
        Shape::Tenants(_) => {
            let mut sql = String::new();
            for table in shape.tables() {
                let schema = table.trim_end_matches(".outbox");
                sql += &format!("CREATE SCHEMA {schema}; CREATE TABLE {table} (LIKE public.outbox INCLUDING ALL);\n");
            }
            db.create_outbox("outbox").await;
            db.execute(&sql).await;
        }
        Shape::TracingOff | Shape::Tracing | Shape::TracingExport => {
            db.create_outbox("outbox").await;
            let column =
                if shape == Shape::TracingOff { "tracing_unused" } else { "tracingspancontext" };
            db.execute(&format!(
                "ALTER TABLE outbox ADD COLUMN {column} text NOT NULL DEFAULT '{SPAN_CONTEXT}'"
            ))
            .await;
        }
    }
    let publication = unique("bench_shape_pub");
    let (ceiling_slot, slot) = (unique("shape_ceil"), unique("shape"));
    let tables = match shape.tables() {
        list if list.is_empty() => String::new(),
        list => format!("FOR TABLE {}", list.join(", ")),
    };
    // Before the rows: decoding sees the publication as the catalog stood when each row was
    // written.
    db.execute(&format!(
        "CREATE PUBLICATION \"{publication}\" {tables} WITH (publish = 'insert', publish_via_partition_root = true)"
    ))
    .await;
    let c = db.connect().await;
    for name in [&ceiling_slot, &slot] {
        c.query_one("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", &[name])
            .await
            .expect("create the shape's slot");
    }
    let load = match shape {
        Shape::Messages => {
            let statement = workload::message_statement(ctx.aggregates);
            let load = workload::load_statements(&db, events, per_txn, vec![statement]).await;
            db.execute("CHECKPOINT").await;
            load
        }
        _ => {
            let tables = shape.tables();
            let tables: Vec<&str> = tables.iter().map(String::as_str).collect();
            workload::load_into(&db, events, per_txn, ctx.aggregates, &tables).await
        }
    };
    eprintln!("[bench] {}: loaded {} events in {:.1} s", shape.system(), load.events, load.seconds);
    let mut ceiling = crate::systems::ceiling(ctx, &db, &ceiling_slot, &publication, &load).await;
    ceiling.system = shape.ceiling_system();
    let mut outbox = shape.outbox_toml().to_owned();
    let mut sink = None;
    if shape == Shape::TracingExport {
        let (port, received) = crate::otlp_sink::start().await;
        outbox += &format!("\n[tracing]\notlp_endpoint = \"http://127.0.0.1:{port}\"\n");
        sink = Some(received);
    }
    let subjects_before = match shape {
        _ if shape.uses_registry() => {
            let mode = match shape {
                Shape::AvroLatest => "auto_register = false\nuse_latest_version = true",
                Shape::AvroApicurio => "id_handler = \"headers\"\nuse_id = \"globalId\"",
                _ => "auto_register = true",
            };
            outbox += &crate::converters::registry_section(mode).await;
            Some(crate::converters::subjects().await)
        }
        _ => None,
    };
    let d = walrelay_drain(ctx, &db, &slot, &publication, &load, shape.system(), &outbox).await;
    if shape == Shape::JsonExpanded || shape.uses_registry() {
        crate::converters::describe_value(shape.system(), subjects_before).await;
    }
    if let Some(received) = sink {
        let bytes = received.load(std::sync::atomic::Ordering::Relaxed);
        eprintln!("[bench] {}: the OTLP receiver got {bytes} bytes of spans", shape.system());
    }
    workload::drop_db(&db).await;
    (load, vec![ceiling, d])
}
