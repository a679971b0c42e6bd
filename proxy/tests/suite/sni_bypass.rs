//! End-to-end: real TLS clients (rustls driven by hand, and `openssl s_client`) through
//! `CONNECT allowed.test:443` to a TLS server on 127.0.0.1 with several virtual hosts, trying to
//! reach a virtual host the policy does not allow. The server records the server name of every
//! ClientHello it reads, so each row shows which site it would have answered as.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use sandgate_config::DomainName;
use sandgate_proxy::{BoxFuture, Outcome, Proxy, ProxyEvent, Resolver};
use tokio::net::TcpListener;

/// Names under `.test` resolve to the origin's own loopback address (the proxy connects to the
/// port of the CONNECT request there: 443, or 8080).
struct PinnedResolver(Ipv4Addr);

impl Resolver for PinnedResolver {
    fn resolve<'a>(
        &'a self,
        name: &'a DomainName,
        port: u16,
    ) -> BoxFuture<'a, std::io::Result<Vec<SocketAddr>>> {
        let ip = self.0;
        Box::pin(async move {
            if name.as_str().ends_with(".test") {
                Ok(vec![SocketAddr::from((ip, port))])
            } else {
                Err(std::io::Error::new(std::io::ErrorKind::NotFound, "unknown test name"))
            }
        })
    }
}

/// Server names seen in ClientHellos (`None`: a hello without SNI).
type Seen = Arc<Mutex<Vec<Option<String>>>>;

/// One certificate for every name; records the name each ClientHello asked for.
#[derive(Debug)]
struct Vhosts {
    key: Arc<CertifiedKey>,
    seen: Seen,
}

impl ResolvesServerCert for Vhosts {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.seen.lock().unwrap().push(hello.server_name().map(str::to_owned));
        Some(self.key.clone())
    }
}

struct Origin {
    ip: Ipv4Addr,
    ca: CertificateDer<'static>,
    ca_file: std::path::PathBuf,
    seen: Seen,
    _dir: tempfile::TempDir,
}

impl Origin {
    fn saw(&self, name: Option<&str>) -> bool {
        self.seen.lock().unwrap().iter().any(|s| s.as_deref() == name)
    }
}

/// Binds ports 443 and 8080 on a loopback address of this test alone (`127.128+n.pid`: other
/// test processes and other tests of this one use others). `None` without the right to bind 443.
async fn bind_443_and_8080() -> Option<(Ipv4Addr, [TcpListener; 2])> {
    static NEXT: AtomicU8 = AtomicU8::new(0);
    let pid = std::process::id();
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(n < 127, "no free loopback address");
        let ip = Ipv4Addr::new(127, 128 + n, (pid >> 8) as u8, pid as u8);
        match TcpListener::bind((ip, 443)).await {
            Ok(l443) => match TcpListener::bind((ip, 8080)).await {
                Ok(l8080) => return Some((ip, [l443, l8080])),
                Err(_) => continue,
            },
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
            Err(e) => {
                sandgate_test_support::skip(&format!("cannot bind {ip}:443: {e}"));
                return None;
            }
        }
    }
}

/// A rustls server on a loopback address of its own, ports 443 and 8080, answering `vhost=<SNI>` over HTTP/1.1.
async fn vhost_origin() -> Option<Origin> {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "sandgate SNI test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let names = ["allowed.test", "other.test"].map(String::from).to_vec();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let mut leaf_params = rcgen::CertificateParams::new(names).unwrap();
    leaf_params.distinguished_name.push(rcgen::DnType::CommonName, "sandgate SNI test server");
    let leaf = leaf_params.signed_by(&leaf_key, &ca, &ca_key);
    let leaf = leaf.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();

    let signer = rustls::crypto::ring::sign::any_supported_type(&PrivateKeyDer::Pkcs8(
        leaf_key.serialize_der().into(),
    ))
    .unwrap();
    let seen: Seen = Arc::default();
    let resolver = Vhosts {
        key: Arc::new(CertifiedKey::new(vec![leaf.der().clone()], signer)),
        seen: seen.clone(),
    };
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_cert_resolver(Arc::new(resolver));
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let (ip, listeners) = bind_443_and_8080().await?;
    for listener in listeners {
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(s).await else { return };
                    let vhost = tls.get_ref().1.server_name().unwrap_or("(none)").to_owned();
                    let service = hyper::service::service_fn(move |_req| {
                        let body = format!("vhost={vhost}");
                        async move {
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                Bytes::from(body),
                            )))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
    }
    Some(Origin { ip, ca: ca.der().clone(), ca_file, seen, _dir: dir })
}

