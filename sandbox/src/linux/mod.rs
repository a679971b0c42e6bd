//! Linux backend: user, mount, pid, net, ipc and uts namespaces, Landlock, seccomp.
//!
//! Process layout (no other process is started; the warden only when there is a writable
//! directory to watch):
//!
//! ```text
//! launcher (caller's namespaces)          waits, forwards signals, owns listener + NFLOG fds,
//!  │                                      relays the terminal to the pty master (terminal mode)
//!  ├─ init (pid 1 in the sandbox)        sets the walls up, then reaps and forwards signals
//!  │   │                                  (terminal mode: leads the session of the pty, tells
//!  │   │                                  the launcher when Ctrl-Z stopped the command)
//!  │   └─ command                          setpgid (terminal mode: the pty's foreground), exec
//!  └─ warden                             takes new protected entries away from the top of
//!                                         writable directories while init runs and after its
//!                                         end, then removes placeholders (see `warden`)
//! ```
//!
//! With a network made ahead by the daemon (see `netpool`), a short-lived helper sharing the
//! launcher's memory joins it and clones init as the launcher's child (`CLONE_PARENT`), so the
//! layout above is the same; init then builds no network.
//!
//! The init builds the mounts and (unless it joined one) the network with the capabilities of its
//! new user namespace,
//! allocates the pty in terminal mode (see `terminal`), sends the pty master, the proxy listener,
//! the DNS stub's sockets and the NFLOG socket to the launcher (`SCM_RIGHTS`), then applies
//! `setsid`, no_new_privs,
//! Landlock, drops every capability and installs the seccomp filters before it forks the
//! command, which inherits all of it. When the command exits, init exits with its status and the
//! kernel kills whatever else is left in the pid namespace.

mod fence;
mod filter;
mod mounts;
mod nested;
mod net;
mod netlink;
mod netpool;
mod placeholder;
mod probe;
mod report;
mod spawn;
mod stderr_tap;
mod terminal;
mod tun;
mod warden;

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::forward::FORWARDED;
use crate::spec::{Enforcement, NetKind, NetSetup, SandboxSpec};
use crate::sys;
use crate::{SandboxError, SetupStep};

pub use fence::{Assessment, assess, checks_unix_socket_paths, gaps as landlock_gaps};

pub use nested::{Nested, OuterSandbox, inside_sandbox, prepare as prepare_nested};
pub use netlink::{
    Batch as NetlinkBatch, QUIET_ICMPV6, configure_veth, create_veth, namespace_firewall,
};
pub use netpool::{NetworkFactory, OpenNflog, PreparedNetwork, ProxySockets};
pub use probe::{NamespaceProbe, probe_namespaces};

/// Work done inside the sandbox's network namespace by code outside this crate (the monitor),
/// called in the sandbox's init before the command starts.
pub trait NamespaceHooks {
    /// Opens an NFLOG socket bound to `group` inside the namespace (`None`: no monitor).
    fn open_nflog(&self, group: u16) -> io::Result<Option<OwnedFd>>;

    /// Called in the launcher once the sandbox's init runs, before waiting for it to be ready:
    /// work that would otherwise wait for the sandbox (greeting the daemon) overlaps its setup.
    /// The init is a copy of the launcher from before this call, so nothing opened here is in
    /// the sandbox.
    fn while_starting(&self) {}

    /// A network made ahead for this sandbox (see `netpool`), taken once, just before the clone.
    /// Joined instead of making one when it is of the spec's kind (and, a proxy network, made for
    /// the spec's id); `None`: the sandbox makes its own.
    fn prepared_network(&self) -> Option<PreparedNetwork> {
        None
    }
}

/// Signals the launcher handles itself in terminal mode: suspension of the launcher (the caller's
/// terminal is restored first) and its resumption (raw mode again).
const JOB_CONTROL: [libc::c_int; 2] = [libc::SIGTSTP, libc::SIGCONT];

/// A started sandbox.
#[derive(Debug)]
pub struct Launched {
    pid: libc::pid_t,
    /// The proxy listener (127.0.0.1:3128 inside the sandbox), in proxy mode.
    pub listener: Option<OwnedFd>,
    /// The NFLOG socket of the sandbox's network namespace, in proxy mode.
    pub nflog: Option<OwnedFd>,
    /// The DNS stub's UDP socket and TCP listener (127.0.0.1:53 inside), in proxy mode.
    pub dns: Option<[OwnedFd; 2]>,
    /// What the kernel enforced.
    pub enforcement: Enforcement,
    cleanup: Cleanup,
    tty: Option<terminal::Relay>,
    /// Where init says "ended CODE" when the command ended (before the namespaces go away),
    /// and in terminal mode "stopped" when Ctrl-Z stopped the command itself.
    from_init: Option<OwnedFd>,
    /// The command's exit code as init reported it ("ended CODE").
    reported: Option<u8>,
    /// Signals blocked by `launch` and handled by `wait`.
    signals: Vec<libc::c_int>,
    reaped: bool,
    /// The relay of the command's stderr when it is not a terminal (see `stderr_tap`).
    tap: Option<stderr_tap::Tap>,
    /// What the stderr relay (pipe or pty) found: "Read-only file system" paths.
    read_only: Option<crate::readonly::SharedScanner>,
    /// The sandbox's mount namespace, held so that init's exit does not tear it down (with cache
    /// overlays that is milliseconds per overlay): handed to a detached process when the wait
    /// begins, which drops it once init is reaped (see `sys::hold_detached`).
    mount_ns: Option<OwnedFd>,
    /// The cache overlays' work directories (each's `work` inside, then itself), removed by that
    /// detached process once the overlays are gone: the next launch's overlays get new empty ones
    /// (see `caches::prepare` in the daemon crate), so that no mount has an old one to clear on
    /// its path.
    cache_work: Vec<std::ffi::CString>,
    /// The lock on the work directories used again (`SandboxSpec::cache_work_lock`), which that
    /// process holds until it has emptied them.
    cache_work_lock: Option<std::os::fd::RawFd>,
}

/// Placeholders to release and the top-level rule to enforce once the sandbox is gone, and the
/// process that does it.
#[derive(Debug, Default)]
struct Cleanup {
    placeholders: Vec<placeholder::Placeholder>,
    warden: Option<warden::Warden>,
    /// The warden process and the pipe on which it says it is done.
    cleaner: Option<(libc::pid_t, std::io::PipeReader)>,
}

