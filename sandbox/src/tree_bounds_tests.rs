//! The scan's classifier and bounds with small numbers: what `tree::tests` shows at the real
//! bounds (20 000 directories, some seconds) in milliseconds, so that a mutation run of
//! `tree.rs` can leave the big one out. (Apart from `tree/tests.rs`, which changes often.)

use std::path::{Path, PathBuf};

use crate::TopLevel;
use crate::top_level::Below;
use crate::tree::{Classifier, Entries, Kind, Scan, Stop, Unread, scan_within, unread_notice};

fn dirs(root: &Path, rows: &[&str]) {
    for r in rows {
        std::fs::create_dir_all(root.join(r)).unwrap();
    }
}

/// What one directory's entries make of it: `(name, is a directory)`.
fn classify(entries: &[(&str, bool)], is_top: bool) -> Entries {
    let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let rule = TopLevel {
        below: own(&[".envrc"]),
        review: own(&["build.rs"]),
        skip: own(&["target"]),
        ..TopLevel::default()
    };
    let below = Below::new(&rule);
    let mut c = Classifier::new(&below, &rule, is_top);
    for (name, dir) in entries {
        c.add(name.as_bytes(), if *dir { Kind::Dir } else { Kind::Other });
    }
    c.finish()
}

#[test]
fn a_directory_has_gits_shape_with_head_and_objects_and_refs_or_with_commondir() {
    for (entries, git_dir) in [
        (&[("HEAD", false), ("objects", true), ("refs", true)][..], true),
        (&[("HEAD", false), ("commondir", false)], true),
        (&[("HEAD", false), ("objects", true), ("refs", true), ("commondir", false)], true),
        (&[("HEAD", false), ("objects", true)], false),
        (&[("HEAD", false), ("refs", true)], false),
        (&[("objects", true), ("refs", true)], false),
        (&[("objects", true), ("refs", true), ("commondir", false)], false),
        (&[("HEAD", false)], false),
    ] {
        let found = classify(entries, false);
        assert_eq!(found.git_dir, git_dir, "{entries:?}");
        if git_dir {
            // Its inside is the git wall's: nothing else of it is entered or protected.
            assert_eq!(found, Entries { git_dir: true, ..Entries::default() }, "{entries:?}");
        } else {
            assert_eq!(found.enter.len(), entries.iter().filter(|(_, d)| *d).count());
        }
    }
}

#[test]
fn entries_are_protected_entered_skipped_or_reviewed() {
    let below = [
        (".envrc", false),
        ("src", true),
        ("target", true),
        ("build.rs", false),
        (".git", true),
        ("x", false),
    ];
    let found = classify(&below, false);
    assert_eq!(found.protect, [b".envrc".to_vec()]);
    assert_eq!(found.enter, [b"src".to_vec()], "`.git` is not entered");
    assert_eq!(found.skip, [b"target".to_vec()]);
    assert_eq!(found.review, [b"build.rs".to_vec()]);
    assert!(found.dot_git && !found.git_dir);
    // At the top the top-level rule decides, and what it protects the mount plan covers: no
    // name is listed, and a protected directory is not entered either.
    let found = classify(&[(".envrc", false), (".cache", true), ("src", true)], true);
    assert!(found.protect.is_empty());
    assert_eq!(found.enter, [b"src".to_vec()]);
    assert!(found.review.is_empty() && !found.dot_git);
}

#[test]
fn past_a_small_count_bound_what_is_queued_is_listed_as_unread() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    dirs(&root, &["w/0", "w/1", "w/2", "w/3", "w/4"]);
    let scan = scan_within(std::slice::from_ref(&root), &TopLevel::default(), 24, 4);
    // The top, `w` and two of its five subdirectories are read.
    assert_eq!(scan.dirs.len(), 3, "{:?}", scan.dirs);
    assert_eq!(scan.unread.len(), 3, "{:?}", scan.unread);
    assert!(scan.unread.iter().all(|u| u.why == Stop::Count(4)));
    let all = scan_within(std::slice::from_ref(&root), &TopLevel::default(), 24, 7);
    assert_eq!((all.dirs.len(), all.unread.len()), (6, 0), "a bound just big enough");
}

#[test]
fn past_a_small_depth_bound_the_deeper_directories_are_listed_as_unread() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    dirs(&root, &["a/b/c/d", "x"]);
    let scan = scan_within(std::slice::from_ref(&root), &TopLevel::default(), 2, 100);
    // Breadth first (in each level, the order the directory lists them).
    let mut got: Vec<PathBuf> =
        scan.dirs.iter().map(|d| d.strip_prefix(&root).unwrap().into()).collect();
    got[..2].sort();
    assert_eq!(got, [PathBuf::from("a"), "x".into(), "a/b".into()]);
    assert_eq!(scan.unread.len(), 1);
    assert_eq!(
        (scan.unread[0].path.clone(), scan.unread[0].why),
        (root.join("a/b/c"), Stop::Depth)
    );
}

#[test]
fn the_notice_counts_what_it_does_not_name() {
    let unread = |n: usize| -> Scan {
        let unread: Vec<Unread> =
            (0..n).map(|i| Unread { path: format!("/w/{i}").into(), why: Stop::Depth }).collect();
        let closed = unread.iter().map(|u| u.path.clone()).collect();
        Scan { unread, closed, ..Scan::default() }
    };
    let one = unread_notice(&unread(1), 1).unwrap();
    assert!(one.contains("1 directory (deeper than 24 levels): /w/0;"), "{one}");
    let shown = unread_notice(&unread(2), 2).unwrap();
    assert!(shown.contains("2 directories (deeper than 24 levels): /w/0, /w/1;"), "{shown}");
    let more = unread_notice(&unread(3), 1).unwrap();
    assert!(more.contains(": /w/0 and 2 more;"), "{more}");
}

#[test]
fn the_repository_at_a_top_is_left_to_the_git_wall() {
    // The git wall finds the repositories at and above a writable path itself (git's discovery);
    // the scan reports those below it.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    dirs(&root, &[".git", "sub/.git"]);
    let scan = scan_within(std::slice::from_ref(&root), &TopLevel::default(), 24, 100);
    assert_eq!(scan.repositories, [crate::tree::Repository::DotGit(root.join("sub/.git"))]);
}
