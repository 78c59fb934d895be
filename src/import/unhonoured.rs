//! The connector options walrelay does not carry over, each with the warning that says what
//! walrelay does instead.

use super::Builder;

impl Builder {
    /// Every option not carried over above gets a warning.
    pub(super) fn warn_unhonoured(&mut self) {
        let options = self.options.clone();
        for (key, value) in &options {
            if let Some(text) = unhonoured(key, value.trim()) {
                self.warn(text);
            }
        }
        if self.get("publication.autocreate.mode").is_none() {
            let publication = self.get("publication.name").unwrap_or("dbz_publication").to_string();
            self.warn(format!(
                "publication.autocreate.mode is not set: Debezium's default all_tables made {publication} publish every table and operation; walrelay uses it as is (it relays only the outbox INSERTs and confirms past the rest) — `walrelay check` shows what it publishes"
            ));
        }
        if self.get("plugin.name").is_none() && !self.server {
            self.warn("plugin.name is not set: Debezium's default is decoderbufs, and walrelay can only take over a pgoutput slot, so [source] slot names a new one (<slot.name>_walrelay; if the connector's slot is pgoutput after all, `walrelay check` shows it, set slot to it)");
        }
    }
}

/// The warning for a connector option walrelay does not honour; `None` for options it carries
/// over (or that change nothing for an outbox relay).
fn unhonoured(key: &str, value: &str) -> Option<String> {
    const CARRIED: &[&str] = &[
        "name",
        "tasks.max",
        "database.hostname",
        "database.port",
        "database.user",
        "database.password",
        "database.dbname",
        "database.sslmode",
        "database.sslrootcert",
        "database.sslcert",
        "database.sslkey",
        "database.sslpassword",
        "database.sslfactory",
        "database.server.name",
        "slot.name",
        "publication.name",
        "table.include.list",
        "table.whitelist",
        "schema.include.list",
        "schema.whitelist",
        "topic.prefix",
        "extended.headers.enabled",
        // Where Debezium's offsets are: [debezium_offsets].
        "offset.storage",
        "offset.storage.file.filename",
        "offset.storage.topic",
        "transforms",
        "bootstrap.servers",
        // Kafka Connect's exactly-once source support: [delivery].
        "exactly.once.support",
        "exactly.once.source.support",
        "transaction.boundary",
        // Only INSERTs of the outbox become records: these change nothing.
        "skipped.operations",
        "tombstones.on.delete",
    ];
    if CARRIED.contains(&key)
        || key.starts_with("transforms.")
        || key.starts_with("producer.")
        || ["key", "value", "header"].iter().any(|w| {
            key == format!("{w}.converter") || key == format!("{w}.converter.schemas.enable")
        })
    {
        return None;
    }
    let text = match key {
        "connector.class" if value.ends_with("PostgresConnector") => return None,
        "connector.class" => format!(
            "connector.class = {value}: walrelay replaces Debezium's PostgreSQL connector only"
        ),
        "plugin.name" if value == "pgoutput" => return None,
        "plugin.name" => format!(
            "plugin.name = {value}: walrelay streams with pgoutput, so it can't take over this connector's slot; [source] slot names a new one (<slot.name>_walrelay; events between the two slots' positions are skipped or duplicated)"
        ),
        "snapshot.mode" if value == "no_data" || value == "never" => return None,
        "snapshot.mode" => format!(
            "snapshot.mode = {value}: walrelay never snapshots — it relays rows inserted after its slot's position, never the table's existing rows (like snapshot.mode = no_data)"
        ),
        "publication.autocreate.mode" if value == "filtered" || value == "disabled" => return None,
        "publication.autocreate.mode" if value == "all_tables" => "publication.autocreate.mode = all_tables: walrelay uses the existing all-tables publication as is (it relays only the outbox INSERTs and confirms past the rest); when the publication is missing it creates one FOR TABLE <outbox> WITH (publish = 'insert') instead".to_string(),
        "publication.autocreate.mode" => format!(
            "publication.autocreate.mode = {value}: walrelay creates a missing publication FOR TABLE <outbox> WITH (publish = 'insert')"
        ),
        "slot.drop.on.stop" if value == "false" => return None,
        "slot.drop.on.stop" => "slot.drop.on.stop: walrelay never drops its slot on stop (`walrelay teardown --yes` does)".into(),
        "slot.failover" if value == "false" => return None,
        "slot.failover" => "slot.failover: walrelay creates a plain slot; create a PostgreSQL 17 failover slot yourself (pg_create_logical_replication_slot(…, failover => true)) before starting it".into(),
        "time.precision.mode" if value == "adaptive" => return None,
        "time.precision.mode" => format!(
            "time.precision.mode = {value}: walrelay converts timestamps as Debezium's default `adaptive` does"
        ),
        "provide.transaction.metadata" if value == "false" => return None,
        "provide.transaction.metadata" => "provide.transaction.metadata: walrelay writes no transaction topic or transaction block".into(),
        "status.update.interval.ms" => format!(
            "status.update.interval.ms = {value}: not copied; walrelay reports progress every [source] status_interval_ms (default 1000)"
        ),
        "lsn.flush.mode" | "flush.lsn.source" => format!(
            "{key}: walrelay confirms the slot itself, after Kafka acknowledged, and confirms idle progress from keepalives"
        ),
        _ if key.starts_with("heartbeat.") => format!(
            "{key}: walrelay writes no heartbeat topic and runs no heartbeat query; it confirms idle progress from the server's keepalives instead"
        ),
        _ if key.starts_with("tracing.") => format!("{key}: a connector-level key, which Debezium does not read either; the tracing options belong to the EventRouter transform (transforms.<name>.{key}), where walrelay carries them to [router]"),
        _ if key.starts_with("errors.") => format!(
            "{key}: walrelay has no errors.tolerance; a row it can't route stops it, or goes to the [dead_letter] topic when one is configured"
        ),
        _ if key.starts_with("signal.") || key.starts_with("incremental.snapshot") || key.starts_with("snapshot.") => {
            format!("{key}: walrelay has no snapshots or signals")
        }
        _ if key.starts_with("topic.creation.") => format!(
            "{key}: walrelay creates no topics; create them beforehand (or let the broker auto-create them)"
        ),
        // An Avro value converter's registry options: carried to [schema_registry]
        // (`Import::convert_registry`), which warns about what it cannot carry.
        _ if key.strip_prefix("value.converter.").is_some_and(|k| REGISTRY_OPTIONS.contains(&k)) => {
            return None
        }
        _ if key.contains(".converter.") => format!(
            "{key}: walrelay's converters take no options beyond schemas.enable"
        ),
        "message.prefix.include.list" | "message.prefix.exclude.list" => return None,
        "publish.via.partition.root" => "publish.via.partition.root: create the publication yourself WITH (publish_via_partition_root = true) for a partitioned outbox".into(),
        _ => format!("{key} is not used by walrelay (no equivalent)"),
    };
    Some(text)
}

