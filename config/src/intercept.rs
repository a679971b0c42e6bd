//! `[[secrets]]`, `[[http_rules]]` and `[tls]`: what makes the proxy terminate a sandbox's TLS
//! for a host (a secret to inject, or method/path rules to apply), and how it checks upstreams.
//!
//! This module only checks the configuration; reading a secret's source and intercepting are the
//! proxy's. A secret's value is never in a file of the configuration: only where it comes from.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::check::{ConfigError, Cx, expand_path, parse_duration};
use crate::host::Target;
use crate::pattern::{DomainPattern, PatternUse};

/// Default time a `from_command` may run before it is killed.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time a secret read from a command is reused.
pub const DEFAULT_SECRET_TTL: Duration = Duration::from_secs(300);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSecret {
    name: Spanned<String>,
    hosts: Spanned<Vec<Spanned<String>>>,
    #[serde(default)]
    header: Option<Spanned<String>>,
    #[serde(default)]
    format: Option<Spanned<String>>,
    #[serde(default)]
    env: Option<Spanned<String>>,
    #[serde(default)]
    anywhere: bool,
    #[serde(default)]
    from_env: Option<Spanned<String>>,
    #[serde(default)]
    from_file: Option<Spanned<String>>,
    #[serde(default)]
    from_command: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    timeout: Option<Spanned<String>>,
    #[serde(default)]
    ttl: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHttpRules {
    host: Spanned<String>,
    allow: Vec<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawTls {
    extra_roots: Vec<Spanned<String>>,
    no_intercept: Vec<Spanned<String>>,
}

/// Where a configuration entry was written (for messages: `file:line`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The file.
    pub path: PathBuf,
    /// 1-based line.
    pub line: usize,
}

impl Origin {
    /// Where `span` of the file `cx` checks is.
    pub(crate) fn at(cx: &crate::check::Cx<'_>, span: &std::ops::Range<usize>) -> Origin {
        Origin { path: cx.path.to_owned(), line: cx.line(span) }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.path.display(), self.line)
    }
}

/// Where a secret's value comes from (exactly one per secret).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretSource {
    /// An environment variable of the daemon (`from_env`), read at each use.
    Env(String),
    /// A file's content, trimmed (`from_file`), read at each use (rotation needs no restart).
    File(PathBuf),
    /// A command run on the host, outside any sandbox (`from_command`, argv, no shell); its
    /// trimmed standard output is the value, reused for `ttl`.
    Command {
        /// Program and arguments.
        argv: Vec<String>,
        /// Killed after this long.
        timeout: Duration,
        /// How long the output is reused.
        ttl: Duration,
    },
}

impl SecretSource {
    /// `env`, `file` or `command`: what `sandgate secrets list` shows (never the value).
    pub fn kind(&self) -> &'static str {
        match self {
            SecretSource::Env(_) => "env",
            SecretSource::File(_) => "file",
            SecretSource::Command { .. } => "command",
        }
    }
}

/// One `[[secrets]]` entry, checked.
///
/// Inside the sandbox the variable `env` holds [`Secret::placeholder`]; the proxy puts the real
/// value in place of the placeholder only on requests to `hosts`, over TLS it terminates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Secret {
    /// Name (`[a-z0-9_-]`, at most 64).
    pub name: String,
    /// The hosts the value is sent to.
    pub hosts: Vec<DomainPattern>,
    /// The header the value goes in.
    pub header: String,
    /// How the header's value is written when the request has no such header (`{}` = value).
    pub format: String,
    /// The sandbox's variable holding the placeholder, if any.
    pub env: Option<String>,
    /// Also replace the placeholder in every other header and in the query string.
    pub anywhere: bool,
    /// Where the value comes from.
    pub source: SecretSource,
    /// Where the entry was written.
    pub origin: Origin,
}

impl Secret {
    /// The text the sandbox holds instead of the value: derived from the name only, worthless
    /// anywhere but through the proxy, to the secret's hosts.
    pub fn placeholder(&self) -> String {
        placeholder(&self.name)
    }

    /// Whether the value may be sent to `host:port`.
    pub fn applies_to(&self, target: &Target) -> bool {
        self.hosts.iter().any(|p| p.matches(&target.host, target.port))
    }
}

/// The placeholder of the secret `name`.
pub fn placeholder(name: &str) -> String {
    format!("sandgate-placeholder-{name}")
}

