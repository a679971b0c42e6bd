//! The `Attributor` (issue 33, part 4): every door asks it about the client's own socket, the
//! event and the question carry what it found, a question waits for it only as long as
//! `attribution_wait`, and an event whose lookup outlives its connection is recorded when the
//! lookup ends.
//!
//! The fake attributor answers with the client's port as the pid, so each event can be matched
//! to the client socket that made it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use sandgate_proxy::{
    ApprovalRequest, Approver, Attributor, BoxFuture, DenyReason, EventSink, Outcome, ProcessInfo,
    Proxy, ProxyConfig, ProxyEvent, Ruling, SandboxId,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, mpsc};

/// Answers with the client's port as pid and the server address as command; waits for `gate`
/// first when there is one.
struct ByPort {
    gate: Option<Arc<Notify>>,
    asked: Mutex<Vec<(SocketAddr, SocketAddr)>>,
}

impl ByPort {
    fn new(gate: Option<Arc<Notify>>) -> Arc<ByPort> {
        Arc::new(ByPort { gate, asked: Mutex::new(Vec::new()) })
    }
}

impl Attributor for ByPort {
    fn attribute<'a>(
        &'a self,
        _sandbox: &'a SandboxId,
        client: SocketAddr,
        server: SocketAddr,
    ) -> BoxFuture<'a, Option<ProcessInfo>> {
        self.asked.lock().unwrap().push((client, server));
        Box::pin(async move {
            if let Some(gate) = &self.gate {
                gate.notified().await;
            }
            Some(ProcessInfo {
                pid: client.port().into(),
                exe: "/usr/bin/test-client".into(),
                command: server.to_string(),
            })
        })
    }
}

/// Events, as they are recorded, to a channel the test awaits.
struct Channel(mpsc::UnboundedSender<ProxyEvent>);

impl EventSink for Channel {
    fn record(&self, e: ProxyEvent) {
        let _ = self.0.send(e);
    }
}

/// Denies every question, and keeps them.
#[derive(Default)]
struct Keep(Mutex<Vec<ApprovalRequest>>);

impl Approver for Keep {
    fn ask(&self, q: ApprovalRequest) -> BoxFuture<'_, Ruling> {
        self.0.lock().unwrap().push(q);
        Box::pin(async { Ruling::Deny(DenyReason::Denied) })
    }
}

async fn next(rx: &mut mpsc::UnboundedReceiver<ProxyEvent>) -> ProxyEvent {
    tokio::time::timeout(Duration::from_secs(30), rx.recv()).await.expect("an event").unwrap()
}

async fn read_to_end(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut out)).await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_door_is_attributed_to_the_clients_own_socket() {
    let origin = http_origin().await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let attributor = ByPort::new(None);
    let p = Proxy::builder()
        .resolver(Arc::new(TestResolver))
        .events(Arc::new(Channel(tx)))
        .attributor(attributor.clone())
        .build();
    let addr = serve(&p, "s1", policy(&["allowed.test", "127.0.0.1"], &[])).await;
    let get = "GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n";
    let port = origin.port();
    let doors: [(&str, Vec<Vec<u8>>); 3] = [
        ("CONNECT", vec![format!("CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n").into_bytes()]),
        (
            "GET",
            vec![
                format!(
                    "GET http://allowed.test:{port}/ HTTP/1.1\r\nHost: allowed.test\r\n\
                     Connection: close\r\n\r\n"
                )
                .into_bytes(),
            ],
        ),
        (
            "SOCKS5",
            vec![
                b"\x05\x01\x00".to_vec(),
                [&b"\x05\x01\x00\x01\x7f\x00\x00\x01"[..], &port.to_be_bytes()].concat(),
            ],
        ),
    ];
    for (method, opening) in doors {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let me = s.local_addr().unwrap();
        for bytes in &opening {
            s.write_all(bytes).await.unwrap();
            if method == "SOCKS5" {
                let mut reply = [0u8; 2];
                s.read_exact(&mut reply).await.unwrap();
                if reply[1] == 0 && bytes.len() > 3 {
                    let mut rest = [0u8; 8];
                    s.read_exact(&mut rest).await.unwrap();
                }
            }
        }
        if method == "CONNECT" {
            let mut head = Vec::new();
            assert!(read_head(&mut s, &mut head).await.unwrap().contains(" 200 "));
        }
        if method != "GET" {
            s.write_all(get.as_bytes()).await.unwrap();
        }
        let body = String::from_utf8_lossy(&read_to_end(&mut s).await).into_owned();
        assert!(body.contains("origin says hello"), "{method}: {body}");
        drop(s);
        let e = next(&mut rx).await;
        assert_eq!((e.method.as_str(), e.decision), (method, Outcome::Allow), "{e:?}");
        let process = e.process.as_ref().unwrap_or_else(|| panic!("{method}: no process"));
        assert_eq!(process.pid, u32::from(me.port()), "{method}: {e:?}");
        // Asked about the client's socket: its own address, and the proxy it connected to.
        assert_eq!(process.command, addr.to_string(), "{method}: {e:?}");
        assert!(attributor.asked.lock().unwrap().contains(&(me, addr)), "{method}");
    }
}

/// A lookup that never ends: the question is asked without the process once
/// `attribution_wait` has passed (not before, not never), and so is the refusal's event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_waits_for_the_lookup_only_as_long_as_its_bound() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let approver = Arc::new(Keep::default());
    let wait = Duration::from_millis(80);
    let p = Proxy::builder()
        .config(ProxyConfig { attribution_wait: wait, ..ProxyConfig::default() })
        .resolver(Arc::new(TestResolver))
        .events(Arc::new(Channel(tx)))
        .approver(approver.clone())
        .attributor(ByPort::new(Some(Arc::new(Notify::new()))))
        .build();
    let addr = serve(&p, "s1", policy(&[], &[])).await;
    let start = std::time::Instant::now();
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"CONNECT asked.test:443 HTTP/1.1\r\n\r\n").await.unwrap();
    let mut head = Vec::new();
    assert!(read_head(&mut s, &mut head).await.unwrap().contains(" 403 "));
    let took = start.elapsed();
    let e = next(&mut rx).await;
    assert_eq!(e.decision, Outcome::Deny, "{e:?}");
    assert_eq!(e.process, None);
    let asked = approver.0.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].process, None);
    assert!(took >= wait, "asked before the bound: {took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

/// A lookup still running when the tunnel ends: the event is recorded when it ends, with the
/// process (the connection did not wait for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_is_recorded_with_a_lookup_that_ends_after_its_connection() {
    let origin = http_origin().await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let gate = Arc::new(Notify::new());
    let p = Proxy::builder()
        .config(ProxyConfig { attribution_wait: Duration::from_secs(30), ..ProxyConfig::default() })
        .resolver(Arc::new(TestResolver))
        .events(Arc::new(Channel(tx)))
        .attributor(ByPort::new(Some(gate.clone())))
        .build();
    let addr = serve(&p, "s1", policy(&["allowed.test", "127.0.0.1"], &[])).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let me = s.local_addr().unwrap();
    let port = origin.port();
    s.write_all(format!("CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    let mut head = Vec::new();
    assert!(read_head(&mut s, &mut head).await.unwrap().contains(" 200 "));
    s.write_all(b"GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let body = read_to_end(&mut s).await;
    assert!(String::from_utf8_lossy(&body).contains("origin says hello"));
    drop(s);
    gate.notify_one();
    let e = next(&mut rx).await;
    assert_eq!(e.decision, Outcome::Allow, "{e:?}");
    assert_eq!(e.process.map(|p| p.pid), Some(u32::from(me.port())));
}
