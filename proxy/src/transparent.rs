//! The fourth door of the pipeline: a TCP connection the sandbox opened to any non-loopback IPv4
//! address, redirected by its namespace's firewall (`capture` chain) to the proxy listener
//! without the client knowing. The original destination is read back from the connection
//! (`SO_ORIGINAL_DST`), and the connection goes through the same stages as a CONNECT:
//! `decide → ask → upstream_peer → connect → sni_filter → tunnel | intercept`, held while a
//! person decides.
//!
//! What decides it, by the address the client connected to:
//!
//! | destination | decided as | connected to |
//! |---|---|---|
//! | an address the DNS stub gave this sandbox for a name ([`names`](crate::names)) | that name and port; a TLS ClientHello must name it too (or a host allowed in its own right) | the name, resolved on the host then, through the address guard |
//! | in the stub's block, never given to this sandbox | refused | — |
//! | any other address, the client speaks first with a TLS ClientHello that names a server | that server name and port | the name, resolved on the host |
//! | any other address, the client speaks first with an HTTP request that has a `Host` | that host and port | the host, resolved on the host |
//! | any other address otherwise (the server speaks first, or the client sends neither) | the address and port (a grant for `1.2.3.4:5432`) | the address, through the address guard (allowed as itself) |
//!
//! A name is never taken from the client when the stub's address already names one: the name
//! looked up decides, and the SNI check holds the client to it (domain fronting refused). For a
//! real address, the client's name is only used to *resolve again on the host*: the client
//! cannot make the proxy connect to an address of its choosing under an allowed name.
//!
//! A refusal is told the way the client can read it: a TLS access_denied alert to a client that
//! sent a ClientHello, an HTTP 403 with the proxy's explanation to one that sent a request, and a
//! reset otherwise.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use sandgate_config::{Host, Target};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use crate::ctx::{Ctx, TLS_ACCESS_DENIED, host_header};
use crate::denial::{Refusal, quote, render_refusal_with_grants};
use crate::io::ClientStream;
use crate::names::Lookup;
use crate::proxy::{ProxyShared, Sandbox};
use crate::sni::{self, Opening, OpeningParser};

/// The method of a transparent connection's event.
pub const EVENT_METHOD: &str = "TCP";

/// How long a connection to a real address waits for the client's first bytes (a ClientHello or
/// a request that names the host) before it is decided as the address: a client that speaks
/// first sends at once; a server-speaks-first protocol (SSH, SMTP, MySQL) pays this once.
pub const FIRST_BYTES_WAIT: Duration = Duration::from_millis(200);

/// How long a refusal waits for the client's first bytes, to answer in its protocol.
const REFUSAL_WAIT: Duration = Duration::from_millis(100);

/// The destination a redirected connection was opened to, when `client` is one (its original
/// destination differs from the address it was accepted on); `None` for a client of the proxy
/// itself.
#[cfg(target_os = "linux")]
pub(crate) fn original_destination(client: &ClientStream) -> Option<SocketAddr> {
    use nix::sys::socket::{getsockopt, sockopt};
    let ClientStream::Tcp(s) = client else { return None };
    let local = canonical(s.local_addr().ok()?);
    // The listener is dual-stack: an IPv4 connection's addresses are IPv4-mapped, and its
    // original destination is read with the IPv4 option. ENOENT: no connection tracking entry
    // (no capture in this namespace).
    let orig = match local {
        SocketAddr::V4(_) => {
            let raw = getsockopt(s, sockopt::OriginalDst).ok()?;
            let ip = std::net::Ipv4Addr::from(u32::from_be(raw.sin_addr.s_addr));
            SocketAddr::from((ip, u16::from_be(raw.sin_port)))
        }
        SocketAddr::V6(_) => {
            let raw = getsockopt(s, sockopt::Ip6tOriginalDst).ok()?;
            let ip = std::net::Ipv6Addr::from(raw.sin6_addr.s6_addr);
            canonical(SocketAddr::from((ip, u16::from_be(raw.sin6_port))))
        }
    };
    (orig != local).then_some(orig)
}

/// IPv4-mapped IPv6 addresses as the IPv4 address they are.
#[cfg(target_os = "linux")]
fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(sandgate_config::canonical_ip(a.ip()), a.port())
}

/// See the Linux version: elsewhere nothing is redirected.
#[cfg(not(target_os = "linux"))]
pub(crate) fn original_destination(_client: &ClientStream) -> Option<SocketAddr> {
    None
}

