//! NFLOG over netlink (Linux): a hand-written decoder of `nlmsghdr` / `nfgenmsg` / `NFULA_*`
//! attributes (pure, every OS) and, on Linux, [`NflogSocket`] that binds an NFLOG group.
//!
//! NFLOG is per network namespace: a socket opened after `unshare(CLONE_NEWNET)` (or `setns`)
//! receives what that namespace's rules log, nothing else.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::DecodeError;
use crate::packet::{BlockedPacket, decode_ip};

#[cfg(target_os = "linux")]
mod socket;
#[cfg(target_os = "linux")]
pub use socket::{AsyncNflogSocket, NflogConfig, NflogSocket, NflogStats};

/// `sizeof(struct nlmsghdr)`.
pub const NLMSG_HDRLEN: usize = 16;
/// `NLMSG_ERROR` (also carries ACKs, error 0).
pub const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`.
pub const NLMSG_DONE: u16 = 3;
/// `NFNL_SUBSYS_ULOG << 8 | NFULNL_MSG_PACKET`.
pub const MSG_PACKET: u16 = 4 << 8;
/// `NFNL_SUBSYS_ULOG << 8 | NFULNL_MSG_CONFIG`.
pub const MSG_CONFIG: u16 = (4 << 8) | 1;

/// `NFULA_*` packet attributes this decoder reads.
mod attr {
    pub const TIMESTAMP: u16 = 3;
    pub const PAYLOAD: u16 = 9;
    pub const PREFIX: u16 = 10;
    pub const UID: u16 = 11;
    pub const GID: u16 = 14;
}

/// `NFULA_CFG_*` configuration attributes.
pub mod cfg {
    /// `struct nfulnl_msg_config_cmd { u8 command }`.
    pub const CMD: u16 = 1;
    /// `struct nfulnl_msg_config_mode { be32 copy_range; u8 copy_mode; u8 pad }`.
    pub const MODE: u16 = 2;
    /// `be32` kernel batch buffer size.
    pub const NLBUFSIZ: u16 = 3;
    /// `be32` flush timeout in 1/100 s.
    pub const TIMEOUT: u16 = 4;
    /// `be32` messages per batch.
    pub const QTHRESH: u16 = 5;
    /// `NFULNL_CFG_CMD_BIND`.
    pub const CMD_BIND: u8 = 1;
    /// `NFULNL_CFG_CMD_UNBIND`.
    pub const CMD_UNBIND: u8 = 2;
    /// `NFULNL_CFG_CMD_PF_BIND` (a no-op on kernels >= 3.17, kept for older ones).
    pub const CMD_PF_BIND: u8 = 3;
    /// `NFULNL_CFG_CMD_PF_UNBIND`.
    pub const CMD_PF_UNBIND: u8 = 4;
    /// `NFULNL_COPY_PACKET`.
    pub const COPY_PACKET: u8 = 2;
}

/// What one datagram contained.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DatagramSummary {
    /// Packet records decoded into [`BlockedPacket`]s.
    pub packets: usize,
    /// Records that could not be decoded (counted, skipped).
    pub malformed: usize,
    /// Netlink errors (`NLMSG_ERROR` with a non-zero errno) seen, e.g. answers to config requests.
    pub errors: usize,
}

/// Decodes every netlink message in one datagram, appending blocked packets to `out`.
///
/// `now` stands in for packets without a kernel timestamp (usual for locally generated traffic).
/// A malformed record is counted and skipped; a broken netlink header stops the walk (the rest of
/// the datagram cannot be framed). Never panics.
pub fn decode_datagram(
    buf: &[u8],
    now: SystemTime,
    out: &mut Vec<BlockedPacket>,
) -> DatagramSummary {
    let mut summary = DatagramSummary::default();
    let mut off = 0usize;
    while buf.len().saturating_sub(off) >= NLMSG_HDRLEN {
        let h = &buf[off..];
        let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let ty = u16::from_ne_bytes([h[4], h[5]]);
        if len < NLMSG_HDRLEN || len > h.len() {
            summary.malformed += 1;
            break;
        }
        let msg = &h[..len];
        match ty {
            MSG_PACKET => match decode_message(msg, now) {
                Ok(p) => {
                    out.push(p);
                    summary.packets += 1;
                }
                Err(_) => summary.malformed += 1,
            },
            NLMSG_ERROR if ack_errno(msg).is_some_and(|e| e != 0) => summary.errors += 1,
            // NOOP, DONE, OVERRUN and anything else carry no packet.
            _ => {}
        }
        off += align4(len);
    }
    summary
}

/// The errno (positive, 0 = ACK) of an `NLMSG_ERROR` message, header included.
pub fn ack_errno(msg: &[u8]) -> Option<i32> {
    let e = msg.get(NLMSG_HDRLEN..NLMSG_HDRLEN + 4)?;
    Some(-i32::from_ne_bytes([e[0], e[1], e[2], e[3]]))
}

/// The sequence number of a netlink message, header included.
pub fn seq_of(msg: &[u8]) -> Option<u32> {
    msg.get(8..12).map(|s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

/// Decodes one `NFULNL_MSG_PACKET` message (netlink header included).
pub fn decode_message(msg: &[u8], now: SystemTime) -> Result<BlockedPacket, DecodeError> {
    const START: usize = NLMSG_HDRLEN + 4; // nlmsghdr + nfgenmsg
    if msg.len() < START {
        return Err(DecodeError::Truncated {
            what: "nfgenmsg",
            offset: 0,
            need: START,
            have: msg.len(),
        });
    }
    let mut prefix = String::new();
    let (mut uid, mut gid, mut time, mut payload) = (None, None, None, None);
    let mut off = START;
    while msg.len().saturating_sub(off) >= 4 {
        let a = &msg[off..];
        let len = usize::from(u16::from_ne_bytes([a[0], a[1]]));
        // NLA_F_NESTED / NLA_F_NET_BYTEORDER are flags, not part of the type.
        let ty = u16::from_ne_bytes([a[2], a[3]]) & 0x3fff;
        if len < 4 {
            return Err(DecodeError::BadLength { what: "netlink attribute", offset: off, len });
        }
        if len > a.len() {
            return Err(DecodeError::Truncated {
                what: "netlink attribute",
                offset: off,
                need: len,
                have: a.len(),
            });
        }
        let v = &a[4..len];
        match ty {
            attr::PREFIX => {
                let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
                prefix = String::from_utf8_lossy(&v[..end]).into_owned();
            }
            attr::UID => uid = be32(v),
            attr::GID => gid = be32(v),
            attr::PAYLOAD => payload = Some(v),
            attr::TIMESTAMP if v.len() >= 16 => {
                let sec = u64::from_be_bytes(v[0..8].try_into().unwrap_or([0; 8]));
                let usec = u64::from_be_bytes(v[8..16].try_into().unwrap_or([0; 8]));
                time = UNIX_EPOCH
                    .checked_add(Duration::from_secs(sec))
                    .and_then(|t| t.checked_add(Duration::from_micros(usec.min(999_999))));
            }
            _ => {}
        }
        off += align4(len);
    }
    let headers = decode_ip(payload.ok_or(DecodeError::NoPayload)?)?;
    Ok(BlockedPacket::new(time.unwrap_or(now), prefix, (uid, gid, None), headers))
}

fn be32(v: &[u8]) -> Option<u32> {
    v.get(..4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn align4(n: usize) -> usize {
    n.saturating_add(3) & !3
}

/// Builds one NFLOG config request (`NLM_F_REQUEST | NLM_F_ACK`) with these attributes.
pub fn config_message(seq: u32, family: u8, group: u16, attrs: &[(u16, &[u8])]) -> Vec<u8> {
    let mut m = vec![0u8; NLMSG_HDRLEN];
    m.extend_from_slice(&[family, 0]); // nfgen_family, version NFNETLINK_V0
    m.extend_from_slice(&group.to_be_bytes()); // res_id
    for (ty, value) in attrs {
        let len = 4 + value.len();
        m.extend_from_slice(&(len as u16).to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(value);
        m.resize(align4(m.len()), 0);
    }
    let total = m.len() as u32;
    m[0..4].copy_from_slice(&total.to_ne_bytes());
    m[4..6].copy_from_slice(&MSG_CONFIG.to_ne_bytes());
    m[6..8].copy_from_slice(&(1u16 | 4).to_ne_bytes()); // NLM_F_REQUEST | NLM_F_ACK
    m[8..12].copy_from_slice(&seq.to_ne_bytes());
    m
}

/// Builders of NFLOG messages for tests, fixtures and benchmarks.
#[doc(hidden)]
pub mod fixtures {
    use super::*;

    /// One `NFULNL_MSG_PACKET` message as the kernel sends it.
    pub fn packet_message(
        family: u8,
        prefix: &str,
        uid: Option<u32>,
        gid: Option<u32>,
        timestamp: Option<(u64, u64)>,
        payload: &[u8],
    ) -> Vec<u8> {
        let mut attrs: Vec<(u16, Vec<u8>)> = vec![(1, vec![0x08, 0x00, 3, 0])];
        if let Some((s, us)) = timestamp {
            let mut t = s.to_be_bytes().to_vec();
            t.extend_from_slice(&us.to_be_bytes());
            attrs.push((attr::TIMESTAMP, t));
        }
        attrs.push((5, 2u32.to_be_bytes().to_vec())); // OUTDEV
        attrs.push((attr::PAYLOAD, payload.to_vec()));
        let mut p = prefix.as_bytes().to_vec();
        p.push(0);
        attrs.push((attr::PREFIX, p));
        if let Some(u) = uid {
            attrs.push((attr::UID, u.to_be_bytes().to_vec()));
        }
        if let Some(g) = gid {
            attrs.push((attr::GID, g.to_be_bytes().to_vec()));
        }
        let refs: Vec<(u16, &[u8])> = attrs.iter().map(|(t, v)| (*t, v.as_slice())).collect();
        let mut m = config_message(0, family, 0, &refs);
        m[4..6].copy_from_slice(&MSG_PACKET.to_ne_bytes());
        m[6..8].copy_from_slice(&0u16.to_ne_bytes());
        m
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::fixtures::packet_message;
    use super::*;
    use crate::Protocol;
    use crate::packet::fixtures::{ip_packet, tcp, udp};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn decodes_a_batch() {
        let now = UNIX_EPOCH + Duration::from_secs(5);
        let mut dgram = packet_message(
            2,
            "sbx-1",
            Some(1001),
            Some(1002),
            None,
            &ip_packet(ip("10.200.0.2"), ip("10.200.0.1"), 6, &tcp(40000, 80, 2)),
        );
        dgram.extend(packet_message(
            10,
            "sandgate.u7",
            None,
            None,
            Some((1_700_000_000, 250)),
            &ip_packet(ip("fd00::2"), ip("fd00::1"), 17, &udp(1, 53, b"q")),
        ));
        let mut out = Vec::new();
        let s = decode_datagram(&dgram, now, &mut out);
        assert_eq!(s, DatagramSummary { packets: 2, malformed: 0, errors: 0 });
        assert_eq!(out[0].prefix, "sbx-1");
        assert_eq!((out[0].uid, out[0].gid, out[0].pid), (Some(1001), Some(1002), None));
        assert_eq!(
            (out[0].protocol, out[0].dst_port, out[0].tcp_flags),
            (Protocol::Tcp, Some(80), Some(2))
        );
        assert_eq!(out[0].time, now);
        assert_eq!(out[1].prefix, "sandgate.u7");
        assert_eq!((out[1].uid, out[1].protocol, out[1].dst), (None, Protocol::Udp, ip("fd00::1")));
        assert_eq!(
            out[1].time,
            UNIX_EPOCH + Duration::from_secs(1_700_000_000) + Duration::from_micros(250)
        );
    }

    #[test]
    fn malformed_records_are_counted_not_fatal() {
        let good = packet_message(
            2,
            "a",
            None,
            None,
            None,
            &ip_packet(ip("1.1.1.1"), ip("2.2.2.2"), 1, &[8, 0, 0, 0]),
        );
        let no_payload = {
            let mut m = config_message(0, 2, 0, &[(attr::PREFIX, b"x\0")]);
            m[4..6].copy_from_slice(&MSG_PACKET.to_ne_bytes());
            m
        };
        let mut dgram = no_payload;
        dgram.extend(&good);
        let mut bad_len = good.clone();
        bad_len[0..4].copy_from_slice(&9999u32.to_ne_bytes());
        dgram.extend(&bad_len);
        let mut out = Vec::new();
        let s = decode_datagram(&dgram, UNIX_EPOCH, &mut out);
        assert_eq!(s, DatagramSummary { packets: 1, malformed: 2, errors: 0 });
    }

    #[test]
    fn acks_and_errors() {
        let mut ack = vec![0u8; 36];
        ack[0..4].copy_from_slice(&36u32.to_ne_bytes());
        ack[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        let mut err = ack.clone();
        err[16..20].copy_from_slice(&(-16i32).to_ne_bytes());
        assert_eq!((ack_errno(&ack), ack_errno(&err)), (Some(0), Some(16)));
        let mut dgram = ack;
        dgram.extend(err);
        let s = decode_datagram(&dgram, UNIX_EPOCH, &mut Vec::new());
        assert_eq!(s, DatagramSummary { packets: 0, malformed: 0, errors: 1 });
    }

    #[test]
    fn config_message_layout() {
        let m = config_message(7, 0, 300, &[(cfg::CMD, &[cfg::CMD_BIND])]);
        assert_eq!(m.len(), 16 + 4 + 8);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()), 28);
        assert_eq!(seq_of(&m), Some(7));
        assert_eq!(&m[16..20], &[0, 0, 0x01, 0x2c]);
        assert_eq!(&m[20..25], &[5, 0, 1, 0, 1]);
    }
}
