//! macOS backend: the command runs under `sandbox-exec` with the profile of [`crate::seatbelt`].
//!
//! `sandbox-exec` applies the profile and execs the command, so its pid is the command's. The
//! launcher blocks the signals it forwards before starting it (none is lost in between; the
//! command itself starts with an empty mask, as `std::process` gives every child) and, while it
//! waits, takes them with `sigwait` and passes them on ([`crate::forward::step`]). When the
//! command has ended, every process still under this launch's profile is killed
//! ([`seatbelt::reap`]: found with `proc_listallpids` and `sandbox_check`).

use std::process::{Child, Command};

use crate::SandboxError;
use crate::canon::RealLinks;
use crate::forward::{self, FORWARDED, Step};
use crate::seatbelt;
use crate::spec::{Enforcement, PROXY_PORT, SandboxSpec};

/// Rounds of SIGKILL before the launcher gives up on processes that outlive the command.
const REAP_ROUNDS: usize = 100;

/// A started sandbox.
#[derive(Debug)]
pub struct Launched {
    child: Child,
    tmp: std::path::PathBuf,
    /// The Mach name only this launch's profile allows ([`seatbelt::reap::launch_service`]).
    service: std::ffi::CString,
    /// A name no sandgate profile allows ([`seatbelt::reap::canary_service`]).
    canary: std::ffi::CString,
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
        self.reap_leftovers();
        let _ = std::fs::remove_dir_all(&self.tmp);
        let status = status?;
        Ok(forward::exit_code(status.code(), status.signal()))
    }
}

impl Launched {
    /// Kills the processes still under this launch's profile (a double fork outlives the
    /// command: no pid namespace) and says so on stderr.
    fn reap_leftovers(&self) {
        let mut table =
            sys::Confined { service: &self.service, canary: &self.canary, uid: sys::uid() };
        match seatbelt::reap::reap(&mut table, REAP_ROUNDS) {
            seatbelt::reap::Reaped::AllGone { killed: 0 } => {}
            seatbelt::reap::Reaped::AllGone { killed } => eprintln!(
                "sandgate: {killed} process(es) of the sandbox outlived the command: killed"
            ),
            seatbelt::reap::Reaped::Left { pids, why } => {
                eprintln!("sandgate: warning: processes of the sandbox still run ({why}): {pids:?}")
            }
        }
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
    let enforcement = seatbelt::enforcement(spec);
    if spec.require_full && !enforcement.is_full() {
        return Err(SandboxError::NotFullyEnforced { missing: enforcement.missing.join("; ") });
    }
    let tmp = crate::private_tmp::create(
        &std::env::temp_dir().join(format!("sandgate-{}", spec.id)),
        sys::uid(),
    )?;
    let host = seatbelt::HostFacts {
        tmp: tmp.clone(),
        proxy_port,
        user_temp_dir: sys::user_dir(libc::_CS_DARWIN_USER_TEMP_DIR),
        user_cache_dir: sys::user_dir(libc::_CS_DARWIN_USER_CACHE_DIR),
        home: spec
            .env
            .iter()
            .rev()
            .find(|(k, _)| k == "HOME")
            .map(|(_, v)| std::path::PathBuf::from(v))
            .or_else(|| std::env::var_os("HOME").map(Into::into))
            .filter(|h| h.is_absolute()),
        terminals: sys::terminals(),
        // What `xcode-select -p` reads, without starting it at each launch.
        developer_dir: std::fs::read_link("/var/db/xcode_select_link").ok().or_else(|| {
            let clt = std::path::PathBuf::from("/Library/Developer/CommandLineTools");
            clt.is_dir().then_some(clt)
        }),
        // `[macos] trustd = "allow"`, or the variable (either names the way out).
        trustd: if spec.macos.trustd_allow {
            seatbelt::Trustd::Allow
        } else {
            seatbelt::Trustd::from_setting(std::env::var(seatbelt::TRUSTD_ENV).ok().as_deref())
        },
    };
    let profile = seatbelt::render(spec, &host, &RealLinks);
    let mut env = seatbelt::environment(&spec.env, &spec.net);
    seatbelt::toolchain_env(&mut env, &host, &tmp);
    let name = |n: String| {
        std::ffi::CString::new(n).map_err(|e| SandboxError::io("name the launch")(e.into()))
    };
    let service = name(seatbelt::reap::launch_service(spec.id.as_str()))?;
    let canary = name(seatbelt::reap::canary_service(spec.id.as_str()))?;
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
    Ok(Launched { child, tmp, service, canary, saved_mask, enforcement })
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
        /// non-zero when process `pid` runs under a Seatbelt profile; with an operation, non-zero
        /// when `pid`'s profile denies it for the filter argument that follows.
        fn sandbox_check(
            pid: libc::pid_t,
            operation: *const libc::c_char,
            kind: libc::c_int,
            ...
        ) -> libc::c_int;
        /// Flag for `kind`: ask without logging a denial.
        static SANDBOX_CHECK_NO_REPORT: libc::c_int;
    }

