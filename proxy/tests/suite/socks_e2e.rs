//! End-to-end SOCKS5 on the proxy's listener: real `curl --socks5-hostname`, a raw-socket Python
//! client, and hand-made frames, to origins on 127.0.0.1.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::*;
use sandgate_config::{DomainPattern, PatternUse, Rule, RuleSource, Target};
use sandgate_proxy::{
    ApprovalRequest, Approver, BoxFuture, Outcome, Proxy, ProxyConfig, ProxyToken, Ruling,
    SandboxContext, SandboxId,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

fn proxy_with(events: &Arc<Events>) -> Proxy {
    Proxy::builder().resolver(Arc::new(TestResolver)).events(events.clone()).build()
}

/// Sends `frames` one after another and returns all the proxy answers until it closes.
async fn exchange(addr: SocketAddr, frames: &[&[u8]]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    for f in frames {
        if s.write_all(f).await.is_err() {
            break;
        }
        // Let each frame be read on its own, as real clients wait for each answer.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    out
}

/// The events, once there are at least `n` (a connection's event is recorded after it closes).
async fn settled(events: &Events, n: usize) -> Vec<sandgate_proxy::ProxyEvent> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let ev = events.all();
        if ev.len() >= n || tokio::time::Instant::now() > deadline {
            return ev;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn connect_name(name: &[u8], port: u16) -> Vec<u8> {
    let mut v = vec![5, 1, 0, 3, name.len() as u8];
    v.extend_from_slice(name);
    v.extend_from_slice(&port.to_be_bytes());
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_socks5_hostname_reaches_an_allowed_origin() {
    let origin = http_origin().await;
    let events = Arc::new(Events::default());
    let p = proxy_with(&events);
    let addr = serve(&p, "s1", policy(&["allowed.test", "127.0.0.1"], &[])).await;
    let out = curl(&[
        "--socks5-hostname",
        &addr.to_string(),
        &format!("http://allowed.test:{}/via-socks", origin.port()),
    ])
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.starts_with("origin says hello to /via-socks at allowed.test"), "{out:?}");
    // The same URL through socks5h:// as ALL_PROXY (what a sandbox sets).
    let out = curl(&[
        "-x",
        &format!("socks5h://{addr}"),
        &format!("http://allowed.test:{}/all-proxy", origin.port()),
    ])
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    let ev = settled(&events, 2).await;
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert_eq!(
        (ev[0].method.as_str(), ev[0].decision, ev[0].host.as_str(), ev[0].port),
        ("SOCKS5", Outcome::Allow, "allowed.test", origin.port())
    );
    assert_eq!(ev[0].rule, "allowed.test (command line)");
    assert!(ev[0].bytes_down > 50 && ev[0].bytes_up > 20, "{ev:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_through_socks_gets_the_sni_check() {
    let tls = tls_origin(&["allowed.test", "front.test"]).await;
    let events = Arc::new(Events::default());
    let p = proxy_with(&events);
    let addr = serve(&p, "s1", policy(&["allowed.test", "127.0.0.1"], &[])).await;
    let ok = curl(&[
        "--socks5-hostname",
        &addr.to_string(),
        "--cacert",
        tls.ca_file.to_str().unwrap(),
        &format!("https://allowed.test:{}/tls", tls.addr.port()),
    ])
    .await;
    assert_eq!(ok.code, 0, "{ok:?}");
    // Domain fronting: SOCKS to an allowed name, TLS to a name nobody allowed.
    let fronted = curl(&[
        "--socks5-hostname",
        &addr.to_string(),
        "--cacert",
        tls.ca_file.to_str().unwrap(),
        "--connect-to",
        &format!("front.test:{0}:allowed.test:{0}", tls.addr.port()),
        &format!("https://front.test:{}/tls", tls.addr.port()),
    ])
    .await;
    assert_ne!(fronted.code, 0, "{fronted:?}");
    let ev = settled(&events, 2).await;
    assert!(
        ev.iter().any(|e| e.method == "SOCKS5" && e.rule.contains("domain fronting")),
        "{ev:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_destination_gets_the_ruleset_reply_and_an_event() {
    let events = Arc::new(Events::default());
    let p = proxy_with(&events);
    let addr = serve(&p, "s1", policy(&["allowed.test"], &["evil.test"])).await;
    let out = curl(&["--socks5-hostname", &addr.to_string(), "http://evil.test/"]).await;
    // curl 97: "proxy handshake error" (it prints the SOCKS reply it got).
    assert_ne!(out.code, 0, "{out:?}");
    let got = exchange(addr, &[&[5, 1, 0], &connect_name(b"evil.test", 443)]).await;
    assert_eq!(got, [5, 0, 5, 2, 0, 1, 0, 0, 0, 0, 0, 0]);
    // No approver: an unknown name is refused the same way, and says why.
    let got = exchange(addr, &[&[5, 1, 0], &connect_name(b"unknown.test", 22)]).await;
    assert_eq!(got[2..4], [5, 2]);
    // An address asked for by number is decided as that address (loopback is guarded).
    let got = exchange(addr, &[&[5, 1, 0], &[5, 1, 0, 1, 127, 0, 0, 1, 0, 22]]).await;
    assert_eq!(got[2..4], [5, 2]);
    let ev = settled(&events, 4).await;
    assert_eq!(ev.len(), 4, "{ev:?}");
    assert!(ev.iter().all(|e| e.method == "SOCKS5" && e.decision == Outcome::Deny), "{ev:?}");
    assert_eq!(ev[1].rule, "deny evil.test (command line)");
    assert_eq!(ev[2].rule, "no approver running");
    assert_eq!((ev[2].host.as_str(), ev[2].port), ("unknown.test", 22));
    let why = ev[1].error.as_deref().unwrap();
    assert!(why.contains("0x02") && why.contains("evil.test:443"), "{why}");
    assert_eq!(ev[3].host, "127.0.0.1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_in_the_name_is_refused_before_any_resolution() {
    struct Counting(AtomicUsize);
    impl sandgate_proxy::Resolver for Counting {
        fn resolve<'a>(
            &'a self,
            _: &'a sandgate_config::DomainName,
            port: u16,
        ) -> BoxFuture<'a, std::io::Result<Vec<SocketAddr>>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move { Ok(vec![SocketAddr::from(([127, 0, 0, 1], port))]) })
        }
    }
    let resolver = Arc::new(Counting(AtomicUsize::new(0)));
    let events = Arc::new(Events::default());
    let p = Proxy::builder().resolver(resolver.clone()).events(events.clone()).build();
    let addr = serve(&p, "s1", policy(&["allowed.com", "*.allowed.com"], &[])).await;
    for name in [&b"evil\0.allowed.com"[..], b"evil.com\0allowed.com", b"a\r\n.allowed.com"] {
        let got = exchange(addr, &[&[5, 1, 0], &connect_name(name, 443)]).await;
        assert_eq!(got, [5, 0, 5, 4, 0, 1, 0, 0, 0, 0, 0, 0], "{name:?}");
    }
    assert_eq!(resolver.0.load(Ordering::SeqCst), 0, "a refused name was resolved");
    let ev = settled(&events, 3).await;
    assert_eq!(ev.len(), 3, "{ev:?}");
    assert!(
        ev.iter().all(|e| e.decision == Outcome::Reject && e.rule == "malformed request"),
        "{ev:?}"
    );
    assert_eq!(ev[0].host, r#""evil\0.allowed.com""#);
    assert!(ev[0].error.as_deref().unwrap().contains("invalid domain name"), "{ev:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_commands_and_address_types_get_their_codes() {
    let events = Arc::new(Events::default());
    let p = proxy_with(&events);
    let addr = serve(&p, "s1", policy(&["127.0.0.1"], &[])).await;
    // BIND, UDP ASSOCIATE: 0x07.
    for cmd in [2u8, 3] {
        let got = exchange(addr, &[&[5, 1, 0], &[5, cmd, 0, 1, 127, 0, 0, 1, 0, 80]]).await;
        assert_eq!(got[2..4], [5, 7], "cmd {cmd}");
    }
    let got = exchange(addr, &[&[5, 1, 0], &[5, 1, 0, 9, 1, 2]]).await;
    assert_eq!(got[2..4], [5, 8]);
    assert_eq!(settled(&events, 3).await.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_truncated_frames_are_refused_without_harm() {
    let origin = http_origin().await;
    let events = Arc::new(Events::default());
    let p = Proxy::builder()
        .resolver(Arc::new(TestResolver))
        .events(events.clone())
        .config(ProxyConfig { header_timeout: Duration::from_millis(500), ..Default::default() })
        .build();
    let addr = serve(&p, "s1", policy(&["allowed.test", "127.0.0.1"], &[])).await;
    let cases: &[(&[&[u8]], &[u8])] = &[
        (&[&[5, 0]], &[5, 0xff]),       // no methods
        (&[&[5]], &[]),                 // truncated greeting: timed out
        (&[&[5, 3, 0]], &[]),           // fewer methods than announced
        (&[&[5, 1, 0x80]], &[5, 0xff]), // only an unknown method
        (&[&[5, 1, 0], &[4, 1, 0, 1]], &[5, 0, 5, 1, 0, 1, 0, 0, 0, 0, 0, 0]), // wrong version
        (&[&[5, 1, 0], &[5, 1, 0, 3, 0, 0, 80]], &[5, 0, 5, 4, 0, 1, 0, 0, 0, 0, 0, 0]), // empty
        (&[&[5, 1, 0], &[5, 1, 0, 3, 200, b'a']], &[5, 0]), // name cut short
        (&[&[5, 1, 0], &[5, 1, 0, 1, 127, 0]], &[5, 0]), // address cut short
        (&[&[5, 1, 0], &[5, 1, 0, 1, 127, 0, 0, 1, 0, 0]], &[5, 0, 5, 1, 0, 1, 0, 0, 0, 0, 0, 0]), // port 0
        (&[&[5, 1, 2], &[2, 1, b'u', 1, b'p']], &[5, 2, 1, 1]), // bad sub-negotiation version
        (&[&[5, 255], &[0; 255]], &[5, 0]),                     // 255 methods, then garbage request
    ];
    for (frames, want) in cases {
        let got = exchange(addr, frames).await;
        assert_eq!(&got[..want.len().min(got.len())], *want, "{frames:?}: got {got:?}");
        assert!(got.len() <= 12, "{frames:?}: got {got:?}");
    }
    // Still serving.
    let out = curl(&[
        "--socks5-hostname",
        &addr.to_string(),
        &format!("http://allowed.test:{}/still", origin.port()),
    ])
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    let ev = settled(&events, cases.len() + 1).await;
    assert!(
        ev.iter().filter(|e| e.decision == Outcome::Reject).count() >= cases.len() - 1,
        "{ev:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_token_is_the_socks_password() {
    let origin = http_origin().await;
    let events = Arc::new(Events::default());
    let p = proxy_with(&events);
    let addr = serve_ctx(
        &p,
        SandboxContext {
            id: SandboxId::new("s1"),
            policy: policy(&["allowed.test", "127.0.0.1"], &[]),
            token: Some(ProxyToken::new("s3cret")),
        },
    )
    .await;
    let url = format!("http://allowed.test:{}/tok", origin.port());
    let out = curl(&["-x", &format!("socks5h://sandbox:s3cret@{addr}"), &url]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let out = curl(&["-x", &format!("socks5h://sandbox:wrong@{addr}"), &url]).await;
    assert_ne!(out.code, 0, "{out:?}");
    let out = curl(&["-x", &format!("socks5h://{addr}"), &url]).await;
    assert_ne!(out.code, 0, "{out:?}");
    // No-auth only: no acceptable method.
    assert_eq!(exchange(addr, &[&[5, 1, 0]]).await, [5, 0xff]);
    let ev = settled(&events, 4).await;
    assert_eq!(ev.len(), 4, "{ev:?}");
    assert!(ev[1..].iter().all(|e| e.rule == "proxy token required"), "{ev:?}");
    assert!(!format!("{ev:?}").contains("s3cret"));
}

/// Answers only when told to, counting the questions.
struct Gate {
    asked: AtomicUsize,
    release: Notify,
}

impl Approver for Gate {
    fn ask(&self, q: ApprovalRequest) -> BoxFuture<'_, Ruling> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            assert_eq!(q.method, "SOCKS5");
            self.release.notified().await;
            let pattern = DomainPattern::parse(&q.target.host.to_string(), PatternUse::Allow);
            Ruling::Allow(Arc::new(Rule {
                pattern: pattern.ok(),
                source: RuleSource::Grant("g-1".into()),
            }))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_socks_request_is_released_by_an_approval() {
    let origin = http_origin().await;
    let gate = Arc::new(Gate { asked: AtomicUsize::new(0), release: Notify::new() });
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).approver(gate.clone()).build();
    let addr = serve(&p, "s1", policy(&["127.0.0.1"], &[])).await;
    let target = Target::parse(&format!("ask.test:{}", origin.port())).unwrap();
    let url = format!("http://ask.test:{}/held", origin.port());
    let request =
        tokio::spawn(async move { curl(&["--socks5-hostname", &addr.to_string(), &url]).await });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while p.waiting(&SandboxId::new("s1"), &target) != 1 {
        assert!(tokio::time::Instant::now() < deadline, "the SOCKS request was never held");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    gate.release.notify_one();
    let out = request.await.unwrap();
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.starts_with("origin says hello to /held"), "{out:?}");
    assert_eq!(gate.asked.load(Ordering::SeqCst), 1);
}

/// A SOCKS client written from RFC 1928 with nothing but a socket (the `ncat --proxy-type
/// socks5` / PySocks shape), addressing the origin by IPv4 literal.
const PY_CLIENT: &str = r#"
import socket, struct, sys
proxy_port, origin_port = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", proxy_port), timeout=10)
s.sendall(b"\x05\x01\x00")
assert s.recv(2) == b"\x05\x00"
s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack(">H", origin_port))
rep = b""
while len(rep) < 10:
    rep += s.recv(10 - len(rep))
if rep[1] != 0:
    print("refused", rep[1]); sys.exit(3)
s.sendall(b"GET /py HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
out = b""
while True:
    b = s.recv(4096)
    if not b: break
    out += b
print(out.split(b"\r\n\r\n", 1)[1].decode())
"#;

async fn python(proxy: SocketAddr, origin: u16) -> std::process::Output {
    tokio::process::Command::new("python3")
        .args(["-c", PY_CLIENT, &proxy.port().to_string(), &origin.to_string()])
        .output()
        .await
        .expect("python3 must be installed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_python_socks_client_is_decided_by_ip() {
    let origin = http_origin().await;
    let p = Proxy::builder().resolver(Arc::new(TestResolver)).build();
    let allowed = serve(&p, "s1", policy(&[&format!("127.0.0.1:{}", origin.port())], &[])).await;
    let out = python(allowed, origin.port()).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.starts_with("origin says hello to /py"), "{stdout}");
    // The same client against a sandbox that allows only another port of that address.
    let other = serve(&p, "s2", policy(&["127.0.0.1:1"], &[])).await;
    let out = python(other, origin.port()).await;
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "refused 2");
}

/// Plain HTTP inside a SOCKS or CONNECT tunnel is pinned to the tunnel's host, as on the
/// transparent door: the origin hears the decided name whatever `Host` the client wrote
/// (HTTP domain fronting: asking an allowed name's server for another site), and the
/// connection ends after that one request, so a second one naming another site never reaches
/// it. (Control, by hand: without the pin in `tunnel_stages` the origin answers both requests,
/// the first "at evil.test".)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_in_a_tunnel_reaches_only_the_tunnels_host() {
    let origin = http_origin().await;
    let events = Arc::new(Events::default());
    let p = proxy_with(&events);
    let addr = serve(&p, "s1", policy(&["allowed.test", "127.0.0.1"], &[])).await;
    let port = origin.port();
    let requests = b"GET /one HTTP/1.1\r\nHost: evil.test\r\nhost: evil2.test\r\n\r\n\
                     GET /two HTTP/1.1\r\nHost: evil.test\r\n\r\n";
    let connect =
        format!("CONNECT allowed.test:{port} HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n");
    for (door, frames) in [
        ("SOCKS5", vec![vec![5, 1, 0], connect_name(b"allowed.test", port), requests.to_vec()]),
        ("CONNECT", vec![connect.into_bytes(), requests.to_vec()]),
    ] {
        let frames: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        let got = String::from_utf8_lossy(&exchange(addr, &frames).await).into_owned();
        assert_eq!(got.matches("origin says hello").count(), 1, "{door}: {got}");
        assert!(got.contains(&format!("hello to /one at allowed.test:{port} ")), "{door}: {got}");
        assert!(!got.contains("evil"), "{door}: {got}");
    }
    let ev = settled(&events, 2).await;
    for (e, door) in ev.iter().zip(["SOCKS5", "CONNECT"]) {
        assert_eq!((e.method.as_str(), e.decision), (door, Outcome::Allow), "{ev:?}");
        assert_eq!(e.path.as_deref(), Some("/one"), "{ev:?}");
    }
}
