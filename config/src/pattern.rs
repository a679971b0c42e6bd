//! Domain patterns: what allow and deny lists are made of.
//!
//! Syntax (an optional `:port` may follow every form):
//! - `example.com` — exactly that host;
//! - `*.example.com` — any subdomain at any depth, *not* the apex `example.com`;
//! - `203.0.113.7`, `[2001:db8::1]` — that address;
//! - `10.0.0.0/8`, `2001:db8::/32` — any address in the block;
//! - `*` — everything (deny lists only).
//!
//! Names are normalised as hosts are ([`crate::Host::parse`]). Allow lists refuse patterns that
//! would open everything or a whole public suffix (`*`, `*.com`, `*.co.uk`, `0.0.0.0/0`).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use crate::host::{DomainName, Host, InvalidHost, canonical_ip, parse_port};

/// Which list a pattern is for: allow lists are held to a stricter standard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatternUse {
    /// An allow list (or a grant).
    Allow,
    /// A deny list.
    Deny,
}

/// What a pattern matches, before the port.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// Exactly this name.
    Exact(DomainName),
    /// Any strict subdomain of this name.
    Subdomains(DomainName),
    /// Exactly this address.
    Ip(IpAddr),
    /// Any address in this block (host bits are zero).
    Cidr(IpAddr, u8),
    /// Everything (deny lists only).
    Any,
}

/// A parsed, normalised domain pattern.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DomainPattern {
    /// What hosts it matches.
    pub host: HostPattern,
    /// The only port it matches, or every port.
    pub port: Option<u16>,
}

/// Why a pattern was refused; quotes the pattern and says how to fix it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid domain pattern {pattern:?}: {kind}")]
pub struct InvalidPattern {
    /// The pattern as written.
    pub pattern: String,
    /// What is wrong.
    pub kind: PatternErrorKind,
}

/// The ways a pattern can be wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatternErrorKind {
    /// The host part is not a valid host.
    #[error("{0}")]
    Host(InvalidHost),
    /// `*` somewhere other than a leading `*.`.
    #[error("`*` may only appear as a leading `*.` (as in `*.example.com`)")]
    MisplacedWildcard,
    /// A wildcard or block so wide it opens everything or a whole public suffix.
    #[error(
        "it would allow {0}; allow lists need a registrable domain (e.g. `*.example.com`) or a narrower block"
    )]
    TooBroad(&'static str),
    /// The port is not in 1..=65535.
    #[error("the port must be a number from 1 to 65535")]
    Port,
    /// A URL where a host was expected; holds the pattern to write instead.
    #[error("a pattern names a host, not a URL: write `{0}` (any port) or `{0}:PORT`")]
    Url(String),
    /// A path (or query) after a host name: patterns match hosts, never paths.
    #[error(
        "a pattern has no path: {path:?} cannot be matched here; write `{host}` (every path of \
         the host)"
    )]
    Path {
        /// The host (and port) as written before the path.
        host: String,
        /// The path, query or fragment as written.
        path: String,
    },
    /// The CIDR prefix is out of range for the address family.
    #[error("the prefix length must be 0..=32 for IPv4 and 0..=128 for IPv6")]
    Prefix,
}

/// Whether `name` (lower-case, no trailing dot) is a public suffix as far as sandgate knows:
/// a single label (`com`, `io`, `test`) or one of the common multi-label ones (`co.uk`,
/// `github.io`, ...). A built-in subset of the Public Suffix List, enough for allow-list breadth
/// checks and for grouping hosts by registrable domain.
pub fn is_public_suffix(name: &str) -> bool {
    !name.contains('.') || MULTI_LABEL_PUBLIC_SUFFIXES.contains(&name)
}

