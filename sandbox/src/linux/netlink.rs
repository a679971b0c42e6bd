//! The network namespace's links, addresses, routes and firewall as netlink messages, sent by the
//! launcher itself: no `ip` or `nft` child process, no `$PATH` lookup, no runtime need for the
//! iproute2 and nftables packages, and ~10 ms less per `net`/`build` launch.
//!
//! Hand-built rather than a crate: `rustables` (nf_tables) is GPL-3.0, `nftnl` links the C
//! libnftnl, and `netlink-packet-route` + `netlink-sys` would add six crates for four rtnetlink
//! messages; the nf_tables batch needs a builder either way. This module is pure (bytes in a
//! `Vec`): the batch is golden-tested byte for byte, and a kernel test has `nft list table` decode
//! what the kernel holds after a launch and compares it with what `nft -f` makes of the
//! [`sandgate_firewall`-style text ruleset](crate) (`tests/netlink_kernel.rs`). The socket calls are
//! in `sys::netlink_transact`.

use std::net::{Ipv4Addr, Ipv6Addr};

// netlink(7), rtnetlink(7), linux/netfilter/nf_tables.h — stable kernel ABI.
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_APPEND: u16 = 0x800;
const NLA_F_NESTED: u16 = 0x8000;

const RTM_NEWLINK: u16 = 16;
const RTM_NEWADDR: u16 = 20;
const RTM_NEWROUTE: u16 = 24;
const IFLA_IFNAME: u16 = 3;
const IFLA_OPERSTATE: u16 = 16;
const IFLA_LINKINFO: u16 = 18;
const IF_OPER_UP: u8 = 6;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const VETH_INFO_PEER: u16 = 1;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_FLAGS: u16 = 8;
const IFA_F_NODAD: u32 = 0x02;
const IFA_F_PERMANENT: u8 = 0x80;
const RTA_OIF: u16 = 4;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_BOOT: u8 = 3;
const RT_SCOPE_UNIVERSE: u8 = 0;
const RT_SCOPE_LINK: u8 = 253;
const RTN_UNICAST: u8 = 1;
const IFF_UP: u32 = 0x1;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const AF_UNSPEC: u8 = 0;

const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_NEWRULE: u16 = 6;
const NFPROTO_INET: u8 = 1;
const NFPROTO_IPV6: u8 = 10;
const NFTA_TABLE_NAME: u16 = 1;
const NFTA_TABLE_FLAGS: u16 = 2;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_POLICY: u16 = 5;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NF_INET_LOCAL_OUT: u32 = 3;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_META_DREG: u16 = 1;
const NFTA_META_KEY: u16 = 2;
const NFT_META_OIF: u32 = 5;
const NFT_META_NFPROTO: u32 = 15;
const NFT_META_L4PROTO: u32 = 16;
const NFTA_CMP_SREG: u16 = 1;
const NFTA_CMP_OP: u16 = 2;
const NFTA_CMP_DATA: u16 = 3;
const NFT_CMP_EQ: u32 = 0;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;
const NFTA_IMMEDIATE_DREG: u16 = 1;
const NFTA_IMMEDIATE_DATA: u16 = 2;
const NFTA_PAYLOAD_DREG: u16 = 1;
const NFTA_PAYLOAD_BASE: u16 = 2;
const NFTA_PAYLOAD_OFFSET: u16 = 3;
const NFTA_PAYLOAD_LEN: u16 = 4;
const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;
const NFT_CMP_NEQ: u32 = 1;
const NFTA_REDIR_REG_PROTO_MIN: u16 = 1;
const NFTA_REDIR_FLAGS: u16 = 3;
const NF_NAT_RANGE_PROTO_SPECIFIED: u32 = 0x2;
const NF_IP_PRI_NAT_DST: i32 = -100;
const NFPROTO_IPV4: u8 = 2;
const IPPROTO_UDP: u8 = 17;
const NFT_REJECT_ICMPX_PORT_UNREACH: u8 = 1;
const NFTA_LOG_GROUP: u16 = 1;
const NFTA_LOG_PREFIX: u16 = 2;
const NFTA_REJECT_TYPE: u16 = 1;
const NFTA_REJECT_ICMP_CODE: u16 = 2;
const NFT_REJECT_TCP_RST: u32 = 1;
const NFT_REJECT_ICMPX_UNREACH: u32 = 2;
const NFT_REJECT_ICMPX_ADMIN_PROHIBITED: u8 = 3;
const NFT_REG_VERDICT: u32 = 0;
const NFT_REG_1: u32 = 1;
const NF_DROP: u32 = 0;
const NF_ACCEPT: u32 = 1;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_ICMPV6: u8 = 58;

