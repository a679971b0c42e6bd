use super::*;

const OURS: &str = "0.sandgate.u501";

/// The fence as `pfctl -a com.apple/0.sandgate.u501 -s rules` prints it.
const FENCE: &str = "pass out quick on lo0 inet proto tcp from any to 127.0.0.1 port = 3128 user = 501 flags S/SA keep state\n\
     block return out log (user, to pflog0) quick inet proto tcp all user = 501\n\
     block return out log (user, to pflog0) quick inet proto udp all user = 501\n";

const STOCK: &str =
    "scrub-anchor \"com.apple/*\" all fragment reassemble\nanchor \"com.apple/*\" all\n";

/// The stock main ruleset with `children` under `com.apple/` (the fence's own rules for OURS).
fn host(main: &str, children: &[(&str, &str)]) -> Snapshot {
    let children: Vec<(String, String)> =
        children.iter().map(|(n, r)| (n.to_string(), r.to_string())).collect();
    Snapshot::parse(main).with_children(&children)
}

fn rules_of(v: &FenceVerdict) -> Vec<String> {
    v.findings().iter().map(|f| f.rule.clone()).collect()
}

#[test]
fn the_fence_holds_on_the_stock_ruleset() {
    let firewall = "block drop in quick proto tcp from any to any port = 22\n\
                    pass in quick on awdl0 all\n";
    for children in [
        vec![(OURS, FENCE)],
        vec![("250.ApplicationFirewall", firewall), (OURS, FENCE)],
        // evaluated after the fence: whatever they pass, the fence decided first
        vec![(OURS, FENCE), ("zz.vpn", "pass out quick all\n")],
        // earlier, but cannot match the guest's TCP/UDP: another user, ICMP, inbound, not quick
        vec![
            ("00.a", "pass out quick proto tcp all user = 0\n"),
            ("00.b", "pass out quick inet proto icmp all\n"),
            ("00.c", "pass out quick all user != 501\n"),
            ("00.d", "pass out all\n"),
            (OURS, FENCE),
        ],
    ] {
        let v = verify(&host(STOCK, &children), OURS, 501);
        assert_eq!(v, FenceVerdict::Hold, "{children:?}");
    }
}