impl Cleanup {
    /// Call once the sandbox's init has been reaped. Says, in one line, which files host tools
    /// execute or obey changed during the run.
    fn finish(&mut self) {
        let mut said = None;
        if let Some((pid, mut done)) = self.cleaner.take() {
            // Its last sweep is over when it says so (or when it is gone: EOF); its exit may
            // still be under way (see `warden::start`): reaped if already over, else by init.
            let mut report = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = io::Read::read(&mut done, &mut buf) {
                if n == 0 {
                    break;
                }
                report.extend_from_slice(&buf[..n]);
                if report.ends_with(b"done\n") {
                    break;
                }
            }
            said = Some(warden::read_report(&report)).filter(|(_, complete)| *complete);
            let _ = sys::waitpid(pid, false);
        }
        // (Taken: a second call, from `Drop` after `wait`, has nothing left to do.)
        let changes = match (self.warden.take().as_mut(), said) {
            // The warden's last sweep came once nothing of the sandbox was left (init's end):
            // nothing was made since that this one would find.
            (Some(_), Some((changes, _))) => changes,
            // The warden could not start or died: what it did not see below the tops is read.
            (Some(w), None) => {
                w.sweep_everything();
                w.changes().iter().cloned().collect()
            }
            (None, _) => Vec::new(),
        };
        if let Some(line) = warden::changes_line(&changes, 20) {
            eprintln!("{line}");
        }
        for p in self.placeholders.drain(..) {
            p.release();
        }
    }
}

impl Launched {
    /// Process id of the sandbox's init, as seen from the launcher.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// The "Read-only file system" messages of the command's stderr (with
    /// [`SandboxSpec::report_read_only`]), complete once [`Launched::wait`] returned.
    pub fn read_only_reports(&self) -> Option<crate::readonly::SharedScanner> {
        self.read_only.clone()
    }

    /// Waits for the command, forwarding SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH, SIGUSR1 and
    /// SIGUSR2 to it. Returns its exit code (128 + signal number when it was killed).
    ///
    /// In terminal mode (see `launch`) it also relays the caller's terminal to the sandbox's pty
    /// in raw mode, copies the window size on SIGWINCH, and on SIGTSTP restores the terminal and
    /// stops the launcher until SIGCONT. The terminal is restored when this returns.
    pub fn wait(self) -> Result<u8, SandboxError> {
        self.wait_with(|_| {})
    }

    /// [`Launched::wait`], calling `on_end` with the command's exit code as soon as init reports
    /// it, while the sandbox's namespaces are still being torn down (or, if init could not
    /// report it, once init is reaped). What returns is init's status, after the teardown.
    pub fn wait_with(mut self, on_end: impl FnOnce(u8)) -> Result<u8, SandboxError> {
        let mut on_end = Some(on_end);
        // The process that will let the mount namespace go is made now, while the command runs,
        // and goes ahead once init is reaped (see `sys::hold_detached`), or once it has ended
        // should this process die first (its go-ahead is then gone before init and the
        // processes of its namespace are).
        let closer = self.mount_ns.take().and_then(|ns| {
            let init = sys::pidfd_open(self.pid).ok();
            let init_fd = init.as_ref().map(AsRawFd::as_raw_fd);
            sys::hold_detached(ns, &self.cache_work, self.cache_work_lock, init_fd)
        });
        let code = self.supervise(&mut on_end);
        if let (Some(f), Ok(code)) = (on_end.take(), &code) {
            f(*code);
        }
        if code.is_err() {
            let _ = sys::kill(self.pid, libc::SIGKILL);
            let _ = sys::waitpid(self.pid, true);
        }
        self.reaped = true;
        drop(closer);
        if let Some(tty) = &mut self.tty {
            tty.finish();
        }
        // Every writer is gone with the sandbox: the relay ends with the last bytes out.
        if let Some(tap) = &mut self.tap {
            tap.finish();
        }
        self.cleanup.finish();
        code
    }

