//! Descriptors passed with a message over a unix socket (`SCM_RIGHTS`): the launcher's init hands
//! the pty master, proxy listener, DNS and NFLOG sockets to the launcher this way, and the
//! launcher hands them to the daemon. One implementation for both, on `nix`; and the peer's
//! pidfd (`SO_PEERPIDFD`, which nix 0.29 has no option for), with which the daemon refuses
//! requests from inside a sandbox.

#![allow(unsafe_code)] // wrapping the descriptors the kernel installed, once each

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

/// Most descriptors accepted with one message.
pub const MAX_FDS: usize = 8;

/// Most descriptors the kernel passes with one message (`SCM_MAX_FD`).
const SCM_MAX_FD: usize = 253;

/// Sends `data` with `fds` attached (copies: the caller keeps its own). On a stream socket the
/// rest of a long message may take more writes; the descriptors go with the first byte. A peer
/// gone is `EPIPE`, never `SIGPIPE`.
pub fn send_with_fds(sock: impl AsFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut sent = send_once_with_fds(&sock, data, fds)?;
    while sent < data.len() {
        sent += send_once_with_fds(&sock, &data[sent..], &[])?;
    }
    Ok(())
}

/// One `sendmsg` of `data` with `fds` attached: the bytes sent (on a non-blocking socket, maybe
/// fewer than `data`; `EAGAIN` when none, and then the descriptors did not go either, so the call
/// can be made again as it was). `EINTR` is retried.
pub fn send_once_with_fds(sock: impl AsFd, data: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    let fd = sock.as_fd().as_raw_fd();
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let flags = MsgFlags::MSG_NOSIGNAL;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let flags = MsgFlags::empty();
    let iov = [IoSlice::new(data)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &cmsg };
    retry(|| sendmsg::<()>(fd, &iov, cmsgs, flags, None))
}

/// One `recvmsg`: the bytes read (0 at end of stream) and the descriptors that came with them,
/// close-on-exec. Room is made for every descriptor the kernel can pass in one message, so none
/// is installed without being wrapped (and closed); a message with more than [`MAX_FDS`] is an
/// `InvalidData` error. `EINTR` is retried; `EAGAIN` is returned (for non-blocking callers).
pub fn recv_with_fds(sock: impl AsFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let fd = sock.as_fd().as_raw_fd();
    let mut iov = [IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!([RawFd; SCM_MAX_FD]);
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let flags = MsgFlags::MSG_CMSG_CLOEXEC;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let flags = MsgFlags::empty();
    let msg = loop {
        match recvmsg::<()>(fd, &mut iov, Some(&mut space), flags) {
            Err(nix::errno::Errno::EINTR) => continue,
            r => break r.map_err(io::Error::from)?,
        }
    };
    let mut fds = Vec::new();
    for c in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            for r in raw {
                // SAFETY: the kernel just installed `r` in this process for us; nothing else
                // owns it, and it is wrapped exactly once.
                fds.push(unsafe { OwnedFd::from_raw_fd(r) });
            }
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    for f in &fds {
        let _ = nix::fcntl::fcntl(
            f.as_raw_fd(),
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        );
    }
    if msg.flags.contains(MsgFlags::MSG_CTRUNC) || fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("too many descriptors in one message (at most {MAX_FDS})"),
        ));
    }
    Ok((msg.bytes, fds))
}

fn retry(mut call: impl FnMut() -> nix::Result<usize>) -> io::Result<usize> {
    loop {
        match call() {
            Err(nix::errno::Errno::EINTR) => continue,
            r => return r.map_err(io::Error::from),
        }
    }
}

