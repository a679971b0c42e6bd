//! Interactive use: the launcher run on a terminal (a pty made by the test) gives the command a
//! pseudo-terminal of its own, with job control, window size, raw-mode relay and no way to
//! inject input into the caller's terminal. As root and as an unprivileged user.

use std::process::Command;

use crate::support::sandbox::{Scratch, Who, both, unique};

/// Runs a command on a new pty and plays a script of steps against it. Prints one JSON object:
/// `ok`, `error`, `step`, `output` (everything the terminal showed), `code` (exit status),
/// `outer_pending` (bytes left in the terminal's input queue after the command ended: anything
/// injected into the caller's terminal would be there).
const DRIVER: &str = r#"
import fcntl, json, os, re, select, signal, struct, subprocess, sys, termios, time

spec = json.load(sys.stdin)
master, slave = os.openpty()
rows, cols = spec.get("size", [24, 80])
fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

def ctty():
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)

proc = subprocess.Popen(spec["argv"], env=spec["env"], cwd=spec["cwd"], stdin=slave,
                        stdout=slave, stderr=slave, preexec_fn=ctty, close_fds=True)
out = bytearray()
cursor = 0
TIMEOUT = 20

def pump(wait):
    r, _, _ = select.select([master], [], [], wait)
    if r:
        try:
            out.extend(os.read(master, 65536))
        except OSError:
            pass

def until(cond, what):
    deadline = time.monotonic() + TIMEOUT
    while not cond():
        if proc.poll() is not None:
            pump(0.1)
            if cond():
                return
            raise Exception(f"the launcher exited ({proc.returncode}) before " + what)
        if time.monotonic() > deadline:
            raise Exception("timed out waiting for " + what)
        pump(0.02)

def procs(needle):
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if f.read().replace(b"\0", b" ").strip() == needle.encode():
                        found.append(pid)
            except OSError:
                pass
    return found

def state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]

def lflag():
    return termios.tcgetattr(slave)[3]

result = {"ok": True, "error": None, "step": None}
try:
    for i, step in enumerate(spec["steps"]):
        result["step"] = i
        kind, arg = next(iter(step.items()))
        if kind == "send":
            os.write(master, arg.encode())
        elif kind == "expect":
            def seen():
                global cursor
                m = re.compile(arg.encode()).search(out, cursor)
                if m:
                    cursor = m.end()
                return m is not None
            until(seen, repr(arg))
        elif kind == "resize":
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", arg[0], arg[1], 0, 0))
        elif kind == "running":
            until(lambda: procs(arg), "process " + arg)
        elif kind == "gone":
            until(lambda: not procs(arg), "end of " + arg)
        elif kind == "signal":
            os.kill(proc.pid, getattr(signal, "SIG" + arg))
        elif kind == "state":
            until(lambda: state(proc.pid) == arg, "launcher state " + arg)
        elif kind == "terminal":
            want = arg == "cooked"
            until(lambda: bool(lflag() & termios.ICANON) == want and bool(lflag() & termios.ECHO) == want,
                  "terminal " + arg)
    result["step"] = "exit"
    deadline = time.monotonic() + TIMEOUT
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            raise Exception("the launcher did not exit")
        pump(0.02)
    pump(0)
    result["code"] = proc.returncode
    # Whatever is left in the caller's terminal's input queue (raw, so partial lines count).
    attrs = termios.tcgetattr(slave)
    result["restored"] = bool(attrs[3] & termios.ICANON) and bool(attrs[3] & termios.ECHO)
    attrs[3] &= ~termios.ICANON
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    n = fcntl.ioctl(slave, termios.FIONREAD, struct.pack("i", 0))
    result["outer_pending"] = struct.unpack("i", n)[0]
except Exception as e:
    result["ok"] = False
    result["error"] = str(e)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    pump(0)
result["output"] = out.decode("utf-8", "replace")
print(json.dumps(result))
"#;

/// What the driver reported.
struct Session {
    code: Option<i64>,
    output: String,
    outer_pending: i64,
    restored: bool,
}

