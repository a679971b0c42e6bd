//! Red-team regressions: attacks on the git metadata wall that were tried and found CLOSED, kept
//! so that they stay closed. Each plants, from inside `build`, a program that writes a marker in
//! `outside/` (read-only inside, so only a run on the host can make it), then runs git on the
//! host and checks that the marker is absent. As root and as an unprivileged user, with the
//! work tree under `/var/tmp` and under `/tmp`.
//!
//! (Holes found OPEN are not here: tests in this tree must pass. See the red-team report.)

use std::path::{Path, PathBuf};

use crate::support::git::{cases, p};
use crate::support::sandbox::{Scratch, text};

/// git on the host, as the sandbox's user, in `proj/`; must succeed.
fn host_git(s: &Scratch, args: &[&str]) -> String {
    let out = host_git_any(s, args);
    let both = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "host git {args:?}: {both}");
    both
}

/// git on the host, as the sandbox's user, in `proj/`, whatever its outcome.
fn host_git_any(s: &Scratch, args: &[&str]) -> std::process::Output {
    let mut c = s.program(Path::new("git"));
    c.args(["-c", "user.email=a@b", "-c", "user.name=n", "-c", "init.defaultBranch=main"]);
    c.args(args).current_dir(&s.proj);
    c.output().unwrap()
}

/// `proj/` as a repository with one commit.
fn repo(s: &Scratch) {
    host_git(s, &["init", "-q"]);
    host_git(s, &["add", "file.txt"]);
    host_git(s, &["commit", "-q", "-m", "init"]);
}

/// The marker of `case`, and shell text writing a program at `path` that makes it.
fn evil(s: &Scratch, case: &str, path: &Path) -> (PathBuf, String) {
    let marker = s.outside.join(format!("pwned-{case}"));
    let plant = format!(
        "printf '#!/bin/sh\\necho ran > {m}\\n' > {e}; chmod +x {e}; ",
        m = p(&marker),
        e = p(path),
    );
    (marker, plant)
}

/// Runs `script` in `build`; the sandbox must have run it (a failed launch would pass every case).
fn attack(s: &Scratch, script: &str) -> String {
    let script = format!("{}; echo sandboxed-command-ran", script.trim_end().trim_end_matches(';'));
    let out = s.run("build", &[], &["sh", "-c", &script]);
    let both = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(both.contains("sandboxed-command-ran"), "the launch failed: {both}");
    both
}

#[track_caller]
fn nothing_ran(marker: &Path, inside: &str) {
    assert!(
        !marker.exists(),
        "the host's git ran what the sandboxed command planted ({}); inside: {inside}",
        marker.display()
    );
}

/// `include.path` naming a file in a directory that does not exist yet: the command makes the
/// directory and the file (setting `core.fsmonitor`), the host's `git status` would read it.
fn include_in_a_missing_directory(s: &Scratch) {
    repo(s);
    host_git(s, &["config", "include.path", "../conf/extra.inc"]);
    let program = s.proj.join("fsmon");
    let (marker, plant) = evil(s, "include", &program);
    let inside = attack(
        s,
        &format!(
            "{plant} mkdir -p conf; printf '[core]\\n\\tfsmonitor = {}\\n' > conf/extra.inc",
            p(&program)
        ),
    );
    let _ = host_git_any(s, &["status"]);
    nothing_ran(&marker, &inside);
}

/// `core.hooksPath` below a subdirectory (`tools/hooks`): moving `tools` away and making a new
/// `tools/hooks/pre-commit` would take the read-only mount along (the directories on the way are
/// pinned).
fn moving_the_parent_of_a_nested_hooks_path(s: &Scratch) {
    repo(s);
    std::fs::create_dir_all(s.proj.join("tools/hooks")).unwrap();
    let _ = std::process::Command::new("chown")
        .args(["-R", &format!("{}:{}", s.who.uid, s.who.gid), p(&s.proj.join("tools"))])
        .status();
    host_git(s, &["config", "core.hooksPath", "tools/hooks"]);
    let (marker, plant) = evil(s, "hookspath-parent", &s.proj.join("tools/hooks/pre-commit"));
    let inside = attack(
        s,
        &format!("mv tools tools2 || mv tools/hooks tools/h2; mkdir -p tools/hooks; {plant}"),
    );
    let _ = host_git_any(s, &["commit", "-q", "--allow-empty", "-m", "host"]);
    nothing_ran(&marker, &inside);
}

