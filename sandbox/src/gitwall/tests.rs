use std::process::Command;

use super::*;

/// Runs git in `dir` with no user or system configuration of the machine's.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "protocol.file.allow=always", "-c", "user.email=a@b", "-c", "user.name=n"])
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A scratch tree with a library repository `lib` (with a nested submodule `inner`) and a
/// repository `w` that the layouts fill.
struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    w: PathBuf,
}

impl Tree {
    fn new() -> Tree {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for name in ["leaf", "lib", "w"] {
            std::fs::create_dir(root.join(name)).unwrap();
            git(&root.join(name), &["init", "-q"]);
        }
        git(&root.join("leaf"), &["commit", "-q", "--allow-empty", "-m", "leaf"]);
        git(&root.join("lib"), &["submodule", "add", "-q", "../leaf", "inner"]);
        git(&root.join("lib"), &["commit", "-q", "-m", "lib"]);
        let w = root.join("w");
        Tree { _dir: dir, root, w }
    }

    fn git(&self, args: &[&str]) -> String {
        git(&self.w, args)
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.w.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn add_lib(&self) {
        self.git(&["submodule", "add", "-q", "../lib", "sub"]);
        self.git(&["commit", "-q", "-m", "sub"]);
    }

    /// The protected set relative to `w` (`../x` for paths above it).
    fn wall(&self, writable: &Path, git_writable: bool, outer: &OuterConfig) -> Vec<String> {
        let wall = protect_git(&[writable.to_path_buf()], git_writable, None, outer);
        assert!(wall.notes.is_empty(), "{:?}", wall.notes);
        assert!(wall.links.is_empty(), "{:?}", wall.links);
        wall.read_only
            .iter()
            .map(|p| match p.strip_prefix(&self.w) {
                Ok(rel) => rel.display().to_string(),
                Err(_) => format!("../{}", p.strip_prefix(&self.root).unwrap().display()),
            })
            .collect()
    }
}

/// A layout, the writable path (relative to `w`), `git_writable`, and what must and must not
/// be protected (relative to `w`).
struct Row {
    what: &'static str,
    setup: fn(&Tree),
    writable: &'static str,
    git_writable: bool,
    protected: &'static [&'static str],
    not: &'static [&'static str],
}

