//! What every section's checker shares: the error placed at file:line:column
//! ([`ConfigError`]), the checking context of one file ([`Cx`]), durations and `~` paths.
//!
//! The file parser (`file.rs`) and the sections it hands to their own modules (`intercept`,
//! `upstream`) all use these; none of them is used here, so the sections need not import the
//! parser that calls them.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Spanned;

use crate::decision::{Rule, RuleSource};
use crate::pattern::{DomainPattern, PatternUse};
use crate::policy::PathRule;

/// A configuration error, placed in its file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The file (or `command line`).
    pub path: PathBuf,
    /// 1-based line (0 when the error is about the file as a whole).
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub help: String,
    /// The offending line of the file, when known.
    pub snippet: Option<String>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            writeln!(f, "{}:{}:{}: {}", self.path.display(), self.line, self.column, self.message)?;
        } else {
            writeln!(f, "{}: {}", self.path.display(), self.message)?;
        }
        if let Some(snippet) = &self.snippet {
            let n = self.line.to_string();
            writeln!(f, " {n} | {snippet}")?;
            let pad = " ".repeat(n.len());
            writeln!(f, " {pad} | {}^", " ".repeat(self.column.saturating_sub(1)))?;
        }
        write!(f, "help: {}", self.help)
    }
}

impl ConfigError {
    /// An error at a byte span of `text` (the file's content).
    pub(crate) fn at(
        path: &Path,
        text: &str,
        span: Option<Range<usize>>,
        message: impl Into<String>,
        help: impl Into<String>,
    ) -> ConfigError {
        let (line, column, snippet) = match span {
            Some(span) => {
                let start = span.start.min(text.len());
                let before = &text[..start];
                let line = before.matches('\n').count() + 1;
                let line_start = before.rfind('\n').map_or(0, |i| i + 1);
                let column = text[line_start..start].chars().count() + 1;
                let snippet = text[line_start..].lines().next().unwrap_or("").to_owned();
                (line, column, Some(snippet))
            }
            None => (0, 0, None),
        };
        ConfigError {
            path: path.to_owned(),
            line,
            column,
            message: message.into(),
            help: help.into(),
            snippet,
        }
    }

    /// An error about a whole file (cannot read it, ...).
    pub(crate) fn file(path: &Path, message: impl Into<String>, help: impl Into<String>) -> Self {
        ConfigError::at(path, "", None, message, help)
    }
}

/// Parses a duration written as a number and a unit: `500ms`, `30s`, `15m`, `1h`, `7d`, `2w`, or
/// a sum of them (`1h30m`). A bare number is refused (seconds or minutes?).
pub fn parse_duration(input: &str) -> Result<Duration, String> {
    let s = input.trim();
    if s.is_empty() {
        return Err("empty duration; write e.g. \"30s\", \"15m\", \"1h\"".into());
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let n: u64 = rest[..digits].parse().map_err(|_| {
            format!("{input:?} is not a duration; write e.g. \"30s\", \"15m\", \"1h\"")
        })?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "d" => Duration::from_secs(n.saturating_mul(86_400)),
            "w" => Duration::from_secs(n.saturating_mul(7 * 86_400)),
            "" => return Err(format!("{input:?} has no unit; add ms, s, m, h, d or w")),
            u => return Err(format!("{input:?}: unknown unit {u:?}; use ms, s, m, h, d or w")),
        };
        rest = &rest[unit_len..];
        total = total.saturating_add(part);
    }
    Ok(total)
}

/// Where a file's values are checked: its path and text (to place errors at file:line:column)
/// and the home directory `~` stands for.
pub(crate) struct Cx<'a> {
    pub(crate) path: &'a Path,
    pub(crate) text: &'a str,
    pub(crate) home: Option<&'a Path>,
}

