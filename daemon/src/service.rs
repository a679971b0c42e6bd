//! `sandgate daemon`: one long-running process per user that hosts the proxy (serving every
//! sandbox's listener), the approvals broker (and the Telegram bot when configured), the monitor
//! (every sandbox's NFLOG socket) and the store, behind the control socket.
//!
//! Lifecycle: take the pid-file lock (one daemon per user) → open the store (a store that cannot
//! be opened stops the daemon, naming the file) → mark sandboxes whose launcher is gone as lost,
//! prune old events (a busy, locked or full store only logs why not; pruning runs again hourly)
//! → load the grants → bind the control socket (0600) and, on Linux, the network sockets
//! (`network_sockets`; best effort)
//! → serve until `sandgate stop`, SIGINT/SIGTERM, or `--idle-exit` → tell the launchers, deny
//! what is pending, flush the events.
//!
//! Failure: a daemon that dies leaves the sandboxes without network (their listeners are only
//! served by a daemon) but running; each launcher keeps its descriptors and registers them again
//! with the next daemon, which it starts itself when the old one died without `stop`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use sandgate_approvals as approvals;
use sandgate_store::{EventWriter, EventWriterConfig, Store, Timestamp};

#[cfg(target_os = "macos")]
use crate::macos_monitor;
use crate::{Paths, adapters, dns, protocol, server};

const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 86_400);

/// Runs the daemon until it is stopped; returns the exit code. `idle_exit`: exit after this
/// long with no sandbox, no connection and nothing pending; `detach`: start a new session first
/// (a daemon a launcher starts).
pub fn run(idle_exit: Option<Duration>, detach: bool) -> anyhow::Result<u8> {
    // A daemon started by a launcher inherits the launcher's blocked signals (it forwards
    // INT/TERM/HUP/... to its sandbox): unblock them before any thread exists, or SIGTERM would
    // never reach the handler below.
    let _ = nix::sys::signal::SigSet::empty().thread_set_mask();
    if detach {
        let _ = nix::unistd::setsid();
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SANDGATE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let paths = Paths::discover();
    paths.ensure_dir()?;
    let _lock = match lock_pid_file_or_wait(&paths)? {
        Some(l) => l,
        None => {
            let pid = std::fs::read_to_string(&paths.pid_file).unwrap_or_default();
            eprintln!(
                "sandgate: a daemon is already running (pid {}); `sandgate status` shows it, \
                 `sandgate stop` stops it",
                pid.trim()
            );
            return Ok(1);
        }
    };
    // One daemon per store, whatever XDG_RUNTIME_DIR says: two would each cache grants that the
    // other revokes.
    let _store_lock = match lock_store(&paths)? {
        Ok(l) => l,
        Err(other) => {
            let dir = std::path::Path::new(&other)
                .parent()
                .map_or_else(|| "...".into(), |p| p.display().to_string());
            eprintln!(
                "sandgate: another daemon already serves this store, with its socket at {other}; \
                 this shell's XDG_RUNTIME_DIR differs from that session's. Use the same \
                 XDG_RUNTIME_DIR in both, or stop that daemon: kill $(cat {dir}/daemon.pid)"
            );
            return Ok(1);
        }
    };
    let _ = sandgate_proxy::raise_nofile_limit();
    // Forked now: the factory must come from a process with a single thread.
    let netpool = crate::netpool::NetPool::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("sandgate-daemon")
        .build()
        .context("cannot start the daemon's runtime")?;
    // On a worker thread, not this one: a connection's readiness and the task it gets are then
    // picked up where the runtime's I/O is polled, without a wake-up of another thread for each
    // (measured: the answer to a launcher's first request came ~0.1 ms sooner).
    runtime.block_on(async move {
        match tokio::spawn(serve(paths, idle_exit, netpool)).await {
            Ok(result) => result,
            Err(e) => Err(anyhow::anyhow!("the daemon's main task failed: {e}")),
        }
    })
}

/// Holds the daemon's lock for the life of the process; `None` when another daemon holds it.
/// Waits (up to 5 s) while the holder is a daemon on its way out, one that has removed its socket
/// already: a launcher that came just after an idle exit gets a daemon, not "already running".
fn lock_pid_file_or_wait(
    paths: &Paths,
) -> anyhow::Result<Option<nix::fcntl::Flock<std::fs::File>>> {
    lock_file_or_wait(&paths.pid_file, &std::process::id().to_string(), || !paths.socket.exists())
}

/// Holds `daemon.lock` next to the store for the life of the process, with this daemon's socket
/// path in it; `Err(that path)` of the daemon that holds it already.
fn lock_store(paths: &Paths) -> anyhow::Result<Result<nix::fcntl::Flock<std::fs::File>, String>> {
    use std::os::unix::fs::DirBuilderExt as _;
    let store = Store::default_path().context("where the store lives")?;
    let dir = store.parent().context("the store's directory")?;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join("daemon.lock");
    let holder = || std::fs::read_to_string(&path).unwrap_or_default().trim().to_owned();
    // As for the pid file: a holder whose socket is gone is on its way out; wait for it.
    let leaving = || !std::path::Path::new(&holder()).exists();
    Ok(match lock_file_or_wait(&path, &paths.socket.display().to_string(), leaving)? {
        Some(lock) => Ok(lock),
        None => Err(holder()),
    })
}

/// [`lock_file`], retried for up to 5 s while `holder_leaving` says the holder is on its way out.
fn lock_file_or_wait(
    path: &std::path::Path,
    contents: &str,
    holder_leaving: impl Fn() -> bool,
) -> anyhow::Result<Option<nix::fcntl::Flock<std::fs::File>>> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match lock_file(path, contents)? {
            Some(lock) => return Ok(Some(lock)),
            None if holder_leaving() && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            None => return Ok(None),
        }
    }
}

