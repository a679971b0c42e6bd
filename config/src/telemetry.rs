//! `[telemetry]`: where the daemon exports its events and counters (OpenTelemetry, OTLP over
//! HTTP with protobuf bodies).
//!
//! ```toml
//! [telemetry]
//! otlp_endpoint = "https://collector.corp.example:4318"  # /v1/logs and /v1/metrics below it
//! headers = { authorization = "Bearer ..." }             # sent with every export, never exported
//! extra_roots = ["/etc/ssl/corp-ca.pem"]                 # CAs trusted besides the system's
//! interval = "5s"                                        # a batch waits at most this long
//! ```
//!
//! Read from the system defaults and the global file (the later one that has the section wins
//! whole), and from the managed file, whose section, when present, wins over both whole: a user
//! can then neither turn export off, nor point it elsewhere, nor change its headers.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::check::{ConfigError, Cx};
use crate::host::Target;

/// `[telemetry]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawTelemetry {
    otlp_endpoint: Option<Spanned<String>>,
    headers: BTreeMap<String, Spanned<String>>,
    extra_roots: Vec<Spanned<String>>,
    interval: Option<Spanned<String>>,
}

/// Headers the exporter writes itself; a configured one of these names is refused.
const OWN_HEADERS: &[&str] = &["content-type", "content-length", "host", "transfer-encoding"];

/// The collector's base URL, checked: `http` or `https`, a host, a port (80 or 443 when not
/// written), and a base path (no query, no credentials).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtlpEndpoint {
    /// `https`.
    pub tls: bool,
    /// The host (a name or an address, as the URL wrote it, without brackets).
    pub host: String,
    /// The port.
    pub port: u16,
    /// The base path without a trailing `/` (`""` for the root); the signals' paths
    /// (`/v1/logs`, `/v1/metrics`) are appended to it, as OTLP's `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub base_path: String,
}

impl OtlpEndpoint {
    /// The request path of a signal (`"logs"`, `"metrics"`).
    pub fn path(&self, signal: &str) -> String {
        format!("{}/v1/{signal}", self.base_path)
    }
}

impl fmt::Display for OtlpEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        let host =
            if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        write!(f, "{scheme}://{host}:{}{}", self.port, self.base_path)
    }
}

/// The `[telemetry]` section, checked. `Debug` does not show the headers' values.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TelemetrySettings {
    /// Where to export; `None`: export is off (a managed section without it turns export off
    /// for every user).
    pub endpoint: Option<OtlpEndpoint>,
    /// Headers sent with every export (names lower-case), for the collector's authentication.
    pub headers: Vec<(String, String)>,
    /// PEM files of certificate authorities trusted for an `https` collector besides the
    /// system's roots.
    pub extra_roots: Vec<PathBuf>,
    /// How long a batch of records waits before it is sent (and how often counters are).
    pub interval: Option<Duration>,
    /// The file the section came from.
    pub file: PathBuf,
}

impl fmt::Debug for TelemetrySettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<(&str, &str)> =
            self.headers.iter().map(|(n, _)| (n.as_str(), "<redacted>")).collect();
        f.debug_struct("TelemetrySettings")
            .field("endpoint", &self.endpoint)
            .field("headers", &headers)
            .field("extra_roots", &self.extra_roots)
            .field("interval", &self.interval)
            .field("file", &self.file)
            .finish()
    }
}

/// Whether `name` is an HTTP header name (a token: RFC 9110's `tchar`s).
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

