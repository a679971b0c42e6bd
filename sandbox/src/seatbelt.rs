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
//! Name rules match in any case ([`regex`]): APFS is case-insensitive, Seatbelt's filters are
//! not, so each protected or hidden path is denied by its `subpath` and again by a regex of it
//! in any case.
//!
//! Order (Seatbelt applies the last matching rule, so each denial comes after what it narrows):
//! 1. `(deny default)`, logged with the sandbox id (`sandgate:ID`, read back from `log stream`);
//! 2. the base allowances, the launch's own Mach name ([`reap::launch_service`]), reads
//!    everywhere but devices (read by name only), writes to the private temporary directory and
//!    the writable paths; loopback listening when asked for ([`crate::MacosOptions`]); the proxy; unix sockets under the private
//!    temporary directory and the allowed ones;
//! 3. caches the host trusts (the user cache directory, `xcrun_db`): never written;
//! 4. `~/Library` hidden, but for [`library::READABLE`] (read-only) and writable paths inside
//!    it; [`library::ALWAYS_DENIED`] (keychains, LaunchAgents) whatever is writable;
//! 5. other sandboxes' temporary directories hidden (in every TMPDIR a launch may have had);
//! 6. the top-level rule of each writable path ([`crate::TopLevel`]): dot-entries and the named
//!    tool files at its top, and the host-tool names below it, read-only (its re-allowances
//!    bound to the writable path);
//! 7. read-only paths (and `.git/hooks`, `.git/config` at any depth of a writable path);
//! 8. hidden paths;
//! 9. move-blocking of every ancestor between a writable root and a read-only or hidden path;
//! 10. terminals: none but the launch's own, `/dev/tty` and ptys made inside;
//! 11. TIOCSTI (typing into the caller's terminal).

pub mod library;
pub mod reap;
pub mod regex;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::os::unix::ffi::OsStringExt as _;
use std::path::{Path, PathBuf};

use crate::canon::{self, Links};
use crate::spec::{Enforcement, NetSetup, SandboxSpec};

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
/// (the proxy stays the only way out); `[macos] trustd = "allow"` in the configuration (or
/// `SANDGATE_MACOS_TRUSTD=allow`) allows it in tiers with network, as Codex does.
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
    /// `confstr(_CS_DARWIN_USER_TEMP_DIR)`: `xcrun` keeps its lookup cache (`xcrun_db`) there,
    /// which the host's `/usr/bin` shims trust: never written inside.
    pub user_temp_dir: Option<PathBuf>,
    /// `confstr(_CS_DARWIN_USER_CACHE_DIR)`: clang's and Swift's module caches, which host
    /// builds load: never written inside (the sandbox gets its own, see [`toolchain_env`]).
    pub user_cache_dir: Option<PathBuf>,
    /// The home directory (its `Library` is hidden but for [`library::READABLE`]).
    pub home: Option<PathBuf>,
    /// The launch's own terminal devices (`/dev/ttysNNN` of its stdin, stdout, stderr): the
    /// only terminals the command may use besides `/dev/tty` and ptys it makes.
    pub terminals: Vec<PathBuf>,
    /// The active developer directory (`xcode-select -p`): its real tools go first on `PATH`.
    pub developer_dir: Option<PathBuf>,
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
            home: None,
            terminals: Vec::new(),
            developer_dir: None,
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

    /// A regex as a parameter (bytes: paths need not be UTF-8).
    fn regex(&mut self, prefix: &str, re: Vec<u8>) -> String {
        self.add(prefix, &PathBuf::from(OsString::from_vec(re)))
    }
}

