//! Helpers for the end-to-end tests of the `sandgate` binary (the tests live in
//! `tests/tests/suite/`, one test binary).
//!
//! The tests run the binary that `cargo build` produced, with a private `XDG_CONFIG_HOME` and
//! `XDG_DATA_HOME` per test, so they never read or write the developer's own configuration.

#![forbid(unsafe_code)]

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Path of the `sandgate` binary built by this workspace; panics when it is missing or older than
/// the sources it is built from.
///
/// Why not `CARGO_BIN_EXE_sandgate`: cargo sets it only for the integration tests of the package
/// that owns the binary, and these tests are their own package (`sandgate-tests`); depending on
/// another package's binary needs the unstable artifact dependencies (`-Z bindeps`). Why not build
/// it from the test: `cargo test` holds the target directory's lock while the tests run, so a
/// nested `cargo build` waits for ever. `cargo test --workspace` builds the binary (the root
/// package's own `tests/cli.rs` needs it); `cargo test -p sandgate-tests` does not, and an old
/// binary would then be tested in silence — hence the freshness check, which uses the rule cargo
/// itself uses (a source newer than the artifact means a rebuild).
pub fn sandgate_bin() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| built_bin("sandgate")).clone()
}

/// Path of the small launcher (`sandgate-launch`, what the `sandbox-*` links point at) built by
/// this workspace next to [`sandgate_bin`]; the same checks.
pub fn launcher_bin() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| built_bin("sandgate-launch")).clone()
}

fn built_bin(name: &str) -> PathBuf {
    // tests/ is a member crate; the binary lives in the shared target directory.
    let mut dir = std::env::current_exe().expect("current_exe");
    dir.pop(); // deps/
    if dir.ends_with("deps") {
        dir.pop();
    }
    let bin = dir.join(name);
    let built = std::fs::metadata(&bin).and_then(|m| m.modified()).unwrap_or_else(|_| {
        panic!("{} not found: run `cargo build` (or `cargo test --workspace`) first", bin.display())
    });
    if let Some((newer, when)) = newest_source(&bin).filter(|(_, when)| *when > built) {
        panic!(
            "{} is older than {} (built {:?}, source changed {:?}): run `cargo build -p sandgate` \
             (`cargo test -p sandgate-tests` does not rebuild the binary)",
            bin.display(),
            newer.display(),
            built,
            when
        );
    }
    bin
}

/// The most recently modified of the files `bin` was built from, as cargo's dep-info file
/// (`<bin>.d`, written by every build: the binary, a colon, the source paths) lists them: the
/// same files and the same mtime rule cargo uses to decide on a rebuild, so a touched file that is
/// not part of the build never makes a fresh binary look stale. A listed file that is gone
/// (renamed, deleted) counts as changed now.
fn newest_source(bin: &Path) -> Option<(PathBuf, std::time::SystemTime)> {
    let dep_info = std::fs::read_to_string(dep_info_of(bin)?).ok()?;
    let (_, deps) = dep_info.lines().next()?.split_once(": ")?;
    // Paths with spaces are written with `\ `.
    let deps = deps.replace("\\ ", "\0");
    deps.split_whitespace()
        .map(|p| PathBuf::from(p.replace('\0', " ")))
        // cargo writes workspace files relative to the workspace root.
        .map(|p| match Path::new(env!("CARGO_MANIFEST_DIR")).parent() {
            Some(root) if p.is_relative() => root.join(p),
            _ => p,
        })
        .map(|p| {
            let when = std::fs::metadata(&p)
                .and_then(|m| m.modified())
                .unwrap_or_else(|_| std::time::SystemTime::now());
            (p, when)
        })
        .max_by_key(|(_, when)| *when)
}

/// The dep-info written by the build that made `bin`. `target/debug/sandgate` is a hard link to
/// `deps/sandgate-HASH` (`sandgate-launch` to `deps/sandgate_launch-HASH`), and
/// `deps/sandgate-HASH.d` is that build's list; the uplifted
/// `target/debug/sandgate.d` is not rewritten when `cargo test` rebuilds the binary, so it is
/// trusted only when it is not older than the binary. `None`: no list to trust (no check).
fn dep_info_of(bin: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(bin).ok()?;
    let deps = bin.parent()?.join("deps");
    let prefix = format!("{}-", bin.file_name()?.to_str()?.replace('-', "_"));
    for entry in std::fs::read_dir(&deps).ok()?.flatten() {
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else { continue };
        if !name.starts_with(&prefix) || name.contains('.') {
            continue;
        }
        if let Ok(m) = std::fs::metadata(&path)
            && m.ino() == meta.ino()
            && m.dev() == meta.dev()
        {
            return Some(path.with_extension("d"));
        }
    }
    let uplifted = bin.with_extension("d");
    let written = std::fs::metadata(&uplifted).and_then(|m| m.modified()).ok()?;
    (written >= meta.modified().ok()?).then_some(uplifted)
}

