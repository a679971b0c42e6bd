//! Descriptors the kernel gives us over a unix socket: those a launcher passes with a control
//! message (`SCM_RIGHTS`), and a pidfd of the peer (`SO_PEERPIDFD`).
//!
//! The one module of this crate with `unsafe`: nix 0.29 sends and receives `SCM_RIGHTS` but
//! hands the received descriptors back as `RawFd`s, and has no `SO_PEERPIDFD` option, so each
//! new descriptor the kernel installs is wrapped in an [`OwnedFd`] here, exactly once.

#![allow(unsafe_code)]

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{FromRawFd as _, OwnedFd, RawFd};

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

/// Most descriptors accepted with one message.
pub const MAX_FDS: usize = 8;

/// Sends `data` with `fds` attached (copies: the caller keeps its own).
pub fn send_with_fds(
    sock: &impl std::os::fd::AsRawFd,
    data: &[u8],
    fds: &[RawFd],
) -> io::Result<()> {
    let iov = [IoSlice::new(data)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &cmsg };
    let mut sent = sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::empty(), None)
        .map_err(io::Error::from)?;
    // Descriptors go with the first byte; the rest of a long line may need more writes.
    while sent < data.len() {
        let iov = [IoSlice::new(&data[sent..])];
        sent += sendmsg::<()>(sock.as_raw_fd(), &iov, &[], MsgFlags::empty(), None)
            .map_err(io::Error::from)?;
    }
    Ok(())
}

/// Most descriptors the kernel passes with one message (`SCM_MAX_FD`).
const SCM_MAX_FD: usize = 253;

/// One `recvmsg`: the bytes read (0 at end of stream) and the descriptors that came with them.
/// Room is made for every descriptor the kernel can pass in one message, so none is installed
/// without being wrapped (and closed); a message with more than [`MAX_FDS`] is an error.
pub fn recv_with_fds(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = [IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!([RawFd; SCM_MAX_FD]);
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let flags = MsgFlags::MSG_CMSG_CLOEXEC;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let flags = MsgFlags::empty();
    let msg = recvmsg::<()>(fd, &mut iov, Some(&mut space), flags).map_err(io::Error::from)?;
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
        use std::os::fd::AsRawFd as _;
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

/// A pidfd for the process at the other end of `stream` (`SO_PEERPIDFD`); `Ok(None)` where the
/// kernel (or this architecture's numbering) has no such option.
#[cfg(target_os = "linux")]
pub(crate) fn peer_pidfd(stream: &impl std::os::fd::AsRawFd) -> std::io::Result<Option<OwnedFd>> {
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
            stream.as_raw_fd(),
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

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd as _;

    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};

    use super::*;

    #[test]
    fn passes_descriptors_with_the_bytes() {
        let (a, b) = socketpair(AddressFamily::Unix, SockType::Stream, None, SockFlag::empty())
            .expect("socketpair");
        let (_r, w) = nix::unistd::pipe().expect("pipe");
        send_with_fds(&a, b"hi\n", &[w.as_raw_fd(), w.as_raw_fd()]).expect("send");
        let mut buf = [0u8; 16];
        let (n, fds) = recv_with_fds(b.as_raw_fd(), &mut buf).expect("recv");
        assert_eq!(&buf[..n], b"hi\n");
        assert_eq!(fds.len(), 2);
        let flags =
            nix::fcntl::fcntl(fds[0].as_raw_fd(), nix::fcntl::FcntlArg::F_GETFD).expect("F_GETFD");
        assert_ne!(flags & libc::FD_CLOEXEC, 0, "a received descriptor must be close-on-exec");
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
        let err = recv_with_fds(b.as_raw_fd(), &mut buf).expect_err("more than MAX_FDS");
        assert!(err.to_string().contains("too many descriptors"), "{err}");
        // Every copy of the pipe's write end is closed again: the read end sees end of file
        // at once instead of blocking for ever.
        let mut one = [0u8; 1];
        assert_eq!(nix::unistd::read(r.as_raw_fd(), &mut one).expect("read"), 0);
    }
}
