//! The upstream keep-alive connections kept between requests: hyper's, for plain HTTP through
//! `forward.rs`, and raw ones, for the relay (`relay.rs`). The proxy's shared state owns them
//! (`proxy.rs`); those two stages borrow them, so this module needs neither.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Body type of forwarded requests and of every response.
pub(crate) type Body = BoxBody<Bytes, hyper::Error>;

/// Most pooled connections kept per upstream address.
const POOL_PER_ADDR: usize = 64;

/// hyper's connection future of one upstream connection.
type Driver = http1::Connection<TokioIo<TcpStream>, Body>;

/// One upstream keep-alive connection: hyper's request handle and its connection future.
///
/// The future is polled by the request that uses the connection, in the client connection's
/// own task (while waiting for the response head, then by the response body), not by a task of
/// its own: a forwarded request then costs no hand-over between tasks (each one a wake-up and,
/// on the multi-thread runtime, often a worker woken by futex). An idle pooled connection is not
/// polled at all; one the upstream closed meanwhile is found out when it is next taken.
pub(crate) struct UpConn {
    pub(crate) tx: SendRequest<Body>,
    pub(crate) driver: Driver,
    /// Whether the connection future has ended (closed, or failed).
    pub(crate) ended: bool,
    /// The address it is keyed by in the pool; `None` for a connection that is never pooled
    /// (through the upstream proxy, whose peer says nothing of the destination).
    pub(crate) addr: Option<SocketAddr>,
}

impl UpConn {
    /// Polls the connection future (moving bytes both ways); `true` once it has ended.
    pub(crate) fn poll_driver(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.ended && Pin::new(&mut self.driver).poll(cx).is_ready() {
            self.ended = true;
        }
        self.ended
    }

    /// Runs `fut` while driving the connection; `None` when the connection ended first.
    pub(crate) async fn drive<F: Future>(&mut self, fut: F) -> Option<F::Output> {
        let mut fut = std::pin::pin!(fut);
        std::future::poll_fn(|cx| {
            let ended = self.poll_driver(cx);
            if let Poll::Ready(v) = fut.as_mut().poll(cx) {
                return Poll::Ready(Some(v));
            }
            if ended { Poll::Ready(None) } else { Poll::Pending }
        })
        .await
    }

    /// Whether the connection takes a request now (one poll: an idle connection is ready at
    /// once; one that is not, or has ended, is not worth waiting for).
    fn ready_now(&mut self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        !self.poll_driver(&mut cx) && matches!(self.tx.poll_ready(&mut cx), Poll::Ready(Ok(())))
    }
}

/// Idle keep-alive connections to upstream addresses (each one an address that passed the guard).
#[derive(Default)]
pub(crate) struct Pool {
    conns: Mutex<HashMap<SocketAddr, Vec<UpConn>>>,
    /// Raw connections of the plain-HTTP relay (`relay.rs`).
    pub(crate) raw: RawPool,
}

impl Pool {
    /// An idle connection to one of `addrs`, in their order.
    pub(crate) fn take(&self, addrs: &[SocketAddr]) -> Option<UpConn> {
        let mut map = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        for addr in addrs {
            let Some(list) = map.get_mut(addr) else { continue };
            while let Some(mut conn) = list.pop() {
                if conn.ready_now() {
                    return Some(conn);
                }
            }
        }
        None
    }

    /// Keeps an idle connection (its last response read to the end) for later.
    pub(crate) fn put(&self, conn: UpConn) {
        let Some(addr) = conn.addr else { return };
        let mut map = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        let list = map.entry(addr).or_default();
        if list.len() < POOL_PER_ADDR {
            list.push(conn);
        }
    }
}

/// Idle raw keep-alive connections to upstream addresses (each one an address that passed the
/// guard), for the relay.
#[derive(Default)]
pub(crate) struct RawPool {
    conns: Mutex<HashMap<SocketAddr, Vec<TcpStream>>>,
}

impl RawPool {
    /// An idle connection to one of `addrs`, in their order, that has not been closed or sent
    /// anything meanwhile (a readiness check: no system call unless the socket became readable).
    pub(crate) fn take(&self, addrs: &[SocketAddr]) -> Option<(TcpStream, SocketAddr)> {
        let mut map = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        for addr in addrs {
            let Some(list) = map.get_mut(addr) else { continue };
            while let Some(conn) = list.pop() {
                let mut byte = [0u8; 1];
                match conn.try_read(&mut byte) {
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        return Some((conn, *addr));
                    }
                    // Closed (0), or bytes nobody asked for: not reusable.
                    _ => {}
                }
            }
        }
        None
    }

    pub(crate) fn put(&self, addr: SocketAddr, conn: TcpStream) {
        let mut map = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        let list = map.entry(addr).or_default();
        if list.len() < POOL_PER_ADDR {
            list.push(conn);
        }
    }
}