/// How the client sends its opening.
#[derive(Clone, Copy, Debug)]
enum Opening {
    /// The ClientHello as rustls writes it.
    Plain,
    /// A warning alert record (`15 03 03 00 02 01 64`), then the ClientHello.
    AlertFirst,
    /// A change_cipher_spec record, then the ClientHello.
    CcsFirst,
    /// The ClientHello re-framed into handshake records of this many bytes.
    Split(usize),
    /// The ClientHello written one byte per write.
    ByteByByte,
    /// The ClientHello, then at once a second ClientHello for this name.
    ThenHelloFor(&'static str),
}

/// Connects through the proxy with `CONNECT connect`, then runs a rustls handshake for `sni`
/// (`None`: SNI off) and a GET; returns the response or the error.
fn rustls_client(
    proxy: SocketAddr,
    connect: &str,
    sni: Option<&str>,
    ca: &CertificateDer<'static>,
    opening: Opening,
) -> Result<String, String> {
    let mut sock = TcpStream::connect(proxy).map_err(|e| e.to_string())?;
    sock.set_nodelay(true).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(sock, "CONNECT {connect} HTTP/1.1\r\nHost: {connect}\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match sock.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => return Err(format!("proxy closed: {}", String::from_utf8_lossy(&head))),
        }
    }
    if !head.starts_with(b"HTTP/1.1 200") {
        return Err(String::from_utf8_lossy(&head).into_owned());
    }

    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.enable_sni = sni.is_some();
    let name = ServerName::try_from(sni.unwrap_or("allowed.test").to_owned()).unwrap();
    let config = Arc::new(config);
    let mut conn = rustls::ClientConnection::new(config.clone(), name).unwrap();
    let mut hello = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut hello).unwrap();
    }
    let sent = match opening {
        Opening::Plain => sock.write_all(&hello),
        Opening::ByteByByte => Ok(()),
        Opening::AlertFirst => {
            sock.write_all(&[[0x15, 3, 3, 0, 2, 1, 100].as_slice(), &hello].concat())
        }
        Opening::CcsFirst => sock.write_all(&[[0x14, 3, 3, 0, 1, 1].as_slice(), &hello].concat()),
        Opening::Split(n) => sock.write_all(&reframe(&hello, n)),
        Opening::ThenHelloFor(other) => {
            let name = ServerName::try_from(other.to_owned()).unwrap();
            let mut second = rustls::ClientConnection::new(config.clone(), name).unwrap();
            let mut wire = hello.clone();
            while second.wants_write() {
                second.write_tls(&mut wire).unwrap();
            }
            sock.write_all(&wire)
        }
    };
    if let Opening::ByteByByte = opening {
        for byte in &hello {
            sock.write_all(std::slice::from_ref(byte)).map_err(|e| e.to_string())?;
            // Lets the proxy read each byte on its own (not a synchronisation: any split works).
            std::thread::sleep(Duration::from_millis(1));
        }
    } else {
        sent.map_err(|e| e.to_string())?;
    }
    let mut tls = rustls::Stream::new(&mut conn, &mut sock);
    let host = sni.unwrap_or("allowed.test");
    write!(tls, "GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let r = tls.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out).into_owned();
    match r {
        Ok(_) => Ok(out),
        Err(_) if out.contains("vhost=") => Ok(out),
        Err(e) => Err(e.to_string()),
    }
}

/// Re-frames the handshake payload of `wire` (TLS records) into records of `n` bytes.
fn reframe(wire: &[u8], n: usize) -> Vec<u8> {
    let mut msg = Vec::new();
    let mut rest = wire;
    while rest.len() >= 5 {
        let len = u16::from_be_bytes([rest[3], rest[4]]) as usize;
        assert_eq!(rest[0], 0x16, "rustls's first flight is one handshake message");
        msg.extend_from_slice(&rest[5..5 + len]);
        rest = &rest[5 + len..];
    }
    let mut out = Vec::new();
    for chunk in msg.chunks(n) {
        out.extend([0x16, 3, 1]);
        out.extend((chunk.len() as u16).to_be_bytes());
        out.extend(chunk);
    }
    out
}