/// Runs `sandgate TIER -- CMD` as `s.who` on a `rows`×`cols` terminal through `steps`.
fn session(
    s: &Scratch,
    tier: &str,
    cmd: &[&str],
    size: (u16, u16),
    steps: serde_json::Value,
) -> Session {
    let c = s.command(tier, &[], cmd);
    let mut argv = vec![c.get_program().to_str().unwrap().to_owned()];
    argv.extend(c.get_args().map(|a| a.to_str().unwrap().to_owned()));
    let mut env: serde_json::Map<String, serde_json::Value> = c
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_str()?.to_owned(), v?.to_str()?.into())))
        .collect();
    // What a terminal emulator sets.
    env.entry("TERM").or_insert("xterm-256color".into());
    let spec = serde_json::json!({
        "argv": argv,
        "env": env,
        "cwd": s.proj,
        "size": [size.0, size.1],
        "steps": steps,
    });
    let mut child = Command::new("python3")
        .args(["-c", DRIVER])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(spec.to_string().as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value =
        serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("driver output {text:?}: {e}"));
    let output = v["output"].as_str().unwrap_or_default().to_owned();
    assert!(
        v["ok"].as_bool() == Some(true),
        "as {:?}: step {} failed: {}\n--- terminal ---\n{output}",
        s.who,
        v["step"],
        v["error"]
    );
    Session {
        code: v["code"].as_i64(),
        output,
        outer_pending: v["outer_pending"].as_i64().unwrap_or(-1),
        restored: v["restored"].as_bool().unwrap_or(false),
    }
}

/// `sandgate run` without a command: `$SHELL -i` (here /bin/sh) with working job control.
fn an_interactive_shell_has_job_control(who: &Who) {
    let s = Scratch::new(who);
    let u = unique(who);
    let bg = format!("sleep 100.{u}");
    let fg = format!("sleep 57.{u}");
    let stopped = format!("sleep 58.{u}");
    let steps = serde_json::json!([
        {"send": "echo ready-$((40+2))\n"},
        {"expect": "ready-42"},
        // A background job and `jobs`.
        {"send": format!("{bg} &\n")},
        {"running": bg},
        {"send": "jobs\n"},
        {"expect": format!(r"\[1\][^\n]*Running[^\n]*{bg}")},
        // Ctrl-C interrupts the foreground job, not the shell.
        {"send": format!("echo fg-$((2+3)); {fg}\n")},
        {"expect": "fg-5"},
        {"running": fg},
        {"send": "\u{3}"},
        {"gone": fg},
        {"send": "echo alive-$((6*7))\n"},
        {"expect": "alive-42"},
        // Ctrl-Z stops the foreground job and gives the prompt back.
        {"send": format!("{stopped}\n")},
        {"running": stopped},
        {"send": "\u{1a}"},
        {"expect": format!(r"Stopped[^\n]*{stopped}")},
        {"send": "jobs\n"},
        {"expect": format!(r"Running[^\n]*{bg}")},
        {"send": "kill -9 %1 %2; echo killed-$((1+1))\n"},
        {"expect": "killed-2"},
        {"gone": bg},
        {"gone": stopped},
        {"send": "wait; echo reaped-$((2*2))\n"},
        {"expect": "reaped-4"},
        // `exec`, not `exit`: the shell may not have collected the killed stopped job yet, and
        // `exit` would then answer "You have stopped jobs." instead of exiting.
        {"send": "exec sh -c 'exit 7'\n"},
    ]);
    let out = session(&s, "run", &[], (24, 80), steps);
    assert_eq!(out.code, Some(7), "exit code of the shell\n{}", out.output);
    assert!(out.restored, "the caller's terminal is back in cooked mode");
    for p in [&bg, &fg, &stopped] {
        let left = Command::new("pgrep").args(["-f", p]).output().unwrap();
        assert!(left.stdout.is_empty(), "{p} outlived the sandbox");
    }
}

/// `stty size` inside sees the caller's size, and a later change of it.
fn the_window_size_is_propagated(who: &Who) {
    let s = Scratch::new(who);
    let steps = serde_json::json!([
        {"expect": r"37 101\r?\n"},
        {"resize": [50, 132]},
        {"send": "go\r"},
        {"expect": r"50 132\r?\n"},
    ]);
    let script = "stty size; read x; stty size";
    let out = session(&s, "run", &["sh", "-c", script], (37, 101), steps);
    assert_eq!(out.code, Some(0), "{}", out.output);
}

