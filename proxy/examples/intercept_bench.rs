//! Interception benchmark (run by `bench/intercept.sh`), everything on 127.0.0.1: an HTTPS origin
//! (HTTP/1.1), the proxy with one policy that intercepts the origin (a secret injected, an HTTP
//! rule checked) and one that tunnels it, and a client. Prints added latency p50/p99 of a small
//! GET through each, on a new connection (CONNECT + TLS + GET) and on a kept-alive one, and the
//! throughput of one download of SIZE bytes through each.
//!
//! Usage: intercept_bench [NEW_SAMPLES] [KEEPALIVE_SAMPLES] [DOWNLOAD_BYTES]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Frame;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use sandgate_config::{
    DomainPattern, HttpRule, HttpRules, InterceptSettings, NetMode, NetworkPolicy, Origin,
    PatternUse, Rule, RuleSource, Secret, SecretSource,
};
use sandgate_proxy::{EventSink, Interceptor, Proxy, ProxyEvent, SandboxContext, SandboxId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type OriginBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

struct Quiet;
impl EventSink for Quiet {
    fn record(&self, _e: ProxyEvent) {}
}

async fn respond(req: Request<hyper::body::Incoming>) -> Result<Response<OriginBody>, Infallible> {
    let n: u64 =
        req.uri().path().strip_prefix("/bytes/").and_then(|n| n.parse().ok()).unwrap_or(16);
    let chunk = Bytes::from(vec![b'x'; 256 * 1024]);
    let stream = futures_stream(n, chunk);
    let mut resp = Response::new(stream.boxed());
    resp.headers_mut().insert("content-length", n.into());
    Ok(resp)
}

/// A body of `n` bytes in chunks, without a futures dependency.
fn futures_stream(
    n: u64,
    chunk: Bytes,
) -> impl hyper::body::Body<Data = Bytes, Error = Infallible> + Send + 'static {
    struct S {
        left: u64,
        chunk: Bytes,
    }
    impl hyper::body::Body for S {
        type Data = Bytes;
        type Error = Infallible;
        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            if self.left == 0 {
                return std::task::Poll::Ready(None);
            }
            let k = self.left.min(self.chunk.len() as u64) as usize;
            self.left -= k as u64;
            std::task::Poll::Ready(Some(Ok(Frame::data(self.chunk.slice(..k)))))
        }
    }
    S { left: n, chunk }
}

fn tls_pair() -> (rustls::ServerConfig, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::default();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name.push(rcgen::DnType::CommonName, "bench origin CA");
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![leaf.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
    .unwrap();
    (config, ca.pem())
}

fn client_config(ca_pems: &[&str]) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for pem in ca_pems {
        for c in rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
    }
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

/// CONNECT through `proxy` to `origin`, TLS, HTTP/1.1.
async fn open(proxy: SocketAddr, origin: SocketAddr, tls: &Arc<rustls::ClientConfig>) -> Sender {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.set_nodelay(true).unwrap();
    s.write_all(format!("CONNECT {origin} HTTP/1.1\r\nHost: {origin}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = Vec::new();
    while !buf.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        assert_eq!(s.read(&mut b).await.unwrap(), 1, "proxy closed during CONNECT");
        buf.push(b[0]);
    }
    assert!(buf.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf));
    let name = rustls::pki_types::ServerName::IpAddress(origin.ip().into());
    let tls = tokio_rustls::TlsConnector::from(tls.clone()).connect(name, s).await.unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);
    sender
}