struct Setup {
    origin: Origin,
    proxy: SocketAddr,
    events: Arc<Events>,
}

async fn setup() -> Option<Setup> {
    let origin = vhost_origin().await?;
    let events = Arc::new(Events::default());
    let p = Proxy::builder()
        .resolver(Arc::new(PinnedResolver(origin.ip)))
        .events(events.clone())
        .build();
    // The origin's loopback address is allowed, so that the loopback guard lets the names through.
    let ip = origin.ip.to_string();
    let proxy = serve(&p, "s1", policy(&["allowed.test", &ip], &[])).await;
    Some(Setup { origin, proxy, events })
}

impl Setup {
    async fn client(&self, connect: &str, sni: Option<&str>, o: Opening) -> Result<String, String> {
        let (proxy, ca, connect, sni) =
            (self.proxy, self.origin.ca.clone(), connect.to_owned(), sni.map(str::to_owned));
        tokio::task::spawn_blocking(move || rustls_client(proxy, &connect, sni.as_deref(), &ca, o))
            .await
            .unwrap()
    }

    /// The proxy's deny event for the tunnel whose refusal mentions `why`.
    async fn denied(&self, why: &str) -> ProxyEvent {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let found = self
                .events
                .all()
                .into_iter()
                .find(|e| e.decision == Outcome::Deny && e.rule.contains(why));
            if let Some(e) = found {
                return e;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no deny event mentioning {why:?}: {:?}",
                self.events.all()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_names_pass_however_the_hello_is_split() {
    let Some(s) = setup().await else { return };
    for o in [Opening::Plain, Opening::Split(16), Opening::Split(1), Opening::ByteByByte] {
        let out = s.client("allowed.test:443", Some("allowed.test"), o).await;
        assert!(out.as_ref().is_ok_and(|b| b.ends_with("vhost=allowed.test")), "{o:?}: {out:?}");
    }
    // A CONNECT to an allowed IP address needs no name: every site on it is allowed.
    let ip = format!("{}:443", s.origin.ip);
    let out = s.client(&ip, None, Opening::Plain).await;
    assert!(out.as_ref().is_ok_and(|b| b.ends_with("vhost=(none)")), "{out:?}");
}

/// The review's bypass: a record before the ClientHello made the proxy skip the SNI check, and a
/// rustls server skips a warning alert. Refused now, for an allowed name too (no real client
/// sends a record before its hello).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_before_the_hello_is_refused() {
    let Some(s) = setup().await else { return };
    for (o, why) in
        [(Opening::AlertFirst, "alert record"), (Opening::CcsFirst, "change_cipher_spec")]
    {
        for sni in ["other.test", "allowed.test"] {
            let out = s.client("allowed.test:443", Some(sni), o).await;
            assert!(out.is_err(), "{o:?} {sni}: {out:?}");
        }
        let ev = s.denied(why).await;
        assert_eq!(ev.host, "allowed.test");
    }
    assert!(!s.origin.saw(Some("other.test")), "{:?}", s.origin.seen);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_name_is_refused_however_the_hello_is_split() {
    let Some(s) = setup().await else { return };
    for o in [Opening::Plain, Opening::Split(16), Opening::Split(1), Opening::ByteByByte] {
        let out = s.client("allowed.test:443", Some("other.test"), o).await;
        assert!(out.is_err(), "{o:?}: {out:?}");
    }
    s.denied("TLS server name other.test differs from the CONNECT host allowed.test").await;
    assert!(!s.origin.saw(Some("other.test")), "{:?}", s.origin.seen);
}

/// A second hello right behind an allowed one: the proxy reads only the first, and the server
/// must not take the second as the one that picks the site.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_hello_behind_an_allowed_one_reaches_no_other_site() {
    let Some(s) = setup().await else { return };
    let out =
        s.client("allowed.test:443", Some("allowed.test"), Opening::ThenHelloFor("other.test"));
    let out = out.await;
    assert!(!out.as_ref().is_ok_and(|b| b.contains("vhost=other.test")), "{out:?}");
    assert!(!s.origin.saw(Some("other.test")), "{:?}", s.origin.seen);
}

/// Without SNI the server answers as its default site, which the proxy cannot check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_without_a_name_is_refused_for_a_named_host() {
    let Some(s) = setup().await else { return };
    let out = s.client("allowed.test:443", None, Opening::Plain).await;
    assert!(out.is_err(), "{out:?}");
    s.denied("names no server (no SNI)").await;
    assert!(!s.origin.saw(None), "{:?}", s.origin.seen);
}

/// Port 443 carries TLS only: plain HTTP (whose Host header could name any site) is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_443_carries_only_tls() {
    let Some(s) = setup().await else { return };
    let out = raw(
        s.proxy,
        b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n\
          GET / HTTP/1.1\r\nHost: other.test\r\n\r\n",
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    s.denied("port 443 carries only TLS").await;
    // HTTP/2 with prior knowledge is not TLS either.
    let out = raw(
        s.proxy,
        b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n\
          PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    let refused =
        || s.events.all().iter().filter(|e| e.rule.contains("port 443 carries only TLS")).count();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while refused() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "{:?}", s.events.all());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // An SSLv2-format hello (no room for a name) on any port.
    let out = raw(
        s.proxy,
        &[
            &b"CONNECT allowed.test:8080 HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n"[..],
            &[0x80, 0x2e, 0x01, 0x03, 0x01, 0, 0x15],
        ]
        .concat(),
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    s.denied("SSLv2-format ClientHello").await;
}

/// TLS on a port that is not a TLS port is checked just the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_on_any_port_is_checked() {
    let Some(s) = setup().await else { return };
    let out = s.client("allowed.test:8080", Some("other.test"), Opening::AlertFirst).await;
    assert!(out.is_err(), "{out:?}");
    let ev = s.denied("alert record").await;
    assert_eq!(ev.port, 8080);
    let out = s.client("allowed.test:8080", Some("allowed.test"), Opening::Plain).await;
    assert!(out.as_ref().is_ok_and(|b| b.ends_with("vhost=allowed.test")), "{out:?}");
}

fn openssl_available() -> bool {
    std::process::Command::new("openssl").arg("version").output().is_ok_and(|o| o.status.success())
}

/// `openssl s_client -proxy`: the allowed name passes; another name and no name are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openssl_s_client_through_the_proxy() {
    if sandgate_test_support::skip_unless(openssl_available(), "openssl") {
        return;
    }
    let Some(s) = setup().await else { return };
    let run = |name: Option<&str>| {
        let mut cmd = tokio::process::Command::new("openssl");
        cmd.args(["s_client", "-quiet", "-verify_return_error", "-proxy"])
            .arg(s.proxy.to_string())
            .args(["-connect", "allowed.test:443", "-CAfile"])
            .arg(&s.origin.ca_file);
        match name {
            Some(n) => cmd.args(["-servername", n, "-verify_hostname", n]),
            None => cmd.arg("-noservername"),
        };
        let request = format!(
            "GET / HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            name.unwrap_or("allowed.test")
        );
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        async move {
            let mut child = cmd.spawn().unwrap();
            let mut stdin = child.stdin.take().unwrap();
            tokio::io::AsyncWriteExt::write_all(&mut stdin, request.as_bytes()).await.unwrap();
            drop(stdin);
            let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
                .await
                .expect("openssl s_client did not finish")
                .unwrap();
            (
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
    };
    let (out, err) = run(Some("allowed.test")).await;
    assert!(out.contains("vhost=allowed.test"), "stdout {out}\nstderr {err}");
    let (out, err) = run(Some("other.test")).await;
    assert!(!out.contains("vhost="), "stdout {out}\nstderr {err}");
    s.denied("TLS server name other.test differs").await;
    let (out, err) = run(None).await;
    assert!(!out.contains("vhost="), "stdout {out}\nstderr {err}");
    s.denied("names no server (no SNI)").await;
    assert!(!s.origin.saw(Some("other.test")) && !s.origin.saw(None), "{:?}", s.origin.seen);
}
