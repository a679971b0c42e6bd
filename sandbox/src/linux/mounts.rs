//! The mount namespace: the host's tree read-only and nosuid, a private `/tmp` and `/dev/shm`,
//! writable paths bound back writable, protected paths read-only again, hidden paths covered,
//! the directories leading to those pinned, and a `/proc` of the new pid namespace.
//!
//! A mount point cannot be renamed or removed (`EBUSY`), but a directory that merely contains one
//! can, and the mount goes along: with `.git/hooks` bound read-only, `mv .git .git2` would take
//! the read-only hooks away and leave a fresh, writable `.git/hooks` to be made. So every
//! directory between a writable path and a path the sandbox must not change is bound onto itself
//! as well ("pinned"), with the writability it had.

use std::ffi::CStr;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::sys;

/// The resolved filesystem plan (all paths canonical and existing).
#[derive(Debug, Clone, Default)]
pub struct FsPlan {
    /// Working directory (kept visible even under `/tmp`).
    pub cwd: PathBuf,
    /// Writable paths.
    pub writable: Vec<PathBuf>,
    /// Paths made read-only again (inside writable ones, or the sandgate config).
    pub read_only: Vec<PathBuf>,
    /// Directories to cover with an empty, unreadable tmpfs.
    pub hidden_dirs: Vec<PathBuf>,
    /// Files to cover with an empty, unreadable file.
    pub hidden_files: Vec<PathBuf>,
    /// Directories bound onto themselves so that they cannot be moved away (see [`pins`]).
    pub pinned: Vec<PathBuf>,
    /// Paths kept visible even under `/tmp` (besides `cwd` and the writable paths).
    pub visible: Vec<PathBuf>,
    /// Directories replaced by a read-only tmpfs with their files (paths canonical).
    pub provided: Vec<crate::spec::ProvidedDir>,
    /// What `/etc/resolv.conf` says inside (proxy mode: the DNS stub), bound over the host's.
    pub resolv_conf: Option<Vec<u8>>,
}

/// A failed step: what was done, and the kernel's answer.
pub type StepError = (String, io::Error);

fn step<T>(what: impl FnOnce() -> String, r: io::Result<T>) -> Result<T, StepError> {
    r.map_err(|e| (what(), e))
}

const TMP: &str = "/tmp";
const SHM: &str = "/dev/shm";
const PTS: &str = "/dev/pts";
const EMPTY: &str = "/tmp/.sandgate-empty";
const EMPTY_DIR: &str = "/tmp/.sandgate-empty-dir";
const RESOLV_CONF: &str = "/etc/resolv.conf";
const RESOLV_SOURCE: &str = "/tmp/.sandgate-resolv.conf";

/// Paths under `/tmp` that must stay visible on top of the private `/tmp`: the working directory,
/// the writable paths and the `visible` ones, without those nested inside another one (they come
/// along).
pub fn kept_under_tmp(cwd: &Path, writable: &[PathBuf], visible: &[PathBuf]) -> Vec<PathBuf> {
    let mut all: Vec<&Path> = std::iter::once(cwd)
        .chain(writable.iter().map(PathBuf::as_path))
        .chain(visible.iter().map(PathBuf::as_path))
        .filter(|p| p.starts_with(TMP))
        .collect();
    all.sort();
    all.dedup();
    let mut kept: Vec<PathBuf> = Vec::new();
    for p in all {
        if !kept.iter().any(|k| p.starts_with(k)) {
            kept.push(p.to_path_buf());
        }
    }
    kept
}

/// The directories to pin: every directory strictly between the outermost writable path that
/// holds one of `targets` (read-only or hidden paths, all canonical) and the target itself,
/// except writable paths (mounts already). Targets that are not in a writable path cannot be
/// moved anyway (their parent is read-only), nor can targets under a hidden directory be reached.
/// Sorted, parents first. A target at the top of a writable path costs nothing.
pub fn pins(writable: &[PathBuf], targets: &[&Path], hidden_dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut pinned: Vec<PathBuf> = Vec::new();
    for t in targets {
        // Writable paths first: they are few, hidden directories can be a hundred.
        let Some(root) =
            writable.iter().filter(|w| t.starts_with(w)).min_by_key(|w| w.as_os_str().len())
        else {
            continue;
        };
        if hidden_dirs.iter().any(|h| t.starts_with(h) && t != h) {
            continue;
        }
        let between = t.ancestors().skip(1).take_while(|a| *a != root.as_path());
        pinned.extend(between.filter(|a| !writable.iter().any(|w| w == a)).map(Path::to_path_buf));
    }
    pinned.sort();
    pinned.dedup();
    pinned
}

