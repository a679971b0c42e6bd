//! SOCKS5 (RFC 1928, CONNECT only; RFC 1929 username/password carrying the sandbox token) on the
//! same listener as HTTP, put through the same decision pipeline as an HTTP CONNECT.
//!
//! The parsers are pure functions over a byte slice (`Ok(None)`: need more bytes), so they can be
//! fuzzed without a socket. A name is decided *before* any resolution (socks5h semantics): the
//! proxy never resolves a name the policy has not admitted, and a name with a NUL or control byte
//! (`evil\0.allowed.com`) is refused by the same host parser HTTP uses, not truncated.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use sandgate_config::{Host, Target};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use crate::attribution::Attribution;
use crate::ctx::{Ctx, Presented, token_matches};
use crate::denial::{Refusal, quote};
use crate::io::ClientStream;
use crate::proxy::{ProxyShared, Sandbox};

/// The SOCKS protocol version this module speaks (and the first byte that selects it).
pub const VERSION: u8 = 0x05;
/// Authentication method: none.
pub const METHOD_NONE: u8 = 0x00;
/// Authentication method: username/password (RFC 1929).
pub const METHOD_USERPASS: u8 = 0x02;
/// Method-selection answer: no offered method is acceptable.
pub const METHOD_UNACCEPTABLE: u8 = 0xff;
/// Request command: CONNECT (the only one served).
pub const CMD_CONNECT: u8 = 0x01;

/// Reply codes of RFC 1928, section 6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ReplyCode {
    /// Succeeded.
    Succeeded = 0x00,
    /// General SOCKS server failure (malformed requests).
    GeneralFailure = 0x01,
    /// Connection not allowed by ruleset (every policy refusal).
    NotAllowed = 0x02,
    /// Host unreachable (the name does not resolve, or is not a valid host name).
    HostUnreachable = 0x04,
    /// Connection refused (no checked address accepted).
    ConnectionRefused = 0x05,
    /// Command not supported (BIND, UDP ASSOCIATE).
    CommandNotSupported = 0x07,
    /// Address type not supported.
    AddressTypeNotSupported = 0x08,
}

/// Why a SOCKS frame is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SocksError {
    /// The version byte is not 5 (or 1 in the username/password sub-negotiation).
    #[error("SOCKS version {0:#04x} is not supported (only SOCKS5)")]
    Version(u8),
    /// The greeting offers no authentication method.
    #[error("the greeting offers no authentication method")]
    NoMethods,
    /// A command other than CONNECT.
    #[error("SOCKS command {0:#04x} is not supported (only CONNECT)")]
    Command(u8),
    /// The reserved byte is not zero.
    #[error("reserved byte is {0:#04x}, not 0")]
    Reserved(u8),
    /// An address type other than IPv4, domain name or IPv6.
    #[error("address type {0:#04x} is not supported")]
    AddressType(u8),
    /// The domain name is empty.
    #[error("empty domain name")]
    EmptyName,
    /// The domain name is not a valid host name.
    #[error("invalid domain name {name}: {why}")]
    BadName {
        /// The name as sent (escaped).
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// Port 0.
    #[error("port 0 is not a destination")]
    PortZero,
}

impl SocksError {
    /// The reply code a request refused for this reason gets.
    pub fn reply(&self) -> ReplyCode {
        match self {
            SocksError::Command(_) => ReplyCode::CommandNotSupported,
            SocksError::AddressType(_) => ReplyCode::AddressTypeNotSupported,
            SocksError::EmptyName | SocksError::BadName { .. } => ReplyCode::HostUnreachable,
            _ => ReplyCode::GeneralFailure,
        }
    }
}

/// A client's method-selection message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientGreeting {
    /// The methods offered, in order.
    pub methods: Vec<u8>,
}

/// RFC 1929 credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// User name (ignored: the password carries the token).
    pub user: Vec<u8>,
    /// Password.
    pub password: Vec<u8>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password is the sandbox token: never printed.
        f.debug_struct("Credentials").field("user", &quote(&self.user)).finish_non_exhaustive()
    }
}

/// Where a CONNECT request asks to go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    /// An IPv4 or IPv6 literal.
    Addr(SocketAddr),
    /// A domain name, as sent (not yet checked), and a port.
    Name(Vec<u8>, u16),
}

