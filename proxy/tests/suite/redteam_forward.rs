//! Red team: HTTP request smuggling and authority tricks on the absolute-form forward path.
//! An origin on 127.0.0.1 records the `Host` of every request it parses; the sandbox may name
//! only `allowed.test`, so any other host reaching the origin is a bypass.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use crate::common::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use sandgate_proxy::Proxy;
use tokio::net::TcpListener;

type Seen = Arc<Mutex<Vec<String>>>;

/// An HTTP origin that records `METHOD host path body-len` of every request it parses.
async fn recording_origin() -> (SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let s2 = seen.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let seen = s2.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let host = req
                            .headers()
                            .get("host")
                            .and_then(|h| h.to_str().ok())
                            .unwrap_or("")
                            .to_owned();
                        let line = format!("{} {host} {}", req.method(), req.uri());
                        let body = req.into_body().collect().await.map(|b| b.to_bytes().len());
                        seen.lock().unwrap().push(format!("{line} {body:?}"));
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    (addr, seen)
}

fn proxy() -> Proxy {
    Proxy::builder().resolver(Arc::new(TestResolver)).build()
}

/// Every request that reached the origin named `allowed.test` (no other virtual host).
fn only_allowed(seen: &Seen) -> Vec<String> {
    let all = seen.lock().unwrap().clone();
    for s in &all {
        let mut parts = s.split(' ');
        let host = parts.nth(1).unwrap_or("").to_ascii_lowercase();
        let path = parts.next().unwrap_or("");
        // `allowed.test.` (trailing dot) is forwarded as written: the same site for the servers
        // tried here, noted in the red-team report.
        assert!(host.starts_with("allowed.test"), "another virtual host reached: {all:?}");
        assert_eq!(path, "/a", "a smuggled request reached the origin: {all:?}");
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_path_smuggling_reaches_no_other_host() {
    let (origin, seen) = recording_origin().await;
    let p = proxy();
    let addr = serve(&p, "rt", policy(&["allowed.test", "127.0.0.1"], &[])).await;
    let port = origin.port();
    let smuggled = "GET /smuggled HTTP/1.1\r\nHost: forbidden.test\r\n\r\n";
    let chunk = format!("{:x}\r\n{smuggled}\r\n0\r\n\r\n", smuggled.len());
    let attempts: Vec<String> = vec![
        // Host header disagrees with the URI authority.
        format!("GET http://allowed.test:{port}/a HTTP/1.1\r\nHost: forbidden.test\r\n\r\n"),
        // Two Host headers.
        format!(
            "GET http://allowed.test:{port}/a HTTP/1.1\r\nHost: allowed.test\r\nHost: forbidden.test\r\n\r\n"
        ),
        // CL.TE: the proxy and the origin could disagree on where the body ends.
        format!(
            "POST http://allowed.test:{port}/a HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n{chunk}"
        ),
        // TE.CL.
        format!(
            "POST http://allowed.test:{port}/a HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\nContent-Length: {}\r\n\r\n{chunk}",
            chunk.len()
        ),
        // Obfuscated transfer codings.
        format!(
            "POST http://allowed.test:{port}/a HTTP/1.1\r\nTransfer-Encoding: xchunked\r\nContent-Length: 4\r\n\r\n{chunk}"
        ),
        format!(
            "POST http://allowed.test:{port}/a HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n{chunk}"
        ),
        format!(
            "POST http://allowed.test:{port}/a HTTP/1.1\r\nTransfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n\r\n{chunk}"
        ),
        // Two different Content-Lengths.
        format!(
            "POST http://allowed.test:{port}/a HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: {}\r\n\r\n{smuggled}",
            smuggled.len()
        ),
        // Connection naming Content-Length / Host: hop-by-hop stripping removes them.
        format!(
            "POST http://allowed.test:{port}/a HTTP/1.1\r\nConnection: content-length, host\r\nContent-Length: {}\r\n\r\n{smuggled}",
            smuggled.len()
        ),
        // A body after a GET without length: the rest is the next request on the client side.
        format!("GET http://allowed.test:{port}/a HTTP/1.1\r\n\r\n{smuggled}"),
        // Pipelined: second request in origin-form after an absolute-form one.
        format!(
            "GET http://allowed.test:{port}/a HTTP/1.1\r\n\r\nGET http://forbidden.test:{port}/b HTTP/1.1\r\n\r\n"
        ),
        // Userinfo and percent-encoding in the authority.
        format!("GET http://forbidden.test@allowed.test:{port}/a HTTP/1.1\r\n\r\n"),
        format!("GET http://allowed.test%2eforbidden.test:{port}/a HTTP/1.1\r\n\r\n"),
        format!("GET http://allowed.test.:{port}/a HTTP/1.1\r\nHost: forbidden.test\r\n\r\n"),
        format!("GET http://ALLOWED.test:{port}/a HTTP/1.1\r\n\r\n"),
        // Absolute-form with an upgrade to take over the connection.
        format!(
            "GET http://allowed.test:{port}/a HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n{smuggled}"
        ),
        // HTTP/1.0 keep-alive.
        format!(
            "GET http://allowed.test:{port}/a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n{smuggled}"
        ),
        // Obsolete line folding of Host.
        format!("GET http://allowed.test:{port}/a HTTP/1.1\r\nX: y\r\n forbidden.test\r\n\r\n"),
    ];
    let runs: Vec<_> = attempts
        .iter()
        .map(|a| {
            let a = a.clone();
            tokio::spawn(async move { (raw(addr, a.as_bytes()).await, a) })
        })
        .collect();
    for r in runs {
        let (answer, a) = r.await.unwrap();
        eprintln!("--- {a:?}\n=> {:?}", answer.lines().next());
    }
    let all = only_allowed(&seen);
    eprintln!("origin saw: {all:#?}");
}
