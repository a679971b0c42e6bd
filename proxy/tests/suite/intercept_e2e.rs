//! The `intercept` stage in process, with real curl: HTTP/2 end to end when the upstream speaks
//! it (and only then offered to the client), HTTP/1.1 otherwise, the secret injected either way.

use std::convert::Infallible;
use std::sync::Arc;

use crate::common::{Events, curl, policy, serve};
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject as _;
use sandgate_config::{
    DomainPattern, InterceptSettings, NetworkPolicy, Origin, PatternUse, Secret, SecretSource,
};
use sandgate_proxy::{Interceptor, Proxy};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

async fn echo(req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let auth = req.headers().get("authorization").and_then(|h| h.to_str().ok()).unwrap_or("-");
    Ok(Response::new(Full::new(Bytes::from(format!("{:?} auth={auth}\n", req.version())))))
}

/// An origin on 127.0.0.1 speaking the ALPN protocols `alpn` (h2 and/or http/1.1); returns its
/// port and its CA's PEM.
async fn origin(alpn: &[&[u8]]) -> (u16, String) {
    let (config, ca_pem) =
        crate::common::tls_server(&["127.0.0.1"], &format!("h2 test CA {}", alpn.len()), alpn);
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else { return };
                let svc = hyper::service::service_fn(echo);
                if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                }
            });
        }
    });
    (port, ca_pem)
}

async fn read_head(s: &mut tokio::net::TcpStream) -> String {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        assert_eq!(s.read(&mut b).await.unwrap(), 1, "closed: {}", String::from_utf8_lossy(&head));
        head.push(b[0]);
    }
    String::from_utf8(head).unwrap()
}

#[tokio::test]
async fn http2_end_to_end_only_when_the_upstream_speaks_it() {
    let have_curl = std::process::Command::new("curl").arg("--version").output().is_ok();
    if sandgate_test_support::skip_unless(have_curl, "curl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (h2_port, h2_ca) = origin(&[b"h2", b"http/1.1"]).await;
    let (h1_port, h1_ca) = origin(&[b"http/1.1"]).await;
    let roots = dir.path().join("roots.pem");
    std::fs::write(&roots, format!("{h2_ca}{h1_ca}")).unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "sk-h2-test-value").unwrap();
    let settings = InterceptSettings {
        secrets: vec![Secret {
            name: "k".into(),
            hosts: vec![DomainPattern::parse("127.0.0.1", PatternUse::Allow).unwrap()],
            header: "Authorization".into(),
            format: "Bearer {}".into(),
            env: None,
            anywhere: false,
            source: SecretSource::File(key),
            origin: Origin { path: "/test.toml".into(), line: 1 },
        }],
        extra_roots: vec![roots],
        ..InterceptSettings::default()
    };
    let base: NetworkPolicy = (*policy(&["127.0.0.1"], &[])).clone();
    let pol = Arc::new(base.with_intercept(Arc::new(settings)));
    let icpt = Arc::new(Interceptor::new(&dir.path().join("ca")).unwrap());
    let icpt_pem = icpt.ca_pem().to_owned();
    let ca_file = dir.path().join("sandgate-ca.pem");
    std::fs::write(&ca_file, icpt.ca_pem()).unwrap();
    let events = Arc::new(Events::default());
    let proxy = Proxy::builder().interceptor(icpt).events(events.clone()).build();
    let addr = serve(&proxy, "s1", pol).await;
    let proxy_url = format!("http://{addr}");
    let ca = ca_file.to_str().unwrap();
    let run = |port: u16, version: &'static str| {
        let url = format!("https://127.0.0.1:{port}/x");
        let proxy_url = proxy_url.clone();
        async move {
            curl(&[
                version,
                "-x",
                &proxy_url,
                "--cacert",
                ca,
                "-H",
                "Authorization: Bearer sandgate-placeholder-k",
                "-w",
                "curl=%{http_version}\n",
                &url,
            ])
            .await
        }
    };
    let c = run(h2_port, "--http2").await;
    assert_eq!(c.stdout, "HTTP/2.0 auth=Bearer sk-h2-test-value\ncurl=2\n", "{c:?}");
    let c = run(h2_port, "--http1.1").await;
    assert_eq!(c.stdout, "HTTP/1.1 auth=Bearer sk-h2-test-value\ncurl=1.1\n", "{c:?}");
    // The upstream speaks HTTP/1.1 only: the client is not offered h2.
    let c = run(h1_port, "--http2").await;
    assert_eq!(c.stdout, "HTTP/1.1 auth=Bearer sk-h2-test-value\ncurl=1.1\n", "{c:?}");
    // A CONNECT after a plain request on one keep-alive connection (the forwarding path's
    // upgrade) is intercepted the same way.
    let plain = crate::common::http_origin().await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET http://{plain}/ HTTP/1.1\r\nHost: {plain}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap();
    let mut body = vec![0; len];
    s.read_exact(&mut body).await.unwrap();
    s.write_all(
        format!("CONNECT 127.0.0.1:{h1_port} HTTP/1.1\r\nHost: 127.0.0.1:{h1_port}\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(icpt_pem.as_bytes()).unwrap())
        .unwrap();
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    let mut tls =
        tokio_rustls::TlsConnector::from(Arc::new(client)).connect(name, s).await.unwrap();
    tls.write_all(
        format!("GET /x HTTP/1.1\r\nHost: 127.0.0.1:{h1_port}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    let _ = tls.read_to_string(&mut out).await;
    assert!(out.ends_with("HTTP/1.1 auth=Bearer sk-h2-test-value\n"), "{out}");

    let all = events.all();
    assert!(all.iter().any(|e| e.method == "GET" && e.rule.contains("intercepted")), "{all:?}");
    // Intercepted requests count their bytes like forwarded ones.
    assert!(all.iter().any(|e| e.method == "GET" && e.bytes_down > 0), "{all:?}");
    assert!(!format!("{all:?}").contains("sk-h2-test-value"), "{all:?}");
}