/// What the client's first bytes named.
enum FirstBytes {
    /// A TLS ClientHello naming this server.
    Tls(Option<String>),
    /// An HTTP request with this `Host`.
    Http(Option<String>),
    /// Nothing within the wait, or another protocol.
    Other,
}

impl ProxyShared {
    /// Serves one connection redirected from `to` (see the module's table).
    pub(crate) async fn serve_transparent(
        self: Arc<Self>,
        sandbox: Arc<Sandbox>,
        mut client: ClientStream,
        to: SocketAddr,
        start: Instant,
        process: crate::attribution::Attribution,
    ) {
        let mut ctx = Ctx::new(sandbox.clone(), EVENT_METHOD, start).with_process(&process);
        let mut first = BytesMut::new();
        let target = match self.transparent_target(&mut ctx, &mut client, to, &mut first).await {
            Ok(t) => t,
            Err(r) => {
                ctx.event.host = to.ip().to_string();
                ctx.event.port = to.port();
                self.refuse_transparent(&mut ctx, client, first, &r).await;
                return self.logging(ctx);
            }
        };
        ctx.set_target(target);
        match self.open_tunnel(&mut ctx).await {
            Ok(upstream) => {
                if let Err(why) =
                    self.pin_http_host(&mut ctx, &mut client, &upstream, &mut first).await
                {
                    let r = Refusal::Malformed { input: quote(&first[..first.len().min(80)]), why };
                    self.refuse_transparent(&mut ctx, client, first, &r).await;
                    return self.logging(ctx);
                }
                self.tunnel_stages(&mut ctx, client, upstream, first).await;
            }
            Err(r) => self.refuse_transparent(&mut ctx, client, first, &r).await,
        }
        self.logging(ctx);
    }

    /// Plain HTTP through the transparent door: the client's first request head, once it has
    /// come, is sent upstream with the `Host` made from the decided target (every `Host` the
    /// client wrote dropped, as the proxy's forwarding does) and `Connection: close`
    /// (`Upgrade, close` for an upgrade), so that no later request on the connection can name
    /// another site to a server that serves several (HTTP domain fronting): a keep-alive client
    /// opens a new connection, which is decided again. Anything else (TLS, a server that speaks
    /// first, another protocol) is left to `sni_filter`. `Err`: a head that is not HTTP/1 after
    /// all, or too large.
    async fn pin_http_host(
        &self,
        ctx: &mut Ctx,
        client: &mut ClientStream,
        upstream: &tokio::net::TcpStream,
        first: &mut BytesMut,
    ) -> Result<(), String> {
        if first.is_empty() {
            first.reserve(4096);
            tokio::select! {
                r = client.read_buf(first) => {
                    if r.is_err() {
                        return Ok(());
                    }
                }
                // The server speaks first: not HTTP.
                _ = upstream.readable() => return Ok(()),
                () = tokio::time::sleep(self.config.idle_timeout) => return Ok(()),
            }
        }
        self.pin_http_head(ctx, client, first).await
    }

    /// The rewrite of [`ProxyShared::pin_http_host`] on bytes already read (`first`): when they
    /// start like an HTTP/1 request, the head is read whole and its `Host` made the decided
    /// target's, with `Connection: close`. Also run on CONNECT and SOCKS tunnels that carry plain
    /// HTTP (`tunnel_stages`): the same fronting is open there (a SOCKS client's `http://` URL).
    pub(crate) async fn pin_http_head<C: tokio::io::AsyncRead + Unpin>(
        &self,
        ctx: &mut Ctx,
        client: &mut C,
        first: &mut BytesMut,
    ) -> Result<(), String> {
        // Nothing from the client yet: the server spoke first (SSH, SMTP), not HTTP.
        if first.is_empty() {
            return Ok(());
        }
        let target = ctx.target().map_err(|r| r.rule_text())?.clone();
        let deadline = Instant::now() + self.config.header_timeout;
        if !read_http_opening(client, first, deadline, self.config.max_head_bytes).await? {
            return Ok(());
        }
        let head = loop {
            match rewrite_http_head(first, &target, self.config.max_head_bytes) {
                HeadRewrite::Done { head, len, path } => {
                    ctx.event.path = Some(path.chars().take(1000).collect());
                    break (head, len);
                }
                HeadRewrite::Invalid(why) => return Err(why),
                HeadRewrite::NeedMore => {}
            }
            first.reserve(4096);
            match tokio::time::timeout_at(deadline, client.read_buf(first)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return Err("the HTTP request head did not come whole".into()),
            }
        };
        let (head, len) = head;
        let rest = first.split_off(len);
        first.clear();
        first.extend_from_slice(&head);
        first.extend_from_slice(&rest);
        Ok(())
    }