/// The veth pair's names: `sg0` carries the default routes, `sg1` is its peer (both stay inside).
pub const VETH: (&str, &str) = ("sg0", "sg1");
/// `sg0`'s addresses, from the documentation ranges (RFC 5737 / RFC 3849): they collide with
/// nothing real.
pub const VETH_V4: (Ipv4Addr, u8) = (Ipv4Addr::new(192, 0, 2, 1), 24);
/// See [`VETH_V4`].
pub const VETH_V6: (Ipv6Addr, u8) = (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1), 64);
/// The nf_tables table of a sandbox's namespace.
pub const TABLE: &str = "sandgate";
/// Its filter chain.
pub const CHAIN: &str = "output";
/// Its nat chain: every TCP connection to a non-loopback IPv4 address is redirected to the proxy
/// listener, where the daemon reads the original destination back (`SO_ORIGINAL_DST`) and puts
/// the connection through the proxy's pipeline (transparent capture).
pub const CAPTURE_CHAIN: &str = "capture";
/// The UDP port whose datagrams (QUIC) are refused at once and quietly: clients fall back to TCP.
pub const QUIC_PORT: u16 = 443;
/// Longest NFLOG prefix the kernel keeps (NF_LOG_PREFIXLEN - 1).
pub const MAX_PREFIX_LEN: usize = 127;

/// ICMPv6 the kernel sends on its own (router and neighbour solicitation, neighbour
/// advertisement, MLD reports): dropped without a log line — not connection attempts.
pub const QUIET_ICMPV6: [u8; 5] = [133, 135, 136, 131, 143];

/// A sequence of netlink messages in one buffer.
#[derive(Debug, Default)]
pub struct Batch {
    buf: Vec<u8>,
    seq: u32,
    /// How many messages ask for an acknowledgement.
    pub acks: usize,
}

impl Batch {
    /// The bytes to send.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Starts a message; returns its start so [`Batch::end`] can write its length.
    fn begin(&mut self, kind: u16, flags: u16) -> usize {
        let start = self.buf.len();
        self.seq += 1;
        if flags & NLM_F_ACK != 0 {
            self.acks += 1;
        }
        self.buf.extend_from_slice(&0u32.to_ne_bytes()); // length, patched by `end`
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(&flags.to_ne_bytes());
        self.buf.extend_from_slice(&self.seq.to_ne_bytes());
        self.buf.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel
        start
    }

    fn end(&mut self, start: usize) {
        let len = u32::try_from(self.buf.len() - start).unwrap_or(u32::MAX);
        self.buf[start..start + 4].copy_from_slice(&len.to_ne_bytes());
    }

