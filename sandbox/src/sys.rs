//! The kernel calls of the Linux launcher, behind one seam: every caller in `linux/` (and the
//! tree scan's directory listing, which is why this module is not under `linux/`) goes through
//! these functions, which return `io::Result` with `errno` preserved, so callers can name the
//! failing step ([`crate::SetupStep`]). Two modules of `linux/` keep their own `unsafe`, each for
//! one mechanism that does not split into calls: `tun` (the `TUNSETIFF` ioctl and its request
//! struct) and `spawn` (a `CLONE_VM | CLONE_VFORK` child on its own stack).
//!
//! `nix` makes the calls it wraps (prctl, signals and signalfd, setsid/setpgid, sethostname,
//! socketpair and netlink sockets, statfs/statvfs, inotify, renameat2, read/write/dup2/close,
//! execve, termios through [`crate::tty`], `SCM_RIGHTS` through [`crate::fdpass`], mount in
//! `mounts`). Raw `libc` remains only where nothing wraps the call, or where the wrapper would
//! change behaviour; each is marked `raw:` with the reason:
//! - `clone` without a stack (fork with namespace flags): `nix::sched::clone` needs a stack and
//!   a callback, and glibc's `fork` adds calls in the child;
//! - `mount_setattr`, `open_tree`, `move_mount`, `close_range`, `pidfd_open`, `kcmp`, `keyctl`,
//!   `capset`, the capability and securebits `prctl`s, `PR_GET_SECCOMP`, `_exit`, the Landlock
//!   ABI probe: no wrapper in `nix` (0.29);
//! - `waitpid`: nix's `WaitStatus` cannot hold a realtime signal and answers `EINVAL` for a
//!   child killed by one, after reaping it (its end would be lost);
//! - `poll`: the loops keep unused slots as fd -1, which nix's `PollFd` (a `BorrowedFd`) cannot
//!   express;
//! - `flock`: nix's `Flock` takes ownership of the file, and the placeholder locks one file
//!   shared and then tries it exclusive;
//! - `SIOCSIFFLAGS` (the loopback interface up) and `TIOCGPTPEER`: ioctls nix has no function for.

#![allow(unsafe_code)]

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use nix::sys::signal::{SigHandler, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::Pid;

use crate::entry::Kind;

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

pub const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
pub const MOUNT_ATTR_NOSUID: u64 = 0x0000_0002;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const OPEN_TREE_CLONE: libc::c_uint = 1;
const OPEN_TREE_CLOEXEC: libc::c_uint = libc::O_CLOEXEC as libc::c_uint;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x0000_0004;
const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
const SECBIT_KEEP_CAPS_LOCKED: libc::c_ulong = 1 << 5;
const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;

fn cvt(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(ret) }
}

fn cvt_i(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(ret) }
}

/// A nix result as an `io::Result`.
fn nx<T>(r: nix::Result<T>) -> io::Result<T> {
    r.map_err(io::Error::from)
}

/// Retries `call` while it is interrupted (`EINTR`).
fn retry<T>(mut call: impl FnMut() -> nix::Result<T>) -> io::Result<T> {
    loop {
        match call() {
            Err(Errno::EINTR) => continue,
            r => return nx(r),
        }
    }
}

/// Lends descriptor number `fd` to `f` as a `BorrowedFd` (for nix calls that take one).
fn with_fd<T>(fd: RawFd, f: impl FnOnce(BorrowedFd<'_>) -> T) -> T {
    // SAFETY: the callers pass descriptor numbers they hold open for the duration of the call
    // (0, 1, 2, a pty they own); the borrow does not outlive `f`.
    f(unsafe { BorrowedFd::borrow_raw(fd) })
}

fn signal(sig: libc::c_int) -> io::Result<Signal> {
    nx(Signal::try_from(sig))
}

/// A path as a C string; a path with a NUL byte is an `InvalidInput` error.
pub fn cpath(path: &Path) -> io::Result<CString> {
    cstr(path.as_os_str())
}

/// An OS string as a C string; one with a NUL byte is an `InvalidInput` error.
pub fn cstr(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte"))
}

/// `KEY=VALUE` strings for `execve`'s environment.
pub fn envp(env: &[(OsString, OsString)]) -> io::Result<Vec<CString>> {
    env.iter()
        .map(|(k, v)| {
            let mut kv = k.clone();
            kv.push("=");
            kv.push(v);
            cstr(&kv)
        })
        .collect()
}

/// `clone(flags | SIGCHLD)` without a new stack: returns `Some(child pid)` in the parent and
/// `None` in the child, like `fork`.
///
/// Only to be called while the process has a single thread (checked by the caller).
pub fn clone_fork(flags: libc::c_int) -> io::Result<Option<libc::pid_t>> {
    let flags = (flags | libc::SIGCHLD) as libc::c_ulong;
    // raw: nix's clone needs a stack and a callback.
    // SAFETY: clone with a NULL stack behaves like fork: the child continues on a copy of the
    // parent's stack. The process is single-threaded (checked by `launch`), so no lock held by
    // another thread is copied into the child. The pointer arguments are NULL and unused.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_int>(),
            std::ptr::null_mut::<libc::c_int>(),
            0 as libc::c_ulong,
        )
    };
    match cvt(ret)? {
        0 => Ok(None),
        pid => Ok(Some(pid as libc::pid_t)),
    }
}

/// Plain fork (`clone(SIGCHLD)`, one system call; glibc's `fork` adds more in the child). Same
/// single-thread requirement as [`clone_fork`].
pub fn fork() -> io::Result<Option<libc::pid_t>> {
    clone_fork(0)
}

/// `mount_setattr(2)` on `path` (and every mount below it when `recursive`).
pub fn mount_setattr(path: &Path, set: u64, clear: u64, recursive: bool) -> io::Result<()> {
    let path = cpath(path)?;
    let attr = MountAttr { attr_set: set, attr_clr: clear, propagation: 0, userns_fd: 0 };
    let flags = if recursive { AT_RECURSIVE } else { 0 };
    // raw: no wrapper in nix.
    // SAFETY: `path` is a valid C string and `attr` a properly sized `struct mount_attr`, both
    // alive for the duration of the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    cvt(ret).map(drop)
}

/// `open_tree(path, OPEN_TREE_CLONE | AT_RECURSIVE)`: a detached copy of the mount tree at `path`.
pub fn open_tree_clone(path: &Path) -> io::Result<OwnedFd> {
    let path = cpath(path)?;
    // raw: no wrapper in nix.
    // SAFETY: `path` is a valid C string; the returned fd is owned by us.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE,
        )
    };
    let fd = cvt(ret)? as RawFd;
    // SAFETY: the kernel just returned this fd to us and nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `move_mount(fd, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH)`.
pub fn move_mount(tree: &OwnedFd, target: &Path) -> io::Result<()> {
    let target = cpath(target)?;
    // raw: no wrapper in nix.
    // SAFETY: the empty string and `target` are valid C strings; `tree` is an open fd.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    cvt(ret).map(drop)
}

/// `prctl(PR_SET_NO_NEW_PRIVS, 1)`.
pub fn set_no_new_privs() -> io::Result<()> {
    nx(nix::sys::prctl::set_no_new_privs())
}

/// `prctl(PR_SET_NAME, name)`: the name `/proc/PID/comm` shows (at most 15 bytes kept).
pub fn set_name(name: &CStr) -> io::Result<()> {
    nx(nix::sys::prctl::set_name(name))
}

