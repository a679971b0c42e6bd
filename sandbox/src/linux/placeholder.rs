//! Placeholders for protected paths that do not exist yet.
//!
//! A protected name (`.envrc`, `.git/hooks`, ...) that is missing inside a writable directory must
//! not be creatable from inside. Nothing in the kernel can refuse the creation of one name in a
//! directory where others may be created: Landlock grants creation per directory, seccomp cannot
//! read path arguments, and an overlay or tmpfs copy of the directory would lose or fake the
//! command's other writes. So the launcher creates an empty placeholder, the sandbox binds it
//! read-only over itself, and the placeholder is removed again once no sandbox uses it:
//!
//! - a placeholder is recognisable: an empty regular file with mode 0444 ([`MODE`]);
//! - every launcher that uses one (made by it or found there) holds a shared `flock` on it for
//!   the sandbox's lifetime, so concurrent sandboxes in one directory share it;
//! - after the sandbox is gone, the lock is upgraded without waiting: only the last user gets the
//!   exclusive lock, and it removes the file if the path still names that same empty file
//!   (unlinking it earlier, from outside, would detach the read-only mount of a sandbox still
//!   running, and the name would become creatable there);
//! - the warden process (see `warden`), forked by the launcher, waits for the sandbox's init to
//!   end and does this, so placeholders go away even when the launcher itself is killed;
//! - none is made at the top of a writable directory where the top-level rule applies: the
//!   warden takes such an entry away if it appears, so no placeholder shows up in `git status`.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::sys;

/// Mode of a placeholder (with size 0 and a regular file, its signature).
pub const MODE: u32 = 0o444;

/// A placeholder in use by this launcher (shared lock held while this lives).
#[derive(Debug)]
pub struct Placeholder {
    /// Where it is.
    pub path: PathBuf,
    file: File,
}

fn is_placeholder(m: &Metadata) -> bool {
    m.file_type().is_file() && m.len() == 0 && m.permissions().mode() & 0o7777 == MODE
}

/// Makes sure a placeholder exists at `path` (whose parent directory exists) and takes a shared
/// lock on it. `Ok(None)`: something else is there (a real file, a directory, a symlink), which
/// the caller protects as an existing path.
pub fn hold(path: &Path) -> io::Result<Option<Placeholder>> {
    // A few rounds at most: each retry means another launcher removed or created it meanwhile.
    for _ in 0..8 {
        // Look before opening: opening a device node or a FIFO can have effects of its own.
        match std::fs::symlink_metadata(path) {
            Ok(m) if !is_placeholder(&m) => return Ok(None),
            _ => {}
        }
        let opened = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path);
        let file = match opened {
            Ok(file) => {
                if !is_placeholder(&file.metadata()?) {
                    return Ok(None);
                }
                file
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                match OpenOptions::new().write(true).create_new(true).mode(MODE).open(path) {
                    Ok(file) => {
                        // The umask may have taken bits away; the signature needs exactly MODE.
                        file.set_permissions(std::fs::Permissions::from_mode(MODE))?;
                        file
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(e),
                }
            }
            // A symlink (ELOOP), or a path through a file (ENOTDIR): not a placeholder.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        sys::flock(file.as_raw_fd(), libc::LOCK_SH)?;
        if file.metadata()?.nlink() == 0 {
            continue; // its last user removed it between our open and our lock
        }
        return Ok(Some(Placeholder { path: path.to_path_buf(), file }));
    }
    Err(io::Error::other("the path keeps changing under concurrent sandboxes"))
}

impl Placeholder {
    /// The descriptor holding the lock (kept open by the warden process).
    pub fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Gives the lock up; the last user removes the file. Call only once no sandbox using it on
    /// behalf of this launcher can run any more.
    pub fn release(&self) {
        if sys::flock(self.file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB).is_err() {
            return; // another sandbox still uses it; it removes it when it ends
        }
        let (Ok(ours), Ok(named)) = (self.file.metadata(), std::fs::symlink_metadata(&self.path))
        else {
            return;
        };
        if ours.dev() == named.dev() && ours.ino() == named.ino() && is_placeholder(&named) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_user_removes_a_placeholder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".envrc");
        let a = hold(&path).unwrap().expect("created");
        assert!(is_placeholder(&std::fs::metadata(&path).unwrap()));
        let b = hold(&path).unwrap().expect("shared");
        a.release();
        drop(a);
        assert!(path.exists(), "still used by b");
        b.release();
        assert!(!path.exists(), "removed by its last user");
    }

    #[test]
    fn real_files_are_not_placeholders() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(".envrc");
        std::fs::write(&file, "export X=1\n").unwrap();
        assert!(hold(&file).unwrap().is_none());
        std::fs::create_dir(dir.path().join(".vscode")).unwrap();
        assert!(hold(&dir.path().join(".vscode")).unwrap().is_none());
        std::os::unix::fs::symlink("/nonexistent", dir.path().join("link")).unwrap();
        assert!(hold(&dir.path().join("link")).unwrap().is_none());
        assert!(file.exists());
    }

    #[test]
    fn a_replaced_or_filled_placeholder_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".mcp.json");
        let p = hold(&path).unwrap().unwrap();
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "{}").unwrap(); // the user's own file now
        p.release();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{}");
    }
}
