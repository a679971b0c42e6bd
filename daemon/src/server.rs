//! The daemon's control socket: accepts connections, checks each peer, reads JSON lines (with
//! descriptors), answers each, and streams events to launchers and subscribers.

use std::collections::VecDeque;
use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use sandgate_approvals as approvals;
use sandgate_config::{Config, ConfigPaths, Overrides};
use sandgate_store::{EventKind, GrantList, NewSandbox, StoreError, Timestamp};
use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt as _, Interest};
use tokio::net::UnixStream;
use tokio::sync::{broadcast, mpsc, watch};

use super::adapters::{Live, Shared, format_grant, revoke};
use crate::protocol::{
    AnswerTargetSpec, Envelope, Event, FdKind, MAX_LINE, PROTOCOL_VERSION, Reply, Request,
    SandboxInfo,
};

/// The running daemon, as connections see it.
pub struct Daemon {
    /// Store, broker, grants, registry, bus.
    pub shared: Arc<Shared>,
    /// The proxy serving every sandbox's listener.
    pub proxy: sandgate_proxy::Proxy,
    /// When it started.
    pub started: SystemTime,
    /// Set to stop the daemon.
    pub stop: watch::Sender<bool>,
    /// Connections open now.
    pub connections: AtomicU64,
    /// Last time anything happened (for `--idle-exit`).
    pub last_activity: std::sync::Mutex<Instant>,
    /// Whether the Telegram bot runs.
    pub telegram: bool,
    /// Why the Telegram bot is not running although configured.
    pub telegram_error: Option<String>,
    /// The control socket's path.
    pub socket: std::path::PathBuf,
    /// Networks made ahead for launchers.
    pub netpool: Arc<crate::netpool::NetPool>,
    next_conn: AtomicU64,
}

impl Daemon {
    /// A daemon over `shared` and `proxy`.
    pub fn new(
        shared: Arc<Shared>,
        proxy: sandgate_proxy::Proxy,
        telegram: bool,
        socket: std::path::PathBuf,
    ) -> Daemon {
        Daemon {
            shared,
            proxy,
            started: SystemTime::now(),
            stop: watch::channel(false).0,
            connections: AtomicU64::new(0),
            last_activity: std::sync::Mutex::new(Instant::now()),
            telegram,
            telegram_error: None,
            socket,
            netpool: Arc::default(),
            next_conn: AtomicU64::new(1),
        }
    }

    /// The open questions, with the number of requests the proxy holds for each (the broker
    /// sees one asker per destination: the proxy coalesces them).
    pub fn pending(&self) -> Vec<approvals::PendingQuestion> {
        let mut list = self.shared.broker.pending();
        for q in &mut list {
            if let Ok(host) = sandgate_config::Host::parse(&q.question.host) {
                let target = sandgate_config::Target { host, port: q.question.port };
                let id = sandgate_proxy::SandboxId::new(q.question.sandbox.clone());
                q.waiters = q.waiters.max(self.proxy.waiting(&id, &target));
            }
        }
        list
    }

    pub fn touch(&self) {
        *self.last_activity.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    /// Idle: nothing served, nobody connected, nothing pending, for at least `d`.
    pub fn idle_for(&self, d: Duration) -> bool {
        let quiet = self.shared.sandboxes.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
            && self.connections.load(Ordering::Relaxed) == 0
            && self.shared.broker.pending().is_empty();
        if !quiet {
            self.touch();
            return false;
        }
        self.last_activity.lock().unwrap_or_else(|e| e.into_inner()).elapsed() >= d
    }
}

/// Why a control request failed: a code for scripts (`not_found`, `conflict`, `bad_request`,
/// `store`, `internal`) and a message for people; sent as the reply's `error`.
struct RequestError {
    code: &'static str,
    message: String,
}

impl RequestError {
    fn new(code: &'static str, message: impl Into<String>) -> RequestError {
        RequestError { code, message: message.into() }
    }
}

/// How long `flush` waits for the event writer (which retries a busy store for a few seconds).
const FLUSH_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

impl From<StoreError> for RequestError {
    fn from(e: StoreError) -> RequestError {
        RequestError::new("store", e.to_string())
    }
}

fn bad(msg: impl Into<String>) -> RequestError {
    RequestError::new("bad_request", msg)
}

/// Runs a blocking store call off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, RequestError> + Send + 'static,
) -> Result<T, RequestError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(RequestError::new("internal", format!("the store call failed: {e}")))
    })
}

/// Who is on the other end.
struct Peer {
    uid: u32,
}

/// Checks a peer: the same uid as the daemon, or root; not a process inside a sandbox.
fn check_peer(stream: &UnixStream) -> Result<Peer, String> {
    let cred = stream.peer_cred().map_err(|e| format!("cannot read peer credentials: {e}"))?;
    check_credentials(cred.uid(), cred.pid(), stream.as_fd())
}

/// [`check_peer`] for a connection accepted outside the runtime (see `network_sockets`).
#[cfg(target_os = "linux")]
pub(crate) fn check_peer_fd(fd: BorrowedFd<'_>) -> Result<(), String> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let cred = getsockopt(&fd, PeerCredentials)
        .map_err(|e| format!("cannot read peer credentials: {e}"))?;
    check_credentials(cred.uid(), Some(cred.pid()), fd).map(drop)
}

