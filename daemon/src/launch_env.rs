//! What every launch reads from the host before its policy, and what the daemon's networks
//! made ahead share with it: the process's environment ([`LaunchEnv`]), a fresh sandbox id,
//! the NFLOG group of the sandbox's firewall.

use std::ffi::OsString;
use std::path::PathBuf;

use sandgate_sandbox::SandboxId;

use crate::launch_error::LaunchError;

/// Launcher constants that are not policy (policy lists live in `sandgate_config`).
pub mod defaults {
    /// Shell start-up files and other autorun entries kept read-only in `$HOME` when `$HOME` is
    /// writable.
    pub use sandgate_config::{HOME_AUTORUN, SHELL_RC};
    /// NFLOG group the namespace's firewall logs refused packets to.
    pub const NFLOG_GROUP: u16 = 7;
}

/// Environment values the spec depends on (taken from the process, replaceable in tests).
#[derive(Debug, Clone)]
pub struct LaunchEnv {
    /// Current directory.
    pub cwd: PathBuf,
    /// `$HOME`.
    pub home: Option<PathBuf>,
    /// The account's home directory from the password database (tools fall back to it when
    /// `$HOME` points elsewhere): its dot-entries are hidden like `$HOME`'s.
    pub passwd_home: Option<PathBuf>,
    /// The running launcher, and the `sandgate` binary when that is another (the small
    /// launcher's), kept visible inside: a nested launch executes the one, `git`'s ssh command
    /// the other.
    pub exes: Vec<PathBuf>,
    /// `$XDG_CONFIG_HOME` (or `~/.config`).
    pub config_home: Option<PathBuf>,
    /// `$XDG_DATA_HOME` (or `~/.local/share`).
    pub data_home: Option<PathBuf>,
    /// The daemon's runtime directory (control socket), hidden inside.
    pub runtime_dir: PathBuf,
    /// Where another session's daemon of this user could have its socket (another
    /// `XDG_RUNTIME_DIR`), hidden inside too.
    pub other_runtime_dirs: Vec<PathBuf>,
    /// The environment passed to the command (before proxy variables are added).
    pub env: Vec<(OsString, OsString)>,
    /// Port of the proxy as the command sees it on 127.0.0.1: [`sandgate_sandbox::PROXY_PORT`]
    /// in the sandbox's own network namespace on Linux, a port bound for the sandbox on macOS.
    pub proxy_port: u16,
}

impl LaunchEnv {
    /// Reads the process's environment.
    pub fn from_process() -> Result<LaunchEnv, LaunchError> {
        let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
        let xdg = |var: &str, fallback: &str| {
            std::env::var_os(var)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(fallback)))
        };
        let data_home = xdg("XDG_DATA_HOME", ".local/share");
        let paths = crate::Paths::discover();
        // (`/run/user/UID/sandgate` is made before the launch if missing; a missing other one
        // needs no hiding: a missing hidden path would become a placeholder.)
        let mut other_runtime_dirs: Vec<PathBuf> = paths
            .others()
            .into_iter()
            .filter(|d| d.starts_with("/run/user") || d.exists())
            .collect();
        let runtime_dir = paths.dir;
        // The running daemon's own, wherever its session's XDG_RUNTIME_DIR put it (recorded in
        // daemon.lock next to the store).
        if let Some(sock) = data_home
            .as_ref()
            .and_then(|d| std::fs::read_to_string(d.join("sandgate/daemon.lock")).ok())
            && let Some(dir) = std::path::Path::new(sock.trim()).parent()
            && dir.is_absolute()
            && dir.exists()
            && dir != runtime_dir
            && !other_runtime_dirs.iter().any(|o| o == dir)
        {
            other_runtime_dirs.push(dir.to_path_buf());
        }
        Ok(LaunchEnv {
            cwd: std::env::current_dir().map_err(LaunchError::io("current directory"))?,
            config_home: xdg("XDG_CONFIG_HOME", ".config"),
            data_home,
            env: std::env::vars_os().collect(),
            proxy_port: sandgate_sandbox::PROXY_PORT,
            runtime_dir,
            other_runtime_dirs,
            home,
            passwd_home: crate::secrets::passwd_home(),
            exes: {
                let mut exes: Vec<PathBuf> = std::env::current_exe().into_iter().collect();
                exes.extend(crate::sandgate_exe().ok().filter(|m| !exes.contains(m)));
                exes
            },
        })
    }
}

/// A new sandbox id, `sg-PID-NANOS` (the launcher's pid, or the daemon's for a network made
/// ahead; a count keeps two made in the same nanosecond apart).
pub(crate) fn new_id() -> Option<SandboxId> {
    static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tail = if n == 0 { String::new() } else { format!("-{n}") };
    SandboxId::try_from(format!("sg-{}-{nanos:08x}{tail}", std::process::id())).ok()
}
