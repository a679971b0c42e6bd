//! Seatbelt (macOS sandbox) profiles: a pure function of the sandbox spec, compiled and tested on
//! every OS, applied on macOS with `/usr/bin/sandbox-exec -p PROFILE -D KEY=VALUE ... -- CMD`.
//!
//! Paths never appear in the profile text: they are passed as `-D` parameters and referenced with
//! `(param "KEY")`, so no path can break the SBPL syntax. Every path is canonicalised first
//! ([`crate::canon`]): Seatbelt matches real paths (`/private/tmp/...`, the target of a symlinked
//! `~/.ssh`), and deny rules name the given spelling as well.
//!
//! The base allowances follow OpenAI Codex's `codex-rs/core/src/seatbelt_base_policy.sbpl` (itself
//! derived from Chrome's `sandbox/policy/mac/common.sb`): `(deny default)`, process exec/fork,
//! same-sandbox signals and process-info, the sysctl read list, `/dev/null` writes, opendirectoryd
//! lookups for user info, POSIX semaphores (Python multiprocessing) and pseudo-terminals. The
//! network and unix-socket rules follow Anthropic's sandbox-runtime
//! (`src/sandbox/macos-sandbox-utils.ts`): only `(remote tcp "localhost:PORT")` of the proxy, and
//! `system-socket AF_UNIX` plus `(remote unix-socket (subpath ...))` only for allowed sockets; so
//! do the move-blocking rules (a `subpath` deny follows the path, not the directory: renaming an
//! ancestor away and back would defeat it).
//!
//! Order (Seatbelt applies the last matching rule, so each denial comes after what it narrows):
//! 1. `(deny default)`, logged with the sandbox id (`sandgate:ID`, read back from `log stream`);
//! 2. the base allowances, reads everywhere, writes to the private temporary directory, the
//!    xcrun helpers' directories and the writable paths; loopback listening; the proxy;
//!    unix sockets under the private temporary directory and the allowed ones;
//! 3. read-only paths (and `.git/hooks`, `.git/config` at any depth of a writable path);
//! 4. hidden paths;
//! 5. move-blocking of every ancestor between a writable root and a read-only or hidden path;
//! 6. TIOCSTI (typing into the caller's terminal).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::canon::{self, Links};
use crate::spec::{NetSetup, SandboxSpec};

/// A generated profile and the `-D` parameters it refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// SBPL text for `sandbox-exec -p`.
    pub text: String,
    /// `(KEY, VALUE)` pairs for `sandbox-exec -D KEY=VALUE`.
    pub params: Vec<(String, PathBuf)>,
}

impl Profile {
    /// The `sandbox-exec` arguments before `--`: `-p TEXT -D K=V ...`.
    pub fn args(&self) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = vec!["-p".into(), self.text.clone().into()];
        for (k, v) in &self.params {
            let mut kv = std::ffi::OsString::from(format!("{k}="));
            kv.push(v.as_os_str());
            args.push("-D".into());
            args.push(kv);
        }
        args
    }
}

/// Path of `sandbox-exec`.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// `TIOCSTI` (`_IOW('t', 114, char)`) as a number: the symbolic name fails to compile in the
/// profiles of some macOS 14 releases.
pub const TIOCSTI: u32 = 0x8001_7472;

/// Variable naming the trustd setting (see [`Trustd`]).
pub const TRUSTD_ENV: &str = "SANDGATE_MACOS_TRUSTD";

/// Whether tiers with network may ask `trustd` to verify certificates.
///
/// Security.framework TLS (Go since 1.18, `gh`, `terraform`, libgit2, `curl` built against
/// SecureTransport) verifies through `com.apple.trustd.agent`; without it they fail with an
/// x509 error. trustd is outside the sandbox and fetches OCSP, CRL and intermediate-certificate
/// URLs named in the certificates it is handed, *without* the proxy, so a command that can talk
/// to it has a way out (a certificate of its own making whose URL carries data). Default: deny
/// (the proxy stays the only way out); `SANDGATE_MACOS_TRUSTD=allow` allows it in tiers with
/// network, as Codex does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Trustd {
    /// No `mach-lookup` of trustd (default).
    #[default]
    Deny,
    /// `mach-lookup` of `com.apple.trustd.agent` in tiers with network.
    Allow,
}