/// Colours work: the command sees the caller's `TERM` (so `tput` finds 256 colours) and its
/// escape sequences reach the caller's terminal unchanged.
fn colours_reach_the_terminal(who: &Who) {
    let s = Scratch::new(who);
    let script = r#"[ -t 1 ] && t=yes; printf 'term=%s colors=%s tty=%s\n' "$TERM" "$(tput colors)" "$t"; printf '\033[1;31mred\033[0m-done\n'"#;
    let steps = serde_json::json!([{"expect": "-done"}]);
    let out = session(&s, "run", &["sh", "-c", script], (24, 80), steps);
    assert_eq!(out.code, Some(0), "{}", out.output);
    assert!(out.output.contains("term=xterm-256color colors=256 tty=yes"), "{:?}", out.output);
    assert!(out.output.contains("\u{1b}[1;31mred\u{1b}[0m-done"), "{:?}", out.output);
}

/// TIOCSTI from inside reaches no terminal: not the caller's (nothing is left in its input
/// queue and no shell runs the injected line) and, refused by seccomp, not the sandbox's pty.
fn terminal_injection_reaches_nothing(who: &Who) {
    let s = Scratch::new(who);
    let attempt = r#"import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
line = b"echo INJ-$((6*7))\n"
def sti(fd, req):
    for b in line:
        c = ctypes.c_char(bytes([b]))
        if libc.ioctl(fd, ctypes.c_ulong(req), ctypes.byref(c)) != 0:
            return errno.errorcode[ctypes.get_errno()]
    return "ok"
tty = os.open("/dev/tty", os.O_RDWR)
print("sti", sti(0, 0x5412), sti(tty, 0x5412), sti(0, 0x5412 | (1 << 32)), "done-" + str(6 * 7 + 1))
"#;
    let path = s.root.join("sti.py");
    std::fs::write(&path, attempt).unwrap();
    let steps = serde_json::json!([
        {"send": format!("python3 {}\n", path.display())},
        {"expect": r"sti (\S+) (\S+) (\S+) done-43"},
        {"send": "exit 3\n"},
    ]);
    let out = session(&s, "run", &["sh", "-i"], (24, 80), steps);
    assert_eq!(out.code, Some(3), "{}", out.output);
    let line = out.output.lines().find(|l| l.contains("done-43")).unwrap();
    let line = &line[line.find("sti ").unwrap()..];
    assert_eq!(line.trim(), "sti EPERM EPERM EPERM done-43", "TIOCSTI attempts");
    assert!(!out.output.contains("INJ-42"), "an injected line ran:\n{}", out.output);
    assert_eq!(out.outer_pending, 0, "input was injected into the caller's terminal");
}

/// SIGTSTP to the launcher (a job-control stop from outside) gives the caller's terminal back in
/// cooked mode; SIGCONT puts raw mode back and the session goes on.
fn the_launcher_suspends_and_resumes(who: &Who) {
    let s = Scratch::new(who);
    let steps = serde_json::json!([
        {"expect": "ready-2"},
        {"terminal": "raw"},
        {"signal": "TSTP"},
        {"state": "T"},
        {"terminal": "cooked"},
        {"signal": "CONT"},
        {"terminal": "raw"},
        {"send": "abc\r"},
        {"expect": "got-abc"},
    ]);
    let script = "echo ready-$((1+1)); read x; echo got-$x";
    let out = session(&s, "run", &["sh", "-c", script], (24, 80), steps);
    assert_eq!(out.code, Some(0), "{}", out.output);
    assert!(out.restored, "the caller's terminal is back in cooked mode");
}

