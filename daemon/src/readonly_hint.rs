//! The launcher's exit lines after a command failed on a read-only path: which path, and the
//! way to make it writable (issue 17, item 7).
//!
//! The paths come from the command's own "Read-only file system" messages (see
//! `sandgate_sandbox::readonly`, which also says why the launcher reads stderr rather than
//! watching system calls). Printed only when the command failed (exit 1–125): a tool that copes
//! with a read-only cache and succeeds (pip without its cache, git skipping its index refresh)
//! gets no advice it does not need, and the output of successful runs stays the command's own.
//! Not printed with `--quiet` / `SANDGATE_QUIET` (stderr is then not read at all).
//!
//! The messages are the sandbox's text, so they may lie. What they name is shown only through
//! the sanitiser, and a fix is offered only for paths a person may reasonably open: a package
//! cache is copy-on-write in tiers that build or reach the network, and the line says so; a path sandgate protects on purpose (git metadata and
//! dot-entries inside writable directories, the home directory's configuration, system
//! directories) gets a sentence saying so, never a way to make it writable.

use std::path::{Path, PathBuf};

use sandgate_config::sanitize;

/// At most this many lines; the rest are counted in one more.
const MAX_LINES: usize = 3;

/// Longest path shown (characters).
const MAX_SHOWN: usize = 200;

/// What the launch knew.
#[derive(Debug)]
pub struct Context<'a> {
    /// The tier's name.
    pub tier: &'a str,
    /// The command's working directory (relative paths in messages are relative to it).
    pub cwd: &'a Path,
    /// The home directory, for package caches and `~/`.
    pub home: Option<&'a Path>,
    /// The tier's writable paths (a read-only path inside one is protected on purpose).
    pub writable: &'a [PathBuf],
    /// The package caches of the launch's environment.
    pub caches: &'a [sandgate_config::PackageCache],
}