impl Trustd {
    /// The setting from the value of [`TRUSTD_ENV`]: `allow` (or `1`, `true`) allows.
    pub fn from_setting(value: Option<&str>) -> Trustd {
        match value.map(|v| v.trim().to_ascii_lowercase()) {
            Some(v) if v == "allow" || v == "1" || v == "true" => Trustd::Allow,
            _ => Trustd::Deny,
        }
    }
}

/// What the profile needs from the host besides the spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    /// The sandbox's private temporary directory (its `TMPDIR`).
    pub tmp: PathBuf,
    /// Port of the proxy on the host's loopback (proxy mode).
    pub proxy_port: u16,
    /// `confstr(_CS_DARWIN_USER_TEMP_DIR)`: `xcrun` keeps its lookup cache (`xcrun_db`) there.
    pub user_temp_dir: Option<PathBuf>,
    /// `confstr(_CS_DARWIN_USER_CACHE_DIR)`: the shims of `/usr/bin` (`git`, `python3`, `clang`,
    /// `make`) write there and exit 128 when they cannot.
    pub user_cache_dir: Option<PathBuf>,
    /// The trustd setting.
    pub trustd: Trustd,
}

impl HostFacts {
    /// A host with only the private temporary directory and the proxy port.
    pub fn new(tmp: impl Into<PathBuf>, proxy_port: u16) -> HostFacts {
        HostFacts {
            tmp: tmp.into(),
            proxy_port,
            user_temp_dir: None,
            user_cache_dir: None,
            trustd: Trustd::Deny,
        }
    }
}

/// The sysctls readable inside (Codex's list, from Chrome's; `kern.proc.all` for `ps`).
const SYSCTLS: &[&str] = &[
    "hw.activecpu",
    "hw.busfrequency_compat",
    "hw.byteorder",
    "hw.cacheconfig",
    "hw.cachelinesize_compat",
    "hw.cpufamily",
    "hw.cpufrequency",
    "hw.cpufrequency_compat",
    "hw.cputype",
    "hw.l1dcachesize_compat",
    "hw.l1icachesize_compat",
    "hw.l2cachesize_compat",
    "hw.l3cachesize_compat",
    "hw.logicalcpu",
    "hw.logicalcpu_max",
    "hw.machine",
    "hw.memsize",
    "hw.model",
    "hw.ncpu",
    "hw.nperflevels",
    "hw.packages",
    "hw.pagesize",
    "hw.pagesize_compat",
    "hw.physicalcpu",
    "hw.physicalcpu_max",
    "hw.tbfrequency_compat",
    "hw.vectorunit",
    "kern.argmax",
    "kern.hostname",
    "kern.maxfilesperproc",
    "kern.maxproc",
    "kern.osproductversion",
    "kern.osrelease",
    "kern.ostype",
    "kern.osvariant_status",
    "kern.osversion",
    "kern.proc.all",
    "kern.secure_kernel",
    "kern.usrstack64",
    "kern.version",
    "machdep.cpu.brand_string",
    "sysctl.proc_cputype",
    "vm.loadavg",
];

const SYSCTL_PREFIXES: &[&str] = &[
    "hw.optional.arm.",
    "hw.optional.armv8_",
    "hw.perflevel",
    "kern.proc.pgrp.",
    "kern.proc.pid.",
    "kern.proc.tty.",
    "kern.proc.uid.",
    "net.routetable.",
];

/// The profile text as a tier comment: names outside `[a-z0-9_-]` never reach the profile as
/// written (a newline would end the comment and start a rule).
pub fn tier_label(name: &str) -> String {
    let safe = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-';
    if !name.is_empty() && name.chars().all(safe) {
        return name.to_owned();
    }
    let mut out: String = name.chars().map(|c| if safe(c) { c } else { '_' }).collect();
    out.push_str(" (renamed: characters outside [a-z0-9_-])");
    out
}

/// Collects `-D` parameters while the profile is written.
struct Params(Vec<(String, PathBuf)>);

impl Params {
    fn add(&mut self, prefix: &str, p: &Path) -> String {
        let i = self.0.iter().filter(|(k, _)| k.rsplit_once('_').is_some_and(|(a, _)| a == prefix));
        let key = format!("{prefix}_{}", i.count());
        self.0.push((key.clone(), p.to_path_buf()));
        key
    }
}

