//! The apply / remove / list / gc command sequences of both backends, recorded with a fake runner
//! (runs on every OS; nothing is executed).

use sandgate_firewall::nft::GuestTables;
use sandgate_firewall::pf::{GuestAnchors, MemoryTokenStore, TokenStore};
use sandgate_firewall::{Firewall, GuestPolicy, GuestScope, OwnerCheck, RecordingRunner};

const PFCTL: &str = "/sbin/pfctl";
const IFCONFIG: &str = "/sbin/ifconfig";
const STOCK_MAIN: &str = "scrub-anchor \"com.apple/*\" all fragment reassemble\n\
                          anchor \"com.apple/*\" all\n";

/// What `pfctl` shows after the fence of uid 501 is loaded on a stock host: the anchors under
/// `com.apple` (Apple's firewall after the fence) and the fence's own rules.
fn stock_host(runner: &RecordingRunner) {
    runner.reply(&format!("{PFCTL} -s rules"), STOCK_MAIN, "");
    runner.reply(
        &format!("{PFCTL} -a com.apple -s Anchors"),
        "  com.apple/0.sandgate.u501\n  com.apple/250.ApplicationFirewall\n",
        "",
    );
    runner.reply(
        &format!("{PFCTL} -a com.apple/0.sandgate.u501 -s rules"),
        "block return out log (user, to pflog0) quick inet proto tcp all user = 501\n",
        "",
    );
}

/// The commands of the check after a load (see `GuestAnchors::verify`).
fn verify_commands() -> Vec<String> {
    [
        "-s rules",
        "-s nat",
        "-s info",
        "-s Interfaces -v",
        "-a com.apple -s Anchors",
        "-a com.apple/0.sandgate.u501 -s rules",
    ]
    .iter()
    .map(|c| format!("{PFCTL} {c}"))
    .collect()
}

fn policy() -> GuestPolicy {
    GuestPolicy {
        proxies: vec!["127.0.0.1:3128".parse().unwrap()],
        nflog_group: 3,
        subids: Default::default(),
        allow_syncookies: false,
        allow_multicast_reports: false,
    }
}

/// Owners: uid 666 and pid 999 are gone, everything else exists.
struct Owners;
impl OwnerCheck for Owners {
    fn user_exists(&self, uid: u32) -> bool {
        uid != 666
    }
    fn process_alive(&self, pid: u32) -> bool {
        pid != 999
    }
}

#[test]
fn pf_apply_enables_once_then_loads_the_anchor() {
    let runner = RecordingRunner::new();
    runner.reply(
        &format!("{PFCTL} -E"),
        "",
        "No ALTQ support in kernel\npf enabled\nToken : 18446744073\n",
    );
    stock_host(&runner);
    let fw = GuestAnchors::new(runner, MemoryTokenStore::default());
    let scope = GuestScope::user(501);
    let plan = fw.plan(&scope, &policy()).unwrap();
    fw.apply(&plan).unwrap();
    fw.apply(&plan).unwrap();
    let mut want = vec![
        format!("{PFCTL} -E"),
        format!("{IFCONFIG} pflog0"),
        format!("{PFCTL} -a com.apple/0.sandgate.u501 -f -"),
    ];
    want.extend(verify_commands());
    want.extend([
        format!("{IFCONFIG} pflog0"),
        format!("{PFCTL} -a com.apple/0.sandgate.u501 -f -"),
    ]);
    want.extend(verify_commands());
    assert_eq!(fw.runner().commands(), want);
    assert_eq!(fw.runner().calls()[2].stdin.as_deref(), Some(plan.text.as_str()));
    assert_eq!(fw.tokens().load(&scope).unwrap().as_deref(), Some("18446744073"));
}

#[test]
fn pf_apply_creates_pflog0_when_missing() {
    let runner = RecordingRunner::new();
    runner.reply(&format!("{PFCTL} -E"), "", "Token : 7\n");
    stock_host(&runner);
    runner.reply(&format!("{IFCONFIG} pflog0 create"), "", "");
    runner.fail(&format!("{IFCONFIG} pflog0"), "ifconfig: interface pflog0 does not exist");
    let fw = GuestAnchors::new(runner, MemoryTokenStore::default());
    fw.apply(&fw.plan(&GuestScope::user(501), &policy()).unwrap()).unwrap();
    let cmds = fw.runner().commands();
    assert_eq!(cmds[1..3], [format!("{IFCONFIG} pflog0"), format!("{IFCONFIG} pflog0 create")]);
}

