//! Red team: host spellings that are addresses in disguise, judged by the same parser and address
//! guard the proxy uses. Every row must end refused (an internal address) or unparsable; the
//! public rows at the end are the control that the table can tell the two apart.

use sandgate_config::Host;
use sandgate_proxy::guard::classify;

/// What the proxy would do with a CONNECT to `spelling`: `None` when it is a public address or a
/// name, `Some(why)` when the guard (or the parser) refuses it.
fn judged(spelling: &str) -> Result<Option<String>, String> {
    match Host::parse(spelling) {
        Err(e) => Err(e.to_string()),
        Ok(Host::Name(n)) => Ok(Some(format!("a name: {}", n.as_str()))),
        Ok(Host::Ip(ip)) => Ok(classify(ip).map(|f| f.to_string())),
    }
}

#[test]
fn disguised_internal_addresses_are_refused() {
    for spelling in [
        "2130706433",                             // 127.0.0.1 as one decimal number
        "0x7f000001",                             // ... one hex number
        "0x7f.1",                                 // hex and two parts
        "127.1",                                  // two parts
        "0177.0.0.1",                             // octal
        "0177.0.0.01",                            // octal, two octal parts
        "127.0.0.1.",                             // trailing dot
        "017700000001",                           // octal, one part
        "0",                                      // 0.0.0.0
        "0x0",                                    // 0.0.0.0
        "169.254.169.254",                        // metadata
        "0xa9fea9fe",                             // metadata, hex
        "2852039166",                             // metadata, decimal
        "[::ffff:7f00:1]",                        // IPv4-mapped loopback
        "[::ffff:127.0.0.1]",                     // the same, dotted
        "[::ffff:a9fe:a9fe]",                     // IPv4-mapped metadata
        "[::127.0.0.1]",                          // IPv4-compatible (deprecated)
        "[::7f00:1]",                             // the same, hex
        "[::ffff:0:7f00:1]",                      // IPv4-translated (RFC 2765)
        "[64:ff9b::7f00:1]",                      // NAT64 well-known prefix to loopback
        "[64:ff9b::a9fe:a9fe]",                   // NAT64 to metadata
        "[64:ff9b::10.0.0.1]",                    // NAT64 to private
        "[64:ff9b:1::a00:1]",                     // NAT64 local-use prefix
        "[64:ff9b:1::8.8.8.8]",                   // NAT64 local-use even to a public address
        "[2002:7f00:1::]",                        // 6to4 of loopback
        "[2002:a9fe:a9fe::1]",                    // 6to4 of metadata
        "[2001:0:4136:e378:8000:63bf:3fff:fdd2]", // Teredo
        "[::1]",
        "[0:0:0:0:0:0:0:1]",
        "[::]",
        "[fe80::1]",
        "[fd00:ec2::254]", // AWS IMDS over IPv6
        "[fc00::1]",
        "[fec0::1]",
        "[ff02::1]",
        "[100::1]",        // discard-only
        "[::2]",           // in ::/96, unassigned
        "[4000::1]",       // outside 2000::/3: unassigned, deny by default
        "100.100.100.200", // Alibaba metadata
        "100.64.0.1",      // CGNAT
        "198.18.0.1",      // benchmarking
        "192.0.0.8",
        "255.255.255.255",
        "240.0.0.1",
        "224.0.0.1",
    ] {
        match judged(spelling) {
            Ok(Some(why)) if !why.starts_with("a name") => {}
            Err(_) => {} // not a host at all: refused earlier
            other => panic!("{spelling} passes the guard: {other:?}"),
        }
    }
    // Zone ids are refused by the parser (the guard never sees them).
    for spelling in ["[fe80::1%eth0]", "[fe80::1%25eth0]", "[::1%lo]"] {
        assert!(judged(spelling).is_err(), "{spelling} parsed");
    }
    // Control: public addresses pass, whatever their spelling.
    for spelling in ["8.8.8.8", "0x8080808", "134744072", "[2606:4700::1111]", "[::ffff:8.8.8.8]"] {
        assert_eq!(judged(spelling), Ok(None), "{spelling}");
    }
}