/// `file-write*` denial of `path` by its `subpath` and in any case.
fn deny_path(t: &mut String, params: &mut Params, prefix: &str, ops: &str, path: &Path, msg: &str) {
    let key = params.add(prefix, path);
    let re = params.regex(&format!("{prefix}_RE"), regex::subpath(path));
    let _ = writeln!(t, "(deny {ops} (subpath (param \"{key}\")) {msg})");
    let _ = writeln!(t, "(deny {ops} (regex (param \"{re}\")) {msg})");
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
    t.push_str(
        "; this launch's own name, registered by nobody: what the launcher asks the kernel\n",
    );
    t.push_str("; about each process at the end, to kill the ones still under this profile\n");
    let _ = writeln!(
        t,
        "(allow mach-lookup (global-name \"{}\"))",
        reap::launch_service(spec.id.as_str())
    );

    t.push_str("\n; reads: everywhere (credentials are denied below)\n(allow file-read*)\n");
    devices(&mut t, &msg);

    t.push_str("\n; writes: the private temporary directory and the tier's writable paths\n");
    let tmp = real(&host.tmp);
    let tmp_key = params.add("TMP", &tmp);
    let _ = writeln!(t, "(allow file-write* (subpath (param \"{tmp_key}\")))");
    let writable: Vec<PathBuf> = spec.writable.iter().map(|w| real(w)).collect();
    let mut writable_keys = Vec::new();
    for w in &writable {
        let key = params.add("WRITABLE", w);
        let _ = writeln!(t, "(allow file-write* (subpath (param \"{key}\")))");
        writable_keys.push(key);
    }

    if spec.macos.loopback_listen {
        t.push_str("\n; network: listening on loopback (test servers; [macos] loopback_listen):\n");
        t.push_str("; the host's loopback, where host processes and browser pages reach them\n");
        t.push_str("(allow network-bind network-inbound (local ip \"localhost:*\"))\n");
    } else {
        t.push_str("\n; network: no listening (the host's loopback is not the sandbox's own;\n");
        t.push_str("; [macos] loopback_listen = true allows it)\n");
    }
    t.push_str("(allow system-socket (socket-domain AF_INET) (socket-domain AF_INET6))\n");
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

    host_caches(&mut t, &mut params, host, &real, &msg);
    library(&mut t, &mut params, host, &writable, &real, &msg);

    t.push_str("\n; other sandboxes' temporary directories (in this TMPDIR, the user's and\n");
    t.push_str("; /tmp: a launch may have had another TMPDIR): hidden; this one's own\n");
    let mut tmp_parents: Vec<PathBuf> = tmp.parent().map(Path::to_path_buf).into_iter().collect();
    tmp_parents.extend(host.user_temp_dir.as_deref().map(real));
    tmp_parents.push(real(Path::new("/tmp")));
    let mut seen = BTreeSet::new();
    for parent in tmp_parents.iter().filter(|p| seen.insert(p.to_path_buf())) {
        let re =
            params.regex("TMP_SIBLINGS", regex::below(parent, &regex::name("sandgate-", true)));
        let _ = writeln!(t, "(deny file-read* file-write* (regex (param \"{re}\")) {msg})");
    }
    let _ = writeln!(t, "(allow file-read* file-write* (subpath (param \"{tmp_key}\")))");

    if let Some(rule) = spec.top_level.as_ref().filter(|_| !writable.is_empty()) {
        top_level(&mut t, &mut params, rule, &writable, &writable_keys, &msg);
    }

    // Every spelling of each protected path, canonical first.
    let read_only: Vec<PathBuf> =
        spec.read_only.iter().flat_map(|r| canon::spellings(links, r)).collect();
    let hidden: Vec<PathBuf> =
        spec.hidden.iter().flat_map(|h| canon::spellings(links, h)).collect();

    t.push_str("\n; protected: read-only even inside writable paths, missing ones included\n");
    for r in &read_only {
        deny_path(&mut t, &mut params, "READ_ONLY", "file-write*", r, &msg);
    }
    if !writable_keys.is_empty() {
        t.push_str("; git hooks and config at any depth of a writable path (nested clones,\n");
        t.push_str("; submodules), and no renaming of a .git directory there\n");
    }
    for key in &writable_keys {
        let _ = writeln!(
            t,
            "(deny file-write* (require-all (subpath (param \"{key}\")) \
             (regex #\"{GIT_HOOKS_CONFIG}\")) {msg})"
        );
        let _ = writeln!(
            t,
            "(deny file-write-unlink (require-all (subpath (param \"{key}\")) \
             (regex #\"/\\.[Gg][Ii][Tt]$\")) {msg})"
        );
    }

    if !hidden.is_empty() {
        t.push_str("\n; hidden: credentials and the store, neither readable nor writable\n");
        for h in &hidden {
            deny_path(&mut t, &mut params, "HIDDEN", "file-read* file-write*", h, &msg);
        }
    }

    let mut roots: Vec<PathBuf> = vec![tmp.clone()];
    roots.extend(writable.iter().cloned());
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

    terminals(&mut t, &mut params, host, &msg);

    t.push_str("\n; no typing into the caller's terminal (TIOCSTI)\n");
    let _ = writeln!(t, "(deny file-ioctl (ioctl-command {TIOCSTI}) {msg})");
    Profile { text: t, params: params.0 }
}

