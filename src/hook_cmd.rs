//! `sandgate hook claude` and `sandgate check --path`: the I/O around `sandgate_hook`.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use sandgate_config::{Config, ConfigPaths, Narrowing, Overrides};
use sandgate_hook::{Access, HookSettings, RealFs, Verdict, Walls};
use serde_json::json;

use crate::policy_cmd::UsageError;

/// Options of `sandgate hook`.
#[derive(Debug, clap::Args)]
pub struct HookArgs {
    #[command(subcommand)]
    agent: HookAgent,
}

#[derive(Debug, clap::Subcommand)]
enum HookAgent {
    /// Claude Code `PermissionRequest` hook: reads the hook JSON on stdin; prints an allow
    /// decision for calls that stay inside the tier, nothing otherwise (the normal prompt).
    Claude {
        /// The tier file-tool paths are checked against.
        #[arg(long, default_value = "build")]
        tier: String,
        /// Deny a refused file-tool path with a message for the model, instead of leaving the
        /// decision to the person.
        #[arg(long)]
        deny: bool,
    },
}

/// The home directories (`$HOME` and the passwd entry's), and where sandgate's own state lives,
/// for the walls of the file tools (hidden or read-only inside sandboxes).
fn own_places() -> (Vec<PathBuf>, Vec<PathBuf>, Vec<PathBuf>) {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    let passwd_home =
        nix::unistd::User::from_uid(nix::unistd::getuid()).ok().flatten().map(|u| u.dir);
    let homes: Vec<PathBuf> = home.iter().chain(passwd_home.iter()).cloned().collect();
    let xdg = |var: &str, fallback: &str| {
        std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(fallback)))
    };
    let paths = sandgate_daemon::Paths::discover();
    let mut hidden = vec![paths.dir.clone()];
    hidden.extend(paths.others());
    hidden.extend(xdg("XDG_DATA_HOME", ".local/share").map(|d| d.join("sandgate")));
    // The configuration may hold secrets (the Telegram bot's token): inside a sandbox it is a
    // sanitised copy, so a file tool outside may neither read nor search it; nor write it.
    let config: Vec<PathBuf> =
        xdg("XDG_CONFIG_HOME", ".config").map(|d| d.join("sandgate")).into_iter().collect();
    hidden.extend(config.iter().cloned());
    (homes, hidden, config)
}

/// The walls of `tier` for `cwd` (its per-directory configuration), narrowed by `allow_write`.
fn walls_for(cwd: &Path, tier: &str, allow_write: Option<Vec<PathBuf>>) -> Result<Walls, String> {
    let paths = ConfigPaths::discover(cwd).map_err(|e| e.to_string())?;
    let config = Config::load(paths).map_err(|e| e.to_string())?;
    let mut policy = config.policy(tier, &Overrides::default()).map_err(|e| e.to_string())?;
    if let Some(writable) = allow_write {
        policy = policy
            .derive(&Narrowing { writable: Some(writable), ..Narrowing::default() })
            .map_err(|e| e.to_string())?;
    }
    let (homes, hidden, mut read_only) = own_places();
    // Git metadata that makes git run code on the host (hooks, `core.hooksPath`,
    // `core.fsmonitor`, ...): read-only as in the launcher (`spec_from_policy`). A link on the way
    // to one is refused by the launcher; here the link itself stays read-only.
    let writable: Vec<PathBuf> = policy.fs.writable.iter().map(|w| w.path.clone()).collect();
    let env: Vec<(std::ffi::OsString, std::ffi::OsString)> = std::env::vars_os().collect();
    let git = sandgate_sandbox::gitwall::protect_git(
        &writable,
        policy.fs.git_writable,
        homes.first().map(PathBuf::as_path),
        &sandgate_sandbox::gitwall::outer_config(&env),
    );
    read_only.extend(git.read_only);
    read_only.extend(git.links);
    Ok(Walls::from_policy(&policy, homes, hidden, read_only))
}

/// The directories writable in some tier for the input's `cwd`: the working directories (the
/// input's and the hook's own) and every tier's writable paths there. When the configuration
/// cannot be read, only the working directories (the hook then abstains on the config anyway
/// for file tools; a wrapper outside them is still checked for ownership and modes).
fn writable_anywhere(input: &[u8]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::env::current_dir().into_iter().collect();
    let cwd = serde_json::from_slice::<serde_json::Value>(input)
        .ok()
        .and_then(|v| v.get("cwd").and_then(|c| c.as_str()).map(PathBuf::from))
        .filter(|c| c.is_absolute());
    let Some(cwd) = cwd else { return out };
    out.push(cwd.clone());
    let Ok(paths) = ConfigPaths::discover(&cwd) else { return out };
    let Ok(config) = Config::load(paths) else { return out };
    for tier in config.tiers().unwrap_or_default() {
        if let Ok(policy) = config.policy(&tier.name, &Overrides::default()) {
            out.extend(policy.fs.writable.iter().map(|w| w.path.clone()));
        }
    }
    out
}

