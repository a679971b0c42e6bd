//! The NFLOG netlink socket (Linux). Everything here goes through `nix`, so no `unsafe`.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::{Duration, Instant, SystemTime};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recv, sendto,
    setsockopt, socket, sockopt,
};
use tokio::io::unix::AsyncFd;

use super::{NLMSG_ERROR, NLMSG_HDRLEN, ack_errno, cfg, config_message, decode_datagram, seq_of};
use crate::{BlockedPacket, MonitorError};

/// Largest datagram the kernel sends for NFLOG (`nlbufsiz` is capped at 128 KiB) plus headroom.
const RECV_BUF: usize = 256 * 1024;
/// Datagrams read per call before returning, so one call cannot run forever under a flood.
const MAX_DATAGRAMS_PER_CALL: usize = 64;

/// How the NFLOG instance is configured by [`NflogSocket::open_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NflogConfig {
    /// Bytes of each packet copied to user space (headers are all the monitor needs).
    pub copy_range: u32,
    /// Flush timeout in 1/100 s: how long the kernel may batch before sending.
    pub flush_timeout_cs: u32,
    /// Messages per batch before the kernel sends.
    pub queue_threshold: u32,
    /// Kernel batch buffer size in bytes.
    pub kernel_buffer: u32,
    /// Socket receive buffer asked for (`SO_RCVBUFFORCE` as root, else `SO_RCVBUF`).
    pub socket_buffer: usize,
}

impl Default for NflogConfig {
    fn default() -> Self {
        NflogConfig {
            copy_range: 256,
            flush_timeout_cs: 1,
            queue_threshold: 64,
            kernel_buffer: 64 * 1024,
            socket_buffer: 4 * 1024 * 1024,
        }
    }
}

/// Counters of an [`NflogSocket`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NflogStats {
    /// Datagrams read.
    pub datagrams: u64,
    /// Blocked packets decoded.
    pub packets: u64,
    /// Records that could not be decoded.
    pub malformed: u64,
    /// Times the kernel reported `ENOBUFS`: records were lost because the socket buffer was full.
    pub overruns: u64,
}

/// A netlink socket bound to one NFLOG group in the network namespace it was created in.
///
/// Lifecycle: [`open`](Self::open) (socket, bind, configure — inside the sandbox's namespace, by
/// the launcher) → hand the fd over ([`into_fd`](Self::into_fd) / [`from_fd`](Self::from_fd)) →
/// [`recv`](Self::recv) (blocking) or [`into_async`](Self::into_async) (tokio) → drop (the kernel
/// unbinds the group when the socket closes).
#[derive(Debug)]
pub struct NflogSocket {
    fd: OwnedFd,
    buf: Vec<u8>,
    pending: Vec<BlockedPacket>,
    stats: NflogStats,
}

impl NflogSocket {
    /// Opens a socket bound to NFLOG `group` with [`NflogConfig::default`] (256-byte copy range,
    /// 10 ms flush timeout).
    pub fn open(group: u16) -> io::Result<Self> {
        Self::open_with(group, &NflogConfig::default())
    }