/// An alias running a program of the work tree (`!scripts/fmt.sh`): the program is read-only.
fn alias_program_in_the_work_tree(s: &Scratch) {
    repo(s);
    std::fs::create_dir_all(s.proj.join("scripts")).unwrap();
    std::fs::write(s.proj.join("scripts/fmt.sh"), "#!/bin/sh\necho fmt\n").unwrap();
    let _ = std::process::Command::new("chmod")
        .args(["-R", "a+rx", p(&s.proj.join("scripts"))])
        .status();
    let _ = std::process::Command::new("chown")
        .args(["-R", &format!("{}:{}", s.who.uid, s.who.gid), p(&s.proj.join("scripts"))])
        .status();
    host_git(s, &["config", "alias.fmt", "!scripts/fmt.sh"]);
    let (marker, plant) = evil(s, "alias", &s.proj.join("scripts/fmt.sh"));
    let inside = attack(s, &format!("{plant} rm -f scripts/fmt.sh; {plant}"));
    let _ = host_git_any(s, &["fmt"]);
    nothing_ran(&marker, &inside);
}

/// With `git_writable = true` and `extensions.worktreeConfig` on, the main worktree's
/// `.git/config.worktree` (read by git, missing before the launch) cannot be created; nor can
/// `.git/config` be reached through a hard link made in the work tree.
fn config_worktree_with_git_writable(s: &Scratch) {
    repo(s);
    host_git(s, &["config", "extensions.worktreeConfig", "true"]);
    let config = s.home.join(".config/sandgate/config.toml");
    std::fs::write(&config, "[filesystem]\ngit_writable = true\n").unwrap();
    let program = s.proj.join("fsmon");
    let (marker, plant) = evil(s, "config-worktree", &program);
    let inside = attack(
        s,
        &format!(
            "{plant} printf '[core]\\n\\tfsmonitor = {f}\\n' > .git/config.worktree; \
             ln .git/config cfg && printf '[core]\\n\\tfsmonitor = {f}\\n' >> cfg",
            f = p(&program)
        ),
    );
    let _ = host_git_any(s, &["status"]);
    nothing_ran(&marker, &inside);
}

/// A gitlink kept in the shared index of a split index (`core.splitIndex`, `update-index --split-index`).
fn split_index(s: &Scratch) {
    repo(s);
    let head = host_git(s, &["rev-parse", "HEAD"]);
    host_git(s, &["update-index", "--add", "--cacheinfo", &format!("160000,{},sub", head.trim())]);
    host_git(s, &["commit", "-q", "-m", "gitlink"]);
    host_git(s, &["update-index", "--split-index"]);
    let program = s.proj.join("fsmon");
    let (marker, plant) = evil(s, "split", &program);
    let inside = attack(
        s,
        &format!("{plant} git init -q sub && git -C sub config core.fsmonitor {}", p(&program)),
    );
    let _ = host_git_any(s, &["status"]);
    nothing_ran(&marker, &inside);
}

/// An alias building its program's path with rev-parse (`!$(git rev-parse --show-toplevel)/scripts/fmt.sh`).
fn alias_toplevel(s: &Scratch) {
    repo(s);
    std::fs::create_dir_all(s.proj.join("scripts")).unwrap();
    std::fs::write(s.proj.join("scripts/fmt.sh"), "#!/bin/sh\necho fmt\n").unwrap();
    let _ = std::process::Command::new("chmod")
        .args(["-R", "a+rx", p(&s.proj.join("scripts"))])
        .status();
    let _ = std::process::Command::new("chown")
        .args(["-R", &format!("{}:{}", s.who.uid, s.who.gid), p(&s.proj.join("scripts"))])
        .status();
    host_git(s, &["config", "alias.fmt", "!$(git rev-parse --show-toplevel)/scripts/fmt.sh"]);
    let (marker, plant) = evil(s, "alias-top", &s.proj.join("scripts/fmt.sh"));
    let inside = attack(s, &plant);
    let _ = host_git_any(s, &["fmt"]);
    nothing_ran(&marker, &inside);
}

/// With `git_writable = true` and `extensions.worktreeConfig`, a linked worktree's
/// `.git/worktrees/<name>/config.worktree` (missing, git reads it) stays read-only (red-team B).
fn linked_worktree_config_with_git_writable(s: &Scratch) {
    repo(s);
    host_git(s, &["config", "extensions.worktreeConfig", "true"]);
    host_git(s, &["worktree", "add", "-q", "../wt2"]);
    let config = s.home.join(".config/sandgate/config.toml");
    std::fs::write(&config, "[filesystem]\ngit_writable = true\n").unwrap();
    let program = s.proj.join("fsmon");
    let (marker, plant) = evil(s, "linked-worktree", &program);
    let inside = attack(
        s,
        &format!(
            "{plant} printf '[core]\\n\\tfsmonitor = {f}\\n' > .git/worktrees/wt2/config.worktree",
            f = p(&program)
        ),
    );
    let _ = host_git_any(s, &["-C", "../wt2", "status"]);
    nothing_ran(&marker, &inside);
}