    /// Stage `request_filter` of the transparent door: the target, by the module's table.
    async fn transparent_target(
        &self,
        ctx: &mut Ctx,
        client: &mut ClientStream,
        to: SocketAddr,
        first: &mut BytesMut,
    ) -> Result<Target, Refusal> {
        let port = to.port();
        match ctx.sandbox.names.lookup(to.ip()) {
            Lookup::Name(name) => return Ok(Target { host: Host::Name(name), port }),
            Lookup::NotGiven => return Err(Refusal::NotGiven { target: to.to_string() }),
            Lookup::Real => {}
        }
        let ip = sandgate_config::canonical_ip(to.ip());
        let by_address = Target { host: Host::Ip(ip), port };
        // Allowed as itself: no name can change that, and none is waited for.
        if self.allowed_outright(&ctx.sandbox, &ctx.policy, &by_address).await {
            return Ok(by_address);
        }
        let named = match self.first_bytes(client, first, FIRST_BYTES_WAIT).await {
            FirstBytes::Tls(Some(name)) => sni::server_host(&name).ok().map(Host::Name),
            FirstBytes::Http(Some(host)) => Target::parse_authority(&host, Some(port))
                .ok()
                .map(|t| t.host)
                .filter(|h| matches!(h, Host::Name(_))),
            FirstBytes::Tls(None) | FirstBytes::Http(None) | FirstBytes::Other => None,
        };
        Ok(match named {
            Some(host) => Target { host, port },
            None => by_address,
        })
    }

    /// Reads the client's first bytes into `first` (waiting up to `wait` for the first of them,
    /// then up to the header timeout for a whole ClientHello or request head) and says what
    /// they name.
    async fn first_bytes(
        &self,
        client: &mut ClientStream,
        first: &mut BytesMut,
        wait: Duration,
    ) -> FirstBytes {
        if first.is_empty() {
            first.reserve(4096);
            match tokio::time::timeout(wait, client.read_buf(first)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return FirstBytes::Other,
            }
        }
        let deadline = Instant::now() + self.config.header_timeout;
        let mut tls = OpeningParser::new();
        loop {
            let http = http_opening(first, self.config.max_head_bytes);
            match tls.advance(first) {
                Ok(Opening::ClientHello { server_name }) => return FirstBytes::Tls(server_name),
                Ok(Opening::NotTls) if http == HttpOpening::No => return FirstBytes::Other,
                Ok(Opening::NotTls) if http == HttpOpening::NeedMore => {}
                Ok(Opening::NotTls) => match http_host(first, self.config.max_head_bytes) {
                    HttpHost::Complete(host) => return FirstBytes::Http(host),
                    HttpHost::Invalid => return FirstBytes::Other,
                    HttpHost::NeedMore => {}
                },
                Ok(Opening::NeedMore) => {}
                Err(_) => return FirstBytes::Other,
            }
            first.reserve(4096);
            match tokio::time::timeout_at(deadline, client.read_buf(first)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return FirstBytes::Other,
            }
        }
    }

    /// Tells the client of a refusal in the protocol it opened with (see the module), after
    /// the event is recorded.
    async fn refuse_transparent(
        &self,
        ctx: &mut Ctx,
        mut client: ClientStream,
        mut first: BytesMut,
        r: &Refusal,
    ) {
        ctx.refused(r);
        self.record_refusal(ctx).await;
        let said = match self.first_bytes(&mut client, &mut first, REFUSAL_WAIT).await {
            FirstBytes::Tls(_) => Some(TLS_ACCESS_DENIED.to_vec()),
            FirstBytes::Http(_) => Some(
                render_refusal_with_grants(r, &ctx.policy, &self.granted(&ctx.sandbox)).to_bytes(),
            ),
            FirstBytes::Other => None,
        };
        match said {
            Some(bytes) => {
                let _ = client.write_all(&bytes).await;
                let _ = client.shutdown().await;
            }
            None => reset(&client),
        }
    }
}

