//! Which directories a tier may make writable as a whole: the rule for the working directory of
//! `build`, shared by the launcher (which refuses the launch) and the agent hook (which does not
//! approve it).
//!
//! A tier with a writable working directory makes whatever directory the command starts in
//! writable. Started in the home directory, in `/` or in a system directory, the command could
//! leave files that run later outside the sandbox: `~/bin/ls`, which the next login shell finds
//! first in `PATH`; `~/.config/autostart/x.desktop`; a crontab; `/usr/local/bin/git`. The
//! top-level rule and the autorun list keep the names they know read-only, but such a place holds
//! too many to list. So it is refused as a writable root, unless a person names it explicitly
//! (`--allow-write DIR`, see [`FsPolicy::cwd_refusal`](crate::FsPolicy::cwd_refusal)).
//!
//! # Refused (first match decides)
//! 1. `/`;
//! 2. a home directory (`$HOME` and the passwd entry's, each as given and as resolved), or a
//!    directory that holds one;
//! 3. a directory at or below an entry of a home whose files run later: every dot-entry at the
//!    top (`~/.config`, `~/.local/bin`, `~/.dotfiles`, `~/.cargo`) and [`HOME_PLACES`] (`~/bin`,
//!    `~/Library`);
//! 4. a directory directly in `/home` or `/Users` (another account's home, when root launches),
//!    or at or below such a home's entries of rule 3 (`/home/alice/.ssh`, `/home/alice/bin`);
//! 5. a system place of [`SYSTEM_PLACES`] (`/etc`, `/usr`, `/opt`, `/var/lib`, ...), anything
//!    below it, or a directory that holds one (`/var`);
//! 6. [`SHARED_DIRS`] themselves (`/tmp`, `/var/tmp`, `/home`): every user's programs look for
//!    names there.
//!
//! Everything else may be a writable root: `~/src/project`, `/srv/app`, `/var/www/site`,
//! `/tmp/x`, `/mnt/data/repo`. Names compare without ASCII case (macOS filesystems ignore it).
//!
//! Only the working directory is judged: configured `allow_write` paths and `--allow-write` are
//! named by a person, outside the sandbox. (The launcher also refuses a working directory in a
//! package cache: see the daemon's `caches::holding`.)

use std::fmt;
use std::path::{Component, Path, PathBuf};

/// Entries of a home directory below which writing makes code run later (besides every
/// dot-entry): `bin` (early in `PATH` in many login profiles), `Library` (macOS launch agents,
/// application support and plug-ins).
pub const HOME_PLACES: &[&str] = &["bin", "Library"];

/// System places: the programs, libraries, configuration and state the system and its services
/// run or obey (Linux, then macOS). Refused, with everything below them and every directory that
/// holds one.
pub const SYSTEM_PLACES: &[&str] = &[
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/nix",
    "/opt",
    "/proc",
    "/run",
    "/sbin",
    "/snap",
    "/sys",
    "/usr",
    "/var/lib",
    "/var/spool",
    "/Applications",
    "/Library",
    "/System",
    "/private/etc",
    "/private/var/at",
    "/private/var/db",
    "/private/var/root",
];

/// Directories shared by every user of the machine, refused themselves (not what is below them).
pub const SHARED_DIRS: &[&str] =
    &["/tmp", "/var/tmp", "/private/tmp", "/private/var/tmp", "/home", "/Users"];

/// Directories whose entries are home directories by convention.
const HOME_PARENTS: &[&str] = &["/home", "/Users"];

/// Why a directory may not be a writable root: the directory and the rule that refused it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootRefusal {
    /// The directory judged.
    pub dir: PathBuf,
    /// The rule.
    pub kind: RootRefusalKind,
}

/// The rule that refused a writable root (see the [module](self) for the order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootRefusalKind {
    /// The directory is `/`.
    FilesystemRoot,
    /// The directory is this home directory.
    Home(PathBuf),
    /// The directory holds this home directory.
    HoldsHome(PathBuf),
    /// The directory is at or below this entry of a home directory.
    HomeEntry(PathBuf),
    /// The directory is directly in `/home` or `/Users`.
    OtherHome,
    /// The directory is at or below this system place.
    System(PathBuf),
    /// The directory holds this system place.
    HoldsSystem(PathBuf),
    /// The directory is this shared directory.
    Shared(PathBuf),
}