/// Takes an exclusive flock on `path` (0600, created if needed, never through a link) and writes
/// `contents` into it; `None` when another process holds it.
fn lock_file(
    path: &std::path::Path,
    contents: &str,
) -> anyhow::Result<Option<nix::fcntl::Flock<std::fs::File>>> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(mut lock) => {
            lock.set_len(0).with_context(|| format!("cannot write {}", path.display()))?;
            write!(lock, "{contents}")
                .with_context(|| format!("cannot write {}", path.display()))?;
            Ok(Some(lock))
        }
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => bail!("cannot lock {}: {e}", path.display()),
    }
}

/// Whether the launcher recorded with `pid` for a sandbox registered at `started` is still there.
///
/// A pid alone can be fooled: once the launcher is gone, the kernel may give its pid to any new
/// process. On Linux the process now at `pid` must also have started no later than the sandbox
/// was registered (its start from `/proc/PID/stat` field 22, in clock ticks since boot, plus the
/// boot time of `/proc/stat`), with [`START_SLACK`] for the boot time's whole seconds. Limits: a
/// pid reused within that slack of the registration, or a wall clock stepped back by more than
/// it since, still passes for the launcher; without `/proc` only the pid is checked.
fn is_alive(pid: u32, started: Timestamp) -> bool {
    let Ok(raw) = i32::try_from(pid) else { return false };
    let exists = matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None),
        Ok(()) | Err(nix::errno::Errno::EPERM)
    );
    exists && process_start(pid).is_none_or(|t| t.0 <= started.0 + START_SLACK.as_millis() as i64)
}

/// How much later than its sandbox's registration a launcher may seem to have started.
const START_SLACK: Duration = Duration::from_secs(2);

/// When the process `pid` started (wall clock), from `/proc`; `None` where that cannot be read.
fn process_start(pid: u32) -> Option<Timestamp> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let boot = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten()?;
    start_from_proc(&stat, &boot, ticks)
}

