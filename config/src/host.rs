//! Host names and targets, parsed and normalised once so that matching compares like with like.
//!
//! Normalisation (in this order): reject bytes that have no place in a host (NUL, CR, LF, other
//! controls, spaces), IPv6 zone ids (`%`) and userinfo (`@`); strip brackets around IPv6; strip one
//! trailing dot; read IPv4 in every form a URL parser accepts (`127.1`, `2130706433`, `0x7f.1`,
//! `0177.0.0.1`); map IPv4-mapped IPv6 (`::ffff:a.b.c.d`) to IPv4; lower-case and convert IDN labels
//! to punycode (UTS #46); check label and name lengths.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Longest host text accepted before any normalisation (bytes).
pub const MAX_HOST_LEN: usize = 255;

/// A normalised DNS name: lower-case ASCII (punycode for IDN), no trailing dot, 1..=253 bytes,
/// labels of 1..=63 bytes made of `a-z 0-9 - _`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DomainName(Box<str>);

impl DomainName {
    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Number of labels (`a.example.com` has 3).
    pub fn label_count(&self) -> usize {
        self.0.split('.').count()
    }

    /// Whether `self` is a strict subdomain of `parent` (`a.example.com` of `example.com`; not the
    /// apex itself and not `evilexample.com`).
    pub fn is_strict_subdomain_of(&self, parent: &DomainName) -> bool {
        let (s, p) = (self.as_str(), parent.as_str());
        s.len() > p.len() + 1 && s.ends_with(p) && s.as_bytes()[s.len() - p.len() - 1] == b'.'
    }
}

// Hash and Eq of `DomainName` are those of its text, so maps keyed by names can be probed with a
// `&str` suffix without allocating.
impl std::borrow::Borrow<str> for DomainName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DomainName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for DomainName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

/// A normalised host: a DNS name or an IP address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Host {
    /// A DNS name.
    Name(DomainName),
    /// An IP address (IPv4-mapped IPv6 is stored as IPv4).
    Ip(IpAddr),
}

/// Why a host could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidHost {
    /// Nothing was given.
    #[error("the host is empty")]
    Empty,
    /// Longer than [`MAX_HOST_LEN`] bytes, or a name over 253 bytes after normalisation.
    #[error("the host is {len} bytes long; the limit is {max}")]
    TooLong {
        /// Length seen.
        len: usize,
        /// Limit that applied.
        max: usize,
    },
    /// A control character, space or other byte that never appears in a host.
    #[error("the host contains the forbidden character {ch:?} at byte {at}")]
    ForbiddenChar {
        /// The character.
        ch: char,
        /// Byte offset in the input.
        at: usize,
    },
    /// An IPv6 zone id (`fe80::1%eth0`): it names an interface of the proxy's host.
    #[error("IPv6 zone ids (`%...`) are not accepted")]
    ZoneId,
    /// `user@host`: userinfo is a classic way to make one host look like another.
    #[error("userinfo (`user@host`) is not accepted in a host")]
    Userinfo,
    /// `[` without `]`, or brackets around something that is not IPv6.
    #[error("malformed IPv6 literal {0:?}")]
    BadIpv6(String),
    /// The last label is numeric but the whole is not a valid IPv4 address.
    #[error("{0:?} looks like an IPv4 address but is not a valid one")]
    BadIpv4(String),
    /// IDNA processing refused the name.
    #[error("{0:?} is not a valid internationalised domain name")]
    Idna(String),
    /// A label is empty, too long, or has a character outside `a-z 0-9 - _`.
    #[error("invalid label {label:?} in {host:?}: {why}")]
    BadLabel {
        /// The whole (lower-cased) host.
        host: String,
        /// The offending label.
        label: String,
        /// What is wrong with it.
        why: &'static str,
    },
}

