//! The one scan of the writable trees that a `build` launch makes before the command starts: it
//! serves the git wall and the host tools' files alike, under one bound, with one list of what
//! it did not look into.
//!
//! In every directory it reads (breadth first from the top of each writable path), it finds:
//!
//! - **repositories, the way git recognises one**: a `.git` entry (a directory, or a `gitdir:`
//!   file, whatever it holds), and a directory holding `HEAD` with `objects` and `refs`, or
//!   with `commondir` (a bare repository or mirror, a linked worktree's git directory) whatever
//!   its name — the git wall ([`crate::gitwall`]) protects each one's hooks, config and
//!   pointers; its inside is not read;
//! - **files host tools execute or obey** below the top ([`crate::TopLevel::below`]): each one
//!   read-only; a directory among them is not entered (it is read-only as a whole);
//! - **build output** ([`crate::TopLevel::skip`] and the allowlisted dot-directories): not
//!   entered;
//! - every other directory: read in turn, and watched by the Linux warden while the command
//!   runs (a new protected name is taken away, a changed review name is reported);
//! - **symbolic links** (neither protected nor named as build output): a link to a directory of
//!   a writable path that the scan does not read (`crates/foo` → `target/foo`) is a way into an
//!   unprotected tree by a path host tools take for source ([`Scan::ways_in`]: the launch is
//!   refused; one made during the run is taken away by the warden);
//! - **review files** ([`Scan::review_files`]): the warden watches each one's inode as well, so
//!   that a write through a hard link made elsewhere (`ln src/build.rs target/b`) is named.
//!
//! The top of each writable path is read too (for a repository there), but its entries are the
//! top-level rule's: the warden lists the top itself.
//!
//! What it costs: one `getdents` per directory and nothing per file (the entry's type comes with
//! its name), and for a directory unchanged since the previous launch in the same writable
//! paths only a `stat`: its listing is remembered (see the `memory` module for why that is as
//! safe as listing it); with a daemon running, not even that: the daemon's index holds the
//! listings under inotify watches between launches and lists again only what changed (see the
//! `index` module for why its answer is as good as a scan); see docs/performance.md ("Writable
//! trees") for a 100,000-file tree. The bound
//! ([`SCAN_DEPTH`] levels, [`SCAN_DIRS`] directories) keeps a huge tree from delaying every
//! launch without limit; what lies past it is listed in [`Scan::unread`], said at launch, and
//! made read-only for the launch ([`Scan::closed`], at most [`CLOSED_MOUNTS`] mounts): what the
//! scan did not read is never writable and unprotected.

use std::collections::{HashMap, HashSet, VecDeque};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::top_level::Below;

pub(crate) use crate::entry::Kind;

#[cfg(target_os = "linux")]
mod ahead;
#[cfg(target_os = "linux")]
mod index;
mod memory;

#[cfg(target_os = "linux")]
pub use ahead::Ahead;
#[cfg(all(test, target_os = "linux"))]
pub(crate) use ahead::plan as ahead_plan;
#[cfg(target_os = "linux")]
pub(crate) use ahead::{DIR_EVENTS, DIR_EVENTS_NEW};
#[cfg(target_os = "linux")]
pub(crate) use index::parse as parse_inotify;
#[cfg(target_os = "linux")]
pub use index::{
    GIVEN_BACK, Index, KEPT, decode_answer, decode_ask, encode_answer, encode_ask, framed, key,
    read_framed,
};
pub use memory::Memory;
#[cfg(target_os = "linux")]
pub(crate) use memory::trusted_fs;

/// How many levels below the top of a writable path are read.
pub const SCAN_DEPTH: usize = 24;
/// How many directories are read at most, over all writable paths, unless `[filesystem]
/// scan_directories` says otherwise ([`crate::TopLevel::scan_directories`]).
pub const SCAN_DIRS: usize = 20_000;
/// How many read-only mounts at most cover what the scan did not read: past it, parents stand
/// for their children (more is read-only than strictly needed, the mounts stay few).
pub const CLOSED_MOUNTS: usize = 16;