/// The pure part of [`process_start`]: `/proc/PID/stat` and `/proc/stat` texts, clock ticks per
/// second.
fn start_from_proc(stat: &str, boot: &str, ticks_per_s: i64) -> Option<Timestamp> {
    // The command name (field 2) may hold spaces and parentheses: fields 3.. follow the last ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    let start_ticks: i64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let btime: i64 = boot.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()?;
    if ticks_per_s <= 0 {
        return None;
    }
    Some(Timestamp(btime * 1000 + start_ticks * 1000 / ticks_per_s))
}

/// Marks sandboxes whose launcher is gone as lost (at startup only) and prunes old events. A
/// busy, locked or full store must not keep the daemon from serving: failures are logged.
async fn housekeeping(store: Store, retention: Duration, startup: bool) {
    let work = tokio::task::spawn_blocking(move || {
        let now = Timestamp::now();
        let lost = startup.then(|| store.reap_dead(is_alive, now));
        (lost, store.prune_events(now.minus(retention)))
    });
    let Ok((lost, pruned)) = work.await else {
        tracing::error!("the store's housekeeping panicked");
        return;
    };
    match lost {
        Some(Ok(lost)) if !lost.is_empty() => {
            tracing::info!(count = lost.len(), "sandboxes whose launcher is gone marked lost");
        }
        Some(Err(e)) => tracing::warn!(
            error = %e,
            "cannot mark sandboxes whose launcher is gone as lost; `ls` shows them running"
        ),
        Some(Ok(_)) | None => {}
    }
    match pruned {
        Ok(0) => {}
        Ok(n) => tracing::info!(pruned = n, "old events pruned"),
        Err(e) => tracing::warn!(error = %e, "old events not pruned; trying again in an hour"),
    }
}

