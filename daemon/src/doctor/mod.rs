//! `sandgate doctor`: whether a launch here would work, and how to fix what would not.
//!
//! [`Facts`] is what [`probe`] read from this system (it tries a launch's kernel steps for real
//! in throwaway children); [`checks`] turns them into one [`Check`] per concern, each `ok`,
//! `warn` (a launch works, with less: a wall the kernel lacks, a slower cache, a prompt the
//! hook cannot spare) or `fail` (a launch would fail, or would run something else than sandgate),
//! with a one-line fix. The checks are pure, so each is made to fail in the tests below by
//! changing the facts.

use std::path::PathBuf;

use serde::Serialize;
use serde_json::json;

use crate::report::{Printed, lines};

mod probe;

pub use probe::{CompletionFiles, probe};

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Nothing to do.
    Ok,
    /// A launch works, with less than it could have.
    Warn,
    /// A launch would fail (or run something other than sandgate).
    Fail,
}

/// One check's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// A stable name for scripts (`user_namespaces`, `landlock`, ...).
    pub name: &'static str,
    /// How it came out.
    pub status: Status,
    /// What was found, one line.
    pub detail: String,
    /// How to fix it (`None` when there is nothing to fix).
    pub fix: Option<String>,
}

impl Check {
    fn ok(name: &'static str, detail: impl Into<String>) -> Check {
        Check { name, status: Status::Ok, detail: detail.into(), fix: None }
    }

    fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { name, status: Status::Warn, detail: detail.into(), fix: Some(fix.into()) }
    }

    fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { name, status: Status::Fail, detail: detail.into(), fix: Some(fix.into()) }
    }
}

/// What the prober found.
#[derive(Clone, Debug)]
pub struct Facts {
    /// The kernel's side (`None` off Linux: Seatbelt, nothing probed here).
    pub kernel: Option<KernelFacts>,
    /// `sandbox-run`, `sandbox-net`, `sandbox-build` as `PATH` finds them.
    pub wrappers: Vec<WrapperFact>,
    /// The daemon.
    pub daemon: DaemonFact,
    /// Every configuration file (the global one, every per-directory one).
    pub config: Vec<ConfigFact>,
    /// The package caches' layers for a launch here.
    pub caches: CacheFacts,
    /// The Telegram bot.
    pub telegram: TelegramFact,
    /// Claude Code's hook.
    pub claude: ClaudeFacts,
    /// Shell completions.
    pub completions: CompletionFacts,
    /// The host's guest-user fences as the daemon last checked them (macOS, daemon as root).
    pub fences: Vec<crate::fences::FenceState>,
}

/// The kernel's side of a launch, tried for real.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelFacts {
    /// Running inside a sandgate sandbox (launches nest there; nothing else was probed).
    pub nested: bool,
    /// A user namespace with a mount namespace, as every launch makes (`Err`: the step and the
    /// kernel's answer).
    pub user_namespace: Result<(), String>,
    /// The sysctl and AppArmor settings that decide about user namespaces.
    pub userns_settings: Vec<(String, String)>,
    /// The Landlock ABI (0: none).
    pub landlock_abi: u32,
    /// What this ABI cannot enforce of what the launcher asks.
    pub landlock_gaps: Vec<String>,
    /// Whether seccomp filters can be installed.
    pub seccomp: bool,
    /// An overlay in a user namespace over the cache layers' file system (`None`: not tried).
    pub overlay: Option<Result<(), String>>,
    /// The sandbox firewall's transparent-capture chain (NAT redirect) in a network namespace
    /// inside a user namespace (`None`: not tried).
    pub capture: Option<Result<(), String>>,
    /// A `net`/`build` network made as a launch makes it (route device, nf_tables batch, NFLOG,
    /// listener): `Ok(None)` with a tun route device, `Ok(Some(why))` with the veth pair made
    /// instead (why there was no tun), `Err` why it could not be made.
    pub network: Result<Option<String>, String>,
}

