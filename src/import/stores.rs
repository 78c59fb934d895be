//! The Java client's truststores and keystores (`ssl.truststore.*`, `ssl.keystore.*`) in
//! librdkafka's terms: PEM for the CA certificates (`ssl.ca.location`, `ssl.ca.pem`), PEM or
//! PKCS#12 for the client certificate (`ssl.certificate.*` and `ssl.key.*`,
//! `ssl.keystore.location`).
//!
//! A store librdkafka can't read (a JKS or PKCS#12 truststore, a JKS keystore) is not refused:
//! the file gets a [`FILL_IN`] placeholder where the converted file's path belongs, which the
//! loader refuses until it is replaced, and a warning with the command that converts the store.
//! Leaving the property out instead would let librdkafka fall back to the system's CAs, or to no
//! client certificate, and the file would protect the connection differently than the connector.

use std::collections::BTreeMap;
use std::path::Path;

use super::{kafka_env_variable, Builder};
use crate::config::FILL_IN;

/// A store's format, as the Java client reads `ssl.truststore.type` and `ssl.keystore.type`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum StoreType {
    Pem,
    Jks,
    Pkcs12,
    Other(String),
}

/// The configured type, else the one the file's name implies. Java's default is JKS, whose
/// loader reads PKCS#12 files too, so a `.p12` file without a type is PKCS#12. A `.pem` file
/// without a type could not have been read by the connector (Java takes it for JKS), but what
/// it holds is plain: it is taken for PEM.
fn store_type(configured: Option<&str>, location: Option<&str>) -> StoreType {
    if let Some(t) = configured {
        return match t.to_ascii_uppercase().as_str() {
            "PEM" => StoreType::Pem,
            "JKS" => StoreType::Jks,
            "PKCS12" => StoreType::Pkcs12,
            _ => StoreType::Other(t.to_string()),
        };
    }
    let extension = location
        .and_then(|l| Path::new(l).extension())
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    match extension.as_deref() {
        Some("p12" | "pfx") => StoreType::Pkcs12,
        Some("pem" | "crt" | "cer") => StoreType::Pem,
        _ => StoreType::Jks,
    }
}

