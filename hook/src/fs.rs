//! The filesystem as the hook sees it: one seam, so decisions are tested without touching disk.

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
    /// Whether `path` (followed) is the sandgate binary this hook trusts, in a place nobody but
    /// root and the user can change between this decision and the shell running it.
    fn is_sandgate(&self, path: &Path) -> bool;
}

/// The real filesystem, with the `PATH` and the sandgate binaries given by the caller.
#[derive(Clone, Debug)]
pub struct RealFs {
    path_var: Option<OsString>,
    /// (device, inode) of the sandgate binary a wrapper may resolve to.
    sandgate: Option<(u64, u64)>,
    /// The small launcher next to it, by its real path (the launcher hands what it does not do
    /// to the `sandgate` next to its real file: a hard link of it elsewhere would not be next to
    /// this one).
    launcher: Option<PathBuf>,
    untrusted: Vec<PathBuf>,
}

impl RealFs {
    /// `path_var` is the `PATH` the agent's shell has (the hook's own, inherited from the agent);
    /// `sandgate` is the binary a wrapper must resolve to (the running executable).
    pub fn new(path_var: Option<OsString>, sandgate: &Path) -> RealFs {
        let sandgate = std::fs::metadata(sandgate).ok().map(|m| (m.dev(), m.ino()));
        RealFs { path_var, sandgate, launcher: None, untrusted: Vec::new() }
    }

    /// A wrapper may also resolve to the small launcher at `launcher` (the `sandbox-*` links
    /// point at it), that very file: next to the sandgate binary it hands its work to.
    pub fn with_launcher(mut self, launcher: &Path) -> RealFs {
        self.launcher = std::fs::canonicalize(launcher).ok();
        self
    }

    /// Directories a sandboxed command (or anyone) may write in some tier: the working
    /// directory, the configured writable paths. A wrapper found at or below one, or reached
    /// through one, could be replaced between this decision and the shell running it.
    pub fn with_untrusted(mut self, dirs: Vec<PathBuf>) -> RealFs {
        self.untrusted = dirs
            .into_iter()
            .flat_map(|d| {
                let real = std::fs::canonicalize(&d).ok();
                std::iter::once(d).chain(real)
            })
            .collect();
        self
    }

    /// Whether every directory on the way to `path` (and through each link it passes, up to the
    /// real file) is outside the untrusted directories, owned by root or the user, and not
    /// writable by group or others (a sticky directory such as `/tmp` is fine: others cannot
    /// rename or remove an entry they do not own there). The file and each link on the way
    /// must be owned by root or the user too.
    fn trusted_place(&self, path: &Path) -> bool {
        let uid = nix::unistd::getuid().as_raw();
        let mut todo = vec![path.to_path_buf()];
        let mut steps = 0;
        while let Some(p) = todo.pop() {
            steps += 1;
            // A link loop, or a relative path (its meaning depends on a directory not checked).
            if steps > 64 || !p.is_absolute() {
                return false;
            }
            if self.untrusted.iter().any(|u| p.starts_with(u)) {
                return false;
            }
            let mut prefix = PathBuf::new();
            for c in p.components() {
                prefix.push(c);
                let Ok(m) = std::fs::symlink_metadata(&prefix) else { return false };
                // `..` in a link's target: where the prefix really is decides.
                let real = std::fs::canonicalize(&prefix).unwrap_or_else(|_| prefix.clone());
                if self.untrusted.iter().any(|u| real.starts_with(u)) {
                    return false;
                }
                if m.uid() != 0 && m.uid() != uid {
                    return false;
                }
                if m.file_type().is_symlink() {
                    // Follow the link: the rest of the way is checked from where it points.
                    let Ok(target) = std::fs::read_link(&prefix) else { return false };
                    let rest = p.strip_prefix(&prefix).unwrap_or(Path::new(""));
                    let base = prefix.parent().unwrap_or(Path::new("/"));
                    todo.push(base.join(target).join(rest));
                    break;
                }
                if m.is_dir() && m.mode() & 0o022 != 0 && m.mode() & 0o1000 == 0 {
                    return false;
                }
            }
        }
        true
    }
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

    fn is_sandgate(&self, path: &Path) -> bool {
        let is_sandgate = self
            .sandgate
            .is_some_and(|want| std::fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == want));
        let is_launcher = self
            .launcher
            .as_ref()
            .is_some_and(|l| std::fs::canonicalize(path).is_ok_and(|real| real == *l));
        (is_sandgate || is_launcher) && self.trusted_place(path)
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
        assert!(fs.is_sandgate(&other.join("sandbox-run")));
        assert!(fs.is_sandgate(&other.join("sandbox-net")));
        assert!(fs.is_sandgate(&other.join("sandgate-copy")));
        assert!(!fs.is_sandgate(&other.join("launch-copy")));
        assert!(!fs.is_sandgate(&other.join("impostor")));
        // Without the launcher named, its links are not trusted.
        let plain = RealFs::new(None, &sandgate);
        assert!(!plain.is_sandgate(&other.join("sandbox-run")));
    }
}
