//! The writable directories while the command runs: existing protected entries (see
//! [`crate::TopLevel`]) are bound read-only like any protected path; new ones are taken away by a
//! warden outside the sandbox, as soon as they appear and once more after the sandbox has ended;
//! and what changed among the files host tools execute or obey is told at the end.
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
//!   directory (name, device, inode) and opens one inotify instance watching the tops and every
//!   directory below them that the launch's scan read ([`crate::tree`]);
//! - a warden process (forked by the launcher, outside every namespace of the sandbox) wakes on
//!   each event. At a top, it lists the directory and moves every protected entry that was not
//!   there at launch (same name and inode) into the quarantine (one directory per sandbox under
//!   sandgate's data directory, which no sandbox can see), telling the user on stderr. Below
//!   the tops it goes by the events themselves: a new entry (made, renamed or linked there)
//!   whose name [`crate::TopLevel::below`] protects is moved the same way; a directory git
//!   would now take as a repository (`HEAD` with `objects` and `refs`) loses its `HEAD`; a new
//!   directory is watched in turn (and listed, for what was made in it before the watch);
//! - the events also say which files that [`crate::TopLevel::review`] names changed: the
//!   launcher prints them in one line at the end (the names only), with what was taken away;
//! - when the sandbox's init has ended — the pid namespace guarantees that nothing inside is
//!   left — it handles the last events and lists every top once more, and the launcher does the
//!   same again before it returns (in case the warden could not run). Nothing planted there is
//!   in place for a tool started on the host after the launcher returned. When events were lost
//!   (the queue overflowed, a watch could not be made, the warden died), every directory is
//!   read again instead.
//!
//! A directory moved into the quarantine while the command still holds a descriptor on it lies
//! outside the bind mount the command reached it through: the kernel refuses `..` from such a
//! disconnected path (`ENOENT`), so the descriptor does not lead to the quarantine or to the
//! store beside it (tested).
//!
//! The window: while the command runs, a new protected entry exists from its creation until the
//! warden has moved it (the time for the kernel to wake the warden and for one directory
//! listing). A host-side tool started in that window in that directory could read it;
//! docs/threat-model/writable-directories.md says so. An entry the user's own tools create there during the run is taken away too (inotify
//! does not say who made it); it is in the quarantine.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::placeholder::Placeholder;
use super::sys;
use crate::TopLevel;
use crate::top_level::{Below, QUARANTINED_PREFIX};
use crate::tree::{Kind, ReadOnly, Repository, Scan};

/// One watched top and what was at its top at launch.
#[derive(Debug)]
struct Root {
    path: PathBuf,
    known: Known,
    /// Whether every entry made here shows as an event of the warden's watch on it: watched,
    /// on a filesystem whose changes are all made through this kernel (see
    /// [`Warden::tops_told`]).
    told: bool,
}

/// The entries of a directory as (name, inode), on the directory's device: what was at a top at
/// launch. Kept as the listing gave them, sorted, in one buffer (a top may hold thousands, and
/// this is on every launch's path), plus those noted since ([`Warden::note`]).
#[derive(Debug, Default)]
struct Known {
    dev: u64,
    names: Vec<u8>,
    /// Where each name is in `names`, and its inode, sorted by name.
    at: Vec<(u32, u32, u64)>,
    noted: Vec<(OsString, u64, u64)>,
}

impl Known {
    /// What `dir` holds now (nothing, when it cannot be read).
    fn list(dir: &Path) -> Known {
        let mut k = Known::default();
        let Ok(d) = std::fs::File::open(dir) else { return k };
        let Ok(m) = d.metadata() else { return k };
        k.dev = m.dev();
        let _ = sys::each_dirent(d.as_raw_fd(), |name, _, ino| k.push(name, ino));
        k.sorted()
    }

    fn push(&mut self, name: &[u8], ino: u64) {
        self.at.push((self.names.len() as u32, name.len() as u32, ino));
        self.names.extend_from_slice(name);
    }

    fn sorted(mut self) -> Known {
        let names = &self.names;
        self.at.sort_unstable_by(|a, b| {
            names[a.0 as usize..][..a.1 as usize].cmp(&names[b.0 as usize..][..b.1 as usize])
        });
        self
    }

    /// What `dir` held at launch as the daemon's index listed it: `names` with their inodes
    /// (only those the warden asks about: see `Handed::tops`), on `dir`'s device.
    fn given(dir: &Path, names: &[(Vec<u8>, u64)]) -> Known {
        let mut k = Known::default();
        let Ok(m) = std::fs::metadata(dir) else { return k };
        k.dev = m.dev();
        for (name, ino) in names {
            k.push(name, *ino);
        }
        k.sorted()
    }

    fn name(&self, (from, len, _): &(u32, u32, u64)) -> &[u8] {
        &self.names[*from as usize..][..*len as usize]
    }

    /// Whether `name` (on `dev`, inode `ino`) was there.
    fn contains(&self, name: &[u8], dev: u64, ino: u64) -> bool {
        let listed = dev == self.dev
            && self
                .at
                .binary_search_by(|e| self.name(e).cmp(name))
                .is_ok_and(|i| self.at[i].2 == ino);
        listed || self.noted.iter().any(|(n, d, i)| n.as_bytes() == name && *d == dev && *i == ino)
    }

    /// Forgets `name`: it went from the top since launch (a new entry of that name and inode,
    /// a hard link of a file the command holds, is new).
    fn forget(&mut self, name: &[u8]) {
        if let Ok(i) = self.at.binary_search_by(|e| self.name(e).cmp(name)) {
            self.at.remove(i);
        }
        self.noted.retain(|n| n.0.as_bytes() != name);
    }

    /// Every name there.
    fn names(&self) -> impl Iterator<Item = &[u8]> {
        self.at.iter().map(|e| self.name(e)).chain(self.noted.iter().map(|n| n.0.as_bytes()))
    }
}

/// The watches of an instance lent by the daemon, sorted: thousands, taken at every launch
/// (a sorted list is made in a tenth of the time of a hash set, and they come nearly sorted).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Lent(Vec<i32>);

impl Lent {
    fn of(mut wds: Vec<i32>) -> Lent {
        wds.sort_unstable();
        wds.dedup();
        Lent(wds)
    }

