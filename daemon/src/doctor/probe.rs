//! The thin I/O of `sandgate doctor`: reads this system into [`Facts`]. The kernel's side is
//! tried, not guessed: a user and mount namespace with an overlay inside, and a `net` network
//! made by the same factory the daemon uses, each in a throwaway child.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use sandgate_config::{CacheMode, Config, ConfigPaths, Overrides};
use sandgate_hook::{Filesystem as _, RealFs};

use super::{
    CacheFacts, ClaudeFacts, CompletionFacts, ConfigFact, DaemonFact, Facts, FileState,
    KernelFacts, TelegramFact, WrapperFact,
};
use crate::launch::LaunchEnv;

/// Where `sandgate install` writes a shell's completions and what this sandgate writes there
/// (the binary generates them): `None` for a shell it has none for.
pub type CompletionFiles<'a> = &'a dyn Fn(&str) -> Option<(PathBuf, Vec<u8>)>;

/// How long the Bot API may take to answer `getMe`.
const TELEGRAM_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads the facts. Call while the process has one thread: the kernel probes fork children
/// that enter new user namespaces (they run first; the Telegram check starts a runtime after).
pub fn probe(completions: CompletionFiles<'_>) -> anyhow::Result<Facts> {
    let ctx = LaunchEnv::from_process()?;
    let data_home = ctx.data_home.clone().context("neither XDG_DATA_HOME nor HOME is set")?;
    let layers = crate::caches::caches_dir(&data_home);
    let kernel = kernel(&layers);
    let paths = ConfigPaths::discover(&ctx.cwd).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (config_facts, config) = config(&paths);
    let facts = Facts {
        kernel,
        wrappers: wrappers(&ctx.cwd)?,
        daemon: daemon(),
        caches: caches(config.as_ref(), &ctx, &layers),
        telegram: telegram(config.as_ref()),
        claude: claude(&ctx.cwd),
        completions: completion_facts(completions),
        config: config_facts,
    };
    Ok(facts)
}

#[cfg(target_os = "linux")]
fn kernel(layers: &Path) -> Option<KernelFacts> {
    let k = sandgate_sandbox::kernel_support();
    let mut facts = KernelFacts {
        nested: false,
        user_namespace: Ok(()),
        userns_settings: k.userns_settings,
        landlock_abi: k.landlock_abi,
        landlock_gaps: sandgate_sandbox::landlock_gaps(k.landlock_abi),
        seccomp: k.seccomp,
        overlay: None,
        capture: None,
        network: Ok(None),
    };
    if sandgate_sandbox::inside_sandbox().is_some() {
        facts.nested = true;
        return Some(facts);
    }
    // The layers' file system is what overlayfs may refuse: the probe's layers go beside them
    // (not among them, where `cache ls` would list them).
    let base = layers.parent().unwrap_or(layers);
    let _ = std::fs::create_dir_all(base);
    let ns = sandgate_sandbox::probe_namespaces(base);
    facts.user_namespace = ns.user_namespace;
    facts.overlay = ns.overlay;
    facts.capture = ns.capture;
    facts.network = network();
    Some(facts)
}

#[cfg(not(target_os = "linux"))]
fn kernel(_layers: &Path) -> Option<KernelFacts> {
    None
}

/// A `net` network made as the daemon's factory makes one for a launch (the launcher without a
/// daemon takes the same steps): `None` when its route device is a tun, else why there was none.
#[cfg(target_os = "linux")]
fn network() -> Result<Option<String>, String> {
    use sandgate_sandbox::{NetKind, NetworkFactory, SandboxId};
    use std::os::unix::fs::MetadataExt as _;
    let factory = NetworkFactory::start(crate::monitor::open_nflog).map_err(|e| e.to_string())?;
    let id = SandboxId::try_from("doctor").map_err(|e| e.to_string())?;
    let made = factory.make(&id, crate::launch::defaults::NFLOG_GROUP, NetKind::Proxy);
    if made.map_err(|e| e.to_string())?.tun.is_some() {
        return Ok(None);
    }
    let tun = Path::new("/dev/net/tun");
    Ok(Some(match std::fs::OpenOptions::new().read(true).write(true).open(tun) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => match tun.metadata() {
            Ok(m) => format!("/dev/net/tun is mode {:04o}, owner {}", m.mode() & 0o7777, m.uid()),
            Err(_) => format!("/dev/net/tun: {e}"),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "no /dev/net/tun".to_owned(),
        Err(e) => format!("/dev/net/tun: {e}"),
        Ok(_) => "the kernel refused a tun device in the sandbox's namespace".to_owned(),
    }))
}

