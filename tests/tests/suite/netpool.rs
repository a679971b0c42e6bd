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

/// The daemon's socket that hands out loopback networks (in its runtime directory).
const LOOPBACK_SOCKET: &str = "network-loopback.sock";

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
    s.ask_timeout(1);
    let d = Daemon::start(&s, true);
    let port = sandgate_tests::origin("pooled");
    let probe = s.probe.display().to_string();
    let script = format!(
        "echo id=$SANDGATE_SANDBOX; python3 {probe} talk {HOST4} 8080; \
         nft flush ruleset 2>/dev/null; python3 {probe} talk {HOST4} 8080; \
         curl -sS --max-time 20 --noproxy '' -o /dev/null -w '%{{http_code}}\\n' http://127.0.0.1:{port}/; \
         curl -sS --max-time 20 --noproxy '' -o /dev/null -w '%{{http_code}}\\n' http://127.0.0.1:9/"
    );
    let allow = format!("--allow=127.0.0.1:{port}");
    let (out, err) = net_sh(&s, &["--report-blocked", &allow, "--deny=127.0.0.1:9"], &script);
    assert!(err.contains(JOINED), "the launch made its own network:\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("id=sg-"), "{out}");
    for (i, what) in [(1, "direct"), (2, "direct after nft flush")] {
        // Captured and refused by the proxy (after the one-second question): a reset or the
        // end of the stream, never the echo host's answer nor a timeout.
        let (answer, _ms) = lines[i].split_once(' ').unwrap_or((lines[i], "0"));
        assert!(["ECONNRESET", "EOF"].contains(&answer), "{what}: {out}\n{err}");
    }
    assert_eq!(lines[3], "200", "allowed through the proxy: {out}\n{err}");
    assert_eq!(lines[4], "403", "refused by the proxy: {out}\n{err}");
    assert!(err.contains(&format!("sandgate: denied {HOST4}:8080")), "not reported:\n{err}");
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
/// test's own on the daemon's loopback network socket).
#[test]
fn a_daemon_that_does_not_answer_holds_no_launch_up() {
    let Some(who) = crate::support::sandbox::root() else { return };
    let s = Scratch::new(&who);
    let dir = s.root.join("run/sandgate");
    std::fs::create_dir_all(&dir).unwrap();
    let _silent = std::os::unix::net::UnixListener::bind(dir.join(LOOPBACK_SOCKET)).unwrap();
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

/// A fake daemon on `s`'s loopback network socket: answers every connection with a loopback
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
    fd = os.open(sys.argv[2], os.O_RDONLY)
    network = {"sandbox": "sg-fake-1", "kind": "loopback", "group": 7, "user": False}
    line = json.dumps({"id": 1, "ok": True, "result": {"network": network}}) + "\n"
    socket.send_fds(c, [line.encode()], [fd])
    os.close(fd)
    c.close()
"#;
        let mut child = Command::new("python3")
            .args(["-c", fake, dir.join(LOOPBACK_SOCKET).to_str().unwrap(), ns])
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

/// What `connections` connections to the daemon's network socket of `kind` were answered,
/// each read to its end: `{"reply": LINE, "fds": N, "lines": N}`; with `unshare`, the client runs
/// in a pid namespace of its own (as a process inside a sandbox would).
fn connect_to_network_socket(s: &Scratch, kind: &str, connections: usize, unshare: bool) -> Value {
    let script = r#"
import json, os, socket, sys
path, n = sys.argv[1], int(sys.argv[2])
out = []
for _ in range(n):
    c = socket.socket(socket.AF_UNIX)
    c.connect(path)
    buf, fds = b"", []
    while True:
        msg, got, _, _ = socket.recv_fds(c, 65536, 16)
        fds += got
        if not msg:
            break
        buf += msg
    for fd in fds:
        os.close(fd)
    lines = buf.decode().splitlines()
    out.append({"reply": json.loads(lines[0]) if lines else None, "fds": len(fds), "lines": len(lines)})
    c.close()
print(json.dumps(out))
"#;
    let sock = s.root.join(format!("run/sandgate/network-{kind}.sock"));
    let (sock, n) = (sock.to_str().unwrap(), connections.to_string());
    let python = ["python3", "-c", script, sock, &n];
    let mut c = if unshare {
        let mut c = s.program(std::path::Path::new("unshare"));
        c.args(["--pid", "--fork"]).args(python);
        c
    } else {
        let mut c = s.program(std::path::Path::new(python[0]));
        c.args(&python[1..]);
        c
    };
    let out = c.output().unwrap();
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{o}\n{e}");
    serde_json::from_str(&o).unwrap_or_else(|err| panic!("{err}: {o}\n{e}"))
}

/// Connecting to a network socket is the request: each connection is answered with one line (a
/// network of the socket's kind, its descriptors with it, and the daemon's protocol) and closed,
/// each network to one connection only.
#[test]
fn each_connection_to_a_network_socket_is_answered_once() {
    let Some(who) = crate::support::sandbox::root() else { return };
    let s = Scratch::new(&who);
    let d = Daemon::start(&s, true);
    for (kind, fds) in [("loopback", 1), ("proxy", 5)] {
        let answers = connect_to_network_socket(&s, kind, 2, false);
        let mut ids = Vec::new();
        for a in answers.as_array().unwrap() {
            assert_eq!(a["lines"], 1, "{kind}: {a}");
            assert_eq!(a["reply"]["ok"], true, "{kind}: {a}");
            assert!(a["reply"]["result"]["protocol"].as_u64().is_some(), "{kind}: {a}");
            let network = &a["reply"]["result"]["network"];
            assert_eq!(network["kind"], kind, "{a}");
            assert_eq!(a["fds"], fds, "{kind}: {a}");
            ids.push(network["sandbox"].as_str().unwrap().to_owned());
        }
        assert_ne!(ids[0], ids[1], "{kind}: one network handed out twice");
    }
    assert_eq!(d.pool()["handed_out"], 4, "{}", d.pool());
}

/// A peer in another pid namespace (as a process inside a sandbox is) gets an error and no
/// network from the network sockets, as from the control socket. Control: the same client in
/// the daemon's namespace gets one.
#[test]
fn a_network_socket_refuses_a_peer_in_another_pid_namespace() {
    let Some(who) = crate::support::sandbox::root() else { return };
    let s = Scratch::new(&who);
    let d = Daemon::start(&s, true);
    let inside = connect_to_network_socket(&s, "loopback", 1, true);
    let a = &inside[0];
    assert_eq!(a["reply"]["ok"], false, "a peer in another pid namespace got an answer: {a}");
    let why = a["reply"]["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("inside a sandbox"), "{a}");
    assert_eq!(a["fds"], 0, "{a}");
    assert_eq!(d.pool()["handed_out"], 0, "{}", d.pool());
    let outside = connect_to_network_socket(&s, "loopback", 1, false);
    assert_eq!(outside[0]["fds"], 1, "control: {outside}");
    assert_eq!(d.pool()["handed_out"], 1, "{}", d.pool());
}

/// With the pool off the network sockets still answer, with no network and why (a launch then
/// makes its own; the answer also says the daemon's protocol).
#[test]
fn with_the_pool_off_a_network_socket_says_why() {
    let Some(who) = crate::support::sandbox::root() else { return };
    let s = Scratch::new(&who);
    let _d = Daemon::start(&s, false);
    let a = &connect_to_network_socket(&s, "proxy", 1, false)[0];
    assert_eq!(a["reply"]["ok"], true, "{a}");
    assert_eq!(a["reply"]["result"]["network"], Value::Null, "{a}");
    assert!(!a["reply"]["result"]["why"].as_str().unwrap_or_default().is_empty(), "{a}");
    assert!(a["reply"]["result"]["protocol"].as_u64().is_some(), "{a}");
    assert_eq!(a["fds"], 0, "{a}");
}

/// A runtime directory whose path leaves room for `control.sock` in a socket address (107 bytes)
/// but not for the longer network sockets' names: the daemon still starts and serves (it used
/// to refuse to start, and `net` then lost its approvals), and a `run` launch makes its own
/// network.
#[test]
fn a_runtime_directory_too_long_for_the_network_sockets_leaves_the_daemon_serving() {
    let Some(who) = crate::support::sandbox::root() else { return };
    let s = Scratch::new(&who);
    let base = s.root.join("r");
    // `<dir>/sandgate/control.sock` is 102 bytes, `<dir>/sandgate/network-loopback.sock` 111.
    let pad = 80usize.saturating_sub(base.as_os_str().len() + 1);
    let dir = base.join("x".repeat(pad.max(1)));
    assert_eq!(dir.as_os_str().len(), 80, "{}", dir.display());
    std::fs::create_dir_all(&dir).unwrap();
    let with_dir = |c: &mut Command| {
        c.env("XDG_RUNTIME_DIR", &dir);
    };
    let mut daemon = s.program(&sandgate_bin());
    daemon.arg("daemon").stdout(Stdio::null()).stderr(Stdio::piped());
    with_dir(&mut daemon);
    let mut child = daemon.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let answered = loop {
        let mut status = s.program(&sandgate_bin());
        status.arg("status");
        with_dir(&mut status);
        if status.output().unwrap().status.success() {
            break true;
        }
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut run = s.command("run", &[], &["true"]);
    with_dir(&mut run);
    let out = run.env("SANDGATE_DEBUG", "launch").output().unwrap();
    let mut stop = s.program(&sandgate_bin());
    stop.arg("stop");
    with_dir(&mut stop);
    let _ = stop.output();
    let _ = child.kill();
    let log = child.wait_with_output().map(|o| text(&o.stderr)).unwrap_or_default();
    assert!(answered, "the daemon did not start:\n{log}");
    let e = text(&out.stderr);
    assert!(out.status.success(), "{e}");
    assert!(!e.contains(JOINED), "a network came from a socket that cannot exist: {e}");
}

/// A daemon leaving when idle (`--idle-exit`) removes its network sockets with its control
/// socket.
#[test]
fn an_idle_daemon_leaves_no_network_socket_behind() {
    let Some(who) = crate::support::sandbox::root() else { return };
    let s = Scratch::new(&who);
    let dir = s.root.join("run/sandgate");
    let mut child = s
        .program(&sandgate_bin())
        .args(["daemon", "--idle-exit", "1s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let sockets = ["control.sock", LOOPBACK_SOCKET, "network-proxy.sock"];
    let deadline = Instant::now() + Duration::from_secs(20);
    while !sockets.iter().all(|n| dir.join(n).exists()) {
        assert!(Instant::now() < deadline, "the daemon's sockets never appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
    let exited = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exited.is_some(), "the idle daemon did not leave");
    let left: Vec<_> = sockets.iter().filter(|n| dir.join(n).exists()).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

both!(
    a_launch_joins_a_prepared_network_and_its_walls_hold,
    a_run_launch_joins_a_prepared_loopback_network,
    the_prepared_network_is_not_the_sandboxs_to_change,
    each_prepared_network_serves_one_sandbox,
);
