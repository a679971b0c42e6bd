//! The per-request context every stage of the pipeline takes ([`Ctx`]), the request target as
//! written ([`RequestTarget`]), and what every front end does the same way before the stages
//! run or as they refuse: the token check, the `Host` header made from the decided target, the
//! TLS alert a refused server name gets.
//!
//! The stages themselves are in `pipeline.rs`; the front ends (`conn.rs`, `forward.rs`,
//! `relay.rs`, `socks.rs`, `transparent.rs`) and the stages that serve a connection to its end
//! (`intercept.rs`) take the context from here, so none of them needs the pipeline that calls
//! it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::Uri;
use sandgate_config::{NetworkPolicy, Target};
use tokio::time::Instant;

use crate::attribution::Attribution;
use crate::denial::Refusal;
use crate::proxy::Sandbox;
use crate::traits::{Outcome, ProxyEvent, ProxyToken};

/// A TLS fatal alert, access_denied: what a client whose server name is refused receives.
pub(crate) const TLS_ACCESS_DENIED: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31];

/// One request as it moves through the stages: who asks, under which policy, where to, where it
/// may connect, and the event being filled in. Each stage takes it and leaves its result in it;
/// `logging` consumes it.
pub(crate) struct Ctx {
    /// The sandbox the request came from.
    pub(crate) sandbox: Arc<Sandbox>,
    /// Its policy when the request arrived (a policy replaced later applies to later requests).
    pub(crate) policy: Arc<NetworkPolicy>,
    /// The normalised destination, once `request_filter` has parsed it.
    pub(crate) target: Option<Target>,
    /// The addresses `upstream_peer` checked (empty through an upstream proxy).
    pub(crate) addrs: Vec<SocketAddr>,
    /// The event `logging` records.
    pub(crate) event: ProxyEvent,
    /// The lookup of the process that opened the connection (see [`crate::attribution`]).
    pub(crate) process: Attribution,
    /// When the request's first byte came.
    pub(crate) start: Instant,
    /// Recorded already ([`ProxyShared::record_refusal`]): `logging` does nothing.
    pub(crate) recorded: bool,
}