/// Closes `client` with a reset (what a refused connection looks like to a client that said
/// nothing).
fn reset(client: &ClientStream) {
    if let ClientStream::Tcp(s) = client {
        let _ = s.set_zero_linger();
    }
}

/// Reads into `first` until [`http_opening`] can tell (by `deadline`): whether the client opened
/// with an HTTP/1 request line. A request line split across writes ("G", then "ET / …") is HTTP
/// all the same to the server. A first line the client ends its sending in (`ping`, then EOF) is
/// not. `Err`: the client stalled before its first line was whole (not let through: the rest of
/// a request line could come after the wait).
async fn read_http_opening<C: tokio::io::AsyncRead + Unpin>(
    client: &mut C,
    first: &mut BytesMut,
    deadline: Instant,
    limit: usize,
) -> Result<bool, String> {
    loop {
        match http_opening(first, limit) {
            HttpOpening::No => return Ok(false),
            HttpOpening::Yes => return Ok(true),
            HttpOpening::NeedMore => {}
        }
        first.reserve(4096);
        match tokio::time::timeout_at(deadline, client.read_buf(first)).await {
            Ok(Ok(n)) if n > 0 => {}
            // The client is done sending (`echo ping | nc`): no server reads a request without
            // the end of its line and of its head, and nothing more can come, so what came is
            // not HTTP.
            Ok(Ok(_)) => return Ok(false),
            _ => return Err("the request line did not come whole".into()),
        }
    }
}

/// Whether a client's first bytes open an HTTP/1 request, as far as they tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HttpOpening {
    /// A request line starts: its head is pinned (or the connection refused).
    Yes,
    /// Not a request line any HTTP/1 server would take.
    No,
    /// Not yet known: the first line is not over.
    NeedMore,
}

/// Whether `bytes` start like an HTTP/1 request line the way a server's parser sees one: empty
/// lines skipped (RFC 9112 §2.2 lets a server ignore them, and httparse and hyper do), then any
/// token as the method — lower case, digits, `-` and a length of one or eighteen are methods too
/// (`get`, `M-SEARCH`, `UPDATEREDIRECTREF`), and servers that route by path alone serve them —
/// then a space, and a line that says `HTTP/` (its version) or `://` (an absolute URL, which
/// nginx serves by its host even without a version, as HTTP/0.9). Only the whole line tells:
/// `G` and `GET / HTTP/1.1` without its line end are [`HttpOpening::NeedMore`], not "no". A
/// line of another client-first text protocol ("ping 1", memcached's `get key`, Redis inline
/// commands) says neither, and is let through as it is.
fn http_opening(bytes: &[u8], limit: usize) -> HttpOpening {
    let start = bytes.iter().take_while(|b| matches!(b, b'\r' | b'\n')).count();
    let rest = &bytes[start..];
    let method = rest.iter().take_while(|b| is_tchar(**b)).count();
    // A line as long as a whole head: no server reads that as anything but HTTP gone wrong;
    // the head's rewrite refuses it.
    let unfinished = if bytes.len() < limit { HttpOpening::NeedMore } else { HttpOpening::Yes };
    match rest.get(method) {
        None => return unfinished,
        Some(b' ') if method > 0 => {}
        Some(_) => return HttpOpening::No,
    }
    let Some(end) = rest.iter().position(|&b| b == b'\n') else { return unfinished };
    let line = rest[..end].to_ascii_lowercase();
    let says = |what: &[u8]| line.windows(what.len()).any(|w| w == what);
    if says(b"http/") || says(b"://") { HttpOpening::Yes } else { HttpOpening::No }
}

/// A token character (RFC 9110 §5.6.2): what a method is made of.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

enum HttpHost {
    Complete(Option<String>),
    NeedMore,
    Invalid,
}

/// The `Host` of the HTTP request head at the start of `bytes`.
fn http_host(bytes: &[u8], limit: usize) -> HttpHost {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(bytes) {
        Ok(httparse::Status::Complete(_)) => {
            let host = req
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("host"))
                .and_then(|h| std::str::from_utf8(h.value).ok())
                .map(|v| v.trim().to_owned());
            HttpHost::Complete(host)
        }
        Ok(httparse::Status::Partial) if bytes.len() < limit => HttpHost::NeedMore,
        _ => HttpHost::Invalid,
    }
}

