//! Throwaway certificates for tests and demos on 127.0.0.1: one CA (kept only as its
//! certificate) and one leaf covering every name, valid for one day, as the interop runs need
//! them. Never for production.

use std::io::Write as _;
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

/// Writes `ca.pem`, `cert.pem` and `key.pem` for `names` into `dir` (created 0700 if missing).
/// The CA's private key is dropped at once, so nothing else can ever be signed with it.
pub fn write_dev_certs(dir: &Path, names: &[String]) -> Result<DevCerts, DevCertsError> {
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

    create_private_dir(dir)?;
    let certs = DevCerts {
        ca: dir.join("ca.pem"),
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    };
    write_file(&certs.ca, ca.pem().as_bytes(), 0o644)?;
    write_file(&certs.cert, leaf.pem().as_bytes(), 0o644)?;
    write_file(
        &certs.key,
        zeroize::Zeroizing::new(leaf_key.serialize_pem()).as_bytes(),
        0o600,
    )?;
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
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    let mut file = options.open(path).map_err(DevCertsError::Write)?;
    // The mode applies only when creating; tighten an existing file too.
    #[cfg(unix)]
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
        .map_err(DevCertsError::Write)?;
    #[cfg(not(unix))]
    let _ = mode;
    file.write_all(bytes).map_err(DevCertsError::Write)
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