async fn serve(
    paths: Paths,
    idle_exit: Option<Duration>,
    netpool: crate::netpool::NetPool,
) -> anyhow::Result<u8> {
    let config = crate::setup::load_config()?;
    let settings = config.daemon_settings();
    let store_path = Store::default_path().context("where the store lives")?;
    let store = {
        let p = store_path.clone();
        tokio::task::spawn_blocking(move || Store::open(&p)).await?
    }
    .with_context(|| format!("cannot open the store {}", store_path.display()))?;
    let retention = settings.event_retention.unwrap_or(DEFAULT_RETENTION);
    housekeeping(store.clone(), retention, true).await;
    let writer = EventWriter::start(&store, EventWriterConfig::default())
        .context("cannot start the event writer")?;
    let grants = Arc::new(adapters::GrantCache::new(store.clone()));
    let n = {
        let g = grants.clone();
        tokio::task::spawn_blocking(move || g.reload()).await??
    };
    let records = adapters::Records::start(store.clone());
    let defaults = approvals::BrokerConfig::default();
    let ask_timeout = settings.ask_timeout.unwrap_or(defaults.timeout);
    let broker = approvals::Broker::new(
        approvals::BrokerConfig {
            timeout: ask_timeout,
            questions_per_minute: settings
                .questions_per_minute
                .unwrap_or(approvals::DEFAULT_QUESTIONS_PER_MINUTE),
            questions_per_minute_total: settings
                .questions_per_minute_total
                .unwrap_or(approvals::DEFAULT_QUESTIONS_PER_MINUTE_TOTAL),
            ..defaults
        },
        Some(Arc::new(adapters::Writer {
            store: store.clone(),
            grants: grants.clone(),
            records: records.clone(),
        })),
    );
    // Every answer, from every channel, within the organisation's managed layer.
    broker.set_screen(Arc::new(crate::managed::ManagedScreen::system()));
    let (bus, _) = tokio::sync::broadcast::channel(4096);
    let telemetry = start_telemetry(&config)?;
    let shared = Arc::new_cyclic(|me| adapters::Shared {
        records,
        store: store.clone(),
        events: writer.sender(),
        writer: std::sync::Mutex::new(Some(writer)),
        telegram: std::sync::OnceLock::new(),
        broker: broker.clone(),
        grants,
        sandboxes: Arc::default(),
        bus,
        cap: crate::event_cap::EventCap::new(
            settings.events_per_minute.unwrap_or(crate::event_cap::DEFAULT_PER_MINUTE),
        ),
        unattended: settings.ask == Some(sandgate_config::AskMode::Deny),
        me: me.clone(),
        fences: Default::default(),
        monitor_error: Default::default(),
        telemetry: telemetry.clone(),
    });
    let proxy = sandgate_proxy::Proxy::builder()
        .config(sandgate_proxy::ProxyConfig {
            // The broker's timeout denies first, with its own message; this is the backstop.
            ask_timeout,
            upstream: crate::setup::upstream(&config)?,
            ..sandgate_proxy::ProxyConfig::default()
        })
        .approver(Arc::new(adapters::Asker(shared.clone())))
        .grants(Arc::new(adapters::Grants(shared.clone())))
        .events(Arc::new(adapters::Sink(shared.clone())))
        .attributor(Arc::new(crate::attribution::ProcAttributor::new(shared.sandboxes.clone())))
        .resolver(dns::resolver()?);
    let proxy = match crate::setup::interceptor() {
        Some(i) => proxy.interceptor(i),
        None => proxy,
    }
    .build();
    // A bad bot setting must not take approvals down: the daemon runs without the bot, logs why,
    // and `sandgate status` says so.
    let (telegram, telegram_error) = match start_telegram(&config, &shared) {
        Ok(on) => (on, None),
        Err(e) => {
            tracing::error!(
                "{e:#}; running without the Telegram bot (questions stay answerable from the CLI \
                 and the terminal)"
            );
            (false, Some(format!("{e:#}")))
        }
    };
    tokio::spawn(approval_events(shared.clone(), settings.desktop_notifications.unwrap_or(false)));
    #[cfg(target_os = "macos")]
    macos_monitor::start(shared.clone());

    // The socket: remove a stale one (we hold the lock, so nobody serves it), bind, 0600.
    let _ = std::fs::remove_file(&paths.socket);
    let listener = tokio::net::UnixListener::bind(&paths.socket)
        .with_context(|| format!("cannot listen on {}", paths.socket.display()))?;
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&paths.socket, std::fs::Permissions::from_mode(0o600))
            .context("control socket permissions")?;
    }
    let mut daemon =
        server::Daemon::new(shared.clone(), proxy.clone(), telegram, paths.socket.clone());
    daemon.telegram_error = telegram_error;
    daemon.netpool = Arc::new(netpool);
    daemon.netpool.refill();
    let daemon = Arc::new(daemon);
    #[cfg(target_os = "linux")]
    let network_sockets = {
        let dir = paths.socket.parent().unwrap_or(std::path::Path::new("/"));
        crate::network_sockets::NetworkSockets::start(
            dir,
            &daemon,
            &tokio::runtime::Handle::current(),
        )
    };
    // A build launch's scan answered from the daemon's index (see `tree_socket`).
    #[cfg(target_os = "linux")]
    let tree_socket = crate::tree_socket::TreeSocket::start(
        paths.socket.parent().unwrap_or(std::path::Path::new("/")),
        &daemon,
    );
    // Idle, and (Linux) the network sockets closed in the same breath: a network handed out
    // after the check would go to a launch whose daemon is leaving.
    let idle_now = |d: Duration| {
        #[cfg(target_os = "linux")]
        return network_sockets.close_if(|| daemon.idle_for(d));
        #[cfg(not(target_os = "linux"))]
        daemon.idle_for(d)
    };
    tracing::info!(
        pid = std::process::id(),
        socket = %paths.socket.display(),
        store = %store_path.display(),
        grants = n,
        "sandgate daemon ready"
    );
    let mut stop = daemon.stop.subscribe();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut last_prune = std::time::Instant::now();
    loop {
        tokio::select! {
            a = listener.accept() => match a {
                Ok((stream, _)) => accepted(&daemon, stream),
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
            // (The guard `wait_for` returns is dropped at once: this task moves between threads.)
            _ = async { drop(stop.wait_for(|s| *s).await) } => break,
            _ = term.recv() => { let _ = shared.bus.send(protocol::Event::DaemonStopping); break }
            _ = int.recv() => { let _ = shared.bus.send(protocol::Event::DaemonStopping); break }
            _ = tick.tick() => {
                if idle_exit.is_some_and(|d| daemon.idle_for(d)) {
                    // A client may be waiting in the backlog: serve it rather than leave it.
                    match tokio::time::timeout(Duration::ZERO, listener.accept()).await {
                        Ok(Ok((stream, _))) => accepted(&daemon, stream),
                        _ if idle_now(idle_exit.unwrap_or_default()) => {
                            tracing::info!("idle; exiting");
                            break;
                        }
                        _ => {} // a network was handed out just now
                    }
                }
                if last_prune.elapsed() > Duration::from_secs(3600) {
                    last_prune = std::time::Instant::now();
                    tokio::spawn(housekeeping(store.clone(), retention, false));
                }
            }
        }
    }
    tracing::info!("stopping");
    let _ = std::fs::remove_file(&paths.socket);
    #[cfg(target_os = "linux")]
    network_sockets.stop();
    #[cfg(target_os = "linux")]
    if let Some(t) = &tree_socket {
        t.stop();
    }
    broker.shutdown();
    proxy.shutdown();
    // Let launchers read `daemon_stopping` and in-flight replies go out.
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.drain(Duration::from_secs(1)).await;
    // What the cap held back (refusals not stored, requests counted) after the proxy's last
    // events, before the writer's last batch.
    shared.end_all_caps();
    if let Some(t) = &telemetry {
        t.telemetry.stop(TELEMETRY_PATIENCE).await;
        let st = t.telemetry.stats();
        tracing::info!(
            exported = st.exported,
            dropped = st.dropped,
            failed = st.failed,
            "telemetry stopped"
        );
    }
    let writer = shared.writer.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(w) = writer {
        let stats = tokio::task::spawn_blocking(move || w.shutdown()).await.unwrap_or_default();
        tracing::info!(written = stats.written, dropped = stats.dropped, "events flushed");
    }
    Ok(0)
}

