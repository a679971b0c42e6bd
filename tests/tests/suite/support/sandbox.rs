//! Shared fixtures of the `sandbox_*` end-to-end tests: a scratch tree outside `/tmp` (the
//! sandbox's private `/tmp` would hide one inside it and make every check pass for the wrong
//! reason), an unprivileged test user for the rootless runs, a test host in a network namespace
//! the test creates, and the Python probe that reports errno names.

#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use sandgate_tests::{sandgate_bin, skip_unless};

pub const PROBE: &str = include_str!("probe.py");

/// The start of a Python script that installs a seccomp filter of its own: `libc`, the `Insn`
/// (`struct sock_filter`) and `Prog` (`struct sock_fprog`) types, and `install_and_exec(prog)`
/// (no_new_privs, the filter of `(code, jt, jf, k)` tuples, then exec of the script's arguments).
pub const SECCOMP_PY: &str = r#"import ctypes, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
class Insn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                ("k", ctypes.c_uint)]
class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Insn))]
def install_and_exec(prog):
    insns = (Insn * len(prog))(*[Insn(*i) for i in prog])
    assert libc.prctl(38, 1, 0, 0, 0) == 0                          # PR_SET_NO_NEW_PRIVS
    assert libc.prctl(22, 2, ctypes.byref(Prog(len(prog), insns)), 0, 0) == 0
    os.execvp(sys.argv[1], sys.argv[1:])
"#;

/// Runs its arguments under a seccomp filter that refuses new user namespaces with `EPERM` (as a
/// kernel with unprivileged user namespaces disabled answers) and `clone3` with `ENOSYS`.
/// (After [`SECCOMP_PY`].)
pub const NO_USERNS: &str = r#"ERRNO, ALLOW = 0x00050000, 0x7fff0000
prog = [
    (0x20, 0, 0, 0),                   # A = nr
    (0x15, 0, 1, 435),                 # clone3?
    (0x06, 0, 0, ERRNO | 38),          #   ENOSYS (libc falls back to clone)
    (0x15, 1, 0, 56),                  # clone?
    (0x15, 0, 3, 272),                 # unshare?
    (0x20, 0, 0, 16),                  # A = flags (low word of args[0])
    (0x45, 0, 1, 0x10000000),          # CLONE_NEWUSER?
    (0x06, 0, 0, ERRNO | 1),           #   EPERM
    (0x06, 0, 0, ALLOW),
]
install_and_exec(prog)
"#;