/// The rule of [`check_peer`] for a peer of `uid` and `pid` on the socket `fd`.
fn check_credentials(uid: u32, pid: Option<i32>, fd: BorrowedFd<'_>) -> Result<Peer, String> {
    let me = nix::unistd::geteuid().as_raw();
    if uid != me && uid != 0 {
        return Err(format!(
            "uid {uid} may not use the sandgate daemon of uid {me}: only the same user or root"
        ));
    }
    // A process in another pid namespace (a sandbox, or a sandbox in a sandbox) is refused even
    // with a matching uid: nothing inside a sandbox may change its own policy.
    #[cfg(target_os = "linux")]
    same_pid_namespace(fd, pid)?;
    // macOS has no pid namespaces: a peer under a Seatbelt profile is refused instead (the
    // profile hides the socket already; this holds when a socket was allowed by mistake).
    #[cfg(target_os = "macos")]
    let _ = fd;
    #[cfg(target_os = "macos")]
    match pid.and_then(|p| u32::try_from(p).ok()).filter(|&p| p > 0) {
        Some(pid) if !sandgate_sandbox::pid_in_seatbelt(pid) => {}
        Some(_) => return Err("requests from inside a sandbox are refused".into()),
        None => return Err("the connecting process cannot be identified".into()),
    }
    Ok(Peer { uid })
}

impl Peer {
    /// The peer's user name (looked up when a decision is attributed to it, not for every
    /// connection: most are a launcher's, which never decides).
    fn name(&self) -> String {
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(self.uid))
            .ok()
            .flatten()
            .map_or_else(|| format!("uid {}", self.uid), |u| u.name)
    }
}

/// Refuses a peer that is not in the daemon's own pid namespace, or that cannot be shown to be.
///
/// With `SO_PEERPIDFD` (Linux 6.5+) the check is made on a pidfd of the very process that
/// connected, so neither its exit nor the reuse of its pid can fool it; older kernels compare
/// `/proc/PID/ns/pid` links. Either way, a peer whose namespace cannot be read is refused.
#[cfg(target_os = "linux")]
fn same_pid_namespace(stream: BorrowedFd<'_>, pid: Option<i32>) -> Result<(), String> {
    use std::os::fd::AsRawFd as _;
    const INSIDE: &str = "requests from inside a sandbox are refused";
    const UNKNOWN: &str = "the connecting process is gone or cannot be identified (connect from a \
                           process that stays alive, outside any sandbox)";
    match sandgate_sandbox::fdpass::peer_pidfd(stream) {
        Ok(Some(pidfd)) => {
            let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd()))
                .map_err(|_| UNKNOWN.to_string())?;
            return match pidfd_levels(&info) {
                Some(1) => Ok(()),
                Some(_) => Err(INSIDE.into()),
                None => Err(UNKNOWN.into()),
            };
        }
        // The kernel has no SO_PEERPIDFD: the /proc comparison below.
        Ok(None) => {}
        // It has, and could not make one (the peer has exited and been reaped): refused, never
        // the racy fallback.
        Err(_) => return Err(UNKNOWN.into()),
    }
    let pid = pid.filter(|&p| p > 0).ok_or_else(|| UNKNOWN.to_string())?;
    let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/pid")).ok();
    match (ns(&pid.to_string()), ns("self")) {
        (Some(theirs), Some(mine)) if theirs == mine => Ok(()),
        (Some(_), Some(_)) => Err(INSIDE.into()),
        _ => Err(UNKNOWN.into()),
    }
}

/// From a pidfd's `fdinfo`: how many pid namespaces deep the process is, counted from this
/// process's own (1 = the same namespace); `None` when it has exited or is outside this
/// namespace's tree (`Pid: -1` or `Pid: 0`).
#[cfg(target_os = "linux")]
fn pidfd_levels(fdinfo: &str) -> Option<usize> {
    let field = |name: &str| {
        fdinfo.lines().find_map(|l| l.strip_prefix(name).map(|v| v.split_whitespace().count()))
    };
    let pid: i64 = fdinfo.lines().find_map(|l| l.strip_prefix("Pid:"))?.trim().parse().ok()?;
    if pid <= 0 {
        return None;
    }
    // Without CONFIG_PID_NS there is no NSpid line, and only one namespace.
    Some(field("NSpid:").unwrap_or(1))
}

/// Reads once from the socket, with any descriptors that came along.
async fn read_some(stream: &UnixStream, buf: &mut [u8]) -> std::io::Result<(usize, Vec<OwnedFd>)> {
    loop {
        stream.readable().await?;
        match stream
            .try_io(Interest::READABLE, || sandgate_sandbox::fdpass::recv_with_fds(stream, buf))
        {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            other => return other,
        }
    }
}