/// Public suffixes under which `*.SUFFIX` would cover unrelated owners. Single-label suffixes
/// (`com`, `io`, ...) are refused by rule; these are the common multi-label ones.
const MULTI_LABEL_PUBLIC_SUFFIXES: &[&str] = &[
    "ac.uk",
    "co.uk",
    "gov.uk",
    "ltd.uk",
    "me.uk",
    "net.uk",
    "org.uk",
    "plc.uk",
    "sch.uk",
    "com.au",
    "net.au",
    "org.au",
    "edu.au",
    "gov.au",
    "co.nz",
    "org.nz",
    "net.nz",
    "co.jp",
    "ne.jp",
    "or.jp",
    "ac.jp",
    "com.br",
    "net.br",
    "org.br",
    "com.cn",
    "net.cn",
    "org.cn",
    "com.mx",
    "com.tr",
    "co.in",
    "net.in",
    "org.in",
    "co.za",
    "com.sg",
    "com.hk",
    "com.tw",
    "co.kr",
    "or.kr",
    "com.ar",
    "com.ua",
    "co.il",
    "com.pl",
    "eu.org",
    "github.io",
    "githubusercontent.com",
    "gitlab.io",
    "herokuapp.com",
    "appspot.com",
    "cloudfront.net",
    "amazonaws.com",
    "azurewebsites.net",
    "blogspot.com",
    "netlify.app",
    "vercel.app",
    "pages.dev",
    "workers.dev",
    "web.app",
    "firebaseapp.com",
    "ngrok.io",
    "ngrok-free.app",
];

impl DomainPattern {
    /// Parses a pattern for the given list.
    pub fn parse(text: &str, usage: PatternUse) -> Result<DomainPattern, InvalidPattern> {
        let err = |kind| InvalidPattern { pattern: text.to_owned(), kind };
        if let Some((_, rest)) = text.split_once("://") {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            let host = match host.find(']') {
                Some(end) if host.starts_with('[') => &host[..=end],
                _ => host.split(':').next().unwrap_or_default(),
            };
            return Err(err(PatternErrorKind::Url(host.to_owned())));
        }
        // `/` also writes a CIDR block; after anything but an address it starts a path.
        if let Some(at) = text.find(['/', '?', '#']) {
            let (head, tail) = text.split_at(at);
            let address = matches!(Host::parse(head.trim_start_matches('[')), Ok(Host::Ip(_)));
            if !(tail.starts_with('/') && address) {
                return Err(err(PatternErrorKind::Path { host: head.into(), path: tail.into() }));
            }
        }
        let (body, port) = split_port(text).map_err(err)?;
        let host = if body == "*" {
            HostPattern::Any
        } else if let Some(suffix) = body.strip_prefix("*.") {
            if suffix.contains('*') {
                return Err(err(PatternErrorKind::MisplacedWildcard));
            }
            let name = DomainName::parse(suffix).map_err(|e| err(PatternErrorKind::Host(e)))?;
            HostPattern::Subdomains(name)
        } else if body.contains('*') {
            return Err(err(PatternErrorKind::MisplacedWildcard));
        } else if let Some((addr, len)) = body.split_once('/') {
            let ip = match Host::parse(addr).map_err(|e| err(PatternErrorKind::Host(e)))? {
                Host::Ip(ip) => ip,
                Host::Name(_) => {
                    return Err(err(PatternErrorKind::Host(InvalidHost::BadIpv4(addr.into()))));
                }
            };
            let len = u8::from_str(len).map_err(|_| err(PatternErrorKind::Prefix))?;
            // An IPv4-mapped IPv6 block was canonicalised to IPv4: shift its prefix too.
            let raw_v6 = addr.contains(':');
            let len = match (ip, raw_v6) {
                (IpAddr::V4(_), true) if len >= 96 => len - 96,
                (IpAddr::V4(_), true) => return Err(err(PatternErrorKind::Prefix)),
                _ => len,
            };
            let max = if ip.is_ipv4() { 32 } else { 128 };
            if len > max {
                return Err(err(PatternErrorKind::Prefix));
            }
            HostPattern::Cidr(mask(ip, len), len)
        } else {
            match Host::parse(body).map_err(|e| err(PatternErrorKind::Host(e)))? {
                Host::Name(n) => HostPattern::Exact(n),
                Host::Ip(ip) => HostPattern::Ip(ip),
            }
        };
        let pattern = DomainPattern { host, port };
        if usage == PatternUse::Allow
            && let Some(why) = pattern.too_broad()
        {
            return Err(err(PatternErrorKind::TooBroad(why)));
        }
        Ok(pattern)
    }