const ROWS: &[Row] = &[
    Row {
        what: "a plain repository",
        setup: |_| {},
        writable: "",
        git_writable: false,
        protected: &[".git"],
        // (Below a read-only `.git`: a placeholder there would be a write into it.)
        not: &[".git/hooks", ".git/config", ".git/config.worktree"],
    },
    Row {
        what: "a plain repository, git_writable",
        setup: |_| {},
        writable: "",
        git_writable: true,
        protected: &[".git/hooks", ".git/config"],
        not: &[".git", ".git/commondir", ".git/config.worktree"],
    },
    Row {
        what: "an initialised submodule: its pointer, its git directory",
        setup: |t| {
            t.add_lib();
        },
        writable: "",
        git_writable: false,
        protected: &[".git", "sub/.git", "sub/inner"],
        not: &["sub"],
    },
    Row {
        what: "an initialised submodule, git_writable: hooks and config of every git directory",
        setup: |t| {
            t.add_lib();
            t.git(&["submodule", "update", "-q", "--init", "--recursive"]);
        },
        writable: "",
        git_writable: true,
        protected: &[
            ".git/hooks",
            ".git/config",
            "sub/.git",
            ".git/modules/sub/hooks",
            ".git/modules/sub/config",
            ".git/modules/sub/modules/inner/hooks",
            ".git/modules/sub/modules/inner/config",
            "sub/inner/.git",
        ],
        not: &[".git", "sub"],
    },
    Row {
        what: "an uninitialised submodule: its directory (no `git init sub`)",
        setup: |t| {
            t.add_lib();
            t.git(&["submodule", "deinit", "-q", "-f", "sub"]);
        },
        writable: "",
        git_writable: false,
        protected: &["sub"],
        not: &[],
    },
    Row {
        what: "an uninitialised submodule whose directory is gone: a placeholder",
        setup: |t| {
            t.add_lib();
            t.git(&["submodule", "deinit", "-q", "-f", "sub"]);
            std::fs::remove_dir(t.w.join("sub")).unwrap();
        },
        writable: "",
        git_writable: true,
        // (The first missing component is what becomes the placeholder.)
        protected: &["sub"],
        not: &["sub/.git", "sub/inner/.git"],
    },
    Row {
        what: "a gitlink path taken by a file: the file (it could become a repository)",
        setup: |t| {
            let head = git(&t.root.join("leaf"), &["rev-parse", "HEAD"]);
            t.git(&["update-index", "--add", "--cacheinfo", &format!("160000,{head},f")]);
            t.write("f", "a file\n");
        },
        writable: "",
        git_writable: true,
        protected: &["f"],
        not: &["f/.git"],
    },
    Row {
        what: "a nested submodule left uninitialised (from the submodule's own index)",
        setup: |t| {
            t.add_lib();
            t.git(&["submodule", "update", "-q", "--init"]);
        },
        writable: "",
        git_writable: true,
        protected: &["sub/.git", "sub/inner"],
        not: &["sub"],
    },
    Row {
        what: "a nested submodule, initialised",
        setup: |t| {
            t.add_lib();
            t.git(&["submodule", "update", "-q", "--init", "--recursive"]);
        },
        writable: "",
        git_writable: false,
        protected: &["sub/.git", "sub/inner/.git", ".git"],
        not: &["sub/inner"],
    },
    Row {
        what: "a gitlink in the index with no .gitmodules entry",
        setup: |t| {
            let head = git(&t.root.join("leaf"), &["rev-parse", "HEAD"]);
            t.git(&["update-index", "--add", "--cacheinfo", &format!("160000,{head},vendor/x")]);
            t.write("vendor/y/.keep", "");
        },
        writable: "",
        git_writable: false,
        protected: &["vendor/x"],
        not: &["vendor", "vendor/y"],
    },
    Row {
        what: ".gitmodules with `Path =`, a key on the header's line, an inline comment",
        setup: |t| {
            t.write(".gitmodules", "[submodule \"odd\"] Path = odd ; a comment\n\turl = x\n");
            std::fs::create_dir(t.w.join("odd")).unwrap();
            t.write("plain/.keep", "");
        },
        writable: "",
        git_writable: false,
        protected: &["odd"],
        not: &["plain"],
    },
    Row {
        what: ".gitmodules quoting a path with spaces, and one leaving the tree (ignored)",
        setup: |t| {
            t.write(
                ".gitmodules",
                "[submodule \"a\"]\n\tPATH = \"my lib\" # c\n[submodule \"b\"]\n\tpath = ../out\n",
            );
        },
        writable: "",
        git_writable: false,
        protected: &["my lib"],
        not: &["../out/.git", "../out"],
    },
    Row {
        what: "the superproject above the working directory: its gitlinks and hooksPath below it",
        setup: |t| {
            t.add_lib();
            t.git(&["submodule", "add", "-q", "../lib", "dir/sub2"]);
            t.git(&["commit", "-q", "-m", "sub2"]);
            t.git(&["submodule", "deinit", "-q", "-f", "--all"]);
            t.git(&["config", "core.hooksPath", "dir/.husky"]);
            t.write("dir/src/x", "");
        },
        writable: "dir",
        git_writable: false,
        protected: &["dir/sub2", "dir/.husky"],
        not: &[".git", "sub", "dir/src"],
    },
    Row {
        what: "a launch inside an initialised submodule: its pointer",
        setup: |t| {
            t.add_lib();
            t.git(&["submodule", "update", "-q", "--init", "--recursive"]);
        },
        writable: "sub",
        git_writable: false,
        protected: &["sub/.git", "sub/inner/.git"],
        not: &[".git", "sub"],
    },
    Row {
        what: "core.hooksPath inside the tree, any case, quoted",
        setup: |t| {
            t.write(".git/config", "[core]\n\tHooksPath = \".husky\" ; husky\n");
        },
        writable: "",
        git_writable: true,
        protected: &[".husky"],
        not: &[],
    },
    Row {
        what: "core.fsmonitor as a program, and an include followed",
        setup: |t| {
            t.write(
                ".git/config",
                "[core]\n\tfsmonitor = ./evil\n[include]\n\tpath = ../inc.cfg\n",
            );
            t.write(
                "inc.cfg",
                "[CORE] sshCommand = tools/ssh -v\n[diff \"x\"]\n\ttextconv = ./tc\n",
            );
        },
        writable: "",
        git_writable: true,
        protected: &["evil", "inc.cfg", "tools", "tc"],
        not: &[],
    },
    Row {
        what: "core.fsmonitor = true is the builtin daemon, not a path",
        setup: |t| {
            t.write(".git/config", "[core]\n\tfsmonitor = true\n");
        },
        writable: "",
        git_writable: true,
        protected: &[],
        not: &["true"],
    },
    Row {
        what: "filters, aliases, includeIf, and existing files named by any value",
        setup: |t| {
            t.write(
                ".git/config",
                "[filter \"lfs\"]\n\tclean = sh ./f/clean %f\n\tprocess = ./f/proc\n\
                 [alias]\n\tx = \"!./scripts/a.sh --go\"\n\
                 [includeIf \"gitdir:/\"]\n\tpath = cfg/extra\n\
                 [foo]\n\tbar = ./data.txt\n\tbaz = ./nothing-here\n\
                 [remote \"origin\"]\n\turl = https://example.invalid/x.git\n",
            );
            t.write("f/clean", "");
            t.write("data.txt", "");
            t.write(".git/cfg/extra", "[pager]\n\tlog = ./pg\n");
        },
        writable: "",
        git_writable: true,
        protected: &["f/clean", "f/proc", "scripts", ".git/cfg/extra", "pg", "data.txt"],
        not: &["nothing-here", "f"],
    },
    Row {
        what: "a gitlink kept in the shared index of a split index (red-team A)",
        setup: |t| {
            t.git(&["commit", "-q", "--allow-empty", "-m", "x"]);
            let head = git(&t.root.join("leaf"), &["rev-parse", "HEAD"]);
            t.git(&["update-index", "--add", "--cacheinfo", &format!("160000,{head},sub")]);
            t.git(&["commit", "-q", "-m", "gitlink"]);
            t.git(&["update-index", "--split-index"]);
        },
        writable: "",
        git_writable: true,
        protected: &["sub"],
        not: &[],
    },
    Row {
        what: "a linked worktree's config.worktree, git_writable, missing (red-team B)",
        setup: |t| {
            t.git(&["commit", "-q", "--allow-empty", "-m", "x"]);
            t.git(&["config", "extensions.worktreeConfig", "true"]);
            t.git(&["worktree", "add", "-q", "../wt2"]);
        },
        writable: "",
        git_writable: true,
        protected: &[".git/worktrees/wt2/config.worktree", ".git/worktrees/wt2/hooks"],
        not: &[".git"],
    },
    Row {
        what: "command programs behind what the shell evaluates, and after `cd` (red-team C)",
        setup: |t| {
            t.write(
                ".git/config",
                "[alias]\n\tfmt = !$(git rev-parse --show-toplevel)/scripts/fmt.sh\n\
                 \trun = !cd tools && ./run.sh\n\tgp = \"!\\\"$GIT_PREFIX\\\"bin/g.sh\"\n\
                 \tmk = !cd sub/dir && make -f build.mk\n",
            );
            for f in ["scripts/fmt.sh", "tools/run.sh", "bin/g.sh", "sub/dir/build.mk", "other"] {
                t.write(f, "");
            }
        },
        writable: "",
        git_writable: true,
        protected: &["scripts/fmt.sh", "tools/run.sh", "bin/g.sh", "sub/dir/build.mk"],
        not: &["scripts", "tools", "bin", "sub", "sub/dir", "other"],
    },
    Row {
        what: "directories named by values: init.templateDir, other keys (red-team E)",
        setup: |t| {
            t.write(
                ".git/config",
                "[init]\n\ttemplateDir = tpl\n[foo]\n\tdir = ./data/d\n\ttop = ./\n\
                 [core]\n\tattributesFile = .attrs\n\tworktree = ./w2\n",
            );
            t.write("tpl/hooks/.keep", "");
            t.write("data/d/.keep", "");
            t.write("w2/.keep", "");
        },
        writable: "",
        git_writable: true,
        protected: &["tpl", "data/d", ".attrs"],
        not: &["data", "w2", ""],
    },
    Row {
        what: "an existing repository below the writable path that no gitlink names",
        setup: |t| {
            std::fs::create_dir_all(t.w.join("src/projA")).unwrap();
            git(&t.w.join("src/projA"), &["init", "-q"]);
        },
        writable: "",
        git_writable: false,
        protected: &["src/projA/.git"],
        not: &["src", "src/projA"],
    },
    Row {
        what: "an existing repository below a writable path that is no repository, git_writable",
        setup: |t| {
            std::fs::create_dir_all(t.w.join("src/projA")).unwrap();
            git(&t.w.join("src/projA"), &["init", "-q"]);
        },
        writable: "src",
        git_writable: true,
        protected: &["src/projA/.git/hooks", "src/projA/.git/config"],
        not: &["src/projA/.git", "src/projA"],
    },
    Row {
        what: "a bare repository below the writable path, named like anything (issue 31.2)",
        setup: |t| {
            std::fs::create_dir_all(t.w.join("fixtures")).unwrap();
            git(&t.w.join("fixtures"), &["init", "-q", "--bare", "mirror.git"]);
            git(&t.w.join("fixtures"), &["init", "-q", "--bare", "data"]);
        },
        writable: "",
        git_writable: false,
        protected: &["fixtures/mirror.git", "fixtures/data"],
        not: &["fixtures"],
    },
    Row {
        what: "a bare repository below the writable path, git_writable: its hooks and config",
        setup: |t| {
            std::fs::create_dir_all(t.w.join("fixtures")).unwrap();
            git(&t.w.join("fixtures"), &["init", "-q", "--bare", "mirror.git"]);
            git(&t.w.join("fixtures/mirror.git"), &["config", "core.hooksPath", "../hooks"]);
        },
        writable: "",
        git_writable: true,
        protected: &["fixtures/mirror.git/hooks", "fixtures/mirror.git/config", "fixtures/hooks"],
        not: &["fixtures/mirror.git", "fixtures"],
    },
    Row {
        what: "a .git below that git cannot use today is kept from becoming one it can",
        setup: |t| {
            t.write("src/x/.git", "gitdir: ../nowhere\n");
            t.write("src/y/.git/description", "not a git directory (no HEAD)\n");
        },
        writable: "",
        git_writable: true,
        protected: &["src/x/.git", "src/y/.git"],
        not: &["src/x", "src/y"],
    },
];

