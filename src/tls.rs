//! TLS to PostgreSQL with libpq's `sslmode` semantics, for both connections: the control
//! connection (tokio-postgres + rustls) and the replication stream (pgwire-replication); and
//! [`https_client`], the rustls configuration of an HTTPS client (the schema registry's).
//!
//! tokio-postgres only knows `disable`, `prefer` and `require`, so `sslmode` and `sslrootcert`
//! are taken out of the URL here and applied by walrelay itself.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

/// libpq's `sslmode`, `allow` aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    pub fn parse(text: &str) -> Option<SslMode> {
        Some(match text {
            "disable" => SslMode::Disable,
            "prefer" | "allow" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    fn verifies(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

/// How to secure the connections to PostgreSQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    pub mode: SslMode,
    /// CA certificates (PEM) that sign the server's certificate; needed by the verify modes.
    pub root_cert: Option<PathBuf>,
}

impl Tls {
    /// Takes `sslmode` and `sslrootcert` out of a libpq URL or key=value string, falling back on
    /// `PGSSLMODE` / `PGSSLROOTCERT` and libpq's `~/.postgresql/root.crt`. Returns the string
    /// without them, for tokio-postgres.
    pub fn extract(
        url: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<(String, Tls), String> {
        let (rest, params) = take_params(url, &["sslmode", "sslrootcert"]);
        let mode_text =
            params[0].clone().or_else(|| env("PGSSLMODE")).unwrap_or_else(|| "prefer".into());
        let mode = SslMode::parse(&mode_text).ok_or_else(|| {
            format!("sslmode {mode_text:?} is not one of disable, prefer, require, verify-ca, verify-full")
        })?;
        let root_cert =
            params[1].clone().or_else(|| env("PGSSLROOTCERT")).map(PathBuf::from).or_else(|| {
                let default = Path::new(&env("HOME")?).join(".postgresql/root.crt");
                default.is_file().then_some(default)
            });
        if mode.verifies() && root_cert.is_none() {
            return Err(format!(
                "sslmode={mode_text} needs the CA certificate: add sslrootcert=/path/ca.pem to the URL or set PGSSLROOTCERT"
            ));
        }
        Ok((rest, Tls { mode, root_cert }))
    }

    /// The rustls configuration for the control connection, or `None` for `sslmode=disable`.
    pub fn client_config(&self) -> Result<Option<rustls::ClientConfig>, String> {
        if self.mode == SslMode::Disable {
            return Ok(None);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let config = if self.mode.verifies() {
            let roots = Arc::new(self.roots()?);
            let webpki =
                rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|e| e.to_string())?;
            let verifier: Arc<dyn ServerCertVerifier> =
                if self.mode == SslMode::VerifyCa { Arc::new(ChainOnly(webpki)) } else { webpki };
            builder.dangerous().with_custom_certificate_verifier(verifier).with_no_client_auth()
        } else {
            // libpq's prefer and require encrypt without checking who answers.
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Unverified(provider)))
                .with_no_client_auth()
        };
        Ok(Some(config))
    }

    /// The same settings for pgwire-replication.
    pub fn replication(&self) -> pgwire_replication::TlsConfig {
        use pgwire_replication::TlsConfig;
        match self.mode {
            SslMode::Disable => TlsConfig::disabled(),
            SslMode::Prefer => {
                TlsConfig { mode: pgwire_replication::SslMode::Prefer, ..TlsConfig::disabled() }
            }
            SslMode::Require => TlsConfig::require(),
            SslMode::VerifyCa => TlsConfig::verify_ca(self.root_cert.clone()),
            SslMode::VerifyFull => TlsConfig::verify_full(self.root_cert.clone()),
        }
    }

    fn roots(&self) -> Result<RootCertStore, String> {
        pem_roots(self.root_cert.as_ref().ok_or("no sslrootcert")?, "sslrootcert")
    }
}

/// An HTTPS client's rustls configuration: the server's certificate verified against `ca` (a
/// PEM file) or, without one, the Mozilla roots every browser trusts, and its name checked; with
/// `identity` (a PEM certificate chain and its key), a client certificate for servers that ask.
pub fn https_client(
    ca: Option<&Path>,
    identity: Option<(&Path, &Path)>,
) -> Result<rustls::ClientConfig, String> {
    let roots = match ca {
        Some(path) => pem_roots(path, "ca")?,
        None => RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() },
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    match identity {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .and_then(|certs| certs.collect::<Result<_, _>>())
                .map_err(|e| format!("certificate {}: {e}", cert.display()))?;
            if chain.is_empty() {
                return Err(format!("certificate {} holds no certificate", cert.display()));
            }
            let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("key {}: {e}", key.display()))?;
            builder.with_client_auth_cert(chain, key).map_err(|e| e.to_string())
        }
    }
}

