//! The upstream (corporate) proxy path, against a test-made CONNECT relay that records what it
//! was asked: sandgate decides first, then leaves through the relay (with its credentials), but
//! for bypassed destinations; names sent upstream are not resolved locally.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::common::*;
use sandgate_config::{DomainName, DomainPattern, PatternUse};
use sandgate_proxy::{BoxFuture, Proxy, ProxyConfig, Resolver, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the relay was asked: (request line, Proxy-Authorization value).
type Asked = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A CONNECT relay: `*.test` names go to 127.0.0.1; `refused.test` gets a 403.
async fn relay() -> (SocketAddr, Asked) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let asked: Asked = Arc::default();
    let log = asked.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if s.read(&mut b).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(b[0]);
                }
                let text = String::from_utf8_lossy(&head).into_owned();
                let line = text.lines().next().unwrap_or("").to_owned();
                let auth = text
                    .lines()
                    .find_map(|l| l.strip_prefix("Proxy-Authorization: ").map(str::to_owned));
                log.lock().unwrap().push((line.clone(), auth));
                let target = line.split_whitespace().nth(1).unwrap_or("").to_owned();
                if target.starts_with("refused.test") {
                    let _ = s.write_all(b"HTTP/1.1 403 Forbidden by corp\r\n\r\n").await;
                    return;
                }
                let port = target.rsplit(':').next().unwrap_or("0").to_owned();
                let Ok(mut up) = TcpStream::connect(format!("127.0.0.1:{port}")).await else {
                    let _ = s.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                    return;
                };
                let _ = s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await;
                let _ = tokio::io::copy_bidirectional(&mut s, &mut up).await;
            });
        }
    });
    (addr, asked)
}

/// [`TestResolver`], counting the names it is asked about.
#[derive(Default)]
struct Counting(Mutex<Vec<String>>, AtomicUsize);

impl Resolver for Counting {
    fn resolve<'a>(
        &'a self,
        name: &'a DomainName,
        port: u16,
    ) -> BoxFuture<'a, std::io::Result<Vec<SocketAddr>>> {
        self.0.lock().unwrap().push(name.to_string());
        self.1.fetch_add(1, Ordering::SeqCst);
        TestResolver.resolve(name, port)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admitted_connections_leave_through_the_upstream_but_bypassed_ones() {
    let origin = http_origin().await;
    let (relay_addr, asked) = relay().await;
    let resolver = Arc::new(Counting::default());
    let upstream = Upstream {
        addr: relay_addr.to_string(),
        credentials: Some("corp:pw".into()),
        bypass: vec![DomainPattern::parse("bypass.test", PatternUse::Allow).unwrap()],
    };
    let p = Proxy::builder()
        .resolver(resolver.clone())
        .config(ProxyConfig { upstream: Some(Arc::new(upstream)), ..ProxyConfig::default() })
        .build();
    let allow = ["allowed.test", "bypass.test", "refused.test", "127.0.0.1"];
    let addr = serve(&p, "s1", policy(&allow, &["denied.test"])).await;
    let port = origin.port();
    let proxy = format!("http://{addr}");

    // Plain HTTP, a CONNECT tunnel and SOCKS5: all through the relay, by name, with credentials.
    let out = curl(&["-x", &proxy, &format!("http://allowed.test:{port}/plain")]).await;
    assert!(out.stdout.starts_with("origin says hello to /plain"), "{out:?}");
    let out = curl(&["-p", "-x", &proxy, &format!("http://allowed.test:{port}/tunnel")]).await;
    assert!(out.stdout.starts_with("origin says hello to /tunnel"), "{out:?}");
    let out =
        curl(&["--socks5-hostname", &addr.to_string(), &format!("http://allowed.test:{port}/s")])
            .await;
    assert!(out.stdout.starts_with("origin says hello to /s"), "{out:?}");
    {
        let a = asked.lock().unwrap();
        assert_eq!(a.len(), 3, "{a:?}");
        for (line, auth) in a.iter() {
            assert_eq!(line, &format!("CONNECT allowed.test:{port} HTTP/1.1"));
            assert_eq!(auth.as_deref(), Some("Basic Y29ycDpwdw=="));
        }
    }
    // Names sent upstream are the upstream's to resolve.
    assert_eq!(resolver.1.load(Ordering::SeqCst), 0, "{:?}", resolver.0.lock().unwrap());

    // Bypassed: directly (resolved and guarded here), the relay never hears of it.
    let out = curl(&["-x", &proxy, &format!("http://bypass.test:{port}/direct")]).await;
    assert!(out.stdout.starts_with("origin says hello to /direct"), "{out:?}");
    assert_eq!(*resolver.0.lock().unwrap(), ["bypass.test"]);
    // Refused by sandgate: the relay never hears of it either.
    let out = curl(&["-i", "-x", &proxy, "http://denied.test/"]).await;
    assert!(out.stdout.starts_with("HTTP/1.1 403"), "{out:?}");
    assert_eq!(asked.lock().unwrap().len(), 3);

    // Refused by the upstream: a 502 that says who refused.
    let out = curl(&["-i", "-x", &proxy, &format!("http://refused.test:{port}/")]).await;
    assert!(out.stdout.starts_with("HTTP/1.1 502"), "{out:?}");
    assert!(out.stdout.contains("Forbidden by corp"), "{out:?}");
}