    fn supervise(&mut self, on_end: &mut Option<impl FnOnce(u8)>) -> Result<u8, SandboxError> {
        let sigfd =
            sys::signalfd(&sys::SigSet::of(&self.signals)).map_err(SandboxError::io("signalfd"))?;
        if let Some(tty) = &mut self.tty {
            tty.enter_raw();
            tty.sync_winsize();
        }
        loop {
            if let Some((_, how)) =
                sys::waitpid(self.pid, false).map_err(SandboxError::io("waitpid"))?
            {
                return Ok(how.code());
            }
            let none = libc::pollfd { fd: -1, events: 0, revents: 0 };
            let [a, b] = self.tty.as_ref().map_or([none, none], terminal::Relay::poll_set);
            let from_init = self.from_init.as_ref().map_or(-1, AsRawFd::as_raw_fd);
            let mut fds = [
                libc::pollfd { fd: sigfd.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                a,
                b,
                libc::pollfd { fd: from_init, events: libc::POLLIN, revents: 0 },
            ];
            // The timeout is only a safety net: SIGCHLD wakes the loop when init ends.
            sys::poll(&mut fds, 1000).map_err(SandboxError::io("poll"))?;
            // Signals first: a window change that came before a key press is applied before it.
            while let Some(sig) = sys::read_signal(&sigfd).map_err(SandboxError::io("signalfd"))? {
                self.on_signal(sig);
            }
            if let Some(tty) = &mut self.tty {
                tty.on_ready(&[fds[1], fds[2]]);
            }
            if fds[3].revents != 0 {
                self.on_init_message();
                if let Some(code) = self.reported
                    && let Some(f) = on_end.take()
                {
                    f(code);
                }
            }
        }
    }

    /// A message from init: "ended CODE" (the command ended; init exits next), or "stopped":
    /// Ctrl-Z stopped the command itself (no shell inside takes the terminal back), and the
    /// launcher stops too, as `sudo` does, giving the caller's shell its terminal; the SIGCONT of
    /// `fg` resumes both.
    fn on_init_message(&mut self) {
        let mut buf = [0u8; 16];
        let message = match &self.from_init {
            Some(s) => match sys::recv_with_fds(s, &mut buf) {
                Ok((n, _)) if n > 0 => &buf[..n],
                _ => b"",
            },
            None => b"",
        };
        if let Some(code) = message.strip_prefix(b"ended ") {
            crate::timing::mark("init reported the command's end");
            self.reported = std::str::from_utf8(code).ok().and_then(|c| c.parse().ok());
            return;
        }
        if message != b"stopped" {
            self.from_init = None; // init is gone (end of stream) or said nonsense: stop listening
            return;
        }
        if let Some(tty) = &mut self.tty {
            tty.restore();
            sys::stop_self();
        }
    }

    fn on_signal(&mut self, sig: libc::c_int) {
        match (sig, &mut self.tty) {
            (libc::SIGCHLD, _) => {}
            // The pty's window size changes, and the kernel tells the sandbox's foreground job.
            (libc::SIGWINCH, Some(tty)) => tty.sync_winsize(),
            (libc::SIGTSTP, Some(tty)) => {
                tty.restore();
                sys::stop_self();
                // Resumed: the SIGCONT that did it is read next and puts raw mode back.
            }
            (libc::SIGCONT, Some(tty)) => {
                tty.enter_raw();
                tty.sync_winsize();
                // And the command, should Ctrl-Z have stopped it (init passes it on).
                let _ = sys::kill(self.pid, libc::SIGCONT);
            }
            (sig, _) => {
                let _ = sys::kill(self.pid, sig);
            }
        }
    }
}

impl Drop for Launched {
    /// A sandbox nobody waits for is killed, and its placeholders removed.
    fn drop(&mut self) {
        if !self.reaped {
            let _ = sys::kill(self.pid, libc::SIGKILL);
            let _ = sys::waitpid(self.pid, true);
            self.reaped = true;
        }
        if let Some(tty) = &mut self.tty {
            tty.restore();
        }
        self.cleanup.finish();
    }
}

/// Starts `spec`. Must be called while the process has one thread: start the proxy's runtime
/// afterwards, handing it [`Launched::listener`]. Blocks the forwarded signals (and SIGCHLD) in
/// the calling thread; threads started later inherit that, so [`Launched::wait`] sees them.
///
/// When stdin and stdout are terminals, the command gets a pseudo-terminal of its own and
/// [`Launched::wait`] relays the caller's terminal to it (job control works inside); SIGTSTP
/// and SIGCONT are then blocked too. Otherwise the command runs in a new session without a
/// controlling terminal.
pub fn launch(spec: &SandboxSpec, hooks: &dyn NamespaceHooks) -> Result<Launched, SandboxError> {
    let threads = sys::thread_count();
    if threads > 1 {
        return Err(SandboxError::Threads { threads });
    }
    let (uid, gid) = sys::ids();
    let mut plan = resolve(spec)?;
    crate::timing::mark("plan resolved (paths, placeholders)");
    let mut cleanup = Cleanup {
        placeholders: std::mem::take(&mut plan.placeholders),
        warden: plan.warden.take(),
        cleaner: None,
    };
    // A network made ahead, of the spec's kind, for its id and NFLOG group (a proxy network's
    // firewall logs under the id): joined instead of made. A loopback network holds nothing of
    // an id (no firewall, no NFLOG): any serves.
    let fits = |p: &PreparedNetwork| match spec.net {
        NetSetup::Proxy { nflog_group } => {
            p.id == spec.id && p.kind() == NetKind::Proxy && p.group == nflog_group
        }
        NetSetup::None => p.kind() == NetKind::Loopback,
    };
    // Taken before the signals are blocked: its answer may still be on its way (a Ctrl-C
    // meanwhile ends the launcher, not the command).
    let prepared = hooks.prepared_network().filter(fits);
    let detected = terminal::detect();
    plan.tty = detected.tty;
    plan.null_stdin = detected.null_stdin;
    // Reading stderr for "Read-only file system": on the pty when stderr is a terminal, through
    // a pipe otherwise (see `stderr_tap`).
    // Without a network, it also notes whether the output looks like a network failure.
    let read_only = spec.report_read_only.then(|| {
        std::sync::Arc::new(std::sync::Mutex::new(match spec.net {
            NetSetup::None => crate::readonly::ReadOnlyScanner::watching_network(),
            NetSetup::Proxy { .. } => crate::readonly::ReadOnlyScanner::new(),
        }))
    });
    let stderr_on_tty = plan.tty.is_some_and(|t| t.on_tty[2]);
    let mut tap_ends = None;
    // Nothing to relay when stderr is closed or /dev/null (nobody would read a hint either).
    if read_only.is_some() && !stderr_on_tty && sys::is_open_and_not_null(2) {
        let stdout_on_tty = plan.tty.is_some_and(|t| t.on_tty[1]);
        match stderr_tap::ends(stdout_on_tty) {
            Ok(ends) => {
                plan.tap = Some(TapFds {
                    writer: ends.writer.as_raw_fd(),
                    reader: ends.reader.as_raw_fd(),
                    merge_stdout: ends.merge_stdout,
                });
                tap_ends = Some(ends);
            }
            Err(e) => {
                cleanup.finish();
                return Err(SandboxError::Io { what: "stderr pipe", source: e });
            }
        }
    }
    let mut signals = FORWARDED.to_vec();
    signals.push(libc::SIGCHLD);
    if plan.tty.is_some_and(|t| t.interactive) {
        signals.extend(JOB_CONTROL);
    }
    if let Err(e) = sys::SigSet::of(&signals).block() {
        cleanup.finish();
        return Err(SandboxError::Io { what: "block signals", source: e });
    }

    let (parent_sock, child_sock) =
        sys::seqpacket_pair().map_err(SandboxError::io("socketpair"))?;
    // Root gets a user namespace too: its capabilities then reach only the sandbox's own
    // namespaces (see `write_id_maps`).
    let flags = libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWUSER;
    let mut child_sock = Some(child_sock);
    let mut joined = None;
    let cloned = match prepared {
        Some(network) => {
            plan.net_joined = true;
            let mut start_init = || {
                // In init, a copy of this process: the launcher's end of the socket and the
                // network's descriptors are not init's (their last holder is the daemon). Closed
                // by number while their `OwnedFd`s live on in this copy of the memory: nothing
                // here ever drops them, as `init::run` never returns (and a panic stops at the
                // helper's `extern "C"` entry, before the launcher's frames).
                let mut theirs = network.raw_fds();
                theirs.push(parent_sock.as_raw_fd());
                for fd in theirs {
                    let _ = nix::unistd::close(fd);
                }
                match child_sock.take() {
                    Some(sock) => init::run(spec, &plan, uid, gid, sock, hooks),
                    None => sys::exit_now(1),
                }
            };
            match netpool::clone_into_network(
                flags & !libc::CLONE_NEWNET,
                &network,
                &mut start_init,
            ) {
                Ok(pid) => {
                    joined = Some(network);
                    Ok(Some(pid))
                }
                Err(e) => {
                    crate::timing::mark(&format!("prepared network not joined: {e}"));
                    // Something is wrong with the daemon or the kernel: say so, once, and go on
                    // as without a daemon's network (the walls do not depend on it).
                    eprintln!(
                        "sandgate: warning: the network the daemon made ahead could not be \
                         joined ({e}); this sandbox makes its own"
                    );
                    plan.net_joined = false;
                    sys::clone_fork(flags)
                }
            }
        }
        None => sys::clone_fork(flags),
    };
    let Some(child_sock) = child_sock else {
        // Only init's copy of the memory ran the closure that took it.
        unreachable!("the launcher's end of init's socket is kept until here")
    };
    let child = match cloned {
        Ok(c) => c,
        Err(e)
            if uid != 0
                && matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOSPC | libc::EACCES)) =>
        {
            cleanup.finish();
            return Err(SandboxError::UserNamespaceDenied { source: e });
        }
        Err(e) => {
            cleanup.finish();
            return Err(SandboxError::Io { what: "clone", source: e });
        }
    };
    crate::timing::mark(if joined.is_some() {
        "clone (into the prepared network)"
    } else {
        "clone"
    });
    let Some(pid) = child else {
        drop(parent_sock);
        // The warden's instance and its connection to the daemon are the launcher's, not
        // init's (the command never sees init's descriptors: init is not dumpable, and the
        // command gets 0-2 only; this is one wall more for a way to the daemon).
        for fd in cleanup.warden.as_ref().map(warden::Warden::launchers_fds).unwrap_or_default() {
            sys::close(fd);
        }
        init::run(spec, &plan, uid, gid, child_sock, hooks);
    };
    // Only the sockets are the launcher's to hand over; the namespaces are the sandbox's now.
    let joined = joined.and_then(|n| n.proxy).map(|p| (p.listener, p.dns, p.nflog));
    drop(child_sock);
    // The write end is the sandbox's alone now (the warden below must not hold it either, or the
    // relay would never see the end; it closes the read end itself).
    let tap_reader = tap_ends.map(|ends| {
        drop(ends.writer);
        ends.reader
    });
    if (!cleanup.placeholders.is_empty() || cleanup.warden.is_some())
        && let Ok(pidfd) = sys::pidfd_open(pid)
    {
        cleanup.cleaner = warden::start(&pidfd, cleanup.warden.as_mut(), &cleanup.placeholders);
        if cleanup.cleaner.is_some()
            && let Some(w) = cleanup.warden.as_mut()
        {
            w.release_watch();
        }
    }

    // Started after the warden's fork: a process forked from this one has one thread.
    let tap = match tap_reader {
        Some(reader) => match stderr_tap::Tap::start(reader, read_only.clone().unwrap_or_default())
        {
            Ok(t) => Some(t),
            Err(e) => {
                let _ = sys::kill(pid, libc::SIGKILL);
                let _ = sys::waitpid(pid, true);
                cleanup.finish();
                return Err(SandboxError::Io { what: "stderr relay thread", source: e });
            }
        },
        None => None,
    };
    hooks.while_starting();
    // "ok" and what the kernel enforced, or a setup error: a few hundred bytes (64 KiB here
    // were 16 pages to fault in at every launch).
    let mut buf = vec![0u8; 8 * 1024];
    let received = sys::recv_with_fds(&parent_sock, &mut buf);
    crate::timing::mark("sandbox ready (parent)");
    let fail = |mut cleanup: Cleanup, e: SandboxError| {
        let _ = sys::kill(pid, libc::SIGKILL);
        let _ = sys::waitpid(pid, true);
        cleanup.finish();
        Err(e)
    };
    let (n, fds) = match received {
        Ok(r) => r,
        Err(e) => {
            return fail(cleanup, SandboxError::Io { what: "receive from sandbox", source: e });
        }
    };
    match report::parse(&buf[..n]) {
        report::InitReport::Ready(enforcement) => {
            let mut fds = fds.into_iter();
            // In the order init sends them: the pty master, then the proxy listener and NFLOG.
            let tty = match plan.tty {
                Some(outer) => match fds.next() {
                    Some(master) => {
                        let mut relay = terminal::Relay::new(master, outer);
                        if outer.on_tty[2] {
                            relay.scan_with(read_only.clone());
                        }
                        Some(relay)
                    }
                    None => {
                        let e = SandboxError::Setup {
                            step: SetupStep::Terminal,
                            source: io::Error::other("the sandbox sent no pty"),
                        };
                        return fail(cleanup, e);
                    }
                },
                None => None,
            };
            // Then the proxy listener, the DNS stub's two sockets and NFLOG (when opened).
            let (listener, dns, nflog) = match (&spec.net, joined) {
                (NetSetup::Proxy { .. }, Some((listener, dns, nflog))) => {
                    (Some(listener), Some(dns), Some(nflog))
                }
                (NetSetup::None, _) => (None, None, None),
                (NetSetup::Proxy { .. }, None) => {
                    let listener = fds.next();
                    let dns = fds.next().zip(fds.next()).map(|(u, t)| [u, t]);
                    (listener, dns, fds.next())
                }
            };
            // Last, the mount namespace when it holds cache overlays.
            let mount_ns = if plan.fs.caches.is_empty() { None } else { fds.next() };
            let cache_work = plan
                .fs
                .caches
                .iter()
                .flat_map(|c| {
                    let own = c.own_work.then(|| c.work.clone());
                    std::iter::once(c.work.join("work")).chain(own)
                })
                .filter_map(|p| sys::cpath(&p).ok())
                .collect();
            Ok(Launched {
                pid,
                listener,
                nflog,
                dns,
                enforcement,
                cleanup,
                tty,
                from_init: Some(parent_sock),
                reported: None,
                signals,
                reaped: false,
                tap,
                read_only,
                mount_ns,
                cache_work,
                cache_work_lock: spec.cache_work_lock,
            })
        }
        report::InitReport::Failed(e) => fail(cleanup, e),
    }
}

