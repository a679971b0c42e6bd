//! Real kernel: the namespace ruleset inside a network namespace the test created. TCP over IPv4
//! is captured (redirected to the proxy listener, original destination readable); every other
//! direct attempt fails at once and is reported through an NFLOG socket opened inside that
//! namespace, but QUIC, which is refused at once without a report.

mod common;

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use common::{NetNs, nflog_group, subnet, veth};
use nix::sys::socket::{
    AddressFamily, MsgFlags, SockFlag, SockProtocol, SockType, SockaddrStorage,
};
use sandgate_firewall::nft::{self, NamespaceRules};
use sandgate_firewall::{CommandOutput, CommandRunner, FirewallError, SystemRunner};
use sandgate_monitor::nflog::NflogSocket;
use sandgate_monitor::{BlockedPacket, Protocol};

/// Runs commands inside a named network namespace (`ip netns exec`).
struct InNetns(String);

impl CommandRunner for InNetns {
    fn run(
        &self,
        program: &str,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<CommandOutput, FirewallError> {
        let mut full = vec!["netns", "exec", self.0.as_str(), program];
        full.extend_from_slice(args);
        SystemRunner.run("ip", &full, stdin)
    }
}

/// Sends one ICMP / ICMPv6 echo request from a raw socket; the send itself fails (EPERM) when
/// the output chain drops it.
fn send_echo(dst: IpAddr) {
    let (family, proto, kind) = match dst {
        IpAddr::V4(_) => (AddressFamily::Inet, SockProtocol::Icmp, 8u8),
        IpAddr::V6(_) => (AddressFamily::Inet6, SockProtocol::IcmpV6, 128u8),
    };
    let fd = nix::sys::socket::socket(family, SockType::Raw, SockFlag::SOCK_CLOEXEC, proto)
        .expect("raw ICMP socket");
    let addr = SockaddrStorage::from(SocketAddr::new(dst, 0));
    let echo = [kind, 0, 0xf7, 0xfe, 0, 1, 0, 0];
    let res = nix::sys::socket::sendto(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &echo,
        &addr,
        MsgFlags::empty(),
    );
    assert!(res.is_err(), "ICMP echo to {dst} was sent: {res:?}");
}

fn collect(sock: &mut NflogSocket, want: &[(Protocol, IpAddr)]) -> Vec<BlockedPacket> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got: Vec<BlockedPacket> = Vec::new();
    while Instant::now() < deadline
        && !want.iter().all(|(p, d)| got.iter().any(|g| g.protocol == *p && g.dst == *d))
    {
        got.extend(sock.recv(Duration::from_millis(200)).expect("recv"));
    }
    got
}

