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
//!   runs (a new protected name is taken away, a changed review name is reported).
//!
//! The top of each writable path is read too (for a repository there), but its entries are the
//! top-level rule's: the warden lists the top itself.
//!
//! What it costs: one `getdents` per directory and nothing per file (the entry's type comes with
//! its name); see docs/performance.md ("Writable trees") for a 100,000-file tree. The bound
//! ([`SCAN_DEPTH`] levels, [`SCAN_DIRS`] directories) keeps a huge tree from delaying every
//! launch without limit; what lies past it is listed in [`Scan::unread`] and said at launch.

use std::collections::VecDeque;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::top_level::Below;

/// How many levels below the top of a writable path are read.
pub const SCAN_DEPTH: usize = 24;
/// How many directories are read at most, over all writable paths.
pub const SCAN_DIRS: usize = 20_000;

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
    /// Directories not looked into: nothing below them is protected or watched.
    pub unread: Vec<Unread>,
    /// Build output not entered.
    pub skipped: Vec<PathBuf>,
    /// Directories below the tops holding files the rule reviews: the warden watches them for
    /// changes to existing files too (elsewhere, what is made is enough to know).
    pub reviewed: Vec<PathBuf>,
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
    /// [`SCAN_DIRS`] directories had been read.
    Count,
    /// Listing it failed (permissions).
    Unreadable(std::io::ErrorKind),
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Depth => write!(f, "deeper than {SCAN_DEPTH} levels"),
            Stop::Count => write!(f, "past {SCAN_DIRS} directories"),
            Stop::Unreadable(kind) => write!(f, "unreadable: {kind}"),
        }
    }
}

/// What one directory's entries say: the pure part of the scan.
#[derive(Debug, Default, PartialEq, Eq)]
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
    /// Entries the rule reviews are there.
    pub(crate) review: bool,
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

    /// One entry: its name, and whether it is a directory (not through a link).
    pub(crate) fn add(&mut self, name: &[u8], dir: bool) {
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
            self.out.review = true;
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
        } else if dir {
            if self.below.skips(name) {
                self.out.skip.push(name.to_vec());
            } else {
                self.out.enter.push(name.to_vec());
            }
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
    scan_within(roots, rule, SCAN_DEPTH, SCAN_DIRS)
}

/// [`scan`] with other bounds.
pub(crate) fn scan_within(
    roots: &[PathBuf],
    rule: &crate::TopLevel,
    max_depth: usize,
    max_dirs: usize,
) -> Scan {
    let below = Below::new(rule);
    let mut out = Scan::default();
    // A writable path inside another is read as part of the outer one.
    let mut tops: Vec<&PathBuf> = roots.iter().filter(|r| r.is_dir()).collect();
    tops.sort();
    tops.dedup_by(|inner, outer| inner.starts_with(outer));
    let mut todo: VecDeque<(PathBuf, usize)> = tops.iter().map(|t| ((*t).clone(), 0)).collect();
    let mut read = 0;
    while let Some((dir, depth)) = todo.pop_front() {
        if read == max_dirs {
            out.unread.push(Unread { path: dir, why: Stop::Count });
            out.unread.extend(todo.drain(..).map(|(path, _)| Unread { path, why: Stop::Count }));
            break;
        }
        read += 1;
        // (A top inside another writable path is that path's top too.)
        let mut sort = Classifier::new(&below, rule, roots.contains(&dir));
        if let Err(e) = list(&dir, &mut |name, is_dir| sort.add(name, is_dir)) {
            out.unread.push(Unread { path: dir, why: Stop::Unreadable(e.kind()) });
            continue;
        }
        let found = sort.finish();
        if found.git_dir {
            out.repositories.push(Repository::GitDir(dir));
            continue;
        }
        if found.dot_git && depth > 0 {
            out.repositories.push(Repository::DotGit(dir.join(".git")));
        }
        if depth > 0 {
            if found.review {
                out.reviewed.push(dir.clone());
            }
            out.dirs.push(dir.clone());
        }
        let child = |n: &Vec<u8>| dir.join(std::ffi::OsStr::from_bytes(n));
        out.protected.extend(found.protect.iter().map(child));
        out.skipped.extend(found.skip.iter().map(child));
        for name in &found.enter {
            if depth < max_depth {
                todo.push_back((child(name), depth + 1));
            } else {
                out.unread.push(Unread { path: child(name), why: Stop::Depth });
            }
        }
    }
    out
}

/// Calls `f` with the name of every entry of `dir` and whether it is a directory (not following
/// a symbolic link).
#[cfg(target_os = "linux")]
fn list(dir: &Path, f: &mut dyn FnMut(&[u8], bool)) -> std::io::Result<()> {
    crate::linux::each_entry_of(dir, f)
}

/// (See the Linux one.)
#[cfg(not(target_os = "linux"))]
fn list(dir: &Path, f: &mut dyn FnMut(&[u8], bool)) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        f(e.file_name().as_bytes(), e.file_type().is_ok_and(|t| t.is_dir()));
    }
    Ok(())
}

/// The line a launch prints when the scan stopped early: how many directories it did not look
/// into and the first few (`explain` lists them all), or `None` when it read everything.
pub fn unread_notice(unread: &[Unread], shown: usize) -> Option<String> {
    unread.first()?;
    let mut why: Vec<String> = Vec::new();
    for u in unread {
        let w = u.why.to_string();
        if !why.contains(&w) {
            why.push(w);
        }
    }
    let names: Vec<String> =
        unread.iter().take(shown).map(|u| u.path.display().to_string()).collect();
    let more = unread.len().saturating_sub(shown);
    let tail = if more > 0 { format!(" and {more} more") } else { String::new() };
    Some(format!(
        "the scan of the writable paths did not look into {} director{} ({}): {}{tail}; \
         repositories and tool files there are not protected, and new ones there are not taken \
         away (`sandgate explain --tier build` lists them all; launch in a smaller directory)",
        unread.len(),
        if unread.len() == 1 { "y" } else { "ies" },
        why.join("; "),
        names.join(", "),
    ))
}

#[cfg(test)]
mod tests;
