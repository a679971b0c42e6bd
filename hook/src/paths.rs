//! File-tool paths: the same answer the kernel gives a sandboxed shell, checked by path.
//!
//! A file tool touches one known path, so it is checked by path against the tier's policy (the
//! launcher's own [`Policy`]); a shell command is confined by the kernel instead. The check is
//! conservative where the launcher's walls are finer than a path list: when unsure, refuse (the
//! agent's normal prompt appears; nothing is denied).

use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};

use sandgate_config::{HOME_AUTORUN, Policy, SHELL_RC, SYSTEM_SECRETS, data_entries, wildcard};

use crate::fs::Filesystem;

/// Paths no file tool may read in any tier beyond the system's secret files
/// ([`SYSTEM_SECRETS`], the list the sandbox hides): other processes' memory and environment
/// (the agent's own API keys), devices, and the SSH configuration.
const SYSTEM_HIDDEN: &[&str] = &["/proc", "/sys", "/dev", "/etc/ssh"];

/// The system's secret files as patterns: a parent directory and a last name that may hold `*`.
/// Matched whether or not the caller can read them today (the sandbox hides only what is
/// readable; a file tool must not depend on today's permissions).
fn system_secret_patterns() -> Vec<(PathBuf, String)> {
    data_entries(SYSTEM_SECRETS)
        .chain(SYSTEM_HIDDEN.iter().copied())
        .filter_map(|e| {
            let p = Path::new(e);
            Some((p.parent()?.to_path_buf(), p.file_name()?.to_string_lossy().into_owned()))
        })
        .collect()
}

/// The secret pattern `p` lies at or below, if any (the path itself and each ancestor are
/// matched against each pattern, parent directory as written and resolved).
fn secret_match(fs: &dyn Filesystem, patterns: &[(PathBuf, String)], p: &Path) -> Option<PathBuf> {
    for (parent, name) in patterns {
        for dir in variants(fs, parent) {
            let Ok(rel) = p.strip_prefix(&dir) else { continue };
            if let Some(Component::Normal(first)) = rel.components().next()
                && wildcard(name.as_bytes(), first.as_encoded_bytes())
            {
                return Some(dir.join(first));
            }
        }
    }
    None
}

/// Whether a search of `p` reads a secret file (a pattern's directory lies at or below `p`).
fn secret_below(fs: &dyn Filesystem, patterns: &[(PathBuf, String)], p: &Path) -> Option<PathBuf> {
    patterns.iter().find_map(|(parent, name)| {
        variants(fs, parent).into_iter().find(|d| d.starts_with(p)).map(|d| d.join(name))
    })
}

/// What a file tool does with a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Reads one file (`Read`).
    Read,
    /// Reads everything below a directory (`Glob`, `Grep`).
    Search,
    /// Creates or changes a file (`Write`, `Edit`, `MultiEdit`, `NotebookEdit`).
    Write,
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Access::Read => "reading",
            Access::Search => "searching",
            Access::Write => "writing",
        })
    }
}

/// The walls of one tier as paths: derived from the launcher's [`Policy`] plus sandgate's own
/// files, so the hook follows whatever the policy says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Walls {
    /// The tier's name.
    pub tier: String,
    /// Where writing is allowed (the policy's writable paths).
    pub writable: Vec<PathBuf>,
    /// What is never readable (the policy's hidden paths, sandgate's store and runtime dirs).
    pub hidden: Vec<PathBuf>,
    /// What is readable but never writable (sandgate's configuration).
    pub read_only: Vec<PathBuf>,
    /// Names below each writable path that stay read-only (the policy's protected names).
    pub protected: Vec<String>,
    /// The home directories (`$HOME` and the passwd entry's): their dot-entries are treated as
    /// hidden (credentials live there).
    pub homes: Vec<PathBuf>,
    /// Names (`*` patterns, any case) read-only at the top of each writable path whatever their
    /// first character: the sandbox's top-level rule (autorun names and the configured
    /// top-level `protected` names).
    pub top_protected: Vec<String>,
}

