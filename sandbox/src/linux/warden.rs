//! The top of each writable directory: existing protected entries (see [`crate::TopLevel`]) are
//! bound read-only like any protected path; new ones are taken away by a warden outside the
//! sandbox, as soon as they appear and once more after the sandbox has ended.
//!
//! Why a warden, and not something the kernel enforces inside: no kernel mechanism refuses the
//! creation of some names in a directory while allowing others. Landlock grants creation per
//! directory hierarchy; seccomp cannot read path arguments (its user notification can, but the
//! path is read from the command's memory after the check could be raced, and doing every
//! creating call on the command's behalf — `openat`, `mkdirat`, `mknodat`, `symlinkat`,
//! `linkat`, `renameat2`, `bind` of unix sockets — is a second kernel interface to get right);
//! fanotify has no permission event for creation; an overlay or a read-only top with writable
//! entries bound back would refuse `target/`, `node_modules/` and `sed -i` temporaries too.
//! Placeholders (empty read-only files, see `placeholder`) are one name short by construction and
//! show up in `git status`.
//!
//! So the rule is enforced by outcome, not by refusal:
//! - before the sandbox starts, the launcher notes every entry at the top of each writable
//!   directory (name, device, inode) and opens an inotify watch on the directory;
//! - a warden process (forked by the launcher, outside every namespace of the sandbox) wakes on
//!   each creation or rename into the directory, lists it, and moves every protected entry that
//!   was not there at launch (same name and inode) into the quarantine (one directory per
//!   sandbox under sandgate's data directory, which no sandbox can see), telling the user on
//!   stderr;
//! - when the sandbox's init has ended — the pid namespace guarantees that nothing inside is
//!   left — it lists every directory once more and moves what is still there, and the launcher
//!   does the same again before it returns (in case the warden could not run). Nothing planted
//!   there is in place for a tool started on the host after the launcher returned.
//!
//! A directory moved into the quarantine while the command still holds a descriptor on it lies
//! outside the bind mount the command reached it through: the kernel refuses `..` from such a
//! disconnected path (`ENOENT`), so the descriptor does not lead to the quarantine or to the
//! store beside it (tested).
//!
//! The window: while the command runs, a new protected entry exists from its creation until the
//! warden has moved it (the time for the kernel to wake the warden and for one directory
//! listing). A host-side tool started in that window in that directory could read it; the README
//! says so. An entry the user's own tools create there during the run is taken away too (inotify
//! does not say who made it); it is in the quarantine.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::placeholder::Placeholder;
use super::sys;
use crate::TopLevel;
use crate::top_level::QUARANTINED_PREFIX;

/// One watched directory and what was at its top at launch.
#[derive(Debug)]
struct Root {
    path: PathBuf,
    known: HashSet<(OsString, u64, u64)>,
}

/// The rule, the directories it applies to, and the watch on them.
#[derive(Debug)]
pub struct Warden {
    rule: TopLevel,
    id: String,
    roots: Vec<Root>,
    inotify: Option<nix::sys::inotify::Inotify>,
    taken: usize,
}

/// Closing an inotify instance waits for an SRCU grace period in the kernel (fsnotify group
/// teardown): ~10-13 ms measured at the end of every `build` launch. The launcher is about to
/// exit, and a descriptor closed by the exit is released asynchronously (delayed fput), so the
/// warden's descriptor is left for the exit to close.
impl Drop for Warden {
    fn drop(&mut self) {
        if let Some(fd) = self.inotify.take() {
            std::mem::forget(fd);
        }
    }
}

/// What inotify reports: entries created in or moved into a watched directory, and the
/// directory's own disappearance (which ends the watch).
const EVENTS: u32 = libc::IN_CREATE | libc::IN_MOVED_TO | libc::IN_ONLYDIR | libc::IN_DONT_FOLLOW;

fn entries(dir: &Path) -> Vec<(OsString, u64, u64)> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    rd.flatten()
        .filter_map(|e| {
            // DirEntry::metadata does not follow a symlink.
            let m = e.metadata().ok()?;
            Some((e.file_name(), m.dev(), m.ino()))
        })
        .collect()
}

