use super::*;
use crate::TopLevel;

fn rule() -> TopLevel {
    let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    TopLevel {
        writable: own(&[".venv", ".tmp*"]),
        protected: own(&["rust-toolchain.toml"]),
        below: own(&[".git", ".cargo", ".envrc", "rust-toolchain.toml", ".npmrc", "mise.toml"]),
        review: own(&["build.rs"]),
        skip: own(&["node_modules", "target"]),
        ..TopLevel::default()
    }
}

/// A tree under a temporary directory from `(path, kind)` rows: a trailing `/` makes a
/// directory, `-> target` a symbolic link, anything else a file.
fn tree(rows: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    for row in rows {
        if let Some((link, target)) = row.split_once(" -> ") {
            let p = root.join(link);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(target, p).unwrap();
        } else if let Some(d) = row.strip_suffix('/') {
            std::fs::create_dir_all(root.join(d)).unwrap();
        } else {
            let p = root.join(row);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "x").unwrap();
        }
    }
    (dir, root)
}

fn rel(root: &Path, v: &[PathBuf]) -> Vec<String> {
    let mut out: Vec<String> =
        v.iter().map(|p| p.strip_prefix(root).unwrap().display().to_string()).collect();
    out.sort();
    out
}

fn repos(root: &Path, scan: &Scan) -> Vec<String> {
    let mut out: Vec<String> = scan
        .repositories
        .iter()
        .map(|r| match r {
            Repository::DotGit(p) => format!("dotgit {}", p.strip_prefix(root).unwrap().display()),
            Repository::GitDir(p) => format!("gitdir {}", p.strip_prefix(root).unwrap().display()),
        })
        .collect();
    out.sort();
    out
}

/// A layout, and what the scan must find in it (paths relative to the top).
struct Row {
    what: &'static str,
    layout: &'static [&'static str],
    protected: &'static [&'static str],
    repositories: &'static [&'static str],
    dirs: &'static [&'static str],
    skipped: &'static [&'static str],
}

const ROWS: &[Row] = &[
    Row {
        what: "tool files at every depth; the top is the top-level rule's",
        layout: &[
            ".cargo/config.toml",
            ".envrc",
            "crates/a/.cargo/config.toml",
            "crates/a/src/lib.rs",
            "crates/a/rust-toolchain.toml",
            "sub/.envrc",
            "sub/deeper/x/.npmrc",
            "sub/deeper/x/mise.toml",
            "sub/build.rs",
        ],
        protected: &[
            "crates/a/.cargo",
            "crates/a/rust-toolchain.toml",
            "sub/.envrc",
            "sub/deeper/x/.npmrc",
            "sub/deeper/x/mise.toml",
        ],
        repositories: &[],
        // A protected directory (`.cargo`) is read-only as a whole: not entered.
        dirs: &["crates", "crates/a", "crates/a/src", "sub", "sub/deeper", "sub/deeper/x"],
        skipped: &[],
    },
    Row {
        what: "build output is not entered, wherever it is",
        layout: &[
            "target/debug/.cargo/config.toml",
            "node_modules/x/.npmrc",
            "web/node_modules/.bin/tool",
            "py/.venv/bin/python",
            "py/.tmp1/x",
            "py/.pytest_cache/v",
        ],
        protected: &[],
        repositories: &[],
        dirs: &["py", "py/.pytest_cache", "web"],
        skipped: &["node_modules", "py/.tmp1", "py/.venv", "target", "web/node_modules"],
    },
    Row {
        what: "a bare repository named like anything, a mirror, a .git below; not entered",
        layout: &[
            "fixtures/mirror.git/HEAD",
            "fixtures/mirror.git/objects/",
            "fixtures/mirror.git/refs/heads/",
            "fixtures/mirror.git/hooks/pre-receive.sample",
            "fixtures/plain/HEAD",
            "data/HEAD",
            "data/refs/",
            "wt/HEAD",
            "wt/commondir",
            "src/projA/.git/HEAD",
            "src/projA/.envrc",
            "src/pointer/.git",
        ],
        protected: &["src/projA/.envrc"],
        repositories: &[
            "dotgit src/pointer/.git",
            "dotgit src/projA/.git",
            "gitdir fixtures/mirror.git",
            "gitdir wt",
        ],
        // `fixtures/plain` and `data` lack part of git's shape: ordinary directories.
        dirs: &[
            "data",
            "data/refs",
            "fixtures",
            "fixtures/plain",
            "src",
            "src/pointer",
            "src/projA",
        ],
        skipped: &[],
    },
    Row {
        what: "symbolic links are not followed",
        layout: &["real/.envrc", "link -> real", "dotenv -> /etc", "sub/.envrc -> ../real/.envrc"],
        // (`real/.envrc` is a file of its own; the link `sub/.envrc` is protected as a link.)
        protected: &["real/.envrc", "sub/.envrc"],
        repositories: &[],
        dirs: &["real", "sub"],
        skipped: &[],
    },
];

