//! Descriptors passed over the control socket (`SCM_RIGHTS`).

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