#[test]
fn namespace_ruleset_rejects_at_once_and_reports() {
    if common::skip_without_kernel() {
        return;
    }
    let sandbox = NetNs::new("sb");
    let testhost = NetNs::new("th");
    let (me, host) = veth(Some(&sandbox), &testhost, subnet());
    let l4 = testhost.enter(|| TcpListener::bind((host.v4, 0)).expect("bind v4"));
    let l6 = testhost.enter(|| TcpListener::bind((host.v6, 0)).expect("bind v6"));
    let (p4, p6) = (l4.local_addr().unwrap().port(), l6.local_addr().unwrap().port());

    // Without the rules the test host is reachable: the failures below are the rules' doing.
    sandbox.enter(|| {
        TcpStream::connect_timeout(&(host.v4, p4).into(), Duration::from_secs(2))
            .expect("reachable before the rules");
    });
    l4.accept().expect("the connection made before the rules");

    let group = nflog_group();
    let prefix = format!("sbx-test-{group}");
    let proxy_port = 3128;
    let text = nft::namespace_ruleset(&NamespaceRules {
        prefix: prefix.clone(),
        nflog_group: group,
        proxy_port,
    });
    let runner = InNetns(sandbox.name.clone());
    nft::apply_with(&runner, &text).expect("apply namespace ruleset");
    nft::apply_with(&runner, &text).expect("apply twice");

    let got = sandbox.enter(|| {
        let mut sock = NflogSocket::open(group).expect("open NFLOG inside the namespace");

        // Loopback passes (the proxy listener lives there).
        let lo = TcpListener::bind("127.0.0.1:0").unwrap();
        TcpStream::connect(lo.local_addr().unwrap()).expect("loopback allowed");

        // QUIC first: refused at once, and (checked below, once later packets were reported)
        // never reported.
        let quic = UdpSocket::bind(SocketAddr::new(me.v4.into(), 0)).unwrap();
        assert!(quic.send_to(b"quic", (host.v4, 443)).is_err(), "UDP 443 was sent");

        // TCP over IPv4 and IPv6 is captured: it reaches the proxy listener (dual-stack, as the
        // launcher binds it), which reads where it was going; the test host hears nothing.
        let proxy = TcpListener::bind(("::", proxy_port)).expect("bind the proxy port");
        proxy.set_nonblocking(true).unwrap();
        for (dst, heard) in
            [(SocketAddr::new(host.v4.into(), p4), &l4), (SocketAddr::new(host.v6.into(), p6), &l6)]
        {
            let _client =
                TcpStream::connect_timeout(&dst, Duration::from_secs(2)).expect("captured");
            // The handshake completed with whoever accepted it: already queued if captured.
            let (accepted, _) =
                proxy.accept().expect("not captured: the proxy listener has nothing");
            assert_eq!(original_destination(&accepted, dst.is_ipv4()), dst);
            heard.set_nonblocking(true).unwrap();
            assert!(heard.accept().is_err(), "the test host was reached at {dst}");
        }

        for dst in [IpAddr::from(host.v4), IpAddr::from(host.v6)] {
            let u = UdpSocket::bind(SocketAddr::new(
                if dst.is_ipv4() { me.v4.into() } else { me.v6.into() },
                0,
            ))
            .unwrap();
            assert!(u.send_to(b"ping", (dst, 53)).is_err(), "UDP to {dst} was sent");
            send_echo(dst);
        }
        collect(
            &mut sock,
            &[
                (Protocol::Udp, host.v4.into()),
                (Protocol::Udp, host.v6.into()),
                (Protocol::Icmp, host.v4.into()),
                (Protocol::Icmpv6, host.v6.into()),
            ],
        )
    });

    let find = |p: Protocol, dst: IpAddr| {
        got.iter()
            .find(|g| g.protocol == p && g.dst == dst)
            .unwrap_or_else(|| panic!("no {p:?} record to {dst} in {got:#?}"))
    };
    assert!(
        !got.iter().any(|g| g.protocol == Protocol::Tcp),
        "captured TCP was reported as blocked: {got:#?}"
    );
    assert!(!got.iter().any(|g| g.dst_port == Some(443)), "QUIC was reported: {got:#?}");
    assert_eq!(find(Protocol::Udp, host.v4.into()).dst_port, Some(53));
    assert_eq!(find(Protocol::Udp, host.v6.into()).dst_port, Some(53));
    assert_eq!(find(Protocol::Icmp, host.v4.into()).icmp_type, Some(8));
    assert_eq!(find(Protocol::Icmpv6, host.v6.into()).icmp_type, Some(128));
    for g in &got {
        assert_eq!(g.prefix, prefix);
        assert!(!g.dst.is_loopback(), "loopback was logged: {g:?}");
    }
    // Sockets of root in the namespace: the kernel reports their owner.
    let udp6 = find(Protocol::Udp, host.v6.into());
    assert_eq!(udp6.src, IpAddr::from(me.v6));
    assert_eq!(udp6.uid, Some(0));
    drop((l4, l6));
}

/// Where a redirected connection was going (`SO_ORIGINAL_DST`, or its IPv6 twin), as the proxy
/// reads it: an IPv4 connection accepted on the dual-stack listener still answers the IPv4 option.
fn original_destination(accepted: &TcpStream, v4: bool) -> SocketAddr {
    use nix::sys::socket::{getsockopt, sockopt};
    if v4 {
        let o = getsockopt(accepted, sockopt::OriginalDst).expect("SO_ORIGINAL_DST");
        let ip = std::net::Ipv4Addr::from(u32::from_be(o.sin_addr.s_addr));
        SocketAddr::new(ip.into(), u16::from_be(o.sin_port))
    } else {
        let o = getsockopt(accepted, sockopt::Ip6tOriginalDst).expect("IP6T_SO_ORIGINAL_DST");
        let ip = std::net::Ipv6Addr::from(o.sin6_addr.s6_addr);
        SocketAddr::new(ip.into(), u16::from_be(o.sin6_port))
    }
}
