//! What interception holds for the proxy's life: the local CA, the reader of secret values and
//! the upstream TLS configurations ([`Interceptor`]), and the trust bundle a sandbox is given.
//! The proxy's shared state owns the interceptor (`proxy.rs`); the `intercept` stage borrows it,
//! so this module needs no stage.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use sandgate_config::{Host, InterceptSettings, Target};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::ca::{CaError, CertificateAuthority};
use crate::denial::Refusal;
use crate::secret::SecretReader;

/// Files that hold the system's roots, in the order OpenSSL-based systems keep them (what
/// `openssl-probe`, and so `rustls-native-certs`, looks for).
const SYSTEM_BUNDLES: [&str; 8] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
    "/etc/pki/tls/cacert.pem",
    "/usr/local/share/certs/ca-root-nss.crt",
    "/usr/local/etc/openssl/cert.pem",
];

/// The system's root certificates as PEM text, with `rustls-native-certs`' rules: when
/// `SSL_CERT_FILE` or `SSL_CERT_DIR` is set, those and nothing else; otherwise the first system
/// bundle that exists. (The crate itself is not used: on Linux it is these few lines plus
/// `openssl-probe`, and the sandbox's bundle needs the PEM text anyway.)
pub fn system_roots_pem() -> String {
    let mut out = String::new();
    let file = std::env::var_os("SSL_CERT_FILE").map(PathBuf::from);
    let dir = std::env::var_os("SSL_CERT_DIR").map(PathBuf::from);
    if file.is_none() && dir.is_none() {
        if let Some(text) = SYSTEM_BUNDLES.iter().find_map(|p| std::fs::read_to_string(p).ok()) {
            out.push_str(&text);
        }
        return out;
    }
    if let Some(text) = file.and_then(|f| std::fs::read_to_string(f).ok()) {
        out.push_str(&text);
    }
    if let Some(entries) = dir.and_then(|d| std::fs::read_dir(d).ok()) {
        for e in entries.flatten() {
            if let Ok(text) = std::fs::read_to_string(e.path())
                && text.contains("-----BEGIN CERTIFICATE-----")
            {
                out.push_str(&text);
                out.push('\n');
            }
        }
    }
    out
}

/// The bundle a sandbox trusts when interception is in use: the system's roots and the CA.
pub fn sandbox_bundle(ca_pem: &str) -> String {
    let mut out = system_roots_pem();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str("# sandgate local interception CA\n");
    out.push_str(ca_pem);
    out
}

/// Variables that make common clients trust a bundle file (curl, OpenSSL, Python requests, Node,
/// git, pip, cargo, Deno, the AWS SDKs).
pub const CA_BUNDLE_VARS: [&str; 9] = [
    "SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
    "CARGO_HTTP_CAINFO",
    "DENO_CERT",
    "AWS_CA_BUNDLE",
];

/// An upstream TLS configuration's key: its extra roots, and whether it offers `h2`.
type ClientKey = (Vec<PathBuf>, bool);

/// The CA, the secret reader and the upstream TLS configurations of interception.
pub struct Interceptor {
    ca: CertificateAuthority,
    secrets: SecretReader,
    system_roots: OnceLock<Vec<CertificateDer<'static>>>,
    clients: Mutex<HashMap<ClientKey, Arc<ClientConfig>>>,
}

impl std::fmt::Debug for Interceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Interceptor(..)")
    }
}

/// A TLS client configuration that trusts the system's roots ([`system_roots_pem`]) and the PEM
/// files of `extra_roots` (named `key` in errors, e.g. `[telemetry] extra_roots`): the one way
/// sandgate checks a server's certificate, for upstreams and for the telemetry collector.
pub fn client_tls(extra_roots: &[PathBuf], key: &str) -> Result<ClientConfig, String> {
    let system: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(system_roots_pem().as_bytes()).flatten().collect();
    client_tls_with(&system, extra_roots, key)
}