/// How long a stopping daemon gives the collector for what is still queued.
const TELEMETRY_PATIENCE: Duration = Duration::from_secs(2);

/// Starts the OpenTelemetry export when `[telemetry] otlp_endpoint` is set (the managed file's
/// section wins over the user's). A collector it cannot reach is no error (the records are
/// counted as dropped); an `https` endpoint whose `extra_roots` cannot be read is.
fn start_telemetry(
    config: &sandgate_config::Config,
) -> anyhow::Result<Option<Arc<crate::telemetry::Export>>> {
    let Some(settings) = config.telemetry_settings() else { return Ok(None) };
    let Some(endpoint) = settings.endpoint.clone() else { return Ok(None) };
    let resource = Arc::new(crate::telemetry::base_resource());
    let mut c = sandgate_telemetry::ExporterConfig::new(endpoint.clone(), resource);
    c.headers = settings.headers.clone();
    if let Some(i) = settings.interval {
        c.interval = i;
    }
    if endpoint.tls {
        let tls = sandgate_proxy::client_tls(&settings.extra_roots, "[telemetry] extra_roots")
            .map_err(|e| anyhow::anyhow!("{e} ({})", settings.file.display()))?;
        c.tls = Some(Arc::new(tls));
    }
    tracing::info!(endpoint = %endpoint, file = %settings.file.display(), "exporting telemetry");
    let export = crate::telemetry::Export::start(c, &tokio::runtime::Handle::current());
    Ok(Some(Arc::new(export)))
}

