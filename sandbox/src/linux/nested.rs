//! A launch from inside a sandgate sandbox: no new namespaces (the outer sandbox's seccomp
//! filter refuses them, by design), no init, no proxy; the inner tier's walls are stacked on the
//! outer's in the calling process, which then becomes the command.
//!
//! What it adds: a Landlock domain of its own (writes only where the inner tier allows, so an
//! inner writable path outside the outer's writable set stays unwritable: the outer's walls hold)
//! and, for a tier without network, a seccomp filter refusing every socket but `AF_UNIX`. What it
//! cannot add: hidden paths (covering them needs mounts) and read-only paths inside a writable one
//! (Landlock grants beneath a path, it cannot take a subpath back); those the outer did not
//! already cover are reported as not enforced.
//!
//! Detection does not trust the environment (`SANDGATE_SANDBOX` is forgeable): the process must
//! run under no_new_privs and a seccomp filter, on a real procfs, with pid 1 of its pid namespace
//! named [`INIT_NAME`], no network interface but loopback and the proxy's veth pair, and the
//! kernel must refuse it a new user namespace with `EPERM`. Whoever runs pid 1 of a pid namespace
//! can fake the name, and anyone can add no_new_privs and a filter: the last sign is the one that
//! counts, since a launch that can still build namespaces always builds them, so a faked outer
//! sandbox only gets the full walls (tested with exactly such a fake).

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{canonical, fence, filter, find_program, resolved_unix_sockets, sys};
use crate::spec::{Enforcement, NetSetup, SandboxSpec};
use crate::{SandboxError, SetupStep};

/// The name the sandbox's init gives itself (`/proc/1/comm` inside).
pub(super) const INIT_NAME: &CStr = c"sandgate-init";

/// The sandgate sandbox this process runs in, as found by [`inside_sandbox`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OuterSandbox {
    /// The outer tier's name, from `SANDGATE_TIER` (for messages only: the variable is not
    /// trusted for anything else).
    pub tier: Option<String>,
    /// Whether the outer sandbox has a network beyond loopback (its proxy's veth).
    pub network: bool,
}

/// Whether this process runs inside a sandgate sandbox (see the module docs for why this cannot
/// be faked from outside one). Costs one small `/proc` read when it does not.
///
/// Every sign must hold: no_new_privs and a seccomp filter on this process, `/proc` really
/// procfs, pid 1 named [`INIT_NAME`], no network interface a sandgate sandbox does not have, and
/// the kernel refusing a new user namespace with `EPERM` (as the sandbox's seccomp filter does).
/// A launch that could build its own namespaces always does.
pub fn inside_sandbox() -> Option<OuterSandbox> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    if !confined(&status) || !sys::is_procfs(Path::new("/proc")) {
        return None;
    }
    let comm = std::fs::read_to_string("/proc/1/comm").ok()?;
    if comm.trim_end_matches('\n').as_bytes() != INIT_NAME.to_bytes() {
        return None;
    }
    let network = sandbox_network(&std::fs::read_to_string("/proc/self/net/dev").ok()?)?;
    if !sys::user_namespace_refused() {
        return None;
    }
    let tier = std::env::var("SANDGATE_TIER").ok().filter(|t| !t.is_empty());
    Some(OuterSandbox { tier, network })
}

/// `/proc/self/status` shows no_new_privs and a seccomp filter (mode 2).
fn confined(status: &str) -> bool {
    let field = |name: &str| {
        status.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':').map(str::trim))
    };
    field("NoNewPrivs") == Some("1") && field("Seccomp") == Some("2")
}

/// The network of a sandgate sandbox, from `/proc/net/dev`: `Some(true)` with the proxy's veth
/// pair (`sg0`/`sg1`), `Some(false)` with loopback only, `None` with any other interface (not a
/// sandgate sandbox). The fallback tunnel devices some kernels add to every new network
/// namespace (`sit0`, `tunl0`, `gre0`, ...) carry nothing without configuration and are ignored.
fn sandbox_network(dev: &str) -> Option<bool> {
    const FALLBACK: &[&str] = &[
        "sit0", "tunl0", "ip6tnl0", "gre0", "gretap0", "erspan0", "ip6gre0", "ip_vti0", "ip6_vti0",
    ];
    let mut veth = false;
    for (name, _) in dev.lines().skip(2).filter_map(|l| l.split_once(':')) {
        match name.trim() {
            "lo" => {}
            "sg0" | "sg1" => veth = true,
            n if FALLBACK.contains(&n) => {}
            _ => return None,
        }
    }
    Some(veth)
}