/// Every configuration file: the global one, the one that applies here, and every other
/// per-directory file (a launch in its project would read it). Also the configuration here,
/// when it loads.
fn config(paths: &ConfigPaths) -> (Vec<ConfigFact>, Option<Config>) {
    let home = paths.home.as_deref();
    let mut files = vec![(paths.global.clone(), "global".to_owned())];
    files.push((
        paths.project.clone(),
        format!("per-directory, for {}", paths.project_root.display()),
    ));
    let mut others: Vec<PathBuf> = std::fs::read_dir(paths.dir.join("projects"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml") && *p != paths.project)
        .collect();
    others.sort();
    files.extend(others.into_iter().map(|p| (p, "per-directory, another project".to_owned())));
    let mut out = Vec::new();
    for (path, role) in files {
        let error = match std::fs::read_to_string(&path) {
            Ok(text) => {
                sandgate_config::parse_config(&path, &text, home).err().map(|e| e.to_string())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                Some(format!("{}: cannot be read: {e}\nhelp: make it readable", path.display()))
            }
        };
        out.push(ConfigFact { path, role, error, warnings: Vec::new() });
    }
    if out.iter().any(|f| f.error.is_some()) {
        return (out, None);
    }
    // The file that applies here takes what concerns the configuration as a whole.
    let here = out.iter().position(|f| f.path == paths.project).unwrap_or(0);
    match sandgate_config::edit::check(paths.clone()) {
        Ok(config) => {
            let warnings: Vec<String> = config
                .missing_writable()
                .iter()
                .map(crate::policy_report::missing_path_notice)
                .collect();
            if let Some(here) = out.get_mut(here) {
                here.warnings = warnings;
            }
            (out, Some(config))
        }
        Err(e) => {
            // The files parse but their tiers do not: the one here (or the global) is to blame.
            if let Some(here) = out.get_mut(here) {
                here.error = Some(format!("{e}\nhelp: fix the tier's `base`"));
            }
            (out, None)
        }
    }
}

/// `sandbox-*` as `PATH` finds them, judged as the Claude hook judges a wrapper (with this
/// directory as the place a sandboxed command may write).
fn wrappers(cwd: &Path) -> anyhow::Result<Vec<WrapperFact>> {
    let exe = std::env::current_exe().context("path of the sandgate binary")?;
    let launcher = exe.with_file_name(crate::LAUNCHER_NAME);
    let fs = RealFs::new(std::env::var_os("PATH"), &exe)
        .with_launcher(&launcher)
        .with_untrusted(vec![cwd.to_owned()])
        .with_writable_in(sandgate_hook::tier::writable_in);
    Ok(sandgate_hook::WRAPPERS
        .iter()
        .map(|(name, _)| {
            let found = fs.lookup_command(name);
            let trust = found.as_ref().map(|p| fs.wrapper(p, &[cwd.to_owned()]));
            WrapperFact { name, found, trust }
        })
        .collect())
}

fn daemon() -> DaemonFact {
    match crate::control::status() {
        Ok(None) => DaemonFact::NotRunning,
        Ok(Some(v)) => DaemonFact::Running {
            pid: v["daemon"]["pid"].as_u64().unwrap_or(0),
            version: v["daemon"]["version"].as_str().unwrap_or("unknown").to_owned(),
            same_protocol: v["daemon"]["protocol"].as_u64()
                == Some(u64::from(crate::protocol::PROTOCOL_VERSION)),
            events_failed: v["events"]["failed"].as_u64().unwrap_or(0),
            last_error: v["events"]["last_error"].as_str().map(str::to_owned),
        },
        Err(e) => DaemonFact::Unreachable(format!("{e:#}")),
    }
}

fn caches(config: Option<&Config>, ctx: &LaunchEnv, dir: &Path) -> CacheFacts {
    let policy = config.and_then(|c| c.policy("build", &Overrides::default()).ok());
    let mode = policy.as_ref().map_or(CacheMode::default(), |p| p.fs.caches);
    let layered = policy
        .as_ref()
        .map(|p| crate::caches::eligible(p, ctx).0.into_iter().map(|c| c.name.to_owned()).collect())
        .unwrap_or_default();
    // The nearest existing directory on the way must take new entries (launches make the rest).
    let existing = dir.ancestors().find(|d| d.exists()).unwrap_or(Path::new("/"));
    let writable = nix::unistd::access(existing, nix::unistd::AccessFlags::W_OK)
        .map_err(|e| format!("{}: {e}", existing.display()));
    let scopes = crate::caches::list(ctx.data_home.as_deref().unwrap_or(Path::new("/nonexistent")))
        .unwrap_or_default();
    CacheFacts {
        mode,
        dir: dir.to_owned(),
        writable,
        layered,
        scopes: scopes.len(),
        bytes: scopes.iter().map(|s| s.bytes).sum(),
    }
}

fn telegram(config: Option<&Config>) -> TelegramFact {
    let Some(config) = config else {
        return TelegramFact::Misconfigured("not checked: the configuration does not load".into());
    };
    let tc = match crate::service::telegram_config(config) {
        Ok(None) => return TelegramFact::NotConfigured,
        Ok(Some((tc, _))) => tc,
        Err(e) => return TelegramFact::Misconfigured(format!("{e:#}")),
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
    let answer = match runtime {
        Ok(rt) => rt.block_on(sandgate_approvals::telegram::reachable(&tc, TELEGRAM_TIMEOUT)),
        Err(e) => Err(format!("cannot start a runtime: {e}")),
    };
    match answer {
        Ok(bot) => TelegramFact::Reachable {
            bot,
            warnings: sandgate_approvals::telegram::config_warnings(config),
        },
        Err(why) => TelegramFact::Unreachable(why),
    }
}

fn claude(cwd: &Path) -> ClaudeFacts {
    use sandgate_hook::claude_settings as cs;
    let mut facts = ClaudeFacts {
        exe: std::env::current_exe().and_then(std::fs::canonicalize).unwrap_or_default(),
        ..ClaudeFacts::default()
    };
    let user = cs::claude_dir(std::env::var_os("CLAUDE_CONFIG_DIR"), std::env::var_os("HOME"))
        .ok()
        .map(|d| cs::user_settings_file(&d));
    for file in user.into_iter().chain(cs::project_settings_files(cwd)) {
        let bytes = match std::fs::read(&file) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                facts.unreadable.push((file, e.to_string()));
                continue;
            }
        };
        match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(v) => {
                for command in cs::our_commands(&v) {
                    let program = command.split_whitespace().next().unwrap_or_default();
                    facts.programs.push(std::fs::canonicalize(program).ok());
                    facts.registered.push((file.clone(), command));
                }
            }
            Err(e) => facts.unreadable.push((file, format!("not valid JSON: {e}"))),
        }
    }
    facts
}

fn completion_facts(files: CompletionFiles<'_>) -> CompletionFacts {
    let shell = std::env::var_os("SHELL")
        .map(PathBuf::from)
        .and_then(|s| s.file_name().map(|n| n.to_string_lossy().into_owned()));
    let file = shell.as_deref().and_then(files).map(|(path, want)| {
        let state = match std::fs::read(&path) {
            Ok(have) if have == want => FileState::Current,
            Ok(_) => FileState::Stale,
            Err(_) => FileState::Missing,
        };
        (path, state)
    });
    let bash_completion = [
        "/usr/share/bash-completion/bash_completion",
        "/usr/local/share/bash-completion/bash_completion",
        "/etc/bash_completion",
    ]
    .iter()
    .any(|p| Path::new(p).is_file());
    CompletionFacts { shell, file, bash_completion }
}
