//! Issue 32, part 3: a refusal by the address guard (an allowed name that resolves to a loopback,
//! private or metadata address) says what would help: not allowing the name, which is done
//! already, but the address itself. In `check` (which resolves the name), in the 403 and the
//! launcher's stderr line, and in what `learn` reports. Names are resolved by a DNS server of the
//! test on 127.0.0.1 (`SANDGATE_DNS_SERVER`): `loop.sgtest` is 127.0.0.1.

use crate::support::daemon::*;
use crate::support::dns::counting_dns;
use sandgate_tests::{origin, skip_unless};
use serde_json::Value;

/// A daemon environment whose names resolve through the test's DNS server; the server's log of
/// the names asked.
fn with_test_dns() -> (DaemonEnv, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let (port, asked) = counting_dns();
    let mut t = DaemonEnv::new("");
    t.vars.push(("SANDGATE_DNS_SERVER".into(), Some(format!("127.0.0.1:{port}"))));
    (t, asked)
}

#[test]
fn check_resolves_the_name_and_reports_the_guard() {
    let (t, asked) = with_test_dns();
    let target = "loop.sgtest:8080";
    let out = t.sg(&["check", target, "--allow", "loop.sgtest"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "refused whatever allows the name: {text}");
    assert!(text.starts_with("deny loop.sgtest:8080\n"), "{text}");
    assert!(
        text.contains("resolves to 127.0.0.1 (refused by the address guard: a loopback address)"),
        "{text}"
    );
    assert!(text.contains("allow the address itself: `sandgate allow 127.0.0.1:8080`"), "{text}");
    let json = t.sg(&["check", target, "--allow", "loop.sgtest", "--json"]);
    let v: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["decision"], "allow", "the policy's decision: {v}");
    assert_eq!(v["resolved"]["refuses"], true, "{v}");
    assert_eq!(v["resolved"]["addresses"][0]["ip"], "127.0.0.1", "{v}");

    // Controls: the address itself allowed, it passes (and says by which rule); not resolved
    // (`--no-resolve`), only the policy speaks.
    let out = t.sg(&["check", target, "--allow", "loop.sgtest", "--allow", "127.0.0.1:8080"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("127.0.0.1 (a loopback address, allowed by 127.0.0.1:8080"), "{text}");
    let before = asked.lock().unwrap().len();
    let out = t.sg(&["check", target, "--allow", "loop.sgtest", "--no-resolve"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(asked.lock().unwrap().len(), before, "--no-resolve resolved");
    // A name nobody allowed is asked about; after a yes the guard would still refuse it.
    assert_eq!(t.sg(&["check", target]).status.code(), Some(1));
    // `localhost` is never resolved (the proxy takes it as the host's loopback).
    let out = t.sg(&["check", "localhost:8080", "--allow", "localhost:8080"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(!asked.lock().unwrap().iter().any(|n| n == "localhost"));
    // A name that does not resolve: said, the policy's decision stands.
    let out = t.sg(&["check", "nowhere.sgtest:443", "--allow", "nowhere.sgtest"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("does not resolve here"), "{text}");
}

#[test]
fn a_guard_refusal_says_on_stderr_and_in_the_403_how_to_allow_the_address() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let (t, _) = with_test_dns();
    let port = origin("host service");
    let allow = "--allow=loop.sgtest";
    let url = format!("http://loop.sgtest:{port}/");
    let curl = ["curl", "-sS", "--max-time", "20", "-w", "\ncode=%{http_code}\n", &url];
    let (code, stdout, stderr) = finish(t.spawn_net(&[allow], &curl));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.ends_with("code=403\n"), "{stdout}");
    let ip_target = format!("`sandgate allow 127.0.0.1:{port}`");
    assert!(stdout.contains("the name resolves to 127.0.0.1, which is a loopback address"));
    assert!(stdout.contains("Allowing loop.sgtest (a rule, a grant"), "{stdout}");
    assert!(stdout.contains(&ip_target), "{stdout}");
    let line = stderr.lines().find(|l| l.starts_with("sandgate: denied loop.sgtest"));
    let line = line.unwrap_or_else(|| panic!("no notice: {stderr}"));
    assert!(line.contains("allowing loop.sgtest does not change that"), "{line}");
    assert!(line.contains(&ip_target), "{line}");
    // Control: with the address allowed too, the request goes through.
    let both = format!("--allow=127.0.0.1:{port}");
    let (code, stdout, stderr) = finish(t.spawn_net(&[allow, &both], &curl));
    assert_eq!((code, stdout.as_str()), (0, "host service\ncode=200\n"), "{stderr}");
}

#[test]
fn learn_reports_guard_refusals_instead_of_nothing_to_propose() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let (t, _) = with_test_dns();
    let port = origin("host service");
    std::fs::write(
        t.env.config_home().join("sandgate/config.toml"),
        "[network]\nallow = [\"loop.sgtest\"]\n",
    )
    .unwrap();
    let fetch = format!("curl -s -o /dev/null --max-time 10 http://loop.sgtest:{port}/");
    let out = t.cmd().args(["learn", "--", "sh", "-c", &fetch]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("no destination beyond what is allowed"), "{stdout}");
    assert!(stdout.contains("refused by the address guard"), "{stdout}");
    let row = format!("loop.sgtest:{port} resolves to 127.0.0.1, a loopback address");
    assert!(stdout.contains(&row), "{stdout}");
    assert!(stdout.contains(&format!("allow \"127.0.0.1:{port}\"")), "{stdout}");
}

/// Issue 32, part 3: an allowed name that does not resolve: an HTTPS client shows only the
/// CONNECT's `502`, so the launcher says why on stderr (a plain-HTTP client prints the body).
#[test]
fn an_allowed_name_that_does_not_resolve_is_said_on_stderr() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let (t, _) = with_test_dns();
    let curl = ["curl", "-sS", "--max-time", "20", "https://nowhere.sgtest/"];
    let (code, _, stderr) = finish(t.spawn_net(&["--allow=nowhere.sgtest"], &curl));
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains("502"), "curl's own line: {stderr}");
    let said = "sandgate: nowhere.sgtest:443 is allowed, but the name does not resolve";
    assert!(stderr.lines().any(|l| l.starts_with(said)), "{stderr}");
    // Not with --quiet.
    let (_, _, stderr) = finish(t.spawn_net(&["--allow=nowhere.sgtest", "--quiet"], &curl));
    assert!(!stderr.contains(said), "{stderr}");
}
