//! The launcher: a tier's policy resolved from the configuration and the flags, turned into a
//! sandbox spec, started, its proxy served by the daemon or by this process; and what `install`
//! and `explain` need.
//!
//! Read it in this order:
//!
//! - `spec.rs`: building — the policy of a tier, the refusals before anything starts, the
//!   sandbox spec (hidden and read-only paths, the environment without secrets, git metadata
//!   protected). Pure but for reading the host's files; tested without a sandbox.
//! - `run.rs`: running — [`run`] asks the daemon for a network made ahead, builds the spec,
//!   starts the sandbox (or narrows the current one when nested), waits, explains a failure.
//! - `serve.rs`: the sandbox's proxy — handed to the daemon, or served in this process.
//! - `explain.rs`: `sandgate explain`, the spec and what this kernel enforces of it.
//!
//! What a launch reads from the host (`LaunchEnv`) is in `launch_env.rs`, its errors in
//! `launch_error.rs`: the daemon's networks made ahead and the cache layers use them too.
use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{Context as _, bail};

mod explain;
mod run;
mod serve;
mod spec;

pub use crate::launch_env::{LaunchEnv, defaults};
pub use crate::launch_error::LaunchError;
pub use explain::{Explanation, explain, kernel_report};
pub use run::run;
pub use serve::serve_here;
pub use spec::{refuse_writable_cwd, resolve_policy, spec_from_policy};

/// What a launch asks for beyond the tier: the command-line flags of `run`, `net` and `build`.
#[derive(Clone, Default)]
pub struct LaunchOptions {
    /// Paths made writable inside the sandbox.
    pub allow_write: Vec<PathBuf>,
    /// Domain patterns allowed through the proxy for this run.
    pub allow: Vec<String>,
    /// Domain patterns denied at the proxy for this run.
    pub deny: Vec<String>,
    /// The network mode, when the flags choose one over the tier's.
    pub net: Option<sandgate_config::NetMode>,
    /// Fail instead of warning when the kernel cannot enforce every restriction.
    pub require_full: bool,
    /// Print one line per blocked direct connection attempt to stderr.
    pub report_blocked: bool,
    /// No notices on stderr (held and denied requests, hints after a failure).
    pub quiet: bool,
    /// `--no-ask`: an unattended run; destinations no rule allows are refused at once.
    pub no_ask: bool,
    /// Who answers unknown destinations instead of a person (`sandgate learn`); the proxy is
    /// then served by this process, not the daemon.
    pub approver: Option<std::sync::Arc<dyn sandgate_proxy::Approver>>,
    /// Serves the sandbox's proxy in this process when no daemon does: [`serve_here`] in the
    /// `sandgate` binary. `None` in the small launcher (`sandgate-launch`), which has no proxy
    /// linked in: such a launch is handed to `sandgate` before it starts
    /// ([`LaunchError::HandOver`]).
    pub serve_here: Option<ServeHere>,
    /// The command and its arguments (empty: an interactive `$SHELL`).
    pub command: Vec<OsString>,
}

impl std::fmt::Debug for LaunchOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaunchOptions")
            .field("allow_write", &self.allow_write)
            .field("allow", &self.allow)
            .field("deny", &self.deny)
            .field("net", &self.net)
            .field("require_full", &self.require_full)
            .field("report_blocked", &self.report_blocked)
            .field("quiet", &self.quiet)
            .field("no_ask", &self.no_ask)
            .field("approver", &self.approver.is_some())
            .field("serve_here", &self.serve_here.is_some())
            .field("command", &self.command)
            .finish()
    }
}

/// Starts serving a sandbox's proxy in the launching process: the listener and DNS sockets made
/// inside the sandbox, its id, its network policy, who answers unknown destinations.
pub type ServeHere = fn(
    std::os::fd::OwnedFd,
    Option<[std::os::fd::OwnedFd; 2]>,
    &str,
    sandgate_config::NetworkPolicy,
    Option<std::sync::Arc<dyn sandgate_proxy::Approver>>,
) -> anyhow::Result<Box<dyn ServedHere>>;

/// A proxy served in the launching process, stopped when the sandbox ends.
pub trait ServedHere {
    /// Stops serving and waits for the server's thread.
    fn stop(self: Box<Self>);
}

/// Creates the busybox-style links in `dir` (default `~/.local/bin`), pointing at the small
/// launcher next to this binary (`sandgate-launch`, installed with it) or, without one, at this
/// binary; returns the directory and each (link, target). Running it again replaces existing links; a
/// file of the same name that is not a link is never replaced, and then no link is made at all.
pub fn install_links(dir: Option<PathBuf>) -> anyhow::Result<(PathBuf, Vec<(PathBuf, PathBuf)>)> {
    const NAMES: [&str; 3] = ["sandbox-run", "sandbox-net", "sandbox-build"];
    let dir = match dir {
        Some(d) => d,
        None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set; pass --dir")?)
            .join(".local/bin"),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let exe = crate::sandgate_exe().context("path of the sandgate binary")?;
    let launcher = exe.with_file_name(crate::LAUNCHER_NAME);
    let exe = if launcher.is_file() { launcher } else { exe };
    for name in NAMES {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_ok_and(|m| !m.file_type().is_symlink()) {
            bail!("{} exists and is not a link; remove it first", link.display());
        }
    }
    let mut made = Vec::new();
    for name in NAMES {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_ok() {
            std::fs::remove_file(&link).with_context(|| format!("replace {}", link.display()))?;
        }
        std::os::unix::fs::symlink(&exe, &link)
            .with_context(|| format!("link {} -> {}", link.display(), exe.display()))?;
        made.push((link, exe.clone()));
    }
    Ok((dir, made))
}
