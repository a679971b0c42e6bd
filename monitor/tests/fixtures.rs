//! Byte fixtures (the fuzz seeds, built from the kernel / pf header layouts by hand) decode to the
//! packets they describe.

use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use sandgate_monitor::nflog::decode_datagram;
use sandgate_monitor::{Protocol, pflog};

fn seed(dir: &str, name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds").join(dir).join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn nflog_seeds() {
    let rows = [
        ("v4tcp", vec![(Protocol::Tcp, "10.200.0.1", Some(443))]),
        ("v4udp", vec![(Protocol::Udp, "10.200.0.1", Some(53))]),
        ("v4icmp", vec![(Protocol::Icmp, "10.200.0.1", None)]),
        ("v6tcp", vec![(Protocol::Tcp, "::1", Some(443))]),
        ("v6icmp", vec![(Protocol::Icmpv6, "::1", None)]),
        ("batch", vec![(Protocol::Tcp, "10.200.0.1", Some(443)), (Protocol::Udp, "::1", Some(53))]),
    ];
    for (name, want) in rows {
        let mut out = Vec::new();
        let s = decode_datagram(&seed("nflog_datagram", name), UNIX_EPOCH, &mut out);
        assert_eq!((s.packets, s.malformed), (want.len(), 0), "{name}");
        for (p, (proto, dst, port)) in out.iter().zip(want) {
            assert_eq!(
                (p.protocol, p.dst.to_string().as_str(), p.dst_port),
                (proto, dst, port),
                "{name}"
            );
            assert_eq!(
                (p.prefix.as_str(), p.uid, p.gid, p.pid),
                ("sbx-1", Some(1001), Some(1001), None)
            );
        }
    }
    let mut out = Vec::new();
    decode_datagram(&seed("nflog_datagram", "v4udp"), UNIX_EPOCH, &mut out);
    assert_eq!(
        out[0].time,
        UNIX_EPOCH + Duration::from_secs(1_700_000_000) + Duration::from_micros(5)
    );
}

#[test]
fn pflog_seeds() {
    let rows = [
        ("v4tcp", Protocol::Tcp, Some(501), Some(4242)),
        ("v4udp", Protocol::Udp, None, None),
        ("v6tcp", Protocol::Tcp, Some(501), Some(1)),
        ("v6icmp", Protocol::Icmpv6, None, None),
    ];
    for (name, proto, uid, pid) in rows {
        let (h, p) = pflog::decode(&seed("pflog_frame", name), UNIX_EPOCH).unwrap();
        assert_eq!((p.protocol, p.uid, p.pid), (proto, uid, pid), "{name}");
        assert_eq!((h.ruleset.as_str(), h.action, h.dir, h.rulenr), ("sandgate.u501", 1, 2, 3));
    }
}