/// `.git/hooks` (and everything below) or `.git/config`, a submodule's under `.git/modules/`
/// too, in any case: read-only at any depth of a writable path.
const GIT_HOOKS_CONFIG: &str = r"/\.[Gg][Ii][Tt]/([Mm][Oo][Dd][Uu][Ll][Ee][Ss]/.+/)?([Hh][Oo][Oo][Kk][Ss](/.*)?|[Cc][Oo][Nn][Ff][Ii][Gg])$";

/// Caches the host trusts, denied for writes even inside a writable path (and links made
/// there: a link is a write of its directory): the user cache directory (clang's and Swift's
/// module caches, which the host's next build loads) and `xcrun_db` in the user temporary
/// directory (the `/usr/bin` shims run the tool it names).
fn host_caches(
    t: &mut String,
    params: &mut Params,
    host: &HostFacts,
    real: &dyn Fn(&Path) -> PathBuf,
    msg: &str,
) {
    if host.user_cache_dir.is_none() && host.user_temp_dir.is_none() {
        return;
    }
    t.push_str("\n; caches the host trusts: never written (the sandbox has its own)\n");
    if let Some(d) = &host.user_cache_dir {
        deny_path(t, params, "USER_CACHE", "file-write*", &real(d), msg);
    }
    if let Some(d) = &host.user_temp_dir {
        let re = params
            .regex("XCRUN_DB", regex::below(&real(d), b"([^/]+/)*[Xx][Cc][Rr][Uu][Nn]_[Dd][Bb]"));
        let _ = writeln!(t, "(deny file-write* (regex (param \"{re}\")) {msg})");
    }
}

/// `~/Library` hidden (reads and writes, in any case), then [`library::READABLE`] readable
/// again and the directories on the way to them searchable; writable paths the caller named
/// inside it stay writable.
fn library(
    t: &mut String,
    params: &mut Params,
    host: &HostFacts,
    writable: &[PathBuf],
    real: &dyn Fn(&Path) -> PathBuf,
    msg: &str,
) {
    let Some(home) = &host.home else { return };
    let lib = real(&home.join("Library"));
    t.push_str("\n; ~/Library: keychains, browser and app state; hidden but for what tools read\n");
    deny_path(t, params, "LIBRARY", "file-read* file-write*", &lib, msg);
    let mut searchable = BTreeSet::from([lib.clone()]);
    let mut readable = Vec::new();
    for (entry, _why) in library::READABLE {
        let p = lib.join(entry);
        searchable.extend(
            p.ancestors().skip(1).take_while(|a| a.starts_with(&lib)).map(Path::to_path_buf),
        );
        readable.push(p);
    }
    for d in &searchable {
        let key = params.add("LIBRARY_DIR", d);
        let _ = writeln!(t, "(allow file-read-metadata (literal (param \"{key}\")))");
    }
    for p in &readable {
        let key = params.add("LIBRARY_READ", p);
        let _ = writeln!(t, "(allow file-read* (subpath (param \"{key}\")))");
    }
    for w in writable.iter().filter(|w| w.starts_with(&lib)) {
        let key = params.add("LIBRARY_WRITABLE", w);
        let _ = writeln!(t, "(allow file-read* file-write* (subpath (param \"{key}\")))");
    }
    t.push_str("; whatever is writable: the keychains hidden, what runs at login read-only\n");
    for (entry, ops) in library::ALWAYS_DENIED {
        deny_path(t, params, "LIBRARY_DENIED", ops, &lib.join(entry), msg);
    }
}

