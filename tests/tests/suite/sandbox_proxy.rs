//! The `net` tier's only way out is the in-process allowlist proxy: an allowed destination is
//! reached through it, anything else gets the proxy's 403 body, and a direct connection fails.

use std::process::{Command, Output};

use crate::support::sandbox::{Scratch, Who, both};
use sandgate_tests::{Env, origin, skip_unless};

fn can_sandbox() -> bool {
    // The net tier needs namespaces and nft (root in CI) and the test needs curl.
    let root = sandgate_tests::is_root();
    root && Command::new("curl").arg("--version").output().is_ok()
}

/// The launcher serving the proxy itself (no daemon): what nobody can approve is refused at
/// once. The daemon's path (questions, grants) is tested in `daemon.rs`.
fn net(env: &Env, args: &[&str], curl: &[&str]) -> Output {
    env.cmd()
        .env("SANDGATE_NO_DAEMON", "1")
        .arg("net")
        .args(args)
        .arg("--")
        .args(["curl", "-sS", "--max-time", "5", "--noproxy", "", "-x", "http://127.0.0.1:3128"])
        .args(curl)
        .output()
        .unwrap()
}

#[test]
fn allowed_destinations_pass_through_the_proxy_and_others_get_its_refusal() {
    if skip_unless(can_sandbox(), "root and curl (net tier with namespaces and nft)") {
        return;
    }
    let env = Env::new();
    let port = origin("hello from the origin\n");
    let url = format!("http://127.0.0.1:{port}/x");
    let allow = format!("--allow=127.0.0.1:{port}");

    let out = net(&env, &[&allow], &[&url]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello from the origin\n",
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Not allowed: the proxy answers 403 with a body written for the agent.
    let out = net(&env, &[], &["-i", &url]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");
    assert!(text.to_ascii_lowercase().contains("x-sandgate-decision: deny"), "{text}");
    assert!(text.contains("--allow 127.0.0.1"), "{text}");

    // Denied by a rule: the rule is named.
    let deny = format!("--deny=127.0.0.1:{port}");
    let out = net(&env, &[&allow, &deny], &["-i", &url]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("HTTP/1.1 403") && text.contains(&format!("127.0.0.1:{port}")),
        "{text}"
    );
}

/// An allowed origin through the proxy, as root and as an unprivileged user (whose daemon, store
/// and runtime dir are its own, in the scratch tree it owns): served by the launcher itself, and
/// by the daemon the launcher starts.
fn allowed_origin_through_the_proxy(who: &Who) {
    if skip_unless(Command::new("curl").arg("--version").output().is_ok(), "curl") {
        return;
    }
    let s = Scratch::new(who);
    let port = origin("hello from the origin\n");
    let url = format!("http://127.0.0.1:{port}/x");
    let allow = format!("--allow=127.0.0.1:{port}");
    let curl = ["curl", "-sS", "--max-time", "5", "--noproxy", "", "-x", "http://127.0.0.1:3128"];
    for daemon in [false, true] {
        let mut cmd: Vec<&str> = curl.to_vec();
        cmd.push(&url);
        let mut c = s.command("net", &[&allow], &cmd);
        if !daemon {
            c.env("SANDGATE_NO_DAEMON", "1");
        }
        let out = c.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "hello from the origin\n",
            "daemon {daemon}, stderr: {stderr}"
        );
        assert!(out.status.success(), "daemon {daemon}: {stderr}");
        if daemon {
            assert!(!stderr.contains("no daemon"), "the daemon did not serve it: {stderr}");
            let pid = std::fs::read_to_string(s.root.join("run/sandgate/daemon.pid")).unwrap();
            let owner = std::fs::read_to_string(format!("/proc/{}/status", pid.trim())).unwrap();
            let uid = owner.lines().find(|l| l.starts_with("Uid:")).unwrap();
            assert_eq!(uid.split_whitespace().nth(1), Some(who.uid.to_string().as_str()), "{uid}");
        }
    }
}

both!(allowed_origin_through_the_proxy);

/// Issue 17.1: with Debian's default user PATH (no `/usr/sbin`) the net tier works (it failed with
/// "cannot run 'nft'").
fn net_tier_with_debian_user_path(who: &Who) {
    if skip_unless(Command::new("curl").arg("--version").output().is_ok(), "curl") {
        return;
    }
    // (`ip` is in /bin on Debian 12; the launcher needs neither `ip` nor `nft` any more: the
    // namespace is set up with netlink. `netlink_setup.rs` hides both and empties PATH.)
    let debian = "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games";
    let s = Scratch::new(who);
    let port = origin("hello from the origin\n");
    let url = format!("http://127.0.0.1:{port}/x");
    let allow = format!("--allow=127.0.0.1:{port}");
    let curl = ["curl", "-sS", "--max-time", "5", "--noproxy", "", "-x", "http://127.0.0.1:3128"];
    let mut cmd: Vec<&str> = curl.to_vec();
    cmd.push(&url);
    let out = s
        .command("net", &[&allow], &cmd)
        .env("PATH", debian)
        .env("SANDGATE_NO_DAEMON", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello from the origin\n", "{stderr}");
    assert!(out.status.success(), "{stderr}");
}

both!(net_tier_with_debian_user_path);

#[test]
fn the_run_tier_has_no_proxy_at_all() {
    if skip_unless(can_sandbox(), "root and curl (run tier with namespaces)") {
        return;
    }
    let env = Env::new();
    let port = origin("unreachable\n");
    let out = env
        .cmd()
        .args(["run", "--", "curl", "-sS", "--max-time", "3", "-x", "http://127.0.0.1:3128"])
        .arg(format!("http://127.0.0.1:{port}/"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
}
