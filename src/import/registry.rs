//! A registry value converter's options (Avro's, Confluent's Protobuf and JSON Schema), carried
//! to `[schema_registry]`.

use super::{Builder, JSON_SCHEMA_CONVERTER, PROTOBUF_CONVERTER};

impl Builder {
    /// An Avro value converter's registry: Confluent's `schema.registry.url`, or Apicurio's
    /// `apicurio.registry.url` with its Confluent-compatible API; the user of
    /// `basic.auth.user.info` (its password is a secret, not copied).
    pub(super) fn convert_registry(&mut self) {
        let avro = self.get("value.converter").is_some_and(|c| c.ends_with(".AvroConverter"));
        // What walrelay names subjects for only by the topic.
        let topic_subjects_only = match self.get("value.converter") {
            Some(PROTOBUF_CONVERTER) => Some("Protobuf"),
            Some(JSON_SCHEMA_CONVERTER) => Some("JSON Schema"),
            _ => None,
        };
        // Registry keys (`key.converter`) share the section; the value converter's options first.
        let registry_keys = self
            .get("key.converter")
            .is_some_and(|c| c.ends_with(".AvroConverter") || c == PROTOBUF_CONVERTER);
        if !avro && !registry_keys && topic_subjects_only.is_none() {
            return;
        }
        let get = |k: &str| {
            let value = self.get(&format!("value.converter.{k}"));
            value.or_else(|| self.get(&format!("key.converter.{k}"))).map(str::to_string)
        };
        let apicurio = self.get("value.converter").is_some_and(|c| c.starts_with("io.apicurio."));
        // Apicurio's converter registers only when told to; Confluent's unless told not to.
        let auto = match apicurio {
            true => Some(get("apicurio.registry.auto-register").unwrap_or_else(|| "false".into())),
            false => get("auto.register.schemas"),
        };
        let info = get("basic.auth.user.info");
        let latest = get("use.latest.version");
        let as_confluent = get("apicurio.registry.as-confluent").is_some_and(|v| v == "true");
        let source = get("basic.auth.credentials.source");
        let mut strategy = get("value.subject.name.strategy");
        let url = get("schema.registry.url").or_else(|| {
            get("apicurio.registry.url").map(|u| {
                let base = u.trim_end_matches('/');
                let base = base
                    .trim_end_matches("/apis/registry/v2")
                    .trim_end_matches("/apis/registry/v3");
                format!("{base}/apis/ccompat/v7")
            })
        });
        match url {
            Some(url) => {
                self.schema_registry.insert("url".into(), url);
            }
            None => {
                self.schema_registry.insert("url".into(), "http://schema-registry:8081".into());
                self.warn("value.converter is a registry converter without value.converter.schema.registry.url: [schema_registry] url is a placeholder, http://schema-registry:8081 — set it to the registry's Confluent-compatible API");
            }
        }
        if let Some(info) = info {
            let user = info.split_once(':').map_or(info.as_str(), |(u, _)| u).to_string();
            self.schema_registry.insert("user".into(), user);
            self.warn("value.converter.basic.auth.user.info's password is a secret and is not copied: set WALRELAY_SCHEMA_REGISTRY_PASSWORD in walrelay's environment");
        }
        if let Some(auto) = auto {
            self.schema_registry.insert("auto_register".into(), auto);
        }
        // Protobuf's contract-first is carried, and differs: Confluent's 7.0 serializer writes
        // the derived numbering under the latest id, walrelay each field under the contract's
        // field of the same name.
        let renumbered = topic_subjects_only == Some("Protobuf");
        if renumbered && latest.as_deref() == Some("true") {
            self.warn("value.converter.use.latest.version = true with Protobuf: walrelay writes each field under the number of the contract's field of the same name, where Confluent's serializer keeps the numbers it derives — a contract whose field names differ from the payload's refuses those rows: check the subject's .proto names the payload's fields");
        }
        let other_strategy =
            strategy.as_deref().is_some_and(|s| !s.ends_with("TopicNameStrategy") && s != "topic");
        if let Some(what) = topic_subjects_only.filter(|_| other_strategy) {
            strategy = None;
            self.warn(format!("value.converter.value.subject.name.strategy is not carried: with {what} walrelay names the subject after the topic (<topic>-value) only"));
        }
        if let Some(latest) = latest {
            self.schema_registry.insert("use_latest_version".into(), latest);
        }
        if let Some(strategy) = strategy {
            self.schema_registry.insert("subject_name_strategy".into(), strategy);
        }
        if apicurio {
            self.convert_apicurio_framing(as_confluent);
        }
        if source.is_some_and(|s| s != "USER_INFO") {
            self.warn("value.converter.basic.auth.credentials.source is not USER_INFO: walrelay authenticates to the registry with HTTP basic auth only ([schema_registry] user, WALRELAY_SCHEMA_REGISTRY_PASSWORD)");
        }
    }

    /// Where Apicurio's AvroConverter puts the schema id, by its own rules: its serdes' defaults
    /// differ by major version (2: the globalId in a header, `DefaultIdHandler`'s 8 bytes when
    /// headers are off; 3: the contentId in 4 bytes), told apart by the API version of
    /// `apicurio.registry.url`; `headers.enabled`, `id-handler`, `as-confluent` (2's
    /// `Legacy4ByteIdHandler`) and `use-id` override them, as in its `AbstractKafkaSerDe`.
    fn convert_apicurio_framing(&mut self, as_confluent: bool) {
        let get = |k: &str| self.get(&format!("value.converter.apicurio.registry.{k}"));
        let url = get("url").unwrap_or_default().trim_end_matches('/');
        let major = match () {
            _ if url.ends_with("/apis/registry/v2") => Some(2),
            _ if url.ends_with("/apis/registry/v3") => Some(3),
            _ => None,
        };
        let headers = get("headers.enabled").map(|v| v == "true");
        let handler = match (as_confluent, get("id-handler")) {
            (true, _) => Some("4-byte".to_string()),
            (false, h) => h.map(str::to_string),
        };
        let use_id = get("use-id").map(str::to_string);
        let (headers, handler, use_id) = match major {
            Some(2) => (
                headers.unwrap_or(true),
                handler.unwrap_or_else(|| "8-byte".into()),
                use_id.unwrap_or_else(|| "globalId".into()),
            ),
            _ => (
                headers.unwrap_or(false),
                handler.unwrap_or_else(|| "4-byte".into()),
                use_id.unwrap_or_else(|| "contentId".into()),
            ),
        };
        let id_handler = if headers { "headers".to_string() } else { handler };
        let confluent = matches!(
            id_handler.rsplit('.').next(),
            Some("4-byte" | "Default4ByteIdHandler" | "Legacy4ByteIdHandler")
        ) && use_id == "contentId";
        if major.is_none() && !confluent {
            self.warn(format!("value.converter is Apicurio's AvroConverter and apicurio.registry.url names no API version (…/apis/registry/v2 or v3): its framing is taken from the options set (id_handler = \"{id_handler}\", use_id = \"{use_id}\"), with Apicurio 3's defaults beside them — check them against the consumers' deserializers"));
        } else if major.is_none() {
            self.warn("value.converter is Apicurio's AvroConverter and apicurio.registry.url names no API version (…/apis/registry/v2 or v3): walrelay frames values as Apicurio 3's serdes do by default (the contentId in 4 bytes); an Apicurio 2 converter put the globalId in a header unless told otherwise — set [schema_registry] id_handler = \"headers\" then");
        }
        if !confluent {
            self.schema_registry.insert("id_handler".into(), id_handler);
            self.schema_registry.insert("use_id".into(), use_id);
        }
    }
}