/// The top-level rule ([`crate::TopLevel`]) of each writable path, as far as regexes express
/// it (all of it: names and `*` patterns). At the top: every dot-entry read-only (and none can
/// be made) but the allowlisted ones, and the protected names in any case; an existing `.git`
/// follows the git rules (writable but hooks and config; a new one cannot be made). Below the
/// top: the host-tool names ([`crate::TopLevel::below`]) in any case, outside the directories the
/// scan does not enter either (build output, allowlisted names). Where Linux moves a new
/// protected entry away, the profile refuses to make it.
fn top_level(
    t: &mut String,
    params: &mut Params,
    rule: &crate::TopLevel,
    writable: &[PathBuf],
    writable_keys: &[String],
    msg: &str,
) {
    let is_git = |p: &&String| p.eq_ignore_ascii_case(".git");
    let below: Vec<&str> = rule
        .below
        .iter()
        .filter(|b| !is_git(b) && !rule.writable.iter().any(|w| w.eq_ignore_ascii_case(b)))
        .map(String::as_str)
        .collect();
    let below = regex::names(below, true);
    let skip = regex::names(rule.skip.iter().chain(&rule.writable).map(String::as_str), false);
    let allowed =
        regex::names(rule.writable.iter().filter(|w| !is_git(w)).map(String::as_str), false);
    let protected = regex::names(rule.protected.iter().map(String::as_str), true);
    t.push_str(
        "\n; the top-level rule of each writable path: dot-entries (but the allowlisted ones)\n",
    );
    t.push_str("; and tool files at its top, host-tool files below it: read-only, never made\n");
    // The re-allowances are regexes in any case: each is bound to its writable path as given,
    // or it would grant writes outside it (a case variant of it, a distinct directory on a
    // case-sensitive volume) and undo the earlier denials (caches, `~/Library`).
    for (w, w_key) in writable.iter().zip(writable_keys) {
        let inside = |re: &str| {
            format!("(require-all (subpath (param \"{w_key}\")) (regex (param \"{re}\")))")
        };
        let dot = params.regex("TOP_DOT", regex::below(w, br"\."));
        let _ = writeln!(t, "(deny file-write* (regex (param \"{dot}\")) {msg})");
        let git = params.regex("TOP_GIT", regex::below(w, br"\.[Gg][Ii][Tt]/"));
        let _ = writeln!(t, "(allow file-write* {})", inside(&git));
        let nested = params.regex("NEW_GIT", regex::below(w, br".+/\.[Gg][Ii][Tt]$"));
        let _ = writeln!(t, "(deny file-write-create (regex (param \"{nested}\")) {msg})");
        if let Some(names) = &below {
            let mut re = br"(.*/)?".to_vec();
            re.extend_from_slice(names);
            re.extend_from_slice(b"(/|$)");
            let key = params.regex("BELOW", regex::below(w, &re));
            match &skip {
                Some(skip) => {
                    let mut out = br"(.*/)?".to_vec();
                    out.extend_from_slice(skip);
                    out.push(b'/');
                    let not = params.regex("BELOW_SKIP", regex::below(w, &out));
                    let _ = writeln!(
                        t,
                        "(deny file-write* (require-all (regex (param \"{key}\")) \
                         (require-not (regex (param \"{not}\")))) {msg})"
                    );
                }
                None => {
                    let _ = writeln!(t, "(deny file-write* (regex (param \"{key}\")) {msg})");
                }
            }
        }
        if let Some(names) = &allowed {
            let mut re = names.clone();
            re.extend_from_slice(b"(/|$)");
            let key = params.regex("TOP_ALLOWED", regex::below(w, &re));
            let _ = writeln!(t, "(allow file-write* {})", inside(&key));
        }
        if let Some(names) = &protected {
            let mut re = names.clone();
            re.extend_from_slice(b"(/|$)");
            let key = params.regex("TOP_PROTECTED", regex::below(w, &re));
            let _ = writeln!(t, "(deny file-write* (regex (param \"{key}\")) {msg})");
        }
    }
}

/// Devices: read by name only. Reads are allowed everywhere, and a device read is an open of
/// it: other terminals not named `ttys` (the BSD ptys `/dev/ttyp*`), serial and Bluetooth ports
/// (`/dev/cu.*`, `/dev/tty.*`), and for a launch as root the raw disks (`/dev/rdisk*`: every
/// hidden file, past the profile). `stat` of any device stays allowed; the terminals (the
/// launch's own, ptys made inside) are allowed again at the end of the profile.
fn devices(t: &mut String, msg: &str) {
    t.push_str("; but devices, read by name only (terminals: see the end of the profile)\n");
    let _ = writeln!(t, "(deny file-read-data (subpath \"/dev\") {msg})");
    t.push_str("(allow file-read-data (literal \"/dev\")");
    for d in DEVICES_READ {
        let _ = write!(t, " (literal \"/dev/{d}\")");
    }
    t.push_str(" (regex #\"^/dev/fd/[0-9]+$\"))\n");
}