    /// `SANDBOX_FILTER_GLOBAL_NAME` of `enum sandbox_filter_type` (a Mach service name follows).
    const SANDBOX_FILTER_GLOBAL_NAME: libc::c_int = 2;

    /// The launching user's uid.
    pub fn uid() -> u32 {
        // SAFETY: getuid has no failure and no memory effects.
        unsafe { libc::getuid() }
    }

    /// The processes of `uid` under the profile that allows `service` and refuses `canary` (see
    /// [`crate::seatbelt::reap`]).
    pub struct Confined<'a> {
        pub service: &'a std::ffi::CStr,
        pub canary: &'a std::ffi::CStr,
        pub uid: u32,
    }

    /// Whether `pid`'s profile allows looking up `name` (asked without logging a denial).
    fn allows_lookup(pid: libc::pid_t, name: &std::ffi::CStr) -> bool {
        // SAFETY: a NUL-terminated operation name and service name, valid for the call; the
        // filter type takes exactly one string argument.
        let denied = unsafe {
            sandbox_check(
                pid,
                c"mach-lookup".as_ptr(),
                SANDBOX_FILTER_GLOBAL_NAME | SANDBOX_CHECK_NO_REPORT,
                name.as_ptr(),
            )
        };
        denied == 0
    }

    impl crate::seatbelt::reap::Processes for Confined<'_> {
        fn confined(&mut self) -> io::Result<Vec<u32>> {
            use crate::seatbelt::reap::{is_ours, of_user};
            let mut out = Vec::new();
            for pid in all_pids()? {
                if pid == std::process::id() as libc::pid_t
                    || !live_uids(pid).is_some_and(|ids| of_user(ids, self.uid))
                {
                    continue;
                }
                if sandboxed(pid)
                    && is_ours(allows_lookup(pid, self.service), allows_lookup(pid, self.canary))
                {
                    out.push(pid as u32);
                }
            }
            Ok(out)
        }

        fn kill(&mut self, pid: u32) {
            if let Ok(pid) = libc::pid_t::try_from(pid) {
                kill(pid, libc::SIGKILL);
            }
        }
    }

    /// Every pid on the system (`proc_listallpids`, with room for those started meanwhile).
    fn all_pids() -> io::Result<Vec<libc::pid_t>> {
        // SAFETY: a null buffer asks for the count only.
        let n = unsafe { libc::proc_listallpids(std::ptr::null_mut(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut pids = vec![0 as libc::pid_t; n as usize + 64];
        let bytes = (pids.len() * std::mem::size_of::<libc::pid_t>()) as libc::c_int;
        // SAFETY: the buffer is valid for `bytes` bytes.
        let got = unsafe { libc::proc_listallpids(pids.as_mut_ptr().cast(), bytes) };
        if got < 0 {
            return Err(io::Error::last_os_error());
        }
        pids.truncate((got as usize).min(pids.len()));
        Ok(pids)
    }

    /// The uids of `pid` when it is a live (not zombie) process.
    fn live_uids(pid: libc::pid_t) -> Option<crate::seatbelt::reap::Uids> {
        // SAFETY: proc_bsdinfo is plain data; the call writes at most its size.
        unsafe {
            let mut info = std::mem::zeroed::<libc::proc_bsdinfo>();
            let size = std::mem::size_of::<libc::proc_bsdinfo>() as libc::c_int;
            let n = libc::proc_pidinfo(
                pid,
                libc::PROC_PIDTBSDINFO,
                0,
                (&mut info as *mut libc::proc_bsdinfo).cast(),
                size,
            );
            (n == size && info.pbi_status != libc::SZOMB).then_some(crate::seatbelt::reap::Uids {
                ruid: info.pbi_ruid,
                euid: info.pbi_uid,
                svuid: info.pbi_svuid,
            })
        }
    }

    /// The launch's own terminals: the devices of stdin, stdout and stderr that are terminals.
    pub fn terminals() -> Vec<std::path::PathBuf> {
        use std::os::unix::ffi::OsStrExt as _;
        let mut out: Vec<std::path::PathBuf> = Vec::new();
        for fd in 0..3 {
            let mut buf = [0u8; 128];
            // SAFETY: the buffer is valid for its length; ttyname_r NUL-terminates on success.
            let rc = unsafe {
                if libc::isatty(fd) != 1 {
                    continue;
                }
                libc::ttyname_r(fd, buf.as_mut_ptr().cast(), buf.len())
            };
            if rc != 0 {
                continue;
            }
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            let path = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(&buf[..end]));
            if path.is_absolute() && !out.contains(&path) {
                out.push(path);
            }
        }
        out
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