/// Whether the mount holding `path` is read-only (`statvfs`'s `ST_RDONLY`).
pub fn on_read_only_mount(path: &Path) -> io::Result<bool> {
    let st = nx(nix::sys::statvfs::statvfs(path))?;
    Ok(st.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
}

/// `prctl(PR_SET_DUMPABLE, on)`.
pub fn set_dumpable(on: bool) -> io::Result<()> {
    nx(nix::sys::prctl::set_dumpable(on))
}

/// `prctl(PR_SET_PDEATHSIG, sig)`.
pub fn set_parent_death_signal(sig: libc::c_int) -> io::Result<()> {
    nx(nix::sys::prctl::set_pdeathsig(signal(sig)?))
}

/// Drops every capability: bounding set, ambient set, inheritable/permitted/effective sets, and
/// locks the securebits so that executing a program as uid 0 grants nothing back.
pub fn drop_all_capabilities() -> io::Result<()> {
    // raw (this whole function): nix has no securebits, capability-set or capset calls.
    // SAFETY: prctl with integer arguments only.
    let secure = unsafe {
        libc::prctl(
            libc::PR_SET_SECUREBITS,
            SECBIT_NOROOT
                | SECBIT_NOROOT_LOCKED
                | SECBIT_NO_SETUID_FIXUP
                | SECBIT_NO_SETUID_FIXUP_LOCKED
                | SECBIT_KEEP_CAPS_LOCKED
                | SECBIT_NO_CAP_AMBIENT_RAISE
                | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
            0,
            0,
            0,
        )
    };
    cvt_i(secure)?;
    for cap in 0..=63 {
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINVAL) {
                break; // past the last capability this kernel knows
            }
            return Err(err);
        }
    }
    // SAFETY: prctl with integer arguments only.
    cvt_i(unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) })?;
    let header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let data = [CapData::default(); 2];
    // SAFETY: header and a two-element data array as capset(2) expects for version 3.
    let ret =
        unsafe { libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) };
    cvt(ret).map(drop)
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Joins a new anonymous session keyring, so the caller's keys are out of reach.
pub fn join_new_session_keyring() -> io::Result<()> {
    // raw: no keyctl in nix.
    // SAFETY: keyctl(JOIN_SESSION_KEYRING, NULL) takes no memory from us.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_JOIN_SESSION_KEYRING,
            std::ptr::null::<libc::c_char>(),
        )
    };
    cvt(ret).map(drop)
}

/// The Landlock ABI version of the running kernel (0 when Landlock is absent or disabled).
pub fn landlock_abi() -> u32 {
    // raw: the `landlock` crate does not expose the version number it probes.
    // SAFETY: landlock_create_ruleset(NULL, 0, VERSION) only returns a number.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(ret).unwrap_or(0)
}

/// Whether seccomp filters can be installed (`prctl(PR_GET_SECCOMP)` works).
pub fn seccomp_available() -> bool {
    // raw: no PR_GET_SECCOMP in nix.
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 }
}

/// `setsid(2)`.
pub fn setsid() -> io::Result<()> {
    nx(nix::unistd::setsid()).map(drop)
}

/// `setpgid(pid, pgid)`.
pub fn setpgid(pid: libc::pid_t, pgid: libc::pid_t) -> io::Result<()> {
    nx(nix::unistd::setpgid(Pid::from_raw(pid), Pid::from_raw(pgid)))
}

/// `sethostname(2)`.
pub fn sethostname(name: &str) -> io::Result<()> {
    nx(nix::unistd::sethostname(name))
}

/// `kill(pid, sig)`.
pub fn kill(pid: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
    nx(nix::sys::signal::kill(Pid::from_raw(pid), signal(sig)?))
}

/// A set of signals.
pub struct SigSet(nix::sys::signal::SigSet);

impl SigSet {
    /// The set holding exactly `signals` (numbers this platform does not know are left out).
    pub fn of(signals: &[libc::c_int]) -> Self {
        let mut set = nix::sys::signal::SigSet::empty();
        for s in signals.iter().filter_map(|&s| Signal::try_from(s).ok()) {
            set.add(s);
        }
        SigSet(set)
    }

    /// Blocks these signals in the calling thread.
    pub fn block(&self) -> io::Result<()> {
        nx(self.0.thread_block())
    }

    /// Makes this the calling thread's whole signal mask.
    pub fn set_mask(&self) -> io::Result<()> {
        nx(self.0.thread_set_mask())
    }

    /// Waits for one of these (blocked) signals (`sigwait`, which retries on `EINTR`).
    pub fn wait(&self) -> io::Result<libc::c_int> {
        nx(self.0.wait()).map(|s| s as libc::c_int)
    }
}

extern "C" fn noop_handler(_: libc::c_int) {}

/// Installs a handler that does nothing for `sig`. Needed by pid 1 of a pid namespace: the kernel
/// drops signals whose disposition is the default before they can be waited for.
pub fn install_noop_handler(sig: libc::c_int) -> io::Result<()> {
    use nix::sys::signal::{SaFlags, SigAction};
    let action = SigAction::new(
        SigHandler::Handler(noop_handler),
        SaFlags::SA_RESTART,
        nix::sys::signal::SigSet::empty(),
    );
    // SAFETY: the handler does nothing, so it is async-signal-safe.
    nx(unsafe { nix::sys::signal::sigaction(signal(sig)?, &action) }).map(drop)
}

/// Ignores `sig` (`SIG_IGN`); an ignored signal stays ignored across exec.
pub fn ignore_signal(sig: libc::c_int) {
    set_handler(sig, SigHandler::SigIgn);
}

/// Restores the default disposition of `sig`.
pub fn default_handler(sig: libc::c_int) {
    set_handler(sig, SigHandler::SigDfl);
}

fn set_handler(sig: libc::c_int, handler: SigHandler) {
    if let Ok(s) = Signal::try_from(sig) {
        // SAFETY: SIG_IGN and SIG_DFL are not functions: nothing runs in a signal context.
        // Errors are irrelevant (uncatchable signals).
        let _ = unsafe { nix::sys::signal::signal(s, handler) };
    }
}

/// This process's id.
pub fn getpid() -> libc::pid_t {
    nix::unistd::getpid().as_raw()
}

/// Makes `pgrp` the foreground process group of the terminal on `fd` (`tcsetpgrp`).
pub fn set_foreground(fd: RawFd, pgrp: libc::pid_t) -> io::Result<()> {
    with_fd(fd, |fd| nx(nix::unistd::tcsetpgrp(fd, Pid::from_raw(pgrp))))
}

/// How a waited-for process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// `exit(code)`.
    Exit(i32),
    /// Killed by this signal.
    Signal(i32),
}

impl Ended {
    /// The shell convention: the exit code, or 128 + signal number.
    pub fn code(self) -> u8 {
        match self {
            Ended::Exit(c) => (c & 0xff) as u8,
            Ended::Signal(s) => (128 + s).clamp(0, 255) as u8,
        }
    }
}

/// What [`wait_untraced`] saw of a child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// It ended (and was reaped).
    Ended(Ended),
    /// It was stopped by this signal (Ctrl-Z on its terminal, SIGSTOP...).
    Stopped(i32),
}

/// `waitpid(pid, WNOHANG | WUNTRACED)`: an ended child (reaped) or a stopped one.
pub fn wait_untraced(pid: libc::pid_t) -> io::Result<Option<(libc::pid_t, Waited)>> {
    wait_for(pid, libc::WNOHANG | libc::WUNTRACED, Some)
}

/// `waitpid(pid, WNOHANG)` (or blocking): `Some((pid, how))` for a reaped child.
pub fn waitpid(pid: libc::pid_t, block: bool) -> io::Result<Option<(libc::pid_t, Ended)>> {
    let flags = if block { 0 } else { libc::WNOHANG };
    wait_for(pid, flags, |w| match w {
        Waited::Ended(e) => Some(e),
        Waited::Stopped(_) => None,
    })
}

