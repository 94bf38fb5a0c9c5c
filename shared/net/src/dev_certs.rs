//! Throwaway certificates for tests and demos on 127.0.0.1: one CA (kept only as its
//! certificate) and one leaf covering every name, valid for one day, as the interop runs need
//! them. Never for production.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};

/// Where [`write_dev_certs`] put its files.
#[derive(Clone, Debug)]
pub struct DevCerts {
    /// The CA certificate (PEM): trust it, and only it, in the test's clients.
    pub ca: PathBuf,
    /// The leaf certificate (PEM) covering every name.
    pub cert: PathBuf,
    /// The leaf's private key (PKCS#8 PEM, mode 0600).
    pub key: PathBuf,
}

/// A throwaway CA and a leaf covering every name, in memory (PEM); [`write_dev_certs`] writes
/// them out. The CA's private key is dropped at once, so nothing else can ever be signed with it.
#[derive(Debug)]
pub struct DevPem {
    /// The CA certificate (DER): the one root a test's clients trust.
    pub ca_der: Vec<u8>,
    /// The CA certificate (PEM).
    pub ca_pem: String,
    /// The leaf certificate (PEM).
    pub cert_pem: String,
    /// The leaf's private key (PKCS#8 PEM).
    pub key_pem: zeroize::Zeroizing<String>,
}

/// Makes a CA and a leaf for `names`, valid for one day.
pub fn generate(names: &[String]) -> Result<DevPem, DevCertsError> {
    if names.is_empty() {
        return Err(DevCertsError::NoNames);
    }
    let now = time::OffsetDateTime::now_utc();
    let (not_before, not_after) = (now - time::Duration::minutes(5), now + time::Duration::days(1));
    let ca_key = KeyPair::generate().map_err(DevCertsError::Generate)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(DevCertsError::Generate)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "PAP bridge test CA (throwaway)");
    ca_params.not_before = not_before;
    ca_params.not_after = not_after;
    let ca = ca_params.self_signed(&ca_key).map_err(DevCertsError::Generate)?;

    let leaf_key = KeyPair::generate().map_err(DevCertsError::Generate)?;
    let mut leaf_params = CertificateParams::new(names.to_vec()).map_err(DevCertsError::Generate)?;
    leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf_params.not_before = not_before;
    leaf_params.not_after = not_after;
    let leaf = leaf_params
        .signed_by(&leaf_key, &ca, &ca_key)
        .map_err(DevCertsError::Generate)?;

    Ok(DevPem {
        ca_der: ca.der().to_vec(),
        ca_pem: ca.pem(),
        cert_pem: leaf.pem(),
        key_pem: zeroize::Zeroizing::new(leaf_key.serialize_pem()),
    })
}

/// Writes `ca.pem`, `cert.pem` and `key.pem` for `names` into `dir` (created 0700 if missing).
pub fn write_dev_certs(dir: &Path, names: &[String]) -> Result<DevCerts, DevCertsError> {
    let pem = generate(names)?;
    create_private_dir(dir)?;
    let certs = DevCerts {
        ca: dir.join("ca.pem"),
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    };
    write_file(&certs.ca, pem.ca_pem.as_bytes(), 0o644)?;
    write_file(&certs.cert, pem.cert_pem.as_bytes(), 0o644)?;
    write_file(&certs.key, pem.key_pem.as_bytes(), 0o600)?;
    Ok(certs)
}

fn create_private_dir(dir: &Path) -> Result<(), DevCertsError> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(DevCertsError::Write)
}

fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), DevCertsError> {
    pap_shared::fs::write_file(path, bytes, mode).map_err(DevCertsError::Write)
}

/// Why the certificates could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DevCertsError {
    /// Key or certificate generation failed.
    #[error("generating a key or certificate failed")]
    Generate(#[source] rcgen::Error),
    /// No name was given.
    #[error("no name to certify")]
    NoNames,
    /// A file or directory could not be written.
    #[error("writing the certificates failed")]
    Write(#[source] std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_ca_a_leaf_and_a_private_key() {
        let dir = std::env::temp_dir().join(format!("pap-dev-certs-{}", std::process::id()));
        let certs = write_dev_certs(&dir, &["shop.example".into(), "atlas.example".into()]).unwrap();
        let config = crate::tls::load_server_config(&certs.cert, &certs.key);
        assert!(config.is_ok());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(
                std::fs::metadata(&certs.key).unwrap().permissions().mode() & 0o777,
                0o600
            );
            assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        }
        let ca = std::fs::read(&certs.ca).unwrap();
        assert_eq!(rustls_pemfile::certs(&mut &ca[..]).count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
