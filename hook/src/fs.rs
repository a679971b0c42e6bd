//! The filesystem as the hook sees it: one seam, so decisions are tested without touching disk.

use std::cell::RefCell;
use std::ffi::OsString;
use std::io;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// What the hook needs to know about one directory entry (not following a final symlink).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileInfo {
    /// The entry is a symbolic link.
    pub is_symlink: bool,
    /// The entry is a directory.
    pub is_dir: bool,
    /// Hard links to the inode (a file with more than one may be another path's content).
    pub nlink: u64,
}

/// The filesystem queries a decision depends on.
pub trait Filesystem {
    /// The canonical path: absolute, symlinks followed, `.` and `..` resolved (like realpath(3)).
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf>;
    /// The entry itself (lstat).
    fn symlink_metadata(&self, path: &Path) -> io::Result<FileInfo>;
    /// The file a shell would run for a bare command `name`: the first executable regular file
    /// named `name` in `PATH`. `None` when there is none, or when a relative or empty `PATH`
    /// entry comes first (what it names depends on the shell's directory, not known here).
    fn lookup_command(&self, name: &str) -> Option<PathBuf>;
    /// What `path` (followed) is as a wrapper: the sandgate binary this hook trusts, in a place
    /// nobody but root and the user can change between this decision and the shell running it.
    /// `cwds`: the directories the command line runs in, writable to its `build` stages (with
    /// whatever a tier makes writable there): a wrapper in or through one is exposed.
    fn wrapper(&self, path: &Path, cwds: &[PathBuf]) -> Wrapper;
    /// Whether `cd NAME` may look `NAME` up in `CDPATH` (set and not empty where the shell
    /// starts) instead of the working directory.
    fn searches_cdpath(&self) -> bool;
}

/// What a wrapper name resolves to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wrapper {
    /// The sandgate binary (or its small launcher), where only root and the user can change it.
    Ours,
    /// Another file.
    Foreign,
    /// The sandgate binary, in or through a place something else could change before the shell
    /// runs it; what makes the place unsafe.
    Exposed(String),
}

/// The real filesystem, with the `PATH` and the sandgate binaries given by the caller.
#[derive(Clone, Debug)]
pub struct RealFs {
    path_var: Option<OsString>,
    cdpath: bool,
    /// (device, inode) of the sandgate binary a wrapper may resolve to.
    sandgate: Option<(u64, u64)>,
    /// The small launcher next to it, by its real path (the launcher hands what it does not do
    /// to the `sandgate` next to its real file: a hard link of it elsewhere would not be next to
    /// this one).
    launcher: Option<PathBuf>,
    untrusted: Vec<PathBuf>,
    /// What some tier makes writable when started in a directory (besides the directory).
    writable_in: fn(&Path) -> Vec<PathBuf>,
    /// [`RealFs::writable_in`]'s answers so far (each directory's configuration read once).
    seen: RefCell<Vec<(PathBuf, Vec<PathBuf>)>>,
}

impl RealFs {
    /// `path_var` is the `PATH` the agent's shell has (the hook's own, inherited from the agent);
    /// `sandgate` is the binary a wrapper must resolve to (the running executable).
    pub fn new(path_var: Option<OsString>, sandgate: &Path) -> RealFs {
        let sandgate = std::fs::metadata(sandgate).ok().map(|m| (m.dev(), m.ino()));
        RealFs {
            path_var,
            cdpath: false,
            sandgate,
            launcher: None,
            untrusted: Vec::new(),
            writable_in: |_| Vec::new(),
            seen: RefCell::default(),
        }
    }

    /// `CDPATH` as the agent's shell has it (the hook's own): when set and not empty, `cd NAME`
    /// may lead elsewhere than `./NAME`.
    pub fn with_cdpath(mut self, cdpath: Option<OsString>) -> RealFs {
        self.cdpath = cdpath.is_some_and(|c| !c.is_empty());
        self
    }

    /// What some tier makes writable when started in a directory, beyond the directory itself
    /// (the configured writable paths there): a wrapper in or through such a place is exposed
    /// too.
    pub fn with_writable_in(mut self, writable_in: fn(&Path) -> Vec<PathBuf>) -> RealFs {
        self.writable_in = writable_in;
        self
    }