impl Host {
    /// Parses and normalises a host as it appears in a URL authority (IPv6 in brackets or bare).
    pub fn parse(input: &str) -> Result<Host, InvalidHost> {
        if input.is_empty() {
            return Err(InvalidHost::Empty);
        }
        if input.len() > MAX_HOST_LEN {
            return Err(InvalidHost::TooLong { len: input.len(), max: MAX_HOST_LEN });
        }
        for (at, ch) in input.char_indices() {
            if ch.is_control() || ch.is_whitespace() || matches!(ch, '/' | '\\' | '?' | '#') {
                return Err(InvalidHost::ForbiddenChar { ch, at });
            }
        }
        if input.contains('%') {
            return Err(InvalidHost::ZoneId);
        }
        if input.contains('@') {
            return Err(InvalidHost::Userinfo);
        }
        if let Some(rest) = input.strip_prefix('[') {
            let inner =
                rest.strip_suffix(']').ok_or_else(|| InvalidHost::BadIpv6(input.to_owned()))?;
            let v6: Ipv6Addr = inner.parse().map_err(|_| InvalidHost::BadIpv6(input.to_owned()))?;
            return Ok(Host::Ip(canonical_ip(IpAddr::V6(v6))));
        }
        if input.contains(':') {
            let v6: Ipv6Addr = input.parse().map_err(|_| InvalidHost::BadIpv6(input.to_owned()))?;
            return Ok(Host::Ip(canonical_ip(IpAddr::V6(v6))));
        }
        let trimmed = input.strip_suffix('.').unwrap_or(input);
        if trimmed.is_empty() {
            return Err(InvalidHost::Empty);
        }
        if ends_in_number(trimmed) {
            return parse_ipv4(trimmed)
                .map(|v4| Host::Ip(IpAddr::V4(v4)))
                .ok_or_else(|| InvalidHost::BadIpv4(input.to_owned()));
        }
        let ascii = if trimmed.is_ascii() {
            trimmed.to_ascii_lowercase()
        } else {
            idna::domain_to_ascii(trimmed).map_err(|_| InvalidHost::Idna(input.to_owned()))?
        };
        // IDNA mapping can produce a name that now ends in a number (full-width digits).
        if ends_in_number(&ascii) {
            return parse_ipv4(&ascii)
                .map(|v4| Host::Ip(IpAddr::V4(v4)))
                .ok_or_else(|| InvalidHost::BadIpv4(input.to_owned()));
        }
        DomainName::check(ascii).map(Host::Name)
    }

    /// The name, when this is a DNS name.
    pub fn name(&self) -> Option<&DomainName> {
        match self {
            Host::Name(n) => Some(n),
            Host::Ip(_) => None,
        }
    }

    /// The address, when this is an IP literal.
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Host::Name(_) => None,
            Host::Ip(ip) => Some(*ip),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => n.fmt(f),
            Host::Ip(IpAddr::V4(v4)) => v4.fmt(f),
            Host::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
        }
    }
}

impl DomainName {
    /// Parses a host that must be a DNS name (not an IP literal).
    pub fn parse(input: &str) -> Result<DomainName, InvalidHost> {
        match Host::parse(input)? {
            Host::Name(n) => Ok(n),
            Host::Ip(_) => Err(InvalidHost::BadLabel {
                host: input.to_owned(),
                label: input.to_owned(),
                why: "an IP address where a domain name is needed",
            }),
        }
    }

    /// Checks an already lower-cased ASCII name.
    fn check(ascii: String) -> Result<DomainName, InvalidHost> {
        if ascii.len() > 253 {
            return Err(InvalidHost::TooLong { len: ascii.len(), max: 253 });
        }
        for label in ascii.split('.') {
            let why = if label.is_empty() {
                Some("empty label (two dots in a row, or a leading dot)")
            } else if label.len() > 63 {
                Some("a label may be at most 63 bytes")
            } else if !label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
                Some("only letters, digits, '-' and '_' may appear in a label")
            } else if label.starts_with('-') || label.ends_with('-') {
                Some("a label may not start or end with '-'")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(InvalidHost::BadLabel {
                    host: ascii.clone(),
                    label: label.to_owned(),
                    why,
                });
            }
        }
        Ok(DomainName(ascii.into_boxed_str()))
    }
}

