//! The plain-HTTP relay (`relay.rs`) end to end: response framing re-made for the client whatever
//! the origin sent, request bodies, pipelining, the hand-over to hyper in the middle of a
//! keep-alive connection, and an origin that tries to smuggle a second response.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use crate::common::*;
use sandgate_proxy::{Outcome, Proxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

type Seen = Arc<Mutex<Vec<String>>>;

/// An origin that answers by path with hand-written responses, and records each request head
/// (and body) it read as `METHOD path host body`.
async fn scripted_origin() -> (SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let s2 = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let seen = s2.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let Some(head) = crate::common::read_head(&mut s, &mut buf).await else {
                        return;
                    };
                    let header = |name: &str| {
                        head.lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
                            })
                            .unwrap_or_default()
                    };
                    let len: usize = header("content-length").parse().unwrap_or(0);
                    while buf.len() < len {
                        let mut b = [0u8; 4096];
                        match s.read(&mut b).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&b[..n]),
                        }
                    }
                    let body: Vec<u8> = buf.drain(..len).collect();
                    let mut line = head.lines().next().unwrap_or("").split(' ');
                    let (method, path) = (line.next().unwrap_or(""), line.next().unwrap_or(""));
                    seen.lock().unwrap().push(format!(
                        "{method} {path} {} {}",
                        header("host"),
                        String::from_utf8_lossy(&body)
                    ));
                    let reply: &[u8] = match path {
                        "/chunked" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                            5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n",
                        "/close" => b"HTTP/1.1 200 OK\r\n\r\nuntil the end",
                        "/head" => b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n",
                        "/extra" => {
                            // A second answer nobody asked for: with the first, and later on.
                            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok\
                                HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled").await;
                            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                            b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled"
                        }
                        "/badchunk" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                            5\nhello\r\n0\r\n\r\n",
                        "/twocl" => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok!",
                        "/continue" => b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                        "/nocontent" => b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
                        "/hop" => b"HTTP/1.1 200 Fine\r\nConnection: x-drop\r\nX-Drop: 1\r\nKeep-Alive: t=1\r\nX-Keep: 2\r\nContent-Length: 2\r\n\r\nok",
                        _ => {
                            let text = format!("echo {} bytes", body.len());
                            let r = format!(
                                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{text}",
                                text.len()
                            );
                            let _ = s.write_all(r.as_bytes()).await;
                            continue;
                        }
                    };
                    if s.write_all(reply).await.is_err() {
                        return;
                    }
                    if path == "/close" {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// Sends `bytes` on one connection and reads until the proxy closes it (10 s at most).
async fn exchange(proxy: SocketAddr, bytes: &[u8]) -> String {
    raw(proxy, bytes).await
}

async fn setup() -> (SocketAddr, u16, Seen, Arc<Events>) {
    let (origin, seen) = scripted_origin().await;
    let events = Arc::new(Events::default());
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).events(events.clone()).build();
    let addr = serve(&p, "relay", policy(&["allowed.test", "127.0.0.1"], &["denied.test"])).await;
    // The proxy lives as long as its listener task.
    std::mem::forget(p);
    (addr, origin.port(), seen, events)
}