/// Devices the command may read (open) by name, below `/dev`.
const DEVICES_READ: &[&str] = &[
    "null",
    "zero",
    "random",
    "urandom",
    "stdin",
    "stdout",
    "stderr",
    "tty",
    "ptmx",
    "dtracehelper",
    "autofs_nowait",
    // the descriptor directory itself: Python's subprocess lists it to close descriptors
    "fd",
];

/// Terminals: the user's other terminals (`/dev/ttys*`: keystrokes typed in another tab,
/// escape sequences written to it) are refused; the launch's own, `/dev/tty` (ssh, sudo and git
/// prompts) and ptys made inside (the kernel marks them with the `com.apple.sandbox.pty`
/// extension) are allowed. `stat` of a terminal stays allowed (`tty`, `ls -l /dev`).
fn terminals(t: &mut String, params: &mut Params, host: &HostFacts, msg: &str) {
    t.push_str("\n; terminals: the launch's own, /dev/tty and ptys made inside, no other\n");
    let _ = writeln!(
        t,
        "(deny file-read-data file-write* file-ioctl (regex #\"^/dev/ttys[0-9]+$\") {msg})"
    );
    t.push_str(
        "(allow file-read-data file-write-data file-ioctl (require-all (regex #\"^/dev/ttys[0-9]+$\") \
         (extension \"com.apple.sandbox.pty\")))\n",
    );
    t.push_str("(allow file-read-data file-write-data file-ioctl (literal \"/dev/tty\"))\n");
    for tty in &host.terminals {
        let key = params.add("TTY", tty);
        let _ = writeln!(
            t,
            "(allow file-read-data file-write-data file-ioctl (literal (param \"{key}\")))"
        );
    }
}