/// `waitpid` with `flags`, retried on `EINTR` and on statuses `keep` does not want.
fn wait_for<T>(
    pid: libc::pid_t,
    flags: libc::c_int,
    keep: impl Fn(Waited) -> Option<T>,
) -> io::Result<Option<(libc::pid_t, T)>> {
    let mut status = 0;
    loop {
        // raw: nix's `WaitStatus` cannot hold a realtime signal (EINVAL after the reap).
        // SAFETY: valid pointer to a local int.
        let ret = unsafe { libc::waitpid(pid, &mut status, flags) };
        if ret < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(err);
        }
        if ret == 0 {
            return Ok(None);
        }
        let how = if libc::WIFEXITED(status) {
            Waited::Ended(Ended::Exit(libc::WEXITSTATUS(status)))
        } else if libc::WIFSIGNALED(status) {
            Waited::Ended(Ended::Signal(libc::WTERMSIG(status)))
        } else if libc::WIFSTOPPED(status) {
            Waited::Stopped(libc::WSTOPSIG(status))
        } else {
            continue;
        };
        if let Some(t) = keep(how) {
            return Ok(Some((ret, t)));
        }
    }
}

/// Brings a network interface up with `SIOCSIFFLAGS` (used for `lo`).
pub fn interface_up(name: &str) -> io::Result<()> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType};
    let sock = nx(nix::sys::socket::socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    ))?;
    // raw: no SIOCGIFFLAGS/SIOCSIFFLAGS in nix.
    // SAFETY: a zeroed ifreq is valid; the name is copied within bounds (IFNAMSIZ - 1).
    unsafe {
        let mut req = std::mem::zeroed::<libc::ifreq>();
        for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes().take(libc::IFNAMSIZ - 1)) {
            *dst = src as libc::c_char;
        }
        cvt_i(libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req))?;
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        cvt_i(libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req))?;
    }
    Ok(())
}

/// `socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC)`.
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType};
    nx(nix::sys::socket::socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    ))
}

pub use crate::fdpass::{recv_with_fds, send_with_fds};

/// `execve(2)`; returns only on failure.
pub fn execve(path: &CStr, argv: &[CString], envp: &[CString]) -> io::Error {
    match nix::unistd::execve(path, argv, envp) {
        Err(e) => io::Error::from(e),
        Ok(never) => match never {},
    }
}

/// The id of the mount `fd` is on, from `statx` (`STATX_MNT_ID`, Linux 5.8); `None` where the
/// kernel does not give it.
pub fn statx_mount_id(fd: BorrowedFd<'_>) -> Option<u64> {
    // SAFETY: all-zero bytes are a valid `struct statx` (integers only).
    let mut buf: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `statx` writes at most one `struct statx` into `buf`, which is ours; the path is
    // an empty C string with `AT_EMPTY_PATH`, naming `fd` itself.
    let r = unsafe {
        libc::statx(fd.as_raw_fd(), c"".as_ptr(), libc::AT_EMPTY_PATH, libc::STATX_MNT_ID, &mut buf)
    };
    (r == 0 && buf.stx_mask & libc::STATX_MNT_ID != 0).then_some(buf.stx_mnt_id)
}

/// The go-ahead of a grandchild of [`hold_detached`]: dropping it (or this process's exit) lets
/// the grandchild close its descriptor.
#[derive(Debug)]
pub struct Detached {
    _go: OwnedFd,
}

