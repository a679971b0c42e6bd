//! The address guard: which resolved addresses a sandbox may not reach, whatever name led there.
//!
//! A name on the allowlist can resolve to anything its owner likes (DNS rebinding), so every
//! address is checked after resolution and only checked addresses are connected to. An address in
//! one of the [`Forbidden`] classes is refused unless the policy allows that address itself.
//!
//! Classification is deny by default: an address is public only when it lies in the unicast space
//! meant for the Internet (IPv4 1.0.0.0–223.255.255.255, IPv6 global unicast 2000::/3) and no
//! entry of the IANA IPv4 and IPv6 Special-Purpose Address Registries (plus the address
//! architecture's site-local fec0::/10 and multicast) says it is not globally reachable. The
//! `TABLE` below is that registry, longest prefix wins; a range nobody listed is refused, so a
//! future reservation outside the global unicast space is refused before anyone adds a row. Where
//! a prefix carries an IPv4 address (mapped ::ffff:0:0/96, NAT64 64:ff9b::/96, 6to4 2002::/16) the
//! embedded address is judged instead; where it carries one we cannot trust (Teredo 2001::/32,
//! whose client address is obfuscated and whose relay is whoever routes it) it is refused.

use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandgate_config::canonical_ip;

/// Why an address may not be reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Forbidden {
    /// A cloud metadata service (169.254.169.254, fd00:ec2::254, 100.100.100.200).
    Metadata,
    /// 127.0.0.0/8, ::1.
    Loopback,
    /// 0.0.0.0/8, ::.
    Unspecified,
    /// 169.254.0.0/16, fe80::/10.
    LinkLocal,
    /// RFC 1918 (10/8, 172.16/12, 192.168/16) and unique-local IPv6 (fc00::/7).
    Private,
    /// Carrier-grade NAT, 100.64.0.0/10.
    SharedAddressSpace,
    /// 224.0.0.0/4, ff00::/8.
    Multicast,
    /// 240.0.0.0/4 (reserved), 255.255.255.255, and every range outside the global unicast space
    /// that no other class names (deny by default).
    Reserved,
    /// Documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32,
    /// 3fff::/20): never routed, so an answer pointing there is someone's local network.
    Documentation,
    /// Benchmarking (198.18.0.0/15, 2001:2::/48): lab networks, often reachable inside one.
    Benchmarking,
    /// A special-purpose range that is not globally reachable: IETF protocol assignments
    /// (192.0.0.0/24, 2001::/23), local-use NAT64 (64:ff9b:1::/48), discard (100::/64), SRv6
    /// (5f00::/16), deprecated ORCHID and the deprecated 6to4 relay anycast.
    SpecialPurpose,
    /// A tunnel whose endpoint cannot be judged (Teredo, 2001::/32).
    Tunnel,
    /// Deprecated site-local IPv6 (fec0::/10), still routed inside some sites.
    SiteLocal,
    /// An address of one of this host's own interfaces.
    OwnAddress,
}

impl fmt::Display for Forbidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Forbidden::Metadata => "a cloud metadata service",
            Forbidden::Loopback => "a loopback address",
            Forbidden::Unspecified => "an unspecified address",
            Forbidden::LinkLocal => "a link-local address",
            Forbidden::Private => "a private network address",
            Forbidden::SharedAddressSpace => "a carrier-grade NAT address (100.64.0.0/10)",
            Forbidden::Multicast => "a multicast address",
            Forbidden::Reserved => "a reserved address",
            Forbidden::Documentation => "a documentation address (never routed)",
            Forbidden::Benchmarking => "a benchmarking network address",
            Forbidden::SpecialPurpose => "a special-purpose address that is not globally reachable",
            Forbidden::Tunnel => "a Teredo tunnel address",
            Forbidden::SiteLocal => "a site-local address",
            Forbidden::OwnAddress => "an address of the proxy's own host",
        })
    }
}

/// How the rule of a refusal by the guard is written (`X-Sandgate-Decision`, events, the
/// launcher's notice): `address guard: 127.0.0.1 is a loopback address`. The launcher and
/// `sandgate learn` tell such a refusal from others by it ([`refusal_in_rule`]): for it, allowing
/// the name (a rule, a grant, a person's answer) does not help, only allowing the address does.
pub const RULE_PREFIX: &str = "address guard: ";

