//! Listeners and client streams: TCP, Unix sockets, and listening sockets handed over as fds.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use nix::sys::socket::{AddressFamily, SockaddrLike, SockaddrStorage, getsockname};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

/// A listening socket the proxy serves.
#[derive(Debug)]
pub enum Listener {
    /// TCP.
    Tcp(TcpListener),
    /// A Unix stream socket.
    Unix(UnixListener),
}

impl Listener {
    /// Adopts an already bound and listening socket (TCP or Unix), e.g. one created inside a
    /// sandbox's network namespace and passed over SCM_RIGHTS. Must be called inside a tokio
    /// runtime.
    pub fn from_fd(fd: OwnedFd) -> io::Result<Listener> {
        let family = getsockname::<SockaddrStorage>(std::os::fd::AsRawFd::as_raw_fd(&fd))
            .map_err(io::Error::from)?
            .family();
        match family {
            Some(AddressFamily::Unix) => {
                let l = std::os::unix::net::UnixListener::from(fd);
                l.set_nonblocking(true)?;
                Ok(Listener::Unix(UnixListener::from_std(l)?))
            }
            Some(AddressFamily::Inet | AddressFamily::Inet6) => {
                let l = std::net::TcpListener::from(fd);
                l.set_nonblocking(true)?;
                Ok(Listener::Tcp(TcpListener::from_std(l)?))
            }
            other => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the listening socket has address family {other:?}; expected TCP or Unix"),
            )),
        }
    }

    /// Where it listens, for logs.
    pub fn describe(&self) -> String {
        match self {
            Listener::Tcp(l) => l.local_addr().map_or_else(|e| e.to_string(), |a| a.to_string()),
            Listener::Unix(l) => l
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(|p| p.display().to_string()))
                .unwrap_or_else(|| "unix socket".into()),
        }
    }

    /// Sets TCP_NODELAY on a TCP listening socket, where accepted sockets inherit it (Linux):
    /// one system call per listener instead of one per connection. `true` when accepted sockets
    /// need no `set_nodelay` of their own.
    pub(crate) fn nodelay_for_accepted(&self) -> bool {
        match self {
            #[cfg(target_os = "linux")]
            Listener::Tcp(l) => {
                nix::sys::socket::setsockopt(l, nix::sys::socket::sockopt::TcpNoDelay, &true)
                    .is_ok()
            }
            #[cfg(not(target_os = "linux"))]
            Listener::Tcp(_) => false,
            Listener::Unix(_) => true,
        }
    }

    /// Accepts a connection; with TCP, `nodelay_inherited` tells whether the listener already
    /// gives accepted sockets TCP_NODELAY (see [`Listener::nodelay_for_accepted`]).
    pub(crate) async fn accept(&self, nodelay_inherited: bool) -> io::Result<ClientStream> {
        match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept().await?;
                if !nodelay_inherited {
                    s.set_nodelay(true)?;
                }
                Ok(ClientStream::Tcp(s))
            }
            Listener::Unix(l) => Ok(ClientStream::Unix(l.accept().await?.0)),
        }
    }
}

impl From<TcpListener> for Listener {
    fn from(l: TcpListener) -> Self {
        Listener::Tcp(l)
    }
}

impl From<UnixListener> for Listener {
    fn from(l: UnixListener) -> Self {
        Listener::Unix(l)
    }
}

/// An accepted client connection.
#[derive(Debug)]
pub(crate) enum ClientStream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// The readiness-based operations splice(2) needs, on TCP and Unix streams alike.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // only splice(2) needs it
pub(crate) trait RawStream: AsFd {
    /// Waits for `interest`.
    fn ready_for(&self, interest: Interest) -> impl Future<Output = io::Result<()>> + Send;
    /// Runs a non-blocking operation, clearing readiness on `WouldBlock`.
    fn try_io_with<R>(
        &self,
        interest: Interest,
        f: impl FnOnce() -> io::Result<R>,
    ) -> io::Result<R>;
}

/// TCP and Unix streams offer the same readiness API under the same names.
macro_rules! raw_stream {
    ($($t:ty),*) => {$(
        impl RawStream for $t {
            async fn ready_for(&self, interest: Interest) -> io::Result<()> {
                self.ready(interest).await.map(drop)
            }
            fn try_io_with<R>(
                &self,
                interest: Interest,
                f: impl FnOnce() -> io::Result<R>,
            ) -> io::Result<R> {
                self.try_io(interest, f)
            }
        }
    )*};
}

raw_stream!(TcpStream, UnixStream);

impl AsFd for ClientStream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            ClientStream::Tcp(s) => s.as_fd(),
            ClientStream::Unix(s) => s.as_fd(),
        }
    }
}

