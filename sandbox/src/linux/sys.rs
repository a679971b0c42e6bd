//! Thin wrappers over the kernel calls the launcher needs. All `unsafe` of the crate lives here.
//!
//! Every wrapper returns `io::Result` with `errno` preserved, so callers can name the failing step.

#![allow(unsafe_code)]

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

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

/// Plain `fork(2)`. Same single-thread requirement as [`clone_fork`].
pub fn fork() -> io::Result<Option<libc::pid_t>> {
    clone_fork(0)
}

/// `mount_setattr(2)` on `path` (and every mount below it when `recursive`).
pub fn mount_setattr(path: &Path, set: u64, clear: u64, recursive: bool) -> io::Result<()> {
    let path = cpath(path)?;
    let attr = MountAttr { attr_set: set, attr_clr: clear, propagation: 0, userns_fd: 0 };
    let flags = if recursive { AT_RECURSIVE } else { 0 };
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
    // SAFETY: prctl with integer arguments only.
    cvt_i(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }).map(drop)
}

/// `prctl(PR_SET_NAME, name)`: the name `/proc/PID/comm` shows (at most 15 bytes kept).
pub fn set_name(name: &CStr) -> io::Result<()> {
    // SAFETY: a valid NUL-terminated string; the kernel copies at most 16 bytes of it.
    cvt_i(unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0) }).map(drop)
}

/// Whether the mount holding `path` is read-only (`statvfs`'s `ST_RDONLY`).
pub fn on_read_only_mount(path: &Path) -> io::Result<bool> {
    let c = cpath(path)?;
    // SAFETY: a zeroed statvfs is a valid out-parameter; `c` is a valid C string.
    let mut st = unsafe { std::mem::zeroed::<libc::statvfs>() };
    // SAFETY: valid path pointer and a pointer to our own statvfs.
    cvt_i(unsafe { libc::statvfs(c.as_ptr(), &mut st) })?;
    Ok(st.f_flag & libc::ST_RDONLY != 0)
}

/// `prctl(PR_SET_DUMPABLE, on)`.
pub fn set_dumpable(on: bool) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    cvt_i(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, libc::c_ulong::from(on), 0, 0, 0) }).map(drop)
}

/// `prctl(PR_SET_PDEATHSIG, sig)`.
pub fn set_parent_death_signal(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    cvt_i(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig, 0, 0, 0) }).map(drop)
}

/// Drops every capability: bounding set, ambient set, inheritable/permitted/effective sets, and
/// locks the securebits so that executing a program as uid 0 grants nothing back.
pub fn drop_all_capabilities() -> io::Result<()> {
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
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 }
}

/// `setsid(2)`.
pub fn setsid() -> io::Result<()> {
    // SAFETY: no arguments.
    cvt_i(unsafe { libc::setsid() }).map(drop)
}

/// `setpgid(pid, pgid)`.
pub fn setpgid(pid: libc::pid_t, pgid: libc::pid_t) -> io::Result<()> {
    // SAFETY: integer arguments only.
    cvt_i(unsafe { libc::setpgid(pid, pgid) }).map(drop)
}

/// `sethostname(2)`.
pub fn sethostname(name: &str) -> io::Result<()> {
    // SAFETY: pointer and length of a live byte slice.
    cvt_i(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) }).map(drop)
}

/// `kill(pid, sig)`.
pub fn kill(pid: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: integer arguments only.
    cvt_i(unsafe { libc::kill(pid, sig) }).map(drop)
}

/// A set of signals.
pub struct SigSet(libc::sigset_t);

impl SigSet {
    /// The set holding exactly `signals`.
    pub fn of(signals: &[libc::c_int]) -> Self {
        // SAFETY: sigemptyset/sigaddset initialise and fill a sigset_t we own.
        unsafe {
            let mut set = std::mem::zeroed::<libc::sigset_t>();
            libc::sigemptyset(&mut set);
            for &s in signals {
                libc::sigaddset(&mut set, s);
            }
            SigSet(set)
        }
    }

