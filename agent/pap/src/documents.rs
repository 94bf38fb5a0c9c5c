//! Serving the agent's two public documents over HTTPS: `/agent.json` (the Client ID Metadata
//! Document) and `/jwks.json`, so companies can resolve the agent's `client_id`.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::identity::Identity;

/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The documents as a router: JSON, `Cache-Control: no-store` so a company sees a rotated key
/// at once.
pub fn documents_router(identity: &Identity) -> Router {
    let metadata = identity.metadata().to_string();
    let jwks = identity.jwks().to_string();
    let json = |body: String| {
        move || {
            let body = body.clone();
            async move {
                let mut response = body.into_response();
                let headers = response.headers_mut();
                headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                response
            }
        }
    };
    Router::new()
        .route("/agent.json", get(json(metadata)))
        .route("/jwks.json", get(json(jwks)))
}

/// A TCP listener that completes a TLS handshake before handing a connection to axum.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
}

impl TlsListener {
    /// Wraps `tcp` with the certificate chain and key (PEM).
    pub fn new(tcp: TcpListener, cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, io::Error> {
        let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
        let certs = rustls_pemfile::certs(&mut &cert_pem[..]).collect::<Result<Vec<_>, _>>()?;
        let key = rustls_pemfile::private_key(&mut &key_pem[..])?.ok_or_else(|| invalid("no private key"))?;
        let config =
            rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|_| invalid("TLS versions"))?
                .with_no_client_auth()
                .with_single_cert(certs, key)
                .map_err(|_| invalid("certificate and key do not fit"))?;
        Ok(Self {
            tcp,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }
}

impl std::fmt::Debug for TlsListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsListener")
            .field("tcp", &self.tcp)
            .finish_non_exhaustive()
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            // A failed or stalled handshake (a scanner, an untrusting client) drops only that
            // connection, within a bound, so one slow client cannot hold the listener.
            if let Ok(Ok(tls)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, self.acceptor.accept(tcp)).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