/// Who runs the launcher.
#[derive(Debug, Clone)]
pub struct Who {
    pub uid: u32,
    pub gid: u32,
    pub rootless: bool,
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// The current user (root in CI), or `None` (test skipped) when not root outside CI.
pub fn root() -> Option<Who> {
    if skip_unless(is_root(), "root (the sandbox tests create users and namespaces)") {
        return None;
    }
    Some(Who { uid: 0, gid: 0, rootless: false })
}

const TEST_USER: &str = "sandgate-t";

/// An unprivileged user made for these tests (created once), for the rootless runs.
pub fn rootless() -> Option<Who> {
    root()?;
    static USER: OnceLock<Option<(u32, u32)>> = OnceLock::new();
    let ids = USER.get_or_init(|| {
        let exists = Command::new("id").arg(TEST_USER).output().is_ok_and(|o| o.status.success());
        if !exists {
            let _ = Command::new("useradd")
                .args(["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", TEST_USER])
                .status();
        }
        let id = |flag: &str| -> Option<u32> {
            let o = Command::new("id").args([flag, TEST_USER]).output().ok()?;
            String::from_utf8_lossy(&o.stdout).trim().parse().ok()
        };
        Some((id("-u")?, id("-g")?))
    });
    let Some((uid, gid)) = *ids else {
        sandgate_tests::skip(&format!("could not create the test user {TEST_USER}"));
        return None;
    };
    Some(Who { uid, gid, rootless: true })
}

/// A scratch tree: `home/` (with credentials, config and store), `proj/` (the working
/// directory, a git repository), `outside/` (files that must stay untouched), the probe.
pub struct Scratch {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub home: PathBuf,
    pub proj: PathBuf,
    pub outside: PathBuf,
    pub probe: PathBuf,
    pub who: Who,
}

impl Scratch {
    pub fn new(who: &Who) -> Scratch {
        let dir = tempfile::Builder::new().prefix("sandgate-t").tempdir_in("/var/tmp").unwrap();
        let root = dir.path().to_path_buf();
        let home = root.join("home");
        let proj = root.join("proj");
        let outside = root.join("outside");
        for d in [
            home.join(".ssh"),
            home.join(".config/sandgate"),
            home.join(".local/share/sandgate"),
            proj.join(".git/hooks"),
            outside.clone(),
            root.join("run"),
        ] {
            std::fs::create_dir_all(d).unwrap();
        }
        let files: [(PathBuf, &str); 9] = [
            (home.join(".ssh/id_rsa"), "-----BEGIN FAKE KEY-----\n"),
            (home.join(".config/sandgate/config.toml"), "# config\n"),
            // An empty file is a valid empty SQLite database: the daemon a launch starts uses it.
            (home.join(".local/share/sandgate/sandgate.db"), ""),
            (home.join(".bashrc"), "# rc\n"),
            (proj.join("file.txt"), "hello\n"),
            (proj.join(".git/config"), "[core]\n"),
            (outside.join("victim.txt"), "untouched\n"),
            (outside.join("secret.txt"), "extra-deny\n"),
            (root.join("probe.py"), PROBE),
        ];
        for (p, text) in files {
            std::fs::write(p, text).unwrap();
        }
        std::fs::set_permissions(home.join(".ssh/id_rsa"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        // Everything belongs to the user who runs the sandbox.
        let _ = Command::new("chown")
            .args(["-R", &format!("{}:{}", who.uid, who.gid)])
            .arg(&root)
            .status();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        Scratch {
            probe: root.join("probe.py"),
            _dir: dir,
            root,
            home,
            proj,
            outside,
            who: who.clone(),
        }
    }

    /// Has a held question end in a refusal after `secs` seconds (nobody answers in these
    /// tests): a TCP connection the `net`/`build` capture hands to the proxy for an address
    /// nobody allowed is refused then, instead of after the default minute.
    pub fn ask_timeout(&self, secs: u32) {
        let config = self.home.join(".config/sandgate/config.toml");
        std::fs::write(config, format!("[daemon]\nask_timeout = \"{secs}s\"\n")).unwrap();
    }

    /// `sandgate TIER ARGS -- CMD` as `who`, in `proj/`, with this tree's HOME and XDG dirs.
    pub fn command(&self, tier: &str, args: &[&str], cmd: &[&str]) -> Command {
        let mut c = self.program(&sandgate_bin());
        c.arg(tier).args(args).arg("--").args(cmd);
        c
    }

    /// `program` (no arguments yet) as `who`, in `proj/`, with this tree's HOME and XDG dirs.
    pub fn program(&self, program: &std::path::Path) -> Command {
        let mut c = if self.who.rootless {
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid",
                &self.who.uid.to_string(),
                "--regid",
                &self.who.gid.to_string(),
                "--clear-groups",
                "--",
            ]);
            c.arg(program);
            c
        } else {
            Command::new(program)
        };
        c.env_clear()
            .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", self.home.join(".config"))
            .env("XDG_DATA_HOME", self.home.join(".local/share"))
            .env("XDG_RUNTIME_DIR", self.root.join("run"))
            .env("SANDGATE_EXTRA_DENY", self.outside.join("secret.txt"))
            .env("SHELL", "/bin/sh")
            .current_dir(&self.proj)
            .stdin(Stdio::null());
        c
    }

    pub fn run(&self, tier: &str, args: &[&str], cmd: &[&str]) -> Output {
        self.command(tier, args, cmd).output().unwrap()
    }

