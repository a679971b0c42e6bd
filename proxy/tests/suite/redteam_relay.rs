//! Red team: the plain-HTTP relay (`relay.rs`). Request smuggling toward the origin, decision
//! bypass on a keep-alive connection, hop-by-hop headers, pool poisoning, a request replayed
//! upstream, and the one event per request. Origins run on 127.0.0.1 only.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use crate::common::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use sandgate_proxy::{Outcome, Proxy, SandboxContext, SandboxId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

type Seen = Arc<Mutex<Vec<String>>>;

/// A hyper origin that records `METHOD host uri body` of every request it parses (and whether a
/// Proxy-Authorization header reached it).
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
                        let h = |n: &str| {
                            req.headers()
                                .get(n)
                                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                        };
                        let host = h("host").unwrap_or_default();
                        let pa = h("proxy-authorization").is_some();
                        let line = format!("{} {host} {} pa={pa}", req.method(), req.uri());
                        let body = req.into_body().collect().await.map(|b| b.to_bytes());
                        let body = body.map(|b| String::from_utf8_lossy(&b).into_owned());
                        seen.lock().unwrap().push(format!("{line} {}", body.unwrap_or_default()));
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

async fn proxy_for(id: &str, token: Option<&str>) -> (SocketAddr, Arc<Events>) {
    let events = Arc::new(Events::default());
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).events(events.clone()).build();
    let ctx = SandboxContext {
        id: SandboxId::new(id),
        policy: policy(&["allowed.test", "127.0.0.1"], &["denied.test"]),
        token: token.map(sandgate_proxy::ProxyToken::new),
    };
    let addr = serve_ctx(&p, ctx).await;
    std::mem::forget(p);
    (addr, events)
}

/// Two sandboxes served by ONE proxy (one upstream pool), both allowed `allowed.test`.
async fn two_sandboxes(a: &str, b: &str) -> (SocketAddr, SocketAddr) {
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).build();
    let pol = || policy(&["allowed.test", "127.0.0.1"], &["denied.test"]);
    let (a, b) = (serve(&p, a, pol()).await, serve(&p, b, pol()).await);
    std::mem::forget(p);
    (a, b)
}