#[test]
fn pf_apply_refuses_loudly_when_the_main_ruleset_skips_the_anchor() {
    let runner = RecordingRunner::new();
    runner.reply(&format!("{PFCTL} -E"), "", "Token : 7\n");
    // a VPN client loaded its own pf.conf: no `anchor "com.apple/*"`
    runner.reply(
        &format!("{PFCTL} -s rules"),
        "block drop out quick on utun0 all\npass out all\n",
        "",
    );
    let fw = GuestAnchors::new(runner, MemoryTokenStore::default());
    let err = fw.apply(&fw.plan(&GuestScope::user(501), &policy()).unwrap()).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("fails open") && msg.contains("NOT fenced in"), "{msg}");
    assert!(msg.contains("pass out all"), "the main ruleset is shown: {msg}");
}

#[test]
fn pf_apply_refuses_an_anchor_that_sorts_before_the_fence_and_passes() {
    let runner = RecordingRunner::new();
    runner.reply(&format!("{PFCTL} -E"), "", "Token : 7\n");
    // (the first reply whose prefix matches answers)
    runner.reply(
        &format!("{PFCTL} -a com.apple -s Anchors"),
        "  com.apple/0.aaa-vpn\n  com.apple/0.sandgate.u501\n  com.apple/zz\n",
        "",
    );
    runner.reply(&format!("{PFCTL} -a com.apple/0.aaa-vpn -s rules"), "pass out quick all\n", "");
    stock_host(&runner);
    let fw = GuestAnchors::new(runner, MemoryTokenStore::default());
    let err = fw.apply(&fw.plan(&GuestScope::user(501), &policy()).unwrap()).unwrap_err();
    assert!(err.to_string().contains("`pass out quick all`: it passes"), "{err}");
    // anchors named after the fence are not read: pf evaluates them after it
    assert!(!fw.runner().commands().iter().any(|c| c.contains("com.apple/zz")));
}

#[test]
fn pf_verify_sees_the_fence_gone() {
    // (what changed after apply, a word of the finding)
    let table: &[(&str, &str, &str)] = &[
        ("-s info", "Status: Disabled for 0 days 00:00:09\n", "pf is disabled"),
        ("-a com.apple/0.sandgate.u501 -s rules", "", "no block rule"),
        ("-s rules", "pass out all\n", "not in the main ruleset"),
        ("-s Interfaces -v", "lo0 (skip)\nen0\n", "loopback"),
    ];
    for (cmd, out, word) in table {
        let runner = RecordingRunner::new();
        runner.reply(&format!("{PFCTL} {cmd}"), out, "");
        stock_host(&runner);
        let fw = GuestAnchors::new(runner, MemoryTokenStore::default());
        let v = fw.verify(&GuestScope::user(501)).unwrap();
        assert!(v.findings().iter().any(|f| f.why.contains(word)), "{cmd}: {v:?}");
    }
    // control: the stock host as applied
    let runner = RecordingRunner::new();
    stock_host(&runner);
    let fw = GuestAnchors::new(runner, MemoryTokenStore::default());
    assert_eq!(
        fw.verify(&GuestScope::user(501)).unwrap(),
        sandgate_firewall::pf::fence::FenceVerdict::Hold
    );
}

#[test]
fn pf_apply_without_a_token_fails_before_loading() {
    let runner = RecordingRunner::new();
    runner.reply(&format!("{PFCTL} -E"), "", "pf already enabled\n");
    let fw = GuestAnchors::new(runner, MemoryTokenStore::default());
    let err = fw.apply(&fw.plan(&GuestScope::user(501), &policy()).unwrap()).unwrap_err();
    assert!(err.to_string().contains("Token"), "{err}");
    assert_eq!(fw.runner().commands(), [format!("{PFCTL} -E")]);
}

#[test]
fn pf_remove_flushes_then_releases_the_token() {
    let runner = RecordingRunner::new();
    runner.reply(
        &format!("{PFCTL} -a com.apple -s Anchors"),
        "  com.apple/250.ApplicationFirewall\n  com.apple/sandgate.u501\n",
        "",
    );
    let tokens = MemoryTokenStore::default();
    tokens.save(&GuestScope::user(501), "42").unwrap();
    let fw = GuestAnchors::new(runner, tokens);
    assert!(fw.remove(&GuestScope::user(501)).unwrap());
    assert_eq!(
        fw.runner().commands(),
        [
            format!("{PFCTL} -a com.apple -s Anchors"),
            format!("{PFCTL} -a com.apple/sandgate.u501 -F all"),
            format!("{PFCTL} -X 42"),
        ]
    );
    assert_eq!(fw.tokens().load(&GuestScope::user(501)).unwrap(), None);
}

