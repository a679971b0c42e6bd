//! The daemon's index of the writable trees: the scan's listings kept alive between launches
//! under inotify watches, so that a repeat `build` launch in the same tree pays only for the
//! directories that changed (not one `stat` per directory, as the scan's memory does).
//!
//! The daemon (which outlives launches) builds one [`Index`] per set of writable paths and rule
//! the first time a launcher asks (that launch scans in-process, as with no daemon), and answers
//! later launches from it ([`Index::scan`]): a directory whose listing it holds is not read
//! again; every other one is watched, then listed, then held.
//!
//! # Why a held listing is as good as a fresh one
//!
//! A listing is held only while the directory is watched (created, deleted, moved in or out,
//! metadata) by the index's inotify instance, with the watch placed **before** the directory was
//! listed (or its key checked against the scan's memory): every change after the watch is an
//! event, every change before it is in the listing (or moves the key). And a held listing is
//! dropped ([`effect`]) as soon as an event names the directory, an entry in it, or it itself;
//! an entry of a directory that appears, goes or moves drops everything held below it. A
//! directory whose listing was dropped is watched and listed again at the next question (a
//! build's new files in it change nothing the scan keeps, and then the last scan's result
//! stands). Then:
//!
//! - **a file made just before the launch** (between the index's last update and the launch):
//!   the kernel queues an inotify event inside the system call that made the entry, before that
//!   call returns; the daemon reads the whole queue *after* the launcher's request arrived
//!   ([`Index::scan`]), so every change that finished before the launcher asked is seen. One
//!   made while the launch runs is the warden's, as with no daemon;
//! - **a lost event**: the queue overflowed (`IN_Q_OVERFLOW`), a watch was removed by the kernel
//!   (`IN_IGNORED`: the directory deleted, its filesystem unmounted), a top moved or deleted, a
//!   top's path leads to another directory now (a parent renamed and replaced, a symbolic link
//!   swapped in) or did for a while (watches and listings go by path: a parent swapped for
//!   another tree and back while a scan ran would leave that tree's listings held here, where no
//!   event of this one reaches them; the directories on the way to each top are watched,
//!   [`way_moved`], and a scan that saw one change is not answered), or the mount table changed (a mount over a directory raises no inotify event;
//!   `/proc/thread-self/mountinfo` polled): the whole index is dropped and built again, and that launch
//!   scans in-process;
//! - **a watch that could not be placed** (inotify limits), or a filesystem whose change events
//!   are not this machine's (network, FUSE, overlay: only the scan memory's trusted
//!   filesystems): that directory's listing is never held; it is listed at every launch;
//! - **the tree changed while no daemon ran**: the index lives only in the daemon's memory; a
//!   new daemon starts with none (the scan's memory on disk has its own checks);
//! - **another user's daemon, another mount namespace**: the daemon answers only a launcher of
//!   its own uid (root included: root's launch is answered by root's daemon) in its own mount
//!   namespace (see the daemon's `tree_socket`), so the listings it read are the ones the
//!   launcher would read;
//! - **another rule, other bounds, another build of sandgate**: another index (the key is the
//!   scan memory's header: writable paths, rule, bounds, version).
//!
//! What the index answers is the same [`Scan`] the launcher would have made (the same
//! classifier, the same breadth-first order and bounds, the links judged now).

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd as _, AsRawFd as _};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::ahead::{Ahead, plan};
use super::{Entries, Handed, Live, Repository, Scan, Stop, Unread, WayIn, memory};
use crate::TopLevel;

/// What the index watches on a directory: its entries made, removed, moved in or out, their
/// metadata (a directory made unreadable), and the directory itself removed or moved.
pub(crate) const INDEX_EVENTS: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_ATTRIB
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR
    | libc::IN_DONT_FOLLOW;

/// What one event does to the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Effect {
    /// Nothing held can be trusted any more: build it again.
    Reset,
    /// Drop the listing of `dir`, and everything held at and below `below`.
    Forget { dir: PathBuf, below: Option<PathBuf> },
    /// Nothing (an event of a watch no longer in use).
    Nothing,
}

/// What an event (`mask`, the entry's `name`) on the watch of `dir` (`None`: a watch the index
/// no longer maps; `top`: `dir` is a writable path's top) does to the index.
pub(crate) fn effect(mask: u32, name: &[u8], dir: Option<&Path>, top: bool) -> Effect {
    if mask & (libc::IN_Q_OVERFLOW | libc::IN_UNMOUNT) != 0 {
        return Effect::Reset;
    }
    let Some(dir) = dir else { return Effect::Nothing };
    let gone = mask & (libc::IN_IGNORED | libc::IN_DELETE_SELF | libc::IN_MOVE_SELF) != 0;
    if gone && top {
        return Effect::Reset;
    }
    if gone {
        return Effect::Forget { dir: dir.to_path_buf(), below: Some(dir.to_path_buf()) };
    }
    if name.is_empty() {
        // The directory's own metadata (its mode): listed again.
        return Effect::Forget { dir: dir.to_path_buf(), below: None };
    }
    // A directory made, removed, moved in or out, or its mode changed: whatever was held at its
    // name (a directory replaced, renamed away, swapped for a link) is dropped with what lies
    // below it. (A directory can only be replaced by a directory, whose events say so: a file
    // event's name never held anything below it.)
    let below = (mask & libc::IN_ISDIR != 0).then(|| dir.join(std::ffi::OsStr::from_bytes(name)));
    Effect::Forget { dir: dir.to_path_buf(), below }
}