fn get(port: u16, path: &str, extra: &str) -> String {
    format!("GET http://allowed.test:{port}{path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_and_close_delimited_responses_are_rechunked_and_the_connection_lives_on() {
    let (addr, port, _seen, events) = setup().await;
    let req = [
        get(port, "/chunked", ""),
        get(port, "/close", ""),
        get(port, "/e", "Connection: close\r\n"),
    ]
    .concat();
    let out = exchange(addr, req.as_bytes()).await;
    // Decoded and chunked again (extensions and trailers dropped), then the body read to the
    // origin's close, chunked for the client, then the third answer on the same connection.
    assert!(
        out.contains(
            "transfer-encoding: chunked\r\n\r\n5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\nHTTP/1.1 200"
        ),
        "{out}"
    );
    assert!(out.contains("\r\nd\r\nuntil the end\r\n0\r\n\r\nHTTP/1.1 200"), "{out}");
    assert!(out.ends_with("echo 0 bytes"), "{out}");
    assert!(!out.contains("X-Trailer"), "{out}");
    let ev = wait_for(|| {
        let all = events.all();
        (all.len() == 3).then_some(all)
    })
    .await;
    let downs: Vec<u64> = ev.iter().map(|e| e.bytes_down).collect();
    assert_eq!(downs, [12, 13, 12], "{ev:?}");
    assert!(ev.iter().all(|e| e.decision == Outcome::Allow && e.path.is_some()), "{ev:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_204_and_1xx_responses_have_no_body_and_hop_by_hop_headers_go() {
    let (addr, port, _seen, _events) = setup().await;
    let req = [
        get(port, "/head", "").replacen("GET", "HEAD", 1),
        get(port, "/nocontent", ""),
        get(port, "/continue", ""),
        get(port, "/hop", "Connection: close\r\n"),
    ]
    .concat();
    let out = exchange(addr, req.as_bytes()).await;
    let answers: Vec<&str> = out.split("HTTP/1.1 ").filter(|s| !s.is_empty()).collect();
    assert_eq!(answers.len(), 4, "{out}");
    assert!(answers[0].starts_with("200 OK\r\nContent-Length: 1234\r\n\r\n"), "{out}");
    assert!(answers[0].ends_with("\r\n\r\n"), "{out}");
    assert!(answers[1].starts_with("204 No Content"), "{out}");
    assert!(answers[2].starts_with("200 OK") && answers[2].ends_with("ok"), "{out}");
    assert!(!out.contains("100 Continue"), "{out}");
    assert!(answers[3].starts_with("200 Fine\r\n"), "{out}");
    assert!(answers[3].contains("X-Keep: 2") && !answers[3].contains("X-Drop"), "{out}");
    assert!(!answers[3].contains("Keep-Alive"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_pipelining_and_the_decided_host_reach_the_origin() {
    let (addr, port, seen, _events) = setup().await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    // A body split across writes, then two requests in one write.
    let head = format!(
        "POST http://ALLOWED.test:{port}/a HTTP/1.1\r\nHost: forbidden.test\r\nContent-Length: 10\r\n\r\n01234"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let rest = ["56789", &get(port, "/b", ""), &get(port, "/c", "Connection: close\r\n")].concat();
    s.write_all(rest.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let out = String::from_utf8_lossy(&out);
    assert_eq!(out.matches("HTTP/1.1 200 OK").count(), 3, "{out}");
    assert!(out.contains("echo 10 bytes"), "{out}");
    let seen = seen.lock().unwrap().clone();
    let host = format!("allowed.test:{port}");
    assert_eq!(
        seen,
        [
            format!("POST /a {host} 0123456789"),
            format!("GET /b {host} "),
            format!("GET /c {host} "),
        ]
    );
}

/// A request the relay does not take (two Content-Length headers) after one it took, on one connection:
/// hyper's path serves it and what follows, with the same answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_is_handed_to_hyper_in_the_middle() {
    let (addr, port, seen, events) = setup().await;
    let req = [
        get(port, "/one", ""),
        // Two equal lengths: hyper takes it (one length), the relay does not.
        format!(
            "POST http://allowed.test:{port}/two HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc"
        ),
        get(port, "/three", "Connection: close\r\n"),
    ]
    .concat();
    let out = exchange(addr, req.as_bytes()).await;
    assert_eq!(out.matches("HTTP/1.1 200 OK").count(), 3, "{out}");
    assert!(out.contains("echo 3 bytes"), "{out}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen[1].starts_with("POST /two allowed.test"), "{seen:?}");
    assert!(seen[1].ends_with(" abc"), "{seen:?}");
    wait_for(|| (events.all().len() == 3).then_some(())).await;
}

/// An origin that sends more than its Content-Length (a second response, "smuggled"), an invalid
/// chunked body, or two lengths: the client never reads the extra bytes as an answer, and the
/// upstream connection is not used again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_cannot_smuggle_a_response() {
    let (addr, port, seen, _events) = setup().await;
    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    c.write_all(get(port, "/extra", "").as_bytes()).await.unwrap();
    // The late answer is on the pooled connection before the next request takes it.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    c.write_all(get(port, "/next", "Connection: close\r\n").as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), c.read_to_end(&mut out)).await;
    let out = String::from_utf8_lossy(&out);
    assert!(!out.contains("smuggled"), "{out}");
    assert!(out.contains("\r\n\r\nok") && out.ends_with("echo 0 bytes"), "{out}");
    // `/next` went out on a new upstream connection: the old one had bytes left over.
    assert_eq!(seen.lock().unwrap().len(), 2);

    let out = exchange(addr, get(port, "/twocl", "Connection: close\r\n").as_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 502"), "{out}");
    assert!(!out.contains("ok!"), "{out}");

    let out = exchange(
        addr,
        [get(port, "/badchunk", ""), get(port, "/n", "Connection: close\r\n")].concat().as_bytes(),
    )
    .await;
    // The body was refused before anything went to the client: a 502, and the client's
    // connection (in step: its request was read whole) goes on.
    assert!(out.starts_with("HTTP/1.1 502"), "{out}");
    assert!(!out.contains("hello") && out.ends_with("echo 0 bytes"), "{out}");
}

/// A refusal on the relay's path is the same answer as hyper's path gives (status line, decision
/// header, body), its event says deny, and the keep-alive connection goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_is_answered_and_the_connection_goes_on() {
    let (addr, port, seen, events) = setup().await;
    let req = [
        format!("GET http://denied.test:{port}/x HTTP/1.1\r\n\r\n"),
        get(port, "/y", "Connection: close\r\n"),
    ]
    .concat();
    let out = exchange(addr, req.as_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 403 Blocked by sandgate: deny rule\r\n"), "{out}");
    assert!(out.contains("x-sandgate-decision: deny; rule=deny denied.test"), "{out}");
    assert!(out.contains("sandgate blocked the connection to denied.test"), "{out}");
    assert!(out.ends_with("echo 0 bytes"), "{out}");
    assert_eq!(seen.lock().unwrap().len(), 1);
    let ev = wait_for(|| {
        let all = events.all();
        (all.len() == 2).then_some(all)
    })
    .await;
    let denied = ev.iter().find(|e| e.host == "denied.test").expect("an event for denied.test");
    assert_eq!(denied.decision, Outcome::Deny, "{ev:?}");
    assert_eq!(denied.path.as_deref(), Some("/x"), "{ev:?}");
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
