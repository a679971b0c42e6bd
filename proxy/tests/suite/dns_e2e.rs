//! The DNS stub over real UDP and TCP sockets on 127.0.0.1, with a resolver that counts what it
//! is asked: every name no deny rule refuses gets an address of the sandbox's own and nothing is
//! ever looked up on the host; denied names NXDOMAIN, bad messages an error or nothing, and each
//! refusal an event.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use crate::common::{Events, dns_addrs as addrs, dns_ask_udp as ask_udp, dns_query, policy};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use sandgate_config::DomainName;
use sandgate_proxy::{BoxFuture, Proxy, Resolver, SandboxContext, SandboxId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

/// Answers a fixed table and records every name it is asked about.
#[derive(Default)]
struct Counting(Mutex<Vec<String>>);

impl Resolver for Counting {
    fn resolve<'a>(
        &'a self,
        name: &'a DomainName,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        Box::pin(async move {
            self.0.lock().unwrap().push(name.as_str().to_owned());
            let ips: &[&str] = match name.as_str() {
                "allowed.test" | "www.wild.test" | "git.test" => &["192.0.2.1", "2001:db8::1"],
                "loop.test" => &["127.0.0.1"],
                "lan.test" => &["10.1.2.3"],
                "mixed.test" => &["127.0.0.1", "192.0.2.7"],
                _ => return Err(io::Error::new(io::ErrorKind::NotFound, "unknown")),
            };
            Ok(ips.iter().map(|ip| SocketAddr::new(ip.parse().unwrap(), port)).collect())
        })
    }
}

struct Stub {
    udp: SocketAddr,
    tcp: SocketAddr,
    asked: Arc<Counting>,
    events: Arc<Events>,
    proxy: Proxy,
}

async fn stub() -> Stub {
    let asked = Arc::new(Counting::default());
    let events = Arc::new(Events::default());
    let proxy = Proxy::builder().resolver(asked.clone()).events(events.clone()).build();
    let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (udp_addr, tcp_addr) = (udp.local_addr().unwrap(), tcp.local_addr().unwrap());
    let ctx = SandboxContext {
        id: SandboxId::new("sg-dns"),
        policy: policy(
            &[
                "allowed.test",
                "*.wild.test",
                "git.test:22",
                "loop.test",
                "lan.test",
                "10.0.0.0/8",
                "mixed.test",
                // The test resolver's answers are documentation addresses, which the address
                // guard refuses like any non-public range unless allowed by IP.
                "192.0.2.0/24",
                "2001:db8::/32",
            ],
            &[
                "denied.test",
                "*.wild.test:25",
                "secret.wild.test",
                // Denied, so that made-up names under them are refusals (the flood test).
                "*.exfil.example",
                "*.attacker.co.uk",
                "*.other.test",
                "*.example",
            ],
        ),
        token: None,
    };
    let served = proxy.clone();
    tokio::spawn(async move { served.serve_dns(Some(udp), Some(tcp), ctx).await });
    Stub { udp: udp_addr, tcp: tcp_addr, asked, events, proxy }
}

fn query(name: &str, qtype: RecordType, id: u16) -> Vec<u8> {
    dns_query(name, qtype, id, false)
}

#[tokio::test]
async fn names_get_addresses_of_the_sandboxs_own_and_denied_names_nxdomain_without_a_lookup() {
    let s = stub().await;
    // (name, type, rcode, whether an address of the block is in the answer)
    let rows: &[(&str, RecordType, ResponseCode, bool)] = &[
        ("allowed.test.", RecordType::A, ResponseCode::NoError, true),
        // IPv4 only: every connection goes where the capture takes it.
        ("ALLOWED.test.", RecordType::AAAA, ResponseCode::NoError, false),
        ("www.wild.test.", RecordType::A, ResponseCode::NoError, true),
        ("git.test.", RecordType::A, ResponseCode::NoError, true),
        // Names no rule allows get one too: the connection is what is decided (and asked).
        ("unknown.test.", RecordType::A, ResponseCode::NoError, true),
        ("c2VjcmV0.exfil.test.", RecordType::A, ResponseCode::NoError, true),
        // Whatever the host would answer (loopback, private): the guard runs at connect time.
        ("loop.test.", RecordType::A, ResponseCode::NoError, true),
        // Only addresses: NODATA.
        ("allowed.test.", RecordType::TXT, ResponseCode::NoError, false),
        ("4.3.2.1.in-addr.arpa.", RecordType::PTR, ResponseCode::NoError, false),
        ("denied.test.", RecordType::A, ResponseCode::NXDomain, false),
        ("secret.wild.test.", RecordType::A, ResponseCode::NXDomain, false),
    ];
    let mut given: std::collections::HashMap<String, IpAddr> = Default::default();
    for (i, (name, qtype, rcode, addressed)) in rows.iter().enumerate() {
        let id = 100 + i as u16;
        let m = ask_udp(s.udp, &query(name, *qtype, id)).await.unwrap();
        assert_eq!(m.metadata.id, id, "{name}");
        assert_eq!(m.metadata.response_code, *rcode, "{name} {qtype:?}");
        let got = addrs(&m);
        assert_eq!(got.len(), usize::from(*addressed), "{name} {qtype:?}: {got:?}");
        if let Some(&ip) = got.first() {
            assert!(sandgate_proxy::names::in_block(ip), "{name}: {ip}");
            let key = name.to_ascii_lowercase();
            assert!(!given.values().any(|&v| v == ip), "{ip} given to two names");
            given.insert(key, ip);
        }
        assert_eq!(m.queries.len(), 1, "{name}: the question is echoed");
    }
    // The same name again: the same address.
    let again = ask_udp(s.udp, &query("Allowed.Test.", RecordType::A, 98)).await.unwrap();
    assert_eq!(addrs(&again), vec![given["allowed.test."]]);
    // The same refused name again (AAAA after A, a retry): answered, but not another event.
    let again = ask_udp(s.udp, &query("denied.test.", RecordType::AAAA, 99)).await.unwrap();
    assert_eq!(again.metadata.response_code, ResponseCode::NXDomain);
    let denied_events = s.events.all().iter().filter(|e| e.host == "denied.test").count();
    assert_eq!(denied_events, 1);
    // Nothing was looked up on the host.
    assert!(s.asked.0.lock().unwrap().is_empty(), "{:?}", s.asked.0.lock().unwrap());
    let events = s.events.all();
    let dns: Vec<_> = events.iter().filter(|e| e.method == "DNS").collect();
    let denied = dns.iter().find(|e| e.host == "denied.test").expect("an event for denied.test");
    assert_eq!(denied.decision.as_str(), "deny");
    assert!(denied.rule.contains("denied.test"), "{denied:?}");
    // Answers are not events (the connection that follows is).
    assert!(dns.iter().all(|e| e.decision.as_str() != "allow"), "{dns:?}");
}