/// The `value.converter.*` options `import-debezium` reads into `[schema_registry]`.
pub(super) const REGISTRY_OPTIONS: &[&str] = &[
    "schema.registry.url",
    "basic.auth.user.info",
    "basic.auth.credentials.source",
    "auto.register.schemas",
    "use.latest.version",
    "value.subject.name.strategy",
    "apicurio.registry.url",
    "apicurio.registry.auto-register",
    "apicurio.registry.as-confluent",
    "apicurio.registry.headers.enabled",
    "apicurio.registry.id-handler",
    "apicurio.registry.use-id",
];

/// Where a Java producer property has a librdkafka counterpart under another name.
pub(super) fn java_producer_hint(key: &str) -> Option<&'static str> {
    Some(match key {
        "max.request.size" => "librdkafka's counterpart is message.max.bytes",
        "buffer.memory" => "librdkafka's counterpart is queue.buffering.max.kbytes",
        "sasl.jaas.config" => "set sasl.username and sasl.password instead",
        k if k.starts_with("ssl.truststore.") => "set ssl.ca.location (a PEM file) instead",
        "key.serializer" | "value.serializer" => "walrelay writes the converters' bytes itself",
        "partitioner.class" => "walrelay always uses murmur2_random, the Java client's partitioner",
        "max.block.ms" | "interceptor.classes" | "client.dns.lookup" => "no librdkafka counterpart",
        _ => return None,
    })
}