/// An isolated environment for one test: its own config, data and runtime directories.
pub struct Env {
    /// Root of the temporary directory; removed on drop.
    pub root: tempfile::TempDir,
}

impl Env {
    /// Creates empty `config/`, `data/`, `run/` and `home/` directories under a new temp dir.
    pub fn new() -> Self {
        Env::with_root(tempfile::tempdir().expect("tempdir"))
    }

    /// Like [`Env::new`], under `/var/tmp`: for tests that run sandboxes, whose private `/tmp`
    /// would hide a configuration directory under `/tmp`.
    pub fn outside_tmp() -> Self {
        Env::with_root(
            tempfile::Builder::new().prefix("sandgate-t").tempdir_in("/var/tmp").expect("tempdir"),
        )
    }

    fn with_root(root: tempfile::TempDir) -> Self {
        for d in ["config", "data", "run", "home"] {
            std::fs::create_dir_all(root.path().join(d)).expect("mkdir");
        }
        Env { root }
    }

    /// `$XDG_CONFIG_HOME` of this environment.
    pub fn config_home(&self) -> PathBuf {
        self.root.path().join("config")
    }

    /// A `sandgate` command with this environment's variables set and everything else inherited.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(sandgate_bin());
        c.env("XDG_CONFIG_HOME", self.config_home())
            .env("XDG_DATA_HOME", self.root.path().join("data"))
            .env("XDG_RUNTIME_DIR", self.root.path().join("run"))
            .env("HOME", self.root.path().join("home"))
            .env_remove("SANDGATE_EXTRA_DENY")
            .env("NO_COLOR", "1");
        c
    }
}

impl Env {
    /// The `sandgate` daemon's pid in this environment, if one runs.
    pub fn daemon_pid(&self) -> Option<u32> {
        let text =
            std::fs::read_to_string(self.root.path().join("run/sandgate/daemon.pid")).ok()?;
        let pid: u32 = text.trim().parse().ok()?;
        std::path::Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
    }
}

impl Drop for Env {
    /// Stops the daemon a launcher of this environment may have started.
    fn drop(&mut self) {
        if let Some(pid) = self.daemon_pid() {
            let _ = Command::new("kill").arg(pid.to_string()).status();
            for _ in 0..200 {
                if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

impl Default for Env {
    fn default() -> Self {
        Self::new()
    }
}

// The skip helpers live in the dev-only support crate shared with the library crates' tests.
pub use sandgate_test_support::{in_ci, skip, skip_unless};

/// Whether the tests run as root (namespaces, nft and Landlock then run for real).
pub fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// An HTTP origin on 127.0.0.1 answering every request with `body` (a thread per connection);
/// returns its port.
pub fn origin(body: &'static str) -> u16 {
    origin_at("127.0.0.1", body)
}

/// [`origin`] on `ip` (any loopback address, e.g. `127.0.0.2`: a grant for it is a grant for
/// nothing else the test uses); returns its port.
pub fn origin_at(ip: &str, body: &'static str) -> u16 {
    serve_on(ip, move |mut s| {
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf);
        let reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = s.write_all(reply.as_bytes());
    })
}

/// A TCP echo server on 127.0.0.1 (a thread per connection); returns its port.
pub fn echo() -> u16 {
    serve_on("127.0.0.1", |mut s| {
        let mut buf = [0u8; 4096];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 || s.write_all(&buf[..n]).is_err() {
                return;
            }
        }
    })
}

fn serve_on(ip: &str, handle: impl Fn(std::net::TcpStream) + Send + Sync + Clone + 'static) -> u16 {
    let listener = TcpListener::bind((ip, 0)).unwrap_or_else(|e| panic!("bind {ip}: {e}"));
    let port = listener.local_addr().expect("local address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(s) = stream else { continue };
            let handle = handle.clone();
            std::thread::spawn(move || handle(s));
        }
    });
    port
}

/// `script` (util-linux) running `sandgate ARGS` on a new pseudo-terminal, with the environment
/// and working directory `base` (a `sandgate` command of the test) gives; stdin and stdout piped
/// (what is written to stdin is typed on the terminal).
pub fn on_terminal(base: &Command, args: &[&str]) -> Child {
    let mut line = sandgate_bin().display().to_string();
    for a in args {
        line.push_str(&format!(" '{}'", a.replace('\'', r"'\''")));
    }
    let mut s = Command::new("script");
    s.args(["-qfec", &line, "/dev/null"]).env("NO_COLOR", "1").env("SHELL", "/bin/sh");
    // What `base` sets or removes, for `script` and so for sandgate under it.
    for (k, v) in base.get_envs() {
        match v {
            Some(v) => s.env(k, v),
            None => s.env_remove(k),
        };
    }
    if let Some(dir) = base.get_current_dir() {
        s.current_dir(dir);
    }
    s.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
    s.spawn().expect("script")
}

/// Whether `script` (util-linux) is there, for [`on_terminal`].
pub fn has_script() -> bool {
    Command::new("script").arg("--version").output().is_ok_and(|o| o.status.success())
}
