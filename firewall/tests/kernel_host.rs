//! Real kernel: host-wide guest-user rules (nftables backend) for a user the test creates. Its
//! direct TCP/UDP/ICMP to a test host in a namespace the test created is rejected and logged; its
//! traffic to the proxy passes; root is untouched; remove leaves no trace; gc removes tables whose
//! owner is gone; applying twice is idempotent. The user's subordinate uids (a user namespace made
//! with `unshare --map-auto`) are fenced too, and an outside host cannot connect to the user's
//! listeners; both with a control row that runs the ruleset as it was before.

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{NetNs, TestUser, nflog_group, run_with_stdin, sh, subnet, veth};
use sandgate_firewall::nft::{GuestTables, guest_table};
use sandgate_firewall::{Firewall, GuestPolicy, GuestScope, SubIds, SystemOwnerCheck};
use sandgate_monitor::nflog::NflogSocket;
use sandgate_monitor::{BlockedPacket, Protocol};

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

/// The fence drops unowned SYN-ACKs and multicast reports host-wide, so tests in this process
/// that apply a fence run one at a time: a control row must not see another test's drops.
fn host_wide() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn tools_present() -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let have = |p: &str| std::env::split_paths(&path).any(|d| d.join(p).is_file());
    let ok = have("setpriv") && have("socat") && have("useradd") && have("bash");
    !common::skip_unless(ok, "setpriv, socat, useradd and bash")
}

#[test]
fn guest_user_is_fenced_logged_and_removed_without_trace() {
    let _host_wide = host_wide();
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
    let fw = GuestTables::system();
    let scope = GuestScope::user(user.uid);
    let plan = fw
        .plan(
            &scope,
            &GuestPolicy {
                proxies: vec![proxy_addr],
                nflog_group: group,
                subids: Default::default(),
                allow_syncookies: false,
                allow_multicast_reports: false,
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
        // Refused at once, not dropped: the error text above says which; the time is printed.
        eprintln!("{target}: failed in {took:?}");
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
    let _host_wide = host_wide();
    if common::skip_without_kernel() || !tools_present() {
        return;
    }
    let user = TestUser::new();
    let mut gone = TestUser::new();
    let fw = GuestTables::system();
    let policy = GuestPolicy {
        proxies: vec!["127.0.0.1:3128".parse().unwrap()],
        nflog_group: nflog_group(),
        subids: Default::default(),
        allow_syncookies: false,
        allow_multicast_reports: false,
    };
    let mut child = Command::new("sleep").arg("600").spawn().unwrap();
    let dead_owner = GuestScope::owned_by(user.uid, child.id());
    let live_owner = GuestScope::owned_by(user.uid, std::process::id());
    let deleted_user = GuestScope::user(gone.uid);
    for s in [dead_owner, live_owner, deleted_user] {
        fw.apply(&fw.plan(&s, &policy).unwrap()).unwrap();
    }
    let listed: Vec<GuestScope> = fw.list().unwrap().into_iter().map(|i| i.scope).collect();
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

/// The guest ruleset exactly as it was before the whole identity was fenced (uid only, every
/// reply accepted): the control row showing that the tests below catch both holes.
fn ruleset_before_fix(scope: &GuestScope, proxy: SocketAddr, group: u16) -> String {
    let t = guest_table(scope);
    let (uid, prefix) = (scope.uid, scope.log_prefix());
    format!(
        "add table inet {t}
delete table inet {t}
table inet {t} {{
\tset allow4 {{
\t\ttype ipv4_addr . inet_service
\t\telements = {{ {} . {} }}
\t}}
\tset allow6 {{
\t\ttype ipv6_addr . inet_service
\t}}
\tchain output {{
\t\ttype filter hook output priority 0; policy accept;
\t\tmeta skuid {uid} jump guest
\t}}
\tchain guest {{
\t\tct direction reply accept
\t\tip daddr . tcp dport @allow4 accept
\t\tip6 daddr . tcp dport @allow6 accept
\t\tlog prefix \"{prefix}\" group {group}
\t\tmeta l4proto tcp reject with tcp reset
\t\treject with icmpx admin-prohibited
\t}}
}}
",
        proxy.ip(),
        proxy.port()
    )
}

/// Waits up to 5 s for NFLOG records until `done` says enough was seen.
fn records(sock: &mut NflogSocket, done: impl Fn(&[BlockedPacket]) -> bool) -> Vec<BlockedPacket> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    while Instant::now() < deadline && !done(&got) {
        got.extend(sock.recv(Duration::from_millis(200)).expect("recv"));
    }
    got
}

/// Removes the scope's table when dropped, so a failed assertion leaves no fence behind for a
/// later user with the same uid.
struct RemoveOnDrop(GuestScope);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = GuestTables::system().remove(&self.0);
    }
}