/// The refused address and the reason (`a loopback address`) when `rule` is the rule of a
/// refusal by the guard (see [`RULE_PREFIX`]).
pub fn refusal_in_rule(rule: &str) -> Option<(IpAddr, &str)> {
    let (ip, why) = rule.strip_prefix(RULE_PREFIX)?.split_once(" is ")?;
    Some((ip.parse().ok()?, why))
}

/// What one registry row says about the addresses under its prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// Globally reachable unicast.
    Public,
    /// Not to be reached from a sandbox.
    Refuse(Forbidden),
    /// The prefix carries an IPv4 address in its last 32 bits (NAT64): judge that.
    EmbeddedLast32,
    /// 6to4: the IPv4 address is bits 16..48.
    Embedded6to4,
}

/// A prefix of the special-purpose tables.
#[derive(Clone, Copy, Debug)]
enum Net {
    V4(Ipv4Addr, u8),
    V6(Ipv6Addr, u8),
}

impl Net {
    fn len(self) -> u8 {
        match self {
            Net::V4(_, l) | Net::V6(_, l) => l,
        }
    }

    fn contains(self, ip: IpAddr) -> bool {
        match (self, ip) {
            (Net::V4(net, len), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                u32::from(ip) & mask == u32::from(net) & mask
            }
            (Net::V6(net, len), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                u128::from(ip) & mask == u128::from(net) & mask
            }
            _ => false,
        }
    }
}

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> Net {
    Net::V4(Ipv4Addr::new(a, b, c, d), len)
}

const fn v6(s: [u16; 8], len: u8) -> Net {
    Net::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]), len)
}

use Forbidden as F;
use Verdict::{Embedded6to4, EmbeddedLast32, Public, Refuse};