/// What Seatbelt enforces of `spec`, wall by wall, in the terms of the Linux report: the walls
/// a mount, pid or network namespace gives on Linux and a profile cannot (`missing`, so that
/// `--require-full` refuses), and those it enforces another way (`substitutes`).
pub fn enforcement(spec: &SandboxSpec) -> Enforcement {
    let mut missing = vec![
        "private /tmp: Seatbelt has no mount namespace, so the host's /tmp and temporary \
         directories stay readable (other sandboxes' TMPDIRs and the hidden paths excepted)"
            .to_owned(),
        "pid namespace: other processes of the host are listed (ps, kern.proc); their \
         arguments and environment are not readable and they cannot be signalled"
            .to_owned(),
    ];
    if spec.macos.loopback_listen {
        missing.push(
            "private loopback: servers the command starts listen on the host's loopback, where \
             host processes and browser pages can reach them ([macos] loopback_listen)"
                .to_owned(),
        );
    }
    if !spec.caches.is_empty() {
        missing.push(
            "copy-on-write package caches: Seatbelt has no overlay; the caches are read-only \
             inside"
                .to_owned(),
        );
    }
    let mut substitutes = vec![
        "processes outliving the command: every process still under this launch's profile is \
         killed when it ends (no pid namespace)"
            .to_owned(),
        "network namespace: the profile allows connections only to the proxy's loopback port"
            .to_owned(),
    ];
    if !spec.macos.loopback_listen {
        substitutes.push(
            "private loopback: listening is refused ([macos] loopback_listen = true allows it, \
             on the host's loopback)"
                .to_owned(),
        );
    }
    if spec.top_level.is_some() && !spec.writable.is_empty() {
        substitutes.push(
            "top-level rule: a new protected entry cannot be made (the profile refuses it; \
             Linux moves it away)"
                .to_owned(),
        );
    }
    Enforcement { landlock_abi: 0, missing, substitutes }
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
    "; the command's own descriptors by name (`> /dev/stdout`, `tee /dev/fd/3`): a reopen of\n",
    "; what it holds already\n",
    "(allow file-write-data (literal \"/dev/stdout\") (literal \"/dev/stderr\") ",
    "(regex #\"^/dev/fd/[0-9]+$\"))\n",
    "; DTrace USDT probes (node, python, ruby register theirs at start)\n",
    "(allow file-read* file-write-data file-ioctl (literal \"/dev/dtracehelper\"))\n",
    "\n; POSIX shared memory: libomp's registration and Python's shared_memory, not the\n",
    "; host's segments (cfprefsd's and other apps')\n",
    "(allow ipc-posix-shm-read-data ipc-posix-shm-write-create ipc-posix-shm-write-unlink\n",
    "  (ipc-posix-name-regex #\"^/__KMP_REGISTERED_LIB_[0-9]+$\"))\n",
    "(allow ipc-posix-shm-read-data ipc-posix-shm-read-metadata ipc-posix-shm-write-create\n",
    "  ipc-posix-shm-write-data ipc-posix-shm-write-unlink (ipc-posix-name-prefix \"/psm_\"))\n",
    "\n; pseudo-terminals (which terminals: see the end of the profile)\n",
    "(allow pseudo-tty)\n",
    "(allow file-read* file-write* file-ioctl (literal \"/dev/ptmx\"))\n",
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
/// (after the caller's flags and the proxy's, so it is not overridden), in every tier: without
/// network a JVM still listens and connects on loopback (a test server), dual-stack otherwise.
pub fn environment(
    env: &[(std::ffi::OsString, std::ffi::OsString)],
    _net: &NetSetup,
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let mut env = env.to_vec();
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

/// The sandbox's own toolchain caches and tools, in place of those the host trusts (which the
/// profile keeps read-only): `DEVELOPER_DIR` and its real `usr/bin` (and Xcode's default
/// toolchain) first on `PATH`, so `git`, `clang`, `make`, `python3` are not the `/usr/bin` shims
/// that go through `xcrun` and its cache; clang's module cache, Go's build cache and Yarn's
/// cache under the private temporary directory `tmp`. The caller's `DEVELOPER_DIR` wins over
/// the host's active one.
pub fn toolchain_env(env: &mut Vec<(OsString, OsString)>, host: &HostFacts, tmp: &Path) {
    let set = |env: &mut Vec<(OsString, OsString)>, k: &str, v: OsString| {
        env.retain(|(n, _)| n != k);
        env.push((k.into(), v));
    };
    let given = env.iter().rev().find(|(k, _)| k == "DEVELOPER_DIR").map(|(_, v)| PathBuf::from(v));
    if let Some(dev) = given.or_else(|| host.developer_dir.clone()) {
        let mut first = vec![dev.join("usr/bin")];
        if dev.ends_with("Contents/Developer") {
            first.push(dev.join("Toolchains/XcodeDefault.xctoolchain/usr/bin"));
        }
        let old = env.iter().rev().find(|(k, _)| k == "PATH").map(|(_, v)| v.clone());
        let rest: Vec<PathBuf> = old
            .as_deref()
            .map(|p| std::env::split_paths(p).filter(|d| !first.contains(d)).collect())
            .unwrap_or_else(|| {
                ["/usr/bin", "/bin", "/usr/sbin", "/sbin"].map(PathBuf::from).to_vec()
            });
        if let Ok(path) = std::env::join_paths(first.iter().chain(&rest)) {
            set(env, "PATH", path);
        }
        set(env, "DEVELOPER_DIR", dev.into_os_string());
    }
    for (k, dir) in [
        ("CLANG_MODULE_CACHE_PATH", "clang-module-cache"),
        ("GOCACHE", "go-build"),
        ("YARN_CACHE_FOLDER", "yarn-cache"),
    ] {
        set(env, k, tmp.join(dir).into_os_string());
    }
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
/// `SANDGATE_TIER` of the sandgate sandbox around it (`None`: another program's sandbox);
/// `flags` names the options given that change the walls (`--allow-write`, and the narrowing
/// `--net`, `--allow`, `--deny`). In place only with none: extra writable paths are never
/// granted, and a narrowing flag would be approved (a hook lets narrowing through) and then
/// silently dropped, since no second profile can apply it.
pub fn nested(outer_tier: Option<&str>, tier: &str, flags: &[&str]) -> Nested {
    let cannot = "macOS cannot apply a second Seatbelt profile inside a sandbox (sandbox-exec \
                  fails with `sandbox_apply: Operation not permitted`)";
    let with = if flags.is_empty() { String::new() } else { format!(" with {}", flags.join(", ")) };
    match outer_tier {
        Some(outer) if outer == tier && flags.is_empty() => Nested::RunInPlace {
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
                with,
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
