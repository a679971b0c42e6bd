//! Real kernel: host-wide guest-user rules (nftables backend) for a user the test creates. Its
//! direct TCP/UDP/ICMP to a test host in a namespace the test created is rejected and logged; its
//! traffic to the proxy passes; root is untouched; remove leaves no trace; gc removes tables whose
//! owner is gone; applying twice is idempotent.

mod common;

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{NetNs, TestUser, nflog_group, run_with_stdin, sh, subnet, veth};
use sandgate_monitor::nflog::NflogSocket;
use sandgate_monitor::{BlockedPacket, Protocol};
use sandgate_pf::nft::{NftFirewall, guest_table};
use sandgate_pf::{Firewall, GuestPolicy, Scope, SystemOwnerCheck};

fn ruleset() -> String {
    String::from_utf8_lossy(&sh(&["nft", "list", "ruleset"]).stdout).into_owned()
}

fn table(name: &str) -> String {
    String::from_utf8_lossy(&sh(&["nft", "list", "table", "inet", name]).stdout).into_owned()
}

fn as_user(user: &TestUser, raw: bool, args: &[&str], stdin: &[u8]) -> Output {
    let cmd = user.cmd(raw, args);
    let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    run_with_stdin(&refs, stdin)
}

fn tools_present() -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let have = |p: &str| std::env::split_paths(&path).any(|d| d.join(p).is_file());
    let ok = have("setpriv") && have("socat") && have("useradd") && have("bash");
    if !ok {
        assert!(!common::in_ci(), "setpriv, socat, useradd and bash are required in CI");
        eprintln!("SKIP: setpriv/socat/useradd/bash missing");
    }
    ok
}

