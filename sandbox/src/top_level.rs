//! The rule for the top of each writable directory: which entries the sandboxed command may
//! create or change there. A pure predicate; the Linux launcher enforces it (see the `warden`
//! module there).
//!
//! Default deny: an entry whose name starts with a dot is protected unless it matches
//! [`TopLevel::writable`] (build output and caches), and so is any name matching
//! [`TopLevel::protected`] (toolchain selectors and tool configs without a dot, and the
//! configured `protected` names), which wins over the allowlist. Everything else (`src`,
//! `target`, `node_modules`, `sed -i` temporaries) is the command's to write.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// Prefix of the names the launcher gives entries it takes away when it cannot move them out
/// of the directory (another filesystem than the quarantine): never protected, so that moving
/// them is final.
pub const QUARANTINED_PREFIX: &str = ".sandgate-quarantined-";

/// What may change at the top of each writable directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopLevel {
    /// Dot-names that stay writable; a pattern may start or end with `*`.
    pub writable: Vec<String>,
    /// Names that are protected whatever their first character; patterns as above.
    pub protected: Vec<String>,
    /// Where new protected entries are moved while and after the command runs (one directory
    /// per sandbox is made below it). `None`: they are renamed in place to
    /// [`QUARANTINED_PREFIX`]`...`.
    pub quarantine: Option<PathBuf>,
    /// Protected paths at the top of a writable directory that get a read-only placeholder
    /// while missing, although the rule covers them: the few that run with no action of the
    /// user at all during the run's short window (a new terminal runs the shell's start-up
    /// files of a writable `$HOME`). Every other missing name needs none.
    pub placeholders: Vec<PathBuf>,
}

/// Whether `name` matches `pattern` (`*` only at its start or end).
fn matches(pattern: &str, name: &[u8]) -> bool {
    let p = pattern.as_bytes();
    match (p.first(), p.last()) {
        (Some(b'*'), _) if p.len() > 1 && p.ends_with(b"*") && p.len() > 2 => {
            let mid = &p[1..p.len() - 1];
            name.windows(mid.len()).any(|w| w == mid)
        }
        (Some(b'*'), _) => name.ends_with(&p[1..]),
        (_, Some(b'*')) => name.starts_with(&p[..p.len() - 1]),
        _ => name == p,
    }
}

impl TopLevel {
    /// Whether the entry `name` at the top of a writable directory is read-only (and may not be
    /// created by the command).
    pub fn protects(&self, name: &OsStr) -> bool {
        let n = name.as_bytes();
        if n == b"." || n == b".." || n.starts_with(QUARANTINED_PREFIX.as_bytes()) {
            return false;
        }
        // Protected names match in any case: on a case-insensitive filesystem (vfat, exfat, a
        // mount from macOS) rustup reads `RUST-TOOLCHAIN.TOML` as `rust-toolchain.toml`. The
        // allowlist matches exactly (a `.VENV` is merely protected).
        let lower = n.to_ascii_lowercase();
        if self.protected.iter().any(|p| matches(&p.to_ascii_lowercase(), &lower)) {
            return true;
        }
        n.starts_with(b".") && !self.writable.iter().any(|p| matches(p, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_entries_are_protected_unless_listed() {
        let rule = TopLevel {
            writable: vec![".venv".into(), ".tmp*".into(), ".coverage.*".into()],
            protected: vec![
                "rust-toolchain.toml".into(),
                "*.code-workspace".into(),
                ".tmpx".into(),
            ],
            quarantine: None,
            placeholders: Vec::new(),
        };
        let table = [
            (".cargo", true),
            (".envrc", true),
            (".zzz-random", true),
            (".venv", false),
            (".venv2", true),
            (".tmpA1b2", false),
            (".tmpx", true), // protected wins over the allowlist
            (".coverage.host.1", false),
            (".coverage", true),
            ("rust-toolchain.toml", true),
            ("rust-toolchain.toml.bak", false),
            ("a.code-workspace", true),
            ("RUST-TOOLCHAIN.TOML", true),
            ("Rust-Toolchain.toml", true),
            ("A.CODE-WORKSPACE", true),
            (".VENV", true),
            ("target", false),
            ("node_modules", false),
            ("sedAb12Cd", false),
            (".", false),
            ("..", false),
            (".sandgate-quarantined-x-1-.cargo", false),
        ];
        for (name, want) in table {
            assert_eq!(rule.protects(OsStr::new(name)), want, "{name}");
        }
    }

    #[test]
    fn patterns_match_at_either_end() {
        assert!(matches("*.x", b"a.x"));
        assert!(!matches("*.x", b"a.y"));
        assert!(matches(".a*", b".abc"));
        assert!(matches("*mid*", b"xmidy"));
        assert!(!matches("exact", b"exact2"));
    }
}