/// The spec with every path resolved, checked and sorted into what the mounts need.
#[derive(Debug, Default)]
struct Plan {
    fs: mounts::FsPlan,
    /// Placeholders for missing protected paths, locked; released after the sandbox ends.
    placeholders: Vec<placeholder::Placeholder>,
    /// The top-level rule's watch over the writable directories (see `warden`).
    warden: Option<warden::Warden>,
    sockets: Vec<PathBuf>,
    /// The caller's terminal, when the sandbox gets a pty.
    tty: Option<terminal::Outer>,
    /// The caller's stdin is a terminal that is not relayed: the command reads `/dev/null`.
    null_stdin: bool,
    /// The stderr relay's pipe (see `stderr_tap`).
    tap: Option<TapFds>,
    /// The sandbox joins a network made ahead (see `netpool`): init makes none.
    net_joined: bool,
}

/// The stderr relay's pipe as init sees it (inherited through the clone).
#[derive(Debug, Clone, Copy)]
struct TapFds {
    /// Becomes descriptor 2 (and 1 with `merge_stdout`).
    writer: std::os::fd::RawFd,
    /// The launcher's end: init closes its copy, or a reader would outlive the launcher's and
    /// a command writing to a stderr nobody reads any more would block instead of getting EPIPE.
    reader: std::os::fd::RawFd,
    merge_stdout: bool,
}

fn canonical(role: &'static str, p: &Path) -> Result<PathBuf, SandboxError> {
    if !p.is_absolute() {
        return Err(SandboxError::Path {
            role,
            path: p.to_path_buf(),
            source: io::Error::new(io::ErrorKind::InvalidInput, "not an absolute path"),
        });
    }
    p.canonicalize().map_err(|source| SandboxError::Path { role, path: p.to_path_buf(), source })
}

