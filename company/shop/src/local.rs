//! The reference company on 127.0.0.1, for demos and tests: throwaway certificates, the
//! embedded store, and agents' documents fetched from loopback addresses through the test
//! allow-list.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use pap_shared::{Clock, SystemClock, SystemRng};

use crate::reference::{CompanyConfig, ReferenceCompany};
use pap_company::resolver::{HttpClientResolver, ResolverConfig};
use pap_net::dev_certs::DevCerts;
use pap_net::serve::serve_tls;
use pap_net::tls::{TlsError, load_server_config};

/// A running local company.
#[derive(Clone, Debug)]
pub struct LocalCompany {
    /// The company (its operator hooks, its Sessions).
    pub company: ReferenceCompany,
    /// Where it listens; its public URLs stay `https://{domain}` with no port.
    pub addr: SocketAddr,
}

impl LocalCompany {
    /// Starts `config`'s company over TLS with `certs` on a free loopback port. It fetches agents'
    /// documents for the names in `agents` from their loopback addresses, trusting the dev CA.
    /// `wrap` may add layers in front of its router (tests put deliberately broken ones there).
    pub async fn start(
        config: CompanyConfig,
        certs: &DevCerts,
        agents: HashMap<String, SocketAddr>,
        wrap: impl FnOnce(Router) -> Router,
    ) -> Result<Self, LocalCompanyError> {
        Self::start_with_clock(config, certs, agents, Arc::new(SystemClock), wrap).await
    }

    /// [`Self::start`] on `clock` (tests share one with the agent to step time exactly).
    pub async fn start_with_clock(
        config: CompanyConfig,
        certs: &DevCerts,
        agents: HashMap<String, SocketAddr>,
        clock: Arc<dyn Clock>,
        wrap: impl FnOnce(Router) -> Router,
    ) -> Result<Self, LocalCompanyError> {
        let ca = std::fs::read(&certs.ca).map_err(LocalCompanyError::Io)?;
        let mut extra_roots = Vec::new();
        for cert in rustls_pemfile::certs(&mut &ca[..]) {
            extra_roots.push(cert.map_err(LocalCompanyError::Io)?);
        }
        let resolver = ResolverConfig {
            extra_roots,
            overrides: agents,
            ..ResolverConfig::default()
        };
        let clients = HttpClientResolver::new(resolver, clock.clone()).map_err(|_| LocalCompanyError::Client)?;
        let company = ReferenceCompany::new(config, clock, Arc::new(SystemRng), Arc::new(clients));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(LocalCompanyError::Io)?;
        let addr = listener.local_addr().map_err(LocalCompanyError::Io)?;
        let tls = load_server_config(&certs.cert, &certs.key).map_err(LocalCompanyError::Tls)?;
        tokio::spawn(serve_tls(listener, wrap(company.router()), tls, std::future::pending()));
        Ok(Self { company, addr })
    }
}

/// Why the local company could not start.
#[derive(Debug, thiserror::Error)]
pub enum LocalCompanyError {
    /// The outbound HTTPS client could not be built.
    #[error("the company's HTTPS client could not be built")]
    Client,
    /// A file or socket failed.
    #[error("a file or socket failed")]
    Io(#[source] std::io::Error),
    /// The certificates could not be loaded.
    #[error("the TLS certificate could not be loaded")]
    Tls(#[source] TlsError),
}