/// What the scan found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// Every directory read strictly below the tops, in the order read (absolute): the ones the
    /// warden watches.
    pub dirs: Vec<PathBuf>,
    /// Existing entries below the tops that the rule protects (`.git` entries are repositories,
    /// not here).
    pub protected: Vec<PathBuf>,
    /// Repositories at and below the tops (not the `.git` at a top, which the git wall finds by
    /// itself, walking up).
    pub repositories: Vec<Repository>,
    /// Directories not looked into: nothing below them is protected or watched, so they are
    /// read-only for the launch ([`Scan::closed`]).
    pub unread: Vec<Unread>,
    /// What covers [`Scan::unread`] read-only: the unread directories, or (more than
    /// [`CLOSED_MOUNTS`] of them) their parents. Also in [`Scan::protected`].
    pub closed: Vec<PathBuf>,
    /// Build output not entered.
    pub skipped: Vec<PathBuf>,
    /// Directories below the tops holding files the rule reviews: the warden watches them for
    /// changes to existing files too (elsewhere, what is made is enough to know).
    pub reviewed: Vec<PathBuf>,
    /// The files the rule reviews, at the tops and below: the warden watches each one's inode,
    /// which reports a write by whatever path (a hard link in build output) reached it.
    pub review_files: Vec<PathBuf>,
    /// Symbolic links in the directories read (but those the rule protects or names as build
    /// output): checked at launch ([`Scan::ways_in`]) and again by the warden at the end.
    pub links: Vec<PathBuf>,
    /// Links among [`Scan::links`] that lead to a directory of a writable path that the scan did
    /// not read (build output, a repository's inside): a tool started there on the host would
    /// read what the command wrote unwatched. The launch refuses them ([`way_in_refusal`]).
    pub ways_in: Vec<WayIn>,
    /// How many of the directories read were taken from the previous launch's memory (a
    /// `stat` showed them unchanged) or from the daemon's index (no event since) instead of
    /// listed.
    pub recalled: usize,
    /// What to remember for the next launch, when it differs from what was remembered: the
    /// warden writes it, off the launch's path ([`Memory::write`]).
    pub memory: Option<std::sync::Arc<Memory>>,
    /// The warden's watches, made ahead by the daemon and handed with its answer (see
    /// `tree::ahead`, Linux); `None`: the warden places its own.
    pub ahead: Option<std::sync::Arc<Handed>>,
}

/// A top's entries by name and inode (see [`Handed::tops`]).
pub(crate) type TopNames = Vec<(Vec<u8>, u64)>;

/// Each top (its path) with its [`TopNames`].
#[cfg(target_os = "linux")]
pub(crate) type Tops = [(PathBuf, TopNames)];

/// A launch's watches made ahead: the instance (with the watches on the tops too), and the watch
/// of each directory the scan read, in its order.
#[derive(Debug)]
pub struct Handed {
    /// The inotify instance, until the warden takes it ([`Handed::take_fd`]): the launcher
    /// must hold no copy of it once the warden process runs, whose exit then closes the last
    /// one (that close waits for an SRCU grace period in the kernel: 10-20 ms, no launch's).
    fd: std::sync::Mutex<Option<std::os::fd::OwnedFd>>,
    /// `wds[i]` watches the `i`th directory of [`Handed::dirs`].
    pub wds: Vec<i32>,
    /// The directories read, as the daemon sent them (read when needed: [`Handed::dirs`]).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // (no daemon's index elsewhere)
    pub(crate) dirs: Vec<u8>,
    /// Each top's entries that the warden keeps from launch, as the daemon's index listed them
    /// (see `Index::top_names`): those the rule protects at a top, and `HEAD`, each with its
    /// inode. With these the warden does not list the tops at launch: their watches were
    /// placed before that listing, so whatever came since is an event for the warden.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // (no daemon's index elsewhere)
    pub(crate) tops: Vec<(PathBuf, TopNames)>,
    /// Which instance the daemon lent (its number there; not on the wire).
    pub lend: u64,
    /// The connection the launcher asked on, where the warden gives the instance back when
    /// the command ended (see `Index::give_back`); taken with the instance.
    back: std::sync::Mutex<Option<std::os::fd::OwnedFd>>,
}