/// The classification table, longest prefix wins; an address no row covers is
/// [`Forbidden::Reserved`]. Rows follow the IANA IPv4 and IPv6 Special-Purpose Address
/// Registries (2025), plus multicast, site-local and the metadata services.
const TABLE: &[(Net, Verdict)] = &[
    // IPv4: the unicast space 0.0.0.0-223.255.255.255 is public unless a longer row says not.
    (v4(0, 0, 0, 0, 1), Public),
    (v4(128, 0, 0, 0, 2), Public),
    (v4(192, 0, 0, 0, 3), Public),
    (v4(0, 0, 0, 0, 8), Refuse(F::Unspecified)), // "this network" (RFC 791)
    (v4(10, 0, 0, 0, 8), Refuse(F::Private)),    // RFC 1918
    (v4(100, 64, 0, 0, 10), Refuse(F::SharedAddressSpace)), // RFC 6598
    (v4(100, 100, 100, 200, 32), Refuse(F::Metadata)), // Alibaba Cloud
    (v4(127, 0, 0, 0, 8), Refuse(F::Loopback)),  // RFC 1122
    (v4(169, 254, 0, 0, 16), Refuse(F::LinkLocal)), // RFC 3927
    (v4(169, 254, 169, 254, 32), Refuse(F::Metadata)), // AWS, GCP, Azure, ...
    (v4(172, 16, 0, 0, 12), Refuse(F::Private)), // RFC 1918
    (v4(192, 0, 0, 0, 24), Refuse(F::SpecialPurpose)), // IETF protocol assignments (RFC 6890)
    (v4(192, 0, 0, 0, 29), Refuse(F::SpecialPurpose)), // IPv4 service continuity (RFC 7335)
    (v4(192, 0, 0, 8, 32), Refuse(F::SpecialPurpose)), // IPv4 dummy address (RFC 7600)
    (v4(192, 0, 0, 9, 32), Public),              // PCP anycast (RFC 7723): globally reachable
    (v4(192, 0, 0, 10, 32), Public),             // TURN anycast (RFC 8155): globally reachable
    (v4(192, 0, 0, 170, 32), Refuse(F::SpecialPurpose)), // NAT64/DNS64 discovery (RFC 8880)
    (v4(192, 0, 0, 171, 32), Refuse(F::SpecialPurpose)), // NAT64/DNS64 discovery (RFC 8880)
    (v4(192, 0, 2, 0, 24), Refuse(F::Documentation)), // TEST-NET-1 (RFC 5737)
    (v4(192, 31, 196, 0, 24), Public),           // AS112-v4 (RFC 7535): globally reachable
    (v4(192, 52, 193, 0, 24), Public),           // AMT (RFC 7450): globally reachable
    (v4(192, 88, 99, 0, 24), Refuse(F::SpecialPurpose)), // deprecated 6to4 relay (RFC 7526)
    (v4(192, 168, 0, 0, 16), Refuse(F::Private)), // RFC 1918
    (v4(192, 175, 48, 0, 24), Public),           // AS112 direct delegation (RFC 7534)
    (v4(198, 18, 0, 0, 15), Refuse(F::Benchmarking)), // RFC 2544
    (v4(198, 51, 100, 0, 24), Refuse(F::Documentation)), // TEST-NET-2 (RFC 5737)
    (v4(203, 0, 113, 0, 24), Refuse(F::Documentation)), // TEST-NET-3 (RFC 5737)
    (v4(224, 0, 0, 0, 4), Refuse(F::Multicast)), // RFC 5771
    (v4(240, 0, 0, 0, 4), Refuse(F::Reserved)),  // RFC 1112
    (v4(255, 255, 255, 255, 32), Refuse(F::Reserved)), // limited broadcast (RFC 919)
    // IPv6: global unicast 2000::/3 is public unless a longer row says not; the rest of the
    // space is reserved by the IETF (no row: refused).
    (v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3), Public),
    (v6([0, 0, 0, 0, 0, 0, 0, 0], 128), Refuse(F::Unspecified)), // RFC 4291
    (v6([0, 0, 0, 0, 0, 0, 0, 1], 128), Refuse(F::Loopback)),    // RFC 4291
    (v6([0, 0, 0, 0, 0, 0, 0, 0], 96), Refuse(F::Reserved)),     // IPv4-compatible (deprecated)
    (v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96), EmbeddedLast32),     // IPv4-mapped (RFC 4291)
    (v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96), EmbeddedLast32),  // NAT64 (RFC 6052)
    (v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48), Refuse(F::SpecialPurpose)), // local NAT64 (RFC 8215)
    (v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64), Refuse(F::SpecialPurpose)), // discard-only (RFC 6666)
    (v6([0x100, 0, 0, 1, 0, 0, 0, 0], 64), Refuse(F::SpecialPurpose)), // dummy prefix (RFC 9780)
    (v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23), Refuse(F::SpecialPurpose)), // IETF protocol (RFC 2928)
    (v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32), Refuse(F::Tunnel)),  // Teredo (RFC 4380)
    (v6([0x2001, 1, 0, 0, 0, 0, 0, 1], 128), Public),            // PCP anycast (RFC 7723)
    (v6([0x2001, 1, 0, 0, 0, 0, 0, 2], 128), Public),            // TURN anycast (RFC 8155)
    (v6([0x2001, 1, 0, 0, 0, 0, 0, 3], 128), Public),            // DNS-SD SRP anycast (RFC 9665)
    (v6([0x2001, 2, 0, 0, 0, 0, 0, 0], 48), Refuse(F::Benchmarking)), // RFC 5180
    (v6([0x2001, 3, 0, 0, 0, 0, 0, 0], 32), Public),             // AMT (RFC 7450)
    (v6([0x2001, 4, 0x112, 0, 0, 0, 0, 0], 48), Public),         // AS112-v6 (RFC 7535)
    (v6([0x2001, 0x10, 0, 0, 0, 0, 0, 0], 28), Refuse(F::SpecialPurpose)), // ORCHID (deprecated)
    (v6([0x2001, 0x20, 0, 0, 0, 0, 0, 0], 28), Public),          // ORCHIDv2 (RFC 7343)
    (v6([0x2001, 0x30, 0, 0, 0, 0, 0, 0], 28), Public),          // drone remote ID DETs (RFC 9374)
    (v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32), Refuse(F::Documentation)), // RFC 3849
    (v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16), Embedded6to4),       // 6to4 (RFC 3056)
    (v6([0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0], 48), Public), // AS112 direct delegation (RFC 7534)
    (v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20), Refuse(F::Documentation)), // RFC 9637
    (v6([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16), Refuse(F::SpecialPurpose)), // SRv6 SIDs (RFC 9602)
    (v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7), Refuse(F::Private)), // unique-local (RFC 4193)
    (v6([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254], 128), Refuse(F::Metadata)), // AWS IMDS over IPv6
    (v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10), Refuse(F::LinkLocal)), // RFC 4291
    (v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10), Refuse(F::SiteLocal)), // RFC 3879 (deprecated)
    (v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), Refuse(F::Multicast)), // RFC 4291
];

/// The most specific row of [`TABLE`] covering `ip`, if any.
fn lookup(ip: IpAddr) -> Option<(Net, Verdict)> {
    TABLE.iter().filter(|(net, _)| net.contains(ip)).max_by_key(|(net, _)| net.len()).copied()
}