#[test]
fn git_layouts_protect_what_git_reads() {
    for row in ROWS {
        let t = Tree::new();
        (row.setup)(&t);
        let writable = if row.writable.is_empty() { t.w.clone() } else { t.w.join(row.writable) };
        let got = t.wall(&writable, row.git_writable, &OuterConfig::default());
        for want in row.protected {
            assert!(got.iter().any(|g| g == want), "{}: {want} not protected in {got:?}", row.what);
        }
        for not in row.not {
            assert!(!got.iter().any(|g| g == not), "{}: {not} protected in {got:?}", row.what);
        }
        // Nothing outside the writable path (it is read-only anyway; a placeholder there would
        // be a write outside).
        for g in &got {
            assert!(
                t.w.join(g).starts_with(&writable) || lexical(&t.w.join(g)).starts_with(&writable),
                "{}: {g} is outside {}",
                row.what,
                writable.display()
            );
        }
    }
}

/// The user's own config applies to every repository: a relative `core.hooksPath` there is
/// each repository's directory of that name.
#[test]
fn user_config_values_count_for_every_repository() {
    let t = Tree::new();
    let user = t.root.join("gitconfig");
    std::fs::write(&user, "[core]\n\thooksPath = .githooks\n").unwrap();
    let outer = OuterConfig { files: vec![user], ..Default::default() };
    let got = t.wall(&t.w, true, &outer);
    assert!(got.contains(&".githooks".to_owned()), "{got:?}");
    // And so do `GIT_CONFIG_COUNT` variables of the launch's environment.
    let env: Vec<(std::ffi::OsString, std::ffi::OsString)> = [
        ("GIT_CONFIG_COUNT", "2"),
        ("GIT_CONFIG_KEY_0", "core.fsMonitor"),
        ("GIT_CONFIG_VALUE_0", "./mon \"x\""),
        ("GIT_CONFIG_KEY_1", "filter.a.b.clean"),
        ("GIT_CONFIG_VALUE_1", "./cl"),
    ]
    .into_iter()
    .map(|(k, v)| (k.into(), v.into()))
    .collect();
    let got = t.wall(&t.w, true, &outer_config(&env));
    assert!(got.contains(&"mon \"x\"".to_owned()), "{got:?}");
    assert!(got.contains(&"mon".to_owned()), "{got:?}");
    assert!(got.contains(&"cl".to_owned()), "{got:?}");
    assert_eq!(
        String::from_utf8(outer_config(&env).env).unwrap(),
        "[core]\n\tfsMonitor = \"./mon \\\"x\\\"\"\n[filter \"a.b\"]\n\tclean = \"./cl\"\n"
    );
}

