//! The host patterns a person may answer with: `example.com` or `*.example.com`.
//!
//! The daemon validates patterns with the config crate's full rules before they get here; this
//! is the broker's own guard, so a wildcard answer can never cover more than a domain's
//! subdomains (`*`, `*.com` are refused).

use std::fmt;

/// A checked host pattern, lower-case, without trailing dot.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPattern {
    text: String,
    wildcard: bool,
}

/// Why a pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid host pattern {pattern:?}: {reason}")]
pub struct PatternError {
    /// The pattern given.
    pub pattern: String,
    /// Why.
    pub reason: &'static str,
}

impl HostPattern {
    /// Parses `host`, `*.domain.tld`, an IPv4 literal or a bracketed or bare IPv6 literal.
    pub fn parse(input: &str) -> Result<Self, PatternError> {
        let err = |reason| Err(PatternError { pattern: input.to_string(), reason });
        let s = input.trim().trim_end_matches('.').to_ascii_lowercase();
        let s = s.strip_prefix('[').and_then(|x| x.strip_suffix(']')).unwrap_or(&s).to_string();
        if s.is_empty() {
            return err("empty");
        }
        if s.len() > 253 {
            return err("longer than 253 characters");
        }
        if s.parse::<std::net::IpAddr>().is_ok() {
            return Ok(HostPattern { text: s, wildcard: false });
        }
        let (wildcard, name) = match s.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, s.as_str()),
        };
        if name.contains('*') {
            return err("a wildcard is only allowed as the whole first label (*.example.com)");
        }
        for label in name.split('.') {
            if label.is_empty() || label.len() > 63 {
                return err("empty or over-long label");
            }
            if !label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
                return err(
                    "only letters, digits, '-' and '_' (write international names in punycode)",
                );
            }
        }
        if wildcard && !name.contains('.') {
            return err(
                "a wildcard must leave at least a domain and its TLD (*.example.com, not *.com)",
            );
        }
        Ok(HostPattern { text: s.clone(), wildcard })
    }

    /// Whether `host` (any case, trailing dot allowed) falls under the pattern. A wildcard
    /// covers every subdomain but not the domain itself.
    pub fn matches(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let host = host.strip_prefix('[').and_then(|x| x.strip_suffix(']')).unwrap_or(&host);
        if self.wildcard {
            let suffix = &self.text[1..]; // ".example.com"
            host.len() > suffix.len() && host.ends_with(suffix)
        } else {
            host == self.text
        }
    }

    /// Whether this is a `*.` pattern.
    pub fn is_wildcard(&self) -> bool {
        self.wildcard
    }

    /// The normalised text.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for HostPattern {
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
        ];
        for (p, host, want) in rows {
            let pat = HostPattern::parse(p).unwrap();
            assert_eq!(pat.matches(host), want, "{p} vs {host}");
        }
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
            "é.com",
            "*a.com",
        ] {
            let e = HostPattern::parse(p).unwrap_err();
            assert_eq!(e.pattern, p);
        }
    }
}