/// The profile for `spec` on `host`, with paths resolved through `links`.
pub fn profile(spec: &SandboxSpec, host: &HostFacts, links: &dyn Links) -> Profile {
    let mut params = Params(Vec::new());
    let mut t = String::new();
    let tag = format!("sandgate:{}", spec.id);
    let msg = format!("(with message \"{tag}\")");
    let real = |p: &Path| canon::canonical(links, p);
    let network = matches!(spec.net, NetSetup::Proxy { .. });

    t.push_str("(version 1)\n");
    let _ = writeln!(t, "; sandgate tier {}", tier_label(&spec.tier_name));
    let _ = writeln!(t, "\n; closed by default; every refusal is logged as {tag}");
    let _ = writeln!(t, "(deny default {msg})");
    t.push_str(BASE);

    t.push_str("\n; the shims of /usr/bin (xcrun) ask dirhelper for the user's directories\n");
    t.push_str("(allow mach-lookup (global-name \"com.apple.bsd.dirhelper\"))\n");
    if network && host.trustd == Trustd::Allow {
        t.push_str("; certificate checks by trustd (SANDGATE_MACOS_TRUSTD=allow)\n");
        t.push_str("(allow mach-lookup (global-name \"com.apple.trustd.agent\"))\n");
    }

    t.push_str("\n; reads: everywhere (credentials are denied below)\n(allow file-read*)\n");

    t.push_str("\n; writes: the private temporary directory and the tier's writable paths\n");
    let tmp = real(&host.tmp);
    let tmp_key = params.add("TMP", &tmp);
    let _ = writeln!(t, "(allow file-write* (subpath (param \"{tmp_key}\")))");
    if let Some(d) = &host.user_temp_dir {
        let key = params.add("USER_TEMP", &real(d));
        let _ = writeln!(
            t,
            "(allow file-write* (require-all (subpath (param \"{key}\")) (regex #\"/xcrun_db[^/]*$\")))"
        );
    }
    if let Some(d) = &host.user_cache_dir {
        let key = params.add("USER_CACHE", &real(d));
        let _ = writeln!(t, "(allow file-write* (subpath (param \"{key}\")))");
    }
    let writable: Vec<PathBuf> = spec.writable.iter().map(|w| real(w)).collect();
    let mut writable_keys = Vec::new();
    for w in &writable {
        let key = params.add("WRITABLE", w);
        let _ = writeln!(t, "(allow file-write* (subpath (param \"{key}\")))");
        writable_keys.push(key);
    }

    t.push_str("\n; network: listening on loopback (test servers), as on Linux\n");
    t.push_str("(allow system-socket (socket-domain AF_INET) (socket-domain AF_INET6))\n");
    t.push_str("(allow network-bind network-inbound (local ip \"localhost:*\"))\n");
    match &spec.net {
        NetSetup::None => t.push_str("; no proxy: (deny default) refuses every connection\n"),
        NetSetup::Proxy { .. } => {
            let _ = writeln!(
                t,
                "; out only to the proxy\n(allow network-outbound (remote tcp \"localhost:{}\"))",
                host.proxy_port
            );
        }
    }
    t.push_str("\n; unix sockets: under the private temporary directory, and the allowed ones\n");
    t.push_str("(allow system-socket (socket-domain AF_UNIX))\n");
    let _ = writeln!(
        t,
        "(allow network-bind network-inbound (local unix-socket (subpath (param \"{tmp_key}\"))))"
    );
    let _ = writeln!(
        t,
        "(allow network-outbound (remote unix-socket (subpath (param \"{tmp_key}\"))))"
    );
    for s in &spec.allowed_unix_sockets {
        let key = params.add("SOCKET", &real(s));
        let _ = writeln!(
            t,
            "(allow network-outbound (remote unix-socket (subpath (param \"{key}\"))))"
        );
    }

    // Every spelling of each protected path, canonical first.
    let read_only: Vec<PathBuf> =
        spec.read_only.iter().flat_map(|r| canon::spellings(links, r)).collect();
    let hidden: Vec<PathBuf> =
        spec.hidden.iter().flat_map(|h| canon::spellings(links, h)).collect();

    t.push_str("\n; protected: read-only even inside writable paths, missing ones included\n");
    for r in &read_only {
        let key = params.add("READ_ONLY", r);
        let _ = writeln!(t, "(deny file-write* (subpath (param \"{key}\")) {msg})");
    }
    if !writable_keys.is_empty() {
        t.push_str("; git hooks and config at any depth of a writable path (nested clones,\n");
        t.push_str("; submodules), and no renaming of a .git directory there\n");
    }
    for key in &writable_keys {
        let _ = writeln!(
            t,
            "(deny file-write* (require-all (subpath (param \"{key}\")) \
             (regex #\"/\\.git/(modules/.+/)?(hooks(/.*)?|config)$\")) {msg})"
        );
        let _ = writeln!(
            t,
            "(deny file-write-unlink (require-all (subpath (param \"{key}\")) \
             (regex #\"/\\.git$\")) {msg})"
        );
    }

    if !hidden.is_empty() {
        t.push_str("\n; hidden: credentials and the store, neither readable nor writable\n");
        for h in &hidden {
            let key = params.add("HIDDEN", h);
            let _ = writeln!(t, "(deny file-read* file-write* (subpath (param \"{key}\")) {msg})");
        }
    }

    let mut roots: Vec<PathBuf> = vec![tmp.clone()];
    roots.extend(writable.iter().cloned());
    roots.extend(host.user_cache_dir.iter().map(|d| real(d)));
    let ancestors = ancestors_to_pin(&roots, read_only.iter().chain(&hidden));
    if !ancestors.is_empty() {
        t.push_str("\n; no renaming (or re-creating) the directories above a protected path\n");
        for a in &ancestors {
            let key = params.add("ANCESTOR", a);
            let _ = writeln!(
                t,
                "(deny file-write-unlink file-write-create (literal (param \"{key}\")) {msg})"
            );
        }
    }

    t.push_str("\n; no typing into the caller's terminal (TIOCSTI)\n");
    let _ = writeln!(t, "(deny file-ioctl (ioctl-command {TIOCSTI}) {msg})");
    Profile { text: t, params: params.0 }
}