#[tokio::test]
async fn tcp_queries_are_answered_in_order_and_huge_lengths_close_the_connection() {
    let s = stub().await;
    let mut c = TcpStream::connect(s.tcp).await.unwrap();
    for (id, name, rcode) in
        [(1, "allowed.test.", ResponseCode::NoError), (2, "denied.test.", ResponseCode::NXDomain)]
    {
        let q = query(name, RecordType::A, id);
        c.write_all(&(q.len() as u16).to_be_bytes()).await.unwrap();
        c.write_all(&q).await.unwrap();
        let len = c.read_u16().await.unwrap() as usize;
        let mut buf = vec![0u8; len];
        c.read_exact(&mut buf).await.unwrap();
        let m = Message::from_vec(&buf).unwrap();
        assert_eq!((m.metadata.id, m.metadata.response_code), (id, rcode), "{name}");
    }
    // A 65535-byte message is refused unread: the connection ends.
    c.write_all(&[0xff, 0xff]).await.unwrap();
    c.write_all(&[0u8; 1000]).await.unwrap();
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest).await;
    assert!(rest.is_empty(), "{rest:?}");
}

#[tokio::test]
async fn bad_datagrams_get_an_error_or_nothing_and_the_stub_keeps_serving() {
    let s = stub().await;
    let good = query("allowed.test.", RecordType::A, 7);
    let mut looped = good[..12].to_vec();
    looped.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
    let mut huge = good.clone();
    huge.resize(9000, 0xc0);
    let mut response = good.clone();
    response[2] |= 0x80;
    let garbage = vec![0xffu8; 5];
    for (what, bytes, want) in [
        ("label loop", &looped, Some(ResponseCode::FormErr)),
        ("huge", &huge, Some(ResponseCode::FormErr)),
        ("a response", &response, None),
        ("five bytes", &garbage, None),
    ] {
        let m = ask_udp(s.udp, bytes).await;
        assert_eq!(m.map(|m| m.metadata.response_code), want, "{what}");
    }
    let m = ask_udp(s.udp, &good).await.unwrap();
    assert!(addrs(&m).iter().all(|&ip| sandgate_proxy::names::in_block(ip)), "{m:?}");
    assert_eq!(addrs(&m).len(), 1);
    assert!(s.events.all().iter().any(|e| e.method == "DNS" && e.decision.as_str() == "reject"));
}

/// A sandbox asking for 10,000 made-up names (the shape of data smuggled out in labels, or of
/// filling the disk with one event per name) leaves a bounded number of events: one at once per
/// registrable domain, then one summary per domain and window whose count says how many names it
/// stands for. The counts add up to every name asked (so each refusal was seen: the control that
/// the bound is not names going missing), and names under distinct registrable domains are
/// each an event (those the daemon's cap on stored events bounds).
#[tokio::test]
async fn ten_thousand_refused_names_leave_a_bounded_number_of_events_whose_counts_add_up() {
    let s = stub().await;
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(s.udp).await.unwrap();
    let domains = ["exfil.example", "attacker.co.uk", "other.test"];
    let distinct = 40;
    let total = 10_000;
    let mut buf = vec![0u8; 2048];
    for i in 0..total {
        // A different, unguessable-looking name every time (a hash of i, in hex).
        let label = format!("{:016x}", (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let name = if i < distinct {
            format!("{label}.d{i}.example.")
        } else {
            format!("{label}.{}.", domains[i % domains.len()])
        };
        sock.send(&query(&name, RecordType::A, i as u16)).await.unwrap();
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), sock.recv(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        let m = Message::from_vec(&buf[..n]).unwrap();
        assert_eq!(m.metadata.response_code, ResponseCode::NXDomain, "{name}");
    }
    // The sandbox ends: what its windows counted is recorded now.
    s.proxy.flush_dns_refusals(Some(&SandboxId::new("sg-dns")));
    let events: Vec<_> = s.events.all().into_iter().filter(|e| e.method == "DNS").collect();
    assert!(events.len() <= distinct + 2 * domains.len(), "{} events", events.len());
    assert_eq!(events.iter().map(|e| e.count).sum::<u64>(), total as u64);
    for d in domains {
        let summary = events.iter().find(|e| e.host == d).unwrap_or_else(|| panic!("{d}"));
        assert!(summary.count > 3000 && summary.samples.len() == 5, "{summary:?}");
        assert!(summary.samples.iter().all(|n| n.ends_with(d)), "{summary:?}");
        assert!(summary.rule.contains(&format!("more names under {d}")), "{summary:?}");
    }
    assert!(s.asked.0.lock().unwrap().is_empty(), "a refused name was looked up");
}
