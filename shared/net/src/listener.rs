//! A TLS listener for `axum::serve` (or any server taking an [`axum::serve::Listener`]) whose
//! handshakes run on tasks of their own, each within [`HANDSHAKE_TIMEOUT`] and at most
//! [`MAX_HANDSHAKES`] at once: a connection that never says hello holds up no other (security
//! review M9). What completes is handed on as it completes. For the full set of bounds on a
//! server (a connection cap, header, idle and request deadlines), use [`crate::serve`].

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes under way at once; past it, new connections wait in the kernel's queue.
pub const MAX_HANDSHAKES: usize = 256;

/// A TCP listener that completes a TLS handshake before handing a connection on.
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
    /// Wraps `tcp` with the certificate chain and key (PEM), offering HTTP/1.1 only (the
    /// servers it feeds speak HTTP/1.1; `serve` is the one that negotiates h2).
    pub fn new(tcp: TcpListener, cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, io::Error> {
        let mut config = crate::tls::server_config_from_pem(cert_pem, key_pem)
            .map(Arc::unwrap_or_clone)
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Self::with_config(tcp, Arc::new(config))
    }

    /// Wraps `tcp` with a server configuration.
    pub fn with_config(tcp: TcpListener, config: Arc<ServerConfig>) -> Result<Self, io::Error> {
        let local = tcp.local_addr()?;
        let (done, ready) = mpsc::channel(MAX_HANDSHAKES);
        let task = tokio::spawn(accept_and_handshake(tcp, TlsAcceptor::from(config), done));
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
        let (stream, addr) = crate::serve::accept(&tcp).await;
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