fn client_tls_with(
    system: &[CertificateDer<'static>],
    extra_roots: &[PathBuf],
    key: &str,
) -> Result<ClientConfig, String> {
    let mut roots = RootCertStore::empty();
    // A system bundle may hold certificates webpki cannot use; the rest still count.
    let _ = roots.add_parsable_certificates(system.iter().cloned());
    for path in extra_roots {
        let text = std::fs::read(path)
            .map_err(|e| format!("{key}: cannot read {}: {e}", path.display()))?;
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(&text).flatten().collect();
        if certs.is_empty() {
            return Err(format!("{key}: {} holds no certificate", path.display()));
        }
        for c in certs {
            roots.add(c).map_err(|e| format!("{key}: {}: {e}", path.display()))?;
        }
    }
    Ok(ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Always the same leaf (the connection's host), whatever name the client sends.
#[derive(Debug)]
struct Leaf(Arc<CertifiedKey>);

impl ResolvesServerCert for Leaf {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

impl Interceptor {
    /// Interception with the CA of `ca_dir` (made there on first use).
    pub fn new(ca_dir: &Path) -> Result<Interceptor, CaError> {
        Ok(Interceptor {
            ca: CertificateAuthority::load_or_create(ca_dir)?,
            secrets: SecretReader::default(),
            system_roots: OnceLock::new(),
            clients: Mutex::new(HashMap::new()),
        })
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        self.ca.cert_pem()
    }

    /// The reader of secret values (shared, so command output is cached once).
    pub fn secrets(&self) -> &SecretReader {
        &self.secrets
    }

    /// The client side: ALPN offers `h2` only when the upstream agreed to it.
    pub(crate) fn server_config(&self, host: &Host, h2: bool) -> Result<Arc<ServerConfig>, String> {
        let leaf = self.ca.leaf(host).map_err(|e| e.to_string())?;
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Leaf(leaf)));
        config.alpn_protocols = if h2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        Ok(Arc::new(config))
    }

    /// The upstream configuration for `extra_roots` (built once per list of files).
    fn client_config(
        &self,
        extra_roots: &[PathBuf],
        h2: bool,
    ) -> Result<Arc<ClientConfig>, String> {
        let key = (extra_roots.to_vec(), h2);
        if let Some(c) = self.clients.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(c.clone());
        }
        let system = self.system_roots.get_or_init(|| {
            CertificateDer::pem_slice_iter(system_roots_pem().as_bytes()).flatten().collect()
        });
        let mut config = client_tls_with(system, extra_roots, "[tls] extra_roots")?;
        config.alpn_protocols = if h2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        let config = Arc::new(config);
        self.clients.lock().unwrap_or_else(|e| e.into_inner()).insert(key, config.clone());
        Ok(config)
    }

    pub(crate) async fn upstream_tls(
        &self,
        settings: &InterceptSettings,
        target: &Target,
        tcp: TcpStream,
        timeout: std::time::Duration,
        h2: bool,
    ) -> Result<TlsStream<TcpStream>, Refusal> {
        let refuse = |why: String| Refusal::UpstreamCertificate { target: target.to_string(), why };
        let config = self.client_config(&settings.extra_roots, h2).map_err(refuse)?;
        let name = match &target.host {
            Host::Ip(ip) => ServerName::IpAddress((*ip).into()),
            Host::Name(n) => {
                ServerName::try_from(n.as_str().to_owned()).map_err(|e| refuse(e.to_string()))?
            }
        };
        let handshake = TlsConnector::from(config).connect(name, tcp);
        match tokio::time::timeout(timeout, handshake).await {
            Ok(Ok(tls)) => Ok(tls),
            Ok(Err(e)) => {
                Err(refuse(match e.get_ref().and_then(|r| r.downcast_ref::<rustls::Error>()) {
                    Some(tls) => tls.to_string(),
                    None => e.to_string(),
                }))
            }
            Err(_) => Err(Refusal::Unreachable {
                target: target.to_string(),
                error: format!("no TLS handshake within {}s", timeout.as_secs()),
            }),
        }
    }
}
