//! `pap-agent identity`: create the agent's key and documents, serve them to companies, and
//! rotate the key.

use anyhow::Context as _;
use pap_agent::{Identity, documents_router};
use pap_shared::{SystemClock, SystemRng};

use crate::cli::IdentityCommand;
use crate::util::{parse_domain, print_json, shutdown_signal};

pub(crate) async fn identity(state: &std::path::Path, command: &IdentityCommand) -> anyhow::Result<()> {
    match command {
        IdentityCommand::Init { domain, name } => {
            let identity = Identity::init(state, parse_domain(domain)?, name, &SystemRng)?;
            print_json(&identity.metadata());
            Ok(())
        }
        IdentityCommand::Serve { listen, cert, key } => {
            let identity = std::sync::Arc::new(Identity::load(state)?);
            let cert_pem = std::fs::read(cert).with_context(|| {
                format!(
                    "cannot read the certificate {}: check the path (for a test on 127.0.0.1, `pap-company dev-certs certs {}` makes one)",
                    cert.display(),
                    identity.domain()
                )
            })?;
            let key = zeroize::Zeroizing::new(
                std::fs::read(key)
                    .with_context(|| format!("cannot read the private key {}: check the path", key.display()))?,
            );
            let tcp = tokio::net::TcpListener::bind(listen).await.with_context(|| {
                format!("cannot listen on {listen}: is another server using that port? choose another with --listen")
            })?;
            let tls = pap_net::tls::server_config_from_pem(&cert_pem, &key)
                .context("the certificate and key do not make a TLS configuration")?;
            let domain = identity.domain();
            eprintln!("serving {} on {listen}", identity.client_id());
            if listen.ip().is_loopback() || listen.ip().is_unspecified() {
                let port = listen.port();
                eprintln!(
                    "  from this machine: curl --connect-to {domain}:443:127.0.0.1:{port} --cacert CA.pem {}\n  a company on this machine reaches it with `pap-company serve --resolve {domain}=127.0.0.1:{port} --trust-ca CA.pem` (testing = true)",
                    identity.client_id()
                );
            }
            // Strangers (every company) fetch these: the bounded server (a connection cap, handshake,
            // header, idle and request deadlines; review N14), until Ctrl-C or SIGTERM.
            pap_net::serve::serve_tls(tcp, documents_router(identity.clone()), tls, shutdown_signal()).await;
            Ok(())
        }
        IdentityCommand::Rotate { grace } => {
            let now = pap_shared::Clock::now(&SystemClock);
            let report = Identity::rotate(state, *grace, now, &SystemRng)?;
            print_json(&serde_json::to_value(&report)?);
            Ok(())
        }
    }
}