/// A link on the way to a protected path: the mount would protect its target, and the link
/// itself could be replaced by a directory of the command's making (red-team: `rm .husky; mkdir
/// .husky` planted a pre-commit hook). Reported, so that the launch refuses.
#[test]
fn links_on_the_way_are_reported() {
    let t = Tree::new();
    let elsewhere = t.root.join("hooks");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, t.w.join(".husky")).unwrap();
    t.git(&["config", "core.hooksPath", ".husky/x"]);
    std::fs::create_dir(t.root.join("real-sub")).unwrap();
    std::os::unix::fs::symlink(t.root.join("real-sub"), t.w.join("sub")).unwrap();
    let head = git(&t.root.join("leaf"), &["rev-parse", "HEAD"]);
    t.git(&["update-index", "--add", "--cacheinfo", &format!("160000,{head},sub")]);
    let wall = protect_git(std::slice::from_ref(&t.w), false, None, &OuterConfig::default());
    assert_eq!(wall.links, [t.w.join(".husky"), t.w.join("sub")]);
    // Control: without the links, nothing to report.
    std::fs::remove_file(t.w.join(".husky")).unwrap();
    std::fs::remove_file(t.w.join("sub")).unwrap();
    assert!(
        protect_git(std::slice::from_ref(&t.w), false, None, &OuterConfig::default())
            .links
            .is_empty()
    );
}