    /// A wrapper may also resolve to the small launcher at `launcher` (the `sandbox-*` links
    /// point at it), that very file: next to the sandgate binary it hands its work to.
    pub fn with_launcher(mut self, launcher: &Path) -> RealFs {
        self.launcher = std::fs::canonicalize(launcher).ok();
        self
    }

    /// Directories a sandboxed command (or anyone) may write whatever the command line: the
    /// hook's own working directory. A wrapper found at or below one, or reached through one,
    /// could be replaced between this decision and the shell running it.
    pub fn with_untrusted(mut self, dirs: Vec<PathBuf>) -> RealFs {
        self.untrusted = with_resolved(dirs);
        self
    }

    /// The untrusted places for a line that runs in `cwds`: the fixed ones, each directory, and
    /// what a tier makes writable there.
    fn untrusted_for(&self, cwds: &[PathBuf]) -> Vec<PathBuf> {
        let mut out = self.untrusted.clone();
        let mut seen = self.seen.borrow_mut();
        for cwd in cwds {
            let writable = match seen.iter().find(|(c, _)| c == cwd) {
                Some((_, w)) => w.clone(),
                None => {
                    let w = with_resolved((self.writable_in)(cwd));
                    seen.push((cwd.clone(), w.clone()));
                    w
                }
            };
            out.extend(with_resolved(vec![cwd.clone()]));
            out.extend(writable);
        }
        out
    }

