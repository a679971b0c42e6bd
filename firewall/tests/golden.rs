//! Golden-file tests of the generated rule text. `UPDATE_GOLDEN=1 cargo test -p sandgate-firewall`
//! rewrites the files; review the diff before committing.

use std::path::PathBuf;

use sandgate_firewall::nft::{self, NamespaceRules};
use sandgate_firewall::{GuestPolicy, GuestScope, IdRange, SubIds};

fn check(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("write golden");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display()));
    assert_eq!(actual, expected, "{} differs from the generated text", path.display());
}

#[test]
fn namespace_ruleset() {
    let text = nft::namespace_ruleset(&NamespaceRules {
        prefix: "sbx-01J9ZQ\"evil\nrule".into(),
        nflog_group: 7,
        proxy_port: 3128,
    });
    check("namespace.nft", &text);
}

#[test]
fn guest_ruleset_v4_and_v6_proxies() {
    let policy = GuestPolicy {
        proxies: vec!["127.0.0.1:3128".parse().unwrap(), "[::1]:3128".parse().unwrap()],
        nflog_group: 1,
        subids: Default::default(),
        allow_syncookies: false,
        allow_multicast_reports: false,
    };
    check("guest_u1001.nft", &nft::guest_ruleset(&GuestScope::user(1001), &policy));
}

#[test]
fn guest_ruleset_owned_no_proxy() {
    let policy = GuestPolicy {
        proxies: vec![],
        nflog_group: 2,
        subids: Default::default(),
        allow_syncookies: false,
        allow_multicast_reports: false,
    };
    check("guest_u1001_p4242.nft", &nft::guest_ruleset(&GuestScope::owned_by(1001, 4242), &policy));
}

/// The opt-outs (`--allow-syncookies`, `--allow-multicast-reports`): no host-wide drops of
/// unowned packets, the output chain as it was before.
#[test]
fn guest_ruleset_host_wide_drops_opted_out() {
    let policy = GuestPolicy {
        proxies: vec!["127.0.0.1:3128".parse().unwrap()],
        nflog_group: 1,
        subids: Default::default(),
        allow_syncookies: true,
        allow_multicast_reports: true,
    };
    check("guest_u1001_allow_host.nft", &nft::guest_ruleset(&GuestScope::user(1001), &policy));
}

/// Only SYN cookies kept: unowned multicast reports are still dropped.
#[test]
fn guest_ruleset_syncookies_kept() {
    let policy = GuestPolicy {
        proxies: vec!["127.0.0.1:3128".parse().unwrap()],
        nflog_group: 1,
        subids: Default::default(),
        allow_syncookies: true,
        allow_multicast_reports: false,
    };
    check("guest_u1001_syncookies.nft", &nft::guest_ruleset(&GuestScope::user(1001), &policy));
}

#[test]
fn guest_ruleset_with_subordinate_ids() {
    let r = |first, last| IdRange { first, last };
    let policy = GuestPolicy {
        proxies: vec!["127.0.0.1:3128".parse().unwrap()],
        nflog_group: 1,
        // Two subuid ranges (one adjacent to the uid: merged), one subgid range.
        subids: SubIds {
            uids: vec![r(1002, 1009), r(100000, 165535)],
            gids: vec![r(100000, 165535)],
        },
        allow_syncookies: false,
        allow_multicast_reports: false,
    };
    check("guest_u1001_subids.nft", &nft::guest_ruleset(&GuestScope::user(1001), &policy));
}

#[test]
fn pf_anchor_rules_loopback_proxies() {
    let policy = GuestPolicy {
        proxies: vec!["127.0.0.1:3128".parse().unwrap(), "[::1]:3128".parse().unwrap()],
        nflog_group: 0,
        subids: Default::default(),
        allow_syncookies: false,
        allow_multicast_reports: false,
    };
    check(
        "guest_u501.pf",
        &sandgate_firewall::pf::guest_anchor_rules(&GuestScope::user(501), &policy),
    );
}

#[test]
fn pf_anchor_rules_owned_remote_proxy() {
    let policy = GuestPolicy {
        proxies: vec!["192.0.2.10:8080".parse().unwrap()],
        nflog_group: 0,
        subids: Default::default(),
        allow_syncookies: false,
        allow_multicast_reports: false,
    };
    check(
        "guest_u501_p4242.pf",
        &sandgate_firewall::pf::guest_anchor_rules(&GuestScope::owned_by(501, 4242), &policy),
    );
}

#[test]
fn pf_boot_launch_daemon() {
    use sandgate_firewall::pf::boot;
    let text = boot::launch_daemon_plist(
        std::path::Path::new("/usr/local/bin/sandgate"),
        &GuestScope::user(501),
        &["127.0.0.1:3128".parse().unwrap(), "[::1]:3128".parse().unwrap()],
    );
    check("fence_u501.plist", &text);
}
