//! Red team: reaching another virtual host than the allowed one through
//! `CONNECT allowed.test:PORT`, by what the ClientHello says and how it is framed. The upstream is
//! a TCP listener on 127.0.0.1 that records every byte it gets: a refused opening must deliver
//! nothing upstream, and the client must get the TLS `access_denied` alert.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use crate::common::*;
use sandgate_proxy::Proxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The alert the proxy sends when it refuses a ClientHello.
const ACCESS_DENIED: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31];

type Got = Arc<Mutex<Vec<Vec<u8>>>>;

/// A TCP sink on 127.0.0.1: records what each connection delivered.
async fn sink() -> (SocketAddr, Got) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let got: Got = Arc::default();
    let g = got.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let g = g.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let _ = tokio::time::timeout(
                    std::time::Duration::from_secs(5),
                    s.read_to_end(&mut buf),
                )
                .await;
                g.lock().unwrap().push(buf);
            });
        }
    });
    (addr, got)
}

/// A ClientHello handshake message with these extensions.
fn hello_msg(exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut body = vec![0x03, 0x03];
    body.extend([7u8; 32]);
    body.push(0);
    body.extend([0, 2, 0x13, 0x01]);
    body.extend([1, 0]);
    let mut e = Vec::new();
    for (kind, data) in exts {
        e.extend(kind.to_be_bytes());
        e.extend((data.len() as u16).to_be_bytes());
        e.extend(data);
    }
    body.extend((e.len() as u16).to_be_bytes());
    body.extend(e);
    let mut msg = vec![0x01];
    msg.extend(&(body.len() as u32).to_be_bytes()[1..]);
    msg.extend(body);
    msg
}

fn sni_ext(names: &[(u8, &[u8])]) -> (u16, Vec<u8>) {
    let mut list = Vec::new();
    for (kind, n) in names {
        list.push(*kind);
        list.extend((n.len() as u16).to_be_bytes());
        list.extend(*n);
    }
    let mut data = (list.len() as u16).to_be_bytes().to_vec();
    data.extend(list);
    (0, data)
}

fn record(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut r = vec![kind, 3, 1];
    r.extend((payload.len() as u16).to_be_bytes());
    r.extend(payload);
    r
}

fn hello_for(name: &[u8]) -> Vec<u8> {
    record(0x16, &hello_msg(&[sni_ext(&[(0, name)])]))
}

