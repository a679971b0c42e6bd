//! Networks the daemon makes ahead (the daemon's `netpool`): a `net` launch joins one instead of
//! making its own, every wall holds there as in a network of the sandbox's own making, the
//! network belongs to a user namespace the sandbox has no capability in, and each serves one
//! sandbox. With the pool off, a launch makes its own (the control of the ownership check).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::sandbox::{HOST4, Scratch, TestHost, Who, both, in_netns, init_of, text};
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
        d.wait_pool(|p| if pool { full(p) } else { p["on"] == false });
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

/// Two of each kind ready.
fn full(pool: &Value) -> bool {
    pool["ready"]["proxy"] == 2 && pool["ready"]["loopback"] == 2
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
    let pool = d.wait_pool(full);
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
    for (tier, pool) in [("net", true), ("run", true), ("net", false), ("run", false)] {
        let d = Daemon::start(&s, pool);
        let mut launcher = s
            .command(tier, &[], &["sh", "-c", "echo $SANDGATE_SANDBOX; cat >/dev/null"])
            .env("SANDGATE_DEBUG", "launch")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let init = init_of(launcher.id());
        let (owner, own_user) = network_owner(init);
        // `run` has no table: an empty listing.
        let listing = in_netns(init, "nft list table inet sandgate 2>/dev/null || true");
        drop(launcher.stdin.take());
        let out = launcher.wait_with_output().unwrap();
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{stderr}");
        drop(d);
        if pool {
            assert!(stderr.contains(JOINED), "{tier}: {stderr}");
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
        if tier == "net" {
            assert!(listing.contains(&format!("log prefix \"{id}\"")), "{id}:\n{listing}");
        } else {
            assert!(listing.is_empty(), "run has no firewall table:\n{listing}");
        }
    }
}

/// A `run` launch joins a prepared loopback network: `lo` (up: the command can talk to itself)
/// and nothing else, so a direct connection finds no route, as in a network of its own making.
fn a_run_launch_joins_a_prepared_loopback_network(who: &Who) {
    let Some(_host) = TestHost::start() else { return };
    let s = Scratch::new(who);
    let _d = Daemon::start(&s, true);
    let probe = s.probe.display().to_string();
    let script = format!(
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ' '; echo; \
         python3 {probe} tcp {HOST4} 8080; \
         python3 -c 'import socket; l = socket.create_server((\"127.0.0.1\", 0)); \
         c = socket.create_connection(l.getsockname()); print(\"loopback ok\")'"
    );
    let out = s
        .command("run", &[], &["sh", "-c", &script])
        .env("SANDGATE_DEBUG", "launch")
        .output()
        .unwrap();
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{o}\n{e}");
    assert!(e.contains(JOINED), "the launch made its own network:\n{e}");
    let lines: Vec<&str> = o.lines().collect();
    assert_eq!(lines[0].trim(), "lo", "only lo: {o}");
    let direct = lines[1].split_whitespace().next().unwrap_or("");
    assert!(["ENETUNREACH", "EHOSTUNREACH"].contains(&direct), "direct: {o}");
    assert_eq!(lines[2], "loopback ok", "{o}\n{e}");
}

/// Each prepared network serves one sandbox: two launches in turn get two namespaces and two
/// ids, and the pool makes a new one for each taken.
fn each_prepared_network_serves_one_sandbox(who: &Who) {
    let s = Scratch::new(who);
    let d = Daemon::start(&s, true);
    let script = "echo $SANDGATE_SANDBOX $(readlink /proc/self/ns/net)";
    let (first, e1) = net_sh(&s, &[], script);
    d.wait_pool(full);
    let (second, e2) = net_sh(&s, &[], script);
    assert!(e1.contains(JOINED) && e2.contains(JOINED), "{e1}\n{e2}");
    let (a, b): (Vec<&str>, Vec<&str>) =
        (first.split_whitespace().collect(), second.split_whitespace().collect());
    assert_eq!((a.len(), b.len()), (2, 2), "{first} {second}");
    assert_ne!(a[0], b[0], "one id for two sandboxes");
    assert_ne!(a[1], b[1], "one network namespace for two sandboxes");
    let pool = d.wait_pool(full);
    // Two of each kind made at start, and one proxy network for each taken.
    assert_eq!((pool["handed_out"].clone(), pool["made"].clone()), (2.into(), 6.into()), "{pool}");
}

/// A daemon that takes the connection and never answers holds no `run` launch up: the launcher
/// stops waiting for a network made ahead and its sandbox makes its own (here: a listener of the
/// test's own on the daemon's socket path).
#[test]
fn a_daemon_that_does_not_answer_holds_no_launch_up() {
    let Some(who) = crate::support::sandbox::root() else { return };
    let s = Scratch::new(&who);
    let dir = s.root.join("run/sandgate");
    std::fs::create_dir_all(&dir).unwrap();
    let _silent = std::os::unix::net::UnixListener::bind(dir.join("control.sock")).unwrap();
    let started = Instant::now();
    let out = s.command("run", &[], &["true"]).env("SANDGATE_DEBUG", "launch").output().unwrap();
    let took = started.elapsed();
    let e = text(&out.stderr);
    assert!(out.status.success(), "{e}");
    assert!(e.contains("no network ready at the daemon") && !e.contains(JOINED), "{e}");
    // Not a timing benchmark: the launcher waits at most 250 ms for the answer, and a whole `run`
    // launch takes milliseconds; 5 s is a bound only a hang (a wait without its limit) exceeds,
    // however loaded the machine.
    assert!(took < Duration::from_secs(5), "the silent daemon held the launch up: {took:?}\n{e}");
}

/// A fake daemon on `s`'s socket path: answers every connection's first line with a loopback
/// network for `sg-fake-1` whose network descriptor is `ns` (opened by the fake), then closes.
/// Killed when dropped.
struct FakeDaemon(Child);

impl FakeDaemon {
    fn start(s: &Scratch, ns: &str) -> FakeDaemon {
        let dir = s.root.join("run/sandgate");
        std::fs::create_dir_all(&dir).unwrap();
        let fake = r#"
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(4)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.recv(4096)
    fd = os.open(sys.argv[2], os.O_RDONLY)
    network = {"sandbox": "sg-fake-1", "kind": "loopback", "group": 7, "user": False}
    line = json.dumps({"id": 1, "ok": True, "result": {"network": network}}) + "\n"
    socket.send_fds(c, [line.encode()], [fd])
    os.close(fd)
    c.close()
"#;
        let mut child = Command::new("python3")
            .args(["-c", fake, dir.join("control.sock").to_str().unwrap(), ns])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut ready,
        )
        .unwrap();
        let fake = FakeDaemon(child);
        assert_eq!(ready.trim(), "ready");
        fake
    }
}

