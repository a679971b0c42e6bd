//! Moving bytes both ways through a tunnel: splice(2) through a pipe (no copy into user space), or
//! a large-buffer copy. Neither holds back bytes: what one side sends is written to the other
//! before the next read.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// Byte counters and the time of the last activity, shared with the idle watchdog.
#[derive(Debug)]
pub(crate) struct Activity {
    start: Instant,
    last_ms: AtomicU64,
    pub(crate) up: AtomicU64,
    pub(crate) down: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Activity {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    pub(crate) fn totals(&self) -> (u64, u64) {
        (self.up.load(Ordering::Relaxed), self.down.load(Ordering::Relaxed))
    }

    /// Returns once nothing has moved for `idle`.
    pub(crate) async fn idle(&self, idle: Duration) {
        loop {
            let last = self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let deadline = last + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// Why a tunnel ended early.
#[derive(Debug)]
pub(crate) enum TunnelEnd {
    Idle(Duration),
    Io(io::Error),
}

impl std::fmt::Display for TunnelEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TunnelEnd::Idle(d) => write!(f, "idle for {}s", d.as_secs()),
            TunnelEnd::Io(e) => write!(f, "{e}"),
        }
    }
}

/// Copies both ways with buffers of `buf` bytes until both sides are done.
pub(crate) async fn copy<A, B>(
    a: &mut A,
    b: &mut B,
    buf: usize,
    activity: &Activity,
    idle: Duration,
) -> Result<(), TunnelEnd>
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let mut a = Counted { inner: a, count: &activity.up, activity };
    let mut b = Counted { inner: b, count: &activity.down, activity };
    tokio::select! {
        r = tokio::io::copy_bidirectional_with_sizes(&mut a, &mut b, buf, buf) => {
            r.map(drop).map_err(TunnelEnd::Io)
        }
        () = activity.idle(idle) => Err(TunnelEnd::Idle(idle)),
    }
}

/// splice(2) exists on Linux only; elsewhere [`crate::TunnelMode::Splice`] falls back to the copy.
#[cfg(target_os = "linux")]
pub(crate) use splicing::{PipePool, splice};

/// Stand-in where splice(2) does not exist.
#[cfg(not(target_os = "linux"))]
#[derive(Default)]
pub(crate) struct PipePool(());

#[cfg(target_os = "linux")]
mod splicing {
    use std::io;
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl};
    use nix::sys::socket::{Shutdown, shutdown};
    use tokio::io::Interest;

    use super::{Activity, TunnelEnd};
    use crate::io::RawStream;

    /// Splices both ways until both sides are done. Pipes are borrowed from `pipes` only while a
    /// chunk is in flight, so an idle tunnel holds no pipe (and no extra file descriptors).
    pub(crate) async fn splice<A: RawStream, B: RawStream>(
        a: &A,
        b: &B,
        pipes: &PipePool,
        activity: &Activity,
        idle: Duration,
    ) -> Result<(), TunnelEnd> {
        let both = async {
            tokio::try_join!(
                splice_one(a, b, pipes, &activity.up, activity),
                splice_one(b, a, pipes, &activity.down, activity),
            )
        };
        tokio::select! {
            r = both => r.map(drop).map_err(TunnelEnd::Io),
            () = activity.idle(idle) => Err(TunnelEnd::Idle(idle)),
        }
    }

    /// Empty pipes ready for reuse.
    #[derive(Default)]
    pub(crate) struct PipePool {
        idle: std::sync::Mutex<Vec<Pipe>>,
    }

    /// Most empty pipes kept for reuse.
    const POOLED_PIPES: usize = 256;

    /// Capacity asked for each pipe.
    const PIPE_SIZE: i32 = 1 << 20;

    impl PipePool {
        fn take(&self) -> io::Result<Pipe> {
            let pooled = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
            match pooled {
                Some(p) => Ok(p),
                None => Pipe::new(),
            }
        }

        /// Takes back a pipe that is known to be empty.
        fn give(&self, pipe: Pipe) {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            if idle.len() < POOLED_PIPES {
                idle.push(pipe);
            }
        }
    }

    struct Pipe {
        read: OwnedFd,
        write: OwnedFd,
        capacity: usize,
    }

    impl Pipe {
        fn new() -> io::Result<Pipe> {
            let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
            // A larger pipe moves more per system call; the default (64 KiB) is kept when the system
            // limit (fs.pipe-max-size, or the per-user pipe budget) refuses.
            let capacity = fcntl(write.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(PIPE_SIZE))
                .or_else(|_| fcntl(write.as_raw_fd(), FcntlArg::F_GETPIPE_SZ))
                .map_or(1 << 16, |n| n.max(4096) as usize);
            Ok(Pipe { read, write, capacity })
        }
    }

    async fn splice_one<F: RawStream, T: RawStream>(
        from: &F,
        to: &T,
        pipes: &PipePool,
        count: &AtomicU64,
        activity: &Activity,
    ) -> io::Result<()> {
        let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
        loop {
            from.ready_for(Interest::READABLE).await?;
            let pipe = pipes.take()?;
            // The pipe is empty, so the socket read never waits on it.
            let n = match from.try_io_with(Interest::READABLE, || {
                nix::fcntl::splice(from.as_fd(), None, &pipe.write, None, pipe.capacity, flags)
                    .map_err(io::Error::from)
            }) {
                Ok(0) => {
                    pipes.give(pipe);
                    break;
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    pipes.give(pipe);
                    continue;
                }
                Err(e) => return Err(e),
            };
            count.fetch_add(n as u64, Ordering::Relaxed);
            activity.touch();
            let mut left = n;
            while left > 0 {
                to.ready_for(Interest::WRITABLE).await?;
                match to.try_io_with(Interest::WRITABLE, || {
                    nix::fcntl::splice(&pipe.read, None, to.as_fd(), None, left, flags)
                        .map_err(io::Error::from)
                }) {
                    Ok(m) => left -= m,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    // A pipe with bytes left in it is dropped, never reused.
                    Err(e) => return Err(e),
                }
            }
            pipes.give(pipe);
        }
        // Pass the half-close on, so protocols that end with a shutdown(SHUT_WR) keep working.
        match shutdown(to.as_fd().as_raw_fd(), Shutdown::Write) {
            Ok(()) | Err(nix::errno::Errno::ENOTCONN) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Counts the bytes read from a stream and marks activity.
struct Counted<'a, S> {
    inner: &'a mut S,
    count: &'a AtomicU64,
    activity: &'a Activity,
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<'_, S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut *this.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            this.count.fetch_add(n as u64, Ordering::Relaxed);
            this.activity.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<'_, S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().inner).poll_shutdown(cx)
    }
}
