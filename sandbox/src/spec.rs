//! The plain description of one sandbox: what the launcher is asked to build.

use std::ffi::OsString;
use std::path::PathBuf;

/// Port of the proxy listener inside a sandbox's network namespace (127.0.0.1 only).
pub const PROXY_PORT: u16 = 3128;

/// Port of the DNS stub inside a sandbox's network namespace (127.0.0.1 only, UDP and TCP), named
/// by the sandbox's `/etc/resolv.conf`.
pub const DNS_PORT: u16 = 53;

// The id is the config crate's, the very type the daemon and the proxy key their state by.
pub use sandgate_config::SandboxId;

/// Which network a sandbox gets (the kinds of networks made ahead, see the daemon's pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetKind {
    /// `lo` only (`run`).
    Loopback,
    /// `lo`, the route device, the firewall and the proxy's sockets (`net`, `build`).
    Proxy,
}

impl NetKind {
    /// Its name in the factory's and the daemon's protocols.
    pub fn name(self) -> &'static str {
        match self {
            NetKind::Loopback => "loopback",
            NetKind::Proxy => "proxy",
        }
    }

    /// The kind named `name`.
    pub fn from_name(name: &str) -> Option<NetKind> {
        [NetKind::Loopback, NetKind::Proxy].into_iter().find(|k| k.name() == name)
    }
}

impl From<sandgate_config::NetMode> for NetKind {
    fn from(mode: sandgate_config::NetMode) -> NetKind {
        match mode {
            sandgate_config::NetMode::None => NetKind::Loopback,
            sandgate_config::NetMode::Proxy => NetKind::Proxy,
        }
    }
}

/// The network the launcher builds for the sandbox: the policy's choice
/// ([`NetMode`](sandgate_config::NetMode)) with what building it takes (the NFLOG group).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetSetup {
    /// A network namespace with only `lo`: nothing leaves.
    None,
    /// `lo` plus a veth pair with a default route, both ends inside the namespace; a firewall
    /// (one nf_tables netlink batch, sent by the launcher) accepts loopback and logs every other
    /// packet to NFLOG `nflog_group` (prefix: the sandbox id) and rejects it; the proxy listener
    /// 127.0.0.1:[`PROXY_PORT`], the DNS stub's sockets 127.0.0.1:[`DNS_PORT`] (UDP, TCP) and
    /// the NFLOG socket are created inside and handed to the launcher; `/etc/resolv.conf` names
    /// the stub.
    Proxy {
        /// NFLOG group the namespace's rules log to.
        nflog_group: u16,
    },
}

/// A directory the sandbox sees in place of the host's one: a read-only tmpfs holding only
/// `files`, so the host's contents are hidden. sandgate's configuration directory is one: a launch
/// nested inside the sandbox reads its policy there, without the secrets of the real files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvidedDir {
    /// Where (absolute). A directory missing on the host is left alone (nothing to hide).
    pub path: PathBuf,
    /// The files inside it: path relative to `path` (plain names, no `..`) and contents.
    pub files: Vec<(PathBuf, Vec<u8>)>,
}

/// A package cache the sandbox writes copy-on-write: an overlay at `path` with the host's
/// directory there read-only below and `upper` (sandgate's, which no host tool reads) above, so
/// that downloads and extraction work inside and nothing reaches the host's cache. Where the
/// kernel cannot mount an overlay here, `upper` alone is bound at `path` (the sandbox then starts
/// from its own layer, without the host's contents) and the launch says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheLayer {
    /// The cache as tools find it (absolute, an existing directory).
    pub path: PathBuf,
    /// The layer written (absolute, an existing directory, on the same file system as `work`).
    pub upper: PathBuf,
    /// The overlay's work directory (absolute, existing, empty or the overlay's own). Emptied
    /// once the overlay is gone (its `work` removed), and removed itself when `own_work`.
    pub work: PathBuf,
    /// Whether the work directory is this launch's alone (made for it, removed after it), or
    /// one used again by later launches (see [`SandboxSpec::cache_work_lock`]).
    pub own_work: bool,
}