/// Sends `CONNECT target` then `opening`; returns what came back after the 200.
async fn tunnel(proxy: SocketAddr, target: &str, opening: &[u8]) -> (String, Vec<u8>) {
    let mut s = tokio::net::TcpStream::connect(proxy).await.unwrap();
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut b).await {
            Ok(1) => head.push(b[0]),
            _ => break,
        }
    }
    let status = String::from_utf8_lossy(&head).lines().next().unwrap_or("").to_owned();
    if !status.contains(" 200 ") {
        return (status, Vec::new());
    }
    let _ = s.write_all(opening).await;
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(3), s.read_to_end(&mut rest)).await;
    (status, rest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_tricks_reach_no_other_virtual_host() {
    let (up, got) = sink().await;
    let port = up.port();
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).build();
    let addr = serve(&p, "rt", policy(&["allowed.test", "127.0.0.1"], &[])).await;
    let allowed = format!("allowed.test:{port}");
    let other = hello_for(b"forbidden.test");
    let msg = hello_msg(&[sni_ext(&[(0, b"forbidden.test")])]);
    // (name, CONNECT target, opening)
    let mut rows: Vec<(&str, String, Vec<u8>)> = vec![
        ("other SNI", allowed.clone(), other.clone()),
        ("other SNI, upper case", allowed.clone(), hello_for(b"FORBIDDEN.TEST")),
        ("allowed with trailing dot", allowed.clone(), hello_for(b"allowed.test.")),
        ("other SNI with trailing dot", allowed.clone(), hello_for(b"forbidden.test.")),
        ("UTF-8 SNI", allowed.clone(), hello_for("allowed.tеst".as_bytes())),
        ("percent-encoded SNI", allowed.clone(), hello_for(b"allowed%2etest")),
        ("IP literal SNI", allowed.clone(), hello_for(b"127.0.0.1")),
        ("SNI with NUL", allowed.clone(), hello_for(b"allowed.test\0.forbidden.test")),
        ("SNI with a port", allowed.clone(), hello_for(b"allowed.test:443")),
        (
            "SNI allowed.test.forbidden.test",
            allowed.clone(),
            hello_for(b"allowed.test.forbidden.test"),
        ),
        (
            "two names, allowed first",
            allowed.clone(),
            record(0x16, &hello_msg(&[sni_ext(&[(0, b"allowed.test"), (0, b"forbidden.test")])])),
        ),
        (
            "two server_name extensions",
            allowed.clone(),
            record(
                0x16,
                &hello_msg(&[sni_ext(&[(0, b"allowed.test")]), sni_ext(&[(0, b"forbidden.test")])]),
            ),
        ),
        (
            "non-host_name entry first",
            allowed.clone(),
            record(0x16, &hello_msg(&[sni_ext(&[(1, b"allowed.test"), (0, b"forbidden.test")])])),
        ),
        (
            "ECH",
            allowed.clone(),
            record(0x16, &hello_msg(&[sni_ext(&[(0, b"allowed.test")]), (0xfe0d, vec![0; 8])])),
        ),
        (
            "change_cipher_spec first",
            allowed.clone(),
            [record(0x14, &[1]), hello_for(b"allowed.test")].concat(),
        ),
        (
            "warning alert first",
            allowed.clone(),
            [record(0x15, &[1, 0]), hello_for(b"allowed.test")].concat(),
        ),
        (
            "hello split over records, other name",
            allowed.clone(),
            msg.chunks(7).flat_map(|c| record(0x16, c)).collect(),
        ),
        (
            "two hellos in one record",
            allowed.clone(),
            record(0x16, &[hello_msg(&[sni_ext(&[(0, b"allowed.test")])]), msg.clone()].concat()),
        ),
        ("no SNI to a name", allowed.clone(), record(0x16, &hello_msg(&[]))),
        (
            "SSLv2 hello",
            allowed.clone(),
            vec![0x80, 0x2e, 0x01, 0x03, 0x01, 0, 0x15, 0, 0, 0, 0x10],
        ),
        ("record version 3.9", allowed.clone(), {
            let mut r = hello_for(b"allowed.test");
            r[2] = 9;
            r
        }),
        ("IP-literal CONNECT, other SNI", format!("127.0.0.1:{port}"), other.clone()),
        ("IP-literal CONNECT, v4-mapped", format!("[::ffff:127.0.0.1]:{port}"), other.clone()),
    ];
    // Refused at the CONNECT itself (no tunnel).
    let connects = [
        format!("forbidden.test@allowed.test:{port}"),
        format!("allowed%2etest:{port}"),
        format!("allowed.test:{port}@forbidden.test"),
        format!("allowed.test:0{port}"),
        format!("allowed.test:+{port}"),
        format!("allowed.test :{port}"),
        format!("forbidden.test:{port}"),
        format!("xn--llowed-9ua.test:{port}"),
        // Other spellings of 127.0.0.2 (loopback, not allowed by IP; 127.0.0.1 is).
        format!("127.2:{port}"),
        format!("2130706434:{port}"),
        format!("0x7f.0.0.2:{port}"),
        format!("0177.0.0.2:{port}"),
        format!("[::ffff:127.0.0.2]:{port}"),
        format!("[::127.0.0.2]:{port}"),
        format!("[::ffff:7f00:2]:{port}"),
        format!("[64:ff9b::7f00:2]:{port}"),
        format!("[2002:7f00:2::]:{port}"),
        format!("0.0.0.0:{port}"),
        format!("[::]:{port}"),
        format!("169.254.169.254:{port}"),
        format!("[::ffff:169.254.169.254]:{port}"),
    ];
    for c in &connects {
        let (status, _) = tunnel(addr, c, &[]).await;
        eprintln!("CONNECT {c:?} => {status}");
        assert!(!status.contains(" 200 "), "CONNECT {c:?} opened a tunnel: {status}");
    }
    for (name, target, opening) in rows.drain(..) {
        let before = got.lock().unwrap().len();
        let (status, back) = tunnel(addr, &target, &opening).await;
        eprintln!("{name}: {status} -> {:02x?}", &back[..back.len().min(8)]);
        assert!(status.contains(" 200 "), "{name}: {status}");
        assert_eq!(back, ACCESS_DENIED, "{name}: not refused");
        // Wait for the sink to record the connection, then check nothing reached it.
        for _ in 0..100 {
            if got.lock().unwrap().len() > before {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let all = got.lock().unwrap().clone();
        assert!(all[before..].iter().all(Vec::is_empty), "{name}: bytes reached upstream");
    }
    // Control: the allowed name (any case) opens the tunnel and its bytes arrive upstream.
    for ok in [&b"allowed.test"[..], b"ALLOWED.test"] {
        let (status, back) = tunnel(addr, &allowed, &hello_for(ok)).await;
        assert!(status.contains(" 200 ") && back.is_empty(), "{status} {back:?}");
    }
    for _ in 0..100 {
        if got.lock().unwrap().iter().filter(|b| !b.is_empty()).count() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(got.lock().unwrap().iter().filter(|b| !b.is_empty()).count(), 2);
}

/// A CONNECT that is not the first request of its connection goes through hyper's upgrade path:
/// the same ClientHello check applies there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_after_a_keep_alive_request_gets_the_same_hello_check() {
    let (up, got) = sink().await;
    let port = up.port();
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).build();
    let addr = serve(&p, "rt", policy(&["allowed.test", "127.0.0.1"], &[])).await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let first = format!(
        "GET http://denied.test:{port}/ HTTP/1.1\r\nHost: denied.test\r\n\r\n\
         CONNECT allowed.test:{port} HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n"
    );
    s.write_all(first.as_bytes()).await.unwrap();
    // Read both answers: the 403 (with its body) and the 200 of the CONNECT.
    let mut seen = Vec::new();
    let mut b = [0u8; 1];
    while !String::from_utf8_lossy(&seen).contains("200 OK\r\n") {
        match tokio::time::timeout(std::time::Duration::from_secs(5), s.read(&mut b)).await {
            Ok(Ok(1)) => seen.push(b[0]),
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&seen).into_owned();
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");
    assert!(text.contains("HTTP/1.1 200 OK\r\n"), "{text}");
    // The rest of the 200's head.
    while !seen.ends_with(b"\r\n\r\n") {
        match s.read(&mut b).await {
            Ok(1) => seen.push(b[0]),
            _ => break,
        }
    }
    s.write_all(&hello_for(b"forbidden.test")).await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(3), s.read_to_end(&mut rest)).await;
    assert_eq!(rest, ACCESS_DENIED);
    for _ in 0..100 {
        if !got.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(got.lock().unwrap().iter().all(Vec::is_empty), "bytes reached upstream");
}

/// The fixed random of a HelloRetryRequest (RFC 8446 §4.1.3).
const HRR_RANDOM: [u8; 32] = [
    0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
];

/// A ServerHello record with this random.
fn server_hello(random: [u8; 32]) -> Vec<u8> {
    let mut body = vec![0x03, 0x03];
    body.extend(random);
    body.extend([0, 0x13, 0x01, 0, 0, 6, 0, 0x2b, 0, 2, 3, 4]);
    let mut msg = vec![0x02];
    msg.extend(&(body.len() as u32).to_be_bytes()[1..]);
    msg.extend(body);
    record(0x16, &msg)
}

/// A TLS-ish upstream on 127.0.0.1: once it has the client's first record it answers `answer`,
/// then records everything it got until the client closes.
async fn answering_server(answer: Vec<u8>) -> (SocketAddr, Got) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let got: Got = Arc::default();
    let g = got.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let (g, answer) = (g.clone(), answer.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let deadline = std::time::Duration::from_secs(5);
                // The first record: header, then its length.
                while buf.len() < 5 || buf.len() < 5 + u16::from_be_bytes([buf[3], buf[4]]) as usize
                {
                    match tokio::time::timeout(deadline, s.read(&mut chunk)).await {
                        Ok(Ok(n)) if n > 0 => buf.extend(&chunk[..n]),
                        _ => break,
                    }
                }
                let _ = s.write_all(&answer).await;
                let _ = tokio::time::timeout(deadline, s.read_to_end(&mut buf)).await;
                g.lock().unwrap().push(buf);
            });
        }
    });
    (addr, got)
}

