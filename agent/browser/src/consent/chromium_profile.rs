//! A Chromium profile's cookie database on Linux as a grant source (AIP-63 C5): the presence
//! scan reads only `host_key` (never a value), and values are read and decrypted only for the
//! hosts a grant covers.
//!
//! Chromium on Linux keeps cookies in SQLite (`<profile>/Cookies`, or `<profile>/Network/Cookies`)
//! with `encrypted_value` = `v10` + AES-128-CBC (IV of 16 spaces, PKCS#7) under
//! PBKDF2-HMAC-SHA1("peanuts", "saltysalt", 1 iteration) when the profile uses the basic password
//! store, or `v11` under a key held by the desktop keyring. From database version 24 the plaintext
//! starts with SHA-256 of the cookie's `host_key`, which is checked and removed. The database is
//! opened read-only and immutable, so a running Chromium is neither locked nor disturbed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use aws_lc_rs::cipher::{AES_128, DecryptionContext, PaddedBlockDecryptingKey, UnboundCipherKey};
use aws_lc_rs::iv::FixedLength;
use rusqlite::{Connection, OpenFlags};
use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

use super::material::{Cookie, Material, SourceError, Value};

/// Microseconds from 1601-01-01 (Chromium's epoch) to 1970-01-01.
const WINDOWS_TO_UNIX_MICROS: i64 = 11_644_473_600_000_000;

/// The cookie database of `profile` (a profile directory such as `~/.config/chromium/Default`).
fn database(profile: &Path) -> Result<PathBuf, SourceError> {
    [profile.join("Network").join("Cookies"), profile.join("Cookies")]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| SourceError::Unreadable {
            path: profile.to_owned(),
            kind: std::io::ErrorKind::NotFound,
        })
}

fn open(profile: &Path) -> Result<(Connection, PathBuf), SourceError> {
    let path = database(profile)?;
    // `immutable=1`: no lock taken, no journal read, nothing written.
    let uri = format!("file:{}?immutable=1", percent(&path.display().to_string()));
    let connection = Connection::open_with_flags(uri, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI)
        .map_err(|e| database_error(&path, &e))?;
    Ok((connection, path))
}

/// SQLite's errors name the statement or the file, never a row's value; only the code leaves.
fn database_error(path: &Path, error: &rusqlite::Error) -> SourceError {
    SourceError::Database {
        path: path.to_owned(),
        why: match error {
            rusqlite::Error::SqliteFailure(code, _) => format!("{:?}", code.code),
            _ => "the cookie table is not as Chromium writes it".into(),
        },
    }
}

/// Escapes what a SQLite URI path cannot hold literally.
fn percent(path: &str) -> String {
    path.chars()
        .map(|c| match c {
            '%' | '?' | '#' => format!("%{:02X}", u32::from(c)),
            other => other.to_string(),
        })
        .collect()
}

/// The presence scan: cookies per host, from `host_key` alone.
pub(crate) fn scan(profile: &Path) -> Result<BTreeMap<String, u64>, SourceError> {
    let (db, path) = open(profile)?;
    let mut statement = db
        .prepare("SELECT host_key, COUNT(*) FROM cookies GROUP BY host_key")
        .map_err(|e| database_error(&path, &e))?;
    let rows = statement
        .query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?)))
        .map_err(|e| database_error(&path, &e))?;
    let mut counts = BTreeMap::new();
    for row in rows {
        let (host, count) = row.map_err(|e| database_error(&path, &e))?;
        *counts
            .entry(host.trim_start_matches('.').to_ascii_lowercase())
            .or_insert(0) += u64::try_from(count).unwrap_or(0);
    }
    Ok(counts)
}