/// `core.hooksPath` given by `GIT_CONFIG_PARAMETERS` (what `git -c` hands on) in the launch's
/// environment and the host's: its directory stays read-only (red-team D).
fn git_config_parameters(s: &Scratch) {
    repo(s);
    std::fs::create_dir_all(s.proj.join("githooks")).unwrap();
    let _ = std::process::Command::new("chown")
        .args(["-R", &format!("{}:{}", s.who.uid, s.who.gid), p(&s.proj.join("githooks"))])
        .status();
    let params = "'core.hookspath'='githooks'";
    let (marker, plant) = evil(s, "gcp", &s.proj.join("githooks/pre-commit"));
    let script = format!("{plant} echo sandboxed-command-ran");
    let mut c = s.command("build", &[], &["sh", "-c", &script]);
    let out = c.env("GIT_CONFIG_PARAMETERS", params).output().unwrap();
    let inside = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(inside.contains("sandboxed-command-ran"), "the launch failed: {inside}");
    let mut g = s.program(Path::new("git"));
    g.args(["-c", "user.email=a@b", "-c", "user.name=n", "commit", "-q", "--allow-empty"]);
    let _ = g.args(["-m", "host"]).env("GIT_CONFIG_PARAMETERS", params).output().unwrap();
    nothing_ran(&marker, &inside);
}

/// `GIT_DIR` in the launch's environment points git at a repository the wall did not walk: the
/// launch refuses (red-team D).
fn git_dir_in_the_environment(s: &Scratch) {
    repo(s);
    let mut c = s.command("build", &[], &["sh", "-c", "echo sandboxed-command-ran"]);
    let out = c.env("GIT_DIR", s.proj.join(".git")).output().unwrap();
    let both = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success() && !both.contains("sandboxed-command-ran"), "{both}");
    assert!(both.contains("GIT_DIR"), "{both}");
}

/// `init.templateDir` (user's config) naming a directory of the work tree: its hooks are what
/// the next `git clone`/`git init` copies and runs, so it stays read-only (red-team E).
fn template_dir_in_the_work_tree(s: &Scratch) {
    repo(s);
    std::fs::create_dir_all(s.proj.join("tpl/hooks")).unwrap();
    let _ = std::process::Command::new("chown")
        .args(["-R", &format!("{}:{}", s.who.uid, s.who.gid), p(&s.proj.join("tpl"))])
        .status();
    let gitconfig = s.home.join(".gitconfig");
    std::fs::write(&gitconfig, format!("[init]\n\ttemplateDir = {}\n", p(&s.proj.join("tpl"))))
        .unwrap();
    let (marker, plant) = evil(s, "template", &s.proj.join("tpl/hooks/post-checkout"));
    let inside = attack(s, &plant);
    let _ = host_git_any(s, &["clone", "-q", ".", "../clone2"]);
    nothing_ran(&marker, &inside);
}

/// A repository already below the launch directory that no gitlink names (`proj/` is no
/// repository, `proj/projA` is): its hooks stay read-only (red-team, found by the scan).
fn existing_repository_below(s: &Scratch) {
    let a = s.proj.join("projA");
    std::fs::create_dir_all(&a).unwrap();
    let _ = std::process::Command::new("chown")
        .args(["-R", &format!("{}:{}", s.who.uid, s.who.gid), p(&a)])
        .status();
    host_git(s, &["-C", "projA", "init", "-q"]);
    let (marker, plant) = evil(s, "nested", &a.join(".git/hooks/pre-commit"));
    let inside = attack(s, &plant);
    let _ = host_git_any(s, &["-C", "projA", "commit", "-q", "--allow-empty", "-m", "host"]);
    nothing_ran(&marker, &inside);
}

cases!(
    include_in_a_missing_directory,
    moving_the_parent_of_a_nested_hooks_path,
    alias_program_in_the_work_tree,
    config_worktree_with_git_writable,
    split_index,
    alias_toplevel,
    linked_worktree_config_with_git_writable,
    git_config_parameters,
    git_dir_in_the_environment,
    template_dir_in_the_work_tree,
    existing_repository_below,
);