/// A TCP connection from `local` (bound first, address reuse on) to `target`, giving up after
/// 3 s (Linux bounds a blocking connect by the send timeout).
fn connect_from(local: SocketAddr, target: SocketAddr) -> std::io::Result<TcpStream> {
    use nix::sys::socket::{
        AddressFamily, SockFlag, SockType, SockaddrStorage, bind, connect, setsockopt, socket,
        sockopt,
    };
    let fd = socket(AddressFamily::Inet, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    setsockopt(&fd, sockopt::SendTimeout, &nix::sys::time::TimeVal::new(3, 0))?;
    bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrStorage::from(local))?;
    connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrStorage::from(target))?;
    Ok(TcpStream::from(fd))
}

fn have_newuidmap() -> bool {
    let ok = ["/usr/bin/newuidmap", "/usr/bin/newgidmap"].iter().all(|p| {
        std::fs::metadata(p)
            .is_ok_and(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o4000 != 0)
    });
    !common::skip_unless(ok, "setuid newuidmap/newgidmap (package uidmap)")
}

/// Issue 14.2: as a fresh user with a subuid range, `unshare --user --map-auto --setuid 0`
/// opened sockets with a kernel uid from that range, which `meta skuid U` did not match.
#[test]
fn subordinate_uids_are_fenced_and_reported() {
    let _host_wide = host_wide();
    if common::skip_without_kernel() || !tools_present() || !have_newuidmap() {
        return;
    }
    let Some(user) = TestUser::with_subids() else { return };
    let subids = SubIds::read_system(user.uid, Some(&user.name)).expect("read subids");
    assert!(!subids.uids.is_empty() && !subids.gids.is_empty(), "{subids}");
    let testhost = NetNs::new("gs");
    let (_, th) = veth(None, &testhost, subnet());
    let l4 = testhost.enter(|| TcpListener::bind((th.v4, 0)).expect("bind v4"));
    let l6 = testhost.enter(|| TcpListener::bind((th.v6, 0)).expect("bind v6"));
    let (p4, p6) = (l4.local_addr().unwrap().port(), l6.local_addr().unwrap().port());
    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_addr = proxy.local_addr().unwrap();
    let group = nflog_group();
    let mut sock = NflogSocket::open(group).expect("open NFLOG group on the host");
    let scope = GuestScope::owned_by(user.uid, std::process::id());
    let _cleanup = RemoveOnDrop(scope);
    let fw = GuestTables::system();

    // `root` inside a user namespace mapped from the subordinate ranges (uid and gid).
    let in_userns = |script: String| {
        let unshare = ["unshare", "--user", "--map-auto", "--setuid", "0", "--setgid", "0"];
        let mut args: Vec<&str> = unshare.to_vec();
        args.extend(["bash", "-c", &script]);
        as_user(&user, false, &args, b"")
    };
    let reach = |addr: String| format!("id -u >&2; echo x > /dev/tcp/{addr}");
    let t4 = format!("{}/{p4}", th.v4);
    let t6 = format!("{}/{p6}", th.v6);

    // Control: the fence as it was lets the namespace's root straight out.
    sandgate_firewall::nft::apply(&ruleset_before_fix(&scope, proxy_addr, group))
        .expect("apply old");
    let out = in_userns(reach(t4.clone()));
    assert!(
        out.status.success(),
        "control: the old fence should have missed the subuid: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let policy = GuestPolicy {
        proxies: vec![proxy_addr],
        nflog_group: group,
        subids: subids.clone(),
        allow_syncookies: false,
        allow_multicast_reports: false,
    };
    fw.apply(&fw.plan(&scope, &policy).unwrap()).expect("apply");
    for target in [&t4, &t6] {
        let out = in_userns(reach(target.clone()));
        let stderr = String::from_utf8_lossy(&out.stderr).to_lowercase();
        assert!(!out.status.success(), "the user namespace reached {target}");
        assert!(stderr.contains("refused"), "{target}: {stderr}");
    }
    // Other ids of the namespace: any mapped uid/gid, and the user's own uid mapped to root.
    for unshare in [
        &["unshare", "--user", "--map-auto", "--setuid", "5000", "--setgid", "5000"][..],
        &["unshare", "--user", "--map-auto", "--setuid", "65535"][..],
        &["unshare", "--user", "--map-root-user"][..],
    ] {
        let script = reach(t4.clone());
        let mut args = unshare.to_vec();
        args.extend(["bash", "-c", &script]);
        let out = as_user(&user, false, &args, b"");
        let stderr = String::from_utf8_lossy(&out.stderr).to_lowercase();
        assert!(!out.status.success() && stderr.contains("refused"), "{unshare:?}: {stderr}");
    }
    // A socket whose gid alone is from the subgid range (uid nobody) is fenced too.
    let gid = subids.gids[0].first.to_string();
    let out = run_with_stdin(
        &[
            "setpriv",
            "--reuid=65534",
            &format!("--regid={gid}"),
            "--clear-groups",
            "bash",
            "-c",
            &reach(t4.clone()),
        ],
        b"",
    );
    assert!(!out.status.success(), "a subgid socket reached {t4}");
    // The same user still reaches the proxy, as itself and from its user namespace.
    for out in [
        as_user(
            &user,
            false,
            &["bash", "-c", &reach(format!("127.0.0.1/{}", proxy_addr.port()))],
            b"",
        ),
        in_userns(reach(format!("127.0.0.1/{}", proxy_addr.port()))),
    ] {
        assert!(
            out.status.success(),
            "proxy unreachable: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Reported, with the kernel uid from the range.
    let in_range = |u: Option<u32>| u.is_some_and(|u| subids.uids.iter().any(|r| r.contains(u)));
    let got = records(&mut sock, |got| {
        [IpAddr::from(th.v4), IpAddr::from(th.v6)]
            .iter()
            .all(|d| got.iter().any(|g| g.dst == *d && in_range(g.uid)))
    });
    for d in [IpAddr::from(th.v4), IpAddr::from(th.v6)] {
        let g = got
            .iter()
            .find(|g| g.dst == d && g.protocol == Protocol::Tcp)
            .unwrap_or_else(|| panic!("no record to {d}: {got:#?}"));
        assert!(in_range(g.uid), "uid {:?} not in {subids}: {g:?}", g.uid);
        assert_eq!(g.prefix, scope.log_prefix());
    }
    assert!(fw.remove(&scope).expect("remove"));
}

/// Issue 14.3: `ct direction reply accept` let an outside host connect to a listener of the
/// fenced user and read what it sent, and get answers from its UDP sockets.
#[test]
fn inbound_connections_to_the_users_sockets_are_refused() {
    let _host_wide = host_wide();
    if common::skip_without_kernel() || !tools_present() {
        return;
    }
    let user = TestUser::new();
    let testhost = NetNs::new("gi");
    let (host, th) = veth(None, &testhost, subnet());
    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_addr = proxy.local_addr().unwrap();
    let group = nflog_group();
    let mut sock = NflogSocket::open(group).expect("open NFLOG group on the host");
    let scope = GuestScope::owned_by(user.uid, std::process::id());
    let _cleanup = RemoveOnDrop(scope);
    let fw = GuestTables::system();

    // Sockets of the user on the host's end of the link (created with its fsuid/fsgid).
    let (tcp4, tcp6, udp) = user.as_socket_owner(|| {
        (
            TcpListener::bind((host.v4, 0)).expect("bind tcp v4"),
            TcpListener::bind((host.v6, 0)).expect("bind tcp v6"),
            UdpSocket::bind((host.v4, 0)).expect("bind udp"),
        )
    });
    let targets = [tcp4.local_addr().unwrap(), tcp6.local_addr().unwrap()];
    // A proxy on the outside host (an address . port the user may connect to).
    let remote_proxy =
        testhost.enter(|| TcpListener::bind((th.v4, 0)).unwrap().local_addr().unwrap());
    let udp_addr = udp.local_addr().unwrap();
    // What the outside host gets: the listener's data (TCP), and the answer to a datagram (UDP).
    let attempt = |expect_open: bool| -> Vec<String> {
        let mut seen = Vec::new();
        // The third row connects *from* an allowed proxy address and port: its SYN-ACK has the
        // proxy's address and port as destination, so only the conntrack direction tells it
        // from the user's own connection to that proxy.
        let rows = [
            (&tcp4, targets[0], None),
            (&tcp6, targets[1], None),
            (&tcp4, targets[0], Some(remote_proxy)),
        ];
        for (listener, target, from) in rows {
            let conn = testhost.enter(|| match from {
                None => TcpStream::connect_timeout(&target, Duration::from_secs(3)),
                Some(from) => connect_from(from, target),
            });
            match conn {
                Ok(mut c) => {
                    let (mut served, _) = listener.accept().expect("accept");
                    let _ = served.write_all(b"secret\n");
                    drop(served);
                    let mut got = String::new();
                    c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
                    let _ = c.read_to_string(&mut got);
                    seen.push(format!("tcp {target}: {got:?}"));
                }
                Err(e) => assert!(!expect_open, "control: connect to {target}: {e}"),
            }
        }
        let peer = testhost.enter(|| {
            let s = UdpSocket::bind((th.v4, 0)).unwrap();
            s.send_to(b"ping", udp_addr).unwrap();
            s
        });
        let mut buf = [0u8; 16];
        let (_, from) = udp.recv_from(&mut buf).expect("the user's socket gets the datagram");
        match udp.send_to(b"secret", from) {
            Ok(_) => {
                peer.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
                if let Ok(n) = peer.recv(&mut buf) {
                    seen.push(format!("udp {udp_addr}: {:?}", String::from_utf8_lossy(&buf[..n])));
                }
            }
            Err(e) => assert!(!expect_open, "control: udp answer: {e}"),
        }
        seen
    };

    // Control: the fence as it was serves the outside host.
    sandgate_firewall::nft::apply(&ruleset_before_fix(&scope, proxy_addr, group))
        .expect("apply old");
    let seen = attempt(true);
    assert_eq!(seen.len(), 4, "control: the old fence should have let all in: {seen:?}");
    assert!(seen.iter().all(|s| s.contains("secret")), "{seen:?}");

    let policy = GuestPolicy {
        proxies: vec![proxy_addr, remote_proxy],
        nflog_group: group,
        subids: Default::default(),
        allow_syncookies: false,
        allow_multicast_reports: false,
    };
    fw.apply(&fw.plan(&scope, &policy).unwrap()).expect("apply");
    let seen = attempt(false);
    assert!(seen.is_empty(), "the outside host got through the fence: {seen:?}");
    for l in [&tcp4, &tcp6] {
        l.set_nonblocking(true).unwrap();
        assert!(l.accept().is_err(), "a connection was established to the user's listener");
    }
    // The user's own connection to the proxy still works.
    let out = as_user(
        &user,
        false,
        &["bash", "-c", &format!("echo x > /dev/tcp/127.0.0.1/{}", proxy_addr.port())],
        b"",
    );
    assert!(out.status.success(), "proxy unreachable: {}", String::from_utf8_lossy(&out.stderr));
    // The refused answers were reported as the user's.
    let got = records(&mut sock, |got| {
        [IpAddr::from(th.v4), IpAddr::from(th.v6)]
            .iter()
            .all(|d| got.iter().any(|g| g.dst == *d && g.protocol == Protocol::Tcp))
            && got.iter().any(|g| g.protocol == Protocol::Udp)
    });
    for (p, d) in [
        (Protocol::Tcp, th.v4.into()),
        (Protocol::Tcp, th.v6.into()),
        (Protocol::Udp, th.v4.into()),
    ] {
        let d: IpAddr = d;
        let g = got
            .iter()
            .find(|g| g.protocol == p && g.dst == d)
            .unwrap_or_else(|| panic!("no {p:?} record to {d}: {got:#?}"));
        assert_eq!(g.prefix, scope.log_prefix(), "{g:?}");
        // A SYN-ACK leaves from the request socket, which NFLOG does not attribute (no uid);
        // the prefix names the scope.
        assert!(g.uid.is_none() || g.uid == Some(user.uid), "{g:?}");
    }
    assert!(fw.remove(&scope).expect("remove"));
}

/// `count` non-blocking connects from inside `ns` to `target`; after 2 s, how many of them got a
/// SYN-ACK (the client side is established).
fn connect_burst(ns: &NetNs, target: SocketAddr, count: usize) -> usize {
    use nix::sys::socket::{
        AddressFamily, SockFlag, SockType, SockaddrStorage, connect, getpeername, getsockopt,
        socket, sockopt,
    };
    use std::os::fd::AsRawFd;
    let family = if target.is_ipv6() { AddressFamily::Inet6 } else { AddressFamily::Inet };
    let fds = ns.enter(|| {
        (0..count)
            .map(|_| {
                let fd = socket(family, SockType::Stream, SockFlag::SOCK_NONBLOCK, None).unwrap();
                let _ = connect(fd.as_raw_fd(), &SockaddrStorage::from(target));
                fd
            })
            .collect::<Vec<_>>()
    });
    std::thread::sleep(Duration::from_secs(2));
    fds.iter()
        .filter(|fd| {
            getsockopt(*fd, sockopt::SocketError).is_ok_and(|e| e == 0)
                && getpeername::<SockaddrStorage>(fd.as_raw_fd()).is_ok()
        })
        .count()
}

/// Accepts on `l` (non-blocking) until `stop`; how many were accepted.
fn accept_until(l: &TcpListener, stop: &std::sync::atomic::AtomicBool) -> usize {
    l.set_nonblocking(true).unwrap();
    let mut n = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        match l.accept() {
            Ok(_) => n += 1,
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    n
}

/// Red-team G: with `listen(backlog 0)` every SYN beyond the first is answered with a SYN-cookie
/// SYN-ACK, which the kernel sends with no owning socket, so `meta skuid` never saw it: 299 of
/// 300 connects from an outside host were established and accepted. The fence drops unowned
/// SYN-ACKs; control: with `allow_syncookies` (the ruleset as it was) they connect.
#[test]
fn syn_cookie_connections_to_the_users_listener_are_dropped() {
    let _host_wide = host_wide();
    if common::skip_without_kernel() || !tools_present() {
        return;
    }
    let user = TestUser::new();
    let testhost = NetNs::new("gc");
    let (host, _th) = veth(None, &testhost, subnet());
    let group = nflog_group();
    let scope = GuestScope::owned_by(user.uid, std::process::id());
    let _cleanup = RemoveOnDrop(scope);
    let fw = GuestTables::system();
    let burst = |allow_syncookies: bool| -> Vec<(SocketAddr, usize, usize)> {
        let policy = GuestPolicy {
            proxies: vec!["127.0.0.1:3128".parse().unwrap()],
            nflog_group: group,
            subids: Default::default(),
            allow_syncookies,
            allow_multicast_reports: false,
        };
        fw.apply(&fw.plan(&scope, &policy).unwrap()).expect("apply");
        // Fresh listeners each time: a closed client of an earlier burst can still complete a
        // cookie handshake (its FIN carries the cookie) and would be counted.
        let listeners = user.as_socket_owner(|| {
            [
                TcpListener::bind((host.v4, 0)).expect("bind v4"),
                TcpListener::bind((host.v6, 0)).expect("bind v6"),
            ]
        });
        for l in &listeners {
            nix::sys::socket::listen(l, nix::sys::socket::Backlog::new(0).unwrap()).unwrap();
        }
        listeners
            .iter()
            .map(|l| {
                let target = l.local_addr().unwrap();
                let stop = std::sync::atomic::AtomicBool::new(false);
                std::thread::scope(|s| {
                    let acc = s.spawn(|| accept_until(l, &stop));
                    let connected = connect_burst(&testhost, target, 300);
                    stop.store(true, std::sync::atomic::Ordering::Relaxed);
                    (target, connected, acc.join().unwrap())
                })
            })
            .collect()
    };
    let control = burst(true);
    eprintln!("control (allow_syncookies): {control:?}");
    for (target, connected, accepted) in &control {
        assert!(*connected > 0 && *accepted > 0, "control: no cookie connection to {target}");
    }
    let fenced = burst(false);
    eprintln!("fenced: {fenced:?}");
    for (target, connected, accepted) in fenced {
        assert_eq!((connected, accepted), (0, 0), "connections to the user's {target}");
    }
    assert!(fw.remove(&scope).expect("remove"));
}

/// Frames seen by a packet socket in `ns` while `f` runs and 3 s after.
fn capture_in(ns: &NetNs, f: impl FnOnce()) -> Vec<Vec<u8>> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockProtocol, SockType, recv, socket};
    use std::os::fd::AsRawFd;
    let fd = ns.enter(|| {
        socket(AddressFamily::Packet, SockType::Raw, SockFlag::SOCK_NONBLOCK, SockProtocol::EthAll)
            .expect("packet socket")
    });
    f();
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut frames = Vec::new();
    let mut buf = vec![0u8; 65536];
    while Instant::now() < deadline {
        match recv(fd.as_raw_fd(), &mut buf, nix::sys::socket::MsgFlags::empty()) {
            Ok(n) => frames.push(buf[..n].to_vec()),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    frames
}

/// The index of the host interface that has address `v4`.
fn ifindex_of(v4: std::net::Ipv4Addr) -> u32 {
    let name = nix::ifaddrs::getifaddrs()
        .unwrap()
        .find(|i| {
            i.address.and_then(|a| a.as_sockaddr_in().map(|s| s.ip())).is_some_and(|ip| ip == v4)
        })
        .expect("interface with the address")
        .interface_name;
    nix::net::if_::if_nametoindex(name.as_str()).unwrap()
}

/// Red-team H: the user's group joins make the kernel send IGMP/MLD reports (no owning socket)
/// that carry the group address — 14 chosen bytes in an `ff0e::/16` group. The fence drops
/// unowned reports; control: with `allow_multicast_reports` the outside host sees the bytes.
#[test]
fn multicast_join_reports_do_not_carry_data_out() {
    let _host_wide = host_wide();
    if common::skip_without_kernel() || !tools_present() {
        return;
    }
    let user = TestUser::new();
    let testhost = NetNs::new("gm");
    let (host, _th) = veth(None, &testhost, subnet());
    let idx = ifindex_of(host.v4);
    let scope = GuestScope::owned_by(user.uid, std::process::id());
    let _cleanup = RemoveOnDrop(scope);
    let fw = GuestTables::system();
    let secret = *b"SECRET-EXFIL!!";
    let pid = std::process::id().to_be_bytes();
    let mut g6 = [0u8; 16];
    g6[0] = 0xff;
    g6[1] = 0x0e;
    g6[2..].copy_from_slice(&secret);
    // A v4 group unique to this process (239.x.y.z), found as bytes in an IGMP frame.
    let g4 = std::net::Ipv4Addr::new(239, pid[1], pid[2], pid[3]);
    let leaked = |allow_multicast_reports: bool| -> (bool, bool) {
        let policy = GuestPolicy {
            proxies: vec!["127.0.0.1:3128".parse().unwrap()],
            nflog_group: nflog_group(),
            subids: Default::default(),
            allow_syncookies: false,
            allow_multicast_reports,
        };
        fw.apply(&fw.plan(&scope, &policy).unwrap()).expect("apply");
        let mut socks = Vec::new();
        let frames = capture_in(&testhost, || {
            socks = user.as_socket_owner(|| {
                let s6 = UdpSocket::bind("[::]:0").unwrap();
                s6.join_multicast_v6(&g6.into(), idx).expect("join v6");
                let s4 = UdpSocket::bind("0.0.0.0:0").unwrap();
                s4.join_multicast_v4(&g4, &host.v4).expect("join v4");
                vec![s6, s4]
            });
        });
        let has = |f: &[u8], pat: &[u8]| f.windows(pat.len()).any(|w| w == pat);
        // Ethernet type IPv4 (0x0800) at 12, IP protocol 2 (IGMP) at 14 + 9.
        let igmp = |f: &Vec<u8>| f.len() > 24 && f[12..14] == [8, 0] && f[23] == 2;
        let v6 = frames.iter().any(|f| has(f, &secret));
        let v4 = frames.iter().any(|f| igmp(f) && has(&f[14..], &g4.octets()));
        drop(socks);
        (v6, v4)
    };
    assert_eq!(leaked(true), (true, true), "control: the reports should have been seen");
    assert_eq!(leaked(false), (false, false), "a join report carried the group out");
    assert!(fw.remove(&scope).expect("remove"));
}
