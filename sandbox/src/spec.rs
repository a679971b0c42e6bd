//! The plain description of one sandbox: what the launcher is asked to build.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use crate::SandboxError;

/// Port of the proxy listener inside a sandbox's network namespace (127.0.0.1 only).
pub const PROXY_PORT: u16 = 3128;

/// Identifier of one sandbox: 1–64 characters from `[A-Za-z0-9._-]`. Used as the NFLOG prefix and
/// in the store, so it never needs quoting.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SandboxId(String);

impl SandboxId {
    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for SandboxId {
    type Error = SandboxError;

    fn try_from(id: String) -> Result<Self, Self::Error> {
        let ok = !id.is_empty()
            && id.len() <= 64
            && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if ok { Ok(SandboxId(id)) } else { Err(SandboxError::InvalidId { id }) }
    }
}

impl TryFrom<&str> for SandboxId {
    type Error = SandboxError;

    fn try_from(id: &str) -> Result<Self, Self::Error> {
        SandboxId::try_from(id.to_owned())
    }
}

impl fmt::Display for SandboxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How the sandbox reaches the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetMode {
    /// A network namespace with only `lo`: nothing leaves.
    None,
    /// `lo` plus a veth pair with a default route, both ends inside the namespace; the firewall
    /// text `ruleset` (nft syntax) is applied inside, logging refused packets to NFLOG
    /// `nflog_group`; the proxy listener 127.0.0.1:[`PROXY_PORT`] and the NFLOG socket are created
    /// inside and handed to the launcher.
    Proxy {
        /// NFLOG group the namespace's rules log to.
        nflog_group: u16,
        /// nft rule text applied inside the namespace (one transaction).
        ruleset: String,
    },
}

/// Everything the launcher needs to start one sandbox. Paths must be absolute; the launcher
/// resolves symlinks itself.
///
/// Order of the filesystem walls (later wins where they overlap):
/// 1. everything readable and executable, nothing writable;
/// 2. a private `/tmp` (and `/dev/shm`), with `cwd` and `writable` paths under `/tmp` put back;
/// 3. `writable` paths writable;
/// 4. `read_only` paths read-only again, even inside a writable path (a missing one is created
///    as an empty placeholder for the sandbox's lifetime so it cannot be created from inside,
///    and removed afterwards by the last sandbox using it);
/// 5. `hidden` paths covered so that reading them fails.
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    /// Sandbox id (NFLOG prefix, hostname suffix, `SANDGATE_SANDBOX` variable).
    pub id: SandboxId,
    /// Name of the tier, for messages.
    pub tier_name: String,
    /// Working directory of the command.
    pub cwd: PathBuf,
    /// The program and its arguments; the program is looked up in `PATH` of `env`.
    pub command: Vec<OsString>,
    /// The complete environment of the command.
    pub env: Vec<(OsString, OsString)>,
    /// Paths writable inside (directories or files).
    pub writable: Vec<PathBuf>,
    /// Paths whose contents must not be readable (credentials, the store).
    pub hidden: Vec<PathBuf>,
    /// Paths kept read-only even inside a writable path (files that run code later outside:
    /// `.git/hooks`, `.envrc`, ... and the sandgate configuration).
    pub read_only: Vec<PathBuf>,
    /// Network mode.
    pub net: NetMode,
    /// Pathname unix sockets the command may connect to. Empty: no unix socket can be created
    /// at all where the kernel cannot check socket paths (see [`crate::explain`]).
    pub allowed_unix_sockets: Vec<PathBuf>,
    /// Fail instead of warning when the kernel cannot enforce a wall.
    pub require_full: bool,
}