async fn wait_for<T>(mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "condition not reached within 20s");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Every framing and authority trick, each on its own connection: the origin sees only
/// `allowed.test` at `/a`, with the body the proxy framed, never a second (smuggled) request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_smuggling_and_authority_tricks_reach_only_the_decided_request() {
    let (origin, seen) = recording_origin().await;
    let (addr, _events) = proxy_for("rr-smuggle", None).await;
    let port = origin.port();
    let a = format!("http://allowed.test:{port}/a");
    let sm = "GET /smuggled HTTP/1.1\r\nHost: forbidden.test\r\n\r\n";
    let n = sm.len();
    let chunk = format!("{n:x}\r\n{sm}\r\n0\r\n\r\n");
    let attempts: Vec<String> = vec![
        // Content-Length spellings.
        format!("POST {a} HTTP/1.1\r\nContent-Length: 0{n}\r\n\r\n{sm}"),
        format!("POST {a} HTTP/1.1\r\nContent-Length: 000\r\n\r\n{sm}"),
        format!("POST {a} HTTP/1.1\r\nContent-Length: +{n}\r\n\r\n{sm}"),
        format!("POST {a} HTTP/1.1\r\nContent-Length:  {n} \r\n\r\n{sm}"),
        format!("POST {a} HTTP/1.1\r\nContent-Length: {n} 0\r\n\r\n{sm}"),
        format!("POST {a} HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: {n}\r\n\r\n{sm}"),
        format!("POST {a} HTTP/1.1\r\nContent-Length: {n}\r\nContent-Length: {n}\r\n\r\n{sm}"),
        format!("POST {a} HTTP/1.1\r\ncontent-length: 0\r\nCONTENT-LENGTH: {n}\r\n\r\n{sm}"),
        // CL on GET: the body is the body, not a second request.
        format!("GET {a} HTTP/1.1\r\nContent-Length: {n}\r\n\r\n{sm}"),
        // CL with TE in any case / place.
        format!(
            "POST {a} HTTP/1.1\r\nContent-Length: 4\r\ntransfer-encoding: chunked\r\n\r\n{chunk}"
        ),
        format!(
            "POST {a} HTTP/1.1\r\nContent-Length: 4\r\nTRANSFER-ENCODING: CHUNKED\r\n\r\n{chunk}"
        ),
        format!(
            "POST {a} HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding:\tchunked\r\n\r\n{chunk}"
        ),
        format!(
            "POST {a} HTTP/1.1\r\nContent-Length: 4\r\nX: y\r\n Transfer-Encoding: chunked\r\n\r\n{chunk}"
        ),
        format!(
            "POST {a} HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding : chunked\r\n\r\n{chunk}"
        ),
        format!(
            "POST {a} HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding\t: chunked\r\n\r\n{chunk}"
        ),
        format!("POST {a} HTTP/1.1\r\nContent-Length : {n}\r\n\r\n{sm}"),
        // NUL, CR, obs-text in names and values.
        format!(
            "POST {a} HTTP/1.1\r\nContent-Length: 4\r\nX: a\0\r\nTransfer-Encoding: chunked\r\n\r\n{chunk}"
        ),
        format!("POST {a} HTTP/1.1\r\nX: a\rContent-Length: {n}\r\n\r\n{sm}"),
        format!("POST {a} HTTP/1.1\r\nX\u{e9}: 1\r\nContent-Length: {n}\r\n\r\n{sm}"),
        format!("GET {a} HTTP/1.1\r\nX: caf\u{e9}\r\n\r\n"),
        // Bare LF as the end of the head, or inside it.
        format!("GET {a} HTTP/1.1\r\nX: 1\n\n{sm}"),
        format!("GET {a} HTTP/1.1\nContent-Length: {n}\r\n\r\n{sm}"),
        // Authority tricks: userinfo, percent-encoding, zone, backslash, Host disagreeing.
        format!("GET http://allowed.test@forbidden.test:{port}/a HTTP/1.1\r\n\r\n"),
        format!("GET http://allowed.test:80@forbidden.test:{port}/a HTTP/1.1\r\n\r\n"),
        format!("GET http://allowed.test:{port}@forbidden.test/a HTTP/1.1\r\n\r\n"),
        format!("GET http://forbidden%2etest:{port}/a HTTP/1.1\r\n\r\n"),
        format!("GET http://allowed%2etest:{port}/a HTTP/1.1\r\n\r\n"),
        format!("GET http://forbidden.test\\@allowed.test:{port}/a HTTP/1.1\r\n\r\n"),
        format!("GET http://[::1%25lo]:{port}/a HTTP/1.1\r\n\r\n"),
        format!("GET http://allowed.test:{port}/a HTTP/1.1\r\nHost: forbidden.test\r\n\r\n"),
        format!("GET http://ALLOWED.TEST.:{port}/a HTTP/1.1\r\nHost: forbidden.test\r\n\r\n"),
        format!("GET HTTP://allowed.test:{port}/a HTTP/1.1\r\n\r\n"),
        // Origin-form with and without Host after a relayed request (pipelined).
        format!("GET {a} HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\nHost: forbidden.test\r\n\r\n"),
        format!("GET {a} HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n"),
        // A pipelined second request that is malformed, then one for another host.
        format!(
            "GET {a} HTTP/1.1\r\n\r\nPOST {a} HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n{chunk}"
        ),
        format!(
            "GET {a} HTTP/1.1\r\n\r\nGET {a} HTTP/1.1\r\nX: \0\r\n\r\nGET http://forbidden.test:{port}/a HTTP/1.1\r\n\r\n"
        ),
        format!(
            "GET {a} HTTP/1.1\r\n\r\nGET http://denied.test:{port}/a HTTP/1.1\r\n\r\nGET http://forbidden.test:{port}/a HTTP/1.1\r\n\r\n"
        ),
        // Connection naming what frames the request.
        format!(
            "POST {a} HTTP/1.1\r\nConnection: content-length, host\r\nContent-Length: {n}\r\n\r\n{sm}"
        ),
        format!(
            "POST {a} HTTP/1.1\r\nConnection: content-length\r\nContent-Length: {n}\r\n\r\n{sm}"
        ),
        // Very many headers.
        format!("POST {a} HTTP/1.1\r\n{}Content-Length: {n}\r\n\r\n{sm}", "X: 1\r\n".repeat(99)),
        format!("POST {a} HTTP/1.1\r\n{}Content-Length: {n}\r\n\r\n{sm}", "X: 1\r\n".repeat(150)),
    ];
    let runs: Vec<_> = attempts
        .iter()
        .map(|req| {
            let req = req.clone();
            tokio::spawn(async move { (raw(addr, req.as_bytes()).await, req) })
        })
        .collect();
    for r in runs {
        let (answer, req) = r.await.unwrap();
        eprintln!("--- {req:?}\n=> {:?}", answer.lines().next());
    }
    let all = seen.lock().unwrap().clone();
    eprintln!("origin saw: {all:#?}");
    for s in &all {
        let mut parts = s.splitn(5, ' ');
        let (_method, host, uri) = (parts.next(), parts.next().unwrap(), parts.next().unwrap());
        let body = parts.nth(1).unwrap_or("");
        assert!(host.to_ascii_lowercase().starts_with("allowed.test"), "other host: {all:#?}");
        assert_eq!(uri, "/a", "a smuggled request reached the origin: {all:#?}");
        assert!(body.is_empty() || body == sm, "a body framed differently: {all:#?}");
    }
}