/// Counts a new control connection at once and serves it.
fn accepted(daemon: &Arc<server::Daemon>, stream: tokio::net::UnixStream) {
    daemon.connections.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    daemon.touch();
    tokio::spawn(server::connection(daemon.clone(), stream));
}

/// Starts the Telegram bot when a token and chats are configured.
fn start_telegram(
    config: &sandgate_config::Config,
    shared: &Arc<adapters::Shared>,
) -> anyhow::Result<bool> {
    let settings = config.telegram_settings();
    if settings.as_ref().is_some_and(|s| s.token.is_some()) {
        let file = config.global.as_ref().map(|f| f.path.display().to_string());
        tracing::warn!(
            file = file.as_deref().unwrap_or("config.toml"),
            "{}",
            approvals::telegram::CONFIG_TOKEN_WARNING
        );
    }
    let Some((tc, source)) = telegram_config(config)? else { return Ok(false) };
    let chats = tc.chats.len();
    let control = Arc::new(adapters::DaemonBot(shared.clone(), std::time::SystemTime::now()));
    let handle = approvals::telegram::spawn(tc, shared.broker.clone(), control)
        .map_err(|e| anyhow::anyhow!("telegram: {e}"))?;
    let _ = shared.telegram.set(handle);
    tracing::info!(chats, token = ?source, "telegram bot started");
    Ok(true)
}

/// The bot's settings from `config` and the environment, with where the token came from;
/// `None` when no bot is configured, an error saying what is missing when half of one is.
pub fn telegram_config(
    config: &sandgate_config::Config,
) -> anyhow::Result<Option<(approvals::telegram::TelegramConfig, approvals::telegram::TokenSource)>>
{
    let settings = config.telegram_settings();
    let token = approvals::telegram::BotToken::from_sources(
        settings.as_ref().and_then(|s| s.token_file.as_deref()),
        settings.as_ref().and_then(|s| s.token.as_deref()),
    )
    .map_err(|e| anyhow::anyhow!("telegram: {e}"))?;
    let Some((token, source)) = token else {
        // Chats but no token: say why the bot is off instead of a bare "off".
        if settings.as_ref().is_some_and(|s| !s.chats.is_empty()) {
            bail!(
                "telegram: [telegram] chats are configured but no bot token was found: set {} \
                 in the daemon's environment, or `token_file` (a file of mode 0600) in \
                 [telegram]",
                approvals::telegram::TOKEN_ENV
            );
        }
        return Ok(None);
    };
    let Some(settings) = settings else {
        bail!(
            "telegram: {} is set but the config has no [telegram] chats; add `chats = [ID]`",
            approvals::telegram::TOKEN_ENV
        );
    };
    let mut tc = approvals::telegram::TelegramConfig::new(token, settings.chats.clone());
    tc.users = settings.users.clone();
    tc.name = settings.name.clone().unwrap_or_else(machine_name);
    tc.api_url = settings.api_url.clone();
    if let Some(w) = settings.alert_window {
        tc.alert_window = w;
    }
    if let Some(t) = settings.request_timeout {
        tc.request_timeout = t;
    }
    if let Some(n) = settings.alerts_per_minute {
        tc.alerts_per_window = n;
    }
    Ok(Some((tc, source)))
}

/// `user@host` of this daemon: how its Telegram messages name it when `[telegram] name` does
/// not (in a chat several machines share, the name says which one asks).
fn machine_name() -> String {
    let uid = nix::unistd::getuid();
    let user = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| format!("uid {uid}"), |u| u.name);
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    // The first label: `laptop`, not `laptop.home.example`.
    let host = host.split('.').next().unwrap_or(&host).to_owned();
    format!("{user}@{host}")
}

