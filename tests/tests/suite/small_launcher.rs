//! The small launcher (`sandgate-launch`, what the `sandbox-*` links point at): the same sandbox
//! as `sandgate run|net|build`, the same answers on the command line, and whatever it cannot do
//! itself (help, mistakes, a proxy no daemon serves) handed to the `sandgate` binary next to it
//! before anything starts — or, without one there, refused with a line that says why.

use std::path::{Path, PathBuf};

use crate::netpool::{Daemon, JOINED};
use crate::support::sandbox::{HOST4, Scratch, TestHost, WRITE_REFUSED, Who, both, refused, text};
use sandgate_tests::{launcher_bin, sandgate_bin};

/// `sandbox-run`, `sandbox-net` and `sandbox-build` in `dir`, linked to `target`.
fn links(dir: &Path, target: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for t in ["run", "net", "build"] {
        std::os::unix::fs::symlink(target, dir.join(format!("sandbox-{t}"))).unwrap();
    }
}

/// The scratch tree's `sandbox-*` links to the built launcher.
fn linked(s: &Scratch) -> PathBuf {
    let dir = s.root.join("links");
    links(&dir, &launcher_bin());
    dir
}

/// (exit status, stdout, stderr) of `program args...` as the scratch tree's user.
fn outcome(s: &Scratch, program: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = s.program(program).args(args).output().unwrap();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// The launcher at `to`, for a test of it alone: a hard link where one can be made. A copy is
/// written through a descriptor that a process another test forks meanwhile holds until its
/// exec; executing the copy then fails with "Text file busy" (seen once in a CI rehearsal).
fn launcher_at(to: &Path) {
    if std::fs::hard_link(launcher_bin(), to).is_err() {
        std::fs::copy(launcher_bin(), to).unwrap();
    }
}

/// Every line the launcher hands over (help, version, mistakes) and every launch it makes
/// itself ends as `sandgate TIER` ends it: the same output on both streams, the same status.
fn it_answers_as_sandgate_does(who: &Who) {
    let s = Scratch::new(who);
    let dir = linked(&s);
    let _daemon = Daemon::start(&s, true);
    for (tier, args) in [
        ("run", &["--help"][..]),
        ("net", &["-V"]),
        ("build", &["--allow-write"]),
        ("run", &["--net", "sideways", "--", "true"]),
        ("net", &["--quiet=true", "--", "true"]),
        ("run", &["--", "sh", "-c", "echo out; echo err >&2; exit 3"]),
        ("net", &["--", "sh", "-c", "echo \"$SANDGATE_TIER\"; exit 4"]),
        ("build", &["--", "/nonexistent/command"]),
        ("build", &["--bogus"]),
    ] {
        let whole: Vec<&str> = [tier].iter().chain(args).copied().collect();
        let expected = outcome(&s, &sandgate_bin(), &whole);
        let got = outcome(&s, &dir.join(format!("sandbox-{tier}")), args);
        assert_eq!(got, expected, "sandbox-{tier} {args:?}");
    }
}

/// The launcher's own launches (a daemon runs: the proxy is its, the network made ahead) build
/// the tier's walls: the working directory read-only in `net`, writable in `build`; a direct
/// connection refused and reported; the proxy lets the allowed origin through and refuses
/// another.
fn its_own_launches_keep_every_wall(who: &Who) {
    let Some(_host) = TestHost::start() else { return };
    let s = Scratch::new(who);
    s.ask_timeout(1);
    let dir = linked(&s);
    let _daemon = Daemon::start(&s, true);
    let probe = s.probe.display().to_string();
    let port = sandgate_tests::origin("through the launcher\n");
    let script = format!(
        "python3 {probe} write in-net.txt; python3 {probe} talk {HOST4} 8080; \
         curl -sS --max-time 20 --noproxy '' http://127.0.0.1:{port}/; \
         curl -sS --max-time 20 --noproxy '' -o /dev/null -w '%{{http_code}}\\n' http://127.0.0.1:9/"
    );
    let allow = format!("--allow=127.0.0.1:{port}");
    let out = s
        .program(&dir.join("sandbox-net"))
        .args(["--report-blocked", &allow, "--deny=127.0.0.1:9", "sh", "-c", &script])
        .env("SANDGATE_DEBUG", "launch")
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains(JOINED), "the launch did not join a network made ahead:\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    refused(lines[0], WRITE_REFUSED, "sandbox-net: write cwd");
    assert!(!s.proj.join("in-net.txt").exists());
    let (answer, _ms) = lines[1].split_once(' ').unwrap_or((lines[1], ""));
    // Captured: the proxy refuses it (no echo from the test host comes back).
    assert!(["ECONNRESET", "EOF"].contains(&answer), "direct connection: {stdout}\n{stderr}");
    assert_eq!(lines[2], "through the launcher", "allowed origin: {stdout}\n{stderr}");
    assert_eq!(lines[3], "403", "denied origin: {stdout}\n{stderr}");
    assert!(stderr.contains(&format!("sandgate: denied {HOST4}:8080")), "not reported:\n{stderr}");
    let (_, stdout, stderr) =
        outcome(&s, &dir.join("sandbox-build"), &["python3", &probe, "write", "b.txt"]);
    assert_eq!(stdout.trim(), "ok", "{stderr}");
    assert!(s.proj.join("b.txt").exists());
    // git's ssh goes through `sandgate connect`, the `sandgate` binary (not the launcher), which
    // stays visible inside, as the launcher does.
    let main = sandgate_bin().canonicalize().unwrap();
    let script = format!(
        "echo \"$GIT_SSH_COMMAND\"; {} --version; {} true && echo nested",
        main.display(),
        dir.join("sandbox-run").display()
    );
    let (_, stdout, stderr) = outcome(&s, &dir.join("sandbox-net"), &["sh", "-c", &script]);
    let expected_ssh = format!(
        "ssh -o ProxyCommand='{} connect %h %p'\nsandgate {}\nnested\n",
        main.display(),
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(stdout, expected_ssh, "{stderr}");
    // `run --net proxy`: the daemon serves the proxy the flag asks for (the flag travels with
    // the registration), through the launcher and through `sandgate run` alike.
    let port = sandgate_tests::origin("run through the daemon");
    let allow = format!("--allow=127.0.0.1:{port}");
    let url = format!("http://127.0.0.1:{port}/");
    let curl = ["curl", "-sS", "--max-time", "20", "--noproxy", "", url.as_str()];
    let flags = ["--net", "proxy", allow.as_str()];
    let by_link: Vec<&str> = flags.iter().chain(&curl).copied().collect();
    let by_sandgate: Vec<&str> =
        ["run"].iter().chain(&flags).chain(&["--"]).chain(&curl).copied().collect();
    for (program, args) in [(dir.join("sandbox-run"), by_link), (sandgate_bin(), by_sandgate)] {
        let (code, stdout, stderr) = outcome(&s, &program, &args);
        assert_eq!((code, stdout.as_str()), (Some(0), "run through the daemon"), "{stderr}");
        assert!(!stderr.contains("in this process"), "the daemon did not take it: {stderr}");
    }
}

/// Without a daemon (`SANDGATE_NO_DAEMON=1`) the launch goes to `sandgate`, which serves the
/// proxy itself: the allowed origin answers, nothing is started in the background. The launcher
/// alone, with no `sandgate` beside it, refuses such a launch with a line that says why (and
/// starts nothing), while `run`, which needs no proxy, works.
fn it_hands_over_what_it_cannot_serve(who: &Who) {
    let s = Scratch::new(who);
    let dir = linked(&s);
    let port = sandgate_tests::origin("served by sandgate");
    let allow = format!("--allow=127.0.0.1:{port}");
    let url = format!("http://127.0.0.1:{port}/");
    let out = s
        .program(&dir.join("sandbox-net"))
        .args([&allow, "curl", "-sS", "--max-time", "20", "--noproxy", "", &url])
        .env("SANDGATE_NO_DAEMON", "1")
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout), "served by sandgate", "{}", text(&out.stderr));
    let status = outcome(&s, &sandgate_bin(), &["status"]);
    assert_ne!(status.0, Some(0), "a daemon was started: {status:?}");

    // The launcher alone.
    let alone = s.root.join("alone");
    std::fs::create_dir_all(&alone).unwrap();
    let copy = alone.join("sandgate-launch");
    launcher_at(&copy);
    links(&alone.join("bin"), &copy);
    let marker = s.proj.join("ran.txt");
    let (code, stdout, stderr) = outcome(
        &s,
        &alone.join("bin/sandbox-build"),
        &["sh", "-c", &format!("echo ran > {}", marker.display())],
    );
    let ours = stderr.contains("sandgate-launch hands") && stderr.contains("next to it");
    assert!(code == Some(2) && ours, "{code:?} {stdout} {stderr}");
    assert!(!marker.exists(), "the command ran without a proxy");
    let (code, stdout, stderr) =
        outcome(&s, &alone.join("bin/sandbox-run"), &["sh", "-c", "echo \"$SANDGATE_TIER\""]);
    assert_eq!((code, stdout.as_str()), (Some(0), "run\n"), "{stderr}");
    // A `sandgate` next to it that is the launcher itself (a copy under that name) is refused,
    // not run for ever.
    let itself = s.root.join("itself");
    std::fs::create_dir_all(&itself).unwrap();
    launcher_at(&itself.join("sandgate"));
    std::os::unix::fs::symlink(itself.join("sandgate"), itself.join("sandbox-run")).unwrap();
    let (code, _, stderr) = outcome(&s, &itself.join("sandbox-run"), &["--help"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("is this launcher, not the sandgate binary"), "{stderr}");
}

/// A daemon of another protocol (what runs after an upgrade until it is stopped: here one with
/// no network sockets) answers `hello` without this launcher's `protocol`: the launch goes to
/// `sandgate`, which says
/// the daemon is another version and serves the proxy itself; the command runs and reaches the
/// allowed origin. (Kept by the launcher, the launch would start and then find no daemon to
/// register with: the sandbox killed, the command cut short.)
fn a_daemon_of_another_protocol_gets_no_launch(who: &Who) {
    let s = Scratch::new(who);
    let dir = linked(&s);
    let socket = s.root.join("run/sandgate/control.sock");
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let fake = r#"
import json, socket, sys, threading
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(8)
print("ready", flush=True)
def serve(c):
    for line in c.makefile("r"):
        req = json.loads(line)
        if req.get("op") == "hello":
            result = {"protocol": 0, "version": "0.0.0", "pid": 1}
        else:
            result = {"network": None, "why": "none ready"}
        c.sendall((json.dumps({"id": req.get("id"), "ok": True, "result": result}) + "\n").encode())
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;
    let mut child = std::process::Command::new("python3")
        .args(["-c", fake, socket.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    let stdout = child.stdout.take().unwrap();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut ready).unwrap();
    assert_eq!(ready.trim(), "ready");
    std::process::Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", who.uid, who.gid))
        .arg(s.root.join("run"))
        .status()
        .unwrap();
    let port = sandgate_tests::origin("served all the same");
    let allow = format!("--allow=127.0.0.1:{port}");
    let url = format!("http://127.0.0.1:{port}/");
    let out = s
        .program(&dir.join("sandbox-net"))
        .args([&allow, "curl", "-sS", "--max-time", "20", "--noproxy", "", &url])
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let stderr = text(&out.stderr);
    assert_eq!(text(&out.stdout), "served all the same", "{stderr}");
    assert!(stderr.contains("speaks protocol 0"), "{stderr}");
}

/// Started with descriptors 0, 1 and 2 closed, the launcher opens them on `/dev/null` before
/// anything else (its entry is not Rust's start, which does this): the command gets them as
/// `/dev/null`, not closed, and never as a file or socket the launcher opened for itself.
fn its_closed_standard_descriptors_are_opened_on_dev_null(who: &Who) {
    let s = Scratch::new(who);
    let dir = linked(&s);
    let _daemon = Daemon::start(&s, true);
    let report = s.proj.join("fds.txt");
    let _ = std::fs::remove_file(&report);
    let probe = "import os\nwith open('fds.txt', 'w') as f:\n    for n in range(3):\n        \
                 p = f'/proc/self/fd/{n}'\n        \
                 f.write((os.readlink(p) if os.path.exists(p) else 'closed') + '\\n')\n";
    let status = s
        .program(Path::new("sh"))
        .args(["-c", r#"exec 0<&- 1>&- 2>&- "$@""#, "sh"])
        .arg(dir.join("sandbox-build"))
        .args(["python3", "-c", probe])
        .status()
        .unwrap();
    let fds = std::fs::read_to_string(&report).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "{fds}");
    assert_eq!(fds, "/dev/null\n/dev/null\n/dev/null\n");
}

/// A panic in the launcher ends it as Rust's start would (status 101), not with an abort
/// (`SIGABRT`, a core file): its entry is a C function a panic cannot unwind out of. Here its
/// message cannot be written (stderr is a pipe nobody reads) and writing it panics, as in
/// `sandbox-build make 2>&1 | head` once `head` has gone. `sandgate run` ends the same way.
fn a_panic_ends_it_with_101_not_an_abort(who: &Who) {
    let s = Scratch::new(who);
    let dir = linked(&s);
    let probe = "import os, subprocess, sys\n\
                 r, w = os.pipe()\n\
                 os.close(r)\n\
                 p = subprocess.run(sys.argv[1:], stderr=w, stdout=subprocess.DEVNULL)\n\
                 print(p.returncode)\n";
    let status = |program: &Path, args: &[&str]| {
        let out =
            s.program(Path::new("python3")).args(["-c", probe]).arg(program).args(args).output();
        text(&out.unwrap().stdout).trim().to_owned()
    };
    let big = status(&sandgate_bin(), &["run", "--", "no-such-command-xyz"]);
    assert_eq!(big, "101", "sandgate run: the reference");
    let small = status(&dir.join("sandbox-run"), &["no-such-command-xyz"]);
    assert_eq!(small, "101", "sandbox-run (-6 would be an abort)");
}

both!(
    a_panic_ends_it_with_101_not_an_abort,
    its_closed_standard_descriptors_are_opened_on_dev_null,
    it_answers_as_sandgate_does,
    its_own_launches_keep_every_wall,
    it_hands_over_what_it_cannot_serve,
    a_daemon_of_another_protocol_gets_no_launch,
);
