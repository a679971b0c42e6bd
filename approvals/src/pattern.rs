//! The host patterns a person may answer with: `example.com`, `*.example.com`, an IP address or
//! a block (`10.1.0.0/16`).
//!
//! Parsed and matched by the config crate's [`DomainPattern`], the very rules the proxy and the
//! grants use, so an answer releases exactly the questions its grant will cover. On top, the
//! broker's own guard: the allow list's breadth limits apply to every answer (`*`, `*.com`,
//! `*.github.io` are refused, for deny answers too). A port, when given, is returned apart
//! ([`AnswerPattern::parse_with_port`]): the broker puts it on the grant.

use std::fmt;

use sandgate_config::{DomainPattern, Host, PatternUse};

/// A checked host pattern, normalised (lower case, punycode, no trailing dot).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AnswerPattern {
    pattern: DomainPattern,
    text: String,
}

/// Why a pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid host pattern {pattern:?}: {reason}")]
pub struct PatternError {
    /// The pattern given.
    pub pattern: String,
    /// Why.
    pub reason: String,
}

impl AnswerPattern {
    /// Parses `host`, `*.domain.tld`, an IP literal (IPv6 bare or bracketed) or a CIDR block.
    pub fn parse(input: &str) -> Result<Self, PatternError> {
        match Self::parse_with_port(input)? {
            (p, None) => Ok(p),
            (_, Some(_)) => Err(PatternError {
                pattern: input.to_string(),
                reason: "a port is not expected here (write example.com)".into(),
            }),
        }
    }

    /// Parses as [`parse`](Self::parse), also taking an optional `:port` (`example.com:8443`,
    /// `[::1]:22`), returned apart: an answer's port says which port its grant opens.
    pub fn parse_with_port(input: &str) -> Result<(Self, Option<u16>), PatternError> {
        let err = |reason: String| PatternError { pattern: input.to_string(), reason };
        let mut pattern = DomainPattern::parse(input.trim(), PatternUse::Allow)
            .map_err(|e| err(e.kind.to_string()))?;
        let port = pattern.port.take();
        let text = pattern.to_string();
        Ok((AnswerPattern { pattern, text }, port))
    }

    /// Whether `host` (a name in any case, with or without a trailing dot, or an IP literal)
    /// falls under the pattern. A wildcard covers every subdomain but not the domain itself.
    pub fn matches(&self, host: &str) -> bool {
        // The port plays no part: the pattern has none.
        Host::parse(host).is_ok_and(|h| self.pattern.matches(&h, 0))
    }

    /// Whether this is a `*.` pattern.
    pub fn is_wildcard(&self) -> bool {
        matches!(self.pattern.host, sandgate_config::HostPattern::Subdomains(_))
    }

    /// The normalised text.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for AnswerPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_parse_and_match() {
        // (pattern, host, matches)
        let rows = [
            ("example.com", "example.com", true),
            ("example.com", "EXAMPLE.com.", true),
            ("example.com", "a.example.com", false),
            ("*.example.com", "a.example.com", true),
            ("*.example.com", "a.b.example.com", true),
            ("*.example.com", "example.com", false),
            ("*.example.com", "badexample.com", false),
            ("*.Example.COM.", "x.example.com", true),
            ("10.0.0.1", "10.0.0.1", true),
            ("[::1]", "::1", true),
            ("::1", "[::1]", true),
            ("bücher.example", "xn--bcher-kva.example", true),
            ("10.1.0.0/16", "10.1.200.3", true),
            ("10.1.0.0/16", "10.2.0.1", false),
            ("*.example.com", "10.0.0.1", false),
        ];
        for (p, host, want) in rows {
            let pat = AnswerPattern::parse(p).unwrap();
            assert_eq!(pat.matches(host), want, "{p} vs {host}");
        }
    }

    #[test]
    fn a_port_is_taken_apart() {
        let rows = [
            ("example.com:8443", "example.com", Some(8443)),
            ("example.com", "example.com", None),
            ("[::1]:22", "::1", Some(22)),
            ("*.example.com:443", "*.example.com", Some(443)),
        ];
        for (input, text, port) in rows {
            let (p, got) = AnswerPattern::parse_with_port(input).unwrap();
            assert_eq!((p.as_str().trim_matches(['[', ']']), got), (text, port), "{input}");
        }
        assert!(AnswerPattern::parse_with_port("example.com:99999").is_err());
    }

    #[test]
    fn broad_or_malformed_patterns_are_refused() {
        for p in [
            "",
            "*",
            "*.",
            "*.com",
            "a.*.com",
            "**.a.com",
            "ex ample.com",
            "a..b",
            "*a.com",
            "*.github.io",
            "example.com:443",
            "example.com:0",
            "0.0.0.0/0",
        ] {
            let e = AnswerPattern::parse(p).unwrap_err();
            assert_eq!(e.pattern, p);
        }
    }
}
