//! Red-team findings that were OPEN when written (round of the copy-on-write caches, the unix
//! socket type rule, the writable-root refusal and the event cap): each test here FAILS until
//! the hole it names is closed, then stays as its regression test. Each has a control showing
//! that its check sees the write (or the read) it looks for.
//!
//! The attacks write only into the test's scratch tree (`outside/`, the scratch home); nothing
//! here touches a real home or a system file, whether the hole is open or not.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use crate::support::sandbox::{Scratch, Who, both, root, text};

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn chown(s: &Scratch, path: &Path) {
    let _ = Command::new("chown")
        .args(["-hR", &format!("{}:{}", s.who.uid, s.who.gid), p(path)])
        .status();
}

/// `sh -c SCRIPT` in `build --net none` started in `dir` with `vars` added; its output,
/// whatever the outcome (an attack may well fail).
fn build_in(s: &Scratch, dir: &Path, vars: &[(&str, &str)], script: &str) -> std::process::Output {
    let mut c = s.command("build", &["--net", "none"], &["sh", "-c", script]);
    c.current_dir(dir);
    for (k, v) in vars {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// What the attacks below try to change on the host: a file outside every writable path and
/// the home's shell start-up file.
fn host_files(s: &Scratch) -> (String, String) {
    let read = |f: &Path| std::fs::read_to_string(f).unwrap_or_default();
    (read(&s.outside.join("victim.txt")), read(&s.home.join(".bashrc")))
}

const WRITE_HOST: &str = "echo PWNED >> \"$VICTIM\"; echo PWNED >> \"$HOME/.bashrc\"; true";

/// Red-team finding: a package cache whose path resolves to `/` makes the whole host filesystem
/// writable from inside `build` and `net`. The eligibility checks of `daemon/src/caches.rs` look
/// at the path as spelled (`/usr/..` and `/proc/self/root` neither hold the home textually nor
/// start with `/tmp`); the launcher resolves it to `/`, the overlay there is refused (EINVAL),
/// the fallback binds the layer on `/` where no path lookup sees it, `Writable(/)` then makes
/// the host's root mount writable, and Landlock's writable list gets `/`. Without any variable:
/// a `build` started in `~/go` (which the writable-root rule accepts) can replace `~/go/pkg/mod`
/// by a link to `/proc/self/root`; every later launch layers it.
fn a_cache_path_resolving_to_the_root_leaves_the_host_read_only(who: &Who) {
    let s = Scratch::new(who);
    let victim = s.outside.join("victim.txt");
    let before = host_files(&s);
    let rows: &[(&str, &[(&str, &str)])] = &[
        ("npm_config_cache=/proc/self/root", &[("npm_config_cache", "/proc/self/root")]),
        ("CARGO_HOME=/usr/..", &[("CARGO_HOME", "/usr/..")]),
        ("~/go/pkg/mod -> /proc/self/root (no variable)", &[]),
    ];
    for (what, vars) in rows {
        let gomod = s.home.join("go/pkg/mod");
        if vars.is_empty() {
            // What `cd ~/go && sandbox-build sh -c 'rmdir pkg/mod; ln -s /proc/self/root
            // pkg/mod'` leaves (the hook approves it; see the next test).
            std::fs::create_dir_all(gomod.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink("/proc/self/root", &gomod).unwrap();
            chown(&s, &s.home.join("go"));
        }
        let mut all = vars.to_vec();
        all.push(("VICTIM", p(&victim)));
        let out = build_in(&s, &s.proj, &all, WRITE_HOST);
        let _ = std::fs::remove_file(&gomod);
        assert_eq!(
            host_files(&s),
            before,
            "{what}: a sandbox wrote the host's files\nstderr {}",
            text(&out.stderr)
        );
    }
    // Control: the comparison sees the same write where it is allowed by name.
    let arg = format!("--allow-write={}", s.outside.display());
    let mut c = s.command("build", &["--net", "none", &arg], &["sh", "-c", WRITE_HOST]);
    c.env("VICTIM", &victim);
    let out = c.output().unwrap();
    assert_ne!(host_files(&s).0, before.0, "control: {}", text(&out.stderr));
}

/// Red-team finding: the writable-root rule accepts `~/go` (and `~/go/bin`, `~/go/pkg/mod`),
/// so `cd ~/go && sandbox-build ...` (approved by the hook) writes the host's Go module cache,
/// which the caches threat model says nothing inside ever reaches (the layer is skipped: the
/// cache "lies in" the working directory), and `GOBIN`, whose programs the user's shell and
/// editor run. Go leaves its module cache read-only; the sandbox owns it and makes it writable.
fn build_in_the_go_path_leaves_the_hosts_module_cache_alone(who: &Who) {
    let s = Scratch::new(who);
    let go = s.home.join("go");
    let module = go.join("pkg/mod/example.com/m@v1.0.0");
    std::fs::create_dir_all(&module).unwrap();
    std::fs::create_dir_all(go.join("bin")).unwrap();
    std::fs::write(module.join("m.go"), "package m\n").unwrap();
    chown(&s, &go);
    std::fs::set_permissions(module.join("m.go"), std::fs::Permissions::from_mode(0o444)).unwrap();
    std::fs::set_permissions(&module, std::fs::Permissions::from_mode(0o555)).unwrap();
    let plant = "chmod -R u+w pkg/mod; echo 'package m; func init() { planted() }' > \
                 pkg/mod/example.com/m@v1.0.0/m.go; echo planted > bin/gopls; true";
    let out = build_in(&s, &go, &[], plant);
    let source = std::fs::read_to_string(module.join("m.go")).unwrap();
    assert_eq!(source, "package m\n", "the host's module cache: {}", text(&out.stderr));
    assert!(!go.join("bin/gopls").exists(), "a program planted in GOBIN");
    // Control: the same plant in a project directory is written (the checks see it).
    let copy = s.proj.join("go");
    std::fs::create_dir_all(copy.join("pkg/mod/example.com/m@v1.0.0")).unwrap();
    std::fs::create_dir_all(copy.join("bin")).unwrap();
    chown(&s, &copy);
    let out = build_in(&s, &copy, &[], plant);
    assert!(copy.join("bin/gopls").exists(), "control: {}", text(&out.stderr));
}

/// Red-team finding: credentials next to a cache stay hidden only where the home allowlist's
/// exceptions name them (`~/.cargo/credentials.toml`, `~/.gradle/gradle.properties`). A cache
/// found through its variable (`CARGO_HOME=/opt/cargo`, `GRADLE_USER_HOME=/srv/gradle`), which
/// the launcher layers knowing exactly what it is, shows its tokens to every sandbox.
fn credentials_next_to_a_relocated_cache_stay_hidden(who: &Who) {
    let s = Scratch::new(who);
    let cargo = s.root.join("cargo-home");
    let gradle = s.root.join("gradle-home");
    std::fs::create_dir_all(&cargo).unwrap();
    std::fs::create_dir_all(&gradle).unwrap();
    std::fs::write(cargo.join("credentials.toml"), "token = \"cargo-secret\"\n").unwrap();
    std::fs::write(cargo.join("credentials"), "token = \"cargo-old-secret\"\n").unwrap();
    std::fs::write(gradle.join("gradle.properties"), "signing.password=gradle-secret\n").unwrap();
    std::fs::create_dir_all(cargo.join("registry")).unwrap();
    std::fs::write(cargo.join("registry/marker"), "# not a secret\n").unwrap();
    chown(&s, &cargo);
    chown(&s, &gradle);
    let vars = [("CARGO_HOME", p(&cargo)), ("GRADLE_USER_HOME", p(&gradle))];
    let script = "cat \"$CARGO_HOME/registry/marker\" \"$CARGO_HOME/credentials.toml\" \
                  \"$CARGO_HOME/credentials\" \"$GRADLE_USER_HOME/gradle.properties\" 2>/dev/null; \
                  true";
    let out = build_in(&s, &s.proj, &vars, script);
    let stdout = text(&out.stdout);
    // Control: the cache itself is readable (the secrets are not missed for want of a way in).
    assert!(stdout.contains("# not a secret"), "control: {stdout}\n{}", text(&out.stderr));
    for secret in ["cargo-secret", "cargo-old-secret", "gradle-secret"] {
        assert!(!stdout.contains(secret), "{secret} readable next to a layered cache: {stdout}");
    }
}

/// Red-team finding: a cache inside a hidden home entry (`GOPATH=~/.go`, `XDG_CACHE_HOME=
/// ~/.xdg-cache`) is made on the host by the first launch and then stops every later `net` and
/// `build` launch: the overlay is mounted, the hidden parent covers it, and making the (now
/// unreachable) cache writable fails ("sandbox setup failed ... No such file or directory").
fn a_cache_inside_a_hidden_home_entry_does_not_stop_the_launch(who: &Who) {
    let s = Scratch::new(who);
    std::fs::create_dir_all(s.home.join(".go/pkg/mod")).unwrap();
    chown(&s, &s.home.join(".go"));
    let gopath = s.home.join(".go");
    let out = build_in(&s, &s.proj, &[("GOPATH", p(&gopath))], "echo ran");
    assert_eq!(text(&out.stdout), "ran\n", "{}", text(&out.stderr));
    // Control: the same launch without the variable runs.
    let out = build_in(&s, &s.proj, &[], "echo ran");
    assert_eq!(text(&out.stdout), "ran\n", "control: {}", text(&out.stderr));
}

/// Red-team finding: `sandgate cache clear` cannot remove a layer holding a deep directory
/// tree (a sandbox makes one in a second): `remove_dir_all` holds a descriptor per level and
/// fails with "Too many open files" at the usual limit of 1024, leaving the layer in place.
fn cache_clear_removes_a_deep_layer(who: &Who) {
    let s = Scratch::new(who);
    let deep = "cd ~/.npm && i=0; while [ $i -lt 1500 ]; do mkdir d && cd d || exit 1; \
                i=$((i+1)); done; echo deep";
    let out = build_in(&s, &s.proj, &[], deep);
    assert_eq!(text(&out.stdout), "deep\n", "{}", text(&out.stderr));
    let caches = s.home.join(".local/share/sandgate/caches");
    // Control: the layer is there to clear.
    assert!(std::fs::read_dir(&caches).unwrap().next().is_some(), "control: no layer");
    let mut c = s.program(Path::new("/bin/sh"));
    c.args(["-c", "ulimit -n 1024 && exec \"$0\" cache clear --all"])
        .arg(sandgate_tests::sandgate_bin());
    let out = c.output().unwrap();
    assert!(out.status.success(), "cache clear: {}", text(&out.stderr));
    assert!(std::fs::read_dir(&caches).unwrap().next().is_none(), "a layer was left");
}

/// Tries every way of giving a file the set-user-ID or set-group-ID bit, each on its own file in
/// the directory it is given, and prints one line per way: its name, then `ok` or the errno name.
/// The calls are made by number (the C library's wrappers may use another call), those of the
/// older x86_64 table only there. The creating calls ask for set-group-ID without group execute,
/// which survives the write that follows; an ACL then adds group execute, as `chmod` would.
const SETID_PY: &str = r##"import ctypes, errno, os, platform, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
NR = {"fchmodat2": 452, "openat2": 437}
if platform.machine() == "x86_64":
    NR.update(chmod=90, fchmod=91, fchmodat=268, open=2, openat=257, creat=85, mknod=133,
              mknodat=259)
else:
    NR.update(fchmod=52, fchmodat=53, openat=56, mknodat=33)
AT_FDCWD, CREATE, REG = -100, os.O_CREAT | os.O_WRONLY, 0o100000
# user::rwx group::r-x other::r-x: group execute, given without chmod
ACL = struct.pack("<I", 2) + b"".join(
    struct.pack("<HHI", tag, perm, 0xFFFFFFFF) for tag, perm in ((1, 7), (4, 5), (0x20, 5)))
# file capabilities v2, effective, permitted cap_setuid
CAPS = struct.pack("<IIIII", 0x02000001, 1 << 7, 0, 0, 0)

def call(name, *args):
    r = libc.syscall(ctypes.c_long(NR[name]), *args)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r

def plain(path):
    with open(path, "wb") as f:
        f.write(b"#!/bin/sh\n")
    return path.encode()

def fill(path, fd=None):
    if fd is not None:
        os.close(fd)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"#!/bin/sh\n")
    os.close(fd)
    os.setxattr(path, "system.posix_acl_access", ACL)

def fchmod(p):
    fd = os.open(plain(p), os.O_RDONLY)
    try:
        call("fchmod", fd, 0o4755)
    finally:
        os.close(fd)

class OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]

WAYS = {
    "chmod-plain": lambda p: os.chmod(plain(p), 0o755),
    "chmod": lambda p: call("chmod", plain(p), 0o4755),
    "fchmod": fchmod,
    "fchmodat": lambda p: call("fchmodat", AT_FDCWD, plain(p), 0o2755),
    "fchmodat2": lambda p: call("fchmodat2", AT_FDCWD, plain(p), 0o4755, 0),
    "open": lambda p: fill(p, call("open", p.encode(), CREATE, 0o2745)),
    "openat": lambda p: fill(p, call("openat", AT_FDCWD, p.encode(), CREATE, 0o2745)),
    "creat": lambda p: fill(p, call("creat", p.encode(), 0o2745)),
    "mknod": lambda p: (call("mknod", p.encode(), REG | 0o2745, 0), fill(p)),
    "mknodat": lambda p: (call("mknodat", AT_FDCWD, p.encode(), REG | 0o2745, 0), fill(p)),
    "openat2": lambda p: fill(p, call("openat2", AT_FDCWD, p.encode(),
                                      ctypes.byref(OpenHow(CREATE, 0o2745, 0)), 24)),
    "fcaps": lambda p: os.setxattr(plain(p), "security.capability", CAPS),
}
os.umask(0o022)
for name, way in WAYS.items():
    if name in NR or name in ("chmod-plain", "fcaps"):
        try:
            way(os.path.join(sys.argv[1], name))
            print(name, "ok")
        except OSError as e:
            print(name, errno.errorcode.get(e.errno, str(e.errno)))
"##;

/// Every entry under `dir` with the set-user-ID or set-group-ID bit (of any owner).
fn set_id_entries(dir: &Path) -> Vec<(std::path::PathBuf, u32)> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let meta = std::fs::symlink_metadata(e.path()).unwrap();
            if meta.mode() & 0o6000 != 0 {
                found.push((e.path(), meta.mode()));
            }
            if meta.is_dir() {
                stack.push(e.path());
            }
        }
    }
    found
}