/// A SHA-256 repository's index is read as such (its gitlinks found, nothing reported).
#[test]
fn sha256_repositories() {
    let t = Tree::new();
    let w = t.root.join("w256");
    std::fs::create_dir(&w).unwrap();
    git(&w, &["init", "-q", "--object-format=sha256"]);
    git(&w, &["commit", "-q", "--allow-empty", "-m", "x"]);
    let head = git(&w, &["rev-parse", "HEAD"]);
    git(&w, &["update-index", "--add", "--cacheinfo", &format!("160000,{head},sub")]);
    let wall = protect_git(std::slice::from_ref(&w), true, None, &OuterConfig::default());
    assert!(wall.notes.is_empty(), "{:?}", wall.notes);
    assert!(wall.read_only.contains(&w.join("sub")), "{:?}", wall.read_only);
}

/// No writable path, no work: a `run` launch reads nothing.
#[test]
fn nothing_writable_nothing_protected() {
    assert_eq!(protect_git(&[], false, None, &OuterConfig::default()), GitWall::default());
}

#[test]
fn config_keys_are_case_insensitive_and_values_unquoted() {
    let text = b"[Core] HOOKSPATH = \"a b\" # c\n[core]\n\tfsMonitor = x ; y\n[include]path=i\n";
    let refs = config_refs(text).unwrap();
    let got: Vec<(&str, RefKind, &str)> =
        refs.iter().map(|r| (r.key.as_str(), r.kind, r.value.as_str())).collect();
    assert_eq!(
        got,
        [
            ("core.hookspath", RefKind::Path, "a b"),
            ("core.fsmonitor", RefKind::Path, "x"),
            ("include.path", RefKind::Include, "i"),
        ]
    );
}

#[test]
fn key_kinds() {
    let rows = [
        ("[core]\n\tsshCommand = x", RefKind::Command),
        ("[diff \"pdf\"]\n\ttextconv = x", RefKind::Command),
        ("[diff]\n\ttextconv = x", RefKind::Other),
        ("[filter \"f\"]\n\tsmudge = x", RefKind::Command),
        ("[alias]\n\tst = x", RefKind::Command),
        ("[pager]\n\tlog = x", RefKind::Command),
        ("[includeIf \"onbranch:x\"]\n\tpath = x", RefKind::Include),
        ("[include \"x\"]\n\tpath = x", RefKind::Other),
        ("[user]\n\tname = x", RefKind::Other),
        ("[submodule \"s\"]\n\tupdate = !x", RefKind::Command),
        ("[gpg \"ssh\"]\n\tdefaultKeyCommand = x", RefKind::Command),
        ("[core]\n\talternateRefsCommand = x", RefKind::Command),
        ("[sendemail]\n\tsendmailCmd = x", RefKind::Command),
        ("[gpg]\n\tprogram = x", RefKind::Command),
        ("[credential]\n\thelper = x", RefKind::Command),
        ("[core]\n\taskPass = x", RefKind::Command),
        ("[diff]\n\texternal = x", RefKind::Command),
        ("[merge \"m\"]\n\tdriver = x", RefKind::Command),
        ("[sequence]\n\teditor = x", RefKind::Command),
        ("[tar \"tgz\"]\n\tcommand = x", RefKind::Command),
        ("[init]\n\ttemplateDir = x", RefKind::Path),
    ];
    for (text, kind) in rows {
        let refs = config_refs(text.as_bytes()).unwrap();
        assert_eq!(refs[0].kind, kind, "{text}");
    }
}

#[test]
fn command_words_split_more_than_the_shell() {
    assert_eq!(command_words("!./a.sh --x=./b|c;'d e'"), ["./a.sh", "--x", "./b", "c", "d", "e"]);
    assert_eq!(command_words("\"./x y\" $HOME/z"), ["./x", "y", "HOME/z"]);
}

#[test]
fn gitmodules_paths_as_git_reads_them() {
    let text = b"[submodule \"a\"] path = x # c\n[SUBMODULE \"b\"]\n\tPath = \"y z\"\n";
    assert_eq!(
        submodule_paths(text).unwrap(),
        [("a".to_owned(), "x".to_owned()), ("b".to_owned(), "y z".to_owned())]
    );
}

#[test]
fn a_broken_index_is_reported_not_trusted() {
    assert!(gitlinks(b"DIRC\0\0\0\x02garbage", false).is_err());
    assert!(gitlinks(b"", false).is_err());
}

