//! A launch from inside a sandbox narrows the outer one and never widens it, as root and as an
//! unprivileged user; the detection of "inside" cannot be forged from outside with variables.

use std::process::{Command, Output};

use crate::support::sandbox::{
    self, HOST4, Scratch, TestHost, WRITE_REFUSED, Who, both, refused, text,
};
use sandgate_tests::{origin, sandgate_bin, skip_unless};

fn p(path: &std::path::Path) -> &str {
    path.to_str().unwrap()
}

/// `sandgate OUTER -- sandgate INNER INNER_ARGS -- CMD`.
fn nested(s: &Scratch, outer: &str, outer_args: &[&str], inner: &[&str], cmd: &[&str]) -> Output {
    let bin = sandgate_bin();
    let mut full: Vec<&str> = vec![p(&bin)];
    full.extend_from_slice(inner);
    full.push("--");
    full.extend_from_slice(cmd);
    s.command(outer, outer_args, &full).env("SANDGATE_NO_DAEMON", "1").output().unwrap()
}

/// The probe `op args` in a nested `inner` sandbox inside `outer`; its one-line answer.
fn nested_probe(s: &Scratch, outer: &str, inner: &[&str], op: &[&str]) -> String {
    let mut cmd = vec!["python3", p(&s.probe)];
    cmd.extend_from_slice(op);
    let out = nested(s, outer, &[], inner, &cmd);
    let stdout = text(&out.stdout).trim().to_owned();
    assert!(
        out.status.success() && !stdout.is_empty(),
        "probe {op:?} in {inner:?} inside {outer} as {:?}: status {:?}\nstdout {stdout}\nstderr {}",
        s.who,
        out.status,
        text(&out.stderr)
    );
    stdout
}

fn nested_run_cannot_write_what_the_outer_build_can(who: &Who) {
    let s = Scratch::new(who);
    let outer_file = s.proj.join("outer.txt");
    assert_eq!(s.probe("build", &[], &["write", p(&outer_file)]), "ok", "control: outer build");
    let inner_file = s.proj.join("cwdfile");
    let answer = nested_probe(&s, "build", &["run"], &["write", p(&inner_file)]);
    refused(&answer, WRITE_REFUSED, "nested run: write in cwd");
    assert!(!inner_file.exists());
    // Same through a shell redirection, as an agent would do it; the private /tmp stays writable.
    let out = nested(&s, "build", &[], &["run"], &["sh", "-c", "echo x > cwdfile"]);
    assert!(!out.status.success(), "nested run wrote the cwd: {}", text(&out.stderr));
    let out = nested(&s, "build", &[], &["run"], &["sh", "-c", "echo x > /tmp/f && cat /tmp/f"]);
    assert_eq!(text(&out.stdout), "x\n", "stderr {}", text(&out.stderr));
    // The normal nested path says nothing on stderr.
    assert_eq!(text(&out.stderr), "", "noise on the nested path");
}

fn nested_run_has_no_network(who: &Who) {
    let Some(_host) = TestHost::start() else { return };
    let s = Scratch::new(who);
    let direct = nested_probe(&s, "build", &["run"], &["tcp", HOST4, "8080"]);
    refused(&direct, &["EACCES", "EPERM"], "nested run: tcp to the test host");
    let udp = nested_probe(&s, "build", &["run"], &["udp", HOST4, "53"]);
    refused(&udp, &["EACCES", "EPERM"], "nested run: udp to the test host");
    // Not even the outer sandbox's proxy on its loopback.
    let proxy = nested_probe(&s, "build", &["run"], &["tcp", "127.0.0.1", "3128"]);
    refused(&proxy, &["EACCES", "EPERM"], "nested run: the outer's proxy");
    // `--net none` on a tier with network cuts it the same way.
    let none = nested_probe(&s, "build", &["build", "--net", "none"], &["tcp", HOST4, "8080"]);
    refused(&none, &["EACCES", "EPERM"], "nested build --net none");
}