/// A nested launch, resolved and assessed, not applied yet ([`Nested::exec`] applies it).
#[derive(Debug)]
pub struct Nested {
    /// What the nested walls enforce; `missing` holds what they cannot (the caller may add its
    /// own, e.g. proxy rules a nested sandbox cannot apply).
    pub enforcement: Enforcement,
    require_full: bool,
    writable: Vec<PathBuf>,
    sockets: Vec<PathBuf>,
    no_network: bool,
    deny_unix_sockets: bool,
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
}

/// Resolves `spec` for a launch inside the sandbox this process runs in. `spec.net` decides only
/// whether the network is cut ([`NetSetup::None`]); with a proxy the outer's network and proxy
/// stay as they are.
pub fn prepare(spec: &SandboxSpec) -> Result<Nested, SandboxError> {
    let cwd = canonical("cwd", &spec.cwd)?;
    let writable =
        spec.writable.iter().map(|w| canonical("writable", w)).collect::<Result<Vec<_>, _>>()?;
    let sockets = resolved_unix_sockets(spec);
    let abi = sys::landlock_abi();
    let mut gaps = fence::gaps(abi);
    if abi == 0 {
        gaps = vec![
            "Landlock is not available: a nested sandbox cannot narrow writes (the outer \
             sandbox's writable paths stay writable)"
                .to_owned(),
        ];
    }
    let fence::Assessment { mut enforcement, deny_unix_sockets } =
        fence::assess(abi, gaps, !sockets.is_empty());
    let mut always: Vec<PathBuf> = writable.clone();
    always.extend(["/tmp", "/dev/shm"].map(PathBuf::from));
    for h in spec.hidden.iter().filter(|h| h.is_absolute()) {
        if readable(h) {
            enforcement.missing.push(format!(
                "hidden path {}: readable (the outer sandbox shows it, and a nested one cannot \
                 hide paths)",
                h.display()
            ));
        } else if std::fs::symlink_metadata(h).is_err() && writable_here(h, &always) {
            enforcement.missing.push(format!(
                "hidden path {}: missing, and it could be created here (a nested sandbox cannot \
                 put a placeholder over it)",
                h.display()
            ));
        }
    }
    for r in spec.read_only.iter().filter(|r| r.is_absolute()) {
        if writable_here(r, &always) {
            enforcement.missing.push(format!(
                "protected path {}: writable (inside a writable path the outer sandbox did not \
                 protect, and a nested one cannot)",
                r.display()
            ));
        }
    }
    std::env::set_current_dir(&cwd).map_err(SandboxError::io("chdir"))?;

    let program = spec
        .command
        .first()
        .ok_or_else(|| SandboxError::CommandNotFound { command: "(empty)".into() })?;
    let path = find_program(program, &spec.env).ok_or_else(|| SandboxError::CommandNotFound {
        command: program.to_string_lossy().into_owned(),
    })?;
    let cs = |s: &OsStr| sys::cstr(s).map_err(SandboxError::io("command line"));
    let envp = sys::envp(&spec.env).map_err(SandboxError::io("environment"))?;
    Ok(Nested {
        enforcement,
        require_full: spec.require_full,
        writable: always,
        sockets,
        no_network: spec.net == NetSetup::None,
        deny_unix_sockets,
        program: cs(path.as_os_str())?,
        argv: spec.command.iter().map(|a| cs(a)).collect::<Result<_, _>>()?,
        envp,
    })
}