/// The class of a globally meaningless or internal address, or `None` for a public one.
/// IPv4 addresses embedded in IPv6 (mapped, NAT64, 6to4) are judged as IPv4; see the module
/// comment for the rule.
pub fn classify(ip: IpAddr) -> Option<Forbidden> {
    let ip = canonical_ip(ip);
    let Some((_, verdict)) = lookup(ip) else {
        return Some(Forbidden::Reserved);
    };
    let embedded = |bits: u128| Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    match (verdict, ip) {
        (Public, _) => None,
        (Refuse(why), _) => Some(why),
        // An embedded address is judged by the IPv4 rows only: one level, no recursion.
        (EmbeddedLast32, IpAddr::V6(v6)) => classify(IpAddr::V4(embedded(u128::from(v6)))),
        (Embedded6to4, IpAddr::V6(v6)) => classify(IpAddr::V4(embedded(u128::from(v6) >> 80))),
        // The embedding rows are IPv6 prefixes; an IPv4 address never matches them.
        (EmbeddedLast32 | Embedded6to4, IpAddr::V4(_)) => Some(Forbidden::Reserved),
    }
}

/// How long [`OwnAddresses`] trusts what it read: an address added to an interface is refused at
/// the latest this long after it appeared.
pub const OWN_ADDRESSES_TTL: Duration = Duration::from_secs(5);

/// The addresses of this host's interfaces, re-read at most every [`OWN_ADDRESSES_TTL`].
#[derive(Debug)]
pub struct OwnAddresses {
    cache: Mutex<(Option<Instant>, Arc<HashSet<IpAddr>>)>,
    ttl: Duration,
    /// Where the addresses come from: the interfaces, or a test's list.
    read: fn() -> HashSet<IpAddr>,
}

impl Default for OwnAddresses {
    fn default() -> Self {
        OwnAddresses::reading(interface_addresses, OWN_ADDRESSES_TTL)
    }
}

impl OwnAddresses {
    /// A cache over `read`, re-read when what it holds is `ttl` old.
    fn reading(read: fn() -> HashSet<IpAddr>, ttl: Duration) -> Self {
        OwnAddresses { cache: Mutex::new((None, Arc::default())), ttl, read }
    }

    /// Whether `ip` is an address of one of this host's interfaces.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.current(Instant::now()).contains(&canonical_ip(ip))
    }

    /// The addresses as of `now`: what was read less than the lifetime before, else read again.
    fn current(&self, now: Instant) -> Arc<HashSet<IpAddr>> {
        let mut guard = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = guard.0.is_some_and(|at| now.saturating_duration_since(at) < self.ttl);
        if !fresh {
            guard.1 = Arc::new((self.read)());
            guard.0 = Some(now);
        }
        guard.1.clone()
    }
}