    /// Why this pattern is too broad for an allow list, if it is.
    fn too_broad(&self) -> Option<&'static str> {
        match &self.host {
            HostPattern::Any => Some("every host"),
            HostPattern::Subdomains(s) if s.label_count() < 2 => Some("a whole top-level domain"),
            HostPattern::Subdomains(s) if MULTI_LABEL_PUBLIC_SUFFIXES.contains(&s.as_str()) => {
                Some("a whole public suffix")
            }
            HostPattern::Cidr(IpAddr::V4(_), len) if *len < 8 => Some("a huge IPv4 block"),
            HostPattern::Cidr(IpAddr::V6(_), len) if *len < 16 => Some("a huge IPv6 block"),
            HostPattern::Exact(_)
            | HostPattern::Subdomains(_)
            | HostPattern::Ip(_)
            | HostPattern::Cidr(..) => None,
        }
    }

    /// Whether this pattern matches a host and port.
    pub fn matches(&self, host: &Host, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        match (&self.host, host) {
            (HostPattern::Any, _) => true,
            (HostPattern::Exact(p), Host::Name(n)) => p == n,
            (HostPattern::Subdomains(p), Host::Name(n)) => n.is_strict_subdomain_of(p),
            (HostPattern::Ip(p), Host::Ip(ip)) => p == ip,
            (HostPattern::Cidr(net, len), Host::Ip(ip)) => in_block(*ip, *net, *len),
            (HostPattern::Exact(_) | HostPattern::Subdomains(_), Host::Ip(_))
            | (HostPattern::Ip(_) | HostPattern::Cidr(..), Host::Name(_)) => false,
        }
    }

    /// Whether every host:port this pattern matches is also matched by `other`.
    pub fn is_covered_by(&self, other: &DomainPattern) -> bool {
        let port_ok = match (other.port, self.port) {
            (None, _) => true,
            (Some(o), Some(s)) => o == s,
            (Some(_), None) => false,
        };
        if !port_ok {
            return false;
        }
        match (&self.host, &other.host) {
            (_, HostPattern::Any) => true,
            (HostPattern::Any, _) => false,
            (HostPattern::Exact(a), HostPattern::Exact(b)) => a == b,
            (HostPattern::Exact(a), HostPattern::Subdomains(b)) => a.is_strict_subdomain_of(b),
            (HostPattern::Subdomains(a), HostPattern::Subdomains(b)) => {
                a == b || a.is_strict_subdomain_of(b)
            }
            (HostPattern::Subdomains(_), HostPattern::Exact(_)) => false,
            (HostPattern::Ip(a), HostPattern::Ip(b)) => a == b,
            (HostPattern::Ip(a), HostPattern::Cidr(net, len)) => in_block(*a, *net, *len),
            (HostPattern::Cidr(a, alen), HostPattern::Cidr(b, blen)) => {
                alen >= blen && in_block(*a, *b, *blen)
            }
            (HostPattern::Cidr(..), HostPattern::Ip(_)) => false,
            (HostPattern::Exact(_) | HostPattern::Subdomains(_), _)
            | (HostPattern::Ip(_) | HostPattern::Cidr(..), _) => false,
        }
    }
}

impl fmt::Display for DomainPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostPattern::Exact(n) => write!(f, "{n}")?,
            HostPattern::Subdomains(n) => write!(f, "*.{n}")?,
            HostPattern::Ip(ip) => write!(f, "{}", Host::Ip(*ip))?,
            HostPattern::Cidr(IpAddr::V6(ip), len) if self.port.is_some() => {
                write!(f, "[{ip}/{len}]")?
            }
            HostPattern::Cidr(ip, len) => write!(f, "{ip}/{len}")?,
            HostPattern::Any => f.write_str("*")?,
        }
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