    /// `sh -c SCRIPT` in `tier`; returns its stdout and stderr after checking it exited with 0.
    pub fn sh(&self, tier: &str, args: &[&str], script: &str) -> (String, String) {
        let out = self.run(tier, args, &["sh", "-c", script]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success(),
            "{tier} as {:?}: status {:?} for {script}\nstdout {stdout}\nstderr {stderr}",
            self.who,
            out.status
        );
        (stdout, stderr)
    }

    /// Runs the probe `op args` in `tier`; returns its one-line answer.
    pub fn probe(&self, tier: &str, args: &[&str], op: &[&str]) -> String {
        let probe = self.probe.to_str().unwrap();
        let mut cmd = vec!["python3", probe];
        cmd.extend_from_slice(op);
        let out = self.run(tier, args, &cmd);
        let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(
            out.status.success() && !stdout.is_empty(),
            "probe {op:?} in {tier} as {:?} failed: status {:?}\nstdout {stdout}\nstderr {}",
            self.who,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }
}

impl Drop for Scratch {
    /// Stops the daemon a `net`/`build` launch started for this tree.
    fn drop(&mut self) {
        let pid_file = self.root.join("run/sandgate/daemon.pid");
        if let Some(pid) =
            std::fs::read_to_string(pid_file).ok().and_then(|p| p.trim().parse::<u32>().ok())
        {
            let _ = Command::new("kill").arg(pid.to_string()).status();
            for _ in 0..200 {
                if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
}

/// Copies the program `from` to `to` for a test to run. The copy is written by a `cp` child, not
/// by this process: all the suite's tests share one process, and a file this process has open for
/// writing is inherited by every child another test's thread forks meanwhile (until its exec), so
/// running the copy could fail with "Text file busy" (ETXTBSY).
pub fn copy_program(from: &Path, to: &Path) {
    let status =
        std::process::Command::new("cp").arg("--").arg(from).arg(to).status().expect("run cp");
    assert!(status.success(), "cp {} {}: {status}", from.display(), to.display());
}

/// Digits unique to this call within every test process on the machine (pid, uid, a counter),
/// for markers a test finds processes by (`sleep 1000.<unique>` with `pgrep -f`). All the suite's
/// tests share one process, so the pid alone no longer tells two tests apart. Fixed widths: one
/// number cannot be read as another, and `sleep` still takes it as a number.
pub fn unique(who: &Who) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{:04}{:03}{:03}", std::process::id() % 10_000, who.uid % 1000, n % 1000)
}

/// The sandbox's init under `launcher`: its child in another pid namespace (not the short-lived
/// helper that joins a prepared network).
pub fn init_of(launcher: u32) -> u32 {
    let ns = |pid: u32| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
    use std::time::{Duration, Instant};
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

/// `sh -c CMD` in `pid`'s network namespace (as root, with the sbin directories on PATH); its
/// stdout, after checking it succeeded.
pub fn in_netns(pid: u32, cmd: &str) -> String {
    let out = Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-n", "sh", "-c", cmd])
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .unwrap();
    assert!(out.status.success(), "{cmd}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// Output bytes as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts that `answer` (a probe line) is one of the refusals in `allowed`.
#[track_caller]
pub fn refused(answer: &str, allowed: &[&str], what: &str) {
    let first = answer.split_whitespace().next().unwrap_or("");
    assert!(allowed.contains(&first), "{what}: expected one of {allowed:?}, got {answer:?}");
}

/// Write refusals.
pub const WRITE_REFUSED: &[&str] = &["EACCES", "EPERM", "EROFS"];

/// A test host in a network namespace made by the test: host side 10.202.0.1 / fd00:5a9d::1,
/// the host at 10.202.0.2 / fd00:5a9d::2 with a TCP listener on 8080 and a UDP one on 53
/// ([`TestHost::start`]); or the same on other IPv4 addresses ([`TestHost::start_at`]).
pub struct TestHost {
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
    ns: String,
    link: String,
    listeners: Vec<std::process::Child>,
}

pub const HOST4: &str = "10.202.0.2";
pub const HOST6: &str = "fd00:5a9d::2";

/// The IPv4 side of a test host's link: the host's end, the test host, the prefix length.
#[derive(Debug, Clone, Copy)]
pub struct Link4 {
    pub host_side: &'static str,
    pub host: &'static str,
    pub prefix: u8,
}

/// The test host of [`TestHost::start`], on a private address (10.202.0.2).
pub const PRIVATE: Link4 = Link4 { host_side: "10.202.0.1", host: HOST4, prefix: 24 };

/// A test host on a public-looking address, outside every special-purpose range (so the address
/// guard has no reason to refuse it): 45.90.7.2 in a /30 routed only to the test's veth, so
/// nothing sent to it can leave the machine. Not `bench/transparent.sh`'s 45.90.0.2: the suite
/// and the bench can run at once.
pub const PUBLIC: Link4 = Link4 { host_side: "45.90.7.1", host: "45.90.7.2", prefix: 30 };

impl TestHost {
    pub fn start() -> Option<TestHost> {
        TestHost::start_at(PRIVATE)
    }

    /// A test host on `v4` (and fd00:5a9d::2), with the listeners of [`TestHost::start`].
    pub fn start_at(v4: Link4) -> Option<TestHost> {
        // The host side addresses and the names are fixed: one test host at a time.
        static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let guard = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let n = std::process::id() % 100_000;
        let ns = format!("sgt{n}");
        let link = format!("sgh{n}");
        let peer = format!("sgp{n}");
        let Link4 { host_side, host: host4, prefix } = v4;
        let sh =
            |cmd: &str| Command::new("sh").arg("-c").arg(cmd).status().is_ok_and(|s| s.success());
        let ok = sh(&format!(
            "ip netns add {ns} && ip link add {link} type veth peer name {peer} && \
             ip link set {peer} netns {ns} && \
             ip addr add {host_side}/{prefix} dev {link} && ip -6 addr add fd00:5a9d::1/64 dev {link} nodad && \
             ip link set {link} up && \
             ip -n {ns} addr add {host4}/{prefix} dev {peer} && \
             ip -n {ns} -6 addr add fd00:5a9d::2/64 dev {peer} nodad && \
             ip -n {ns} link set {peer} up && ip -n {ns} link set lo up"
        ));
        let mut host =
            TestHost { _one_at_a_time: guard, ns: ns.clone(), link, listeners: Vec::new() };
        if skip_unless(ok, "ip netns / veth (test host)") {
            return None;
        }
        for spec in ["TCP6-LISTEN:8080,fork,reuseaddr,ipv6only=0", "UDP4-RECVFROM:53,fork"] {
            let child = Command::new("ip")
                .args(["netns", "exec", &ns, "socat", spec, "EXEC:/bin/cat"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("socat");
            host.listeners.push(child);
        }
        // Control: the host is reachable from outside any sandbox (poll until socat listens).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let addr = format!("{host4}:8080").parse().unwrap();
            if std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(200))
                .is_ok()
            {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "test host never listened");
            std::thread::yield_now();
        }
        Some(host)
    }

    /// Starts `program ARGS` inside the test host's namespace (killed when the host goes).
    pub fn spawn(&mut self, program: &str, args: &[&str]) {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns, program])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        self.listeners.push(child);
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        for l in &mut self.listeners {
            let _ = l.kill();
            let _ = l.wait();
        }
        let _ = Command::new("ip").args(["link", "del", &self.link]).status();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

/// Generates `root` and `rootless` variants of a scenario `fn(&Who)`.
macro_rules! both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn root() {
                if let Some(w) = crate::support::sandbox::root() {
                    super::$name(&w);
                }
            }
            #[test]
            fn rootless() {
                if let Some(w) = crate::support::sandbox::rootless() {
                    super::$name(&w);
                }
            }
        }
    )*};
}
pub(crate) use both;
