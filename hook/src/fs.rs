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
    /// Whether `path` (followed) is the sandgate binary this hook trusts.
    fn is_sandgate(&self, path: &Path) -> bool;
}

/// The real filesystem, with the `PATH` and the sandgate binary given by the caller.
#[derive(Clone, Debug)]
pub struct RealFs {
    path_var: Option<OsString>,
    sandgate: Option<(u64, u64)>,
}

impl RealFs {
    /// `path_var` is the `PATH` the agent's shell has (the hook's own, inherited from the agent);
    /// `sandgate` is the binary a wrapper must resolve to (the running executable).
    pub fn new(path_var: Option<OsString>, sandgate: &Path) -> RealFs {
        let sandgate = std::fs::metadata(sandgate).ok().map(|m| (m.dev(), m.ino()));
        RealFs { path_var, sandgate }
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
        let Some(want) = self.sandgate else { return false };
        std::fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == want)
    }
}
