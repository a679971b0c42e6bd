//! The local certificate authority of interception: made once per user (key `0600` in the data
//! directory, which every sandbox has hidden), and the leaf certificates it signs for
//! intercepted hosts, cached.
//!
//! Why not hudsucker's `RcgenAuthority`: hudsucker is a whole MITM proxy (it owns the listener,
//! the CONNECT handling and the upstream client), so only its authority could serve our pipeline,
//! and that authority is a thin layer over rcgen plus a `moka` cache that needs rcgen's
//! `x509-parser` feature to load a CA from PEM and brings `hyper-rustls` and `tokio-tungstenite`
//! into the tree. The same ~100 lines over rcgen (already in the tree) keep it lean: here a CA
//! loaded from disk is re-issued in memory from its key and its fixed subject, which signs
//! exactly like the file's certificate (same name, same key, same key identifier).

use std::collections::HashMap;
use std::io::Write as _;
use std::net::IpAddr;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;
use sandgate_config::Host;

/// Most leaf certificates kept (a sandbox reaches few intercepted hosts).
const LEAF_CACHE: usize = 1024;

/// File names inside the CA directory.
const CERT_FILE: &str = "ca.pem";
const KEY_FILE: &str = "ca-key.pem";

/// Why the CA could not be made or loaded.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// Reading or writing a file failed.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        error: std::io::Error,
    },
    /// The key file is readable by others (it must be 0600).
    #[error("{path} is readable by other users (mode {mode:o}); run `chmod 600 {path}`")]
    KeyMode {
        /// The key file.
        path: PathBuf,
        /// Its mode.
        mode: u32,
    },
    /// A file or the directory of the CA is not this user's own (another user could have
    /// planted or could replace the key or the certificate the sandboxes trust).
    #[error("{path} {why}; the CA must be this user's alone (move it away to make a new one)")]
    NotOwn {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// rcgen or rustls refused something.
    #[error("certificate authority: {0}")]
    Crypto(String),
}

/// The directory of the CA under a data directory (`$XDG_DATA_HOME/sandgate`).
pub fn ca_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("ca")
}

/// The CA certificate (PEM), made with its key when the directory has none. The launcher calls
/// this to build the sandbox's bundle; the daemon loads the same files with
/// [`CertificateAuthority::load_or_create`].
pub fn ca_certificate_pem(dir: &Path) -> Result<String, CaError> {
    Ok(CertificateAuthority::load_or_create(dir)?.cert_pem.clone())
}

/// The CA and its cache of leaf certificates.
pub struct CertificateAuthority {
    issuer: Certificate,
    issuer_key: KeyPair,
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    /// One key for every leaf: generating a key per host buys nothing (all of them live in this
    /// process) and costs a key generation per new host.
    leaf_key: KeyPair,
    leaves: Mutex<HashMap<Host, Arc<CertifiedKey>>>,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CertificateAuthority(..)")
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CaError + '_ {
    move |error| CaError::Io { path: path.to_owned(), error }
}

fn crypto(e: impl std::fmt::Display) -> CaError {
    CaError::Crypto(e.to_string())
}

/// Deny by default: the CA's directory and files must be this user's own (a key or certificate
/// another user can write is theirs to choose), the directory writable by nobody else, and the
/// files plain files (no symbolic link pointing where someone else decides).
fn own(path: &Path, dir: bool) -> Result<std::fs::Metadata, CaError> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::symlink_metadata(path).map_err(io(path))?;
    let refuse = |why: String| CaError::NotOwn { path: path.to_owned(), why };
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(refuse(format!("belongs to uid {}, not to uid {me}", meta.uid())));
    }
    if dir {
        if !meta.is_dir() {
            return Err(refuse("is not a directory".into()));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(refuse(format!(
                "is writable by other users (mode {:o})",
                meta.mode() & 0o777
            )));
        }
    } else if !meta.file_type().is_file() {
        return Err(refuse("is not a plain file".into()));
    }
    Ok(meta)
}

/// The calendar year now (approximately: validity windows have a year of slack either side).
fn this_year() -> i32 {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    1970 + (secs / 31_556_952) as i32
}

/// The CA's parameters: fixed but for the key, so a CA re-issued from the key file has the
/// subject and key identifier of the certificate on disk.
fn ca_params(key: &KeyPair) -> CertificateParams {
    let mut params = CertificateParams::default();
    let id: String =
        key.public_key_raw().iter().skip(1).take(6).map(|b| format!("{b:02x}")).collect();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "sandgate");
    dn.push(DnType::CommonName, format!("sandgate local interception CA {id}"));
    params.distinguished_name = dn;
    // Path length 0: it signs leaves only, never another CA.
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = rcgen::date_time_ymd(2024, 1, 1);
    params.not_after = rcgen::date_time_ymd(this_year().max(2026) + 20, 1, 1);
    params
}