async fn get(sender: &mut Sender, origin: SocketAddr, path: &str) -> u64 {
    sender.ready().await.unwrap();
    let req = Request::get(path).header("host", origin.to_string()).body(Empty::new()).unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    let mut body = resp.into_body();
    let mut n = 0;
    while let Some(f) = body.frame().await {
        if let Some(d) = f.unwrap().data_ref() {
            n += d.len() as u64;
        }
    }
    n
}

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    v[((v.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e6
}

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let new_n = *args.first().unwrap_or(&300) as usize;
    let ka_n = *args.get(1).unwrap_or(&3000) as usize;
    let size = *args.get(2).unwrap_or(&(1 << 30));
    let dir = tempfile::tempdir().unwrap();

    // The origin on its own runtime thread.
    let (server, origin_ca) = tls_pair();
    let origin_rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let origin: SocketAddr = origin_rt.block_on(async {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let _ = s.set_nodelay(true);
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(s).await else { return };
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), hyper::service::service_fn(respond))
                        .await;
                });
            }
        });
        addr
    });

    // The proxy on its own runtime: sandbox "t" tunnels, sandbox "i" intercepts.
    let roots = dir.path().join("roots.pem");
    std::fs::write(&roots, &origin_ca).unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "sk-bench-value").unwrap();
    let host = DomainPattern::parse("127.0.0.1", PatternUse::Allow).unwrap();
    let settings = InterceptSettings {
        secrets: vec![Secret {
            name: "k".into(),
            hosts: vec![host.clone()],
            header: "Authorization".into(),
            format: "Bearer {}".into(),
            env: None,
            anywhere: false,
            source: SecretSource::File(key),
            origin: Origin { path: "/bench.toml".into(), line: 1 },
        }],
        http_rules: vec![HttpRules {
            host: host.clone(),
            allow: vec![HttpRule::parse("GET /**").unwrap()],
            origin: Origin { path: "/bench.toml".into(), line: 2 },
        }],
        extra_roots: vec![roots],
        ..InterceptSettings::default()
    };
    let allow = vec![Rule { pattern: Some(host), source: RuleSource::CommandLine }];
    let plain = Arc::new(NetworkPolicy::new("net", NetMode::Proxy, allow.clone(), Vec::new()));
    let intercepting = Arc::new(
        NetworkPolicy::new("net", NetMode::Proxy, allow, Vec::new())
            .with_intercept(Arc::new(settings)),
    );
    let icpt = Arc::new(Interceptor::new(&dir.path().join("ca")).unwrap());
    let sandgate_ca = icpt.ca_pem().to_owned();
    let proxy_rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let (tunnel_at, intercept_at) = proxy_rt.block_on(async {
        let proxy = Proxy::builder().interceptor(icpt).events(Arc::new(Quiet)).build();
        let mut out = Vec::new();
        for (id, policy) in [("t", plain), ("i", intercepting)] {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            out.push(l.local_addr().unwrap());
            let p = proxy.clone();
            let ctx = SandboxContext { id: SandboxId::new(id), policy, token: None };
            tokio::spawn(async move { p.serve(l, ctx).await });
        }
        (out[0], out[1])
    });

    let client = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    client.block_on(async {
        let direct_tls = client_config(&[&origin_ca]);
        let intercept_tls = client_config(&[&sandgate_ca]);
        let runs =
            [("tunnel", tunnel_at, &direct_tls), ("intercepted", intercept_at, &intercept_tls)];
        // Warm up (leaf certificate made, pools filled).
        for (_, proxy, tls) in &runs {
            let mut s = open(*proxy, origin, tls).await;
            get(&mut s, origin, "/small").await;
        }
        println!("latency of a 16-byte GET through the proxy, microseconds (p50 / p99):");
        let mut new_lat: Vec<Vec<Duration>> = vec![Vec::new(), Vec::new()];
        for _ in 0..new_n {
            for (i, (_, proxy, tls)) in runs.iter().enumerate() {
                let t = Instant::now();
                let mut s = open(*proxy, origin, tls).await;
                get(&mut s, origin, "/small").await;
                new_lat[i].push(t.elapsed());
            }
        }
        let mut ka_lat: Vec<Vec<Duration>> = vec![Vec::new(), Vec::new()];
        let mut conns = Vec::new();
        for (_, proxy, tls) in &runs {
            conns.push(open(*proxy, origin, tls).await);
        }
        for _ in 0..ka_n {
            for (i, c) in conns.iter_mut().enumerate() {
                let t = Instant::now();
                get(c, origin, "/small").await;
                ka_lat[i].push(t.elapsed());
            }
        }
        for (i, (name, _, _)) in runs.iter().enumerate() {
            println!(
                "  {name:12} new connection {:8.0} / {:8.0}   keep-alive {:6.0} / {:6.0}",
                pct(&mut new_lat[i], 0.5),
                pct(&mut new_lat[i], 0.99),
                pct(&mut ka_lat[i], 0.5),
                pct(&mut ka_lat[i], 0.99)
            );
        }
        println!(
            "  added by interception (p50): new connection {:.0}, keep-alive {:.0}",
            pct(&mut new_lat[1], 0.5) - pct(&mut new_lat[0], 0.5),
            pct(&mut ka_lat[1], 0.5) - pct(&mut ka_lat[0], 0.5)
        );
        let ratio = pct(&mut ka_lat[1], 0.5) / pct(&mut ka_lat[0], 0.5);
        println!("  keep-alive p50 intercepted / tunnel: {ratio:.2}x (aim: within 2x)");
        for (name, proxy, tls) in &runs {
            let mut s = open(*proxy, origin, tls).await;
            let t = Instant::now();
            let n = get(&mut s, origin, &format!("/bytes/{size}")).await;
            assert_eq!(n, size);
            let secs = t.elapsed().as_secs_f64();
            println!("  {name:12} one {size}-byte download: {:.0} MB/s", size as f64 / secs / 1e6);
        }
    });
}