impl Walls {
    /// The walls of `policy`, plus sandgate's own places: `hidden` (the store, the daemon's
    /// runtime directory) and `read_only` (the configuration directory).
    pub fn from_policy(
        policy: &Policy,
        homes: Vec<PathBuf>,
        hidden: Vec<PathBuf>,
        read_only: Vec<PathBuf>,
    ) -> Walls {
        Walls {
            tier: policy.tier.clone(),
            writable: policy.fs.writable.iter().map(|w| w.path.clone()).collect(),
            hidden: policy.fs.hidden.iter().map(|h| h.path.clone()).chain(hidden).collect(),
            read_only,
            protected: policy.fs.protected.clone(),
            homes,
            top_protected: sandgate_config::top_autorun()
                .iter()
                .map(|s| s.to_string())
                .chain(policy.fs.protected.iter().filter(|p| !p.contains('/')).cloned())
                .collect(),
        }
    }
}

/// Why a path was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RefusalKind {
    /// The path is empty, holds NUL, starts with `~`, or the directory is not absolute.
    Malformed(String),
    /// The path could not be resolved safely (a dangling link, `..` below a missing directory,
    /// a permission error).
    Unresolvable(String),
    /// At or below a hidden path (credentials, sandgate's store).
    Hidden(PathBuf),
    /// A dot-entry of the home directory (where credentials live).
    HomeDotEntry(PathBuf),
    /// A search whose directory holds a hidden path.
    HiddenBelow(PathBuf),
    /// Outside every writable path of the tier.
    OutsideWritable,
    /// Inside a writable path, but a name that stays read-only.
    Protected(String),
    /// A file with more than one hard link (writing it changes another path too).
    HardLinked,
}

/// A refused path, with what an agent needs to act on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathRefusal {
    /// The path as the tool gave it.
    pub path: String,
    /// What it resolved to, when it did.
    pub resolved: Option<PathBuf>,
    /// What the tool would do.
    pub access: Access,
    /// Why not.
    pub kind: RefusalKind,
    /// The tier asked about.
    pub tier: String,
    /// The tier's writable paths.
    pub writable: Vec<PathBuf>,
}

impl fmt::Display for PathRefusal {
    /// A message written for a model: what was refused, why, what is allowed, how to ask.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = match &self.resolved {
            Some(r) if r.as_os_str() != self.path.as_str() => {
                format!("{:?} (resolved to {})", self.path, r.display())
            }
            _ => format!("{:?}", self.path),
        };
        write!(f, "sandgate refused {} {shown} in tier `{}`: ", self.access, self.tier)?;
        match &self.kind {
            RefusalKind::Malformed(why) | RefusalKind::Unresolvable(why) => f.write_str(why)?,
            RefusalKind::Hidden(p) => write!(
                f,
                "{} is hidden in every tier (credentials, other processes, or sandgate's own state)",
                p.display()
            )?,
            RefusalKind::HomeDotEntry(p) => write!(
                f,
                "{} is a dot-entry of the home directory, where credentials live",
                p.display()
            )?,
            RefusalKind::HiddenBelow(p) => write!(
                f,
                "the directory contains {}, which is hidden; search a narrower directory",
                p.display()
            )?,
            RefusalKind::OutsideWritable => f.write_str("the path is outside the writable area")?,
            RefusalKind::Protected(name) => write!(
                f,
                "{name} stays read-only even in a writable directory, because writing it makes code run later outside the sandbox"
            )?,
            RefusalKind::HardLinked => f.write_str(
                "the file has other hard links, so writing it would change another path too",
            )?,
        }
        let writable = if self.writable.is_empty() {
            "nothing (this tier is read-only; its /tmp is private)".to_owned()
        } else {
            self.writable.iter().map(|w| w.display().to_string()).collect::<Vec<_>>().join(", ")
        };
        write!(
            f,
            ". Readable: everything except credentials (home dot-entries, sandgate's state, \
             /proc, /sys, /dev). Writable: {writable}. This is not an error in your work: ask \
             the person to approve this one action, or to widen the tier outside the sandbox \
             (`sandgate config add-path PATH`)."
        )
    }
}

