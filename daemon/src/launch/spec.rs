//! Building a launch: the tier's policy from the configuration and the flags, the refusals made
//! before anything starts (a working directory that may not be writable), and the sandbox spec
//! (hidden and read-only paths, the environment without secrets, git metadata protected).

use std::path::PathBuf;

use sandgate_config::{Overrides, Policy};
use sandgate_sandbox::{NetSetup, SandboxId, SandboxSpec};

use super::*;

/// Resolves the policy of `tier` from the configuration layers and the command-line flags.
pub fn resolve_policy(tier: &str, args: &LaunchOptions) -> Result<Policy, LaunchError> {
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
pub fn refuse_writable_cwd(policy: &Policy, ctx: &LaunchEnv) -> Result<(), LaunchError> {
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
) -> Result<SandboxSpec, LaunchError> {
    spec_and_removed(policy, args, ctx, id).map(|(spec, _)| spec)
}

/// [`spec_from_policy`], and the names of the secret-looking variables it left out (in order,
/// each once), found in the same pass over the environment.
pub(super) fn spec_and_removed(
    policy: &Policy,
    args: &LaunchOptions,
    ctx: &LaunchEnv,
    id: SandboxId,
) -> Result<(SandboxSpec, Vec<String>), LaunchError> {
    let writable: Vec<PathBuf> = present_writable(&policy.fs.writable);
    // One scan of the writable trees (see `sandgate_sandbox::tree`): the repositories in them
    // for the git wall, the files host tools execute or obey below their tops. Asked of the
    // daemon's index first, its answer read once the paths below are listed (the daemon works
    // on it meanwhile).
    let mut top_level = top_level_rule(policy, ctx);
    let roots: Vec<PathBuf> =
        writable.iter().filter_map(|w| w.canonicalize().ok()).filter(|w| w.is_dir()).collect();
    let asked = ask_daemon(&roots, &top_level, args);
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
        let var = crate::caches::env_var(ctx);
        for dir in sandgate_config::program_dirs(var, home) {
            let dir = dir.canonicalize().unwrap_or(dir);
            if writable.iter().any(|w| dir.starts_with(w)) && dir.is_dir() {
                read_only.push(dir);
            }
        }
    }
    top_level.placeholders = top_placeholders;
    sandgate_sandbox::timing_mark("hidden and read-only paths listed");
    let scan = match asked.and_then(daemons_answer) {
        Some(scan) => {
            sandgate_sandbox::timing_mark("writable trees answered by the daemon's index");
            scan
        }
        None => sandgate_sandbox::tree::scan(&roots, &top_level),
    };
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
    if let Some(way_in) = scan.ways_in.first() {
        return Err(LaunchError::WayIn { why: sandgate_sandbox::tree::way_in_refusal(way_in) });
    }
    if let Some(link) = git.links.first() {
        return Err(LaunchError::GitLink { link: link.clone() });
    }
    if let Some(why) = git.refuse.first() {
        return Err(LaunchError::GitUnprotected { why: why.to_string() });
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
        cache_work_lock: None,
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
        macos: macos_options(),
    };
    Ok((spec, removed))
}

/// The `[macos]` settings of the configuration (read again, on macOS only: nothing else reads
/// them).
fn macos_options() -> sandgate_sandbox::MacosOptions {
    if !cfg!(target_os = "macos") {
        return Default::default();
    }
    crate::setup::load_config()
        .map(|c| sandgate_sandbox::MacosOptions {
            loopback_listen: c.macos_loopback_listen(),
            trustd_allow: c.macos_trustd_allow(),
        })
        .unwrap_or_default()
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
                eprintln!("sandgate: warning: {}", crate::policy_report::missing_path_notice(w));
            }
            present
        })
        .map(|w| w.path.clone())
        .collect()
}

/// Below this size of the scan's memory (about a hundred directories), a launch scans itself.
#[cfg(target_os = "linux")]
const SMALL: u64 = 8 * 1024;