/// The directories strictly between a writable root and a protected path (the root itself
/// excluded: renaming it needs its parent writable, which is then a root of its own).
pub fn ancestors_to_pin<'a>(
    roots: &[PathBuf],
    protected: impl Iterator<Item = &'a PathBuf>,
) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for p in protected {
        for root in roots.iter().filter(|r| p.starts_with(r) && p != *r) {
            let mut a = p.parent();
            while let Some(dir) = a {
                if dir == root.as_path() || !dir.starts_with(root) {
                    break;
                }
                out.insert(dir.to_path_buf());
                a = dir.parent();
            }
        }
    }
    out
}

/// The base allowances (see the module documentation for where they come from).
const BASE: &str = concat!(
    "\n; processes: children inherit the profile\n",
    "(allow process-exec)\n(allow process-fork)\n",
    "(allow signal (target same-sandbox))\n",
    "(allow process-info* (target same-sandbox))\n",
    "(allow user-preference-read)\n",
    "(allow mach-host*)\n",
    "\n; devices\n",
    "(allow file-write-data (require-all (path \"/dev/null\") (vnode-type CHARACTER-DEVICE)))\n",
    "(allow file-ioctl (literal \"/dev/null\") (literal \"/dev/zero\") (literal \"/dev/random\") ",
    "(literal \"/dev/urandom\") (literal \"/dev/tty\"))\n",
    "\n; user information, power management, POSIX semaphores\n",
    "(allow mach-lookup (global-name \"com.apple.system.opendirectoryd.libinfo\"))\n",
    "(allow mach-lookup (global-name \"com.apple.PowerManagement.control\"))\n",
    "(allow iokit-open (iokit-registry-entry-class \"RootDomainUserClient\"))\n",
    "(allow ipc-posix-sem)\n",
    "\n; pseudo-terminals\n",
    "(allow pseudo-tty)\n",
    "(allow file-read* file-write* file-ioctl (literal \"/dev/ptmx\"))\n",
    "(allow file-write-data file-ioctl (require-all (regex #\"^/dev/ttys[0-9]+\") ",
    "(vnode-type CHARACTER-DEVICE)))\n",
);

