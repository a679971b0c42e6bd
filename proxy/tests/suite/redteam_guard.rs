//! Red team: host spellings that are addresses in disguise, judged by the same parser and address
//! guard the proxy uses. Every row must end refused (an internal address) or unparsable; the
//! public rows at the end are the control that the table can tell the two apart.

use sandgate_config::Host;
use sandgate_proxy::guard::classify;

/// What the proxy would do with a CONNECT to `spelling`: `None` when it is a public address or a
/// name, `Some(why)` when the guard (or the parser) refuses it.
fn judged(spelling: &str) -> Result<Option<String>, String> {
    match Host::parse(spelling) {
        Err(e) => Err(e.to_string()),
        Ok(Host::Name(n)) => Ok(Some(format!("a name: {}", n.as_str()))),
        Ok(Host::Ip(ip)) => Ok(classify(ip).map(|f| f.to_string())),
    }
}

#[test]
fn disguised_internal_addresses_are_refused() {
    for spelling in [
        "2130706433",                             // 127.0.0.1 as one decimal number
        "0x7f000001",                             // ... one hex number
        "0x7f.1",                                 // hex and two parts
        "127.1",                                  // two parts
        "0177.0.0.1",                             // octal
        "0177.0.0.01",                            // octal, two octal parts
        "127.0.0.1.",                             // trailing dot
        "017700000001",                           // octal, one part
        "0",                                      // 0.0.0.0
        "0x0",                                    // 0.0.0.0
        "169.254.169.254",                        // metadata
        "0xa9fea9fe",                             // metadata, hex
        "2852039166",                             // metadata, decimal
        "[::ffff:7f00:1]",                        // IPv4-mapped loopback
        "[::ffff:127.0.0.1]",                     // the same, dotted
        "[::ffff:a9fe:a9fe]",                     // IPv4-mapped metadata
        "[::127.0.0.1]",                          // IPv4-compatible (deprecated)
        "[::7f00:1]",                             // the same, hex
        "[::ffff:0:7f00:1]",                      // IPv4-translated (RFC 2765)
        "[64:ff9b::7f00:1]",                      // NAT64 well-known prefix to loopback
        "[64:ff9b::a9fe:a9fe]",                   // NAT64 to metadata
        "[64:ff9b::10.0.0.1]",                    // NAT64 to private
        "[64:ff9b:1::a00:1]",                     // NAT64 local-use prefix
        "[64:ff9b:1::8.8.8.8]",                   // NAT64 local-use even to a public address
        "[2002:7f00:1::]",                        // 6to4 of loopback
        "[2002:a9fe:a9fe::1]",                    // 6to4 of metadata
        "[2001:0:4136:e378:8000:63bf:3fff:fdd2]", // Teredo
        "[::1]",
        "[0:0:0:0:0:0:0:1]",
        "[::]",
        "[fe80::1]",
        "[fd00:ec2::254]", // AWS IMDS over IPv6
        "[fc00::1]",
        "[fec0::1]",
        "[ff02::1]",
        "[100::1]",        // discard-only
        "[::2]",           // in ::/96, unassigned
        "[4000::1]",       // outside 2000::/3: unassigned, deny by default
        "100.100.100.200", // Alibaba metadata
        "100.64.0.1",      // CGNAT
        "198.18.0.1",      // benchmarking
        "192.0.0.8",
        "255.255.255.255",
        "240.0.0.1",
        "224.0.0.1",
    ] {
        match judged(spelling) {
            Ok(Some(why)) if !why.starts_with("a name") => {}
            Err(_) => {} // not a host at all: refused earlier
            other => panic!("{spelling} passes the guard: {other:?}"),
        }
    }
    // Zone ids are refused by the parser (the guard never sees them).
    for spelling in ["[fe80::1%eth0]", "[fe80::1%25eth0]", "[::1%lo]"] {
        assert!(judged(spelling).is_err(), "{spelling} parsed");
    }
    // Control: public addresses pass, whatever their spelling.
    for spelling in ["8.8.8.8", "0x8080808", "134744072", "[2606:4700::1111]", "[::ffff:8.8.8.8]"] {
        assert_eq!(judged(spelling), Ok(None), "{spelling}");
    }
}
