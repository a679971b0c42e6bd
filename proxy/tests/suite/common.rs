//! End-to-end tests (docs are on the test functions).
//! Shared harness: origin servers on 127.0.0.1 (HTTP, TLS with a CA made here), a proxy with a
//! fake resolver, and real `curl`.

#![allow(dead_code, missing_docs)]

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use sandgate_config::{
    DomainName, DomainPattern, NetMode, NetworkPolicy, PatternUse, Rule, RuleSource,
};
use sandgate_proxy::{
    BoxFuture, EventSink, Proxy, ProxyEvent, Resolver, SandboxContext, SandboxId,
};
use tokio::net::TcpListener;

/// Names under `.test` resolve to 127.0.0.1; anything else does not resolve.
pub struct TestResolver;

impl Resolver for TestResolver {
    fn resolve<'a>(
        &'a self,
        name: &'a DomainName,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        Box::pin(async move {
            if name.as_str().ends_with(".test") {
                Ok(vec![SocketAddr::from(([127, 0, 0, 1], port))])
            } else {
                Err(io::Error::new(io::ErrorKind::NotFound, format!("{name}: unknown test name")))
            }
        })
    }
}

/// Collects events.
#[derive(Default)]
pub struct Events(pub Mutex<Vec<ProxyEvent>>);

impl EventSink for Events {
    fn record(&self, e: ProxyEvent) {
        self.0.lock().unwrap().push(e);
    }
}

impl Events {
    pub fn all(&self) -> Vec<ProxyEvent> {
        self.0.lock().unwrap().clone()
    }
}

/// Collects events after a 50 ms pause each, as a busy subscriber would take them: an event
/// recorded after the client was answered is then missing when the client has its answer.
#[derive(Default)]
pub struct SlowEvents(pub Events);

impl EventSink for SlowEvents {
    fn record(&self, e: ProxyEvent) {
        std::thread::sleep(std::time::Duration::from_millis(50));
        self.0.record(e);
    }
}

fn rules(patterns: &[&str], usage: PatternUse) -> Vec<Rule> {
    patterns
        .iter()
        .map(|p| Rule {
            pattern: Some(DomainPattern::parse(p, usage).unwrap()),
            source: RuleSource::CommandLine,
        })
        .collect()
}

/// A proxy policy allowing and denying these patterns.
pub fn policy(allow: &[&str], deny: &[&str]) -> Arc<NetworkPolicy> {
    Arc::new(NetworkPolicy::new(
        "net",
        NetMode::Proxy,
        rules(allow, PatternUse::Allow),
        rules(deny, PatternUse::Deny),
    ))
}

/// Serves `proxy` for a sandbox on a fresh 127.0.0.1 port.
pub async fn serve(proxy: &Proxy, id: &str, policy: Arc<NetworkPolicy>) -> SocketAddr {
    serve_ctx(proxy, SandboxContext { id: SandboxId::new(id), policy, token: None }).await
}

pub async fn serve_ctx(proxy: &Proxy, ctx: SandboxContext) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let proxy = proxy.clone();
    tokio::spawn(async move { proxy.serve(listener, ctx).await });
    addr
}

async fn hello(req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let host = req.headers().get("host").and_then(|h| h.to_str().ok()).unwrap_or("").to_owned();
    let leaked = req.headers().contains_key("proxy-authorization");
    Ok(Response::new(Full::new(Bytes::from(format!(
        "origin says hello to {} at {host} (proxy-authorization leaked: {leaked})",
        req.uri()
    )))))
}

/// A plain HTTP origin on 127.0.0.1.
pub async fn http_origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), hyper::service::service_fn(hello))
                    .await;
            });
        }
    });
    addr
}

/// A TLS origin on 127.0.0.1 with a certificate for `names`, and the CA file for curl.
pub struct TlsOrigin {
    pub addr: SocketAddr,
    pub ca_file: PathBuf,
    _dir: tempfile::TempDir,
}

/// A fresh CA named `ca_name` and a server configuration for a leaf it signed for `names`,
/// offering the ALPN protocols `alpn`: what a test's TLS origin serves, and the CA's PEM its
/// clients trust.
pub fn tls_server(names: &[&str], ca_name: &str, alpn: &[&[u8]]) -> (rustls::ServerConfig, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::default();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name.push(rcgen::DnType::CommonName, ca_name);
    let ca = ca.self_signed(&ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf =
        rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap()
            .signed_by(&leaf_key, &ca, &ca_key)
            .unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![leaf.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
    )
    .unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    (config, ca.pem())
}

pub async fn tls_origin(names: &[&str]) -> TlsOrigin {
    let (config, ca_pem) = tls_server(names, "sandgate test CA", &[]);
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca_pem).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else { return };
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), hyper::service::service_fn(hello))
                    .await;
            });
        }
    });
    TlsOrigin { addr, ca_file, _dir: dir }
}

/// What curl printed and how it ended.
#[derive(Debug)]
pub struct Curl {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs curl with `args` (silent, with errors shown, 20 s limit).
pub async fn curl(args: &[&str]) -> Curl {
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--max-time", "20", "--noproxy", ""])
        .args(args)
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .output()
        .await
        .expect("curl must be installed");
    Curl {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Sends raw bytes to `addr` and returns everything it answers until it closes.
pub async fn raw(addr: SocketAddr, bytes: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads from `s` until `buf` holds a whole request head (through the blank line); returns the
/// head as text and leaves what follows it (a body, the next request) in `buf`. `None` when the
/// peer closes or fails first. For the hand-written origins of the relay tests.
pub async fn read_head(s: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    use tokio::io::AsyncReadExt as _;
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut b = [0u8; 4096];
        match s.read(&mut b).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&b[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    buf.drain(..end);
    Some(head)
}

/// A DNS query for `name` (recursion desired; with an EDNS record offering 65,000 bytes when
/// `edns`).
pub fn dns_query(name: &str, qtype: hickory_proto::rr::RecordType, id: u16, edns: bool) -> Vec<u8> {
    use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
    let mut m = Message::new(id, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(hickory_proto::rr::Name::from_ascii(name).unwrap(), qtype));
    if edns {
        let mut e = Edns::new();
        e.set_max_payload(65000);
        m.set_edns(e);
    }
    m.to_vec().unwrap()
}

/// Sends `bytes` to the DNS stub at `to` over UDP; its answer, or `None` after 2 s (no answer is
/// the answer to some inputs).
pub async fn dns_ask_udp(to: SocketAddr, bytes: &[u8]) -> Option<hickory_proto::op::Message> {
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.send_to(bytes, to).await.unwrap();
    let mut buf = vec![0u8; 65536];
    match tokio::time::timeout(std::time::Duration::from_secs(2), sock.recv(&mut buf)).await {
        Ok(Ok(n)) => Some(hickory_proto::op::Message::from_vec(&buf[..n]).unwrap()),
        _ => None,
    }
}

/// The A and AAAA addresses of an answer.
pub fn dns_addrs(m: &hickory_proto::op::Message) -> Vec<std::net::IpAddr> {
    use hickory_proto::rr::RData;
    m.answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(std::net::IpAddr::V4(a.0)),
            RData::AAAA(a) => Some(std::net::IpAddr::V6(a.0)),
            _ => None,
        })
        .collect()
}
