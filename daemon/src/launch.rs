//! The launcher: a tier's policy resolved from the configuration and the flags, turned into a
//! sandbox spec (hidden and read-only paths, the environment without secrets, git metadata
//! protected), started, its proxy served by the daemon or by this process; and what `install`
//! and `explain` need.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use sandgate_config::{Overrides, Policy};
use sandgate_sandbox::{NetSetup, SandboxId, SandboxSpec};

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
    /// linked in: such a launch is handed to `sandgate` before it starts ([`HandOver`]).
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

/// The [`ServeHere`] of the `sandgate` binary: the allowlist proxy on a small runtime of its
/// own in this process.
#[cfg(any(target_os = "linux", target_os = "macos"))]
pub fn serve_here(
    listener: std::os::fd::OwnedFd,
    dns: Option<[std::os::fd::OwnedFd; 2]>,
    id: &str,
    net: sandgate_config::NetworkPolicy,
    approver: Option<std::sync::Arc<dyn sandgate_proxy::Approver>>,
) -> anyhow::Result<Box<dyn ServedHere>> {
    Ok(Box::new(InProcessProxy::start(listener, dns, id, net, approver)?))
}

/// No sandboxes here.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub fn serve_here(
    _listener: std::os::fd::OwnedFd,
    _dns: Option<[std::os::fd::OwnedFd; 2]>,
    _id: &str,
    _net: sandgate_config::NetworkPolicy,
    _approver: Option<std::sync::Arc<dyn sandgate_proxy::Approver>>,
) -> anyhow::Result<Box<dyn ServedHere>> {
    bail!("sandboxing is not implemented on this platform")
}

/// The launch needs what the small launcher does not have (a proxy served in this process, or
/// the whole command line's help and errors): the launcher runs `sandgate` with the same
/// arguments instead. Returned before anything is started.
#[derive(Debug)]
pub struct HandOver;

impl std::fmt::Display for HandOver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("this launch is for the sandgate binary")
    }
}

impl std::error::Error for HandOver {}

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
    pub fn from_process() -> anyhow::Result<LaunchEnv> {
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
            cwd: std::env::current_dir().context("current directory")?,
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

/// Resolves the policy of `tier` from the configuration layers and the command-line flags.
pub fn resolve_policy(tier: &str, args: &LaunchOptions) -> anyhow::Result<Policy> {
    let config = crate::setup::load_config()?;
    sandgate_sandbox::timing_mark("configuration files loaded");
    let flags = Overrides {
        allow_write: args.allow_write.clone(),
        allow: args.allow.clone(),
        deny: args.deny.clone(),
        net: args.net,
    };
    config.policy(tier, &flags).map_err(|e| crate::UsageError(e.to_string()).into())
}

/// Refuses a launch whose tier would make a working directory writable that may not be a
/// writable root (`/`, a home or what holds one, a system place: [`sandgate_config::RootRule`]),
/// unless `--allow-write` names it. The agent hook applies the same rule before it approves.
pub fn refuse_writable_cwd(policy: &Policy, ctx: &LaunchEnv) -> anyhow::Result<()> {
    let rule =
        sandgate_config::RootRule::resolved(ctx.home.iter().chain(&ctx.passwd_home).cloned());
    if let Some(r) = policy.fs.cwd_refusal(&rule) {
        return Err(crate::UsageError(writable_cwd_message(&policy.tier, &r)).into());
    }
    // In a package cache (`cd ~/go/pkg/mod`): what the build writes there is what the host's
    // own builds run; the layer cannot cover the directory the command works in.
    let cwd = policy
        .fs
        .writable
        .iter()
        .find(|w| w.source == sandgate_config::RuleSource::CurrentDirectory);
    let named = |dir: &std::path::Path| {
        policy.fs.writable.iter().any(|w| {
            w.source == sandgate_config::RuleSource::CommandLine && dir.starts_with(&w.path)
        })
    };
    if let Some(cwd) = cwd.filter(|c| !named(&c.path))
        && let Some(cache) = crate::caches::holding(ctx, &cwd.path)
    {
        return Err(crate::UsageError(format!(
            "refusing to make the working directory writable: the `{}` tier writes where it \
             starts, and {} is in the {} cache ({}), whose files your own builds run without \
             checking them again. Start it in a project directory, or, to make exactly this \
             directory writable, name it: --allow-write {}",
            policy.tier,
            cwd.path.display(),
            cache.name,
            cache.path.display(),
            cwd.path.display()
        ))
        .into());
    }
    Ok(())
}

/// What to say when the working directory may not be writable: why, and the explicit way out.
fn writable_cwd_message(tier: &str, r: &sandgate_config::RootRefusal) -> String {
    format!(
        "refusing to make the working directory writable: the `{tier}` tier writes where it \
         starts, and {r}, where a command could leave files that run later outside the sandbox \
         (such as ~/bin/ls, which your next shell finds in PATH). Start it in a project \
         directory, or, to make exactly this directory writable, name it: --allow-write {}",
        r.dir.display()
    )
}

/// Builds the sandbox spec from a resolved policy and the launch environment.
pub fn spec_from_policy(
    policy: &Policy,
    args: &LaunchOptions,
    ctx: &LaunchEnv,
    id: SandboxId,
) -> anyhow::Result<SandboxSpec> {
    spec_and_removed(policy, args, ctx, id).map(|(spec, _)| spec)
}

/// [`spec_from_policy`], and the names of the secret-looking variables it left out (in order,
/// each once), found in the same pass over the environment.
fn spec_and_removed(
    policy: &Policy,
    args: &LaunchOptions,
    ctx: &LaunchEnv,
    id: SandboxId,
) -> anyhow::Result<(SandboxSpec, Vec<String>)> {
    let writable: Vec<PathBuf> = present_writable(&policy.fs.writable);
    // The policy already holds the built-in credential list, config `deny_read` and
    // SANDGATE_EXTRA_DENY; the store is hidden on top (grants and events are nobody's business
    // inside).
    let mut hidden: Vec<PathBuf> = policy.fs.hidden.iter().map(|h| h.path.clone()).collect();
    // Secrets' sources: hidden files, and variables removed below, in every tier.
    let (source_vars, source_files) = policy.net.intercept().secret_sources();
    hidden.extend(source_files);
    if let Some(data) = &ctx.data_home {
        hidden.push(data.join("sandgate"));
    }
    // The daemon's control socket: nothing inside may answer its own questions.
    hidden.push(ctx.runtime_dir.clone());
    hidden.extend(ctx.other_runtime_dirs.iter().cloned());
    // sandgate's configuration is read outside; inside, a copy without secrets replaces it (for
    // nested launches). The home directories' dot-entries outside the allowlist and the system's
    // secret files are hidden; what the launch needs stays (see `secrets::hidden_in_home`).
    let config_dir = ctx.config_home.as_ref().map(|c| c.join("sandgate"));
    let mut keep: Vec<PathBuf> = writable.clone();
    keep.extend([Some(ctx.cwd.clone()), config_dir.clone()].into_iter().flatten());
    keep.extend(ctx.exes.iter().cloned());
    let homes: Vec<PathBuf> = ctx.home.iter().chain(&ctx.passwd_home).cloned().collect();
    hidden.extend(crate::secrets::hidden_for_launch(&homes, &policy.fs.readable_home, &keep));
    let mut provided: Vec<sandgate_sandbox::ProvidedDir> = match &config_dir {
        // Seatbelt has no mounts: there the directory is hidden.
        Some(dir) if cfg!(not(target_os = "linux")) => {
            hidden.push(dir.clone());
            Vec::new()
        }
        Some(dir) => vec![crate::secrets::config_copy(dir, &ctx.cwd)],
        None => Vec::new(),
    };
    let mut read_only = Vec::new();
    let mut top_placeholders = Vec::new();
    for w in writable.iter().filter(|w| !w.is_file()) {
        read_only.extend(policy.fs.protected.iter().map(|p| w.join(p)));
        if let Some(home) = &ctx.home
            && home.starts_with(w)
        {
            let autorun = defaults::SHELL_RC.iter().chain(defaults::HOME_AUTORUN);
            read_only.extend(autorun.map(|p| home.join(p)));
            // A new terminal runs these with no action of the user: no window at all.
            top_placeholders.extend(defaults::SHELL_RC.iter().map(|p| home.join(p)));
            top_placeholders.push(home.join(".gitconfig"));
        }
    }
    // Directories of programs the host runs by name (`PATH`, `GOBIN`): read-only where they lie
    // in a writable path (`cd ~/go && sandbox-build ...` must not plant `~/go/bin/gopls`).
    if let Some(home) = &ctx.home {
        let var = |name: &str| {
            ctx.env
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .filter(|v| !v.is_empty())
        };
        for dir in sandgate_config::program_dirs(var, home) {
            let dir = dir.canonicalize().unwrap_or(dir);
            if writable.iter().any(|w| dir.starts_with(w)) && dir.is_dir() {
                read_only.push(dir);
            }
        }
    }
    // One scan of the writable trees (see `sandgate_sandbox::tree`): the repositories in them
    // for the git wall, the files host tools execute or obey below their tops.
    let mut top_level = top_level_rule(policy, ctx);
    top_level.placeholders = top_placeholders;
    let roots: Vec<PathBuf> =
        writable.iter().filter_map(|w| w.canonicalize().ok()).filter(|w| w.is_dir()).collect();
    sandgate_sandbox::timing_mark("hidden and read-only paths listed");
    let scan = sandgate_sandbox::tree::scan(&roots, &top_level);
    sandgate_sandbox::timing_mark("writable trees scanned");
    read_only.extend(scan.protected.iter().cloned());
    // Git metadata: from git's own index and config (see `sandgate_sandbox::gitwall`).
    let git = sandgate_sandbox::gitwall::protect_git_found(
        &writable,
        policy.fs.git_writable,
        ctx.home.as_deref(),
        &sandgate_sandbox::gitwall::outer_config(&ctx.env),
        &scan.repositories,
    );
    if let Some(link) = git.links.first() {
        anyhow::bail!(
            "{} is a symbolic link inside a writable path on the way to git metadata that must \
             stay read-only (hooks, config, a submodule's .git): a link cannot be kept in place \
             from inside, so the command could replace it with its own. Replace the link with \
             the directory or file it points to, or use a tier without writable paths here",
            link.display()
        );
    }
    if let Some(why) = git.refuse.first() {
        anyhow::bail!(
            "the git metadata around the writable paths cannot be protected: {why}. Unset the \
             variable, or fix the repository (`git status` shows what git makes of it), or use a \
             tier without writable paths here"
        );
    }
    for note in &git.notes {
        eprintln!("sandgate: git metadata not fully read (protected as far as read): {note}");
    }
    read_only.extend(git.read_only);
    let net = match policy.net.mode {
        sandgate_config::NetMode::None => NetSetup::None,
        sandgate_config::NetMode::Proxy => NetSetup::Proxy { nflog_group: defaults::NFLOG_GROUP },
    };
    // The caller's own proxy variables must not leak in: inside, they point at the sandbox's proxy
    // (git's and the JVM's are added to the caller's settings). Nor the Telegram bot's token
    // (meant for the daemon this launcher may start).
    // Secret-looking variables go too, unless `[env] pass` keeps them.
    let secrets = sandgate_config::EnvFilter::new(&policy.env_pass);
    let (mut caller, removed) = crate::secrets::scrub_env(&ctx.env, &secrets);
    caller.retain(|(k, _)| {
        k != "SANDGATE_SANDBOX"
            && k != "SANDGATE_TIER"
            && k != "GIT_OPTIONAL_LOCKS"
            && k != sandgate_approvals::telegram::TOKEN_ENV
            && !source_vars.iter().any(|v| k == v.as_str())
    });
    let proxy_port = match net {
        NetSetup::None => None,
        NetSetup::Proxy { .. } => Some(ctx.proxy_port),
    };
    let mut env = sandgate_sandbox::with_proxy_env(&caller, proxy_port);
    if proxy_port.is_some()
        && let Some(ssh) = crate::sandgate_exe()
            .ok()
            .and_then(|exe| sandgate_sandbox::git_ssh_command(&exe, &caller))
    {
        env.retain(|(k, _)| k != "GIT_SSH_COMMAND");
        env.push(("GIT_SSH_COMMAND".into(), ssh));
    }
    env.push(("SANDGATE_SANDBOX".into(), id.to_string().into()));
    env.push(("SANDGATE_TIER".into(), policy.tier.clone().into()));
    // git's background index refresh would write .git/index (read-only in every tier) and fail.
    env.push(("GIT_OPTIONAL_LOCKS".into(), "0".into()));
    // Secrets' placeholders and the CA bundle, when the proxy intercepts for this sandbox.
    if proxy_port.is_some()
        && let Some(dir) = provided.iter_mut().find(|d| Some(&d.path) == config_dir.as_ref())
    {
        crate::setup::sandbox_env(
            policy.net.intercept(),
            Some(&dir.path),
            &mut env,
            &mut dir.files,
        )?;
    }
    let interactive =
        args.command.is_empty() || std::io::IsTerminal::is_terminal(&std::io::stdin());
    // (The configuration is read again only for an interactive shell.)
    if interactive && crate::setup::load_config().map_or(true, |c| c.prompt_marker()) {
        crate::agent_env::prompt_marker(&mut env, &policy.tier);
    }
    let command = if args.command.is_empty() {
        let shell = ctx
            .env
            .iter()
            .find(|(k, _)| k == "SHELL")
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "/bin/sh".into());
        vec![shell, "-i".into()]
    } else {
        args.command.clone()
    };
    let spec = SandboxSpec {
        top_level: Some(top_level),
        scan,
        id,
        tier_name: policy.tier.clone(),
        cwd: ctx.cwd.clone(),
        command,
        env,
        writable,
        caches: Vec::new(),
        hidden,
        read_only,
        provided,
        visible: homes.into_iter().chain(ctx.exes.iter().cloned()).collect(),
        net,
        allowed_unix_sockets: policy.fs.unix_sockets.iter().map(|u| u.path.clone()).collect(),
        require_full: args.require_full,
        // The launcher reads the command's stderr for "Read-only file system" (its exit line
        // then names the path and the fix); not at all when asked to be quiet.
        report_read_only: !args.quiet,
    };
    Ok((spec, removed))
}