#[test]
fn the_scan_finds_tool_files_repositories_and_what_to_watch() {
    for row in ROWS {
        let (_dir, root) = tree(row.layout);
        let scan = scan(std::slice::from_ref(&root), &rule());
        assert_eq!(rel(&root, &scan.protected), row.protected, "{}: protected", row.what);
        assert_eq!(repos(&root, &scan), row.repositories, "{}: repositories", row.what);
        assert_eq!(rel(&root, &scan.dirs), row.dirs, "{}: dirs", row.what);
        assert_eq!(rel(&root, &scan.skipped), row.skipped, "{}: skipped", row.what);
        assert!(scan.unread.is_empty(), "{}: {:?}", row.what, scan.unread);
    }
}

#[test]
fn a_top_that_is_a_bare_repository_is_one() {
    let (_dir, root) = tree(&["HEAD", "objects/", "refs/", "hooks/"]);
    let scan = scan(std::slice::from_ref(&root), &rule());
    assert_eq!(scan.repositories, vec![Repository::GitDir(root.clone())]);
    assert!(scan.dirs.is_empty());
}

#[test]
fn past_the_depth_bound_the_directories_are_listed_as_unread() {
    let deep: String = (0..SCAN_DEPTH + 2).map(|i| format!("d{i}/")).collect();
    let (_dir, root) = tree(&[deep.as_str()]);
    let scan = scan(std::slice::from_ref(&root), &rule());
    assert_eq!(scan.dirs.len(), SCAN_DEPTH, "levels 1..=SCAN_DEPTH are read");
    assert_eq!(scan.unread.len(), 1, "{:?}", scan.unread);
    assert_eq!(scan.unread[0].why, Stop::Depth);
    let want: PathBuf = (0..=SCAN_DEPTH).map(|i| format!("d{i}")).collect();
    assert_eq!(scan.unread[0].path, root.join(want));
    let notice = unread_notice(&scan, 3).unwrap();
    assert!(notice.contains("1 directory (deeper than 24 levels)"), "{notice}");
}

#[test]
fn past_the_count_bound_what_is_queued_is_listed_as_unread() {
    // SCAN_DIRS + 5 directories side by side below one: the first ones are read.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    for i in 0..SCAN_DIRS + 5 {
        std::fs::create_dir_all(root.join(format!("w/{i}"))).unwrap();
    }
    let scan = scan(std::slice::from_ref(&root), &rule());
    // The top and `w` count: SCAN_DIRS - 2 of its subdirectories are read.
    assert_eq!(scan.dirs.len(), SCAN_DIRS - 1);
    assert_eq!(scan.unread.len(), 7);
    assert!(scan.unread.iter().all(|u| u.why == Stop::Count(SCAN_DIRS)));
    let notice = unread_notice(&scan, 2).unwrap();
    assert!(notice.contains("7 directories (past 20000 directories)"), "{notice}");
    assert!(notice.contains(" and 5 more;"), "{notice}");
    assert!(notice.contains("scan_directories"), "the way to raise it: {notice}");
    // What was not read is read-only for the launch.
    let mut unread: Vec<PathBuf> = scan.unread.iter().map(|u| u.path.clone()).collect();
    unread.sort();
    assert_eq!(scan.closed, unread);
    assert!(scan.closed.iter().all(|c| scan.protected.contains(c)));
}