fn real_fs() -> anyhow::Result<RealFs> {
    let exe = std::env::current_exe().context("path of the sandgate binary")?;
    Ok(RealFs::new(std::env::var_os("PATH"), &exe))
}

/// `sandgate hook claude`: one decision, printed; always exits 0 (a failing hook would show the
/// agent an error instead of the prompt).
pub fn run(args: HookArgs) -> anyhow::Result<u8> {
    let HookAgent::Claude { tier, deny } = args.agent;
    let mut input = Vec::new();
    // One byte over the limit is enough to know the input is too long.
    let read =
        std::io::stdin().lock().take(sandgate_hook::MAX_INPUT as u64 + 1).read_to_end(&mut input);
    let verdict = match read.map_err(anyhow::Error::from).and_then(|_| real_fs()) {
        // A wrapper in a place a sandboxed command can write may be swapped after this decision.
        Ok(fs) => Ok(fs.with_untrusted(writable_anywhere(&input))),
        Err(e) => Err(e),
    };
    let verdict = match verdict {
        Ok(fs) => sandgate_hook::decide_claude(
            &input,
            &HookSettings { deny_refused_paths: deny },
            &fs,
            &|cwd| walls_for(cwd, &tier, None),
        ),
        Err(e) => Verdict::Abstain { tool: None, reason: format!("cannot decide: {e:#}") },
    };
    if let Some(out) = sandgate_hook::verdict_json(&verdict) {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{out}");
        let _ = stdout.flush();
    }
    report(&verdict);
    Ok(0)
}

/// One line to the daemon's event log, if a daemon runs: fire and forget, never waiting (a full
/// or absent socket drops the line; the decision does not depend on it).
fn report(v: &Verdict) {
    use std::os::fd::AsRawFd as _;
    let (tool, reason) = match v {
        Verdict::Allow { tool, reason } => (Some(tool.clone()), reason.clone()),
        Verdict::Abstain { tool, reason } => (tool.clone(), reason.clone()),
        Verdict::Deny { tool, message } => (Some(tool.clone()), message.clone()),
    };
    let mut line = json!({
        "op": "hook_decision",
        "agent": "claude",
        "tool": tool,
        "decision": v.verb(),
        "reason": reason.chars().take(2000).collect::<String>(),
    })
    .to_string();
    line.push('\n');
    let socket = sandgate_daemon::Paths::discover().socket;
    #[cfg(target_os = "linux")]
    let flags =
        nix::sys::socket::SockFlag::SOCK_NONBLOCK | nix::sys::socket::SockFlag::SOCK_CLOEXEC;
    // macOS has no socket(2) flags: non-blocking is set with fcntl below.
    #[cfg(not(target_os = "linux"))]
    let flags = nix::sys::socket::SockFlag::empty();
    let Ok(fd) = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::Stream,
        flags,
        None,
    ) else {
        return;
    };
    #[cfg(not(target_os = "linux"))]
    if nix::fcntl::fcntl(
        fd.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .is_err()
    {
        return;
    }
    let Ok(addr) = nix::sys::socket::UnixAddr::new(&socket) else { return };
    // Non-blocking: a daemon whose backlog is full answers EAGAIN instead of making us wait.
    if nix::sys::socket::connect(fd.as_raw_fd(), &addr).is_err() {
        return;
    }
    let _ = nix::unistd::write(&fd, line.as_bytes());
}

/// `sandgate check --path`: the file-tool answer for any agent framework.
pub fn check_path(
    path: &str,
    write: bool,
    tier: &str,
    allow_write: Vec<PathBuf>,
    json_out: bool,
) -> anyhow::Result<u8> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let narrowing = if allow_write.is_empty() {
        None
    } else {
        Some(allow_write.iter().map(|p| crate::policy_cmd::absolute(&cwd, p)).collect())
    };
    let walls = walls_for(&cwd, tier, narrowing).map_err(UsageError)?;
    let access = if write { Access::Write } else { Access::Read };
    let fs = real_fs()?;
    let result = sandgate_hook::check_path(&walls, &fs, &cwd, path, access);
    let writable: Vec<String> = walls.writable.iter().map(|w| w.display().to_string()).collect();
    match &result {
        Ok(real) if json_out => println!(
            "{}",
            json!({ "path": path, "resolved": real, "access": if write { "write" } else { "read" },
                    "tier": tier, "decision": "allow", "writable": writable })
        ),
        Ok(real) => println!("allow {} {} in tier `{tier}`", access, real.display()),
        Err(r) if json_out => println!(
            "{}",
            json!({ "path": path, "resolved": r.resolved, "access": if write { "write" } else { "read" },
                    "tier": tier, "decision": "deny", "reason": r.to_string(), "writable": writable })
        ),
        Err(r) => println!("deny {r}"),
    }
    Ok(if result.is_ok() { 0 } else { 1 })
}