/// A request's head delivered one byte at a time, then with the body: the origin sees the one
/// request, and the decision is the URI's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_trickled_byte_by_byte_is_one_request() {
    let (origin, seen) = recording_origin().await;
    let (addr, events) = proxy_for("rr-trickle", None).await;
    let port = origin.port();
    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    c.set_nodelay(true).unwrap();
    // The first head goes to conn.rs, the second to the relay's own reader: trickle both.
    let req = format!(
        "GET http://allowed.test:{port}/a HTTP/1.1\r\nHost: forbidden.test\r\n\r\n\
         POST http://allowed.test:{port}/a HTTP/1.1\r\nContent-Length: 3\r\nConnection: close\r\n\r\nxyz"
    );
    for b in req.as_bytes() {
        c.write_all(&[*b]).await.unwrap();
        tokio::task::yield_now().await;
    }
    let mut out = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), c.read_to_end(&mut out)).await;
    let out = String::from_utf8_lossy(&out);
    assert_eq!(out.matches("HTTP/1.1 200").count(), 2, "{out}");
    let host = format!("allowed.test:{port}");
    assert_eq!(
        seen.lock().unwrap().clone(),
        [format!("GET {host} /a pa=false "), format!("POST {host} /a pa=false xyz")]
    );
    let ev = wait_for(|| {
        let all = events.all();
        (all.len() == 2).then_some(all)
    })
    .await;
    assert_eq!(ev[1].bytes_up, 3, "{ev:?}");
}

