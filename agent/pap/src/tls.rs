//! The agent's TLS set-up: the roots it trusts and its client configuration (aws-lc-rs), and,
//! for the test-only `--connect`/`--trust-ca` routing, the SPKI pin of a test leaf that the
//! agent's Chromium is told to accept ([`pap_browser::chromium::TestNetwork`]).

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;

/// The roots the agent trusts: the web PKI, plus `extra` (a test CA).
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
pub fn tls_client_config(roots: RootCertStore) -> Result<rustls::ClientConfig, rustls::Error> {
    Ok(
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// The base64 SHA-256 of a PEM certificate's SubjectPublicKeyInfo, for
/// `--ignore-certificate-errors-spki-list`.
pub fn spki_pin(cert_pem: &[u8]) -> Result<String, PinError> {
    use base64::Engine as _;
    use sha2::Digest as _;
    let bad = || PinError::NoCertificate;
    let der = rustls_pemfile::certs(&mut &cert_pem[..])
        .next()
        .and_then(Result::ok)
        .ok_or_else(bad)?;
    let cert = webpki::EndEntityCert::try_from(&der).map_err(|_| bad())?;
    let spki = cert.subject_public_key_info();
    Ok(base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(spki.as_ref())))
}

/// Test only: the base64 SPKI pin of the leaf that `name` serves at `addr`, after checking that
/// it chains to `roots` (so only a certificate the test CA issued is ever pinned).
pub async fn pin_served_leaf(name: &str, addr: SocketAddr, roots: rustls::RootCertStore) -> Result<String, PinError> {
    let fail = PinError::Leaf;
    let tls = tls_client_config(roots).map_err(|_| fail("TLS"))?;
    let server = rustls::pki_types::ServerName::try_from(name.to_owned()).map_err(|_| fail("the name"))?;
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|_| fail("connecting"))?;
    let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(server, tcp)
        .await
        .map_err(|_| fail("the handshake (is the CA right?)"))?;
    let leaf = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .ok_or_else(|| fail("no certificate"))?;
    use base64::Engine as _;
    use sha2::Digest as _;
    let cert = webpki::EndEntityCert::try_from(leaf).map_err(|_| fail("the certificate"))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(cert.subject_public_key_info().as_ref())))
}

/// Why a test leaf could not be pinned.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    /// The PEM holds no readable certificate.
    #[error("no readable certificate in the PEM")]
    NoCertificate,
    /// The served leaf could not be reached or read; the step that failed is named.
    #[error("pinning the test leaf: {0}")]
    Leaf(&'static str),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spki_pin_hashes_the_leaf_key() {
        let dir = std::env::temp_dir().join(format!("pap-agent-pin-{}", std::process::id()));
        let certs = pap_company::write_dev_certs(&dir, &["shop.example".into()]).unwrap();
        let pin = spki_pin(&std::fs::read(&certs.cert).unwrap()).unwrap();
        // Base64 of a SHA-256: 44 characters with one '='.
        assert_eq!(pin.len(), 44);
        assert!(pin.ends_with('='));
        assert!(spki_pin(b"not a certificate").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
