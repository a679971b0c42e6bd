//! The DNS stub of each sandbox, served next to its proxy listener: the sockets the launcher
//! made inside the namespace (127.0.0.1:53, UDP and TCP) are adopted here and answered by the
//! proxy's `dns` stage (see `sandgate_proxy::dns`). The daemon serves them, not the launcher,
//! because the decision needs the daemon's policy and grants: a query costs no hop between
//! processes.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use nix::sys::socket::{SockType, getsockopt, sockopt};
use sandgate_proxy::{Proxy, Resolver, SandboxContext, SystemResolver, UdpResolver};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::watch;

/// Environment variable naming a DNS server (`IP:PORT`) the daemon resolves names with instead of
/// the system resolver: for tests and benchmarks that need names of their own to resolve on the
/// host (and to count what reaches it) without touching the host's configuration.
pub const DNS_SERVER_VAR: &str = "SANDGATE_DNS_SERVER";

/// The resolver names are looked up with on the host.
pub fn resolver() -> anyhow::Result<Arc<dyn Resolver>> {
    match std::env::var(DNS_SERVER_VAR) {
        Ok(v) if !v.is_empty() => {
            let at: SocketAddr = v.parse().map_err(|e| {
                anyhow::anyhow!("{DNS_SERVER_VAR}={v:?} is not an IP:PORT address: {e}")
            })?;
            Ok(Arc::new(UdpResolver::new(at)))
        }
        _ => Ok(Arc::new(SystemResolver)),
    }
}

/// Adopts the stub's descriptors (both or none). Must run inside a tokio runtime.
pub fn sockets(
    udp: Option<OwnedFd>,
    tcp: Option<OwnedFd>,
) -> std::io::Result<Option<(UdpSocket, TcpListener)>> {
    let (Some(udp), Some(tcp)) = (udp, tcp) else { return Ok(None) };
    let kind = |fd: &OwnedFd, want: SockType, what: &str| match getsockopt(fd, sockopt::SockType) {
        Ok(t) if t == want => Ok(()),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("the DNS {what} descriptor is not a {want:?} socket"),
        )),
    };
    kind(&udp, SockType::Datagram, "UDP")?;
    kind(&tcp, SockType::Stream, "TCP")?;
    let udp = std::net::UdpSocket::from(udp);
    udp.set_nonblocking(true)?;
    let tcp = std::net::TcpListener::from(tcp);
    tcp.set_nonblocking(true)?;
    Ok(Some((UdpSocket::from_std(udp)?, TcpListener::from_std(tcp)?)))
}

/// Serves the stub until `stop` turns true (or the proxy shuts down).
pub fn serve(
    proxy: &Proxy,
    dns: Option<(UdpSocket, TcpListener)>,
    ctx: SandboxContext,
    mut stop: watch::Receiver<bool>,
) {
    let Some((udp, tcp)) = dns else { return };
    let proxy = proxy.clone();
    tokio::spawn(async move {
        tokio::select! {
            r = proxy.serve_dns(Some(udp), Some(tcp), ctx) => {
                if let Err(e) = r { tracing::warn!(error = %e, "DNS stub failed"); }
            }
            _ = async { let _ = stop.wait_for(|s| *s).await; } => {}
        }
    });
}