/// One rule of `[[http_rules]] allow`: a method (or `*`) and a path glob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpRule {
    /// Upper-case method, or `None` for any (`*`).
    pub method: Option<String>,
    /// Path glob: `*` matches any run of characters but `/`, `**` any run at all; the query string
    /// is not part of the path.
    pub path: String,
}

impl HttpRule {
    /// Parses `"GET /repos/*"`, `"* /x/**"` or `"/x"` (any method).
    pub fn parse(text: &str) -> Result<HttpRule, String> {
        let text = text.trim();
        let (method, path) = match text.split_once(' ') {
            Some((m, p)) => (m, p.trim()),
            None => ("*", text),
        };
        if !path.starts_with('/') {
            return Err(format!("path {path:?} does not start with '/'"));
        }
        if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("path {path:?} has spaces or control characters"));
        }
        let method = match method {
            "*" => None,
            m if !m.is_empty() && m.bytes().all(|b| b.is_ascii_alphabetic()) => {
                Some(m.to_ascii_uppercase())
            }
            m => return Err(format!("method {m:?} is not a word like GET or *")),
        };
        Ok(HttpRule { method, path: path.to_owned() })
    }

    /// Whether a request matches (`path` without its query string). Methods compare exactly
    /// (HTTP methods are case-sensitive; `get` is not `GET` to a server). A path the upstream
    /// could read as another one (see [`ambiguous_path`]) matches nothing.
    pub fn matches(&self, method: &str, path: &str) -> bool {
        self.method.as_deref().is_none_or(|m| m == method)
            && !ambiguous_path(path)
            && glob_path(self.path.as_bytes(), path.as_bytes())
    }
}

impl fmt::Display for HttpRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method.as_deref().unwrap_or("*"), self.path)
    }
}

/// Whether a server may resolve `path` to another path than the one the rules see. Deny by
/// default: a path is unambiguous only when
///
/// - it starts with `/` and holds only the bytes RFC 3986 allows in a path but `;` (letters,
///   digits, `-._~!$&'()*+,=:@/` and `%` escapes): `;` starts path parameters, which Tomcat,
///   Jetty and Spring take off before routing (`/files/x;.json` is `/files/x` to them);
/// - every escape is `%` and two hex digits, and stands for a byte that a server cannot read as
///   structure or as another spelling: printable ASCII other than `/`, `\`, `.`, `%`, `;`, `?`
///   and `#` (so no encoded slashes or dots, no double encoding, no control bytes, no overlong or
///   other non-ASCII UTF-8 that a decoder may fold into a dot);
/// - no segment is empty but the last (`//` collapses on many servers), and none is `.` or
///   `..`.
///
/// Such requests match no rule.
pub fn ambiguous_path(path: &str) -> bool {
    const RAW: &[u8] = b"-._~!$&'()*+,=:@/%";
    const ESCAPED: &[u8] = b" !\"$&'()*+,:<=>@[]^_`{|}~-";
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') {
        return true;
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hex = |c: Option<&u8>| c.and_then(|c| (*c as char).to_digit(16));
            let (Some(hi), Some(lo)) = (hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) else {
                return true;
            };
            let d = (hi * 16 + lo) as u8;
            if !(d.is_ascii_alphanumeric() || ESCAPED.contains(&d)) {
                return true;
            }
            i += 3;
            continue;
        }
        if !(b.is_ascii_alphanumeric() || RAW.contains(&b)) {
            return true;
        }
        i += 1;
    }
    let segments: Vec<&str> = path[1..].split('/').collect();
    let last = segments.len() - 1;
    segments
        .iter()
        .enumerate()
        .any(|(n, seg)| (seg.is_empty() && n != last) || *seg == "." || *seg == "..")
}

/// `*` matches within one path segment, `**` across segments.
fn glob_path(pat: &[u8], s: &[u8]) -> bool {
    match pat.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => {
            let (deep, rest) = match rest.split_first() {
                Some((b'*', r)) => (true, r),
                _ => (false, rest),
            };
            for i in 0..=s.len() {
                if glob_path(rest, &s[i..]) {
                    return true;
                }
                if i < s.len() && !deep && s[i] == b'/' {
                    return false;
                }
            }
            false
        }
        Some((c, rest)) => s.first() == Some(c) && glob_path(rest, &s[1..]),
    }
}