/// Drops what `effects` say from `records` (one pass over what is held, and only for events of
/// directories). Returns what was dropped of the directories named (their listings, to be
/// compared with new ones) and whether anything held below an entry was dropped (a subtree).
pub(crate) fn forget(
    records: &mut HashMap<PathBuf, Entries>,
    effects: &[Effect],
) -> (Vec<(PathBuf, Entries)>, bool) {
    let mut named = Vec::new();
    let mut below: HashSet<&Path> = HashSet::new();
    for e in effects {
        if let Effect::Forget { dir, below: b } = e {
            named.extend(records.remove_entry(dir));
            below.extend(b.as_deref());
        }
    }
    let before = records.len();
    if !below.is_empty() {
        records.retain(|p, _| !p.ancestors().any(|a| below.contains(a)));
    }
    let subtree = records.len() != before || named.iter().any(|(p, _)| below.contains(p.as_path()));
    (named, subtree)
}

/// What the index watches on each directory above a top: an entry made, removed or moved in or
/// out (one of them may be the way to the top), and the directory itself moved or removed.
pub(crate) const WAY_EVENTS: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR
    | libc::IN_DONT_FOLLOW;

/// Whether an event (`mask`, the entry's `name`) on the watch of a directory above a top
/// (`next`: the names in it that lead to a top; `None`: a watch not known) means that a top's
/// path may have led, for a while, to another directory: the index's watches and listings are
/// placed and read by path, so a directory below a top may have been watched and listed in
/// another tree, where no event of this one reaches it.
pub(crate) fn way_moved(mask: u32, name: &[u8], next: Option<&HashSet<Vec<u8>>>) -> bool {
    let lost = libc::IN_Q_OVERFLOW
        | libc::IN_IGNORED
        | libc::IN_UNMOUNT
        | libc::IN_DELETE_SELF
        | libc::IN_MOVE_SELF;
    mask & lost != 0 || next.is_none_or(|n| n.contains(name))
}

/// The directories on the way from `/` to each top, watched ([`WAY_EVENTS`]) before the tops'
/// inodes are noted and the first scan begins, each before the one below it (a component
/// swapped after its parent was watched is an event of the parent).
#[derive(Debug)]
struct Ways {
    inotify: nix::sys::inotify::Inotify,
    /// Watch → the names in its directory that lead to a top.
    next: HashMap<i32, HashSet<Vec<u8>>>,
}

impl Ways {
    /// Watches the way to each of `roots`; `None` when a watch cannot be placed (no index).
    fn watch(roots: &[PathBuf]) -> Option<Ways> {
        let inotify = crate::sys::inotify_init().ok()?;
        let fd = inotify.as_fd().as_raw_fd();
        let mut next: HashMap<i32, HashSet<Vec<u8>>> = HashMap::new();
        for root in roots {
            let mut steps: Vec<(&Path, &std::ffi::OsStr)> =
                root.ancestors().filter_map(|a| Some((a.parent()?, a.file_name()?))).collect();
            steps.reverse();
            for (dir, name) in steps {
                let wd = crate::sys::inotify_watch(fd, dir, WAY_EVENTS).ok()?;
                next.entry(wd).or_default().insert(name.as_bytes().to_vec());
            }
        }
        Some(Ways { inotify, next })
    }

    /// Whether a way to a top changed since the last call (every queued event read).
    fn moved(&self) -> bool {
        match drain(self.inotify.as_fd().as_raw_fd()) {
            Some(events) => {
                events.iter().any(|(wd, mask, name)| way_moved(*mask, name, self.next.get(wd)))
            }
            None => true,
        }
    }
}

/// How many inotify watches the daemon's indexes hold together. They share the user's
/// `fs.inotify.max_user_watches` with every launch's warden, whose watches must not run short
/// because an index holds the rest (past the limit, a new protected entry is taken away only
/// when the command ends).
pub(crate) static WATCHES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many watches the indexes may hold together: half of the user's inotify limit. Past it, a
/// directory is not held (it is listed at every launch, as one on a filesystem not trusted).
pub(crate) fn watch_budget() -> usize {
    #[cfg(test)]
    if let Some(n) = tests::budget() {
        return n;
    }
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(8192)
    }) / 2
}

/// The index's watches and what it holds: what a scan asks ([`Live`]).
#[derive(Debug)]
struct Held {
    inotify: nix::sys::inotify::Inotify,
    /// Watch descriptor → the directories it was placed on (one inode, several paths, when a
    /// directory is bound over another).
    watch: HashMap<i32, Vec<PathBuf>>,
    /// Listings held, each of a directory watched since before it was listed.
    records: HashMap<PathBuf, Entries>,
    /// Directories watched in this scan, not held yet (held once found).
    watched_now: HashSet<PathBuf>,
    /// Whether each device is a filesystem whose events can be trusted.
    trusted: HashMap<u64, bool>,
    /// Directories asked about in this scan: how many it read.
    asked: usize,
    /// How many of them were held or are now.
    held_now: usize,
}

