//! `[proxy]`: an upstream (corporate) proxy sandgate's connections leave through.

use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use crate::check::{ConfigError, Cx};
use crate::host::Target;
use crate::pattern::{DomainPattern, PatternUse};

/// `[proxy]` as written (global file only).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawProxy {
    pub(crate) upstream: Option<Spanned<String>>,
    pub(crate) upstream_bypass: Vec<Spanned<String>>,
    pub(crate) upstream_credentials: Option<Spanned<String>>,
}

/// Where the upstream's `user:password` comes from; the value itself is never in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CredentialSource {
    /// An environment variable of the daemon (`env:NAME`).
    Env(String),
    /// The first line of a file (`file:PATH`).
    File(PathBuf),
}

impl CredentialSource {
    /// Reads the credentials (`user:password`, surrounding whitespace removed).
    pub fn read(&self) -> Result<String, String> {
        let value = match self {
            CredentialSource::Env(name) => std::env::var(name)
                .map_err(|_| format!("[proxy] upstream_credentials: ${name} is not set"))?,
            CredentialSource::File(path) => std::fs::read_to_string(path)
                .map_err(|e| {
                    format!("[proxy] upstream_credentials: cannot read {}: {e}", path.display())
                })?
                .lines()
                .next()
                .unwrap_or("")
                .to_owned(),
        };
        let value = value.trim().to_owned();
        if !value.contains(':') {
            return Err("[proxy] upstream_credentials must hold user:password".into());
        }
        Ok(value)
    }
}

/// The `[proxy]` section, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamSettings {
    /// `host:port` of the upstream proxy.
    pub addr: String,
    /// Destinations reached directly.
    pub bypass: Vec<DomainPattern>,
    /// Where its credentials come from.
    pub credentials: Option<CredentialSource>,
}

pub(crate) fn check(cx: &Cx<'_>, raw: &RawProxy) -> Result<Option<UpstreamSettings>, ConfigError> {
    let Some(url) = &raw.upstream else {
        if let Some(b) = raw.upstream_bypass.first() {
            return Err(cx.err(
                b.span(),
                "upstream_bypass without upstream".into(),
                "set [proxy] upstream = \"http://proxy.example:3128\", or remove upstream_bypass",
            ));
        }
        return Ok(None);
    };
    let text = url.get_ref();
    let bad =
        |why: String| cx.err(url.span(), why, "write upstream = \"http://proxy.example:3128\"");
    let rest = match text.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some((scheme, _)) => return Err(bad(format!("upstream scheme {scheme:?}: only http"))),
        None => text.as_str(),
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains('@') {
        return Err(cx.err(
            url.span(),
            "credentials in the upstream URL".into(),
            "move them to upstream_credentials = \"env:NAME\" or \"file:PATH\" (the file is \
             shown by `sandgate config`; a password must not be in it)",
        ));
    }
    if rest.contains(['/', '?', '#']) {
        return Err(bad(format!("upstream {text:?} has a path")));
    }
    let target = Target::parse_authority(rest, Some(3128)).map_err(|e| bad(e.to_string()))?;
    let bypass = cx
        .patterns(&raw.upstream_bypass, PatternUse::Deny)?
        .into_iter()
        .filter_map(|r| r.pattern)
        .collect();
    let credentials = match &raw.upstream_credentials {
        None => None,
        Some(c) => Some(match c.get_ref().split_once(':') {
            Some(("env", name)) if !name.is_empty() => CredentialSource::Env(name.to_owned()),
            Some(("file", path)) => {
                CredentialSource::File(crate::check::expand_path(path, cx.home).ok_or_else(
                    || cx.err(c.span(), format!("path {path:?} is not absolute"), "use ~/ or /"),
                )?)
            }
            _ => {
                return Err(cx.err(
                    c.span(),
                    format!("upstream_credentials {:?}", c.get_ref()),
                    "write \"env:NAME\" or \"file:PATH\"",
                ));
            }
        }),
    };
    Ok(Some(UpstreamSettings { addr: target.to_string(), bypass, credentials }))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn parse(t: &str) -> Result<Option<UpstreamSettings>, ConfigError> {
        crate::file::parse(Path::new("c.toml"), t, Some(Path::new("/home/u"))).map(|f| f.upstream)
    }

    #[test]
    fn upstream_settings_parse_and_refuse_secrets_in_the_file() {
        let u = parse(
            "[proxy]\nupstream = \"http://proxy.corp:8080\"\nupstream_bypass = [\"*.corp.example\"]\n\
             upstream_credentials = \"file:~/.corp\"\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(u.addr, "proxy.corp:8080");
        assert_eq!(u.bypass[0].to_string(), "*.corp.example");
        assert_eq!(u.credentials, Some(CredentialSource::File("/home/u/.corp".into())));
        let u = parse("[proxy]\nupstream = \"proxy.corp\"\nupstream_credentials = \"env:X\"\n");
        let u = u.unwrap().unwrap();
        assert_eq!(
            (u.addr.as_str(), u.credentials),
            ("proxy.corp:3128", Some(CredentialSource::Env("X".into())))
        );
        assert_eq!(parse("").unwrap(), None);
        for (bad, says) in [
            ("upstream = \"http://me:pw@proxy.corp:3128\"", "credentials in the upstream URL"),
            ("upstream = \"socks5://proxy.corp:1080\"", "only http"),
            ("upstream = \"http://proxy.corp:3128/x\"", "has a path"),
            ("upstream = \"http://proxy corp:3128\"", "c.toml:2"),
            ("upstream_bypass = [\"a.com\"]", "upstream_bypass without upstream"),
            ("upstream = \"p:1\"\nupstream_credentials = \"pw\"", "env:NAME"),
        ] {
            let e = parse(&format!("[proxy]\n{bad}\n")).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