/// Ctrl-Z on a command run directly (no shell inside to take the terminal back) stops the
/// launcher too, so the caller's shell gets its terminal; `fg` (SIGCONT) resumes both.
fn ctrl_z_on_a_direct_command_suspends_the_launcher(who: &Who) {
    let s = Scratch::new(who);
    let u = unique(who);
    let sleeper = format!("sleep 59.{u}");
    let steps = serde_json::json!([
        {"expect": "ready-3"},
        {"running": sleeper},
        {"terminal": "raw"},
        {"send": "\u{1a}"},
        {"state": "T"},
        {"terminal": "cooked"},
        {"signal": "CONT"},
        {"terminal": "raw"},
        // Resumed inside too: a stopped sleep would not die of Ctrl-C.
        {"send": "\u{3}"},
        {"gone": sleeper},
    ]);
    let script = format!("echo ready-$((1+2)); exec {sleeper}");
    let out = session(&s, "run", &["sh", "-c", &script], (24, 80), steps);
    assert_eq!(out.code, Some(130), "killed by SIGINT\n{}", out.output);
    assert!(out.restored, "the caller's terminal is back in cooked mode");
}

/// The host's other terminals are out of sight: the sandbox has its own /dev/pts.
fn only_the_sandboxs_own_terminal_is_visible(who: &Who) {
    let s = Scratch::new(who);
    let steps = serde_json::json!([{"expect": "pts-done"}]);
    let out = session(&s, "run", &["sh", "-c", "tty; ls /dev/pts; echo pts-done"], (24, 80), steps);
    assert_eq!(out.code, Some(0), "{}", out.output);
    let lines: Vec<&str> = out.output.lines().map(str::trim).collect();
    assert!(lines.contains(&"/dev/pts/0"), "tty inside: {}", out.output);
    let entries: Vec<&str> = lines
        .iter()
        .skip_while(|l| !l.starts_with("/dev/pts"))
        .skip(1)
        .take_while(|l| **l != "pts-done")
        .copied()
        .collect();
    assert_eq!(
        entries.join(" ").split_whitespace().collect::<Vec<_>>(),
        ["0", "ptmx"],
        "{}",
        out.output
    );
}

/// Reads a terminal's state, runs a command with some of its descriptors on it, reads the state
/// again. Prints `{"before": .., "after": .., "code": .., "out": ..}`.
const STATE_DRIVER: &str = r#"
import fcntl, json, os, struct, subprocess, sys, termios, threading

spec = json.load(sys.stdin)
master, slave = os.openpty()
TIOCGEXCL = 0x80045440

def state():
    ldisc = struct.unpack("i", fcntl.ioctl(slave, termios.TIOCGETD, b"\0" * 4))[0]
    excl = struct.unpack("i", fcntl.ioctl(slave, TIOCGEXCL, b"\0" * 4))[0]
    nonblock = bool(fcntl.fcntl(slave, fcntl.F_GETFL) & os.O_NONBLOCK)
    try:
        lflag = termios.tcgetattr(slave)[3]
    except termios.error as e:  # N_NULL answers no termios at all
        lflag = str(e)
    return {"ldisc": ldisc, "excl": excl, "nonblock": nonblock, "lflag": lflag}

def pump():
    while True:
        try:
            if not os.read(master, 65536):
                return
        except OSError:
            return

threading.Thread(target=pump, daemon=True).start()
before = state()
on = spec["on"]
std = [slave if i in on else (subprocess.DEVNULL if i == 0 else subprocess.PIPE) for i in range(3)]
p = subprocess.Popen(spec["argv"], env=spec["env"], cwd=spec["cwd"], stdin=std[0], stdout=std[1],
                     stderr=std[2], start_new_session=True)
out, err = p.communicate(timeout=60)
after = state()
print(json.dumps({"before": before, "after": after, "code": p.returncode,
                  "out": (out or b"").decode(errors="replace"),
                  "err": (err or b"").decode(errors="replace")}))
"#;

/// What a hostile command does to every terminal it holds: line discipline N_NULL (input dead),
/// exclusive mode, O_NONBLOCK on the open file, echo and canonical mode off.
const HOSTILE_TTY: &str = r#"
import fcntl, os, struct, termios
for fd in (0, 1, 2):
    for act in (lambda: fcntl.ioctl(fd, termios.TIOCSETD, struct.pack("i", 27)),
                lambda: fcntl.ioctl(fd, termios.TIOCEXCL),
                lambda: fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)):
        try:
            act()
        except OSError:
            pass
    try:
        a = termios.tcgetattr(fd)
        a[3] &= ~(termios.ECHO | termios.ICANON)
        termios.tcsetattr(fd, termios.TCSANOW, a)
    except (OSError, termios.error):
        pass
