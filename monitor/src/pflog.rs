//! pflog (macOS): decoding of `DLT_PFLOG` frames — the header of `net/if_pflog.h` followed by the
//! IP packet — as a pure function, and on macOS a capture on `pflog0` through pnet datalink.
//!
//! Header layout (64 bytes, `BPF_WORDALIGN(offsetof(struct pfloghdr, pad))`):
//!
//! | offset | field                         |
//! |-------:|-------------------------------|
//! | 0      | `length` (header length)      |
//! | 1      | `af` (2 = inet, 30 = inet6)   |
//! | 2      | `action`, 3 `reason`          |
//! | 4      | `ifname[16]`                  |
//! | 20     | `ruleset[16]` (anchor name)   |
//! | 36     | `rulenr`, 40 `subrulenr` (big endian) |
//! | 44     | `uid`, 48 `pid`, 52 `rule_uid`, 56 `rule_pid` (host order: little endian on every Mac) |
//! | 60     | `dir`, 61 `pad[3]`            |
//!
//! pf writes `uid = UID_MAX` (XNU's is 2147483647, not `u32::MAX`) when it did not look the socket
//! up; that decodes as `None`. XNU never fills `pid` (it stays `NO_PID`, 100000, even with
//! `log (user)`), so the daemon attributes by uid and anchor name; `pid` decodes as `None` then,
//! and is kept for pf implementations that do fill it.

use std::time::SystemTime;

use serde::Serialize;

use crate::DecodeError;
use crate::packet::{BlockedPacket, decode_ip};

/// Size of the pflog header on macOS.
pub const PFLOG_HDRLEN: usize = 64;
/// Smallest valid `length` field: `offsetof(struct pfloghdr, pad)`.
const MIN_LENGTH: usize = 61;
/// `AF_INET` on macOS.
pub const AF_INET: u8 = 2;
/// `AF_INET6` on macOS.
pub const AF_INET6: u8 = 30;
/// `NO_PID` of xnu's pf (`PID_MAX + 1`).
pub const NO_PID: u32 = 100_000;
/// XNU's `UID_MAX`: what its pf writes for "no uid".
pub const UID_MAX: u32 = 2_147_483_647;

/// The decoded pflog header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PflogHeader {
    /// Address family (`AF_INET` / `AF_INET6` of macOS).
    pub af: u8,
    /// pf action (`PF_PASS` 0, `PF_DROP` 1, ...).
    pub action: u8,
    /// pf reason code (`PFRES_MATCH` 0, ...).
    pub reason: u8,
    /// Interface the packet was on.
    pub ifname: String,
    /// Anchor (ruleset) of the rule that logged, as pf cut it to 15 bytes.
    pub ruleset: String,
    /// Rule number within the ruleset.
    pub rulenr: u32,
    /// Rule number within the anchor.
    pub subrulenr: u32,
    /// Uid of the socket, when pf looked it up.
    pub uid: Option<u32>,
    /// Pid of the socket's process, when pf filled it (XNU never does).
    pub pid: Option<u32>,
    /// Uid that loaded the rule.
    pub rule_uid: u32,
    /// Pid that loaded the rule.
    pub rule_pid: u32,
    /// Direction (`PF_IN` 1, `PF_OUT` 2).
    pub dir: u8,
}

/// Decodes one `DLT_PFLOG` frame into its header and the blocked packet.
///
/// The packet's `prefix` is the anchor name; `now` is the capture time.
pub fn decode(frame: &[u8], now: SystemTime) -> Result<(PflogHeader, BlockedPacket), DecodeError> {
    if frame.len() < MIN_LENGTH {
        return Err(DecodeError::Truncated {
            what: "pflog header",
            offset: 0,
            need: PFLOG_HDRLEN,
            have: frame.len(),
        });
    }
    let length = usize::from(frame[0]);
    if length < MIN_LENGTH {
        return Err(DecodeError::BadLength { what: "pflog header", offset: 0, len: length });
    }
    let start = (length + 3) & !3;
    if start > frame.len() {
        return Err(DecodeError::Truncated {
            what: "pflog header",
            offset: 0,
            need: start,
            have: frame.len(),
        });
    }
    let be = |o: usize| u32::from_be_bytes([frame[o], frame[o + 1], frame[o + 2], frame[o + 3]]);
    let le = |o: usize| u32::from_le_bytes([frame[o], frame[o + 1], frame[o + 2], frame[o + 3]]);
    let af = frame[1];
    if af != AF_INET && af != AF_INET6 {
        return Err(DecodeError::UnknownFamily { af });
    }
    // `u32::MAX` too: other pf implementations (OpenBSD's) write that.
    let uid = Some(le(44)).filter(|&u| u != UID_MAX && u != u32::MAX);
    let pid = Some(le(48)).filter(|&p| p != NO_PID && i32::try_from(p).is_ok_and(|p| p > 0));
    let header = PflogHeader {
        af,
        action: frame[2],
        reason: frame[3],
        ifname: c_string(&frame[4..20]),
        ruleset: c_string(&frame[20..36]),
        rulenr: be(36),
        subrulenr: be(40),
        uid,
        pid,
        rule_uid: le(52),
        rule_pid: le(56),
        dir: frame[60],
    };
    let headers = decode_ip(&frame[start..])?;
    let packet = BlockedPacket::new(now, header.ruleset.clone(), (uid, None, pid), headers);
    Ok((header, packet))
}