/// A request target as the client wrote it, by form.
pub(crate) enum RequestTarget<'a> {
    /// `CONNECT host:port` (authority form; the port is required).
    Authority(&'a str),
    /// `GET http://host[:port]/path` (absolute form; port 80 when none is given).
    Absolute(&'a Uri),
}

impl Ctx {
    /// A context for a request of `sandbox` that started at `start` (its first byte).
    pub(crate) fn new(sandbox: Arc<Sandbox>, method: &str, start: Instant) -> Ctx {
        let policy = sandbox.policy();
        let event = ProxyEvent {
            sandbox: sandbox.id.clone(),
            method: method.to_owned(),
            host: String::new(),
            port: 0,
            path: None,
            decision: Outcome::Reject,
            rule: String::new(),
            bytes_up: 0,
            bytes_down: 0,
            duration: Duration::ZERO,
            error: None,
            count: 1,
            samples: Vec::new(),
            process: None,
            secrets_injected: 0,
        };
        let process = Attribution::none();
        Ctx {
            sandbox,
            policy,
            target: None,
            addrs: Vec::new(),
            event,
            process,
            start,
            recorded: false,
        }
    }

    /// The same context, for a request of a connection whose process `process` looks up.
    pub(crate) fn with_process(mut self, process: &Attribution) -> Ctx {
        self.process = process.clone();
        self
    }

    /// Sets the destination (the event names it from now on). An address the sandbox's DNS stub
    /// gave out for a name stands for that name (a client that resolved the name itself before
    /// asking the proxy, as `socks5://` clients do).
    pub(crate) fn set_target(&mut self, mut target: Target) {
        if let sandgate_config::Host::Ip(ip) = target.host
            && let crate::names::Lookup::Name(name) = self.sandbox.names.lookup(ip)
        {
            target.host = sandgate_config::Host::Name(name);
        }
        self.event.host = target.host.to_string();
        self.event.port = target.port;
        self.target = Some(target);
    }

    /// Records a refusal in the event.
    pub(crate) fn refused(&mut self, r: &Refusal) {
        self.event.decision = r.outcome();
        self.event.rule = r.rule_text();
        if r.status() == 502 {
            self.event.error = Some(r.rule_text());
        }
    }

    /// The destination; a stage that runs before `request_filter` set one is a bug in a front
    /// end, refused as a malformed request rather than a panic.
    pub(crate) fn target(&self) -> Result<&Target, Refusal> {
        self.target.as_ref().ok_or_else(|| Refusal::Malformed {
            input: String::new(),
            why: "no target was parsed before the request was decided".into(),
        })
    }
}

/// Whether `presented` (a `Proxy-Authorization` value, or a SOCKS5 password) carries the
/// sandbox's token. The only token check: every front end calls it, once per request.
pub(crate) fn token_matches(token: Option<&ProxyToken>, presented: Presented<'_>) -> bool {
    let Some(token) = token else { return true };
    let secret = match presented {
        Presented::Nothing => return false,
        Presented::Password(p) => p.to_vec(),
        Presented::Header(header) => match header_secret(header) {
            Some(s) => s,
            None => return false,
        },
    };
    constant_time_eq(&secret, token.as_str().as_bytes())
}

/// How a client presented the token.
#[derive(Clone, Copy)]
pub(crate) enum Presented<'a> {
    /// Not at all.
    Nothing,
    /// A `Proxy-Authorization` header: `Basic base64(user:TOKEN)` or `Bearer TOKEN`.
    Header(&'a [u8]),
    /// A SOCKS5 (RFC 1929) password.
    Password(&'a [u8]),
}

impl<'a> Presented<'a> {
    /// From an optional `Proxy-Authorization` header value.
    pub(crate) fn header(value: Option<&'a [u8]>) -> Presented<'a> {
        value.map_or(Presented::Nothing, Presented::Header)
    }
}

fn header_secret(header: &[u8]) -> Option<Vec<u8>> {
    use base64::Engine as _;

    let text = std::str::from_utf8(header).ok()?;
    let (scheme, value) = text.trim().split_once(' ')?;
    if scheme.eq_ignore_ascii_case("basic") {
        let creds = base64::engine::general_purpose::STANDARD.decode(value.trim()).ok()?;
        let i = creds.iter().position(|&b| b == b':')?;
        Some(creds[i + 1..].to_vec())
    } else if scheme.eq_ignore_ascii_case("bearer") {
        Some(value.trim().as_bytes().to_vec())
    } else {
        None
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The `Host` header a forwarded request carries upstream: made from the decided target, never
/// copied from what the client wrote, so it names the host that was decided (normalised: lower
/// case, no trailing dot, punycode) and nothing else. The port is left out when it is 80.
pub(crate) fn host_header(target: &Target) -> String {
    if target.port == 80 { target.host.to_string() } else { target.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_checked() {
        let t = ProxyToken::new("s3cret");
        let h = |v: &'static [u8]| Presented::Header(v);
        assert!(token_matches(None, Presented::Nothing));
        assert!(!token_matches(Some(&t), Presented::Nothing));
        assert!(token_matches(Some(&t), h(b"Basic dXNlcjpzM2NyZXQ=")));
        assert!(token_matches(Some(&t), h(b"bearer s3cret")));
        assert!(token_matches(Some(&t), Presented::Password(b"s3cret")));
        assert!(!token_matches(Some(&t), Presented::Password(b"s3cre")));
        assert!(!token_matches(Some(&t), h(b"Bearer s3cre")));
        assert!(!token_matches(Some(&t), h(b"Basic eDp5")));
        assert!(!token_matches(Some(&t), h(b"Basic eDp")));
        assert!(!token_matches(Some(&t), h(b"Digest s3cret")));
        assert!(!token_matches(Some(&t), h(b"Basic czNjcmV0"))); // no colon
    }

    #[test]
    fn the_host_header_is_the_decided_target() {
        for (authority, header) in [
            ("Example.COM", "example.com"),
            ("example.com.:80", "example.com"),
            ("EXAMPLE.com.:8080", "example.com:8080"),
            ("bücher.example", "xn--bcher-kva.example"),
            ("127.0.0.1:81", "127.0.0.1:81"),
            ("[::1]", "[::1]"),
            ("[::1]:81", "[::1]:81"),
        ] {
            let t = Target::parse_authority(authority, Some(80)).unwrap();
            assert_eq!(host_header(&t), header, "{authority}");
        }
    }
}