    /// Blocks these signals in the calling thread.
    pub fn block(&self) -> io::Result<()> {
        // SAFETY: valid sigset pointer; old set not requested.
        let ret = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &self.0, std::ptr::null_mut()) };
        if ret != 0 { Err(io::Error::from_raw_os_error(ret)) } else { Ok(()) }
    }

    /// Makes this the calling thread's whole signal mask.
    pub fn set_mask(&self) -> io::Result<()> {
        // SAFETY: valid sigset pointer; old set not requested.
        let ret =
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
        if ret != 0 { Err(io::Error::from_raw_os_error(ret)) } else { Ok(()) }
    }

    /// Waits for one of these (blocked) signals; `None` on timeout.
    pub fn wait(&self, timeout_ms: Option<u64>) -> io::Result<Option<libc::c_int>> {
        loop {
            let ts = timeout_ms.map(|ms| libc::timespec {
                tv_sec: (ms / 1000) as libc::time_t,
                tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
            });
            let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
            // SAFETY: valid sigset and optional timespec pointers; siginfo not requested.
            let ret = unsafe { libc::sigtimedwait(&self.0, std::ptr::null_mut(), tsp) };
            if ret >= 0 {
                return Ok(Some(ret));
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok(None),
                _ => return Err(err),
            }
        }
    }
}

extern "C" fn noop_handler(_: libc::c_int) {}

/// Installs a handler that does nothing for `sig`. Needed by pid 1 of a pid namespace: the kernel
/// drops signals whose disposition is the default before they can be waited for.
pub fn install_noop_handler(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: a zeroed sigaction with a valid handler function pointer and an empty mask.
    unsafe {
        let mut sa = std::mem::zeroed::<libc::sigaction>();
        sa.sa_sigaction = noop_handler as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = libc::SA_RESTART;
        cvt_i(libc::sigaction(sig, &sa, std::ptr::null_mut())).map(drop)
    }
}

/// Ignores `sig` (`SIG_IGN`); an ignored signal stays ignored across exec.
pub fn ignore_signal(sig: libc::c_int) {
    // SAFETY: setting SIG_IGN is always valid for catchable signals; errors are irrelevant.
    unsafe {
        libc::signal(sig, libc::SIG_IGN);
    }
}

/// This process's id.
pub fn getpid() -> libc::pid_t {
    // SAFETY: getpid cannot fail.
    unsafe { libc::getpid() }
}

/// Makes `pgrp` the foreground process group of the terminal on `fd` (`tcsetpgrp`).
pub fn set_foreground(fd: RawFd, pgrp: libc::pid_t) -> io::Result<()> {
    // SAFETY: plain integer arguments.
    cvt_i(unsafe { libc::tcsetpgrp(fd, pgrp) }).map(drop)
}

/// Restores the default disposition of `sig`.
pub fn default_handler(sig: libc::c_int) {
    // SAFETY: setting SIG_DFL is always valid for catchable signals; errors are irrelevant.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
    }
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
    // SAFETY: socket() with constant arguments.
    let fd =
        cvt_i(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: fd was just returned to us.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
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
    let mut fds = [0; 2];
    // SAFETY: valid pointer to two ints.
    cvt_i(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: both fds were just returned to us.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

const MAX_FDS: usize = 8;

/// Sends one message with up to four file descriptors attached (`SCM_RIGHTS`).
pub fn send_with_fds(sock: &OwnedFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many fds"));
    }
    let mut iov = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
    // A buffer aligned for cmsghdr, large enough for MAX_FDS descriptors.
    let mut cbuf = [0u64; 8];
    // SAFETY: msghdr/cmsghdr manipulation within `cbuf`, whose size covers CMSG_SPACE of MAX_FDS
    // ints; all pointers refer to locals alive during sendmsg.
    unsafe {
        let mut msg = std::mem::zeroed::<libc::msghdr>();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            let len = std::mem::size_of_val(fds) as u32;
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(len) as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(len) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr(),
                libc::CMSG_DATA(cmsg).cast::<RawFd>(),
                fds.len(),
            );
        }
        cvt(libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) as libc::c_long).map(drop)
    }
}

/// Receives one message (up to `buf.len()` bytes) and the descriptors attached to it.
/// Returns 0 bytes at end of stream.
pub fn recv_with_fds(sock: &OwnedFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut cbuf = [0u64; 8];
    // SAFETY: as in `send_with_fds`; received descriptors are taken into OwnedFd exactly once.
    unsafe {
        let mut msg = std::mem::zeroed::<libc::msghdr>();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
        let n = loop {
            let n = libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
            if n >= 0 {
                break n as usize;
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EINTR) {
                return Err(err);
            }
        };
        let mut fds = Vec::new();
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let payload = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let count = payload / std::mem::size_of::<RawFd>();
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        Ok((n, fds))
    }
}