fn resolve(spec: &SandboxSpec) -> Result<Plan, SandboxError> {
    let mut plan = Plan::default();
    match resolve_into(spec, &mut plan) {
        Ok(()) => Ok(plan),
        Err(e) => {
            for p in plan.placeholders.drain(..) {
                p.release();
            }
            Err(e)
        }
    }
}

fn resolve_into(spec: &SandboxSpec, plan: &mut Plan) -> Result<(), SandboxError> {
    let cwd = canonical("cwd", &spec.cwd)?;
    let writable =
        spec.writable.iter().map(|w| canonical("writable", w)).collect::<Result<Vec<_>, _>>()?;
    let inside_writable = |p: &Path| writable.iter().any(|w| p.starts_with(w));
    let protect = |p: &Path, plan: &mut Plan| -> Result<(), SandboxError> {
        if let Ok(real) = p.canonicalize() {
            // Another sandbox's placeholder: share it, so that it is not removed under us.
            // (Best effort: whatever is there is bound read-only in any case.)
            if inside_writable(&real)
                && let Ok(Some(held)) = placeholder::hold(&real)
            {
                plan.placeholders.push(held);
            }
            plan.fs.read_only.push(real);
            return Ok(());
        }
        // Missing, and nothing writable: nothing can create it from inside (and no parent
        // walk of `readlink`s and `stat`s to find that out, for each of the built-in credential
        // paths this home does not have).
        if writable.is_empty() {
            return Ok(());
        }
        // Missing: make sure it cannot be created from inside. The first missing component
        // becomes an empty read-only placeholder while the sandbox runs (see `placeholder`).
        let mut missing = p.to_path_buf();
        while let Some(parent) = missing.parent() {
            if parent.exists() {
                break;
            }
            missing = parent.to_path_buf();
        }
        let Some(parent) = missing.parent().and_then(|d| d.canonicalize().ok()) else {
            return Ok(());
        };
        let Some(name) = missing.file_name() else { return Ok(()) };
        let target = parent.join(name);
        if !inside_writable(&target) {
            return Ok(()); // read-only anyway
        }
        if plan.warden.as_ref().is_some_and(|w| w.covers(&target)) {
            return Ok(()); // taken away if it appears: no placeholder needed
        }
        match placeholder::hold(&target) {
            Ok(Some(held)) => plan.placeholders.push(held),
            // Something (a file, a symlink) appeared there: protect what is there. Nothing
            // there, and a file in the way (`.git` a placeholder, then `.git/config`): nothing
            // can be created there from inside either.
            Ok(None) if std::fs::symlink_metadata(&target).is_err() => return Ok(()),
            Ok(None) => {}
            // A path through a file: nothing can be created there from inside either.
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Ok(()),
            Err(source) => {
                return Err(SandboxError::Path { role: "protected", path: target, source });
            }
        }
        plan.fs.read_only.push(target);
        Ok(())
    };
    // No writable directory (`run`, `net`): no top to watch, so no inotify instance and no
    // warden process to fork, wait for and reap at every launch.
    let roots: Vec<PathBuf> = writable.iter().filter(|w| w.is_dir()).cloned().collect();
    if let Some(rule) = spec.top_level.as_ref().filter(|_| !roots.is_empty()) {
        let w = warden::Warden::prepare(rule, spec.id.as_str(), &roots, &spec.scan);
        if w.watched_ahead() {
            crate::timing::mark("watches made ahead by the daemon taken");
        }
        crate::timing::mark("writable trees watched");
        let existing = w.existing_protected();
        plan.warden = Some(w);
        for p in &existing {
            protect(p, plan)?;
        }
    }
    for p in &spec.read_only {
        if p.is_absolute() {
            protect(p, plan)?;
        }
    }
    let mut parents = std::collections::HashMap::new();
    // The same path comes from several lists (the built-in credential paths, the home walk,
    // the configuration): resolved once each.
    let mut hidden: Vec<&PathBuf> = spec.hidden.iter().filter(|h| h.is_absolute()).collect();
    hidden.sort();
    hidden.dedup();
    for h in hidden {
        match canonical_in(&mut parents, h) {
            Ok(real) if real.is_dir() => plan.fs.hidden_dirs.push(real),
            Ok(real) => plan.fs.hidden_files.push(real),
            // Missing, and nothing writable: nothing can create it from inside.
            Err(_) if writable.is_empty() => {}
            // A missing credential path inside a writable one must not be creatable either.
            Err(_) => protect(h, plan)?,
        }
    }
    // Missing ones need neither keeping nor replacing.
    plan.fs.visible = spec.visible.iter().filter_map(|v| v.canonicalize().ok()).collect();
    for d in &spec.provided {
        let Ok(real) = d.path.canonicalize() else { continue };
        if !real.is_dir() {
            continue;
        }
        let plain = |p: &Path| p.components().all(|c| matches!(c, std::path::Component::Normal(_)));
        if let Some((bad, _)) =
            d.files.iter().find(|(rel, _)| rel.as_os_str().is_empty() || !plain(rel))
        {
            return Err(SandboxError::Path {
                role: "provided",
                path: bad.clone(),
                source: io::Error::new(io::ErrorKind::InvalidInput, "not a plain relative path"),
            });
        }
        plan.fs.provided.push(crate::spec::ProvidedDir { path: real, files: d.files.clone() });
    }
    if let Some(w) = &mut plan.warden {
        for p in &plan.placeholders {
            w.note(&p.path);
        }
    }
    // A cache under a hidden directory cannot be reached inside (and its mount point would be
    // covered before it is made writable).
    plan.fs.caches = resolved_caches(spec, &cwd, &writable);
    plan.fs.caches.retain(|c| !plan.fs.hidden_dirs.iter().any(|h| c.path.starts_with(h)));
    plan.sockets = resolved_unix_sockets(spec);
    if matches!(spec.net, NetSetup::Proxy { .. }) {
        plan.fs.resolv_conf = Some(net::RESOLV_CONF.as_bytes().to_vec());
    }
    plan.fs.cwd = cwd;
    plan.fs.writable = writable;
    plan.fs.read_only.sort();
    plan.fs.read_only.dedup();
    // The same path named twice (a built-in credential path also found by the home walk) is
    // covered once.
    for list in [&mut plan.fs.hidden_dirs, &mut plan.fs.hidden_files] {
        list.sort();
        list.dedup();
    }
    // What the sandbox must not change must not be movable away either: pin the way to it.
    let fs = &plan.fs;
    let provided = fs.provided.iter().map(|d| &d.path);
    // A cache overlay inside a writable path (a `GOPATH` the build started in) is pinned like a
    // protected path: moving a directory that holds it would leave the host's cache below.
    let caches = fs.caches.iter().map(|c| &c.path);
    let targets = fs
        .read_only
        .iter()
        .chain(&fs.hidden_dirs)
        .chain(&fs.hidden_files)
        .chain(provided)
        .chain(caches);
    let targets: Vec<&Path> = targets.map(PathBuf::as_path).collect();
    // A cache layer is as writable as a writable path: what is hidden inside one (a tool's
    // credentials next to its cache) is pinned in the same way.
    let mut roots = fs.writable.clone();
    roots.extend(fs.caches.iter().map(|c| c.path.clone()));
    let pinned = mounts::pins(&roots, &targets, &fs.hidden_dirs);
    plan.fs.pinned = pinned;
    Ok(())
}