/// What one wrapper name resolves to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrapperFact {
    /// `sandbox-run`, ...
    pub name: &'static str,
    /// The first executable of that name on `PATH`.
    pub found: Option<PathBuf>,
    /// What the Claude hook would make of it (`None` when not found).
    pub trust: Option<sandgate_hook::Wrapper>,
}

/// The daemon as `status` finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DaemonFact {
    /// Nothing listens on the control socket.
    NotRunning,
    /// It answered.
    Running {
        /// Its pid.
        pid: u64,
        /// Its version.
        version: String,
        /// Whether it speaks this binary's protocol.
        same_protocol: bool,
        /// Events it could not store.
        events_failed: u64,
        /// Why, the last time.
        last_error: Option<String>,
    },
    /// The socket is there but cannot be used.
    Unreachable(String),
}

/// One configuration file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigFact {
    /// Where it is.
    pub path: PathBuf,
    /// `global`, `per-directory (for DIR)` for the one that applies here, or `per-directory`.
    pub role: String,
    /// Why it does not load (file:line:column, message and help), when it does not.
    pub error: Option<String>,
    /// What loads but will be skipped at launch (a configured path that does not exist).
    pub warnings: Vec<String>,
}

/// The package caches' layers for a launch here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheFacts {
    /// `[filesystem] caches` here.
    pub mode: sandgate_config::CacheMode,
    /// Where the layers live.
    pub dir: PathBuf,
    /// Whether that directory can be written (`Err`: why not).
    pub writable: Result<(), String>,
    /// The caches a `build` launch here would layer.
    pub layered: Vec<String>,
    /// Sets of layers kept, their bytes, and how many a running sandbox holds.
    pub scopes: usize,
    /// Bytes of every layer.
    pub bytes: u64,
}

/// The Telegram bot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TelegramFact {
    /// No `[telegram]` section and no token.
    NotConfigured,
    /// Half configured: why the daemon would not start the bot.
    Misconfigured(String),
    /// The Bot API answered getMe, with these warnings about the configuration.
    Reachable {
        /// The bot's `@username`.
        bot: String,
        /// A token in the configuration file, a token file others can read, ...
        warnings: Vec<String>,
    },
    /// The Bot API did not answer.
    Unreachable(String),
}

/// Claude Code's settings files and the hook in them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaudeFacts {
    /// Each settings file that registers a `sandgate hook claude` command, with the command.
    pub registered: Vec<(PathBuf, String)>,
    /// Settings files that could not be read or parsed, with why.
    pub unreadable: Vec<(PathBuf, String)>,
    /// The sandgate binary the hook should run (this one, canonical).
    pub exe: PathBuf,
    /// Where each registered command's program is (canonical; `None`: it does not exist).
    pub programs: Vec<Option<PathBuf>>,
}

/// Shell completions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompletionFacts {
    /// The login shell's name (`$SHELL`'s file name).
    pub shell: Option<String>,
    /// The file `sandgate install` writes for that shell, and whether it is there and current.
    pub file: Option<(PathBuf, FileState)>,
    /// Whether the bash-completion package (which reads user completions) is installed.
    pub bash_completion: bool,
}

/// A generated file's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileState {
    /// Not there.
    Missing,
    /// What this sandgate writes.
    Current,
    /// Another sandgate's.
    Stale,
}

/// Every check, in the order a launch meets them.
pub fn checks(f: &Facts) -> Vec<Check> {
    let mut out = Vec::new();
    match &f.kernel {
        Some(k) => out.extend(kernel_checks(k)),
        None => out.push(Check::ok("sandbox", "Seatbelt (sandbox-exec); no kernel probe here")),
    }
    out.push(wrappers_check(&f.wrappers));
    // Inside a sandbox the host's daemon, data directory and agent settings are hidden on
    // purpose: what doctor would see of them there says nothing about the host.
    let nested = f.kernel.as_ref().is_some_and(|k| k.nested);
    let outside = |name| Check::ok(name, "not checked inside a sandbox (hidden there on purpose)");
    out.push(if nested { outside("daemon") } else { daemon_check(&f.daemon) });
    if !f.fences.is_empty() {
        out.push(fences_check(&f.fences));
    }
    out.push(config_check(&f.config));
    out.push(if nested { outside("caches") } else { caches_check(&f.caches) });
    out.push(telegram_check(&f.telegram));
    out.push(if nested { outside("claude_hook") } else { claude_check(&f.claude) });
    out.push(completions_check(&f.completions));
    out
}

