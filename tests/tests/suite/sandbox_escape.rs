//! Escape attempts from inside a sandbox; each must fail. Network targets are a test host in a
//! network namespace this test creates (reachable from outside, as a control).

use std::os::unix::net::UnixListener;
use std::process::{Command, Stdio};

use crate::support::sandbox::{self, HOST4, HOST6, Scratch, TestHost, Who, both, refused};
use sandgate_tests::sandgate_bin;

/// A blocked direct attempt must fail at once: refused with an errno (the firewall rejects),
/// never left to time out (a drop). The error's kind says which, whatever the machine's load: a
/// timing bound would fail on a busy CI host, not on a firewall that drops. The milliseconds the
/// probe prints are kept in the message for a person reading a failure.
#[track_caller]
fn refused_fast(answer: &str, what: &str) {
    let res = answer.split_whitespace().next().unwrap_or("");
    assert_ne!(res, "ok", "{what}: escaped ({answer})");
    assert!(
        res.starts_with('E') && res.bytes().skip(1).all(|b| b.is_ascii_uppercase()),
        "{what}: not refused with an errno, so dropped or broken ({answer})"
    );
    assert_ne!(res, "ETIMEDOUT", "{what}: dropped, not refused ({answer})");
}

fn direct_network_is_refused(who: &Who) {
    let Some(_host) = TestHost::start() else { return };
    let s = Scratch::new(who);
    // Nobody answers the question a captured connection asks: refused after a second.
    s.ask_timeout(1);
    for tier in ["run", "net", "build"] {
        // TCP in `net`/`build` (IPv4 and IPv6) is captured: the connect reaches the proxy,
        // which refuses (a reset or the end of the stream), so the echo host's answer never
        // comes back.
        let tcp = if tier == "run" { "tcp" } else { "talk" };
        for (op, host, port) in
            [(tcp, HOST4, "8080"), (tcp, HOST6, "8080"), ("udp", HOST4, "53"), ("udp", HOST6, "53")]
        {
            let answer = s.probe(tier, &[], &[op, host, port]);
            refused_fast(&answer, &format!("{tier} {op} {host}:{port}"));
        }
        // Without any proxy variable (an empty environment, curl told to go direct) nothing
        // gets through: in `run` curl's connect is refused at once (exit 7, "couldn't
        // connect"), where the test host's listener would have accepted it (exit 52/56 from a
        // non-HTTP peer); in `net`/`build` the captured request is answered by the proxy with a
        // 403 that says so (the echo host would have sent the request back, not a response).
        for url in [format!("http://{HOST4}:8080/"), format!("http://[{HOST6}]:8080/")] {
            let out = s.run(
                tier,
                &[],
                &[
                    "env",
                    "-i",
                    "PATH=/usr/bin:/bin",
                    "curl",
                    "-sS",
                    "--noproxy",
                    "*",
                    "--max-time",
                    "5",
                    "-D",
                    "-",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{time_total}",
                    &url,
                ],
            );
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            if tier != "run" {
                assert_eq!(out.status.code(), Some(0), "{tier}: curl {url}: {stderr}");
                assert!(stdout.starts_with("HTTP/1.1 403"), "{tier}: curl {url}: {stdout}");
                assert!(stdout.to_ascii_lowercase().contains("x-sandgate-decision: "), "{stdout}");
                eprintln!("{tier}: curl {url} refused by the proxy");
                continue;
            }
            let secs: f64 = stdout.trim().parse().unwrap_or(99.0);
            assert_eq!(
                out.status.code(),
                Some(7),
                "{tier}: curl {url} without proxy variables: {stderr}"
            );
            // Exit 7 is "couldn't connect" (refused); a drop would be 28 (timed out). The time
            // is printed, not bounded: a loaded machine is not a dropping firewall.
            eprintln!("{tier}: curl {url} refused in {secs} s");
        }
    }
}