impl std::error::Error for PathRefusal {}

/// Resolves `raw` against `cwd` as the kernel would for a file tool: returns the lexical path
/// (`.` and `..` removed as text) and the real one (symlinks followed; for a path that does not
/// exist yet, the nearest existing ancestor canonicalised and the missing rest appended).
pub fn resolve_path(
    fs: &dyn Filesystem,
    cwd: &Path,
    raw: &str,
) -> Result<(PathBuf, PathBuf), RefusalKind> {
    if raw.is_empty() || raw.contains('\0') {
        return Err(RefusalKind::Malformed("the path is empty or holds NUL".into()));
    }
    if raw.starts_with('~') {
        return Err(RefusalKind::Malformed(
            "file tools do not expand `~`; give an absolute path".into(),
        ));
    }
    if !cwd.is_absolute() {
        return Err(RefusalKind::Malformed("the working directory is not absolute".into()));
    }
    let abs = cwd.join(raw);
    let lexical = normalise(&abs);
    let real = match fs.canonicalize(&abs) {
        Ok(p) => p,
        Err(e) if e.kind() == io::ErrorKind::NotFound => missing_tail(fs, &abs)?,
        Err(e) => return Err(RefusalKind::Unresolvable(format!("cannot resolve the path: {e}"))),
    };
    Ok((lexical, real))
}

/// The real path of `abs` when it does not exist: the nearest existing ancestor, canonical, and
/// the missing components (plain names only, and the first not a dangling link).
fn missing_tail(fs: &dyn Filesystem, abs: &Path) -> Result<PathBuf, RefusalKind> {
    let parts: Vec<Component<'_>> = abs.components().collect();
    for i in (1..parts.len()).rev() {
        let prefix: PathBuf = parts[..i].iter().collect();
        match fs.canonicalize(&prefix) {
            Ok(base) => {
                let tail = &parts[i..];
                if !tail.iter().all(|c| matches!(c, Component::Normal(_))) {
                    return Err(RefusalKind::Unresolvable(
                        "`.` or `..` below a directory that does not exist".into(),
                    ));
                }
                let first = base.join(tail[0]);
                match fs.symlink_metadata(&first) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    _ => {
                        return Err(RefusalKind::Unresolvable(format!(
                            "{} is a link to a place that does not exist",
                            first.display()
                        )));
                    }
                }
                let mut real = base;
                real.extend(tail);
                return Ok(real);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(RefusalKind::Unresolvable(format!("cannot resolve the path: {e}")));
            }
        }
    }
    Err(RefusalKind::Unresolvable("no part of the path exists".into()))
}