/// Hands `fd` to a detached grandchild, made now, which drops it once the returned [`Detached`]
/// is dropped: when `fd` holds the last reference to a namespace, its teardown (unmounting a
/// mount namespace's overlays syncs their upper file system and waits for RCU grace periods:
/// milliseconds each) runs there, off the caller's path, instead of in the exit of the caller's
/// child that held it before. The two `clone`s (each copies this process's page tables: ~0.1 ms
/// for a launcher) are made when the caller waits anyway (while the sandboxed command runs), not
/// after it. The grandchild closes every other descriptor first (a copy of the caller's stdout
/// would keep a reader of it waiting) and is reparented to the nearest subreaper, which reaps it.
/// `None` when a pipe or a clone failed: `fd` is then dropped here (its teardown falls to
/// whoever holds it last).
///
/// The grandchild runs no program: a program's start costs more than the rest together here
/// (an `exec` of `cat` was ~0.5 ms of CPU in a virtual machine, where the C library's reading of
/// the processor's cache sizes traps to the hypervisor). So that it does not show the caller's
/// command line while it lingers (to `ps`, or to a search for the sandboxed command), it blanks
/// its copy of the command line and names itself `sandgate-close`.
///
/// Then, once `fd` is closed (its teardown done), the grandchild removes the empty directories
/// `then_remove` names, in order (a cache overlay's work directory, of no use once the overlay
/// is gone: removing it frees a block, and where the file system discards freed blocks that
/// waits for the disk, which would otherwise be the next overlay mount's to wait for). One that
/// is not empty, or not there, is left; but first what an overlay leaves in its `work` is
/// removed from a directory that is not empty (see [`remove_overlay_leftovers`]): otherwise a
/// launch that deleted one file of a host's cache would leave its work directory full, for the
/// next overlay on it to clear on its path. It keeps a copy of `hold` (a lock on those
/// directories) open until then: its exit closes it.
///
/// With `gone` (a pidfd: the sandbox's init), the grandchild also waits for that process to have
/// ended before it lets go of `fd`: the go-ahead ends early when the caller dies (a launcher
/// killed with SIGKILL), while init, killed by its parent-death signal, and the processes of its
/// pid namespace may not have ended yet, and their mounts with them (an overlay whose work
/// directory would be emptied under it, and `hold` let go before it is gone). Pid 1 of a pid
/// namespace has ended only once every process in it is gone.
///
/// A process this one forks later without an `exec` holds a copy of the go-ahead until it exits
/// (the pipe is close-on-exec); the launcher forks none while it waits.
///
/// Safe to call with other threads running: between the `clone`s and `_exit` the children make
/// raw system calls only (no allocation, no lock).
pub fn hold_detached(
    fd: OwnedFd,
    then_remove: &[CString],
    hold: Option<RawFd>,
    gone: Option<RawFd>,
) -> Option<Detached> {
    // The grandchild must be the last to let go of `fd`, or whoever is (this process, or the
    // child in its exit) pays the teardown: it waits for the end of this pipe, which comes when
    // the child has exited and this process has dropped the go-ahead.
    let (done_r, done_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()?;
    let (raw, keep) = (fd.as_raw_fd(), done_r.as_raw_fd());
    if raw < 3 {
        return None; // not a descriptor the launcher opened for this (0-2 are always open)
    }
    let clone = || {
        // SAFETY: as in `clone_fork`: a fork without a new stack. The children below make only
        // raw system calls (clone, prctl, close_range, read, ppoll, close, rmdir, open, chmod,
        // getdents64, unlinkat, exit_group) and write to their own copy of the command line and
        // buffers on their stack, none of which takes a lock another thread of the parent
        // might hold.
        unsafe {
            libc::syscall(
                libc::SYS_clone,
                libc::SIGCHLD as libc::c_ulong,
                std::ptr::null_mut::<libc::c_void>(),
                std::ptr::null_mut::<libc::c_int>(),
                std::ptr::null_mut::<libc::c_int>(),
                0 as libc::c_ulong,
            )
        }
    };
    // Found before the clones: the children may not allocate.
    let args = command_line_area();
    // The descriptors the grandchild keeps, in order (a missing `hold` or `gone` is -1, first).
    let gone = gone.unwrap_or(-1);
    let mut kept = [keep, raw, hold.unwrap_or(-1), gone];
    kept.sort_unstable();
    let child = clone();
    if child == 0 {
        let grandchild = clone();
        if grandchild == 0 {
            let mut byte = 0u8;
            // SAFETY: raw system calls on descriptor numbers and a one-byte buffer on this
            // stack. Every descriptor but `keep`, `raw`, `hold` and `gone` is closed; the pipe
            // is read to its end, `gone` waited for, then `raw` closed (the last reference),
            // the directories removed, and `hold` closed by the exit.
            hide_command_line(args, c"sandgate-close");
            unsafe {
                let mut from = 0;
                for fd in kept.into_iter().filter(|&fd| fd >= 0) {
                    if fd > from {
                        libc::syscall(libc::SYS_close_range, from as u32, (fd - 1) as u32, 0u32);
                    }
                    from = fd + 1;
                }
                libc::syscall(libc::SYS_close_range, from as u32, u32::MAX, 0u32);
                while libc::read(keep, (&raw mut byte).cast(), 1) > 0 {}
                if gone >= 0 {
                    let mut p = libc::pollfd { fd: gone, events: libc::POLLIN, revents: 0 };
                    let null = std::ptr::null::<libc::c_void>();
                    while libc::syscall(libc::SYS_ppoll, &raw mut p, 1, null, null, 0) < 0
                        && *libc::__errno_location() == libc::EINTR
                    {}
                }
                libc::close(raw);
                for dir in then_remove {
                    if libc::rmdir(dir.as_ptr()) != 0 {
                        remove_overlay_leftovers(dir);
                        libc::rmdir(dir.as_ptr());
                    }
                }
            }
            exit_now(0);
        }
        // The child says whether the grandchild was made.
        exit_now(i32::from(grandchild < 0));
    }
    let waited = if child > 0 { waitpid(child as libc::pid_t, true).ok().flatten() } else { None };
    let made = waited.is_some_and(|(_, how)| how.code() == 0);
    // Not the last reference while the grandchild holds one; then, when the go-ahead is
    // dropped, the pipe's last writer goes and the grandchild lets go.
    drop(fd);
    drop(done_r);
    made.then_some(Detached { _go: done_w })
}

/// Removes from directory `dir` what an overlay leaves in the `work` of its work directory once
/// it is unmounted: entries named `#<n>`, its temporary names. Since Linux 5.8 an overlay keeps
/// one such whiteout (a character device, linked into the upper layer for each file deleted
/// from a lower one) there for as long as it is mounted, and does not remove it at the end;
/// the directory (mode 0000, as the overlay makes it) is given its owner's access first.
/// Nothing else is removed (no other name, no directory that is not empty), and a link at `dir`
/// is not followed. Raw system calls and buffers on this stack only: for the grandchild of
/// [`hold_detached`].
///
/// # Safety
/// None beyond a valid C string: it is `unsafe` only because the caller may be a child of a
/// multithreaded process (nothing here allocates or locks).
unsafe fn remove_overlay_leftovers(dir: &CStr) {
    const FLAGS: libc::c_int =
        libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: raw system calls on descriptors opened here and buffers on this stack.
    unsafe {
        let at = libc::open(dir.as_ptr(), FLAGS);
        if at < 0 {
            return;
        }
        // Its mode, set through the descriptor (/proc/self/fd/N names exactly what was opened).
        let mut proc_fd = *b"/proc/self/fd/\0\0\0\0\0\0\0\0\0\0\0\0";
        let mut digits = [0u8; 10];
        let (mut n, mut len) = (at as u32, 0);
        loop {
            digits[len] = b'0' + (n % 10) as u8;
            len += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        for i in 0..len {
            proc_fd[14 + i] = digits[len - 1 - i];
        }
        libc::chmod(proc_fd.as_ptr().cast(), 0o700);
        let d =
            libc::openat(at, c".".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC);
        libc::close(at);
        if d < 0 {
            return;
        }
        // `struct linux_dirent64`: inode (8 bytes), offset (8), record length (2), type (1),
        // then the name, NUL-terminated.
        let mut buf = [0u8; 1024];
        loop {
            let n = libc::syscall(libc::SYS_getdents64, d, buf.as_mut_ptr(), buf.len());
            if n <= 0 {
                break;
            }
            let mut off = 0usize;
            while off + 19 < n as usize {
                let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
                if reclen == 0 {
                    break;
                }
                if buf[off + 19] == b'#' {
                    let name = buf.as_ptr().add(off + 19).cast::<libc::c_char>();
                    if libc::unlinkat(d, name, 0) != 0 {
                        libc::unlinkat(d, name, libc::AT_REMOVEDIR);
                    }
                }
                off += reclen;
            }
        }
        libc::close(d);
    }
}

/// Blanks this process's command line as `ps` and a search by command line read it
/// (/proc/PID/cmdline: the memory `area` gives, from [`command_line_area`]) and names it
/// `name`: what a process forked from the launcher does before it lingers past the launch
/// (holding something whose last close takes time), so that a search for the sandboxed command
/// does not find it. Raw writes and one `prctl`: safe in a forked child of a threaded process.
pub fn hide_command_line(area: Option<(usize, usize)>, name: &CStr) {
    // SAFETY: zeros written over this process's own copy of its command line (the range the
    // kernel reads /proc/PID/cmdline from: writable memory of the initial stack, read by
    // nothing in this process after its start), and a `prctl` with a C string.
    unsafe {
        if let Some((start, len)) = area {
            std::ptr::write_bytes(start as *mut u8, 0, len);
        }
        libc::prctl(libc::PR_SET_NAME, name.as_ptr());
    }
}

/// Sixteen hex digits from the kernel's random source (a name nobody can guess); the time's
/// nanoseconds if that cannot be read.
pub fn random_hex() -> String {
    let mut bytes = [0u8; 8];
    // SAFETY: the kernel writes at most `bytes.len()` bytes into the buffer.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        bytes = now.map_or(0, |d| d.as_nanos() as u64).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where this process's command line lies in its memory (start, length), as the kernel shows it
/// in /proc/PID/cmdline (`arg_start` and `arg_end` of /proc/self/stat); `None` when unknown.
/// Found once per process (reading /proc/self/stat costs tens of microseconds), and a child
/// forked after that inherits it: the same addresses in its copy of the memory.
pub fn command_line_area() -> Option<(usize, usize)> {
    static AREA: std::sync::OnceLock<Option<(usize, usize)>> = std::sync::OnceLock::new();
    *AREA.get_or_init(read_command_line_area)
}

fn read_command_line_area() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // (The name in parentheses may hold spaces: the fields after it, from the third.)
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_ascii_whitespace().skip(48 - 3);
    let start: usize = fields.next()?.parse().ok()?;
    let end: usize = fields.next()?.parse().ok()?;
    (start > 0 && end > start).then(|| (start, end - start))
}

/// `_exit(code)`: leaves without running destructors or atexit handlers (for forked children).
pub fn exit_now(code: i32) -> ! {
    // raw: no _exit in nix 0.29.
    // SAFETY: _exit never returns and is async-signal-safe.
    unsafe { libc::_exit(code) }
}

/// Number of threads of the calling process.
pub fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(1, |d| d.count())
}

/// Real uid and gid of the calling process.
pub fn ids() -> (u32, u32) {
    (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw())
}

/// Whether `fd` refers to a terminal.
pub fn isatty(fd: RawFd) -> bool {
    nix::unistd::isatty(fd).unwrap_or(false)
}

/// `tcgetattr(3)`.
pub fn tcgetattr(fd: RawFd) -> io::Result<libc::termios> {
    with_fd(fd, |fd| crate::tty::settings(fd)).map(libc::termios::from)
}

/// `tcsetattr(fd, TCSANOW, t)`, retried on `EINTR`.
pub fn tcsetattr(fd: RawFd, t: &libc::termios) -> io::Result<()> {
    with_fd(fd, |fd| crate::tty::apply(fd, &(*t).into()))
}

/// `t` switched to raw mode (`cfmakeraw(3)`, see [`crate::tty::Mode::Raw`]).
pub fn raw_termios(t: &libc::termios) -> libc::termios {
    crate::tty::with_mode(&(*t).into(), crate::tty::Mode::Raw).into()
}

nix::ioctl_read_bad!(tiocgwinsz, libc::TIOCGWINSZ, libc::winsize);
nix::ioctl_write_ptr_bad!(tiocswinsz, libc::TIOCSWINSZ, libc::winsize);
nix::ioctl_write_int_bad!(tiocsctty, libc::TIOCSCTTY);

/// `ioctl(fd, TIOCGWINSZ)`.
pub fn get_winsize(fd: RawFd) -> io::Result<libc::winsize> {
    // SAFETY: a zeroed winsize is a valid out-buffer for TIOCGWINSZ.
    let mut w = unsafe { std::mem::zeroed::<libc::winsize>() };
    // SAFETY: TIOCGWINSZ writes one winsize into a valid pointer.
    nx(unsafe { tiocgwinsz(fd, &mut w) })?;
    Ok(w)
}

/// `ioctl(fd, TIOCSWINSZ, w)`.
pub fn set_winsize(fd: RawFd, w: &libc::winsize) -> io::Result<()> {
    // SAFETY: TIOCSWINSZ reads one winsize from a valid pointer.
    nx(unsafe { tiocswinsz(fd, w) }).map(drop)
}

/// A new pseudo-terminal from `/dev/ptmx` (the devpts instance of the caller's mount namespace):
/// `(master, slave)`, both close-on-exec, the slave opened through the master (`TIOCGPTPEER`)
/// so no path lookup can substitute another terminal (nix's `openpty` opens it by name).
pub fn open_pty() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::fcntl::OFlag;
    let flags = OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
    let master = nx(nix::pty::posix_openpt(flags))?;
    nx(nix::pty::unlockpt(&master))?;
    // raw: no TIOCGPTPEER in nix.
    // SAFETY: TIOCGPTPEER takes open flags by value and returns a new fd.
    let s = cvt_i(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTPEER, flags.bits()) })?;
    // SAFETY: the kernel just returned `s` to us; the master's descriptor moves out of the
    // PtyMaster, which gives up its ownership.
    Ok(unsafe { (OwnedFd::from_raw_fd(master.into_raw_fd()), OwnedFd::from_raw_fd(s)) })
}