/// `v` as one JSON line (the control protocol's framing).
pub(crate) fn line(v: &impl serde::Serialize) -> String {
    let mut s = serde_json::to_string(v).unwrap_or_else(|e| {
        format!(r#"{{"ok":false,"error":{{"code":"internal","message":"{e}"}}}}"#)
    });
    s.push('\n');
    s
}

/// Serves one connection until it closes.
/// The caller counted it in `d.connections` when it accepted it (so that an idle check between
/// the accept and this task's start cannot stop the daemon under it).
pub async fn connection(d: Arc<Daemon>, stream: UnixStream) {
    let conn = d.next_conn.fetch_add(1, Ordering::Relaxed);
    let peer = match check_peer(&stream) {
        Ok(p) => p,
        Err(why) => {
            tracing::warn!(%why, "control connection refused");
            let mut stream = stream;
            let _ = stream.write_all(line(&Reply::err(None, "denied", why)).as_bytes()).await;
            d.connections.fetch_sub(1, Ordering::Relaxed);
            return;
        }
    };
    let (tx, mut rx) = mpsc::channel::<String>(1024);
    let stream = Arc::new(stream);
    let writer = {
        let stream = stream.clone();
        tokio::spawn(async move {
            while let Some(l) = rx.recv().await {
                let mut off = 0;
                while off < l.len() {
                    if stream.writable().await.is_err() {
                        return;
                    }
                    match stream.try_write(&l.as_bytes()[off..]) {
                        Ok(n) => off += n,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(_) => return,
                    }
                }
            }
        })
    };
    let mut cx = Conn {
        d: d.clone(),
        conn,
        peer,
        tx: tx.clone(),
        owned: Vec::new(),
        fds: VecDeque::new(),
        subscription: None,
    };
    let mut buf = vec![0u8; 16 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    let mut skipping = false;
    loop {
        let (n, fds) = match read_some(&stream, &mut buf).await {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                // Too many descriptors: the line that came with them is gone, so the connection
                // cannot go on; say why before closing it.
                let _ = tx.send(line(&Reply::err(None, "bad_request", e.to_string()))).await;
                break;
            }
            Err(e) => {
                tracing::debug!(error = %e, "control connection read failed");
                break;
            }
        };
        cx.fds.extend(fds);
        if n == 0 {
            break;
        }
        pending.extend_from_slice(&buf[..n]);
        while let Some(pos) = pending.iter().position(|&b| b == b'\n') {
            let raw: Vec<u8> = pending.drain(..=pos).collect();
            if std::mem::take(&mut skipping) {
                continue; // the tail of an over-long line
            }
            let text = String::from_utf8_lossy(&raw[..raw.len() - 1]).trim().to_owned();
            if text.is_empty() {
                continue;
            }
            cx.line(&text).await;
        }
        if pending.len() > MAX_LINE {
            pending.clear();
            if !skipping {
                skipping = true;
                let _ = tx
                    .send(line(&Reply::err(
                        None,
                        "bad_request",
                        format!("line longer than {MAX_LINE} bytes; skipped"),
                    )))
                    .await;
            }
        }
        if cx.fds.len() > 16 {
            cx.fds.clear(); // descriptors nobody asked for
        }
    }
    cx.closed().await;
    drop(cx);
    drop(tx);
    let _ = writer.await;
    d.connections.fetch_sub(1, Ordering::Relaxed);
    d.touch();
}

struct Conn {
    d: Arc<Daemon>,
    conn: u64,
    peer: Peer,
    tx: mpsc::Sender<String>,
    owned: Vec<String>,
    fds: VecDeque<OwnedFd>,
    /// The task forwarding events to a subscriber; it holds a sender to this connection's writer,
    /// so it is aborted when the connection ends (or subscribes again).
    subscription: Option<tokio::task::AbortHandle>,
}

impl Conn {
    async fn line(&mut self, text: &str) {
        let env: Envelope = match serde_json::from_str(text) {
            Ok(e) => e,
            Err(e) => {
                let id = serde_json::from_str::<Value>(text).ok().and_then(|v| v["id"].as_u64());
                let reply = Reply::err(
                    id,
                    "bad_request",
                    format!("not a request: {e}; see docs/internals.md, \"Control protocol\""),
                );
                let _ = self.tx.send(line(&reply)).await;
                return;
            }
        };
        let id = env.id;
        if let Request::Subscribe { sandbox } = &env.request {
            // Subscribe before replying, so that nothing after the reply is missed.
            let rx = self.d.shared.bus.subscribe();
            let _ = self.tx.send(line(&Reply::ok(id, json!({ "subscribed": true })))).await;
            let task = tokio::spawn(forward(rx, self.tx.clone(), sandbox.clone(), true, false));
            if let Some(old) = self.subscription.replace(task.abort_handle()) {
                old.abort(); // subscribing again replaces the subscription, never doubles it
            }
            return;
        }
        let reply = match self.handle(env.request).await {
            Ok(v) => Reply::ok(id, v),
            Err(RequestError { code, message }) => Reply::err(id, code, message),
        };
        let _ = self.tx.send(line(&reply)).await;
    }

    async fn handle(&mut self, req: Request) -> Result<Value, RequestError> {
        let d = self.d.clone();
        let s = d.shared.clone();
        match req {
            Request::Hello => Ok(json!({
                "protocol": PROTOCOL_VERSION,
                "version": env!("CARGO_PKG_VERSION"),
                "pid": std::process::id(),
            })),
            Request::Register { sandbox, fds } => self.register(sandbox, fds).await,
            Request::Unregister { sandbox: id, exit_status, flush_blocked } => {
                if !self.owned.contains(&id) {
                    return Err(bad(format!("sandbox {id} was not registered on this connection")));
                }
                self.owned.retain(|o| o != &id);
                let Some(drained) = end_sandbox(&d, &id, self.conn, flush_blocked).await else {
                    // Registered again since by another launcher: that one records its end.
                    return Ok(json!({ "unregistered": id, "blocked": [] }));
                };
                s.records.finish(id.clone(), exit_status);
                // Nobody waits for its questions any more: out of `pending` now, not at timeout.
                s.broker.withdraw_sandbox(&id);
                s.publish(
                    EventKind::Sandbox,
                    Some(&id),
                    Event::SandboxEnded { sandbox: id.clone(), exit_status, lost: false },
                );
                Ok(json!({ "unregistered": id, "blocked": drained }))
            }
            Request::Pending => Ok(serde_json::to_value(d.pending()).unwrap_or(Value::Null)),
            Request::Answer { target, answer, by, channel } => {
                self.answer(target, answer, by, channel.into()).await
            }
            Request::Rules { all } => {
                // Which grants are current depends on which sandboxes still run: a sandbox that
                // just ended (its launcher has its answer) must not be listed as running.
                s.records.flush().await;
                let store = s.store.clone();
                let grants = blocking(move || {
                    let which =
                        if all { GrantList::All } else { GrantList::Current(Timestamp::now()) };
                    Ok(store.list_grants(which)?)
                })
                .await?;
                Ok(Value::Array(
                    grants
                        .iter()
                        .map(|g| {
                            let mut v = serde_json::to_value(g).unwrap_or(Value::Null);
                            v["line"] = Value::String(format_grant(g));
                            v
                        })
                        .collect(),
                ))
            }
            Request::Revoke { grant: id } => {
                let s2 = s.clone();
                let g = blocking(move || {
                    revoke(&s2, id).map_err(|e| {
                        if e.starts_with("no grant") {
                            RequestError::new("not_found", e)
                        } else {
                            RequestError::new("store", e)
                        }
                    })
                })
                .await?;
                Ok(json!({ "grant": g.id, "revoked": g.revoked, "line": format_grant(&g) }))
            }
            Request::Status => self.status().await,
            Request::List { all } => {
                s.records.flush().await;
                let store = s.store.clone();
                let list = blocking(move || Ok(store.list_sandboxes(!all)?)).await?;
                let served = s.sandboxes.lock().unwrap_or_else(|e| e.into_inner()).clone();
                Ok(Value::Array(
                    list.iter()
                        .map(|r| {
                            let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
                            v["served"] = Value::Bool(served.contains_key(&r.sandbox.id));
                            v
                        })
                        .collect(),
                ))
            }
            Request::Flush => {
                // Sandbox rows first: `log --sandbox ID` looks the id up before the events.
                s.records.flush().await;
                let events = s.events.clone();
                let done = tokio::task::spawn_blocking(move || events.flush(FLUSH_PATIENCE))
                    .await
                    .unwrap_or(false);
                if !done {
                    return Err(RequestError::new(
                        "store",
                        format!(
                            "the event writer did not commit within {} s (a busy or full store: \
                             see `sandgate status`)",
                            FLUSH_PATIENCE.as_secs()
                        ),
                    ));
                }
                Ok(json!({ "flushed": true }))
            }
            Request::Subscribe { .. } => {
                Err(RequestError::new("internal", "subscribe handled above"))
            }
            Request::HookDecision { agent, tool, decision, reason } => {
                // Bounded: the line limit already caps it, but the log should stay readable.
                let reason: String = reason.chars().take(2000).collect();
                s.publish(EventKind::Decision, None, Event::Hook { agent, tool, decision, reason });
                Ok(json!({ "recorded": true }))
            }
            Request::Stop => {
                let _ = s.bus.send(Event::DaemonStopping);
                let _ = d.stop.send(true);
                Ok(json!({ "stopping": true, "pid": std::process::id() }))
            }
        }
    }

    async fn register(
        &mut self,
        info: SandboxInfo,
        kinds: Vec<FdKind>,
    ) -> Result<Value, RequestError> {
        let d = self.d.clone();
        let s = d.shared.clone();
        if info.id.is_empty() || info.id.len() > 128 || info.id.chars().any(char::is_control) {
            self.fds.clear();
            return Err(bad("a sandbox id is 1 to 128 printable characters"));
        }
        if kinds.len() > self.fds.len() {
            self.fds.clear();
            return Err(bad(format!(
                "register names {} descriptor(s) but {} arrived with it",
                kinds.len(),
                self.fds.len()
            )));
        }
        let mut listener = None;
        let mut nflog = None;
        let (mut dns_udp, mut dns_tcp) = (None, None);
        for k in &kinds {
            let fd = self.fds.pop_front();
            match k {
                FdKind::Listener => listener = fd,
                FdKind::Nflog => nflog = fd,
                FdKind::DnsUdp => dns_udp = fd,
                FdKind::DnsTcp => dns_tcp = fd,
            }
        }
        let Some(listener) = listener else {
            return Err(bad("register needs the proxy listener descriptor"));
        };
        // The policy: the configuration of the sandbox's directory for its tier, plus its flags.
        let (policy, project) = {
            let info = info.clone();
            blocking(move || {
                let paths = ConfigPaths::discover(&info.cwd).map_err(|e| bad(e.to_string()))?;
                // The project of project grants: the directory whose per-directory file applies,
                // else the repository root (not the exact working directory), named by its path.
                let project = paths.project_root.to_string_lossy().into_owned();
                let config = Config::load(paths).map_err(|e| bad(e.to_string()))?;
                let flags = Overrides {
                    allow: info.allow.clone(),
                    deny: info.deny.clone(),
                    net: info.net_proxy.then_some(sandgate_config::NetMode::Proxy),
                    ..Overrides::default()
                };
                let policy = config.policy(&info.tier, &flags).map_err(|e| bad(e.to_string()))?;
                let project = Some(project);
                Ok((policy, project))
            })
            .await?
        };
        if policy.net.mode == sandgate_config::NetMode::None {
            return Err(bad(format!("tier {} has no network; nothing to serve", info.tier)));
        }
        let new = NewSandbox {
            id: info.id.clone(),
            tier: info.tier.clone(),
            command: info.command.clone(),
            cwd: info.cwd.clone(),
            project: project.clone(),
            uid: self.peer.uid,
            pid: info.pid,
            started: Timestamp::now(),
        };
        let listener = sandgate_proxy::Listener::from_fd(listener)
            .map_err(|e| bad(format!("the listener descriptor is not a listening socket: {e}")))?;
        let dns = super::dns::sockets(dns_udp, dns_tcp).map_err(|e| bad(e.to_string()))?;
        // A sandbox registered again (its launcher reconnected) replaces the old serving; its
        // record is written after, so an old connection's "lost" cannot land last.
        end_sandbox(&d, &info.id, u64::MAX, false).await;
        s.records.register(new);
        let (stop_tx, stop_rx) = watch::channel(false);
        let stop = Arc::new(stop_tx);
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<Vec<Value>>();
        let flush = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Questions about this sandbox, and its refused requests, go to its launcher. Subscribed
        // before serving: a request already waiting in the listener's backlog becomes a question
        // as soon as the proxy accepts it.
        let (forwarded, done) = tokio::sync::oneshot::channel::<()>();
        let forwarder = tokio::spawn(forward_until(
            s.bus.subscribe(),
            self.tx.clone(),
            info.id.clone(),
            stop_rx.clone(),
            forwarded,
        ));
        let forwarder = super::adapters::Forwarder { done, task: forwarder.abort_handle() };
        let live = Live {
            info: info.clone(),
            project: project.clone(),
            conn: self.conn,
            stop: stop.clone(),
            flush: flush.clone(),
            nflog_done: Arc::new(std::sync::Mutex::new(Some(done_rx))),
            forwarder: Arc::new(std::sync::Mutex::new(Some(forwarder))),
        };
        s.sandboxes.lock().unwrap_or_else(|e| e.into_inner()).insert(info.id.clone(), live);
        d.netpool.claim(&info.id);
        self.owned.push(info.id.clone());
        let ctx = sandgate_proxy::SandboxContext {
            id: sandgate_proxy::SandboxId::new(info.id.clone()),
            policy: Arc::new(policy.net.clone()),
            token: None,
        };
        let proxy = d.proxy.clone();
        let mut stop_serve = stop_rx.clone();
        super::dns::serve(&proxy, dns, ctx.clone(), stop_rx.clone());
        tokio::spawn(async move {
            tokio::select! {
                r = proxy.serve(listener, ctx) => {
                    if let Err(e) = r { tracing::warn!(error = %e, "proxy listener failed"); }
                }
                _ = async { let _ = stop_serve.wait_for(|s| *s).await; } => {}
            }
        });
        match nflog {
            Some(fd) => {
                tokio::spawn(super::monitor::read_nflog(
                    s.clone(),
                    info.id.clone(),
                    fd,
                    self.tx.clone(),
                    stop_rx.clone(),
                    flush,
                    done_tx,
                ));
            }
            None => drop(done_tx),
        }
        if let Some(t) = &s.telemetry {
            t.sandbox_started(&info, project.as_deref());
        }
        s.publish(
            EventKind::Sandbox,
            Some(&info.id),
            Event::SandboxStarted {
                sandbox: info.id.clone(),
                tier: info.tier.clone(),
                command: info.command.clone(),
            },
        );
        tracing::info!(sandbox = %info.id, tier = %info.tier, "sandbox registered");
        Ok(json!({
            "registered": info.id,
            "fences_open": crate::fences::warnings(&self.d.shared.fences.get()),
            "project": project,
            "allow": policy.net.allow_rules().iter().map(|r| r.to_string()).collect::<Vec<_>>(),
            "deny": policy.net.deny_rules().iter().map(|r| r.to_string()).collect::<Vec<_>>(),
        }))
    }

    async fn answer(
        &mut self,
        target: AnswerTargetSpec,
        answer: approvals::Answer,
        by: Option<String>,
        channel: approvals::Channel,
    ) -> Result<Value, RequestError> {
        let s = self.d.shared.clone();
        let target = match target {
            AnswerTargetSpec::Question(q) => approvals::AnswerTarget::Question(
                q.parse().map_err(|_| bad(format!("{q:?} is not a question id (q3, or 3)")))?,
            ),
            AnswerTargetSpec::Host { pattern, sandbox, any_port } => {
                let usage = if answer.allows() {
                    sandgate_config::PatternUse::Allow
                } else {
                    sandgate_config::PatternUse::Deny
                };
                let parsed = sandgate_config::DomainPattern::parse(&pattern, usage)
                    .map_err(|e| bad(format!("{pattern}: {e}")))?;
                if any_port && parsed.port.is_some() {
                    return Err(bad(format!(
                        "{pattern} names a port and --any-port asks for every port; say one"
                    )));
                }
                let sandbox = match sandbox {
                    None => None,
                    Some(id) => {
                        let project = s
                            .sandboxes
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .get(&id)
                            .map(|l| l.project.clone());
                        let project = match project {
                            Some(p) => p,
                            None => {
                                let store = s.store.clone();
                                let id2 = id.clone();
                                let rec = blocking(move || Ok(store.sandbox(&id2)?)).await?;
                                match rec {
                                    // Not served now: a grant for the sandbox alone would never
                                    // apply (a project one, `--for`/`--always`, still does).
                                    Some(r)
                                        if matches!(
                                            answer.scope(),
                                            approvals::Scope::Session | approvals::Scope::Once
                                        ) || r.sandbox.project.is_none() =>
                                    {
                                        return Err(RequestError::new(
                                            "not_found",
                                            format!(
                                                "sandbox {id} is not running; a grant for it \
                                                 alone would never apply (use --for or --always \
                                                 for its project, or --global)"
                                            ),
                                        ));
                                    }
                                    Some(r) => r.sandbox.project,
                                    None => {
                                        return Err(RequestError::new(
                                            "not_found",
                                            format!("no sandbox {id}; see `sandgate ls`"),
                                        ));
                                    }
                                }
                            }
                        };
                        Some(approvals::SandboxRef { id, project })
                    }
                };
                approvals::AnswerTarget::Host { pattern, sandbox, any_port }
            }
        };
        // A name the client gives is kept (a person's, from a front end), but never passes for
        // the account that gave it, and carries no control characters into logs and chats.
        let name = by.map(|n| n.chars().filter(|c| !c.is_control()).take(64).collect::<String>());
        let who = match name.as_deref().map(str::trim).filter(|n| !n.is_empty()) {
            Some(name) => format!("{name} (via {})", self.peer.name()),
            None => self.peer.name(),
        };
        let by = approvals::Responder::new(channel, who);
        match s.broker.answer(target, answer, by).await {
            Ok(a) => {
                if !a.grant_errors.is_empty() && a.grants.is_empty() && a.released.is_empty() {
                    return Err(RequestError::new("store", a.grant_errors.join("; ")));
                }
                Ok(serde_json::to_value(a).unwrap_or(Value::Null))
            }
            Err(e) => {
                let code = match &e {
                    approvals::AnswerError::AlreadyAnswered { .. } => "conflict",
                    approvals::AnswerError::NotFound { .. } => "not_found",
                    approvals::AnswerError::Blocked(_) => "forbidden",
                    _ => "bad_request",
                };
                Err(RequestError::new(code, e.to_string()))
            }
        }
    }

    async fn status(&self) -> Result<Value, RequestError> {
        let d = &self.d;
        let s = &d.shared;
        s.records.flush().await;
        let store = s.store.clone();
        let (counts, path) = blocking(move || {
            Ok((store.counts(Timestamp::now())?, store.path().display().to_string()))
        })
        .await?;
        let served: Vec<Value> = s
            .sandboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|l| {
                json!({
                    "id": l.info.id, "tier": l.info.tier, "command": l.info.command,
                    "cwd": l.info.cwd, "pid": l.info.pid,
                })
            })
            .collect();
        Ok(json!({
            "daemon": {
                "pid": std::process::id(),
                "version": env!("CARGO_PKG_VERSION"),
                "protocol": PROTOCOL_VERSION,
                "uptime_s": d.started.elapsed().unwrap_or_default().as_secs(),
                "socket": d.socket,
                "store": path,
                "telegram": d.telegram,
                "telegram_error": d.telegram_error,
                "monitor_error": *s.monitor_error.lock().unwrap_or_else(|e| e.into_inner()),
                "rss_kib": rss_kib(),
            },
            "sandboxes": served,
            "pending": d.pending(),
            "counts": counts,
            "budgets": budgets(s),
            "proxy": { "active_connections": d.proxy.active_connections() },
            "network_pool": d.netpool.status(),
            "fences": s.fences.get(),
            "events": {
                "written": s.events_stats().written,
                "dropped": s.events_stats().dropped,
                "failed": s.events_stats().failed,
                "last_error": s.events_stats().last_error,
            },
            "telemetry": s.telemetry.as_ref().map(|t| {
                let st = t.telemetry.stats();
                json!({
                    "endpoint": t.telemetry.endpoint(),
                    "exported": st.exported,
                    "dropped": st.dropped,
                    "failed": st.failed,
                    "metric_exports": st.metric_exports,
                    "last_error": st.last_error,
                })
            }),
        }))
    }

    /// The connection closed: sandboxes it registered and did not unregister are lost.
    async fn closed(&mut self) {
        if let Some(task) = self.subscription.take() {
            task.abort();
        }
        for id in std::mem::take(&mut self.owned) {
            // Registered again since by another launcher: not lost.
            if end_sandbox(&self.d, &id, self.conn, false).await.is_some() {
                self.d.shared.records.lost(id.clone());
                self.d.shared.broker.withdraw_sandbox(&id);
                self.d.shared.publish(
                    EventKind::Sandbox,
                    Some(&id),
                    Event::SandboxEnded { sandbox: id.clone(), exit_status: None, lost: true },
                );
                tracing::info!(sandbox = %id, "launcher went away; sandbox marked lost");
            }
        }
    }
}