#[test]
fn pf_remove_of_a_token_pf_forgot_still_forgets_it() {
    let runner = RecordingRunner::new();
    runner.fail(&format!("{PFCTL} -X"), "pfctl: Invalid token");
    let tokens = MemoryTokenStore::default();
    tokens.save(&GuestScope::user(7), "5").unwrap();
    let fw = GuestAnchors::new(runner, tokens);
    assert!(fw.remove(&GuestScope::user(7)).unwrap());
    assert!(fw.tokens().scopes().unwrap().is_empty());
}

#[test]
fn pf_gc_removes_stale_anchors_and_tokens_only() {
    let runner = RecordingRunner::new();
    runner.reply(
        &format!("{PFCTL} -a com.apple -s Anchors"),
        "  com.apple/sandgate.u501.p999\n  com.apple/sandgate.u501.p1\n  com.apple/sandgate.u666\n  com.apple/other\n",
        "",
    );
    let tokens = MemoryTokenStore::default();
    tokens.save(&GuestScope::owned_by(501, 999), "1").unwrap();
    tokens.save(&GuestScope::owned_by(501, 1), "2").unwrap();
    tokens.save(&GuestScope::owned_by(502, 999), "3").unwrap(); // anchor already gone
    let fw = GuestAnchors::new(runner, tokens);
    let removed = fw.gc(&Owners).unwrap();
    assert_eq!(
        removed,
        [GuestScope::owned_by(501, 999), GuestScope::user(666), GuestScope::owned_by(502, 999)]
    );
    let cmds = fw.runner().commands();
    for want in [
        format!("{PFCTL} -a com.apple/sandgate.u501.p999 -F all"),
        format!("{PFCTL} -X 1"),
        format!("{PFCTL} -a com.apple/sandgate.u666 -F all"),
        format!("{PFCTL} -X 3"),
    ] {
        assert!(cmds.contains(&want), "{want} not in {cmds:#?}");
    }
    assert!(
        !cmds.iter().any(|c| c.contains("sandgate.u501.p1 ") || c.ends_with("-X 2")),
        "{cmds:#?}"
    );
    assert_eq!(fw.tokens().scopes().unwrap(), [GuestScope::owned_by(501, 1)]);
}

#[test]
fn pf_list_reads_rules_of_sandgate_anchors() {
    let runner = RecordingRunner::new();
    runner.reply(
        &format!("{PFCTL} -a com.apple -s Anchors"),
        "  com.apple/sandgate.u501\n  com.apple/x\n",
        "",
    );
    runner.reply(
        &format!("{PFCTL} -a com.apple/sandgate.u501 -s rules"),
        "block return out ...\n",
        "",
    );
    let fw = GuestAnchors::new(runner, MemoryTokenStore::default());
    let listed = fw.list().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].scope, listed[0].rules.as_str()),
        (GuestScope::user(501), "block return out ...\n")
    );
}