/// The spec's cache layers with their paths resolved. One that is no longer a directory, lies
/// under `/proc`, `/sys` or `/dev`, is `/` or holds
/// the working directory, a writable path or a path kept visible (the home), or whose path the
/// overlay's options cannot carry (`,`, `:`, `\\`, which its option parser splits on), is left
/// out: it stays as read-only as the rest of the tree. (A layer over `/` would not be seen by any
/// path lookup, and making "it" writable would make the host's root mount writable.)
fn resolved_caches(
    spec: &SandboxSpec,
    cwd: &Path,
    writable: &[PathBuf],
) -> Vec<crate::spec::CacheLayer> {
    let plain = |p: &Path| !p.as_os_str().as_encoded_bytes().iter().any(|b| b",:\\".contains(b));
    let visible: Vec<PathBuf> = spec.visible.iter().filter_map(|v| v.canonicalize().ok()).collect();
    let held = |p: &Path| {
        std::iter::once(cwd)
            .chain(writable.iter().map(PathBuf::as_path))
            .chain(visible.iter().map(PathBuf::as_path))
            .any(|h| h.starts_with(p))
    };
    spec.caches
        .iter()
        .filter_map(|c| {
            let path = c.path.canonicalize().ok().filter(|p| p.is_dir())?;
            let special = ["/proc", "/sys", "/dev"].iter().any(|s| path.starts_with(s));
            let layer = crate::spec::CacheLayer { path, ..c.clone() };
            let usable = !special
                && layer.path.parent().is_some()
                && !held(&layer.path)
                && [&layer.path, &layer.upper, &layer.work].into_iter().all(|p| plain(p));
            usable.then_some(layer)
        })
        .collect()
}

/// `path` with symbolic links resolved, like `canonicalize`, remembering each parent directory's
/// resolution: a launch hides a hundred entries of a few directories, and resolving each path
/// from the root costs a `readlink` per component.
fn canonical_in(
    parents: &mut std::collections::HashMap<PathBuf, PathBuf>,
    path: &Path,
) -> io::Result<PathBuf> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return path.canonicalize();
    };
    if name == ".." || name == "." || std::fs::symlink_metadata(path)?.file_type().is_symlink() {
        return path.canonicalize();
    }
    let real = match parents.get(parent) {
        Some(real) => real.clone(),
        None => {
            let real = parent.canonicalize()?;
            parents.insert(parent.to_path_buf(), real.clone());
            real
        }
    };
    Ok(real.join(name))
}

/// The allowed pathname unix sockets of `spec` that exist, resolved: the ones a sandbox may reach
/// (a missing one allows nothing, so it counts for neither Landlock nor `--require-full`).
pub fn resolved_unix_sockets(spec: &SandboxSpec) -> Vec<PathBuf> {
    spec.allowed_unix_sockets.iter().filter_map(|s| s.canonicalize().ok()).collect()
}