impl RawStream for ClientStream {
    async fn ready_for(&self, interest: Interest) -> io::Result<()> {
        match self {
            ClientStream::Tcp(s) => s.ready(interest).await.map(drop),
            ClientStream::Unix(s) => s.ready(interest).await.map(drop),
        }
    }
    fn try_io_with<R>(
        &self,
        interest: Interest,
        f: impl FnOnce() -> io::Result<R>,
    ) -> io::Result<R> {
        match self {
            ClientStream::Tcp(s) => s.try_io(interest, f),
            ClientStream::Unix(s) => s.try_io(interest, f),
        }
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            ClientStream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            ClientStream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_flush(cx),
            ClientStream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            ClientStream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// A stream with bytes already read from it put back in front.
pub(crate) struct Rewind<S> {
    prefix: Bytes,
    inner: S,
}

impl<S> Rewind<S> {
    pub(crate) fn new(prefix: Bytes, inner: S) -> Self {
        Rewind { prefix, inner }
    }

    /// The bytes not read yet, and the stream.
    pub(crate) fn into_parts(self) -> (Bytes, S) {
        (self.prefix, self.inner)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.prefix.has_remaining() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Opens a TCP connection to `addr` with TCP_NODELAY set.
///
/// On Linux the socket is made by hand so that a connection the kernel completes inside
/// `connect(2)` — always the case on loopback and usually in the same host's namespaces, where
/// the handshake runs in the caller's own system call — is used at once: tokio's `connect` would
/// return to the reactor for an `epoll_wait` first (on the multi-thread runtime, one more worker
/// wake-up too). A connection still in progress is awaited as tokio does it: writable, then
/// `SO_ERROR`. The caller puts a deadline on it.
#[cfg(target_os = "linux")]
pub(crate) async fn connect_tcp(addr: std::net::SocketAddr) -> io::Result<TcpStream> {
    use std::os::fd::AsRawFd;

    use nix::errno::Errno;
    use nix::sys::socket::{
        SockFlag, SockProtocol, SockType, SockaddrStorage, connect, getpeername, setsockopt,
        socket, sockopt,
    };

    let family = if addr.is_ipv4() { AddressFamily::Inet } else { AddressFamily::Inet6 };
    let flags = SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC;
    let fd = socket(family, SockType::Stream, flags, SockProtocol::Tcp)?;
    setsockopt(&fd, sockopt::TcpNoDelay, &true)?;
    match connect(fd.as_raw_fd(), &SockaddrStorage::from(addr)) {
        // EINTR: the connection goes on in the background, as with EINPROGRESS.
        Ok(()) | Err(Errno::EINPROGRESS | Errno::EINTR) => {}
        Err(e) => return Err(e.into()),
    }
    let established = getpeername::<SockaddrStorage>(fd.as_raw_fd()).is_ok();
    let stream = TcpStream::from_std(std::net::TcpStream::from(fd))?;
    if !established {
        stream.writable().await?;
        if let Some(e) = stream.take_error()? {
            return Err(e);
        }
        // Writable without an error but not connected (ENOTCONN) is a failure too.
        stream.peer_addr()?;
    }
    Ok(stream)
}

/// Opens a TCP connection to `addr` with TCP_NODELAY set.
#[cfg(not(target_os = "linux"))]
pub(crate) async fn connect_tcp(addr: std::net::SocketAddr) -> io::Result<TcpStream> {
    let s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// Raises the soft limit on open files to the hard limit; returns the new soft limit.
pub fn raise_nofile_limit() -> io::Result<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(io::Error::from)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(io::Error::from)?;
    }
    Ok(hard.max(soft))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Accepted TCP connections have Nagle's algorithm off, whether they inherit TCP_NODELAY
    /// from the listener or get it set one by one.
    #[tokio::test]
    async fn accepted_tcp_sockets_have_nodelay() {
        let l = Listener::Tcp(TcpListener::bind("127.0.0.1:0").await.unwrap());
        let Listener::Tcp(tcp) = &l else { unreachable!() };
        let addr = tcp.local_addr().unwrap();
        for inherited in [false, l.nodelay_for_accepted()] {
            let _client = TcpStream::connect(addr).await.unwrap();
            let ClientStream::Tcp(s) = l.accept(inherited).await.unwrap() else {
                panic!("a TCP listener accepted a non-TCP stream")
            };
            assert!(s.nodelay().unwrap(), "inherited={inherited}");
        }
        #[cfg(target_os = "linux")]
        assert!(l.nodelay_for_accepted());
    }

    /// Connections are made with TCP_NODELAY, to IPv4 and IPv6 addresses alike; a refused
    /// connection is an error, not a stream.
    #[tokio::test]
    async fn connect_tcp_connects_or_fails() {
        for host in ["127.0.0.1", "::1"] {
            let Ok(l) = TcpListener::bind((host, 0)).await else {
                assert!(host == "::1", "cannot listen on {host}");
                continue; // no IPv6 loopback here
            };
            let addr = l.local_addr().unwrap();
            let s = connect_tcp(addr).await.unwrap();
            assert!(s.nodelay().unwrap());
            assert_eq!(s.peer_addr().unwrap(), addr);
            let (mut server, _) = l.accept().await.unwrap();
            let mut s = s;
            tokio::io::AsyncWriteExt::write_all(&mut s, b"ping").await.unwrap();
            let mut buf = [0u8; 4];
            tokio::io::AsyncReadExt::read_exact(&mut server, &mut buf).await.unwrap();
            assert_eq!(&buf, b"ping");
            drop(l);
            let e = connect_tcp(addr).await.expect_err("connected to a closed port");
            assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{host}: {e}");
        }
    }
}