/// The certificates of a PEM file as trust roots; `what` names the file's setting.
fn pem_roots(path: &Path, what: &str) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("{what} {}: {e}", path.display()))?;
        roots.add(cert).map_err(|e| format!("{what} {}: {e}", path.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("{what} {} holds no certificate", path.display()));
    }
    Ok(roots)
}

/// Removes `names` from the URL's query string or the key=value string; returns what is left
/// and each value found (in the order of `names`).
fn take_params(url: &str, names: &[&str]) -> (String, Vec<Option<String>>) {
    let mut found = vec![None; names.len()];
    let mut keep = |pair: &str| match pair.split_once('=') {
        Some((k, v)) => match names.iter().position(|n| *n == k) {
            Some(i) => {
                found[i] = Some(v.to_string());
                false
            }
            None => true,
        },
        None => true,
    };
    if url.contains("://") {
        let Some((base, query)) = url.split_once('?') else { return (url.to_string(), found) };
        let kept: Vec<&str> = query.split('&').filter(|p| keep(p)).collect();
        let rest =
            if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) };
        (rest, found)
    } else {
        let kept: Vec<&str> = url.split_whitespace().filter(|p| keep(p)).collect();
        (kept.join(" "), found)
    }
}

/// Accepts any certificate (libpq `require`), still checking the handshake signatures.
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to a trusted CA; the name in the certificate is not checked.
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn sslmode_and_sslrootcert_are_taken_out_of_url_and_key_value_forms() {
        let (rest, tls) = Tls::extract(
            "postgres://u@h:5432/db?sslmode=verify-full&sslrootcert=/ca.pem&application_name=x",
            no_env,
        )
        .unwrap();
        assert_eq!(rest, "postgres://u@h:5432/db?application_name=x");
        assert_eq!(tls, Tls { mode: SslMode::VerifyFull, root_cert: Some("/ca.pem".into()) });
        let (rest, tls) = Tls::extract("host=h dbname=db sslmode=require", no_env).unwrap();
        assert_eq!(rest, "host=h dbname=db");
        assert_eq!(tls.mode, SslMode::Require);
        let (rest, tls) = Tls::extract("postgres://u@h/db", no_env).unwrap();
        assert_eq!((rest.as_str(), tls.mode), ("postgres://u@h/db", SslMode::Prefer));
    }

    #[test]
    fn libpq_environment_is_the_fallback() {
        let env = |k: &str| match k {
            "PGSSLMODE" => Some("verify-ca".to_string()),
            "PGSSLROOTCERT" => Some("/etc/ca.pem".to_string()),
            _ => None,
        };
        let (_, tls) = Tls::extract("postgres://u@h/db", env).unwrap();
        assert_eq!(tls, Tls { mode: SslMode::VerifyCa, root_cert: Some("/etc/ca.pem".into()) });
    }

    #[test]
    fn verify_modes_without_a_ca_and_unknown_modes_are_errors_naming_the_fix() {
        let e = Tls::extract("postgres://u@h/db?sslmode=verify-full", no_env).unwrap_err();
        assert!(e.contains("sslrootcert") && e.contains("PGSSLROOTCERT"), "{e}");
        let e = Tls::extract("postgres://u@h/db?sslmode=strict", no_env).unwrap_err();
        assert!(e.contains("strict"), "{e}");
    }
}