/// The writable paths that exist. A configured one that does not (a directory removed since
/// `config add-path`, a typo) is skipped with one line naming where it came from and how to drop
/// it, instead of failing every launch in that directory.
fn present_writable(rules: &[sandgate_config::PathRule]) -> Vec<PathBuf> {
    rules
        .iter()
        .filter(|w| {
            // A flag naming a missing path is a mistake to report (the launch fails on it).
            let present = !matches!(
                w.source,
                sandgate_config::RuleSource::File { .. } | sandgate_config::RuleSource::Preset(_)
            ) || std::fs::symlink_metadata(&w.path).is_ok();
            if !present {
                eprintln!("sandgate: warning: {}", missing_path_notice(w));
            }
            present
        })
        .map(|w| w.path.clone())
        .collect()
}

/// The rule for each writable path: at its top, dot-entries read-only unless allowlisted, the
/// autorun names and the configured top-level `protected` names read-only; below it, the files
/// host tools execute or obey (`host_tools.txt`) read-only unless allowlisted, their build
/// output not entered and their build code reported when changed; new protected entries moved
/// to the quarantine in sandgate's data directory (hidden inside every sandbox).
fn top_level_rule(policy: &Policy, ctx: &LaunchEnv) -> sandgate_sandbox::TopLevel {
    use sandgate_config::ToolFileKind;
    let mut protected: Vec<String> =
        sandgate_config::top_autorun().iter().map(|s| s.to_string()).collect();
    protected.extend(policy.fs.protected.iter().filter(|p| !p.contains('/')).cloned());
    let names = |kind| sandgate_config::names_of(kind).into_iter().map(str::to_owned).collect();
    sandgate_sandbox::TopLevel {
        writable: policy.fs.writable_dotfiles.clone(),
        protected,
        below: names(ToolFileKind::Protect),
        review: names(ToolFileKind::Review),
        skip: names(ToolFileKind::Skip),
        quarantine: ctx.data_home.as_ref().map(|d| d.join("sandgate").join("quarantine")),
        placeholders: Vec::new(),
    }
}

