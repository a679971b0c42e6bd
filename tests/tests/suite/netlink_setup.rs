//! The `net` tier's namespace is set up by the launcher's own netlink messages: the table the
//! kernel holds after a launch is the one `nft -f` makes of the text ruleset, the veth pair and
//! routes are there, and a launch with neither `nft` nor `ip` on the machine (hidden by a mount
//! namespace, PATH pointing nowhere) still blocks and reports a direct connection.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::sandbox::{
    HOST4, HOST6, Scratch, TestHost, Who, both, in_netns, init_of, root, text,
};
use sandgate_tests::skip_unless;

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn the_kernel_holds_the_same_table_as_nft_makes_of_the_text_ruleset() {
    let Some(who) = root() else { return };
    if skip_unless(have("nft") && have("nsenter") && have("ip"), "nft, nsenter and ip") {
        return;
    }
    let s = Scratch::new(&who);
    // The launch's table, read back from the kernel by nft.
    let mut launcher = s
        .command("net", &[], &["sh", "-c", "cat >/dev/null"])
        .env("SANDGATE_NO_DAEMON", "1")
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let init = init_of(launcher.id());
    // The sandbox id is the NFLOG prefix: read it from the environment of the command.
    let deadline = Instant::now() + Duration::from_secs(10);
    let listing = loop {
        let l = in_netns(init, "nft list table inet sandgate 2>/dev/null || true");
        if l.contains("reject with icmpx") || Instant::now() > deadline {
            break l;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let links = in_netns(init, "ip -br addr; ip route; ip -6 route");
    drop(launcher.stdin.take());
    assert!(launcher.wait().unwrap().success());
    let prefix = listing
        .split("log prefix \"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("no log rule in:\n{listing}"))
        .to_owned();
    assert!(prefix.starts_with("sg-"), "{prefix}");

    // The reference: the text ruleset through nft in a fresh namespace of the test's own.
    let rules =
        sandgate_firewall::nft::namespace_ruleset(&sandgate_firewall::nft::NamespaceRules {
            prefix: prefix.clone(),
            nflog_group: 7,
            proxy_port: 3128,
        });
    let file = s.root.join("ns.nft");
    std::fs::write(&file, rules).unwrap();
    let out = Command::new("unshare")
        .args(["-n", "sh", "-c"])
        .arg(format!("nft -f {} && nft list table inet sandgate", file.display()))
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(listing, text(&out.stdout), "the launcher's batch and nft's text differ");

    // Links, addresses and routes.
    for want in ["sg0", "192.0.2.1/24", "2001:db8::1/64", "default dev sg0"] {
        assert!(links.contains(want), "{want} missing:\n{links}");
    }
    assert!(links.lines().any(|l| l.starts_with("sg0") && l.contains("UP")), "{links}");
}

fn blocked_and_reported_without_nft_and_ip(who: &Who) {
    let Some(_host) = TestHost::start() else { return };
    let s = Scratch::new(who);
    // A mount namespace of the test's own hides both tools; the launcher runs as `who` inside it.
    let hide = "/usr/bin/mount --bind /dev/null /usr/sbin/nft && \
                /usr/bin/mount --bind /dev/null /usr/sbin/ip && exec /usr/bin/env PATH=/nonexistent \"$@\"";
    // TCP is captured (refused by the proxy's side: a reset or EOF, never the echo); UDP is
    // refused and reported by the firewall.
    let script = probes(s.probe.to_str().unwrap());
    let inner = s.command("net", &["--report-blocked"], &["/bin/sh", "-c", &script]);
    let program = match inner.get_program().to_str().unwrap() {
        "setpriv" => "/usr/bin/setpriv".into(),
        other => other.to_owned(),
    };
    let mut cmd = Command::new("/usr/bin/unshare");
    cmd.args(["-m", "--propagation", "private", "/bin/sh", "-c", hide, "sh", &program]);
    cmd.args(inner.get_args());
    cmd.env_clear();
    for (k, v) in inner.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    let out = cmd
        .env("SANDGATE_NO_DAEMON", "1")
        .current_dir(&s.proj)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    captured_tcp_reported_udp(&stdout, &stderr);
}

/// The probe lines of [`PROBES`]: TCP over IPv4 and IPv6 captured and refused by the proxy's
/// side (a reset or end of stream: no echo came back), UDP refused at once and reported by the
/// firewall.
#[track_caller]
fn captured_tcp_reported_udp(stdout: &str, stderr: &str) {
    let lines: Vec<&str> = stdout.lines().filter(|l| l.split(' ').count() == 2).collect();
    let [v4, v6, udp] = lines[..] else {
        panic!("three probe lines expected:\n{stdout}\n{stderr}")
    };
    for tcp in [v4, v6] {
        assert!(tcp.starts_with("ECONNRESET ") || tcp.starts_with("EOF "), "{tcp}\n{stderr}");
    }
    assert!(!udp.starts_with("ok ") && !udp.starts_with("ETIMEDOUT "), "{udp}\n{stderr}");
    assert!(stderr.contains(&format!("sandgate: blocked udp [{HOST6}]:53")), "{stderr}");
    assert!(!stderr.contains("sandgate: blocked tcp"), "{stderr}");
}

/// The probes of the tests here, each `python3 PROBE op host port`.
fn probes(probe: &str) -> String {
    format!(
        "/usr/bin/python3 {probe} talk {HOST4} 8080; /usr/bin/python3 {probe} talk {HOST6} 8080; \
         /usr/bin/python3 {probe} udp {HOST6} 53"
    )
}

both!(blocked_and_reported_without_nft_and_ip);

/// The default routes go through one tun device, not a veth pair (one network device less to
/// register per `net`/`build` launch); the link is up like the veth was.
#[test]
fn the_route_device_is_one_tun_device() {
    let Some(who) = root() else { return };
    if skip_unless(
        have("nsenter") && have("ip") && std::path::Path::new("/dev/net/tun").exists(),
        "nsenter, ip and /dev/net/tun",
    ) {
        return;
    }
    let s = Scratch::new(&who);
    let mut launcher = s
        .command("net", &[], &["sh", "-c", "cat >/dev/null"])
        .env("SANDGATE_NO_DAEMON", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let init = init_of(launcher.id());
    let deadline = Instant::now() + Duration::from_secs(10);
    let links = loop {
        let l = in_netns(init, "ip -d -o link show");
        if l.contains("sg0") || Instant::now() > deadline {
            break l;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(launcher.stdin.take());
    assert!(launcher.wait().unwrap().success());
    let names: Vec<&str> =
        links.lines().filter_map(|l| l.split(": ").nth(1)).map(|n| n.trim()).collect();
    assert_eq!(names, ["lo", "sg0"], "{links}");
    let sg0 = links.lines().find(|l| l.contains(": sg0:")).unwrap();
    assert!(sg0.contains(" tun ") && sg0.contains("UP"), "{sg0}");
}

/// Without `/dev/net/tun` (hidden by an empty directory in a mount namespace) the launcher falls
/// back to the veth pair, and a direct connection is still blocked and reported.
fn blocked_and_reported_without_dev_net_tun(who: &Who) {
    let Some(_host) = TestHost::start() else { return };
    let s = Scratch::new(who);
    let hide = "/usr/bin/mount -t tmpfs none /dev/net && exec \"$@\"";
    let inner = s.command(
        "net",
        &["--report-blocked"],
        &["/bin/sh", "-c", &format!("cat /proc/net/dev; {}", probes(s.probe.to_str().unwrap()))],
    );
    let program = match inner.get_program().to_str().unwrap() {
        "setpriv" => "/usr/bin/setpriv".into(),
        other => other.to_owned(),
    };
    let mut cmd = Command::new("/usr/bin/unshare");
    cmd.args(["-m", "--propagation", "private", "/bin/sh", "-c", hide, "sh", &program]);
    cmd.args(inner.get_args());
    cmd.env_clear();
    for (k, v) in inner.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    let out = cmd
        .env("SANDGATE_NO_DAEMON", "1")
        .current_dir(&s.proj)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("sg1:"), "no veth pair:\n{stdout}");
    captured_tcp_reported_udp(&stdout, &stderr);
}

both!(blocked_and_reported_without_dev_net_tun);