/// One keep-alive connection: allowed, denied, unresolvable, allowed again, CONNECT to a denied
/// host, and a request with the sandbox token's header that names it hop-by-hop. Each request is
/// decided on its own, has exactly one event naming its host, method and path, and the token
/// never reaches the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_of_a_relayed_connection_is_decided_and_logged_once() {
    let (origin, seen) = recording_origin().await;
    let (addr, events) = proxy_for("rr-decide", Some("s3cret")).await;
    let port = origin.port();
    // "Basic x:s3cret"
    let pa = "Proxy-Authorization: Basic eDpzM2NyZXQ=\r\n";
    let req = [
        format!("GET http://allowed.test:{port}/a HTTP/1.1\r\n{pa}\r\n"),
        format!("GET http://denied.test:{port}/d HTTP/1.1\r\n{pa}\r\n"),
        format!("GET http://nowhere.invalid:{port}/u HTTP/1.1\r\n{pa}\r\n"),
        format!("GET http://allowed.test:{port}/a HTTP/1.1\r\nHost: x\r\n\r\n"),
        format!(
            "POST http://allowed.test:{port}/a HTTP/1.1\r\nConnection: keep-alive, Proxy-Authorization\r\n{pa}Content-Length: 2\r\n\r\nhi"
        ),
        format!("CONNECT denied.test:{port} HTTP/1.1\r\n{pa}\r\n"),
    ]
    .concat();
    let out = raw(addr, req.as_bytes()).await;
    eprintln!("{out}");
    let all = seen.lock().unwrap().clone();
    let host = format!("allowed.test:{port}");
    // The fourth request had no token: refused (407), never forwarded.
    assert_eq!(all, [format!("GET {host} /a pa=false "), format!("POST {host} /a pa=false hi")]);
    let ev = wait_for(|| {
        let all = events.all();
        (all.len() == 6).then_some(all)
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let ev2 = events.all();
    assert_eq!(ev2.len(), 6, "exactly one event per request: {ev2:#?}");
    let got: Vec<(&str, &str, Option<&str>, Outcome)> = ev
        .iter()
        .map(|e| (e.method.as_str(), e.host.as_str(), e.path.as_deref(), e.decision))
        .collect();
    assert_eq!(got[0], ("GET", "allowed.test", Some("/a"), Outcome::Allow), "{ev:#?}");
    assert_eq!((got[1].1, got[1].3), ("denied.test", Outcome::Deny), "{ev:#?}");
    assert_eq!(got[2].1, "nowhere.invalid", "{ev:#?}");
    assert_ne!(got[2].3, Outcome::Allow, "{ev:#?}");
    assert_ne!(got[3].3, Outcome::Allow, "{ev:#?}");
    assert_eq!(got[4], ("POST", "allowed.test", Some("/a"), Outcome::Allow), "{ev:#?}");
    assert_eq!(ev[4].bytes_up, 2, "{ev:#?}");
    assert_eq!(ev[4].bytes_down, 2, "{ev:#?}");
    assert_eq!((got[5].0, got[5].1, got[5].3), ("CONNECT", "denied.test", Outcome::Deny));
}

/// An origin that answers each first request on a connection and closes the connection after
/// reading the second one without answering (it crashed, or it is a trap). Records every request
/// line it reads.
async fn closing_origin() -> (SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let s2 = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let seen = s2.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                for i in 0.. {
                    let Some(head) = crate::common::read_head(&mut s, &mut buf).await else {
                        return;
                    };
                    let line = head.lines().next().unwrap_or("").to_owned();
                    seen.lock().unwrap().push(line.clone());
                    if i > 0 || line.starts_with("POST") {
                        // Read, acted on, never answered.
                        return;
                    }
                    let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
                }
            });
        }
    });
    (addr, seen)
}