/// Says once, on stderr, which secret-looking variables the command will not get (names only).
fn removal_notice(removed: &[String]) {
    if !removed.is_empty() {
        eprintln!(
            "sandgate: not passed to the command (secret-looking): {}; keep one with \
             `[env] pass = [\"NAME\"]` in the configuration",
            removed.join(", ")
        );
    }
}

/// What to say about writable path `w` that does not exist.
pub fn missing_path_notice(w: &sandgate_config::PathRule) -> String {
    let fix = match &w.source {
        sandgate_config::RuleSource::File { path, line } => format!(
            "from {}:{line}; remove it with `sandgate config remove-path {}`{}",
            path.display(),
            w.path.display(),
            if path.ends_with("config.toml") { " --global" } else { "" }
        ),
        other => format!("from {other}"),
    };
    format!("skipping writable path {} (it does not exist), {fix}", w.path.display())
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

/// Runs a command in the named tier; returns its exit status.
pub fn run(tier: &str, args: LaunchOptions) -> anyhow::Result<u8> {
    // Inside one of our own sandboxes no namespace can be made (by design): narrow it instead.
    #[cfg(target_os = "linux")]
    if let Some(outer) = sandgate_sandbox::inside_sandbox() {
        return run_nested(tier, &args, &outer);
    }
    #[cfg(target_os = "macos")]
    if sandgate_sandbox::inside_seatbelt() {
        return run_nested_seatbelt(tier, &args);
    }
    // A network made ahead, asked for now and read once the policy is known (see `netpool`).
    sandgate_sandbox::timing_mark("arguments parsed");
    let asked = ask_for_network(tier, &args);
    sandgate_sandbox::timing_mark("network asked of the daemon");
    let ctx = LaunchEnv::from_process()?;
    sandgate_sandbox::timing_mark("launch environment read");
    let policy = resolve_policy(tier, &args)?;
    refuse_writable_cwd(&policy, &ctx)?;
    sandgate_sandbox::timing_mark("configuration loaded, policy resolved");
    // The runtime directory must exist before the sandbox starts, so that it is hidden inside
    // even when the daemon is started (and creates its socket there) afterwards.
    crate::Paths::discover().ensure_dir()?;
    // So is the login session's one when this shell uses another (a daemon started there later
    // must not be reachable from inside either); /tmp is private inside anyway.
    for other in ctx.other_runtime_dirs.iter().filter(|d| d.starts_with("/run/user")) {
        let _ = crate::Paths::in_dir(other.clone()).ensure_dir();
    }
    let mut ctx = ctx;
    let host_listener = host_proxy_listener(&policy, &mut ctx)?;
    // A loopback network (`run`) holds nothing of the sandbox's id (no firewall, no NFLOG): its
    // answer is read at the clone, so that the daemon's round trip overlaps the spec and the
    // plan. A proxy network's id is the sandbox's (its NFLOG prefix): read now.
    let (late, (answered, prepared)) = match policy.net.mode {
        sandgate_config::NetMode::None => (asked, (None, None)),
        sandgate_config::NetMode::Proxy => (None, prepared_network(&policy, asked)),
    };
    // The small launcher serves no proxy: a launch whose proxy no daemon of this protocol will
    // take (none runs, an older one runs, or `SANDGATE_NO_DAEMON=1`) goes to `sandgate` before
    // anything is made, which starts a daemon or serves the proxy itself.
    if policy.net.mode == sandgate_config::NetMode::Proxy
        && args.serve_here.is_none()
        && (no_daemon(&args)
            || !answered
                .unwrap_or_else(crate::launch_daemon::Greeting::running_speaks_this_protocol))
    {
        return Err(HandOver.into());
    }
    let id = match prepared_id(&prepared) {
        Some(id) => id,
        None => new_id().context("no sandbox id")?,
    };
    let (mut spec, removed) = spec_and_removed(&policy, &args, &ctx, id)?;
    removal_notice(&removed);
    // Held (the slot's lock) until the sandbox is gone.
    let layers = crate::caches::prepare(&policy, &ctx);
    for note in &layers.notes {
        eprintln!("sandgate: {note}");
    }
    spec.caches = layers.caches.clone();
    spec.hidden.extend(layers.hidden.iter().cloned());
    if let Some(notice) = sandgate_sandbox::tree::unread_notice(&spec.scan.unread, 5) {
        eprintln!("sandgate: {notice}");
    }
    sandgate_sandbox::timing_mark("spec built");
    let (code, network_failure) =
        launch(&spec, &args, policy.net, host_listener, (prepared, late))?;
    drop(layers);
    sandgate_sandbox::timing_mark("command ended, sandbox gone");
    if let Some(hint) = failure_hint(&spec, &args, code, network_failure) {
        sandgate_sandbox::notice::notice(&format!("sandgate: {hint}"));
    }
    Ok(code)
}

/// Asks the running daemon for a network made ahead (see `netpool`): loopback only for `run`,
/// with the proxy's route device, firewall and sockets for the others (the policy may yet say
/// otherwise, and then the network is let go unused). None with `SANDGATE_NO_DAEMON=1` or
/// `--learn`, and none is started for this.
#[cfg(target_os = "linux")]
fn ask_for_network(tier: &str, args: &LaunchOptions) -> Option<crate::launch_daemon::NetworkAsked> {
    use sandgate_sandbox::NetKind;
    // The tier's usual network, unless the flags choose one (`--net none`).
    let kind = match (args.net, tier) {
        (Some(mode), _) => NetKind::from(mode),
        (None, "run") => NetKind::Loopback,
        (None, _) => NetKind::Proxy,
    };
    (!no_daemon(args)).then(|| crate::launch_daemon::NetworkAsked::send(kind)).flatten()
}

#[cfg(not(target_os = "linux"))]
fn ask_for_network(_tier: &str, _args: &LaunchOptions) -> Option<std::convert::Infallible> {
    None
}

/// Whether the daemon asked answered in this launcher's protocol (`None`: none was asked, or no
/// answer came in time), and the network it gave, when it is of the kind the policy gives the
/// tier.
#[cfg(target_os = "linux")]
fn prepared_network(
    policy: &Policy,
    asked: Option<crate::launch_daemon::NetworkAsked>,
) -> (Option<bool>, PreparedNet) {
    // No answer in time: whether a daemon of this protocol runs is asked again (`hello`).
    asked.map_or((None, None), |a| receive_network(a, policy.net.mode.into()))
}

/// The daemon's answer to `asked`: whether it speaks this launcher's protocol, and the network
/// it gave when it is of `kind`.
#[cfg(target_os = "linux")]
fn receive_network(
    asked: crate::launch_daemon::NetworkAsked,
    kind: sandgate_sandbox::NetKind,
) -> (Option<bool>, PreparedNet) {
    let (speaks, network) = asked.receive();
    let taken = network.filter(|n| n.kind() == kind);
    sandgate_sandbox::timing_mark(if taken.is_some() {
        "network taken from the daemon"
    } else {
        "no network ready at the daemon"
    });
    (speaks, taken)
}

#[cfg(not(target_os = "linux"))]
fn prepared_network(
    _policy: &Policy,
    _asked: Option<std::convert::Infallible>,
) -> (Option<bool>, PreparedNet) {
    (None, None)
}

/// A network made ahead (Linux only).
#[cfg(target_os = "linux")]
type PreparedNet = Option<sandgate_sandbox::PreparedNetwork>;
#[cfg(not(target_os = "linux"))]
type PreparedNet = Option<std::convert::Infallible>;

/// A network asked for whose answer is read at the clone (Linux only).
#[cfg(target_os = "linux")]
type AskedNet = Option<crate::launch_daemon::NetworkAsked>;
#[cfg(not(target_os = "linux"))]
type AskedNet = Option<std::convert::Infallible>;

/// The sandbox id a network made ahead was made for (its NFLOG prefix): the sandbox's.
#[cfg(target_os = "linux")]
fn prepared_id(prepared: &PreparedNet) -> Option<SandboxId> {
    prepared.as_ref().map(|n| n.id.clone())
}

#[cfg(not(target_os = "linux"))]
fn prepared_id(prepared: &PreparedNet) -> Option<SandboxId> {
    prepared.as_ref().map(|n| match *n {})
}

/// One line after a failed command in a tier without network: "Could not resolve host" says
/// nothing about the sandbox, and an agent reading it would otherwise retry in vain. Only after
/// output that looked like a network failure (`network_failure`, from the relay of the command's
/// stderr: name resolution, a refused or unreachable connection), not after any failure
/// (`sandbox-run false`); `None` (nothing relayed, as on macOS): after any failure.
fn failure_hint(
    spec: &SandboxSpec,
    args: &LaunchOptions,
    code: u8,
    network_failure: Option<bool>,
) -> Option<String> {
    // 126/127: not started; 128+N: killed (Ctrl-C is no failure to explain).
    let failed = code != 0 && code < 126 && network_failure != Some(false);
    (failed && !args.quiet && !args.command.is_empty() && spec.net == NetSetup::None).then(|| {
        format!(
            "note: the `{}` tier has no network; if the command needed it, run it with \
             sandbox-net (or `sandgate net --`), where the allowlist proxy decides",
            spec.tier_name
        )
    })
}

/// A launch inside a sandgate sandbox: the inner tier's walls on top of the outer's, in this
/// process, which becomes the command (so its exit status and signals are the caller's to see).
/// No namespace, no proxy, no daemon: the outer's network and proxy serve a tier with network,
/// and the inner `--allow`/`--deny` cannot change what that proxy decides.
#[cfg(target_os = "linux")]
fn run_nested(
    tier: &str,
    args: &LaunchOptions,
    outer: &sandgate_sandbox::OuterSandbox,
) -> anyhow::Result<u8> {
    use sandgate_sandbox::SandboxError;
    let ctx = LaunchEnv::from_process()?;
    let policy = resolve_policy(tier, args)?;
    refuse_writable_cwd(&policy, &ctx)?;
    let (mut spec, removed) =
        spec_and_removed(&policy, args, &ctx, new_id().context("no sandbox id")?)?;
    removal_notice(&removed);
    let filter = sandgate_config::EnvFilter::new(&policy.env_pass);
    let (caller, _) = crate::secrets::scrub_env(&ctx.env, &filter);
    spec.env = nested_env(&caller, &spec.net, &spec.id, &policy.tier);
    if spec.net != NetSetup::None && !outer.network {
        let name = outer.tier.as_deref().unwrap_or("run");
        eprintln!("sandgate: nested in a `{name}` sandbox: no network");
    }
    let mut nested = match sandgate_sandbox::prepare_nested(&spec) {
        Ok(n) => n,
        Err(SandboxError::CommandNotFound { command }) => {
            eprintln!("sandgate: {command}: command not found");
            return Ok(127);
        }
        Err(e) => return Err(e.into()),
    };
    if spec.net != NetSetup::None {
        for d in &args.deny {
            nested.enforcement.missing.push(format!(
                "--deny {d}: a nested sandbox shares the outer sandbox's proxy, which decides alone"
            ));
        }
        if !args.allow.is_empty() {
            eprintln!(
                "sandgate: note: --allow is not applied inside a sandbox: the outer sandbox's \
                 proxy decides (allow it there)"
            );
        }
    }
    let err = nested.exec(|enforcement| {
        for m in &enforcement.missing {
            eprintln!("sandgate: warning: not enforced: {m}");
        }
    });
    match err {
        SandboxError::CommandNotFound { command } => {
            eprintln!("sandgate: {command}: command not found");
            Ok(127)
        }
        SandboxError::Io { what: "exec", source } => {
            eprintln!("sandgate: {}: {source}", spec.command[0].to_string_lossy());
            Ok(126)
        }
        e => Err(e.into()),
    }
}

/// A launch inside a Seatbelt sandbox (macOS cannot stack profiles): in place under the outer
/// walls when they are the ones asked for, else a clear refusal ([`sandgate_sandbox::seatbelt::nested`]).
#[cfg(target_os = "macos")]
fn run_nested_seatbelt(tier: &str, args: &LaunchOptions) -> anyhow::Result<u8> {
    use sandgate_sandbox::seatbelt::{Nested, nested};
    use std::os::unix::process::CommandExt as _;
    // Only a sandgate sandbox names its tier (a variable the command could change, but only to
    // fool itself: the outer walls apply whatever it says).
    let outer = std::env::var("SANDGATE_TIER")
        .ok()
        .filter(|_| std::env::var_os("SANDGATE_SANDBOX").is_some());
    // Flags that change the walls: none can be applied without a second profile.
    let flags: Vec<&str> = [
        ("--allow-write", !args.allow_write.is_empty()),
        ("--net", args.net.is_some()),
        ("--allow", !args.allow.is_empty()),
        ("--deny", !args.deny.is_empty()),
    ]
    .into_iter()
    .filter_map(|(flag, given)| given.then_some(flag))
    .collect();
    match nested(outer.as_deref(), tier, &flags) {
        Nested::Refuse { message } => Err(crate::UsageError(message).into()),
        Nested::RunInPlace { note } => {
            if !args.quiet {
                eprintln!("{note}");
            }
            // No command: an interactive shell, as outside.
            let shell = std::env::var_os("SHELL").filter(|s| !s.is_empty());
            let default = [shell.unwrap_or_else(|| "/bin/sh".into()), "-i".into()];
            let command = if args.command.is_empty() { &default[..] } else { &args.command[..] };
            let (program, rest) = command.split_first().context("empty command")?;
            let err = std::process::Command::new(program).args(rest).exec();
            eprintln!("sandgate: {}: {err}", program.to_string_lossy());
            Ok(if err.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 })
        }
    }
}

