//! Red team: the DNS stub as a way to the host's own network. Names under an allowed wildcard
//! whose owner answers with internal addresses in every disguise (DNS rebinding), record types
//! and name spellings the stub does not expect, and lookups that must never reach the host's
//! resolver.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use crate::common::{Events, dns_addrs as addrs, dns_ask_udp as ask, dns_query as query, policy};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use sandgate_config::DomainName;
use sandgate_proxy::{BoxFuture, Proxy, Resolver, SandboxContext, SandboxId};
use tokio::net::UdpSocket;

/// The zone of `*.rebind.test` is the attacker's: each label answers another disguise.
#[derive(Default)]
struct Rebinding(Mutex<Vec<String>>);

impl Resolver for Rebinding {
    fn resolve<'a>(
        &'a self,
        name: &'a DomainName,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        Box::pin(async move {
            self.0.lock().unwrap().push(name.as_str().to_owned());
            let ips: &[&str] = match name.as_str() {
                "mapped.rebind.test" => &["::ffff:127.0.0.1"],
                "mapped-meta.rebind.test" => &["::ffff:169.254.169.254"],
                "compat.rebind.test" => &["::127.0.0.1"],
                "nat64.rebind.test" => &["64:ff9b::a9fe:a9fe"],
                "nat64-local.rebind.test" => &["64:ff9b:1::808:808"],
                "sixtofour.rebind.test" => &["2002:7f00:1::1"],
                "teredo.rebind.test" => &["2001:0:4136:e378:8000:63bf:3fff:fdd2"],
                "linklocal.rebind.test" => &["fe80::1"],
                "ula.rebind.test" => &["fd00::1"],
                "meta6.rebind.test" => &["fd00:ec2::254"],
                "zero.rebind.test" => &["0.0.0.0"],
                "cgnat.rebind.test" => &["100.64.0.1"],
                "alibaba.rebind.test" => &["100.100.100.200"],
                "bench.rebind.test" => &["198.18.0.1"],
                "unassigned6.rebind.test" => &["4000::1"],
                "mixed.rebind.test" => &["127.0.0.1", "8.8.8.8", "::1", "2606:4700::1111"],
                _ => return Err(io::Error::new(io::ErrorKind::NotFound, "unknown")),
            };
            Ok(ips.iter().map(|ip| SocketAddr::new(ip.parse().unwrap(), port)).collect())
        })
    }
}

async fn stub() -> (SocketAddr, Arc<Rebinding>, Arc<Events>) {
    let asked = Arc::new(Rebinding::default());
    let events = Arc::new(Events::default());
    let proxy = Proxy::builder().resolver(asked.clone()).events(events.clone()).build();
    let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = udp.local_addr().unwrap();
    let ctx = SandboxContext {
        id: SandboxId::new("sg-red-dns"),
        policy: policy(&["*.rebind.test"], &["denied.rebind.test"]),
        token: None,
    };
    tokio::spawn(async move { proxy.serve_dns(Some(udp), None, ctx).await });
    (addr, asked, events)
}

/// Every disguise of an internal address is out of reach of the stub's answers: a name is
/// answered with an address of the sandbox's own (198.18.0.0/15), never with what the host's
/// resolver says, and no name is looked up on the host at all (the address guard runs when a
/// connection to the name is made: the transparent and proxy paths' tests).
#[tokio::test]
async fn a_rebinding_wildcard_name_never_answers_an_internal_address() {
    let (addr, asked, _) = stub().await;
    let mut id = 1;
    let mut given = std::collections::HashSet::new();
    for label in [
        "mapped",
        "mapped-meta",
        "compat",
        "nat64",
        "nat64-local",
        "sixtofour",
        "teredo",
        "linklocal",
        "ula",
        "meta6",
        "zero",
        "cgnat",
        "alibaba",
        "bench",
        "unassigned6",
        "mixed",
    ] {
        let name = format!("{label}.rebind.test.");
        id += 1;
        let m = ask(addr, &query(&name, RecordType::A, id, false)).await.unwrap();
        assert_eq!(m.metadata.response_code, ResponseCode::NoError, "{name}");
        let got = addrs(&m);
        assert_eq!(got.len(), 1, "{name}: {got:?}");
        assert!(sandgate_proxy::names::in_block(got[0]), "{name}: {got:?}");
        assert!(given.insert(got[0]), "{name}: {} given to two names", got[0]);
        id += 1;
        let m = ask(addr, &query(&name, RecordType::AAAA, id, false)).await.unwrap();
        assert_eq!(m.metadata.response_code, ResponseCode::NoError, "{name} AAAA");
        assert!(addrs(&m).is_empty(), "{name} AAAA: {:?}", addrs(&m));
    }
    assert!(asked.0.lock().unwrap().is_empty(), "looked up on the host");
}

/// Record types other than A and AAAA never carry what the host's resolver knows, whatever
/// EDNS buffer the query offers; spellings of names never reach the resolver when refused.
#[tokio::test]
async fn other_record_types_and_name_spellings_get_nothing_from_the_host() {
    let (addr, asked, _) = stub().await;
    for (i, qtype) in [
        RecordType::TXT,
        RecordType::MX,
        RecordType::SRV,
        RecordType::HTTPS,
        RecordType::SVCB,
        RecordType::CNAME,
        RecordType::NS,
        RecordType::SOA,
        RecordType::PTR,
        RecordType::ANY,
        RecordType::AXFR,
        RecordType::NULL,
        RecordType::Unknown(65280),
    ]
    .into_iter()
    .enumerate()
    {
        let m = ask(addr, &query("mixed.rebind.test.", qtype, 10 + i as u16, true)).await;
        if let Some(m) = m {
            assert!(m.answers.is_empty(), "{qtype:?}: {:?}", m.answers);
            assert!(m.additionals.is_empty() && m.authorities.is_empty(), "{qtype:?}");
        }
    }
    for (i, name) in [
        "DENIED.rebind.test.",
        "denied.REBIND.test.",
        "xn--dnied-bsa.rebind.test.", // an IDN label is just a label: not denied, not special
        "denied.rebind.test.rebind.test.",
    ]
    .into_iter()
    .enumerate()
    {
        let _ = ask(addr, &query(name, RecordType::A, 50 + i as u16, false)).await.unwrap();
    }
    let asked = asked.0.lock().unwrap().clone();
    assert!(!asked.iter().any(|a| a == "denied.rebind.test"), "{asked:?}");
}