#[test]
fn what_gets_past_the_fence_is_named() {
    // (main ruleset, children of com.apple/, the rules named)
    type Row<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [&'a str]);
    let table: &[Row<'_>] = &[
        // a pass quick before the wildcard anchor, on any interface (lo0: local services)
        (
            "pass out quick all\nanchor \"com.apple/*\" all\n",
            &[(OURS, FENCE)],
            &["pass out quick all"],
        ),
        (
            "pass quick on lo0 all\nanchor \"com.apple/*\" all\n",
            &[(OURS, FENCE)],
            &["pass quick on lo0 all"],
        ),
        (
            "pass out quick on en0 proto { tcp udp } all\nanchor \"com.apple/*\" all\n",
            &[(OURS, FENCE)],
            &["pass out quick on en0 proto { tcp udp } all"],
        ),
        (
            "pass out quick proto tcp all user = 501\nanchor \"com.apple/*\" all\n",
            &[(OURS, FENCE)],
            &["pass out quick proto tcp all user = 501"],
        ),
        // an anchor under com.apple/ whose name sorts before the fence's
        (STOCK, &[("0.aaa-vpn", "pass out quick all\n"), (OURS, FENCE)], &["pass out quick all"]),
        (
            STOCK,
            &[("!early", "pass out quick proto udp to any port = 53\n"), (OURS, FENCE)],
            &["pass out quick proto udp to any port = 53"],
        ),
        // the anchor evaluated for one interface or one direction only
        (
            "anchor \"com.apple/*\" on en0 all\n",
            &[(OURS, FENCE)],
            &["anchor \"com.apple/*\" on en0 all"],
        ),
        ("anchor \"com.apple/*\" in all\n", &[(OURS, FENCE)], &["anchor \"com.apple/*\" in all"]),
        // gone: a pf.conf without the anchor, the fence flushed or not loaded
        ("scrub in all\npass out all\n", &[(OURS, FENCE)], &["anchor \"com.apple/*\""]),
        (STOCK, &[(OURS, "")], &["anchor \"com.apple/0.sandgate.u501\""]),
        (STOCK, &[("250.ApplicationFirewall", "")], &["anchor \"com.apple/*\""]),
    ];
    for (main, children, want) in table {
        let v = verify(&host(main, children), OURS, 501);
        assert_eq!(rules_of(&v), *want, "{main:?} {children:?}: {v:?}");
    }
}

#[test]
fn settings_and_translations_that_skip_the_fence() {
    let mut snap = host(STOCK, &[(OURS, FENCE)]);
    snap.enabled = Some(false);
    snap.skipped = vec!["lo0".into(), "pflog0".into(), "en0".into()];
    snap.nat = vec![
        "nat pass on en0 inet from 192.168.2.0/24 to any -> (en0) round-robin".into(),
        "nat on en0 inet from 10.0.0.0/8 to any -> (en0)".into(),
        "rdr pass on lo0 inet proto tcp from any to any port = 80 -> 127.0.0.1 port 8080".into(),
    ];
    let v = verify(&snap, OURS, 501);
    assert_eq!(
        rules_of(&v),
        [
            "Status: Disabled",
            "set skip on lo0",
            "set skip on en0",
            "nat pass on en0 inet from 192.168.2.0/24 to any -> (en0) round-robin",
            "rdr pass on lo0 inet proto tcp from any to any port = 80 -> 127.0.0.1 port 8080",
        ]
    );
    assert!(v.findings()[1].why.contains("every local service"), "{v:?}");
    // control: the same host without them holds
    assert_eq!(verify(&host(STOCK, &[(OURS, FENCE)]), OURS, 501), FenceVerdict::Hold);
}

#[test]
fn pfctl_listings_are_read_in_each_form() {
    // `pfctl -s rules -a '*'`: anchors nested in braces
    let nested = "scrub-anchor \"com.apple/*\" all fragment reassemble\n\
                  anchor \"com.apple/*\" all {\n  anchor \"250.ApplicationFirewall\" all {\n  }\n\
                    anchor \"0.sandgate.u501\" all {\n    block return out log (user, to pflog0) quick inet proto tcp all user = 501\n  }\n}\n";
    assert_eq!(verify(&Snapshot::parse(nested), OURS, 501), FenceVerdict::Hold);
    let leak = nested.replace(
        "  anchor \"250.ApplicationFirewall\" all {\n  }\n",
        "  anchor \"!x\" all {\n    pass out quick all\n  }\n",
    );
    assert_eq!(rules_of(&verify(&Snapshot::parse(&leak), OURS, 501)), ["pass out quick all"]);
    // `pfctl -s all`: sections; `pfctl -s Interfaces -v`; `set skip`
    let all = "No ALTQ support in kernel\nALTQ related functions disabled\nFILTER RULES:\n\
               anchor \"com.apple/*\" all\nTRANSLATION RULES:\nnat pass on en0 all -> (en0)\n\
               INFO:\nStatus: Enabled for 0 days 01:02:03           Debug: Urgent\n\
               TIMEOUTS:\ntcp.first 120s\nlo0 (skip)\nen0\nset skip on { utun3 }\n";
    let snap = Snapshot::parse(all);
    assert_eq!(snap.enabled, Some(true));
    assert_eq!(snap.nat, ["nat pass on en0 all -> (en0)"]);
    assert_eq!(snap.skipped, ["lo0", "utun3"]);
    assert_eq!(snap.rules.len(), 1, "{snap:?}");
    assert_eq!(Snapshot::parse("Status: Disabled\n").enabled, Some(false));
}

#[test]
fn the_main_ruleset_check_of_apply() {
    for (rules, ok) in [
        (STOCK, true),
        ("anchor \"com.apple/*\"\n", true),
        ("block drop in all\nanchor \"com.apple/*\" out all\n", true),
        ("pass in quick all\nanchor \"com.apple/*\" all\n", true),
        ("pass out quick proto icmp all\nanchor \"com.apple/*\" all\n", true),
        ("scrub in all\npass out all\n", false),
        ("", false),
        ("anchor \"com.apple/*\" in all\n", false),
        ("anchor \"com.apple/*\" on en0 all\n", false),
        ("pass out quick all\nanchor \"com.apple/*\" all\n", false),
        ("pass quick all\nanchor \"com.apple/*\" all\n", false),
        ("pass quick on lo0 all\nanchor \"com.apple/*\" all\n", false),
        ("anchor \"com.apple.x/*\" all\n", false),
    ] {
        let got = check_main(&Snapshot::parse(rules).rules, 501);
        assert_eq!(got.is_empty(), ok, "{rules:?}: {got:?}");
    }
}