impl Handed {
    /// The instance, a watch per directory of `dirs` (front-coded, as the answer carries them).
    #[cfg(target_os = "linux")]
    pub(crate) fn new(fd: std::os::fd::OwnedFd, wds: Vec<i32>, dirs: Vec<u8>) -> Handed {
        Handed {
            fd: std::sync::Mutex::new(Some(fd)),
            wds,
            dirs,
            tops: Vec::new(),
            lend: 0,
            back: std::sync::Mutex::new(None),
        }
    }

    /// Keeps `conn`, the connection the answer came on, for the warden to give the instance
    /// back on.
    pub fn give_back_on(&self, conn: std::os::fd::OwnedFd) {
        *self.back.lock().unwrap_or_else(|e| e.into_inner()) = Some(conn);
    }

    /// The connection to give the instance back on (once, with the instance).
    pub fn take_back(&self) -> Option<std::os::fd::OwnedFd> {
        self.back.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// The instance's descriptor number, while it is held here.
    pub fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd as _;
        self.fd.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|f| f.as_raw_fd())
    }

    /// Takes the instance (once).
    pub fn take_fd(&self) -> Option<std::os::fd::OwnedFd> {
        self.fd.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// The directories the scan read below the tops, in its order (with these watches, the
    /// answer's [`Scan::dirs`] is left empty); `None` when they cannot be read back.
    #[cfg(target_os = "linux")]
    pub fn dirs(&self) -> Option<Vec<PathBuf>> {
        index::front_decoded(&self.dirs, self.wds.len())
    }

    /// As a launcher receives it with `scan`: the directories moved into it, encoded (what
    /// `decode_answer` does).
    #[cfg(all(test, target_os = "linux"))]
    pub(crate) fn received(mut self, scan: &mut Scan) -> Handed {
        self.dirs = index::front_coded(&std::mem::take(&mut scan.dirs));
        self
    }
}

impl PartialEq for Handed {
    fn eq(&self, other: &Handed) -> bool {
        self.wds == other.wds
    }
}

impl Eq for Handed {}

impl Scan {
    /// How many directories the scan read below the tops ([`Scan::dirs`], or the watches made
    /// ahead's).
    pub fn dirs_read(&self) -> usize {
        match &self.ahead {
            Some(h) if self.dirs.is_empty() => h.wds.len(),
            _ => self.dirs.len(),
        }
    }
}

/// A symbolic link into a part of a writable path the scan does not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WayIn {
    /// The link.
    pub link: PathBuf,
    /// The directory it leads to.
    pub target: PathBuf,
}

/// A repository as git would find it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repository {
    /// A `.git` entry at this path: a directory, or a `gitdir:` file (whether or not git could
    /// use it today: it must not become something git uses).
    DotGit(PathBuf),
    /// A directory git takes as a git directory: `HEAD` and `objects` and `refs` (a bare
    /// repository, a mirror, `fixtures/x.git`), or `HEAD` and `commondir`.
    GitDir(PathBuf),
}

/// A directory the scan did not look into, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unread {
    /// The directory.
    pub path: PathBuf,
    /// Why.
    pub why: Stop,
}

/// Why the scan did not read a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// It lies deeper than [`SCAN_DEPTH`].
    Depth,
    /// This many directories had been read (the bound: [`SCAN_DIRS`] unless configured).
    Count(usize),
    /// Listing it failed (permissions).
    Unreadable(std::io::ErrorKind),
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Depth => write!(f, "deeper than {SCAN_DEPTH} levels"),
            Stop::Count(bound) => write!(f, "past {bound} directories"),
            Stop::Unreadable(kind) => write!(f, "unreadable: {kind}"),
        }
    }
}

/// What one directory's entries say: the pure part of the scan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Entries {
    /// The directory itself has git's shape.
    pub(crate) git_dir: bool,
    /// Names of entries to protect.
    pub(crate) protect: Vec<Vec<u8>>,
    /// A `.git` entry is there.
    pub(crate) dot_git: bool,
    /// Subdirectories to read next.
    pub(crate) enter: Vec<Vec<u8>>,
    /// Subdirectories not entered as build output.
    pub(crate) skip: Vec<Vec<u8>>,
    /// Names of the entries the rule reviews.
    pub(crate) review: Vec<Vec<u8>>,
    /// Names of symbolic links neither protected nor named as build output.
    pub(crate) links: Vec<Vec<u8>>,
}

