//! import-debezium: a registry converter's options (Confluent's Avro, Protobuf and JSON Schema
//! converters, Apicurio's AvroConverter and its framings) become `[schema_registry]`.

use super::*;

#[test]
fn import_carries_the_registry_options_of_confluents_and_apicurios_avro_converters() {
    let confluent = r#"{"database.dbname": "app", "bootstrap.servers": "k:9092",
      "value.converter": "io.confluent.connect.avro.AvroConverter",
      "value.converter.schema.registry.url": "http://sr:8081",
      "value.converter.basic.auth.user.info": "relay:Fz-s3cret-9Qx-sr",
      "value.converter.auto.register.schemas": "false",
      "value.converter.use.latest.version": "true",
      "value.converter.value.subject.name.strategy": "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy"}"#;
    let (config, imported) = import_ok(confluent, None);
    let registry = config.schema_registry.expect("[schema_registry]");
    assert_eq!(registry.urls, ["http://sr:8081"]);
    assert_eq!(registry.user.as_deref(), Some("relay"));
    assert!(registry.use_latest_version && !registry.auto_register);
    assert_eq!(registry.subject_name_strategy, crate::config::SubjectNameStrategy::TopicRecord);
    assert!(!imported.toml.contains("Fz-s3cret"), "{}", imported.toml);
    assert!(
        !imported.warnings.iter().any(|w| w.contains("take no options")),
        "carried options are not said to be unused: {:?}",
        imported.warnings
    );
    let apicurio = r#"{"database.dbname": "app", "bootstrap.servers": "k:9092",
      "value.converter": "io.apicurio.registry.utils.converter.AvroConverter",
      "value.converter.apicurio.registry.url": "http://apicurio:8080/apis/registry/v2"}"#;
    let (config, imported) = import_ok(apicurio, None);
    let registry = config.schema_registry.expect("[schema_registry]");
    assert_eq!(registry.urls, ["http://apicurio:8080/apis/ccompat/v7"]);
    assert!(!registry.auto_register, "Apicurio's converter registers only when told to");
    // Apicurio 2's serdes' defaults: the globalId in a header.
    use crate::config::{IdHandler, UseId};
    assert_eq!((registry.id_handler, registry.use_id), (IdHandler::Headers, UseId::GlobalId));
    assert!(!warned(&imported, "API version"), "{:?}", imported.warnings);
}

#[test]
fn import_frames_values_as_apicurios_converter_of_each_version_and_its_options_do() {
    use crate::config::{IdHandler, UseId};
    let with = |url: &str, extra: &str| {
        let connector = format!(
            r#"{{"database.dbname": "app", "bootstrap.servers": "k:9092",
          "value.converter": "io.apicurio.registry.utils.converter.AvroConverter",
          "value.converter.apicurio.registry.url": "{url}"{extra}}}"#
        );
        let (config, imported) = import_ok(&connector, None);
        let r = config.schema_registry.expect("[schema_registry]");
        ((r.id_handler, r.use_id), imported.warnings)
    };
    let (v2, v3) = ("http://a:8080/apis/registry/v2", "http://a:8080/apis/registry/v3");
    let confluent = (IdHandler::FourByte, UseId::ContentId);
    assert_eq!(with(v3, "").0, confluent, "Apicurio 3: the contentId in 4 bytes");
    let off = r#", "value.converter.apicurio.registry.headers.enabled": "false""#;
    assert_eq!(with(v2, off).0, (IdHandler::EightByte, UseId::GlobalId));
    // 2's as-confluent is Legacy4ByteIdHandler: 4 bytes, still the globalId unless told.
    let as_confluent =
        format!(r#"{off}, "value.converter.apicurio.registry.as-confluent": "true""#);
    assert_eq!(with(v2, &as_confluent).0, (IdHandler::FourByte, UseId::GlobalId));
    let content =
        format!(r#"{as_confluent}, "value.converter.apicurio.registry.use-id": "contentId""#);
    assert_eq!(with(v2, &content).0, confluent);
    let headers = r#", "value.converter.apicurio.registry.headers.enabled": "true""#;
    assert_eq!(with(v3, headers).0, (IdHandler::Headers, UseId::ContentId));
    let (framing, warnings) = with("http://a:8080", "");
    assert_eq!(framing, confluent);
    assert!(warnings.iter().any(|w| w.contains("id_handler = \"headers\"")), "{warnings:?}");
}

#[test]
fn import_maps_debezium_servers_avro_format_to_the_avro_converter() {
    let props = "debezium.sink.type=kafka\n\
        debezium.sink.kafka.producer.bootstrap.servers=kafka:9092\n\
        debezium.source.database.dbname=app\n\
        debezium.format.value=avro\n\
        debezium.format.value.schema.registry.url=http://sr:8081\n";
    let (config, imported) = import_ok(props, None);
    assert_eq!(config.schema_registry.expect("[schema_registry]").urls, ["http://sr:8081"]);
    assert!(imported.toml.contains("io.confluent.connect.avro.AvroConverter"), "{}", imported.toml);
    let protobuf = props.replace("format.value=avro", "format.value=protobuf");
    let (config, _) = import_ok(&protobuf, None);
    assert_eq!(config.router.registry_converter(), Some("protobuf"));
}

#[test]
fn import_carries_confluents_protobuf_and_json_schema_converters_and_says_what_it_does_not_carry() {
    for (class, converter) in [
        ("io.confluent.connect.protobuf.ProtobufConverter", "protobuf"),
        ("io.confluent.connect.json.JsonSchemaConverter", "json-schema"),
    ] {
        let connector = format!(
            r#"{{"database.dbname": "app", "bootstrap.servers": "k:9092",
          "value.converter": "{class}",
          "value.converter.schema.registry.url": "http://sr:8081",
          "value.converter.auto.register.schemas": "false",
          "value.converter.use.latest.version": "true",
          "value.converter.value.subject.name.strategy": "io.confluent.kafka.serializers.subject.RecordNameStrategy"}}"#
        );
        let (config, imported) = import_ok(&connector, None);
        let registry = config.schema_registry.expect("[schema_registry]");
        assert_eq!(registry.urls, ["http://sr:8081"]);
        assert!(!registry.auto_register);
        assert_eq!(config.router.registry_converter(), Some(converter));
        assert!(warned(&imported, "strategy is not carried"), "{class}: {:?}", imported.warnings);
        // Contract-first is carried: JSON Schema validates values against the latest schema,
        // Protobuf renumbers them by name, which Confluent's serializer does not (said).
        assert!(registry.use_latest_version);
        let renumbered = warned(&imported, "same name");
        assert_eq!(renumbered, converter == "protobuf", "{:?}", imported.warnings);
    }
}
