//! Red team: plain HTTP inside CONNECT and SOCKS tunnels is pinned to the tunnel's host (issue
//! 33), attacked with what an origin server's parser takes for a request but the pin did not:
//! an absolute-form URL (its host wins over `Host` at the origin), empty lines before the
//! request line, lower-case and long methods, and a request line split across writes. The origin
//! is hyper (`common::hello`), which answers with the URI and `Host` it was asked for: "evil" in
//! its answer is a request for another site served through an allowed name's server.
//!
//! Control, in the same test: the plain request through the same tunnel reaches the origin as
//! the tunnel's host. Control, by hand: with `http_opening` back to "upper-case method of 3 to
//! 10 letters, then a space, in the bytes read so far" and the target left as it came, the
//! `absolute_form`, `empty_line_first`, `lower_case_method` and `long_method` rows fail, the
//! origin answering "at evil.test" or "to http://evil.test/". The `split_*` rows only fail so
//! when the proxy happens to read the first write alone (the writes may arrive as one); the
//! split itself is pinned down by `transparent::tests::a_request_line_split_across_reads_is_still_http`.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::common::*;
use sandgate_proxy::Proxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The way into the tunnel.
#[derive(Debug, Clone, Copy)]
enum Door {
    Connect,
    Socks,
}

/// Opens a tunnel to `allowed.test:port` through `door`, waits until the proxy says it is open
/// (so that the proxy is reading the tunnel's first bytes when they come), sends `writes` one
/// after another, and returns what came back until the end.
async fn through(proxy: SocketAddr, door: Door, port: u16, writes: &[&[u8]]) -> String {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.set_nodelay(true).unwrap();
    match door {
        Door::Connect => {
            let open = format!(
                "CONNECT allowed.test:{port} HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n"
            );
            s.write_all(open.as_bytes()).await.unwrap();
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                let mut b = [0u8; 1];
                assert_eq!(s.read(&mut b).await.unwrap(), 1, "{head:?}");
                head.push(b[0]);
            }
            assert!(head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
        }
        Door::Socks => {
            s.write_all(&[5, 1, 0]).await.unwrap();
            let mut hello = [0u8; 2];
            s.read_exact(&mut hello).await.unwrap();
            assert_eq!(hello, [5, 0]);
            let name = b"allowed.test";
            let mut req = vec![5, 1, 0, 3, name.len() as u8];
            req.extend_from_slice(name);
            req.extend_from_slice(&port.to_be_bytes());
            s.write_all(&req).await.unwrap();
            let mut rep = [0u8; 10];
            s.read_exact(&mut rep).await.unwrap();
            assert_eq!(rep[1], 0, "SOCKS reply {rep:?}");
        }
    }
    for w in writes {
        if s.write_all(w).await.is_err() {
            break;
        }
    }
    let mut out = Vec::new();
    let read = tokio::time::timeout(std::time::Duration::from_secs(20), s.read_to_end(&mut out));
    let _ = read.await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Each attack, through each door: the origin never hears of evil.test, and when it answers,
/// it answers as the tunnel's host. Control: the plain request does reach it so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_server_takes_for_a_request_is_pinned_in_a_tunnel() {
    let origin = http_origin().await;
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).build();
    let addr = serve(&p, "s1", policy(&["allowed.test", "127.0.0.1"], &[])).await;
    let port = origin.port();
    let pinned = format!("at allowed.test:{port} ");
    let rows: [(&str, &[&[u8]]); 8] = [
        ("control", &[b"GET /one HTTP/1.1\r\nHost: evil.test\r\n\r\n"]),
        ("absolute_form", &[b"GET http://evil.test/one HTTP/1.1\r\nHost: allowed.test\r\n\r\n"]),
        ("empty_line_first", &[b"\r\nGET /one HTTP/1.1\r\nHost: evil.test\r\n\r\n"]),
        ("lower_case_method", &[b"get /one HTTP/1.1\r\nHost: evil.test\r\n\r\n"]),
        ("long_method", &[b"UPDATEREDIRECTREF /one HTTP/1.1\r\nHost: evil.test\r\n\r\n"]),
        // Five bytes: the most a TLS record header needs to tell it is not one.
        ("split_method", &[b"DELET", b"E /one HTTP/1.1\r\nHost: evil.test\r\n\r\n"]),
        ("split_line", &[b"GET", b" /one HTTP/1.1\r\n", b"Host: evil.test\r\n\r\n"]),
        (
            "pipelined",
            &[b"GET /one HTTP/1.1\r\nHost: a\r\n\r\nGET http://evil.test/two HTTP/1.1\r\n\r\n"],
        ),
    ];
    for door in [Door::Connect, Door::Socks] {
        for (name, writes) in rows {
            let got = through(addr, door, port, writes).await;
            assert!(!got.contains("evil"), "{door:?} {name}: the origin served evil.test: {got}");
            assert!(
                got.contains(&pinned),
                "{door:?} {name}: not served as the tunnel's host: {got}"
            );
            assert_eq!(got.matches("origin says hello").count(), 1, "{door:?} {name}: {got}");
        }
    }
}
