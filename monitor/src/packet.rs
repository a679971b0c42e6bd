//! One blocked packet, whichever source reported it, and the IP/TCP/UDP/ICMP decoding shared by
//! the sources.

use std::net::IpAddr;
use std::time::SystemTime;

use pnet_packet::icmp::IcmpPacket;
use pnet_packet::icmpv6::Icmpv6Packet;
use pnet_packet::ipv4::Ipv4Packet;
use pnet_packet::ipv6::Ipv6Packet;
use pnet_packet::tcp::TcpPacket;
use pnet_packet::udp::UdpPacket;
use serde::Serialize;

use crate::DecodeError;

/// Transport protocol of a blocked packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// TCP (6).
    Tcp,
    /// UDP (17).
    Udp,
    /// ICMP for IPv4 (1).
    Icmp,
    /// ICMP for IPv6 (58).
    Icmpv6,
    /// Any other IP protocol number.
    Other(u8),
}

impl Protocol {
    /// The protocol of IP protocol number `n`.
    pub fn from_number(n: u8) -> Self {
        match n {
            6 => Protocol::Tcp,
            17 => Protocol::Udp,
            1 => Protocol::Icmp,
            58 => Protocol::Icmpv6,
            other => Protocol::Other(other),
        }
    }

    /// Short lowercase name (`tcp`, `udp`, `icmp`, `icmpv6`, `proto-N`).
    pub fn name(&self) -> String {
        match self {
            Protocol::Tcp => "tcp".into(),
            Protocol::Udp => "udp".into(),
            Protocol::Icmp => "icmp".into(),
            Protocol::Icmpv6 => "icmpv6".into(),
            Protocol::Other(n) => format!("proto-{n}"),
        }
    }
}

/// A packet the firewall blocked (and logged), decoded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockedPacket {
    /// When the kernel logged it (NFLOG timestamp when present, else the time it was read).
    pub time: SystemTime,
    /// Who the rule belongs to: the NFLOG prefix (sandbox id or `sandgate.u1001`) or the pf anchor
    /// (ruleset) name.
    pub prefix: String,
    /// Owner uid of the sending socket, when the kernel knew it.
    pub uid: Option<u32>,
    /// Owner gid of the sending socket (NFLOG only).
    pub gid: Option<u32>,
    /// Sending process (pflog only; NFLOG does not report it).
    pub pid: Option<u32>,
    /// Transport protocol.
    pub protocol: Protocol,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// TCP/UDP source port.
    pub src_port: Option<u16>,
    /// TCP/UDP destination port.
    pub dst_port: Option<u16>,
    /// TCP flags byte (`0x02` = SYN).
    pub tcp_flags: Option<u8>,
    /// ICMP / ICMPv6 type.
    pub icmp_type: Option<u8>,
    /// ICMP / ICMPv6 code.
    pub icmp_code: Option<u8>,
}

/// Addresses and transport fields decoded from an IP packet (possibly truncated by the copy
/// range).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpHeaders {
    /// Transport protocol (after IPv6 extension headers).
    pub protocol: Protocol,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// TCP/UDP source port, if the transport header was there.
    pub src_port: Option<u16>,
    /// TCP/UDP destination port.
    pub dst_port: Option<u16>,
    /// TCP flags.
    pub tcp_flags: Option<u8>,
    /// ICMP type.
    pub icmp_type: Option<u8>,
    /// ICMP code.
    pub icmp_code: Option<u8>,
}

impl BlockedPacket {
    /// Assembles a packet from decoded headers and the source's metadata.
    pub fn new(
        time: SystemTime,
        prefix: String,
        ids: (Option<u32>, Option<u32>, Option<u32>),
        h: IpHeaders,
    ) -> Self {
        let (uid, gid, pid) = ids;
        BlockedPacket {
            time,
            prefix,
            uid,
            gid,
            pid,
            protocol: h.protocol,
            src: h.src,
            dst: h.dst,
            src_port: h.src_port,
            dst_port: h.dst_port,
            tcp_flags: h.tcp_flags,
            icmp_type: h.icmp_type,
            icmp_code: h.icmp_code,
        }
    }
}