/// A parsed request (command already checked to be CONNECT).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectRequest {
    /// The destination.
    pub destination: Destination,
}

impl ConnectRequest {
    /// The destination as a normalised [`Target`], by the same rules as an HTTP CONNECT target.
    pub fn target(&self) -> Result<Target, SocksError> {
        match &self.destination {
            Destination::Addr(addr) => {
                if addr.port() == 0 {
                    return Err(SocksError::PortZero);
                }
                let host = Host::Ip(sandgate_config::canonical_ip(addr.ip()));
                Ok(Target { host, port: addr.port() })
            }
            Destination::Name(name, port) => {
                if *port == 0 {
                    return Err(SocksError::PortZero);
                }
                let bad = |why: String| SocksError::BadName { name: quote(name), why };
                // Not lossy: a byte that is not UTF-8 refuses the name instead of being replaced.
                let text = std::str::from_utf8(name).map_err(|e| bad(e.to_string()))?;
                let host = Host::parse(text).map_err(|e| bad(e.to_string()))?;
                Ok(Target { host, port: *port })
            }
        }
    }
}

/// Parses a greeting: `VER NMETHODS METHODS...`. `Ok(None)`: incomplete.
pub fn parse_greeting(buf: &[u8]) -> Result<Option<(ClientGreeting, usize)>, SocksError> {
    let Some(&ver) = buf.first() else { return Ok(None) };
    if ver != VERSION {
        return Err(SocksError::Version(ver));
    }
    let Some(&n) = buf.get(1) else { return Ok(None) };
    if n == 0 {
        return Err(SocksError::NoMethods);
    }
    let end = 2 + n as usize;
    match buf.get(2..end) {
        Some(methods) => Ok(Some((ClientGreeting { methods: methods.to_vec() }, end))),
        None => Ok(None),
    }
}

/// Parses an RFC 1929 request: `1 ULEN UNAME PLEN PASSWD`. `Ok(None)`: incomplete.
pub fn parse_credentials(buf: &[u8]) -> Result<Option<(Credentials, usize)>, SocksError> {
    let Some(&ver) = buf.first() else { return Ok(None) };
    if ver != 0x01 {
        return Err(SocksError::Version(ver));
    }
    let Some(&ulen) = buf.get(1) else { return Ok(None) };
    let user_end = 2 + ulen as usize;
    let Some(&plen) = buf.get(user_end) else { return Ok(None) };
    let end = user_end + 1 + plen as usize;
    if buf.len() < end {
        return Ok(None);
    }
    let creds =
        Credentials { user: buf[2..user_end].to_vec(), password: buf[user_end + 1..end].to_vec() };
    Ok(Some((creds, end)))
}

/// Parses a request: `VER CMD RSV ATYP DST.ADDR DST.PORT`. `Ok(None)`: incomplete. A command
/// other than CONNECT or an unknown address type is refused as soon as its byte arrives.
pub fn parse_request(buf: &[u8]) -> Result<Option<(ConnectRequest, usize)>, SocksError> {
    let Some(&ver) = buf.first() else { return Ok(None) };
    if ver != VERSION {
        return Err(SocksError::Version(ver));
    }
    let Some(&cmd) = buf.get(1) else { return Ok(None) };
    if cmd != CMD_CONNECT {
        return Err(SocksError::Command(cmd));
    }
    let Some(&rsv) = buf.get(2) else { return Ok(None) };
    if rsv != 0 {
        return Err(SocksError::Reserved(rsv));
    }
    let Some(&atyp) = buf.get(3) else { return Ok(None) };
    let (addr_len, addr_start) = match atyp {
        0x01 => (4, 4),
        0x04 => (16, 4),
        0x03 => match buf.get(4) {
            Some(0) => return Err(SocksError::EmptyName),
            Some(&n) => (n as usize, 5),
            None => return Ok(None),
        },
        other => return Err(SocksError::AddressType(other)),
    };
    let port_at = addr_start + addr_len;
    let end = port_at + 2;
    if buf.len() < end {
        return Ok(None);
    }
    let addr = &buf[addr_start..port_at];
    let port = u16::from_be_bytes([buf[port_at], buf[port_at + 1]]);
    let destination = match atyp {
        0x01 => {
            let v4: [u8; 4] = addr.try_into().map_err(|_| SocksError::AddressType(atyp))?;
            Destination::Addr(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(v4)), port))
        }
        0x04 => {
            let v6: [u8; 16] = addr.try_into().map_err(|_| SocksError::AddressType(atyp))?;
            Destination::Addr(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(v6)), port))
        }
        _ => Destination::Name(addr.to_vec(), port),
    };
    Ok(Some((ConnectRequest { destination }, end)))
}