#[test]
fn guest_user_is_fenced_logged_and_removed_without_trace() {
    if common::skip_without_kernel() || !tools_present() {
        return;
    }
    let user = TestUser::new();
    let testhost = NetNs::new("gh");
    let (_, th) = veth(None, &testhost, subnet());
    let l4 = testhost.enter(|| TcpListener::bind((th.v4, 0)).expect("bind v4"));
    let l6 = testhost.enter(|| TcpListener::bind((th.v6, 0)).expect("bind v6"));
    let (p4, p6) = (l4.local_addr().unwrap().port(), l6.local_addr().unwrap().port());
    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_addr = proxy.local_addr().unwrap();

    let group = nflog_group();
    let mut sock = NflogSocket::open(group).expect("open NFLOG group on the host");
    let fw = NftFirewall::system();
    let scope = Scope::user(user.uid);
    let plan = fw
        .plan(
            &scope,
            &GuestPolicy {
                proxies: vec![proxy_addr],
                nflog_group: group,
                subids: Default::default(),
            },
        )
        .unwrap();
    fw.apply(&plan).expect("apply");
    let first = table(&plan.name);
    fw.apply(&plan).expect("apply again");
    assert_eq!(table(&plan.name), first, "applying twice changed the table");
    assert_eq!(ruleset().matches(&format!("table inet {} ", plan.name)).count(), 1);

    // The guest's direct connections fail at once.
    let bash = |target: String| {
        let t = Instant::now();
        let out = as_user(&user, false, &["bash", "-c", &format!("echo x > {target}")], b"");
        (out, t.elapsed())
    };
    for (target, why) in [
        (format!("/dev/tcp/{}/{p4}", th.v4), "refused"),
        (format!("/dev/tcp/{}/{p6}", th.v6), "refused"),
        (format!("/dev/udp/{}/53", th.v4), "not permitted"),
        (format!("/dev/udp/{}/53", th.v6), "not permitted"),
    ] {
        let (out, took) = bash(target.clone());
        let stderr = String::from_utf8_lossy(&out.stderr).to_lowercase();
        assert!(!out.status.success(), "guest reached {target}");
        assert!(stderr.contains(why), "{target}: {stderr}");
        assert!(took < Duration::from_secs(1), "{target} took {took:?}");
    }
    let echo4 = [8u8, 0, 0xf7, 0xfe, 0, 1, 0, 0];
    let echo6 = [128u8, 0, 0, 0, 0, 1, 0, 0];
    for (addr, data) in [
        (format!("IP4-SENDTO:{}:1", th.v4), &echo4),
        (format!("IP6-SENDTO:[{}]:58", th.v6), &echo6),
    ] {
        let out = as_user(&user, true, &["socat", "-u", "STDIN", &addr], data);
        assert!(!out.status.success(), "guest ICMP via {addr} was sent");
    }

    // The proxy is reachable for the guest.
    let (out, _) = bash(format!("/dev/tcp/127.0.0.1/{}", proxy_addr.port()));
    assert!(
        out.status.success(),
        "guest could not reach the proxy: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Root is untouched.
    TcpStream::connect_timeout(&SocketAddr::new(th.v4.into(), p4), Duration::from_secs(2))
        .expect("root reaches the test host");
    TcpStream::connect_timeout(&SocketAddr::new(th.v6.into(), p6), Duration::from_secs(2))
        .expect("root reaches the test host over IPv6");

    // Every attempt was logged with the scope's prefix and the guest's uid.
    let want: [(Protocol, IpAddr); 6] = [
        (Protocol::Tcp, th.v4.into()),
        (Protocol::Tcp, th.v6.into()),
        (Protocol::Udp, th.v4.into()),
        (Protocol::Udp, th.v6.into()),
        (Protocol::Icmp, th.v4.into()),
        (Protocol::Icmpv6, th.v6.into()),
    ];
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got: Vec<BlockedPacket> = Vec::new();
    while Instant::now() < deadline
        && !want.iter().all(|(p, d)| got.iter().any(|g| g.protocol == *p && g.dst == *d))
    {
        got.extend(sock.recv(Duration::from_millis(200)).expect("recv"));
    }
    for (p, d) in want {
        let g = got
            .iter()
            .find(|g| g.protocol == p && g.dst == d)
            .unwrap_or_else(|| panic!("no {p:?} record to {d}: {got:#?}"));
        assert_eq!(g.prefix, scope.log_prefix());
        assert_eq!(g.uid, Some(user.uid), "{g:?}");
    }
    assert!(got.iter().all(|g| g.uid == Some(user.uid)), "someone else was logged: {got:#?}");
    assert!(got.iter().all(|g| !g.dst.is_loopback()), "proxy traffic was logged: {got:#?}");

    assert!(fw.remove(&scope).expect("remove"));
    assert!(!ruleset().contains(&plan.name), "table left behind:\n{}", ruleset());
    assert!(!fw.remove(&scope).expect("remove again"));
    // With the rules gone the guest reaches the test host.
    let (out, _) = bash(format!("/dev/tcp/{}/{p4}", th.v4));
    assert!(out.status.success(), "guest still fenced after remove");
}

#[test]
fn gc_removes_tables_whose_owner_is_gone() {
    if common::skip_without_kernel() || !tools_present() {
        return;
    }
    let user = TestUser::new();
    let mut gone = TestUser::new();
    let fw = NftFirewall::system();
    let policy = GuestPolicy {
        proxies: vec!["127.0.0.1:3128".parse().unwrap()],
        nflog_group: nflog_group(),
        subids: Default::default(),
    };
    let mut child = Command::new("sleep").arg("600").spawn().unwrap();
    let dead_owner = Scope::owned_by(user.uid, child.id());
    let live_owner = Scope::owned_by(user.uid, std::process::id());
    let deleted_user = Scope::user(gone.uid);
    for s in [dead_owner, live_owner, deleted_user] {
        fw.apply(&fw.plan(&s, &policy).unwrap()).unwrap();
    }
    let listed: Vec<Scope> = fw.list().unwrap().into_iter().map(|i| i.scope).collect();
    for s in [dead_owner, live_owner, deleted_user] {
        assert!(listed.contains(&s), "{s} not listed in {listed:?}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
    gone.delete();

    let removed = fw.gc(&SystemOwnerCheck).expect("gc");
    assert!(removed.contains(&dead_owner), "{removed:?}");
    assert!(removed.contains(&deleted_user), "{removed:?}");
    assert!(!removed.contains(&live_owner), "{removed:?}");
    let rs = ruleset();
    assert!(!rs.contains(&guest_table(&dead_owner)));
    assert!(!rs.contains(&format!("{} ", guest_table(&deleted_user))));
    assert!(rs.contains(&guest_table(&live_owner)));
    assert!(fw.remove(&live_owner).unwrap());
}