/// Maps IPv4-mapped IPv6 addresses to IPv4, so `::ffff:127.0.0.1` is treated as `127.0.0.1`.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// WHATWG URL rule: a host whose last label is a number is an IPv4 address (or an error).
fn ends_in_number(host: &str) -> bool {
    let last = host.rsplit('.').next().unwrap_or(host);
    if last.is_empty() {
        return false;
    }
    if last.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    let hex = last.strip_prefix("0x").or_else(|| last.strip_prefix("0X"));
    hex.is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Parses IPv4 in the forms URL parsers and `inet_aton` accept: 1 to 4 parts, each decimal, octal
/// (leading 0) or hex (0x); the last part fills the remaining bytes.
fn parse_ipv4(s: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut nums = Vec::with_capacity(parts.len());
    for p in &parts {
        nums.push(parse_ipv4_number(p)?);
    }
    let (last, init) = nums.split_last()?;
    if init.iter().any(|&n| n > 255) {
        return None;
    }
    let remaining_bits = 8 * (4 - init.len() as u32);
    if remaining_bits < 32 && *last >= 1u64 << remaining_bits {
        return None;
    }
    if *last > u32::MAX as u64 {
        return None;
    }
    let mut addr = *last as u32;
    for (i, &n) in init.iter().enumerate() {
        addr |= (n as u32) << (24 - 8 * i as u32);
    }
    Some(Ipv4Addr::from(addr))
}

fn parse_ipv4_number(p: &str) -> Option<u64> {
    if p.is_empty() {
        return None;
    }
    let (digits, radix) = if let Some(h) = p.strip_prefix("0x").or_else(|| p.strip_prefix("0X")) {
        (h, 16)
    } else if p.len() > 1 && p.starts_with('0') {
        (&p[1..], 8)
    } else {
        (p, 10)
    };
    if digits.is_empty() {
        return Some(0); // "0x" alone is 0 in WHATWG
    }
    if digits.len() > 12 {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// A destination: normalised host plus port.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// The host.
    pub host: Host,
    /// The port (defaulted from the URL scheme, or 443 when none is given).
    pub port: u16,
}

/// Why a target (`host[:port]` or URL) could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidTarget {
    /// The host part is invalid.
    #[error(transparent)]
    Host(#[from] InvalidHost),
    /// The port is not a number in 1..=65535.
    #[error("invalid port {0:?}: expected a number from 1 to 65535")]
    Port(String),
    /// A control, whitespace, bidi or other invisible character anywhere in the target (the path
    /// of a URL included): what a person reads would not be what is checked.
    #[error(
        "the target contains the forbidden character {ch:?} at byte {at} (control, whitespace and \
         invisible characters are refused anywhere in a target)"
    )]
    ForbiddenChar {
        /// The character.
        ch: char,
        /// Byte offset in the input.
        at: usize,
    },
    /// The URL scheme is not one whose default port is known.
    #[error("unsupported URL scheme {0:?} (use http, https, ws or wss, or give host:port)")]
    Scheme(String),
}

impl Target {
    /// Parses `host`, `host:port`, `[v6]:port` or a URL (`https://host[:port]/path`).
    /// Without a scheme or port, the port is 443.
    pub fn parse(input: &str) -> Result<Target, InvalidTarget> {
        // Checked over the whole input: the path of a URL is not parsed further, and a CR LF
        // there (or a bidi override) must not pass where the same character in the host fails.
        if let Some((at, ch)) =
            input.char_indices().find(|&(_, c)| crate::text::is_unsafe_char(c) || c.is_whitespace())
        {
            return Err(InvalidTarget::ForbiddenChar { ch, at });
        }
        if let Some((scheme, rest)) = input.split_once("://") {
            let default_port = match scheme.to_ascii_lowercase().as_str() {
                "http" | "ws" => 80,
                "https" | "wss" => 443,
                _ => return Err(InvalidTarget::Scheme(scheme.to_owned())),
            };
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            return Target::parse_authority(&rest[..end], Some(default_port));
        }
        Target::parse_authority(input, Some(443))
    }

    /// Parses an authority (`host[:port]`, `[v6][:port]`). Without a port, `default_port` is used;
    /// when that is `None`, a port is required (as in a CONNECT request).
    pub fn parse_authority(
        input: &str,
        default_port: Option<u16>,
    ) -> Result<Target, InvalidTarget> {
        if input.len() > MAX_HOST_LEN + 6 {
            return Err(InvalidHost::TooLong { len: input.len(), max: MAX_HOST_LEN }.into());
        }
        if input.contains('@') {
            return Err(InvalidHost::Userinfo.into());
        }
        let (host, port) = if input.starts_with('[') {
            match input.find(']') {
                Some(close) => {
                    let rest = &input[close + 1..];
                    let port = match rest.strip_prefix(':') {
                        Some(p) => Some(p),
                        None if rest.is_empty() => None,
                        None => return Err(InvalidHost::BadIpv6(input.to_owned()).into()),
                    };
                    (&input[..=close], port)
                }
                None => return Err(InvalidHost::BadIpv6(input.to_owned()).into()),
            }
        } else if input.matches(':').count() > 1 {
            // Bare IPv6 without brackets: no port can be told apart.
            (input, None)
        } else {
            match input.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (input, None),
            }
        };
        let port = match port {
            Some(p) => parse_port(p)?,
            None => default_port.ok_or_else(|| InvalidTarget::Port(String::new()))?,
        };
        Ok(Target { host: Host::parse(host)?, port })
    }
}