/// After a HelloRetryRequest the client sends a second ClientHello in the clear, and a server may
/// route by it: it must name the same server as the first, or nothing of it reaches the server.
/// The client sends both hellos at once (it can force the retry itself), so the proxy must hold
/// what follows the first hello until it has seen the server's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_hello_after_hello_retry_must_name_the_same_server() {
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).build();
    let ccs = [0x14, 3, 3, 0, 1, 1];
    let first = hello_for(b"allowed.test");
    let hrr = server_hello(HRR_RANDOM);
    let plain = server_hello([5; 32]);
    // (name, server's answer, second hello, whether the second hello reaches the server)
    let rows: Vec<(&str, &Vec<u8>, Vec<u8>, bool)> = vec![
        ("retry, other name", &hrr, hello_for(b"forbidden.test"), false),
        (
            "retry, ccs then other name",
            &hrr,
            [&ccs[..], &hello_for(b"forbidden.test")].concat(),
            false,
        ),
        ("retry, no name", &hrr, record(0x16, &hello_msg(&[])), false),
        ("retry, not a hello", &hrr, record(0x17, &[1, 2, 3]), false),
        // Controls: the same name passes; without a retry the bytes are the server's business.
        ("retry, same name", &hrr, [&ccs[..], &hello_for(b"allowed.test")].concat(), true),
        ("no retry", &plain, [&ccs[..], &record(0x16, &[9; 40])].concat(), true),
    ];
    for (what, answer, second, passes) in rows {
        let (up, got) = answering_server(answer.clone()).await;
        let addr = serve(&p, "rt", policy(&["allowed.test", "127.0.0.1"], &[])).await;
        let target = format!("allowed.test:{}", up.port());
        let opening = [&first[..], &second].concat();
        let (status, back) = tunnel(addr, &target, &opening).await;
        assert!(status.contains(" 200 "), "{what}: {status}");
        for _ in 0..100 {
            if !got.lock().unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let delivered = got.lock().unwrap().concat();
        // The server's answer always reaches the client (it is the server's).
        assert!(back.starts_with(answer), "{what}: client got {back:?}");
        if passes {
            assert_eq!(delivered, opening, "{what}: the server got other bytes");
            assert_eq!(&back[..], &answer[..], "{what}");
        } else {
            assert_eq!(delivered, first, "{what}: more than the first hello reached the server");
            assert_eq!(&back[answer.len()..], ACCESS_DENIED, "{what}");
        }
    }
}