fn blocked_attempts_are_reported(who: &Who) {
    let Some(_host) = TestHost::start() else { return };
    let s = Scratch::new(who);
    s.ask_timeout(1);
    let probe = s.probe.to_str().unwrap();
    let script = format!(
        "python3 {probe} talk {HOST4} 8080; python3 {probe} udp {HOST4} 53; \
         python3 {probe} talk {HOST6} 8443; python3 {probe} udp {HOST6} 53"
    );
    for tier in ["net", "build"] {
        let out = s.run(tier, &["--report-blocked"], &["sh", "-c", &script]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        for line in stdout.lines() {
            refused_fast(line, &format!("{tier}: {line}"));
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        // UDP by the firewall (NFLOG); TCP, captured, by the proxy.
        for want in [
            format!("sandgate: denied {HOST4}:8080"),
            format!("sandgate: blocked udp {HOST4}:53"),
            format!("sandgate: denied [{HOST6}]:8443"),
            format!("sandgate: blocked udp [{HOST6}]:53"),
        ] {
            assert!(stderr.contains(&want), "{tier}: no report {want:?} in:\n{stderr}");
        }
        assert!(!stderr.contains("blocked tcp "), "{tier}: {stderr}");
    }
}

fn raw_sockets_are_refused(who: &Who) {
    let s = Scratch::new(who);
    for tier in ["run", "net"] {
        refused(&s.probe(tier, &[], &["raw"]), &["EPERM", "EACCES"], "raw socket");
    }
}

/// Socket families beyond unix, IPv4, IPv6 and netlink are refused: AF_VSOCK reaches the
/// hypervisor host whatever the network namespace, AF_ALG and AF_PACKET are kernel surface no
/// command here needs. (family, type): AF_VSOCK stream, AF_ALG seqpacket, AF_PACKET dgram.
fn other_socket_families_are_refused(who: &Who) {
    let s = Scratch::new(who);
    // The filter is what refuses (seccomp answers before the kernel looks the family up): outside
    // (as root) the same calls work or meet a kernel without the family, never EPERM.
    for (family, kind) in [("40", "1"), ("38", "5")] {
        let out = std::process::Command::new("python3")
            .args([s.probe.to_str().unwrap(), "family", family, kind])
            .output()
            .unwrap();
        let outside = String::from_utf8_lossy(&out.stdout);
        assert!(["ok", "EAFNOSUPPORT"].contains(&outside.trim()), "outside {family}: {outside}");
    }
    for tier in ["run", "net", "build"] {
        for (family, kind) in [("40", "1"), ("38", "5"), ("17", "2")] {
            let answer = s.probe(tier, &[], &["family", family, kind]);
            refused(&answer, &["EPERM"], &format!("{tier}: socket({family}, {kind})"));
        }
        // socketpair: unix pairs only (AF_TIPC would make them, and load its module).
        refused(&s.probe(tier, &[], &["pair", "30", "5"]), &["EPERM"], "socketpair(AF_TIPC)");
        assert_eq!(s.probe(tier, &[], &["pair", "1", "1"]), "ok", "{tier}: socketpair(AF_UNIX)");
        // What commands need still works (unix sockets: see the unix socket test).
        for (family, kind) in [("2", "1"), ("10", "2"), ("16", "3")] {
            let answer = s.probe(tier, &[], &["family", family, kind]);
            assert_eq!(answer, "ok", "{tier}: socket({family}, {kind})");
        }
    }
}

/// Descriptors the caller left open (fd 3 and up) do not reach the command: through them it
/// would read hidden files and write outside, past every mount of the sandbox.
fn inherited_descriptors_are_closed(who: &Who) {
    let s = Scratch::new(who);
    let out_file = s.outside.join("through-fd.txt");
    std::fs::write(&out_file, "").unwrap();
    let _ = std::process::Command::new("chmod").arg("666").arg(&out_file).status();
    let inner = "echo pwned >&7 && echo fd7-open; cat /proc/self/fd/6/.ssh/id_rsa && echo fd6-open; \
                 ls /proc/self/fd | tr '\\n' ' '";
    let script = format!(
        "exec 6<\"$HOME\" 7>>'{}'; exec '{}' run -- sh -c '{}'",
        out_file.display(),
        sandgate_bin().display(),
        inner.replace('\'', r"'\''")
    );
    let out = s.program(std::path::Path::new("sh")).args(["-c", &script]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("fd7-open") && !stdout.contains("fd6-open"), "{stdout}");
    assert!(!stdout.contains("FAKE KEY"), "{stdout}");
    assert_eq!(std::fs::read_to_string(&out_file).unwrap(), "", "written through fd 7");
    // ls itself holds one descriptor (3) for /proc/self/fd while it lists.
    assert_eq!(stdout.lines().last().unwrap_or("").trim(), "0 1 2 3", "{stdout}");
}

fn unix_sockets_outside_are_unreachable(who: &Who) {
    let s = Scratch::new(who);
    // A pathname socket standing in for docker.sock, made outside, reachable by the user.
    let path = s.root.join("docker.sock");
    let _listener = UnixListener::bind(&path).unwrap();
    let _ = Command::new("chmod").arg("666").arg(&path).status();
    let answer = s.probe("build", &[], &["unix", path.to_str().unwrap()]);
    refused(&answer, &["EPERM", "EACCES", "ECONNREFUSED", "ENOENT"], "pathname unix socket");
    // An abstract socket made outside.
    use std::os::linux::net::SocketAddrExt as _;
    let name = format!("sandgate-test-{}-{}", std::process::id(), who.uid);
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _abstract = UnixListener::bind_addr(&addr).unwrap();
    let answer = s.probe("build", &[], &["abstract", &name]);
    refused(&answer, &["EPERM", "EACCES", "ECONNREFUSED"], "abstract unix socket");
}

/// Host-side unix listeners of each type (`unix_listeners.py`) at visible paths: started, then
/// `attempt` runs, then the listeners say what reached them.
fn unix_peers_reached(
    s: &Scratch,
    name: &str,
    attempt: impl FnOnce(&[String]) -> String,
) -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let dir = s.root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let _ = Command::new("chmod").arg("755").arg(&dir).status();
    let script = dir.join("listeners.py");
    std::fs::write(&script, UNIX_LISTENERS).unwrap();
    let paths: Vec<String> = ["dgram.sock", "stream.sock", "seqpacket.sock"]
        .iter()
        .map(|f| dir.join(f).to_str().unwrap().to_owned())
        .collect();
    let mut listeners = Command::new("python3")
        .arg(&script)
        .args(&paths)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(listeners.stdout.take().unwrap());
    let mut ready = String::new();
    out.read_line(&mut ready).unwrap();
    assert_eq!(ready.trim(), "ready", "the listeners did not start");
    let attempts = attempt(&paths);
    listeners.stdin.take().unwrap().write_all(b"").unwrap(); // dropped: closed
    let mut heard = String::new();
    out.read_to_string(&mut heard).unwrap();
    listeners.wait().unwrap();
    assert!(heard.trim_end().ends_with("end"), "listeners: {heard}\nattempts: {attempts}");
    heard
}

const UNIX_LISTENERS: &str = include_str!("support/unix_listeners.py");
const UNIX_PEERS: &str = include_str!("support/unix_peers.py");

/// No socket a sandbox holds can name a peer outside it (issue: datagram pairs re-addressed to
/// host sockets such as `/dev/log`). Every unix socket type, made by `socket`, as either end of a
/// `socketpair` or received over a pair, with every way to name a peer (`connect`, `sendto`,
/// `sendmsg` with a name, after `bind` to a path of its own, after the other end's `connect`), at
/// host listeners of each type: nothing arrives, in every tier. Control: the same attempts from
/// outside, as the same user, reach all three listeners.
fn no_sandboxed_socket_names_a_peer_outside(who: &Who) {
    let s = Scratch::new(who);
    let peers = s.root.join("unix_peers.py");
    std::fs::write(&peers, UNIX_PEERS).unwrap();
    let peers = peers.to_str().unwrap().to_owned();
    let control = unix_peers_reached(&s, "control", |targets| {
        let out = s.program(std::path::Path::new("python3")).arg(&peers).args(targets).output();
        sandbox::text(&out.unwrap().stdout)
    });
    for kind in ["dgram.sock got", "stream.sock accepted", "seqpacket.sock accepted"] {
        assert!(control.contains(kind), "control: nothing of {kind} from outside:\n{control}");
    }
    for tier in ["run", "net", "build"] {
        let heard = unix_peers_reached(&s, tier, |targets| {
            let mut cmd = vec!["python3", peers.as_str()];
            cmd.extend(targets.iter().map(String::as_str));
            let out = s.run(tier, &[], &cmd);
            let stdout = sandbox::text(&out.stdout);
            assert!(stdout.trim_end().ends_with("done"), "{tier}: {stdout}\n{out:?}");
            stdout
        });
        assert_eq!(heard.trim(), "end", "{tier} as {who:?}: reached the host:\n{heard}");
    }
}

fn outside_processes_are_out_of_reach(who: &Who) {
    let s = Scratch::new(who);
    let mut outside = Command::new("setpriv")
        .args(["--reuid", &who.uid.to_string(), "--regid", &who.gid.to_string(), "--clear-groups"])
        .args(["sleep", "30"])
        .spawn()
        .unwrap();
    let pid = outside.id().to_string();
    refused(&s.probe("run", &[], &["kill", &pid]), &["ESRCH", "EPERM"], "kill outside");
    refused(&s.probe("run", &[], &["ptrace", &pid]), &["ESRCH", "EPERM"], "ptrace outside");
    let _ = outside.kill();
    let _ = outside.wait();
}

fn terminal_injection_is_refused(who: &Who) {
    let s = Scratch::new(who);
    // `script` gives the launcher a terminal as stdin and controlling terminal.
    let inner = s.command("run", &[], &["python3", s.probe.to_str().unwrap(), "tiocsti"]);
    let mut line = format!("{:?}", inner.get_program());
    for a in inner.get_args() {
        line.push(' ');
        line.push_str(&shell_quote(a.to_str().unwrap()));
    }
    let envs: Vec<String> = inner
        .get_envs()
        .filter_map(|(k, v)| Some(format!("{}={}", k.to_str()?, shell_quote(v?.to_str()?))))
        .collect();
    let cmd =
        format!("cd {} && env -i {} {line}", shell_quote(s.proj.to_str().unwrap()), envs.join(" "));
    let out = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("EPERM") || text.contains("EIO"), "TIOCSTI: {text}");
    assert!(!text.lines().any(|l| l.trim() == "ok"), "TIOCSTI worked: {text}");
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn setuid_binaries_give_nothing(who: &Who) {
    let s = Scratch::new(who);
    let id = s.root.join("suid-id");
    crate::support::sandbox::copy_program(std::path::Path::new("/usr/bin/id"), &id);
    // Owned by nobody with the setuid bit: running it must not make us nobody.
    let _ = Command::new("chown").args(["65534:65534"]).arg(&id).status();
    let _ = Command::new("chmod").args(["4755"]).arg(&id).status();
    let out = s.run("run", &[], &[id.to_str().unwrap(), "-u"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), who.uid.to_string());
}

/// Runs `cmd` in `tier`; asserts it failed and that its stderr says why (`reason`).
#[track_caller]
fn fails_for(s: &Scratch, tier: &str, cmd: &[&str], reasons: &[&str]) {
    let out = s.run(tier, &[], cmd);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{tier}: {cmd:?} worked as {:?}", s.who);
    assert!(
        reasons.iter().any(|r| stderr.contains(r)),
        "{tier}: {cmd:?} failed, but not with one of {reasons:?}: {stderr}"
    );
}

fn namespaces_mounts_and_firewall_stay_shut(who: &Who) {
    let Some(_host) = TestHost::start() else { return };
    let s = Scratch::new(who);
    s.ask_timeout(1);
    let probe = s.probe.to_str().unwrap();
    const EPERM: &str = "Operation not permitted";
    // util-linux's mount says "permission denied" for the kernel's EPERM, and refuses by itself
    // when not uid 0 (the syscall probes below check the kernel either way).
    const MOUNT: &[&str] = &["permission denied", "must be superuser"];
    for tier in ["run", "net", "build"] {
        // The tools are there: a failure below is a refusal, not a missing binary.
        let (which, _) = s.sh(tier, &[], "which unshare nft mount");
        assert_eq!(which.lines().count(), 3, "{tier}: {which}");
        fails_for(&s, tier, &["unshare", "-r", "true"], &[EPERM]);
        fails_for(&s, tier, &["unshare", "-n", "true"], &[EPERM]);
        fails_for(&s, tier, &["unshare", "-m", "true"], &[EPERM]);
        fails_for(&s, tier, &["mount", "-t", "tmpfs", "none", "/mnt"], MOUNT);
        fails_for(&s, tier, &["mount", "-o", "remount,rw", "/"], MOUNT);
        fails_for(&s, tier, &["nft", "flush", "ruleset"], &[EPERM]);
        // The kernel's own answers, without the tools' checks in between.
        for flags in ["0x10000000", "0x40000000", "0x20000"] {
            // CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWNS
            refused(&s.probe(tier, &[], &["unshare", flags]), &["EPERM"], "unshare(2)");
        }
        refused(&s.probe(tier, &[], &["mount", "/mnt"]), &["EPERM"], "mount(2)");
        refused(&s.probe(tier, &[], &["io_uring"]), &["EPERM", "ENOSYS"], "io_uring_setup");
        // The x32 ABI (syscall numbers with bit 30 set) is refused by the filter itself, not
        // merely missing from this kernel: outside the same call is ENOSYS or works.
        if cfg!(target_arch = "x86_64") {
            let outside = std::process::Command::new("python3")
                .args([s.probe.to_str().unwrap(), "x32"])
                .output()
                .unwrap();
            let outside = String::from_utf8_lossy(&outside.stdout);
            assert!(!outside.starts_with("EPERM"), "outside: {outside}");
            refused(&s.probe(tier, &[], &["x32"]), &["EPERM"], "an x32 system call");
        }
        // No capability in any set, and no way to gain one.
        let (status, _) = s.sh(tier, &[], "cat /proc/self/status");
        for field in ["CapPrm", "CapEff", "CapBnd", "CapAmb", "CapInh"] {
            let line = status.lines().find(|l| l.starts_with(&format!("{field}:")));
            let value = line.and_then(|l| l.split_whitespace().nth(1));
            assert_eq!(value, Some("0000000000000000"), "{tier}: {field} in {status}");
        }
        let nnp = status.lines().find(|l| l.starts_with("NoNewPrivs:"));
        assert_eq!(
            nnp.map(|l| l.split_whitespace().collect::<Vec<_>>()),
            Some(vec!["NoNewPrivs:", "1"]),
            "{tier}"
        );
    }
    // The firewall survives an attempt to flush it from inside: TCP is still captured
    // (refused by the proxy: no echo comes back), UDP still refused at once.
    for tier in ["net", "build"] {
        let script = format!(
            "nft flush ruleset 2>/dev/null; python3 {probe} talk {HOST4} 8080; \
             python3 {probe} talk {HOST6} 8080; python3 {probe} udp {HOST6} 53"
        );
        let (out, _) = s.sh(tier, &[], &script);
        for line in out.lines() {
            refused_fast(line, &format!("{tier}: tcp after nft flush"));
        }
        assert_eq!(out.lines().count(), 3, "{tier}: {out}");
    }
}

/// The newest mount and attribute calls (newer than most libc tables) are refused inside:
/// `open_tree_attr`, `statmount`, `listmount` with EPERM like the older mount calls, the `*xattrat`
/// and `file_{get,set}attr` calls with ENOSYS (callers fall back to the older calls). Control:
/// outside, this kernel answers each with something else (it has them all).
fn the_newest_mount_and_attribute_calls_are_refused(who: &Who) {
    let s = Scratch::new(who);
    let script = r#"
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
for name, nr in [("statmount", 457), ("listmount", 458), ("setxattrat", 463), ("getxattrat", 464),
                 ("listxattrat", 465), ("removexattrat", 466), ("open_tree_attr", 467),
                 ("file_getattr", 468), ("file_setattr", 469)]:
    r = libc.syscall(nr, -1, 0, 0, 0, 0, 0)
    e = ctypes.get_errno()
    print(name, "ok" if r >= 0 else errno.errorcode.get(e, str(e)))
"#;
    let answers = |out: &[u8]| -> Vec<(String, String)> {
        sandbox::text(out)
            .lines()
            .filter_map(|l| l.split_once(' ').map(|(a, b)| (a.to_owned(), b.to_owned())))
            .collect()
    };
    let outside = std::process::Command::new("python3").args(["-c", script]).output().unwrap();
    let outside = answers(&outside.stdout);
    assert_eq!(outside.len(), 9, "{outside:?}");
    let kernel_has_them = outside.iter().all(|(_, e)| e != "ENOSYS" && e != "EPERM");
    if !kernel_has_them {
        eprintln!(
            "SKIPPED control of the_newest_mount_and_attribute_calls_are_refused: {outside:?}"
        );
    }
    for tier in ["run", "build"] {
        let (out, _) = s.sh(tier, &[], &format!("python3 -c '{}'", script.replace('\'', "\"")));
        let inside = answers(out.as_bytes());
        assert_eq!(inside.len(), 9, "{tier}: {out}");
        for (name, e) in inside {
            let want =
                if name.contains("mount") || name == "open_tree_attr" { "EPERM" } else { "ENOSYS" };
            assert_eq!(e, want, "{tier}: {name}");
        }
    }
}

/// Answers each system call number of its arguments twice (after [`sandbox::SECCOMP_PY`];
/// argv: the numbers of `seccomp` and `getppid`, then the numbers to call). First `plain NR
/// ANSWER`; then, under a filter of its own (stacked on whatever filters the process has) that
/// hands those numbers and `getppid` to a listener of its own answering 4242, `stacked NR ANSWER
/// heard|unheard`. ANSWER is the errno name or `ok VALUE`.
const ABOVE_THE_TABLE: &str = r#"import errno, select, threading, time
SECCOMP, GETPPID, numbers = int(sys.argv[1]), int(sys.argv[2]), [int(n) for n in sys.argv[3:]]
def call(nr):
    r = libc.syscall(ctypes.c_long(nr), 0, 0, 0, 0, 0)
    return f"ok {r}" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
for nr in numbers:
    print("plain", nr, call(nr), flush=True)
USER_NOTIF, ALLOW = 0x7fc00000, 0x7fff0000
prog = [(0x20, 0, 0, 0)]                                  # A = nr
for nr in numbers + [GETPPID]:
    prog.append((0x15, 0, 1, nr))                         # nr?
    prog.append((0x06, 0, 0, USER_NOTIF))                 #   to the listener
prog.append((0x06, 0, 0, ALLOW))
insns = (Insn * len(prog))(*[Insn(*i) for i in prog])
assert libc.prctl(38, 1, 0, 0, 0) == 0                    # PR_SET_NO_NEW_PRIVS
# SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER
listener = libc.syscall(ctypes.c_long(SECCOMP), 1, 8, ctypes.byref(Prog(len(prog), insns)))
assert listener >= 0, ctypes.get_errno()
RECV, SEND = ctypes.c_ulong(0xC0502100), ctypes.c_ulong(0xC0182101)  # SECCOMP_IOCTL_NOTIF_*
for nr in numbers + [GETPPID]:
    answer = []
    t = threading.Thread(target=lambda: answer.append(call(nr)), daemon=True)
    t.start()
    heard, poll, deadline = False, select.poll(), time.monotonic() + 10
    poll.register(listener, select.POLLIN)
    while t.is_alive() and time.monotonic() < deadline:
        if poll.poll(50):
            notif = ctypes.create_string_buffer(80)            # struct seccomp_notif, zeroed
            assert libc.ioctl(listener, RECV, notif) == 0, ctypes.get_errno()
            heard = int.from_bytes(notif.raw[16:20], "little") == nr
            resp = notif.raw[0:8] + (4242).to_bytes(8, "little") + bytes(8)  # id, val, error 0
            assert libc.ioctl(listener, SEND, ctypes.create_string_buffer(resp, 24)) == 0
    t.join(1)
    got = answer[0] if answer else "stuck"
    print("stacked", nr, got, "heard" if heard else "unheard", flush=True)
"#;

/// System call numbers above the seccomp filter's table (470 and up: calls of kernels newer than
/// the filter) are answered `ENOSYS`, as a kernel without them would: not run, not `EPERM`
/// (callers fall back to older calls on `ENOSYS` only).
///
/// `ENOSYS` alone would not show who answered on a kernel without those calls (Linux 6.18 has
/// none above 469), so the script also stacks a filter of its own handing the same numbers to a
/// listener that answers 4242: the kernel takes the most restrictive of the filters' answers, so
/// inside the sandbox the listener must never hear of them (the sandbox's `ENOSYS` wins over
/// "ask the listener", where an allow would not). Controls: inside, the listener does answer
/// `getppid` (which the sandbox allows), so it works there; outside it answers every number.
fn calls_above_the_filter_table_are_enosys(who: &Who) {
    let s = Scratch::new(who);
    let script = s.root.join("above_the_table.py");
    std::fs::write(&script, format!("{}{ABOVE_THE_TABLE}", sandbox::SECCOMP_PY)).unwrap();
    const NUMBERS: [&str; 4] = ["470", "471", "511", "1023"];
    let (seccomp, getppid) = (SYS_SECCOMP.to_string(), SYS_GETPPID.to_string());
    let mut argv = vec!["python3", script.to_str().unwrap(), &seccomp, &getppid];
    argv.extend(NUMBERS);
    let lines =
        |out: &[u8]| -> Vec<String> { sandbox::text(out).lines().map(String::from).collect() };

    let outside = Command::new(argv[0]).args(&argv[1..]).output().unwrap();
    let outside_lines = lines(&outside.stdout);
    for nr in NUMBERS {
        let stacked = format!("stacked {nr} ok 4242 heard");
        assert!(outside_lines.contains(&stacked), "outside, no {stacked:?}: {outside:?}");
    }
    let plain_outside: Vec<&String> =
        outside_lines.iter().filter(|l| l.starts_with("plain")).collect();
    eprintln!("outside, this kernel answers: {plain_outside:?}");

    let out = s.run("run", &[], &argv);
    let inside = lines(&out.stdout);
    assert!(out.status.success(), "run: {:?}\n{}", out.status, sandbox::text(&out.stderr));
    for nr in NUMBERS {
        for want in [format!("plain {nr} ENOSYS"), format!("stacked {nr} ENOSYS unheard")] {
            assert!(inside.contains(&want), "run: no {want:?} in {inside:?}");
        }
    }
    let control = format!("stacked {getppid} ok 4242 heard");
    assert!(inside.contains(&control), "run: no {control:?} in {inside:?}");
}

/// `seccomp(2)` and `getppid(2)` on the architecture the tests run on.
const SYS_SECCOMP: u32 = if cfg!(target_arch = "x86_64") { 317 } else { 277 };
const SYS_GETPPID: u32 = if cfg!(target_arch = "x86_64") { 110 } else { 173 };

both!(
    direct_network_is_refused,
    blocked_attempts_are_reported,
    raw_sockets_are_refused,
    other_socket_families_are_refused,
    inherited_descriptors_are_closed,
    unix_sockets_outside_are_unreachable,
    no_sandboxed_socket_names_a_peer_outside,
    outside_processes_are_out_of_reach,
    terminal_injection_is_refused,
    setuid_binaries_give_nothing,
    namespaces_mounts_and_firewall_stay_shut,
    the_newest_mount_and_attribute_calls_are_refused,
    calls_above_the_filter_table_are_enosys,
);