/// Whether `p` (its directory maybe not canonical) names the canonical `path`.
fn same_entry(p: &Path, path: &Path) -> bool {
    let canonical = p.parent().and_then(|d| d.canonicalize().ok()).zip(p.file_name());
    p == path || canonical.is_some_and(|(d, n)| d.join(n) == path)
}

/// The command owns the writable directory and may `chmod 000` it, which would hide its entries
/// from a warden without `CAP_DAC_OVERRIDE`: give the owner its access back first.
fn open_up(dir: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let Ok(m) = std::fs::symlink_metadata(dir) else { return };
    let mode = m.permissions().mode() & 0o7777;
    if m.is_dir() && mode & 0o700 != 0o700 {
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o700));
    }
}

impl Warden {
    /// Notes what is at the top of each of `roots` (canonical directories) and starts watching
    /// them. A watch that cannot be made (inotify limits) leaves only the sweeps at the end.
    pub fn prepare(rule: &TopLevel, id: &str, roots: &[PathBuf]) -> Warden {
        let inotify = sys::inotify_init().ok();
        let mut watched = Vec::new();
        for path in roots {
            if let Some(fd) = &inotify
                && let Err(e) = sys::inotify_add_watch(fd, path, EVENTS)
            {
                eprintln!(
                    "sandgate: cannot watch {} ({e}); new entries at its top are taken away \
                     only when the command ends",
                    path.display()
                );
            }
            let known = entries(path).into_iter().collect();
            watched.push(Root { path: path.clone(), known });
        }
        Warden { rule: rule.clone(), id: id.to_owned(), roots: watched, inotify, taken: 0 }
    }

    /// Protected entries present at launch, to be bound read-only. `.git` is left to the git
    /// rules of the caller (it is still noted: a `.git` made during the run is taken away).
    pub fn existing_protected(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for root in &self.roots {
            for (name, _, _) in &root.known {
                if name != ".git" && self.rule.protects(name) {
                    out.push(root.path.join(name));
                }
            }
        }
        out.sort();
        out
    }

    /// Whether `path` is an entry at the top of a watched directory that the rule protects (a
    /// missing one needs no placeholder: it is taken away if it appears).
    pub fn covers(&self, path: &Path) -> bool {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else { return false };
        self.roots.iter().any(|r| r.path == parent)
            && self.rule.protects(name)
            && !self.rule.placeholders.iter().any(|p| same_entry(p, path))
    }

    /// Counts `path` (a placeholder the launcher made after [`Warden::prepare`]) as there at
    /// launch, so that it is not taken away.
    pub fn note(&mut self, path: &Path) {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else { return };
        let Ok(m) = std::fs::symlink_metadata(path) else { return };
        for root in self.roots.iter_mut().filter(|r| r.path == parent) {
            root.known.insert((name.to_os_string(), m.dev(), m.ino()));
        }
    }

    /// Closes this process's copy of the watch once the warden process holds one: not the last
    /// reference, so the close is cheap (see [`start`]).
    pub fn release_watch(&mut self) {
        drop(self.inotify.take());
    }

    /// The inotify descriptor (kept open by the warden process).
    pub fn raw_fd(&self) -> Option<RawFd> {
        self.inotify.as_ref().map(|i| i.as_fd().as_raw_fd())
    }

    /// Reads every pending event (they only say "look again").
    fn drain(&self) {
        let Some(fd) = &self.inotify else { return };
        let mut buf = [0u8; 8192];
        while matches!(sys::read(fd.as_fd().as_raw_fd(), &mut buf), Ok(n) if n > 0) {}
    }

    /// Lists every watched directory and takes away each protected entry that was not there at
    /// launch. Returns how many were taken.
    pub fn sweep(&mut self) -> usize {
        self.drain();
        let mut n = 0;
        for i in 0..self.roots.len() {
            let root = &self.roots[i];
            open_up(&root.path);
            let new: Vec<OsString> = entries(&root.path)
                .into_iter()
                .filter(|e| !root.known.contains(e) && self.rule.protects(&e.0))
                .map(|(name, _, _)| name)
                .collect();
            let path = root.path.clone();
            for name in new {
                self.take_away(&path, &name);
                n += 1;
            }
        }
        n
    }