fn nested_build_inside_run_cannot_write(who: &Who) {
    let s = Scratch::new(who);
    let file = s.proj.join("cwdfile");
    let answer = nested_probe(&s, "run", &["build"], &["write", p(&file)]);
    refused(&answer, WRITE_REFUSED, "nested build inside run: write in cwd");
    assert!(!file.exists());
    let out = nested(&s, "run", &[], &["build"], &["true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("nested in a `run` sandbox: no network"),
        "{}",
        text(&out.stderr)
    );
}

fn nested_net_reaches_an_origin_the_outer_allows(who: &Who) {
    if skip_unless(Command::new("curl").arg("--version").output().is_ok(), "curl") {
        return;
    }
    let s = Scratch::new(who);
    let port = origin("hello through the outer proxy\n");
    let url = format!("http://127.0.0.1:{port}/x");
    let allow = format!("--allow=127.0.0.1:{port}");
    // The proxy variables the outer set are kept: curl finds the proxy in them (`--noproxy ""`
    // because NO_PROXY names 127.0.0.1, where the origin is).
    let curl = ["curl", "-sS", "--max-time", "5", "--noproxy", "", &url];
    let out = nested(&s, "build", &[&allow], &["net"], &curl);
    assert_eq!(
        text(&out.stdout),
        "hello through the outer proxy\n",
        "stderr {}",
        text(&out.stderr)
    );
    assert!(out.status.success());
}

fn exit_codes_pass_through(who: &Who) {
    let s = Scratch::new(who);
    let out = nested(&s, "build", &[], &["run"], &["sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7), "stderr {}", text(&out.stderr));
    let out = nested(&s, "build", &[], &["run"], &["no-such-program-sandgate"]);
    assert_eq!(out.status.code(), Some(127), "stderr {}", text(&out.stderr));
    assert!(text(&out.stderr).contains("command not found"), "{}", text(&out.stderr));
}

/// A path the inner tier would hide but the outer shows cannot be hidden without mounts: the
/// launch says so, and `--require-full` refuses it.
fn hiding_more_than_the_outer_is_reported(who: &Who) {
    let s = Scratch::new(who);
    let victim = s.outside.join("victim.txt");
    let bin = sandgate_bin();
    let script =
        format!("SANDGATE_EXTRA_DENY={v} exec {b} run $0 -- cat {v}", v = p(&victim), b = p(&bin));
    let out = s.command("build", &[], &["sh", "-c", &script, ""]).output().unwrap();
    assert!(out.status.success(), "stderr {}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("not enforced: hidden path"), "{stderr}");
    assert!(stderr.contains("victim.txt"), "{stderr}");
    let out = s.command("build", &[], &["sh", "-c", &script, "--require-full"]).output().unwrap();
    assert!(!out.status.success(), "--require-full ran it: {}", text(&out.stdout));
    assert_eq!(text(&out.stdout), "", "the command ran");
    assert!(text(&out.stderr).contains("victim.txt"), "{}", text(&out.stderr));
}

/// Outside any sandbox, the variables a sandbox sets change nothing: the full namespaces are
/// built (the command is pid 2 under the sandbox's init in a pid namespace of its own).
fn forged_variables_outside_do_not_skip_the_namespaces(who: &Who) {
    let s = Scratch::new(who);
    let out = s
        .command("run", &[], &["sh", "-c", "echo $$; cat /proc/1/comm"])
        .env("SANDGATE_SANDBOX", "sg-forged")
        .env("SANDGATE_TIER", "build")
        .output()
        .unwrap();
    assert!(out.status.success(), "stderr {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "2\nsandgate-init\n", "stderr {}", text(&out.stderr));
    // And the file written from there lands nowhere outside: the run tier's walls held.
    let file = s.proj.join("forged.txt");
    let out = s
        .command("run", &[], &["sh", "-c", &format!("echo x > {}", p(&file))])
        .env("SANDGATE_SANDBOX", "sg-forged")
        .env("SANDGATE_TIER", "build")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(!file.exists());
}

/// Pid 1 of pid and network namespaces of its own (`unshare -rpfn`: only `lo`, as in a `run`
/// sandbox) named `sandgate-init`, with
/// no_new_privs and an allow-all seccomp filter: every sign a process can fake. It runs its
/// arguments and passes on their output and status.
/// (After [`sandbox::SECCOMP_PY`].)
const FAKE_OUTER: &str = r#"assert libc.prctl(15, b"sandgate-init", 0, 0, 0) == 0          # PR_SET_NAME
assert libc.prctl(38, 1, 0, 0, 0) == 0                         # PR_SET_NO_NEW_PRIVS
insns = (Insn * 1)(Insn(0x06, 0, 0, 0x7fff0000))               # ret SECCOMP_RET_ALLOW
assert libc.prctl(22, 2, ctypes.byref(Prog(1, insns)), 0, 0) == 0  # PR_SET_SECCOMP, FILTER
assert open("/proc/1/comm").read() == "sandgate-init\n"
r = subprocess.run(sys.argv[1:], capture_output=True)
sys.stdout.buffer.write(r.stdout)
sys.stderr.buffer.write(r.stderr)
sys.exit(r.returncode)
"#;

/// A launch under a faked outer sandbox (pid 1 named like sandgate's init, no_new_privs, a
/// seccomp filter) is not taken for a nested one: the kernel still grants it namespaces, so it
/// builds them, and the walls hold.
fn a_faked_outer_sandbox_does_not_skip_the_namespaces(who: &Who) {
    let s = Scratch::new(who);
    let fake = s.root.join("fake_outer.py");
    std::fs::write(&fake, format!("{}{FAKE_OUTER}", sandbox::SECCOMP_PY)).unwrap();
    let key = s.home.join(".ssh/id_rsa");
    let script = format!("echo $$; cat /proc/1/comm; cat {} || echo key-refused", p(&key));
    let bin = sandgate_bin();
    let out = s
        .program(std::path::Path::new("unshare"))
        .args(["-rpfn", "--mount-proc", "python3", p(&fake), p(&bin), "run", "--", "sh", "-c"])
        .arg(&script)
        .output()
        .unwrap();
    assert_eq!(
        text(&out.stdout),
        "2\nsandgate-init\nkey-refused\n",
        "status {:?}, stderr {}",
        out.status,
        text(&out.stderr)
    );
}

both!(
    a_faked_outer_sandbox_does_not_skip_the_namespaces,
    nested_run_cannot_write_what_the_outer_build_can,
    nested_run_has_no_network,
    nested_build_inside_run_cannot_write,
    nested_net_reaches_an_origin_the_outer_allows,
    exit_codes_pass_through,
    hiding_more_than_the_outer_is_reported,
    forged_variables_outside_do_not_skip_the_namespaces,
);