/// A network namespace of the test (`lo` up), deleted on drop.
struct TestNs(String);

impl TestNs {
    fn new() -> TestNs {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!("sgp-own-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
        ip(&["netns", "add", &name]);
        let ns = TestNs(name);
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    fn ip(&self, args: &[&str]) {
        ip(&[&["-n", self.0.as_str()], args].concat());
    }

    /// Runs `f` on a thread of its own inside the namespace (threads it starts are inside too).
    fn enter<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.0);
        std::thread::scope(|s| {
            s.spawn(|| {
                let ns = std::fs::File::open(&path).unwrap();
                nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
                f()
            })
            .join()
            .expect("the namespace's thread panicked")
        })
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn ip(args: &[&str]) {
    let out = std::process::Command::new("ip").args(args).output().expect("ip");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// `own.test` resolves to one address.
struct OneAddress(std::net::SocketAddr);

impl sandgate_proxy::Resolver for OneAddress {
    fn resolve<'a>(
        &'a self,
        _: &'a sandgate_config::DomainName,
        _: u16,
    ) -> sandgate_proxy::BoxFuture<'a, std::io::Result<Vec<std::net::SocketAddr>>> {
        Box::pin(async move { Ok(vec![self.0]) })
    }
}

/// Issue 37, part 3: an address added to one of the host's interfaces after the proxy started
/// is refused as the host's own once the proxy's own-address cache is a lifetime old (the
/// address is public by its class, so only the own-address check stands in the way). Controls:
/// before it is added the request is not refused by the guard (it finds nothing there), and
/// once added the address answers a direct connection.
#[test]
fn an_address_added_after_the_proxy_started_is_refused_within_the_cache_lifetime() {
    let root = nix::unistd::geteuid().is_root();
    let have_ip =
        std::process::Command::new("ip").arg("-V").output().is_ok_and(|o| o.status.success());
    if sandgate_test_support::skip_unless(root && have_ip, "root and the `ip` command") {
        return;
    }
    let ns = TestNs::new();
    let added: std::net::IpAddr = "45.90.9.2".parse().unwrap();
    assert_eq!(classify(added), None, "a public address by its class");
    ns.enter(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            use crate::common::{policy, raw, serve};
            use tokio::io::AsyncWriteExt;
            // An origin on every address of the namespace, present and future.
            let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            tokio::spawn(async move {
                while let Ok((mut s, _)) = listener.accept().await {
                    let hello =
                        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";
                    let _ = s.write_all(hello).await;
                }
            });
            let target = std::net::SocketAddr::new(added, port);
            let proxy = sandgate_proxy::Proxy::builder()
                .resolver(std::sync::Arc::new(OneAddress(target)))
                .build();
            let addr = serve(&proxy, "own", policy(&["own.test"], &[])).await;
            let connect =
                format!("CONNECT own.test:{port} HTTP/1.1\r\nHost: own.test:{port}\r\n\r\n");
            let refused = "an address of the proxy's own host";

            // Before: not the host's; nothing answers there (no route), and the guard let it by.
            let before = raw(addr, connect.as_bytes()).await;
            let read_by = std::time::Instant::now(); // the cache was read before this
            assert!(before.starts_with("HTTP/1.1 502"), "{before}");
            assert!(!before.contains(refused), "{before}");

            ns.ip(&["addr", "add", "45.90.9.2/32", "dev", "lo"]);
            // Control: the address answers now, so a refusal is the guard's.
            let mut direct = tokio::net::TcpStream::connect(target).await.expect("direct");
            let mut got = String::new();
            tokio::io::AsyncReadExt::read_to_string(&mut direct, &mut got).await.unwrap();
            assert!(got.ends_with("hello"), "{got}");

            // The cache was read at the latest at `read_by`: one lifetime later it is read again.
            tokio::time::sleep_until((read_by + sandgate_proxy::guard::OWN_ADDRESSES_TTL).into())
                .await;
            let after = raw(addr, connect.as_bytes()).await;
            assert!(after.starts_with("HTTP/1.1 403"), "{after}");
            assert!(after.contains(&format!("45.90.9.2 is {refused}")), "{after}");
        })
    });
}