/// A request target as the origin form the pinned head sends: a path (or `*`) as it is; an
/// absolute URL (`http://evil.example/x`) as its path, since an origin server takes the URL's
/// host over `Host` (RFC 9112 §3.2.2: nginx, hyper, Go do) — the way around the pin otherwise;
/// `None` for anything else (an authority, as CONNECT's).
fn origin_form(target: &str) -> Option<std::borrow::Cow<'_, str>> {
    if target.starts_with('/') || target == "*" {
        return Some(target.into());
    }
    let (scheme, rest) = target.split_once("://")?;
    if scheme.is_empty()
        || !scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
    {
        return None;
    }
    Some(match rest.find(['/', '?', '#']) {
        Some(i) if rest[i..].starts_with('/') => rest[i..].into(),
        Some(i) => format!("/{}", &rest[i..]).into(),
        None => "/".into(),
    })
}

/// What [`rewrite_http_head`] made of a buffer.
enum HeadRewrite {
    /// The rewritten head, the length of the original one, and its request target.
    Done {
        head: Vec<u8>,
        len: usize,
        path: String,
    },
    NeedMore,
    Invalid(String),
}

/// Headers the rewritten head leaves out: the client's `Host`s (one is made from the target) and
/// what says how the connection goes on (one `Connection` is written).
const DROPPED: [&str; 4] = ["host", "connection", "keep-alive", "proxy-connection"];

