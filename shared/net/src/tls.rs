//! One rustls set-up (aws-lc-rs, safe protocol versions) for every server and client of the
//! bridge: server configurations from PEM files, offering HTTP/2 and HTTP/1.1 (serving with
//! them is [`crate::serve`]), and the roots and client configuration for fetching.

use std::io;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::{RootCertStore, ServerConfig};

/// The roots a client trusts: the web PKI, plus `extra` (a test CA).
pub fn trust_roots(extra: &[CertificateDer<'static>]) -> Result<RootCertStore, rustls::Error> {
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    for root in extra {
        roots.add(root.clone())?;
    }
    Ok(roots)
}

/// A TLS client configuration: aws-lc-rs, safe protocol versions, `roots`, no client auth.
pub fn client_config(roots: RootCertStore) -> Result<rustls::ClientConfig, rustls::Error> {
    Ok(
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// Loads a certificate chain and a private key (PEM files) into a server configuration that
/// offers `h2` and `http/1.1`.
pub fn load_server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let cert = std::fs::read(cert).map_err(TlsError::Read)?;
    let key = zeroize::Zeroizing::new(std::fs::read(key).map_err(TlsError::Read)?);
    server_config_from_pem(&cert, &key)
}

/// A server configuration from a PEM certificate chain and a PEM private key.
pub fn server_config_from_pem(cert: &[u8], key: &[u8]) -> Result<Arc<ServerConfig>, TlsError> {
    let certs = rustls_pemfile::certs(&mut &cert[..])
        .collect::<Result<Vec<_>, _>>()
        .map_err(TlsError::Read)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    let key = rustls_pemfile::private_key(&mut &key[..])
        .map_err(TlsError::Read)?
        .ok_or(TlsError::NoKey)?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(TlsError::Config)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The TLS configuration was refused (key and certificate do not match, say).
    #[error("the TLS configuration is invalid")]
    Config(#[source] rustls::Error),
    /// The private key file holds no key.
    #[error("no private key in the key file")]
    NoKey,
    /// The certificate file holds no certificate.
    #[error("no certificate in the certificate file")]
    NoCertificate,
    /// A file could not be read.
    #[error("a TLS file could not be read")]
    Read(#[source] io::Error),
}