/// Sorts the entries of one directory as they are read, one at a time (a name is copied only
/// when it is kept: a protected entry, a subdirectory).
pub(crate) struct Classifier<'r> {
    below: &'r Below,
    top: &'r crate::TopLevel,
    /// The directory is the top of a writable path, whose entries are the top-level rule's.
    is_top: bool,
    out: Entries,
    /// `HEAD`, `objects`, `refs`, `commondir` seen.
    shape: [bool; 4],
}

impl<'r> Classifier<'r> {
    pub(crate) fn new(below: &'r Below, top: &'r crate::TopLevel, is_top: bool) -> Self {
        Classifier { below, top, is_top, out: Entries::default(), shape: [false; 4] }
    }

    /// One entry: its name, and what it is (not through a link).
    pub(crate) fn add(&mut self, name: &[u8], kind: Kind) {
        match name {
            b"HEAD" => self.shape[0] = true,
            b"objects" => self.shape[1] = true,
            b"refs" => self.shape[2] = true,
            b"commondir" => self.shape[3] = true,
            b".git" => {
                self.out.dot_git = true;
                return;
            }
            _ => {}
        }
        if self.below.reviews(name) {
            self.out.review.push(name.to_vec());
        }
        let protected = if self.is_top {
            self.top.protects(std::ffi::OsStr::from_bytes(name))
        } else {
            self.below.protects(name)
        };
        if protected {
            if !self.is_top {
                self.out.protect.push(name.to_vec());
            }
        } else if kind == Kind::Dir {
            if self.below.skips(name) {
                self.out.skip.push(name.to_vec());
            } else {
                self.out.enter.push(name.to_vec());
            }
        } else if kind == Kind::Link
            && !self.below.skips(name)
            && !name.starts_with(crate::top_level::QUARANTINED_PREFIX.as_bytes())
        {
            self.out.links.push(name.to_vec());
        }
    }

    /// What the directory holds. One with git's shape is a git directory and nothing else: its
    /// inside is the git wall's.
    pub(crate) fn finish(self) -> Entries {
        let [head, objects, refs, commondir] = self.shape;
        if head && (objects && refs || commondir) {
            return Entries { git_dir: true, ..Entries::default() };
        }
        self.out
    }
}

/// Reads the trees below `roots` (canonical directories; others are left out) under `rule`.
pub fn scan(roots: &[PathBuf], rule: &crate::TopLevel) -> Scan {
    scan_within(roots, rule, SCAN_DEPTH, rule.scan_directories.unwrap_or(SCAN_DIRS))
}

/// How many bytes the scan's memory of `roots` under `rule` holds (`None`: none): how large
/// the trees were at the last scan made in-process. A launcher scans a small tree itself: its
/// memory is cheaper to check than the daemon's round trip.
pub fn remembered_bytes(roots: &[PathBuf], rule: &crate::TopLevel) -> Option<u64> {
    let mut all_roots = roots.to_vec();
    all_roots.sort();
    let file = memory::file_for(rule.scan_memory.as_ref()?, &all_roots);
    std::fs::metadata(file).ok().map(|m| m.len())
}

/// [`scan`] with other bounds.
pub(crate) fn scan_within(
    roots: &[PathBuf],
    rule: &crate::TopLevel,
    max_depth: usize,
    max_dirs: usize,
) -> Scan {
    scan_at(roots, rule, (max_depth, max_dirs), memory::now())
}

/// [`scan_within`] as if it began at `start` (seconds, nanoseconds since the epoch): what the
/// memory counts as settled.
pub(crate) fn scan_at(
    roots: &[PathBuf],
    rule: &crate::TopLevel,
    bounds: (usize, usize),
    start: (i64, i64),
) -> Scan {
    // (The rule's names made once for both: hundreds of names.)
    let below = Below::new(rule);
    let mut out = scan_with(roots, rule, &below, bounds, start, None);
    finish(&mut out, roots, rule, &below);
    out
}

/// What keeps the listings of directories up to date between scans (the daemon's index, see
/// the `index` module): asked before each directory is recalled or listed.
pub(crate) trait Live {
    /// Before `dir` is recalled or listed: its listing when it vouches for it (unchanged since
    /// it was listed under its watch); otherwise it starts watching it, so that what changes
    /// after this is known, and returns `None`.
    fn before(&mut self, dir: &Path) -> Option<Entries>;
    /// `dir` was found to hold `found` (listed, or recalled from the memory) after
    /// [`Live::before`].
    fn found(&mut self, dir: &Path, found: &Entries);
}

