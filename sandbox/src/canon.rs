//! Canonical paths for the Seatbelt profile, computed through a [`Links`] seam so the algorithm is
//! tested on every OS with a map of symlinks.
//!
//! Seatbelt matches the *real* path of a vnode: on macOS `/tmp`, `/var` and `/etc` are symlinks
//! into `/private`, so a rule for `/tmp/x` matches nothing, and a rule for a symlinked `~/.ssh`
//! does not cover the directory it points to. Every path of the spec is therefore resolved here
//! before it becomes a `-D` parameter; deny rules name both the canonical path and the spelling
//! the user gave (so the link itself cannot be replaced or renamed either).
//!
//! Resolution is `realpath(3)` without requiring the path to exist: the longest existing prefix
//! is resolved (symlinks anywhere in it, relative or absolute targets, `..` after a link is taken
//! physically), and the missing rest is appended as written. Loops end after [`MAX_HOPS`] links,
//! like the kernel's `ELOOP`, leaving the rest unresolved.

use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// Links followed before giving up (macOS `MAXSYMLINKS` is 32).
pub const MAX_HOPS: usize = 32;

/// Reads symbolic links: the filesystem, or a fake of it in tests.
pub trait Links {
    /// The target of `path` when `path` is a symbolic link; `None` otherwise (or when missing).
    fn read_link(&self, path: &Path) -> Option<PathBuf>;
}

/// The real filesystem.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealLinks;

impl Links for RealLinks {
    fn read_link(&self, path: &Path) -> Option<PathBuf> {
        std::fs::read_link(path).ok()
    }
}

/// A filesystem that is nothing but a map of symlinks (link path → target), for tests.
#[derive(Debug, Clone, Default)]
pub struct MapLinks(pub BTreeMap<PathBuf, PathBuf>);

impl MapLinks {
    /// The macOS layout: `/tmp`, `/var` and `/etc` point into `/private`.
    pub fn macos() -> Self {
        MapLinks::default()
            .link("/tmp", "private/tmp")
            .link("/var", "private/var")
            .link("/etc", "private/etc")
    }

    /// Adds a link at `path` pointing to `target` (absolute or relative to the link's directory).
    pub fn link(mut self, path: impl Into<PathBuf>, target: impl Into<PathBuf>) -> Self {
        self.0.insert(path.into(), target.into());
        self
    }
}

impl Links for MapLinks {
    fn read_link(&self, path: &Path) -> Option<PathBuf> {
        self.0.get(path).cloned()
    }
}

/// The canonical form of absolute path `path` (a relative one is taken from `/`).
pub fn canonical(links: &dyn Links, path: &Path) -> PathBuf {
    let mut todo: VecDeque<OsString> = VecDeque::new();
    push_components(&mut todo, path, false);
    let mut out = PathBuf::from("/");
    let mut hops = 0;
    while let Some(c) = todo.pop_front() {
        if c == ".." {
            out.pop();
            continue;
        }
        let next = out.join(&c);
        match links.read_link(&next).filter(|_| hops < MAX_HOPS) {
            Some(target) => {
                hops += 1;
                push_components(&mut todo, &target, true);
                if target.is_absolute() {
                    out = PathBuf::from("/");
                }
            }
            None => out = next,
        }
    }
    out
}

/// Queues the components of `p` (`.` dropped, `..` kept), at the front when `front`.
fn push_components(todo: &mut VecDeque<OsString>, p: &Path, front: bool) {
    let parts: Vec<OsString> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    if front {
        for part in parts.into_iter().rev() {
            todo.push_front(part);
        }
    } else {
        todo.extend(parts);
    }
}

/// `path` with `.` and `..` removed lexically (no links followed): the spelling the user gave.
pub fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Every spelling a deny rule must cover: the canonical path first, then the given spelling
/// when it differs (a symlinked credential directory is denied at its target *and* its link).
pub fn spellings(links: &dyn Links, path: &Path) -> Vec<PathBuf> {
    let real = canonical(links, path);
    let given = lexical(path);
    if given == real { vec![real] } else { vec![real, given] }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn canonical_table() {
        let fs = MapLinks::macos()
            .link("/Users/u/.ssh", "/Volumes/keys/ssh")
            .link("/Users/u/.aws", "dotfiles/aws")
            .link("/Users/u/dotfiles", "/Users/u/src/dotfiles")
            .link("/Users/u/up", "../shared")
            .link("/loop/a", "/loop/b")
            .link("/loop/b", "/loop/a");
        for (given, want) in [
            ("/tmp/sandgate-1000", "/private/tmp/sandgate-1000"),
            ("/var/folders/xx/T/x.sock", "/private/var/folders/xx/T/x.sock"),
            ("/private/tmp/a", "/private/tmp/a"),
            ("/Users/u/.ssh", "/Volumes/keys/ssh"),
            ("/Users/u/.ssh/id_ed25519", "/Volumes/keys/ssh/id_ed25519"),
            // relative target, through a second link
            ("/Users/u/.aws/credentials", "/Users/u/src/dotfiles/aws/credentials"),
            // `..` in a link target is taken from the link's directory
            ("/Users/u/up/x", "/Users/shared/x"),
            // `..` after a link is physical: /tmp/.. is /private
            ("/tmp/../etc/hosts", "/private/etc/hosts"),
            ("/Users/u/./project/../project", "/Users/u/project"),
            ("/", "/"),
        ] {
            assert_eq!(canonical(&fs, &p(given)), p(want), "{given}");
        }
        // A loop ends (like ELOOP) instead of spinning.
        let looped = canonical(&fs, &p("/loop/a/x"));
        assert!(looped.starts_with("/loop"), "{looped:?}");
    }

    #[test]
    fn spellings_name_the_link_and_its_target() {
        let fs = MapLinks::macos().link("/Users/u/.ssh", "/Volumes/keys/ssh");
        assert_eq!(
            spellings(&fs, &p("/Users/u/.ssh")),
            [p("/Volumes/keys/ssh"), p("/Users/u/.ssh")]
        );
        assert_eq!(spellings(&fs, &p("/tmp/x")), [p("/private/tmp/x"), p("/tmp/x")]);
        assert_eq!(spellings(&fs, &p("/Users/u/.aws")), [p("/Users/u/.aws")]);
    }
}
