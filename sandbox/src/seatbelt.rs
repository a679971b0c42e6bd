//! Seatbelt (macOS sandbox) profiles: a pure function of the sandbox spec, compiled and tested on
//! every OS, applied on macOS with `/usr/bin/sandbox-exec -p PROFILE -D KEY=VALUE ... -- CMD`.
//!
//! Paths never appear in the profile text: they are passed as `-D` parameters and referenced with
//! `(param "KEY")`, so no path can break the SBPL syntax.
//!
//! The base allowances follow OpenAI Codex's `codex-rs/core/src/seatbelt_base_policy.sbpl` (itself
//! derived from Chrome's `sandbox/policy/mac/common.sb`): `(deny default)`, process exec/fork,
//! same-sandbox signals and process-info, the sysctl read list, `/dev/null` writes, opendirectoryd
//! lookups for user info, POSIX semaphores (Python multiprocessing) and pseudo-terminals. The
//! network and unix-socket rules follow Anthropic's sandbox-runtime
//! (`src/sandbox/macos-sandbox-utils.ts`): only `(remote tcp "localhost:PORT")` of the proxy, and
//! `system-socket AF_UNIX` plus `(remote unix-socket (subpath ...))` only for allowed sockets.
//! Seatbelt applies the last matching rule, so the denials (protected files, credentials) come
//! after the allowances they narrow.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::spec::{NetMode, SandboxSpec};

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

/// The sysctls readable inside (Codex's list, from Chrome's).
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
    "net.routetable.",
];

/// The profile for `spec`; `tmp` is the sandbox's private temporary directory (its `TMPDIR`),
/// `proxy_port` the host port of the proxy in proxy mode.
pub fn profile(spec: &SandboxSpec, tmp: &Path, proxy_port: u16) -> Profile {
    let mut params: Vec<(String, PathBuf)> = Vec::new();
    let mut t = String::new();
    let mut param = |prefix: &str, i: usize, p: &Path| -> String {
        let key = format!("{prefix}_{i}");
        params.push((key.clone(), p.to_path_buf()));
        key
    };

    t.push_str("(version 1)\n");
    let _ = writeln!(t, "; sandgate tier {}", spec.tier_name);
    t.push_str(BASE);

    t.push_str("\n; reads: everywhere (credentials are denied below)\n(allow file-read*)\n");

    t.push_str("\n; writes: the private temporary directory and the tier's writable paths\n");
    let key = param("TMP", 0, tmp);
    let _ = writeln!(t, "(allow file-write* (subpath (param \"{key}\")))");
    for (i, w) in spec.writable.iter().enumerate() {
        let key = param("WRITABLE", i, w);
        let _ = writeln!(t, "(allow file-write* (subpath (param \"{key}\")))");
    }

    t.push_str("\n; network\n");
    match &spec.net {
        NetMode::None => t.push_str("; none: (deny default) refuses every socket operation\n"),
        NetMode::Proxy { .. } => {
            t.push_str("(allow system-socket (socket-domain AF_INET) (socket-domain AF_INET6))\n");
            let _ = writeln!(t, "(allow network-outbound (remote tcp \"localhost:{proxy_port}\"))");
        }
    }
    if !spec.allowed_unix_sockets.is_empty() {
        t.push_str("(allow system-socket (socket-domain AF_UNIX))\n");
        for (i, s) in spec.allowed_unix_sockets.iter().enumerate() {
            let key = param("SOCKET", i, s);
            let _ = writeln!(
                t,
                "(allow network-outbound (remote unix-socket (subpath (param \"{key}\"))))"
            );
        }
    }

    if !spec.read_only.is_empty() {
        t.push_str("\n; protected: read-only even inside writable paths, missing ones included\n");
        for (i, r) in spec.read_only.iter().enumerate() {
            let key = param("READ_ONLY", i, r);
            let _ = writeln!(t, "(deny file-write* (subpath (param \"{key}\")))");
        }
    }
    if !spec.hidden.is_empty() {
        t.push_str("\n; hidden: credentials and the store, neither readable nor writable\n");
        for (i, h) in spec.hidden.iter().enumerate() {
            let key = param("HIDDEN", i, h);
            let _ = writeln!(t, "(deny file-read* file-write* (subpath (param \"{key}\")))");
        }
    }
    Profile { text: t, params }
}

/// The base allowances (see the module documentation for where they come from).
const BASE: &str = concat!(
    "\n; closed by default\n(deny default)\n",
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
pub fn render(spec: &SandboxSpec, tmp: &Path, proxy_port: u16) -> Profile {
    let mut p = profile(spec, tmp, proxy_port);
    p.text.push_str("\n; sysctls (read)\n");
    p.text.push_str(&sysctl_rules());
    p
}
