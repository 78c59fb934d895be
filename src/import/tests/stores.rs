//! import-debezium: Java truststores and keystores become librdkafka's PEM and PKCS#12
//! properties, or a placeholder the loader refuses until it is filled in.

use super::*;

/// A self-signed test CA (EC P-256, valid for a century), its PEM body by lines.
const TEST_CA_BODY: [&str; 9] = [
    "MIIBjTCCATOgAwIBAgIUIH3VkWD58KGLEI0ZonYxNK6UBUswCgYIKoZIzj0EAwIw",
    "GzEZMBcGA1UEAwwQd2FscmVsYXkgdGVzdCBDQTAgFw0yNjEyMDUxNDMyNTBaGA8y",
    "MTI2MTExMTE0MzI1MFowGzEZMBcGA1UEAwwQd2FscmVsYXkgdGVzdCBDQTBZMBMG",
    "ByqGSM49AgEGCCqGSM49AwEHA0IABGz6tPwK/qhZy9HA+8T4a0gPlXHt5kwqBKJq",
    "t6qjnirUxnYsrhvXT2TYZNlAM1dlVWs21ArJ+kWTAChzIMI5UJ6jUzBRMB0GA1Ud",
    "DgQWBBT7/xR68gKXYtUoF8w0roxMP3hT4TAfBgNVHSMEGDAWgBT7/xR68gKXYtUo",
    "F8w0roxMP3hT4TAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0gAMEUCIBKt",
    "i+Hj2Uo7V+0+CuzfmLFNHy/QiF8X5wv0ODRvpxV1AiEArbzOS25OpD2cF6hfB42X",
    "ID7G6DefIpjfg39VZ1lj28U=",
];

fn test_ca_pem() -> String {
    format!("-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n", TEST_CA_BODY.join("\n"))
}

/// Whether librdkafka builds a TLS client from these `[kafka]` properties: it reads the CA
/// when the client is created, before any connection.
fn librdkafka_reads_the_ca(properties: &BTreeMap<String, String>) -> Result<(), String> {
    let mut cfg = ClientConfig::new();
    for (k, v) in properties {
        cfg.set(k, v);
    }
    cfg.set("bootstrap.servers", "127.0.0.1:1");
    cfg.create::<rdkafka::producer::BaseProducer>().map(drop).map_err(|e| e.to_string())
}

fn everything_printed(imported: &Imported) -> String {
    format!("{}\n{}", imported.toml, imported.warnings.join("\n"))
}

#[test]
fn import_maps_a_pem_truststore_file_to_ssl_ca_location() {
    let text = connector_with(
        r#""producer.override.security.protocol": "SSL",
        "producer.override.ssl.truststore.type": "PEM",
        "producer.override.ssl.truststore.location": "/etc/kafka/ca.pem""#,
    );
    let (config, imported) = import_ok(&text, Some(Format::Json));
    assert_eq!(
        config.kafka.properties["ssl.ca.location"], "/etc/kafka/ca.pem",
        "{}",
        imported.toml
    );
    assert!(!imported.toml.contains("truststore"), "{}", imported.toml);
    assert!(!warned(&imported, "truststore"), "{:?}", imported.warnings);

    // Debezium Server's producer properties, and a `.pem` file without a type.
    let server = "debezium.sink.type=kafka\n\
        debezium.sink.kafka.producer.bootstrap.servers=kafka:9093\n\
        debezium.sink.kafka.producer.security.protocol=SSL\n\
        debezium.sink.kafka.producer.ssl.truststore.location=/etc/kafka/ca.pem\n\
        debezium.source.connector.class=io.debezium.connector.postgresql.PostgresConnector\n\
        debezium.source.database.dbname=app\n\
        debezium.source.topic.prefix=app\n";
    let (config, imported) = import_ok(server, Some(Format::Properties));
    assert_eq!(
        config.kafka.properties["ssl.ca.location"], "/etc/kafka/ca.pem",
        "{}",
        imported.toml
    );
    assert!(!imported.toml.contains("truststore"), "{}", imported.toml);
}