/// The scope a pflog packet belongs to: by the socket's uid (`sandgate.u501`, the log prefix of
/// the guest-user scope), else by the anchor name pf recorded (cut to 15 bytes).
pub fn scope_name(packet: &BlockedPacket) -> String {
    match packet.uid {
        Some(uid) => format!("sandgate.u{uid}"),
        None if !packet.prefix.is_empty() => packet.prefix.clone(),
        None => "unknown".to_owned(),
    }
}

fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Builds a pflog frame for tests and fixtures.
#[doc(hidden)]
pub mod fixtures {
    use super::*;

    /// A frame with the given fields and `ip` after the header. `uid`/`pid` `None` write the
    /// "not looked up" values.
    pub fn frame(af: u8, ruleset: &str, uid: Option<u32>, pid: Option<u32>, ip: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; PFLOG_HDRLEN];
        f[0] = MIN_LENGTH as u8;
        f[1] = af;
        f[2] = 1; // PF_DROP
        f[4..7].copy_from_slice(b"en0");
        let r = ruleset.as_bytes();
        let n = r.len().min(15);
        f[20..20 + n].copy_from_slice(&r[..n]);
        f[36..40].copy_from_slice(&3u32.to_be_bytes());
        f[40..44].copy_from_slice(&1u32.to_be_bytes());
        f[44..48].copy_from_slice(&uid.unwrap_or(UID_MAX).to_le_bytes());
        f[48..52].copy_from_slice(&pid.unwrap_or(NO_PID).to_le_bytes());
        f[60] = 2; // PF_OUT
        f.extend_from_slice(ip);
        f
    }
}

/// Live capture on `pflog0` (macOS only).
#[cfg(target_os = "macos")]
pub mod capture {
    use std::io;
    use std::time::SystemTime;

    use pnet_datalink::{Channel, Config, DataLinkReceiver};

    use super::decode;
    use crate::{BlockedPacket, MonitorError};

    /// A capture of `pflog0` (or another pflog interface).
    pub struct PflogCapture {
        rx: Box<dyn DataLinkReceiver>,
        malformed: u64,
    }