/// A split index whose shared index is gone: gitlinks unknown, so the launch refuses (red-team A).
#[test]
fn an_unreadable_shared_index_refuses() {
    let t = Tree::new();
    t.git(&["commit", "-q", "--allow-empty", "-m", "x"]);
    t.git(&["update-index", "--split-index"]);
    let wall = protect_git(std::slice::from_ref(&t.w), true, None, &OuterConfig::default());
    assert!(wall.refuse.is_empty(), "{:?}", wall.refuse);
    for e in std::fs::read_dir(t.w.join(".git")).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("sharedindex.") {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    let wall = protect_git(std::slice::from_ref(&t.w), true, None, &OuterConfig::default());
    assert_eq!(wall.refuse.len(), 1, "{wall:?}");
}

fn env(pairs: &[(&str, &str)]) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    pairs.iter().map(|(k, v)| (k.into(), v.into())).collect()
}

/// `GIT_CONFIG_PARAMETERS` (what `git -c` passes on) counts like `GIT_CONFIG_COUNT` (red-team D).
#[test]
fn git_config_parameters_count() {
    let t = Tree::new();
    let e = env(&[("GIT_CONFIG_PARAMETERS", "'core.hookspath'='.hooks' 'alias.x=!./a b'")]);
    let got = t.wall(&t.w, true, &outer_config(&e));
    assert!(got.contains(&".hooks".to_owned()), "{got:?}");
    assert!(got.contains(&"a".to_owned()), "{got:?}");
    assert_eq!(
        config_parameters("'a.b'='it'\\''s' 'c.d=e=f'  'g.h'= 'i.j'").unwrap(),
        [
            ("a.b".to_owned(), "it's".to_owned()),
            ("c.d".to_owned(), "e=f".to_owned()),
            ("g.h".to_owned(), String::new()),
            ("i.j".to_owned(), String::new()),
        ]
    );
    assert_eq!(config_parameters("'a.b"), None);
    assert_eq!(config_parameters("'a.b'x"), None);
    // Unparsable: the launch refuses rather than guessing.
    let bad = outer_config(&env(&[("GIT_CONFIG_PARAMETERS", "'core.hookspath")]));
    assert!(!protect_git(std::slice::from_ref(&t.w), true, None, &bad).refuse.is_empty());
}

/// `GIT_DIR` and the like point git elsewhere than what is protected: refused (red-team D); not
/// without writable paths.
#[test]
fn git_redirects_refuse() {
    let t = Tree::new();
    for k in ["GIT_DIR", "GIT_COMMON_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"] {
        let outer = outer_config(&env(&[(k, "/elsewhere")]));
        let wall = protect_git(std::slice::from_ref(&t.w), false, None, &outer);
        assert!(wall.refuse.iter().any(|r| r.contains(k)), "{k}: {wall:?}");
        assert!(protect_git(&[], false, None, &outer).refuse.is_empty());
    }
    let plain = outer_config(&env(&[("GIT_AUTHOR_NAME", "x")]));
    assert!(protect_git(std::slice::from_ref(&t.w), false, None, &plain).refuse.is_empty());
}

/// The hand-written reading of git's own plain form gives what gix-config gives: on the files
/// git writes, on generated files of that form (sections repeated, keys repeated in other
/// cases, subsections, `fsmonitor` booleans, values with `=`, `/`, `*`, `:`), and it leaves
/// every other form to gix-config (`None`).
#[test]
fn the_plain_form_reads_as_gix_config_reads_it() {
    let written = [
        "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n",
        "[core]\n\tbare = false\n[remote \"origin\"]\n\turl = https://example.com/a/b.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n",
        "",
        "\n\n",
    ];
    for text in written {
        assert_eq!(
            plain_config_refs(text.as_bytes()),
            Some(parsed_config_refs(text.as_bytes()).unwrap()),
            "{text:?}"
        );
    }
    // Generated: every combination of a few sections, keys and values, in a fixed pseudo-random
    // order (no clock, no dependency: a linear congruential sequence).
    let sections = [
        "[core]",
        "[Core]",
        "[remote \"origin\"]",
        "[includeIf \"gitdir:~/w/\"]",
        "[diff \"pdf\"]",
        "[alias]",
        "[x-y]",
    ];
    let keys = [
        "hooksPath",
        "HOOKSPATH",
        "fsmonitor",
        "path",
        "textconv",
        "st",
        "sshCommand",
        "url",
        "a-b9",
    ];
    let values = [
        "true",
        "false",
        "0",
        "x",
        "/usr/bin/x",
        "~/h",
        "a=b",
        "+refs/*:refs/*",
        "!x",
        "$(x)",
        "First Last",
        "a  b\tc",
        "!git log --oneline",
    ];
    let mut seed: u64 = 7;
    let mut next = |n: usize| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) as usize % n
    };
    for _ in 0..400 {
        let mut text = String::new();
        for _ in 0..1 + next(4) {
            text += sections[next(sections.len())];
            text += "\n";
            for _ in 0..next(5) {
                let sep = ["=", " = ", "\t=  "][next(3)];
                text +=
                    &format!("\t{}{sep}{}\n", keys[next(keys.len())], values[next(values.len())]);
            }
        }
        let plain = plain_config_refs(text.as_bytes());
        assert_eq!(plain, Some(parsed_config_refs(text.as_bytes()).unwrap()), "{text}");
    }
    // Other forms: gix-config's.
    let other = [
        "[core] hooksPath = x\n",
        "[core]\n\thooksPath = \"a b\"\n",
        "[core]\n\thooksPath = a\\\n b\n",
        "[core]\n\thooksPath = a # c\n",
        "[core]\n\thooksPath = a ; c\n",
        "[core]\n\thooksPath\n",
        "[core]\n\thooksPath = \n",
        "[core]\r\n\thooksPath = x\r\n",
        "hooksPath = x\n",
        "[core.sub]\n\tx = y\n",
        "[remote \"a b\"]\n\turl = x\n",
        "[remote \"a\\\"b\"]\n\turl = x\n",
        "# comment\n[core]\n\tx = y\n",
        "[core]\n\t9x = y\n",
        "\u{feff}[core]\n\tx = y\n",
    ];
    for text in other {
        assert_eq!(plain_config_refs(text.as_bytes()), None, "{text:?}");
    }
}