/// Splits a trailing `:port`, minding bracketed and bare IPv6.
fn split_port(text: &str) -> Result<(&str, Option<u16>), PatternErrorKind> {
    if let Some(rest) = text.strip_prefix('[') {
        let close =
            rest.find(']').ok_or(PatternErrorKind::Host(InvalidHost::BadIpv6(text.into())))?;
        let inner = &rest[..close];
        let after = &rest[close + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => Some(parse_port(p).map_err(|_| PatternErrorKind::Port)?),
            None if after.is_empty() => None,
            None => return Err(PatternErrorKind::Host(InvalidHost::BadIpv6(text.into()))),
        };
        // `[2001:db8::/32]:443` carries a CIDR; `[::1]` an address.
        return Ok((if inner.contains('/') { inner } else { &text[..close + 2] }, port));
    }
    if text.matches(':').count() > 1 {
        return Ok((text, None)); // bare IPv6 (or IPv6 CIDR) without a port
    }
    match text.rsplit_once(':') {
        Some((body, p)) => Ok((body, Some(parse_port(p).map_err(|_| PatternErrorKind::Port)?))),
        None => Ok((text, None)),
    }
}

/// Zeroes the host bits of `ip` beyond `len`.
pub(crate) fn mask(ip: IpAddr, len: u8) -> IpAddr {
    match canonical_ip(ip) {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let m = if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len)) };
            IpAddr::V4((bits & m).into())
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let m = if len == 0 { 0 } else { u128::MAX << (128 - u32::from(len)) };
            IpAddr::V6((bits & m).into())
        }
    }
}

