//! macOS backend: the command runs under `sandbox-exec` with the profile of [`crate::seatbelt`].
//!
//! `sandbox-exec` applies the profile and execs the command, so its pid is the command's. The
//! launcher blocks the signals it forwards before starting it (none is lost in between; the
//! command itself starts with an empty mask, as `std::process` gives every child) and, while it
//! waits, takes them with `sigwait` and passes them on ([`crate::forward::step`]).

use std::process::{Child, Command};

use crate::SandboxError;
use crate::canon::RealLinks;
use crate::forward::{self, FORWARDED, Step};
use crate::seatbelt;
use crate::spec::{Enforcement, PROXY_PORT, SandboxSpec};

/// A started sandbox.
#[derive(Debug)]
pub struct Launched {
    child: Child,
    tmp: std::path::PathBuf,
    /// The launcher's signal mask before the forwarded signals were blocked.
    saved_mask: sys::Mask,
    /// What was enforced (Seatbelt enforces the whole profile or refuses to start).
    pub enforcement: Enforcement,
}

impl Launched {
    /// Process id of `sandbox-exec`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the command, passing the launcher's signals on to it; returns its exit code
    /// (128 + signal number when killed).
    pub fn wait(mut self) -> Result<u8, SandboxError> {
        use std::os::unix::process::ExitStatusExt;
        let pid = self.child.id() as libc::pid_t;
        let shares_foreground = sys::in_terminal_foreground();
        let waited = waited_signals();
        let status = loop {
            // A SIGCHLD after this check stays pending (blocked) and ends the sigwait below.
            match self.child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) => {}
                Err(e) => break Err(SandboxError::io("wait")(e)),
            }
            let sig = match sys::wait_signal(&waited) {
                Ok(s) => s,
                Err(e) => break Err(SandboxError::io("wait for a signal")(e)),
            };
            match forward::step(sig, shares_foreground) {
                Step::Forward(s) => sys::kill(pid, s),
                Step::Reap | Step::Skip(_) => {}
            }
        };
        sys::restore(&self.saved_mask);
        let _ = std::fs::remove_dir_all(&self.tmp);
        let status = status?;
        Ok(forward::exit_code(status.code(), status.signal()))
    }
}

/// What the launcher takes with `sigwait`: the forwarded signals and SIGCHLD.
fn waited_signals() -> Vec<libc::c_int> {
    let mut signals = FORWARDED.to_vec();
    signals.push(libc::SIGCHLD);
    signals
}

/// Whether this process already runs inside a Seatbelt sandbox (ours or another program's):
/// `sandbox-exec` would then fail with `sandbox_apply: Operation not permitted`, so the caller
/// decides with [`seatbelt::nested`] instead of launching.
pub fn inside_seatbelt() -> bool {
    sys::sandboxed(std::process::id() as libc::pid_t)
}

/// Whether process `pid` runs inside a Seatbelt sandbox (the daemon refuses such peers, as it
/// refuses peers from another pid namespace on Linux).
pub fn pid_in_seatbelt(pid: u32) -> bool {
    libc::pid_t::try_from(pid).is_ok_and(sys::sandboxed)
}

/// Starts `spec` under `sandbox-exec`. The proxy listens on the host's `localhost:PROXY_PORT`
/// (served by the daemon); the profile allows nothing else.
pub fn launch(spec: &SandboxSpec) -> Result<Launched, SandboxError> {
    launch_with_proxy_port(spec, PROXY_PORT)
}

/// [`launch`] with the proxy on `localhost:proxy_port` (a port the launcher bound for this
/// sandbox; the profile allows only it).
pub fn launch_with_proxy_port(
    spec: &SandboxSpec,
    proxy_port: u16,
) -> Result<Launched, SandboxError> {
    let tmp = std::env::temp_dir().join(format!("sandgate-{}", spec.id));
    std::fs::create_dir_all(&tmp).map_err(SandboxError::io("create private TMPDIR"))?;
    let tmp = tmp.canonicalize().map_err(SandboxError::io("resolve private TMPDIR"))?;
    let host = seatbelt::HostFacts {
        tmp: tmp.clone(),
        proxy_port,
        user_temp_dir: sys::user_dir(libc::_CS_DARWIN_USER_TEMP_DIR),
        user_cache_dir: sys::user_dir(libc::_CS_DARWIN_USER_CACHE_DIR),
        trustd: seatbelt::Trustd::from_setting(std::env::var(seatbelt::TRUSTD_ENV).ok().as_deref()),
    };
    let profile = seatbelt::render(spec, &host, &RealLinks);
    let env = seatbelt::environment(&spec.env, &spec.net);
    let (program, args) = spec
        .command
        .split_first()
        .ok_or(SandboxError::CommandNotFound { command: String::new() })?;
    // Blocked before the spawn, so a signal sent right after it waits for `wait` to pass it on.
    let saved_mask =
        sys::block(&waited_signals()).map_err(SandboxError::io("block forwarded signals"))?;
    let child = Command::new(seatbelt::SANDBOX_EXEC)
        .args(profile.args())
        .arg("--")
        .arg(program)
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("TMPDIR", &tmp)
        .current_dir(&spec.cwd)
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            sys::restore(&saved_mask);
            return Err(SandboxError::io("start sandbox-exec")(e));
        }
    };
    Ok(Launched { child, tmp, saved_mask, enforcement: Enforcement::default() })
}

/// The few libc calls of the macOS launcher.
#[allow(unsafe_code)]
mod sys {
    use std::io;