/// The breadth-first part of [`scan_at`] (all but [`finish`]), asking `live` first.
pub(crate) fn scan_with(
    roots: &[PathBuf],
    rule: &crate::TopLevel,
    below: &Below,
    (max_depth, max_dirs): (usize, usize),
    start: (i64, i64),
    mut live: Option<&mut dyn Live>,
) -> Scan {
    let mut out = Scan::default();
    // A writable path inside another is read as part of the outer one.
    let mut tops: Vec<&PathBuf> = roots.iter().filter(|r| r.is_dir()).collect();
    tops.sort();
    tops.dedup_by(|inner, outer| inner.starts_with(outer));
    let mut todo: VecDeque<(PathBuf, usize)> = tops.iter().map(|t| ((*t).clone(), 0)).collect();
    // The previous launch's memory of these trees, and what this one leaves for the next.
    let mut all_roots = roots.to_vec();
    all_roots.sort();
    let place = rule.scan_memory.as_ref().map(|dir| {
        let header = memory::header(&all_roots, rule, (max_depth, max_dirs));
        (memory::file_for(dir, &all_roots), header)
    });
    let recall = place.as_ref().and_then(|(file, header)| memory::recall(file, header, start));
    let mut changed = recall.is_none();
    let mut recall = recall.unwrap_or_default();
    let mut trusted = HashMap::new();
    let mut records = Vec::new();
    let mut read = 0;
    while let Some((dir, depth)) = todo.pop_front() {
        if read == max_dirs {
            let why = Stop::Count(max_dirs);
            out.unread.push(Unread { path: dir, why });
            out.unread.extend(todo.drain(..).map(|(path, _)| Unread { path, why }));
            break;
        }
        read += 1;
        let vouched = live.as_deref_mut().and_then(|l| l.before(&dir));
        let was_vouched = vouched.is_some();
        let key = match vouched {
            Some(_) => None,
            None => place.as_ref().and_then(|_| memory::Key::of(&dir, &mut trusted)),
        };
        let found = match vouched.or_else(|| recall.take(&dir, key.as_ref())) {
            Some(entries) => {
                out.recalled += 1;
                entries
            }
            None => {
                // (A top inside another writable path is that path's top too.)
                let mut sort = Classifier::new(below, rule, roots.contains(&dir));
                if let Err(e) = list(&dir, &mut |name, kind| sort.add(name, kind)) {
                    out.unread.push(Unread { path: dir, why: Stop::Unreadable(e.kind()) });
                    continue;
                }
                let found = sort.finish();
                // Remembered only when settled (see `memory`): one changed within the clock's
                // tick before the scan is listed again next time.
                changed |= key.is_some_and(|k| k.settled(start));
                found
            }
        };
        if let Some(l) = live.as_deref_mut().filter(|_| !was_vouched) {
            l.found(&dir, &found);
        }
        // (Kept in the memory for the next launch when settled, and read from there.)
        let unsettled;
        let found = match key.filter(|k| k.settled(start)) {
            Some(key) => {
                records.push((dir.clone(), memory::Record { key, entries: found }));
                &records[records.len() - 1].1.entries
            }
            None => {
                unsettled = found;
                &unsettled
            }
        };
        if found.git_dir {
            out.repositories.push(Repository::GitDir(dir));
            continue;
        }
        if found.dot_git && depth > 0 {
            out.repositories.push(Repository::DotGit(dir.join(".git")));
        }
        if depth > 0 {
            if !found.review.is_empty() {
                out.reviewed.push(dir.clone());
            }
            out.dirs.push(dir.clone());
        }
        let child = |n: &Vec<u8>| dir.join(std::ffi::OsStr::from_bytes(n));
        out.protected.extend(found.protect.iter().map(child));
        out.skipped.extend(found.skip.iter().map(child));
        out.review_files.extend(found.review.iter().map(child));
        out.links.extend(found.links.iter().map(child));
        for name in &found.enter {
            if depth < max_depth {
                todo.push_back((child(name), depth + 1));
            } else {
                out.unread.push(Unread { path: child(name), why: Stop::Depth });
            }
        }
    }
    if let Some((file, header)) = place.filter(|_| changed) {
        out.memory = Some(std::sync::Arc::new(Memory::new(file, header, start, records)));
    }
    out
}