/// What to say about one path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Advice {
    /// In a package cache (its name): copy-on-write where the tier layers caches.
    Cache(&'static str),
    /// Inside a writable directory, so read-only on purpose (git metadata, dot-entries).
    Protected,
    /// A version manager's shims directory (`~/.pyenv/shims`): what it holds runs outside the
    /// sandbox; the command that fills it, to run outside.
    Shims(&'static str),
    /// The home directory's own configuration (`~/.bashrc`, `~/.config/...`).
    HomeConfig,
    /// A system directory.
    System,
    /// In the current directory, under a dot-entry (`.git/index.lock`): writable in the build
    /// tier as far as the tier allows, never offered as a path to open.
    BuildOnly,
    /// Under a dot-directory elsewhere: configuration, not offered.
    Dotted,
    /// A directory that must not be opened whole: it holds the home or the current directory,
    /// or it is on `PATH`.
    TooWide(PathBuf),
    /// Anything else: make this directory writable.
    Directory(PathBuf),
}

/// The lines to print (without the `sandgate: ` prefix) for `paths` as the command wrote them,
/// and `unnamed` messages without a path.
pub fn lines(cx: &Context<'_>, paths: &[String], unnamed: usize) -> Vec<String> {
    let mut seen: Vec<Advice> = Vec::new();
    let mut out = Vec::new();
    let mut more = 0;
    for raw in paths {
        let path = resolve(cx, raw);
        let advice = advise(cx, &path);
        if seen.contains(&advice) {
            continue;
        }
        seen.push(advice.clone());
        if out.len() == MAX_LINES {
            more += 1;
            continue;
        }
        out.push(line(cx, &path, &advice));
    }
    if more > 0 {
        out.push(format!("… and {more} more read-only path(s) like these"));
    }
    if out.is_empty() && unnamed > 0 {
        out.push(format!(
            "the command hit a read-only path (\"Read-only file system\") in the {} tier; \
             `sandgate explain --tier {}` lists what is writable",
            cx.tier, cx.tier
        ));
    }
    out
}

fn line(cx: &Context<'_>, path: &Path, advice: &Advice) -> String {
    let shown = show(path);
    let tier = cx.tier;
    let build = tier == "build";
    match advice {
        Advice::Cache(name) if tier == "run" => format!(
            "{shown} is read-only in the run tier — the {name} cache is writable (copy-on-write: \
             a layer of the sandbox's own, never the host's cache) in the net and build tiers"
        ),
        Advice::Cache(name) => format!(
            "{shown} is read-only in the {tier} tier — the {name} cache is copy-on-write in tiers \
             that build or reach the network unless [filesystem] caches = \"off\"; set it to \
             \"project\" (`sandgate explain --tier {tier}` shows the layers)"
        ),
        Advice::Protected => format!(
            "{shown} is read-only on purpose, even in a writable directory: it could make code \
             run outside the sandbox later (see docs/threat-model/writable-directories.md)"
        ),
        Advice::Shims(rehash) => format!(
            "{shown} is read-only in every tier: a version manager's shims run outside the \
             sandbox too, so none may be added from inside; run `{rehash}` outside the sandbox \
             after the install"
        ),
        Advice::HomeConfig => format!(
            "{shown} is read-only in every tier: sandgate does not offer to make your home's \
             dot-directories writable (package caches are copy-on-write in the net and build \
             tiers)"
        ),
        Advice::System => format!("{shown} is read-only in every tier: it is a system directory"),
        Advice::BuildOnly => format!(
            "{shown} is read-only in the {tier} tier — run it in the build tier (`sandgate build \
             --`), where the current directory is writable"
        ),
        Advice::Dotted => format!(
            "{shown} is read-only: sandgate does not offer to make dot-directories writable \
             (configuration there can make code run later)"
        ),
        Advice::TooWide(dir) => format!(
            "{shown} is read-only in the {tier} tier; sandgate does not offer to make {} \
             writable: it holds your home or current directory, or is on PATH (what is planted \
             there runs outside the sandbox)",
            show(dir)
        ),
        Advice::Directory(dir) if build => {
            let dir = show(dir);
            format!(
                "{shown} is read-only in the build tier — make it writable with \
                 `sandgate config add-path {dir}` (every build here) or `--allow-write {dir}` \
                 (this run)"
            )
        }
        Advice::Directory(dir) => {
            let in_cwd = path.starts_with(cx.cwd);
            let dir = show(dir);
            if in_cwd {
                format!(
                    "{shown} is read-only in the {tier} tier — run it in the build tier \
                     (`sandgate build --`, where the current directory is writable) or with \
                     `--allow-write {dir}`"
                )
            } else {
                format!(
                    "{shown} is read-only in the {tier} tier — make it writable with \
                     `--allow-write {dir}`"
                )
            }
        }
    }
}

/// A path for a message: sanitised (sandbox text) and shortened.
fn show(p: &Path) -> String {
    let s = p.display().to_string();
    let s: String = if s.chars().count() > MAX_SHOWN {
        s.chars().take(MAX_SHOWN).chain("…".chars()).collect()
    } else {
        s
    };
    sanitize(&s).into_owned()
}

/// The message's path made absolute (relative to the command's directory, `~/` to the home) and
/// cleaned lexically (`.` and `..`), without looking at the file system.
fn resolve(cx: &Context<'_>, raw: &str) -> PathBuf {
    let joined = match (raw.strip_prefix("~/"), cx.home) {
        (Some(rest), Some(home)) => home.join(rest),
        _ if raw.starts_with('/') => PathBuf::from(raw),
        _ => cx.cwd.join(raw),
    };
    sandgate_sandbox::canon::lexical(&joined)
}

fn advise(cx: &Context<'_>, path: &Path) -> Advice {
    if let Some(c) = cx.caches.iter().find(|c| path.starts_with(&c.path)) {
        return Advice::Cache(c.name);
    }
    if let Some(rehash) = shims_of(path) {
        return Advice::Shims(rehash);
    }
    if cx.writable.iter().any(|w| path.starts_with(w)) {
        return Advice::Protected;
    }
    // `resolve` left no `.` or `..`: a component starting with a dot is a dot-entry.
    // Judged below the current directory when the path is there (the directory itself may be
    // anywhere, a temporary `.tmpXYZ` too).
    let below = path.strip_prefix(cx.cwd).unwrap_or(path);
    let dotted = below.components().any(|c| c.as_os_str().as_encoded_bytes().starts_with(b"."));
    if let Some(home) = cx.home
        && let Ok(rest) = path.strip_prefix(home)
        && rest.components().next().is_some_and(|c| c.as_os_str().as_encoded_bytes()[0] == b'.')
    {
        return Advice::HomeConfig;
    }
    if dotted {
        return if path.starts_with(cx.cwd) { Advice::BuildOnly } else { Advice::Dotted };
    }
    const SYSTEM: &[&str] = &[
        "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/boot", "/proc", "/sys",
        "/dev",
    ];
    if path == Path::new("/") || SYSTEM.iter().any(|s| path.starts_with(s)) {
        return Advice::System;
    }
    // The directory to open: the path itself when it is a directory, else the nearest existing
    // directory above it (the host sees the same paths outside /tmp).
    let mut dir = path.to_path_buf();
    while !dir.is_dir() && dir.pop() {}
    if dir == Path::new("/") {
        return Advice::System;
    }
    // The path came from the sandbox: never a directory that holds the home or the current
    // directory (the home itself, `/home`), nor one on PATH (`~/bin`), whose opening would let
    // the next sandbox plant what runs outside.
    let above_cwd = cx.cwd.starts_with(&dir) && dir != cx.cwd;
    if above_cwd
        || cx.home.is_some_and(|h| h.starts_with(&dir))
        || on_path(&dir, std::env::var_os("PATH").as_deref())
    {
        return Advice::TooWide(dir);
    }
    Advice::Directory(dir)
}

/// Version managers whose `shims` directory is on `PATH` (`~/.pyenv/shims`), and the command
/// that fills it (`pyenv: cannot rehash: … isn't writable`).
const SHIM_MANAGERS: &[(&str, &str)] = &[
    ("pyenv", "pyenv rehash"),
    ("rbenv", "rbenv rehash"),
    ("nodenv", "nodenv rehash"),
    ("goenv", "goenv rehash"),
    ("jenv", "jenv rehash"),
    ("asdf", "asdf reshim"),
];

/// The rehash command when `path` is (or is in) a version manager's `shims` directory.
fn shims_of(path: &Path) -> Option<&'static str> {
    let names: Vec<&std::ffi::OsStr> = path.components().map(|c| c.as_os_str()).collect();
    let at = names.iter().rposition(|n| *n == "shims")?;
    let manager = names.get(at.checked_sub(1)?)?.to_str()?;
    let manager = manager.strip_prefix('.').unwrap_or(manager);
    SHIM_MANAGERS.iter().find(|(m, _)| *m == manager).map(|(_, rehash)| *rehash)
}

