//! Red-team regressions for the networks the daemon makes ahead (`netpool`): attacks that were
//! tried against a sandbox in a prepared network and found CLOSED, kept so that they stay closed,
//! and one found OPEN and closed since (the route device's takeover, see its doc).
//!
//! Each test checks that the launch under attack did join a prepared network (the launcher's
//! "clone (into the prepared network)" timing line), so that a launch that quietly made its own
//! network cannot make it pass for the wrong reason.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use crate::netpool::{Daemon, JOINED};
use crate::support::sandbox::{
    HOST4, HOST6, SECCOMP_PY, Scratch, TestHost, Who, both, init_of, refused, root, text, unique,
};
use sandgate_tests::sandgate_bin;

/// A launcher running in the background: its stdout line by line, its stderr as it comes and at
/// the end. Killed when dropped unfinished (a failed assertion), and its sandbox with it.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
    /// The stderr read so far.
    err_so_far: Arc<Mutex<String>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.stderr.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Running {
    fn start(mut c: Command) -> Running {
        c.env("SANDGATE_DEBUG", "launch").stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let err = child.stderr.take().unwrap();
        let err_so_far = Arc::new(Mutex::new(String::new()));
        let so_far = err_so_far.clone();
        let stderr = std::thread::spawn(move || {
            for l in BufReader::new(err).lines() {
                let Ok(l) = l else { break };
                let mut s = so_far.lock().unwrap_or_else(|e| e.into_inner());
                s.push_str(&l);
                s.push('\n');
            }
            so_far.lock().unwrap_or_else(|e| e.into_inner()).clone()
        });
        Running { child, lines, stderr: Some(stderr), err_so_far }
    }

    /// Waits (up to 10 s) until the launcher's stderr has a line `line` (or one that starts
    /// with it, then a space: a denial's line goes on to say why).
    fn wait_stderr(&self, line: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let longer = format!("{line} ");
        loop {
            let so_far = self.err_so_far.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if so_far.lines().any(|l| l == line || l.starts_with(&longer)) {
                return;
            }
            assert!(Instant::now() < deadline, "no {line:?} from the launcher:\n{so_far}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The next stdout line that starts with `prefix` (others are skipped).
    fn line(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.starts_with(prefix) => return l,
                Ok(_) => {}
                Err(_) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    let err = self.stderr.take().map(|e| e.join().unwrap()).unwrap_or_default();
                    panic!("no {prefix:?} line from the sandbox; stderr:\n{err}");
                }
            }
        }
    }

    /// Waits for the launcher's end; returns (success, stderr).
    fn finish(mut self) -> (bool, String) {
        let status = self.child.wait().unwrap();
        let err = self.stderr.take().map(|e| e.join().unwrap()).unwrap_or_default();
        (status.success(), err)
    }
}