/// Proxy variables for a proxy at `http://127.0.0.1:port`: the generic ones (upper and lower
/// case) and the tool-specific ones for npm, pip, git, cargo and the JVM.
pub fn proxy_env(port: u16) -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{port}");
    let no_proxy = "localhost,127.0.0.1,::1".to_owned();
    let mut env = Vec::new();
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        env.push((name.to_owned(), url.clone()));
        env.push((name.to_ascii_lowercase(), url.clone()));
    }
    env.push(("NO_PROXY".to_owned(), no_proxy.clone()));
    env.push(("no_proxy".to_owned(), no_proxy));
    env.push(("npm_config_proxy".to_owned(), url.clone()));
    env.push(("npm_config_https_proxy".to_owned(), url.clone()));
    env.push(("PIP_PROXY".to_owned(), url.clone()));
    env.push(("CARGO_HTTP_PROXY".to_owned(), url.clone()));
    env.push(("GIT_CONFIG_COUNT".to_owned(), "1".to_owned()));
    env.push(("GIT_CONFIG_KEY_0".to_owned(), "http.proxy".to_owned()));
    env.push(("GIT_CONFIG_VALUE_0".to_owned(), url));
    env.push((
        "JAVA_TOOL_OPTIONS".to_owned(),
        format!(
            "-Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort={port} -Dhttps.proxyHost=127.0.0.1 \
             -Dhttps.proxyPort={port} -Dhttp.nonProxyHosts=localhost|127.0.0.1"
        ),
    ));
    env
}

/// What the kernel enforced for one sandbox, and what it could not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Enforcement {
    /// Landlock ABI version of the running kernel (0: none).
    pub landlock_abi: u32,
    /// Walls that are missing on this kernel (empty: everything was enforced).
    pub missing: Vec<String>,
    /// Walls enforced by a substitute mechanism, with the substitute named.
    pub substitutes: Vec<String>,
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
impl Enforcement {
    /// Whether every wall is in place.
    pub fn is_full(&self) -> bool {
        self.missing.is_empty()
    }

    /// Line-based encoding used between the sandbox's init and the launcher.
    pub(crate) fn encode(&self) -> String {
        let mut s = format!("abi {}\n", self.landlock_abi);
        for m in &self.missing {
            s.push_str("missing ");
            s.push_str(&m.replace('\n', " "));
            s.push('\n');
        }
        for m in &self.substitutes {
            s.push_str("substitute ");
            s.push_str(&m.replace('\n', " "));
            s.push('\n');
        }
        s
    }

    /// Inverse of [`Enforcement::encode`]; unknown lines are ignored.
    pub(crate) fn decode(text: &str) -> Enforcement {
        let mut e = Enforcement::default();
        for line in text.lines() {
            if let Some(v) = line.strip_prefix("abi ") {
                e.landlock_abi = v.parse().unwrap_or(0);
            } else if let Some(v) = line.strip_prefix("missing ") {
                e.missing.push(v.to_owned());
            } else if let Some(v) = line.strip_prefix("substitute ") {
                e.substitutes.push(v.to_owned());
            }
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked() {
        for (id, ok) in [
            ("sg-1", true),
            ("a.b_c-9", true),
            ("", false),
            ("has space", false),
            ("quote\"", false),
            ("x/y", false),
            (&"a".repeat(64), true),
            (&"a".repeat(65), false),
        ] {
            assert_eq!(SandboxId::try_from(id).is_ok(), ok, "{id:?}");
        }
    }

    #[test]
    fn proxy_env_points_every_tool_at_the_proxy() {
        let env = proxy_env(3128);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        for k in [
            "HTTP_PROXY",
            "https_proxy",
            "ALL_PROXY",
            "npm_config_https_proxy",
            "PIP_PROXY",
            "CARGO_HTTP_PROXY",
            "GIT_CONFIG_VALUE_0",
        ] {
            assert_eq!(get(k), Some("http://127.0.0.1:3128"), "{k}");
        }
        assert_eq!(get("GIT_CONFIG_KEY_0"), Some("http.proxy"));
        assert!(get("JAVA_TOOL_OPTIONS").unwrap().contains("-Dhttps.proxyPort=3128"));
        assert!(get("no_proxy").unwrap().contains("127.0.0.1"));
    }

    #[test]
    fn enforcement_round_trips() {
        let e = Enforcement {
            landlock_abi: 7,
            missing: vec!["a\nb".into()],
            substitutes: vec!["unix sockets: seccomp".into()],
        };
        let d = Enforcement::decode(&e.encode());
        assert_eq!(d.landlock_abi, 7);
        assert_eq!(d.missing, vec!["a b".to_owned()]);
        assert_eq!(d.substitutes, e.substitutes);
        assert!(!d.is_full());
    }
}