/// Reads and decrypts the cookies of the hosts `covers` allows, and only those: the hosts are
/// chosen from the scan first, and each is queried by itself.
pub(crate) fn read(profile: &Path, covers: &dyn Fn(&str) -> bool) -> Result<Material, SourceError> {
    let (db, path) = open(profile)?;
    let version: i64 = db
        .query_row("SELECT value FROM meta WHERE key = 'version'", [], |row| {
            row.get::<_, String>(0)
        })
        .map_err(|e| database_error(&path, &e))?
        .parse()
        .unwrap_or(0);
    let mut hosts = db
        .prepare("SELECT DISTINCT host_key FROM cookies")
        .map_err(|e| database_error(&path, &e))?;
    let hosts: Vec<String> = hosts
        .query_map([], |row| row.get::<_, String>(0))
        .map_err(|e| database_error(&path, &e))?
        .filter_map(Result::ok)
        .filter(|host| covers(&host.trim_start_matches('.').to_ascii_lowercase()))
        .collect();
    let mut statement = db
        .prepare(
            "SELECT name, value, encrypted_value, path, expires_utc, is_secure, is_httponly, samesite \
             FROM cookies WHERE host_key = ?1",
        )
        .map_err(|e| database_error(&path, &e))?;
    let mut material = Material::default();
    for host in hosts {
        let rows = statement
            .query_map([&host], |row| {
                Ok(Row {
                    name: row.get(0)?,
                    value: Zeroizing::new(row.get(1)?),
                    encrypted: Zeroizing::new(row.get(2)?),
                    path: row.get(3)?,
                    expires_utc: row.get(4)?,
                    secure: row.get(5)?,
                    http_only: row.get(6)?,
                    same_site: row.get(7)?,
                })
            })
            .map_err(|e| database_error(&path, &e))?;
        for row in rows {
            let row = row.map_err(|e| database_error(&path, &e))?;
            let value = if row.encrypted.is_empty() {
                row.value.clone()
            } else {
                decrypt(&row.encrypted, &host, version).map_err(|why| SourceError::Database {
                    path: path.clone(),
                    why: format!("a cookie of {host}: {why}"),
                })?
            };
            material.cookies.push(Cookie {
                name: row.name,
                value: Value::new(value),
                domain: host.clone(),
                path: row.path,
                expires: (row.expires_utc > 0).then(|| (row.expires_utc - WINDOWS_TO_UNIX_MICROS) as f64 / 1_000_000.0),
                http_only: row.http_only != 0,
                secure: row.secure != 0,
                same_site: match row.same_site {
                    0 => Some("None".into()),
                    1 => Some("Lax".into()),
                    2 => Some("Strict".into()),
                    _ => None,
                },
            });
        }
    }
    Ok(material)
}

struct Row {
    name: String,
    value: Zeroizing<String>,
    encrypted: Zeroizing<Vec<u8>>,
    path: String,
    expires_utc: i64,
    secure: i64,
    http_only: i64,
    same_site: i64,
}

/// The `v10` key: PBKDF2-HMAC-SHA1 over Chromium's fixed password for the basic store.
fn basic_store_key() -> [u8; 16] {
    let mut key = [0u8; 16];
    aws_lc_rs::pbkdf2::derive(
        aws_lc_rs::pbkdf2::PBKDF2_HMAC_SHA1,
        std::num::NonZeroU32::MIN,
        b"saltysalt",
        b"peanuts",
        &mut key,
    );
    key
}

/// Decrypts one `encrypted_value`. Errors say what, never the bytes.
fn decrypt(encrypted: &[u8], host_key: &str, version: i64) -> Result<Zeroizing<String>, String> {
    let ciphertext = match encrypted.split_at_checked(3) {
        Some((b"v10", rest)) => rest,
        Some((b"v11", _)) => {
            return Err(
                "it is encrypted with the desktop keyring (v11); export a storage state instead, \
                        or read a profile that uses --password-store=basic"
                    .into(),
            );
        }
        _ => return Err("its encryption is not one Chromium on Linux writes".into()),
    };
    let key = UnboundCipherKey::new(&AES_128, &basic_store_key()).map_err(|_| "the key".to_owned())?;
    let key = PaddedBlockDecryptingKey::cbc_pkcs7(key).map_err(|_| "the key".to_owned())?;
    let mut buffer = Zeroizing::new(ciphertext.to_vec());
    let plain = key
        .decrypt(&mut buffer, DecryptionContext::Iv128(FixedLength::from([b' '; 16])))
        .map_err(|_| "it does not decrypt with the basic store's key".to_owned())?;
    let plain = if version >= 24 {
        let digest = Sha256::digest(host_key.as_bytes());
        plain.strip_prefix(&digest[..]).ok_or("it is bound to another host")?
    } else {
        plain
    };
    std::str::from_utf8(plain)
        .map(|text| Zeroizing::new(text.to_owned()))
        .map_err(|_| "its value is not text".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v10_values_decrypt_with_the_host_binding_and_refuse_another_host() {
        use aws_lc_rs::cipher::PaddedBlockEncryptingKey;
        let mut plain = Sha256::digest(b".shop.example").to_vec();
        plain.extend_from_slice(b"CANARY-VALUE");
        let key =
            PaddedBlockEncryptingKey::cbc_pkcs7(UnboundCipherKey::new(&AES_128, &basic_store_key()).unwrap()).unwrap();
        let mut buffer = plain.clone();
        let context = aws_lc_rs::cipher::EncryptionContext::Iv128(FixedLength::from([b' '; 16]));
        key.less_safe_encrypt(&mut buffer, context).unwrap();
        let mut encrypted = b"v10".to_vec();
        encrypted.extend_from_slice(&buffer);
        assert_eq!(&*decrypt(&encrypted, ".shop.example", 24).unwrap(), "CANARY-VALUE");
        let error = decrypt(&encrypted, ".other.example", 24).unwrap_err();
        assert!(!error.contains("CANARY"), "{error}");
        assert!(decrypt(b"v11abc", ".shop.example", 24).unwrap_err().contains("keyring"));
        assert!(decrypt(b"xyz", ".shop.example", 24).is_err());
    }

    #[test]
    fn uri_paths_are_escaped() {
        assert_eq!(percent("/tmp/a?b#c%d"), "/tmp/a%3Fb%23c%25d");
    }
}
