//! Nothing a command in `build` plants in git metadata runs in the host's next `git status` or
//! `git commit`: an uninitialised submodule, `core.hooksPath`, a nested submodule, a gitlink with
//! no `.gitmodules` entry, a launch in a subdirectory of the superproject. As root and as an
//! unprivileged user, with the work tree under `/var/tmp` and under `/tmp`.
//!
//! Each case plants a program that would write a marker file in `outside/` (read-only inside,
//! so only a run on the host can make it), then runs git on the host and checks the marker.

use std::path::{Path, PathBuf};

use crate::support::git::{cases, p};
use crate::support::sandbox::{Scratch, text};

/// git on the host, as the sandbox's user, in `dir`; returns stdout and stderr.
fn host_git(s: &Scratch, dir: &Path, args: &[&str]) -> String {
    let mut c = s.program(Path::new("git"));
    c.args(["-c", "protocol.file.allow=always", "-c", "user.email=a@b", "-c", "user.name=n"]);
    c.args(["-c", "init.defaultBranch=main"]).args(args).current_dir(dir);
    let out = c.output().unwrap();
    let both = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "host git {args:?} in {}: {both}", dir.display());
    both
}

/// `proj/` as a repository with submodule `sub` (library `lib`, itself with a submodule
/// `inner`), committed. `init`: how far the submodules are checked out.
fn superproject(s: &Scratch, sub_path: &str, init: Init) {
    let work = s.proj.parent().unwrap();
    for name in ["leaf", "lib"] {
        let dir = work.join(name);
        std::fs::create_dir(&dir).unwrap();
        let _ = std::process::Command::new("chown")
            .args([&format!("{}:{}", s.who.uid, s.who.gid), p(&dir)])
            .status();
        host_git(s, &dir, &["init", "-q"]);
    }
    host_git(s, &work.join("leaf"), &["commit", "-q", "--allow-empty", "-m", "leaf"]);
    host_git(s, &work.join("lib"), &["submodule", "add", "-q", "../leaf", "inner"]);
    host_git(s, &work.join("lib"), &["commit", "-q", "-m", "lib"]);
    host_git(s, &s.proj, &["init", "-q"]);
    host_git(s, &s.proj, &["submodule", "add", "-q", "../lib", sub_path]);
    host_git(s, &s.proj, &["commit", "-q", "-m", "super"]);
    match init {
        Init::None => {
            host_git(s, &s.proj, &["submodule", "deinit", "-q", "-f", "--all"]);
        }
        Init::Top => {}
    }
}

#[derive(Clone, Copy)]
enum Init {
    None,
    Top,
}

/// The marker the planted program writes when it runs, and the script that plants it at
/// `proj/evil` (inside: the command's own file).
fn evil(s: &Scratch, case: &str) -> (PathBuf, String) {
    evil_in(s, case, &s.proj)
}

/// [`evil`] planted at `dir/evil`.
fn evil_in(s: &Scratch, case: &str, dir: &Path) -> (PathBuf, String) {
    let marker = s.outside.join(format!("pwned-{case}"));
    let plant = format!(
        "printf '#!/bin/sh\\necho ran > {}\\n' > {evil}; chmod +x {evil}; ",
        p(&marker),
        evil = p(&dir.join("evil")),
    );
    (marker, plant)
}

/// Runs `script` in `build` (in `cwd`); whatever of it fails, fails, but the sandbox must have
/// run it (a launch that fails would make every case pass).
fn attack(s: &Scratch, cwd: &Path, script: &str) -> String {
    let script = format!("{script}; echo sandboxed-command-ran");
    let mut c = s.command("build", &[], &["sh", "-c", &script]);
    c.current_dir(cwd);
    let out = c.output().unwrap();
    let both = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(both.contains("sandboxed-command-ran"), "the launch failed: {both}");
    both
}

/// Then the host's git in `dir`: `status`, and a commit.
fn host_runs_git(s: &Scratch, dir: &Path) {
    let mut c = s.program(Path::new("git"));
    c.args(["status"]).current_dir(dir);
    let _ = c.output().unwrap();
    let mut c = s.program(Path::new("git"));
    c.args(["-c", "user.email=a@b", "-c", "user.name=n", "commit", "-q", "--allow-empty"])
        .args(["-m", "host"])
        .current_dir(dir);
    let _ = c.output().unwrap();
}

#[track_caller]
fn nothing_ran(marker: &Path, attack_output: &str) {
    assert!(
        !marker.exists(),
        "the host's git ran what the sandboxed command planted ({}); inside: {attack_output}",
        marker.display()
    );
}

/// `git init sub` in an uninitialised submodule, `core.fsmonitor` set there.
fn uninitialised_submodule(s: &Scratch) {
    superproject(s, "sub", Init::None);
    let (marker, plant) = evil(s, "uninit");
    // (Moving or removing the read-only directory first: it is a mount point.)
    let script = format!(
        "{plant} mv sub sub.x || rmdir sub; git init -q sub; git -C sub config core.fsmonitor {}",
        p(&s.proj.join("evil"))
    );
    let out = attack(s, &s.proj, &script);
    assert!(!s.proj.join("sub/.git").exists(), "a repository was made in sub: {out}");
    host_runs_git(s, &s.proj);
    nothing_ran(&marker, &out);
}