/// Decodes an IPv4 or IPv6 packet (chosen by the version nibble) down to ports / ICMP type.
///
/// A transport header cut off by the copy range leaves the port fields `None`; only a missing or
/// malformed IP header is an error.
pub fn decode_ip(bytes: &[u8]) -> Result<IpHeaders, DecodeError> {
    let Some(&first) = bytes.first() else { return Err(DecodeError::NoPayload) };
    match first >> 4 {
        4 => decode_v4(bytes),
        6 => decode_v6(bytes),
        version => Err(DecodeError::NotIp { version }),
    }
}

fn decode_v4(bytes: &[u8]) -> Result<IpHeaders, DecodeError> {
    let truncated =
        |need| DecodeError::Truncated { what: "IPv4 header", offset: 0, need, have: bytes.len() };
    let ip = Ipv4Packet::new(bytes).ok_or_else(|| truncated(20))?;
    let ihl = usize::from(ip.get_header_length()) * 4;
    if ihl < 20 {
        return Err(DecodeError::BadLength { what: "IPv4 header", offset: 0, len: ihl });
    }
    if ihl > bytes.len() {
        return Err(truncated(ihl));
    }
    // The copy range may cut the packet; the total length may also claim less than we have.
    let total = usize::from(ip.get_total_length()).clamp(ihl, bytes.len());
    let proto = ip.get_next_level_protocol().0;
    let src = IpAddr::V4(ip.get_source());
    let dst = IpAddr::V4(ip.get_destination());
    // Only the first fragment carries the transport header.
    let l4 = if ip.get_fragment_offset() == 0 { &bytes[ihl..total] } else { &[][..] };
    Ok(transport(Protocol::from_number(proto), src, dst, l4))
}

fn decode_v6(bytes: &[u8]) -> Result<IpHeaders, DecodeError> {
    let ip = Ipv6Packet::new(bytes).ok_or(DecodeError::Truncated {
        what: "IPv6 header",
        offset: 0,
        need: 40,
        have: bytes.len(),
    })?;
    let src = IpAddr::V6(ip.get_source());
    let dst = IpAddr::V6(ip.get_destination());
    let end = (40 + usize::from(ip.get_payload_length())).min(bytes.len());
    let mut next = ip.get_next_header().0;
    let mut off = 40usize;
    // Walk a bounded number of extension headers to the transport header.
    for _ in 0..8 {
        match next {
            // Hop-by-hop, routing, destination options: (next, len in 8-octet units - 1).
            0 | 43 | 60 => {
                let Some(hdr) = bytes.get(off..off + 2).filter(|_| off + 2 <= end) else {
                    return Ok(transport(Protocol::Other(next), src, dst, &[]));
                };
                next = hdr[0];
                off += (usize::from(hdr[1]) + 1) * 8;
            }
            // Fragment: 8 bytes; only the first fragment carries the transport header.
            44 => {
                let Some(hdr) = bytes.get(off..off + 8).filter(|_| off + 8 <= end) else {
                    return Ok(transport(Protocol::Other(next), src, dst, &[]));
                };
                next = hdr[0];
                let frag_offset = u16::from_be_bytes([hdr[2], hdr[3]]) >> 3;
                off += 8;
                if frag_offset != 0 {
                    return Ok(transport(Protocol::from_number(next), src, dst, &[]));
                }
            }
            _ => break,
        }
    }
    let l4 = bytes.get(off..end).unwrap_or(&[]);
    Ok(transport(Protocol::from_number(next), src, dst, l4))
}

