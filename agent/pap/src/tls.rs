//! For the test-only `--connect`/`--trust-ca` routing: the SPKI pin of a test leaf that the
//! agent's Chromium is told to accept ([`pap_browser::chromium::TestNetwork`]). The roots and
//! the client configuration are `pap_net::tls`'s.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;

/// The base64 SHA-256 of a PEM certificate's SubjectPublicKeyInfo, for
/// `--ignore-certificate-errors-spki-list`.
pub fn spki_pin(cert_pem: &[u8]) -> Result<String, PinError> {
    let der = rustls_pemfile::certs(&mut &cert_pem[..])
        .next()
        .and_then(Result::ok)
        .ok_or(PinError::NoCertificate)?;
    spki_sha256(&der).ok_or(PinError::NoCertificate)
}

/// The base64 SHA-256 of a DER certificate's SubjectPublicKeyInfo, if it parses.
fn spki_sha256(der: &CertificateDer<'_>) -> Option<String> {
    use base64::Engine as _;
    use sha2::Digest as _;
    let cert = webpki::EndEntityCert::try_from(der).ok()?;
    Some(
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(cert.subject_public_key_info().as_ref())),
    )
}

/// Test only: the base64 SPKI pin of the leaf that `name` serves at `addr`, after checking that
/// it chains to `roots` (so only a certificate the test CA issued is ever pinned).
pub async fn pin_served_leaf(name: &str, addr: SocketAddr, roots: rustls::RootCertStore) -> Result<String, PinError> {
    let fail = PinError::Leaf;
    let tls = pap_net::tls::client_config(roots).map_err(|_| fail("TLS"))?;
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
    spki_sha256(leaf).ok_or_else(|| fail("the certificate"))
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
        let certs = pap_net::dev_certs::write_dev_certs(&dir, &["shop.example".into()]).unwrap();
        let pin = spki_pin(&std::fs::read(&certs.cert).unwrap()).unwrap();
        // Base64 of a SHA-256: 44 characters with one '='.
        assert_eq!(pin.len(), 44);
        assert!(pin.ends_with('='));
        assert!(spki_pin(b"not a certificate").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