/// `execve(2)`; returns only on failure.
pub fn execve(path: &CStr, argv: &[CString], envp: &[CString]) -> io::Error {
    let mut args: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    args.push(std::ptr::null());
    let mut env: Vec<*const libc::c_char> = envp.iter().map(|a| a.as_ptr()).collect();
    env.push(std::ptr::null());
    // SAFETY: NULL-terminated arrays of valid C strings that outlive the call.
    unsafe {
        libc::execve(path.as_ptr(), args.as_ptr(), env.as_ptr());
    }
    io::Error::last_os_error()
}

/// `_exit(code)`: leaves without running destructors or atexit handlers (for forked children).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and is async-signal-safe.
    unsafe { libc::_exit(code) }
}

/// Number of threads of the calling process.
pub fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(1, |d| d.count())
}

/// Real uid and gid of the calling process.
pub fn ids() -> (u32, u32) {
    // SAFETY: getuid/getgid cannot fail.
    unsafe { (libc::getuid(), libc::getgid()) }
}

/// Whether `fd` refers to a terminal.
pub fn isatty(fd: RawFd) -> bool {
    // SAFETY: isatty takes an integer and only queries the descriptor.
    unsafe { libc::isatty(fd) == 1 }
}

/// `tcgetattr(3)`.
pub fn tcgetattr(fd: RawFd) -> io::Result<libc::termios> {
    // SAFETY: a zeroed termios is a valid out-buffer; tcgetattr fills it.
    unsafe {
        let mut t = std::mem::zeroed::<libc::termios>();
        cvt_i(libc::tcgetattr(fd, &mut t))?;
        Ok(t)
    }
}

/// `tcsetattr(fd, TCSANOW, t)`.
pub fn tcsetattr(fd: RawFd, t: &libc::termios) -> io::Result<()> {
    loop {
        // SAFETY: valid pointer to a termios we own.
        match cvt_i(unsafe { libc::tcsetattr(fd, libc::TCSANOW, t) }) {
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            r => return r.map(drop),
        }
    }
}

/// `t` switched to raw mode (`cfmakeraw(3)`).
pub fn raw_termios(t: &libc::termios) -> libc::termios {
    let mut raw = *t;
    // SAFETY: cfmakeraw only edits the struct it is given.
    unsafe { libc::cfmakeraw(&mut raw) };
    raw
}

/// `ioctl(fd, TIOCGWINSZ)`.
pub fn get_winsize(fd: RawFd) -> io::Result<libc::winsize> {
    // SAFETY: a zeroed winsize is a valid out-buffer for TIOCGWINSZ.
    unsafe {
        let mut w = std::mem::zeroed::<libc::winsize>();
        cvt_i(libc::ioctl(fd, libc::TIOCGWINSZ, &mut w))?;
        Ok(w)
    }
}

/// `ioctl(fd, TIOCSWINSZ, w)`.
pub fn set_winsize(fd: RawFd, w: &libc::winsize) -> io::Result<()> {
    // SAFETY: valid pointer to a winsize we own.
    cvt_i(unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, w) }).map(drop)
}

/// A new pseudo-terminal from `/dev/ptmx` (the devpts instance of the caller's mount namespace):
/// `(master, slave)`, both close-on-exec, the slave opened through the master (`TIOCGPTPEER`)
/// so no path lookup can substitute another terminal.
pub fn open_pty() -> io::Result<(OwnedFd, OwnedFd)> {
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: constant NUL-terminated path.
    let m = cvt_i(unsafe { libc::open(c"/dev/ptmx".as_ptr(), flags) })?;
    // SAFETY: the kernel just returned this fd to us.
    let master = unsafe { OwnedFd::from_raw_fd(m) };
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads an int from a valid pointer.
    cvt_i(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock) })?;
    // SAFETY: TIOCGPTPEER takes open flags by value and returns a new fd.
    let s = cvt_i(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTPEER, flags) })?;
    // SAFETY: the kernel just returned this fd to us.
    Ok((master, unsafe { OwnedFd::from_raw_fd(s) }))
}

/// `ioctl(fd, TIOCSCTTY, 0)`: makes the terminal the controlling terminal of the caller's session
/// (the caller must be a session leader without one).
pub fn set_controlling_tty(fd: RawFd) -> io::Result<()> {
    // SAFETY: TIOCSCTTY takes an integer argument.
    cvt_i(unsafe { libc::ioctl(fd, libc::TIOCSCTTY, 0) }).map(drop)
}