/// Builds the mount namespace's view. Runs inside the new user + mount namespaces, with the
/// capabilities of the user namespace, before anything else is restricted.
pub fn build(plan: &FsPlan) -> Result<(), StepError> {
    let root = Path::new("/");
    step(
        || "make / private".into(),
        sys::mount(None, root, None, libc::MS_REC | libc::MS_PRIVATE, None),
    )?;

    // Clone the trees under /tmp that must survive the private /tmp before it hides them.
    let kept = kept_under_tmp(&plan.cwd, &plan.writable, &plan.visible);
    let mut trees = Vec::new();
    for p in &kept {
        // Whether it is a directory must be read now: once the private /tmp covers it, the path
        // no longer exists and its mount point would be made as a file (move_mount: EINVAL).
        let tree = step(|| format!("open_tree {}", p.display()), sys::open_tree_clone(p))?;
        trees.push((tree, p.is_dir()));
    }

    let tmpfs: &CStr = c"tmpfs";
    let nosuid_nodev = libc::MS_NOSUID | libc::MS_NODEV;
    step(
        || "mount private /tmp".into(),
        sys::mount(Some(tmpfs), Path::new(TMP), Some(tmpfs), nosuid_nodev, Some(c"mode=1777")),
    )?;
    let has_shm = Path::new(SHM).is_dir();
    if has_shm {
        step(
            || "mount private /dev/shm".into(),
            sys::mount(Some(tmpfs), Path::new(SHM), Some(tmpfs), nosuid_nodev, Some(c"mode=1777")),
        )?;
    }

    // While /tmp is certainly our tmpfs (no tree put back on it yet): the sandbox's resolver
    // configuration, bound over the host's and removed from /tmp at once (the bind keeps it).
    if let Some(text) = &plan.resolv_conf {
        resolv_conf(text)?;
    }

    // The file bound over hidden files: mode 000 on our tmpfs. Held by an O_PATH descriptor,
    // because a kept tree put back on /tmp itself would cover its path.
    let empty = if plan.hidden_files.is_empty() {
        None
    } else {
        step(
            || format!("create {EMPTY}"),
            std::fs::OpenOptions::new().write(true).create_new(true).mode(0o000).open(EMPTY),
        )?;
        Some(step(
            || format!("open {EMPTY}"),
            std::fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH).open(EMPTY),
        )?)
    };

    // The same for hidden directories: one empty directory of mode 000 on our tmpfs, bound over
    // each of them (see below).
    let empty_dir = if plan.hidden_dirs.is_empty() {
        None
    } else {
        step(|| format!("create {EMPTY_DIR}"), std::fs::create_dir(EMPTY_DIR))?;
        step(
            || format!("chmod {EMPTY_DIR}"),
            std::fs::set_permissions(EMPTY_DIR, std::fs::Permissions::from_mode(0o000)),
        )?;
        Some(step(
            || format!("open {EMPTY_DIR}"),
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
                .open(EMPTY_DIR),
        )?)
    };

    for (p, (tree, is_dir)) in kept.iter().zip(&trees) {
        step(|| format!("mount point {}", p.display()), make_mount_point(p, *is_dir))?;
        step(|| format!("put back {}", p.display()), sys::move_mount(tree, p))?;
    }
    drop(trees);

    // Writable paths get their own mount so that they can be writable in a read-only tree.
    let mut writable = plan.writable.clone();
    writable.sort();
    for w in &writable {
        if kept.contains(w) {
            continue; // already its own mount
        }
        step(|| format!("bind {}", w.display()), bind(w, w))?;
    }
    // Before the hidden paths: a provided directory below a hidden one is hidden with it.
    for d in &plan.provided {
        step(|| format!("provide {}", d.path.display()), provide(&d.path, &d.files))?;
    }
    // A read-only or hidden path that is not there any more (under the private /tmp, outside the
    // trees put back) is out of reach already: nothing the command does there reaches the host.
    let present = |p: &&PathBuf| std::fs::symlink_metadata(p).is_ok();
    for r in plan.read_only.iter().filter(present) {
        step(|| format!("bind {}", r.display()), bind(r, r))?;
    }
    // Hidden directories: each a bind of one empty directory of mode 000, removed once bound
    // (nothing can be created in a removed directory, and the binds end up read-only with the
    // rest of the tree). A bind costs a fraction of a tmpfs of its own per directory, and a home
    // directory can hide a hundred of them.
    if let Some(dir) = &empty_dir {
        let source = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
        for h in &plan.hidden_dirs {
            // (A directory below one hidden a moment ago is gone: `present` is asked again.)
            if std::fs::symlink_metadata(h).is_ok() {
                step(|| format!("hide {}", h.display()), bind(&source, h))?;
            }
        }
        // Only if the path still names our directory (not a put-back real /tmp's entry).
        let ours = dir.metadata().ok();
        let named = std::fs::symlink_metadata(EMPTY_DIR).ok();
        if let (Some(a), Some(b)) = (ours, named)
            && a.dev() == b.dev()
            && a.ino() == b.ino()
        {
            step(|| format!("remove {EMPTY_DIR}"), std::fs::remove_dir(EMPTY_DIR))?;
        }
    }
    if let Some(empty) = &empty {
        let source = PathBuf::from(format!("/proc/self/fd/{}", empty.as_raw_fd()));
        for h in plan.hidden_files.iter().filter(present) {
            step(|| format!("hide {}", h.display()), bind(&source, h))?;
        }
        // Remove it only if the path still names our file (not a put-back real /tmp).
        let ours = empty.metadata().ok();
        let named = std::fs::symlink_metadata(EMPTY).ok();
        if let (Some(a), Some(b)) = (ours, named)
            && a.dev() == b.dev()
            && a.ino() == b.ino()
        {
            step(|| format!("remove {EMPTY}"), std::fs::remove_file(EMPTY))?;
        }
    }

    step(
        || "mount /proc".into(),
        sys::mount(
            Some(c"proc"),
            Path::new("/proc"),
            Some(c"proc"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            None,
        ),
    )?;

    // A devpts instance of our own: the host's terminals (/dev/pts/N, owned by the same user or,
    // as root, by anyone) are out of sight, and /dev/ptmx allocates ptys here (the kernel looks
    // for "pts" next to the ptmx node in the caller's mount namespace).
    if Path::new(PTS).is_dir() {
        step(
            || "mount private /dev/pts".into(),
            sys::mount(
                Some(c"devpts"),
                Path::new(PTS),
                Some(c"devpts"),
                libc::MS_NOSUID | libc::MS_NOEXEC,
                Some(c"newinstance,ptmxmode=0666,mode=0620"),
            ),
        )?;
    }

    // Everything read-only and nosuid, then the writable mounts writable again. Mounts the host
    // locked (from a more privileged namespace) stay as they are; setting read-only is allowed.
    step(
        || "make / read-only".into(),
        sys::mount_setattr(root, sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID, 0, true),
    )?;
    let mut rw: Vec<&Path> = vec![Path::new(TMP)];
    if has_shm {
        rw.push(Path::new(SHM));
    }
    rw.extend(writable.iter().map(PathBuf::as_path));
    for w in rw {
        step(
            || format!("make {} writable", w.display()),
            sys::mount_setattr(w, 0, sys::MOUNT_ATTR_RDONLY, false),
        )?;
    }
    // Last, so that each pin is a copy of what is there by now: the directory with the
    // writability of the mount it is on, and the read-only and hidden mounts inside (`MS_REC`).
    // Parents first, so a deeper pin lands in the copy. The launcher resolved these paths; one
    // that is no longer a directory (a symlink put there since) is refused, not followed.
    for d in &plan.pinned {
        let is_dir = std::fs::symlink_metadata(d).map(|m| m.is_dir());
        let checked = match is_dir {
            Ok(true) => Ok(()),
            Ok(false) => Err(io::Error::new(io::ErrorKind::InvalidInput, "no longer a directory")),
            Err(e) => Err(e),
        };
        step(|| format!("pin {}", d.display()), checked.and_then(|()| bind(d, d)))?;
    }
    Ok(())
}