/// `ioctl(fd, TIOCSCTTY, 0)`: makes the terminal the controlling terminal of the caller's session
/// (the caller must be a session leader without one).
pub fn set_controlling_tty(fd: RawFd) -> io::Result<()> {
    // SAFETY: TIOCSCTTY takes an integer argument.
    nx(unsafe { tiocsctty(fd, 0) }).map(drop)
}

/// `dup2(from, to)`.
pub fn dup2(from: RawFd, to: RawFd) -> io::Result<()> {
    nx(nix::unistd::dup2(from, to)).map(drop)
}

/// Whether `path` is the root of a procfs mount (not a directory dressed up as one).
pub fn is_procfs(path: &Path) -> bool {
    nix::sys::statfs::statfs(path)
        .is_ok_and(|st| st.filesystem_type() == nix::sys::statfs::PROC_SUPER_MAGIC)
}

/// Whether the kernel refuses this process a new user namespace with `EPERM`, tried in a forked
/// child (a successful `unshare` would move the caller). The child makes only async-signal-safe
/// calls, so this is sound in a process with threads too.
pub fn user_namespace_refused() -> bool {
    // SAFETY: the child calls only unshare and _exit before it ends.
    match unsafe { nix::unistd::fork() } {
        Err(_) => false,
        Ok(nix::unistd::ForkResult::Child) => {
            let refused =
                nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER) == Err(Errno::EPERM);
            exit_now(if refused { 1 } else { 0 })
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            matches!(waitpid(child.as_raw(), true), Ok(Some((_, Ended::Exit(1)))))
        }
    }
}

/// Marks every descriptor from 3 up close-on-exec, so that a command executed next gets only
/// stdin, stdout and stderr. Descriptors the caller left open point at the host's own mounts:
/// through them a command would read hidden files or write outside, whatever its walls say.
/// `close_range(CLOSE_RANGE_CLOEXEC)` (Linux 5.11); older kernels: each open descriptor in turn.
pub fn cloexec_from_3() {
    const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;
    // raw: no close_range in nix.
    // SAFETY: close_range with integer arguments; it only sets flags.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) };
    if ret == 0 {
        return;
    }
    let fds: Vec<RawFd> = match std::fs::read_dir("/proc/self/fd") {
        Ok(dir) => dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect(),
        Err(_) => (3..1024).collect(),
    };
    for fd in fds.into_iter().filter(|&fd| fd >= 3) {
        // A closed one answers EBADF.
        let cloexec = nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC);
        let _ = nix::fcntl::fcntl(fd, cloexec);
    }
}

/// Closes every descriptor of the process except those in `keep`.
pub fn close_all_except(keep: &[RawFd]) {
    let mut keep: Vec<u32> = keep.iter().filter_map(|&f| u32::try_from(f).ok()).collect();
    keep.sort_unstable();
    let mut from = 0u32;
    for k in keep.into_iter().chain(std::iter::once(u32::MAX)) {
        if k > from {
            // raw: no close_range in nix.
            // SAFETY: close_range with integer arguments; closing descriptors we do not use.
            unsafe { libc::syscall(libc::SYS_close_range, from, k - 1, 0u32) };
        }
        from = k.saturating_add(1);
    }
}

/// `pidfd_open(pid, 0)`.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // raw: no pidfd_open in nix.
    // SAFETY: integer arguments; the returned fd is ours.
    let fd = cvt(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) })? as RawFd;
    // SAFETY: the kernel just returned this fd to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `poll(2)`; an interruption counts as "nothing ready". A slot with fd -1 is ignored.
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    // raw: nix's PollFd cannot hold the -1 of an unused slot.
    // SAFETY: pointer and length of a live slice of pollfd.
    let ret = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    match cvt_i(ret) {
        Ok(n) => Ok(n as usize),
        Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(0),
        Err(e) => Err(e),
    }
}

/// A non-blocking, close-on-exec `signalfd` for these (blocked) signals.
pub fn signalfd(set: &SigSet) -> io::Result<SignalFd> {
    nx(SignalFd::with_flags(&set.0, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC))
}

/// Reads one signal from a non-blocking signalfd; `None` when none is pending.
pub fn read_signal(fd: &SignalFd) -> io::Result<Option<libc::c_int>> {
    match fd.read_signal() {
        Ok(info) => Ok(info.map(|i| i.ssi_signo as libc::c_int)),
        Err(Errno::EINTR) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// `read(2)`, retried on `EINTR`.
pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    retry(|| nix::unistd::read(fd, buf))
}

/// `write(2)`, retried on `EINTR`.
pub fn write(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    with_fd(fd, |fd| retry(|| nix::unistd::write(fd, buf)))
}

/// Sets `O_NONBLOCK` on a descriptor.
pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = OFlag::from_bits_retain(nx(fcntl(fd, FcntlArg::F_GETFL))?);
    nx(fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))).map(drop)
}

/// Stops the calling process (`SIGSTOP` to itself) until a `SIGCONT`.
pub fn stop_self() {
    let _ = nix::sys::signal::kill(nix::unistd::getpid(), Signal::SIGSTOP);
}

