//! The rule for each writable directory: which entries the sandboxed command may create or
//! change at its top and in every directory below it. Pure predicates; the Linux launcher
//! enforces them (see the `warden` module there), and the scan of the writable trees
//! ([`crate::tree`]) finds what they protect.
//!
//! At the top, default deny: an entry whose name starts with a dot is protected unless it
//! matches [`TopLevel::writable`] (build output and caches), and so is any name matching
//! [`TopLevel::protected`] (toolchain selectors and tool configs without a dot, and the
//! configured `protected` names), which wins over the allowlist. Everything else (`src`,
//! `target`, `node_modules`, `sed -i` temporaries) is the command's to write.
//!
//! Below the top, by name: a default deny of every dot-entry there would take build output
//! away (`.bin` in `node_modules`, `.fingerprint` in `target`, `.deps` of automake), so what is
//! protected is what host tools execute or obey wherever they find it ([`TopLevel::below`]: the
//! host tools' data file of `sandgate-config`), unless the allowlist names it too. Directories
//! named by [`TopLevel::skip`] or the allowlist are build output: the scan does not enter them.
//! Names in [`TopLevel::review`] stay writable and are named at the end of the launch when they
//! changed.

use std::collections::HashSet;
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
    /// Names protected in every directory below the top as well (and at the top), in any case,
    /// unless `writable` names them; `*` may also stand once inside a pattern.
    pub below: Vec<String>,
    /// Names of build code that stay writable, named at the end of a launch that changed them;
    /// patterns as `below`.
    pub review: Vec<String>,
    /// Directory names below the top that are build output, not entered by the scan (nor are
    /// those `writable` names); patterns as `below`.
    pub skip: Vec<String>,
    /// Where new protected entries are moved while and after the command runs (one directory
    /// per sandbox is made below it). `None`: they are renamed in place to
    /// [`QUARANTINED_PREFIX`]`...`.
    pub quarantine: Option<PathBuf>,
    /// Protected paths at the top of a writable directory that get a read-only placeholder
    /// while missing, although the rule covers them: the few that run with no action of the
    /// user at all during the run's short window (a new terminal runs the shell's start-up
    /// files of a writable `$HOME`). Every other missing name needs none.
    pub placeholders: Vec<PathBuf>,
    /// How many directories the scan of the writable trees reads at most (`[filesystem]
    /// scan_directories`; `None`: [`crate::tree::SCAN_DIRS`]).
    pub scan_directories: Option<usize>,
    /// Where the scan keeps its memory of the previous launch (`None`: it lists every
    /// directory every time; see [`crate::tree`]).
    pub scan_memory: Option<PathBuf>,
}

/// Whether `name` matches `pattern`, where each `*` stands for any run of bytes.
fn matches(pattern: &str, name: &[u8]) -> bool {
    Glob::new(pattern.as_bytes()).matches(name)
}

/// A name pattern split at its stars: the literal parts, first and last anchored at the ends.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Glob {
    parts: Vec<Vec<u8>>,
}

impl Glob {
    fn new(pattern: &[u8]) -> Glob {
        Glob { parts: pattern.split(|&b| b == b'*').map(<[u8]>::to_vec).collect() }
    }