print("hostile-done", flush=True)
"#;

/// Runs `argv` with the descriptors `on` on a fresh terminal; returns (before, after, report).
fn terminal_state(s: &Scratch, argv: &[String], on: &[u8]) -> serde_json::Value {
    let c = s.command("run", &[], &[]);
    let env: serde_json::Map<String, serde_json::Value> = c
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_str()?.to_owned(), v?.to_str()?.into())))
        .collect();
    let spec = serde_json::json!({ "argv": argv, "env": env, "cwd": s.proj, "on": on });
    let mut child = Command::new("python3")
        .args(["-c", STATE_DRIVER])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    {
        use std::io::Write as _;
        child.stdin.take().unwrap().write_all(spec.to_string().as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("driver output {text:?}: {e}"))
}

/// The caller's terminal is as it was after a hostile command, whichever of stdin, stdout and
/// stderr were on it (`sandbox-run cmd | tee` left it with a dead line discipline, exclusive and
/// non-blocking). Control: the same command run directly does change each of them.
fn a_hostile_command_leaves_the_terminal_as_it_was(who: &Who) {
    let s = Scratch::new(who);
    let script = s.root.join("hostile_tty.py");
    std::fs::write(&script, HOSTILE_TTY).unwrap();
    let script = script.to_str().unwrap().to_owned();
    // Control: outside any sandbox, with only stdin on the terminal.
    let direct = terminal_state(&s, &["python3".into(), script.clone()], &[0]);
    for key in ["ldisc", "excl", "nonblock", "lflag"] {
        assert_ne!(direct["before"][key], direct["after"][key], "control: {key} {direct}");
    }
    let launcher = s.command("run", &[], &["python3", &script]);
    let mut argv = vec![launcher.get_program().to_str().unwrap().to_owned()];
    argv.extend(launcher.get_args().map(|a| a.to_str().unwrap().to_owned()));
    for on in [&[0][..], &[0, 2], &[2], &[1], &[0, 1], &[0, 1, 2]] {
        let r = terminal_state(&s, &argv, on);
        // The command may break its own pty (N_NULL on its stdout: its print then fails); it
        // must have run, and the caller's terminal must not notice.
        let ran = r["out"].as_str().unwrap_or("").contains("hostile-done")
            || r["err"].as_str().unwrap_or("").contains("hostile-done")
            || r["code"] == 120;
        assert!(ran, "{on:?}: {r}");
        assert_eq!(r["before"], r["after"], "as {who:?}, fds {on:?} on the terminal: {r}");
    }
}

/// Issue 32, part 3: a terminal whose input ends at once (`script < /dev/null`, an agent's pty
/// with nothing to type: Ctrl-D before the launcher is in raw mode) gave the command a NUL byte
/// (the line discipline's placeholder for that end of file) and the output a stray `^@`; `cat`
/// then waited for ever. Now the end of input reaches the command as one, and the output is the
/// command's alone.
fn an_end_of_input_before_raw_mode_is_no_nul_byte(who: &Who) {
    let s = Scratch::new(who);
    let steps = serde_json::json!([{"send": "\u{4}"}, {"expect": "after-eof"}]);
    let out = session(&s, "run", &["sh", "-c", "cat; echo after-eof"], (24, 80), steps);
    assert_eq!(out.code, Some(0), "{:?}", out.output);
    assert_eq!(out.output, "after-eof\r\n", "no ^@ nor NUL");
}

both!(
    an_end_of_input_before_raw_mode_is_no_nul_byte,
    an_interactive_shell_has_job_control,
    the_window_size_is_propagated,
    colours_reach_the_terminal,
    terminal_injection_reaches_nothing,
    the_launcher_suspends_and_resumes,
    ctrl_z_on_a_direct_command_suspends_the_launcher,
    only_the_sandboxs_own_terminal_is_visible,
    a_hostile_command_leaves_the_terminal_as_it_was,
);