    /// Moves `root/name` out of the way: into the quarantine, or (another filesystem, or a
    /// directory the caller may not move) renamed in place to a name no tool reads.
    fn take_away(&mut self, root: &Path, name: &OsStr) {
        self.taken += 1;
        let from = root.join(name);
        let label = format!("{}-{}", self.taken, name.to_string_lossy());
        let mut to = None;
        if let Some(q) = &self.rule.quarantine {
            let dir = q.join(&self.id);
            let made = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir);
            if made.is_ok() {
                let dest = dir.join(&label);
                match sys::rename_noreplace(&from, &dest) {
                    Ok(()) => to = Some(dest),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return, // gone already
                    Err(_) => {}
                }
            }
        }
        if to.is_none() {
            let dest = root.join(format!("{QUARANTINED_PREFIX}{}-{label}", self.id));
            match sys::rename_noreplace(&from, &dest) {
                Ok(()) => to = Some(dest),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                Err(e) => {
                    eprintln!("sandgate: could not take away {}: {e}", from.display());
                    return;
                }
            }
        }
        if let Some(to) = to {
            // One write, so that it is not interleaved with the command's own output.
            let msg = format!(
                "sandgate: took away {} (new at the top of a writable directory, where a \
                 dot-entry or a tool's start-up file can run code outside later); it is now \
                 {}. To let builds write it: [filesystem] writable_dotfiles = [{:?}]\n",
                from.display(),
                to.display(),
                name.as_bytes().escape_ascii().to_string(),
            );
            let _ = io::Write::write_all(&mut io::stderr(), msg.as_bytes());
        }
    }
}

