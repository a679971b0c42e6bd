//! The network namespace: `lo`, and for the proxy mode a tun device (or a veth pair) with a
//! default route so that direct connections reach the firewall's output hook (logged and refused
//! at once) instead of failing early with "network unreachable" where nothing would see them.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, UdpSocket};
use std::os::fd::OwnedFd;

use super::{netlink, sys};
use crate::spec::{DNS_PORT, PROXY_PORT};

/// Brings `lo` up (both network modes).
pub fn loopback_up() -> io::Result<()> {
    sys::interface_up("lo")
}

/// The device of the default routes (proxy mode), with its addresses and the routes: a tun
/// device where one can be made (one device instead of two: see `tun`), else the veth
/// pair, both set up with rtnetlink. Returns the tun's descriptor: the device and its carrier
/// live as long as it is open (close-on-exec).
pub fn route_device() -> io::Result<Option<OwnedFd>> {
    if let Some(tun) = super::tun::create(netlink::VETH.0) {
        let configure = netlink::configure_tun(sys::interface_index(netlink::VETH.0)?);
        sys::netlink_transact(sys::Netlink::Route, configure.bytes(), configure.acks)?;
        return Ok(Some(tun));
    }
    veth().map(|()| None)
}

/// Creates the veth pair, its addresses and the default routes (proxy mode) with rtnetlink.
fn veth() -> io::Result<()> {
    let create = netlink::create_veth();
    sys::netlink_transact(sys::Netlink::Route, create.bytes(), create.acks)?;
    let (a, b) = netlink::VETH;
    let configure = netlink::configure_veth(sys::interface_index(a)?, sys::interface_index(b)?);
    sys::netlink_transact(sys::Netlink::Route, configure.bytes(), configure.acks)
}

/// Installs the namespace's firewall (one nf_tables batch: all of it or nothing). A kernel
/// without NAT for nf_tables (or that will not load it from inside a user namespace) refuses the
/// `capture` chain: the firewall is then installed without it, and TCP that ignores the proxy
/// variables is refused and reported as every other direct attempt (transparent capture off,
/// walls as before). Returns whether capture is on.
pub fn firewall(prefix: &str, nflog_group: u16) -> io::Result<bool> {
    let with = netlink::namespace_firewall(prefix, nflog_group, PROXY_PORT, true);
    match sys::netlink_transact(sys::Netlink::Netfilter, with.bytes(), with.acks) {
        Ok(()) => Ok(true),
        Err(_) => {
            let without = netlink::namespace_firewall(prefix, nflog_group, PROXY_PORT, false);
            sys::netlink_transact(sys::Netlink::Netfilter, without.bytes(), without.acks)?;
            Ok(false)
        }
    }
}

/// The proxy listener, bound inside the namespace to port [`PROXY_PORT`] of every address, IPv4
/// and IPv6 on one socket: clients of the proxy come to 127.0.0.1 (the proxy variables say so),
/// and transparent capture redirects IPv4 to 127.0.0.1 and IPv6 to `::1`. Nothing outside the
/// namespace can reach its other addresses (the route device's far end is ours, and reads
/// nothing back in). Where the namespace has no IPv6 (a kernel booted with `ipv6.disable=1`), it
/// is bound to 127.0.0.1 alone: IPv6 could not leave either.
pub fn proxy_listener() -> io::Result<OwnedFd> {
    match dual_stack_listener(PROXY_PORT) {
        Ok(fd) => Ok(fd),
        Err(e) if e.raw_os_error() == Some(nix::libc::EAFNOSUPPORT) => {
            let l = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, PROXY_PORT))?;
            Ok(OwnedFd::from(l))
        }
        Err(e) => Err(e),
    }
}

/// A TCP listener on `[::]:port` that takes IPv4 too (`IPV6_V6ONLY` off whatever the
/// namespace's `bindv6only` says), close-on-exec.
fn dual_stack_listener(port: u16) -> io::Result<OwnedFd> {
    use nix::sys::socket::{
        AddressFamily, Backlog, SockFlag, SockType, SockaddrIn6, bind, listen, setsockopt, socket,
        sockopt,
    };
    let fd = socket(AddressFamily::Inet6, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    setsockopt(&fd, sockopt::Ipv6V6Only, &false)?;
    let any = std::net::SocketAddrV6::new(std::net::Ipv6Addr::UNSPECIFIED, port, 0, 0);
    bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn6::from(any))?;
    listen(&fd, Backlog::MAXCONN)?;
    Ok(fd)
}

/// The DNS stub's sockets, bound inside the namespace to 127.0.0.1:[`DNS_PORT`]: UDP, then a TCP
/// listener (for answers a client wants over TCP). Served by whoever serves the proxy listener.
pub fn dns_sockets() -> io::Result<[OwnedFd; 2]> {
    let at = SocketAddrV4::new(Ipv4Addr::LOCALHOST, DNS_PORT);
    let udp = UdpSocket::bind(at)?;
    let tcp = TcpListener::bind(at)?;
    Ok([OwnedFd::from(udp), OwnedFd::from(tcp)])
}

/// What the sandbox's `/etc/resolv.conf` says: the stub, and nothing of the host's (its search
/// domains would only turn every short name into refused lookups).
pub const RESOLV_CONF: &str = "# sandgate: the DNS stub of this sandbox; names the policy does not allow are NXDOMAIN\n\
                               nameserver 127.0.0.1\noptions edns0\n";