#[test]
fn import_maps_inline_pem_certificates_to_an_ssl_ca_pem_librdkafka_reads() {
    // As Java reads it: one line, the PEM's line breaks lost to the properties' continuations.
    let one_line =
        format!("-----BEGIN CERTIFICATE----- {} -----END CERTIFICATE-----", TEST_CA_BODY.join(""));
    let props = format!(
        "name=outbox\nconnector.class=io.debezium.connector.postgresql.PostgresConnector\n\
        database.dbname=app\ntopic.prefix=app\nplugin.name=pgoutput\n\
        producer.override.bootstrap.servers=kafka:9093\n\
        producer.override.security.protocol=SSL\n\
        producer.override.ssl.truststore.type=PEM\n\
        producer.override.ssl.truststore.certificates={one_line}\n"
    );
    let (config, imported) = import_ok(&props, Some(Format::Properties));
    assert_eq!(config.kafka.properties["ssl.ca.pem"], test_ca_pem(), "{}", imported.toml);
    assert!(!imported.toml.contains("truststore"), "{}", imported.toml);
    librdkafka_reads_the_ca(&config.kafka.properties).unwrap();
    // What the import fixed: OpenSSL does not read the line Java does.
    let mut as_given = config.kafka.properties.clone();
    as_given.insert("ssl.ca.pem".into(), one_line);
    assert!(librdkafka_reads_the_ca(&as_given).is_err());

    let e = import(
        &props.replace(&TEST_CA_BODY[0][..20], "not base64 at all!"),
        Some(Format::Properties),
        "c.properties",
    )
    .unwrap_err();
    assert!(e.contains("ssl.truststore.certificates") && e.contains("ssl.ca.location"), "{e}");
}

/// A JKS truststore: the file gets a placeholder the loader refuses, the warning the command
/// that exports the CA; the password is printed nowhere.
#[test]
fn import_writes_a_placeholder_for_a_jks_truststore_with_the_keytool_command() {
    for typed in [r#""producer.override.ssl.truststore.type": "JKS","#, ""] {
        let text = connector_with(&format!(
            r#""producer.override.security.protocol": "SSL", {typed}
            "producer.override.ssl.truststore.location": "/etc/kafka/truststore.jks",
            "producer.override.ssl.truststore.password": "trust-pw-4711""#
        ));
        let imported = import(&text, Some(Format::Json), "c.json").unwrap();
        let printed = everything_printed(&imported);
        assert!(!printed.contains("trust-pw-4711"), "{printed}");
        assert!(!printed.contains("TRUSTSTORE__PASSWORD"), "not needed for PEM: {printed}");
        assert!(
            imported.toml.contains(
                "\"ssl.ca.location\" = \"FILL-IN: the CA certificates of /etc/kafka/truststore.jks as a PEM file\""
            ),
            "{}",
            imported.toml
        );
        assert!(
            warned(
                &imported,
                "keytool -exportcert -rfc -keystore /etc/kafka/truststore.jks -alias <alias> -file ca.pem"
            ),
            "{:?}",
            imported.warnings
        );
        assert!(
            warned(&imported, "ssl.truststore.password is not copied"),
            "{:?}",
            imported.warnings
        );
        assert_placeholder_refused_until_filled(&imported.toml, "ssl.ca.location");
    }
}