/// Stops serving `id` if connection `conn` (or any, with `u64::MAX`) registered it; returns the
/// blocked-packet events drained from its NFLOG socket at the end, or `None` when nothing was
/// served for it on that connection.
async fn end_sandbox(d: &Daemon, id: &str, conn: u64, flush: bool) -> Option<Vec<Value>> {
    let live = {
        let mut map = d.shared.sandboxes.lock().unwrap_or_else(|e| e.into_inner());
        match map.get(id) {
            Some(l) if conn == u64::MAX || l.conn == conn => map.remove(id),
            _ => None,
        }
    };
    let live = live?;
    d.netpool.release(id);
    d.netpool.refill_soon();
    live.flush.store(flush, Ordering::Release);
    // What the DNS stub counted for it and has not recorded yet is recorded now, then the count
    // of what the cap did not store: before the stop, so that its launcher's forwarder (which
    // passes on what the bus holds when the stop comes) hears both.
    d.proxy.flush_dns_refusals(Some(&sandgate_proxy::SandboxId::new(id.to_owned())));
    d.shared.end_cap(id);
    let _ = live.stop.send(true);
    // The launcher's answer comes after every event of its sandbox published so far (a refusal
    // recorded as its 403 went out must reach the command's stderr before the launcher stops
    // listening); the forwarder drains its queue and says so in microseconds.
    let forwarder = live.forwarder.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(f) = forwarder
        && tokio::time::timeout(Duration::from_millis(200), f.done).await.is_err()
    {
        // A launcher that does not read (its stderr stuck): the forwarder goes now.
        f.task.abort();
    }
    if !flush {
        // Nobody waits for the blocked-traffic tail: the NFLOG reader drains it on its own
        // (store, alerts, bus) after this answer. Waiting for that reader to wake up and
        // hand back an empty tail was ~0.3 ms of every `net`/`build` launch's end.
        return Some(Vec::new());
    }
    let done = live.nflog_done.lock().unwrap_or_else(|e| e.into_inner()).take();
    Some(match done {
        Some(rx) => tokio::time::timeout(Duration::from_millis(300), rx)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default(),
        None => Vec::new(),
    })
}

