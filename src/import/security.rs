//! What protects the connector's connections, carried into walrelay.toml: PostgreSQL's
//! `database.ssl*` options into the URL, Kafka's `security.protocol`, `ssl.*` and a JAAS line
//! into `[kafka]`.
//!
//! A generated file that quietly talks plaintext where the connector used TLS, or skips the
//! server's certificate check, is worse than no file: what can't be carried here is an error
//! (`import-debezium` exits non-zero), never a warning.

use std::collections::BTreeMap;

/// `[kafka]` properties that protect the broker connection: refused ones are errors.
pub fn is_protective(key: &str) -> bool {
    key == "security.protocol" || key.starts_with("ssl.") || key.starts_with("sasl.")
}

/// The libpq URL parameters for the connector's `database.sslmode` and `sslrootcert`, or what
/// can't be carried (client certificates, an encrypted key, a custom factory).
pub fn postgres_tls(options: &BTreeMap<String, String>) -> Result<Vec<(String, String)>, String> {
    let get = |k: &str| options.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    let mut params = Vec::new();
    if let Some(mode) = get("database.sslmode") {
        match mode {
            "disable" | "allow" | "prefer" | "require" | "verify-ca" | "verify-full" => {
                // walrelay has no `allow` (plaintext first, TLS if refused): `prefer` tries TLS
                // first, which protects at least as much.
                let mode = if mode == "allow" { "prefer" } else { mode };
                params.push(("sslmode".to_string(), mode.to_string()));
            }
            other => return Err(format!("database.sslmode = {other} is not a libpq sslmode")),
        }
    }
    if let Some(path) = get("database.sslrootcert") {
        params.push(("sslrootcert".to_string(), path.to_string()));
    }
    for key in ["database.sslcert", "database.sslkey"] {
        if get(key).is_some() {
            return Err(format!("{key} (a client certificate) can't be carried: walrelay does not authenticate to PostgreSQL with client certificates; use password authentication over sslmode=verify-full"));
        }
    }
    if get("database.sslpassword").is_some() {
        return Err("database.sslpassword (an encrypted client key) can't be carried: walrelay reads unencrypted PEM keys; decrypt the key (openssl pkey) and point database.sslkey at it".into());
    }
    if let Some(factory) = get("database.sslfactory") {
        return Err(format!("database.sslfactory = {factory} can't be carried: set database.sslmode, sslrootcert, sslcert and sslkey instead"));
    }
    Ok(params)
}

/// What a JAAS line (`sasl.jaas.config`) becomes in `[kafka]`.
pub struct Jaas {
    pub username: String,
    /// The mechanism the login module implies, when the config does not name one.
    pub mechanism: Option<&'static str>,
}

/// Reads a `PlainLoginModule` or `ScramLoginModule` line: `username` becomes
/// `sasl.username`; the password is left out (it is a secret). Other login modules (Kerberos,
/// OAuth) have no librdkafka counterpart this can write.
pub fn jaas(line: &str) -> Result<Jaas, String> {
    let module = line.split_whitespace().next().unwrap_or("");
    let mechanism = if module.ends_with(".PlainLoginModule") {
        Some("PLAIN")
    } else if module.ends_with(".ScramLoginModule") {
        None
    } else {
        let shown = module.rsplit('.').next().unwrap_or(module);
        return Err(format!("sasl.jaas.config uses {shown}, which walrelay can't carry (PlainLoginModule and ScramLoginModule only); set librdkafka's sasl.* properties in [kafka] by hand"));
    };
    let username = jaas_option(line, "username")
        .ok_or("sasl.jaas.config has no username=\"…\"; set sasl.username in [kafka] by hand")?;
    Ok(Jaas { username, mechanism })
}

/// Replaces `sasl.jaas.config` in `props` with what it carries: `sasl.username`,
/// `sasl.mechanism` when the config does not name one, and an empty `sasl.password` that the
/// secrets rule then names with its variable (`WALRELAY_KAFKA_SASL__PASSWORD`). What can't be
/// carried goes to `refused`.
pub fn carry_jaas(props: &mut BTreeMap<String, String>, refused: &mut Vec<String>) {
    let Some(line) = props.remove("sasl.jaas.config") else { return };
    match jaas(&line) {
        Ok(j) => {
            props.insert("sasl.username".into(), j.username);
            match (j.mechanism, props.contains_key("sasl.mechanism")) {
                (_, true) => {}
                (Some(m), false) => {
                    props.insert("sasl.mechanism".into(), m.into());
                }
                (None, false) => refused.push("sasl.jaas.config uses ScramLoginModule but sasl.mechanism is not set: name SCRAM-SHA-256 or SCRAM-SHA-512".into()),
            }
            props.insert("sasl.password".into(), String::new());
        }
        Err(e) => refused.push(e),
    }
}

/// The value of `name="value"` in a JAAS line.
fn jaas_option(line: &str, name: &str) -> Option<String> {
    let mut rest = line;
    while let Some(at) = rest.find(name) {
        let before = rest[..at].chars().last();
        let after = rest[at + name.len()..].trim_start();
        rest = &rest[at + name.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let Some(value) = after.strip_prefix('=') else { continue };
        let value = value.trim_start();
        let quoted = value.strip_prefix('"')?;
        return quoted.find('"').map(|end| quoted[..end].to_string());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_jaas_line_gives_its_username_and_plain() {
        let j = jaas(r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="pw";"#).unwrap();
        assert_eq!((j.username.as_str(), j.mechanism), ("alice", Some("PLAIN")));
        let j = jaas(r#"org.apache.kafka.common.security.scram.ScramLoginModule required password="pw" username = "bob";"#).unwrap();
        assert_eq!((j.username.as_str(), j.mechanism), ("bob", None));
        let e = jaas("com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;")
            .err()
            .unwrap();
        assert!(e.contains("Krb5LoginModule"), "{e}");
    }

    #[test]
    fn postgres_tls_options_become_url_parameters() {
        let options: BTreeMap<String, String> =
            [("database.sslmode", "verify-full"), ("database.sslrootcert", "/etc/ca.pem")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let params = postgres_tls(&options).unwrap();
        assert_eq!(
            params,
            [("sslmode", "verify-full"), ("sslrootcert", "/etc/ca.pem")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
        );
        let mut with_key = options.clone();
        with_key.insert("database.sslkey".into(), "/etc/k.pem".into());
        assert!(postgres_tls(&with_key).unwrap_err().contains("client certificate"));
    }
}