/// `dup2(from, to)`.
pub fn dup2(from: RawFd, to: RawFd) -> io::Result<()> {
    // SAFETY: integer arguments only.
    cvt_i(unsafe { libc::dup2(from, to) }).map(drop)
}

/// Whether `path` is the root of a procfs mount (not a directory dressed up as one).
pub fn is_procfs(path: &Path) -> bool {
    let Ok(p) = cpath(path) else { return false };
    // SAFETY: a NUL-terminated path and a zeroed statfs the call fills in.
    unsafe {
        let mut st = std::mem::zeroed::<libc::statfs>();
        libc::statfs(p.as_ptr(), &mut st) == 0 && st.f_type == libc::PROC_SUPER_MAGIC
    }
}

/// Whether the kernel refuses this process a new user namespace with `EPERM`, tried in a forked
/// child (a successful `unshare` would move the caller). The child makes only async-signal-safe
/// calls, so this is sound in a process with threads too.
pub fn user_namespace_refused() -> bool {
    // SAFETY: the child calls only unshare and _exit before it ends.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => false,
        0 => {
            // SAFETY: integer arguments; __errno_location is async-signal-safe.
            unsafe {
                let refused = libc::unshare(libc::CLONE_NEWUSER) == -1
                    && *libc::__errno_location() == libc::EPERM;
                libc::_exit(if refused { 1 } else { 0 })
            }
        }
        child => matches!(waitpid(child, true), Ok(Some((_, Ended::Exit(1))))),
    }
}

/// Marks every descriptor from 3 up close-on-exec, so that a command executed next gets only
/// stdin, stdout and stderr. Descriptors the caller left open point at the host's own mounts:
/// through them a command would read hidden files or write outside, whatever its walls say.
/// `close_range(CLOSE_RANGE_CLOEXEC)` (Linux 5.11); older kernels: each open descriptor in turn.
pub fn cloexec_from_3() {
    const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;
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
        // SAFETY: fcntl on an integer descriptor; a closed one answers EBADF.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
}

/// Closes every descriptor of the process except those in `keep`.
pub fn close_all_except(keep: &[RawFd]) {
    let mut keep: Vec<u32> = keep.iter().filter_map(|&f| u32::try_from(f).ok()).collect();
    keep.sort_unstable();
    let mut from = 0u32;
    for k in keep.into_iter().chain(std::iter::once(u32::MAX)) {
        if k > from {
            // SAFETY: close_range with integer arguments; closing descriptors we do not use.
            unsafe { libc::syscall(libc::SYS_close_range, from, k - 1, 0u32) };
        }
        from = k.saturating_add(1);
    }
}

/// `pidfd_open(pid, 0)`.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: integer arguments; the returned fd is ours.
    let fd = cvt(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) })? as RawFd;
    // SAFETY: the kernel just returned this fd to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `poll(2)`; an interruption counts as "nothing ready".
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: pointer and length of a live slice of pollfd.
    let ret = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    match cvt_i(ret) {
        Ok(n) => Ok(n as usize),
        Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(0),
        Err(e) => Err(e),
    }
}

/// A non-blocking, close-on-exec `signalfd` for these (blocked) signals.
pub fn signalfd(set: &SigSet) -> io::Result<OwnedFd> {
    // SAFETY: valid sigset pointer; -1 asks for a new descriptor.
    let fd = cvt_i(unsafe { libc::signalfd(-1, &set.0, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) })?;
    // SAFETY: the kernel just returned this fd to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads one signal from a non-blocking signalfd; `None` when none is pending.
pub fn read_signal(fd: &OwnedFd) -> io::Result<Option<libc::c_int>> {
    // SAFETY: a zeroed signalfd_siginfo is a valid buffer of the size we pass.
    unsafe {
        let mut info = std::mem::zeroed::<libc::signalfd_siginfo>();
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        let n = libc::read(fd.as_raw_fd(), (&mut info as *mut libc::signalfd_siginfo).cast(), size);
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EINTR) => Ok(None),
                _ => Err(e),
            };
        }
        Ok((n as usize == size).then_some(info.ssi_signo as libc::c_int))
    }
}