impl Cx<'_> {
    /// An error at `span`, with how to fix it.
    pub(crate) fn err(
        &self,
        span: Range<usize>,
        message: String,
        help: impl Into<String>,
    ) -> ConfigError {
        ConfigError::at(self.path, self.text, Some(span), message, help)
    }

    /// A `[filesystem] protected` entry: a relative path inside a directory, without `..`.
    pub(crate) fn protected_entry(&self, p: &Spanned<String>) -> Result<String, ConfigError> {
        let name = p.get_ref();
        if name.is_empty() || name.starts_with('/') || name.split('/').any(|c| c == "..") {
            return Err(self.err(
                p.span(),
                format!("protected entry {name:?} must be a relative path inside a directory"),
                "write it relative to the writable directory, e.g. \".git/hooks\"",
            ));
        }
        Ok(name.clone())
    }

    /// The 1-based line of `span`.
    pub(crate) fn line(&self, span: &Range<usize>) -> usize {
        self.text[..span.start.min(self.text.len())].matches('\n').count() + 1
    }

    /// Domain patterns, each with the line it came from.
    pub(crate) fn patterns(
        &self,
        items: &[Spanned<String>],
        usage: PatternUse,
    ) -> Result<Vec<Rule>, ConfigError> {
        items
            .iter()
            .map(|item| {
                let pattern = DomainPattern::parse(item.get_ref(), usage)
                    .map_err(|e| self.err(item.span(), e.to_string(), pattern_help(&e.kind)))?;
                Ok(Rule {
                    pattern: Some(pattern),
                    source: RuleSource::File {
                        path: self.path.to_owned(),
                        line: self.line(&item.span()),
                    },
                })
            })
            .collect()
    }

    /// A duration like `30s`.
    pub(crate) fn duration(
        &self,
        item: Option<&Spanned<String>>,
    ) -> Result<Option<Duration>, ConfigError> {
        item.map(|d| {
            parse_duration(d.get_ref()).map_err(|e| {
                self.err(d.span(), e, "write a duration like \"30s\", \"15m\", \"7d\"")
            })
        })
        .transpose()
    }

    /// A count that must be at least 1 (a budget of zero would refuse everything).
    pub(crate) fn at_least_one(
        &self,
        item: Option<&Spanned<u32>>,
    ) -> Result<Option<u32>, ConfigError> {
        match item {
            Some(n) if *n.get_ref() == 0 => Err(self.err(
                n.span(),
                "0 would refuse everything".into(),
                "write a number of at least 1",
            )),
            Some(n) => Ok(Some(*n.get_ref())),
            None => Ok(None),
        }
    }

    /// `[network] default_ports`: a non-empty list of ports 1..=65535.
    pub(crate) fn default_ports(
        &self,
        item: Option<&Spanned<Vec<u16>>>,
    ) -> Result<Option<Vec<u16>>, ConfigError> {
        let Some(item) = item else { return Ok(None) };
        let ports = item.get_ref();
        if ports.is_empty() {
            return Err(self.err(
                item.span(),
                "default_ports is empty: no pattern without a port would match anything".into(),
                "list ports like [80, 443], or remove the key to let such patterns match every port",
            ));
        }
        if ports.contains(&0) {
            return Err(self.err(
                item.span(),
                "port 0 in default_ports".into(),
                "use ports 1 to 65535",
            ));
        }
        Ok(Some(ports.clone()))
    }

    /// A duration that must not be zero (a time-out of zero would fail every call).
    pub(crate) fn nonzero_duration(
        &self,
        item: Option<&Spanned<String>>,
    ) -> Result<Option<Duration>, ConfigError> {
        let d = self.duration(item)?;
        match (item, d) {
            (Some(item), Some(Duration::ZERO)) => Err(self.err(
                item.span(),
                format!("{:?} is zero: every call would time out", item.get_ref()),
                "write a duration like \"12s\"",
            )),
            _ => Ok(d),
        }
    }

    /// Absolute paths (`~/` expanded), each with the line it came from.
    pub(crate) fn paths(&self, items: &[Spanned<String>]) -> Result<Vec<PathRule>, ConfigError> {
        items
            .iter()
            .map(|item| {
                let path = expand_path(item.get_ref(), self.home).ok_or_else(|| {
                    self.err(
                        item.span(),
                        format!("path {:?} is not absolute", item.get_ref()),
                        "write an absolute path, or one starting with ~/ for your home directory",
                    )
                })?;
                Ok(PathRule {
                    path,
                    source: RuleSource::File {
                        path: self.path.to_owned(),
                        line: self.line(&item.span()),
                    },
                })
            })
            .collect()
    }
}

/// How to fix a pattern refused for `kind`.
pub(crate) fn pattern_help(kind: &crate::pattern::PatternErrorKind) -> &'static str {
    use crate::pattern::PatternErrorKind as K;
    match kind {
        K::Host(_) => "write a host name like \"example.com\", an IP address, or a CIDR block",
        K::MisplacedWildcard => "use \"*.example.com\" for subdomains, or list hosts one by one",
        K::TooBroad(_) => "name the registrable domain you need, e.g. \"*.example.com\"",
        K::Port => "write the port after a colon, e.g. \"example.com:8443\"",
        K::Prefix => "use a prefix length of 0..=32 for IPv4, 0..=128 for IPv6",
        K::Url(_) => "drop the scheme and path: a pattern is a host, optionally with :PORT",
        K::Path { .. } => {
            "drop the path; to allow only some paths of a host, list the host here and add \
             [[http_rules]] for it (docs/secrets-and-http-rules.md)"
        }
    }
}

/// Expands `~` and `~/...` with `home`; returns `None` for a relative path.
pub(crate) fn expand_path(p: &str, home: Option<&Path>) -> Option<PathBuf> {
    let path = if p == "~" {
        home?.to_owned()
    } else if let Some(rest) = p.strip_prefix("~/") {
        home?.join(rest)
    } else {
        PathBuf::from(p)
    };
    path.is_absolute().then_some(path)
}

/// `$HOME`, when set and absolute.
pub(crate) fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from).filter(|p| p.is_absolute())
}

/// What becomes of a destination no rule decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AskMode {
    /// Hold the request and ask a person (the default).
    Person,
    /// Nobody is there to ask (CI, unattended runs): refuse at once, and record what would have
    /// been asked.
    Deny,
}

impl AskMode {
    /// Parses `person` or `deny`.
    pub fn parse(s: &str) -> Option<AskMode> {
        match s {
            "person" => Some(AskMode::Person),
            "deny" => Some(AskMode::Deny),
            _ => None,
        }
    }

    /// The word in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            AskMode::Person => "person",
            AskMode::Deny => "deny",
        }
    }
}

impl Cx<'_> {
    /// `[daemon] ask`: `"person"` or `"deny"`.
    pub(crate) fn ask_mode(
        &self,
        item: Option<&Spanned<String>>,
    ) -> Result<Option<AskMode>, ConfigError> {
        item.map(|m| {
            AskMode::parse(m.get_ref()).ok_or_else(|| {
                self.err(
                    m.span(),
                    format!("unknown ask mode {:?}", m.get_ref()),
                    "ask = \"person\" (hold the request and ask, the default) or \"deny\" \
                     (nobody to ask: refuse at once and record it)",
                )
            })
        })
        .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        for (text, secs) in [("30s", 30), ("15m", 900), ("1h30m", 5400), ("2d", 172_800)] {
            assert_eq!(parse_duration(text), Ok(Duration::from_secs(secs)), "{text}");
        }
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        for bad in ["", "5", "m", "5x", "-5s", "5 s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