    /// Opens a socket bound to NFLOG `group` configured by `config`.
    ///
    /// Fails with the kernel's errno, e.g. `EBUSY` when another socket in this namespace holds the
    /// group, `EPERM` without `CAP_NET_ADMIN` over the namespace.
    pub fn open_with(group: u16, config: &NflogConfig) -> io::Result<Self> {
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkNetFilter,
        )?;
        bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0))?;
        // A bigger buffer makes overruns rarer; not getting it is not an error.
        if setsockopt(&fd, sockopt::RcvBufForce, &config.socket_buffer).is_err() {
            let _ = setsockopt(&fd, sockopt::RcvBuf, &config.socket_buffer);
        }
        let mut sock = Self::from_fd(fd);
        // Legacy per-family (un)binding: required before 3.17, a no-op since; errors ignored.
        for family in [libc_af::INET, libc_af::INET6] {
            let _ = sock.request(family, 0, "PF_UNBIND", &[(cfg::CMD, &[cfg::CMD_PF_UNBIND])]);
            let _ = sock.request(family, 0, "PF_BIND", &[(cfg::CMD, &[cfg::CMD_PF_BIND])]);
        }
        sock.request(0, group, "BIND", &[(cfg::CMD, &[cfg::CMD_BIND])])?;
        let mut mode = config.copy_range.to_be_bytes().to_vec();
        mode.extend_from_slice(&[cfg::COPY_PACKET, 0]);
        sock.request(0, group, "MODE", &[(cfg::MODE, &mode)])?;
        sock.request(
            0,
            group,
            "TIMEOUT",
            &[(cfg::TIMEOUT, &config.flush_timeout_cs.to_be_bytes())],
        )?;
        sock.request(
            0,
            group,
            "QTHRESH",
            &[(cfg::QTHRESH, &config.queue_threshold.to_be_bytes())],
        )?;
        sock.request(
            0,
            group,
            "NLBUFSIZ",
            &[(cfg::NLBUFSIZ, &config.kernel_buffer.to_be_bytes())],
        )?;
        Ok(sock)
    }

    /// Wraps a socket that was opened and configured elsewhere (e.g. received over `SCM_RIGHTS`
    /// from the launcher).
    pub fn from_fd(fd: OwnedFd) -> Self {
        NflogSocket {
            fd,
            buf: vec![0; RECV_BUF],
            pending: Vec::new(),
            stats: NflogStats::default(),
        }
    }

    /// Gives up the socket's file descriptor (to pass it to another process).
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }

    /// Counters so far.
    pub fn stats(&self) -> NflogStats {
        self.stats
    }

    /// Sends one config request and waits for its ACK; packets that arrive meanwhile are kept for
    /// the next [`recv`](Self::recv).
    fn request(
        &mut self,
        family: u8,
        group: u16,
        what: &'static str,
        attrs: &[(u16, &[u8])],
    ) -> io::Result<()> {
        let seq = next_seq();
        let msg = config_message(seq, family, group, attrs);
        sendto(self.fd.as_raw_fd(), &msg, &NetlinkAddr::new(0, 0), MsgFlags::empty())?;
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !wait_readable(self.fd.as_fd(), left)? {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no ACK for NFLOG {what}"),
                ));
            }
            let n = match recv(self.fd.as_raw_fd(), &mut self.buf, MsgFlags::MSG_DONTWAIT) {
                Ok(n) => n,
                Err(Errno::EAGAIN | Errno::EINTR) => continue,
                Err(Errno::ENOBUFS) => {
                    self.stats.overruns += 1;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let dgram = &self.buf[..n];
            let mut answer = None;
            let mut off = 0;
            while dgram.len().saturating_sub(off) >= NLMSG_HDRLEN {
                let len = u32::from_ne_bytes([
                    dgram[off],
                    dgram[off + 1],
                    dgram[off + 2],
                    dgram[off + 3],
                ]) as usize;
                let ty = u16::from_ne_bytes([dgram[off + 4], dgram[off + 5]]);
                if len < NLMSG_HDRLEN || off + len > dgram.len() {
                    break;
                }
                let m = &dgram[off..off + len];
                if ty == NLMSG_ERROR && seq_of(m) == Some(seq) {
                    answer = ack_errno(m);
                }
                off += (len + 3) & !3;
            }
            let s = decode_datagram(dgram, SystemTime::now(), &mut self.pending);
            self.stats.packets += s.packets as u64;
            self.stats.malformed += s.malformed as u64;
            match answer {
                Some(0) => return Ok(()),
                Some(errno) => {
                    let e = io::Error::from_raw_os_error(errno);
                    return Err(io::Error::new(
                        e.kind(),
                        format!("NFLOG {what} for group {group}: {e}"),
                    ));
                }
                None => {}
            }
        }
    }

    /// Waits up to `timeout` for blocked packets and returns all that are ready (possibly none).
    ///
    /// Every NFLOG message in every datagram read is decoded; malformed records and `ENOBUFS`
    /// overruns are counted in [`stats`](Self::stats), never returned as errors.
    pub fn recv(&mut self, timeout: Duration) -> Result<Vec<BlockedPacket>, MonitorError> {
        let mut out = std::mem::take(&mut self.pending);
        if !out.is_empty() {
            return Ok(out);
        }
        let ready = wait_readable(self.fd.as_fd(), timeout)
            .map_err(|source| MonitorError::Io { op: "poll NFLOG socket", source })?;
        if ready {
            self.drain(&mut out)?;
        }
        Ok(out)
    }

    /// Reads datagrams without blocking until none is left (or a per-call cap); returns whether
    /// the socket ran dry (`EAGAIN`).
    fn drain(&mut self, out: &mut Vec<BlockedPacket>) -> Result<bool, MonitorError> {
        out.append(&mut self.pending);
        for _ in 0..MAX_DATAGRAMS_PER_CALL {
            match recv(self.fd.as_raw_fd(), &mut self.buf, MsgFlags::MSG_DONTWAIT) {
                Ok(n) => {
                    self.stats.datagrams += 1;
                    let s = decode_datagram(&self.buf[..n], SystemTime::now(), out);
                    self.stats.packets += s.packets as u64;
                    self.stats.malformed += s.malformed as u64;
                }
                Err(Errno::EAGAIN) => return Ok(true),
                Err(Errno::EINTR) => {}
                // The kernel dropped records because our buffer was full: count, keep going.
                Err(Errno::ENOBUFS) => self.stats.overruns += 1,
                Err(e) => return Err(MonitorError::Io { op: "recv NFLOG", source: e.into() }),
            }
        }
        Ok(false)
    }

    /// Wraps the socket for use on a tokio runtime (must be called within one).
    pub fn into_async(self) -> io::Result<AsyncNflogSocket> {
        Ok(AsyncNflogSocket { inner: reactor::register(self)? })
    }
}

