//! One rustls set-up (aws-lc-rs, safe protocol versions) for every server and client of the
//! bridge: server configurations from PEM files, offering HTTP/2 and HTTP/1.1 (serving with
//! them is [`crate::serve`]), and the roots and client configuration for fetching.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use rustls::pki_types::CertificateDer;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
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
    let certified = certified_key(cert, key)?;
    server_config_resolving(Arc::new(Fixed(Arc::new(certified))))
}

/// The certificate and key of two PEM files, matched.
fn certified_key(cert: &[u8], key: &[u8]) -> Result<CertifiedKey, TlsError> {
    let certs = rustls_pemfile::certs(&mut &cert[..])
        .collect::<Result<Vec<_>, _>>()
        .map_err(TlsError::Read)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    let key = rustls_pemfile::private_key(&mut &key[..])
        .map_err(TlsError::Read)?
        .ok_or(TlsError::NoKey)?;
    CertifiedKey::from_der(certs, key, &rustls::crypto::aws_lc_rs::default_provider()).map_err(TlsError::Config)
}

/// A server configuration (aws-lc-rs, safe versions, `h2` and `http/1.1`) whose certificate
/// `resolver` picks at each handshake.
fn server_config_resolving(resolver: Arc<dyn ResolvesServerCert>) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// One certificate for every handshake.
#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl ResolvesServerCert for Fixed {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// A server certificate read from two PEM files and read again by [`Self::reload`] (the
/// company calls it on `SIGHUP`): each handshake after a reload presents the new certificate,
/// and connections already open keep theirs, so a renewal drops nothing. A reload that fails
/// (a half-written file, a key that does not match) keeps the certificate in use.
#[derive(Debug)]
pub struct ReloadableCert {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

impl ReloadableCert {
    /// Reads `cert` and `key` (PEM).
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<Self>, TlsError> {
        let certified = Self::read(cert, key)?;
        Ok(Arc::new(Self {
            cert: cert.to_owned(),
            key: key.to_owned(),
            current: RwLock::new(Arc::new(certified)),
        }))
    }

    fn read(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
        let cert = std::fs::read(cert).map_err(TlsError::Read)?;
        let key = zeroize::Zeroizing::new(std::fs::read(key).map_err(TlsError::Read)?);
        certified_key(&cert, &key)
    }

    /// Reads both files again; on success the next handshakes present what they hold.
    pub fn reload(&self) -> Result<(), TlsError> {
        let certified = Self::read(&self.cert, &self.key)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(certified);
        Ok(())
    }

    /// On each `SIGHUP`, reads the certificate and key again (a renewal): new handshakes present
    /// the new pair, open connections keep theirs; a pair that does not load is logged and the
    /// one in use kept. Spawns a task on the current runtime.
    #[cfg(feature = "server")]
    pub fn reload_on_hangup(self: &Arc<Self>) {
        #[cfg(unix)]
        {
            // Registered here, before the caller serves, so a SIGHUP sent once the server is
            // up reloads rather than ends the process (SIGHUP's default action).
            let Ok(mut hangups) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
                tracing::warn!("SIGHUP cannot be caught here: the certificate reloads only on restart");
                return;
            };
            let certificate = self.clone();
            tokio::spawn(async move {
                while hangups.recv().await.is_some() {
                    match certificate.reload() {
                        Ok(()) => tracing::info!("SIGHUP: reloaded the TLS certificate and key"),
                        Err(error) => {
                            tracing::warn!(%error, "SIGHUP: the TLS certificate and key did not load; keeping the ones in use");
                        }
                    }
                }
            });
        }
    }

    /// A server configuration presenting this certificate (as [`load_server_config`] does).
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<ServerConfig>, TlsError> {
        server_config_resolving(self.clone())
    }
}

impl ResolvesServerCert for ReloadableCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().unwrap_or_else(PoisonError::into_inner).clone())
    }
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
