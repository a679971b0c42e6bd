//! The sandbox's own temporary directory on macOS (its `TMPDIR`), where there is no private
//! `/tmp`. Made with one non-recursive `mkdir` with mode 0700 that fails when the path exists:
//! a directory (or a symbolic link) planted there in advance by another process of the user, an
//! earlier sandbox included, is never adopted, so nothing the command writes lands where another
//! can read it, and nothing there was put in before. Its owner is checked afterwards (a
//! directory made by us is ours; anything else means the parent let someone else in).

use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

use crate::SandboxError;

/// Creates `path` (its parent must exist) mode 0700, owned by `uid`; returns its real path.
pub fn create(path: &Path, uid: u32) -> Result<PathBuf, SandboxError> {
    let fail = |reason: String| SandboxError::PrivateTmp { path: path.to_owned(), reason };
    std::fs::DirBuilder::new()
        .recursive(false)
        .mode(0o700)
        .create(path)
        .map_err(|e| fail(format!("cannot create it (it must not exist yet): {e}")))?;
    let meta = std::fs::symlink_metadata(path).map_err(|e| fail(format!("cannot stat it: {e}")))?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(fail(format!(
            "not a directory of uid {uid} with mode 0700 (uid {}, mode {:o})",
            meta.uid(),
            meta.mode() & 0o7777
        )));
    }
    path.canonicalize().map_err(|e| fail(format!("cannot resolve it: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn euid() -> u32 {
        std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0)
    }

    #[test]
    fn made_once_private_and_never_adopted() {
        let base =
            std::env::temp_dir().join(format!("sandgate-private-tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir(&base).unwrap();
        let uid = euid();
        let fresh = base.join("fresh");
        let made = create(&fresh, uid).unwrap();
        assert_eq!(std::fs::metadata(&made).unwrap().mode() & 0o777, 0o700);
        // (what is at the path beforehand, refused)
        let planted_dir = base.join("planted-dir");
        std::fs::create_dir(&planted_dir).unwrap();
        let planted_link = base.join("planted-link");
        std::os::unix::fs::symlink(&fresh, &planted_link).unwrap();
        let no_parent = base.join("missing/child");
        for path in [&fresh, &planted_dir, &planted_link, &no_parent] {
            let err = create(path, uid).unwrap_err().to_string();
            assert!(err.contains("must not exist yet"), "{}: {err}", path.display());
        }
        // made, but by (as if) another user: refused after the mkdir
        let other = base.join("other");
        let err = create(&other, uid + 1).unwrap_err().to_string();
        assert!(err.contains("not a directory of uid"), "{err}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