/// `text` parsed by gix-config, as the git wall's readers of other forms parse it.
fn gix_file(text: &str) -> Option<gix_config::File> {
    gix_config::File::from_bytes_no_includes(
        text.as_bytes(),
        gix_config::file::Metadata::api(),
        Default::default(),
    )
    .ok()
}

/// `extensions.worktreeConfig` read by hand from a plain file is what gix-config reads: on,
/// off, the last value winning, in any case, other words, absent; and other forms still go to
/// gix-config (an implicit `true`, a quoted value).
#[test]
fn worktree_config_is_read_as_gix_config_reads_it() {
    let gix = |t: &str| {
        gix_file(t)
            .and_then(|f| f.boolean("extensions.worktreeconfig").ok().flatten())
            .unwrap_or(false)
    };
    let rows = [
        ("[extensions]\n\tworktreeConfig = true\n", true),
        ("[extensions]\n\tworktreeconfig = false\n", false),
        ("[Extensions]\n\tWORKTREECONFIG = yes\n", true),
        ("[extensions]\n\tworktreeConfig = 1\n[extensions]\n\tworktreeConfig = off\n", false),
        ("[extensions]\n\tworktreeConfig = off\n\tworktreeConfig = on\n", true),
        ("[extensions]\n\tworktreeConfig = maybe\n", false),
        ("[core]\n\tbare = false\n", false),
        ("[extensions \"x\"]\n\tworktreeConfig = true\n", false),
        ("[extensions]\n\tworktreeConfig\n", true),
        ("[extensions]\n\tworktreeConfig = \"true\"\n", true),
    ];
    for (text, want) in rows {
        assert_eq!(worktree_config_on(text.as_bytes()), want, "{text:?}");
        assert_eq!(gix(text), want, "control: gix-config reads {text:?} so");
    }
}

/// A value read by hand from a plain file is gix-config's `string`: the last one, absent, in
/// another section; other forms still go to gix-config (quoted, with a comment).
#[test]
fn a_config_value_is_read_as_gix_config_reads_it() {
    let gix = |t: &str| {
        gix_file(t).and_then(|f| f.string("extensions.objectformat").map(|v| v.to_string()))
    };
    let rows = [
        ("[extensions]\n\tobjectFormat = sha256\n", Some("sha256")),
        ("[Extensions]\n\tOBJECTFORMAT = SHA256\n", Some("SHA256")),
        (
            "[extensions]\n\tobjectformat = sha256\n[extensions]\n\tobjectformat = sha1\n",
            Some("sha1"),
        ),
        ("[core]\n\tbare = false\n", None),
        ("[extensions \"x\"]\n\tobjectformat = sha256\n", None),
        ("[extensions]\n\tobjectformat = \"sha256\" # c\n", Some("sha256")),
    ];
    for (text, want) in rows {
        let want = want.map(str::to_owned);
        assert_eq!(config_value(text.as_bytes(), "extensions.objectformat"), want, "{text:?}");
        assert_eq!(gix(text), want, "control: gix-config reads {text:?} so");
    }
}