    fn contains(&self, wd: &i32) -> bool {
        self.0.binary_search(wd).is_ok()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Something the warden saw change in a writable directory, for the line at the end.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Change {
    /// Relative to its writable path.
    pub path: PathBuf,
    /// Taken away (a new protected entry), not merely changed (a review file).
    pub taken: bool,
}

/// The rule, the directories it applies to, and the watch on them.
#[derive(Debug)]
pub struct Warden {
    rule: TopLevel,
    below: Below,
    id: String,
    roots: Vec<Root>,
    inotify: Option<nix::sys::inotify::Inotify>,
    /// Watch descriptor: the directory it watches, and whether that is a top.
    watches: HashMap<i32, (PathBuf, bool)>,
    /// Entries below the tops that were there at launch (the scan's protected entries and
    /// repositories, placeholders made for the launch): never taken away.
    known: HashSet<PathBuf>,
    /// Directories the launch's scan did not read: not read by a sweep either (they are
    /// read-only for the launch).
    unread: Vec<PathBuf>,
    /// What the launch made read-only below the tops (the scan's protected entries): a link
    /// leading there opens no way in.
    read_only: Vec<PathBuf>,
    /// Review files watched by their inode (watch descriptor: the path): a write by any path
    /// (a hard link made in build output) is reported under this name.
    files: HashMap<i32, PathBuf>,
    /// Symbolic links there at launch (the scan's): judged as the launch judged them, and again
    /// at the end.
    known_links: HashSet<PathBuf>,
    /// Symbolic links left in place (there at launch, or made during the run and leading
    /// nowhere unwatched then): judged again on the last sweep, when the command can no longer
    /// change where they lead.
    links: BTreeSet<PathBuf>,
    /// Watches on the directories of unwatched build output on the way to where a link there at
    /// launch leads (a build artifact, or nothing yet): an entry made there (the artifact made
    /// a directory) judges the links again at once, not only on the last sweep.
    guards: HashMap<i32, PathBuf>,
    /// Where those links lead.
    guarded: Vec<PathBuf>,
    /// The scan's memory for the next launch, written by the warden process once it runs.
    memory: Option<std::sync::Arc<crate::tree::Memory>>,
    taken: usize,
    changes: BTreeSet<Change>,
    /// Events were lost (the queue overflowed, a directory could not be watched): the last
    /// sweep reads every directory below the tops again.
    lost: bool,
    /// The watches below the tops were made ahead by the daemon (`tree::ahead`).
    ahead: bool,
    /// Those watches (the directories, and the watch of each), put into `watches` when first
    /// needed ([`Warden::settle`]): by the warden process, off the launch's path.
    unsettled: Option<std::sync::Arc<crate::tree::Handed>>,
    /// The watches the daemon made ahead (the tops' with them): the instance is given back to
    /// the daemon with these and no other ([`Warden::give_back`]).
    lent: Lent,
    /// Where to give it back: the connection the launcher asked on.
    back: Option<OwnedFd>,
    /// An event was read that may have changed what one of those watches' paths names (the
    /// daemon's own judgement, `tree::ahead`), or one of them was watched again: the instance
    /// is not given back.
    spoiled: bool,
    /// The paths of the lent watches ([`Warden::judge_lent`]), once needed.
    lent_paths: Option<HashSet<PathBuf>>,
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

/// What inotify reports for every watched directory: entries created in it, moved into or out
/// of it; the watch is made only on a directory, not through a symbolic link. A build writing
/// thousands of files there wakes the warden once for each; their writes do not.
const EVENTS_NEW: u32 = crate::tree::DIR_EVENTS_NEW;

/// For a top, and a directory holding files the rule reviews: also their writes (closed after
/// writing), changes of metadata (`chmod +x`) and removals.
const EVENTS: u32 = crate::tree::DIR_EVENTS;

/// For a review file itself (its inode, whatever path reaches it): writes and changes of
/// metadata (a new hard link to it counts too), and changes made with no write closed
/// (`truncate(2)` by path, `fallocate` punching a hole): those raise only `IN_MODIFY` (a
/// red-team pass cut a `Makefile` short unnamed). Its writes wake the warden once each, but
/// review files are few and rarely written.
const FILE_EVENTS: u32 =
    libc::IN_CLOSE_WRITE | libc::IN_MODIFY | libc::IN_ATTRIB | libc::IN_DONT_FOLLOW;

/// One inotify event.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Event {
    wd: i32,
    mask: u32,
    name: Vec<u8>,
}

/// The events in `buf` (what one `read` of an inotify descriptor returned).
fn parse_events(buf: &[u8]) -> Vec<Event> {
    crate::tree::parse_inotify(buf)
        .into_iter()
        .map(|(wd, mask, name)| Event { wd, mask, name })
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

/// Whether the directory `dir` has git's shape (see [`crate::tree`]).
#[cfg(test)]
fn git_shaped(dir: &Path) -> bool {
    let has = |n: &str| std::fs::symlink_metadata(dir.join(n)).is_ok();
    has("HEAD") && (has("objects") && has("refs") || has("commondir"))
}

/// Whether `dir` has git's shape but for its `HEAD` (just taken away).
fn git_shaped_but_head(dir: &Path) -> bool {
    let has = |n: &str| std::fs::symlink_metadata(dir.join(n)).is_ok();
    has("objects") && has("refs") || has("commondir")
}

/// Names whose arrival can give a directory git's shape.
fn shapes_git(name: &[u8]) -> bool {
    matches!(name, b"HEAD" | b"objects" | b"refs" | b"commondir")
}

impl Warden {
    /// Notes what is at the top of each of `roots` (canonical directories) and starts watching
    /// them and the directories below them that `scan` read. A watch that cannot be made
    /// (inotify limits) leaves the sweeps at the end.
    pub fn prepare(rule: &TopLevel, id: &str, roots: &[PathBuf], scan: &Scan) -> Warden {
        // The watches made ahead by the daemon (see `tree::ahead`): the same instance this
        // would make, with every directory of the scan watched already.
        let handed = scan.ahead.clone();
        let taken = handed.as_ref().and_then(|h| h.take_fd());
        let made_ahead = taken.is_some();
        let inotify: Option<nix::sys::inotify::Inotify> = match taken {
            Some(fd) => Some(sys::inotify_from(fd)),
            None => sys::inotify_init().ok(),
        };
        let mut w = Warden {
            rule: rule.clone(),
            below: Below::new(rule),
            id: id.to_owned(),
            roots: Vec::new(),
            inotify,
            watches: HashMap::new(),
            known: scan.protected.iter().cloned().collect(),
            unread: scan.unread.iter().map(|u| u.path.clone()).collect(),
            read_only: scan.protected.clone(),
            files: HashMap::new(),
            known_links: scan.links.iter().cloned().collect(),
            links: scan.links.iter().cloned().collect(),
            guards: HashMap::new(),
            guarded: Vec::new(),
            memory: scan.memory.clone(),
            taken: 0,
            changes: BTreeSet::new(),
            lost: false,
            ahead: false,
            unsettled: None,
            lent: Lent::default(),
            back: None,
            spoiled: false,
            lent_paths: None,
        };
        w.known.extend(scan.repositories.iter().map(|r| match r {
            Repository::DotGit(p) | Repository::GitDir(p) => p.clone(),
        }));
        let fd = w.raw_fd();
        for path in roots {
            let watched = match fd.map(|fd| sys::inotify_watch(fd, path, EVENTS)) {
                Some(Ok(wd)) => {
                    w.watches.insert(wd, (path.clone(), true));
                    true
                }
                Some(Err(e)) => {
                    eprintln!(
                        "sandgate: cannot watch {} ({e}); new entries at its top are taken \
                         away only when the command ends",
                        path.display()
                    );
                    false
                }
                None => false,
            };
            let told = watched && crate::tree::trusted_fs(path);
            // (With watches made ahead, what the daemon's index listed: see `Handed::tops`.)
            let given = handed
                .as_ref()
                .filter(|_| made_ahead)
                .and_then(|h| h.tops.iter().find(|(root, _)| root == path).map(|(_, names)| names));
            let known = match given {
                Some(names) => Known::given(path, names),
                None => Known::list(path),
            };
            w.roots.push(Root { path: path.clone(), known, told });
        }
        let mut failed = 0;
        let reviewed: HashSet<&PathBuf> = scan.reviewed.iter().collect();
        w.ahead = made_ahead;
        // (Handed but taken already, a second warden of the same launch: it watches for
        // itself, the directories read back from the answer.)
        let read_back;
        let placed: &[PathBuf] = match handed {
            Some(h) if made_ahead => {
                w.lent = Lent::of(h.wds.iter().copied().chain(w.watches.keys().copied()).collect());
                w.back = h.take_back();
                w.unsettled = Some(h);
                &[]
            }
            Some(h) if scan.dirs.is_empty() => {
                read_back = h.dirs().unwrap_or_default();
                w.lost |= read_back.len() != h.wds.len();
                &read_back
            }
            _ => &scan.dirs,
        };
        for dir in placed.iter().filter(|d| !roots.contains(d)) {
            let mask = if reviewed.contains(dir) { EVENTS } else { EVENTS_NEW };
            match fd.map(|fd| sys::inotify_watch(fd, dir, mask)) {
                Some(Ok(wd)) => {
                    w.watches.insert(wd, (dir.clone(), false));
                }
                // Gone since the scan: nothing to watch.
                Some(Err(e)) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {}
                Some(Err(_)) => failed += 1,
                None => {}
            }
        }
        w.guard_links();
        for file in &scan.review_files {
            // (Only an inode not watched yet: a directory named as a review file, read by the
            // scan and watched above, would take this mask in place of its own and tell no new
            // entry. `EEXIST` then, and it stays a directory watched.)
            match fd.map(|fd| sys::inotify_watch(fd, file, FILE_EVENTS | libc::IN_MASK_CREATE)) {
                Some(Ok(wd)) => {
                    w.files.insert(wd, file.clone());
                }
                Some(Err(e))
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ENOENT | libc::ENOTDIR | libc::EEXIST)
                    ) => {}
                Some(Err(_)) => failed += 1,
                None => {}
            }
        }
        // (Counted as read: `scan.dirs` is empty when watches were handed.)
        let read = scan.dirs_read();
        if failed > 0 || (fd.is_none() && read > 0) {
            w.lost = true;
            eprintln!(
                "sandgate: cannot watch {} of {} directories below the writable paths (inotify: \
                 fs.inotify.max_user_watches); new protected entries there are taken away only \
                 when the command ends",
                if fd.is_none() { read } else { failed },
                read
            );
        }
        w
    }

    /// Puts the watches made ahead into the map (tops excepted: theirs are the warden's own).
    pub fn settle(&mut self) {
        let Some(handed) = self.unsettled.take() else { return };
        let Some(dirs) = handed.dirs() else {
            self.lost = true; // (not read back: every directory is read again at the end)
            return;
        };
        self.watches.reserve(dirs.len());
        for (dir, wd) in dirs.into_iter().zip(handed.wds.iter().copied()) {
            if !self.roots.iter().any(|r| r.path == dir) {
                self.watches.entry(wd).or_insert((dir, false));
            }
        }
    }

    /// Whether the watches below the tops were made ahead by the daemon.
    pub fn watched_ahead(&self) -> bool {
        self.ahead
    }

    /// Protected entries present at launch at the tops, to be bound read-only. `.git` is left to
    /// the git rules of the caller (it is still noted: a `.git` made during the run is taken
    /// away). Those below the tops are the scan's.
    pub fn existing_protected(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for root in &self.roots {
            for name in root.known.names() {
                if name != b".git" && self.below.protects_top(name) {
                    out.push(root.path.join(OsStr::from_bytes(name)));
                }
            }
        }
        out.sort();
        out
    }

    /// Whether `path` is an entry at the top of a watched directory that the rule protects (a
    /// missing one needs no placeholder: it is taken away if it appears). Below the tops a
    /// missing protected path (configured, or one the git wall names) still gets its
    /// placeholder: no window at all, where the warden's taking away has one.
    pub fn covers(&self, path: &Path) -> bool {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else { return false };
        self.roots.iter().any(|r| r.path == parent)
            && self.below.protects_top(name.as_bytes())
            && !self.rule.placeholders.iter().any(|p| same_entry(p, path))
    }

    /// Counts `path` (a placeholder the launcher made after [`Warden::prepare`]) as there at
    /// launch, so that it is not taken away.
    pub fn note(&mut self, path: &Path) {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else { return };
        let Ok(m) = std::fs::symlink_metadata(path) else { return };
        for root in self.roots.iter_mut().filter(|r| r.path == parent) {
            root.known.noted.push((name.to_os_string(), m.dev(), m.ino()));
        }
        self.known.insert(path.to_path_buf());
    }

    /// Closes this process's copy of the watch once the warden process holds one: not the last
    /// reference, so the close is cheap (see [`start`]). (And of the connection it is given
    /// back on: the warden's.)
    pub fn release_watch(&mut self) {
        drop(self.inotify.take());
        drop(self.back.take());
    }

    /// Gives the watches made ahead back to the daemon, when nothing read since they were
    /// handed may have changed what they watch (see [`Warden::spoiled`]): the watches this
    /// warden added are removed first, and the daemon judges what came since at the next
    /// launch. Whether the daemon kept them (then its copy is the instance's last: this one's
    /// close is cheap). Call after the last sweep: nothing here reads the instance again.
    pub fn give_back(&mut self) -> bool {
        let Some(back) = self.back.take() else { return false };
        // A lent watch that is also a guard or a review file's carries their mask now (placed
        // by a path that reached it through a link on the way): not the one the daemon lent.
        let retaken = self.files.keys().chain(self.guards.keys()).any(|wd| self.lent.contains(wd));
        let Some(fd) = self.raw_fd().filter(|_| !self.spoiled && !self.lost && !retaken) else {
            return false; // (its end tells the daemon to let them go)
        };
        let added = self.watches.keys().chain(self.files.keys()).chain(self.guards.keys());
        for wd in added.copied().filter(|wd| !self.lent.contains(wd)).collect::<Vec<_>>() {
            sys::inotify_unwatch(fd, wd);
        }
        let mut conn = std::fs::File::from(back);
        if io::Write::write_all(&mut conn, &[crate::tree::GIVEN_BACK]).is_err() {
            return false;
        }
        let mut answer = [0u8; 1];
        // (Answered at once: the daemon waits on this connection.)
        let mut p = [libc::pollfd { fd: conn.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        matches!(sys::poll(&mut p, 2000), Ok(1))
            && matches!(io::Read::read(&mut conn, &mut answer), Ok(1))
            && answer[0] == crate::tree::KEPT
    }

    /// Notes an event read from the instance: the daemon's judgement of an instance made ahead
    /// (`tree::ahead::unsettles`), kept for the whole run. A directory made at a path watched
    /// ahead counts too: the one there before may have been removed with no event read (its
    /// parent, watched for new entries only, has no `IN_DELETE`; its own watch's `IN_IGNORED`
    /// comes only once nothing holds it, such as another launch's working directory there,
    /// maybe after the next launch relied on that watch).
    fn judge_lent(&mut self, ev: &Event) {
        if self.lent.is_empty() || self.spoiled {
            return;
        }
        let (mask, wd) = (ev.mask, ev.wd);
        let gone = libc::IN_IGNORED | libc::IN_UNMOUNT | libc::IN_DELETE_SELF | libc::IN_MOVE_SELF;
        let moved = libc::IN_MOVED_FROM | libc::IN_MOVED_TO | libc::IN_DELETE;
        let lent = self.lent.contains(&wd);
        if mask & libc::IN_Q_OVERFLOW != 0
            || lent && (mask & gone != 0 || mask & libc::IN_ISDIR != 0 && mask & moved != 0)
        {
            self.spoiled = true;
        }
        if lent && mask & libc::IN_ISDIR != 0 && mask & libc::IN_CREATE != 0 {
            let Some((dir, _)) = self.watches.get(&wd) else {
                self.spoiled = true; // (not settled: not known to be another path)
                return;
            };
            let path = dir.join(OsStr::from_bytes(&ev.name));
            let (lent, watches) = (&self.lent, &self.watches);
            // (Made once, on the first directory made in a lent one: rare outside build output.)
            let paths = self.lent_paths.get_or_insert_with(|| {
                watches
                    .iter()
                    .filter(|(wd, _)| lent.contains(wd))
                    .map(|(_, d)| d.0.clone())
                    .collect()
            });
            self.spoiled |= paths.contains(&path);
        }
    }

    /// The descriptors only the launcher and the warden process may hold: the instance, and
    /// the connection it is given back on (closed by the sandbox's init).
    pub fn launchers_fds(&self) -> Vec<RawFd> {
        self.raw_fd().into_iter().chain(self.back.as_ref().map(|b| b.as_raw_fd())).collect()
    }

    /// The inotify descriptor (kept open by the warden process).
    pub fn raw_fd(&self) -> Option<RawFd> {
        self.inotify.as_ref().map(|i| i.as_fd().as_raw_fd())
    }

    /// What was seen to change so far.
    pub fn changes(&self) -> &BTreeSet<Change> {
        &self.changes
    }

    /// Reads every pending event.
    fn drain(&self) -> Vec<Event> {
        let Some(fd) = self.raw_fd() else { return Vec::new() };
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = sys::read(fd, &mut buf) {
            if n == 0 {
                break;
            }
            out.extend(parse_events(&buf[..n]));
        }
        out
    }

    /// Handles every pending event, lists the tops (when an entry appeared at one or events
    /// were lost, or with `all` where their events may not have told everything: see
    /// [`Warden::tops_told`]), and reads every directory again when events were lost. With
    /// `all`, gives the tops' owner access back. Returns how many
    /// entries were taken away.
    fn sweep_with(&mut self, all: bool) -> usize {
        let before = self.taken;
        let events = self.drain();
        let top = self.handle(&events);
        // (A top the command left closed, `chmod 000`, is opened again on the last turn: no
        // event of an entry says so, and it is the user's directory.)
        if all {
            for r in &self.roots {
                open_up(&r.path);
            }
        }
        // (On the last turn, the tops are listed again only where their events may not have
        // told everything: a listing of thousands of entries the launcher waits for. A loss is
        // listed on the turn that reads it, whichever: reading everything below ends it, and a
        // top entry whose event it dropped would be told by no later turn.)
        if top || self.lost || all && !self.tops_told() {
            self.sweep_tops();
        }
        if self.lost {
            self.sweep_below();
        }
        if all {
            let links: Vec<PathBuf> = std::mem::take(&mut self.links).into_iter().collect();
            self.check_links(links);
        }
        self.taken - before
    }

    /// Handles every pending event and lists every top: what the warden does on its last turn.
    /// Returns how many entries were taken away.
    pub fn sweep(&mut self) -> usize {
        self.sweep_with(true)
    }

    /// [`Warden::sweep`] with every event counted as lost: what the launcher does when the
    /// warden could not finish (its watch is closed in the launcher, so nothing tells what
    /// changed below the tops).
    pub fn sweep_everything(&mut self) -> usize {
        self.lost = true;
        self.sweep_with(true)
    }

    /// The events: new entries below the tops taken away, new directories watched, review
    /// files noted. Whether an entry appeared at a top (to be listed).
    fn handle(&mut self, events: &[Event]) -> bool {
        if !events.is_empty() {
            self.settle();
        }
        let mut top = false;
        // An entry made on the way to where a link there at launch leads: judge them again.
        let mut relink = false;
        for ev in events {
            self.judge_lent(ev);
            if ev.mask & libc::IN_Q_OVERFLOW != 0 {
                self.lost = true;
                continue;
            }
            if ev.mask & libc::IN_IGNORED != 0 {
                self.watches.remove(&ev.wd);
                self.files.remove(&ev.wd);
                self.guards.remove(&ev.wd);
                continue;
            }
            if self.guards.contains_key(&ev.wd) {
                relink = true;
                continue;
            }
            if let Some(file) = self.files.get(&ev.wd) {
                let file = file.clone();
                self.changed(&file, false);
                continue;
            }
            let Some((dir, is_top)) = self.watches.get(&ev.wd) else { continue };
            if ev.name.is_empty() {
                continue;
            }
            let (dir, is_top) = (dir.clone(), *is_top);
            let name = OsStr::from_bytes(&ev.name);
            let is_dir = ev.mask & libc::IN_ISDIR != 0;
            let new = ev.mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0;
            // An entry there at launch that went (another launch's warden took it away, the
            // host removed it; one bound read-only cannot go from inside) is not there at
            // launch any more: the command could link its own file under that name with that
            // inode again (red team of issue 31).
            if is_top && ev.mask & (libc::IN_DELETE | libc::IN_MOVED_FROM) != 0 {
                for root in self.roots.iter_mut().filter(|r| r.path == dir) {
                    root.known.forget(&ev.name);
                }
            }
            // A new entry that may be a symbolic link (inotify does not say): one `lstat` for
            // each new file in a watched directory (build output is not watched).
            let protected = if is_top {
                self.below.protects_top(&ev.name)
            } else {
                self.below.protects(&ev.name)
            };
            let quarantined = ev.name.starts_with(QUARANTINED_PREFIX.as_bytes());
            if new && !is_dir && !protected && !quarantined && !self.below.skips(&ev.name) {
                let path = dir.join(name);
                if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
                    self.check_links(vec![path]);
                }
            }
            // The common case, a build's plain new file: nothing to do, nothing allocated.
            let matters = is_dir
                || (new && (is_top || self.below.protects(&ev.name) || shapes_git(&ev.name)))
                || self.below.reviews(&ev.name);
            if !matters {
                continue;
            }
            let path = dir.join(name);
            if is_dir && self.guarded.iter().any(|g| g.starts_with(&path)) {
                relink = true;
            }
            if is_dir && ev.mask & libc::IN_MOVED_FROM != 0 {
                self.unwatch_below(&path);
                // A directory is there again at once: an exchange (`renameat2(RENAME_EXCHANGE)`,
                // `mv --exchange`), whose moved-from event for a name comes after the moved-to
                // that watched the directory now there. Read and watch what is there now (a
                // red-team pass planted a repository in the unwatched half).
                if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
                    self.watch_new(&path);
                }
            }
            if is_top {
                top |= new;
            } else if new && self.below.protects(&ev.name) && !self.known.contains(&path) {
                self.take_away(&dir, name);
                continue;
            }
            if self.below.reviews(&ev.name) {
                self.changed(&path, false);
            }
            if new && shapes_git(&ev.name) {
                self.neutralise_git_dir(&dir);
            }
            let protected_top = is_top && self.below.protects_top(&ev.name);
            if new && is_dir && !protected_top && !self.below.skips(&ev.name) {
                self.watch_new(&path);
            }
        }
        if relink {
            let links: Vec<PathBuf> = std::mem::take(&mut self.links).into_iter().collect();
            self.check_links(links);
            self.guard_links();
        }
        top
    }

    /// Watches the directories of unwatched build output on the way to where each link there
    /// at launch leads when that is not a directory (a build artifact, nothing yet): the
    /// command making it a directory, or swapping a directory on the way, wakes the warden,
    /// which judges the links again. Directories already guarded are left as they are.
    fn guard_links(&mut self) {
        let Some(fd) = self.raw_fd() else { return };
        let tops: Vec<PathBuf> = self.roots.iter().map(|r| r.path.clone()).collect();
        let mut on_the_way = Vec::new();
        self.guarded.clear();
        for link in self.links.iter().filter(|l| self.known_links.contains(*l)) {
            let Some((target, kind)) = crate::tree::leads_to(link) else { continue };
            let Some(top) = tops.iter().find(|t| target.starts_with(t)) else { continue };
            if kind == Some(Kind::Dir) {
                continue; // (judged already: one not watched was refused or taken away)
            }
            on_the_way.extend(
                target
                    .ancestors()
                    .skip(1)
                    .take_while(|a| a.starts_with(top) && *a != top.as_path())
                    .map(Path::to_path_buf),
            );
            self.guarded.push(target);
        }
        // Made again from where the paths lead now (a guarded directory renamed away keeps its
        // watch under its old name). One moved into a watched directory is watched there by
        // this same watch (one inode, one watch): left to it.
        for wd in std::mem::take(&mut self.guards).into_keys() {
            if !self.watches.contains_key(&wd) {
                sys::inotify_unwatch(fd, wd);
            }
        }
        if on_the_way.is_empty() {
            return;
        }
        self.settle();
        let watched: HashSet<PathBuf> = self.watches.values().map(|(p, _)| p.clone()).collect();
        for dir in on_the_way {
            if watched.contains(&dir) || !dir.is_dir() {
                continue;
            }
            // (Only where no watch is: a path swapped on the way since it was judged may lead
            // to a watched directory, a top even, whose mask and events are not a guard's.)
            match sys::inotify_watch(fd, &dir, EVENTS_NEW | libc::IN_MASK_CREATE) {
                Ok(wd) => {
                    self.guards.insert(wd, dir);
                }
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                Err(_) => self.lost = true,
            }
        }
    }

    /// Watches the new directory `path` and every directory below it, and handles what was
    /// made in them before their watch as just made (review files in them count as changed).
    fn watch_new(&mut self, path: &Path) {
        self.walk_below(path.to_path_buf(), true);
    }

    /// Reads `start` and every directory below it that the rule enters, through descriptors
    /// that follow no symbolic link (see [`Warden::open_below`]); watches each (the same watch
    /// again for one already watched, now under its present name); takes away what is protected
    /// there and was not at launch, and undoes a repository made there. `new`: everything in it
    /// is new (a directory made or moved in during the run), so its review files changed.
    fn walk_below(&mut self, start: PathBuf, new: bool) {
        self.settle();
        let inotify = self.raw_fd();
        if inotify.is_none() {
            self.lost = true;
        }
        let mut todo = vec![start];
        // Judged once the walk is done: a link to a directory the walk has yet to watch.
        let mut links = Vec::new();
        while let Some(dir) = todo.pop() {
            if self.unread.iter().any(|u| dir.starts_with(u)) {
                continue; // never read at launch: what is there was never protected
            }
            let is_top = self.roots.iter().any(|r| r.path == dir);
            let Some(fd) = self.open_below(&dir) else { continue };
            // Watched before it is listed: what is made after the listing began is an event.
            // (Its review files, if any, make it a directory watched for their writes too: the
            // mask is set again once they are known.)
            let watch = |mask| inotify.map(|i| sys::inotify_watch_fd(i, fd.as_raw_fd(), mask));
            if !is_top {
                match watch(EVENTS_NEW) {
                    Some(Ok(wd)) => {
                        // (One made ahead, watched again with another mask: not given back.)
                        self.spoiled |= self.lent.contains(&wd);
                        self.watches.insert(wd, (dir.clone(), false));
                    }
                    Some(Err(_)) => self.lost = true, // ENOSPC: the last sweep reads everything
                    None => {}
                }
            }
            let mut names: Vec<(Vec<u8>, Option<Kind>)> = Vec::new();
            if sys::each_entry(fd.as_raw_fd(), |n, kind| names.push((n.to_vec(), kind))).is_err() {
                continue;
            }
            if !is_top
                && names.iter().any(|(n, _)| self.below.reviews(n))
                && let Some(Ok(wd)) = watch(EVENTS)
            {
                self.spoiled |= self.lent.contains(&wd);
            }
            let mut sort = crate::tree::Classifier::new(&self.below, &self.rule, is_top);
            let mut reviewed = Vec::new();
            for (name, kind) in &names {
                let name_os = OsStr::from_bytes(name);
                let kind = kind.or_else(|| sys::kind_at(fd.as_raw_fd(), name_os));
                sort.add(name, kind.unwrap_or(Kind::Other));
                if new && !is_top && self.below.reviews(name) {
                    reviewed.push(dir.join(name_os));
                }
            }
            let found = sort.finish();
            for p in reviewed {
                self.changed(&p, false);
            }
            links.extend(found.links.iter().map(|n| dir.join(OsStr::from_bytes(n))));
            if is_top {
                // (Its entries are the top-level rule's; a top that is a repository is one.)
                if !found.git_dir {
                    todo.extend(found.enter.iter().map(|n| dir.join(OsStr::from_bytes(n))));
                }
                continue;
            }
            if found.git_dir {
                if !self.known.contains(&dir) {
                    self.take_away(&dir, OsStr::new("HEAD"));
                }
                continue;
            }
            if found.dot_git && !self.known.contains(&dir.join(".git")) {
                self.take_away(&dir, OsStr::new(".git"));
            }
            for name in &found.protect {
                let name = OsStr::from_bytes(name);
                if !self.known.contains(&dir.join(name)) {
                    self.take_away(&dir, name);
                }
            }
            todo.extend(found.enter.iter().map(|n| dir.join(OsStr::from_bytes(n))));
        }
        self.check_links(links);
    }

    /// Judges the symbolic links `links` (in watched directories): one that leads into a part of
    /// a writable path that nobody watches is taken away (see [`crate::tree::leads_in`]); the
    /// rest are kept for the last sweep. A link there at launch is judged as the launch judged
    /// it (only a directory it leads to counts: a link to a build artifact stays); a new one
    /// also when it leads to a file or to nothing yet there, where a directory could be made.
    fn check_links(&mut self, links: Vec<PathBuf>) {
        if links.is_empty() {
            return;
        }
        self.settle();
        let tops: Vec<PathBuf> = self.roots.iter().map(|r| r.path.clone()).collect();
        // (A walk over the watches for each question: links are few, the watches many.)
        let watches = &self.watches;
        let watched =
            |d: &Path| tops.iter().any(|t| t == d) || watches.values().any(|(p, _)| p == d);
        let mut take = Vec::new();
        for link in links {
            let Some((target, kind)) = crate::tree::leads_to(&link) else { continue };
            let strict = !self.known_links.contains(&link);
            let read_only = ReadOnly { rule: &self.rule, protected: &self.read_only };
            let way_in = (strict || kind == Some(Kind::Dir))
                && crate::tree::leads_in(&target, kind, &tops, &watched, &read_only, &self.below);
            if way_in {
                take.push(link);
            } else {
                self.links.insert(link);
            }
        }
        for link in take {
            let (Some(dir), Some(name)) = (link.parent(), link.file_name()) else { continue };
            self.links.remove(&link);
            self.take_away_as(dir, name, Some(Why::Link));
        }
    }

    /// The directory `dir` (a top, or a directory below one) opened for the warden's work there:
    /// below a top, one component at a time with no symbolic link followed, so that a command
    /// swapping a directory for a link (to `$HOME`, say) between an event and the warden's
    /// action cannot send the warden to move, list or watch anything outside its writable path.
    /// A component the command closed (`chmod 000`) is opened again on the way.
    fn open_below(&self, dir: &Path) -> Option<OwnedFd> {
        let root = self
            .roots
            .iter()
            .filter(|r| dir.starts_with(&r.path))
            .max_by_key(|r| r.path.as_os_str().len())?;
        open_up(&root.path);
        let mut fd = sys::open_dir_at(libc::AT_FDCWD, root.path.as_os_str()).ok()?;
        for c in dir.strip_prefix(&root.path).ok()?.components() {
            let std::path::Component::Normal(name) = c else { return None };
            fd = match sys::open_dir_at(fd.as_raw_fd(), name) {
                Ok(next) => next,
                Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
                    sys::open_up_at(fd.as_raw_fd(), name);
                    sys::open_dir_at(fd.as_raw_fd(), name).ok()?
                }
                Err(_) => return None,
            };
        }
        Some(fd)
    }

