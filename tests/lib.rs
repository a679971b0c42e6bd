//! Helpers for the end-to-end tests of the `sandgate` binary (the tests live in `tests/tests/`).
//!
//! The tests run the binary that `cargo build` produced, with a private `XDG_CONFIG_HOME` and
//! `XDG_DATA_HOME` per test, so they never read or write the developer's own configuration.

#![forbid(unsafe_code)]

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// Path of the `sandgate` binary built by this workspace.
pub fn sandgate_bin() -> PathBuf {
    // tests/ is a member crate; the binary lives in the shared target directory.
    let mut dir = std::env::current_exe().expect("current_exe");
    dir.pop(); // deps/
    if dir.ends_with("deps") {
        dir.pop();
    }
    let bin = dir.join("sandgate");
    assert!(
        bin.exists(),
        "{} not found: run `cargo build` (or `cargo test --workspace`) first",
        bin.display()
    );
    bin
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

/// Whether the test runs in CI, where a missing capability must fail the test instead of skipping.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Whether the tests run as root (namespaces, nft and Landlock then run for real).
pub fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// Skips (returns `true`) when a capability is missing outside CI; panics in CI.
pub fn skip_unless(available: bool, what: &str) -> bool {
    if available {
        return false;
    }
    assert!(!in_ci(), "required capability missing in CI: {what}");
    eprintln!("SKIP: {what} is not available here");
    true
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