impl CertificateAuthority {
    /// Loads the CA of `dir` (made on first use: directory 0700, key 0600, written atomically so
    /// that a launcher and the daemon starting together agree on one).
    pub fn load_or_create(dir: &Path) -> Result<CertificateAuthority, CaError> {
        let key_path = dir.join(KEY_FILE);
        let cert_path = dir.join(CERT_FILE);
        if !key_path.exists() {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(io(dir))?;
            let key = KeyPair::generate().map_err(crypto)?;
            let cert = ca_params(&key).self_signed(&key).map_err(crypto)?;
            let tmp = dir.join(format!(".ca-{}.tmp", std::process::id()));
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(io(&tmp))?;
            f.write_all(key.serialize_pem().as_bytes()).map_err(io(&tmp))?;
            f.sync_all().map_err(io(&tmp))?;
            let tmp_cert = dir.join(format!(".ca-cert-{}.tmp", std::process::id()));
            std::fs::write(&tmp_cert, cert.pem()).map_err(io(&tmp_cert))?;
            // The certificate first: whoever sees the key sees its certificate.
            // A concurrent creator may win: its pair is then the one both use (link fails).
            if std::fs::hard_link(&tmp, &key_path).is_ok() {
                std::fs::rename(&tmp_cert, &cert_path).map_err(io(&cert_path))?;
            } else {
                let _ = std::fs::remove_file(&tmp_cert);
            }
            let _ = std::fs::remove_file(&tmp);
        }
        own(dir, true)?;
        let meta = own(&key_path, false)?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(CaError::KeyMode { path: key_path, mode });
        }
        own(&cert_path, false).or_else(|e| match e {
            // Made by a concurrent creator a moment later: waited for below.
            CaError::Io { .. } => Ok(meta.clone()),
            other => Err(other),
        })?;
        let key_pem = std::fs::read_to_string(&key_path).map_err(io(&key_path))?;
        let issuer_key = KeyPair::from_pem(&key_pem).map_err(crypto)?;
        // The certificate may lag its key by a moment when another process just made the pair.
        let mut cert_pem = std::fs::read_to_string(&cert_path);
        for _ in 0..50 {
            if cert_pem.is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            cert_pem = std::fs::read_to_string(&cert_path);
        }
        let cert_pem = cert_pem.map_err(io(&cert_path))?;
        let issuer = ca_params(&issuer_key).self_signed(&issuer_key).map_err(crypto)?;
        use rustls::pki_types::pem::PemObject as _;
        let cert_der = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| crypto(format!("{}: {e}", cert_path.display())))?;
        Ok(CertificateAuthority {
            issuer,
            issuer_key,
            cert_pem,
            cert_der,
            leaf_key: KeyPair::generate().map_err(crypto)?,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA certificate, PEM (what sandboxes trust).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A certificate for `host` (a name or an address) signed by the CA, with its key.
    pub fn leaf(&self, host: &Host) -> Result<Arc<CertifiedKey>, CaError> {
        let mut cache = self.leaves.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = cache.get(host) {
            return Ok(k.clone());
        }
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host.to_string());
        params.distinguished_name = dn;
        params.subject_alt_names = vec![match host {
            Host::Ip(ip) => SanType::IpAddress(*ip as IpAddr),
            Host::Name(n) => SanType::DnsName(n.as_str().try_into().map_err(crypto)?),
        }];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let year = this_year();
        params.not_before = rcgen::date_time_ymd(year - 1, 1, 1);
        params.not_after = rcgen::date_time_ymd(year + 1, 12, 31);
        let cert =
            params.signed_by(&self.leaf_key, &self.issuer, &self.issuer_key).map_err(crypto)?;
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.leaf_key.serialize_der()));
        let signer = rustls::crypto::ring::sign::any_supported_type(&key_der).map_err(crypto)?;
        let certified =
            Arc::new(CertifiedKey::new(vec![cert.der().clone(), self.cert_der.clone()], signer));
        if cache.len() >= LEAF_CACHE {
            cache.clear();
        }
        cache.insert(host.clone(), certified.clone());
        Ok(certified)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_once_key_private_and_reloaded_alike() {
        let dir = tempfile::tempdir().unwrap();
        let d = ca_dir(dir.path());
        let a = CertificateAuthority::load_or_create(&d).unwrap();
        let mode = std::fs::metadata(d.join(KEY_FILE)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let b = CertificateAuthority::load_or_create(&d).unwrap();
        assert_eq!(a.cert_pem(), b.cert_pem());
        // A leaf of the reloaded CA verifies against the certificate on disk.
        let host = Host::parse("api.example.com").unwrap();
        let leaf = b.leaf(&host).unwrap();
        assert!(Arc::ptr_eq(&leaf, &b.leaf(&host).unwrap()), "cached");
        let mut roots = rustls::RootCertStore::empty();
        roots.add(a.cert_der.clone()).unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let name = rustls::pki_types::ServerName::try_from("api.example.com").unwrap();
        use rustls::client::danger::ServerCertVerifier as _;
        verifier
            .verify_server_cert(
                &leaf.cert[0],
                &leaf.cert[1..],
                &name,
                &[],
                rustls::pki_types::UnixTime::now(),
            )
            .unwrap();
        // A key readable by others is refused.
        std::fs::set_permissions(d.join(KEY_FILE), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(CertificateAuthority::load_or_create(&d), Err(CaError::KeyMode { .. })));
    }
}