    /// Stops watching `path` and what is below it (moved away: its watches would report the
    /// old names).
    fn unwatch_below(&mut self, path: &Path) {
        let Some(fd) = self.raw_fd() else { return };
        let gone: Vec<i32> = self
            .watches
            .iter()
            .filter(|(_, (d, root))| !root && d.starts_with(path))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in gone {
            sys::inotify_unwatch(fd, wd);
            self.watches.remove(&wd);
        }
    }

    /// A watched directory that git would now take as a repository (`git init --bare` there)
    /// loses its `HEAD` (then it is none), unless it was one at launch.
    fn neutralise_git_dir(&mut self, dir: &Path) {
        if self.known.contains(dir) {
            return;
        }
        let Some(fd) = self.open_below(dir) else { return };
        let has = |n: &str| sys::is_dir_at(fd.as_raw_fd(), OsStr::new(n)).is_some();
        if !(has("HEAD") && (has("objects") && has("refs") || has("commondir"))) {
            return;
        }
        // (A top that held `HEAD` at launch keeps it: the top-level listing knows its inode.)
        let known_head = self.roots.iter().any(|r| {
            r.path == dir
                && std::fs::symlink_metadata(dir.join("HEAD"))
                    .is_ok_and(|m| r.known.contains(b"HEAD", m.dev(), m.ino()))
        });
        if !known_head {
            self.take_away(dir, OsStr::new("HEAD"));
        }
    }