#[test]
fn an_unreadable_directory_is_listed_and_the_rest_read() {
    use std::os::unix::fs::PermissionsExt as _;
    let (_dir, root) = tree(&["closed/x/.envrc", "open/.envrc"]);
    std::fs::set_permissions(root.join("closed"), std::fs::Permissions::from_mode(0o000)).unwrap();
    let readable = std::fs::read_dir(root.join("closed")).is_ok(); // root reads it anyway
    let scan = scan(std::slice::from_ref(&root), &rule());
    std::fs::set_permissions(root.join("closed"), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(rel(&root, &scan.protected).contains(&"open/.envrc".to_owned()));
    if !readable {
        assert_eq!(scan.unread.len(), 1);
        assert!(matches!(scan.unread[0].why, Stop::Unreadable(_)));
    }
}

#[test]
fn nested_writable_paths_are_read_once() {
    let (_dir, root) = tree(&["inner/.envrc", "inner/x/.envrc"]);
    let inner = root.join("inner");
    let scan = scan(&[inner.clone(), root.clone()], &rule());
    // `inner` is a top: its own entries are the top-level rule's.
    assert_eq!(rel(&root, &scan.protected), ["inner/x/.envrc"]);
    assert_eq!(rel(&root, &scan.dirs), ["inner", "inner/x"]);
}

#[test]
fn no_notice_when_everything_was_read() {
    assert_eq!(unread_notice(&Scan::default(), 5), None);
}

/// Issue 31, third round: a flood of directories makes the next scan stop early. What it did
/// not read is read-only, in a bounded number of mounts: past [`CLOSED_MOUNTS`] unread
/// directories, their parent stands for them (more read-only than needed, never unprotected).
#[test]
fn what_the_scan_did_not_read_is_closed_in_few_mounts() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    for i in 0..40 {
        std::fs::create_dir_all(root.join(format!("flood/{i}/x"))).unwrap();
    }
    std::fs::create_dir_all(root.join("src/a")).unwrap();
    // Few unread: each one closed as it is.
    // (84 directories: the top, `flood`, `src`, `src/a`, 40 `flood/N` and 40 `flood/N/x`.)
    let few = scan_within(std::slice::from_ref(&root), &rule(), SCAN_DEPTH, 79);
    assert!(!few.unread.is_empty() && few.unread.len() <= CLOSED_MOUNTS, "{:?}", few.unread);
    assert_eq!(few.closed.len(), few.unread.len());
    // Many: their parent `flood` (read, but standing for its unread children) is closed.
    let many = scan_within(std::slice::from_ref(&root), &rule(), SCAN_DEPTH, 10);
    assert!(many.unread.len() > CLOSED_MOUNTS, "{}", many.unread.len());
    assert!(many.closed.len() <= CLOSED_MOUNTS, "{:?}", many.closed);
    for u in &many.unread {
        assert!(
            many.closed.iter().any(|c| u.path.starts_with(c)),
            "{} not closed",
            u.path.display()
        );
    }
    assert!(many.closed.contains(&root.join("flood")), "{:?}", many.closed);
    let notice = unread_notice(&many, 3).unwrap();
    assert!(
        notice.contains(&format!("read-only for this launch: {}", root.join("flood").display())),
        "{notice}"
    );
    // Control: a bound that reads everything closes nothing.
    let all = scan(std::slice::from_ref(&root), &rule());
    assert!(all.unread.is_empty() && all.closed.is_empty());
    // Past the depth bound too; and never above a top, however many.
    let deep: String = (0..SCAN_DEPTH + 2).map(|i| format!("d{i}/")).collect();
    let (_d, root2) = tree(&[deep.as_str()]);
    let s2 = scan(std::slice::from_ref(&root2), &rule());
    assert_eq!(s2.closed, vec![s2.unread[0].path.clone()]);
    let tops: Vec<PathBuf> =
        (0..CLOSED_MOUNTS + 3).map(|i| root.join(format!("flood/{i}"))).collect();
    let unread: Vec<Unread> =
        tops.iter().map(|p| Unread { path: p.clone(), why: Stop::Count(1) }).collect();
    assert_eq!(closed(&unread, &tops).len(), tops.len(), "tops are never coarsened");
}

/// The review files are listed, at the top and below (the warden watches each inode).
#[test]
fn review_files_are_listed() {
    let (_dir, root) = tree(&["build.rs", "sub/build.rs", "sub/lib.rs", "target/build.rs"]);
    let scan = scan(std::slice::from_ref(&root), &rule());
    assert_eq!(rel(&root, &scan.review_files), ["build.rs", "sub/build.rs"]);
}