/// Binds a file holding `text` over `/etc/resolv.conf` (the file it names, when it is a
/// symbolic link, as the resolver reads it). Without one there is nothing to cover: the C
/// library's default name server is 127.0.0.1, which is the stub too.
fn resolv_conf(text: &[u8]) -> Result<(), StepError> {
    if std::fs::metadata(RESOLV_CONF).is_err() {
        return Ok(());
    }
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(RESOLV_SOURCE)
        .and_then(|mut f| io::Write::write_all(&mut f, text));
    step(|| format!("create {RESOLV_SOURCE}"), made)?;
    step(|| format!("bind {RESOLV_CONF}"), bind(Path::new(RESOLV_SOURCE), Path::new(RESOLV_CONF)))?;
    step(|| format!("remove {RESOLV_SOURCE}"), std::fs::remove_file(RESOLV_SOURCE))
}

/// Mounts a tmpfs on `dir` (made first when the private `/tmp` hid it) holding `files`; the
/// mount becomes read-only with the rest of the tree.
fn provide(dir: &Path, files: &[(PathBuf, Vec<u8>)]) -> io::Result<()> {
    if std::fs::symlink_metadata(dir).is_err() {
        std::fs::create_dir_all(dir)?;
    }
    sys::mount(
        Some(c"tmpfs"),
        dir,
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        Some(c"mode=0755"),
    )?;
    for (rel, contents) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut f =
            std::fs::OpenOptions::new().write(true).create_new(true).mode(0o444).open(&path)?;
        io::Write::write_all(&mut f, contents)?;
    }
    Ok(())
}