/// The environment of a nested command: the caller's (the outer sandbox's, proxy variables
/// included, untouched: the outer's proxy is the only one) with the inner tier named; without
/// network the proxy variables go. `SANDGATE_SANDBOX` stays the outer's id (the sandbox whose
/// network and proxy these are), or is `id` when missing.
#[cfg(target_os = "linux")]
fn nested_env(
    caller: &[(OsString, OsString)],
    net: &NetSetup,
    id: &SandboxId,
    tier: &str,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = match net {
        NetSetup::None => sandgate_sandbox::with_proxy_env(caller, None),
        NetSetup::Proxy { .. } => caller.to_vec(),
    };
    env.retain(|(k, _)| k != "SANDGATE_TIER");
    if !env.iter().any(|(k, _)| k == "SANDGATE_SANDBOX") {
        env.push(("SANDGATE_SANDBOX".into(), id.to_string().into()));
    }
    env.push(("SANDGATE_TIER".into(), tier.into()));
    env
}

#[cfg(target_os = "linux")]
fn launch(
    spec: &SandboxSpec,
    args: &LaunchOptions,
    net: sandgate_config::NetworkPolicy,
    _on_host: HostListener,
    (prepared, asked): (PreparedNet, AskedNet),
) -> anyhow::Result<(u8, Option<bool>)> {
    use sandgate_sandbox::SandboxError;
    let hooks = Hooks {
        greet: !no_daemon(args) && matches!(spec.net, NetSetup::Proxy { .. }),
        greeting: std::cell::RefCell::new(None),
        prepared: std::cell::RefCell::new(prepared),
        asked: std::cell::RefCell::new(asked),
    };
    let launched = match sandgate_sandbox::launch(spec, &hooks) {
        Ok(l) => l,
        Err(SandboxError::CommandNotFound { command }) => {
            eprintln!("sandgate: {command}: command not found");
            return Ok((127, None));
        }
        Err(e) => return Err(e.into()),
    };
    for m in &launched.enforcement.missing {
        eprintln!("sandgate: warning: not enforced: {m}");
    }
    // The daemon serves the proxy on the listener created inside the namespace (started only
    // now: `launch` needs a single-threaded process). Without a daemon (SANDGATE_NO_DAEMON=1, or
    // none can be started) the launcher serves it itself, refusing what nobody can approve.
    let mut launched = launched;
    let mut served = Served::None;
    if let Some(fd) = launched.listener.take() {
        let nflog = launched.nflog.take();
        let dns = launched.dns.take();
        served = serve(spec, args, net, fd, nflog, dns, hooks.greeting.take())?;
        sandgate_sandbox::timing_mark("proxy served (daemon registered, or in process)");
    }
    let read_only = launched.read_only_reports();
    // The daemon hears of the end as soon as init reports the command's status: its answer
    // then comes while the namespaces are torn down, not after.
    let code = launched.wait_with(|code| served.unregister(code, args.report_blocked))?;
    sandgate_sandbox::timing_mark("sandbox gone (init reaped, stderr relayed)");
    served.finish(code, args.report_blocked);
    sandgate_sandbox::timing_mark("proxy released (daemon answered unregister)");
    let network_failure =
        read_only.as_ref().map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).network_failure());
    read_only_hint(spec, read_only, code);
    Ok((code, network_failure))
}