/// Forwards bus events to a subscriber (optionally of one sandbox) until it goes away.
async fn forward(
    mut rx: broadcast::Receiver<Event>,
    tx: mpsc::Sender<String>,
    sandbox: Option<String>,
    all_kinds: bool,
    launcher: bool,
) {
    loop {
        let got = rx.recv().await;
        if !pass_on(got, &tx, sandbox.as_deref(), all_kinds, launcher).await {
            return;
        }
    }
}

/// Sends one received event (or a lag notice) to the subscriber if it is one it wants; false
/// when the subscriber or the bus is gone.
async fn pass_on(
    got: Result<Event, broadcast::error::RecvError>,
    tx: &mpsc::Sender<String>,
    sandbox: Option<&str>,
    all_kinds: bool,
    launcher: bool,
) -> bool {
    match got {
        Ok(ev) => {
            if let Some(s) = sandbox
                && ev.sandbox().is_some_and(|e| e != s)
            {
                return true;
            }
            let wanted = match &ev {
                Event::Asked { .. }
                | Event::Answered { .. }
                | Event::TimedOut { .. }
                | Event::Withdrawn { .. }
                | Event::OverBudget { .. }
                | Event::EventsCapped { .. }
                | Event::DaemonStopping => true,
                // A launcher also hears its sandbox's refused requests, to say so on the
                // command's stderr (HTTPS clients never show the 403 body), and its allowed
                // names that do not resolve (they show a bare 502).
                Event::Request { decision, rule, .. } => {
                    launcher
                        && (decision != "allow" || rule == sandgate_proxy::Refusal::UNRESOLVABLE)
                }
                _ => false,
            };
            !(all_kinds || wanted) || tx.send(line(&ev)).await.is_ok()
        }
        Err(broadcast::error::RecvError::Lagged(n)) => {
            let note = json!({ "event": "lagged", "missed": n });
            tx.send(line(&note)).await.is_ok()
        }
        Err(broadcast::error::RecvError::Closed) => false,
    }
}