/// The `[[http_rules]]` of one host, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpRules {
    /// The host (a pattern, as in `[network] allow`).
    pub host: DomainPattern,
    /// What is allowed; a request matching none is refused.
    pub allow: Vec<HttpRule>,
    /// Where the entry was written.
    pub origin: Origin,
}

/// Everything about interception, from every layer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InterceptSettings {
    /// `[[secrets]]`.
    pub secrets: Vec<Secret>,
    /// `[[http_rules]]`.
    pub http_rules: Vec<HttpRules>,
    /// `[tls] extra_roots`: PEM files of certificate authorities trusted for upstreams besides
    /// the system's.
    pub extra_roots: Vec<PathBuf>,
    /// `[tls] no_intercept`: hosts never intercepted (certificate pinning, client certificates),
    /// even when a secret or rule names them; their secrets and rules then do not apply and
    /// their requests are tunnelled.
    pub no_intercept: Vec<DomainPattern>,
}

impl InterceptSettings {
    /// What a sandbox must never read, whatever its tier and whatever the name filters say: the
    /// variables (`from_env`) and files (`from_file`) secrets are read from. Sandgate knows these
    /// hold a secret, so they are hidden by that knowledge, not by how their names look: a variable
    /// called `DEPLOY_VALUE` passes the secret-name filter, a key file in `/srv` or a non-dot home
    /// directory is readable by default.
    pub fn secret_sources(&self) -> (Vec<String>, Vec<PathBuf>) {
        let mut vars = Vec::new();
        let mut files = Vec::new();
        for s in &self.secrets {
            match &s.source {
                SecretSource::Env(v) => vars.push(v.clone()),
                SecretSource::File(f) => files.push(f.clone()),
                // Run on the host; what it reads is its own business (a password store is a
                // home dot-entry, hidden already).
                SecretSource::Command { .. } => {}
            }
        }
        (vars, files)
    }

    /// Whether anything is ever intercepted (then the sandbox gets the CA bundle variables).
    pub fn in_use(&self) -> bool {
        !self.secrets.is_empty() || !self.http_rules.is_empty()
    }

    /// Whether a tunnel to `target` is intercepted: a secret or an HTTP rule names it and
    /// `no_intercept` does not.
    pub fn intercepts(&self, target: &Target) -> bool {
        if self.no_intercept.iter().any(|p| p.matches(&target.host, target.port)) {
            return false;
        }
        self.secrets.iter().any(|s| s.applies_to(target)) || self.rules_for(target).is_some()
    }

    /// The HTTP rules of `target` (the first entry naming it).
    pub fn rules_for(&self, target: &Target) -> Option<&HttpRules> {
        self.http_rules.iter().find(|r| r.host.matches(&target.host, target.port))
    }

    /// The secrets sent to `target`.
    pub fn secrets_for<'a>(&'a self, target: &'a Target) -> impl Iterator<Item = &'a Secret> {
        self.secrets.iter().filter(move |s| s.applies_to(target))
    }

    /// Adds another layer's settings (lists add up; a secret name defined twice is an error).
    pub fn extend(&mut self, other: InterceptSettings) -> Result<(), ConfigError> {
        for s in other.secrets {
            if let Some(first) = self.secrets.iter().find(|x| x.name == s.name) {
                return Err(ConfigError {
                    path: s.origin.path.clone(),
                    line: s.origin.line,
                    column: 1,
                    message: format!("secret {:?} is already defined at {}", s.name, first.origin),
                    help: "give each [[secrets]] entry its own name".into(),
                    snippet: None,
                });
            }
            self.secrets.push(s);
        }
        self.http_rules.extend(other.http_rules);
        self.extra_roots.extend(other.extra_roots);
        self.no_intercept.extend(other.no_intercept);
        Ok(())
    }
}