/// Whether `ip` lies in the block `net/len` (same family only).
pub(crate) fn in_block(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => mask(ip, len) == net,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_display() {
        for (text, shown) in [
            ("Example.com", "example.com"),
            ("*.Example.com.", "*.example.com"),
            ("example.com:8080", "example.com:8080"),
            ("10.1.2.3/8", "10.0.0.0/8"),
            ("[::1]:443", "[::1]:443"),
            ("2001:db8::/32", "2001:db8::/32"),
            ("[2001:db8::/32]:443", "[2001:db8::/32]:443"),
            ("::ffff:10.0.0.0/104", "10.0.0.0/8"),
        ] {
            let p = DomainPattern::parse(text, PatternUse::Allow).unwrap();
            assert_eq!(p.to_string(), shown, "{text}");
            assert_eq!(DomainPattern::parse(shown, PatternUse::Allow).unwrap(), p);
        }
    }

    #[test]
    fn refuses_broad_allow_patterns() {
        for text in ["*", "*.com", "*.co.uk", "*.github.io", "0.0.0.0/0", "::/0", "10.0.0.0/4"] {
            let e = DomainPattern::parse(text, PatternUse::Allow).unwrap_err();
            assert!(matches!(e.kind, PatternErrorKind::TooBroad(_)), "{text}: {e}");
        }
        for text in ["*", "*.com", "0.0.0.0/0"] {
            assert!(DomainPattern::parse(text, PatternUse::Deny).is_ok(), "{text}");
        }
    }

    #[test]
    fn refuses_malformed_patterns() {
        for text in [
            "a.*.com",
            "foo*.com",
            "*.*.com",
            "**.com",
            "*.",
            "example.com:0",
            "example.com:x",
            "10.0.0.0/33",
            "::/129",
            "exa mple.com",
            "a@b.com",
            "",
        ] {
            assert!(DomainPattern::parse(text, PatternUse::Deny).is_err(), "{text:?}");
        }
    }

    #[test]
    fn a_url_is_refused_with_the_pattern_to_write() {
        for (text, want) in [
            ("http://x", "x"),
            ("https://crates.io/api/v1?q=1", "crates.io"),
            ("https://user:pw@Example.com:8443/", "Example.com"),
            ("http://[2001:db8::1]:80/", "[2001:db8::1]"),
            ("http://x]y:80/", "x]y"), // a bracket that opens no address is part of the name
        ] {
            let e = DomainPattern::parse(text, PatternUse::Allow).unwrap_err();
            assert_eq!(e.kind, PatternErrorKind::Url(want.into()), "{text}");
            assert!(e.to_string().contains(&format!("write `{want}`")), "{e}");
        }
    }

    #[test]
    fn a_path_is_refused_with_the_host_to_write() {
        // (pattern, host to write, path named)
        for (text, host, path) in [
            ("pypi.org/simple", "pypi.org", "/simple"),
            ("pypi.org/", "pypi.org", "/"),
            ("pypi.org:443/simple/x", "pypi.org:443", "/simple/x"),
            ("*.pythonhosted.org/packages", "*.pythonhosted.org", "/packages"),
            ("example.com?q=1", "example.com", "?q=1"),
            ("example.com#top", "example.com", "#top"),
            ("10.0.0.1?x", "10.0.0.1", "?x"),
        ] {
            let e = DomainPattern::parse(text, PatternUse::Allow).unwrap_err();
            let want = PatternErrorKind::Path { host: host.into(), path: path.into() };
            assert_eq!(e.kind, want, "{text}");
            let msg = e.to_string();
            assert!(msg.contains("a pattern has no path") && msg.contains(&format!("`{host}`")));
        }
        // Blocks keep their slash.
        for text in ["10.0.0.0/8", "10.0.0.0/8:443", "2001:db8::/32", "[2001:db8::/32]:443"] {
            assert!(DomainPattern::parse(text, PatternUse::Deny).is_ok(), "{text}");
        }
        let e = DomainPattern::parse("10.0.0.0/x", PatternUse::Deny).unwrap_err();
        assert_eq!(e.kind, PatternErrorKind::Prefix);
    }

    /// Each row: a pattern, a host and port, whether it matches. Every shape has a row that
    /// matches and one just outside it (the wrong port, the apex, the next block, the other
    /// family).
    #[test]
    fn a_pattern_matches_its_hosts_and_ports_only() {
        let rows: &[(&str, &str, u16, bool)] = &[
            ("example.com", "example.com", 443, true),
            ("example.com", "a.example.com", 443, false),
            ("example.com", "example.org", 443, false),
            ("example.com:443", "example.com", 443, true),
            ("example.com:443", "example.com", 80, false),
            ("*.example.com", "a.example.com", 80, true),
            ("*.example.com", "a.b.example.com", 80, true),
            ("*.example.com", "example.com", 80, false),
            ("*.example.com", "badexample.com", 80, false),
            ("*.example.com:8080", "a.example.com", 8080, true),
            ("*.example.com:8080", "a.example.com", 8081, false),
            ("203.0.113.7", "203.0.113.7", 1, true),
            ("203.0.113.7", "203.0.113.8", 1, false),
            ("203.0.113.7:22", "203.0.113.7", 23, false),
            ("[2001:db8::1]", "[2001:db8::1]", 443, true),
            ("[2001:db8::1]", "[2001:db8::2]", 443, false),
            ("10.0.0.0/8", "10.255.255.255", 5, true),
            ("10.0.0.0/8", "11.0.0.0", 5, false),
            ("10.0.0.0/8", "9.255.255.255", 5, false),
            ("10.0.0.0/8:5", "10.0.0.1", 6, false),
            ("10.0.0.0/8", "[::ffff:10.0.0.1]", 5, true), // mapped: judged as IPv4
            ("10.0.0.0/8", "[::a00:1]", 5, false),        // IPv6, same low bits
            ("0.0.0.0/0", "[::1]", 5, false),             // a block holds its own family only
            ("::/0", "1.2.3.4", 5, false),
            ("::/0", "[::1]", 5, true),
            ("0.0.0.0/0", "1.2.3.4", 5, true),
            ("2001:db8::/32", "[2001:db8:ffff::1]", 5, true),
            ("2001:db8::/32", "[2001:db9::1]", 5, false),
            ("10.0.0.0/32", "10.0.0.0", 5, true),
            ("10.0.0.0/32", "10.0.0.1", 5, false),
            ("*", "anything.test", 1, true),
            ("*", "[::1]", 65535, true),
            ("*:443", "anything.test", 80, false),
            // A name pattern never matches an address, an address pattern never a name.
            ("example.com", "93.184.216.34", 443, false),
            ("*.example.com", "[2001:db8::1]", 443, false),
            ("10.0.0.0/8", "ten.test", 443, false),
            ("10.0.0.1", "ten.test", 443, false),
        ];
        for &(pattern, host, port, want) in rows {
            let p = DomainPattern::parse(pattern, PatternUse::Deny).unwrap();
            let h = Host::parse(host).unwrap();
            assert_eq!(p.matches(&h, port), want, "{pattern} on {host}:{port}");
        }
    }

    /// Each row: a pattern, another, whether everything the first matches the second matches
    /// too. Used to drop rules that another already covers, so a wrong `true` loses a rule.
    #[test]
    fn coverage_holds_only_when_every_match_is_shared() {
        let rows: &[(&str, &str, bool)] = &[
            ("a.example.com", "*.example.com", true),
            ("example.com", "*.example.com", false),
            ("*.a.example.com", "*.example.com", true),
            ("*.example.com", "*.example.com", true),
            ("*.example.com", "*.a.example.com", false),
            ("*.example.com", "a.example.com", false),
            ("*.example.com", "example.com", false),
            ("a.example.com", "a.example.com", true),
            ("a.example.com", "b.example.com", false),
            ("example.com:443", "example.com", true),
            ("example.com:443", "example.com:443", true),
            ("example.com:443", "example.com:80", false),
            ("example.com", "example.com:443", false),
            ("example.com", "*", true),
            ("10.0.0.0/8", "*", true),
            ("*", "*", true),
            ("*", "example.com", false),
            ("*", "10.0.0.0/8", false),
            ("*:443", "*", true),
            ("*", "*:443", false),
            ("10.1.2.3", "10.1.2.3", true),
            ("10.1.2.3", "10.1.2.4", false),
            ("10.1.2.3", "10.0.0.0/8", true),
            ("11.1.2.3", "10.0.0.0/8", false),
            ("10.1.0.0/16", "10.0.0.0/8", true),
            ("10.0.0.0/8", "10.0.0.0/8", true),
            ("10.0.0.0/8", "10.1.0.0/16", false),
            ("10.0.0.0/8", "10.0.0.0/16", false), // same start, wider
            ("11.1.0.0/16", "10.0.0.0/8", false),
            ("10.0.0.0/8", "10.0.0.1", false),
            ("10.0.0.1", "example.com", false),
            ("example.com", "10.0.0.0/8", false),
            ("*.example.com", "10.0.0.1", false),
            ("10.0.0.0/8", "*.example.com", false),
            ("[2001:db8::1]", "2001:db8::/32", true),
            ("10.0.0.1", "::/0", false), // the other family
        ];
        for &(a, b, want) in rows {
            let p = |s| DomainPattern::parse(s, PatternUse::Deny).unwrap();
            assert_eq!(p(a).is_covered_by(&p(b)), want, "{a} covered by {b}");
        }
    }

    /// The port after a host, in every spelling a pattern may have; a bracket without its
    /// address, or junk after it, is refused.
    #[test]
    fn the_port_is_split_from_every_host_spelling() {
        let ok: &[(&str, &str, Option<u16>)] = &[
            ("example.com", "example.com", None),
            ("example.com:443", "example.com", Some(443)),
            ("[::1]", "[::1]", None),
            ("[::1]:443", "[::1]", Some(443)),
            ("::1", "::1", None),
            ("2001:db8::/32", "2001:db8::/32", None),
            ("[2001:db8::/32]:443", "2001:db8::/32", Some(443)),
            ("[2001:db8::/32]", "2001:db8::/32", None),
            ("10.0.0.0/8:22", "10.0.0.0/8", Some(22)),
        ];
        for &(text, body, port) in ok {
            assert_eq!(split_port(text), Ok((body, port)), "{text}");
        }
        for text in ["[::1", "[::1]x", "[::1]:", "[::1]:0", "[::1]:65536", "a.test:", "a.test:0"] {
            assert!(split_port(text).is_err(), "{text}");
        }
    }

    /// Allow lists refuse what opens a whole suffix or a huge block, and accept what is just
    /// narrow enough.
    #[test]
    fn breadth_limits_sit_at_their_boundaries() {
        let rows: &[(&str, bool)] = &[
            ("*.example.com", true),
            ("*.example.co.uk", true),
            ("*.co.uk", false),
            ("*.github.io", false),
            ("*.com", false),
            ("10.0.0.0/8", true),
            ("10.0.0.0/7", false),
            ("2001::/16", true),
            ("2000::/15", false),
            ("::ffff:10.0.0.0/104", true),
            ("::ffff:10.0.0.0/103", false),
            ("example.com", true),
            ("10.0.0.1", true),
        ];
        for &(text, accepted) in rows {
            let got = DomainPattern::parse(text, PatternUse::Allow);
            assert_eq!(got.is_ok(), accepted, "{text}: {got:?}");
            if let Err(e) = got {
                assert!(matches!(e.kind, PatternErrorKind::TooBroad(_)), "{text}: {e}");
            }
        }
    }

    /// A mapped IPv6 block becomes the IPv4 block it covers; a prefix shorter than the mapping
    /// covers more than IPv4 and is refused.
    #[test]
    fn a_mapped_ipv6_block_becomes_its_ipv4_block() {
        let p = |s| DomainPattern::parse(s, PatternUse::Deny);
        let v4 = |s: &str| HostPattern::Cidr(s.parse().unwrap(), 0);
        assert_eq!(p("::ffff:0.0.0.0/96").unwrap().host, v4("0.0.0.0"));
        assert_eq!(
            p("::ffff:10.1.2.3/128").unwrap().host,
            HostPattern::Cidr([10, 1, 2, 3].into(), 32)
        );
        assert_eq!(p("::ffff:0.0.0.0/95").unwrap_err().kind, PatternErrorKind::Prefix);
        // Not read as an IPv4 prefix: `/8` of IPv6 is far wider than any IPv4 block.
        assert_eq!(p("::ffff:10.0.0.0/8").unwrap_err().kind, PatternErrorKind::Prefix);
        assert_eq!(p("::ffff:0.0.0.0/32").unwrap_err().kind, PatternErrorKind::Prefix);
        assert_eq!(p("10.0.0.0/33").unwrap_err().kind, PatternErrorKind::Prefix);
        assert_eq!(p("2001:db8::/129").unwrap_err().kind, PatternErrorKind::Prefix);
        assert!(p("2001:db8::/128").is_ok());
        assert!(p("10.0.0.0/32").is_ok());
        // A name where an address belongs.
        assert!(matches!(p("example.com/8").unwrap_err().kind, PatternErrorKind::Path { .. }));
    }

    #[test]
    fn coverage() {
        let p = |s| DomainPattern::parse(s, PatternUse::Deny).unwrap();
        assert!(p("a.example.com").is_covered_by(&p("*.example.com")));
        assert!(!p("example.com").is_covered_by(&p("*.example.com")));
        assert!(p("*.a.example.com").is_covered_by(&p("*.example.com")));
        assert!(!p("*.example.com").is_covered_by(&p("a.example.com")));
        assert!(p("example.com:443").is_covered_by(&p("example.com")));
        assert!(!p("example.com").is_covered_by(&p("example.com:443")));
        assert!(p("10.1.0.0/16").is_covered_by(&p("10.0.0.0/8")));
        assert!(p("10.1.2.3").is_covered_by(&p("10.0.0.0/8")));
        assert!(!p("10.0.0.0/8").is_covered_by(&p("10.1.0.0/16")));
    }
}