/// A tunnel refused at its TLS opening (the ClientHello names another server) is recorded before
/// the client reads the alert, and once (see `a_refusal_is_recorded_before_the_client_reads_it`
/// for the other refusals and why; the client is a thread of its own with a blocking socket).
/// Control: with the alert written first, the event was missing when the client had it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_tls_opening_is_recorded_before_the_client_reads_the_alert() {
    use std::io::{Read as _, Write as _};
    let (up, _) = sink().await;
    let events = Arc::new(SlowEvents::default());
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).events(events.clone()).build();
    let addr = serve(&p, "rt", policy(&["allowed.test", "127.0.0.1"], &[])).await;
    let target = format!("allowed.test:{}", up.port());
    let ev = events.clone();
    tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(s, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut b).unwrap();
            head.push(b[0]);
        }
        assert!(String::from_utf8_lossy(&head).starts_with("HTTP/1.1 200"), "{head:?}");
        s.write_all(&hello_for(b"forbidden.test")).unwrap();
        let mut alert = [0u8; 7];
        s.read_exact(&mut alert).unwrap();
        assert_eq!(alert, ACCESS_DENIED);
        let all = ev.0.all();
        assert_eq!(all.len(), 1, "no event yet when the client read the alert");
        assert_eq!(all[0].decision, sandgate_proxy::Outcome::Deny, "{all:?}");
        drop(s);
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(ev.0.all().len(), 1, "recorded twice");
    })
    .await
    .unwrap();
}

/// A client that sends its ClientHello and goes away before a silent server has said anything:
/// no second hello can follow, so the proxy passes the end on to the upstream at once instead of
/// holding it open until the idle timeout (600 s) waiting to see whether the server asks for a
/// retry. Before the fix the upstream saw no end for the whole idle timeout (this test's 4 s
/// wait ran out: verified by running it without the fix).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_after_its_hello_ends_the_upstream_at_once() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = listener.local_addr().unwrap();
    let ended: Arc<Mutex<Option<Option<Vec<u8>>>>> = Arc::default();
    let e = ended.clone();
    tokio::spawn(async move {
        let Ok((mut s, _)) = listener.accept().await else { return };
        let mut buf = Vec::new();
        let wait = std::time::Duration::from_secs(4);
        let r = tokio::time::timeout(wait, s.read_to_end(&mut buf)).await;
        *e.lock().unwrap() = Some(r.ok().map(|_| buf));
    });
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).build();
    let addr = serve(&p, "rt", policy(&["allowed.test", "127.0.0.1"], &[])).await;
    let target = format!("allowed.test:{}", up.port());
    let hello = hello_for(b"allowed.test");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).await.unwrap(), 1, "{head:?}");
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
    s.write_all(&hello).await.unwrap();
    drop(s);
    for _ in 0..200 {
        if ended.lock().unwrap().is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let ended = ended.lock().unwrap().clone();
    let delivered = ended.expect("the upstream never finished").expect("held open: no end came");
    // Control: the hello itself was delivered (the connection was a real tunnel).
    assert_eq!(delivered, hello);
}