    fn matches(&self, name: &[u8]) -> bool {
        let [first, middle @ .., last] = &self.parts[..] else {
            return self.parts.first().is_some_and(|p| p == name); // no star
        };
        if name.len() < first.len() + last.len()
            || !name.starts_with(first)
            || !name.ends_with(last)
        {
            return false;
        }
        let mut rest = &name[first.len()..name.len() - last.len()];
        for part in middle.iter().filter(|p| !p.is_empty()) {
            match rest.windows(part.len()).position(|w| w == part.as_slice()) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

/// A set of name patterns, built once and matched against every entry the scan reads: exact
/// names by one hash lookup, the few patterns with a `*` one by one.
#[derive(Debug, Clone, Default)]
pub(crate) struct Names {
    exact: HashSet<Vec<u8>, Fnv>,
    globs: Vec<Glob>,
    /// Compared in ASCII lower case (the patterns are lowered when the set is made).
    any_case: bool,
}

impl Names {
    pub(crate) fn new<'a>(patterns: impl IntoIterator<Item = &'a String>, any_case: bool) -> Names {
        let mut names = Names { any_case, ..Names::default() };
        for p in patterns {
            let p = if any_case { p.to_ascii_lowercase() } else { p.clone() };
            if p.contains('*') {
                names.globs.push(Glob::new(p.as_bytes()));
            } else {
                names.exact.insert(p.into_bytes());
            }
        }
        names
    }

    pub(crate) fn matches(&self, name: &[u8]) -> bool {
        if self.exact.is_empty() && self.globs.is_empty() {
            return false;
        }
        let mut buf = [0u8; 64];
        let lowered;
        let name = if !self.any_case || !name.iter().any(u8::is_ascii_uppercase) {
            name
        } else if name.len() <= buf.len() {
            buf[..name.len()].copy_from_slice(name);
            buf[..name.len()].make_ascii_lowercase();
            &buf[..name.len()]
        } else {
            lowered = name.to_ascii_lowercase();
            &lowered
        };
        self.exact.contains(name) || self.globs.iter().any(|g| g.matches(name))
    }
}

/// FNV-1a: the scan hashes every name it reads (a hundred thousand in a big checkout), and names
/// are short; SipHash's defence against chosen collisions buys nothing for a set of built-in
/// names.
#[derive(Debug, Clone, Copy, Default)]
struct Fnv;

impl std::hash::BuildHasher for Fnv {
    type Hasher = FnvHasher;
    fn build_hasher(&self) -> FnvHasher {
        FnvHasher(0xcbf2_9ce4_8422_2325)
    }
}

/// The state of one FNV-1a hash.
#[derive(Debug, Clone, Copy)]
struct FnvHasher(u64);

impl std::hash::Hasher for FnvHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// A [`TopLevel`] made ready for many names: what the scan and the warden ask of every entry
/// below the top.
#[derive(Debug, Clone, Default)]
pub(crate) struct Below {
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // (the warden's)
    protected: Names,
    writable: Names,
    below: Names,
    review: Names,
    skip: Names,
}

impl Below {
    pub(crate) fn new(rule: &TopLevel) -> Below {
        Below {
            protected: Names::new(&rule.protected, true),
            writable: Names::new(&rule.writable, false),
            below: Names::new(&rule.below, true),
            review: Names::new(&rule.review, true),
            skip: Names::new(&rule.skip, false),
        }
    }

    /// Whether the entry `name` below the top of a writable directory is read-only (and a new
    /// one is taken away).
    pub(crate) fn protects(&self, name: &[u8]) -> bool {
        name != b"."
            && name != b".."
            && !name.starts_with(QUARANTINED_PREFIX.as_bytes())
            && self.below.matches(name)
            && !self.writable.matches(name)
    }

    /// [`TopLevel::protects`] with the patterns made ready: for every entry of a top (the
    /// warden lists each top at launch and at the end).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // (the warden's)
    pub(crate) fn protects_top(&self, name: &[u8]) -> bool {
        if name == b"." || name == b".." || name.starts_with(QUARANTINED_PREFIX.as_bytes()) {
            return false;
        }
        if self.protected.matches(name) {
            return true;
        }
        let allowed = self.writable.matches(name);
        (self.below.matches(name) || name.starts_with(b".")) && !allowed
    }

    /// Whether a change to the entry `name` is named at the end of the launch.
    pub(crate) fn reviews(&self, name: &[u8]) -> bool {
        self.review.matches(name)
    }

    /// Whether the directory `name` below the top is build output the scan does not enter.
    pub(crate) fn skips(&self, name: &[u8]) -> bool {
        self.skip.matches(name) || self.writable.matches(name)
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
        let allowed = self.writable.iter().any(|p| matches(p, n));
        if self.below.iter().any(|p| matches(&p.to_ascii_lowercase(), &lower)) && !allowed {
            return true;
        }
        n.starts_with(b".") && !allowed
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
            below: vec!["mise.toml".into(), "*.mk".into(), ".venv".into()],
            ..TopLevel::default()
        };
        let table = [
            ("mise.toml", true),
            ("MISE.toml", true),
            ("rules.mk", true),
            ("mise.toml~", false),
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
        // (The warden's form, made ready once, says the same for every name.)
        let ready = Below::new(&rule);
        for (name, want) in table {
            assert_eq!(rule.protects(OsStr::new(name)), want, "{name}");
            assert_eq!(ready.protects_top(name.as_bytes()), want, "{name}, made ready");
        }
    }

    #[test]
    fn patterns_match_at_either_end_and_inside() {
        assert!(matches("*.x", b"a.x"));
        assert!(!matches("*.x", b"a.y"));
        assert!(matches(".a*", b".abc"));
        assert!(matches("*mid*", b"xmidy"));
        assert!(!matches("exact", b"exact2"));
        assert!(matches("mise.*.toml", b"mise.production.toml"));
        assert!(matches("mise.*.toml", b"mise..toml"));
        assert!(!matches("mise.*.toml", b"mise.toml"), "the parts may not overlap");
        assert!(!matches("mise.*.toml", b"mise.lock"));
        assert!(matches("a*b*c", b"a-b-c") && !matches("a*b*c", b"a-c-b"));
        assert!(!matches("a*b*c", b"a-x-c"), "a part inside must be there");
        // Each part inside takes its own place, after the one before it.
        assert!(matches("*x*x*", b"-x-x-") && matches("*x*x*", b"xx"));
        assert!(!matches("*x*x*", b"x") && !matches("*x*x*", b"-x-"));
        assert!(matches("a**b", b"ab") && matches("a**b", b"a-b"), "`**` is `*`");
    }

    #[test]
    fn below_the_top_only_tool_files_are_protected_and_build_output_is_skipped() {
        let rule = TopLevel {
            writable: vec![".venv".into(), ".tmp*".into(), ".npmrc".into()],
            below: vec![
                ".cargo".into(),
                ".envrc".into(),
                "rust-toolchain.toml".into(),
                "*.code-workspace".into(),
                "mise.*.toml".into(),
                ".npmrc".into(),
            ],
            review: vec!["build.rs".into(), "Makefile".into(), "eslint.config.*".into()],
            skip: vec!["node_modules".into(), "target".into()],
            ..TopLevel::default()
        };
        let below = Below::new(&rule);
        let table: &[(&str, bool, bool, bool)] = &[
            // name, protected below, reviewed, skipped
            (".cargo", true, false, false),
            (".CARGO", true, false, false),
            (".envrc", true, false, false),
            ("RUST-TOOLCHAIN.TOML", true, false, false),
            ("a.code-workspace", true, false, false),
            ("mise.ci.toml", true, false, false),
            (".npmrc", false, false, true), // allowlisted: the build's own, not even entered
            (".bin", false, false, false),  // no default deny of dot-entries below
            (".fingerprint", false, false, false),
            ("src", false, false, false),
            ("build.rs", false, true, false),
            ("BUILD.RS", false, true, false),
            ("makefile", false, true, false),
            ("eslint.config.mjs", false, true, false),
            ("node_modules", false, false, true),
            ("target", false, false, true),
            ("Target", false, false, false), // build output by its exact name only
            (".venv", false, false, true),
            (".tmp1234", false, false, true),
            (".sandgate-quarantined-x-1-.cargo", false, false, false),
            (".", false, false, false),
        ];
        for (name, protected, reviewed, skipped) in table {
            let n = name.as_bytes();
            assert_eq!(below.protects(n), *protected, "protects {name}");
            assert_eq!(below.reviews(n), *reviewed, "reviews {name}");
            assert_eq!(below.skips(n), *skipped, "skips {name}");
        }
        // At the top, the names below count too (a `mise.ci.toml` has no dot).
        assert!(rule.protects(OsStr::new("mise.ci.toml")));
        assert!(!rule.protects(OsStr::new(".npmrc")), "the allowlist wins there as well");
        assert!(!rule.protects(OsStr::new("build.rs")));
    }

    #[test]
    fn long_names_and_names_without_a_match_are_cheap_and_right() {
        let below = Below::new(&TopLevel { below: vec![".envrc".into()], ..TopLevel::default() });
        let long = format!(".ENVRC{}", "x".repeat(200));
        assert!(!below.protects(long.as_bytes()));
        let long_match = TopLevel { below: vec![long.to_lowercase()], ..TopLevel::default() };
        assert!(Below::new(&long_match).protects(long.as_bytes()));
        assert!(!Below::new(&TopLevel::default()).protects(b".envrc"), "an empty rule");
    }
}