pub(crate) fn check(cx: &Cx<'_>, raw: &RawTelemetry) -> Result<TelemetrySettings, ConfigError> {
    let endpoint = raw.otlp_endpoint.as_ref().map(|e| endpoint(cx, e)).transpose()?;
    let mut headers = Vec::new();
    for (name, value) in &raw.headers {
        let lower = name.to_ascii_lowercase();
        if !is_token(name) || OWN_HEADERS.contains(&lower.as_str()) {
            return Err(cx.err(
                value.span(),
                format!("header name {name:?} cannot be configured"),
                "write a header name of letters, digits and -, other than Content-Type, \
                 Content-Length, Host and Transfer-Encoding (the exporter writes those)",
            ));
        }
        let v = value.get_ref();
        if v.bytes().any(|b| b.is_ascii_control() && b != b'\t') || !v.is_ascii() {
            return Err(cx.err(
                value.span(),
                format!("the value of header {name:?} has a control or non-ASCII character"),
                "write the value on one line, in ASCII",
            ));
        }
        headers.push((lower, v.clone()));
    }
    let extra_roots = cx.paths(&raw.extra_roots)?.into_iter().map(|r| r.path).collect();
    Ok(TelemetrySettings {
        endpoint,
        headers,
        extra_roots,
        interval: cx.nonzero_duration(raw.interval.as_ref())?,
        file: cx.path.to_owned(),
    })
}

