//! Landlock: read and execute everywhere, write only where the tier allows, abstract unix
//! sockets and signals scoped to the sandbox (ABI 6), pathname unix sockets only where allowed
//! (ABI 9). Applied with best effort; what the kernel lacks is reported by [`gaps`].

use std::path::PathBuf;

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};

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
pub fn restrict(spec: &FenceSpec<'_>) -> Result<RulesetStatus, String> {
    let all = AccessFs::from_all(TARGET);
    let read = AccessFs::from_read(TARGET);
    let file_rw: BitFlags<AccessFs> =
        AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(|e| e.to_string())?
        .scope(Scope::from_all(TARGET))
        .map_err(|e| e.to_string())?
        .create()
        .map_err(|e| e.to_string())?;
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
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let status = ruleset.restrict_self().map_err(|e| e.to_string())?;
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
