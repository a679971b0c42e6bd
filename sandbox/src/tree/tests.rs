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
    let notice = unread_notice(&scan.unread, 3).unwrap();
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
    assert!(scan.unread.iter().all(|u| u.why == Stop::Count));
    let notice = unread_notice(&scan.unread, 2).unwrap();
    assert!(notice.contains("7 directories (past 20000 directories)"), "{notice}");
    assert!(notice.contains(" and 5 more;"), "{notice}");
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
    assert_eq!(unread_notice(&[], 5), None);
}