impl AsFd for NflogSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for NflogSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// An [`NflogSocket`] driven by tokio's reactor (for the daemon).
#[derive(Debug)]
pub struct AsyncNflogSocket {
    inner: AsyncFd<NflogSocket>,
}

impl AsyncNflogSocket {
    /// Waits until at least one blocked packet was decoded and returns all that are ready.
    pub async fn recv(&mut self) -> Result<Vec<BlockedPacket>, MonitorError> {
        loop {
            let mut guard = self
                .inner
                .readable_mut()
                .await
                .map_err(|source| MonitorError::Io { op: "wait for NFLOG socket", source })?;
            let mut out = Vec::new();
            let dry = guard.get_inner_mut().drain(&mut out)?;
            if dry {
                guard.clear_ready();
            }
            if !out.is_empty() {
                return Ok(out);
            }
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> NflogStats {
        self.inner.get_ref().stats()
    }

    /// The blocking socket back.
    pub fn into_inner(self) -> NflogSocket {
        self.inner.into_inner()
    }
}

/// The one `unsafe` call of this crate: registering the socket with tokio's reactor.
#[allow(unsafe_code)]
mod reactor {
    use std::io;

    use tokio::io::unix::AsyncFd;

    use super::NflogSocket;

    pub(super) fn register(sock: NflogSocket) -> io::Result<AsyncFd<NflogSocket>> {
        // SAFETY: `NflogSocket` owns its fd (`OwnedFd`) and never closes or replaces it while it
        // lives, so the fd stays valid for as long as the `AsyncFd` holds the socket.
        unsafe { AsyncFd::register(sock) }.map_err(io::Error::from)
    }
}

/// Address families used in `nfgen_family`.
mod libc_af {
    pub const INET: u8 = 2;
    pub const INET6: u8 = 10;
}

fn next_seq() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SEQ: AtomicU32 = AtomicU32::new(1);
    SEQ.fetch_add(1, Ordering::Relaxed)
}

/// Polls for readability; `Ok(false)` on timeout. EINTR counts as "not yet".
fn wait_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    let timeout = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    match poll(&mut fds, timeout) {
        Ok(n) => Ok(n > 0),
        Err(Errno::EINTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}