/// Whether `dir` is one of the directories of `path` (a `PATH` value), or holds one.
fn on_path(dir: &Path, path: Option<&std::ffi::OsStr>) -> bool {
    path.is_some_and(|p| std::env::split_paths(p).any(|d| d.is_absolute() && d.starts_with(dir)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn says_what_to_open_and_refuses_to_open_what_is_protected() {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        let proj = root.path().join("proj");
        std::fs::create_dir_all(proj.join("out")).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        let writable = vec![proj.clone()];
        let caches = sandgate_config::package_caches(|_| None, &home);
        let (home, caches) = (Some(home.as_path()), caches.as_slice());
        let build = Context { tier: "build", cwd: &proj, home, writable: &writable, caches };
        let run = Context { tier: "run", cwd: &proj, home, writable: &[], caches };
        let home = home.unwrap();
        let cargo = format!("{}/.cargo/registry/index/x", home.display());
        let one = |cx: &Context<'_>, p: &str| lines(cx, &[p.to_owned()], 0).join("\n");
        // Caches off in build: how to turn them back on, never a writable bind of the host's.
        let l = one(&build, &cargo);
        assert!(l.contains("cargo cache") && l.contains("caches = \"off\""), "{l}");
        assert!(!l.contains("--allow-write") && !l.contains("add-path"), "{l}");
        let l = one(&build, "~/.npm/_cacache");
        assert!(l.contains("npm cache"), "{l}");
        let l = one(&run, &cargo);
        assert!(l.contains("run tier") && l.contains("copy-on-write"), "{l}");
        let l = one(&run, "out/f.txt");
        assert!(l.contains(&format!("--allow-write {}", proj.join("out").display())), "{l}");
        assert!(l.contains("build tier"), "{l}");
        let l = one(&build, "/srv/data/x");
        assert!(l.contains("config add-path /") && l.contains("--allow-write /"), "{l}");
        // Protected on purpose: no way to open it is offered.
        for (cx, p) in [
            (&build, ".git/hooks/pre-commit"),
            (&build, ".envrc"),
            (&run, "~/.bashrc"),
            (&run, "~/.config/git/config"),
            (&run, "/usr/lib/x"),
            (&run, "/etc/passwd"),
            (&run, "../../../../../../etc/shadow"),
            (&run, ".git/index.lock"),
            (&run, "/srv/x/.config/y"),
        ] {
            let l = one(cx, p);
            assert!(!l.contains("add-path") && !l.contains("--allow-write"), "{p}: {l}");
            assert!(l.contains("read-only"), "{p}: {l}");
        }
    }

    /// Red team: a sandbox that prints "Read-only file system" for the home directory, a
    /// directory above it, or one on PATH must not get a ready-made command that opens it (before
    /// the fix: `sandgate config add-path HOME`).
    #[test]
    fn directories_too_wide_to_open_are_not_offered() {
        // No dot in the temporary directory's name: a dotted path is refused for that alone.
        let root = tempfile::Builder::new().prefix("hint").tempdir().unwrap();
        let home = root.path().join("home");
        let proj = home.join("src/proj");
        std::fs::create_dir_all(&proj).unwrap();
        std::fs::create_dir_all(home.join("bin")).unwrap();
        let writable = vec![proj.clone()];
        for tier in ["build", "run"] {
            let cx =
                Context { tier, cwd: &proj, home: Some(&home), writable: &writable, caches: &[] };
            for p in [
                "~/newfile".to_owned(),
                "~/notes.txt".to_owned(),
                "../x".to_owned(),
                format!("{}/other-user", root.path().display()),
            ] {
                let l = lines(&cx, std::slice::from_ref(&p), 0).join("\n");
                assert!(!l.contains("add-path") && !l.contains("--allow-write"), "{p}: {l}");
                assert!(l.contains("read-only"), "{p}: {l}");
            }
        }
        let bin = home.join("bin");
        let path = std::env::join_paths([Path::new("/usr/bin"), &bin]).unwrap();
        assert!(on_path(&bin, Some(&path)));
        assert!(on_path(&home, Some(&path)), "holds a PATH directory");
        assert!(!on_path(&proj, Some(&path)));
        // Control: a directory below the current one is still offered.
        std::fs::create_dir_all(proj.join("out")).unwrap();
        let cx = Context { tier: "run", cwd: &proj, home: Some(&home), writable: &[], caches: &[] };
        let l = lines(&cx, &["out/f".to_owned()], 0).join("\n");
        assert!(l.contains("--allow-write"), "{l}");
    }

    /// Issue 32, part 3: `pyenv: cannot rehash: ~/.pyenv/shims isn't writable` gets a hint like
    /// other read-only failures: the path, why it stays read-only, what to run instead.
    #[test]
    fn a_version_managers_shims_get_the_rehash_to_run_outside() {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        let proj = root.path().join("proj");
        std::fs::create_dir_all(home.join(".pyenv/shims")).unwrap();
        std::fs::create_dir_all(&proj).unwrap();
        let rows = [
            ("~/.pyenv/shims", "`pyenv rehash`"),
            ("~/.pyenv/shims/.pyenv-shim", "`pyenv rehash`"),
            ("~/.rbenv/shims", "`rbenv rehash`"),
            ("/opt/asdf/shims/node", "`asdf reshim`"),
        ];
        for tier in ["run", "build"] {
            let cx = Context { tier, cwd: &proj, home: Some(&home), writable: &[], caches: &[] };
            for (p, rehash) in rows {
                let l = lines(&cx, &[p.to_owned()], 0).join("\n");
                assert!(l.contains("read-only in every tier") && l.contains(rehash), "{p}: {l}");
                assert!(!l.contains("add-path") && !l.contains("--allow-write"), "{p}: {l}");
            }
        }
        // Not every directory called shims.
        assert_eq!(shims_of(Path::new("/home/u/src/shims")), None);
    }

    #[test]
    fn sandbox_text_cannot_reach_the_terminal_raw() {
        let proj = tempfile::tempdir().unwrap();
        let cx = Context { tier: "run", cwd: proj.path(), home: None, writable: &[], caches: &[] };
        let evil = "x\x1b]0;pwned\x07\x1b[2J\r\nsandgate: all good".to_owned();
        for l in lines(&cx, &[evil], 0) {
            assert!(!l.chars().any(|c| c.is_control()), "{l:?}");
        }
    }

    #[test]
    fn one_line_per_advice_and_a_bounded_count() {
        let proj = tempfile::tempdir().unwrap();
        let cx = Context { tier: "run", cwd: proj.path(), home: None, writable: &[], caches: &[] };
        for i in 0..5 {
            std::fs::create_dir(proj.path().join(format!("d{i}"))).unwrap();
        }
        let five: Vec<String> = (0..5).map(|i| format!("d{i}/f")).collect();
        let l = lines(&cx, &five, 0);
        assert_eq!(l.len(), MAX_LINES + 1, "{l:?}");
        assert!(l[MAX_LINES].contains("2 more"), "{l:?}");
        let same: Vec<String> = (0..10).map(|i| format!("f{i}")).collect();
        assert_eq!(lines(&cx, &same, 0).len(), 1, "one directory, one line");
        assert!(lines(&cx, &[], 0).is_empty());
        assert_eq!(lines(&cx, &[], 2).len(), 1);
    }
}