/// What a scan derives from what it read: the read-only cover of what it did not read, and the
/// links that lead into what it did not read (judged now: where a link leads may change
/// without a change in the directories read).
pub(crate) fn finish(out: &mut Scan, roots: &[PathBuf], rule: &crate::TopLevel, below: &Below) {
    let mut tops: Vec<PathBuf> = roots.iter().filter(|r| r.is_dir()).cloned().collect();
    tops.sort();
    tops.dedup_by(|inner, outer| inner.starts_with(&*outer));
    out.closed = closed(&out.unread, &tops);
    out.protected.extend(out.closed.iter().cloned());
    if !out.links.is_empty() {
        let read: HashSet<&Path> =
            out.dirs.iter().chain(tops.iter()).map(PathBuf::as_path).collect();
        let read_only = ReadOnly { rule, protected: &out.protected };
        let ways_in = out
            .links
            .iter()
            .filter_map(|link| {
                let (target, kind) = leads_to(link)?;
                let way_in = kind == Some(Kind::Dir)
                    && leads_in(&target, kind, &tops, &|d| read.contains(d), &read_only, below);
                way_in.then(|| WayIn { link: link.clone(), target })
            })
            .collect();
        out.ways_in = ways_in;
    }
}

/// The directories that cover `unread` read-only with at most [`CLOSED_MOUNTS`] mounts: the
/// unread directories themselves, or, while there are too many, the deepest of them replaced by
/// their parents (never above a top).
fn closed(unread: &[Unread], tops: &[PathBuf]) -> Vec<PathBuf> {
    let mut set: Vec<PathBuf> = unread.iter().map(|u| u.path.clone()).collect();
    loop {
        set.sort();
        set.dedup_by(|inner, outer| inner.starts_with(&*outer));
        if set.len() <= CLOSED_MOUNTS {
            return set;
        }
        let deepest = set.iter().filter(|p| !tops.contains(p)).map(|p| p.components().count());
        let Some(deepest) = deepest.max() else { return set };
        for p in set.iter_mut() {
            if p.components().count() == deepest
                && let Some(parent) = p.parent()
            {
                *p = parent.to_path_buf();
            }
        }
    }
}

/// What the launch makes read-only: a path below a protected entry (or a top-level one) cannot
/// receive what a host tool would read.
pub(crate) struct ReadOnly<'a> {
    pub(crate) rule: &'a crate::TopLevel,
    pub(crate) protected: &'a [PathBuf],
}

impl ReadOnly<'_> {
    fn covers(&self, root: &Path, path: &Path) -> bool {
        let first = path.strip_prefix(root).ok().and_then(|r| r.components().next());
        // (`.git` is the git wall's: writable but for hooks and config with `git_writable`.)
        let top =
            first.is_some_and(|c| c.as_os_str() != ".git" && self.rule.protects(c.as_os_str()));
        top || self.protected.iter().any(|p| path.starts_with(p))
    }
}

/// Where the symbolic link `link` leads now: canonical as far as it exists, the rest as written
/// (a target still to be made), and what is there (`None`: nothing yet). `None` when it cannot
/// be read.
pub(crate) fn leads_to(link: &Path) -> Option<(PathBuf, Option<Kind>)> {
    if let Ok(target) = std::fs::canonicalize(link) {
        let kind = if target.is_dir() { Kind::Dir } else { Kind::Other };
        return Some((target, Some(kind)));
    }
    let text = std::fs::read_link(link).ok()?;
    let written = link.parent()?.join(text);
    // The longest part that exists, made canonical, and the rest appended as written.
    let mut base = written.as_path();
    while let Some(parent) = base.parent() {
        base = parent;
        if let Ok(real) = std::fs::canonicalize(base) {
            let rest = written.strip_prefix(base).ok()?;
            return Some((real.join(rest), None));
        }
    }
    None
}