    fn raw(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    fn attr(&mut self, kind: u16, value: &[u8]) {
        let len = u16::try_from(4 + value.len()).unwrap_or(u16::MAX);
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.raw(value);
    }

    fn str_attr(&mut self, kind: u16, value: &str) {
        let mut v = value.as_bytes().to_vec();
        v.push(0);
        self.attr(kind, &v);
    }

    /// nf_tables numbers are big-endian.
    fn be32(&mut self, kind: u16, value: u32) {
        self.attr(kind, &value.to_be_bytes());
    }

    fn nest(&mut self, kind: u16, body: impl FnOnce(&mut Batch)) {
        let start = self.buf.len();
        self.buf.extend_from_slice(&[0, 0]);
        self.buf.extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        body(self);
        let len = u16::try_from(self.buf.len() - start).unwrap_or(u16::MAX);
        self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
    }
}

/// `struct ifinfomsg` for `index` (0: a new link), with `flags` changed under `change`.
fn ifinfomsg(index: u32, flags: u32, change: u32) -> [u8; 16] {
    let mut m = [0u8; 16];
    m[0] = AF_UNSPEC;
    m[4..8].copy_from_slice(&index.to_ne_bytes());
    m[8..12].copy_from_slice(&flags.to_ne_bytes());
    m[12..16].copy_from_slice(&change.to_ne_bytes());
    m
}

/// rtnetlink: create the veth pair `sg0`/`sg1` (both in this namespace).
pub fn create_veth() -> Batch {
    let mut b = Batch::default();
    let m = b.begin(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL);
    b.raw(&ifinfomsg(0, 0, 0));
    b.str_attr(IFLA_IFNAME, VETH.0);
    b.nest(IFLA_LINKINFO, |b| {
        b.str_attr(IFLA_INFO_KIND, "veth");
        b.nest(IFLA_INFO_DATA, |b| {
            b.nest(VETH_INFO_PEER, |b| {
                b.raw(&ifinfomsg(0, 0, 0));
                b.str_attr(IFLA_IFNAME, VETH.1);
            });
        });
    });
    b.end(m);
    b
}

/// rtnetlink: both ends up, `sg0`'s addresses (IPv6 without duplicate address detection, so it
/// is usable at once) and default routes through it (`index0`, `index1`: the links' indexes).
pub fn configure_veth(index0: u32, index1: u32) -> Batch {
    let mut b = Batch::default();
    for index in [index1, index0] {
        let m = b.begin(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK);
        b.raw(&ifinfomsg(index, IFF_UP, IFF_UP));
        b.end(m);
    }
    addresses_and_routes(&mut b, index0);
    b
}

/// rtnetlink: the tun device `index` up (operational state "up": a tun's carrier never changes,
/// so the kernel would leave it "unknown"), its addresses and the default routes through it, as
/// [`configure_veth`] does for `sg0` (see `tun`).
pub fn configure_tun(index: u32) -> Batch {
    let mut b = Batch::default();
    let m = b.begin(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK);
    b.raw(&ifinfomsg(index, IFF_UP, IFF_UP));
    b.attr(IFLA_OPERSTATE, &[IF_OPER_UP]);
    b.end(m);
    addresses_and_routes(&mut b, index);
    b
}

/// `index0`'s addresses (IPv6 without duplicate address detection) and the default routes
/// through it.
fn addresses_and_routes(b: &mut Batch, index0: u32) {
    let flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
    for (family, prefix, addr, nodad) in [
        (AF_INET, VETH_V4.1, VETH_V4.0.octets().to_vec(), false),
        (AF_INET6, VETH_V6.1, VETH_V6.0.octets().to_vec(), true),
    ] {
        let m = b.begin(RTM_NEWADDR, flags);
        let mut ifa = [0u8; 8];
        ifa[0] = family;
        ifa[1] = prefix;
        ifa[2] = if nodad { IFA_F_NODAD as u8 | IFA_F_PERMANENT } else { IFA_F_PERMANENT };
        ifa[4..8].copy_from_slice(&index0.to_ne_bytes());
        b.raw(&ifa);
        if family == AF_INET {
            b.attr(IFA_LOCAL, &addr);
        }
        b.attr(IFA_ADDRESS, &addr);
        if nodad {
            b.attr(IFA_FLAGS, &(IFA_F_NODAD | u32::from(IFA_F_PERMANENT)).to_ne_bytes());
        }
        b.end(m);
    }
    for (family, scope) in [(AF_INET, RT_SCOPE_LINK), (AF_INET6, RT_SCOPE_UNIVERSE)] {
        let m = b.begin(RTM_NEWROUTE, flags);
        // struct rtmsg: family, dst_len 0 (default), src_len, tos, table, protocol, scope, type,
        // flags.
        let mut rt = [0u8; 12];
        rt[0] = family;
        rt[4] = RT_TABLE_MAIN;
        rt[5] = RTPROT_BOOT;
        rt[6] = scope;
        rt[7] = RTN_UNICAST;
        b.raw(&rt);
        b.attr(RTA_OIF, &index0.to_ne_bytes());
        b.end(m);
    }
}

/// The NFLOG prefix of a sandbox: its id, made safe for `nft list` (which quotes it without
/// escapes) and cut to the kernel's length.
pub fn log_prefix(raw: &str) -> String {
    raw.chars()
        .map(|c| if c.is_ascii_alphanumeric() || "._:/@+=-".contains(c) { c } else { '_' })
        .take(MAX_PREFIX_LEN)
        .collect()
}

/// One nf_tables expression: `NFTA_LIST_ELEM { NFTA_EXPR_NAME, NFTA_EXPR_DATA { … } }`.
fn expr(b: &mut Batch, name: &str, data: impl FnOnce(&mut Batch)) {
    b.nest(NFTA_LIST_ELEM, |b| {
        b.str_attr(NFTA_EXPR_NAME, name);
        b.nest(NFTA_EXPR_DATA, data);
    });
}

fn meta(b: &mut Batch, key: u32) {
    expr(b, "meta", |b| {
        b.be32(NFTA_META_DREG, NFT_REG_1);
        b.be32(NFTA_META_KEY, key);
    });
}

fn cmp_eq(b: &mut Batch, value: &[u8]) {
    cmp(b, NFT_CMP_EQ, value);
}

fn cmp(b: &mut Batch, op: u32, value: &[u8]) {
    expr(b, "cmp", |b| {
        b.be32(NFTA_CMP_SREG, NFT_REG_1);
        b.be32(NFTA_CMP_OP, op);
        b.nest(NFTA_CMP_DATA, |b| b.attr(NFTA_DATA_VALUE, value));
    });
}

/// `len` bytes of the packet at `offset` of header `base` into register 1.
fn payload(b: &mut Batch, base: u32, offset: u32, len: u32) {
    expr(b, "payload", |b| {
        b.be32(NFTA_PAYLOAD_DREG, NFT_REG_1);
        b.be32(NFTA_PAYLOAD_BASE, base);
        b.be32(NFTA_PAYLOAD_OFFSET, offset);
        b.be32(NFTA_PAYLOAD_LEN, len);
    });
}

/// Register 1 = `value`.
fn load(b: &mut Batch, value: &[u8]) {
    expr(b, "immediate", |b| {
        b.be32(NFTA_IMMEDIATE_DREG, NFT_REG_1);
        b.nest(NFTA_IMMEDIATE_DATA, |b| b.attr(NFTA_DATA_VALUE, value));
    });
}

fn verdict(b: &mut Batch, code: u32) {
    expr(b, "immediate", |b| {
        b.be32(NFTA_IMMEDIATE_DREG, NFT_REG_VERDICT);
        b.nest(NFTA_IMMEDIATE_DATA, |b| {
            b.nest(NFTA_DATA_VERDICT, |b| b.be32(NFTA_VERDICT_CODE, code));
        });
    });
}

fn reject(b: &mut Batch, kind: u32, code: u8) {
    expr(b, "reject", |b| {
        b.be32(NFTA_REJECT_TYPE, kind);
        b.attr(NFTA_REJECT_ICMP_CODE, &[code]);
    });
}

fn nft_msg(b: &mut Batch, kind: u16, flags: u16, family: u8, body: impl FnOnce(&mut Batch)) {
    let m = b.begin((NFNL_SUBSYS_NFTABLES << 8) | kind, flags);
    // struct nfgenmsg: family, version, resource id (big-endian).
    b.raw(&[family, 0, 0, 0]);
    body(b);
    b.end(m);
}

fn rule(b: &mut Batch, exprs: impl FnOnce(&mut Batch)) {
    rule_in(b, CHAIN, exprs);
}

fn rule_in(b: &mut Batch, chain: &str, exprs: impl FnOnce(&mut Batch)) {
    let flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_APPEND;
    nft_msg(b, NFT_MSG_NEWRULE, flags, NFPROTO_INET, |b| {
        b.str_attr(NFTA_RULE_TABLE, TABLE);
        b.str_attr(NFTA_RULE_CHAIN, chain);
        b.nest(NFTA_RULE_EXPRESSIONS, exprs);
    });
}

fn chain(b: &mut Batch, name: &str, kind: &str, priority: i32, policy: u32) {
    let create = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE;
    nft_msg(b, NFT_MSG_NEWCHAIN, create, NFPROTO_INET, |b| {
        b.str_attr(NFTA_CHAIN_TABLE, TABLE);
        b.str_attr(NFTA_CHAIN_NAME, name);
        b.nest(NFTA_CHAIN_HOOK, |b| {
            b.be32(NFTA_HOOK_HOOKNUM, NF_INET_LOCAL_OUT);
            b.attr(NFTA_HOOK_PRIORITY, &priority.to_be_bytes());
        });
        b.be32(NFTA_CHAIN_POLICY, policy);
        b.str_attr(NFTA_CHAIN_TYPE, kind);
    });
}

/// nf_tables: the namespace's whole firewall as one atomic batch, table `inet sandgate`:
///
/// - chain `capture` (nat, hook output, priority -100): TCP to any IPv4 address outside
///   127.0.0.0/8 is redirected to the proxy listener, 127.0.0.1:`proxy_port` (transparent
///   capture: the daemon reads the original destination back and decides the connection by
///   name, as a CONNECT);
/// - chain `output` (filter, hook output, priority 0, policy drop): loopback accepted (the proxy
///   listener and the DNS stub live on 127.0.0.1 inside), and so are redirected connections (their
///   output device is still the route device's when this chain sees them, their destination is
///   the listener's); [`QUIET_ICMPV6`] dropped quietly; UDP to port [`QUIC_PORT`] refused at once
///   with port-unreachable and not reported (QUIC: clients fall back to TCP, which is captured);
///   everything else logged to NFLOG `group` with the sandbox's `prefix` and rejected at once —
///   TCP with a reset, the rest with ICMP admin-prohibited — so a direct attempt fails
///   immediately and is reported.
///
/// The same rules as `sandgate_firewall::nft::namespace_ruleset` (a kernel test compares the
/// two).
pub fn namespace_firewall(prefix: &str, group: u16, proxy_port: u16, capture: bool) -> Batch {
    let mut b = Batch::default();
    let batch_marker = |b: &mut Batch, kind: u16| {
        let m = b.begin(kind, NLM_F_REQUEST);
        // struct nfgenmsg: family, version, resource id = the nf_tables subsystem (big-endian).
        let [hi, lo] = NFNL_SUBSYS_NFTABLES.to_be_bytes();
        b.raw(&[AF_UNSPEC, 0, hi, lo]);
        b.end(m);
    };
    batch_marker(&mut b, NFNL_MSG_BATCH_BEGIN);
    let create = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE;
    nft_msg(&mut b, NFT_MSG_NEWTABLE, create, NFPROTO_INET, |b| {
        b.str_attr(NFTA_TABLE_NAME, TABLE);
        b.be32(NFTA_TABLE_FLAGS, 0);
    });
    if capture {
        capture_chain(&mut b, proxy_port);
    }
    filter_chain(&mut b, prefix, group, proxy_port);
    batch_marker(&mut b, NFNL_MSG_BATCH_END);
    b
}

/// Chain [`CAPTURE_CHAIN`] of [`namespace_firewall`].
fn capture_chain(b: &mut Batch, proxy_port: u16) {
    chain(b, CAPTURE_CHAIN, "nat", NF_IP_PRI_NAT_DST, NF_ACCEPT);
    // ip daddr != 127.0.0.0/8 meta l4proto tcp redirect to :proxy_port
    // ip6 daddr != ::1 meta l4proto tcp redirect to :proxy_port
    // (the kernel redirects IPv4 to 127.0.0.1 and IPv6 to ::1: the listener is dual-stack)
    let loopback_v6 = Ipv6Addr::LOCALHOST.octets();
    for (family, offset, not) in
        [(NFPROTO_IPV4, 16, &[127][..]), (NFPROTO_IPV6, 24, &loopback_v6[..])]
    {
        rule_in(b, CAPTURE_CHAIN, |b| {
            meta(b, NFT_META_NFPROTO);
            cmp_eq(b, &[family]);
            payload(b, NFT_PAYLOAD_NETWORK_HEADER, offset, not.len() as u32);
            cmp(b, NFT_CMP_NEQ, not);
            meta(b, NFT_META_L4PROTO);
            cmp_eq(b, &[IPPROTO_TCP]);
            load(b, &proxy_port.to_be_bytes());
            expr(b, "redir", |b| {
                b.be32(NFTA_REDIR_REG_PROTO_MIN, NFT_REG_1);
                b.be32(NFTA_REDIR_FLAGS, NF_NAT_RANGE_PROTO_SPECIFIED);
            });
        });
    }
}

/// Chain [`CHAIN`] of [`namespace_firewall`].
fn filter_chain(b: &mut Batch, prefix: &str, group: u16, proxy_port: u16) {
    chain(b, CHAIN, "filter", 0, NF_DROP);
    // oif "lo" accept (a new namespace's loopback is always index 1)
    rule(b, |b| {
        meta(b, NFT_META_OIF);
        cmp_eq(b, &1u32.to_ne_bytes());
        verdict(b, NF_ACCEPT);
    });
    // ip daddr 127.0.0.1 tcp dport proxy_port accept (what `capture` redirected)
    // ip6 daddr ::1 tcp dport proxy_port accept
    let (v4, v6) = (Ipv4Addr::LOCALHOST.octets(), Ipv6Addr::LOCALHOST.octets());
    for (family, offset, to) in [(NFPROTO_IPV4, 16, &v4[..]), (NFPROTO_IPV6, 24, &v6[..])] {
        rule(b, |b| {
            meta(b, NFT_META_NFPROTO);
            cmp_eq(b, &[family]);
            payload(b, NFT_PAYLOAD_NETWORK_HEADER, offset, to.len() as u32);
            cmp_eq(b, to);
            meta(b, NFT_META_L4PROTO);
            cmp_eq(b, &[IPPROTO_TCP]);
            payload(b, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2);
            cmp_eq(b, &proxy_port.to_be_bytes());
            verdict(b, NF_ACCEPT);
        });
    }
    for icmp_type in QUIET_ICMPV6 {
        rule(b, |b| {
            meta(b, NFT_META_NFPROTO);
            cmp_eq(b, &[NFPROTO_IPV6]);
            meta(b, NFT_META_L4PROTO);
            cmp_eq(b, &[IPPROTO_ICMPV6]);
            payload(b, NFT_PAYLOAD_TRANSPORT_HEADER, 0, 1);
            cmp_eq(b, &[icmp_type]);
            verdict(b, NF_DROP);
        });
    }
    // udp dport 443 reject with icmpx port-unreachable
    rule(b, |b| {
        meta(b, NFT_META_L4PROTO);
        cmp_eq(b, &[IPPROTO_UDP]);
        payload(b, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2);
        cmp_eq(b, &QUIC_PORT.to_be_bytes());
        reject(b, NFT_REJECT_ICMPX_UNREACH, NFT_REJECT_ICMPX_PORT_UNREACH);
    });
    let prefix = log_prefix(prefix);
    rule(b, |b| {
        expr(b, "log", |b| {
            b.attr(NFTA_LOG_GROUP, &group.to_be_bytes());
            b.str_attr(NFTA_LOG_PREFIX, &prefix);
        });
    });
    rule(b, |b| {
        meta(b, NFT_META_L4PROTO);
        cmp_eq(b, &[IPPROTO_TCP]);
        reject(b, NFT_REJECT_TCP_RST, 0);
    });
    rule(b, |b| reject(b, NFT_REJECT_ICMPX_UNREACH, NFT_REJECT_ICMPX_ADMIN_PROHIBITED));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes
            .chunks(16)
            .map(|row| row.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
            .join("\n")
            + "\n"
    }

    /// Byte-for-byte goldens: a change to what the launcher sends the kernel shows in review.
    /// `UPDATE_GOLDEN=1` rewrites them (then check them with the kernel test).
    #[test]
    fn batches_match_their_goldens() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
        for (name, batch) in [
            ("netlink-veth-create.hex", create_veth()),
            ("netlink-veth-configure.hex", configure_veth(2, 3)),
            ("netlink-tun-configure.hex", configure_tun(2)),
            ("netlink-nft-namespace.hex", namespace_firewall("sg-123-abc", 7, 3128, true)),
        ] {
            let path = dir.join(name);
            let got = hex(batch.bytes());
            if std::env::var_os("UPDATE_GOLDEN").is_some() {
                std::fs::write(&path, &got).unwrap();
            }
            let want = std::fs::read_to_string(&path).unwrap_or_default();
            assert_eq!(got, want, "{name} differs (UPDATE_GOLDEN=1 to rewrite)");
        }
    }