/// The HTTP/1 request head at the start of `bytes`, rewritten for the decided `target` (see
/// `pin_http_host`).
fn rewrite_http_head(bytes: &[u8], target: &Target, limit: usize) -> HeadRewrite {
    let mut headers = [httparse::EMPTY_HEADER; 100];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if bytes.len() < limit => return HeadRewrite::NeedMore,
        Ok(httparse::Status::Partial) => {
            return HeadRewrite::Invalid(format!("the request head exceeds {limit} bytes"));
        }
        Err(e) => return HeadRewrite::Invalid(format!("not an HTTP/1 request head: {e}")),
    };
    let (Some(method), Some(path), Some(version)) = (req.method, req.path, req.version) else {
        return HeadRewrite::Invalid("an incomplete request line".into());
    };
    let Some(origin_path) = origin_form(path) else {
        return HeadRewrite::Invalid(format!(
            "request target {} is neither a path nor an http:// URL",
            quote(path.as_bytes())
        ));
    };
    // An upgrade goes on as the same connection in another protocol, where `close` means
    // nothing: only a WebSocket's (one endpoint of the pinned host) is let through. h2c
    // especially is not: after it, every HTTP/2 stream names its own `:authority`.
    let upgrades: Vec<&str> = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("upgrade"))
        .flat_map(|h| std::str::from_utf8(h.value).unwrap_or("?").split(','))
        .map(str::trim)
        .collect();
    let websocket = !upgrades.is_empty()
        && upgrades.iter().all(|u| u.eq_ignore_ascii_case("websocket"))
        && req.headers.iter().any(|h| {
            h.name.eq_ignore_ascii_case("connection")
                && std::str::from_utf8(h.value)
                    .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade")))
        });
    let mut head = format!("{method} {origin_path} HTTP/1.{version}\r\n").into_bytes();
    head.extend_from_slice(format!("Host: {}\r\n", host_header(target)).as_bytes());
    for h in req.headers.iter() {
        if DROPPED.iter().any(|d| h.name.eq_ignore_ascii_case(d)) {
            continue;
        }
        if !websocket
            && (h.name.eq_ignore_ascii_case("upgrade")
                || h.name.eq_ignore_ascii_case("http2-settings"))
        {
            continue;
        }
        head.extend_from_slice(h.name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(h.value);
        head.extend_from_slice(b"\r\n");
    }
    let connection: &[u8] =
        if websocket { b"Connection: Upgrade, close\r\n" } else { b"Connection: close\r\n" };
    head.extend_from_slice(connection);
    head.extend_from_slice(b"\r\n");
    HeadRewrite::Done { head, len, path: path.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a server's parser takes for a request line is HTTP here too: lower-case and long
    /// methods, empty lines first, and a method not yet whole is not "not HTTP" (a request
    /// line split across writes went through unpinned when it was).
    #[test]
    fn http_request_lines_are_told_from_other_bytes() {
        use HttpOpening::{NeedMore, No, Yes};
        for (bytes, want) in [
            (&b"GET / HTTP/1.1\r\n"[..], Yes),
            (b"OPTIONS * HTTP/1.1\r\n", Yes),
            (b"get / HTTP/1.1\r\n", Yes),
            (b"M-SEARCH * HTTP/1.1\r\n", Yes),
            (b"UPDATEREDIRECTREF / HTTP/1.1\r\n", Yes),
            (b"\r\nGET / HTTP/1.1\r\n", Yes),
            (b"\r\n\r\n\nGET / HTTP/1.1\r\n", Yes),
            (b"GET  /  http/1.1\n", Yes),
            (b"GET http://evil.example/\r\n", Yes),
            (b"GET / HTTP/2.0\r\n", Yes),
            (b"", NeedMore),
            (b"G", NeedMore),
            (b"GE", NeedMore),
            (b"X /", NeedMore),
            (b"GET / HTTP/1.1", NeedMore),
            (b"GET / HTTP/1.1\r", NeedMore),
            (b"\r\n", NeedMore),
            (b"SSH-2.0-OpenSSH_9.2\r\n", No),
            (b"\x16\x03\x01", No),
            (b"PING\r\n", No),
            (b"ping 114\n", No),
            (b"get some-key\r\n", No),
            (b"SET k v\r\n", No),
            (b"GET /\r\n", No),
            (b" GET / HTTP/1.1\r\n", No),
            (b"\r\n\x00", No),
        ] {
            assert_eq!(http_opening(bytes, 8192), want, "{:?}", String::from_utf8_lossy(bytes));
        }
        assert_eq!(http_opening(&[b'A'; 64], 64), Yes, "a method as long as the limit");
    }

    /// Hands out one piece per read, as a client that writes a byte at a time is read.
    struct Pieces(std::collections::VecDeque<&'static [u8]>);

    impl tokio::io::AsyncRead for Pieces {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if let Some(p) = self.0.pop_front() {
                buf.put_slice(p);
            }
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// A request line that comes a piece at a time is read until its method is whole (the
    /// transparent door read once and, on "G", let the rest through unpinned).
    #[tokio::test]
    async fn a_request_line_split_across_reads_is_still_http() {
        let deadline = Instant::now() + Duration::from_secs(5);
        for (pieces, want) in [
            (vec![&b"G"[..], b"E", b"T", b" /", b" HTTP/1.1\r\n"], Ok(true)),
            (vec![&b"\r"[..], b"\n", b"get", b" /", b" HTTP/1.1", b"\r\n"], Ok(true)),
            (vec![&b"ping"[..], b" 1", b"\n"], Ok(false)),
            (vec![&b"SSH-2.0"[..], b"-x\r\n"], Ok(false)),
            // The client ends its sending before a line end: no server reads a request there.
            (vec![&b"GET / HTTP/1.1"[..]], Ok(false)),
            (vec![&b"GE"[..]], Ok(false)),
            (vec![&b"ping"[..]], Ok(false)),
        ] {
            let mut first = BytesMut::new();
            let mut client = Pieces(pieces.into());
            let got = read_http_opening(&mut client, &mut first, deadline, 8192).await;
            assert_eq!(got.map_err(|_| ()), want, "{first:?}");
        }
        // A client that stalls mid-line (still open) could send the rest later: refused.
        let (mut client, _open) = tokio::io::duplex(64);
        let mut first = BytesMut::from(&b"GET http://evil.example/"[..]);
        let soon = Instant::now() + Duration::from_millis(20);
        assert!(read_http_opening(&mut client, &mut first, soon, 8192).await.is_err());
    }

    /// The request target the origin hears: a path, never a URL that names another host.
    #[test]
    fn absolute_form_becomes_a_path() {
        for (target, want) in [
            ("/a?b", Some("/a?b")),
            ("*", Some("*")),
            ("http://evil.example/x?y", Some("/x?y")),
            ("HTTP://evil.example", Some("/")),
            ("http://evil.example?q", Some("/?q")),
            ("https://evil.example:8443/p", Some("/p")),
            ("evil.example:443", None),
            ("://x/", None),
            ("evil", None),
        ] {
            assert_eq!(origin_form(target).as_deref(), want, "{target}");
        }
    }

    fn target(s: &str) -> Target {
        Target::parse_authority(s, Some(80)).unwrap()
    }

    fn rewritten(head: &[u8], to: &str) -> String {
        match rewrite_http_head(head, &target(to), 8192) {
            HeadRewrite::Done { head: h, len, .. } => {
                assert_eq!(len, head.len());
                String::from_utf8(h).unwrap()
            }
            HeadRewrite::NeedMore => panic!("need more"),
            HeadRewrite::Invalid(why) => panic!("{why}"),
        }
    }

    /// HTTP domain fronting: whatever `Host`s the client wrote (none, another site, two), the
    /// server hears the decided one, once, and the connection ends after this request.
    #[test]
    fn the_first_request_names_the_decided_host_and_closes_the_connection() {
        for head in [
            &b"GET /a HTTP/1.1\r\nHost: evil.example\r\nAccept: */*\r\n\r\n"[..],
            b"GET /a HTTP/1.1\r\nHost: front.example\r\nHost: evil.example\r\nAccept: */*\r\n\r\n",
            b"GET /a HTTP/1.1\r\nAccept: */*\r\nConnection: keep-alive\r\nKeep-Alive: 5\r\n\r\n",
        ] {
            let got = rewritten(head, "front.example:80");
            assert_eq!(
                got,
                "GET /a HTTP/1.1\r\nHost: front.example\r\nAccept: */*\r\nConnection: close\r\n\r\n"
            );
        }
        // Absolute form: the URL's host is not the origin's to see (it would win over `Host`).
        let got = rewritten(
            b"GET http://evil.example/a HTTP/1.1\r\nHost: front.example\r\n\r\n",
            "front.example:80",
        );
        assert_eq!(got, "GET /a HTTP/1.1\r\nHost: front.example\r\nConnection: close\r\n\r\n");
        // Empty lines first (servers skip them) and HTTP/1.0 without `Host`.
        let got = rewritten(b"\r\nGET /a HTTP/1.0\r\n\r\n", "front.example:80");
        assert_eq!(got, "GET /a HTTP/1.0\r\nHost: front.example\r\nConnection: close\r\n\r\n");
        // h2c: no upgrade (after it, each HTTP/2 stream names its own authority).
        for h2c in [
            &b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\nConnection: Upgrade, HTTP2-Settings\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nUpgrade: websocket, h2c\r\nConnection: Upgrade\r\n\r\n",
            b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
        ] {
            let got = rewritten(h2c, "front.example:80");
            assert!(!got.to_ascii_lowercase().contains("upgrade"), "{got}");
            assert!(!got.to_ascii_lowercase().contains("http2-settings"), "{got}");
            assert!(got.ends_with("Connection: close\r\n\r\n"), "{got}");
        }
        // Obs-fold and an authority as the target: not a head to pin, refused.
        for bad in [
            &b"GET / HTTP/1.1\r\nX: a\r\n Host: evil.example\r\n\r\n"[..],
            b"CONNECT evil.example:443 HTTP/1.1\r\n\r\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        ] {
            assert!(
                matches!(rewrite_http_head(bad, &target("a:80"), 8192), HeadRewrite::Invalid(_)),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let got = rewritten(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n", "front.example:8080");
        assert!(got.starts_with("GET / HTTP/1.0\r\nHost: front.example:8080\r\n"), "{got}");
        let ws = b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n\r\n";
        let got = rewritten(ws, "front.example:80");
        assert!(got.contains("Upgrade: websocket\r\nConnection: Upgrade, close\r\n"), "{got}");
        assert!(matches!(
            rewrite_http_head(b"GET / HTTP/1.1\r\nHost: a", &target("a:80"), 8192),
            HeadRewrite::NeedMore
        ));
        assert!(matches!(
            rewrite_http_head(b"GET / HTTP/1.1\r\nHo\x01st: a\r\n\r\n", &target("a:80"), 8192),
            HeadRewrite::Invalid(_)
        ));
    }

    #[test]
    fn the_host_of_a_request_head() {
        let head = b"GET / HTTP/1.1\r\nUser-Agent: x\r\nHost: Example.COM:8080\r\n\r\n";
        assert!(
            matches!(http_host(head, 8192), HttpHost::Complete(Some(h)) if h == "Example.COM:8080")
        );
        assert!(matches!(http_host(b"GET / HTTP/1.1\r\nHo", 8192), HttpHost::NeedMore));
        assert!(matches!(http_host(b"GET / HTTP/1.1\r\n\r\n", 8192), HttpHost::Complete(None)));
        assert!(matches!(http_host(b"GET / HTTP/1.1\r\nHo", 10), HttpHost::Invalid));
    }
}