/// Issue 31, third round: a project directory replaced by a symbolic link into build output
/// (`crates/foo` → `target/foo`, which the scan does not enter) is a way in; a link to a
/// directory the scan reads, to a file in build output, out of the writable path, to a
/// read-only place, or named like build output is not.
#[test]
fn a_link_into_build_output_is_a_way_in() {
    let (_dir, root) = tree(&[
        "target/foo/.envrc",
        "target/app",
        "src/a/lib.rs",
        "crates/a/.cargo/config.toml",
        "crates/foo -> ../target/foo",
        "crates/deep -> ../crates/../target/foo/",
        "crates/src -> ../src/a",
        "crates/app -> ../target/app",
        "crates/out -> /etc",
        "crates/cfg -> a/.cargo",
        "crates/node_modules -> ../target/foo",
        "top -> target",
        "dangling -> target/later",
    ]);
    let scan = scan(std::slice::from_ref(&root), &rule());
    let mut ways: Vec<String> = scan
        .ways_in
        .iter()
        .map(|w| {
            format!(
                "{} {}",
                w.link.strip_prefix(&root).unwrap().display(),
                w.target.strip_prefix(&root).unwrap().display()
            )
        })
        .collect();
    ways.sort();
    assert_eq!(ways, ["crates/deep target/foo", "crates/foo target/foo", "top target"]);
    assert!(!rel(&root, &scan.links).contains(&"crates/node_modules".to_owned()));
    assert!(rel(&root, &scan.links).contains(&"dangling".to_owned()), "judged again at the end");
    let refusal = way_in_refusal(&scan.ways_in[0]);
    assert!(refusal.contains("Replace the link with the directory"), "{refusal}");
}

/// The rule a new link is judged by (the warden's): a file or nothing yet where a directory
/// could be made unwatched is a way in too.
#[test]
fn a_new_link_is_judged_by_where_a_directory_could_appear() {
    let (_dir, root) = tree(&["src/x.rs", "target/app", "crates/a/.cargo/config.toml"]);
    let top = TopLevel { ..rule() };
    let below = crate::top_level::Below::new(&top);
    let protected = vec![root.join("crates/a/.cargo")];
    let ro = ReadOnly { rule: &top, protected: &protected };
    let tops = vec![root.clone()];
    let read = |d: &Path| {
        d == root || d == root.join("src") || d == root.join("crates") || d == root.join("crates/a")
    };
    let table: &[(&str, Option<Kind>, bool)] = &[
        ("target/app", Some(Kind::Other), true), // a file in build output
        ("target/later", None, true),            // nothing yet, in build output
        ("src/x.rs", Some(Kind::Other), false),  // a file in a watched directory
        ("src/later", None, false),              // made there, it would be watched
        ("src/target", None, true),              // made there, it would be build output
        ("src", Some(Kind::Dir), false),
        ("target", Some(Kind::Dir), true),
        ("crates/a/.cargo/x", None, false), // read-only
        (".cargo/x", None, false),          // read-only at the top
        (".git/x", None, true),             // the git wall's: writable in part
        ("src/../target/x", None, true),    // `..` in what is still to be made
    ];
    for (rel, kind, want) in table {
        let t = root.join(rel);
        assert_eq!(leads_in(&t, *kind, &tops, &read, &ro, &below), *want, "{rel}");
    }
    assert!(!leads_in(Path::new("/etc"), Some(Kind::Dir), &tops, &read, &ro, &below), "outside");
}

/// The scan's memory (Linux: elsewhere nothing is remembered).
#[cfg(target_os = "linux")]
mod memory_tests {
    use super::*;

    /// A rule that remembers its scans in `dir`.
    fn remembering(dir: &Path) -> TopLevel {
        TopLevel { scan_memory: Some(dir.to_path_buf()), ..rule() }
    }

    /// A start ten seconds from now: everything made so far counts as settled.
    fn later() -> (i64, i64) {
        let (s, n) = memory::now();
        (s + 10, n)
    }

    /// Waits until the filesystem's clock has moved past every timestamp made so far in `dir` (a
    /// tick of the kernel's coarse clock): the changes that follow get times of their own, as a
    /// change made after a real launch's settled margin does.
    fn next_tick(dir: &Path) {
        use std::os::unix::fs::MetadataExt as _;
        // (Beside the tree, on the same filesystem: a probe inside would change the top.)
        let beside = tempfile::tempdir_in(dir.parent().unwrap()).unwrap();
        let probe = beside.path().join("tick");
        std::fs::write(&probe, "").unwrap();
        let first = std::fs::metadata(&probe).unwrap();
        let t0 = (first.ctime(), first.ctime_nsec());
        loop {
            std::fs::write(&probe, "x").unwrap();
            let m = std::fs::metadata(&probe).unwrap();
            if (m.ctime(), m.ctime_nsec()) > t0 {
                break;
            }
        }
        std::fs::remove_file(probe).unwrap();
    }

