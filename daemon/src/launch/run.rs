//! Running a launch: a network asked of the daemon ahead, the spec built, the sandbox started
//! (or the current one narrowed, when nested), the command waited for, a failure explained.

use sandgate_config::Policy;
use sandgate_sandbox::{NetSetup, SandboxId, SandboxSpec};

use super::serve::{Served, no_daemon, serve};
#[cfg(target_os = "linux")]
use super::spec::nested_env;
use super::spec::{removal_notice, spec_and_removed};
use super::*;
use crate::launch_env::new_id;

/// Runs a command in the named tier; returns its exit status.
pub fn run(tier: &str, args: LaunchOptions) -> Result<u8, LaunchError> {
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
        return Err(LaunchError::HandOver);
    }
    let id = match prepared_id(&prepared) {
        Some(id) => id,
        None => new_id().ok_or(LaunchError::NoSandboxId)?,
    };
    let (mut spec, removed) = spec_and_removed(&policy, &args, &ctx, id)?;
    removal_notice(&removed);
    // Held (the slot's lock) until the sandbox is gone.
    let layers = crate::caches::prepare(&policy, &ctx, spec.id.as_str());
    for note in &layers.notes {
        eprintln!("sandgate: {note}");
    }
    spec.caches = layers.caches.clone();
    spec.cache_work_lock = layers.work_lock();
    spec.hidden.extend(layers.hidden.iter().cloned());
    if let Some(notice) = sandgate_sandbox::tree::unread_notice(&spec.scan, 5) {
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
) -> Result<u8, LaunchError> {
    use sandgate_sandbox::SandboxError;
    let ctx = LaunchEnv::from_process()?;
    let policy = resolve_policy(tier, args)?;
    refuse_writable_cwd(&policy, &ctx)?;
    let (mut spec, removed) =
        spec_and_removed(&policy, args, &ctx, new_id().ok_or(LaunchError::NoSandboxId)?)?;
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
fn run_nested_seatbelt(tier: &str, args: &LaunchOptions) -> Result<u8, LaunchError> {
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
            let (program, rest) = command
                .split_first()
                .ok_or_else(|| LaunchError::Host(anyhow::anyhow!("empty command")))?;
            let err = std::process::Command::new(program).args(rest).exec();
            eprintln!("sandgate: {}: {err}", program.to_string_lossy());
            Ok(if err.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 })
        }
    }
}

#[cfg(target_os = "linux")]
fn launch(
    spec: &SandboxSpec,
    args: &LaunchOptions,
    net: sandgate_config::NetworkPolicy,
    _on_host: HostListener,
    (prepared, asked): (PreparedNet, AskedNet),
) -> Result<(u8, Option<bool>), LaunchError> {
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
) -> Result<(u8, Option<bool>), LaunchError> {
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
fn host_proxy_listener(policy: &Policy, ctx: &mut LaunchEnv) -> Result<HostListener, LaunchError> {
    if policy.net.mode != sandgate_config::NetMode::Proxy {
        return Ok(None);
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(LaunchError::io("cannot bind the proxy listener"))?;
    ctx.proxy_port = l.local_addr()?.port();
    Ok(Some(l))
}

#[cfg(not(target_os = "macos"))]
fn host_proxy_listener(
    _policy: &Policy,
    _ctx: &mut LaunchEnv,
) -> Result<HostListener, LaunchError> {
    Ok(None)
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
fn launch(
    _spec: &SandboxSpec,
    _args: &LaunchOptions,
    _net: sandgate_config::NetworkPolicy,
    _on_host: HostListener,
    _prepared: (PreparedNet, AskedNet),
) -> Result<(u8, Option<bool>), LaunchError> {
    Err(LaunchError::Unsupported)
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