pub(crate) fn check(
    cx: &Cx<'_>,
    secrets: &[RawSecret],
    rules: &[RawHttpRules],
    tls: &RawTls,
) -> Result<InterceptSettings, ConfigError> {
    let mut out = InterceptSettings::default();
    for raw in secrets {
        let s = check_secret(cx, raw)?;
        if let Some(first) = out.secrets.iter().find(|x| x.name == s.name) {
            return Err(cx.err(
                raw.name.span(),
                format!("secret {:?} is already defined at {}", s.name, first.origin),
                "give each [[secrets]] entry its own name",
            ));
        }
        out.secrets.push(s);
    }
    for raw in rules {
        let host = DomainPattern::parse(raw.host.get_ref(), PatternUse::Allow).map_err(|e| {
            cx.err(raw.host.span(), e.to_string(), "write a host like \"api.github.com\"")
        })?;
        let mut allow = Vec::new();
        for a in &raw.allow {
            allow.push(HttpRule::parse(a.get_ref()).map_err(|why| {
                cx.err(
                    a.span(),
                    format!("http rule {:?}: {why}", a.get_ref()),
                    "write \"METHOD /path/glob\", e.g. \"GET /repos/myorg/**\" or \"* /graphql\"",
                )
            })?);
        }
        out.http_rules.push(HttpRules { host, allow, origin: Origin::at(cx, &raw.host.span()) });
    }
    for r in &tls.extra_roots {
        let p = expand_path(r.get_ref(), cx.home).ok_or_else(|| {
            cx.err(
                r.span(),
                format!("extra_roots entry {:?} is not absolute", r.get_ref()),
                "write an absolute path, or one starting with ~/",
            )
        })?;
        out.extra_roots.push(p);
    }
    for h in &tls.no_intercept {
        out.no_intercept.push(DomainPattern::parse(h.get_ref(), PatternUse::Allow).map_err(
            |e| cx.err(h.span(), e.to_string(), "write a host like \"pinned.example.com\""),
        )?);
    }
    Ok(out)
}

