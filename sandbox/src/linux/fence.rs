//! Landlock: read and execute everywhere, write only where the tier allows, abstract unix
//! sockets and signals scoped to the sandbox (ABI 6), pathname unix sockets only where allowed
//! (ABI 9). Applied with best effort; what the kernel lacks is reported by [`gaps`].

use std::io;
use std::path::PathBuf;

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};

use crate::spec::Enforcement;
use crate::{SandboxError, SetupStep};

/// The newest ABI whose rights this launcher asks for.
const TARGET: ABI = ABI::V9;

/// Device files every sandbox may write to.
const WRITABLE_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
];

/// What the restriction is built from.
#[derive(Debug)]
pub struct FenceSpec<'a> {
    /// Directories and files writable beneath (private /tmp included by the caller).
    pub writable: &'a [PathBuf],
    /// Pathname unix sockets that may be connected to.
    pub sockets: &'a [PathBuf],
}

/// Restricts the calling thread (and everything it starts). Returns Landlock's own verdict.
pub fn restrict(spec: &FenceSpec<'_>) -> Result<RulesetStatus, SandboxError> {
    let landlock = |e: landlock::RulesetError| SandboxError::Setup {
        step: SetupStep::Landlock,
        source: io::Error::other(e),
    };
    let all = AccessFs::from_all(TARGET);
    let read = AccessFs::from_read(TARGET);
    let file_rw: BitFlags<AccessFs> =
        AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(landlock)?
        .scope(Scope::from_all(TARGET))
        .map_err(landlock)?
        .create()
        .map_err(landlock)?;
    let mut rules: Vec<(PathBuf, BitFlags<AccessFs>)> = vec![(PathBuf::from("/"), read)];
    for w in spec.writable {
        rules.push((w.clone(), all));
    }
    for d in WRITABLE_DEVICES {
        rules.push((PathBuf::from(d), file_rw));
    }
    rules.push((PathBuf::from("/dev/pts"), file_rw | AccessFs::ReadDir));
    for s in spec.sockets {
        rules.push((s.clone(), AccessFs::ReadFile | AccessFs::ResolveUnix));
    }
    for (path, access) in rules {
        let Ok(fd) = PathFd::new(&path) else { continue };
        let access = if path.is_dir() { access } else { access & AccessFs::from_file(TARGET) };
        ruleset = ruleset.add_rule(PathBeneath::new(fd, access)).map_err(|e| {
            SandboxError::Setup { step: SetupStep::LandlockRule(path), source: io::Error::other(e) }
        })?;
    }
    let status = ruleset.restrict_self().map_err(landlock)?;
    Ok(status.ruleset)
}

/// What Landlock ABI `abi` cannot enforce of what the launcher asks, each with the consequence.
pub fn gaps(abi: u32) -> Vec<String> {
    let mut gaps = Vec::new();
    if abi == 0 {
        gaps.push(
            "Landlock is not available: writes are confined by read-only mounts only".to_owned(),
        );
        return gaps;
    }
    if abi < 2 {
        gaps.push("Landlock ABI < 2: renames and links across directories are refused".to_owned());
    }
    if abi < 3 {
        gaps.push("Landlock ABI < 3: truncation is not restricted by Landlock".to_owned());
    }
    if abi < 5 {
        gaps.push("Landlock ABI < 5: device ioctls are not restricted".to_owned());
    }
    if abi < 6 {
        gaps.push(
            "Landlock ABI < 6: abstract unix sockets and signals outside the sandbox are not scoped"
                .to_owned(),
        );
    }
    gaps
}

/// Whether this ABI checks pathname unix socket connects (`LANDLOCK_ACCESS_FS_RESOLVE_UNIX`).
pub fn checks_unix_socket_paths(abi: u32) -> bool {
    abi >= 9
}

/// How pathname unix sockets are walled in, and what was enforced overall ([`assess`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assessment {
    /// What is enforced, by substitute, or missing.
    pub enforcement: Enforcement,
    /// Seccomp must refuse every new unix socket (Landlock cannot check paths and none is allowed).
    pub deny_unix_sockets: bool,
}

/// What a sandbox gets on a kernel with Landlock `abi` whose Landlock lacks `gaps` (see [`gaps`]),
/// when the configuration allows some pathname unix sockets (`sockets_allowed`) or none.
///
/// Below ABI 9 Landlock cannot check socket paths: with no socket allowed seccomp stands in
/// (refusing every new unix socket, a substitute, not a gap); with some allowed nothing can keep
/// the command from other reachable sockets, and that is a gap.
pub fn assess(abi: u32, gaps: Vec<String>, sockets_allowed: bool) -> Assessment {
    let mut enforcement = Enforcement { landlock_abi: abi, missing: gaps, substitutes: Vec::new() };
    let unix_checked = checks_unix_socket_paths(abi);
    let deny_unix_sockets = !unix_checked && !sockets_allowed;
    if !unix_checked {
        if deny_unix_sockets {
            enforcement.substitutes.push(
                "pathname unix socket connects: the kernel cannot check paths (Landlock ABI < 9), \
                 so seccomp refuses every new unix socket"
                    .to_owned(),
            );
        } else {
            enforcement.missing.push(
                "pathname unix socket connects: the kernel cannot check paths (Landlock ABI < 9) \
                 and unix sockets are allowed, so any reachable socket can be connected to"
                    .to_owned(),
            );
        }
    }
    Assessment { enforcement, deny_unix_sockets }
}

/// `--require-full`: refuses to start (with every missing wall named, `; `-separated) when a wall
/// is missing and the caller asked for all of them; otherwise the launcher warns.
pub fn require_full(enforcement: &Enforcement, require_full: bool) -> Result<(), SandboxError> {
    if require_full && !enforcement.is_full() {
        return Err(SandboxError::NotFullyEnforced { missing: enforcement.missing.join("; ") });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_follow_the_abi() {
        assert_eq!(gaps(0).len(), 1);
        assert!(gaps(0)[0].contains("not available"));
        assert!(gaps(5).iter().any(|g| g.contains("abstract unix sockets")));
        for abi in [6, 7, 9] {
            assert!(gaps(abi).is_empty(), "ABI {abi}");
        }
    }

    #[test]
    fn require_full_refuses_exactly_when_a_wall_is_missing() {
        let injected = || vec!["Landlock ABI < 3: truncation is not restricted".to_owned()];
        // (abi, gaps, sockets allowed, require_full, refused, seccomp denies unix sockets)
        let table = [
            (7, vec![], false, true, false, true),
            (7, vec![], true, true, true, false),
            (7, vec![], true, false, false, false),
            (9, vec![], true, true, false, false),
            (9, vec![], false, true, false, false),
            (2, injected(), false, true, true, true),
            (2, injected(), false, false, false, true),
        ];
        for (abi, gaps, sockets, require, refused, deny_unix) in table {
            let row = format!("abi {abi} gaps {gaps:?} sockets {sockets} require {require}");
            let a = assess(abi, gaps.clone(), sockets);
            assert_eq!(a.deny_unix_sockets, deny_unix, "{row}");
            assert_eq!(a.enforcement.landlock_abi, abi);
            let verdict = require_full(&a.enforcement, require);
            assert_eq!(verdict.is_err(), refused, "{row}: {verdict:?}");
            if let Err(e) = verdict {
                let message = e.to_string();
                for g in &a.enforcement.missing {
                    assert!(message.contains(g.as_str()), "{row}: {message}");
                }
            }
            // Seccomp standing in is reported, never a gap.
            if deny_unix {
                assert!(a.enforcement.substitutes[0].contains("seccomp"), "{row}");
            }
        }
    }
}