    /// Whether every entry that came to a top since its listing at launch has been an event
    /// read already, so that listing the tops again would find nothing new: each top is
    /// watched still (its watch placed before that listing, never ended since), on a
    /// filesystem whose changes are all made through this kernel (`tree::memory`'s trusted
    /// ones: not an overlay, whose layer may be written beside it, nor a network or FUSE
    /// filesystem), and no event was lost. On the last turn every process of the sandbox has
    /// ended and every event it caused is queued (the kernel queues them as it makes the
    /// change) and read. An entry there at launch cannot have been replaced unseen either: a
    /// protected one is bound read-only (a mount point cannot be removed or renamed over),
    /// and any other replaced is an event of its own.
    fn tops_told(&self) -> bool {
        self.roots
            .iter()
            .all(|r| r.told && self.watches.values().any(|(dir, top)| *top && *dir == r.path))
    }

    /// Lists every watched top and takes away each protected entry that was not there at
    /// launch.
    fn sweep_tops(&mut self) {
        #[cfg(test)]
        tests::TOPS_LISTED.with(|n| n.set(n.get() + 1));
        for i in 0..self.roots.len() {
            let root = &self.roots[i];
            open_up(&root.path);
            let now = Known::list(&root.path);
            let new: Vec<OsString> = now
                .at
                .iter()
                .filter(|e| {
                    let name = now.name(e);
                    !root.known.contains(name, now.dev, e.2) && self.below.protects_top(name)
                })
                .map(|e| OsStr::from_bytes(now.name(e)).to_os_string())
                .collect();
            let path = root.path.clone();
            for name in new {
                self.take_away(&path, &name);
            }
        }
    }

    /// Reads every directory below the tops again (events were lost), without a bound (a
    /// command could make a bound's worth of directories to hide one more), and takes away what
    /// is protected there and was not at launch; watches what is not watched.
    fn sweep_below(&mut self) {
        self.lost = false;
        let tops: Vec<PathBuf> = self.roots.iter().map(|r| r.path.clone()).collect();
        for top in tops {
            self.walk_below(top, false);
        }
    }

    /// Notes a change of `path` for the line at the end.
    fn changed(&mut self, path: &Path, taken: bool) {
        let root = self
            .roots
            .iter()
            .filter(|r| path.starts_with(&r.path))
            .max_by_key(|r| r.path.as_os_str().len());
        let rel = root.and_then(|r| path.strip_prefix(&r.path).ok()).unwrap_or(path);
        self.changes.insert(Change { path: rel.to_path_buf(), taken });
    }

    /// Moves `dir/name` out of the way: into the quarantine, or (another filesystem, or a
    /// directory the caller may not move) renamed in place to a name no tool reads. `dir` is
    /// opened as [`Warden::open_below`] does: the entry moved is the one in that directory.
    fn take_away(&mut self, dir: &Path, name: &OsStr) {
        self.take_away_as(dir, name, None);
    }

    /// [`Warden::take_away`], saying `why` when it is not the entry's name.
    fn take_away_as(&mut self, dir: &Path, name: &OsStr, why: Option<Why>) {
        let from = dir.join(name);
        let Some(dir_fd) = self.open_below(dir) else { return };
        let Some(is_dir) = sys::is_dir_at(dir_fd.as_raw_fd(), name) else { return };
        // A directory its owner made unwritable (`chmod 555`, a red-team pass's way to keep a
        // planted file): the warden runs as that owner and may give write access back.
        use std::os::unix::fs::PermissionsExt as _;
        let at_fd = PathBuf::from(format!("/proc/self/fd/{}", dir_fd.as_raw_fd()));
        if let Ok(meta) = std::fs::metadata(&at_fd)
            && meta.permissions().mode() & 0o300 != 0o300
        {
            let mode = meta.permissions().mode() | 0o300;
            let _ = std::fs::set_permissions(&at_fd, std::fs::Permissions::from_mode(mode));
        }
        self.taken += 1;
        let label = format!("{}-{}", self.taken, name.to_string_lossy());
        let mut to = None;
        if let Some(q) = &self.rule.quarantine {
            let qdir = q.join(&self.id);
            let made = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&qdir);
            if made.is_ok() {
                let dest = qdir.join(&label);
                match sys::rename_at(dir_fd.as_raw_fd(), name, libc::AT_FDCWD, &dest) {
                    Ok(()) => to = Some(dest),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return, // gone already
                    Err(_) => {}
                }
            }
        }
        // In place: the name first, then (that name made already: the command can guess it,
        // and made every one it could guess) with a part it cannot guess.
        let mut tries = 0;
        while to.is_none() {
            let in_place = match tries {
                0 => format!("{QUARANTINED_PREFIX}{}-{label}", self.id),
                _ => format!("{QUARANTINED_PREFIX}{}-{}-{label}", self.id, sys::random_hex()),
            };
            tries += 1;
            match sys::rename_at(dir_fd.as_raw_fd(), name, dir_fd.as_raw_fd(), Path::new(&in_place))
            {
                Ok(()) => to = Some(dir.join(in_place)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 8 => {}
                Err(e) => {
                    eprintln!("sandgate: could not take away {}: {e}", from.display());
                    return;
                }
            }
        }
        if is_dir {
            self.unwatch_below(&from);
        }
        self.changed(&from, true);
        if let Some(to) = to {
            let top = self.roots.iter().any(|r| r.path == dir);
            let allow = format!(
                "To let builds write it: [filesystem] writable_dotfiles = [{:?}]",
                name.as_bytes().escape_ascii().to_string()
            );
            let (what, fix) = if let Some(Why::Link) = why {
                (
                    "a symbolic link in a writable directory leading into build output that \
                     nobody watches: a tool started in it on the host would run or obey what \
                     the command wrote there",
                    "Make the link on the host if you want it".to_owned(),
                )
            } else if name == "HEAD" && git_shaped_but_head(dir) {
                (
                    "a directory made into a git repository in a writable directory, whose hooks \
                     and config the host's git would run; without HEAD it is none",
                    "Make repositories the command needs under /tmp".to_owned(),
                )
            } else if name == ".git" && !top {
                (
                    "a git repository made below the top of a writable directory: the host's git \
                     there would run its hooks and config",
                    "Make repositories the command needs under /tmp".to_owned(),
                )
            } else if top {
                (
                    "new at the top of a writable directory, where a dot-entry or a tool's \
                     start-up file can run code outside later",
                    allow,
                )
            } else {
                ("new in a writable directory: a tool started there later runs or obeys it", allow)
            };
            // One write, so that it is not interleaved with the command's own output.
            let msg = format!(
                "sandgate: took away {} ({what}); it is now {}. {fix}\n",
                from.display(),
                to.display(),
            );
            let _ = io::Write::write_all(&mut io::stderr(), msg.as_bytes());
        }
    }
}