fn check_secret(cx: &Cx<'_>, raw: &RawSecret) -> Result<Secret, ConfigError> {
    let name = raw.name.get_ref();
    let plain = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-';
    if name.is_empty() || name.len() > 64 || !name.bytes().all(plain) {
        return Err(cx.err(
            raw.name.span(),
            format!("secret name {name:?} has characters outside [a-z0-9_-]"),
            "name the secret with lower-case letters, digits, '_' and '-' (at most 64)",
        ));
    }
    let origin = Origin::at(cx, &raw.name.span());
    if raw.hosts.get_ref().is_empty() {
        return Err(cx.err(
            raw.hosts.span(),
            format!("secret {name:?} names no hosts"),
            "list the hosts the secret is sent to, e.g. hosts = [\"api.openai.com\"]",
        ));
    }
    let mut hosts = Vec::new();
    for h in raw.hosts.get_ref() {
        hosts.push(DomainPattern::parse(h.get_ref(), PatternUse::Allow).map_err(|e| {
            cx.err(h.span(), e.to_string(), "write a host like \"api.openai.com\"")
        })?);
    }
    let header = match &raw.header {
        Some(h) => {
            let v = h.get_ref();
            if v.is_empty() || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b)) {
                return Err(cx.err(
                    h.span(),
                    format!("header {v:?} is not a header name"),
                    "write a header name like \"Authorization\" or \"x-api-key\"",
                ));
            }
            v.clone()
        }
        None => "Authorization".into(),
    };
    let format = match &raw.format {
        Some(f) if f.get_ref().matches("{}").count() != 1 => {
            return Err(cx.err(
                f.span(),
                format!("format {:?} must hold {{}} exactly once", f.get_ref()),
                "write e.g. format = \"Bearer {}\" ({} stands for the value)",
            ));
        }
        Some(f) if f.get_ref().chars().any(char::is_control) => {
            return Err(cx.err(f.span(), "format has control characters".into(), "remove them"));
        }
        Some(f) => f.get_ref().clone(),
        None if header.eq_ignore_ascii_case("authorization") => "Bearer {}".into(),
        None => "{}".into(),
    };
    let env = match &raw.env {
        Some(e) => {
            let v = e.get_ref();
            let ok = !v.is_empty()
                && !v.as_bytes()[0].is_ascii_digit()
                && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !ok {
                return Err(cx.err(
                    e.span(),
                    format!("env {v:?} is not a variable name"),
                    "write a name like \"OPENAI_API_KEY\"",
                ));
            }
            Some(v.clone())
        }
        None => None,
    };
    let given: Vec<&str> = [
        raw.from_env.as_ref().map(|_| "from_env"),
        raw.from_file.as_ref().map(|_| "from_file"),
        raw.from_command.as_ref().map(|_| "from_command"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if given.len() != 1 {
        let message = if given.is_empty() {
            format!("secret {name:?} has no source")
        } else {
            format!("secret {name:?} has {} sources ({})", given.len(), given.join(", "))
        };
        return Err(cx.err(
            raw.name.span(),
            message,
            "give exactly one of from_env = \"VAR\", from_file = \"/path\", from_command = [\"prog\", \"arg\"]",
        ));
    }
    let duration = |d: &Option<Spanned<String>>, default: Duration| match d {
        Some(d) => parse_duration(d.get_ref())
            .map_err(|e| cx.err(d.span(), e, "write a duration like \"5s\" or \"10m\"")),
        None => Ok(default),
    };
    let source = if let Some(v) = &raw.from_env {
        SecretSource::Env(v.get_ref().clone())
    } else if let Some(f) = &raw.from_file {
        SecretSource::File(expand_path(f.get_ref(), cx.home).ok_or_else(|| {
            cx.err(
                f.span(),
                format!("from_file {:?} is not absolute", f.get_ref()),
                "write an absolute path, or one starting with ~/",
            )
        })?)
    } else if let Some(c) = &raw.from_command {
        if c.get_ref().first().is_none_or(|p| p.is_empty()) {
            return Err(cx.err(
                c.span(),
                "from_command is empty".into(),
                "write the program and its arguments, e.g. [\"pass\", \"show\", \"openai\"]",
            ));
        }
        let timeout = duration(&raw.timeout, DEFAULT_COMMAND_TIMEOUT)?;
        if timeout.is_zero() {
            let span = raw.timeout.as_ref().map_or(c.span(), Spanned::span);
            return Err(cx.err(span, "timeout is zero".into(), "write e.g. timeout = \"5s\""));
        }
        SecretSource::Command {
            argv: c.get_ref().clone(),
            timeout,
            ttl: duration(&raw.ttl, DEFAULT_SECRET_TTL)?,
        }
    } else {
        unreachable!("exactly one source was checked above")
    };
    if !matches!(source, SecretSource::Command { .. })
        && let Some(t) = raw.timeout.as_ref().or(raw.ttl.as_ref())
    {
        return Err(cx.err(
            t.span(),
            "timeout and ttl apply to from_command only".into(),
            "remove them (files and variables are read at each use)",
        ));
    }
    Ok(Secret {
        name: name.clone(),
        hosts,
        header,
        format,
        env,
        anywhere: raw.anywhere,
        source,
        origin,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_intercepted() {
        let text = r#"
[[secrets]]
name = "gh"
hosts = ["api.github.com"]
from_env = "GH_TOKEN"

[[secrets]]
name = "pinned"
hosts = ["pinned.example.com"]
header = "x-key"
from_command = ["pass", "show", "x"]

[[http_rules]]
host = "*.example.org"
allow = ["GET /**"]

[tls]
no_intercept = ["pinned.example.com"]
"#;
        let f = crate::file::parse(std::path::Path::new("/c.toml"), text, None).unwrap();
        let i = f.intercept;
        let t = |s: &str| Target::parse(s).unwrap();
        assert!(i.in_use());
        assert!(i.intercepts(&t("api.github.com:443")));
        assert!(i.intercepts(&t("a.example.org:443")));
        assert!(!i.intercepts(&t("example.org:443")), "wildcards do not cover the apex");
        assert!(!i.intercepts(&t("pinned.example.com:443")), "no_intercept wins");
        assert!(!i.intercepts(&t("github.com:443")));
        let gh = &i.secrets[0];
        assert_eq!((gh.header.as_str(), gh.format.as_str()), ("Authorization", "Bearer {}"));
        assert_eq!(i.secrets[1].format, "{}");
        assert_eq!(gh.origin.line, 3);
        assert_eq!(gh.placeholder(), "sandgate-placeholder-gh");
        assert!(matches!(
            i.secrets[1].source,
            SecretSource::Command { timeout: DEFAULT_COMMAND_TIMEOUT, ttl: DEFAULT_SECRET_TTL, .. }
        ));
        assert_eq!(i.rules_for(&t("a.example.org:443")).unwrap().origin.line, 14);
        // timeout and ttl belong to commands.
        let bad =
            "[[secrets]]\nname = \"a\"\nhosts = [\"x.example\"]\nfrom_env = \"A\"\nttl = \"5m\"\n";
        let e = crate::file::parse(std::path::Path::new("/c.toml"), bad, None).unwrap_err();
        assert_eq!(e.line, 5, "{e}");
    }

    #[test]
    fn path_globs() {
        for (pat, path, want) in [
            ("GET /repos/myorg/*", "/repos/myorg/x", true),
            ("GET /repos/myorg/*", "/repos/myorg/x/pulls", false),
            ("GET /repos/myorg/**", "/repos/myorg/x/pulls", true),
            ("GET /repos/myorg/*", "/repos/other/x", false),
            ("POST /graphql", "/graphql", true),
            ("POST /graphql", "/graphql/", false),
            ("* /a/*/c", "/a/b/c", true),
            ("/a", "/a", true),
        ] {
            let r = HttpRule::parse(pat).unwrap();
            assert_eq!(r.matches("GET", path) || r.matches("POST", path), want, "{pat} {path}");
        }
        let r = HttpRule::parse("GET /x").unwrap();
        assert!(!r.matches("DELETE", "/x"));
        assert!(!r.matches("get", "/x"), "methods are case-sensitive");
        // Paths a server could resolve elsewhere match nothing, even a catch-all.
        let all = HttpRule::parse("* /**").unwrap();
        for p in [
            "/a/../admin",
            "/a/./b",
            "/a/%2e%2e/admin",
            "/a/%2E%2E/admin",
            "/a%2fb",
            "/a%5cb",
            "/a\\b",
            "/..",
            "*",
        ] {
            assert!(!all.matches("GET", p), "{p}");
        }
        assert!(all.matches("GET", "/a/b..c/.d"));
        for bad in ["GET x", "G-T /x", "GET /a b"] {
            assert!(HttpRule::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_star_that_runs_out_of_path_is_no_match() {
        // `*` takes the rest of the last segment and what follows it in the pattern is missing.
        for (pat, path, want) in [
            ("GET /a/*.json", "/a/b", false),
            ("GET /a/*.json", "/a/b.json", true),
            ("GET /a/*/c", "/a/b", false),
            ("GET /a/**/c", "/a/b", false),
            ("GET /a/**/c", "/a/b/x/c", true),
        ] {
            let r = HttpRule::parse(pat).unwrap();
            assert_eq!(r.matches("GET", path), want, "{pat} {path}");
        }
    }

    #[test]
    fn escapes_are_decoded_and_judged_by_the_byte_they_stand_for() {
        for (path, ambiguous) in [
            // Letters, digits and the harmless punctuation may be escaped, in either case.
            ("/x%41", false),
            ("/x%7e", false),
            ("/x%7E", false),
            ("/x%20y", false),
            ("/x%41%42/y", false),
            ("/%41", false),
            ("/ab%41", false),
            // What follows an escape is read too.
            ("/x%41;", true),
            ("/x%41%2f", true),
            // Structure, escapes of escapes, control and non-ASCII bytes may not.
            ("/x%2f", true),
            ("/x%2e", true),
            ("/x%25", true),
            ("/x%3b", true),
            ("/x%00", true),
            ("/x%7f", true),
            ("/x%c3%a9", true),
            // An escape is `%` and two hex digits.
            ("/x%4", true),
            ("/x%", true),
            ("/x%g1", true),
            ("/x%1g", true),
        ] {
            assert_eq!(ambiguous_path(path), ambiguous, "{path}");
        }
    }

    #[test]
    fn only_the_last_segment_may_be_empty() {
        for (path, ambiguous) in [
            ("/", false),
            ("/a/", false),
            ("/a/b/", false),
            ("/a//b", true),
            ("//a", true),
            ("/a//", true),
            ("/a/./b", true),
            ("/a/..", true),
            ("/a/.b", false),
            ("/a/..b/", false),
            ("a/b", true),
            ("", true),
            ("/a;b", true),
            ("/a\\b", true),
            ("/a b", true),
            ("/a-._~!$&'()*+,=:@b", false),
        ] {
            assert_eq!(ambiguous_path(path), ambiguous, "{path:?}");
        }
    }

    #[test]
    fn a_rule_reads_back_as_written() {
        for (text, shown) in
            [("GET /repos/*", "GET /repos/*"), ("/x/**", "* /x/**"), ("post /a", "POST /a")]
        {
            assert_eq!(HttpRule::parse(text).unwrap().to_string(), shown, "{text}");
        }
    }
}