/// A POST (no body) that the origin read and then closed on without answering is not sent a
/// second time on a new connection: the origin must see each request the sandbox made once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_reached_the_origin_is_not_replayed() {
    let (origin, seen) = closing_origin().await;
    let (addr, _events) = proxy_for("rr-replay", None).await;
    let port = origin.port();
    // Fills the pool with a connection that answered once.
    let out = raw(
        addr,
        format!("GET http://allowed.test:{port}/warm HTTP/1.1\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    let out = raw(
        addr,
        format!(
            "POST http://allowed.test:{port}/pay HTTP/1.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 502"), "{out}");
    let posts = seen.lock().unwrap().iter().filter(|l| l.starts_with("POST")).count();
    assert_eq!(posts, 1, "the POST was replayed: {:?}", seen.lock().unwrap());
    // A GET (safe) is still retried on a fresh connection when the pooled one closed under it.
    let warm = format!("GET http://allowed.test:{port}/warm HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert!(raw(addr, warm.as_bytes()).await.starts_with("HTTP/1.1 200"));
    let out = raw(addr, warm.replace("/warm", "/again").as_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    let again = seen.lock().unwrap().iter().filter(|l| l.starts_with("GET /again")).count();
    assert_eq!(again, 2, "{:?}", seen.lock().unwrap());
}

/// An origin whose answers carry bytes past their end (a 204 or a HEAD answer with a body, a
/// Content-Length shorter than what it sent, a 1xx then the final answer then more): those bytes
/// never reach another request, neither of this sandbox nor of another sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_response_bytes_do_not_reach_another_sandbox() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let Some(head) = crate::common::read_head(&mut s, &mut buf).await else {
                        return;
                    };
                    let path = head.split(' ').nth(1).unwrap_or("").to_owned();
                    let evil = "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled";
                    let reply = match path.as_str() {
                        "/204" => format!("HTTP/1.1 204 No Content\r\n\r\n{evil}"),
                        "/head" => format!("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc{evil}"),
                        "/short" => format!("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx{evil}"),
                        "/1xx" => format!(
                            "HTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\ny{evil}"
                        ),
                        _ => "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nclean".to_owned(),
                    };
                    if s.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let (a, b) = two_sandboxes("rr-pool-a", "rr-pool-b").await;
    for path in ["/204", "/head", "/short", "/1xx"] {
        let method = if path == "/head" { "HEAD" } else { "GET" };
        let out = raw(
            a,
            format!("{method} http://allowed.test:{port}{path} HTTP/1.1\r\n\r\nGET http://allowed.test:{port}/n HTTP/1.1\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await;
        assert!(!out.contains("smuggled") && out.ends_with("clean"), "{path}: {out}");
        let out = raw(
            b,
            format!("GET http://127.0.0.1:{port}/n HTTP/1.1\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await;
        assert!(!out.contains("smuggled") && out.ends_with("clean"), "{path}: {out}");
    }
}

/// An absolute URL with a query but no path (`http://host?x`) reaches the origin as a valid
/// origin-form target (`/?x`), and the event names that path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_without_a_path_is_sent_as_origin_form() {
    let (origin, seen) = closing_origin().await;
    let (addr, events) = proxy_for("rr-query", None).await;
    let port = origin.port();
    let out = raw(
        addr,
        format!("GET http://allowed.test:{port}?x=1 HTTP/1.1\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert_eq!(seen.lock().unwrap().clone(), ["GET /?x=1 HTTP/1.1"]);
    let ev = wait_for(|| events.all().pop()).await;
    assert_eq!(ev.path.as_deref(), Some("/?x=1"), "{ev:?}");
}

/// The same on the hyper path (HTTP/1.0 is handed to it): the event and the HTTP rules see the
/// path the origin gets (`/?x=1`), not `?x=1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_without_a_path_is_logged_as_sent_on_the_hyper_path_too() {
    let (origin, _seen) = closing_origin().await;
    let (addr, events) = proxy_for("rr-query10", None).await;
    let port = origin.port();
    let out =
        raw(addr, format!("GET http://allowed.test:{port}?x=1 HTTP/1.0\r\n\r\n").as_bytes()).await;
    assert!(out.starts_with("HTTP/1.0 200") || out.starts_with("HTTP/1.1 200"), "{out}");
    let ev = wait_for(|| events.all().pop()).await;
    assert_eq!(ev.path.as_deref(), Some("/?x=1"), "{ev:?}");
}

/// The policy is read per request: a policy replaced between two requests of one relayed
/// keep-alive connection applies to the second (refused, never forwarded, its own event).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_replaced_mid_connection_decides_the_next_request() {
    let (origin, seen) = recording_origin().await;
    let events = Arc::new(Events::default());
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).events(events.clone()).build();
    let addr = serve(&p, "rr-policy", policy(&["allowed.test", "127.0.0.1"], &[])).await;
    let port = origin.port();
    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET http://allowed.test:{port}/a HTTP/1.1\r\n\r\n");
    c.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).ends_with("ok") {
        let mut b = [0u8; 4096];
        let n = c.read(&mut b).await.unwrap();
        assert!(n > 0, "{}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&b[..n]);
    }
    assert!(p.set_policy(&SandboxId::new("rr-policy"), policy(&["127.0.0.1"], &["allowed.test"])));
    c.write_all(req.replace("HTTP/1.1\r\n", "HTTP/1.1\r\nConnection: close\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), c.read_to_end(&mut out)).await;
    let out = String::from_utf8_lossy(&out);
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert_eq!(seen.lock().unwrap().len(), 1);
    let ev = wait_for(|| {
        let all = events.all();
        (all.len() == 2).then_some(all)
    })
    .await;
    assert_eq!((ev[0].decision, ev[1].decision), (Outcome::Allow, Outcome::Deny), "{ev:#?}");
}

/// A request whose response breaks off (Content-Length 10, 4 bytes, then close) or whose body
/// breaks off (Content-Length 10, 4 bytes, then the client closes): its one event counts the
/// bytes that did move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_exchange_has_one_event_with_the_bytes_that_moved() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut b = vec![0u8; 65536];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&b[..n]),
                    }
                }
                if got.starts_with(b"POST") {
                    // Reads what comes; never answers.
                    while let Ok(n) = s.read(&mut b).await {
                        if n == 0 {
                            return;
                        }
                    }
                    return;
                }
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabcd").await;
            });
        }
    });
    let (addr, events) = proxy_for("rr-broken", None).await;
    let out =
        raw(addr, format!("GET http://allowed.test:{port}/g HTTP/1.1\r\n\r\n").as_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 200") && out.ends_with("abcd"), "{out}");
    {
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req =
            format!("POST http://allowed.test:{port}/p HTTP/1.1\r\nContent-Length: 10\r\n\r\nwxyz");
        c.write_all(req.as_bytes()).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let ev = wait_for(|| {
        let all = events.all();
        (all.len() == 2).then_some(all)
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(events.all().len(), 2, "one event per request: {:#?}", events.all());
    let g = ev.iter().find(|e| e.method == "GET").unwrap();
    let p = ev.iter().find(|e| e.method == "POST").unwrap();
    assert_eq!((g.bytes_down, g.error.is_some()), (4, true), "{g:?}");
    assert_eq!(p.bytes_up, 4, "{p:?}");
}

/// A slowloris on a relayed keep-alive connection: after one request, a head that never ends.
/// The proxy ends the connection after its header timeout, with an event that says so; an idle
/// connection that sends nothing ends without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_second_head_ends_the_connection_with_an_event() {
    let (origin, _seen) = recording_origin().await;
    let events = Arc::new(Events::default());
    let config = sandgate_proxy::ProxyConfig {
        header_timeout: std::time::Duration::from_secs(1),
        ..Default::default()
    };
    let p = Proxy::builder()
        .resolver(Arc::new(TestResolver))
        .events(events.clone())
        .config(config)
        .build();
    let addr = serve(&p, "rr-slow", policy(&["allowed.test", "127.0.0.1"], &[])).await;
    let port = origin.port();
    for partial in [true, false] {
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut req = format!("GET http://allowed.test:{port}/a HTTP/1.1\r\n\r\n");
        if partial {
            req.push_str("GET http://allowed.test/b HTTP/1.1\r\nX-Slow: ");
        }
        c.write_all(req.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        let read =
            tokio::time::timeout(std::time::Duration::from_secs(15), c.read_to_end(&mut out));
        assert!(read.await.is_ok(), "the proxy kept a slow connection open");
        assert_eq!(String::from_utf8_lossy(&out).matches("HTTP/1.1 200").count(), 1);
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let ev = events.all();
    assert_eq!(ev.len(), 3, "{ev:#?}");
    let slow: Vec<_> = ev.iter().filter(|e| e.rule == "request head timeout").collect();
    assert_eq!(slow.len(), 1, "{ev:#?}");
    assert_eq!(slow[0].decision, Outcome::Reject, "{ev:#?}");
}

/// An origin that answers a POST before (without) reading its body and keeps the connection: it
/// then reads the body as a second request (an origin bug the proxy cannot see; hyper's path
/// sends the same bytes). The answer to that "request" waits on the idle upstream connection;
/// it must not become the answer to the next request, of this sandbox or another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_to_a_body_read_as_a_request_reaches_nobody() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let Some(head) = crate::common::read_head(&mut s, &mut buf).await else {
                        return;
                    };
                    let reply: &[u8] = if head.starts_with("POST") {
                        b"HTTP/1.1 401 No\r\nContent-Length: 2\r\n\r\nno"
                    } else if head.contains("/smuggled") {
                        // Late: after the connection went back to the pool.
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled"
                    } else {
                        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nclean"
                    };
                    if s.write_all(reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let (a, b) = two_sandboxes("rr-drain-a", "rr-drain-b").await;
    let sm = "GET /smuggled HTTP/1.1\r\nHost: forbidden.test\r\n\r\n";
    let post = format!(
        "POST http://allowed.test:{port}/p HTTP/1.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{sm}",
        sm.len()
    );
    let out = raw(a, post.as_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 401") && !out.contains("smuggled"), "{out}");
    // The stray answer is on the pooled connection before the next request takes it.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    for proxy in [b, a] {
        let get = format!("GET http://allowed.test:{port}/n HTTP/1.1\r\nConnection: close\r\n\r\n");
        let out = raw(proxy, get.as_bytes()).await;
        assert!(!out.contains("smuggled") && out.ends_with("clean"), "{out}");
    }
}
