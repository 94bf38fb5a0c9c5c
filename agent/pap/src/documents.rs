//! Serving the agent's two public documents over HTTPS: `/agent.json` (the Client ID Metadata
//! Document) and `/jwks.json`, so companies can resolve the agent's `client_id`.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::identity::Identity;

/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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

/// Handshakes under way at once; past it, new connections wait in the kernel's queue.
const MAX_HANDSHAKES: usize = 256;

/// How long `accept` rests after an error that is not one connection's (out of files).
const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// A TCP listener that completes a TLS handshake before handing a connection to axum.
///
/// Handshakes run on tasks of their own, each within 10 s and at most 256 at once, so a
/// connection that never says hello holds up no other
/// (security review M9); what completes is handed to axum as it completes.
pub struct TlsListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    _acceptor_task: AbortOnDrop,
}

/// Ends the accepting task with the listener.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
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
        let local = tcp.local_addr()?;
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let (done, ready) = mpsc::channel(MAX_HANDSHAKES);
        let task = tokio::spawn(accept_and_handshake(tcp, acceptor, done));
        Ok(Self {
            local,
            ready,
            _acceptor_task: AbortOnDrop(task),
        })
    }
}

/// Accepts TCP connections and hands each to a handshake task; sends on what completes.
async fn accept_and_handshake(
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    done: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    let turns = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let Ok(turn) = turns.clone().acquire_owned().await else {
            return;
        };
        let (stream, addr) = match tcp.accept().await {
            Ok(pair) => pair,
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
                ) =>
            {
                continue;
            }
            Err(_) => {
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let (acceptor, done) = (acceptor.clone(), done.clone());
        tokio::spawn(async move {
            let _turn = turn;
            // A failed or stalled handshake (a scanner, an untrusting client) drops only that
            // connection, within a bound.
            if let Ok(Ok(tls)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                let _ = done.send((tls, addr)).await;
            }
        });
    }
}

impl std::fmt::Debug for TlsListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsListener")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accepting task ended (its runtime is shutting down): nothing more comes.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}