    /// What must be the same whether a scan listed or recalled.
    fn found(root: &Path, scan: &Scan) -> Vec<Vec<String>> {
        vec![
            rel(root, &scan.protected),
            rel(root, &scan.dirs),
            rel(root, &scan.skipped),
            rel(root, &scan.review_files),
            rel(root, &scan.links),
            repos(root, scan),
        ]
    }

    const LAYOUT: &[&str] = &[
        "crates/a/.cargo/config.toml",
        "crates/a/build.rs",
        "crates/a/src/lib.rs",
        "sub/x/y/plain.rs",
        "sub/keep.rs",
        "deep/a/b/c/d.rs",
        "fixtures/m.git/HEAD",
        "fixtures/m.git/objects/",
        "fixtures/m.git/refs/",
        "target/debug/x",
        "bin/app -> ../target/debug/x",
    ];

    /// The previous launch's memory: an unchanged tree is recalled, not listed, and found the same.
    #[test]
    fn an_unchanged_tree_is_recalled_not_listed() {
        let (_dir, root) = tree(LAYOUT);
        let mem = tempfile::tempdir().unwrap();
        let rule = remembering(mem.path());
        let roots = [root.clone()];
        let first = scan_at(&roots, &rule, (SCAN_DEPTH, SCAN_DIRS), later());
        assert_eq!(first.recalled, 0, "nothing remembered yet");
        let memory = first.memory.clone().expect("a memory to write");
        // Every directory read: the top, those below it, the bare repository.
        let read = first.dirs.len() + 2;
        assert_eq!(memory.len(), read);
        memory.write().unwrap();
        let second = scan_at(&roots, &rule, (SCAN_DEPTH, SCAN_DIRS), later());
        assert_eq!(second.recalled, read, "every directory recalled");
        assert_eq!(found(&root, &second), found(&root, &first));
        assert!(second.memory.is_none(), "nothing new to remember");
        // Control: without the memory, the same.
        assert_eq!(found(&root, &scan(&roots, &super::rule())), found(&root, &first));
    }