/// `read(2)`, retried on `EINTR`.
pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: pointer and length of a live, writable buffer.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// `write(2)`, retried on `EINTR`.
pub fn write(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    loop {
        // SAFETY: pointer and length of a live buffer.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// Sets `O_NONBLOCK` on a descriptor.
pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl with integer arguments only.
    unsafe {
        let flags = cvt_i(libc::fcntl(fd, libc::F_GETFL))?;
        cvt_i(libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK)).map(drop)
    }
}

/// Stops the calling process (`SIGSTOP` to itself) until a `SIGCONT`.
pub fn stop_self() {
    // SAFETY: getpid cannot fail; kill with integer arguments.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGSTOP);
    }
}

/// `flock(fd, op)`, retried on `EINTR`.
pub fn flock(fd: RawFd, op: libc::c_int) -> io::Result<()> {
    loop {
        // SAFETY: integer arguments only.
        match cvt_i(unsafe { libc::flock(fd, op) }) {
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            r => return r.map(drop),
        }
    }
}

/// Sends netlink `bytes` (one or more messages) on a new `NETLINK_ROUTE` or `NETLINK_NETFILTER`
/// socket and reads `acks` acknowledgements; the first error the kernel reports is returned (as
/// the errno it carries).
pub fn netlink_transact(protocol: libc::c_int, bytes: &[u8], acks: usize) -> io::Result<()> {
    // SAFETY: socket() with constant arguments.
    let fd = cvt_i(unsafe {
        libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol)
    })?;
    // SAFETY: fd was just returned to us.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a zeroed sockaddr_nl (pid 0: the kernel) of the right size.
    let sent = unsafe {
        let mut addr: libc::sockaddr_nl = std::mem::zeroed();
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        libc::sendto(
            sock.as_raw_fd(),
            bytes.as_ptr().cast(),
            bytes.len(),
            0,
            (&raw const addr).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if usize::try_from(cvt(sent as libc::c_long)?).ok() != Some(bytes.len()) {
        return Err(io::Error::other("netlink: short send"));
    }
    let mut seen = 0;
    let mut buf = vec![0u8; 16384];
    while seen < acks {
        // SAFETY: buf is valid for its length.
        let n = cvt(unsafe {
            libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) as libc::c_long
        })?;
        let mut at = 0;
        let n = usize::try_from(n).unwrap_or(0);
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
    let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: c is a valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(io::Error::last_os_error()),
        i => Ok(i),
    }
}

/// `inotify_init1(IN_CLOEXEC | IN_NONBLOCK)`.
pub fn inotify_init() -> io::Result<OwnedFd> {
    // SAFETY: no pointers; the descriptor returned is new and owned by us.
    let fd = cvt_i(unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) })?;
    // SAFETY: fd was just returned by the kernel and is not owned elsewhere.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `inotify_add_watch(2)`.
pub fn inotify_add_watch(fd: &OwnedFd, path: &Path, mask: u32) -> io::Result<i32> {
    let p = cpath(path)?;
    // SAFETY: p is a valid C string for the duration of the call.
    cvt_i(unsafe { libc::inotify_add_watch(fd.as_raw_fd(), p.as_ptr(), mask) })
}

/// `renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE)`: moves the entry itself (a
/// symlink is not followed), never over an existing one.
pub fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    let (f, t) = (cpath(from)?, cpath(to)?);
    // SAFETY: both are valid C strings for the duration of the call.
    cvt_i(unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    })?;
    Ok(())
}

/// Whether this process's descriptors `a` and `b` share one open file description (`kcmp(2)`
/// `KCMP_FILE`), as `2>&1` makes them; `None` when the kernel cannot say (no `CONFIG_KCMP`).
pub fn same_open_file(a: RawFd, b: RawFd) -> Option<bool> {
    const KCMP_FILE: libc::c_long = 0;
    let pid = getpid() as libc::c_long;
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
    // SAFETY: fstat writes only into `st`, a properly sized and aligned stat buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; an invalid `fd` is reported as EBADF.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return false;
    }
    let chr = st.st_mode & libc::S_IFMT == libc::S_IFCHR;
    !(chr && libc::major(st.st_rdev) == 1 && libc::minor(st.st_rdev) == 3)
}

/// Closes `fd` (errors ignored: used on descriptors known to be open, in a child process).
pub fn close(fd: RawFd) {
    // SAFETY: closing a descriptor number the caller owns; nothing else in this process uses it.
    unsafe {
        libc::close(fd);
    }
}
