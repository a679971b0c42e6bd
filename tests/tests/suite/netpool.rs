//! Networks the daemon makes ahead (the daemon's `netpool`): a `net` launch joins one instead of
//! making its own, every wall holds there as in a network of the sandbox's own making, the
//! network belongs to a user namespace the sandbox has no capability in, and each serves one
//! sandbox. With the pool off, a launch makes its own (the control of the ownership check).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::sandbox::{HOST4, Scratch, TestHost, Who, both, text};
use sandgate_tests::sandgate_bin;
use serde_json::Value;

pub(crate) const JOINED: &str = "clone (into the prepared network)";

/// The daemon of `s`, started as its user (pool off with `pool == false`), once its pool is
/// full (or known off).
pub(crate) struct Daemon<'a> {
    s: &'a Scratch,
    child: Child,
}

impl<'a> Daemon<'a> {
    pub(crate) fn start(s: &'a Scratch, pool: bool) -> Daemon<'a> {
        let mut c = s.program(&sandgate_bin());
        c.arg("daemon").stdout(Stdio::null()).stderr(Stdio::null());
        if !pool {
            c.env("SANDGATE_NETWORK_POOL", "0");
        }
        let d = Daemon { s, child: c.spawn().unwrap() };
        d.wait_pool(|p| if pool { p["ready"] == 2 } else { p["on"] == false });
        d
    }

    /// The daemon's `status --json` (`Null` when it does not answer).
    pub(crate) fn status(&self) -> Value {
        let out = self.s.program(&sandgate_bin()).args(["status", "--json"]).output().unwrap();
        serde_json::from_slice::<Value>(&out.stdout).unwrap_or(Value::Null)
    }

    /// The daemon's pid, as it says in its status.
    pub(crate) fn pid(&self) -> u32 {
        let pid = self.status()["daemon"]["pid"].as_u64().expect("the daemon's pid") as u32;
        assert_eq!(pid, self.child.id(), "another daemon answers");
        pid
    }

    pub(crate) fn pool(&self) -> Value {
        self.status()["network_pool"].clone()
    }

    pub(crate) fn wait_pool(&self, ok: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let p = self.pool();
            if ok(&p) {
                return p;
            }
            assert!(Instant::now() < deadline, "network pool never got there: {p}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon<'_> {
    fn drop(&mut self) {
        let _ = self.s.program(&sandgate_bin()).arg("stop").output();
        let _ = self.child.wait();
    }
}

/// The sandbox's init under `launcher`: its child in another pid namespace (not the short-lived
/// helper that joins a prepared network).
pub(crate) fn init_of(launcher: u32) -> u32 {
    let ns = |pid: u32| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let children =
            std::fs::read_to_string(format!("/proc/{launcher}/task/{launcher}/children"))
                .unwrap_or_default();
        let init = children
            .split_whitespace()
            .filter_map(|c| c.parse().ok())
            .find(|&c| ns(c).is_some() && ns(c) != ns(launcher));
        if let Some(pid) = init {
            return pid;
        }
        assert!(Instant::now() < deadline, "no sandbox init under {launcher}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// (inode of the user namespace that owns `pid`'s network namespace, inode of `pid`'s own user
/// namespace), read with `NS_GET_USERNS`.
fn network_owner(pid: u32) -> (u64, u64) {
    let script = "import fcntl, os, sys\n\
                  p = sys.argv[1]\n\
                  owner = fcntl.ioctl(os.open(f'/proc/{p}/ns/net', os.O_RDONLY), 0xb701)\n\
                  print(os.fstat(owner).st_ino, os.stat(f'/proc/{p}/ns/user').st_ino)";
    let out = Command::new("python3").args(["-c", script, &pid.to_string()]).output().unwrap();
    let t = text(&out.stdout);
    let (a, b) = t.trim().split_once(' ').unwrap_or_else(|| panic!("{t} {}", text(&out.stderr)));
    (a.parse().unwrap(), b.parse().unwrap())
}

/// Runs `sh -c script` in `net` with launch timings on; returns (stdout, stderr).
fn net_sh(s: &Scratch, args: &[&str], script: &str) -> (String, String) {
    let out =
        s.command("net", args, &["sh", "-c", script]).env("SANDGATE_DEBUG", "launch").output();
    let out = out.unwrap();
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{o}\n{e}");
    (o, e)
}

/// With a full pool, a `net` launch joins a prepared network, and in it: a direct connection is
/// refused at once and reported, also after `nft flush ruleset` from inside; the allowlist proxy
/// and the DNS stub answer; the namespace's table is the launcher's (prefix: this sandbox's id).
fn a_launch_joins_a_prepared_network_and_its_walls_hold(who: &Who) {
    let Some(_host) = TestHost::start() else { return };
    let s = Scratch::new(who);
    let d = Daemon::start(&s, true);
    let port = sandgate_tests::origin("pooled");
    let probe = s.probe.display().to_string();
    let script = format!(
        "echo id=$SANDGATE_SANDBOX; python3 {probe} tcp {HOST4} 8080; \
         nft flush ruleset 2>/dev/null; python3 {probe} tcp {HOST4} 8080; \
         curl -sS --max-time 20 --noproxy '' -o /dev/null -w '%{{http_code}}\\n' http://127.0.0.1:{port}/; \
         curl -sS --max-time 20 --noproxy '' -o /dev/null -w '%{{http_code}}\\n' http://127.0.0.1:9/"
    );
    let allow = format!("--allow=127.0.0.1:{port}");
    let (out, err) = net_sh(&s, &["--report-blocked", &allow, "--deny=127.0.0.1:9"], &script);
    assert!(err.contains(JOINED), "the launch made its own network:\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("id=sg-"), "{out}");
    for (i, what) in [(1, "direct"), (2, "direct after nft flush")] {
        let (answer, ms) = lines[i].split_once(' ').unwrap_or((lines[i], "0"));
        assert_eq!(answer, "ECONNREFUSED", "{what}: {out}\n{err}");
        assert!(ms.parse::<u64>().unwrap() < 2000, "{what} was not refused at once: {out}");
    }
    assert_eq!(lines[3], "200", "allowed through the proxy: {out}\n{err}");
    assert_eq!(lines[4], "403", "refused by the proxy: {out}\n{err}");
    assert!(err.contains(&format!("sandgate: blocked tcp {HOST4}:8080")), "not reported:\n{err}");
    let pool = d.wait_pool(|p| p["ready"] == 2);
    assert_eq!(pool["handed_out"], 1, "{pool}");
}

/// The prepared network belongs to a user namespace that is not the sandbox's (rootless: the
/// factory's, under the host's; root: the host's), so no process of the sandbox ever holds a
/// capability over it; with the pool off the sandbox's own user namespace owns the network it
/// made (the control that shows the check tells the two apart). The kernel's table in the joined
/// namespace carries this sandbox's id as its NFLOG prefix.
fn the_prepared_network_is_not_the_sandboxs_to_change(who: &Who) {
    let s = Scratch::new(who);
    let host_user = {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata("/proc/self/ns/user").unwrap().ino()
    };
    for pool in [true, false] {
        let d = Daemon::start(&s, pool);
        let mut launcher = s
            .command("net", &[], &["sh", "-c", "echo $SANDGATE_SANDBOX; cat >/dev/null"])
            .env("SANDGATE_DEBUG", "launch")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let init = init_of(launcher.id());
        let (owner, own_user) = network_owner(init);
        let listing = Command::new("nsenter")
            .args(["-t", &init.to_string(), "-n", "nft", "list", "table", "inet", "sandgate"])
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .output()
            .map(|o| text(&o.stdout))
            .unwrap_or_default();
        drop(launcher.stdin.take());
        let out = launcher.wait_with_output().unwrap();
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{stderr}");
        drop(d);
        if pool {
            assert!(stderr.contains(JOINED), "{stderr}");
            assert_ne!(owner, own_user, "a prepared network owned by the sandbox's user namespace");
            if who.rootless {
                assert_ne!(owner, host_user, "rootless: the factory's user namespace owns it");
            } else {
                assert_eq!(owner, host_user, "root: the host's user namespace owns it");
            }
        } else {
            assert!(!stderr.contains(JOINED), "pool off, yet joined:\n{stderr}");
            assert_eq!(owner, own_user, "a network the sandbox made is its own user namespace's");
        }
        let id = stdout.trim();
        if !listing.is_empty() {
            assert!(listing.contains(&format!("log prefix \"{id}\"")), "{id}:\n{listing}");
        }
    }
}

/// Each prepared network serves one sandbox: two launches in turn get two namespaces and two
/// ids, and the pool makes a new one for each taken.
fn each_prepared_network_serves_one_sandbox(who: &Who) {
    let s = Scratch::new(who);
    let d = Daemon::start(&s, true);
    let script = "echo $SANDGATE_SANDBOX $(readlink /proc/self/ns/net)";
    let (first, e1) = net_sh(&s, &[], script);
    d.wait_pool(|p| p["ready"] == 2);
    let (second, e2) = net_sh(&s, &[], script);
    assert!(e1.contains(JOINED) && e2.contains(JOINED), "{e1}\n{e2}");
    let (a, b): (Vec<&str>, Vec<&str>) =
        (first.split_whitespace().collect(), second.split_whitespace().collect());
    assert_eq!((a.len(), b.len()), (2, 2), "{first} {second}");
    assert_ne!(a[0], b[0], "one id for two sandboxes");
    assert_ne!(a[1], b[1], "one network namespace for two sandboxes");
    let pool = d.wait_pool(|p| p["ready"] == 2);
    assert_eq!((pool["handed_out"].clone(), pool["made"].clone()), (2.into(), 4.into()), "{pool}");
}

both!(
    a_launch_joins_a_prepared_network_and_its_walls_hold,
    the_prepared_network_is_not_the_sandboxs_to_change,
    each_prepared_network_serves_one_sandbox,
);