    /// Every way a tree can change between launches that a key could miss: the scan with the
    /// memory finds what a fresh scan finds, and lists again exactly the directories that changed
    /// (the control that the memory was used: the rest were recalled).
    #[test]
    fn every_change_between_launches_is_seen() {
        use std::os::unix::fs::MetadataExt as _;
        type Change = fn(&Path);
        let rows: &[(&str, Change, &[&str])] = &[
            (
                "a planted file, the directory's mtime set back (same mtime, same second)",
                |root| {
                    let before = std::fs::metadata(root.join("sub")).unwrap();
                    std::fs::write(root.join("sub/.envrc"), "planted").unwrap();
                    let t = nix::sys::time::TimeSpec::new(before.mtime(), before.mtime_nsec());
                    let flags = nix::sys::stat::UtimensatFlags::NoFollowSymlink;
                    nix::sys::stat::utimensat(None, &root.join("sub"), &t, &t, flags).unwrap();
                    assert_eq!(
                        std::fs::metadata(root.join("sub")).unwrap().mtime(),
                        before.mtime()
                    );
                },
                &["sub"],
            ),
            (
                "a directory holding a tool config renamed in from outside the tree",
                |root| {
                    let outside = root
                        .parent()
                        .unwrap()
                        .join(format!("{}-out", root.file_name().unwrap().to_string_lossy()));
                    std::fs::create_dir_all(outside.join("m/.cargo")).unwrap();
                    std::fs::rename(outside.join("m"), root.join("sub/x/m")).unwrap();
                    std::fs::remove_dir_all(outside).unwrap();
                },
                &["sub/x", "sub/x/m"],
            ),
            (
                "a hard link named like a tool config",
                |root| {
                    std::fs::hard_link(root.join("sub/keep.rs"), root.join("deep/a/.npmrc"))
                        .unwrap();
                },
                &["deep/a"],
            ),
            (
                "a directory swapped for another with the same times",
                |root| {
                    let old = std::fs::metadata(root.join("deep/a/b")).unwrap();
                    std::fs::create_dir_all(root.join("deep/a/new/c")).unwrap();
                    std::fs::write(root.join("deep/a/new/.envrc"), "planted").unwrap();
                    let t = nix::sys::time::TimeSpec::new(old.mtime(), old.mtime_nsec());
                    let flags = nix::sys::stat::UtimensatFlags::NoFollowSymlink;
                    nix::sys::stat::utimensat(None, &root.join("deep/a/new"), &t, &t, flags)
                        .unwrap();
                    nix::fcntl::renameat2(
                        None,
                        &root.join("deep/a/new"),
                        None,
                        &root.join("deep/a/b"),
                        nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                    )
                    .unwrap();
                    nix::sys::stat::utimensat(None, &root.join("deep/a"), &t, &t, flags).unwrap();
                },
                &["deep/a", "deep/a/b", "deep/a/b/c", "deep/a/new", "deep/a/new/c"],
            ),
            (
                "a change deep down only",
                |root| std::fs::write(root.join("deep/a/b/c/.envrc"), "planted").unwrap(),
                &["deep/a/b/c"],
            ),
            (
                "a repository made of a plain directory",
                |root| {
                    std::fs::write(root.join("sub/x/y/HEAD"), "ref: refs/heads/main\n").unwrap();
                    std::fs::create_dir_all(root.join("sub/x/y/objects")).unwrap();
                    std::fs::create_dir_all(root.join("sub/x/y/refs")).unwrap();
                },
                &["sub/x/y"],
            ),
            (
                "a link into build output replacing a directory",
                |root| {
                    std::fs::remove_dir_all(root.join("crates/a/src")).unwrap();
                    std::os::unix::fs::symlink("../../target", root.join("crates/a/src")).unwrap();
                },
                &["crates/a"],
            ),
        ];
        for (what, change, relisted) in rows {
            let (_dir, root) = tree(LAYOUT);
            let mem = tempfile::tempdir().unwrap();
            let rule = remembering(mem.path());
            let roots = [root.clone()];
            let first = scan_at(&roots, &rule, (SCAN_DEPTH, SCAN_DIRS), later());
            first.memory.clone().unwrap().write().unwrap();
            next_tick(&root);
            change(&root);
            let fresh = scan(&roots, &super::rule());
            let recalled = scan_at(&roots, &rule, (SCAN_DEPTH, SCAN_DIRS), later());
            assert_eq!(found(&root, &recalled), found(&root, &fresh), "{what}");
            assert_ne!(found(&root, &fresh), found(&root, &first), "{what}: the change matters");
            let read = fresh.dirs.len() + 2; // (the top and the bare repository too)
            let listed = read - recalled.recalled;
            let existed = relisted.iter().filter(|d| fresh.dirs.contains(&root.join(d))).count();
            assert_eq!(listed, existed, "{what}: only the changed directories are listed again");
        }
    }

    /// A directory changed within the clock's tick before the scan is not remembered (the key of a
    /// change in the same tick could be the same); nor is a memory used under another rule, from
    /// a scan that began after this one (the clock set back), or cut short.
    #[test]
    fn what_could_be_stale_is_not_remembered_or_used() {
        let (_dir, root) = tree(LAYOUT);
        let mem = tempfile::tempdir().unwrap();
        let rule = remembering(mem.path());
        let roots = [root.clone()];
        let now = scan(&roots, &rule);
        assert!(now.memory.is_none_or(|m| m.is_empty()), "everything was changed just now");
        let first = scan_at(&roots, &rule, (SCAN_DEPTH, SCAN_DIRS), later());
        first.memory.clone().unwrap().write().unwrap();
        let n = first.dirs.len() + 2; // (the top and the bare repository too)
        assert_eq!(scan_at(&roots, &rule, (SCAN_DEPTH, SCAN_DIRS), later()).recalled, n, "control");
        let other = TopLevel { below: vec![".envrc".into()], ..remembering(mem.path()) };
        assert_eq!(scan_at(&roots, &other, (SCAN_DEPTH, SCAN_DIRS), later()).recalled, 0, "rule");
        assert_eq!(scan(&roots, &rule).recalled, 0, "a memory from the future");
        let file = std::fs::read_dir(mem.path()).unwrap().next().unwrap().unwrap().path();
        let bytes = std::fs::read(&file).unwrap();
        std::fs::write(&file, &bytes[..bytes.len() - 3]).unwrap();
        assert_eq!(scan_at(&roots, &rule, (SCAN_DEPTH, SCAN_DIRS), later()).recalled, 0, "cut");
    }
}