/// A gitlink in the index that `.gitmodules` does not name: the same attack.
fn gitlink_without_gitmodules(s: &Scratch) {
    superproject(s, "sub", Init::None);
    host_git(s, &s.proj, &["rm", "-q", "--cached", ".gitmodules"]);
    std::fs::remove_file(s.proj.join(".gitmodules")).unwrap();
    host_git(s, &s.proj, &["commit", "-q", "-m", "no .gitmodules"]);
    let (marker, plant) = evil(s, "gitlink");
    let script = format!(
        "{plant} git init -q sub; git -C sub config core.fsmonitor {}",
        p(&s.proj.join("evil"))
    );
    let out = attack(s, &s.proj, &script);
    host_runs_git(s, &s.proj);
    nothing_ran(&marker, &out);
}

/// `core.hooksPath = .husky`: the command writes `.husky/pre-commit`.
fn hooks_path(s: &Scratch) {
    superproject(s, "sub", Init::Top);
    host_git(s, &s.proj, &["config", "core.hooksPath", ".husky"]);
    let (marker, plant) = evil(s, "husky");
    let script =
        format!("{plant} mkdir -p .husky; cp evil .husky/pre-commit; cp evil .husky/post-commit");
    let out = attack(s, &s.proj, &script);
    host_runs_git(s, &s.proj);
    nothing_ran(&marker, &out);
}

/// `core.hooksPath` through a symbolic link: a mount protects what the link points to, not the
/// link (red-team: `rm .husky; mkdir .husky` planted a hook). The launch is refused.
fn hooks_path_through_a_link(s: &Scratch) {
    superproject(s, "sub", Init::Top);
    let hooks = s.proj.parent().unwrap().join("hooks");
    std::fs::create_dir(&hooks).unwrap();
    std::os::unix::fs::symlink(&hooks, s.proj.join(".husky")).unwrap();
    host_git(s, &s.proj, &["config", "core.hooksPath", ".husky"]);
    let (marker, plant) = evil(s, "husky-link");
    let script =
        format!("{plant} rm .husky; mkdir .husky; cp evil .husky/pre-commit; echo planted");
    let out = s.run("build", &[], &["sh", "-c", &script]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success() && stdout.is_empty(), "not refused: {stdout}{stderr}");
    assert!(stderr.contains("is a symbolic link inside a writable path"), "{stderr}");
    host_runs_git(s, &s.proj);
    nothing_ran(&marker, &stdout);
}

/// A nested submodule left uninitialised: `git init` there.
fn nested_submodule(s: &Scratch) {
    superproject(s, "sub", Init::Top);
    let (marker, plant) = evil(s, "nested");
    let program = s.proj.join("evil");
    let script = format!(
        "{plant} git init -q sub/inner; git -C sub/inner config core.fsmonitor {}",
        p(&program)
    );
    let out = attack(s, &s.proj, &script);
    host_runs_git(s, &s.proj);
    host_runs_git(s, &s.proj.join("sub"));
    nothing_ran(&marker, &out);
}

/// The `.git` pointer of an initialised nested submodule sent to a git directory of the
/// command's making.
fn nested_submodule_pointer(s: &Scratch) {
    superproject(s, "sub", Init::Top);
    let program = s.proj.join("evil");
    host_git(s, &s.proj, &["submodule", "update", "-q", "--init", "--recursive"]);
    let (marker, plant) = evil(s, "nested-pointer");
    let script = format!(
        "{plant} git init -q fake; git -C fake config core.fsmonitor {evil}; \
         echo 'gitdir: {fake}' > sub/inner/.git",
        evil = p(&program),
        fake = p(&s.proj.join("fake/.git")),
    );
    let out = attack(s, &s.proj, &script);
    host_runs_git(s, &s.proj);
    host_runs_git(s, &s.proj.join("sub/inner"));
    nothing_ran(&marker, &out);
}

/// A launch in a subdirectory of the superproject: its gitlink below the working directory.
fn launch_below_the_superproject(s: &Scratch) {
    superproject(s, "dir/sub", Init::None);
    let dir = s.proj.join("dir");
    let (marker, plant) = evil_in(s, "subdir", &dir);
    let script = format!(
        "{plant} git init -q sub; git -C sub config core.fsmonitor {}",
        p(&dir.join("evil"))
    );
    let out = attack(s, &dir, &script);
    host_runs_git(s, &s.proj);
    nothing_ran(&marker, &out);
}

/// Ordinary git work inside still works with all of this: status, diff, a commit when git is
/// writable, with an uninitialised and an initialised submodule.
fn git_still_works_inside(s: &Scratch) {
    superproject(s, "sub", Init::Top);
    host_git(s, &s.proj, &["submodule", "deinit", "-q", "-f", "sub"]);
    let config = s.home.join(".config/sandgate/config.toml");
    std::fs::write(&config, "[filesystem]\ngit_writable = true\n").unwrap();
    s.sh(
        "build",
        &[],
        "echo x > file.txt && git status --short && git diff --stat && \
         git add file.txt && git -c user.email=a@b -c user.name=n commit -qm inside",
    );
    let log = host_git(s, &s.proj, &["log", "--format=%s", "-1"]);
    assert_eq!(log.trim(), "inside");
}

cases!(
    uninitialised_submodule,
    gitlink_without_gitmodules,
    hooks_path,
    hooks_path_through_a_link,
    nested_submodule,
    nested_submodule_pointer,
    launch_below_the_superproject,
    git_still_works_inside,
);