/// Forks the warden: it takes new protected entries away while the process behind `pidfd` (the
/// sandbox's init) runs, sweeps once more when it has ended, then releases `placeholders`.
/// Returns its pid (`None`: it could not be started; the launcher sweeps and releases them
/// itself). Single-threaded callers only.
pub fn start(
    pidfd: &OwnedFd,
    warden: Option<&mut Warden>,
    placeholders: &[Placeholder],
) -> Option<(libc::pid_t, std::io::PipeReader)> {
    // The warden says "done" on this pipe after its last sweep, before it exits: its exit closes
    // the last reference to the inotify instance, which waits for an SRCU grace period in the
    // kernel (~13-22 ms measured), and the launcher need not wait for that.
    let (done_r, done_w) = std::io::pipe().ok()?;
    match sys::fork() {
        Ok(Some(pid)) => {
            drop(done_w);
            Some((pid, done_r))
        }
        Ok(None) => {
            drop(done_r);
            // Out of the caller's session (no terminal signals), holding nothing but the pidfd,
            // the watch, the locks and stderr for its notices.
            let _ = sys::setsid();
            let mut keep: Vec<RawFd> = placeholders.iter().map(Placeholder::raw_fd).collect();
            keep.push(pidfd.as_raw_fd());
            keep.push(2);
            keep.push(done_w.as_raw_fd());
            let watch = warden.as_ref().and_then(|w| w.raw_fd());
            keep.extend(watch);
            sys::close_all_except(&keep);
            let mut warden = warden;
            loop {
                let mut fds = [
                    libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                    libc::pollfd { fd: watch.unwrap_or(-1), events: libc::POLLIN, revents: 0 },
                ];
                match sys::poll(&mut fds, -1) {
                    Ok(_) if fds[0].revents != 0 => break,
                    Ok(_) => {
                        if let Some(w) = warden.as_deref_mut() {
                            w.sweep();
                        }
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                    Err(_) => sys::exit_now(1), // the launcher sweeps and releases after init
                }
            }
            // pid 1 of a pid namespace is reported ended only after every process in it is gone.
            if let Some(w) = warden {
                w.sweep();
            }
            for p in placeholders {
                p.release();
            }
            let mut done_w = done_w;
            let _ = io::Write::write_all(&mut done_w, b"done");
            sys::exit_now(0)
        }
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(quarantine: Option<PathBuf>) -> TopLevel {
        TopLevel {
            writable: vec![".venv".into()],
            protected: vec!["rust-toolchain.toml".into()],
            quarantine,
            placeholders: vec![PathBuf::from("/nonexistent/.bashrc")],
        }
    }

    #[test]
    fn new_protected_entries_are_taken_away_and_known_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let q = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join(".envrc"), "old").unwrap();
        std::fs::create_dir(root.join("src")).unwrap();
        std::fs::write(root.join("src/config.toml"), "[build]").unwrap();
        let mut w =
            Warden::prepare(&rule(Some(q.path().into())), "sg-t", std::slice::from_ref(&root));
        assert_eq!(w.existing_protected(), vec![root.join(".envrc")]);
        assert!(w.covers(&root.join(".cargo")) && !w.covers(&root.join("target")));
        assert!(!w.covers(&root.join("src/.cargo")), "only the top");

        std::fs::create_dir_all(root.join(".cargo")).unwrap();
        std::fs::write(root.join(".cargo/config.toml"), "x").unwrap();
        std::fs::write(root.join("rust-toolchain.toml"), "x").unwrap();
        std::fs::create_dir(root.join(".venv")).unwrap();
        std::fs::create_dir(root.join("target")).unwrap();
        // A known directory renamed to a protected name is new under that name.
        std::fs::rename(root.join("src"), root.join(".cursor")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join(".zzz")).unwrap();
        assert_eq!(w.sweep(), 4);
        for gone in [".cargo", "rust-toolchain.toml", ".cursor", ".zzz"] {
            assert!(std::fs::symlink_metadata(root.join(gone)).is_err(), "{gone}");
        }
        for kept in [".envrc", ".venv", "target"] {
            assert!(root.join(kept).exists(), "{kept}");
        }
        let moved = q.path().join("sg-t");
        let names: Vec<String> = std::fs::read_dir(&moved)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 4, "{names:?}");
        assert!(
            std::fs::read_link(moved.join(names.iter().find(|n| n.ends_with(".zzz")).unwrap()))
                .is_ok(),
            "a symlink is moved, not followed"
        );
        assert_eq!(w.sweep(), 0, "nothing left");
    }

    #[test]
    fn a_directory_closed_by_chmod_is_opened_again() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let mut w = Warden::prepare(&rule(None), "sg-w", std::slice::from_ref(&root));
        std::fs::create_dir(root.join(".cargo")).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o000)).unwrap();
        assert_eq!(w.sweep(), 1);
        assert!(!root.join(".cargo").exists());
    }

    #[test]
    fn without_a_quarantine_entries_are_renamed_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let mut w = Warden::prepare(&rule(None), "sg-u", std::slice::from_ref(&root));
        std::fs::write(root.join(".pre-commit-config.yaml"), "repos: []").unwrap();
        assert_eq!(w.sweep(), 1);
        let left: Vec<String> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, vec![format!("{QUARANTINED_PREFIX}sg-u-1-.pre-commit-config.yaml")]);
        assert_eq!(w.sweep(), 0, "a quarantined name is not taken again");
    }

    #[test]
    fn the_watch_wakes_on_new_entries_only_at_the_top() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        let w = Warden::prepare(&rule(None), "sg-v", std::slice::from_ref(&root));
        let fd = w.raw_fd().expect("inotify");
        let ready = |fd| {
            let mut p = [libc::pollfd { fd, events: libc::POLLIN, revents: 0 }];
            sys::poll(&mut p, 0).unwrap() > 0
        };
        std::fs::write(root.join("sub/.envrc"), "x").unwrap();
        assert!(!ready(fd), "deeper entries do not wake it");
        std::fs::write(root.join(".envrc"), "x").unwrap();
        assert!(ready(fd));
        w.drain();
        assert!(!ready(fd));
    }
}
