//! The address guard: which resolved addresses a sandbox may not reach, whatever name led there.
//!
//! A name on the allowlist can resolve to anything its owner likes (DNS rebinding), so every
//! address is checked after resolution and only checked addresses are connected to. An address in
//! one of the [`Forbidden`] classes is refused unless the policy allows that address itself.

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
    /// 240.0.0.0/4 (reserved), 255.255.255.255.
    Reserved,
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
            Forbidden::OwnAddress => "an address of the proxy's own host",
        })
    }
}

/// The class of a globally meaningless or internal address, or `None` for a public one.
/// IPv4 addresses embedded in IPv6 (mapped, compatible, NAT64, 6to4) are judged as IPv4.
pub fn classify(ip: IpAddr) -> Option<Forbidden> {
    match canonical_ip(ip) {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<Forbidden> {
    let [a, b, c, d] = ip.octets();
    Some(match (a, b) {
        _ if [a, b, c, d] == [169, 254, 169, 254] || [a, b, c, d] == [100, 100, 100, 200] => {
            Forbidden::Metadata
        }
        (127, _) => Forbidden::Loopback,
        (0, _) => Forbidden::Unspecified,
        (169, 254) => Forbidden::LinkLocal,
        (10, _) | (192, 168) => Forbidden::Private,
        (172, 16..=31) => Forbidden::Private,
        (100, 64..=127) => Forbidden::SharedAddressSpace,
        (224..=239, _) => Forbidden::Multicast,
        (240..=255, _) => Forbidden::Reserved,
        _ => return None,
    })
}

fn classify_v6(ip: Ipv6Addr) -> Option<Forbidden> {
    let s = ip.segments();
    if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        return Some(Forbidden::Metadata);
    }
    if ip.is_loopback() {
        return Some(Forbidden::Loopback);
    }
    if ip.is_unspecified() {
        return Some(Forbidden::Unspecified);
    }
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from(((hi as u32) << 16) | lo as u32);
    // ::a.b.c.d (deprecated IPv4-compatible) and 64:ff9b::a.b.c.d (NAT64) carry an IPv4 address.
    if s[..6] == [0; 6] {
        return classify_v4(embedded(s[6], s[7])).or(Some(Forbidden::Reserved));
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return classify_v4(embedded(s[6], s[7]));
    }
    // 6to4: 2002:AABB:CCDD::/48.
    if s[0] == 0x2002 {
        return classify_v4(embedded(s[1], s[2]));
    }
    match s[0] {
        0xfe80..=0xfebf => Some(Forbidden::LinkLocal),
        0xfc00..=0xfdff => Some(Forbidden::Private),
        0xff00..=0xffff => Some(Forbidden::Multicast),
        _ => None,
    }
}

/// The addresses of this host's interfaces, re-read at most every few seconds.
#[derive(Debug)]
pub struct OwnAddresses {
    cache: Mutex<(Option<Instant>, Arc<HashSet<IpAddr>>)>,
    ttl: Duration,
}

impl Default for OwnAddresses {
    fn default() -> Self {
        OwnAddresses { cache: Mutex::new((None, Arc::default())), ttl: Duration::from_secs(5) }
    }
}

impl OwnAddresses {
    /// Whether `ip` is an address of one of this host's interfaces.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.current().contains(&canonical_ip(ip))
    }

    fn current(&self) -> Arc<HashSet<IpAddr>> {
        let mut guard = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = guard.0.is_some_and(|at| at.elapsed() < self.ttl);
        if !fresh {
            guard.1 = Arc::new(interface_addresses());
            guard.0 = Some(Instant::now());
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
    fn classifies_addresses() {
        use Forbidden::*;
        let rows: &[(&str, Option<Forbidden>)] = &[
            ("169.254.169.254", Some(Metadata)),
            ("fd00:ec2::254", Some(Metadata)),
            ("100.100.100.200", Some(Metadata)),
            ("127.0.0.1", Some(Loopback)),
            ("127.255.0.9", Some(Loopback)),
            ("::1", Some(Loopback)),
            ("::ffff:127.0.0.1", Some(Loopback)),
            ("::127.0.0.1", Some(Loopback)),
            ("64:ff9b::10.0.0.1", Some(Private)),
            ("2002:c0a8:0101::1", Some(Private)),
            ("0.0.0.0", Some(Unspecified)),
            ("::", Some(Unspecified)),
            ("169.254.1.1", Some(LinkLocal)),
            ("fe80::1", Some(LinkLocal)),
            ("10.1.2.3", Some(Private)),
            ("172.16.0.1", Some(Private)),
            ("172.31.255.255", Some(Private)),
            ("192.168.1.1", Some(Private)),
            ("fd12::1", Some(Private)),
            ("fc00::1", Some(Private)),
            ("100.64.0.1", Some(SharedAddressSpace)),
            ("100.127.255.255", Some(SharedAddressSpace)),
            ("224.0.0.1", Some(Multicast)),
            ("ff02::1", Some(Multicast)),
            ("255.255.255.255", Some(Reserved)),
            ("240.0.0.1", Some(Reserved)),
            ("172.32.0.1", None),
            ("100.128.0.1", None),
            ("93.184.216.34", None),
            ("2606:4700::1111", None),
            ("64:ff9b::93.184.216.34", None),
        ];
        for (ip, want) in rows {
            assert_eq!(classify(ip.parse().unwrap()), *want, "{ip}");
        }
    }

    #[test]
    fn own_addresses_include_loopback() {
        let own = OwnAddresses::default();
        assert!(own.contains("127.0.0.1".parse().unwrap()));
        assert!(!own.contains("192.0.2.1".parse().unwrap()));
    }
}