/// `SETID_PY` on `dir`, its lines as (way, outcome).
fn setid_ways(out: &std::process::Output) -> Vec<(String, String)> {
    text(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect()
}

/// Red-team finding (the class of the root test below, as root and rootless): no call that
/// takes a mode leaves a set-user-ID or set-group-ID file in the project — `chmod`, `fchmod`,
/// `fchmodat`, `fchmodat2` refused, the creating calls refused when their mode has either bit
/// (a set-group-ID file made without group execute would get it from an ACL), `openat2`
/// answered `ENOSYS` (its mode is out of the filter's sight), file capabilities refused by the
/// kernel (no `CAP_SETFCAP`). A plain `chmod` still works. Control: the same script outside any
/// sandbox, as the same user, makes a set-ID file each way (and, as root, sets file caps).
fn no_call_that_takes_a_mode_leaves_a_set_id_file(who: &Who) {
    let s = Scratch::new(who);
    let script = s.root.join("setid.py");
    std::fs::write(&script, SETID_PY).unwrap();
    let (inside, control) = (s.proj.join("setid"), s.outside.join("setid"));
    for d in [&inside, &control] {
        std::fs::create_dir(d).unwrap();
        chown(&s, d);
    }
    let out = s.run("build", &["--net", "none"], &["python3", p(&script), p(&inside)]);
    let ways = setid_ways(&out);
    let stderr = text(&out.stderr);
    let names: Vec<&str> = ways.iter().map(|(w, _)| w.as_str()).collect();
    assert!(names.len() >= 8 && names.contains(&"chmod-plain"), "{names:?}\n{stderr}");
    for (way, outcome) in &ways {
        let want = match way.as_str() {
            "chmod-plain" => "ok",
            "openat2" => "ENOSYS",
            _ => "EPERM",
        };
        assert_eq!(outcome, want, "{way} inside as {who:?}\n{stderr}");
    }
    let left = set_id_entries(&s.proj);
    assert!(left.is_empty(), "set-ID files left in the project: {left:?}");

    let mut c = s.program(Path::new("python3"));
    let out = c.arg(&script).arg(&control).output().unwrap();
    let outside = setid_ways(&out);
    let stderr = text(&out.stderr);
    assert_eq!(outside.iter().map(|(w, _)| w.as_str()).collect::<Vec<_>>(), names, "{stderr}");
    for (way, outcome) in &outside {
        if way == "chmod-plain" || (way == "fcaps" && who.rootless) {
            continue; // no bit to find; file caps need CAP_SETFCAP, which only root has
        }
        assert_eq!(outcome, "ok", "control: {way} outside as {who:?}\n{stderr}");
        if way != "fcaps" {
            let mode = std::fs::metadata(control.join(way)).unwrap().mode();
            assert_ne!(mode & 0o6000, 0, "control: {way} made {mode:o}");
        }
    }
    assert!(!set_id_entries(&control).is_empty(), "control: the walk sees them");
}

both!(
    a_cache_path_resolving_to_the_root_leaves_the_host_read_only,
    build_in_the_go_path_leaves_the_hosts_module_cache_alone,
    credentials_next_to_a_relocated_cache_stay_hidden,
    a_cache_inside_a_hidden_home_entry_does_not_stop_the_launch,
    cache_clear_removes_a_deep_layer,
    no_call_that_takes_a_mode_leaves_a_set_id_file,
);

/// Red-team finding: a root launch's sandbox runs as the real uid 0 (without capabilities), owns
/// what it creates in its writable directory and may `chmod u+s` it: `cp /usr/bin/id x && chmod
/// 4755 x` in `build` leaves a setuid-root program in the project, which any local user then
/// runs as root. A rootless sandbox can only make its own user's setuid files (harmless).
#[test]
fn a_root_sandbox_leaves_no_setuid_root_program_on_the_host() {
    let Some(who) = root() else { return };
    let s = Scratch::new(&who);
    let plant = "cp /usr/bin/id ./rootid && chmod 4755 ./rootid; \
                 cp /usr/bin/id ~/.npm/rootid && chmod 4755 ~/.npm/rootid; true";
    let out = build_in(&s, &s.proj, &[], plant);
    let layers = s.home.join(".local/share/sandgate/caches");
    let mut found = Vec::new();
    let mut stack = vec![s.proj.clone(), layers];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let meta = std::fs::symlink_metadata(e.path()).unwrap();
            if meta.is_dir() {
                stack.push(e.path());
            } else if meta.mode() & 0o6000 != 0 && meta.uid() == 0 {
                found.push(e.path());
            }
        }
    }
    assert!(found.is_empty(), "setuid-root programs left: {found:?}\n{}", text(&out.stderr));
    // Control: the same chmod outside any sandbox makes one, and the walk above would see it.
    let control = s.outside.join("rootid");
    std::fs::copy("/usr/bin/id", &control).unwrap();
    std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o4755)).unwrap();
    assert_ne!(std::fs::metadata(&control).unwrap().mode() & 0o4000, 0, "control");
}

/// Red-team finding: the writable-root rule protects the dot-entries and `bin` of the launching
/// user's homes only. Root may write every home, and `cd /home/alice/.ssh && sandbox-build sh -c
/// 'echo KEY >> authorized_keys'` is approved by the hook and started by the launcher (only
/// `/home/alice` itself is refused). Pure: the rule as root's launch builds it.
#[test]
fn another_accounts_home_entries_are_not_writable_roots() {
    let rule = sandgate_config::RootRule::new([std::path::PathBuf::from("/root")]);
    // Control: the account's home itself is refused.
    assert!(rule.refusal(Path::new("/home/alice")).is_some(), "control");
    for dir in
        ["/home/alice/.ssh", "/home/alice/.config", "/home/alice/bin", "/home/alice/.local/bin"]
    {
        assert!(rule.refusal(Path::new(dir)).is_some(), "{dir} accepted as a writable root");
    }
}