/// After a failed command: the read-only paths it reported and how to open them (see
/// `readonly_hint`).
#[cfg(target_os = "linux")]
fn read_only_hint(
    spec: &SandboxSpec,
    reports: Option<sandgate_sandbox::readonly::SharedScanner>,
    code: u8,
) {
    // 126/127: not started; 129–192: killed by a signal (Ctrl-C is no failure to explain).
    // 128 and 255 are real failures (git's `fatal:` and `error:` exits).
    let failed = code != 0 && !matches!(code, 126 | 127 | 129..=192);
    let Some(reports) = reports.filter(|_| failed) else { return };
    let scanner = reports.lock().unwrap_or_else(|e| e.into_inner());
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    let var = |v: &str| std::env::var_os(v).filter(|x| !x.is_empty());
    let caches =
        home.as_deref().map(|h| sandgate_config::package_caches(var, h)).unwrap_or_default();
    let cx = crate::readonly_hint::Context {
        tier: &spec.tier_name,
        cwd: &spec.cwd,
        home: home.as_deref(),
        writable: &spec.writable,
        caches: &caches,
    };
    for line in crate::readonly_hint::lines(&cx, scanner.paths(), scanner.unnamed()) {
        sandgate_sandbox::notice::notice(&format!("sandgate: {line}"));
    }
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
enum Served {
    None,
    Daemon(crate::launch_daemon::DaemonLink),
    InProcess(Box<dyn ServedHere>, Option<BlockedReporter>),
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
impl Served {
    /// The command ended with `code` (the sandbox may still be going away): tell the daemon,
    /// without waiting for its answer.
    #[cfg(target_os = "linux")]
    fn unregister(&mut self, code: u8, report_blocked: bool) {
        if let Served::Daemon(link) = self {
            link.unregister(i32::from(code), report_blocked);
        }
    }

    /// The command ended with `code`: tell the daemon (unless `unregister` did) and wait for its
    /// answer (with the last blocked-traffic lines with `report_blocked`), or stop serving the
    /// proxy here.
    fn finish(self, code: u8, report_blocked: bool) {
        match self {
            Served::Daemon(link) => link.finish(i32::from(code), report_blocked),
            Served::InProcess(proxy, reporter) => {
                if let Some(r) = reporter {
                    r.finish();
                }
                proxy.stop();
            }
            Served::None => {}
        }
    }
}

/// Whether this launch serves its proxy itself (`--learn`, or `SANDGATE_NO_DAEMON=1`).
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn no_daemon(args: &LaunchOptions) -> bool {
    args.approver.is_some()
        || std::env::var_os("SANDGATE_NO_DAEMON").is_some_and(|v| !v.is_empty() && v != "0")
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
fn serve(
    spec: &SandboxSpec,
    args: &LaunchOptions,
    net: sandgate_config::NetworkPolicy,
    listener: std::os::fd::OwnedFd,
    nflog: Option<std::os::fd::OwnedFd>,
    dns: Option<[std::os::fd::OwnedFd; 2]>,
    greeting: Option<anyhow::Result<crate::launch_daemon::Greeting>>,
) -> anyhow::Result<Served> {
    use std::io::IsTerminal as _;
    if !no_daemon(args) {
        let info = crate::protocol::SandboxInfo {
            id: spec.id.to_string(),
            tier: spec.tier_name.clone(),
            command: spec.command.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
            cwd: spec.cwd.clone(),
            pid: std::process::id(),
            allow: args.allow.clone(),
            deny: args.deny.clone(),
            net_proxy: args.net == Some(sandgate_config::NetMode::Proxy),
            no_ask: args.no_ask,
        };
        // Keep copies: if the daemon cannot take them, this process serves them.
        let copies = (listener.try_clone()?, nflog.as_ref().map(|n| n.try_clone()).transpose()?);
        let out = crate::launch_daemon::Output {
            report_blocked: args.report_blocked,
            tty_notices: std::io::stdin().is_terminal() && std::io::stderr().is_terminal(),
            stderr_notices: !args.quiet,
        };
        let dns_copies = match &dns {
            Some([u, t]) => Some([u.try_clone()?, t.try_clone()?]),
            None => None,
        };
        match crate::launch_daemon::DaemonLink::start(
            greeting, info, copies.0, copies.1, dns_copies, out,
        ) {
            Ok(link) => return Ok(Served::Daemon(link)),
            // The small launcher: the daemon answered before the launch (or it would have been
            // handed to `sandgate`), and went away or refused it since.
            Err(e) if args.serve_here.is_none() => bail!(
                "the daemon did not take the sandbox's proxy ({e:#}), and {} cannot serve it \
                 itself: run the command again, or with `sandgate {}`",
                crate::LAUNCHER_NAME,
                spec.tier_name
            ),
            Err(e) => eprintln!(
                "sandgate: warning: no daemon ({e:#}); serving the proxy in this process: \
                 destinations outside the allowlist are refused instead of asked"
            ),
        }
    }
    // (A launch without a daemon is handed to `sandgate` before it starts: see `HandOver`.)
    let Some(serve_here) = args.serve_here else {
        bail!("{} cannot serve the sandbox's proxy itself", crate::LAUNCHER_NAME);
    };
    let proxy = serve_here(listener, dns, spec.id.as_str(), net, args.approver.clone())?;
    let reporter = match (args.report_blocked, nflog) {
        (true, Some(fd)) => Some(BlockedReporter::start(fd)),
        _ => None,
    };
    Ok(Served::InProcess(proxy, reporter))
}

/// The allowlist proxy on the sandbox's listener, on a small runtime of its own. Nobody can be
/// asked yet, so destinations the policy does not allow are refused with a body that says so.
#[cfg(any(target_os = "linux", target_os = "macos"))]
struct InProcessProxy {
    proxy: sandgate_proxy::Proxy,
    thread: std::thread::JoinHandle<()>,
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
impl ServedHere for InProcessProxy {
    fn stop(self: Box<Self>) {
        self.proxy.shutdown();
        let _ = self.thread.join();
    }
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
impl InProcessProxy {
    fn start(
        fd: std::os::fd::OwnedFd,
        dns: Option<[std::os::fd::OwnedFd; 2]>,
        id: &str,
        net: sandgate_config::NetworkPolicy,
        approver: Option<std::sync::Arc<dyn sandgate_proxy::Approver>>,
    ) -> anyhow::Result<InProcessProxy> {
        use sandgate_proxy::{Listener, Proxy, SandboxContext, SandboxId};
        let _ = sandgate_proxy::raise_nofile_limit();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("cannot start the proxy's runtime")?;
        let (listener, dns) = {
            let _enter = runtime.enter();
            let [udp, tcp] = dns.map_or([None, None], |[u, t]| [Some(u), Some(t)]);
            (
                Listener::from_fd(fd).context("cannot serve the sandbox's proxy listener")?,
                crate::dns::sockets(udp, tcp).context("cannot serve the DNS stub")?,
            )
        };
        // The corporate upstream proxy applies here as in the daemon (the fallback is no way
        // around it); read again, as this path is taken only without a daemon.
        let config = std::env::current_dir()
            .map_err(anyhow::Error::from)
            .and_then(|cwd| Ok(sandgate_config::ConfigPaths::discover(&cwd)?))
            .and_then(|paths| Ok(sandgate_config::Config::load(paths)?))
            .context("cannot read the configuration for the upstream proxy")?;
        let mut builder = Proxy::builder()
            .config(sandgate_proxy::ProxyConfig {
                upstream: crate::setup::upstream(&config)?,
                ..sandgate_proxy::ProxyConfig::default()
            })
            .resolver(crate::dns::resolver()?)
            .attributor(std::sync::Arc::new(crate::attribution::ProcAttributor::launched_here()));
        if let Some(a) = approver {
            builder = builder.approver(a);
        }
        if net.intercept().in_use()
            && let Some(i) = crate::setup::interceptor()
        {
            builder = builder.interceptor(i);
        }
        let proxy = builder.build();
        let ctx = SandboxContext {
            id: SandboxId::new(id.to_owned()),
            policy: std::sync::Arc::new(net),
            token: None,
        };
        let serving = proxy.clone();
        let thread = std::thread::Builder::new()
            .name("sandgate-proxy".into())
            .spawn(move || {
                runtime.block_on(async move {
                    if let Some((udp, tcp)) = dns {
                        let (dns_proxy, dns_ctx) = (serving.clone(), ctx.clone());
                        tokio::spawn(async move {
                            dns_proxy.serve_dns(Some(udp), Some(tcp), dns_ctx).await
                        });
                    }
                    if let Err(e) = serving.serve(listener, ctx).await {
                        eprintln!("sandgate: proxy stopped: {e}");
                    }
                });
            })
            .context("cannot start the proxy thread")?;
        Ok(InProcessProxy { proxy, thread })
    }
}

/// No NFLOG outside Linux (pf's log is read by the host-wide monitor).
#[cfg(target_os = "macos")]
struct BlockedReporter;

#[cfg(target_os = "macos")]
impl BlockedReporter {
    fn start(fd: std::os::fd::OwnedFd) -> BlockedReporter {
        drop(fd);
        BlockedReporter
    }

    fn finish(self) {}
}

/// Prints each blocked packet of the sandbox's NFLOG socket as
/// `sandgate: blocked PROTO DST:PORT` on stderr (`--report-blocked`).
#[cfg(target_os = "linux")]
struct BlockedReporter {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

#[cfg(target_os = "linux")]
impl BlockedReporter {
    fn start(fd: std::os::fd::OwnedFd) -> BlockedReporter {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut sock = sandgate_monitor::nflog::NflogSocket::from_fd(fd);
            loop {
                let stopping = flag.load(Ordering::Acquire);
                let packets = match sock.recv(std::time::Duration::from_millis(50)) {
                    Ok(p) => p,
                    Err(e) => {
                        eprintln!("sandgate: NFLOG: {e}");
                        return;
                    }
                };
                for p in &packets {
                    let proto = format!("{:?}", p.protocol).to_lowercase();
                    let dst = match (p.dst, p.dst_port) {
                        (std::net::IpAddr::V6(a), Some(port)) => format!("[{a}]:{port}"),
                        (a, Some(port)) => format!("{a}:{port}"),
                        (a, None) => a.to_string(),
                    };
                    sandgate_sandbox::notice::notice(&format!("sandgate: blocked {proto} {dst}"));
                }
                if stopping && packets.is_empty() {
                    return;
                }
            }
        });
        BlockedReporter { stop, thread }
    }

    /// Prints what is still queued, then stops.
    fn finish(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        let _ = self.thread.join();
    }
}

/// macOS: the proxy listens on a port of the host's loopback chosen for this sandbox (bound by
/// [`host_proxy_listener`] before the spec is built, so the proxy variables name it); the
/// Seatbelt profile lets the command reach that port and nothing else, and the daemon serves it
/// (or this process, as on Linux).
#[cfg(target_os = "macos")]
fn launch(
    spec: &SandboxSpec,
    args: &LaunchOptions,
    net: sandgate_config::NetworkPolicy,
    listener: HostListener,
    _prepared: (PreparedNet, AskedNet),
) -> anyhow::Result<(u8, Option<bool>)> {
    let port = match &listener {
        Some(l) => l.local_addr()?.port(),
        None => sandgate_sandbox::PROXY_PORT,
    };
    let launched = sandgate_sandbox::launch_with_proxy_port(spec, port)?;
    for m in &launched.enforcement.missing {
        eprintln!("sandgate: warning: not enforced: {m}");
    }
    let served = match listener {
        Some(l) => serve(spec, args, net, l.into(), None, None, None)?,
        None => Served::None,
    };
    let code = launched.wait()?;
    served.finish(code, false);
    // Nothing relayed: whether it was a network failure is not known.
    Ok((code, None))
}

/// The proxy's listener on the host (macOS: a port of the host's loopback; Linux: always none,
/// the listener is made inside the sandbox's network namespace).
type HostListener = Option<std::net::TcpListener>;

/// Binds the host's proxy listener of a sandbox with proxy network, and points `ctx` at it.
#[cfg(target_os = "macos")]
fn host_proxy_listener(policy: &Policy, ctx: &mut LaunchEnv) -> anyhow::Result<HostListener> {
    if policy.net.mode != sandgate_config::NetMode::Proxy {
        return Ok(None);
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("cannot bind the proxy listener")?;
    ctx.proxy_port = l.local_addr()?.port();
    Ok(Some(l))
}

#[cfg(not(target_os = "macos"))]
fn host_proxy_listener(_policy: &Policy, _ctx: &mut LaunchEnv) -> anyhow::Result<HostListener> {
    Ok(None)
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
fn launch(
    _spec: &SandboxSpec,
    _args: &LaunchOptions,
    _net: sandgate_config::NetworkPolicy,
    _on_host: HostListener,
    _prepared: (PreparedNet, AskedNet),
) -> anyhow::Result<(u8, Option<bool>)> {
    bail!("sandboxing is not implemented on this platform")
}

/// The monitor, called inside the sandbox's network namespace, and the daemon's greeting,
/// sent while the sandbox sets up.
#[cfg(target_os = "linux")]
struct Hooks {
    /// Whether the sandbox's proxy goes to the daemon (greet it early).
    greet: bool,
    greeting: std::cell::RefCell<Option<anyhow::Result<crate::launch_daemon::Greeting>>>,
    /// The network the daemon made ahead for this launch, until the sandbox takes it.
    prepared: std::cell::RefCell<PreparedNet>,
    /// A loopback network asked for, its answer read when the sandbox takes it.
    asked: std::cell::RefCell<AskedNet>,
}

#[cfg(target_os = "linux")]
impl sandgate_sandbox::NamespaceHooks for Hooks {
    fn open_nflog(&self, group: u16) -> std::io::Result<Option<std::os::fd::OwnedFd>> {
        crate::monitor::open_nflog(group).map(Some)
    }

    fn prepared_network(&self) -> Option<sandgate_sandbox::PreparedNetwork> {
        let taken = self.prepared.borrow_mut().take();
        taken.or_else(|| {
            let asked = self.asked.borrow_mut().take()?;
            receive_network(asked, sandgate_sandbox::NetKind::Loopback).1
        })
    }

    fn while_starting(&self) {
        if self.greet {
            *self.greeting.borrow_mut() = crate::launch_daemon::Greeting::send_if_running().map(Ok);
        }
    }
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

/// What `sandgate explain` shows: the tier's policy, the spec a launch here would get, and what
/// this kernel enforces of it.
#[derive(Debug)]
pub struct Explanation {
    /// The resolved policy (allow and deny rules).
    pub policy: Policy,
    /// The spec of a launch in this directory.
    pub spec: SandboxSpec,
    /// [`kernel_report`] of the spec.
    pub kernel: serde_json::Value,
    /// The package caches a launch here would layer copy-on-write (name, path), and where the
    /// layers are (`None`: caches stay read-only in this tier).
    pub caches: (Vec<(&'static str, PathBuf)>, Option<PathBuf>),
    /// The configuration files of this directory and whether each applies.
    pub config_files: Vec<sandgate_config::ConfigFile>,
}

impl Explanation {
    /// `explain --json`.
    pub fn json(&self) -> serde_json::Value {
        let (spec, policy) = (&self.spec, &self.policy);
        let rules = |v: &[std::sync::Arc<sandgate_config::Rule>]| {
            v.iter().map(|r| r.to_string()).collect::<Vec<_>>()
        };
        serde_json::json!({
            "tier": spec.tier_name,
            "read": "everything except hidden paths",
            "writable": shown(&spec.writable),
            "private_tmp": true,
            "hidden": shown(&spec.hidden),
            "read_only": shown(&spec.read_only),
            "replaced": spec.provided.iter().map(|d| d.path.display().to_string()).collect::<Vec<_>>(),
            "writable_dotfiles": spec.top_level.as_ref().map(|t| &t.writable),
            "protected_below_the_top": spec.top_level.as_ref().map(|t| &t.below),
            "reported_when_changed": spec.top_level.as_ref().map(|t| &t.review),
            "scan": {
                "directories_read": spec.scan.dirs.len() + spec.writable.len(),
                "bounds": { "depth": sandgate_sandbox::tree::SCAN_DEPTH,
                            "directories": sandgate_sandbox::tree::SCAN_DIRS },
                "not_looked_into": spec.scan.unread.iter()
                    .map(|u| serde_json::json!({ "path": u.path, "why": u.why.to_string() }))
                    .collect::<Vec<_>>(),
                "build_output_not_entered": shown(&spec.scan.skipped),
            },
            "network": self.network(),
            "allow": rules(policy.net.allow_rules()),
            "deny": rules(policy.net.deny_rules()),
            "caches": {
                "mode": if self.caches.1.is_some() { policy.fs.caches.name() } else { "off" },
                "layers": self.caches.1,
                "layered": self.caches.0.iter()
                    .map(|(n, p)| serde_json::json!({ "name": n, "path": p }))
                    .collect::<Vec<_>>(),
            },
            "kernel": self.kernel,
            "config_files": self.config_files,
        })
    }

    /// `explain` as text, line by line.
    pub fn lines(&self) -> Vec<String> {
        let (spec, policy) = (&self.spec, &self.policy);
        let rules = |v: &[std::sync::Arc<sandgate_config::Rule>]| {
            let v: Vec<String> = v.iter().map(|r| r.to_string()).collect();
            if v.is_empty() { "(none)".to_owned() } else { v.join(", ") }
        };
        let mut out = vec![format!("tier {}", spec.tier_name)];
        out.extend(crate::policy_report::config_files_lines(&self.config_files));
        out.extend([
            "  read:       everything except hidden paths".to_owned(),
            "  write:      private /tmp and /dev/shm".to_owned(),
        ]);
        out.extend(spec.writable.iter().map(|w| format!("              {}", w.display())));
        out.push(format!("  network:    {}", self.network()));
        if spec.net != NetSetup::None {
            out.push(format!("  allow:      {}", rules(policy.net.allow_rules())));
            out.push(format!("  deny:       {}", rules(policy.net.deny_rules())));
            out.push(
                "              anything else is asked about (`sandgate check HOST` explains)"
                    .into(),
            );
        }
        out.push(format!("  hidden:     {}", shown(&spec.hidden).join(" ")));
        out.push(format!("  read-only:  {}", shown(&spec.read_only).join(" ")));
        for d in &spec.provided {
            out.push(format!(
                "  replaced:   {} (a read-only copy without secrets)",
                d.path.display()
            ));
        }
        if let Some(t) = spec.top_level.as_ref().filter(|_| !spec.writable.is_empty()) {
            out.push(format!(
                "  top of writable paths: every dot-entry and {} read-only, new ones moved to \
                 the quarantine; writable dot-entries: {}",
                t.protected.join(" "),
                t.writable.join(" ")
            ));
            out.push(format!(
                "  below the top: {} read-only wherever they are (unless writable above), new \
                 ones moved to the quarantine; build output not entered: {}; reported at the \
                 end when changed: {}",
                t.below.join(" "),
                t.skip.join(" "),
                t.review.join(" ")
            ));
            let scan = &spec.scan;
            out.push(format!(
                "  scan:       {} directories read (bounds: {} levels, {} directories), {} \
                 repositories, {} build output directories not entered",
                scan.dirs.len() + spec.writable.len(),
                sandgate_sandbox::tree::SCAN_DEPTH,
                sandgate_sandbox::tree::SCAN_DIRS,
                scan.repositories.len(),
                scan.skipped.len()
            ));
            if !scan.unread.is_empty() {
                out.push(format!(
                    "  not looked into ({}; nothing there is protected):",
                    scan.unread.len()
                ));
                out.extend(
                    scan.unread
                        .iter()
                        .map(|u| format!("              {} ({})", u.path.display(), u.why)),
                );
            }
        }
        match &self.caches {
            (layered, Some(dir)) => {
                let names: Vec<String> =
                    layered.iter().map(|(n, p)| format!("{n} {}", p.display())).collect();
                out.push(format!(
                    "  caches:     copy-on-write ({}; layers in {}): {}",
                    match policy.fs.caches {
                        sandgate_config::CacheMode::Shared => "one layer shared by every project",
                        _ => "a layer for this project",
                    },
                    dir.display(),
                    if names.is_empty() { "(none found)".to_owned() } else { names.join(", ") }
                ));
            }
            (_, None) => out.push(
                "  caches:     read-only (copy-on-write only in tiers that build or reach the \
                 network, unless [filesystem] caches = \"off\")"
                    .into(),
            ),
        }
        out.push("kernel".to_owned());
        for (k, v) in self.kernel.as_object().into_iter().flatten() {
            out.push(format!("  {k}: {v}"));
        }
        out
    }

    fn network(&self) -> String {
        match &self.spec.net {
            NetSetup::None => "none: loopback only".to_owned(),
            NetSetup::Proxy { .. } => format!(
                "proxy: only http://127.0.0.1:{} inside; direct connections are refused and \
                 logged",
                sandgate_sandbox::PROXY_PORT
            ),
        }
    }
}

/// Paths as text.
fn shown(v: &[PathBuf]) -> Vec<String> {
    v.iter().map(|p| p.display().to_string()).collect()
}

/// Explains `tier`: what it allows here and what this kernel can enforce.
pub fn explain(tier: &str) -> anyhow::Result<Explanation> {
    let ctx = LaunchEnv::from_process()?;
    let la =
        LaunchOptions { quiet: true, command: vec!["true".into()], ..LaunchOptions::default() };
    let policy = resolve_policy(tier, &la)?;
    refuse_writable_cwd(&policy, &ctx)?;
    let spec = spec_from_policy(&policy, &la, &ctx, SandboxId::try_from("explain")?)?;
    let kernel = kernel_report(&spec);
    let caches = match ctx.data_home.as_deref().filter(|_| crate::caches::applies(&policy)) {
        Some(data) => {
            let project = crate::caches::project_of(&ctx);
            let (found, _) = crate::caches::eligible(&policy, &ctx);
            let layered = found.into_iter().map(|c| (c.name, c.path)).collect();
            (layered, crate::caches::scope_dir(policy.fs.caches, data, &project))
        }
        None => (Vec::new(), None),
    };
    let config_files = crate::setup::load_config()?.file_report();
    Ok(Explanation { policy, spec, kernel, caches, config_files })
}
/// What this kernel enforces of `spec`: Landlock's ABI and gaps, and every wall missing for this
/// spec (Landlock's gaps, and unchecked unix socket paths when the configuration allows a socket
/// and Landlock cannot check paths), the same verdict `--require-full` acts on.
#[cfg(target_os = "linux")]
pub fn kernel_report(spec: &SandboxSpec) -> serde_json::Value {
    let k = sandgate_sandbox::kernel_support();
    let gaps = sandgate_sandbox::landlock_gaps(k.landlock_abi);
    let sockets = !sandgate_sandbox::resolved_unix_sockets(spec).is_empty();
    let assessed = sandgate_sandbox::assess(k.landlock_abi, gaps.clone(), sockets);
    let unix = if sandgate_sandbox::checks_unix_socket_paths(k.landlock_abi) {
        "checked by Landlock (connect only to allowed socket paths)"
    } else if assessed.deny_unix_sockets {
        "Landlock cannot check socket paths here: seccomp refuses every new unix socket"
    } else {
        "Landlock cannot check socket paths here and sockets are allowed: any reachable socket \
         can be connected to"
    };
    serde_json::json!({
        "landlock_abi": k.landlock_abi,
        "landlock_not_enforced": gaps,
        "not_enforced": assessed.enforcement.missing,
        "substitutes": assessed.enforcement.substitutes,
        "seccomp": k.seccomp,
        "user_namespaces": k.user_namespaces,
        "userns_settings": k.userns_settings.iter().map(|(a, b)| format!("{a}={b}")).collect::<Vec<_>>(),
        "unix_sockets": unix,
    })
}

/// Outside Linux: the backend used, and what its profile enforces of `spec` wall by wall (the
/// verdict `--require-full` acts on).
#[cfg(not(target_os = "linux"))]
pub fn kernel_report(spec: &SandboxSpec) -> serde_json::Value {
    let e = sandgate_sandbox::seatbelt::enforcement(spec);
    serde_json::json!({
        "backend": "seatbelt (sandbox-exec)",
        "not_enforced": e.missing,
        "substitutes": e.substitutes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> LaunchEnv {
        LaunchEnv {
            cwd: "/work/p".into(),
            home: Some("/home/u".into()),
            passwd_home: None,
            exes: vec!["/usr/bin/sandgate".into()],
            config_home: Some("/home/u/.config".into()),
            data_home: Some("/home/u/.local/share".into()),
            runtime_dir: "/run/user/1000/sandgate".into(),
            other_runtime_dirs: vec!["/tmp/sandgate-1000".into()],
            env: vec![
                ("PATH".into(), "/usr/bin".into()),
                ("HTTP_PROXY".into(), "http://evil:1".into()),
                ("GIT_CONFIG_COUNT".into(), "1".into()),
                ("GIT_CONFIG_KEY_0".into(), "user.name".into()),
                ("GIT_CONFIG_VALUE_0".into(), "me".into()),
                ("GH_TOKEN".into(), "secret".into()),
                ("ssh_auth_sock".into(), "/run/agent".into()),
                ("KEEP_TOKEN".into(), "kept".into()),
            ],
            proxy_port: sandgate_sandbox::PROXY_PORT,
        }
    }

    fn args(cmd: &[&str]) -> LaunchOptions {
        LaunchOptions {
            allow_write: vec!["out".into()],
            allow: vec![],
            deny: vec![],
            net: None,
            require_full: false,
            report_blocked: false,
            quiet: false,
            no_ask: false,
            approver: None,
            serve_here: None,
            command: cmd.iter().map(OsString::from).collect(),
        }
    }

    fn policy(tier: &str, net: sandgate_config::NetMode, writable: &[&str]) -> Policy {
        use sandgate_config::{FsPolicy, NetworkPolicy, PathRule, RuleSource};
        let rule = |p: &str| PathRule { path: p.into(), source: RuleSource::Builtin };
        Policy {
            tier: tier.into(),
            fs: FsPolicy {
                writable: writable.iter().map(|p| rule(p)).collect(),
                hidden: vec![rule("/home/u/.ssh"), rule("/secret/b")],
                protected: sandgate_config::DEFAULT_PROTECTED
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                unix_sockets: vec![rule("/run/allowed.sock")],
                git_writable: false,
                readable_home: vec![],
                writable_dotfiles: vec![".venv".into()],
                caches: Default::default(),
            },
            net: NetworkPolicy::new(tier, net, vec![], vec![]),
            env_pass: vec!["KEEP_TOKEN".into()],
        }
    }

    /// The launcher's refusal of a home as the working directory of `build` says why and names
    /// the flag that opens it; a project directory is no refusal.
    #[test]
    fn a_home_as_the_writable_working_directory_is_refused_with_the_way_out() {
        use sandgate_config::{NetMode as Net, PathRule, RuleSource};
        let at = |cwd: &str| {
            let mut p = policy("build", Net::Proxy, &[]);
            p.fs.writable =
                vec![PathRule { path: cwd.into(), source: RuleSource::CurrentDirectory }];
            p
        };
        let err = refuse_writable_cwd(&at("/home/u"), &ctx()).unwrap_err();
        let text = err.downcast_ref::<crate::UsageError>().expect("a usage error").to_string();
        assert!(text.contains("/home/u is your home directory"), "{text}");
        assert!(text.contains("the `build` tier writes where it starts"), "{text}");
        assert!(text.ends_with("--allow-write /home/u"), "{text}");
        let text = refuse_writable_cwd(&at("/"), &ctx()).unwrap_err().to_string();
        assert!(text.contains("/ is the root of the filesystem"), "{text}");
        assert!(refuse_writable_cwd(&at("/home/u/proj"), &ctx()).is_ok());
    }

    #[test]
    fn policies_map_to_specs() {
        use sandgate_config::NetMode as Net;
        let id = || SandboxId::try_from("t").unwrap();
        let run = spec_from_policy(
            &policy("run", Net::None, &["/work/p/out"]),
            &args(&["true"]),
            &ctx(),
            id(),
        )
        .unwrap();
        assert_eq!(run.writable, vec![PathBuf::from("/work/p/out")]);
        assert_eq!(run.net, NetSetup::None);
        assert!(run.hidden.contains(&PathBuf::from("/home/u/.ssh")));
        assert!(run.hidden.contains(&PathBuf::from("/secret/b")));
        assert!(run.hidden.contains(&PathBuf::from("/home/u/.local/share/sandgate")));
        assert!(run.hidden.contains(&PathBuf::from("/run/user/1000/sandgate")));
        assert!(run.hidden.contains(&PathBuf::from("/tmp/sandgate-1000")));
        // The configuration is replaced by a copy without secrets (none here: no files).
        assert_eq!(run.provided[0].path, PathBuf::from("/home/u/.config/sandgate"));
        assert!(run.provided[0].files.is_empty());
        assert!(!run.read_only.contains(&PathBuf::from("/home/u/.config/sandgate")));
        assert!(run.visible.contains(&PathBuf::from("/home/u")));
        assert!(run.visible.contains(&PathBuf::from("/usr/bin/sandgate")));
        // Secret-looking variables are gone unless passed.
        assert!(!run.env.iter().any(|(k, _)| k == "GH_TOKEN" || k == "ssh_auth_sock"));
        assert!(!run.env.iter().any(|(k, _)| k == "HTTP_PROXY"));
        let has =
            |spec: &SandboxSpec, k: &str, v: &str| spec.env.iter().any(|(n, w)| n == k && w == v);
        assert!(has(&run, "KEEP_TOKEN", "kept"));
        // Without a proxy the caller's git settings stay as they were.
        assert!(has(&run, "GIT_CONFIG_COUNT", "1") && has(&run, "GIT_CONFIG_KEY_0", "user.name"));
        assert_eq!(run.allowed_unix_sockets, vec![PathBuf::from("/run/allowed.sock")]);

        let build = spec_from_policy(
            &policy("build", Net::Proxy, &["/work/p", "/home/u"]),
            &args(&[]),
            &ctx(),
            id(),
        )
        .unwrap();
        assert!(build.writable.contains(&PathBuf::from("/work/p")));
        assert!(build.read_only.contains(&PathBuf::from("/work/p/.git/hooks")));
        assert!(build.read_only.contains(&PathBuf::from("/home/u/.bashrc")));
        assert!(build.read_only.contains(&PathBuf::from("/home/u/.gitconfig")));
        assert!(build.read_only.contains(&PathBuf::from("/home/u/.config/systemd/user")));
        assert!(build.read_only.contains(&PathBuf::from("/home/u/Library/LaunchAgents")));
        assert!(!build.read_only.contains(&PathBuf::from("/work/p/.gitconfig")));
        assert!(!build.read_only.contains(&PathBuf::from("/work/p/.bashrc")));
        assert!(matches!(build.net, NetSetup::Proxy { .. }));
        assert!(build.env.iter().any(|(k, v)| k == "HTTP_PROXY" && v == "http://127.0.0.1:3128"));
        assert!(!build.env.iter().any(|(k, v)| k == "HTTP_PROXY" && v == "http://evil:1"));
        // git's proxy comes after the caller's own git settings.
        assert!(has(&build, "GIT_CONFIG_COUNT", "2") && has(&build, "GIT_CONFIG_VALUE_0", "me"));
        assert!(has(&build, "GIT_CONFIG_KEY_1", "http.proxy"));
        assert!(has(&build, "GIT_CONFIG_VALUE_1", "http://127.0.0.1:3128"));
        assert_eq!(build.command, vec![OsString::from("/bin/sh"), OsString::from("-i")]);
        // The top-level rule: the allowlist, the autorun names, the quarantine, and placeholders
        // only for a writable HOME's start-up files.
        let top = build.top_level.expect("a top-level rule");
        assert_eq!(top.writable, vec![".venv".to_owned()]);
        assert!(top.protected.contains(&"rust-toolchain.toml".to_owned()));
        assert!(!top.protected.contains(&".git/hooks".to_owned()), "nested names are not names");
        assert_eq!(top.quarantine, Some(PathBuf::from("/home/u/.local/share/sandgate/quarantine")));
        assert!(top.placeholders.contains(&PathBuf::from("/home/u/.bashrc")));
        assert!(!top.placeholders.iter().any(|p| p.starts_with("/work/p")));
    }
}