/// [`forward`] for a launcher: its sandbox's questions and answers and refused requests, until
/// the sandbox ends; then what the bus already holds for it, and `forwarded` says it is done
/// (the launcher's `unregister` answer waits for that: it must come after them).
async fn forward_until(
    mut rx: broadcast::Receiver<Event>,
    tx: mpsc::Sender<String>,
    sandbox: String,
    mut stop: watch::Receiver<bool>,
    forwarded: tokio::sync::oneshot::Sender<()>,
) {
    let pass = |got| pass_on(got, &tx, Some(&sandbox), false, true);
    loop {
        tokio::select! {
            got = rx.recv() => {
                if !pass(got).await {
                    break;
                }
            }
            _ = async { let _ = stop.wait_for(|s| *s).await; } => {
                // What the bus held at the stop, not what later comes (the bus is every
                // sandbox's: a busy daemon's would never be empty).
                for _ in 0..rx.len() {
                    let got = match rx.try_recv() {
                        Ok(ev) => Ok(ev),
                        Err(broadcast::error::TryRecvError::Lagged(n)) => {
                            Err(broadcast::error::RecvError::Lagged(n))
                        }
                        Err(_) => break, // empty (or closed)
                    };
                    if !pass(got).await {
                        break;
                    }
                }
                break;
            }
        }
    }
    let _ = forwarded.send(());
}