/// Finds `program` in the `PATH` of `env` (or takes it as a path when it has a slash).
fn find_program(program: &OsStr, env: &[(OsString, OsString)]) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let p = Path::new(program);
    if program.as_bytes().contains(&b'/') {
        return Some(p.to_path_buf());
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(p))
        .find(|c| c.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

mod init {
    //! The sandbox's pid 1.

    use super::*;

    fn err(step: SetupStep) -> impl FnOnce(io::Error) -> SandboxError {
        SandboxError::setup(step)
    }

    /// Never returns: sets up, reports to the launcher, runs the command, exits with its status.
    pub fn run(
        spec: &SandboxSpec,
        plan: &Plan,
        uid: u32,
        gid: u32,
        sock: OwnedFd,
        hooks: &dyn NamespaceHooks,
    ) -> ! {
        // How a launch inside the sandbox knows it is nested (see `nested`).
        let _ = sys::set_name(nested::INIT_NAME);
        match setup(spec, plan, uid, gid, &sock, hooks) {
            Ok(prepared) => supervise(prepared, sock),
            Err(e) => {
                let _ = sys::send_with_fds(&sock, &report::failed(&e), &[]);
                sys::exit_now(1)
            }
        }
    }

    struct Prepared {
        program: CString,
        argv: Vec<CString>,
        envp: Vec<CString>,
        /// The pty's slave in terminal mode, and which of 0, 1, 2 go to it.
        slave: Option<(OwnedFd, [bool; 3])>,
        /// Stdin becomes `/dev/null` (a terminal that is not relayed; see `terminal`).
        null_stdin: bool,
        /// Descriptor 2 (and 1) becomes this pipe (see `stderr_tap`).
        tap: Option<super::TapFds>,
    }

    fn setup(
        spec: &SandboxSpec,
        plan: &Plan,
        uid: u32,
        gid: u32,
        sock: &OwnedFd,
        hooks: &dyn NamespaceHooks,
    ) -> Result<Prepared, SandboxError> {
        sys::set_parent_death_signal(libc::SIGKILL).map_err(err(SetupStep::ParentDeathSignal))?;
        write_id_maps(uid, gid).map_err(err(SetupStep::IdMaps))?;
        crate::timing::mark("id maps");
        let _ = sys::sethostname("sandgate");
        let caches = mounts::build(&plan.fs)?;
        crate::timing::mark("mounts");
        std::env::set_current_dir(&plan.fs.cwd)
            .map_err(err(SetupStep::Chdir(plan.fs.cwd.clone())))?;

        if !plan.net_joined {
            net::loopback_up().map_err(err(SetupStep::Loopback))?;
        }
        let mut fds = Vec::new();
        // Allocated in the sandbox's own devpts instance (mounted by `mounts::build`), so that
        // the pty is the only terminal the command can reach.
        let mut slave = None;
        if let Some(outer) = &plan.tty {
            let (master, s) =
                terminal::open_inside(outer).map_err(err(SetupStep::PseudoTerminal))?;
            fds.push(master);
            slave = Some((s, outer.on_tty));
        }
        if let NetSetup::Proxy { nflog_group } = &spec.net
            && !plan.net_joined
        {
            // Netlink from this process: no `ip` or `nft` to find or start.
            let tun = net::route_device().map_err(err(SetupStep::RouteDevice))?;
            // Held by this process (init, which never execs) until the sandbox ends.
            std::mem::forget(tun);
            net::firewall(spec.id.as_str(), *nflog_group).map_err(err(SetupStep::Firewall))?;
            crate::timing::mark("veth and firewall (netlink)");
            fds.push(net::proxy_listener().map_err(err(SetupStep::ProxyListener))?);
            fds.extend(net::dns_sockets().map_err(err(SetupStep::DnsSockets))?);
            fds.extend(hooks.open_nflog(*nflog_group).map_err(err(SetupStep::Nflog))?);
        }
        // The launcher holds the mount namespace past init's exit when it has cache overlays,
        // whose unmounting it then leaves to a detached process (see `Launched::mount_ns`).
        if !plan.fs.caches.is_empty() {
            let ns = std::fs::File::open("/proc/self/ns/mnt").map_err(err(SetupStep::MountProc))?;
            fds.push(OwnedFd::from(ns));
        }

        crate::timing::mark("network");
        let program = spec
            .command
            .first()
            .ok_or_else(|| SandboxError::CommandNotFound { command: "(empty)".into() })?;
        let path = find_program(program, &spec.env).ok_or_else(|| {
            SandboxError::CommandNotFound { command: program.to_string_lossy().into_owned() }
        })?;
        let cs = |s: &OsStr| sys::cstr(s).map_err(err(SetupStep::CommandLine));
        let prepared = Prepared {
            program: cs(path.as_os_str())?,
            argv: spec.command.iter().map(|a| cs(a)).collect::<Result<_, _>>()?,
            envp: sys::envp(&spec.env).map_err(err(SetupStep::Environment))?,
            slave,
            null_stdin: plan.null_stdin,
            tap: plan.tap,
        };

        crate::timing::mark("program found, argv and environment");
        // The walls, in an order where each step still has what it needs.
        sys::setsid().map_err(err(SetupStep::Setsid))?;
        crate::timing::mark("setsid");
        sys::join_new_session_keyring().map_err(err(SetupStep::SessionKeyring))?;
        crate::timing::mark("session keyring");
        sys::set_no_new_privs().map_err(err(SetupStep::NoNewPrivs))?;
        // The command may not open /proc/1/fd/* (init keeps the caller's stdio) or /proc/1/mem.
        sys::set_dumpable(false).map_err(err(SetupStep::Dumpable))?;
        crate::timing::mark("session, keyring, no_new_privs");
        let abi = sys::landlock_abi();
        let fence::Assessment { enforcement, deny_unix_sockets: deny_unix } =
            fence::assess(abi, fence::gaps(abi), !plan.sockets.is_empty());
        let mut writable = plan.fs.writable.clone();
        writable.extend(caches);
        writable.push(PathBuf::from("/tmp"));
        writable.push(PathBuf::from("/dev/shm"));
        fence::restrict(&fence::FenceSpec { writable: &writable, sockets: &plan.sockets })?;
        fence::require_full(&enforcement, spec.require_full)?;
        crate::timing::mark("landlock");
        sys::drop_all_capabilities().map_err(err(SetupStep::DropCapabilities))?;
        let filter = filter::build(filter::FilterOptions { deny_unix_sockets: deny_unix });
        seccompiler::apply_filter(&filter)
            .map_err(|e| SandboxError::setup(SetupStep::Seccomp)(io::Error::other(e)))?;

        crate::timing::mark("capabilities and seccomp");
        let raw: Vec<i32> = fds.iter().map(AsRawFd::as_raw_fd).collect();
        sys::send_with_fds(sock, &report::ready(&enforcement), &raw)
            .map_err(err(SetupStep::HandOver))?;
        drop(fds);
        Ok(prepared)
    }

    /// Maps the caller's uid and gid to themselves, and nothing else: root stays uid 0, without
    /// capabilities outside the sandbox's own namespaces (and none at all after setup); other
    /// users' files show as the overflow id. A process may map only itself into a user namespace
    /// it created, and only after giving up `setgroups`.
    fn write_id_maps(uid: u32, gid: u32) -> io::Result<()> {
        std::fs::write("/proc/self/setgroups", "deny")?;
        std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
        std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))
    }

    fn supervise(p: Prepared, sock: OwnedFd) -> ! {
        let mut signals = FORWARDED.to_vec();
        signals.push(libc::SIGCHLD);
        if p.slave.is_some() {
            // The launcher resumes a command that Ctrl-Z stopped with a SIGCONT to init.
            signals.push(libc::SIGCONT);
        }
        for &s in &signals {
            let _ = sys::install_noop_handler(s);
        }
        let set = sys::SigSet::of(&signals);
        let _ = set.block();
        let terminal = p.slave.is_some();
        // The pty's first descriptor: the one to make it the controlling terminal through.
        let ctty = p.slave.as_ref().and_then(|(_, on)| (0..3).find(|&i| on[i])).unwrap_or(0) as i32;
        if p.null_stdin {
            // A terminal stdin that is not relayed: neither init nor the command may keep it.
            match std::fs::File::open("/dev/null") {
                Ok(null) => {
                    let _ = sys::dup2(null.as_raw_fd(), 0);
                }
                Err(e) => {
                    eprintln!("sandgate: /dev/null: {e}");
                    sys::exit_now(126)
                }
            }
        }
        if let Some((slave, on_tty)) = &p.slave {
            // Init's own stdio too: it must hold no descriptor of the caller's terminal.
            for (fd, &tty) in on_tty.iter().enumerate() {
                if tty {
                    let _ = sys::dup2(slave.as_raw_fd(), fd as i32);
                }
            }
        }
        drop(p.slave);
        if let Some(t) = p.tap {
            // Init's own messages go the same way; the pipe's original write descriptor is
            // closed for the command by `cloexec_from_3`.
            sys::close(t.reader);
            let _ = sys::dup2(t.writer, 2);
            if t.merge_stdout {
                let _ = sys::dup2(t.writer, 1);
            }
        }
        if terminal {
            // Init leads the pty's session and the command runs in a process group of its own
            // in the foreground: with its parent in the same session the group is not orphaned,
            // so Ctrl-Z can stop a command run directly (the kernel discards terminal stop
            // signals to orphaned groups). SIGTTOU ignored: init hands the terminal over, maybe
            // from the background, and as pid 1 it would never see a default-disposition one.
            // (Init is a session leader already: `setsid` is one of the walls.)
            sys::ignore_signal(libc::SIGTTOU);
            if let Err(e) = sys::set_controlling_tty(ctty) {
                eprintln!("sandgate: no job control: controlling terminal: {e}");
            }
        }
        // Without a copy of init's memory (see `spawn`); `sock` is close-on-exec.
        let child = spawn::vfork_exec(|| {
            let _ = sys::setpgid(0, 0);
            if terminal {
                // In the foreground of the pty before exec (init does it too; first one wins).
                let _ = sys::set_foreground(ctty, sys::getpid());
                sys::default_handler(libc::SIGTTOU);
            }
            for &s in &signals {
                sys::default_handler(s);
            }
            // The Rust runtime ignores SIGPIPE and an ignored signal stays ignored across exec:
            // give the command the default (`yes | head -1` ends quietly, as outside).
            sys::default_handler(libc::SIGPIPE);
            // Nothing blocked, as for a command started from a shell: the launcher blocked its
            // signals (job control ones too) before init and the command inherited them.
            let _ = sys::SigSet::of(&[]).set_mask();
            // Only stdin, stdout and stderr go in (see `cloexec_from_3`).
            sys::cloexec_from_3();
            crate::timing::mark("exec the command");
            let e = sys::execve(&p.program, &p.argv, &p.envp);
            eprintln!("sandgate: {}: {e}", p.program.to_string_lossy());
            sys::exit_now(if e.kind() == io::ErrorKind::NotFound { 127 } else { 126 })
        });
        let cmd = match child {
            Ok(c) => c,
            Err(e) => {
                eprintln!("sandgate: fork: {e}");
                sys::exit_now(126)
            }
        };
        // The socket stays: it tells the launcher the command's status as soon as it ended
        // (before this process's exit tears the namespaces down), and with a terminal when
        // Ctrl-Z stopped the command itself (no shell inside to take the terminal back), so
        // that the launcher stops too.
        let to_launcher = sock;
        // Both sides, so that signals forwarded right away reach the group.
        let _ = sys::setpgid(cmd, cmd);
        if terminal {
            let _ = sys::set_foreground(ctty, cmd);
        }
        loop {
            match set.wait() {
                Ok(libc::SIGCHLD) => {
                    while let Ok(Some((pid, how))) = sys::wait_untraced(-1) {
                        match how {
                            sys::Waited::Ended(how) if pid == cmd => {
                                let code = how.code();
                                let said = format!("ended {code}");
                                let _ = sys::send_with_fds(&to_launcher, said.as_bytes(), &[]);
                                sys::exit_now(i32::from(code))
                            }
                            sys::Waited::Stopped(_) if pid == cmd && terminal => {
                                let _ = sys::send_with_fds(&to_launcher, b"stopped", &[]);
                            }
                            _ => {}
                        }
                    }
                }
                Ok(sig) => {
                    if sys::kill(-cmd, sig).is_err() {
                        let _ = sys::kill(cmd, sig);
                    }
                }
                Err(_) => sys::exit_now(125),
            }
        }
    }
}

