//! A TLS front that asks every client for a certificate its CA signed (mutual TLS) and forwards
//! to a plain-HTTP server: a schema registry behind a proxy that authenticates its clients, as
//! teams run one. Apicurio's package has client authentication fixed off when it is built.

use std::path::Path;
use std::sync::{Arc, Mutex};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

pub struct MtlsProxy {
    port: u16,
    refused: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl MtlsProxy {
    /// Listens on a free 127.0.0.1 port with `cert` and `key` (PEM), takes clients whose
    /// certificate `ca` signed, and forwards each connection to 127.0.0.1:`upstream`.
    pub async fn start(upstream: u16, ca: &Path, cert: &Path, key: &Path) -> MtlsProxy {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(ca).expect("read the CA") {
            roots.add(c.expect("a CA certificate")).expect("add the CA");
        }
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .expect("a client verifier");
        let chain: Vec<_> = CertificateDer::pem_file_iter(cert)
            .expect("read the certificate")
            .map(|c| c.expect("a certificate"))
            .collect();
        let key = PrivateKeyDer::from_pem_file(key).expect("read the key");
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .expect("the server certificate");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let refused = Arc::new(Mutex::new(Vec::new()));
        let said = refused.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (acceptor, said) = (acceptor.clone(), said.clone());
                tokio::spawn(async move {
                    let mut tls = match acceptor.accept(client).await {
                        Ok(tls) => tls,
                        Err(e) => return said.lock().unwrap().push(e.to_string()),
                    };
                    let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut server).await;
                });
            }
        });
        MtlsProxy { port, refused, task }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Why the handshakes the proxy refused failed (a client without a certificate, …).
    pub fn refused(&self) -> Vec<String> {
        self.refused.lock().unwrap().clone()
    }
}

impl Drop for MtlsProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
