//! Descriptors passed over the control socket (`SCM_RIGHTS`).

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{FromRawFd as _, OwnedFd, RawFd};

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

/// Most descriptors accepted with one message.
pub const MAX_FDS: usize = 4;

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

/// One `recvmsg`: the bytes read (0 at end of stream) and the descriptors that came with them.
/// Descriptors beyond [`MAX_FDS`] are truncated by the kernel (`MSG_CTRUNC`) and reported as an
/// error.
pub fn recv_with_fds(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = [IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
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
    if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "too many descriptors in one message",
        ));
    }
    Ok((msg.bytes, fds))
}