/// Why an entry is taken away, when its name does not say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// A symbolic link into a part of a writable path nobody watches.
    Link,
}

/// The warden's report to the launcher: one line per change (`t` taken away, `c` changed, then
/// the path relative to its writable path, escaped to one line), then `done`.
pub fn report(changes: &BTreeSet<Change>) -> Vec<u8> {
    let mut out = Vec::new();
    for c in changes {
        out.extend_from_slice(if c.taken { b"t " } else { b"c " });
        out.extend(c.path.as_os_str().as_bytes().escape_ascii().to_string().into_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"done\n");
    out
}

/// The changes in a warden's [`report`], and whether it was complete (ended with `done`).
pub fn read_report(bytes: &[u8]) -> (Vec<Change>, bool) {
    let complete = bytes.ends_with(b"done\n");
    let changes = bytes
        .split(|&b| b == b'\n')
        .filter_map(|l| {
            let (kind, path) = (l.get(..2)?, l.get(2..)?);
            let taken = match kind {
                b"t " => true,
                b"c " => false,
                _ => return None,
            };
            Some(Change { path: PathBuf::from(OsStr::from_bytes(path)), taken })
        })
        .collect();
    (changes, complete)
}

/// The one line said at the end of a launch that changed files host tools execute or obey
/// (names only, at most `shown` of each kind), or `None`.
pub fn changes_line(changes: &[Change], shown: usize) -> Option<String> {
    let list = |taken: bool| {
        let all: Vec<String> = changes
            .iter()
            .filter(|c| c.taken == taken)
            .map(|c| c.path.display().to_string())
            .collect();
        let more = all.len().saturating_sub(shown);
        let mut text = all.iter().take(shown).cloned().collect::<Vec<_>>().join(", ");
        if more > 0 {
            text.push_str(&format!(" and {more} more"));
        }
        (!all.is_empty()).then_some(text)
    };
    let parts: Vec<String> = [
        list(false).map(|l| format!("changed {l}")),
        list(true).map(|l| format!("taken away {l}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    (!parts.is_empty()).then(|| {
        format!(
            "sandgate: files host tools execute or obey, {} (review them before you build, \
             run or commit)",
            parts.join("; ")
        )
    })
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
    // The warden says what changed and "done" on this pipe after its last sweep (see [`report`]),
    // before it exits: its exit closes
    // the last reference to the inotify instance, which waits for an SRCU grace period in the
    // kernel (~13-22 ms measured), and the launcher need not wait for that.
    let (done_r, done_w) = std::io::pipe().ok()?;
    // (Found before the fork: the warden hides its command line when it lingers, and this
    // process's `hold_detached` needs it too.)
    let _ = sys::command_line_area();
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
            keep.extend(warden.as_ref().and_then(|w| w.back.as_ref()).map(|b| b.as_raw_fd()));
            sys::close_all_except(&keep);
            // The scan's memory for the next launch: written here, beside the sandbox's start,
            // not before it (a failure only costs the next launch a full scan).
            if let Some(memory) = warden.as_ref().and_then(|w| w.memory.as_ref()) {
                let _ = memory.write();
            }
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
                            w.sweep_with(false);
                        }
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                    Err(_) => sys::exit_now(1), // the launcher sweeps and releases after init
                }
            }
            // pid 1 of a pid namespace is reported ended only after every process in it is gone.
            let changes = match warden.as_deref_mut() {
                Some(w) => {
                    w.sweep();
                    report(w.changes())
                }
                None => report(&BTreeSet::new()),
            };
            for p in placeholders {
                p.release();
            }
            let mut done_w = done_w;
            let _ = io::Write::write_all(&mut done_w, &changes);
            // The watches made ahead go back to the daemon for the next launch (which then
            // places none, and this process's close of them is not their last).
            if warden.is_some_and(Warden::give_back) {
                crate::timing::mark("watches given back to the daemon (kept)");
                sys::exit_now(0)
            }
            // The last close of the watch frees a watch per directory (thousands in a large
            // tree) and waits for an SRCU grace period (10-20 ms): made in this process's exit,
            // once it holds nothing else (the launcher and whoever reads its stderr wait for
            // none of it), and at the lowest priority: that work is no launch's, and the next
            // one may be starting on these two cores. (A detached grandchild did it before: two
            // more forks of every launch.) While it lingers, its command line is not the
            // launcher's (see `hold_detached`).
            if let Some(fd) = watch {
                sys::close_all_except(&[fd]);
                sys::hide_command_line(sys::command_line_area(), c"sandgate-close");
                let _ = sys::lowest_priority();
            }
            sys::exit_now(0)
        }
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// How many times this thread's wardens listed their tops again.
        pub(super) static TOPS_LISTED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// How many times a last turn of `w` listed the tops again.
    fn listed_at_turn(w: &mut Warden) -> usize {
        let before = TOPS_LISTED.with(std::cell::Cell::get);
        w.sweep();
        TOPS_LISTED.with(std::cell::Cell::get) - before
    }

    /// This test's thread in a mount namespace of its own, private (a mount reaches no other
    /// test); false when that needs root and the test is skipped.
    fn private_mounts() -> bool {
        if sandgate_test_support::skip_unless(nix::unistd::geteuid().is_root(), "root (mount)") {
            return false;
        }
        use nix::mount::{MsFlags, mount};
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).unwrap();
        mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
            .unwrap();
        true
    }

    /// The last turn lists a top again only where its events may not have told everything
    /// (`Warden::tops_told`): a large top is a listing the launcher waits for. A tool file made
    /// at the top is taken away by its event; with nothing made there, no listing; with events
    /// lost (the queue read out and the loss known, as after an overflow) or the top's watch
    /// ended, the top is listed and what its events did not tell is taken away. Control: the
    /// queue read out with no loss known leaves the file (it was the event that told).
    #[test]
    fn the_last_turn_lists_a_top_again_only_where_its_events_may_not_tell() {
        let q = tempfile::tempdir().unwrap();
        let rule = rule(Some(q.path().into()));
        // (what, lose the queue, know it lost, end the top's watch, taken away, listings)
        let cases: &[(&str, bool, bool, bool, bool, usize)] = &[
            ("told by its event", false, false, false, true, 1),
            ("events lost", true, true, false, true, 1),
            ("the top's watch ended", true, false, true, true, 1),
            ("control: read out, no loss known", true, false, false, false, 0),
        ];
        for (what, lose, known, end_watch, taken, listings) in cases {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().canonicalize().unwrap();
            let mut w = warden(&rule, "sg-told", &root);
            assert!(w.tops_told(), "{what}: a top on this machine's filesystem, watched");
            std::fs::write(root.join("src.rs"), "").unwrap();
            assert_eq!(listed_at_turn(&mut w), 1, "{what}: a new entry at the top");
            assert_eq!(listed_at_turn(&mut w), 0, "{what}: nothing new, no listing");
            std::fs::write(root.join(".envrc"), "planted").unwrap();
            if *lose {
                let _ = w.drain();
            }
            w.lost |= *known;
            if *end_watch {
                let top = w.watches.iter().find(|(_, (_, top))| *top).map(|(wd, _)| *wd);
                sys::inotify_unwatch(w.raw_fd().unwrap(), top.unwrap());
            }
            assert_eq!(listed_at_turn(&mut w), *listings, "{what}: listings");
            assert_eq!(!root.join(".envrc").exists(), *taken, "{what}: taken away");
        }
    }

    /// A top the command left closed (`chmod 000`, its last act) is opened again by the last
    /// turn, though no event of an entry asks for a listing (the suite's killed-launcher test
    /// found it left closed). Control: a turn during the run leaves it as it is.
    #[test]
    fn the_last_turn_opens_a_top_left_closed() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let mut w = warden(&rule(None), "sg-closed", &root);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o000)).unwrap();
        w.sweep_with(false);
        assert_eq!(mode(&root), 0o000, "control: a turn during the run");
        assert_eq!(listed_at_turn(&mut w), 0, "nothing to list");
        assert_eq!(mode(&root) & 0o700, 0o700, "left closed");
    }

    /// A top on an overlay whose upper layer is written beside it: an entry made there raises
    /// no event on the warden's watch, so the last turn lists the top and takes it away. Root
    /// (mounts). Control: a turn that is not the last (events only) leaves it.
    #[test]
    fn the_last_turn_lists_a_top_whose_changes_may_raise_no_event() {
        if !private_mounts() {
            return;
        }
        use nix::mount::{MntFlags, MsFlags, mount, umount2};
        let layers = tempfile::tempdir().unwrap();
        let l = |n: &str| layers.path().join(n);
        for n in ["lower", "upper", "work", "top"] {
            std::fs::create_dir(l(n)).unwrap();
        }
        let opts = format!(
            "lowerdir={},upperdir={},workdir={}",
            l("lower").display(),
            l("upper").display(),
            l("work").display()
        );
        let top = l("top");
        mount(Some("overlay"), &top, Some("overlay"), MsFlags::empty(), Some(opts.as_str()))
            .unwrap();
        let q = tempfile::tempdir().unwrap();
        let mut w = warden(&rule(Some(q.path().into())), "sg-ov", &top);
        std::fs::write(l("upper/.envrc"), "planted beside").unwrap();
        assert!(top.join(".envrc").exists(), "the overlay shows the upper layer's entry");
        w.sweep_with(false);
        assert!(top.join(".envrc").exists(), "control: an event came for it");
        w.sweep();
        assert!(!top.join(".envrc").exists(), "the last turn did not list the overlay's top");
        drop(w);
        let _ = umount2(&top, MntFlags::MNT_DETACH);
    }

    /// Red team of the last turn's listing (issue 31): the command fills the warden's queue
    /// with plain files below the top, then plants `.envrc` at the top while the queue is full,
    /// so that its event is dropped (`IN_Q_OVERFLOW` queued instead). A turn during the run
    /// read the loss and read every directory again, which ended the loss, but took nothing
    /// away at the top; the last turn then found no loss and listed no top, and it stayed. The
    /// tops are listed on every turn that reads a loss. Control: the queue holds the loss and
    /// no event of `.envrc`; and with no listing on the turn that reads the loss, it stays
    /// (checked by hand).
    #[test]
    fn a_top_entry_whose_event_was_lost_during_the_run_goes() {
        let q = tempfile::tempdir().unwrap();
        let rule = rule(Some(q.path().into()));
        let max: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(16384);
        for control in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().canonicalize().unwrap();
            std::fs::create_dir(root.join("sub")).unwrap();
            let mut w = warden(&rule, "sg-ovf", &root);
            for i in 0..=max {
                std::fs::File::create(root.join(format!("sub/f{i}"))).unwrap();
            }
            std::fs::write(root.join(".envrc"), "planted while the queue was full").unwrap();
            if control {
                let events = w.drain();
                assert!(events.iter().any(|e| e.mask & libc::IN_Q_OVERFLOW != 0), "control");
                assert!(!events.iter().any(|e| e.name == b".envrc"), "control: its event came");
                continue;
            }
            w.sweep_with(false);
            w.sweep();
            assert!(!root.join(".envrc").exists(), "a top entry whose event was lost stayed");
        }
    }

    /// Red team of the last turn's listing (issue 31): it lists no top where every entry made
    /// there is an event, so each way the command has of making a name at a top must be one:
    /// a file written, a hard link to a file made below, a file renamed up, a directory made,
    /// a symbolic link, a fifo, an unnamed file (`O_TMPFILE`) linked in by its descriptor, and
    /// a `.git` there at launch exchanged (`renameat2(RENAME_EXCHANGE)`) for another
    /// directory. Each is taken away by the last turn, listing the top for the event read.
    /// Control: with the queue read out before it (the events not told), none is listed and
    /// each stays.
    #[test]
    fn every_way_of_making_an_entry_at_a_top_is_told() {
        use nix::sys::stat::Mode;
        type Way = fn(&Path);
        let ways: &[(&str, Way)] = &[
            ("written", |r| std::fs::write(r.join(".envrc"), "x").unwrap()),
            ("hard link", |r| {
                std::fs::write(r.join("sub/f"), "x").unwrap();
                std::fs::hard_link(r.join("sub/f"), r.join(".envrc")).unwrap();
            }),
            ("renamed up", |r| {
                std::fs::write(r.join("sub/f"), "x").unwrap();
                std::fs::rename(r.join("sub/f"), r.join(".envrc")).unwrap();
            }),
            ("directory", |r| std::fs::create_dir(r.join(".envrc")).unwrap()),
            ("symbolic link", |r| std::os::unix::fs::symlink("sub", r.join(".envrc")).unwrap()),
            ("fifo", |r| nix::unistd::mkfifo(&r.join(".envrc"), Mode::S_IRWXU).unwrap()),
            ("O_TMPFILE linked in", |r| {
                use nix::fcntl::{AtFlags, OFlag};
                let fd =
                    nix::fcntl::open(r, OFlag::O_TMPFILE | OFlag::O_RDWR, Mode::S_IRWXU).unwrap();
                let proc = PathBuf::from(format!("/proc/self/fd/{fd}"));
                let linked = nix::unistd::linkat(
                    None,
                    &proc,
                    None,
                    &r.join(".envrc"),
                    AtFlags::AT_SYMLINK_FOLLOW,
                );
                let _ = nix::unistd::close(fd);
                linked.unwrap();
            }),
            ("exchanged", |r| {
                std::fs::create_dir(r.join("sub/g")).unwrap();
                nix::fcntl::renameat2(
                    None,
                    &r.join(".git"),
                    None,
                    &r.join("sub/g"),
                    nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                )
                .unwrap();
            }),
        ];
        let q = tempfile::tempdir().unwrap();
        let rule = rule(Some(q.path().into()));
        for (what, way) in ways {
            for control in [false, true] {
                let dir = tempfile::tempdir().unwrap();
                let root = dir.path().canonicalize().unwrap();
                std::fs::create_dir_all(root.join("sub")).unwrap();
                std::fs::create_dir_all(root.join(".git")).unwrap();
                let known = std::fs::metadata(root.join(".git")).unwrap().ino();
                let mut w = warden(&rule, "sg-ways", &root);
                way(&root);
                if control {
                    let _ = w.drain();
                }
                // (Listed for its event; with none read, not at all.)
                let listings = usize::from(!control);
                assert_eq!(listed_at_turn(&mut w), listings, "{what}: listings");
                let name = if *what == "exchanged" { ".git" } else { ".envrc" };
                let stays = std::fs::symlink_metadata(root.join(name))
                    .is_ok_and(|m| *what != "exchanged" || m.ino() != known);
                assert_eq!(stays, control, "{what} (control: {control}): stays");
            }
        }
    }

    /// Red team of the last turn's listing (issue 31): an entry made at a top through another
    /// mount of it (a bind mount, as the sandbox reaches its working directory) is an event of
    /// the warden's watch all the same (a watch is on the directory, not on a mount): taken away
    /// by the last turn, which lists the top for that event. Root (mounts). Control: with the
    /// queue read out before the last turn, it stays.
    #[test]
    fn an_entry_made_through_another_mount_of_a_top_is_told() {
        if !private_mounts() {
            return;
        }
        use nix::mount::{MntFlags, MsFlags, mount, umount2};
        let q = tempfile::tempdir().unwrap();
        let rule = rule(Some(q.path().into()));
        for control in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().canonicalize().unwrap();
            let other = tempfile::tempdir().unwrap();
            let other = other.path().canonicalize().unwrap();
            mount(Some(&root), &other, None::<&str>, MsFlags::MS_BIND, None::<&str>).unwrap();
            let mut w = warden(&rule, "sg-bind", &root);
            std::fs::write(other.join(".envrc"), "planted through the other mount").unwrap();
            if control {
                let _ = w.drain();
            }
            let listings = usize::from(!control);
            assert_eq!(listed_at_turn(&mut w), listings, "control {control}: listings");
            assert_eq!(root.join(".envrc").exists(), control, "control {control}: stays");
            let _ = umount2(&other, MntFlags::MNT_DETACH);
        }
    }

    /// Red team (issue 31): a directory of build output guarded on the way to where a link
    /// there at launch leads (`bin/app` → `target/t/app`) moved by the command into a watched
    /// directory is watched there with the guard's own watch (one inode, one watch). The guards
    /// made again after the move ended every old one, that watch too: the directory went
    /// unwatched with no loss known, and a tool file planted in it later stayed. A guard's
    /// watch taken over by a watched directory is left to it. Control: the same directory made
    /// there (no guard) loses its tool file too.
    #[test]
    fn a_guarded_directory_moved_into_a_watched_one_stays_watched() {
        for guarded in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().canonicalize().unwrap();
            for d in ["src", "bin", "target/t"] {
                std::fs::create_dir_all(root.join(d)).unwrap();
            }
            std::os::unix::fs::symlink("../target/t/app", root.join("bin/app")).unwrap();
            let mut w = warden(&rule(None), "sg-guard", &root);
            assert!(!w.guards.is_empty(), "control: build output guarded on the way");
            if guarded {
                std::fs::rename(root.join("target/t"), root.join("src/t")).unwrap();
            } else {
                std::fs::create_dir(root.join("src/t")).unwrap();
            }
            w.sweep_with(false);
            w.sweep_with(false);
            std::fs::write(root.join("src/t/.envrc"), "planted").unwrap();
            w.sweep();
            assert!(!root.join("src/t/.envrc").exists(), "guarded {guarded}: it stayed");
        }
    }

    /// Red team (issue 31): a directory named as a review file (`mkdir Makefile`, left by an
    /// earlier launch) is read by the scan and is a review file too. The warden watched it for
    /// the file's writes by the same path, which the kernel applies to the directory's watch:
    /// the new-entry events of the directory were gone, and a tool file planted in it stayed.
    /// A review file whose inode is watched already is not watched again. Control: the same
    /// directory under a plain name loses its tool file.
    #[test]
    fn a_directory_named_as_a_review_file_stays_watched_for_new_entries() {
        for name in ["Makefile", "control"] {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().canonicalize().unwrap();
            std::fs::create_dir_all(root.join("sub").join(name)).unwrap();
            let mut w = warden(&rule(None), "sg-rd", &root);
            let planted = root.join("sub").join(name).join(".envrc");
            std::fs::write(&planted, "planted").unwrap();
            w.sweep();
            assert!(!planted.exists(), "{name}: a tool file planted in it stayed");
        }
    }

    fn rule(quarantine: Option<PathBuf>) -> TopLevel {
        TopLevel {
            writable: vec![".venv".into()],
            protected: vec!["rust-toolchain.toml".into()],
            below: vec![".git".into(), ".cargo".into(), ".envrc".into(), "mise.toml".into()],
            review: vec!["build.rs".into(), "Makefile".into()],
            skip: vec!["target".into(), "node_modules".into()],
            quarantine,
            placeholders: vec![PathBuf::from("/nonexistent/.bashrc")],
            scan_directories: None,
            scan_memory: None,
        }
    }

    /// A warden over `root` whose scan is the real one.
    fn warden(rule: &TopLevel, id: &str, root: &Path) -> Warden {
        let roots = [root.to_path_buf()];
        Warden::prepare(rule, id, &roots, &crate::tree::scan(&roots, rule))
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// A top's listing at launch: each name with the inode it named, on the top's device; a
    /// name now naming another inode (replaced) is not known, nor one on another device.
    #[test]
    fn a_tops_listing_knows_each_name_by_its_inode() {
        let dir = tempfile::tempdir().unwrap();
        let names: Vec<String> = (0..300).map(|i| format!("e{i}")).collect();
        for n in &names {
            std::fs::write(dir.path().join(n), "").unwrap();
        }
        std::fs::create_dir(dir.path().join(".envrc")).unwrap();
        let known = Known::list(dir.path());
        assert_eq!(known.names().count(), names.len() + 1);
        for n in names.iter().map(String::as_str).chain([".envrc"]) {
            let m = std::fs::symlink_metadata(dir.path().join(n)).unwrap();
            assert!(known.contains(n.as_bytes(), m.dev(), m.ino()), "{n}");
            assert!(!known.contains(n.as_bytes(), m.dev() + 1, m.ino()), "{n} on another device");
        }
        let old = std::fs::symlink_metadata(dir.path().join("e7")).unwrap().ino();
        std::fs::write(dir.path().join("e7.new"), "").unwrap();
        std::fs::rename(dir.path().join("e7.new"), dir.path().join("e7")).unwrap();
        let m = std::fs::symlink_metadata(dir.path().join("e7")).unwrap();
        assert!(m.ino() != old && !known.contains(b"e7", m.dev(), m.ino()), "replaced");
        assert!(!known.contains(b"e300", m.dev(), m.ino()), "never there");
        assert!(Known::list(&dir.path().join("none")).names().next().is_none());
    }

    /// A top whose listing takes more than one 64 KiB read, with dot-entries of odd bytes (a
    /// newline, bytes that are not UTF-8, one name a prefix of another): none there at launch is
    /// taken away at the end, and one made since among them is. Red team, third pass (issue
    /// 31), against the listing kept as one sorted buffer. Control: the one made since goes.
    #[test]
    fn a_large_top_with_odd_names_keeps_what_was_there() {
        let dir = tempfile::tempdir().unwrap();
        let q = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let odd: Vec<&[u8]> =
            vec![b".a\n", b".\xff\xfe", b".envrc", b".envrc ", b".envrc\x01", b". ", b".\x7f"];
        let at = |n: &[u8]| root.join(OsStr::from_bytes(n));
        for n in &odd {
            std::fs::write(at(n), "").unwrap();
        }
        for i in 0..2000 {
            std::fs::write(root.join(format!("{i:0>60}")), "").unwrap();
        }
        let mut w = warden(&rule(Some(q.path().into())), "sg-t", &root);
        std::fs::write(at(b".envrc\n"), "").unwrap();
        w.sweep();
        for n in &odd {
            assert!(at(n).exists(), "{} was there at launch", n.escape_ascii());
        }
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), odd.len() + 2000);
        assert!(!at(b".envrc\n").exists(), "control: one made since is taken away");
    }

    #[test]
    fn new_protected_entries_are_taken_away_and_known_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let q = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join(".envrc"), "old").unwrap();
        std::fs::create_dir(root.join("src")).unwrap();
        std::fs::write(root.join("src/config.toml"), "[build]").unwrap();
        let mut w = warden(&rule(Some(q.path().into())), "sg-t", &root);
        assert_eq!(w.existing_protected(), vec![root.join(".envrc")]);
        assert!(w.covers(&root.join(".cargo")) && !w.covers(&root.join("target")));
        assert!(!w.covers(&root.join("src/.cargo")), "below the top a placeholder has no window");

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
        let names = names(&moved);
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
        let mut w = warden(&rule(None), "sg-w", &root);
        std::fs::create_dir(root.join(".cargo")).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o000)).unwrap();
        assert_eq!(w.sweep(), 1);
        assert!(!root.join(".cargo").exists());
    }

    #[test]
    fn without_a_quarantine_entries_are_renamed_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let mut w = warden(&rule(None), "sg-u", &root);
        std::fs::write(root.join(".pre-commit-config.yaml"), "repos: []").unwrap();
        assert_eq!(w.sweep(), 1);
        assert_eq!(
            names(&root),
            vec![format!("{QUARANTINED_PREFIX}sg-u-1-.pre-commit-config.yaml")]
        );
        assert_eq!(w.sweep(), 0, "a quarantined name is not taken again");
    }

    /// The name an entry is renamed to in place can be guessed (the sandbox's id is visible
    /// inside): a command that made every such name first still has its planted file taken
    /// away, under a name with a part it cannot guess. Red team (issue 31, fifth pass).
    /// Control (by hand): without the second try, the file stays ("File exists").
    #[test]
    fn a_guessed_in_place_name_made_first_does_not_keep_the_planted_file() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let mut w = warden(&rule(None), "sg-g", &root);
        for n in 1..=3 {
            std::fs::write(root.join(format!("{QUARANTINED_PREFIX}sg-g-{n}-.envrc")), "").unwrap();
        }
        std::fs::write(root.join(".envrc"), "planted").unwrap();
        assert_eq!(w.sweep(), 1);
        assert!(!root.join(".envrc").exists(), "kept: every name it would take was made");
        let moved = names(&root).into_iter().filter(|n| n.ends_with("-1-.envrc")).count();
        assert_eq!(moved, 2, "the guessed name and the one taken: {:?}", names(&root));
    }

    #[test]
    fn the_watch_wakes_on_changes_in_every_scanned_directory_but_build_output() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
        std::fs::create_dir_all(root.join("target/debug")).unwrap();
        std::fs::write(root.join("sub/deeper/plain.rs"), "x").unwrap();
        std::fs::write(root.join("sub/Makefile"), "all:").unwrap();
        let w = warden(&rule(None), "sg-v", &root);
        let fd = w.raw_fd().expect("inotify");
        let ready = |fd| {
            let mut p = [libc::pollfd { fd, events: libc::POLLIN, revents: 0 }];
            sys::poll(&mut p, 0).unwrap() > 0
        };
        std::fs::write(root.join("target/debug/.envrc"), "x").unwrap();
        assert!(!ready(fd), "build output does not wake it");
        std::fs::write(root.join("sub/deeper/plain.rs"), "y").unwrap();
        assert!(!ready(fd), "a write where no build code lies does not wake it");
        std::fs::write(root.join("sub/Makefile"), "all: x").unwrap();
        assert!(ready(fd), "a write to build code it reports does");
        w.drain();
        std::fs::write(root.join("sub/deeper/.envrc"), "x").unwrap();
        assert!(ready(fd), "a directory below the top does");
        w.drain();
        assert!(!ready(fd));
        std::fs::write(root.join(".envrc"), "x").unwrap();
        assert!(ready(fd));
    }

    /// Below the top: new protected names go (made, renamed there, in a directory made during
    /// the run, a symbolic link), the scan's existing ones stay, build output is left alone,
    /// and what changed is noted for the line at the end.
    #[test]
    fn below_the_top_new_tool_files_go_and_changes_are_noted() {
        let dir = tempfile::tempdir().unwrap();
        let q = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in ["crates/a/.cargo", "crates/b", "sub", "target"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("crates/a/.cargo/config.toml"), "[build]").unwrap();
        std::fs::write(root.join("crates/a/build.rs"), "fn main() {}").unwrap();
        let mut w = warden(&rule(Some(q.path().into())), "sg-b", &root);
        // The scan's own: there at launch (read-only in a sandbox), not taken.
        std::fs::write(root.join("crates/a/build.rs"), "fn main() { evil() }").unwrap();
        std::fs::create_dir(root.join("crates/b/.cargo")).unwrap();
        std::fs::write(root.join("sub/plain"), "x").unwrap();
        std::fs::rename(root.join("sub/plain"), root.join("sub/mise.toml")).unwrap();
        std::fs::create_dir_all(root.join("new/deep/er")).unwrap();
        std::fs::write(root.join("new/deep/er/.envrc"), "x").unwrap();
        std::fs::write(root.join("new/deep/Makefile"), "all:").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("crates/b/.envrc")).unwrap();
        std::fs::create_dir_all(root.join("target/x/.cargo")).unwrap();
        std::fs::write(root.join("sub/lib.rs"), "x").unwrap();
        assert_eq!(w.sweep(), 4);
        for gone in ["crates/b/.cargo", "sub/mise.toml", "new/deep/er/.envrc", "crates/b/.envrc"] {
            assert!(std::fs::symlink_metadata(root.join(gone)).is_err(), "{gone}");
        }
        for kept in ["crates/a/.cargo/config.toml", "target/x/.cargo", "sub/lib.rs"] {
            assert!(root.join(kept).exists(), "{kept}");
        }
        let changes: Vec<(String, bool)> =
            w.changes().iter().map(|c| (c.path.display().to_string(), c.taken)).collect();
        assert_eq!(
            changes,
            [
                ("crates/a/build.rs".to_owned(), false),
                ("crates/b/.cargo".to_owned(), true),
                ("crates/b/.envrc".to_owned(), true),
                ("new/deep/Makefile".to_owned(), false),
                ("new/deep/er/.envrc".to_owned(), true),
                ("sub/mise.toml".to_owned(), true),
            ]
        );
        // A directory made during the run is watched from then on.
        std::fs::write(root.join("new/deep/er/.cargo"), "x").unwrap();
        assert_eq!(w.sweep(), 1);
    }

    /// A directory moved away is no longer watched under its old name, and is watched under its
    /// new one (with what it brought along).
    #[test]
    fn renamed_directories_are_watched_where_they_went() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("a/inner")).unwrap();
        std::fs::create_dir_all(root.join("target/hidden")).unwrap();
        std::fs::write(root.join("target/hidden/.envrc"), "planted in build output").unwrap();
        let mut w = warden(&rule(None), "sg-r", &root);
        std::fs::rename(root.join("a"), root.join("b")).unwrap();
        std::fs::rename(root.join("target/hidden"), root.join("b/inner/hidden")).unwrap();
        assert_eq!(w.sweep(), 1, "what a moved-in directory brings is new here");
        assert!(!root.join("b/inner/hidden/.envrc").exists());
        std::fs::write(root.join("b/inner/.envrc"), "x").unwrap();
        assert_eq!(w.sweep(), 1);
        assert!(!root.join("b/inner/.envrc").exists());
        let paths: Vec<&Path> = w.watches.values().map(|(p, _)| p.as_path()).collect();
        assert!(!paths.iter().any(|p| p.starts_with(root.join("a"))), "{paths:?}");
    }

    /// Red-team finding: two directories exchanged in one call (`renameat2(RENAME_EXCHANGE)`)
    /// left the one whose moved-from event came last unwatched, and a repository and tool
    /// configs planted in it stayed. Both are watched after the exchange.
    #[test]
    fn exchanged_directories_stay_watched() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("sub/a")).unwrap();
        std::fs::create_dir_all(root.join("sub/b")).unwrap();
        let mut w = warden(&rule(None), "sg-x", &root);
        nix::fcntl::renameat2(
            None,
            &root.join("sub/a"),
            None,
            &root.join("sub/b"),
            nix::fcntl::RenameFlags::RENAME_EXCHANGE,
        )
        .unwrap();
        w.sweep();
        std::fs::write(root.join("sub/b/.envrc"), "planted").unwrap();
        std::fs::write(root.join("sub/a/.envrc"), "planted").unwrap();
        assert_eq!(w.sweep(), 2, "both halves of the exchange are watched");
        assert!(!root.join("sub/b/.envrc").exists() && !root.join("sub/a/.envrc").exists());
    }

    /// A repository made during the run: a `.git` below the top goes; a directory given git's
    /// shape (`git init --bare`) loses its `HEAD`. Existing ones stay.
    #[test]
    fn repositories_made_during_the_run_are_undone() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in ["old.git/objects", "old.git/refs", "sub", "src"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("old.git/HEAD"), "ref: refs/heads/main\n").unwrap();
        let mut w = warden(&rule(None), "sg-g", &root);
        let git = |args: &[&str], dir: &Path| {
            let ok = std::process::Command::new("git")
                .args(args)
                .current_dir(dir)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .output()
                .is_ok_and(|o| o.status.success());
            assert!(ok, "git {args:?}");
        };
        git(&["init", "-q", "--bare", "fixtures.git"], &root.join("src"));
        git(&["init", "-q"], &root.join("sub"));
        w.sweep();
        assert!(
            !root.join("src/fixtures.git/HEAD").exists(),
            "{:?}",
            names(&root.join("src/fixtures.git"))
        );
        assert!(root.join("src/fixtures.git/objects").exists(), "only HEAD goes");
        assert!(!root.join("sub/.git").exists());
        assert!(root.join("old.git/HEAD").exists(), "there at launch");
        // Control: the bare repository was one before its HEAD went.
        git(&["init", "-q", "--bare", "control.git"], &root.join("src"));
        assert!(git_shaped(&root.join("src/control.git")));
    }

    /// The command swaps a directory for a link to somewhere else between making an entry and
    /// the warden's turn: the warden acts on the directory, not on where the path leads now (a
    /// link to `$HOME` would otherwise have it move `~/.config` into the quarantine).
    #[test]
    fn a_directory_swapped_for_a_link_does_not_send_the_warden_outside() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (root, outside) = (base.join("w"), base.join("home"));
        std::fs::create_dir_all(root.join("sub/inner")).unwrap();
        std::fs::create_dir_all(outside.join("inner")).unwrap();
        std::fs::write(outside.join("inner/.envrc"), "the user's own").unwrap();
        let mut w = warden(&rule(None), "sg-s", &root);
        std::fs::write(root.join("sub/inner/.envrc"), "planted").unwrap();
        std::fs::rename(root.join("sub"), root.join("sub2")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("sub")).unwrap();
        // Control: the path the event names leads outside now.
        let mine = std::fs::read_to_string(root.join("sub/inner/.envrc")).unwrap();
        assert_eq!(mine, "the user's own");
        w.sweep();
        let theirs = std::fs::read_to_string(outside.join("inner/.envrc")).unwrap();
        assert_eq!(theirs, "the user's own");
        assert!(!root.join("sub2/inner/.envrc").exists(), "the planted one went, where it is now");
        // And with every event lost, the walk from the top does not follow the link either.
        std::fs::write(root.join("sub2/inner/.envrc"), "planted again").unwrap();
        w.sweep_everything();
        assert!(outside.join("inner/.envrc").exists());
        assert!(!root.join("sub2/inner/.envrc").exists());
    }

    /// Events lost (a queue overflow, a watch that could not be made): every directory is read
    /// again, and what is protected and new there goes.
    #[test]
    fn when_events_are_lost_everything_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/.envrc"), "there at launch").unwrap();
        let mut w = warden(&rule(None), "sg-l", &root);
        w.release_watch(); // as in the launcher when the warden died: no events at all
        std::fs::write(root.join("a/b/.envrc"), "x").unwrap();
        std::fs::create_dir_all(root.join("c/d/.cargo")).unwrap();
        assert_eq!(w.sweep(), 0, "without events nothing below the top is seen");
        assert_eq!(w.sweep_everything(), 2);
        assert!(!root.join("a/b/.envrc").exists() && !root.join("c/d/.cargo").exists());
        assert!(root.join("a/.envrc").exists(), "there at launch");
    }

    /// Issue 31, third round: a symbolic link made during the run from a watched directory into
    /// build output (a directory, a file that could become one, nothing yet) is taken away,
    /// whether made there, moved in, or in a directory moved in; a link to a watched directory,
    /// and a link inside build output, stay. Control: the same link to a watched directory is
    /// kept, and the taken one did lead to the planted file.
    #[test]
    fn links_into_build_output_made_during_the_run_go() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in ["crates/a", "src/a", "target/foo", "target/t"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("target/app"), "x").unwrap();
        let mut w = warden(&rule(None), "sg-k", &root);
        std::fs::write(root.join("target/foo/.envrc"), "planted in build output").unwrap();
        let link = |to: &str, at: &str| std::os::unix::fs::symlink(to, root.join(at)).unwrap();
        link("../target/foo", "crates/foo");
        // Control: before the warden's turn, the link leads to the planted file.
        assert!(root.join("crates/foo/.envrc").exists());
        link("../target/app", "crates/app");
        link("../target/later", "crates/later");
        link("target/foo", "top");
        link("../src/a", "crates/src");
        link("../../src", "target/t/back"); // inside build output: not watched, not the class
        let absolute = root.join("target/foo");
        link(absolute.to_str().unwrap(), "target/t/in");
        std::fs::rename(root.join("target/t/in"), root.join("src/moved")).unwrap();
        std::fs::create_dir_all(root.join("target/m")).unwrap();
        link("../../target/foo", "target/m/x"); // (from where it is moved to)
        std::fs::rename(root.join("target/m"), root.join("src/m")).unwrap();
        w.sweep();
        for gone in ["crates/foo", "crates/app", "crates/later", "top", "src/moved", "src/m/x"] {
            assert!(std::fs::symlink_metadata(root.join(gone)).is_err(), "{gone} stayed");
        }
        for kept in ["crates/src", "target/t/back"] {
            assert!(std::fs::symlink_metadata(root.join(kept)).is_ok(), "{kept} went");
        }
        assert!(w.changes().iter().any(|c| c.path == Path::new("crates/foo") && c.taken));
    }

    /// A link there at launch to a build artifact (a file) or to nothing yet stays; when the
    /// command makes its target a directory, the warden takes the link away at once (it watches
    /// the build output on the way there), and the last sweep judges it again anyway. Control:
    /// a link left leading to a file stays.
    #[test]
    fn a_link_there_at_launch_is_judged_again_when_its_target_changes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("target/release")).unwrap();
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::write(root.join("target/release/app"), "x").unwrap();
        std::fs::write(root.join("target/tool"), "x").unwrap();
        for (to, at) in [
            ("../target/release/app", "bin/app"),
            ("../target/tool", "bin/tool"),
            ("../target/later/x", "bin/later"),
        ] {
            std::os::unix::fs::symlink(to, root.join(at)).unwrap();
        }
        let mut w = warden(&rule(None), "sg-e", &root);
        assert_eq!(w.sweep_with(false), 0, "a link to an artifact, or to nothing yet, stays");
        std::fs::remove_file(root.join("target/release/app")).unwrap();
        std::fs::create_dir(root.join("target/release/app")).unwrap();
        std::fs::write(root.join("target/release/app/.envrc"), "planted").unwrap();
        assert_eq!(w.sweep_with(false), 1, "during the run");
        assert!(std::fs::symlink_metadata(root.join("bin/app")).is_err());
        // Nothing there yet, made step by step: each step is watched in turn.
        std::fs::create_dir(root.join("target/later")).unwrap();
        assert_eq!(w.sweep_with(false), 0);
        std::fs::create_dir(root.join("target/later/x")).unwrap();
        assert_eq!(w.sweep_with(false), 1);
        assert!(std::fs::symlink_metadata(root.join("bin/later")).is_err());
        // A directory on the way swapped for another, step by step: watched in turn.
        std::fs::rename(root.join("target"), root.join("old")).unwrap();
        // (`old` is no build output: read, and the `.envrc` planted above goes.)
        assert_eq!(w.sweep_with(false), 1);
        std::fs::create_dir(root.join("target")).unwrap();
        assert_eq!(w.sweep_with(false), 0);
        assert!(std::fs::symlink_metadata(root.join("bin/tool")).is_ok(), "control: dangling");
        std::fs::create_dir(root.join("target/tool")).unwrap();
        assert_eq!(w.sweep_with(false), 1);
        assert!(std::fs::symlink_metadata(root.join("bin/tool")).is_err());
        assert!(std::fs::symlink_metadata(root.join("old/tool")).is_ok(), "still a file there");
    }

    /// Issue 31, third round: build code rewritten through a hard link made in build output
    /// (`ln src/build.rs target/b`, then a write to `target/b`) is named: the review file's own
    /// inode is watched. Control: with the directories' watches alone, nothing is named.
    #[test]
    fn a_write_through_a_hard_link_names_the_review_file() {
        for inode_watch in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().canonicalize().unwrap();
            std::fs::create_dir_all(root.join("src")).unwrap();
            std::fs::create_dir_all(root.join("target")).unwrap();
            std::fs::write(root.join("src/build.rs"), "fn main() {}").unwrap();
            std::fs::write(root.join("Makefile"), "all:").unwrap();
            let mut w = warden(&rule(None), "sg-h", &root);
            if !inode_watch {
                let fd = w.raw_fd().unwrap();
                for wd in std::mem::take(&mut w.files).into_keys() {
                    sys::inotify_unwatch(fd, wd);
                }
            }
            std::fs::hard_link(root.join("src/build.rs"), root.join("target/b")).unwrap();
            std::fs::hard_link(root.join("Makefile"), root.join("target/m")).unwrap();
            w.sweep();
            w.changes.clear(); // (the new links themselves change the files' link counts)
            std::fs::write(root.join("target/b"), "fn main() { evil() }").unwrap();
            std::fs::write(root.join("target/m"), "all: evil").unwrap();
            w.sweep();
            let named: Vec<String> =
                w.changes().iter().map(|c| c.path.display().to_string()).collect();
            if inode_watch {
                assert_eq!(named, ["Makefile", "src/build.rs"]);
            } else {
                assert!(named.is_empty(), "control: {named:?}");
            }
        }
    }

    #[test]
    fn events_are_read_from_the_kernels_layout() {
        let mut buf = Vec::new();
        for (wd, mask, name) in
            [(1i32, libc::IN_CREATE, &b".envrc"[..]), (7, libc::IN_IGNORED, b"")]
        {
            buf.extend(wd.to_ne_bytes());
            buf.extend(mask.to_ne_bytes());
            buf.extend(0u32.to_ne_bytes());
            let padded = if name.is_empty() { 0 } else { 16 };
            buf.extend((padded as u32).to_ne_bytes());
            let mut n = name.to_vec();
            n.resize(padded, 0);
            buf.extend(n);
        }
        assert_eq!(
            parse_events(&buf),
            vec![
                Event { wd: 1, mask: libc::IN_CREATE, name: b".envrc".to_vec() },
                Event { wd: 7, mask: libc::IN_IGNORED, name: Vec::new() },
            ]
        );
        assert_eq!(parse_events(&buf[..20]).len(), 0, "a cut event is not read");
    }

    #[test]
    fn the_report_goes_through_the_pipe_and_becomes_one_line() {
        let changes: BTreeSet<Change> = [
            Change { path: "Cargo.toml".into(), taken: false },
            Change { path: "a\nb/.envrc".into(), taken: true },
        ]
        .into();
        let bytes = report(&changes);
        let (back, complete) = read_report(&bytes);
        assert!(complete);
        assert_eq!(back.len(), 2);
        assert_eq!(back[1].path, PathBuf::from("a\\nb/.envrc"), "one line each, escaped");
        assert!(!read_report(&bytes[..bytes.len() - 2]).1, "cut short");
        let line = changes_line(&back, 10).unwrap();
        assert_eq!(
            line,
            "sandgate: files host tools execute or obey, changed Cargo.toml; taken away \
             a\\nb/.envrc (review them before you build, run or commit)"
        );
        assert_eq!(changes_line(&[], 10), None);
        let many: Vec<Change> = (0..5)
            .map(|i| Change { path: format!("d{i}/build.rs").into(), taken: false })
            .collect();
        assert!(changes_line(&many, 2).unwrap().contains("d0/build.rs, d1/build.rs and 3 more"));
    }
}

#[cfg(test)]
mod ahead_tests;