/// Everything the launcher needs to start one sandbox. Paths must be absolute; the launcher
/// resolves symlinks itself.
///
/// Order of the filesystem walls (later wins where they overlap):
/// 1. everything readable and executable, nothing writable;
/// 2. a private `/tmp` (and `/dev/shm`), with `cwd`, `writable` and `visible` paths under `/tmp`
///    put back;
/// 3. `writable` paths writable, `caches` copy-on-write;
/// 4. `provided` directories replaced by their read-only contents;
/// 5. `read_only` paths read-only again, even inside a writable path (a missing one is created
///    as an empty placeholder for the sandbox's lifetime so it cannot be created from inside,
///    and removed afterwards by the last sandbox using it);
/// 6. `hidden` paths covered so that reading them fails;
/// 7. at the top of each writable directory, the entries [`SandboxSpec::top_level`] protects
///    read-only, and new ones moved out (no placeholders are made for them); in the
///    directories below the top that [`SandboxSpec::scan`] read, new entries its `below` names
///    moved out too.
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
    /// Package caches written copy-on-write (Linux; see [`CacheLayer`]). Not writable paths:
    /// no top-level rule applies inside them, and nothing written there reaches the host.
    pub caches: Vec<CacheLayer>,
    /// A lock on the caches' work directories used again, held until they are emptied after
    /// the sandbox (by the process that lets its mount namespace go): no later launch mounts an
    /// overlay on one before that.
    pub cache_work_lock: Option<std::os::fd::RawFd>,
    /// Paths whose contents must not be readable (credentials, the store).
    pub hidden: Vec<PathBuf>,
    /// Paths kept read-only even inside a writable path (files that run code later outside:
    /// `.git/hooks`, `.envrc`, ... and the sandgate configuration).
    pub read_only: Vec<PathBuf>,
    /// Directories replaced by read-only contents of the launcher's making (hiding the host's).
    pub provided: Vec<ProvidedDir>,
    /// Paths that stay visible even when they lie under `/tmp` (the private `/tmp` would hide
    /// them): the home directory, the running launcher (a nested launch executes it).
    pub visible: Vec<PathBuf>,
    /// The rule for the top of each writable directory (`None`: no rule beyond `read_only`).
    /// Existing protected entries are bound read-only; new ones are taken away while the
    /// command runs and at its end (Linux; see [`crate::TopLevel`]).
    pub top_level: Option<crate::TopLevel>,
    /// What the launch's scan of the writable trees found ([`crate::tree::scan`]): the
    /// directories below their tops are watched while the command runs (Linux), where a new
    /// entry that [`crate::TopLevel::below`] names is taken away, and a change to one that
    /// [`crate::TopLevel::review`] names is reported at the end. The existing protected entries
    /// must be in `read_only` too (this only says they were there at launch).
    pub scan: crate::tree::Scan,
    /// Network mode.
    pub net: NetSetup,
    /// Pathname unix sockets the command may connect to. Empty: no unix socket can be created
    /// at all where the kernel cannot check socket paths (see [`crate::explain`]).
    pub allowed_unix_sockets: Vec<PathBuf>,
    /// Fail instead of warning when the kernel cannot enforce a wall.
    pub require_full: bool,
    /// Read the command's stderr for "Read-only file system" messages (Linux; see
    /// [`crate::readonly`]); the paths are in `Launched::read_only_reports` at the end.
    pub report_read_only: bool,
    /// The Seatbelt profile's named ways out (`[macos]` in the configuration; ignored on Linux).
    pub macos: MacosOptions,
}

/// Ways out of the Seatbelt profile's defaults, each asked for by name (`[macos]`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MacosOptions {
    /// Servers may listen on the host's loopback (`loopback_listen = true`): there, unlike
    /// Linux's private loopback, host processes and browser pages reach them.
    pub loopback_listen: bool,
    /// trustd may verify certificates (`trustd = "allow"`, or `SANDGATE_MACOS_TRUSTD=allow`),
    /// in tiers with network: it fetches URLs named in certificates past the proxy.
    pub trustd_allow: bool,
}

/// Variables that only ever say where a proxy is (upper and lower case generic ones, npm, pip,
/// cargo): the caller's are dropped in every tier, and [`proxy_env`] sets them in proxy mode.
pub const PROXY_VARS: &[&str] = &[
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
    "npm_config_proxy",
    "npm_config_https_proxy",
    "PIP_PROXY",
    "CARGO_HTTP_PROXY",
];

/// Where the proxy's SOCKS5 side is (`socks5h://127.0.0.1:PORT`), for tools that take a SOCKS
/// proxy (`curl -x "$SANDGATE_SOCKS_PROXY"`, `ALL_PROXY=$SANDGATE_SOCKS_PROXY tool`).
pub const SOCKS_PROXY_VAR: &str = "SANDGATE_SOCKS_PROXY";

/// Hosts that never go through the proxy (`NO_PROXY`, `no_proxy`).
pub const NO_PROXY: &str = "localhost,127.0.0.1,::1";