impl Live for Held {
    fn before(&mut self, dir: &Path) -> Option<Entries> {
        self.asked += 1;
        if let Some(e) = self.records.get(dir) {
            self.held_now += 1;
            return Some(e.clone());
        }
        #[cfg(test)]
        tests::hook(dir, true);
        let dev = std::fs::symlink_metadata(dir).ok()?.dev();
        let ok = *self.trusted.entry(dev).or_insert_with(|| memory::trusted_fs(dir));
        if !ok {
            return None;
        }
        use std::sync::atomic::Ordering::Relaxed;
        if WATCHES.load(Relaxed) >= watch_budget() {
            return None;
        }
        let fd = self.inotify.as_fd().as_raw_fd();
        if let Ok(wd) = crate::sys::inotify_watch(fd, dir, INDEX_EVENTS) {
            if !self.watch.contains_key(&wd) {
                WATCHES.fetch_add(1, Relaxed);
            }
            let dirs = self.watch.entry(wd).or_default();
            if !dirs.iter().any(|d| d == dir) {
                dirs.push(dir.to_path_buf());
            }
            self.watched_now.insert(dir.to_path_buf());
        }
        None
    }

    fn found(&mut self, dir: &Path, found: &Entries) {
        #[cfg(test)]
        tests::hook(dir, false);
        if self.watched_now.remove(dir) {
            self.held_now += 1;
            self.records.insert(dir.to_path_buf(), found.clone());
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        WATCHES.fetch_sub(self.watch.len(), std::sync::atomic::Ordering::Relaxed);
    }
}

/// The daemon's index of one set of writable paths under one rule.
#[derive(Debug)]
pub struct Index {
    roots: Vec<PathBuf>,
    rule: TopLevel,
    bounds: (usize, usize),
    /// Each top's device and inode when the index was built.
    tops: Vec<(PathBuf, u64, u64)>,
    /// `/proc/thread-self/mountinfo`, open since the index was built: readable with `POLLPRI` once the
    /// mount table changed.
    mounts: Option<std::fs::File>,
    /// The ways to the tops, watched since before the tops were noted.
    ways: Ways,
    held: Held,
    /// What the last scan read (before [`super::finish`]), while nothing held was dropped since.
    last: Option<Scan>,
    /// How many directories the last scan read.
    read: usize,
    /// The next launch's warden watches, made ahead (see `tree::ahead`).
    ahead: Option<Ahead>,
    /// Whether they are being made.
    preparing: bool,
    /// The instance handed with the last answer, lent to that launch's warden (never read here
    /// meanwhile: its queue is the warden's), until the warden gives it back
    /// ([`Index::give_back`]): its number (see [`Handed::lend`]), and since when.
    lent: Option<(u64, Ahead, Instant)>,
    /// How many instances were lent.
    lends: u64,
    /// The last scan's directories as an answer carries them (front-coded), once encoded.
    last_dirs: Option<Vec<u8>>,
    /// The number of the last scan: one more each time [`Index::last`] is made or dropped, so
    /// that the same number means the same directories read (see [`Ahead::hand`]).
    scans: u64,
    /// The rule's names, matched as the scan matches them (made once: hundreds of names).
    below: crate::top_level::Below,
    /// Each top's entries the warden keeps from launch (see [`Index::top_names`]), while no
    /// event of a top came since they were listed.
    top_names: Option<Vec<(PathBuf, super::TopNames)>>,
}

impl Index {
    /// Builds the index of `roots` (canonical, as a launcher asks) under `rule`: one scan,
    /// every directory watched before it is listed or recalled from the scan's memory
    /// (`rule.scan_memory`, used for this first scan only). `None` when inotify is not
    /// available.
    pub fn build(roots: &[PathBuf], rule: &TopLevel) -> Option<Index> {
        let mut roots = roots.to_vec();
        roots.sort();
        let bounds = (super::SCAN_DEPTH, rule.scan_directories.unwrap_or(super::SCAN_DIRS));
        // (This thread's: the namespace the watches and listings resolve paths in.)
        let mounts = std::fs::File::open("/proc/thread-self/mountinfo").ok();
        let ways = Ways::watch(&roots)?;
        let tops = roots
            .iter()
            .filter_map(|r| std::fs::metadata(r).ok().map(|m| (r.clone(), m.dev(), m.ino())))
            .collect();
        let held = Held {
            inotify: crate::sys::inotify_init().ok()?,
            watch: HashMap::new(),
            records: HashMap::new(),
            watched_now: HashSet::new(),
            trusted: HashMap::new(),
            asked: 0,
            held_now: 0,
        };
        let mut index = Index {
            roots,
            rule: rule.clone(),
            bounds,
            tops,
            mounts,
            ways,
            held,
            last: None,
            read: 0,
            ahead: None,
            preparing: false,
            lent: None,
            lends: 0,
            last_dirs: None,
            scans: 0,
            below: crate::top_level::Below::new(rule),
            top_names: None,
        };
        index.bfs();
        index.rule.scan_memory = None;
        Some(index)
    }

    /// The key the daemon finds this index by ([`key`]).
    pub fn key(&self) -> Vec<u8> {
        key(&self.roots, &self.rule)
    }

    /// How many directories' listings it holds.
    pub fn len(&self) -> usize {
        self.held.records.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.held.records.is_empty()
    }