impl fmt::Display for RootRefusal {
    /// `DIR is ...`, one clause.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dir = self.dir.display();
        match &self.kind {
            RootRefusalKind::FilesystemRoot => write!(f, "{dir} is the root of the filesystem"),
            RootRefusalKind::Home(_) => write!(f, "{dir} is your home directory"),
            RootRefusalKind::HoldsHome(h) => {
                write!(f, "{dir} holds your home directory {}", h.display())
            }
            RootRefusalKind::HomeEntry(e) => {
                if *e == self.dir {
                    write!(f, "{dir} is a place in your home directory")?;
                } else {
                    write!(f, "{dir} is in {}", e.display())?;
                }
                f.write_str(
                    " where files run later (shell and tool configuration, programs in PATH)",
                )
            }
            RootRefusalKind::OtherHome => write!(f, "{dir} is a home directory"),
            RootRefusalKind::System(s) => {
                write!(f, "{dir} is in the system directory {}", s.display())
            }
            RootRefusalKind::HoldsSystem(s) => {
                write!(f, "{dir} holds the system directory {}", s.display())
            }
            RootRefusalKind::Shared(_) => {
                write!(f, "{dir} is shared by every user's programs")
            }
        }
    }
}

impl std::error::Error for RootRefusal {}

/// The rule, with the home directories it protects (each as given and as resolved).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RootRule {
    homes: Vec<PathBuf>,
}

impl RootRule {
    /// The rule for `homes` exactly as given (no filesystem access).
    pub fn new(homes: impl IntoIterator<Item = PathBuf>) -> RootRule {
        let mut rule = RootRule { homes: Vec::new() };
        for h in homes {
            rule.add_home(h);
        }
        rule
    }

    /// The rule for `homes` as given and as resolved (symbolic links followed): a home reached
    /// through a link is the same home.
    pub fn resolved(homes: impl IntoIterator<Item = PathBuf>) -> RootRule {
        let mut rule = RootRule { homes: Vec::new() };
        for h in homes {
            if let Ok(real) = h.canonicalize() {
                rule.add_home(real);
            }
            rule.add_home(h);
        }
        rule
    }

    fn add_home(&mut self, home: PathBuf) {
        if home.is_absolute() && !self.homes.contains(&home) {
            self.homes.push(home);
        }
    }

    /// The home directories judged against.
    pub fn homes(&self) -> &[PathBuf] {
        &self.homes
    }

    /// Why `dir` (absolute, resolved) may not be a writable root, or `None` when it may.
    pub fn refusal(&self, dir: &Path) -> Option<RootRefusal> {
        self.kind(dir).map(|kind| RootRefusal { dir: dir.to_owned(), kind })
    }