    #[test]
    fn every_message_length_covers_the_buffer_and_is_aligned() {
        for batch in [
            create_veth(),
            configure_veth(2, 3),
            namespace_firewall("x", 1, 3128, true),
            namespace_firewall("x", 1, 3128, false),
        ] {
            let bytes = batch.bytes();
            let mut at = 0;
            let mut count = 0;
            while at < bytes.len() {
                let len = u32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
                assert!(len >= 16 && len.is_multiple_of(4), "message at {at}: {len}");
                at += len;
                count += 1;
            }
            assert_eq!(at, bytes.len());
            assert!(count >= batch.acks);
        }
    }

    /// Without capture (a kernel that refuses NAT), the filter chain is the same, and there is no
    /// nat chain to fail again.
    #[test]
    fn without_capture_the_batch_has_the_filter_chain_only() {
        let find = |b: &Batch, what: &[u8]| b.bytes().windows(what.len()).any(|w| w == what);
        let (with, without) =
            (namespace_firewall("p", 1, 3128, true), namespace_firewall("p", 1, 3128, false));
        assert!(find(&with, b"capture\0") && find(&with, b"redir\0"));
        assert!(!find(&without, b"capture\0") && !find(&without, b"redir\0"));
        assert!(find(&without, b"output\0") && find(&without, b"log\0"));
        assert_eq!(with.acks - without.acks, 3, "one chain and its two rules (IPv4, IPv6) fewer");
    }

    #[test]
    fn the_log_prefix_is_made_safe_and_short() {
        assert_eq!(log_prefix("sg-1-ab"), "sg-1-ab");
        assert_eq!(log_prefix("a\"b c\n"), "a_b_c_");
        assert_eq!(log_prefix(&"x".repeat(300)).len(), MAX_PREFIX_LEN);
    }
}
