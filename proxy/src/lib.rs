//! sandgate's allowlist proxy: HTTP/1.1 forwarding (absolute-form requests) and CONNECT tunnels,
//! each request put through one decision pipeline before a single byte reaches the upstream.
//!
//! # Stages, in the order they run
//!
//! 1. `request_filter` — read the request head (with a deadline and a size limit), check the
//!    sandbox token (407), parse and normalise the target; malformed → 400.
//! 2. `decide` — the sandbox's [`NetworkPolicy`](sandgate_config::NetworkPolicy): deny → 403,
//!    allow → go; otherwise grants from a [`GrantSource`].
//! 3. `ask` — an [`Approver`] is asked, once per (sandbox, host, port) however many requests
//!    wait; the request is held until it answers or the ask timeout passes (timeout = deny).
//! 4. `upstream_peer` — resolve the name ([`Resolver`]) and drop loopback, link-local, private,
//!    metadata and the host's own addresses unless that IP is itself allowed ([`guard`]).
//! 5. `connect` — to exactly the addresses that were checked, in order; none reachable → 502.
//! 6. `sni_filter` — for a tunnel whose client speaks TLS (on any port), the record layer is
//!    parsed strictly ([`sni`]: handshake records only until a complete ClientHello, no ECH) and
//!    the server name must be the CONNECT host or itself allowed (no domain fronting); no name
//!    passes only for an IP-literal CONNECT; implicit-TLS ports carry nothing but TLS.
//! 7. `tunnel` / `forward` — splice(2) or a large-buffer copy; plain HTTP through a keep-alive
//!    connection pool with hop-by-hop and `Proxy-Authorization` headers removed.
//! 8. `logging` — one [`ProxyEvent`] per connection (per request for plain HTTP) to an
//!    [`EventSink`].
//!
//! The same `decide` stage answers the sandbox's DNS stub ([`dns`]): allowed names resolve on the
//! host, every other name is NXDOMAIN without leaving it.
//!
//! The proxy does not terminate TLS, does not cache, and speaks HTTP/1.1 only.
//!
//! # Why these choices
//!
//! - Not `hudsucker` (or another MITM proxy framework): those terminate TLS with a local CA to
//!   inspect requests; sandgate never decrypts. It decides on the CONNECT target and the
//!   ClientHello's server name *before* contacting the upstream, holds the request while a person
//!   is asked, and keeps the raw client socket for splice(2) — a framework that hands CONNECT to
//!   hyper's upgrade loses the socket and the chance to refuse early.
//! - Own request-head reader (`head.rs`, `httparse`) in front of hyper: a CONNECT keeps the raw
//!   socket; any other request is replayed into hyper's HTTP/1.1 server, which does the rest.
//! - Own TLS record / ClientHello parser ([`sni`]), strict where servers are lenient, so the name
//!   checked is the name the server reads (its module doc says why no parser crate).
//! - `hickory-proto` for the DNS stub's wire format only; names are resolved by the host's own
//!   resolver ([`Resolver`]), so a sandbox sees the answers the host would.

#![forbid(unsafe_code)]

mod ask;
mod conn;
mod denial;
pub mod dns;
mod forward;
pub mod guard;
pub mod head;
mod io;
mod proxy;
pub mod sni;
pub mod socks;
mod traits;
mod tunnel;
mod upstream;

pub use denial::{Refusal, render_refusal};
pub use dns::UdpResolver;
pub use io::{Listener, raise_nofile_limit};
pub use proxy::{Proxy, ProxyBuilder, ProxyConfig, SandboxContext, TunnelMode};
pub use traits::{
    Answer, Approver, BoxFuture, DenyReason, EventSink, GrantSource, ProxyEvent, ProxyToken,
    Question, Resolver, SandboxId, SystemResolver, TracingSink,
};
pub use upstream::Upstream;
