//! Watches placed ahead: the inotify instance a `build` launch's warden needs (a watch on every
//! directory the scan read, see `linux::warden`), made by the daemon between launches and handed
//! to the next launch with the index's answer, so that no launch places thousands of watches on
//! its own path (~3 µs each: 16-21 ms in a 100,000-file checkout).
//!
//! # Why a handed instance is as good as one the warden made at launch
//!
//! The warden relies on two things of its instance: each watch is on the directory its map
//! names, and every change made in a watched directory after the launch's scan is an event. An
//! instance made ahead is handed only when both hold:
//!
//! - **placed by path, top-down**: the tops first, then each directory after its parent; a path
//!   resolved when its watch is placed names what is there then, and a later change of what it
//!   names (the directory moved away, removed, another moved over it) is an event of its parent,
//!   watched before it, or of the directory itself (`IN_MOVE_SELF`, `IN_DELETE_SELF`,
//!   `IN_IGNORED`). The ways to the tops are the index's (a change there drops the index, and
//!   this instance with it);
//! - **judged before the scan it is handed with**: when a launcher asks, the instance's queue is
//!   read *first* ([`Ahead::judge`]); any event that may have changed what a watched path names
//!   (above), or an overflow, and the instance is dropped (that launch's warden places its own
//!   watches). Then the index reads its own queue and answers: everything made before that is in
//!   the answer, everything made after the instance's queue was read is still queued in it, for
//!   the warden. Events of plain files read here concern the host's changes before the launch,
//!   which the answer already holds;
//! - **the same directories, the same masks**: handed only when the directories it watches are
//!   exactly the tops and the directories of the answer ([`Ahead::hand`]); a directory whose mask
//!   must change (it now holds a review file) is watched again with the new mask, which the
//!   kernel applies to the same watch (a different watch descriptor back: not handed);
//! - **where every change is an event**: made only while the index holds every directory of
//!   the scan (`Index::wants_ahead`), i.e. on filesystems whose changes are all made here. On an
//!   overlay whose layer is written beside it, a network filesystem or FUSE, a path can come to
//!   name another directory with no event at all (the old one still watched).
//!
//! Its watches count with the index's against the half of `fs.inotify.max_user_watches` that
//! the indexes may hold; past it, none is made ahead.
//!
//! # Given back
//!
//! A handed instance is lent, not given: the index keeps its own copy, unread (the queue is the
//! warden's meanwhile), and the warden gives it back on the connection its launcher asked on
//! once the command ended and its last sweep read the queue (`Warden::give_back`,
//! `Index::give_back`). So the next launch's watches are this one's, and no launch's end frees
//! thousands of watches for the next one to place again. The argument above carries over
//! because the warden judges every event it reads as [`Ahead::judge`] would, and gives nothing
//! back after one that may have changed what a watched path names, after a lost event, or after
//! one of the lent watches was watched again with another mask (a new directory's, a guard's, a
//! review file's, placed by a path that reached it); it removes the watches it added itself
//! first, whose ends [`Ahead::judge`] passes over. What came after its last read is judged at
//! the next question, as for any instance made ahead.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd as _, AsRawFd as _};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;

use super::index::{WATCHES, drain, watch_budget};
use super::{Handed, Scan};

/// What the warden watches on every directory read below a top: entries made there, moved in
/// or out. (A build writing thousands of files there wakes the warden once for each; their
/// writes do not.)
pub(crate) const DIR_EVENTS_NEW: u32 = libc::IN_CREATE
    | libc::IN_MOVED_TO
    | libc::IN_MOVED_FROM
    | libc::IN_ONLYDIR
    | libc::IN_DONT_FOLLOW;

/// On a top, and on a directory holding files the rule reviews: also their writes (closed after
/// writing), changes of metadata (`chmod +x`) and removals.
pub(crate) const DIR_EVENTS: u32 =
    DIR_EVENTS_NEW | libc::IN_CLOSE_WRITE | libc::IN_ATTRIB | libc::IN_DELETE;

/// The directories to watch ahead for a launch like the one `scan` answered: the tops, then the
/// directories read, each with its mask, parents before children (the scan's order is
/// breadth-first). Paths are compared, never hashed (a hundred thousand path components).
fn plan_iter<'a>(
    dirs: &'a [PathBuf],
    reviewed: &'a [PathBuf],
    roots: &'a [PathBuf],
) -> impl Iterator<Item = (&'a Path, u32)> {
    let mut reviewed: Vec<&[u8]> = reviewed.iter().map(|p| bytes(p)).collect();
    reviewed.sort_unstable();
    let tops = roots.iter().enumerate().filter(|(i, r)| !is_root(r, &roots[..*i])).map(|(_, r)| r);
    let below = dirs.iter().filter(|d| !is_root(d, roots));
    tops.map(|r| (r.as_path(), DIR_EVENTS)).chain(below.map(move |d| {
        let review = reviewed.binary_search(&d.as_os_str().as_bytes()).is_ok();
        (d.as_path(), if review { DIR_EVENTS } else { DIR_EVENTS_NEW })
    }))
}