impl Drop for FakeDaemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `run` launch of `s` (SANDGATE_DEBUG=launch) that lists its network devices: (devices,
/// stderr), after checking it exited with 0.
fn run_devices(s: &Scratch) -> (String, String) {
    let script = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ' '";
    let out = s
        .command("run", &[], &["sh", "-c", script])
        .env("SANDGATE_DEBUG", "launch")
        .output()
        .unwrap();
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{e}");
    (o.trim().to_owned(), e)
}

/// A socket on the daemon's path that hands out the host's own network namespace (what a fake
/// daemon would do to give a sandbox the host's network) gets no sandbox into it: the launcher
/// refuses it and the sandbox makes its own, with only `lo`.
#[test]
fn the_hosts_own_network_handed_out_is_refused() {
    let Some(who) = crate::support::sandbox::root() else { return };
    let s = Scratch::new(&who);
    let _fake = FakeDaemon::start(&s, "/proc/self/ns/net");
    let (devices, e) = run_devices(&s);
    assert!(e.contains("network taken from the daemon"), "the fake was not asked: {e}");
    assert!(e.contains("prepared network not joined"), "{e}");
    assert_eq!(devices, "lo", "the sandbox sees the host's network devices: {devices}");
}

/// The join helper's failure path: a fake daemon hands out a namespace that is no network
/// namespace (its own UTS namespace). It passes the launcher's own-namespace check (it is not the
/// launcher's network namespace), then the helper's `setns(CLONE_NEWNET)` fails: the launcher
/// says so and its sandbox makes its own network, with only `lo`, and runs normally.
#[test]
fn a_network_the_helper_cannot_join_leaves_the_sandbox_its_own() {
    let Some(who) = crate::support::sandbox::root() else { return };
    let s = Scratch::new(&who);
    let _fake = FakeDaemon::start(&s, "/proc/self/ns/uts");
    let (devices, e) = run_devices(&s);
    assert!(e.contains("network taken from the daemon"), "the fake was not asked: {e}");
    let not_joined = e.lines().find(|l| l.contains("prepared network not joined"));
    let not_joined = not_joined.unwrap_or_else(|| panic!("no \"not joined\" line:\n{e}"));
    assert!(
        !not_joined.contains("launcher's own namespace"),
        "refused by the own-namespace check, not by the helper's setns: {not_joined}"
    );
    assert!(!e.contains(JOINED), "{e}");
    assert_eq!(devices, "lo", "{devices}\n{e}");
}

/// Talks to the daemon of `s` directly: each of `conversations` is one connection, its requests
/// sent one at a time (JSON lines); returns, per connection, `[{"reply": ..., "fds": N}, ...]`,
/// N the descriptors that came with the reply (closed).
fn converse(s: &Scratch, conversations: &Value) -> Value {
    let script = r#"
import json, os, socket, sys
path, conversations = sys.argv[1], json.loads(sys.argv[2])
out = []
for requests in conversations:
    c = socket.socket(socket.AF_UNIX)
    c.connect(path)
    answers = []
    for req in requests:
        c.sendall((json.dumps(req) + "\n").encode())
        buf, fds = b"", []
        while not buf.endswith(b"\n"):
            msg, got, _, _ = socket.recv_fds(c, 65536, 16)
            fds += got
            if not msg:
                break
            buf += msg
        for fd in fds:
            os.close(fd)
        answers.append({"reply": json.loads(buf), "fds": len(fds)})
    c.close()
    out.append(answers)
print(json.dumps(out))
"#;
    let sock = s.root.join("run/sandgate/control.sock");
    let out = s
        .program(std::path::Path::new("python3"))
        .args(["-c", script, sock.to_str().unwrap(), &conversations.to_string()])
        .output()
        .unwrap();
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{o}\n{e}");
    serde_json::from_str(&o).unwrap_or_else(|err| panic!("{err}: {o}\n{e}"))
}

/// The protocol of `take_network`: answered with a network only as a connection's first
/// request; as a second one (after `hello`) the reply is `{"network": null, "why": ...}` with no
/// descriptors; an unknown kind is an error reply. Control: the same request as a connection's
/// first is answered with a network and its descriptors (so the count would see them).
#[test]
fn take_network_is_answered_only_as_a_connections_first_request() {
    let Some(who) = crate::support::sandbox::root() else { return };
    let s = Scratch::new(&who);
    let d = Daemon::start(&s, true);
    let take = serde_json::json!({"id": 2, "op": "take_network", "kind": "loopback"});
    let talks = converse(
        &s,
        &serde_json::json!([
            [{"id": 1, "op": "hello"}, take],
            [{"id": 3, "op": "take_network", "kind": "bogus"}],
            [take],
        ]),
    );
    let second = &talks[0][1];
    assert_eq!(talks[0][0]["reply"]["ok"], true, "hello: {talks}");
    assert_eq!(second["reply"]["ok"], true, "{second}");
    assert_eq!(second["reply"]["result"]["network"], Value::Null, "handed out second: {second}");
    let why = second["reply"]["result"]["why"].as_str().unwrap_or_default();
    assert!(!why.is_empty(), "no why: {second}");
    assert_eq!(second["fds"], 0, "descriptors with a refusal: {second}");
    // The error's code and wording may change (a typed kind refused as a bad request): only
    // that it is an error is the protocol.
    let bogus = &talks[1][0];
    assert_eq!(bogus["reply"]["ok"], false, "an unknown kind was not refused: {bogus}");
    assert_eq!(bogus["fds"], 0, "{bogus}");
    let first = &talks[2][0];
    assert_eq!(first["reply"]["result"]["network"]["kind"], "loopback", "control: {first}");
    assert_eq!(first["fds"], 1, "control: a loopback network is one descriptor: {first}");
    let pool = d.pool();
    assert_eq!(pool["handed_out"], 1, "only the control's network was handed out: {pool}");
}

both!(
    a_launch_joins_a_prepared_network_and_its_walls_hold,
    a_run_launch_joins_a_prepared_loopback_network,
    the_prepared_network_is_not_the_sandboxs_to_change,
    each_prepared_network_serves_one_sandbox,
);