#[test]
fn import_writes_a_placeholder_for_a_pkcs12_truststore_with_the_openssl_command() {
    for (typed, path) in [
        (r#""producer.override.ssl.truststore.type": "PKCS12","#, "/etc/kafka/truststore.ks"),
        ("", "/etc/kafka/truststore.p12"),
    ] {
        let text = connector_with(&format!(
            r#""producer.override.security.protocol": "SASL_SSL", {typed}
            "producer.override.ssl.truststore.location": "{path}",
            "producer.override.ssl.truststore.password": "trust-pw-4711""#
        ));
        let imported = import(&text, Some(Format::Json), "c.json").unwrap();
        assert!(!everything_printed(&imported).contains("trust-pw-4711"));
        assert!(
            imported.toml.contains(&format!(
                "\"ssl.ca.location\" = \"FILL-IN: the CA certificates of {path} as a PEM file\""
            )),
            "{}",
            imported.toml
        );
        assert!(
            warned(&imported, &format!("openssl pkcs12 -in {path} -nokeys -out ca.pem")),
            "{:?}",
            imported.warnings
        );
        assert_placeholder_refused_until_filled(&imported.toml, "ssl.ca.location");
    }
}

/// The loader refuses the generated file, naming the key and the placeholder; filled in, it
/// loads.
fn assert_placeholder_refused_until_filled(toml: &str, key: &str) {
    let e = Config::parse(toml).unwrap_err().to_string();
    assert!(e.contains(key) && e.contains("FILL-IN") && e.contains("placeholder"), "{e}");
    let filled: String = toml
        .lines()
        .map(|l| {
            if l.starts_with(&format!("\"{key}\" = \"FILL-IN")) {
                format!("\"{key}\" = \"/etc/kafka/exported\"\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let config = Config::parse(&filled).unwrap_or_else(|e| panic!("{e}\n{filled}"));
    assert_eq!(config.kafka.properties[key], "/etc/kafka/exported");
}

#[test]
fn import_refuses_a_truststore_type_librdkafka_has_no_counterpart_for() {
    let text = connector_with(
        r#""producer.override.ssl.truststore.type": "BCFKS",
        "producer.override.ssl.truststore.location": "/etc/kafka/truststore.bcfks""#,
    );
    let e = import(&text, Some(Format::Json), "c.json").unwrap_err();
    assert!(e.contains("ssl.truststore.type = BCFKS") && e.contains("ssl.ca.location"), "{e}");
}

#[test]
fn import_carries_pem_and_pkcs12_keystores_and_marks_a_jks_one() {
    // PKCS#12: librdkafka reads it by the same name; the password comes from the environment.
    let text = connector_with(
        r#""producer.override.security.protocol": "SSL",
        "producer.override.ssl.keystore.type": "PKCS12",
        "producer.override.ssl.keystore.location": "/etc/kafka/client.p12",
        "producer.override.ssl.keystore.password": "store-pw-4711""#,
    );
    let (config, imported) = import_ok(&text, Some(Format::Json));
    assert_eq!(config.kafka.properties["ssl.keystore.location"], "/etc/kafka/client.p12");
    assert!(!config.kafka.properties.contains_key("ssl.keystore.type"));
    assert!(imported.toml.contains("WALRELAY_KAFKA_SSL__KEYSTORE__PASSWORD"), "{}", imported.toml);
    assert!(!everything_printed(&imported).contains("store-pw-4711"));

    // A PEM keystore file holds the certificate chain and the key.
    let text = connector_with(
        r#""producer.override.security.protocol": "SSL",
        "producer.override.ssl.keystore.type": "PEM",
        "producer.override.ssl.keystore.location": "/etc/kafka/client.pem",
        "producer.override.ssl.key.password": "key-pw-4711""#,
    );
    let (config, imported) = import_ok(&text, Some(Format::Json));
    assert_eq!(config.kafka.properties["ssl.certificate.location"], "/etc/kafka/client.pem");
    assert_eq!(config.kafka.properties["ssl.key.location"], "/etc/kafka/client.pem");
    assert!(!config.kafka.properties.keys().any(|k| k.starts_with("ssl.keystore.")));
    assert!(imported.toml.contains("WALRELAY_KAFKA_SSL__KEY__PASSWORD"), "{}", imported.toml);
    assert!(!everything_printed(&imported).contains("key-pw-4711"));

    // JKS (Java's default type): a placeholder for its PKCS#12 copy, and the command.
    let text = connector_with(
        r#""producer.override.security.protocol": "SSL",
        "producer.override.ssl.keystore.location": "/etc/kafka/client.jks",
        "producer.override.ssl.keystore.password": "store-pw-4711""#,
    );
    let imported = import(&text, Some(Format::Json), "c.json").unwrap();
    assert!(!everything_printed(&imported).contains("store-pw-4711"));
    assert!(
        imported.toml.contains(
            "\"ssl.keystore.location\" = \"FILL-IN: a PKCS#12 copy of /etc/kafka/client.jks\""
        ),
        "{}",
        imported.toml
    );
    assert!(
        warned(&imported, "keytool -importkeystore -srckeystore /etc/kafka/client.jks -destkeystore client.p12 -deststoretype PKCS12"),
        "{:?}",
        imported.warnings
    );
    assert_placeholder_refused_until_filled(&imported.toml, "ssl.keystore.location");
}

#[test]
fn import_maps_an_inline_pem_keystore_and_never_prints_its_key() {
    let one_line =
        format!("-----BEGIN CERTIFICATE----- {} -----END CERTIFICATE-----", TEST_CA_BODY.join(""));
    let text = connector_with(&format!(
        r#""producer.override.security.protocol": "SSL",
        "producer.override.ssl.keystore.type": "PEM",
        "producer.override.ssl.keystore.certificate.chain": "{one_line}",
        "producer.override.ssl.keystore.key": "-----BEGIN PRIVATE KEY----- c2VjcmV0LWtleS00NzEx -----END PRIVATE KEY-----""#
    ));
    let (config, imported) = import_ok(&text, Some(Format::Json));
    assert_eq!(config.kafka.properties["ssl.certificate.pem"], test_ca_pem());
    assert!(!config.kafka.properties.contains_key("ssl.key.pem"));
    assert!(imported.toml.contains("WALRELAY_KAFKA_SSL__KEY__PEM"), "{}", imported.toml);
    assert!(warned(&imported, "ssl.keystore.key"), "{:?}", imported.warnings);
    assert!(!everything_printed(&imported).contains("c2VjcmV0LWtleS00NzEx"));
}