/// [`plan_iter`], owned: what the daemon places off the answer's path.
pub fn plan(scan: &Scan, roots: &[PathBuf]) -> Vec<(PathBuf, u32)> {
    plan_iter(&scan.dirs, &scan.reviewed, roots).map(|(d, m)| (d.to_path_buf(), m)).collect()
}

/// A path's bytes: compared as such (`Path`'s `==` compares name by name, ten times slower over
/// thousands of paths).
fn bytes(p: &Path) -> &[u8] {
    p.as_os_str().as_bytes()
}

fn is_root(d: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|r| bytes(r) == bytes(d))
}

/// An instance with its watches, made ahead for the next launch.
#[derive(Debug)]
pub struct Ahead {
    inotify: nix::sys::inotify::Inotify,
    /// Each directory watched, in [`plan`] order: its mask and watch.
    dirs: Vec<(PathBuf, u32, i32)>,
    /// Watch → its directory's place in `dirs`.
    by_watch: HashMap<i32, usize>,
    /// The scan it was last handed with, found to fit it ([`Ahead::hand`]): that scan's
    /// number at the index (see `Index::scans`), and the watch of each of its directories.
    fitted: Option<(u64, Vec<i32>)>,
}

impl Drop for Ahead {
    fn drop(&mut self) {
        WATCHES.fetch_sub(self.dirs.len(), Relaxed);
    }
}

/// Whether an event (`mask`, `name`) of the watch on `dir` (`None`: a watch not in the map) may
/// have changed what a watched path names: a directory watched moved away, removed, or another
/// moved over it; the queue overflowed.
pub(crate) fn unsettles(
    mask: u32,
    name: &[u8],
    dir: Option<&Path>,
    watched: &mut dyn FnMut(&Path) -> bool,
) -> bool {
    let gone = libc::IN_Q_OVERFLOW
        | libc::IN_IGNORED
        | libc::IN_UNMOUNT
        | libc::IN_DELETE_SELF
        | libc::IN_MOVE_SELF;
    if mask & gone != 0 {
        return true;
    }
    let Some(dir) = dir else { return true };
    let entry_moved = libc::IN_MOVED_FROM | libc::IN_MOVED_TO | libc::IN_DELETE | libc::IN_CREATE;
    mask & libc::IN_ISDIR != 0
        && mask & entry_moved != 0
        && watched(&dir.join(std::ffi::OsStr::from_bytes(name)))
}

impl Ahead {
    /// Watches each of `dirs` (from [`plan`]) in order; `None` when one cannot be watched (gone
    /// since, or the indexes' share of inotify watches used up).
    pub fn place(dirs: Vec<(PathBuf, u32)>) -> Option<Ahead> {
        if WATCHES.load(Relaxed) + dirs.len() > watch_budget() {
            return None;
        }
        let inotify = crate::sys::inotify_init().ok()?;
        let fd = inotify.as_fd().as_raw_fd();
        let mut ahead = Ahead {
            inotify,
            dirs: Vec::with_capacity(dirs.len()),
            by_watch: HashMap::with_capacity(dirs.len()),
            fitted: None,
        };
        for (dir, mask) in dirs {
            let wd = crate::sys::inotify_watch(fd, &dir, mask).ok()?;
            // (One inode under two paths, a directory bound over another: not made ahead.)
            if ahead.by_watch.insert(wd, ahead.dirs.len()).is_some() {
                return None;
            }
            ahead.dirs.push((dir, mask, wd));
            WATCHES.fetch_add(1, Relaxed);
        }
        Some(ahead)
    }

    /// Reads the queue and forgets it: the tests' control of a judgement that missed events.
    #[cfg(test)]
    pub(crate) fn lose_events(&self) {
        let _ = drain(self.inotify.as_fd().as_raw_fd());
    }