/// The variables to set for a proxy at `http://127.0.0.1:port`, given the `caller`'s environment:
/// every name of [`PROXY_VARS`], git's `http.proxy` and the JVM's proxy properties.
///
/// Git and the JVM carry other settings in the same variables, so the caller's are kept: git's
/// `http.proxy` is added as the next `GIT_CONFIG_KEY_<n>`/`GIT_CONFIG_VALUE_<n>` after the
/// caller's `GIT_CONFIG_COUNT` entries (a later entry wins), and the `-D` flags are appended to the
/// caller's `JAVA_TOOL_OPTIONS` (a later `-D` wins). A `GIT_CONFIG_COUNT` that is not a number,
/// or is `u32::MAX` or more (git would refuse either), counts as no entries.
pub fn proxy_env(port: u16, caller: &[(OsString, OsString)]) -> Vec<(OsString, OsString)> {
    let url = format!("http://127.0.0.1:{port}");
    let caller_value = |name: &str| caller.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v);
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    let mut set = |k: &str, v: OsString| env.push((k.into(), v));
    for name in PROXY_VARS {
        let value = if name.eq_ignore_ascii_case("NO_PROXY") { NO_PROXY } else { &url };
        set(name, value.into());
    }
    let git_count: u32 = caller_value("GIT_CONFIG_COUNT")
        .and_then(|v| v.to_str())
        .and_then(|v| v.trim().parse().ok())
        // u32::MAX + 1 would wrap to 0 (git then reads none of it, not even http.proxy).
        .filter(|n: &u32| *n < u32::MAX)
        .unwrap_or(0);
    // The same port speaks SOCKS5 (the proxy tells the protocols apart by the first byte). Not
    // as ALL_PROXY: httpx (the OpenAI and Anthropic SDKs among others) builds a transport for
    // every proxy variable when a client is created and fails outright on a socks5h:// one
    // unless the optional `socksio` package is installed, so ALL_PROXY stays HTTP.
    set(SOCKS_PROXY_VAR, format!("socks5h://127.0.0.1:{port}").into());
    set("GIT_CONFIG_COUNT", (git_count + 1).to_string().into());
    set(&format!("GIT_CONFIG_KEY_{git_count}"), "http.proxy".into());
    set(&format!("GIT_CONFIG_VALUE_{git_count}"), url.clone().into());
    let java = format!(
        "-Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort={port} -Dhttps.proxyHost=127.0.0.1 \
         -Dhttps.proxyPort={port} -Dhttp.nonProxyHosts=localhost|127.0.0.1"
    );
    let java = match caller_value("JAVA_TOOL_OPTIONS").filter(|v| !v.is_empty()) {
        Some(theirs) => {
            let mut v = theirs.clone();
            v.push(" ");
            v.push(&java);
            v
        }
        None => java.into(),
    };
    set("JAVA_TOOL_OPTIONS", java);
    env
}

/// `caller` with [`proxy_env`] applied: the caller's [`PROXY_VARS`] dropped, and with a proxy at
/// `port` every proxy variable set (replacing the caller's value of the same name, in place).
pub fn with_proxy_env(
    caller: &[(OsString, OsString)],
    port: Option<u16>,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = caller
        .iter()
        .filter(|(k, _)| !PROXY_VARS.iter().any(|n| k == n) && k != SOCKS_PROXY_VAR)
        .cloned()
        .collect();
    if let Some(port) = port {
        for (k, v) in proxy_env(port, caller) {
            env.retain(|(n, _)| *n != k);
            env.push((k, v));
        }
    }
    env
}