    impl std::fmt::Debug for PflogCapture {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("PflogCapture").field("malformed", &self.malformed).finish()
        }
    }

    impl PflogCapture {
        /// Opens a capture on the pflog interface `name` (usually `pflog0`; needs root).
        pub fn open(name: &str) -> Result<Self, MonitorError> {
            let iface = pnet_datalink::interfaces()
                .into_iter()
                .find(|i| i.name == name)
                .ok_or_else(|| MonitorError::Io {
                    op: "find pflog interface",
                    source: io::Error::new(io::ErrorKind::NotFound, name.to_owned()),
                })?;
            let config = Config {
                read_timeout: Some(std::time::Duration::from_millis(200)),
                ..Config::default()
            };
            match pnet_datalink::channel(&iface, config) {
                Ok(Channel::Ethernet(_tx, rx)) => Ok(PflogCapture { rx, malformed: 0 }),
                Ok(_) => Err(MonitorError::Io {
                    op: "open pflog capture",
                    source: io::Error::other("unexpected channel type"),
                }),
                Err(source) => Err(MonitorError::Io { op: "open pflog capture", source }),
            }
        }

        /// Reads the next frame; `Ok(None)` on read timeout or an undecodable frame (counted).
        pub fn recv(&mut self) -> Result<Option<BlockedPacket>, MonitorError> {
            match self.rx.next() {
                Ok(frame) => match decode(frame, SystemTime::now()) {
                    Ok((_, packet)) => Ok(Some(packet)),
                    Err(_) => {
                        self.malformed += 1;
                        Ok(None)
                    }
                },
                Err(e) if e.kind() == io::ErrorKind::TimedOut => Ok(None),
                Err(source) => Err(MonitorError::Io { op: "read pflog0", source }),
            }
        }

        /// Frames that could not be decoded so far.
        pub fn malformed(&self) -> u64 {
            self.malformed
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::fixtures::frame;
    use super::*;
    use crate::Protocol;
    use crate::packet::fixtures::{icmp, ip_packet, tcp, udp};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn decodes_table() {
        let rows = [
            (
                AF_INET,
                ip_packet(ip("192.168.1.2"), ip("10.0.0.1"), 6, &tcp(50000, 443, 2)),
                Protocol::Tcp,
                Some(443),
                Some(501),
                Some(4242),
            ),
            (
                AF_INET,
                ip_packet(ip("192.168.1.2"), ip("10.0.0.1"), 17, &udp(5000, 53, b"")),
                Protocol::Udp,
                Some(53),
                None,
                None,
            ),
            (
                AF_INET,
                ip_packet(ip("192.168.1.2"), ip("10.0.0.1"), 1, &icmp(8, 0)),
                Protocol::Icmp,
                None,
                Some(0),
                None,
            ),
            (
                AF_INET6,
                ip_packet(ip("fd00::2"), ip("fd00::1"), 6, &tcp(1, 22, 2)),
                Protocol::Tcp,
                Some(22),
                Some(501),
                Some(1),
            ),
            (
                AF_INET6,
                ip_packet(ip("fd00::2"), ip("fd00::1"), 17, &udp(1, 443, b"x")),
                Protocol::Udp,
                Some(443),
                None,
                Some(77),
            ),
            (
                AF_INET6,
                ip_packet(ip("fd00::2"), ip("fd00::1"), 58, &icmp(128, 0)),
                Protocol::Icmpv6,
                None,
                Some(501),
                None,
            ),
        ];
        for (af, ipb, proto, port, uid, pid) in rows {
            let f = frame(af, "sandgate.u501", uid, pid, &ipb);
            let (h, p) = decode(&f, SystemTime::UNIX_EPOCH).unwrap();
            assert_eq!((h.af, h.action, h.dir, h.rulenr, h.subrulenr), (af, 1, 2, 3, 1));
            assert_eq!((h.ifname.as_str(), h.ruleset.as_str()), ("en0", "sandgate.u501"));
            assert_eq!(
                (p.protocol, p.dst_port, p.uid, p.pid),
                (proto, port, uid, pid),
                "{proto:?}"
            );
            assert_eq!(p.prefix, "sandgate.u501");
        }
    }

    #[test]
    fn packets_are_attributed_by_uid_then_anchor() {
        let ipb = ip_packet(ip("1.1.1.1"), ip("2.2.2.2"), 6, &tcp(1, 443, 2));
        // (anchor as pf cut it, uid, scope)
        for (anchor, uid, want) in [
            ("sandgate.u501.p", Some(501), "sandgate.u501"),
            ("sandgate.u502", None, "sandgate.u502"),
            ("", None, "unknown"),
        ] {
            let f = frame(AF_INET, anchor, uid, None, &ipb);
            assert_eq!(scope_name(&decode(&f, SystemTime::UNIX_EPOCH).unwrap().1), want);
        }
    }

    #[test]
    fn xnu_no_uid_is_uid_max() {
        let ipb = ip_packet(ip("1.1.1.1"), ip("2.2.2.2"), 6, &tcp(1, 443, 2));
        // (uid field as written by pf, decoded)
        for (raw, want) in [(UID_MAX, None), (u32::MAX, None), (0, Some(0)), (501, Some(501))] {
            let mut f = frame(AF_INET, "sandgate.u501", Some(1), None, &ipb);
            f[44..48].copy_from_slice(&raw.to_le_bytes());
            assert_eq!(decode(&f, SystemTime::UNIX_EPOCH).unwrap().1.uid, want, "{raw}");
        }
    }

    #[test]
    fn long_anchor_names_are_cut_like_pf_does() {
        let f = frame(
            AF_INET,
            "sandgate.u501.p12345",
            None,
            None,
            &ip_packet(ip("1.1.1.1"), ip("2.2.2.2"), 1, &icmp(8, 0)),
        );
        assert_eq!(decode(&f, SystemTime::UNIX_EPOCH).unwrap().0.ruleset, "sandgate.u501.p");
    }

    #[test]
    fn rejects_malformed() {
        let good = frame(
            AF_INET,
            "x",
            None,
            None,
            &ip_packet(ip("1.1.1.1"), ip("2.2.2.2"), 1, &icmp(8, 0)),
        );
        assert!(matches!(
            decode(&good[..30], SystemTime::UNIX_EPOCH),
            Err(DecodeError::Truncated { .. })
        ));
        let mut f = good.clone();
        f[0] = 10;
        assert!(matches!(
            decode(&f, SystemTime::UNIX_EPOCH),
            Err(DecodeError::BadLength { len: 10, .. })
        ));
        let mut f = good.clone();
        f[0] = 255;
        assert!(matches!(
            decode(&f, SystemTime::UNIX_EPOCH),
            Err(DecodeError::Truncated { need: 256, .. })
        ));
        let mut f = good.clone();
        f[1] = 99;
        assert_eq!(
            decode(&f, SystemTime::UNIX_EPOCH).unwrap_err(),
            DecodeError::UnknownFamily { af: 99 }
        );
        assert_eq!(
            decode(&good[..64], SystemTime::UNIX_EPOCH).unwrap_err(),
            DecodeError::NoPayload
        );
    }
}