    /// Reads the whole queue; `Some` when nothing in it may have changed what a watched path
    /// names.
    pub fn judge(self) -> Option<Ahead> {
        let Some(events) = drain(self.inotify.as_fd().as_raw_fd()) else {
            let_go(self);
            return None;
        };
        // (Only for the events of directories, which are few: paths hashed once each then.)
        let mut watched: Option<HashSet<&Path>> = None;
        let settled = !events.iter().any(|(wd, mask, name)| {
            let dir = self.by_watch.get(wd).map(|i| self.dirs[*i].0.as_path());
            // (A watch not in the map is none this instance stands for: one a warden added
            // and removed before giving the instance back, see `Index::give_back`.)
            if dir.is_none() && mask & libc::IN_Q_OVERFLOW == 0 {
                return false;
            }
            unsettles(*mask, name, dir, &mut |p| {
                watched
                    .get_or_insert_with(|| self.dirs.iter().map(|d| d.0.as_path()).collect())
                    .contains(p)
            })
        });
        if settled {
            Some(self)
        } else {
            let_go(self);
            None
        }
    }

    /// The instance for the launch that `scan` (made in `roots` after [`Ahead::judge`]) answers:
    /// a watch per directory of `scan.dirs`, in its order; `None` (and dropped) when it does not
    /// watch exactly the tops and those directories, in that order, each with the mask the
    /// warden wants. With it, this instance, lent: the daemon keeps it (unread) until the
    /// warden gives it back (see `Index::give_back`).
    ///
    /// `scan_no` numbers the scan at the index: the same number, the same directories and
    /// review files (`Index::scans`). An instance given back and handed again with the scan it
    /// was found to fit is not compared again (6,692 paths in a 100,000-file checkout, at every
    /// launch): its watches are those it had, since [`Ahead::judge`] found nothing that may have
    /// changed what a watched path names, and nothing changed a mask (a warden that watched one
    /// again with another gives nothing back).
    pub fn hand(
        mut self,
        dirs: &[PathBuf],
        reviewed: &[PathBuf],
        roots: &[PathBuf],
        scan_no: u64,
    ) -> Option<(Handed, Ahead)> {
        let wds = match self.fitted.take() {
            Some((no, wds)) if no == scan_no => wds,
            _ => match self.fit(dirs, reviewed, roots) {
                Some(wds) => wds,
                None => {
                    let_go(self);
                    return None;
                }
            },
        };
        match self.inotify.as_fd().try_clone_to_owned() {
            Ok(fd) => {
                let handed = Handed::new(fd, wds.clone(), Vec::new());
                self.fitted = Some((scan_no, wds));
                Some((handed, self))
            }
            Err(_) => {
                let_go(self);
                None
            }
        }
    }

    /// The watch of each of `dirs` when this instance watches exactly the tops and those
    /// directories, in that order, each with the mask the warden wants (a mask changed is
    /// given to the same watch, and noted: the next comparison is with what the kernel
    /// holds); `None` otherwise.
    fn fit(
        &mut self,
        dirs: &[PathBuf],
        reviewed: &[PathBuf],
        roots: &[PathBuf],
    ) -> Option<Vec<i32>> {
        let fd = self.inotify.as_fd().as_raw_fd();
        let mut mine = self.dirs.iter_mut();
        let mut wants = plan_iter(dirs, reviewed, roots);
        let fits = loop {
            match (mine.next(), wants.next()) {
                (None, None) => break true,
                (Some((dir, mask, wd)), Some((want, m))) if bytes(dir) == bytes(want) => {
                    // (Its mask changed: the same watch takes the new one.)
                    if *mask != m {
                        if crate::sys::inotify_watch(fd, dir, m).ok() != Some(*wd) {
                            break false;
                        }
                        *mask = m;
                    }
                }
                _ => break false,
            }
        };
        if !fits {
            return None;
        }
        let watch_of = |d: &PathBuf| -> i32 {
            // (A top among the directories read: a writable path inside another.)
            let mine = self.dirs.iter().take_while(|(r, _, _)| is_root(r, roots));
            mine.filter(|(r, _, _)| bytes(r) == bytes(d)).map(|e| e.2).next().unwrap_or(-1)
        };
        let mut below = self.dirs.iter().skip_while(|(d, _, _)| is_root(d, roots));
        let wds = dirs
            .iter()
            .map(|d| if is_root(d, roots) { watch_of(d) } else { below.next().map_or(-1, |e| e.2) })
            .collect();
        Some(wds)
    }
}

/// Drops `ahead` on a thread of its own: the last close of an inotify instance waits for an SRCU
/// grace period in the kernel (10-20 ms), which no answer should wait for.
pub(crate) fn let_go(ahead: Ahead) {
    let _ = std::thread::Builder::new().name("sandgate-ahead-drop".into()).spawn(|| drop(ahead));
}