fn transport(protocol: Protocol, src: IpAddr, dst: IpAddr, l4: &[u8]) -> IpHeaders {
    let mut h = IpHeaders {
        protocol,
        src,
        dst,
        src_port: None,
        dst_port: None,
        tcp_flags: None,
        icmp_type: None,
        icmp_code: None,
    };
    match protocol {
        Protocol::Tcp => {
            if let Some(tcp) = TcpPacket::new(l4) {
                h.src_port = Some(tcp.get_source());
                h.dst_port = Some(tcp.get_destination());
                h.tcp_flags = Some(tcp.get_flags());
            } else if l4.len() >= 4 {
                // Ports are the first four bytes even when the rest was cut.
                h.src_port = Some(u16::from_be_bytes([l4[0], l4[1]]));
                h.dst_port = Some(u16::from_be_bytes([l4[2], l4[3]]));
            }
        }
        Protocol::Udp => {
            if let Some(udp) = UdpPacket::new(l4) {
                h.src_port = Some(udp.get_source());
                h.dst_port = Some(udp.get_destination());
            }
        }
        Protocol::Icmp => {
            if let Some(icmp) = IcmpPacket::new(l4) {
                h.icmp_type = Some(icmp.get_icmp_type().0);
                h.icmp_code = Some(icmp.get_icmp_code().0);
            }
        }
        Protocol::Icmpv6 => {
            if let Some(icmp) = Icmpv6Packet::new(l4) {
                h.icmp_type = Some(icmp.get_icmpv6_type().0);
                h.icmp_code = Some(icmp.get_icmpv6_code().0);
            }
        }
        Protocol::Other(_) => {}
    }
    h
}

/// Builders of IP packets for tests, fixtures and benchmarks.
#[doc(hidden)]
pub mod fixtures {
    use std::net::IpAddr;