/// Removes `key` from `props`, returning its value unless it is blank.
fn take(props: &mut BTreeMap<String, String>, key: &str) -> Option<String> {
    props.remove(key).map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

impl Builder {
    /// Replaces the `ssl.truststore.*` and `ssl.keystore.*` properties in `props` with
    /// librdkafka's. What can't be carried goes to `refused`; secrets stay in `props` by
    /// librdkafka's names, for the secrets rule to name the variable that supplies each.
    pub(super) fn carry_stores(&mut self, props: &mut BTreeMap<String, String>) {
        self.carry_truststore(props);
        self.carry_keystore(props);
    }

    fn carry_truststore(&mut self, props: &mut BTreeMap<String, String>) {
        let configured = take(props, "ssl.truststore.type");
        let location = take(props, "ssl.truststore.location");
        let certificates = take(props, "ssl.truststore.certificates");
        // Only a JKS or PKCS#12 file has a password, and the command that exports its CA asks
        // for it: it is needed nowhere in walrelay's configuration.
        if take(props, "ssl.truststore.password").is_some() {
            self.warn("[kafka] ssl.truststore.password is not copied: librdkafka reads the CA certificates as PEM, which has no password");
        }
        if location.is_none() && certificates.is_none() {
            if let Some(t) = configured {
                self.warn(format!("[kafka] ssl.truststore.type = {t} without ssl.truststore.location: the connector trusted the JVM's default CAs; walrelay trusts the system's (librdkafka's default)"));
            }
            return;
        }
        if let Some(set) =
            ["ssl.ca.location", "ssl.ca.pem"].into_iter().find(|k| props.contains_key(*k))
        {
            self.warn(format!("[kafka] ssl.truststore.* left out: {set} is set too, and it is what librdkafka reads"));
            return;
        }
        match (location, certificates) {
            (Some(_), Some(_)) => self.refused.push("ssl.truststore.location and ssl.truststore.certificates are both set (the Java client refuses that too): keep one".into()),
            // The certificates are public, and librdkafka reads them from ssl.ca.pem: they stay
            // in the file as the connector had them, with no second file to install.
            (None, Some(text)) => match pem_blocks(&text, "CERTIFICATE") {
                Ok(pem) => {
                    props.insert("ssl.ca.pem".into(), pem);
                }
                Err(e) => self.refused.push(format!("ssl.truststore.certificates: {e}; put the CA certificates in a PEM file and set ssl.ca.location to its path")),
            },
            (Some(path), None) => match store_type(configured.as_deref(), Some(&path)) {
                StoreType::Pem => {
                    props.insert("ssl.ca.location".into(), path);
                }
                StoreType::Jks => {
                    let command = format!("`keytool -list -keystore {path}` lists its aliases, `keytool -exportcert -rfc -keystore {path} -alias <alias> -file ca.pem` exports one; several CAs go into one file, one after the other");
                    self.truststore_placeholder(props, &path, "JKS", &command);
                }
                StoreType::Pkcs12 => {
                    let command = format!("`openssl pkcs12 -in {path} -nokeys -out ca.pem`");
                    self.truststore_placeholder(props, &path, "PKCS#12", &command);
                }
                StoreType::Other(t) => self.refused.push(format!("ssl.truststore.type = {t} can't be carried: librdkafka reads CA certificates as PEM only; export them as PEM and set ssl.ca.location to the file's path")),
            },
            // Returned above.
            (None, None) => {}
        }
    }

    fn truststore_placeholder(
        &mut self,
        props: &mut BTreeMap<String, String>,
        path: &str,
        format: &str,
        command: &str,
    ) {
        props.insert(
            "ssl.ca.location".into(),
            format!("{FILL_IN} the CA certificates of {path} as a PEM file"),
        );
        self.dropped.entry("kafka").or_default().push(format!(
            "ssl.ca.location: fill in the PEM file of the CA certificates in {path}: {command}"
        ));
        self.warn(format!("[kafka] ssl.truststore.location = {path} is a {format} truststore, which librdkafka can't read: export its CA certificates as PEM — {command} — and set [kafka] \"ssl.ca.location\" to that file's path, in place of the FILL-IN placeholder, which walrelay refuses to start with"));
    }

    fn carry_keystore(&mut self, props: &mut BTreeMap<String, String>) {
        let configured = take(props, "ssl.keystore.type");
        let chain = take(props, "ssl.keystore.certificate.chain");
        let key = take(props, "ssl.keystore.key");
        let location = props
            .get("ssl.keystore.location")
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty());
        if chain.is_some() || key.is_some() {
            if location.is_some() {
                self.refused.push("ssl.keystore.location and ssl.keystore.certificate.chain/ssl.keystore.key are both set (the Java client refuses that too): keep one".into());
                return;
            }
            self.carry_inline_keystore(props, chain, key.is_some());
            return;
        }
        // A type alone names no certificate: there is nothing to carry.
        let Some(path) = location else { return };
        match store_type(configured.as_deref(), Some(&path)) {
            // librdkafka reads PKCS#12 by the Java client's names, and needs the password
            // (empty here, the secrets rule names its variable).
            StoreType::Pkcs12 => {
                props.entry("ssl.keystore.password".into()).or_default();
            }
            // One PEM file holds the chain and the key: librdkafka reads each from it. The key's
            // password is ssl.key.password for both clients; a PEM keystore has no other.
            StoreType::Pem => {
                props.remove("ssl.keystore.location");
                props.remove("ssl.keystore.password");
                props.insert("ssl.certificate.location".into(), path.clone());
                props.insert("ssl.key.location".into(), path);
            }
            StoreType::Jks => {
                let stem = Path::new(&path)
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "keystore".into());
                let command = format!("`keytool -importkeystore -srckeystore {path} -destkeystore {stem}.p12 -deststoretype PKCS12`; if `keytool -list -keystore {path}` says `Keystore type: PKCS12`, it is one already");
                props.insert(
                    "ssl.keystore.location".into(),
                    format!("{FILL_IN} a PKCS#12 copy of {path}"),
                );
                props.entry("ssl.keystore.password".into()).or_default();
                self.dropped.entry("kafka").or_default().push(format!(
                    "ssl.keystore.location: fill in a PKCS#12 copy of {path}: {command}"
                ));
                self.warn(format!("[kafka] ssl.keystore.location = {path} is a JKS keystore, which librdkafka can't read: convert it to PKCS#12 — {command} — and set [kafka] \"ssl.keystore.location\" to the copy's path, in place of the FILL-IN placeholder, which walrelay refuses to start with, and {} to the copy's password", kafka_env_variable("ssl.keystore.password")));
            }
            StoreType::Other(t) => self.refused.push(format!("ssl.keystore.type = {t} can't be carried: librdkafka reads a client certificate from PEM or PKCS#12; convert the keystore and set ssl.keystore.location (PKCS#12) or ssl.certificate.location and ssl.key.location (PEM)")),
        }
    }

    /// The Java client's inline PEM keystore: the chain becomes `ssl.certificate.pem`; the key
    /// is a secret, which stays out of the file like every other: librdkafka takes it as
    /// `ssl.key.pem` from the environment.
    fn carry_inline_keystore(
        &mut self,
        props: &mut BTreeMap<String, String>,
        chain: Option<String>,
        key: bool,
    ) {
        if let Some(text) = chain {
            match pem_blocks(&text, "CERTIFICATE") {
                Ok(pem) => {
                    props.insert("ssl.certificate.pem".into(), pem);
                }
                Err(e) => self.refused.push(format!("ssl.keystore.certificate.chain: {e}; put the certificate chain in a PEM file and set ssl.certificate.location to its path")),
            }
        }
        if key {
            let variable = kafka_env_variable("ssl.key.pem");
            self.dropped.entry("kafka").or_default().push(format!(
                "\"ssl.key.pem\" (the connector's ssl.keystore.key) is a secret and is not copied: set {variable} in walrelay's environment"
            ));
            self.warn(format!("[kafka] ssl.keystore.key (the client's private key) is not copied into the file: set {variable} in walrelay's environment to the key as PEM with its line breaks (OpenSSL does not read the one-line form the Java client accepts), or put it in a file and set ssl.key.location"));
        }
    }
}