/// Per sandbox served (or with counts): questions asked and refused past the budget, alerts
/// posted and held back past the budget; with the budgets themselves.
fn budgets(s: &super::adapters::Shared) -> Value {
    use std::collections::BTreeMap;
    let mut rows: BTreeMap<String, Value> = BTreeMap::new();
    let blank = || {
        json!({ "questions_asked": 0, "questions_refused": 0, "alerts_sent": 0,
                "alerts_suppressed": 0 })
    };
    for id in s.sandboxes.lock().unwrap_or_else(|e| e.into_inner()).keys() {
        rows.insert(id.clone(), blank());
    }
    for b in s.broker.budgets() {
        let r = rows.entry(b.sandbox.clone()).or_insert_with(blank);
        r["questions_asked"] = json!(b.asked);
        r["questions_refused"] = json!(b.refused);
    }
    let mut alerts_per_minute = Value::Null;
    if let Some(bot) = s.telegram.get() {
        alerts_per_minute = json!(bot.alerts_per_window());
        for (sandbox, sent, held) in bot.alert_counts() {
            let r = rows.entry(sandbox).or_insert_with(blank);
            r["alerts_sent"] = json!(sent);
            r["alerts_suppressed"] = json!(held);
        }
    }
    let config = s.broker.config();
    json!({
        "questions_per_window": config.questions_per_minute,
        "window_s": config.budget_window.as_secs(),
        "alerts_per_window": alerts_per_minute,
        "sandboxes": rows,
    })
}