/// Broker events → store, subscribers, desktop notifications.
async fn approval_events(shared: Arc<adapters::Shared>, desktop: bool) {
    use protocol::Event;
    use sandgate_store::EventKind;
    let mut rx = shared.broker.subscribe();
    loop {
        let ev = match rx.recv().await {
            Ok(ev) => ev,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        let event = match ev {
            approvals::BrokerEvent::Asked(q) => {
                if desktop {
                    notify(&q);
                }
                Event::Asked { question: q }
            }
            approvals::BrokerEvent::Answered { question, answer, by, pattern } => {
                Event::Answered { question, answer, by, pattern }
            }
            approvals::BrokerEvent::TimedOut(q) => Event::TimedOut { question: q },
            approvals::BrokerEvent::Withdrawn(q) => Event::Withdrawn { question: q },
            approvals::BrokerEvent::OverBudget { sandbox, refused, limit, window } => {
                if desktop {
                    notify_text(&format!(
                        "{sandbox} asked more than {limit} questions in {}: and {refused} more \
                         were denied without asking",
                        approvals::format_duration(window)
                    ));
                }
                Event::OverBudget { sandbox, refused, limit, window_s: window.as_secs() }
            }
        };
        let sandbox = event.sandbox().map(str::to_owned);
        shared.publish(EventKind::Approval, sandbox.as_deref(), event);
    }
}

/// A desktop notification for a question (best effort: notify-send on Linux, osascript on macOS).
fn notify(q: &approvals::PendingQuestion) {
    // Host and port first; the sandbox's name (its own text) last and quoted.
    let target = format!("{}:{}", q.question.host, q.question.port);
    let who = q.question.process.as_ref().map(|p| format!("{p} ")).unwrap_or_default();
    notify_text(&format!(
        "{who}wants {target} — `sandgate allow {target}` or answer in `sandgate watch` — sandbox {:?}",
        sandgate_config::sanitize(&q.question.sandbox)
    ));
}

/// A desktop notification with `body` (best effort).
fn notify_text(body: &str) {
    // The sandbox's name and host come from a sandbox: only sanitised text (no controls, no bidi
    // overrides) reaches the notification.
    let body = sandgate_config::sanitize(body).into_owned();
    #[cfg(target_os = "macos")]
    let cmd = std::process::Command::new("osascript")
        .arg("-e")
        .arg(format!("display notification {:?} with title \"sandgate\"", body.replace('"', "'")))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    #[cfg(not(target_os = "macos"))]
    let cmd = std::process::Command::new("notify-send")
        .args(["--app-name=sandgate", "sandgate: approval needed"])
        .arg(body)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Ok(mut child) = cmd {
        std::thread::spawn(move || child.wait());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_start_is_read_from_proc_past_a_command_name_with_parentheses() {
        // Fields: pid (comm) state ppid ... field 22 is starttime (ticks since boot).
        let stat = "4242 (a) b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    12345 1000 100 18446744073709551615";
        let boot = "cpu  1 2 3\nbtime 1700000000\nprocesses 9\n";
        assert_eq!(start_from_proc(stat, boot, 100), Some(Timestamp(1_700_000_123_450)));
        assert_eq!(start_from_proc(stat, "cpu 1\n", 100), None, "no btime");
        assert_eq!(start_from_proc("4242 (x) S 1", boot, 100), None, "truncated");
        assert_eq!(start_from_proc(stat, boot, 0), None);
    }

    // `/proc` (process_start) is Linux's: elsewhere only the pid is checked.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_pid_now_held_by_a_process_younger_than_the_sandbox_is_not_its_launcher() {
        let me = std::process::id();
        let now = Timestamp::now();
        assert!(is_alive(me, now), "this process started before now");
        // A sandbox registered an hour before this process started: the pid was reused.
        let started = process_start(me).expect("/proc readable");
        assert!(!is_alive(me, started.minus(Duration::from_secs(3600))));
        assert!(!is_alive(u32::MAX, now));
    }
}