/// Whether a link leading to `target` (what is there: `kind`) opens a way into a part of a
/// writable path (`tops`) that nobody watches (`read`: a directory read and watched): a
/// directory not read; or something else (or nothing yet) where a directory could be made
/// unwatched (its parent not read, or named as build output). A target outside every writable
/// path, or one the launch makes read-only, is none.
pub(crate) fn leads_in(
    target: &Path,
    kind: Option<Kind>,
    tops: &[PathBuf],
    read: &dyn Fn(&Path) -> bool,
    read_only: &ReadOnly<'_>,
    below: &Below,
) -> bool {
    let Some(root) =
        tops.iter().filter(|t| target.starts_with(t)).max_by_key(|t| t.as_os_str().len())
    else {
        return false;
    };
    // `..` left in a target still to be made: where it ends is not known.
    let unknown = target.components().any(|c| c == std::path::Component::ParentDir);
    if target == root || (!unknown && read_only.covers(root, target)) {
        return false;
    }
    match kind {
        Some(Kind::Dir) => !read(target),
        _ => {
            let name = target.file_name().map(OsStrExt::as_bytes);
            unknown || !target.parent().is_some_and(read) || name.is_none_or(|n| below.skips(n))
        }
    }
}

/// Why a launch refuses a link the scan found ([`Scan::ways_in`]), with the way out.
pub fn way_in_refusal(w: &WayIn) -> String {
    format!(
        "{} is a symbolic link to {}, which the scan of the writable paths does not read (build \
         output): a tool started in the link on the host would run or obey files the command \
         wrote there unwatched. Replace the link with the directory, or move the directory out \
         of the build output, or name the link like build output, or use a tier without \
         writable paths here",
        w.link.display(),
        w.target.display()
    )
}

/// Calls `f` with the name of every entry of `dir` and what it is (not following a symbolic
/// link).
#[cfg(target_os = "linux")]
pub(crate) fn list(dir: &Path, f: &mut dyn FnMut(&[u8], Kind)) -> std::io::Result<()> {
    crate::sys::each_entry_of(dir, f)
}

/// (See the Linux one.)
#[cfg(not(target_os = "linux"))]
pub(crate) fn list(dir: &Path, f: &mut dyn FnMut(&[u8], Kind)) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let kind = match e.file_type() {
            Ok(t) if t.is_dir() => Kind::Dir,
            Ok(t) if t.is_symlink() => Kind::Link,
            _ => Kind::Other,
        };
        f(e.file_name().as_bytes(), kind);
    }
    Ok(())
}

/// The line a launch prints when the scan stopped early: how many directories it did not look
/// into, the first `shown` (`explain` lists them all), what is read-only for that, and the way
/// to raise the bound; `None` when it read everything.
pub fn unread_notice(scan: &Scan, shown: usize) -> Option<String> {
    let unread = &scan.unread;
    unread.first()?;
    let mut why: Vec<String> = Vec::new();
    for u in unread {
        let w = u.why.to_string();
        if !why.contains(&w) {
            why.push(w);
        }
    }
    let list = |paths: &mut dyn Iterator<Item = &Path>, len: usize| {
        let names: Vec<String> = paths.take(shown).map(|p| p.display().to_string()).collect();
        let more = len.saturating_sub(shown);
        let tail = if more > 0 { format!(" and {more} more") } else { String::new() };
        format!("{}{tail}", names.join(", "))
    };
    let unread_paths = list(&mut unread.iter().map(|u| u.path.as_path()), unread.len());
    let closed = &scan.closed;
    let read_only = if closed.len() == unread.len() {
        "they are read-only for this launch".to_owned()
    } else {
        format!(
            "read-only for this launch: {}",
            list(&mut closed.iter().map(PathBuf::as_path), closed.len())
        )
    };
    let raise = if unread.iter().any(|u| matches!(u.why, Stop::Count(_))) {
        "raise `[filesystem] scan_directories`, or launch in a smaller directory"
    } else {
        "launch in a smaller directory"
    };
    Some(format!(
        "the scan of the writable paths did not look into {} director{} ({}): {unread_paths}; \
         repositories and tool files there cannot be protected, so {read_only} (`sandgate \
         explain --tier build` lists them all; {raise})",
        unread.len(),
        if unread.len() == 1 { "y" } else { "ies" },
        why.join("; "),
    ))
}

#[cfg(test)]
mod tests;