/// The `label` blocks of `text` (`-----BEGIN CERTIFICATE-----` …) as OpenSSL reads them: the
/// BEGIN line, the base64 in lines of 64, the END line. The Java client also reads a block
/// whose line breaks are lost (a `.properties` value continued over several lines becomes one),
/// OpenSSL does not.
fn pem_blocks(text: &str, label: &str) -> Result<String, String> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(&begin) {
        let after = &rest[at + begin.len()..];
        let Some(stop) = after.find(&end) else {
            return Err(format!("a {begin} line has no {end}"));
        };
        let body: String = after[..stop].chars().filter(|c| !c.is_whitespace()).collect();
        let base64 = |b: u8| b.is_ascii_alphanumeric() || b"+/=".contains(&b);
        if body.is_empty() || !body.bytes().all(base64) {
            return Err(format!("a {label} block is not base64"));
        }
        out += &begin;
        out.push('\n');
        // ASCII only (checked above): every index is a character boundary.
        for start in (0..body.len()).step_by(64) {
            out += &body[start..body.len().min(start + 64)];
            out.push('\n');
        }
        out += &end;
        out.push('\n');
        rest = &after[stop + end.len()..];
    }
    if out.is_empty() {
        return Err(format!("no {begin} block"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_blocks_restore_the_line_breaks_of_one_line_pem() {
        let body = "A".repeat(70);
        let one_line = format!(
            "-----BEGIN CERTIFICATE----- {body} -----END CERTIFICATE----- -----BEGIN CERTIFICATE-----QkI=-----END CERTIFICATE-----"
        );
        let want = format!(
            "-----BEGIN CERTIFICATE-----\n{}\n{}\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nQkI=\n-----END CERTIFICATE-----\n",
            &body[..64],
            &body[64..]
        );
        assert_eq!(pem_blocks(&one_line, "CERTIFICATE").unwrap(), want);
        assert_eq!(pem_blocks(&want, "CERTIFICATE").unwrap(), want, "already PEM: unchanged");
        assert!(pem_blocks("MIIB", "CERTIFICATE").unwrap_err().contains("no -----BEGIN"));
        let damaged = "-----BEGIN CERTIFICATE-----MI!B-----END CERTIFICATE-----";
        assert!(pem_blocks(damaged, "CERTIFICATE").unwrap_err().contains("not base64"));
    }

    #[test]
    fn store_types_follow_the_java_client_and_the_file_name() {
        assert_eq!(store_type(Some("pkcs12"), Some("/a/t.jks")), StoreType::Pkcs12);
        assert_eq!(store_type(Some("PEM"), None), StoreType::Pem);
        assert_eq!(store_type(None, Some("/a/t.P12")), StoreType::Pkcs12);
        assert_eq!(store_type(None, Some("/a/ca.pem")), StoreType::Pem);
        assert_eq!(store_type(None, Some("/a/truststore")), StoreType::Jks);
        assert_eq!(store_type(Some("BCFKS"), None), StoreType::Other("BCFKS".into()));
    }
}