    fn kind(&self, dir: &Path) -> Option<RootRefusalKind> {
        let d = fold(dir);
        if d.components().all(|c| matches!(c, Component::RootDir | Component::CurDir)) {
            return Some(RootRefusalKind::FilesystemRoot);
        }
        for home in &self.homes {
            let h = fold(home);
            if d == h {
                return Some(RootRefusalKind::Home(home.clone()));
            }
            if h.starts_with(&d) {
                return Some(RootRefusalKind::HoldsHome(home.clone()));
            }
        }
        for home in &self.homes {
            let Ok(rel) = d.strip_prefix(fold(home)) else { continue };
            if let Some(Component::Normal(first)) = rel.components().next() {
                let name = first.to_string_lossy();
                if name.starts_with('.') || HOME_PLACES.iter().any(|p| fold_str(p) == name) {
                    // The entry as the home spells it (the comparison ignored case).
                    let original = dir.components().nth(home.components().count());
                    let entry = original.map_or_else(|| home.join(first), |c| home.join(c));
                    return Some(RootRefusalKind::HomeEntry(entry));
                }
            }
        }
        if d.parent().is_some_and(|p| HOME_PARENTS.iter().any(|h| fold(Path::new(h)) == p)) {
            return Some(RootRefusalKind::OtherHome);
        }
        // Another account's home (root launches reach every one): the same entries as in ours
        // (`/home/alice/.ssh`, `/home/alice/bin`).
        for parent in HOME_PARENTS {
            let Ok(rel) = d.strip_prefix(fold(Path::new(parent))) else { continue };
            let mut parts = rel.components();
            if let (Some(Component::Normal(user)), Some(Component::Normal(first))) =
                (parts.next(), parts.next())
            {
                let name = first.to_string_lossy();
                if name.starts_with('.') || HOME_PLACES.iter().any(|p| fold_str(p) == name) {
                    let home = Path::new(parent).join(user);
                    return Some(RootRefusalKind::HomeEntry(home.join(first)));
                }
            }
        }
        for place in SYSTEM_PLACES {
            let s = fold(Path::new(place));
            if d.starts_with(&s) {
                return Some(RootRefusalKind::System(PathBuf::from(place)));
            }
            if s.starts_with(&d) {
                return Some(RootRefusalKind::HoldsSystem(PathBuf::from(place)));
            }
        }
        SHARED_DIRS
            .iter()
            .find(|s| fold(Path::new(s)) == d)
            .map(|s| RootRefusalKind::Shared(PathBuf::from(s)))
    }
}

/// `p` in ASCII lower case, `.` and trailing separators dropped (components compare).
fn fold(p: &Path) -> PathBuf {
    p.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .map(|c| fold_str(&c.as_os_str().to_string_lossy()))
        .collect()
}

