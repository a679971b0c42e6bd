//! The sockets that hand out networks made ahead (Linux; see `netpool`): one per kind,
//! `network-loopback.sock` (`run`) and `network-proxy.sock` (`net`, `build`), next to the control
//! socket and with its permissions. Connecting is the request: the daemon answers each
//! connection with one line (the control protocol's reply: `{"network": ..., "protocol": N}`,
//! the network's descriptors with it) and closes it. A launcher connects as it starts and reads
//! the answer just before its clone.
//!
//! Why not the control socket: a connection there is served by the runtime (the accept task,
//! a task per connection and a writer task, a JSON request parsed), ~0.18 ms of CPU and six
//! context switches per network handed out, and a unix-socket wake-up is a "sync" one — the
//! kernel runs the woken daemon thread on the launching process's own core, where it preempts
//! the launch. Here one thread per kind waits in `accept` and answers at once: one wake-up, no
//! request to read or parse.

use std::os::fd::{AsFd as _, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use sandgate_sandbox::NetKind;

use crate::paths::Paths;
use crate::protocol::{PROTOCOL_VERSION, Reply};
use crate::server::{Daemon, check_peer_fd, line};

/// How long an answer may take to write (it is a few hundred bytes: only a launcher that
/// connected and stopped reading could hold the thread).
const WRITE_TIMEOUT: Duration = Duration::from_millis(50);

/// The listening sockets and their threads.
pub struct NetworkSockets {
    listeners: Vec<(PathBuf, Arc<UnixListener>)>,
    /// Set when the daemon leaves; held while a network is handed out, so that the idle exit's
    /// decision and a hand-out never overlap (see [`NetworkSockets::close_if`]).
    closed: Arc<Mutex<bool>>,
}

impl NetworkSockets {
    /// Binds both sockets in `dir` (a stale one is replaced: the caller holds the daemon's lock)
    /// and starts a thread on each. Best effort: a socket that cannot be bound (a runtime
    /// directory whose path leaves no room for the name in a socket address) is logged and left
    /// out, and launches make their own networks. `rt`: the runtime the pool's refill timers run
    /// on.
    pub fn start(dir: &Path, d: &Arc<Daemon>, rt: &tokio::runtime::Handle) -> NetworkSockets {
        let closed = Arc::new(Mutex::new(false));
        let mut listeners = Vec::new();
        for kind in [NetKind::Loopback, NetKind::Proxy] {
            let p = Paths::in_dir(dir.to_path_buf()).network_socket(kind);
            match listen(&p, kind, d, rt, &closed) {
                Ok(listener) => listeners.push((p, listener)),
                Err(e) => tracing::warn!(
                    socket = %p.display(),
                    error = %e,
                    "networks made ahead are not handed out on this socket; launches make their \
                     own (slower)"
                ),
            }
        }
        NetworkSockets { listeners, closed }
    }

    /// Closes the sockets if `idle()` says so, deciding while no network is being handed out: a
    /// hand-out marks the daemon busy first, so a launch never gets a network (and the daemon's
    /// protocol) from a daemon on its way out. Whether they are closed.
    pub fn close_if(&self, idle: impl FnOnce() -> bool) -> bool {
        let mut closed = self.closed.lock().unwrap_or_else(|e| e.into_inner());
        if !*closed && !idle() {
            return false;
        }
        *closed = true;
        drop(closed);
        self.remove();
        true
    }

    /// Removes the sockets and ends the threads (a listener shut down ends a blocked `accept`).
    pub fn stop(&self) {
        *self.closed.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.remove();
    }

    fn remove(&self) {
        for (p, l) in &self.listeners {
            let _ = std::fs::remove_file(p);
            let _ = nix::sys::socket::shutdown(
                std::os::fd::AsRawFd::as_raw_fd(&**l),
                nix::sys::socket::Shutdown::Both,
            );
        }
    }
}

/// Binds the socket of `kind` at `p` (0600) and starts its thread.
fn listen(
    p: &Path,
    kind: NetKind,
    d: &Arc<Daemon>,
    rt: &tokio::runtime::Handle,
    closed: &Arc<Mutex<bool>>,
) -> std::io::Result<Arc<UnixListener>> {
    use std::os::unix::fs::PermissionsExt as _;
    let _ = std::fs::remove_file(p);
    let listener = Arc::new(UnixListener::bind(p)?);
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600))?;
    let (l, d, rt, closed) = (listener.clone(), d.clone(), rt.clone(), closed.clone());
    std::thread::Builder::new()
        .name(format!("sandgate-net-{}", kind.name()))
        .spawn(move || serve(&l, kind, &d, &rt, &closed))?;
    Ok(listener)
}

fn serve(
    listener: &UnixListener,
    kind: NetKind,
    d: &Daemon,
    rt: &tokio::runtime::Handle,
    closed: &Mutex<bool>,
) {
    loop {
        let accepted = listener.accept();
        let is_closed = closed.lock().unwrap_or_else(|e| e.into_inner());
        match accepted {
            Ok((stream, _)) if *is_closed => {
                // Without `protocol`: a `net` or `build` launch goes to `sandgate` rather than
                // register with a daemon that is leaving.
                let v = json!({ "network": null, "why": "the daemon is stopping" });
                let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
                let _ = send_line(&stream, &Reply::ok(None, v), &[]);
            }
            Ok((stream, _)) => {
                let handed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    hand_out(&stream, kind, d, rt);
                }));
                if handed.is_err() {
                    tracing::error!(
                        "handing out a network failed (a bug); the launch makes its own"
                    );
                }
            }
            Err(_) if *is_closed => return,
            Err(e) => {
                drop(is_closed);
                tracing::warn!(error = %e, "accept failed on a network socket");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Answers one connection: a network of `kind` with its descriptors, `null` with why, or an
/// error for a peer that may not ask (the control socket's rule: the same user or root, never
/// from inside a sandbox).
fn hand_out(stream: &UnixStream, kind: NetKind, d: &Daemon, rt: &tokio::runtime::Handle) {
    d.touch();
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    if let Err(why) = check_peer_fd(stream.as_fd()) {
        tracing::warn!("{why}");
        let _ = send_line(stream, &Reply::err(None, "denied", why), &[]);
        return;
    }
    // The refill's timers are the runtime's.
    let _rt = rt.enter();
    let Some(n) = d.netpool.take(kind) else {
        let v = json!({ "network": null, "why": "none ready", "protocol": PROTOCOL_VERSION });
        let _ = send_line(stream, &Reply::ok(None, v), &[]);
        d.netpool.taken(kind);
        return;
    };
    let v = json!({ "network": {
        "sandbox": n.id.as_str(), "kind": kind.name(), "group": n.group,
        "user": n.user.is_some(),
    }, "protocol": PROTOCOL_VERSION });
    if let Err(e) = send_line(stream, &Reply::ok(None, v), &n.raw_fds()) {
        tracing::debug!(error = %e, "a prepared network could not be handed out");
    }
    drop(n);
    d.netpool.taken(kind);
}

/// Writes `reply` as one line, `fds` with its first bytes (never `SIGPIPE`: a launcher may be
/// gone).
fn send_line(stream: &UnixStream, reply: &Reply, fds: &[RawFd]) -> std::io::Result<()> {
    let text = line(reply).into_bytes();
    let mut sent = sandgate_sandbox::fdpass::send_once_with_fds(stream, &text, fds)?;
    while sent < text.len() {
        match sandgate_sandbox::fdpass::send_once_with_fds(stream, &text[sent..], &[])? {
            0 => return Err(std::io::ErrorKind::WriteZero.into()),
            n => sent += n,
        }
    }
    Ok(())
}