fn kernel_checks(k: &KernelFacts) -> Vec<Check> {
    if k.nested {
        return vec![Check::ok(
            "user_namespaces",
            "inside a sandgate sandbox: launches here nest (they stack their walls on this \
             sandbox's); run doctor outside for the kernel checks",
        )];
    }
    let mut out = Vec::new();
    out.push(match &k.user_namespace {
        Ok(()) => Check::ok(
            "user_namespaces",
            "a user and a mount namespace can be made (every launch makes them, root's too)",
        ),
        Err(why) => {
            let set = |name: &str, value: &str| {
                k.userns_settings.iter().any(|(n, v)| n == name && v == value)
            };
            let fix = if set("kernel.apparmor_restrict_unprivileged_userns", "1") {
                "sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0 (Ubuntu; or an \
                 AppArmor profile allowing `userns` for sandgate)"
            } else if set("kernel.unprivileged_userns_clone", "0") {
                "sudo sysctl kernel.unprivileged_userns_clone=1 (Debian)"
            } else if set("user.max_user_namespaces", "0") {
                "sudo sysctl user.max_user_namespaces=15000"
            } else {
                "allow user namespaces: a kernel with CONFIG_USER_NS, and no container or \
                 seccomp policy refusing unshare(CLONE_NEWUSER)"
            };
            let settings: Vec<String> =
                k.userns_settings.iter().map(|(n, v)| format!("{n}={v}")).collect();
            let settings = if settings.is_empty() {
                String::new()
            } else {
                format!(" ({})", settings.join(", "))
            };
            Check::fail("user_namespaces", format!("no launch can start: {why}{settings}"), fix)
        }
    });
    out.push(if k.landlock_abi == 0 {
        Check::warn(
            "landlock",
            "Landlock is not available: writes are confined by read-only mounts only, and \
             `--require-full` launches refuse to start",
            "boot a kernel with Landlock (5.13 or later) and `lsm=...,landlock` on its command \
             line",
        )
    } else if !k.landlock_gaps.is_empty() {
        Check::warn(
            "landlock",
            format!("ABI {}: not enforced: {}", k.landlock_abi, k.landlock_gaps.join("; ")),
            "a newer kernel (Landlock ABI 6, Linux 6.12, enforces everything the launcher asks)",
        )
    } else {
        Check::ok(
            "landlock",
            format!("ABI {}: every wall the launcher asks is enforced", k.landlock_abi),
        )
    });
    out.push(if k.seccomp {
        Check::ok("seccomp", "seccomp filters can be installed")
    } else {
        Check::fail(
            "seccomp",
            "seccomp filters cannot be installed: no launch can start",
            "a kernel with CONFIG_SECCOMP_FILTER (and no container policy forbidding it)",
        )
    });
    out.push(match &k.overlay {
        Some(Ok(())) => Check::ok(
            "overlayfs",
            "an overlay can be mounted in a user namespace: package caches are copy-on-write",
        ),
        Some(Err(why)) => Check::warn(
            "overlayfs",
            format!(
                "the kernel refuses an overlay in a user namespace ({why}): caches start from \
                 the sandbox's own empty layers (slower; nothing is written back either way)"
            ),
            "Linux 5.11 or later, and sandgate's data directory on a file system that takes \
             user extended attributes (ext4, xfs, btrfs, tmpfs)",
        ),
        None => {
            Check::warn("overlayfs", "not tried: no user namespace", "fix user_namespaces first")
        }
    });
    out.push(match &k.capture {
        Some(Ok(())) => Check::ok(
            "capture",
            "TCP that ignores the proxy variables is captured into the proxy (transparent)",
        ),
        Some(Err(why)) => Check::warn(
            "capture",
            format!(
                "{why}: sandboxes get their firewall without transparent capture, so only \
                 clients that honour the proxy variables reach the network (the rest are refused \
                 and reported)"
            ),
            "a kernel with nf_tables NAT (CONFIG_NFT_REDIR, CONFIG_NF_NAT)",
        ),
        None => Check::warn("capture", "not tried: no user namespace", "fix user_namespaces first"),
    });
    out.push(match &k.network {
        Ok(None) => Check::ok(
            "network",
            "a net/build network can be made: tun route device, nf_tables rules (sent over \
             netlink; no `nft` binary needed), NFLOG, proxy listener",
        ),
        Ok(Some(why)) => Check::warn(
            "network",
            format!(
                "a net/build network can be made, with a veth pair instead of a tun device \
                 ({why}): one device more per launch"
            ),
            if why.contains("mode") {
                "`sudo chmod 0666 /dev/net/tun` (the usual mode: opening it gives no privilege)"
            } else {
                "load the tun module (`sudo modprobe tun`), or give containers /dev/net/tun"
            },
        ),
        Err(why) => Check::fail(
            "network",
            format!("`net` and `build` launches cannot start ({why}); `run` still can"),
            "a kernel with nf_tables (CONFIG_NF_TABLES, nft_reject, nft_log) and NFLOG \
             (CONFIG_NETFILTER_NETLINK_LOG): `sudo modprobe nf_tables nfnetlink_log`",
        ),
    });
    out
}