impl Nested {
    /// Refuses when a wall is missing and full enforcement was asked for; otherwise lets `warn`
    /// report what is missing, applies the walls and executes the command in this process.
    /// Returns only on failure ([`SandboxError::CommandNotFound`] when the program is gone).
    pub fn exec(self, warn: impl FnOnce(&Enforcement)) -> SandboxError {
        if let Err(e) = fence::require_full(&self.enforcement, self.require_full) {
            return e;
        }
        warn(&self.enforcement);
        if let Err(e) =
            fence::restrict(&fence::FenceSpec { writable: &self.writable, sockets: &self.sockets })
        {
            return e;
        }
        let sockets = filter::build_sockets(self.no_network, self.deny_unix_sockets)
            .map_err(io::Error::other)
            .and_then(|f| match f {
                Some(f) => seccompiler::apply_filter(&f).map_err(io::Error::other),
                None => Ok(()),
            });
        if let Err(e) = sockets {
            return SandboxError::Setup { step: SetupStep::Seccomp, source: e };
        }
        // As a command started from a shell: default SIGPIPE (the Rust runtime ignores it, and
        // an ignored signal stays ignored across exec), nothing blocked.
        sys::default_handler(libc::SIGPIPE);
        let _ = sys::SigSet::of(&[]).set_mask();
        sys::cloexec_from_3();
        let e = sys::execve(&self.program, &self.argv, &self.envp);
        if e.kind() == io::ErrorKind::NotFound {
            return SandboxError::CommandNotFound {
                command: self.program.to_string_lossy().into_owned(),
            };
        }
        SandboxError::Io { what: "exec", source: e }
    }
}

/// Whether `path` can be read here (a hidden path reads as refused or not at all).
fn readable(path: &Path) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return false };
    if meta.is_dir() {
        return std::fs::read_dir(path).is_ok();
    }
    // Non-blocking: a FIFO must not hang the launch.
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .is_ok()
}

/// Whether `path` (or, when missing, where it would be created) is writable in the nested
/// sandbox: beneath one of its `writable` paths, on a mount the outer left writable.
fn writable_here(path: &Path, writable: &[PathBuf]) -> bool {
    let mut existing = path;
    while std::fs::symlink_metadata(existing).is_err() {
        match existing.parent() {
            Some(p) => existing = p,
            None => return false,
        }
    }
    let Ok(real) = existing.canonicalize() else { return false };
    writable.iter().any(|w| real.starts_with(w))
        && sys::on_read_only_mount(&real).is_ok_and(|ro| !ro)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confinement_needs_both_no_new_privs_and_a_filter() {
        let status = |nnp: &str, seccomp: &str| {
            format!("Name:\tsh\nNoNewPrivs:\t{nnp}\nSeccomp:\t{seccomp}\nSeccomp_filters:\t3\n")
        };
        // (no_new_privs, seccomp mode, confined)
        for (nnp, seccomp, want) in
            [("1", "2", true), ("0", "2", false), ("1", "0", false), ("1", "1", false)]
        {
            assert_eq!(confined(&status(nnp, seccomp)), want, "{nnp} {seccomp}");
        }
        assert!(!confined("Name:\tsh\n"));
        assert!(!confined("NoNewPrivs:\t1\nSeccomp_filters:\t2\n"));
    }

    #[test]
    fn the_network_is_the_veth_pair_and_any_other_interface_is_not_a_sandbox() {
        let head = "Inter-|   Receive\n face |bytes    packets\n";
        let dev = |names: &[&str]| {
            let mut d = head.to_owned();
            for n in names {
                d.push_str(&format!("  {n}: 0 0 0 0\n"));
            }
            d
        };
        // (interfaces, what sandbox_network says)
        for (names, want) in [
            (&["lo"][..], Some(false)),
            (&[][..], Some(false)),
            (&["lo", "sg0", "sg1"][..], Some(true)),
            (&["lo", "sit0", "tunl0", "gre0"][..], Some(false)),
            (&["lo", "sg0", "sg1", "ip6tnl0"][..], Some(true)),
            (&["lo", "eth0"][..], None),
            (&["lo", "sg0", "sg1", "wlan0"][..], None),
            (&["lo", "sg00"][..], None),
        ] {
            assert_eq!(sandbox_network(&dev(names)), want, "{names:?}");
        }
    }
}