/// Red team of issue 31: the hand reading of the plain form against gix-config on generated
/// lines of odd bytes (form feed, vertical tab, a non-breaking space, CR, NUL, brackets and
/// quotes in odd places, `;`/`#` after a value, a dot in a key, empty and trailing-space
/// subsections, non-ASCII names, a very long line): wherever the hand reading answers, it
/// answers what gix-config reads (a difference would be a value git obeys and the wall does
/// not protect). Held: it answered only where the two agree. Control: checked by hand that
/// letting `\x0c` through as a blank (`trim_matches([' ', '\t', '\x0c'])`) fails here.
#[test]
fn the_plain_form_agrees_with_gix_config_on_odd_bytes() {
    let pieces = [
        "[core]",
        "[Core]",
        "[core ]",
        "[core] ",
        "[ core]",
        "[remote \"o\"]",
        "[remote \"\"]",
        "[remote \"a]b\"]",
        "[remote \"a#b\"]",
        "[remote \"a;b\"]",
        "[remote  \"o\"]",
        "[remote\t\"o\"]",
        "[x.y]",
        "[9x]",
        "[-x]",
        "[é]",
        "[core \"É\"]",
        "hooksPath",
        "HooksPath",
        "fsmonitor",
        "a.b",
        "a-b",
        "9a",
        "é",
        "=",
        " = ",
        "==",
        "\t",
        " ",
        "\x0c",
        "\x0b",
        "\u{a0}",
        "\r",
        "\0",
        "x",
        "/bin/x",
        "true",
        "true;",
        "x#c",
        "x ;c",
        "\"x\"",
        "a\\",
        "]",
        "[",
        "0b1",
        "-",
        "~/h",
        "a=b",
        "\u{feff}",
    ];
    let mut seed: u64 = 31;
    let mut next = |n: usize| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) as usize % n
    };
    let mut answered = 0;
    for round in 0..20_000 {
        let mut text = String::from(["[core]\n", "[remote \"o\"]\n", ""][round % 3]);
        for _ in 0..1 + next(4) {
            // (Mostly a line of the plain form with an odd piece put in at some place.)
            let mut line: Vec<&str> = match next(3) {
                0 => vec!["[", ["core", "remote \"o\"", "x"][next(3)], "]"],
                _ => vec!["\t", ["hooksPath", "fsmonitor", "x"][next(3)], " = ", "/bin/x"],
            };
            for _ in 0..next(3) {
                let at = next(line.len() + 1);
                line.insert(at, pieces[next(pieces.len())]);
            }
            text += &line.concat();
            text += "\n";
        }
        if round % 1000 == 0 {
            text += &format!("\tx = {}\n", "y".repeat(70_000));
        }
        let Some(plain) = plain_config_refs(text.as_bytes()) else { continue };
        answered += 1;
        let gix = parsed_config_refs(text.as_bytes());
        assert_eq!(Ok(plain.clone()), gix, "{text:?}");
        let (worktree, format) =
            (worktree_config_on(text.as_bytes()), config_value(text.as_bytes(), "core.hookspath"));
        let file = gix_config::File::from_bytes_no_includes(
            text.as_bytes(),
            gix_config::file::Metadata::api(),
            Default::default(),
        )
        .unwrap();
        assert_eq!(format, file.string("core.hookspath").map(|v| lossy(&v)), "{text:?}");
        let on = file.boolean("extensions.worktreeconfig").ok().flatten().unwrap_or(false);
        assert_eq!(worktree, on, "{text:?}");
    }
    assert!(answered > 1000, "the plain reading answered {answered} files only");
}

/// Red team of issue 31: `core.fsmonitor` is left out as git's builtin daemon (or nothing) only
/// where git itself reads a boolean; where git runs the value as a program, it is a reference
/// the wall protects. gix-config reads `0b1` as a number (binary), git here (strtoimax, no `0b`)
/// as a program found on `PATH` or by its path: the wall took it for a boolean and protected
/// nothing that git runs. Control: each value is given to git, with a program of that name on
/// `PATH` that leaves a mark when run.
#[test]
fn fsmonitor_is_a_program_where_git_runs_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    git(&root, &["init", "-q"]);
    let bin = root.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    for value in ["0b1", "-0B1", "0b1k", "true", "0", "2", "0x1", "1k", "yes", "off", "evil"] {
        let mark = root.join(format!("ran-{value}"));
        let program = format!("#!/bin/sh\ntouch '{}'\n", mark.display());
        std::fs::write(bin.join(value), program).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(bin.join(value), std::fs::Permissions::from_mode(0o755)).unwrap();
        let _ = Command::new("git")
            .args(["-c", &format!("core.fsmonitor={value}"), "status"])
            .current_dir(&root)
            .env("PATH", &path)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .expect("git");
        let text = format!("[core]\n\tfsmonitor = {value}\n");
        let named = |refs: Vec<ConfigRef>| refs.iter().any(|r| r.key == "core.fsmonitor");
        let plain = plain_config_refs(text.as_bytes()).map(named);
        let parsed = parsed_config_refs(text.as_bytes()).map(named);
        let ran = mark.exists();
        assert_eq!((plain, parsed), (Some(ran), Ok(ran)), "{value}: git ran it: {ran}");
    }
}