/// A pidfd for the process at the other end of `stream` (`SO_PEERPIDFD`); `Ok(None)` where the
/// kernel (or this architecture's numbering) has no such option.
#[cfg(target_os = "linux")]
pub fn peer_pidfd(stream: impl AsFd) -> std::io::Result<Option<OwnedFd>> {
    use std::os::fd::FromRawFd as _;
    // asm-generic value; the few architectures that number socket options differently fall back
    // to the /proc comparison.
    const SO_PEERPIDFD: Option<libc::c_int> = if cfg!(any(
        target_arch = "x86_64",
        target_arch = "x86",
        target_arch = "aarch64",
        target_arch = "arm",
        target_arch = "riscv64",
        target_arch = "loongarch64"
    )) {
        Some(77)
    } else {
        None
    };
    let Some(option) = SO_PEERPIDFD else { return Ok(None) };
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` and `len` are valid for writes of the sizes given; the kernel writes at most
    // `len` bytes and installs a new descriptor only on success, which is wrapped exactly once.
    let r = unsafe {
        libc::getsockopt(
            stream.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&raw mut fd).cast(),
            &raw mut len,
        )
    };
    if r != 0 || fd < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOPROTOOPT) => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: on success `fd` is a descriptor the kernel just made for us, owned by nobody else.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// A copy of descriptor `fd` of the process `pidfd` refers to (`pidfd_getfd(2)`, Linux 5.6+;
/// the caller needs ptrace access to the process). The copy is close-on-exec. The daemon takes
/// a sandboxed process's sockets this way to read their addresses, then closes them.
#[cfg(target_os = "linux")]
pub fn pidfd_getfd(pidfd: impl AsFd, fd: RawFd) -> io::Result<OwnedFd> {
    // raw: nix 0.29 has neither pidfd_open nor pidfd_getfd.
    // SAFETY: integer arguments; on success the kernel installed a new descriptor for us.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_fd().as_raw_fd(), fd, 0u32) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just made this descriptor, owned by nobody else; wrapped once.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

/// A pidfd of process `pid` (`pidfd_open(2)`): the process itself, whatever later reuses its pid.
#[cfg(target_os = "linux")]
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: integer arguments; on success the kernel installed a new descriptor for us.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd as _;

    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};

    use super::*;

    #[test]
    fn passes_descriptors_with_the_bytes() {
        for ty in [SockType::Stream, SockType::SeqPacket] {
            let (a, b) = socketpair(AddressFamily::Unix, ty, None, SockFlag::empty()).unwrap();
            let (_r, w) = nix::unistd::pipe().expect("pipe");
            send_with_fds(&a, b"hi\n", &[w.as_raw_fd(), w.as_raw_fd()]).expect("send");
            let mut buf = [0u8; 16];
            let (n, fds) = recv_with_fds(&b, &mut buf).expect("recv");
            assert_eq!(&buf[..n], b"hi\n");
            assert_eq!(fds.len(), 2);
            let flags = nix::fcntl::fcntl(fds[0].as_raw_fd(), nix::fcntl::FcntlArg::F_GETFD)
                .expect("F_GETFD");
            assert_ne!(flags & libc::FD_CLOEXEC, 0, "a received descriptor must be close-on-exec");
            // No descriptors, and the end of the stream.
            send_with_fds(&a, b"stopped", &[]).expect("send");
            let (n, fds) = recv_with_fds(&b, &mut buf).expect("recv");
            assert_eq!((&buf[..n], fds.len()), (&b"stopped"[..], 0));
            drop(a);
            assert_eq!(recv_with_fds(&b, &mut buf).expect("eof").0, 0);
        }
    }

    #[test]
    fn too_many_descriptors_are_refused_and_all_closed() {
        let (a, b) = socketpair(AddressFamily::Unix, SockType::Stream, None, SockFlag::empty())
            .expect("socketpair");
        let (r, w) = nix::unistd::pipe().expect("pipe");
        let many = vec![w.as_raw_fd(); MAX_FDS + 6];
        send_with_fds(&a, b"x\n", &many).expect("send");
        drop(w);
        let mut buf = [0u8; 16];
        let err = recv_with_fds(&b, &mut buf).expect_err("more than MAX_FDS");
        assert!(err.to_string().contains("too many descriptors"), "{err}");
        // Every copy of the pipe's write end is closed again: the read end sees end of file
        // at once instead of blocking for ever.
        let mut one = [0u8; 1];
        assert_eq!(nix::unistd::read(r.as_raw_fd(), &mut one).expect("read"), 0);
    }

    /// A peer gone is an error, not a SIGPIPE that would kill the sender.
    #[test]
    fn a_closed_peer_is_an_error() {
        let (a, b) =
            socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::empty()).unwrap();
        drop(b);
        let err = send_with_fds(&a, b"ok", &[]).expect_err("peer gone");
        assert_eq!(err.raw_os_error(), Some(libc::EPIPE));
    }
}