/// `.` and `..` removed as text (`..` at the root stays at the root).
pub(crate) fn normalise(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Checks `raw` (as a file tool gave it, relative to `cwd`) for `access` in the tier of `walls`.
/// Returns the real path when allowed.
pub fn check_path(
    walls: &Walls,
    fs: &dyn Filesystem,
    cwd: &Path,
    raw: &str,
    access: Access,
) -> Result<PathBuf, Box<PathRefusal>> {
    let refuse = |resolved: Option<PathBuf>, kind| {
        Box::new(PathRefusal {
            path: raw.to_owned(),
            resolved,
            access,
            kind,
            tier: walls.tier.clone(),
            writable: walls.writable.clone(),
        })
    };
    let (lexical, real) = resolve_path(fs, cwd, raw).map_err(|k| refuse(None, k))?;
    check_resolved(walls, fs, &lexical, &real, access)
        .map_err(|k| refuse(Some(real.clone()), k))?;
    Ok(real)
}

/// A rule path as written and as the kernel resolves it (both are checked: a hidden directory
/// may be a link, and a path may reach it through another link).
fn variants(fs: &dyn Filesystem, p: &Path) -> Vec<PathBuf> {
    let mut v = vec![normalise(p)];
    if let Ok(c) = fs.canonicalize(p)
        && !v.contains(&c)
    {
        v.push(c);
    }
    v
}

fn check_resolved(
    walls: &Walls,
    fs: &dyn Filesystem,
    lexical: &Path,
    real: &Path,
    access: Access,
) -> Result<(), RefusalKind> {
    let candidates = [lexical, real];
    let hidden: Vec<PathBuf> =
        walls.hidden.iter().map(PathBuf::as_path).flat_map(|h| variants(fs, h)).collect();
    let secrets = system_secret_patterns();
    let homes: Vec<PathBuf> = walls.homes.iter().flat_map(|h| variants(fs, h)).collect();
    for p in candidates {
        if let Some(h) = hidden.iter().find(|h| p.starts_with(h)) {
            return Err(RefusalKind::Hidden(h.clone()));
        }
        if let Some(h) = secret_match(fs, &secrets, p) {
            return Err(RefusalKind::Hidden(h));
        }
        for home in &homes {
            if let Ok(rel) = p.strip_prefix(home)
                && let Some(Component::Normal(first)) = rel.components().next()
                && first.as_encoded_bytes().starts_with(b".")
            {
                return Err(RefusalKind::HomeDotEntry(home.join(first)));
            }
        }
    }
    match access {
        Access::Read => Ok(()),
        Access::Search => {
            // Everything below the directory is read: nothing hidden may lie there.
            for p in candidates {
                if let Some(h) = hidden.iter().chain(&homes).find(|h| h.starts_with(p)) {
                    return Err(RefusalKind::HiddenBelow(h.clone()));
                }
                if let Some(h) = secret_below(fs, &secrets, p) {
                    return Err(RefusalKind::HiddenBelow(h));
                }
            }
            Ok(())
        }
        Access::Write => check_write(walls, fs, &candidates, real, &homes),
    }
}

fn check_write(
    walls: &Walls,
    fs: &dyn Filesystem,
    candidates: &[&Path; 2],
    real: &Path,
    homes: &[PathBuf],
) -> Result<(), RefusalKind> {
    let writable: Vec<PathBuf> = walls.writable.iter().flat_map(|w| variants(fs, w)).collect();
    if !writable.iter().any(|w| real.starts_with(w) && real != w) {
        return Err(RefusalKind::OutsideWritable);
    }
    let read_only: Vec<PathBuf> = walls.read_only.iter().flat_map(|r| variants(fs, r)).collect();
    for p in candidates {
        if let Some(r) = read_only.iter().find(|r| p.starts_with(r)) {
            return Err(RefusalKind::Protected(r.display().to_string()));
        }
        for w in writable.iter().filter(|w| p.starts_with(w)) {
            let rel = p.strip_prefix(w).unwrap_or(p);
            // Any dot-entry at any depth (`.git`, `.envrc` that direnv loads on `cd`, editor and
            // agent settings), a toolchain file at the top, and the configured names.
            for c in rel.components() {
                if c.as_os_str().as_encoded_bytes().starts_with(b".") {
                    return Err(RefusalKind::Protected(c.as_os_str().to_string_lossy().into()));
                }
            }
            // Names compare without case: on a case-insensitive filesystem (macOS)
            // `Rust-Toolchain` is `rust-toolchain`.
            let lower = PathBuf::from(rel.to_string_lossy().to_lowercase());
            // The sandbox's top-level rule: names matched as patterns, in any case.
            if let Some(Component::Normal(top)) = lower.components().next()
                && let Some(name) = walls
                    .top_protected
                    .iter()
                    .find(|n| wildcard(n.to_lowercase().as_bytes(), top.as_encoded_bytes()))
            {
                return Err(RefusalKind::Protected(name.clone()));
            }
            if lower.as_os_str().as_encoded_bytes().starts_with(b"rust-toolchain") {
                return Err(RefusalKind::Protected("rust-toolchain".into()));
            }
            if let Some(name) = walls.protected.iter().find(|n| lower.starts_with(n.to_lowercase()))
            {
                return Err(RefusalKind::Protected(name.clone()));
            }
            for home in homes.iter().filter(|h| h.starts_with(w)) {
                if let Some(name) =
                    SHELL_RC.iter().chain(HOME_AUTORUN).find(|n| p.starts_with(home.join(n)))
                {
                    return Err(RefusalKind::Protected((*name).to_owned()));
                }
            }
        }
    }
    match fs.symlink_metadata(real) {
        Ok(info) if !info.is_dir && info.nlink > 1 => Err(RefusalKind::HardLinked),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(RefusalKind::Unresolvable(format!("cannot inspect the path: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::RealFs;

    #[test]
    fn links_dotdot_and_hard_links_are_resolved_before_the_check() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let (home, proj) = (root.join("home"), root.join("proj"));
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(proj.join("src")).unwrap();
        std::fs::write(home.join(".ssh/id"), "k").unwrap();
        std::fs::write(home.join("notes"), "n").unwrap();
        std::os::unix::fs::symlink(home.join(".ssh"), proj.join("s")).unwrap();
        std::os::unix::fs::symlink(home.join("new"), proj.join("dangling")).unwrap();
        std::fs::hard_link(home.join("notes"), proj.join("hard")).unwrap();
        let walls = Walls {
            tier: "build".into(),
            writable: vec![proj.clone()],
            hidden: vec![home.join(".ssh")],
            homes: vec![home.clone()],
            protected: vec![".envrc".into()],
            read_only: vec![],
            top_protected: vec!["*.code-workspace".into()],
        };
        let fs = RealFs::new(None, Path::new("/nonexistent"));
        let check = |p: &str, a| check_path(&walls, &fs, &proj, p, a).map_err(|r| r.kind);
        assert!(check("src/a.rs", Access::Write).is_ok());
        assert!(check("src/x/y/z.rs", Access::Write).is_ok());
        assert!(check("src/../src/b.rs", Access::Write).is_ok());
        assert!(matches!(check("s/id", Access::Read), Err(RefusalKind::Hidden(_))));
        assert!(matches!(check("../home/.ssh/id", Access::Read), Err(RefusalKind::Hidden(_))));
        assert!(check("../home/notes", Access::Read).is_ok());
        assert!(matches!(check("../home/notes", Access::Write), Err(RefusalKind::OutsideWritable)));
        assert!(matches!(check("dangling", Access::Write), Err(RefusalKind::Unresolvable(_))));
        assert!(matches!(check("new/../../x", Access::Write), Err(RefusalKind::Unresolvable(_))));
        assert!(matches!(check("hard", Access::Write), Err(RefusalKind::HardLinked)));
        assert!(matches!(check(".envrc", Access::Write), Err(RefusalKind::Protected(_))));
        assert!(matches!(check("A.Code-Workspace", Access::Write), Err(RefusalKind::Protected(_))));
        assert!(check("src/a.code-workspace", Access::Write).is_ok());
        let sys = |p: &str, a| check_path(&walls, &fs, Path::new("/"), p, a).map_err(|r| r.kind);
        assert!(matches!(
            sys("/etc/ssh/ssh_host_rsa_key", Access::Read),
            Err(RefusalKind::Hidden(_))
        ));
        assert!(matches!(sys("/etc/krb5.keytab", Access::Read), Err(RefusalKind::Hidden(_))));
        assert!(matches!(
            sys("/etc/wireguard/wg0.conf", Access::Read),
            Err(RefusalKind::Hidden(_))
        ));
        assert!(matches!(sys("/etc", Access::Search), Err(RefusalKind::HiddenBelow(_))));
        assert!(sys("/etc/hostname", Access::Read).is_ok());
        assert!(matches!(check(".", Access::Write), Err(RefusalKind::OutsideWritable)));
        assert!(matches!(check("..", Access::Search), Err(RefusalKind::HiddenBelow(_))));
        assert!(check("src", Access::Search).is_ok());
        let msg = check_path(&walls, &fs, &proj, "s/id", Access::Read).unwrap_err().to_string();
        assert!(msg.contains("refused reading") && msg.contains("Writable:"), "{msg}");
    }
}