    /// The scan a launcher would make now, from what is held and what changed since (every
    /// queued event read first); `None` when the index must be built again (events lost, a
    /// top replaced, the mount table changed): the caller drops it.
    pub fn scan(&mut self) -> Option<Scan> {
        self.scan_lean(false)
    }

    /// [`Index::scan`]; with `lean`, when the last scan stands, its directories are left out of
    /// the copy (read them from `self.last`): thousands of paths not copied for an answer.
    fn scan_lean(&mut self, lean: bool) -> Option<Scan> {
        if !self.still_valid() {
            return None;
        }
        let events = drain(self.held.inotify.as_fd().as_raw_fd())?;
        let mut effects = Vec::new();
        for (wd, mask, name) in &events {
            // (One inode may be watched under several paths: a directory bound over another.)
            match self.held.watch.get(wd) {
                Some(dirs) => effects.extend(
                    dirs.iter()
                        .map(|d| effect(*mask, name, Some(d), self.roots.iter().any(|r| r == d))),
                ),
                None => effects.push(effect(*mask, name, None, false)),
            }
        }
        if effects.contains(&Effect::Reset) {
            return None;
        }
        // (An event of a top, or of a watch not known: its entries are listed again when asked.)
        let of_a_top = |wd: &i32| {
            self.held.watch.get(wd).is_none_or(|dirs| dirs.iter().any(|d| self.roots.contains(d)))
        };
        if events.iter().any(|(wd, _, _)| of_a_top(wd)) {
            self.top_names = None;
        }
        for (wd, mask, _) in &events {
            if mask & libc::IN_IGNORED != 0 && self.held.watch.remove(wd).is_some() {
                WATCHES.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let (named, subtree) = forget(&mut self.held.records, &effects);
        if subtree || !self.listed_again(named) {
            self.last = None;
            self.last_dirs = None;
            self.scans += 1;
        }
        let mut lent = false;
        let mut out = match &mut self.last {
            Some(last) => {
                let dirs = if lean { std::mem::take(&mut last.dirs) } else { Vec::new() };
                let mut out = last.clone();
                if lean {
                    // (Lent, not copied: `finish` judges the links against them.)
                    out.dirs = dirs;
                    lent = true;
                }
                out.recalled = self.read;
                out
            }
            None => self.bfs(),
        };
        // (A way to a top swapped and back while this scan listed: what it read may be another
        // tree's.)
        let moved = self.ways.moved();
        if !moved {
            super::finish(&mut out, &self.roots, &self.rule, &self.below);
        }
        if let Some(last) = self.last.as_mut().filter(|_| lent) {
            last.dirs = std::mem::take(&mut out.dirs);
        }
        (!moved).then_some(out)
    }

    /// [`Index::scan`], with the warden's watches made ahead when they fit the answer (their
    /// queue read before the index's: see `tree::ahead`). The tests' form of [`Index::answer`].
    #[cfg(test)]
    pub(crate) fn scan_and_hand(&mut self) -> Option<(Scan, Option<Handed>)> {
        let ahead = self.ahead.take().and_then(Ahead::judge);
        let Some(scan) = self.scan() else {
            // (Closed with the index, off the answer's path.)
            self.ahead = ahead;
            return None;
        };
        let handed =
            ahead.and_then(|a| a.hand(&scan.dirs, &scan.reviewed, &self.roots, self.scans));
        Some((scan, handed.map(|h| self.lend(h))))
    }

    /// The daemon's answer ([`encode_answer`]) to a launcher's question, with the warden's
    /// watches made ahead when they fit it: `Index::scan_and_hand` without copying the
    /// directories read (their encoding is kept while the last scan stands).
    pub fn answer(&mut self) -> Option<(Vec<u8>, Option<Handed>)> {
        let ahead = self.ahead.take().and_then(Ahead::judge);
        let Some(scan) = self.scan_lean(true) else {
            // (Closed with the index, off the answer's path.)
            self.ahead = ahead;
            return None;
        };
        let handed = ahead.and_then(|a| {
            a.hand(read_dirs(&self.last, &scan), &scan.reviewed, &self.roots, self.scans)
        });
        let handed = handed.map(|h| self.lend(h));
        let dirs = read_dirs(&self.last, &scan);
        let fresh;
        let blob = match (&self.last, &mut self.last_dirs) {
            (Some(last), kept) if scan.dirs.is_empty() => {
                &*kept.get_or_insert_with(|| front_coded(&last.dirs))
            }
            _ => {
                fresh = front_coded(dirs);
                &fresh
            }
        };
        let wds = handed.as_ref().map(|h| (&h.wds[..], &h.tops[..]));
        let reply = encode_parts(&scan, dirs.len(), blob, wds);
        Some((reply, handed))
    }

    /// Each top's entries that the warden keeps from launch: those the rule protects at a top
    /// (`Below::protects_top`: what the warden binds read-only there, or takes away when it was
    /// not there at launch), and `HEAD` (a top taking git's shape), with the inode each names.
    /// Listed again only after an event of a top: when a launcher asks, the index has read its
    /// queue (every change before that is known), and the watches made ahead have watched the
    /// tops since before it, so every change after is an event for the warden.
    fn top_names(&mut self) -> &super::Tops {
        let below = &self.below;
        self.top_names.get_or_insert_with(|| {
            let list = |root: &PathBuf| {
                let mut names = Vec::new();
                if let Ok(d) = std::fs::File::open(root) {
                    let _ = crate::sys::each_dirent(d.as_raw_fd(), |name, _, ino| {
                        if below.protects_top(name) || name == b"HEAD" {
                            names.push((name.to_vec(), ino));
                        }
                    });
                }
                (root.clone(), names)
            };
            self.roots.iter().map(list).collect()
        })
    }

    /// Whether the next launch's watches are to be made ahead now: none are made or being made,
    /// and the last scan stands. The caller plans them ([`Index::ahead_plan`]) and places them
    /// ([`Ahead::place`]) off the answer's path, and gives them back ([`Index::install_ahead`]).
    pub fn wants_ahead(&mut self) -> bool {
        // Only when every directory the last scan read is held (`last`): one that is not may
        // be on a filesystem whose changes raise no event here (an overlay's layer written
        // beside it, a network filesystem, FUSE), where its path can come to name another
        // directory that the watch made ahead does not watch.
        if self.ahead.is_some() || self.preparing || self.last.is_none() {
            return false;
        }
        // (One lent comes back when its launch ends: made again only if it does not, or when
        // a launch runs beside one that takes long.)
        if self.lent.as_ref().is_some_and(|(_, _, at)| at.elapsed() < LEND_WAIT) {
            return false;
        }
        self.preparing = true;
        true
    }

    /// Notes the instance of `handed` as lent (one lent before is let go: its launch runs
    /// long, and this is the newer), with the tops' entries the warden keeps from launch.
    fn lend(&mut self, (mut handed, ahead): (Handed, Ahead)) -> Handed {
        self.lends += 1;
        handed.lend = self.lends;
        handed.tops = self.top_names().to_vec();
        if let Some((_, old, _)) = self.lent.replace((self.lends, ahead, Instant::now())) {
            super::ahead::let_go(old);
        }
        handed
    }

    /// The instance lent as `lend` given back by its warden, once the command ended and its
    /// last events were read. `clean`: the warden read no event that may have changed what a
    /// watched path names (the same judgement as [`Ahead::judge`]'s) and changed no watch of
    /// it (the watches it added are removed). Kept for the next answer, which judges what came
    /// since (true), unless it is not clean, not the one lent, or one made ahead waits already.
    pub fn give_back(&mut self, lend: u64, clean: bool) -> bool {
        let Some((_, ahead, _)) = self.lent.take_if(|(n, _, _)| *n == lend) else {
            return false;
        };
        if clean && self.ahead.is_none() && !self.preparing && self.last.is_some() {
            self.ahead = Some(ahead);
            return true;
        }
        super::ahead::let_go(ahead);
        false
    }

    /// The instance lent as if [`LEND_WAIT`] had passed since: the tests' way to a launch beside
    /// one that runs long, without waiting for it.
    #[cfg(test)]
    pub(crate) fn lent_long_ago(&mut self) {
        if let Some((_, _, at)) = self.lent.as_mut() {
            *at = at.checked_sub(LEND_WAIT).unwrap_or(*at);
        }
    }

    /// The queue of the instance kept for the next answer read and forgotten (see
    /// [`Ahead::lose_events`]).
    #[cfg(test)]
    pub(crate) fn lose_ahead_events(&mut self) {
        if let Some(ahead) = &self.ahead {
            ahead.lose_events();
        }
    }

    /// What to watch ahead, from the last scan (`None`: it no longer stands).
    pub fn ahead_plan(&self) -> Option<Vec<(PathBuf, u32)>> {
        self.last.as_ref().map(|last| plan(last, &self.roots))
    }

    /// Keeps watches made ahead (`None`: they could not be made) for the next answer.
    pub fn install_ahead(&mut self, ahead: Option<Ahead>) {
        self.preparing = false;
        if ahead.is_some() {
            self.ahead = ahead;
        }
    }

    /// Lists again the directories whose listings `named` were dropped (an entry made, removed
    /// or changed in each), each watched first, and holds them again; whether every one says
    /// what it said (then the last scan stands: a build's new files change no listing the scan
    /// keeps, which holds only names it acts on).
    fn listed_again(&mut self, named: Vec<(PathBuf, Entries)>) -> bool {
        if self.last.is_none() {
            return false;
        }
        let below = &self.below;
        let mut same = true;
        for (dir, old) in named {
            let held = &mut self.held;
            held.watched_now.clear();
            let _ = held.before(&dir);
            let top = self.roots.contains(&dir);
            let mut sort = super::Classifier::new(below, &self.rule, top);
            if super::list(&dir, &mut |name, kind| sort.add(name, kind)).is_err() {
                same = false;
                continue;
            }
            let found = sort.finish();
            same &= found == old;
            held.found(&dir, &found);
            same &= held.records.contains_key(&dir);
        }
        self.held.watched_now.clear();
        same
    }

    /// The breadth-first part of a scan through what is held; kept as [`Index::last`] when
    /// every directory it read is held.
    fn bfs(&mut self) -> Scan {
        let start = memory::now();
        (self.held.asked, self.held.held_now) = (0, 0);
        let mut out = super::scan_with(
            &self.roots,
            &self.rule,
            &self.below,
            self.bounds,
            start,
            Some(&mut self.held),
        );
        out.memory = None;
        self.held.watched_now.clear();
        self.read = self.held.asked;
        // (A directory that could not be listed, or not watched, is read again every time.)
        let all_held = self.held.held_now == self.held.asked;
        self.last = all_held.then(|| out.clone());
        self.last_dirs = None;
        self.scans += 1;
        out
    }

    /// Whether the tops are the directories the index was built of and the mount table is as
    /// it was.
    fn still_valid(&mut self) -> bool {
        let tops = self.tops.len() == self.roots.len()
            && self.tops.iter().all(|(p, dev, ino)| {
                std::fs::metadata(p).is_ok_and(|m| m.dev() == *dev && m.ino() == *ino)
            });
        let Some(mounts) = &self.mounts else { return false };
        let mut fds = [libc::pollfd { fd: mounts.as_raw_fd(), events: libc::POLLPRI, revents: 0 }];
        let moved = match crate::sys::poll(&mut fds, 0) {
            Ok(_) => fds[0].revents & (libc::POLLPRI | libc::POLLERR) != 0,
            Err(_) => true,
        };
        tops && !moved && !self.ways.moved()
    }
}

/// The directories `scan` read: its own, or those of `last` (the index's last scan) when it
/// left them there (see `Index::scan_lean`).
fn read_dirs<'a>(last: &'a Option<Scan>, scan: &'a Scan) -> &'a [PathBuf] {
    match last {
        Some(last) if scan.dirs.is_empty() => &last.dirs,
        _ => &scan.dirs,
    }
}

/// Every event queued on the inotify descriptor `fd` as (watch, mask, name); `None` when the
/// queue cannot be read.
pub(crate) fn drain(fd: std::os::fd::RawFd) -> Option<Vec<(i32, u32, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match crate::sys::read(fd, &mut buf) {
            Ok(0) => return None,
            Ok(n) => out.extend(parse(&buf[..n])),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Some(out),
            Err(_) => return None,
        }
    }
}

/// The events in one `read` of an inotify descriptor, as (watch, mask, name): the one reading
/// of the kernel's `struct inotify_event` layout, the warden's too.
pub(crate) fn parse(buf: &[u8]) -> Vec<(i32, u32, Vec<u8>)> {
    const HEAD: usize = 16;
    let mut out = Vec::new();
    let mut at = 0;
    while at + HEAD <= buf.len() {
        let word =
            |i: usize| u32::from_ne_bytes(buf[at + i..at + i + 4].try_into().unwrap_or([0; 4]));
        let len = word(12) as usize;
        let Some(name) = buf.get(at + HEAD..at + HEAD + len) else { break };
        let name = name.split(|&b| b == 0).next().unwrap_or_default().to_vec();
        out.push((word(0) as i32, word(4), name));
        at += HEAD + len;
    }
    out
}

/// What identifies an index: the writable paths (sorted), the rule, the bounds and sandgate's
/// version (the scan memory's header).
pub fn key(roots: &[PathBuf], rule: &TopLevel) -> Vec<u8> {
    let mut roots = roots.to_vec();
    roots.sort();
    let bounds = (super::SCAN_DEPTH, rule.scan_directories.unwrap_or(super::SCAN_DIRS));
    memory::header(&roots, rule, bounds)
}

/// The first bytes of a launcher's question and of the daemon's answer.
const ASK: &[u8] = b"sandgate-tree-ask 2\n";
const ANSWER: &[u8] = b"sandgate-tree-answer 4\n";

/// How long an instance lent to a launch's warden is waited for before the next launch's are
/// made anew (a launch beside one that runs long).
const LEND_WAIT: Duration = Duration::from_secs(1);

/// What the warden says when it gives its instance back clean (see [`Index::give_back`]), on
/// the connection its launcher asked on; the daemon answers [`KEPT`] when it keeps it.
pub const GIVEN_BACK: u8 = b'k';
/// See [`GIVEN_BACK`].
pub const KEPT: u8 = b'y';

/// `bytes` framed: their length first (a little-endian `u32`). Questions and answers are
/// framed on `tree.sock`, whose connection stays open after them (see [`GIVEN_BACK`]).
pub fn framed(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 4);
    put_u32(&mut out, bytes.len());
    out.extend_from_slice(bytes);
    out
}

/// Reads one frame ([`framed`]) of at most `limit` bytes; `first`: what was read of it already.
/// The rest is read straight into the frame's own buffer (no zeroing, no copy of the bulk: a
/// large tree's answer is ~140 KB, and zeroing and moving it cost ~0.15 ms of a launch).
pub fn read_framed(
    r: &mut impl std::io::Read,
    mut first: Vec<u8>,
    limit: usize,
) -> std::io::Result<Vec<u8>> {
    let bad = || std::io::Error::from(std::io::ErrorKind::InvalidData);
    if first.len() < 4 {
        let mut more = [0u8; 4];
        let missing = &mut more[..4 - first.len()];
        r.read_exact(missing)?;
        first.extend_from_slice(missing);
    }
    let len = u32::from_le_bytes(first[..4].try_into().map_err(|_| bad())?) as usize;
    if len > limit || first.len() > len + 4 {
        return Err(bad());
    }
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&first[4..]);
    let want = (len - out.len()) as u64;
    std::io::Read::read_to_end(&mut std::io::Read::take(&mut *r, want), &mut out)?;
    if out.len() != len {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(out)
}

/// A launcher's question: the writable paths and the parts of the rule the scan obeys.
pub fn encode_ask(roots: &[PathBuf], rule: &TopLevel) -> Vec<u8> {
    let mut out = ASK.to_vec();
    paths(&mut out, roots);
    for list in [&rule.writable, &rule.protected, &rule.below, &rule.review, &rule.skip] {
        put_u32(&mut out, list.len());
        for s in list {
            memory::field(&mut out, s.as_bytes());
        }
    }
    out.extend_from_slice(&(rule.scan_directories.map_or(0, |n| n as u64 + 1)).to_le_bytes());
    let memory = rule.scan_memory.as_deref().map_or(&[][..], |m| m.as_os_str().as_bytes());
    memory::field(&mut out, memory);
    out
}

/// The question read back: the writable paths and the rule (its scan memory is for the index's
/// first scan only); `None` when it is not one.
pub fn decode_ask(bytes: &[u8]) -> Option<(Vec<PathBuf>, TopLevel)> {
    let mut r = memory::Reader::new(bytes);
    if r.take(ASK.len())? != ASK {
        return None;
    }
    let roots = r.paths()?;
    let mut lists = Vec::new();
    for _ in 0..5 {
        let n = r.u32()?;
        let list: Option<Vec<String>> =
            (0..n).map(|_| String::from_utf8(r.field()?.to_vec()).ok()).collect();
        lists.push(list?);
    }
    let dirs = r.u64()?;
    let memory = Some(r.path()?).filter(|m| !m.as_os_str().is_empty());
    let [writable, protected, below, review, skip] = <[Vec<String>; 5]>::try_from(lists).ok()?;
    let rule = TopLevel {
        writable,
        protected,
        below,
        review,
        skip,
        quarantine: None,
        placeholders: Vec::new(),
        scan_directories: dirs.checked_sub(1).map(|n| n as usize),
        scan_memory: memory,
    };
    r.at_end().then_some((roots, rule))
}

/// The daemon's answer: the scan, or `None` (no index yet: the launcher scans itself); with
/// `ahead`, the watch of each of its directories in the instance sent with the answer.
pub fn encode_answer(scan: Option<&Scan>, ahead: Option<&[i32]>) -> Vec<u8> {
    match scan {
        Some(s) => {
            encode_parts(s, s.dirs.len(), &front_coded(&s.dirs), ahead.map(|w| (w, &[][..])))
        }
        None => {
            let mut out = ANSWER.to_vec();
            out.push(0);
            out
        }
    }
}

/// [`encode_answer`] of `s` with its `count` directories already front-coded in `dirs`.
fn encode_parts(
    s: &Scan,
    count: usize,
    dirs: &[u8],
    ahead: Option<(&[i32], &super::Tops)>,
) -> Vec<u8> {
    let mut out = ANSWER.to_vec();
    out.push(1);
    put_u32(&mut out, count);
    memory::field(&mut out, dirs);
    for list in [&s.protected, &s.closed, &s.skipped, &s.reviewed, &s.review_files] {
        paths(&mut out, list);
    }
    paths(&mut out, &s.links);
    put_u32(&mut out, s.repositories.len());
    for r in &s.repositories {
        let (tag, p) = match r {
            Repository::DotGit(p) => (0, p),
            Repository::GitDir(p) => (1, p),
        };
        out.push(tag);
        memory::field(&mut out, p.as_os_str().as_bytes());
    }
    put_u32(&mut out, s.unread.len());
    for u in &s.unread {
        memory::field(&mut out, u.path.as_os_str().as_bytes());
        let (tag, n) = match u.why {
            Stop::Depth => (0, 0),
            Stop::Count(n) => (1, n as u64),
            Stop::Unreadable(k) => (2, kind_code(k)),
        };
        out.push(tag);
        out.extend_from_slice(&n.to_le_bytes());
    }
    put_u32(&mut out, s.ways_in.len());
    for w in &s.ways_in {
        memory::field(&mut out, w.link.as_os_str().as_bytes());
        memory::field(&mut out, w.target.as_os_str().as_bytes());
    }
    out.extend_from_slice(&(s.recalled as u64).to_le_bytes());
    match ahead {
        Some((wds, tops)) => {
            out.push(1);
            put_u32(&mut out, wds.len());
            for wd in wds {
                out.extend_from_slice(&wd.to_le_bytes());
            }
            put_u32(&mut out, tops.len());
            for (root, names) in tops {
                memory::field(&mut out, root.as_os_str().as_bytes());
                put_u32(&mut out, names.len());
                for (name, ino) in names {
                    memory::field(&mut out, name);
                    out.extend_from_slice(&ino.to_le_bytes());
                }
            }
        }
        None => out.push(0),
    }
    out
}

/// The answer read back: `Some(None)` for "no index yet", `None` when it is not an answer. `fd`:
/// the descriptor that came with it (the watches made ahead, when the answer names them).
pub fn decode_answer(bytes: &[u8], fd: Option<std::os::fd::OwnedFd>) -> Option<Option<Scan>> {
    let mut r = memory::Reader::new(bytes);
    if r.take(ANSWER.len())? != ANSWER {
        return None;
    }
    match r.take(1)?[0] {
        0 => return r.at_end().then_some(None),
        1 => {}
        _ => return None,
    }
    let count = r.u32()? as usize;
    let dirs = r.field()?;
    let mut s = Scan {
        protected: r.paths()?,
        closed: r.paths()?,
        skipped: r.paths()?,
        reviewed: r.paths()?,
        review_files: r.paths()?,
        links: r.paths()?,
        ..Scan::default()
    };
    for _ in 0..r.u32()? {
        let tag = r.take(1)?[0];
        let p = r.path()?;
        s.repositories.push(match tag {
            0 => Repository::DotGit(p),
            1 => Repository::GitDir(p),
            _ => return None,
        });
    }
    for _ in 0..r.u32()? {
        let path = r.path()?;
        let tag = r.take(1)?[0];
        let n = r.u64()?;
        let why = match tag {
            0 => Stop::Depth,
            1 => Stop::Count(n as usize),
            2 => Stop::Unreadable(kind_of(n)),
            _ => return None,
        };
        s.unread.push(Unread { path, why });
    }
    for _ in 0..r.u32()? {
        s.ways_in.push(WayIn { link: r.path()?, target: r.path()? });
    }
    s.recalled = r.u64()? as usize;
    if r.take(1)?[0] == 1 {
        let n = r.u32()? as usize;
        let wds: Option<Vec<i32>> = (0..n)
            .map(|_| r.take(4).and_then(|b| b.try_into().ok()).map(i32::from_le_bytes))
            .collect();
        let wds = wds?;
        let mut tops = Vec::new();
        for _ in 0..r.u32()? {
            let root = r.path()?;
            let names: Option<super::TopNames> =
                (0..r.u32()?).map(|_| Some((r.field()?.to_vec(), r.u64()?))).collect();
            tops.push((root, names?));
        }
        // The directories stay encoded: read by the warden process, and only when an event
        // needs them (`Handed::dirs`), off the launch's path. (Without the descriptor, or for
        // other directories: read now, and the warden places its own watches.)
        if let Some(fd) = fd.filter(|_| wds.len() == count) {
            let mut handed = Handed::new(fd, wds, dirs.to_vec());
            handed.tops = tops;
            s.ahead = Some(std::sync::Arc::new(handed));
        }
    }
    if s.ahead.is_none() {
        s.dirs = front_decoded(dirs, count)?;
    }
    r.at_end().then_some(Some(s))
}

/// The error kinds a listing fails with, as numbers on the wire.
const KINDS: [std::io::ErrorKind; 3] =
    [std::io::ErrorKind::PermissionDenied, std::io::ErrorKind::NotFound, std::io::ErrorKind::Other];

fn kind_code(k: std::io::ErrorKind) -> u64 {
    KINDS.iter().position(|x| *x == k).unwrap_or(KINDS.len() - 1) as u64
}

fn kind_of(n: u64) -> std::io::ErrorKind {
    KINDS.get(n as usize).copied().unwrap_or(std::io::ErrorKind::Other)
}

/// `list` front-coded: each path as the length of what it shares with the one before it and the
/// rest (two little-endian `u16`s, then the bytes). The scan's order is breadth-first, so
/// siblings share all but their last name: a tenth of the bytes of a 100,000-file checkout's
/// directories.
pub(crate) fn front_coded(list: &[PathBuf]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut before: &[u8] = &[];
    for p in list {
        let b = p.as_os_str().as_bytes();
        let shared = b.iter().zip(before).take_while(|(x, y)| x == y).count().min(0xffff);
        let rest = &b[shared..];
        // (A path is at most PATH_MAX bytes; a longer one would not be watched anyway.)
        let rest = &rest[..rest.len().min(0xffff)];
        out.extend_from_slice(&(shared as u16).to_le_bytes());
        out.extend_from_slice(&(rest.len() as u16).to_le_bytes());
        out.extend_from_slice(rest);
        before = b;
    }
    out
}

/// [`front_coded`] read back: `count` paths, or `None` when `blob` is not that.
pub(crate) fn front_decoded(blob: &[u8], count: usize) -> Option<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = Vec::with_capacity(count.min(1 << 16));
    let mut at = 0;
    let mut last: Vec<u8> = Vec::new();
    for _ in 0..count {
        let word = |i: usize| -> Option<usize> {
            Some(u16::from_le_bytes(blob.get(i..i + 2)?.try_into().ok()?) as usize)
        };
        let (shared, n) = (word(at)?, word(at + 2)?);
        let rest = blob.get(at + 4..at + 4 + n)?;
        if shared > last.len() {
            return None;
        }
        last.truncate(shared);
        last.extend_from_slice(rest);
        out.push(PathBuf::from(std::ffi::OsStr::from_bytes(&last)));
        at += 4 + n;
    }
    (at == blob.len()).then_some(out)
}

fn put_u32(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u32).to_le_bytes());
}

fn paths(out: &mut Vec<u8>, list: &[PathBuf]) {
    put_u32(out, list.len());
    for p in list {
        memory::field(out, p.as_os_str().as_bytes());
    }
}

/// The index's own fields, on the memory file's reader.
impl memory::Reader<'_> {
    fn path(&mut self) -> Option<PathBuf> {
        Some(PathBuf::from(std::ffi::OsStr::from_bytes(self.field()?)))
    }
    fn paths(&mut self) -> Option<Vec<PathBuf>> {
        let n = self.u32()? as usize;
        let mut out = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            out.push(self.path()?);
        }
        Some(out)
    }
}

#[cfg(test)]
pub(crate) mod tests;