fn wrappers_check(ws: &[WrapperFact]) -> Check {
    use sandgate_hook::Wrapper;
    let name = "sandbox_links";
    let foreign: Vec<String> = ws
        .iter()
        .filter(|w| matches!(w.trust, Some(Wrapper::Foreign)))
        .filter_map(|w| w.found.as_ref().map(|p| format!("{} is {}", w.name, p.display())))
        .collect();
    if !foreign.is_empty() {
        return Check::fail(
            name,
            format!(
                "{}, not this sandgate: a command meant to run sandboxed would run that",
                foreign.join("; ")
            ),
            "remove those files, or put sandgate's links earlier on PATH (`sandgate install \
             --dir DIR`)",
        );
    }
    let missing: Vec<&str> = ws.iter().filter(|w| w.found.is_none()).map(|w| w.name).collect();
    if !missing.is_empty() {
        return Check::warn(
            name,
            format!("not on PATH: {}", missing.join(", ")),
            "`sandgate install` makes the links in ~/.local/bin; put that directory on PATH",
        );
    }
    let exposed: Vec<String> = ws
        .iter()
        .filter_map(|w| match &w.trust {
            Some(Wrapper::Exposed(why)) => Some(format!("{}: {why}", w.name)),
            _ => None,
        })
        .collect();
    if !exposed.is_empty() {
        return Check::warn(
            name,
            format!(
                "the Claude hook does not trust these (it asks instead): {}",
                exposed.join("; ")
            ),
            "install the links where only you and root can write: `sandgate install --dir \
             ~/.local/bin`",
        );
    }
    let dirs: Vec<String> = ws
        .iter()
        .filter_map(|w| w.found.as_ref()?.parent().map(|d| d.display().to_string()))
        .fold(Vec::new(), |mut v, d| {
            if !v.contains(&d) {
                v.push(d);
            }
            v
        });
    Check::ok(
        name,
        format!(
            "sandbox-run, sandbox-net, sandbox-build in {}; the Claude hook trusts them",
            dirs.join(", ")
        ),
    )
}

fn daemon_check(d: &DaemonFact) -> Check {
    let name = "daemon";
    match d {
        DaemonFact::NotRunning => {
            Check::ok(name, "not running; the first `net` or `build` launch starts it")
        }
        DaemonFact::Running { same_protocol: false, version, pid, .. } => Check::warn(
            name,
            format!("pid {pid} is another sandgate (version {version}, another protocol)"),
            "`sandgate stop`; the next launch starts this sandgate's daemon",
        ),
        DaemonFact::Running { events_failed, last_error, pid, .. } if *events_failed > 0 => {
            Check::warn(
                name,
                format!(
                    "pid {pid} could not store {events_failed} events ({})",
                    last_error.as_deref().unwrap_or("no reason recorded")
                ),
                "free space for sandgate's data directory; `sandgate status` shows the store",
            )
        }
        DaemonFact::Running { pid, version, .. } => {
            Check::ok(name, format!("running (pid {pid}, version {version})"))
        }
        DaemonFact::Unreachable(why) => Check::fail(
            name,
            format!("its control socket cannot be used: {why}"),
            "`sandgate stop`, then check the runtime directory ($XDG_RUNTIME_DIR/sandgate) is \
             yours and mode 0700",
        ),
    }
}