fn endpoint(cx: &Cx<'_>, url: &Spanned<String>) -> Result<OtlpEndpoint, ConfigError> {
    let text = url.get_ref();
    let bad = |why: String| {
        cx.err(url.span(), why, "write otlp_endpoint = \"http://collector.example:4318\"")
    };
    let (tls, rest) = match text.split_once("://") {
        Some((s, rest)) if s.eq_ignore_ascii_case("http") => (false, rest),
        Some((s, rest)) if s.eq_ignore_ascii_case("https") => (true, rest),
        Some((s, _)) => return Err(bad(format!("otlp_endpoint scheme {s:?}: http or https"))),
        None => return Err(bad(format!("otlp_endpoint {text:?} has no http:// or https://"))),
    };
    if rest.contains(['?', '#']) {
        return Err(bad(format!("otlp_endpoint {text:?} has a query or a fragment")));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    if authority.contains('@') {
        return Err(cx.err(
            url.span(),
            "credentials in the otlp_endpoint URL".into(),
            "send them as a header: headers = { authorization = \"Basic ...\" }",
        ));
    }
    if path.bytes().any(|b| !b.is_ascii_graphic()) {
        return Err(bad(format!("otlp_endpoint {text:?}: the path has a space or control")));
    }
    let target = Target::parse_authority(authority, Some(if tls { 443 } else { 80 }))
        .map_err(|e| bad(e.to_string()))?;
    Ok(OtlpEndpoint {
        tls,
        host: target.host.to_string().trim_start_matches('[').trim_end_matches(']').to_owned(),
        port: target.port,
        base_path: path.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn parse(t: &str) -> Result<Option<TelemetrySettings>, ConfigError> {
        crate::file::parse(Path::new("c.toml"), t, Some(Path::new("/home/u"))).map(|f| f.telemetry)
    }

    #[test]
    fn endpoints_parse_into_scheme_host_port_and_base_path() {
        // (written, tls, host, port, logs path)
        for (url, tls, host, port, logs) in [
            ("http://collector:4318", false, "collector", 4318, "/v1/logs"),
            ("https://otel.corp.example", true, "otel.corp.example", 443, "/v1/logs"),
            ("http://127.0.0.1", false, "127.0.0.1", 80, "/v1/logs"),
            ("http://[::1]:4318/", false, "::1", 4318, "/v1/logs"),
            ("HTTPS://c.example:8443/otlp/", true, "c.example", 8443, "/otlp/v1/logs"),
        ] {
            let t = parse(&format!("[telemetry]\notlp_endpoint = \"{url}\"\n")).unwrap().unwrap();
            let e = t.endpoint.unwrap();
            assert_eq!((e.tls, e.host.as_str(), e.port), (tls, host, port), "{url}");
            assert_eq!(e.path("logs"), logs, "{url}");
        }
    }

    #[test]
    fn bad_endpoints_and_headers_are_refused_where_they_are() {
        for (body, says) in [
            ("otlp_endpoint = \"collector:4318\"", "no http://"),
            ("otlp_endpoint = \"grpc://c:4317\"", "http or https"),
            ("otlp_endpoint = \"http://me:pw@c:4318\"", "credentials in the otlp_endpoint"),
            ("otlp_endpoint = \"http://c:4318/?x=1\"", "query"),
            ("otlp_endpoint = \"http://c c:4318\"", "c.toml:2"),
            ("headers = { \"content-type\" = \"x\" }", "cannot be configured"),
            ("headers = { \"a b\" = \"x\" }", "cannot be configured"),
            ("headers = { a = \"x\\ny\" }", "control"),
            ("interval = \"0s\"", "zero"),
            ("extra_roots = [\"rel.pem\"]", "not absolute"),
            ("endpoint = \"http://c\"", "unknown field"),
        ] {
            let e = parse(&format!("[telemetry]\n{body}\n")).unwrap_err().to_string();
            assert!(e.contains(says), "{body}: {e}");
            assert!(e.contains("c.toml:2"), "{body}: {e}");
        }
    }

    #[test]
    fn headers_are_kept_lower_case_and_never_shown() {
        let t = parse(
            "[telemetry]\notlp_endpoint = \"http://c:4318\"\n\
             headers = { Authorization = \"Bearer s3cr3t\" }\ninterval = \"250ms\"\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(t.headers, [("authorization".to_owned(), "Bearer s3cr3t".to_owned())]);
        assert_eq!(t.interval, Some(Duration::from_millis(250)));
        assert!(!format!("{t:?}").contains("s3cr3t"), "{t:?}");
        assert_eq!(t.endpoint.unwrap().to_string(), "http://c:4318");
        assert_eq!(parse("").unwrap(), None, "no section: nothing said");
        let off = parse("[telemetry]\n").unwrap().unwrap();
        assert_eq!(off.endpoint, None, "a section without an endpoint: export off");
    }

    /// Red team (issue 35): the per-directory file is never where export is set — a
    /// `[telemetry]` in it neither starts export, nor points it elsewhere, nor adds headers,
    /// with or without the user's section; and the copy of the configuration a sandbox sees
    /// (for nested launches) has no `[telemetry]` at all, so neither the endpoint nor a header's
    /// value is read inside. The control: the same section in the global file is the one used.
    #[test]
    fn only_the_users_system_and_managed_files_set_export() {
        use crate::layers::{Config, ConfigPaths};

        let dir = tempfile::tempdir().unwrap();
        let paths = ConfigPaths::in_dir(dir.path(), None);
        let evil = "[telemetry]\notlp_endpoint = \"http://evil.example:4318\"\n\
                    headers = { x-exfil = \"hdr-s3cr3t\" }\n";
        std::fs::write(&paths.project, evil).unwrap();
        let none = dir.path().join("none");
        let config = Config::load_with_system(paths.clone(), &none).unwrap();
        assert!(config.project.is_some(), "the per-directory file was read");
        assert_eq!(config.telemetry_settings(), None, "a per-directory section started export");
        std::fs::write(&paths.global, "[telemetry]\notlp_endpoint = \"http://mine:4318\"\n")
            .unwrap();
        let config = Config::load_with_system(paths.clone(), &none).unwrap();
        let t = config.telemetry_settings().unwrap();
        assert_eq!(t.endpoint.as_ref().unwrap().host, "mine");
        assert!(t.headers.is_empty(), "{t:?}");
        // The control: the evil section in the global file is what export would use.
        std::fs::write(&paths.global, evil).unwrap();
        let config = Config::load_with_system(paths, &none).unwrap();
        assert_eq!(config.telemetry_settings().unwrap().endpoint.unwrap().host, "evil.example");
        let copy = crate::sanitized_config(&format!("[network]\nallow = [\"a.example\"]\n{evil}"))
            .unwrap();
        assert!(copy.contains("a.example"), "{copy}");
        for gone in ["telemetry", "evil.example", "hdr-s3cr3t"] {
            assert!(!copy.contains(gone), "{gone} in the sandbox's copy: {copy}");
        }
    }
}