#[test]
fn nft_sequences() {
    let runner = RecordingRunner::new();
    runner.reply("nft list tables inet", "table inet filter\ntable inet sandgate_u1001\ntable inet sandgate_u666\ntable inet sandgate_u5_p999\n", "");
    let fw = GuestTables::new(runner);
    let scope = GuestScope::user(1001);
    let plan = fw.plan(&scope, &policy()).unwrap();
    fw.apply(&plan).unwrap();
    fw.allow(&scope, "[::1]:8080".parse().unwrap()).unwrap();
    fw.disallow(&scope, "127.0.0.1:3128".parse().unwrap()).unwrap();
    assert!(fw.remove(&scope).unwrap());
    assert!(!fw.remove(&GuestScope::user(4)).unwrap());
    let removed = fw.gc(&Owners).unwrap();
    assert_eq!(removed, [GuestScope::user(666), GuestScope::owned_by(5, 999)]);
    let calls = fw.runner().calls();
    let text: Vec<(String, String)> =
        calls.iter().map(|c| (c.command.clone(), c.stdin.clone().unwrap_or_default())).collect();
    let want: Vec<(&str, &str)> = vec![
        ("nft -f -", plan.text.as_str()),
        ("nft -f -", "add element inet sandgate_u1001 allow6 { ::1 . 8080 }\n"),
        ("nft -f -", "delete element inet sandgate_u1001 allow4 { 127.0.0.1 . 3128 }\n"),
        ("nft list tables inet", ""),
        ("nft -f -", "add table inet sandgate_u1001\ndelete table inet sandgate_u1001\n"),
        ("nft list tables inet", ""),
        // gc: list (tables + each table's rules), then remove the stale ones
        ("nft list tables inet", ""),
        ("nft list table inet sandgate_u1001", ""),
        ("nft list table inet sandgate_u666", ""),
        ("nft list table inet sandgate_u5_p999", ""),
        ("nft list tables inet", ""),
        ("nft -f -", "add table inet sandgate_u666\ndelete table inet sandgate_u666\n"),
        ("nft list tables inet", ""),
        ("nft -f -", "add table inet sandgate_u5_p999\ndelete table inet sandgate_u5_p999\n"),
    ];
    let got: Vec<(&str, &str)> = text.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(got, want);
}

#[test]
fn nft_errors_carry_the_command_and_stderr() {
    let runner = RecordingRunner::new();
    runner.fail("nft -f -", "Error: Could not process rule: Operation not permitted");
    let fw = GuestTables::new(runner);
    let err = fw.apply(&fw.plan(&GuestScope::user(1), &policy()).unwrap()).unwrap_err();
    assert!(err.is_permission_denied());
    assert!(err.to_string().contains("nft -f -"), "{err}");
}

#[test]
fn nft_list_skips_a_table_removed_meanwhile() {
    let runner = RecordingRunner::new();
    runner.reply("nft list tables inet", "table inet sandgate_u1\ntable inet sandgate_u2\n", "");
    runner.fail(
        "nft list table inet sandgate_u1",
        "Error: No such file or directory\nlist table inet sandgate_u1",
    );
    let fw = GuestTables::new(runner);
    let listed: Vec<GuestScope> = fw.list().unwrap().into_iter().map(|i| i.scope).collect();
    assert_eq!(listed, [GuestScope::user(2)]);
}

#[test]
fn nft_list_fails_on_any_other_error_of_a_table() {
    let runner = RecordingRunner::new();
    runner.reply("nft list tables inet", "table inet sandgate_u1\ntable inet sandgate_u2\n", "");
    runner.fail("nft list table inet sandgate_u1", "Error: Operation not permitted");
    let fw = GuestTables::new(runner);
    assert!(fw.list().is_err(), "a table that cannot be read is not a table that is gone");
}

#[test]
fn pf_remove_forgets_only_a_token_pf_does_not_know() {
    for (stderr, gone) in [
        ("pfctl: Invalid token", true),
        ("pfctl: No such token", true),
        ("DIOCSTOPREF: token not found", true),
        ("pfctl: Operation not permitted", false),
    ] {
        let runner = RecordingRunner::new();
        runner.fail(&format!("{PFCTL} -X"), stderr);
        let tokens = MemoryTokenStore::default();
        tokens.save(&GuestScope::user(7), "5").unwrap();
        let fw = GuestAnchors::new(runner, tokens);
        // A token pf may still count keeps pf enabled: it is kept, and the removal fails.
        assert_eq!(fw.remove(&GuestScope::user(7)).is_ok(), gone, "{stderr}");
        assert_eq!(fw.tokens().scopes().unwrap().is_empty(), gone, "{stderr}");
    }
}

#[test]
fn pf_anchors_change_their_proxies_only_by_a_new_plan() {
    let fw = GuestAnchors::new(RecordingRunner::new(), MemoryTokenStore::default());
    let scope = GuestScope::user(5);
    let addr = "127.0.0.1:3128".parse().unwrap();
    assert!(fw.allow(&scope, addr).is_err());
    assert!(fw.disallow(&scope, addr).is_err());
    assert!(fw.runner().commands().is_empty());
    let plan = fw.remove_plan(&scope);
    assert!(plan.starts_with(&format!("{PFCTL} -a com.apple/0.sandgate.u5 -F all\n")), "{plan}");
    assert!(plan.contains(&format!("\n{PFCTL} -X ")), "{plan}");
}