/// Writes `body` to `name` under the scratch root (readable inside every tier).
fn script(s: &Scratch, name: &str, body: &str) -> PathBuf {
    let p = s.root.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Waits until `pid` (a child of this process, killed) is dead: gone or a zombie.
fn wait_dead(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return,
            Ok(stat)
                if stat.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')) =>
            {
                return;
            }
            Ok(_) => {}
        }
        assert!(Instant::now() < deadline, "{pid} did not die");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn kill9(pid: u32) {
    let status = Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap();
    assert!(status.success(), "kill -9 {pid}");
    wait_dead(pid);
}

/// Allows one pathname unix socket in the global configuration, so that the sandbox may create
/// `AF_UNIX` sockets at all (without one, `socket(AF_UNIX)` is refused outright and abstract
/// sockets could not be tried). The socket is made here; it must exist to count.
fn allow_unix_sockets(s: &Scratch) -> std::os::unix::net::UnixListener {
    let path = s.root.join("allowed.sock");
    let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let _ = Command::new("chown").arg(format!("{}:{}", s.who.uid, s.who.gid)).arg(&path).status();
    std::fs::write(
        s.home.join(".config/sandgate/config.toml"),
        format!("[filesystem]\nunix_sockets = [\"{}\"]\n", p(&path)),
    )
    .unwrap();
    l
}

/// Listens inside sandbox A: an abstract unix socket, TCP on 127.0.0.1 and ::1, UDP on
/// 127.0.0.1; connects to each itself (the control: from inside the same network they answer);
/// prints both, then serves until the stop file appears, and says it is still alive.
const LISTENER_PY: &str = r#"import os, select, socket, sys
tag, port, stop = sys.argv[1], int(sys.argv[2]), sys.argv[3]
made, socks = [], []
def make(what, fam, typ, addr):
    try:
        s = socket.socket(fam, typ)
        if fam != socket.AF_UNIX:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(addr)
        if typ == socket.SOCK_STREAM:
            s.listen()
            socks.append(s)
        made.append(f"{what}=ok")
    except OSError as e:
        made.append(f"{what}={e.errno}")
make("abstract", socket.AF_UNIX, socket.SOCK_STREAM, "\0" + tag)
make("tcp4", socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", port))
make("tcp6", socket.AF_INET6, socket.SOCK_STREAM, ("::1", port))
make("udp4", socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", port))
def reach(fam, addr):
    try:
        c = socket.socket(fam, socket.SOCK_STREAM)
        c.settimeout(2)
        c.connect(addr)
        c.close()
        return "ok"
    except OSError as e:
        return str(e.errno)
print("LISTENING", " ".join(made), os.readlink("/proc/self/ns/net"), flush=True)
print("SELF", reach(socket.AF_UNIX, "\0" + tag), reach(socket.AF_INET, ("127.0.0.1", port)),
      reach(socket.AF_INET6, ("::1", port)), flush=True)
while not os.path.exists(stop):
    r, _, _ = select.select(socks, [], [], 0.02)
    for s in r:
        s.accept()[0].close()
print("ALIVE", flush=True)
"#;

/// Two sandboxes running at once in two prepared networks (rootless: both networks owned by the
/// same factory user namespace, both sandboxes' user namespaces children of it) cannot reach each
/// other: not A's abstract unix socket, not its TCP listeners on 127.0.0.1 or ::1; B sees another
/// network namespace; and B's `kill -9 -1` does not reach A. Control, in the test: A reaches its
/// own listeners (so a shared network would show as "ok" in B).
fn pooled_sandboxes_cannot_reach_each_other(who: &Who) {
    let s = Scratch::new(who);
    let _allowed = allow_unix_sockets(&s);
    let d = Daemon::start(&s, true);
    let listener = script(&s, "listener.py", LISTENER_PY);
    let tag = format!("sgrt-{}", unique(who));
    let stop = s.proj.join("stop-a");
    let port = "4711";
    let mut a =
        Running::start(s.command("net", &[], &["python3", p(&listener), &tag, port, p(&stop)]));
    let listening = a.line("LISTENING");
    assert!(
        listening.contains("abstract=ok") && listening.contains("tcp4=ok"),
        "A could not listen: {listening}"
    );
    let a_net = listening.split_whitespace().last().unwrap().to_owned();
    let own = a.line("SELF");
    assert_eq!(own, "SELF ok ok ok", "control: A cannot reach its own listeners");
    d.wait_pool(|p| p["ready"]["proxy"].as_u64() >= Some(1));
    let probe = p(&s.probe);
    let b_script = format!(
        "python3 {probe} abstract {tag}; python3 {probe} tcp 127.0.0.1 {port}; \
         python3 {probe} tcp ::1 {port}; readlink /proc/self/ns/net; kill -9 -1 2>/dev/null; \
         echo done"
    );
    let mut b = s.command("net", &[], &["sh", "-c", &b_script]);
    let out = b.env("SANDGATE_DEBUG", "launch").output().unwrap();
    let (b_out, b_err) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "B failed: {b_out}\n{b_err}");
    assert!(b_err.contains(JOINED), "B made its own network:\n{b_err}");
    let b: Vec<&str> = b_out.lines().collect();
    assert_eq!(b.len(), 5, "{b_out}");
    // ECONNREFUSED: no such socket in B's network namespace; EPERM: Landlock's scope (ABI 6)
    // refuses it even where the two share one.
    refused(b[0], &["ECONNREFUSED", "EPERM"], &format!("B reached A's abstract socket {tag}"));
    for (i, what) in [(1, "127.0.0.1"), (2, "::1")] {
        let answer = b[i].split_whitespace().next().unwrap_or("");
        assert_eq!(answer, "ECONNREFUSED", "B reached A's listener on {what} ({}): {b_out}", b[i]);
    }
    assert_ne!(b[3], a_net, "A and B share a network namespace");
    std::fs::write(&stop, "").unwrap();
    assert_eq!(a.line("ALIVE"), "ALIVE");
    let (ok, a_err) = a.finish();
    assert!(ok, "A failed:\n{a_err}");
    assert!(a_err.contains(JOINED), "A made its own network:\n{a_err}");
}

/// Runs in the sandbox: says its id, then probes the test host directly (TCP over IPv4 and IPv6
/// to the host's listener on 8080, UDP to 53, and TCP over IPv4 to port `9000 + N`, a port of
/// this step alone, so that its report tells which step it belongs to), prints
/// `step N: A / B / C / D`, then waits for `goN+1` in the directory `$1` before the next round,
/// until `stop`.
const STEPS_SH: &str = r#"d=$1; probe=$2; h4=$3; h6=$4; n=0
echo "id $SANDGATE_SANDBOX"
while :; do
  echo "step $n: $(python3 $probe talk $h4 8080) / $(python3 $probe talk $h6 8080) / $(python3 $probe udp $h4 53) / $(python3 $probe talk $h4 $((9000 + n)))"
  n=$((n+1))
  while [ ! -e $d/go$n ]; do [ -e $d/stop ] && exit 0; sleep 0.02; done
done
"#;

/// Asserts that every probe of a `step N: A ms / B ms / C ms / D ms` line was refused (never
/// "ok", never a timeout: a packet that left the firewall would wait for an answer; never
/// ENETUNREACH: that is a network without its route device, where a direct attempt is
/// unroutable and goes unreported). TCP over IPv4 and IPv6 (A, B, D) is captured and refused by
/// the proxy after its one-second question: a reset or the end of the stream, never the echo
/// host's answer. UDP is refused at once by the firewall with EPERM (the packet dropped on its
/// way out: `sendto` fails; what the probe gets here) or ECONNREFUSED.
#[track_caller]
fn all_refused(line: &str, when: &str) {
    let (_, answers) = line.split_once(": ").unwrap_or(("", line));
    let answers: Vec<&str> = answers.split(" / ").collect();
    assert_eq!(answers.len(), 4, "{line}");
    let captured = &["ECONNRESET", "EOF"][..];
    for (answer, allowed, at_once) in [
        (answers[0], captured, false),
        (answers[1], captured, false),
        (answers[2], &["EPERM", "ECONNREFUSED"][..], true),
        (answers[3], captured, false),
    ] {
        let (name, ms) = answer.split_once(' ').unwrap_or((answer, "0"));
        assert!(allowed.contains(&name), "{when}: a direct attempt was not refused: {line}");
        assert!(
            !at_once || ms.parse::<u64>().unwrap_or(u64::MAX) < 2000,
            "{when}: not refused at once: {line}"
        );
    }
}

/// `status --json` of the daemon that answers for `s` now (`Null` when none does).
fn status(s: &Scratch) -> serde_json::Value {
    let out = s.program(&sandgate_bin()).args(["status", "--json"]).output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

/// A sandbox in a prepared network whose daemon is killed (`kill -9`) while it runs: the
/// daemon held its route device, and that descriptor is gone with it. Direct connections stay
/// refused (TCP over IPv4 and IPv6 captured, UDP by the firewall at once; never open, never
/// unroutable); the
/// launcher starts the next daemon and registers the sandbox's sockets with it (as
/// docs/approvals.md says), and a direct attempt made once the new daemon lists the sandbox is reported again (its
/// port, 9002, is its own: no earlier attempt's report can pass for it). Control: the step-0
/// attempt is reported by the first daemon, before the kill.
fn a_pooled_sandbox_whose_daemon_was_killed_is_still_refused(who: &Who) {
    let Some(_host) = TestHost::start() else { return };
    let s = Scratch::new(who);
    s.ask_timeout(1);
    let d = Daemon::start(&s, true);
    let old = d.pid();
    let steps = script(&s, "steps.sh", STEPS_SH);
    let mut sandbox = Running::start(s.command(
        "net",
        &["--report-blocked"],
        &["sh", p(&steps), p(&s.proj), p(&s.probe), HOST4, HOST6],
    ));
    let id = sandbox.line("id ").trim_start_matches("id ").to_owned();
    assert!(id.starts_with("sg-"), "{id}");
    all_refused(&sandbox.line("step 0"), "with the daemon");
    sandbox.wait_stderr(&format!("sandgate: denied {HOST4}:9000"));
    kill9(old);
    std::fs::write(s.proj.join("go1"), "").unwrap();
    all_refused(&sandbox.line("step 1"), "after the daemon was killed");
    // The launcher starts the next daemon and registers the sandbox with it.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = status(&s);
        let pid = st["daemon"]["pid"].as_u64();
        let listed = st["sandboxes"]
            .as_array()
            .is_some_and(|l| l.iter().any(|b| b["id"].as_str() == Some(id.as_str())));
        if pid.is_some() && pid != Some(u64::from(old)) && listed {
            break;
        }
        assert!(Instant::now() < deadline, "no new daemon lists {id}: {st}");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::write(s.proj.join("go2"), "").unwrap();
    all_refused(&sandbox.line("step 2"), "with the next daemon");
    sandbox.wait_stderr(&format!("sandgate: denied {HOST4}:9002"));
    std::fs::write(s.proj.join("stop"), "").unwrap();
    let (ok, err) = sandbox.finish();
    assert!(ok, "{err}");
    assert!(err.contains(JOINED), "the launch made its own network:\n{err}");
    drop(d);
}

/// A tier whose flags take its network away never gets a proxy network: with `--net none` the
/// sandbox has only `lo` (it joins a prepared loopback network, as `run` does, and no proxy one
/// is taken from the pool); without it, the same launch joins a prepared network with its route
/// device (the control).
fn a_tier_without_network_never_joins_a_prepared_one(who: &Who) {
    let s = Scratch::new(who);
    let d = Daemon::start(&s, true);
    let devices = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '";
    let run = |args: &[&str]| {
        let out = s
            .command("net", args, &["sh", "-c", devices])
            .env("SANDGATE_DEBUG", "launch")
            .output()
            .unwrap();
        let (o, e) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{o}\n{e}");
        (o.trim().to_owned(), e.contains(JOINED))
    };
    let before = d.pool()["handed_out"].as_u64().unwrap();
    let (none, joined) = run(&["--net", "none"]);
    assert_eq!(none, "lo", "a tier without network has devices");
    assert!(joined, "the loopback network made ahead was not used");
    let pool = d.pool();
    assert_eq!(pool["handed_out"].as_u64(), Some(before + 1), "{pool}");
    assert_eq!(pool["ready"]["proxy"], 2, "a proxy network was taken for --net none: {pool}");
    let (proxy, joined) = run(&[]);
    assert!(joined && proxy.split(' ').count() > 1, "control: {proxy} (joined: {joined})");
}

/// The factory (`sandgate-netns`) killed: the networks it made before still serve, then
/// launches make their own; every launch is walled (a direct connection refused and reported),
/// the pool's status says something went wrong, and the daemon has reaped the dead factory.
fn a_dead_factory_leaves_every_launch_walled(who: &Who) {
    let Some(_host) = TestHost::start() else { return };
    let s = Scratch::new(who);
    s.ask_timeout(1);
    let d = Daemon::start(&s, true);
    let daemon = d.pid();
    let children = std::fs::read_dir(format!("/proc/{daemon}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
        .collect::<String>();
    let factory: u32 = children
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .find(|c| {
            std::fs::read_to_string(format!("/proc/{c}/comm"))
                .is_ok_and(|n| n.trim() == "sandgate-netns")
        })
        .expect("the daemon's network factory");
    kill9(factory);
    let mut joined = Vec::new();
    for _ in 0..3 {
        let out = s
            .command("net", &["--report-blocked"], &["python3", p(&s.probe), "talk", HOST4, "8080"])
            .env("SANDGATE_DEBUG", "launch")
            .output()
            .unwrap();
        let (o, e) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{o}\n{e}");
        // Captured and refused by the proxy: no echo from the test host came back.
        let refused = o.starts_with("ECONNRESET ") || o.starts_with("EOF ");
        assert!(refused, "a direct connection was not refused: {o}\n{e}");
        assert!(e.contains(&format!("sandgate: denied {HOST4}:8080")), "not reported:\n{e}");
        joined.push(e.contains(JOINED));
    }
    assert_eq!(joined, [true, true, false], "the ready networks first, then their own");
    // The daemon reaped its dead factory: no zombie left behind (a zombie keeps its /proc entry,
    // with State Z).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let status = std::fs::read_to_string(format!("/proc/{factory}/status"));
        let zombie = status.as_deref().is_ok_and(|st| {
            st.lines().any(|l| l.starts_with("State:") && l[6..].trim_start().starts_with('Z'))
        });
        if !zombie {
            break;
        }
        assert!(Instant::now() < deadline, "the killed factory {factory} was never reaped");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pool = d.pool();
    assert_eq!(pool["ready"]["proxy"], 0, "{pool}");
    assert_eq!(pool["on"], false, "{pool}");
    let error = pool["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("network factory"),
        "the pool's status says nothing of the factory: {pool}"
    );
}

both!(
    pooled_sandboxes_cannot_reach_each_other,
    a_pooled_sandbox_whose_daemon_was_killed_is_still_refused,
    a_tier_without_network_never_joins_a_prepared_one,
    a_dead_factory_leaves_every_launch_walled,
);

/// Runs the rest of its arguments without Landlock (the Landlock calls answer ENOSYS), as on a
/// kernel without it; a kernel whose Landlock is older than ABI 5 does not restrict device
/// ioctls either, which is what matters here. (After [`SECCOMP_PY`].)
const NO_LANDLOCK: &str = r#"ERRNO, ALLOW = 0x00050000, 0x7fff0000
prog = [
    (0x20, 0, 0, 0),                   # A = nr
    (0x35, 0, 2, 444),                 # nr >= 444 (landlock_create_ruleset)?
    (0x35, 1, 0, 447),                 #   nr >= 447: allow
    (0x06, 0, 0, ERRNO | 38),          #   444..446: ENOSYS
    (0x06, 0, 0, ALLOW),
]
install_and_exec(prog)
"#;

/// Attaches to the route device `sg0` (open /dev/net/tun read-only, TUNSETIFF); if that works,
/// makes it non-persistent and closes it, which deletes the device and its routes, and prints
/// `taken-over`. Otherwise prints the step that failed and its errno name (`TUNSETIFF:EPERM`).
const TAKE_OVER_PY: &str = r#"import errno, fcntl, os, struct
step = "open"
try:
    fd = os.open("/dev/net/tun", os.O_RDONLY)
    step = "TUNSETIFF"
    fcntl.ioctl(fd, 0x400454ca, struct.pack("16sH22x", b"sg0", 0x0001 | 0x1000))
    step = "TUNSETPERSIST"
    fcntl.ioctl(fd, 0x400454cb, 0)
    os.close(fd)
    print("taken-over")
except OSError as e:
    print(f"{step}:{errno.errorcode.get(e.errno, str(e.errno))}")
"#;

/// Found OPEN by the red team, closed since: a sandbox cannot take its route device over, even
/// once the daemon that held it is gone, because the seccomp filter refuses `TUNSETIFF` (the
/// ioctl that attaches to a tun), whatever Landlock can do (this test turns Landlock off, to
/// stand for a kernel without its device-ioctl right, ABI 5).
///
/// The threat: a prepared network's route device is a persistent tun with no owner or group,
/// and its only attached descriptor is the daemon's. When the daemon goes away while the sandbox
/// runs (killed, crashed, `sandgate stop`), the device stays, detached; a process that can open
/// `/dev/net/tun` inside that network namespace can attach to it (TUNSETIFF needs no capability
/// on a device without owner and group) and delete it (TUNSETPERSIST 0, close), after which
/// direct connections fail with ENETUNREACH before the firewall sees them, unreported.
///
/// Both runs (pool off: the sandbox's own network, held by init; pool on: a prepared one, the
/// daemon killed) expect the sandbox's attempt refused by the filter (`TUNSETIFF:EPERM`) and a
/// direct packet still refused by the firewall afterwards (UDP: refused by the firewall itself,
/// where TCP is captured and handed to a proxy that is gone with the daemon). The control, in the pool-on run,
/// last: the same script run by the test itself (outside the sandbox's filter) in the sandbox's
/// network namespace (`nsenter -n`) takes the device over, so the device really was detached
/// and attachable and the filter is what stopped the sandbox; the sandbox's next direct
/// connection is then ENETUNREACH (the harm the filter prevents).
#[test]
fn the_route_device_cannot_be_taken_over_once_the_daemon_is_gone() {
    let Some(who) = root() else { return };
    let Some(_host) = TestHost::start() else { return };
    for pool in [false, true] {
        let s = Scratch::new(&who);
        let d = Daemon::start(&s, pool);
        let wrapper = script(&s, "no_landlock.py", &format!("{SECCOMP_PY}{NO_LANDLOCK}"));
        let take_over = script(&s, "take_over.py", TAKE_OVER_PY);
        let (go, control) = (s.proj.join("go"), s.proj.join("control-done"));
        let inside = format!(
            "echo ready; while [ ! -e {go} ]; do sleep 0.02; done; \
             echo \"after: $(python3 {t}) $(python3 {probe} udp {HOST6} 53)\"; \
             while [ ! -e {control} ]; do sleep 0.02; done; \
             echo \"last: $(python3 {probe} udp {HOST6} 53)\"",
            go = p(&go),
            control = p(&control),
            t = p(&take_over),
            probe = p(&s.probe),
        );
        let mut c = s.program(Path::new("python3"));
        c.args([p(&wrapper), p(&sandgate_bin()), "net", "--report-blocked", "--"]);
        c.args(["sh", "-c", &inside]);
        let mut sandbox = Running::start(c);
        sandbox.line("ready");
        // The wrapper execs the launcher: same pid.
        let init = init_of(sandbox.child.id());
        kill9(d.pid());
        std::fs::write(&go, "").unwrap();
        let after = sandbox.line("after");
        let outside = pool.then(|| {
            let out = Command::new("nsenter")
                .args(["-t", &init.to_string(), "-n", "python3", p(&take_over)])
                .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
                .output()
                .unwrap();
            format!("{}{}", text(&out.stdout).trim(), text(&out.stderr).trim())
        });
        std::fs::write(&control, "").unwrap();
        let last = sandbox.line("last");
        let (ok, err) = sandbox.finish();
        drop(d);
        assert!(ok, "{err}");
        assert!(err.contains("Landlock is not available"), "Landlock was not off:\n{err}");
        assert_eq!(err.contains(JOINED), pool, "pool {pool}:\n{err}");
        let words: Vec<&str> = after.split_whitespace().collect();
        assert_eq!(
            words[1], "TUNSETIFF:EPERM",
            "pool {pool}: the sandbox's TUNSETIFF was not refused by the filter: {after}"
        );
        let refused = ["EPERM", "ECONNREFUSED"];
        assert!(refused.contains(&words[2]), "pool {pool}: {after}\n{err}");
        match outside {
            None => {
                let word = last.split_whitespace().nth(1).unwrap_or_default();
                assert!(refused.contains(&word), "pool off: {last}");
            }
            Some(outside) => {
                assert_eq!(
                    outside, "taken-over",
                    "control: the detached device could not be taken over from outside the \
                     filter, so the sandbox's refusal proves nothing"
                );
                assert!(
                    last.starts_with("last: ENETUNREACH "),
                    "control: the device deleted, yet: {last}"
                );
            }
        }
    }
}