    /// Whether every directory on the way to `path` (and through each link it passes, up to the
    /// real file) is outside the `untrusted` directories, owned by root or the user, and not
    /// writable by group or others (a sticky directory such as `/tmp` is fine: others cannot
    /// rename or remove an entry they do not own there). The file and each link on the way
    /// must be owned by root or the user too. `Err` says what is wrong.
    fn trusted_place(path: &Path, untrusted: &[PathBuf]) -> Result<(), String> {
        let uid = nix::unistd::getuid().as_raw();
        let inside = |p: &Path| {
            untrusted.iter().find(|u| p.starts_with(u)).map(|u| {
                format!(
                    "{} is in {}, which a command in a sandbox may write (a working directory \
                     of the line, or a writable path of a tier)",
                    p.display(),
                    u.display()
                )
            })
        };
        let mut todo = vec![path.to_path_buf()];
        let mut steps = 0;
        while let Some(p) = todo.pop() {
            steps += 1;
            if steps > 64 {
                return Err("the links on the way to it loop".into());
            }
            // A relative path: its meaning depends on a directory not checked.
            if !p.is_absolute() {
                return Err(format!("the way to it holds the relative path {}", p.display()));
            }
            if let Some(why) = inside(&p) {
                return Err(why);
            }
            let mut prefix = PathBuf::new();
            for c in p.components() {
                prefix.push(c);
                let m = std::fs::symlink_metadata(&prefix)
                    .map_err(|e| format!("{} cannot be inspected: {e}", prefix.display()))?;
                // `..` in a link's target: where the prefix really is decides.
                let real = std::fs::canonicalize(&prefix).unwrap_or_else(|_| prefix.clone());
                if let Some(why) = inside(&real) {
                    return Err(why);
                }
                if m.uid() != 0 && m.uid() != uid {
                    return Err(format!(
                        "{} belongs to user {}, neither root nor you",
                        prefix.display(),
                        m.uid()
                    ));
                }
                if m.file_type().is_symlink() {
                    // Follow the link: the rest of the way is checked from where it points.
                    let target = std::fs::read_link(&prefix)
                        .map_err(|e| format!("{} cannot be read: {e}", prefix.display()))?;
                    let rest = p.strip_prefix(&prefix).unwrap_or(Path::new(""));
                    let base = prefix.parent().unwrap_or(Path::new("/"));
                    todo.push(base.join(target).join(rest));
                    break;
                }
                if m.is_dir() && m.mode() & 0o022 != 0 && m.mode() & 0o1000 == 0 {
                    return Err(format!(
                        "{} may be written by other users (mode {:o}, not sticky)",
                        prefix.display(),
                        m.mode() & 0o7777
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Each path, then its resolved form when that differs.
fn with_resolved(dirs: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut out = Vec::with_capacity(dirs.len() * 2);
    for d in dirs {
        let real = std::fs::canonicalize(&d).ok().filter(|r| *r != d);
        out.push(d);
        out.extend(real);
    }
    out
}

impl Filesystem for RealFs {
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::canonicalize(path)
    }

    fn symlink_metadata(&self, path: &Path) -> io::Result<FileInfo> {
        let m = std::fs::symlink_metadata(path)?;
        Ok(FileInfo {
            is_symlink: m.file_type().is_symlink(),
            is_dir: m.is_dir(),
            nlink: m.nlink(),
        })
    }

    fn lookup_command(&self, name: &str) -> Option<PathBuf> {
        let path_var = self.path_var.as_ref()?;
        for dir in std::env::split_paths(path_var) {
            if !dir.is_absolute() {
                // `.` or an empty entry: the shell's directory, which this hook does not know.
                return None;
            }
            let candidate = dir.join(name);
            if let Ok(m) = std::fs::metadata(&candidate)
                && m.is_file()
                && m.permissions().mode() & 0o111 != 0
            {
                return Some(candidate);
            }
        }
        None
    }

    fn wrapper(&self, path: &Path, cwds: &[PathBuf]) -> Wrapper {
        let is_sandgate = self
            .sandgate
            .is_some_and(|want| std::fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == want));
        let is_launcher = self
            .launcher
            .as_ref()
            .is_some_and(|l| std::fs::canonicalize(path).is_ok_and(|real| real == *l));
        if !is_sandgate && !is_launcher {
            return Wrapper::Foreign;
        }
        match RealFs::trusted_place(path, &self.untrusted_for(cwds)) {
            Ok(()) => Wrapper::Ours,
            Err(why) => Wrapper::Exposed(why),
        }
    }

    fn searches_cdpath(&self) -> bool {
        self.cdpath
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wrapper resolving to the sandgate binary (same inode, even as a hard link) or to the
    /// small launcher itself is trusted; a hard link or copy of the launcher elsewhere is not
    /// (it would hand over to another `sandgate`), nor anything else.
    #[test]
    fn wrappers_resolve_to_sandgate_or_the_launcher_itself() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().canonicalize().unwrap();
        let (sandgate, launcher) = (dir.join("sandgate"), dir.join("sandgate-launch"));
        std::fs::write(&sandgate, "sandgate").unwrap();
        std::fs::write(&launcher, "launcher").unwrap();
        let other = dir.join("other");
        std::fs::create_dir(&other).unwrap();
        std::os::unix::fs::symlink(&launcher, other.join("sandbox-run")).unwrap();
        std::os::unix::fs::symlink(&sandgate, other.join("sandbox-net")).unwrap();
        std::fs::hard_link(&launcher, other.join("launch-copy")).unwrap();
        std::fs::hard_link(&sandgate, other.join("sandgate-copy")).unwrap();
        std::fs::write(other.join("impostor"), "launcher").unwrap();
        let fs = RealFs::new(None, &sandgate).with_launcher(&launcher);
        let is = |fs: &RealFs, name: &str| fs.wrapper(&other.join(name), &[]);
        assert_eq!(is(&fs, "sandbox-run"), Wrapper::Ours);
        assert_eq!(is(&fs, "sandbox-net"), Wrapper::Ours);
        assert_eq!(is(&fs, "sandgate-copy"), Wrapper::Ours);
        assert_eq!(is(&fs, "launch-copy"), Wrapper::Foreign);
        assert_eq!(is(&fs, "impostor"), Wrapper::Foreign);
        // Without the launcher named, its links are not trusted.
        let plain = RealFs::new(None, &sandgate);
        assert_eq!(is(&plain, "sandbox-run"), Wrapper::Foreign);
        // In a directory the line runs in, or one a tier makes writable there, the binary is
        // exposed, and the answer says where.
        let Wrapper::Exposed(why) =
            fs.wrapper(&other.join("sandbox-run"), std::slice::from_ref(&other))
        else {
            panic!("a wrapper in the line's directory is trusted");
        };
        assert!(why.contains(&format!("is in {}", other.display())), "{why}");
        let configured =
            fs.clone().with_writable_in(|cwd| vec![cwd.parent().unwrap().join("other")]);
        let beside = dir.join("proj");
        std::fs::create_dir(&beside).unwrap();
        assert!(matches!(
            configured.wrapper(&other.join("sandbox-run"), &[beside]),
            Wrapper::Exposed(_)
        ));
        assert_eq!(configured.wrapper(&other.join("sandbox-run"), &[]), Wrapper::Ours);
    }
}