/// Parses a decimal port in 1..=65535 (no sign, no spaces).
pub fn parse_port(p: &str) -> Result<u16, InvalidTarget> {
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(InvalidTarget::Port(p.to_owned()));
    }
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(InvalidTarget::Port(p.to_owned())),
        Ok(n) => Ok(n),
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(s: &str) -> String {
        Host::parse(s).map(|h| h.to_string()).unwrap_or_else(|e| format!("ERR {e}"))
    }

    #[test]
    fn normalises_hosts() {
        let rows = [
            ("Example.COM", "example.com"),
            ("example.com.", "example.com"),
            ("127.1", "127.0.0.1"),
            ("2130706433", "127.0.0.1"),
            ("0x7f.1", "127.0.0.1"),
            ("0177.0.0.1", "127.0.0.1"),
            ("0x7f000001", "127.0.0.1"),
            ("[::1]", "[::1]"),
            ("[::ffff:127.0.0.1]", "127.0.0.1"),
            ("::1", "[::1]"),
            ("bücher.example", "xn--bcher-kva.example"),
            ("ＥＸＡＭＰＬＥ.com", "example.com"),
            ("_dmarc.example.com", "_dmarc.example.com"),
        ];
        for (input, want) in rows {
            assert_eq!(norm(input), want, "input {input:?}");
        }
    }

    #[test]
    fn rejects_malformed_hosts() {
        let rows = [
            "",
            ".",
            "exa\0mple.com",
            "example.com\r\n",
            "a b.com",
            "[fe80::1%eth0]",
            "fe80::1%25eth0",
            "user@example.com",
            "[::1",
            "[example.com]",
            "256.0.0.1",
            "1.2.3.4.5",
            "999999999999",
            "a..b",
            "-a.com",
            "a-.com",
            "example.com/evil",
        ];
        for input in rows {
            assert!(Host::parse(input).is_err(), "{input:?} should be rejected");
        }
        assert!(Host::parse(&"a".repeat(256)).is_err());
        assert!(Host::parse(&format!("{}.com", "a".repeat(64))).is_err());
    }

    #[test]
    fn parses_targets() {
        let rows = [
            ("crates.io", "crates.io:443"),
            ("crates.io:80", "crates.io:80"),
            ("http://Example.com/path?q", "example.com:80"),
            ("https://example.com:8443", "example.com:8443"),
            ("[::1]:8080", "[::1]:8080"),
            ("[::1]", "[::1]:443"),
        ];
        for (input, want) in rows {
            assert_eq!(Target::parse(input).unwrap().to_string(), want, "input {input:?}");
        }
        for bad in ["example.com:0", "example.com:65536", "example.com:+1", "ftp://x", "a@b:443"] {
            assert!(Target::parse(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(Target::parse_authority("example.com", None).is_err());
    }

    /// `check 'https://example.com/\r\n'` was accepted while a leading tab was refused: control
    /// and invisible characters are refused anywhere, the URL path included.
    #[test]
    fn targets_with_control_characters_anywhere_are_refused() {
        let rows: &[(&str, char, usize)] = &[
            ("https://example.com/\r\n", '\r', 20),
            ("https://example.com/a\nb", '\n', 21),
            ("https://example.com/\t", '\t', 20),
            ("\texample.com", '\t', 0),
            ("example.com\0", '\0', 11),
            ("example.com:443\r\n", '\r', 15),
            ("https://example.com/\x1b[2J", '\x1b', 20),
            ("https://example.com/\u{9b}31m", '\u{9b}', 20),
            ("https://example.com/\x7f", '\x7f', 20),
            ("https://example.com/\u{202e}gpj.exe", '\u{202e}', 20),
            ("https://example.com/\u{200b}", '\u{200b}', 20),
            ("https://example.com/\u{2028}", '\u{2028}', 20),
            ("https://example.com/a b", ' ', 21),
            ("https://example.com/\u{a0}", '\u{a0}', 20),
        ];
        for &(input, ch, at) in rows {
            assert_eq!(
                Target::parse(input),
                Err(InvalidTarget::ForbiddenChar { ch, at }),
                "{input:?}"
            );
        }
        assert_eq!(
            Target::parse("https://example.com/ünï").unwrap().to_string(),
            "example.com:443"
        );
    }

    #[test]
    fn subdomain_relation_is_label_aligned() {
        let p = DomainName::parse("example.com").unwrap();
        assert!(DomainName::parse("a.example.com").unwrap().is_strict_subdomain_of(&p));
        assert!(!DomainName::parse("evilexample.com").unwrap().is_strict_subdomain_of(&p));
        assert!(!p.is_strict_subdomain_of(&p));
    }
}