fn bind(source: &Path, target: &Path) -> io::Result<()> {
    let src = sys::cpath(source)?;
    sys::mount(Some(&src), target, None, libc::MS_BIND | libc::MS_REC, None)
}

fn make_mount_point(path: &Path, dir: bool) -> io::Result<()> {
    if dir {
        std::fs::create_dir_all(path)?;
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let f = std::fs::OpenOptions::new().write(true).create(true).truncate(false).open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_under_tmp_keeps_outermost_paths_only() {
        let p = PathBuf::from;
        let table: &[(&str, &[&str], &[&str])] = &[
            ("/home/u/p", &[], &[]),
            ("/tmp/a/p", &[], &["/tmp/a/p"]),
            ("/tmp/a/p", &["/tmp/a"], &["/tmp/a"]),
            ("/tmp/a", &["/tmp/a/x", "/tmp/b", "/var/tmp/c"], &["/tmp/a", "/tmp/b"]),
            ("/tmpfoo", &[], &[]),
            ("/tmp", &[], &["/tmp"]),
        ];
        for (cwd, writable, want) in table {
            let w: Vec<PathBuf> = writable.iter().map(p).collect();
            let got = kept_under_tmp(Path::new(cwd), &w, &[]);
            let want: Vec<PathBuf> = want.iter().map(p).collect();
            assert_eq!(got, want, "cwd {cwd} writable {writable:?}");
        }
        // Visible paths (the home directory, the launcher) count like writable ones.
        let v = |s: &[&str]| s.iter().map(PathBuf::from).collect::<Vec<_>>();
        let visible = v(&["/tmp/h", "/tmp/b/target/debug/sandgate", "/usr/bin/sandgate"]);
        let got = kept_under_tmp(Path::new("/tmp/h/p"), &v(&["/tmp/b"]), &visible);
        assert_eq!(got, v(&["/tmp/b", "/tmp/h"]));
    }

    #[test]
    fn pins_cover_the_directories_between_writable_roots_and_targets() {
        let v = |s: &[&str]| s.iter().map(PathBuf::from).collect::<Vec<_>>();
        let hidden = v(&["/h/.ssh", "/h/.local/share/keyrings"]);
        let table: &[(&[&str], &[&str], &[&str])] = &[
            // Top-level targets cost nothing.
            (&["/p"], &["/p/.envrc", "/p/.vscode"], &[]),
            (&["/p"], &["/p/.git/hooks", "/p/.git/config"], &["/p/.git"]),
            // Outside any writable path: the read-only tree holds the parents.
            (&["/p"], &["/h/.config/sandgate"], &[]),
            (
                &["/h"],
                &["/h/.config/sandgate", "/h/.local/share/sandgate", "/h/.ssh"],
                &["/h/.config", "/h/.local", "/h/.local/share"],
            ),
            // Under a hidden directory: out of reach, nothing to pin (it is not there inside).
            (&["/h"], &["/h/.ssh/config", "/h/.local/share/keyrings/k"], &[]),
            // Nested writable paths: from the outermost one, skipping the inner one (a mount).
            (&["/h", "/h/a/p"], &["/h/a/p/.git/hooks"], &["/h/a", "/h/a/p/.git"]),
            (&["/h/a/p", "/h"], &["/h/a/p/.git/hooks"], &["/h/a", "/h/a/p/.git"]),
            // A writable path that is a prefix by name only is not a parent.
            (&["/h/a"], &["/h/ab/c/d"], &[]),
        ];
        for (writable, targets, want) in table {
            let targets: Vec<PathBuf> = v(targets);
            let refs: Vec<&Path> = targets.iter().map(PathBuf::as_path).collect();
            let got = pins(&v(writable), &refs, &hidden);
            assert_eq!(got, v(want), "writable {writable:?} targets {targets:?}");
        }
    }
}