/// A reply frame with the given code and bound address.
pub fn reply_frame(code: ReplyCode, bound: Option<SocketAddr>) -> Vec<u8> {
    let bound = bound.unwrap_or_else(|| SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0));
    let mut out = vec![VERSION, code as u8, 0x00];
    match bound.ip() {
        IpAddr::V4(v4) => {
            out.push(0x01);
            out.extend_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            out.push(0x04);
            out.extend_from_slice(&v6.octets());
        }
    }
    out.extend_from_slice(&bound.port().to_be_bytes());
    out
}

/// The reply code for a pipeline refusal.
pub fn refusal_reply(r: &Refusal) -> ReplyCode {
    match r {
        Refusal::Malformed { .. } => ReplyCode::GeneralFailure,
        Refusal::Unresolvable { .. } => ReplyCode::HostUnreachable,
        Refusal::Unreachable { .. } => ReplyCode::ConnectionRefused,
        // Every policy refusal (deny rule, a person, timeout, no approver, guarded address,
        // missing token): "connection not allowed by ruleset".
        _ => ReplyCode::NotAllowed,
    }
}

/// Reads the connection's first byte (unless already read) and says whether it starts SOCKS5.
/// A client that sends nothing before `deadline`, or closes, is left to the HTTP path, which
/// reports it as it reports any slow or silent client.
pub(crate) async fn sniff<S: AsyncRead + Unpin>(
    client: &mut S,
    buf: &mut BytesMut,
    deadline: Instant,
) -> bool {
    if buf.is_empty() {
        buf.reserve(4096);
        let _ = tokio::time::timeout_at(deadline, client.read_buf(buf)).await;
    }
    buf.first() == Some(&VERSION)
}

/// A frame parser: the value and the bytes it used, `None` when incomplete.
type Parser<T> = fn(&[u8]) -> Result<Option<(T, usize)>, SocksError>;

/// How reading a frame ended without one.
enum FrameEnd {
    Closed,
    TimedOut,
    Bad(SocksError),
}

/// Largest frame: a request with a 255-byte name is 262 bytes, credentials at most 513.
const MAX_FRAME: usize = 1024;