fn fences_check(states: &[crate::fences::FenceState]) -> Check {
    let name = "guest_fence";
    match crate::fences::warnings(states).as_slice() {
        [] => Check::ok(name, format!("{} fence(s) hold", states.len())),
        open => Check::fail(
            name,
            open.join("\n"),
            "`sudo sandgate firewall check` names what opened it; apply the fence again",
        ),
    }
}

fn config_check(files: &[ConfigFact]) -> Check {
    let name = "config";
    let broken: Vec<&ConfigFact> = files.iter().filter(|f| f.error.is_some()).collect();
    if let Some(first) = broken.first() {
        let error = first.error.as_deref().unwrap_or_default();
        let (detail, help) = match error.rsplit_once("\nhelp: ") {
            Some((d, h)) => (d, h),
            None => (error, "fix the file, or move it aside"),
        };
        let first_line = detail.lines().next().unwrap_or(detail);
        let more = match broken.len() {
            1 => String::new(),
            n => format!(" (and {} more invalid file(s))", n - 1),
        };
        return Check::fail(
            name,
            format!("{} ({}) does not load: {first_line}{more}", first.path.display(), first.role),
            format!("{help}; `sandgate config check` in its directory shows the whole error"),
        );
    }
    let warnings: Vec<&String> = files.iter().flat_map(|f| &f.warnings).collect();
    let roles: Vec<String> =
        files.iter().map(|f| format!("{} {}", f.role, f.path.display())).collect();
    let valid = if files.is_empty() {
        "no configuration files: the built-in defaults apply".to_owned()
    } else {
        format!("{} valid: {}", files.len(), roles.join("; "))
    };
    if let Some(w) = warnings.first() {
        return Check::warn(
            name,
            format!("{valid}; warning: {w}"),
            "`sandgate config remove-path PATH`, or create the path",
        );
    }
    Check::ok(name, valid)
}

fn caches_check(c: &CacheFacts) -> Check {
    use sandgate_config::CacheMode;
    let name = "caches";
    if c.mode == CacheMode::Off {
        return Check::ok(
            name,
            "off ([filesystem] caches = \"off\"): package caches are read-only inside",
        );
    }
    if let Err(why) = &c.writable {
        return Check::warn(
            name,
            format!("package caches stay read-only: {} cannot be written ({why})", c.dir.display()),
            format!("make {} a directory you own", c.dir.display()),
        );
    }
    let mode = if c.mode == CacheMode::Shared { "shared" } else { "per project" };
    let layered = if c.layered.is_empty() {
        "no package cache found here".to_owned()
    } else {
        format!("layered here: {}", c.layered.join(", "))
    };
    Check::ok(
        name,
        format!(
            "copy-on-write, {mode}, in {}; {layered}; {} set(s) of layers, {} (`sandgate cache ls`)",
            c.dir.display(),
            c.scopes,
            crate::caches::human(c.bytes)
        ),
    )
}

fn telegram_check(t: &TelegramFact) -> Check {
    let name = "telegram";
    match t {
        TelegramFact::NotConfigured => Check::ok(name, "not configured (optional: [telegram])"),
        TelegramFact::Misconfigured(why) => Check::warn(
            name,
            why.clone(),
            "complete [telegram] (chats and token_file) or remove it",
        ),
        TelegramFact::Reachable { bot, warnings } if !warnings.is_empty() => Check::warn(
            name,
            format!("{bot} answers; {}", warnings.join("; ")),
            "keep the token in a 0600 token_file (or SANDGATE_TELEGRAM_TOKEN), not in the \
             configuration",
        ),
        TelegramFact::Reachable { bot, .. } => {
            Check::ok(name, format!("the Bot API answers as {bot}"))
        }
        TelegramFact::Unreachable(why) => Check::warn(
            name,
            format!("the Bot API does not answer: {why}; questions stay answerable elsewhere"),
            "check the token and this host's way to api.telegram.org (or [telegram] api_url)",
        ),
    }
}

