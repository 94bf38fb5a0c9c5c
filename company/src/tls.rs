//! Serving an axum router over TLS (rustls with aws-lc-rs), HTTP/1.1 and HTTP/2.

use std::future::Future;
use std::io;
use std::path::Path;
use std::sync::Arc;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

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

/// Serves `app` on `listener` over TLS until `shutdown` completes. Each connection runs in its
/// own task; a failed handshake or a broken connection ends only that connection.
pub async fn serve_tls(
    listener: TcpListener,
    app: Router,
    config: Arc<ServerConfig>,
    shutdown: impl Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(config);
    tokio::pin!(shutdown);
    loop {
        let (tcp, _peer) = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            // A stalled handshake ends within a bound instead of holding a task forever.
            let Ok(Ok(tls)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await else {
                return;
            };
            let service = TowerToHyperService::new(app);
            if let Err(error) = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tls), service)
                .await
            {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
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