async fn read_frame<T>(
    client: &mut ClientStream,
    buf: &mut BytesMut,
    deadline: Instant,
    parse: Parser<T>,
) -> Result<T, FrameEnd> {
    loop {
        match parse(buf) {
            Ok(Some((value, used))) => {
                buf.advance(used);
                return Ok(value);
            }
            Ok(None) => {}
            Err(e) => return Err(FrameEnd::Bad(e)),
        }
        if buf.len() >= MAX_FRAME {
            // Every frame fits in MAX_FRAME; the parsers never ask for more than that.
            return Err(FrameEnd::Closed);
        }
        buf.reserve(1024);
        match tokio::time::timeout_at(deadline, client.read_buf(buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Err(FrameEnd::Closed),
            Ok(Ok(_)) => {}
            Err(_) => return Err(FrameEnd::TimedOut),
        }
    }
}

impl ProxyShared {
    /// Serves one SOCKS5 connection (its first byte was 0x05) and records its event.
    pub(crate) async fn serve_socks(
        self: Arc<Self>,
        sandbox: Arc<Sandbox>,
        mut client: ClientStream,
        mut buf: BytesMut,
        start: Instant,
        process: Attribution,
    ) {
        let mut ctx = Ctx::new(sandbox.clone(), "SOCKS5", start).with_process(&process);
        let deadline = start + self.config.header_timeout;
        let ended = |ctx: &mut Ctx, end: FrameEnd, what: &str| match end {
            FrameEnd::Closed => {
                ctx.event.rule = "malformed request".into();
                ctx.event.error = Some(format!("SOCKS5 client closed or overflowed in the {what}"));
            }
            FrameEnd::TimedOut => {
                ctx.event.rule = "request head timeout".into();
                ctx.event.error = Some(format!(
                    "no complete SOCKS5 {what} within {}s",
                    self.config.header_timeout.as_secs()
                ));
            }
            FrameEnd::Bad(e) => {
                ctx.event.rule = "malformed request".into();
                ctx.event.error = Some(format!("SOCKS5 {what}: {e}"));
            }
        };

        // Method selection: the token, when the listener has one, travels as the RFC 1929
        // password (curl: socks5h://user:TOKEN@host:port).
        let greeting = match read_frame(&mut client, &mut buf, deadline, parse_greeting).await {
            Ok(g) => g,
            Err(end) => {
                let reply: &[u8] = if matches!(end, FrameEnd::Bad(_)) {
                    &[VERSION, METHOD_UNACCEPTABLE]
                } else {
                    &[]
                };
                ended(&mut ctx, end, "greeting");
                return self.recorded_then_told(&mut client, ctx, reply).await;
            }
        };
        let method = match (&sandbox.token, greeting.methods.as_slice()) {
            (Some(_), m) if m.contains(&METHOD_USERPASS) => METHOD_USERPASS,
            (None, m) if m.contains(&METHOD_NONE) => METHOD_NONE,
            // Without a token any credentials will do; accepting them keeps clients that
            // always send some (a URL with userinfo) working.
            (None, m) if m.contains(&METHOD_USERPASS) => METHOD_USERPASS,
            _ => METHOD_UNACCEPTABLE,
        };
        if method == METHOD_UNACCEPTABLE {
            ctx.refused(&Refusal::Unauthenticated);
            ctx.event.error = Some(if sandbox.token.is_some() {
                "SOCKS5 client offered no username/password method; the proxy token is required"
                    .into()
            } else {
                "SOCKS5 client offered neither no-authentication nor username/password".into()
            });
            return self.recorded_then_told(&mut client, ctx, &[VERSION, method]).await;
        }
        if client.write_all(&[VERSION, method]).await.is_err() {
            return;
        }
        if method == METHOD_USERPASS {
            let creds = match read_frame(&mut client, &mut buf, deadline, parse_credentials).await {
                Ok(c) => c,
                Err(end) => {
                    let reply: &[u8] =
                        if matches!(end, FrameEnd::Bad(_)) { &[0x01, 0x01] } else { &[] };
                    ended(&mut ctx, end, "authentication");
                    return self.recorded_then_told(&mut client, ctx, reply).await;
                }
            };
            let ok = token_matches(sandbox.token.as_ref(), Presented::Password(&creds.password));
            if !ok {
                ctx.refused(&Refusal::Unauthenticated);
                ctx.event.error = Some("SOCKS5 password is not the proxy token".into());
                return self.recorded_then_told(&mut client, ctx, &[0x01, 0x01]).await;
            }
            let _ = client.write_all(&[0x01, 0x00]).await;
        }

        let request = match read_frame(&mut client, &mut buf, deadline, parse_request).await {
            Ok(r) => r,
            Err(end) => {
                let reply = match &end {
                    FrameEnd::Bad(e) => reply_frame(e.reply(), None),
                    _ => Vec::new(),
                };
                ended(&mut ctx, end, "request");
                return self.recorded_then_told(&mut client, ctx, &reply).await;
            }
        };
        let target = match request.target() {
            Ok(t) => t,
            Err(e) => {
                if let Destination::Name(name, port) = &request.destination {
                    ctx.event.host = quote(name);
                    ctx.event.port = *port;
                }
                ctx.event.rule = "malformed request".into();
                ctx.event.error = Some(format!("SOCKS5 request: {e}"));
                let reply = reply_frame(e.reply(), None);
                return self.recorded_then_told(&mut client, ctx, &reply).await;
            }
        };
        ctx.set_target(target);
        let upstream = match self.open_tunnel(&mut ctx).await {
            Ok(s) => s,
            Err(r) => return self.refuse_socks(&mut client, &r, ctx).await,
        };
        // The bound address of our upstream socket is not the client's business; RFC 1928
        // clients of CONNECT ignore it, so the unspecified address says nothing.
        if client.write_all(&reply_frame(ReplyCode::Succeeded, None)).await.is_err() {
            return self.logging(ctx);
        }
        self.tunnel_stages(&mut ctx, client, upstream, buf).await;
        self.logging(ctx);
    }
}

/// Answers a pipeline refusal with its SOCKS reply code, then closes.
impl ProxyShared {
    /// Refuses a SOCKS request: the event (recorded before the client hears) and the reply code,
    /// then the connection's end.
    async fn refuse_socks(&self, client: &mut ClientStream, r: &Refusal, mut ctx: Ctx) {
        ctx.refused(r);
        let code = refusal_reply(r);
        // SOCKS has no body to explain a refusal in: the event carries the readable reason.
        if ctx.event.error.is_none() {
            ctx.event.error = Some(format!(
                "SOCKS5 reply {:#04x}: {} ({})",
                code as u8,
                r.rule_text(),
                r.target().unwrap_or("?")
            ));
        }
        self.recorded_then_told(client, ctx, &reply_frame(code, None)).await;
        let _ = client.shutdown().await;
    }

    /// Records `ctx`'s event, then sends `reply` (if any): whoever follows the events hears of
    /// an ending before the client does (see `record_refusal`).
    async fn recorded_then_told(&self, client: &mut ClientStream, mut ctx: Ctx, reply: &[u8]) {
        self.settle(&mut ctx).await;
        self.logging(ctx);
        if !reply.is_empty() {
            let _ = client.write_all(reply).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(atyp: u8, addr: &[u8], port: u16) -> Vec<u8> {
        let mut v = vec![5, 1, 0, atyp];
        if atyp == 3 {
            v.push(addr.len() as u8);
        }
        v.extend_from_slice(addr);
        v.extend_from_slice(&port.to_be_bytes());
        v
    }

    #[test]
    fn greetings_parse_and_incomplete_ones_wait() {
        assert_eq!(
            parse_greeting(&[5, 2, 0, 2, 9]),
            Ok(Some((ClientGreeting { methods: vec![0, 2] }, 4)))
        );
        for partial in [&[][..], &[5], &[5, 2, 0]] {
            assert_eq!(parse_greeting(partial), Ok(None), "{partial:?}");
        }
        assert_eq!(parse_greeting(&[4, 1, 0]), Err(SocksError::Version(4)));
        assert_eq!(parse_greeting(&[5, 0]), Err(SocksError::NoMethods));
    }

    #[test]
    fn credentials_parse() {
        let (c, n) = parse_credentials(b"\x01\x01u\x03abc").unwrap().unwrap();
        assert_eq!((c.user.as_slice(), c.password.as_slice(), n), (&b"u"[..], &b"abc"[..], 7));
        assert_eq!(parse_credentials(b"\x01\x01u\x03ab"), Ok(None));
        assert_eq!(parse_credentials(b"\x01\x05u"), Ok(None));
        assert_eq!(parse_credentials(b"\x05\x01u\x00"), Err(SocksError::Version(5)));
        assert!(!format!("{c:?}").contains("abc"), "the password is never printed");
    }

    #[test]
    fn requests_become_targets_by_the_http_rules() {
        let r = |b: &[u8]| parse_request(b).unwrap().unwrap().0.target();
        assert_eq!(r(&request(3, b"Example.COM.", 22)).unwrap().to_string(), "example.com:22");
        assert_eq!(r(&request(1, &[127, 0, 0, 1], 5432)).unwrap().to_string(), "127.0.0.1:5432");
        let mapped = Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped().octets();
        assert_eq!(r(&request(4, &mapped, 80)).unwrap().to_string(), "10.0.0.1:80");
        assert_eq!(
            r(&request(4, &Ipv6Addr::LOCALHOST.octets(), 80)).unwrap().to_string(),
            "[::1]:80"
        );
        // A name that is an address is decided as that address.
        assert_eq!(r(&request(3, b"0x7f.1", 80)).unwrap().to_string(), "127.0.0.1:80");
    }

    #[test]
    fn smuggled_names_are_refused_not_truncated() {
        let long = "a".repeat(254);
        let bad: &[&[u8]] = &[
            b"evil\0.allowed.com",
            b"allowed.com\0",
            b"evil\n.allowed.com",
            b"evil .allowed.com",
            b"evil/x.allowed.com",
            b"user@allowed.com",
            b"\xff\xfe.allowed.com",
            b"[fe80::1%eth0]",
            b"allowed.com:443",
            long.as_bytes(),
        ];
        for name in bad {
            let (req, _) = parse_request(&request(3, name, 443)).unwrap().unwrap();
            let e = req.target().unwrap_err();
            assert!(matches!(e, SocksError::BadName { .. }), "{name:?}: {e:?}");
            assert_eq!(e.reply(), ReplyCode::HostUnreachable);
        }
        assert_eq!(parse_request(&request(3, b"", 443)), Err(SocksError::EmptyName));
        let (req, _) = parse_request(&request(3, b"a.com", 0)).unwrap().unwrap();
        assert_eq!(req.target(), Err(SocksError::PortZero));
    }

    #[test]
    fn unsupported_commands_and_types_get_their_codes() {
        assert_eq!(parse_request(&[5, 2]), Err(SocksError::Command(2)));
        assert_eq!(parse_request(&[5, 3, 0, 1]), Err(SocksError::Command(3)));
        assert_eq!(SocksError::Command(2).reply(), ReplyCode::CommandNotSupported);
        assert_eq!(parse_request(&[5, 1, 0, 9]), Err(SocksError::AddressType(9)));
        assert_eq!(SocksError::AddressType(9).reply(), ReplyCode::AddressTypeNotSupported);
        assert_eq!(parse_request(&[5, 1, 1, 1]), Err(SocksError::Reserved(1)));
        assert_eq!(parse_request(&[4, 1, 0, 1]), Err(SocksError::Version(4)));
        let full = request(3, b"example.com", 443);
        for cut in 0..full.len() {
            assert_eq!(parse_request(&full[..cut]), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn replies_are_well_formed() {
        assert_eq!(reply_frame(ReplyCode::NotAllowed, None), [5, 2, 0, 1, 0, 0, 0, 0, 0, 0]);
        let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 0x1234);
        let f = reply_frame(ReplyCode::Succeeded, Some(v6));
        assert_eq!(f.len(), 22);
        assert_eq!((f[3], f[20], f[21]), (4, 0x12, 0x34));
        let t = "x.com:1".to_owned();
        assert_eq!(refusal_reply(&Refusal::Denied { target: t.clone() }), ReplyCode::NotAllowed);
        assert_eq!(
            refusal_reply(&Refusal::Unresolvable { target: t.clone(), error: String::new() }),
            ReplyCode::HostUnreachable
        );
        assert_eq!(
            refusal_reply(&Refusal::Unreachable { target: t, error: String::new() }),
            ReplyCode::ConnectionRefused
        );
    }

    /// Parsers never panic and never claim more bytes than they were given, on any input.
    /// (The 60-second run lives in `tests/socks_fuzz.rs`; this is the quick version.)
    #[test]
    fn parsers_survive_random_input() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 300) as usize;
            let mut buf = Vec::with_capacity(len);
            let mut y = x;
            for i in 0..len {
                y = y.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                // Bias the first bytes toward valid prefixes so deep paths get exercised.
                buf.push(match i {
                    0 if !y.is_multiple_of(4) => 5,
                    1 if y.is_multiple_of(3) => 1,
                    2 if y.is_multiple_of(2) => 0,
                    3 => [1, 3, 4, (y >> 8) as u8][(y % 4) as usize],
                    _ => (y >> 33) as u8,
                });
            }
            check_all(&buf);
        }
    }

    pub(crate) fn check_all(buf: &[u8]) {
        if let Ok(Some((_, n))) = parse_greeting(buf) {
            assert!(n <= buf.len());
        }
        if let Ok(Some((_, n))) = parse_credentials(buf) {
            assert!(n <= buf.len());
        }
        if let Ok(Some((req, n))) = parse_request(buf) {
            assert!(n <= buf.len());
            let _ = req.target();
        }
    }
}