/// `flock(fd, op)`, retried on `EINTR`.
pub fn flock(fd: RawFd, op: libc::c_int) -> io::Result<()> {
    loop {
        // raw: nix's `Flock` takes ownership of the file (one file is locked shared, then
        // tried exclusive, by its holder).
        // SAFETY: integer arguments only.
        match cvt_i(unsafe { libc::flock(fd, op) }) {
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            r => return r.map(drop),
        }
    }
}

/// The netlink families the launcher talks to.
#[derive(Debug, Clone, Copy)]
pub enum Netlink {
    /// `NETLINK_ROUTE`: links, addresses, routes.
    Route,
    /// `NETLINK_NETFILTER`: nf_tables.
    Netfilter,
}

/// Sends netlink `bytes` (one or more messages) on a new socket of `family` and reads `acks`
/// acknowledgements; the first error the kernel reports is returned (as the errno it carries).
pub fn netlink_transact(family: Netlink, bytes: &[u8], acks: usize) -> io::Result<()> {
    use nix::sys::socket::{
        AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recv, sendto,
        socket,
    };
    let protocol = match family {
        Netlink::Route => SockProtocol::NetlinkRoute,
        Netlink::Netfilter => SockProtocol::NetlinkNetFilter,
    };
    let sock = nx(socket(AddressFamily::Netlink, SockType::Raw, SockFlag::SOCK_CLOEXEC, protocol))?;
    // pid 0: the kernel.
    let sent = nx(sendto(sock.as_raw_fd(), bytes, &NetlinkAddr::new(0, 0), MsgFlags::empty()))?;
    if sent != bytes.len() {
        return Err(io::Error::other("netlink: short send"));
    }
    let mut seen = 0;
    let mut buf = vec![0u8; 16384];
    while seen < acks {
        let n = nx(recv(sock.as_raw_fd(), &mut buf, MsgFlags::empty()))?;
        let mut at = 0;
        while at + 16 <= n {
            let len = u32::from_ne_bytes(buf[at..at + 4].try_into().unwrap_or_default()) as usize;
            let kind = u16::from_ne_bytes(buf[at + 4..at + 6].try_into().unwrap_or_default());
            if len < 16 || at + len > n {
                return Err(io::Error::other("netlink: malformed reply"));
            }
            if kind == libc::NLMSG_ERROR as u16 && len >= 20 {
                let code = i32::from_ne_bytes(buf[at + 16..at + 20].try_into().unwrap_or_default());
                if code != 0 {
                    return Err(io::Error::from_raw_os_error(-code));
                }
                seen += 1;
            }
            at += (len + 3) & !3;
        }
    }
    Ok(())
}

/// The index of network interface `name`.
pub fn interface_index(name: &str) -> io::Result<u32> {
    nx(nix::net::if_::if_nametoindex(name))
}

/// `inotify_init1(IN_CLOEXEC | IN_NONBLOCK)`.
pub fn inotify_init() -> io::Result<nix::sys::inotify::Inotify> {
    use nix::sys::inotify::{InitFlags, Inotify};
    nx(Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK))
}

/// Lowers the calling thread to the lowest priority (`nice` 19; on Linux the priority is each
/// thread's): it still runs under load, slowly (unlike the idle scheduling class, where it could
/// wait for good).
pub fn lowest_priority() -> io::Result<()> {
    // SAFETY: plain integers; `which` and `who` name this process.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// An inotify instance received from elsewhere (the warden's watches made ahead by the daemon).
pub fn inotify_from(fd: std::os::fd::OwnedFd) -> nix::sys::inotify::Inotify {
    use std::os::fd::{FromRawFd as _, IntoRawFd as _};
    // SAFETY: an owned descriptor, given up to the wrapper that now owns it. (The caller knows
    // it is an inotify instance: a read of anything else fails, no memory is at stake.)
    unsafe { nix::sys::inotify::Inotify::from_raw_fd(fd.into_raw_fd()) }
}

/// `inotify_add_watch(2)`: the watch descriptor (the same one again for a directory already
/// watched, whose mask `mask` then replaces).
pub fn inotify_watch(inotify: RawFd, path: &Path, mask: u32) -> io::Result<i32> {
    let path = cstr(path.as_os_str())?;
    // SAFETY: a valid descriptor number and a NUL-terminated path that outlives the call.
    let wd = unsafe { libc::inotify_add_watch(inotify, path.as_ptr(), mask) };
    if wd < 0 { Err(io::Error::last_os_error()) } else { Ok(wd) }
}

/// `inotify_rm_watch(2)`; a watch already gone (its directory removed) is no error.
pub fn inotify_unwatch(inotify: RawFd, wd: i32) {
    // SAFETY: plain integers; an invalid pair only fails with EINVAL.
    let _ = unsafe { libc::inotify_rm_watch(inotify, wd) };
}

/// Flags of every directory opened below the top of a writable path: read for `getdents`, never
/// through a symbolic link.
const DIR_FLAGS: libc::c_int =
    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

fn fd_or_error(fd: libc::c_int) -> io::Result<OwnedFd> {
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        // SAFETY: a descriptor the kernel just returned to this process, owned by no one else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

/// The directory `name` (one component) in the directory open at `dir` (`AT_FDCWD` for an
/// absolute path): refused with `ELOOP` when it is a symbolic link.
pub fn open_dir_at(dir: RawFd, name: &OsStr) -> io::Result<OwnedFd> {
    let name = cstr(name)?;
    // SAFETY: a NUL-terminated name that outlives the call; the flags create nothing.
    fd_or_error(unsafe { libc::openat(dir, name.as_ptr(), DIR_FLAGS) })
}

/// Calls `f` with the name of every entry of the directory open at `dir` but `.` and `..`, and
/// what it is (`None`: the filesystem does not say; see [`kind_at`]), read with
/// `getdents64` into one buffer: no allocation and no `stat` per entry (a big checkout has a
/// hundred thousand).
pub fn each_entry(dir: RawFd, mut f: impl FnMut(&[u8], Option<Kind>)) -> io::Result<()> {
    each_dirent(dir, |name, kind, _| f(name, kind))
}

/// [`each_entry`], with the inode number each entry names (`d_ino`).
pub fn each_dirent(dir: RawFd, mut f: impl FnMut(&[u8], Option<Kind>, u64)) -> io::Result<()> {
    // One buffer per thread, made once: zeroing 64 KiB for each of a big tree's thousands of
    // directories cost more than reading them.
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0u8; 64 * 1024]);
    }
    // (A callback that lists another directory from inside `f` gets a buffer of its own.)
    let mut buf = BUF
        .with(|b| b.try_borrow_mut().map(|mut b| std::mem::take(&mut *b)).ok())
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| vec![0u8; 64 * 1024]);
    let result = each_entry_in(dir, &mut buf, &mut f);
    BUF.with(|b| {
        if let Ok(mut b) = b.try_borrow_mut() {
            *b = buf;
        }
    });
    result
}

fn each_entry_in(
    dir: RawFd,
    buf: &mut [u8],
    f: &mut impl FnMut(&[u8], Option<Kind>, u64),
) -> io::Result<()> {
    loop {
        // SAFETY: the buffer is writable for its whole length, which is passed with it.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, dir, buf.as_mut_ptr(), buf.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Ok(());
        }
        // struct linux_dirent64: d_ino u64, d_off i64, d_reclen u16, d_type u8, d_name[].
        let mut at = 0;
        while at + 19 <= n as usize {
            let reclen = usize::from(u16::from_ne_bytes([buf[at + 16], buf[at + 17]]));
            if reclen == 0 || at + reclen > n as usize {
                break;
            }
            let name = &buf[at + 19..at + reclen];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            let kind = match buf[at + 18] {
                libc::DT_DIR => Some(Kind::Dir),
                libc::DT_LNK => Some(Kind::Link),
                libc::DT_UNKNOWN => None,
                _ => Some(Kind::Other),
            };
            if name != b"." && name != b".." {
                let ino = u64::from_ne_bytes(buf[at..at + 8].try_into().unwrap_or_default());
                f(name, kind, ino);
            }
            at += reclen;
        }
    }
}