/// Every address on every interface (empty when the system will not say: the class checks still
/// apply, and most own addresses are private or loopback anyway).
fn interface_addresses() -> HashSet<IpAddr> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return HashSet::new();
    };
    addrs
        .filter_map(|a| a.address)
        .filter_map(|sa| {
            if let Some(v4) = sa.as_sockaddr_in() {
                Some(IpAddr::V4(v4.ip()))
            } else {
                sa.as_sockaddr_in6().map(|v6| canonical_ip(IpAddr::V6(v6.ip())))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_refusal_is_told_by_its_rule() {
        assert_eq!(
            refusal_in_rule("address guard: 127.0.0.1 is a loopback address"),
            Some((IpAddr::from([127, 0, 0, 1]), "a loopback address"))
        );
        assert_eq!(
            refusal_in_rule("address guard: fd00::1 is a private network address"),
            Some(("fd00::1".parse().unwrap(), "a private network address"))
        );
        for other in ["deny evil.test (command line)", "address guard: nonsense", ""] {
            assert_eq!(refusal_in_rule(other), None, "{other}");
        }
    }

    /// One row per registry entry (the first address inside it) and, for the refused ones, a
    /// public neighbour just outside as the control.
    const ROWS: &[(&str, Option<Forbidden>)] = {
        use Forbidden::*;
        &[
            // IPv4 unicast space and its controls.
            ("1.1.1.1", None),
            ("93.184.216.34", None),
            ("128.0.0.1", None),
            ("223.255.255.254", None),
            ("0.0.0.0", Some(Unspecified)),
            ("0.1.2.3", Some(Unspecified)),
            ("10.1.2.3", Some(Private)),
            ("11.0.0.1", None),
            ("9.255.255.255", None),
            ("100.64.0.1", Some(SharedAddressSpace)),
            ("100.127.255.255", Some(SharedAddressSpace)),
            ("100.63.255.255", None),
            ("100.128.0.1", None),
            ("100.100.100.200", Some(Metadata)),
            ("127.0.0.1", Some(Loopback)),
            ("127.255.0.9", Some(Loopback)),
            ("169.254.1.1", Some(LinkLocal)),
            ("169.254.169.254", Some(Metadata)),
            ("169.255.0.1", None),
            ("172.16.0.1", Some(Private)),
            ("172.31.255.255", Some(Private)),
            ("172.32.0.1", None),
            ("172.15.255.255", None),
            ("192.0.0.1", Some(SpecialPurpose)),
            ("192.0.0.7", Some(SpecialPurpose)),
            ("192.0.0.8", Some(SpecialPurpose)),
            ("192.0.0.9", None),
            ("192.0.0.10", None),
            ("192.0.0.11", Some(SpecialPurpose)),
            ("192.0.0.170", Some(SpecialPurpose)),
            ("192.0.0.171", Some(SpecialPurpose)),
            ("192.0.1.1", None),
            ("192.0.2.1", Some(Documentation)),
            ("192.0.3.1", None),
            ("192.31.196.1", None),
            ("192.52.193.1", None),
            ("192.88.99.1", Some(SpecialPurpose)),
            ("192.88.98.1", None),
            ("192.168.1.1", Some(Private)),
            ("192.169.0.1", None),
            ("192.175.48.1", None),
            ("198.18.0.1", Some(Benchmarking)),
            ("198.19.255.255", Some(Benchmarking)),
            ("198.17.255.255", None),
            ("198.20.0.1", None),
            ("198.51.100.1", Some(Documentation)),
            ("198.51.101.1", None),
            ("203.0.113.1", Some(Documentation)),
            ("203.0.114.1", None),
            ("224.0.0.1", Some(Multicast)),
            ("239.255.255.255", Some(Multicast)),
            ("240.0.0.1", Some(Reserved)),
            ("255.255.255.254", Some(Reserved)),
            ("255.255.255.255", Some(Reserved)),
            // IPv6 global unicast and its controls.
            ("2606:4700::1111", None),
            ("2a00:1450::1", None),
            ("3ffe::1", None),
            ("::", Some(Unspecified)),
            ("::1", Some(Loopback)),
            ("::2", Some(Reserved)),
            ("::127.0.0.1", Some(Reserved)),
            ("::93.184.216.34", Some(Reserved)),
            ("::ffff:127.0.0.1", Some(Loopback)),
            ("::ffff:10.0.0.1", Some(Private)),
            ("::ffff:93.184.216.34", None),
            ("::ffff:0:10.0.0.1", Some(Reserved)), // IPv4-translated (SIIT): no row, refused
            ("64:ff9b::10.0.0.1", Some(Private)),
            ("64:ff9b::169.254.169.254", Some(Metadata)),
            ("64:ff9b::198.18.0.1", Some(Benchmarking)),
            ("64:ff9b::93.184.216.34", None),
            ("64:ff9b:1::1", Some(SpecialPurpose)),
            ("64:ff9b:1::93.184.216.34", Some(SpecialPurpose)),
            ("100::1", Some(SpecialPurpose)),
            ("100:0:0:1::1", Some(SpecialPurpose)),
            ("100:0:0:2::1", Some(Reserved)),
            ("2001:4::1", Some(SpecialPurpose)),
            ("2001::1", Some(Tunnel)),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Some(Tunnel)),
            ("2001:1::1", None),
            ("2001:1::2", None),
            ("2001:1::3", None),
            ("2001:1::4", Some(SpecialPurpose)),
            ("2001:2::1", Some(Benchmarking)),
            ("2001:3::1", None),
            ("2001:4:112::1", None),
            ("2001:10::1", Some(SpecialPurpose)),
            ("2001:20::1", None),
            ("2001:30::1", None),
            ("2001:200::1", None),
            ("2001:db8::1", Some(Documentation)),
            ("2001:db9::1", None),
            ("2002:c0a8:0101::1", Some(Private)),
            ("2002:7f00:1::1", Some(Loopback)),
            ("2002:a9fe:a9fe::1", Some(Metadata)),
            ("2002:5db8:d822::1", None),
            ("2620:4f:8000::1", None),
            ("3fff::1", Some(Documentation)),
            ("3fff:1000::1", None),
            ("5f00::1", Some(SpecialPurpose)),
            ("5f01::1", Some(Reserved)),
            ("4000::1", Some(Reserved)),
            ("fc00::1", Some(Private)),
            ("fd12::1", Some(Private)),
            ("fd00:ec2::254", Some(Metadata)),
            ("fe80::1", Some(LinkLocal)),
            ("febf::1", Some(LinkLocal)),
            ("fec0::1", Some(SiteLocal)),
            ("feff::1", Some(SiteLocal)),
            ("ff02::1", Some(Multicast)),
            ("1fff::1", Some(Reserved)),
        ]
    };

    #[test]
    fn classifies_addresses() {
        for (ip, want) in ROWS {
            assert_eq!(classify(ip.parse().unwrap()), *want, "{ip}");
        }
    }

    /// Every row of the table is exercised by at least one test row whose most specific match it
    /// is, so a row added without a test fails here.
    #[test]
    fn every_table_row_has_a_test_row() {
        for (net, verdict) in TABLE {
            let covered = ROWS.iter().any(|(ip, _)| {
                let ip: IpAddr = ip.parse().unwrap();
                lookup(ip).is_some_and(|(n, v)| n.len() == net.len() && v == *verdict)
                    && net.contains(ip)
            });
            assert!(covered, "no test row for {net:?} {verdict:?}");
        }
    }

    thread_local! {
        /// What the interfaces of [`fake_interfaces`] hold, and how often they were read.
        static FAKE: std::cell::RefCell<(Vec<IpAddr>, usize)> = const {
            std::cell::RefCell::new((Vec::new(), 0))
        };
    }

    fn fake_interfaces() -> HashSet<IpAddr> {
        FAKE.with_borrow_mut(|(list, reads)| {
            *reads += 1;
            list.iter().copied().collect()
        })
    }

    /// An address added to an interface is unknown for at most the lifetime, and known from then
    /// on; within the lifetime the interfaces are not read again.
    #[test]
    fn an_added_own_address_is_seen_once_the_cache_is_a_lifetime_old() {
        let a: IpAddr = "45.90.9.1".parse().unwrap();
        let b: IpAddr = "45.90.9.2".parse().unwrap();
        FAKE.with_borrow_mut(|f| *f = (vec![a], 0));
        let ttl = Duration::from_secs(5);
        let own = OwnAddresses::reading(fake_interfaces, ttl);
        let t0 = Instant::now();
        let reads = || FAKE.with_borrow(|f| f.1);
        // (when, the address added before it, b known, reads so far)
        let rows: &[(Duration, bool, bool, usize)] = &[
            (Duration::ZERO, false, false, 1),
            (Duration::from_millis(1), true, false, 1), // added: the cache is fresh
            (ttl - Duration::from_millis(1), false, false, 1), // still fresh
            (ttl, false, true, 2),                      // a lifetime old: read again
            (ttl + Duration::from_secs(1), false, true, 2), // fresh again
            (ttl * 3, false, true, 3),
        ];
        for &(at, add, known, want_reads) in rows {
            if add {
                FAKE.with_borrow_mut(|f| f.0.push(b));
            }
            let now = own.current(t0 + at);
            assert_eq!(now.contains(&b), known, "at {at:?}");
            assert!(now.contains(&a), "at {at:?}");
            assert_eq!(reads(), want_reads, "at {at:?}");
        }
    }

    /// An address that left its interface is no longer refused as the host's own once the
    /// cache is a lifetime old (the host's old address may be someone else's now).
    #[test]
    fn a_removed_own_address_is_forgotten_after_a_lifetime() {
        let a: IpAddr = "45.90.9.1".parse().unwrap();
        FAKE.with_borrow_mut(|f| *f = (vec![a], 0));
        let own = OwnAddresses::reading(fake_interfaces, Duration::from_secs(5));
        let t0 = Instant::now();
        assert!(own.current(t0).contains(&a));
        FAKE.with_borrow_mut(|f| f.0.clear());
        assert!(own.current(t0 + Duration::from_secs(1)).contains(&a));
        assert!(!own.current(t0 + Duration::from_secs(5)).contains(&a));
    }

    #[test]
    fn own_addresses_include_loopback() {
        let own = OwnAddresses::default();
        assert!(own.contains("127.0.0.1".parse().unwrap()));
        assert!(own.contains("::ffff:127.0.0.1".parse().unwrap()), "judged as IPv4");
        assert!(!own.contains("192.0.2.1".parse().unwrap()));
    }
}