/// `GIT_SSH_COMMAND` for a proxied sandbox: ssh with `sandgate connect %h %p` (the running
/// executable, by absolute path) as its `ProxyCommand`, so `git clone ssh://...` goes through the
/// proxy's decision like any other connection. `None` when the caller set `GIT_SSH_COMMAND` or
/// `GIT_SSH` (theirs is kept), or when the path holds a character that would need quoting
/// through two shells (git's and ssh's): then git over ssh is left as it was (and fails at the
/// firewall, reported as blocked traffic).
pub fn git_ssh_command(
    sandgate: &std::path::Path,
    caller: &[(OsString, OsString)],
) -> Option<OsString> {
    if caller.iter().any(|(k, v)| (k == "GIT_SSH_COMMAND" || k == "GIT_SSH") && !v.is_empty()) {
        return None;
    }
    let path = sandgate.to_str()?;
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+');
    if !path.starts_with('/') || !path.chars().all(plain) {
        return None;
    }
    Some(format!("ssh -o ProxyCommand='{path} connect %h %p'").into())
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

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect()
    }

    fn get<'a>(env: &'a [(OsString, OsString)], k: &str) -> Option<&'a str> {
        let mut found = env.iter().filter(|(n, _)| n == k);
        let first = found.next().map(|(_, v)| v.to_str().unwrap());
        assert!(found.next().is_none(), "{k} set twice");
        first
    }

    #[test]
    fn proxy_env_points_every_tool_at_the_proxy() {
        let env = proxy_env(3128, &[]);
        for k in [
            "HTTP_PROXY",
            "https_proxy",
            "ALL_PROXY",
            "npm_config_https_proxy",
            "PIP_PROXY",
            "CARGO_HTTP_PROXY",
            "GIT_CONFIG_VALUE_0",
        ] {
            assert_eq!(get(&env, k), Some("http://127.0.0.1:3128"), "{k}");
        }
        assert_eq!(get(&env, "GIT_CONFIG_COUNT"), Some("1"));
        assert_eq!(get(&env, "GIT_CONFIG_KEY_0"), Some("http.proxy"));
        assert_eq!(get(&env, "SANDGATE_SOCKS_PROXY"), Some("socks5h://127.0.0.1:3128"));
        let java = get(&env, "JAVA_TOOL_OPTIONS").unwrap();
        assert!(java.starts_with("-Dhttp.proxyHost=127.0.0.1 "), "{java}");
        assert!(java.contains("-Dhttps.proxyPort=3128"), "{java}");
        assert_eq!(get(&env, "no_proxy"), Some("localhost,127.0.0.1,::1"));
        assert_eq!(get(&env, "NO_PROXY"), Some("localhost,127.0.0.1,::1"));
    }

    #[test]
    fn git_and_jvm_settings_of_the_caller_are_kept() {
        // (caller's GIT_CONFIG_COUNT, index http.proxy lands at, resulting count)
        for (count, index, total) in [
            (None, 0, "1"),
            (Some("2"), 2, "3"),
            (Some("0"), 0, "1"),
            (Some("x"), 0, "1"),
            // Regression: u32::MAX + 1 overflowed (a panic in debug, a count of 0 in release).
            (Some("4294967295"), 0, "1"),
            (Some("4294967294"), 4_294_967_294_u32, "4294967295"),
            (Some("99999999999"), 0, "1"),
        ] {
            let mut caller = vars(&[
                ("GIT_CONFIG_KEY_0", "user.name"),
                ("GIT_CONFIG_VALUE_0", "me"),
                ("GIT_CONFIG_KEY_1", "core.editor"),
                ("GIT_CONFIG_VALUE_1", "vi"),
                ("JAVA_TOOL_OPTIONS", "-Xmx1g"),
                ("HTTP_PROXY", "http://evil:1"),
                ("PATH", "/usr/bin"),
            ]);
            if let Some(c) = count {
                caller.push(("GIT_CONFIG_COUNT".into(), c.into()));
            }
            let env = with_proxy_env(&caller, Some(3128));
            assert_eq!(get(&env, "GIT_CONFIG_COUNT"), Some(total), "{count:?}");
            let key = format!("GIT_CONFIG_KEY_{index}");
            let value = format!("GIT_CONFIG_VALUE_{index}");
            assert_eq!(get(&env, &key), Some("http.proxy"), "{count:?}");
            assert_eq!(get(&env, &value), Some("http://127.0.0.1:3128"), "{count:?}");
            if index == 2 {
                assert_eq!(get(&env, "GIT_CONFIG_KEY_0"), Some("user.name"));
                assert_eq!(get(&env, "GIT_CONFIG_VALUE_1"), Some("vi"));
            }
            let java = get(&env, "JAVA_TOOL_OPTIONS").unwrap();
            assert!(java.starts_with("-Xmx1g -Dhttp.proxyHost=127.0.0.1 "), "{java}");
            assert_eq!(get(&env, "HTTP_PROXY"), Some("http://127.0.0.1:3128"));
            assert_eq!(get(&env, "PATH"), Some("/usr/bin"));
        }
    }

    #[test]
    fn git_ssh_goes_through_sandgate_connect_unless_the_caller_chose() {
        let exe = std::path::Path::new("/usr/local/bin/sandgate");
        assert_eq!(
            git_ssh_command(exe, &[]).unwrap(),
            "ssh -o ProxyCommand='/usr/local/bin/sandgate connect %h %p'"
        );
        for k in ["GIT_SSH_COMMAND", "GIT_SSH"] {
            assert_eq!(git_ssh_command(exe, &vars(&[(k, "my-ssh")])), None, "{k}");
        }
        assert!(git_ssh_command(exe, &vars(&[("GIT_SSH_COMMAND", "")])).is_some());
        for odd in ["/a b/sandgate", "/x'y/sandgate", "/x;rm/sandgate", "rel/sandgate", "/$(x)"] {
            assert_eq!(git_ssh_command(std::path::Path::new(odd), &[]), None, "{odd}");
        }
    }

    #[test]
    fn without_a_proxy_only_the_proxy_variables_go() {
        let caller = vars(&[
            ("GIT_CONFIG_COUNT", "1"),
            ("GIT_CONFIG_KEY_0", "user.name"),
            ("GIT_CONFIG_VALUE_0", "me"),
            ("JAVA_TOOL_OPTIONS", "-Xmx1g"),
            ("https_proxy", "http://evil:1"),
            ("NO_PROXY", "*"),
            ("SANDGATE_SOCKS_PROXY", "socks5h://evil:1"),
        ]);
        let env = with_proxy_env(&caller, None);
        assert_eq!(env, caller[..4].to_vec());
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