fn fold_str(s: &str) -> String {
    s.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row: a directory, the rule that refuses it (`None`: it may be a writable root), and
    /// why. The home is `/home/u`, also reached as `/data/u` through a link (given resolved).
    #[test]
    fn the_rule_refuses_places_whose_files_run_later() {
        use RootRefusalKind as K;
        let rule = RootRule::new(["/home/u".into(), "/data/u".into()]);
        let p = PathBuf::from;
        let rows: &[(&str, Option<K>, &str)] = &[
            ("/", Some(K::FilesystemRoot), "everything"),
            ("/home/u", Some(K::Home(p("/home/u"))), "~/bin/ls, ~/.bashrc"),
            ("/home/u/", Some(K::Home(p("/home/u"))), "a trailing slash is the same directory"),
            ("/HOME/U", Some(K::Home(p("/home/u"))), "case-insensitive filesystems"),
            ("/data/u", Some(K::Home(p("/data/u"))), "the home as resolved"),
            ("/home", Some(K::HoldsHome(p("/home/u"))), "holds the home"),
            ("/data", Some(K::HoldsHome(p("/data/u"))), "holds the resolved home"),
            ("/home/u/bin", Some(K::HomeEntry(p("/home/u/bin"))), "early in PATH"),
            ("/home/u/bin/sub", Some(K::HomeEntry(p("/home/u/bin"))), "below ~/bin"),
            ("/home/u/Bin", Some(K::HomeEntry(p("/home/u/Bin"))), "spelled as on disk"),
            ("/home/u/.config", Some(K::HomeEntry(p("/home/u/.config"))), "autostart, git"),
            (
                "/home/u/.config/nvim",
                Some(K::HomeEntry(p("/home/u/.config"))),
                "an editor's configuration runs when it starts",
            ),
            ("/home/u/.local/bin", Some(K::HomeEntry(p("/home/u/.local"))), "in PATH"),
            ("/home/u/.dotfiles", Some(K::HomeEntry(p("/home/u/.dotfiles"))), "rc files' source"),
            ("/data/u/.ssh", Some(K::HomeEntry(p("/data/u/.ssh"))), "through the resolved home"),
            ("/home/u/Library/X", Some(K::HomeEntry(p("/home/u/Library"))), "launch agents"),
            ("/home/other", Some(K::OtherHome), "another account's home, when root launches"),
            ("/Users/other", Some(K::OtherHome), "macOS"),
            ("/etc", Some(K::System(p("/etc"))), "system configuration"),
            ("/etc/cron.d", Some(K::System(p("/etc"))), "below it"),
            ("/usr/local/bin", Some(K::System(p("/usr"))), "in every PATH"),
            ("/usr/local", Some(K::System(p("/usr"))), "holds /usr/local/bin"),
            ("/opt/tool", Some(K::System(p("/opt"))), "installed programs"),
            ("/var/spool/cron", Some(K::System(p("/var/spool"))), "crontabs"),
            ("/var", Some(K::HoldsSystem(p("/var/lib"))), "holds /var/lib"),
            ("/private", Some(K::HoldsSystem(p("/private/etc"))), "macOS /etc"),
            ("/private/etc/periodic", Some(K::System(p("/private/etc"))), "macOS /etc resolved"),
            ("/tmp", Some(K::Shared(p("/tmp"))), "every user's programs look for names there"),
            ("/var/tmp", Some(K::Shared(p("/var/tmp"))), "the same"),
            ("/home/u/src/proj", None, "a project in the home"),
            ("/home/u/binx", None, "not bin"),
            ("/home/u/src/.hidden-proj", None, "dot-entries count at the top of the home only"),
            ("/home/other/proj", None, "below another home: its dot-entries are not at the top"),
            ("/srv/app", None, "a service's project"),
            ("/var/www/site", None, "a web project"),
            ("/tmp/x", None, "a scratch directory"),
            ("/var/tmp/sandgate-t1/proj", None, "where the suite's tests run"),
            ("/work/main", None, "a workspace"),
            ("/mnt/data/repo", None, "a mounted disk"),
        ];
        for (dir, want, why) in rows {
            let got = rule.refusal(Path::new(dir)).map(|r| r.kind);
            assert_eq!(&got, want, "{dir}: {why}");
        }
    }

    #[test]
    fn without_homes_only_the_system_rules_apply() {
        let rule = RootRule::new([PathBuf::from("relative")]);
        assert!(rule.homes().is_empty(), "a relative home is no home");
        assert!(rule.refusal(Path::new("/home/u")).is_some(), "directly in /home: a home");
        // Every account's home under /home has the same places (a root launch reaches them).
        assert!(rule.refusal(Path::new("/home/u/bin")).is_some(), "another account's ~/bin");
        assert!(rule.refusal(Path::new("/home/u/.ssh")).is_some(), "another account's ~/.ssh");
        assert!(rule.refusal(Path::new("/home/u/src/p")).is_none(), "a project in it");
        assert!(rule.refusal(Path::new("/srv/u/bin")).is_none());
    }

    #[test]
    fn a_home_reached_through_a_link_is_the_same_home() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().canonicalize().unwrap().join("real-home");
        std::fs::create_dir(&real).unwrap();
        let link = d.path().join("link-home");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let rule = RootRule::resolved([link.clone()]);
        assert_eq!(rule.homes(), [real.clone(), link]);
        let got = rule.refusal(&real.join("bin")).map(|r| r.kind);
        assert_eq!(got, Some(RootRefusalKind::HomeEntry(real.join("bin"))));
        // Control: given only as written, the resolved path is not known to be the home.
        let unresolved = RootRule::new([d.path().join("link-home")]);
        assert!(unresolved.refusal(&real.join("bin")).is_none());
    }

    #[test]
    fn the_message_names_the_directory_and_the_reason() {
        let rule = RootRule::new([PathBuf::from("/home/u")]);
        let text = |d: &str| rule.refusal(Path::new(d)).unwrap().to_string();
        assert_eq!(text("/home/u"), "/home/u is your home directory");
        assert_eq!(text("/"), "/ is the root of the filesystem");
        assert_eq!(
            text("/home/u/bin"),
            "/home/u/bin is a place in your home directory where files run later (shell and tool \
             configuration, programs in PATH)"
        );
        assert!(
            text("/home/u/.config/nvim")
                .starts_with("/home/u/.config/nvim is in /home/u/.config where")
        );
        assert_eq!(text("/var"), "/var holds the system directory /var/lib");
    }
}