fn claude_check(c: &ClaudeFacts) -> Check {
    let name = "claude_hook";
    if let Some((path, why)) = c.unreadable.first() {
        return Check::warn(
            name,
            format!("{} cannot be read: {why}", path.display()),
            "fix the file (Claude Code ignores a settings file it cannot parse)",
        );
    }
    if c.registered.is_empty() {
        return Check::ok(name, "not registered (optional: `sandgate install --claude`)");
    }
    for ((file, command), program) in c.registered.iter().zip(&c.programs) {
        let named = command.split_whitespace().next().unwrap_or_default();
        match program {
            None => {
                return Check::warn(
                    name,
                    format!(
                        "{} runs {named}, which does not exist: every tool call prompts",
                        file.display()
                    ),
                    "`sandgate install --claude` registers this sandgate",
                );
            }
            Some(p) if *p != c.exe => {
                return Check::warn(
                    name,
                    format!(
                        "{} runs {named}, another sandgate than {}",
                        file.display(),
                        c.exe.display()
                    ),
                    "`sandgate install --claude` registers this sandgate",
                );
            }
            Some(_) => {}
        }
    }
    let files: Vec<String> = c.registered.iter().map(|(f, _)| f.display().to_string()).collect();
    Check::ok(name, format!("registered in {}", files.join(", ")))
}

fn completions_check(c: &CompletionFacts) -> Check {
    let name = "completions";
    let Some((path, state)) = &c.file else {
        let shell = c.shell.as_deref().unwrap_or("(no $SHELL)");
        return Check::ok(
            name,
            format!(
                "none for {shell}; bash, zsh and fish are supported (`sandgate completions --help`)"
            ),
        );
    };
    let shell = c.shell.as_deref().unwrap_or_default();
    match state {
        FileState::Missing => Check::warn(
            name,
            format!("no {shell} completions ({} is missing)", path.display()),
            "`sandgate install` writes them",
        ),
        FileState::Stale => Check::warn(
            name,
            format!("{} is another sandgate's: its completions may be wrong", path.display()),
            "`sandgate install` rewrites them",
        ),
        FileState::Current if shell == "bash" && !c.bash_completion => Check::warn(
            name,
            format!(
                "{} is current, but bash-completion is not installed to read it",
                path.display()
            ),
            format!(
                "install the bash-completion package, or add `source {}` to ~/.bashrc",
                path.display()
            ),
        ),
        FileState::Current if shell == "zsh" => Check::ok(
            name,
            format!(
                "{} is current (zsh reads it when its directory is in fpath before compinit)",
                path.display()
            ),
        ),
        FileState::Current => Check::ok(name, format!("{} is current", path.display())),
    }
}

/// The report: one line per check (and its fix), JSON `{ok, checks}`; exit 1 when a check
/// failed (a launch would fail).
pub fn report(checks: &[Check]) -> Printed {
    let mut out = Vec::new();
    for c in checks {
        let status = match c.status {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        };
        out.push(format!("{status:<5} {:<16} {}", c.name, c.detail));
        if let Some(fix) = &c.fix {
            out.push(format!("{:<22} fix: {fix}", ""));
        }
    }
    let failed = checks.iter().filter(|c| c.status == Status::Fail).count();
    let warned = checks.iter().filter(|c| c.status == Status::Warn).count();
    out.push(match failed {
        0 if warned == 0 => "a launch here would work".to_owned(),
        0 => format!("a launch here would work ({warned} warning(s))"),
        n => format!("a launch here would fail: {n} check(s) failed"),
    });
    let doc = json!({ "ok": failed == 0, "checks": checks });
    let text = serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n";
    Printed::new(lines(out), text).exit(u8::from(failed > 0))
}

#[cfg(test)]
mod tests;