    /// An IP packet from `src` to `dst` with protocol `proto` and `l4` as its payload.
    pub fn ip_packet(src: IpAddr, dst: IpAddr, proto: u8, l4: &[u8]) -> Vec<u8> {
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let total = 20 + l4.len();
                let mut p =
                    vec![0x45, 0, (total >> 8) as u8, total as u8, 0, 1, 0x40, 0, 64, proto, 0, 0];
                p.extend_from_slice(&s.octets());
                p.extend_from_slice(&d.octets());
                p.extend_from_slice(l4);
                p
            }
            (s, d) => {
                let to6 = |a: IpAddr| match a {
                    IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                    IpAddr::V6(v6) => v6,
                };
                let len = l4.len();
                let mut p = vec![0x60, 0, 0, 0, (len >> 8) as u8, len as u8, proto, 64];
                p.extend_from_slice(&to6(s).octets());
                p.extend_from_slice(&to6(d).octets());
                p.extend_from_slice(l4);
                p
            }
        }
    }

    /// A 20-byte TCP header.
    pub fn tcp(src_port: u16, dst_port: u16, flags: u8) -> Vec<u8> {
        let mut t = vec![0u8; 20];
        t[0..2].copy_from_slice(&src_port.to_be_bytes());
        t[2..4].copy_from_slice(&dst_port.to_be_bytes());
        t[12] = 5 << 4;
        t[13] = flags;
        t
    }

    /// An 8-byte UDP header followed by `payload`.
    pub fn udp(src_port: u16, dst_port: u16, payload: &[u8]) -> Vec<u8> {
        let mut u = Vec::with_capacity(8 + payload.len());
        u.extend_from_slice(&src_port.to_be_bytes());
        u.extend_from_slice(&dst_port.to_be_bytes());
        u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        u.extend_from_slice(&[0, 0]);
        u.extend_from_slice(payload);
        u
    }

    /// An 8-byte ICMP / ICMPv6 echo-style header.
    pub fn icmp(kind: u8, code: u8) -> Vec<u8> {
        vec![kind, code, 0, 0, 0, 1, 0, 1]
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    #[allow(clippy::type_complexity)]
    fn decodes_table() {
        // (src, dst, proto, l4, protocol, ports, flags, icmp)
        let rows: Vec<(
            &str,
            &str,
            u8,
            Vec<u8>,
            Protocol,
            Option<(u16, u16)>,
            Option<u8>,
            Option<(u8, u8)>,
        )> = vec![
            (
                "10.0.0.1",
                "10.0.0.2",
                6,
                tcp(40000, 443, 0x02),
                Protocol::Tcp,
                Some((40000, 443)),
                Some(0x02),
                None,
            ),
            (
                "10.0.0.1",
                "10.0.0.2",
                17,
                udp(5353, 53, b"x"),
                Protocol::Udp,
                Some((5353, 53)),
                None,
                None,
            ),
            ("10.0.0.1", "10.0.0.2", 1, icmp(8, 0), Protocol::Icmp, None, None, Some((8, 0))),
            (
                "fd00::1",
                "fd00::2",
                6,
                tcp(1, 80, 0x12),
                Protocol::Tcp,
                Some((1, 80)),
                Some(0x12),
                None,
            ),
            ("fd00::1", "fd00::2", 17, udp(2, 443, b""), Protocol::Udp, Some((2, 443)), None, None),
            ("fd00::1", "fd00::2", 58, icmp(128, 0), Protocol::Icmpv6, None, None, Some((128, 0))),
            ("10.0.0.1", "10.0.0.2", 47, vec![0; 4], Protocol::Other(47), None, None, None),
            // Transport header cut by the copy range: TCP keeps its ports.
            (
                "10.0.0.1",
                "10.0.0.2",
                6,
                tcp(7, 8, 0)[..6].to_vec(),
                Protocol::Tcp,
                Some((7, 8)),
                None,
                None,
            ),
            ("10.0.0.1", "10.0.0.2", 17, vec![1, 2], Protocol::Udp, None, None, None),
        ];
        for (src, dst, proto, l4, protocol, ports, flags, icmp) in rows {
            let h = decode_ip(&ip_packet(ip(src), ip(dst), proto, &l4)).unwrap();
            assert_eq!(h.protocol, protocol, "{src}->{dst} {proto}");
            assert_eq!((h.src, h.dst), (ip(src), ip(dst)));
            assert_eq!(h.src_port.zip(h.dst_port), ports, "{protocol:?}");
            assert_eq!(h.tcp_flags, flags);
            assert_eq!(h.icmp_type.zip(h.icmp_code), icmp);
        }
    }

    #[test]
    fn ipv6_extension_headers_are_walked() {
        let mut l4 = vec![6, 0, 0, 0, 0, 0, 0, 0]; // hop-by-hop, next = TCP, 8 bytes
        l4.extend(tcp(1000, 22, 0x02));
        let p = ip_packet(ip("fd00::1"), ip("fd00::2"), 0, &l4);
        let h = decode_ip(&p).unwrap();
        assert_eq!((h.protocol, h.dst_port), (Protocol::Tcp, Some(22)));
    }

    #[test]
    fn rejects_malformed() {
        assert_eq!(decode_ip(&[]), Err(DecodeError::NoPayload));
        assert!(matches!(decode_ip(&[0x55; 40]), Err(DecodeError::NotIp { version: 5 })));
        assert!(matches!(decode_ip(&[0x45; 10]), Err(DecodeError::Truncated { .. })));
        let mut p = ip_packet(ip("1.2.3.4"), ip("5.6.7.8"), 6, &tcp(1, 2, 0));
        p[0] = 0x43; // IHL 3 < 5
        assert!(matches!(decode_ip(&p), Err(DecodeError::BadLength { .. })));
        p[0] = 0x4f; // IHL 15 = 60 bytes > 40
        assert!(matches!(decode_ip(&p), Err(DecodeError::Truncated { .. })));
        assert!(matches!(decode_ip(&[0x60; 39]), Err(DecodeError::Truncated { .. })));
    }
}