/// The question of the scan of `roots` under `rule`, sent to the running daemon's index (see
/// `sandgate_sandbox::tree::Index` for why its answer is as good as scanning here): the
/// connection to read the answer from ([`daemons_answer`]); `None` when there are no writable
/// trees, no daemon of this user runs (none is started for this), `SANDGATE_NO_DAEMON=1`, or
/// the trees were small at the last scan made here.
#[cfg(target_os = "linux")]
fn ask_daemon(
    roots: &[PathBuf],
    rule: &sandgate_sandbox::TopLevel,
    args: &LaunchOptions,
) -> Option<std::os::unix::net::UnixStream> {
    use std::io::Write as _;
    use std::os::fd::AsFd as _;
    // (A tree of some dozens of directories is checked against the scan's memory here in less
    // time than the daemon's round trip takes.)
    let small = sandgate_sandbox::tree::remembered_bytes(roots, rule).is_some_and(|n| n < SMALL);
    if roots.is_empty() || small || super::serve::no_daemon(args) {
        return None;
    }
    let path = crate::Paths::discover().dir.join(crate::paths::TREE_SOCKET);
    let stream = std::os::unix::net::UnixStream::connect(path).ok()?;
    // Only a daemon of this user answers for this user's trees.
    let cred =
        nix::sys::socket::getsockopt(&stream.as_fd(), nix::sys::socket::sockopt::PeerCredentials)
            .ok()?;
    if cred.uid() != nix::unistd::geteuid().as_raw() {
        return None;
    }
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    let ask = sandgate_sandbox::tree::encode_ask(roots, rule);
    (&stream).write_all(&sandgate_sandbox::tree::framed(&ask)).ok()?;
    Some(stream)
}

/// The daemon's answer on `stream` ([`ask_daemon`]): the scan, with the warden's watches made
/// ahead when they came with it; `None` when the daemon has no index of these trees yet (it
/// starts one) or the answer is not one.
#[cfg(target_os = "linux")]
fn daemons_answer(stream: std::os::unix::net::UnixStream) -> Option<sandgate_sandbox::tree::Scan> {
    use std::os::fd::AsFd as _;
    // The warden's watches made ahead come with the answer's first byte (see
    // `sandgate_sandbox::tree::Ahead`).
    // (A first read of a few KiB: the rest goes straight into the answer's buffer.)
    let mut first = vec![0u8; 4096];
    let (n, mut fds) = sandgate_sandbox::fdpass::recv_with_fds(stream.as_fd(), &mut first).ok()?;
    first.truncate(n);
    if n == 0 {
        return None;
    }
    let answer = sandgate_sandbox::tree::read_framed(&mut &stream, first, 1 << 30).ok()?;
    let fd = (fds.len() == 1).then(|| fds.pop()).flatten();
    let scan = sandgate_sandbox::tree::decode_answer(&answer, fd).flatten()?;
    // The warden gives the watches back on this connection (the daemon keeps them for the
    // next launch); without them, it ends here.
    if let Some(handed) = &scan.ahead {
        handed.give_back_on(stream.into());
    }
    Some(scan)
}

#[cfg(not(target_os = "linux"))]
fn ask_daemon(_: &[PathBuf], _: &sandgate_sandbox::TopLevel, _: &LaunchOptions) -> Option<()> {
    None
}

#[cfg(not(target_os = "linux"))]
fn daemons_answer(_: ()) -> Option<sandgate_sandbox::tree::Scan> {
    None
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
        scan_directories: policy.fs.scan_directories,
        scan_memory: ctx.data_home.as_ref().map(|d| d.join("sandgate").join("scan")),
    }
}

/// Says once, on stderr, which secret-looking variables the command will not get (names only).
pub(super) fn removal_notice(removed: &[String]) {
    if !removed.is_empty() {
        eprintln!(
            "sandgate: not passed to the command (secret-looking): {}; keep one with \
             `[env] pass = [\"NAME\"]` in the configuration",
            removed.join(", ")
        );
    }
}

/// The environment of a nested command: the caller's (the outer sandbox's, proxy variables
/// included, untouched: the outer's proxy is the only one) with the inner tier named; without
/// network the proxy variables go. `SANDGATE_SANDBOX` stays the outer's id (the sandbox whose
/// network and proxy these are), or is `id` when missing.
#[cfg(target_os = "linux")]
pub(super) fn nested_env(
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
                scan_directories: None,
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
        let text = err.usage().expect("a usage error").to_string();
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