    /// A saved signal mask, and the actions [`block`] replaced (put back by [`restore`], so that
    /// once the command has ended the launcher answers signals as it did before).
    pub struct Mask(libc::sigset_t, Vec<(libc::c_int, libc::sigaction)>);

    impl std::fmt::Debug for Mask {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Mask")
        }
    }

    fn set_of(signals: &[libc::c_int]) -> libc::sigset_t {
        // SAFETY: sigemptyset initialises the set before sigaddset adds valid signal numbers.
        unsafe {
            let mut set = std::mem::zeroed::<libc::sigset_t>();
            libc::sigemptyset(&mut set);
            for &s in signals {
                libc::sigaddset(&mut set, s);
            }
            set
        }
    }

    extern "C" fn noop(_: libc::c_int) {}

    /// Blocks `signals` in the calling thread (threads started later inherit the mask) and gives
    /// them a no-op handler, so that one whose default is to be ignored (SIGCHLD, SIGWINCH) stays
    /// pending for `sigwait`; returns the previous mask.
    pub fn block(signals: &[libc::c_int]) -> io::Result<Mask> {
        let mut actions = Vec::with_capacity(signals.len());
        for &s in signals {
            // SAFETY: a zeroed sigaction with a valid handler and an empty mask; the old action
            // is written into a zeroed one. exec resets handled signals to their defaults, so
            // the command never sees the handler.
            let (rc, old) = unsafe {
                let mut sa = std::mem::zeroed::<libc::sigaction>();
                sa.sa_sigaction = noop as extern "C" fn(libc::c_int) as libc::sighandler_t;
                libc::sigemptyset(&mut sa.sa_mask);
                sa.sa_flags = libc::SA_RESTART;
                let mut old = std::mem::zeroed::<libc::sigaction>();
                (libc::sigaction(s, &sa, &mut old), old)
            };
            if rc != 0 {
                let err = io::Error::last_os_error();
                put_back(&actions);
                return Err(err);
            }
            actions.push((s, old));
        }
        let set = set_of(signals);
        // SAFETY: valid set pointers; the old mask is written into a zeroed sigset_t.
        unsafe {
            let mut old = std::mem::zeroed::<libc::sigset_t>();
            match libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) {
                0 => Ok(Mask(old, actions)),
                e => {
                    put_back(&actions);
                    Err(io::Error::from_raw_os_error(e))
                }
            }
        }
    }

    fn put_back(actions: &[(libc::c_int, libc::sigaction)]) {
        for (s, old) in actions {
            // SAFETY: an action sigaction itself returned for this signal.
            unsafe {
                libc::sigaction(*s, old, std::ptr::null_mut());
            }
        }
    }

    /// Puts back the mask and then the actions saved by [`block`]. In that order: a signal still
    /// pending when the mask is lifted was meant for the command, which has ended, and meets the
    /// no-op handler; one sent after that gets the launcher's old action (by default, it ends).
    pub fn restore(mask: &Mask) {
        // SAFETY: a valid, initialised set.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &mask.0, std::ptr::null_mut());
        }
        put_back(&mask.1);
    }

    /// Waits for one of `signals` (blocked by [`block`]) and returns it.
    pub fn wait_signal(signals: &[libc::c_int]) -> io::Result<libc::c_int> {
        let set = set_of(signals);
        let mut sig: libc::c_int = 0;
        // SAFETY: valid pointers to an initialised set and an int.
        match unsafe { libc::sigwait(&set, &mut sig) } {
            0 => Ok(sig),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }

    /// Sends `sig` to `pid`; a command that is already gone is not an error here.
    pub fn kill(pid: libc::pid_t, sig: libc::c_int) {
        // SAFETY: kill has no memory effects.
        unsafe {
            libc::kill(pid, sig);
        }
    }

    unsafe extern "C" {
        /// libsandbox (part of libSystem): with a null operation and `SANDBOX_FILTER_NONE`,
        /// non-zero when process `pid` runs under a Seatbelt profile.
        fn sandbox_check(
            pid: libc::pid_t,
            operation: *const libc::c_char,
            kind: libc::c_int,
            ...
        ) -> libc::c_int;
    }

    /// Whether process `pid` is inside a Seatbelt sandbox.
    pub fn sandboxed(pid: libc::pid_t) -> bool {
        // SAFETY: a null operation with SANDBOX_FILTER_NONE (0) takes no further arguments.
        unsafe { sandbox_check(pid, std::ptr::null(), 0) != 0 }
    }

    /// `confstr(name)` as a path (`_CS_DARWIN_USER_TEMP_DIR`, `_CS_DARWIN_USER_CACHE_DIR`).
    pub fn user_dir(name: libc::c_int) -> Option<std::path::PathBuf> {
        use std::os::unix::ffi::OsStrExt as _;
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        // SAFETY: the buffer is valid for its length; confstr writes at most that many bytes,
        // NUL included, and returns the size it needed (0 on error).
        let n = unsafe { libc::confstr(name, buf.as_mut_ptr().cast(), buf.len()) };
        if n == 0 || n > buf.len() {
            return None;
        }
        let path = std::ffi::OsStr::from_bytes(&buf[..n - 1]);
        Some(std::path::PathBuf::from(path)).filter(|p| p.is_absolute())
    }

    /// Whether stdin is a terminal whose foreground process group is the launcher's (the
    /// command, in the same group, then gets the terminal's signals directly).
    pub fn in_terminal_foreground() -> bool {
        // SAFETY: plain queries on file descriptor 0 and the calling process.
        unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp() }
    }
}
