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
//! 4. `upstream_peer` — resolve the name ([`Resolver`]) and drop every address that is not
//!    globally reachable unicast (deny by default from the IANA special-purpose registries),
//!    metadata and the host's own addresses unless that IP is itself allowed ([`guard`]).
//! 5. `connect` — to exactly the addresses that were checked, in order; none reachable → 502.
//! 6. `sni_filter` — for a tunnel whose client speaks TLS (on any port), the record layer is
//!    parsed strictly ([`sni`]: handshake records only until a complete ClientHello, no ECH) and
//!    the server name must be the CONNECT host or itself allowed (no domain fronting); no name
//!    passes only for an IP-literal CONNECT; implicit-TLS ports carry nothing but TLS; after a
//!    HelloRetryRequest the second ClientHello must name the same server.
//! 7. `intercept` | `tunnel` | `forward` — TLS interception for the hosts that need it (below);
//!    splice(2) or a large-buffer copy,
//!    one path for HTTP CONNECT on any connection and SOCKS5; plain HTTP through a keep-alive
//!    connection pool with hop-by-hop and `Proxy-Authorization` headers removed and the `Host`
//!    header made from the decided target.
//! 8. `logging` — one [`ProxyEvent`] per connection (per request for plain HTTP), with its
//!    [`Outcome`], to an [`EventSink`].
//!
//! Each stage is a function over one per-request context (`pipeline.rs`), shared by every front
//! end: HTTP CONNECT, plain HTTP on keep-alive connections, and SOCKS5 ([`socks`]).
//!
//! As a connection is accepted, an [`Attributor`] (the daemon's) is asked, off the accept path,
//! which process in the sandbox opened it; `ask` waits for the answer a bounded while, and
//! events carry it (`attribution.rs` says when each waits).
//!
//! The same `decide` stage answers the sandbox's DNS stub ([`dns`]): allowed names resolve on the
//! host, every other name is NXDOMAIN without leaving it.
//!
//! `intercept` replaces `sni_filter` and `tunnel` for the hosts a sandbox's `[[secrets]]` or
//! `[[http_rules]]` name: TLS is terminated with a leaf of the local CA ([`ca`]), requests are
//! checked and get their secrets ([`intercept`]), one event each; a value a response header
//! reflects (as sent, percent-, base64- or hex-encoded) goes back as its placeholder. Every
//! other tunnel is spliced untouched. The proxy does not cache; clients speak HTTP/1.1 to it
//! (HTTP/2 only inside an intercepted tunnel whose upstream speaks it).
//!
//! # Why these choices
//!
//! - Not `hudsucker` (or another MITM proxy framework) for the pipeline: those terminate TLS for
//!   every tunnel; sandgate decrypts only the hosts a secret or an HTTP rule names. It decides on
//!   the CONNECT target and the ClientHello's server name *before* contacting the upstream, holds
//!   the request while a person is asked, and keeps the raw client socket for splice(2) — a
//!   framework that hands CONNECT to hyper's upgrade loses the socket and the chance to refuse
//!   early. For interception itself, see [`ca`] (why its CA is not hudsucker's either).
//! - Own request-head reader (`head.rs`, `httparse`) in front of hyper: a CONNECT keeps the raw
//!   socket; plain, unambiguous HTTP/1.1 requests go through a lean relay (`relay.rs`, whose
//!   module doc says why no crate: hyper on both sides cost a third more CPU per request than
//!   nginx), and any other request is replayed into hyper's HTTP/1.1 server, which does the rest.
//! - Own TLS record / ClientHello parser ([`sni`]), strict where servers are lenient, so the name
//!   checked is the name the server reads (its module doc says why no parser crate).
//! - `hickory-proto` for the DNS stub's wire format only; names are resolved by the host's own
//!   resolver ([`Resolver`]), so a sandbox sees the answers the host would.

#![forbid(unsafe_code)]

mod ask;
mod attribution;
pub mod ca;
mod conn;
mod ctx;
mod denial;
pub mod dns;
pub mod dns_log;
mod forward;
pub mod guard;
pub mod head;
pub mod intercept;
mod interceptor;
mod io;
mod learn;
pub mod names;
mod pipeline;
mod pool;
mod proxy;
mod reflect;
mod relay;
pub mod secret;
pub mod secret_report;
pub mod sni;
pub mod socks;
mod standalone;
mod traits;
pub mod transparent;
mod tunnel;
mod upstream;

pub use attribution::Attributor;
pub use denial::{Refusal, render_refusal, render_refusal_with_grants};
pub use dns::UdpResolver;
pub use interceptor::{Interceptor, client_tls};
pub use io::{Listener, raise_nofile_limit};
pub use learn::{GuardRefusal, Learner};
pub use proxy::{Proxy, ProxyBuilder, ProxyConfig, SandboxContext, TunnelMode};
pub use sandgate_config::ProcessInfo;
pub use standalone::Standalone;
pub use traits::{
    ApprovalRequest, Approver, BoxFuture, DenyReason, EventSink, GrantSource, Outcome, ProxyEvent,
    ProxyToken, Resolver, Ruling, SandboxId, SystemResolver, TracingSink,
};
pub use upstream::Upstream;