/// What the entry `name` of the directory open at `dir` is (not following a symbolic link);
/// `None` when it is not there.
pub fn kind_at(dir: RawFd, name: &OsStr) -> Option<Kind> {
    let name = cstr(name).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a NUL-terminated name and a buffer of the size `fstatat` writes.
    let r =
        unsafe { libc::fstatat(dir, name.as_ptr(), st.as_mut_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
    // SAFETY: filled in by the successful call.
    (r == 0).then(|| match unsafe { st.assume_init() }.st_mode & libc::S_IFMT {
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFLNK => Kind::Link,
        _ => Kind::Other,
    })
}

/// Calls `f` with the name of every entry of the directory `dir` (not itself a symbolic link)
/// and what it is (not following a symbolic link).
pub(crate) fn each_entry_of(dir: &Path, f: &mut dyn FnMut(&[u8], Kind)) -> io::Result<()> {
    let fd = open_dir_at(libc::AT_FDCWD, dir.as_os_str())?;
    each_entry(fd.as_raw_fd(), |name, kind| {
        let kind = kind.or_else(|| kind_at(fd.as_raw_fd(), OsStr::from_bytes(name)));
        f(name, kind.unwrap_or(Kind::Other));
    })
}

/// Whether the entry `name` of the directory open at `dir` is a directory (not following a
/// symbolic link); `None` when it is not there.
pub fn is_dir_at(dir: RawFd, name: &OsStr) -> Option<bool> {
    let name = cstr(name).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a NUL-terminated name and a buffer of the size `fstatat` writes.
    let r =
        unsafe { libc::fstatat(dir, name.as_ptr(), st.as_mut_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
    // SAFETY: filled in by the successful call.
    (r == 0).then(|| unsafe { st.assume_init() }.st_mode & libc::S_IFMT == libc::S_IFDIR)
}

/// `renameat2(dir, name, to_dir, to, RENAME_NOREPLACE)`: moves the entry `name` of the directory
/// open at `dir` (itself, a symbolic link is not followed) to `to` relative to `to_dir`
/// (`AT_FDCWD`: an absolute path), never over an existing one.
pub fn rename_at(dir: RawFd, name: &OsStr, to_dir: RawFd, to: &Path) -> io::Result<()> {
    let (from, to) = (cstr(name)?, cstr(to.as_os_str())?);
    // SAFETY: NUL-terminated names that outlive the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            dir,
            from.as_ptr(),
            to_dir,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Gives the owner its access back to the directory `name` of the directory open at `dir`, when
/// the command closed it (`chmod 000`): through an `O_PATH` descriptor of exactly that entry, so
/// a symbolic link put there is not followed to somebody else's file.
pub fn open_up_at(dir: RawFd, name: &OsStr) {
    let Ok(c) = cstr(name) else { return };
    let flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a NUL-terminated name; O_PATH opens no file for reading or writing.
    let Ok(fd) = fd_or_error(unsafe { libc::openat(dir, c.as_ptr(), flags) }) else { return };
    let proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let Ok(m) = std::fs::metadata(&proc) else { return };
    use std::os::unix::fs::PermissionsExt as _;
    let mode = m.permissions().mode() & 0o7777;
    if m.is_dir() && mode & 0o700 != 0o700 {
        let _ = std::fs::set_permissions(&proc, std::fs::Permissions::from_mode(mode | 0o700));
    }
}

/// `inotify_add_watch(2)` on the directory open at `dir` (through `/proc/self/fd`: exactly that
/// directory, wherever a path to it leads now).
pub fn inotify_watch_fd(inotify: RawFd, dir: RawFd, mask: u32) -> io::Result<i32> {
    let path = format!("/proc/self/fd/{dir}");
    inotify_watch(inotify, Path::new(&path), mask & !libc::IN_DONT_FOLLOW)
}

/// Whether this process's descriptors `a` and `b` share one open file description (`kcmp(2)`
/// `KCMP_FILE`), as `2>&1` makes them; `None` when the kernel cannot say (no `CONFIG_KCMP`).
pub fn same_open_file(a: RawFd, b: RawFd) -> Option<bool> {
    const KCMP_FILE: libc::c_long = 0;
    let pid = getpid() as libc::c_long;
    // raw: no kcmp in nix.
    // SAFETY: kcmp takes integers only and reads no memory of this process.
    let r = unsafe {
        libc::syscall(libc::SYS_kcmp, pid, pid, KCMP_FILE, a as libc::c_long, b as libc::c_long)
    };
    match r {
        0 => Some(true),
        1 | 2 => Some(false),
        _ => None,
    }
}

/// Whether descriptor `fd` is open and not `/dev/null` (character device 1:3): output worth
/// relaying somewhere someone reads.
pub fn is_open_and_not_null(fd: RawFd) -> bool {
    use nix::sys::stat::{major, minor};
    let Ok(st) = nix::sys::stat::fstat(fd) else { return false };
    let chr = st.st_mode & libc::S_IFMT == libc::S_IFCHR;
    !(chr && major(st.st_rdev) == 1 && minor(st.st_rdev) == 3)
}

/// Closes `fd` (errors ignored: used on descriptors known to be open, in a child process).
pub fn close(fd: RawFd) {
    let _ = nix::unistd::close(fd);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The range found is the one the kernel shows as this process's command line: the
    /// grandchild of [`hold_detached`] blanks exactly that.
    #[test]
    fn the_command_line_area_is_what_the_kernel_shows() {
        let shown = std::fs::read("/proc/self/cmdline").unwrap();
        let (start, len) = command_line_area().expect("found");
        // SAFETY: the range the kernel reads this process's command line from: mapped,
        // readable memory of the initial stack, not written while the test reads it.
        let area = unsafe { std::slice::from_raw_parts(start as *const u8, len) };
        assert_eq!(area, &shown[..], "another range than /proc/self/cmdline");
    }

    /// A child that hides its command line shows none (nothing of the test's command line,
    /// which a search by command line would match) and the name it took. Control: the parent,
    /// which did not hide it, shows its own.
    #[test]
    fn a_child_that_hides_its_command_line_shows_none_of_it() {
        let (r, w) = std::io::pipe().unwrap();
        let area = command_line_area();
        let Some(pid) = fork().unwrap() else {
            drop(w);
            hide_command_line(area, c"sandgate-hid");
            let mut byte = [0u8; 1];
            let _ = std::io::Read::read(&mut &r, &mut byte);
            exit_now(0)
        };
        drop(r);
        let shown = |what: &str| std::fs::read(format!("/proc/{pid}/{what}")).unwrap();
        // (Polled: the child names itself after the fork, not before it.)
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while shown("comm") != b"sandgate-hid\n" {
            assert!(std::time::Instant::now() < deadline, "never named");
            std::thread::yield_now();
        }
        let cmdline = shown("cmdline");
        assert!(cmdline.iter().all(|b| *b == 0), "shown: {:?}", String::from_utf8_lossy(&cmdline));
        let own = std::fs::read("/proc/self/cmdline").unwrap();
        assert!(own.iter().any(|b| *b != 0), "control: the parent's own");
        drop(w);
        waitpid(pid, true).unwrap();
    }

    /// A descriptor closed detached is closed (its pipe's reader sees the end) once the call
    /// returned, by a process that no longer holds this one's other descriptors (a pipe of the
    /// test stays open for its reader).
    #[test]
    fn a_descriptor_closed_detached_is_closed_and_nothing_else_is_held() {
        let (r, w) = std::io::pipe().unwrap();
        let (other_r, other_w) = std::io::pipe().unwrap();
        let held =
            hold_detached(OwnedFd::from(w), &[], None, None).expect("the grandchild is made");
        // Held until the go-ahead: the reader sees no end yet (the control for the wait below).
        let mut fds = [libc::pollfd { fd: r.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        assert_eq!(poll(&mut fds, 0).unwrap(), 0, "closed before the go-ahead");
        drop(held);
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut &r, &mut buf).unwrap();
        assert!(buf.is_empty());
        drop(other_w);
        std::io::Read::read_to_end(&mut &other_r, &mut buf).unwrap();
        assert!(buf.is_empty(), "the other pipe's end came: no copy of its writer held");
    }

    /// After the close, the directories named are removed in order (a directory, then its
    /// parent), and one that is not empty is left (the control: removal is `rmdir`, never a
    /// tree's removal). What an overlay leaves in its `work` (`#<n>` names, in a directory of
    /// mode 0000) goes first: `b` holds one, and `full` one too, which goes while `kept` stays.
    /// Waited for by the event of the last removal, not by time.
    #[test]
    fn the_directories_named_go_after_the_close_and_a_full_one_stays() {
        use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
        use std::os::unix::fs::PermissionsExt as _;
        let d = tempfile::tempdir().unwrap();
        let (a, b, full) = (d.path().join("a"), d.path().join("a/b"), d.path().join("full"));
        std::fs::create_dir_all(&b).unwrap();
        std::fs::create_dir(&full).unwrap();
        std::fs::write(full.join("kept"), b"x").unwrap();
        std::fs::write(full.join("#1f"), b"").unwrap();
        std::fs::write(b.join("#2a"), b"").unwrap();
        std::fs::set_permissions(&b, std::fs::Permissions::from_mode(0o0)).unwrap();
        let events = Inotify::init(InitFlags::IN_CLOEXEC).unwrap();
        events.add_watch(d.path(), AddWatchFlags::IN_DELETE).unwrap();
        let (r, w) = std::io::pipe().unwrap();
        let names: Vec<CString> = [&b, &full, &a].iter().map(|p| cpath(p).unwrap()).collect();
        drop(hold_detached(OwnedFd::from(w), &names, None, None));
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut &r, &mut buf).unwrap();
        // `a` is the last named: its removal (an event in the watched directory) comes after
        // the others were tried.
        let gone = loop {
            use std::os::fd::AsFd as _;
            let fd = events.as_fd().as_raw_fd();
            let mut fds = [libc::pollfd { fd, events: libc::POLLIN, revents: 0 }];
            if poll(&mut fds, 30_000).unwrap() == 0 {
                break false; // not in 30 s: the removal did not happen
            }
            let got = events.read_events().unwrap();
            if got.iter().any(|e| e.name.as_deref() == Some(std::ffi::OsStr::new("a"))) {
                break true;
            }
        };
        assert!(gone && !a.exists(), "the directory and the one inside it are removed");
        assert!(full.join("kept").exists(), "a directory that is not empty stays");
        assert!(!full.join("#1f").exists(), "an overlay's leftover goes from it");
    }

    /// `statx`'s mount id is the one `/proc/self/fdinfo` shows, and differs between two mounts
    /// (`/` and `/proc`): the control that it is not a constant.
    #[test]
    fn the_mount_id_from_statx_is_fdinfo_s() {
        let fdinfo = |f: &std::fs::File| -> u64 {
            let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", f.as_raw_fd()));
            let info = info.unwrap();
            info.lines().find_map(|l| l.strip_prefix("mnt_id:")).unwrap().trim().parse().unwrap()
        };
        let root = std::fs::File::open("/").unwrap();
        let proc = std::fs::File::open("/proc/self").unwrap();
        use std::os::fd::AsFd as _;
        let (a, b) = (statx_mount_id(root.as_fd()), statx_mount_id(proc.as_fd()));
        assert_eq!(a, Some(fdinfo(&root)));
        assert_eq!(b, Some(fdinfo(&proc)));
        assert_ne!(a, b);
    }

    /// The lock handed on is held by the grandchild until it is done (a second holder cannot
    /// take it while the go-ahead is kept: the control), and free once it is.
    #[test]
    fn a_lock_handed_on_is_held_until_the_grandchild_is_done() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("lock");
        let open = || {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .unwrap()
        };
        let mine = open();
        flock(mine.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB).unwrap();
        let (_r, w) = std::io::pipe().unwrap();
        let held = hold_detached(OwnedFd::from(w), &[], Some(mine.as_raw_fd()), None).unwrap();
        drop(mine);
        let other = open();
        assert!(flock(other.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB).is_err(), "not held");
        drop(held);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(flock(other.as_raw_fd(), libc::LOCK_EX).is_ok()));
        let got = rx.recv_timeout(std::time::Duration::from_secs(30));
        assert_eq!(got, Ok(true), "the lock was not let go");
    }

    /// Red-team finding (a launcher killed with SIGKILL): the go-ahead ends with the launcher,
    /// while init (killed by its parent-death signal) and the processes of its pid namespace
    /// may still be there, and their overlays mounted; the grandchild went ahead at once,
    /// emptied the live overlays' work directories and let their lock go. With the process to
    /// wait for, it lets go of `fd` and removes nothing while that process lives, then does.
    /// Watched by the grandchild's own system call (`ppoll`, in /proc/PID/syscall) with a
    /// deadline, not by time; the control: the removal comes once the process is killed.
    #[test]
    fn the_grandchild_waits_for_the_process_named_when_the_go_ahead_ends_early() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("work");
        std::fs::create_dir(&dir).unwrap();
        let (r, w) = std::io::pipe().unwrap();
        let pipe = format!("pipe:[{}]", nix::sys::stat::fstat(w.as_raw_fd()).unwrap().st_ino);
        // (Killed when this test ends, whichever way: it holds the test's stdout.)
        struct Killed(std::process::Child);
        impl Drop for Killed {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let mut init = Killed(std::process::Command::new("sleep").arg("1000").spawn().unwrap());
        let pidfd = pidfd_open(init.0.id() as libc::pid_t).unwrap();
        let names = [cpath(&dir).unwrap()];
        // The launcher gone at once: its go-ahead with it.
        drop(hold_detached(OwnedFd::from(w), &names, None, Some(pidfd.as_raw_fd())).unwrap());
        drop(pidfd);
        // The grandchild: the one process holding the write end of `pipe`.
        let holder = || {
            std::fs::read_dir("/proc").ok()?.flatten().find_map(|p| {
                let pid: u32 =
                    p.file_name().to_str()?.parse().ok().filter(|&p| p != std::process::id())?;
                let fds = std::fs::read_dir(p.path().join("fd")).ok()?;
                fds.flatten()
                    .any(|f| {
                        std::fs::read_link(f.path()).is_ok_and(|l| l.as_os_str() == pipe.as_str())
                    })
                    .then_some(pid)
            })
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let waiting = loop {
            let call = holder()
                .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/syscall")).ok());
            let nr = call.as_deref().and_then(|c| c.split(' ').next()?.trim().parse::<i64>().ok());
            if nr == Some(libc::SYS_ppoll) {
                break true;
            }
            if !dir.exists() || std::time::Instant::now() > deadline {
                break false;
            }
            std::thread::yield_now();
        };
        assert!(dir.exists(), "removed while the process named lived");
        assert!(waiting, "the grandchild is not waiting for the process named");
        let mut fds = [libc::pollfd { fd: r.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        assert_eq!(poll(&mut fds, 0).unwrap(), 0, "let go of while the process named lived");
        init.0.kill().unwrap();
        init.0.wait().unwrap();
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut &r, &mut buf).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while dir.exists() && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(!dir.exists(), "the control: removed once the process named ended");
    }
}