/// Resident set size of this process, in KiB (Linux; 0 elsewhere).
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod forwarding {
    use super::*;

    fn refused(sandbox: &str, port: u16) -> Event {
        Event::Request {
            sandbox: sandbox.into(),
            method: "GET".into(),
            host: "127.0.0.1".into(),
            port,
            path: None,
            decision: "deny".into(),
            rule: "--deny".into(),
            bytes_up: 0,
            bytes_down: 0,
            ms: 0.0,
            error: None,
            count: 1,
            samples: Vec::new(),
            process: None,
        }
    }

    /// A launcher's sandbox ends while events of it wait in the forwarder's queue (the refusal
    /// the proxy published as its 403 went out): they still reach the launcher, before the
    /// forwarder says it is done, and another sandbox's do not. Both the queue and the stop are
    /// ready when the forwarder first looks, so each round it may see either first; the control
    /// (stopping without draining, as the forwarder did before) lost them in about half.
    #[tokio::test]
    async fn a_stopped_launchers_forwarder_passes_on_what_was_published_before() {
        for _ in 0..32 {
            let (bus, rx) = broadcast::channel(16);
            let (tx, mut out) = mpsc::channel(16);
            let (stop_tx, stop_rx) = watch::channel(false);
            let (done_tx, done_rx) = tokio::sync::oneshot::channel();
            bus.send(refused("sg-a", 1)).unwrap();
            bus.send(refused("sg-other", 2)).unwrap();
            bus.send(refused("sg-a", 3)).unwrap();
            stop_tx.send(true).unwrap();
            tokio::spawn(forward_until(rx, tx, "sg-a".into(), stop_rx, done_tx));
            done_rx.await.unwrap();
            let mut ports = Vec::new();
            while let Ok(l) = out.try_recv() {
                let v: Value = serde_json::from_str(&l).unwrap();
                ports.push(v["port"].as_u64().unwrap());
            }
            assert_eq!(ports, [1, 3]);
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::pidfd_levels;

    #[test]
    fn pidfd_fdinfo_says_how_deep_the_peer_is() {
        let same = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nPid:\t4242\nNSpid:\t4242\n";
        assert_eq!(pidfd_levels(same), Some(1));
        let sandboxed = "Pid:\t4242\nNSpid:\t4242\t2\n";
        assert_eq!(pidfd_levels(sandboxed), Some(2));
        let nested = "Pid:\t77\nNSpid:\t77\t5\t1\n";
        assert_eq!(pidfd_levels(nested), Some(3));
        // Exited, or in a namespace this one cannot see into: never accepted.
        assert_eq!(pidfd_levels("Pid:\t-1\nNSpid:\t-1\n"), None);
        assert_eq!(pidfd_levels("Pid:\t0\nNSpid:\t0\n"), None);
        assert_eq!(pidfd_levels("pos:\t0\n"), None);
        assert_eq!(pidfd_levels("Pid:\tgarbage\n"), None);
        // A kernel without CONFIG_PID_NS has one namespace and no NSpid line.
        assert_eq!(pidfd_levels("Pid:\t9\n"), Some(1));
    }
}