/// The sysctl part of the base, generated from the lists above.
pub fn sysctl_rules() -> String {
    let mut t = String::from("(allow sysctl-read\n");
    for s in SYSCTLS {
        let _ = writeln!(t, "  (sysctl-name \"{s}\")");
    }
    for s in SYSCTL_PREFIXES {
        let _ = writeln!(t, "  (sysctl-name-prefix \"{s}\")");
    }
    t.push_str(")\n");
    t
}

/// The complete profile text: [`profile`] with the sysctl rules appended.
pub fn render(spec: &SandboxSpec, host: &HostFacts, links: &dyn Links) -> Profile {
    let mut p = profile(spec, host, links);
    p.text.push_str("\n; sysctls (read; `ps` lists processes with kern.proc.all, but other\n");
    p.text.push_str("; processes' arguments and environment (kern.procargs2) stay closed)\n");
    p.text.push_str(&sysctl_rules());
    p
}

/// JVM flag that makes it connect over IPv4: dual-stack it connects to `::ffff:127.0.0.1`, which
/// the profile's `localhost:PORT` does not match.
pub const JVM_IPV4: &str = "-Djava.net.preferIPv4Stack=true";

/// The command's environment on macOS: `env` with [`JVM_IPV4`] appended to `JAVA_TOOL_OPTIONS`
/// in tiers with network (after the caller's flags and the proxy's, so it is not overridden).
pub fn environment(
    env: &[(std::ffi::OsString, std::ffi::OsString)],
    net: &NetSetup,
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let mut env = env.to_vec();
    if matches!(net, NetSetup::None) {
        return env;
    }
    match env.iter_mut().rev().find(|(k, _)| k == "JAVA_TOOL_OPTIONS") {
        Some((_, v)) if !v.is_empty() => {
            v.push(" ");
            v.push(JVM_IPV4);
        }
        Some((_, v)) => *v = JVM_IPV4.into(),
        None => env.push(("JAVA_TOOL_OPTIONS".into(), JVM_IPV4.into())),
    }
    env
}

/// What a launch started inside a Seatbelt sandbox does (macOS cannot apply a second profile:
/// `sandbox-exec` fails with `sandbox_apply: Operation not permitted`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nested {
    /// Run the command in place: the outer sandgate sandbox is of the same tier, so its walls
    /// are the ones asked for (the note says so).
    RunInPlace {
        /// One line for stderr.
        note: String,
    },
    /// Refuse: the walls asked for cannot be added, and running under the outer ones would
    /// not be what was asked.
    Refuse {
        /// The error, naming what to do instead.
        message: String,
    },
}

/// The decision for a launch of `tier` inside a Seatbelt sandbox; `outer_tier` is the
/// `SANDGATE_TIER` of the sandgate sandbox around it (`None`: another program's sandbox).
/// Extra writable paths asked for inside (`--allow-write`) are never granted in place.
pub fn nested(outer_tier: Option<&str>, tier: &str, extra_writable: bool) -> Nested {
    let cannot = "macOS cannot apply a second Seatbelt profile inside a sandbox (sandbox-exec \
                  fails with `sandbox_apply: Operation not permitted`)";
    match outer_tier {
        Some(outer) if outer == tier && !extra_writable => Nested::RunInPlace {
            note: format!(
                "sandgate: already inside a `{}` sandbox: running the command under its walls",
                tier_label(outer)
            ),
        },
        Some(outer) => Nested::Refuse {
            message: format!(
                "already inside a sandgate `{}` sandbox; {cannot}, so tier `{}`{} cannot be \
                 applied here. Run the command directly (the outer walls apply), or start \
                 `sandgate {}` from outside any sandbox",
                tier_label(outer),
                tier_label(tier),
                if extra_writable { " with --allow-write" } else { "" },
                tier_label(tier),
            ),
        },
        None => Nested::Refuse {
            message: format!(
                "this process is already inside a Seatbelt sandbox that is not sandgate's (an \
                 App Sandbox, another agent's sandbox-exec); {cannot}. Start sandgate from a \
                 terminal outside that sandbox"
            ),
        },
    }
}