/// What this kernel offers the launcher, for `sandgate explain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSupport {
    /// Landlock ABI (0: none).
    pub landlock_abi: u32,
    /// Whether seccomp filters can be installed.
    pub seccomp: bool,
    /// Whether this process may create a user namespace (`None`: not probed).
    pub user_namespaces: Option<bool>,
    /// The sysctl / AppArmor settings read from /proc, for messages.
    pub userns_settings: Vec<(String, String)>,
}

/// Probes the running kernel (reads /proc; does not create namespaces).
pub fn kernel_support() -> KernelSupport {
    let mut settings = Vec::new();
    for (name, path) in [
        ("kernel.unprivileged_userns_clone", "/proc/sys/kernel/unprivileged_userns_clone"),
        ("user.max_user_namespaces", "/proc/sys/user/max_user_namespaces"),
        (
            "kernel.apparmor_restrict_unprivileged_userns",
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
        ),
    ] {
        if let Ok(v) = std::fs::read_to_string(path) {
            settings.push((name.to_owned(), v.trim().to_owned()));
        }
    }
    let (uid, _) = sys::ids();
    let get = |n: &str| settings.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    let userns = uid == 0
        || !(get("kernel.unprivileged_userns_clone") == Some("0")
            || get("user.max_user_namespaces") == Some("0")
            || get("kernel.apparmor_restrict_unprivileged_userns") == Some("1"));
    KernelSupport {
        landlock_abi: sys::landlock_abi(),
        seccomp: sys::seccomp_available(),
        user_namespaces: Some(userns),
        userns_settings: settings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(dir: &Path, writable: Vec<PathBuf>) -> SandboxSpec {
        SandboxSpec {
            id: crate::SandboxId::try_from("sg-plan").unwrap(),
            tier_name: "t".into(),
            cwd: dir.to_path_buf(),
            command: vec!["true".into()],
            env: Vec::new(),
            writable,
            caches: Vec::new(),
            cache_work_lock: None,
            // Missing credential paths, as the built-in list names for every home.
            hidden: vec![dir.join("no/.ssh"), dir.join(".aws")],
            read_only: vec![dir.join(".git/hooks")],
            provided: Vec::new(),
            visible: Vec::new(),
            top_level: Some(crate::TopLevel {
                protected: vec![".envrc".into()],
                ..Default::default()
            }),
            scan: Default::default(),
            net: NetSetup::None,
            allowed_unix_sockets: Vec::new(),
            require_full: false,
            report_read_only: false,
            macos: Default::default(),
        }
    }

    /// Without a writable directory there is no top to watch: no warden process is forked
    /// (and waited for) at each launch, and missing protected paths need no placeholder.
    #[test]
    fn a_launch_without_writable_directories_has_no_warden() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join(".envrc"), "x").unwrap();
        let plan = resolve(&spec(&root, Vec::new())).unwrap();
        assert!(plan.warden.is_none());
        assert!(plan.placeholders.is_empty());
        assert!(plan.fs.read_only.is_empty(), "{:?}", plan.fs.read_only);
        // The same directory writable: the warden watches it (and takes away a `.git` or
        // `.aws` made inside), the top's `.envrc` is read-only, and the missing `no` on the way
        // to a hidden `no/.ssh` is a read-only placeholder (the walls this must keep).
        let mut plan = resolve(&spec(&root, vec![root.clone()])).unwrap();
        let w = plan.warden.as_ref().expect("a warden for the writable directory");
        assert!(w.covers(&root.join(".git")) && w.covers(&root.join(".aws")));
        assert_eq!(plan.fs.read_only, vec![root.join(".envrc"), root.join("no")]);
        assert_eq!(plan.placeholders.len(), 1);
        for p in plan.placeholders.drain(..) {
            p.release();
        }
    }

    #[test]
    fn programs_are_found_in_the_commands_path() {
        let env = vec![(OsString::from("PATH"), OsString::from("/nonexistent:/bin:/usr/bin"))];
        assert!(find_program(OsStr::new("sh"), &env).is_some());
        assert!(find_program(OsStr::new("no-such-program-sandgate"), &env).is_none());
        assert_eq!(find_program(OsStr::new("./x"), &env), Some(PathBuf::from("./x")));
    }
}
