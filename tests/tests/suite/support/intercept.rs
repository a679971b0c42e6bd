//! An HTTPS origin for the interception tests: a certificate authority made by the test, a leaf
//! for one loopback address, and a thread per connection that answers every request with the
//! request head it received (keep-alive), `/ws` with a `101` and then an echo of every byte, and
//! `/bytes/N` with N bytes.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A running origin.
pub struct TlsOrigin {
    /// Its port on `ip`.
    pub port: u16,
    /// The PEM of the CA that signed its certificate.
    pub ca_pem: String,
    /// The base64 body of its leaf certificate's PEM (what a client saw, compared as text).
    pub leaf_b64: String,
}

/// A CA and an origin on `ip` with a leaf it signed. `redact`: text the echo replaces with
/// `[[redacted secret]]` (so the sandbox never receives the secret back, and the leak check can
/// include every output).
pub fn tls_origin(ip: &str, redact: &str) -> TlsOrigin {
    tls_origin_with(ip, vec![SanType::IpAddress(ip.parse().unwrap())], redact)
}

/// [`tls_origin`] whose leaf names `names` (DNS names), for clients that connect by a name the
/// test's DNS server resolves to `ip`.
pub fn tls_origin_named(ip: &str, names: &[&str]) -> TlsOrigin {
    let sans = names.iter().map(|n| SanType::DnsName((*n).try_into().unwrap())).collect();
    tls_origin_with(ip, sans, "")
}

fn tls_origin_with(ip: &str, sans: Vec<SanType>, redact: &str) -> TlsOrigin {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    // A name of its own: a CA that shares another's name would fail as a bad signature instead
    // of an unknown issuer.
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    ca.distinguished_name
        .push(DnType::CommonName, format!("test origin CA {ip} {} {n}", std::process::id()));
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::default();
    leaf.subject_alt_names = sans;
    let leaf_cert = leaf.signed_by(&leaf_key, &ca_cert, &ca_key).unwrap();
    let pem = leaf_cert.pem();
    let leaf_b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![leaf_cert.der().clone(), CertificateDer::from(ca_cert.der().to_vec())],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
    )
    .unwrap();
    let config = Arc::new(config);
    let listener = TcpListener::bind((ip, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let redact = redact.to_owned();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            let (config, redact) = (config.clone(), redact.clone());
            std::thread::spawn(move || {
                let Ok(conn) = rustls::ServerConnection::new(config) else { return };
                let tls = rustls::StreamOwned::new(conn, s);
                let _ = serve(tls, &redact);
            });
        }
    });
    TlsOrigin { port, ca_pem: ca_cert.pem(), leaf_b64 }
}

fn serve<S: Read + Write>(s: S, redact: &str) -> std::io::Result<()> {
    let mut r = BufReader::new(s);
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if r.read_line(&mut line)? == 0 {
                return Ok(());
            }
            head.push_str(&line);
            if line == "\r\n" || line == "\n" {
                break;
            }
        }
        let lower = head.to_ascii_lowercase();
        let len: usize = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        r.read_exact(&mut body)?;
        let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
        if lower.contains("\nupgrade: websocket") {
            r.get_mut().write_all(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
            )?;
            r.get_mut().flush()?;
            let mut buf = [0u8; 4096];
            loop {
                // What is buffered first, then the stream.
                let n = r.read(&mut buf)?;
                if n == 0 {
                    return Ok(());
                }
                r.get_mut().write_all(&buf[..n])?;
                r.get_mut().flush()?;
            }
        }
        if let Some(n) = path.strip_prefix("/bytes/") {
            let n: u64 = n.parse().unwrap_or(0);
            write!(r.get_mut(), "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n")?;
            let chunk = vec![b'x'; 1 << 16];
            let mut left = n;
            while left > 0 {
                let k = left.min(chunk.len() as u64) as usize;
                r.get_mut().write_all(&chunk[..k])?;
                left -= k as u64;
            }
            r.get_mut().flush()?;
            continue;
        }
        let echo = if redact.is_empty() {
            head.clone()
        } else {
            head.replace(redact, "[[redacted secret]]")
        };
        write!(r.get_mut(), "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{echo}", echo.len())?;
        r.get_mut().flush()?;
    }
}
