//! Below the top of a writable path in `build` (issue 31): the files host tools execute or obey
//! wherever they find them (a workspace member's `.cargo/config.toml`, a nested
//! `rust-toolchain.toml`, a subdirectory's `.envrc`, `mise.toml`, `.npmrc`, ...) are read-only,
//! new ones are taken away; repositories are recognised the way git does (a bare one named like
//! anything, one made during the run); build output stays the build's; the launch ends with one
//! line naming the tool files that changed; a tree deeper than the scan's bound is said. As root
//! and as an unprivileged user, with the work tree under `/var/tmp` and under `/tmp`.
//!
//! Every attack has its control: the same script run on the host, outside any sandbox, does
//! what the sandboxed one must not (the file is written, the planted program runs), so a test
//! that passed because its attack was broken would fail there.

use std::path::{Path, PathBuf};

use crate::support::git::{cases, p};
use crate::support::sandbox::{Scratch, text};

/// `sh -c script` on the host, as the sandbox's user, in `dir`: the control.
fn on_the_host(s: &Scratch, dir: &Path, script: &str) -> String {
    let mut c = s.program(Path::new("sh"));
    c.args(["-c", script]).current_dir(dir);
    let out = c.output().unwrap();
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

/// Runs `script` in `build` in `dir`; the sandbox must have run it (a launch that fails would
/// make every case pass). Returns stdout and stderr.
fn attack(s: &Scratch, dir: &Path, script: &str) -> (String, String) {
    let script = format!("{}; echo sandboxed-command-ran", script.trim_end().trim_end_matches(';'));
    let out = s.command("build", &[], &["sh", "-c", &script]).current_dir(dir).output().unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(stdout.contains("sandboxed-command-ran"), "the launch failed: {stdout}{stderr}");
    (stdout, stderr)
}

/// git on the host, as the sandbox's user, in `dir`, whatever its outcome.
fn host_git(s: &Scratch, dir: &Path, args: &[&str]) -> std::process::Output {
    let mut c = s.program(Path::new("git"));
    c.args(["-c", "user.email=a@b", "-c", "user.name=n", "-c", "init.defaultBranch=main"]);
    c.args(["-c", "protocol.file.allow=always"]).args(args).current_dir(dir);
    c.output().unwrap()
}

/// `host_git` that must succeed.
#[track_caller]
fn host_git_ok(s: &Scratch, dir: &Path, args: &[&str]) {
    let out = host_git(s, dir, args);
    assert!(out.status.success(), "git {args:?}: {}{}", text(&out.stdout), text(&out.stderr));
}

/// Writes `files` (path relative to `proj/`, contents) as the sandbox's user.
fn layout(s: &Scratch, files: &[(&str, &str)]) {
    for (rel, body) in files {
        let path = s.proj.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    }
    chown(s, &s.proj);
}

/// [`layout`] in a tree large enough for the daemon's index to answer (a tree of some dozens of
/// directories is scanned in the launcher, cheaper than asking): 150 more directories.
fn large_layout(s: &Scratch, files: &[(&str, &str)]) {
    for i in 0..150 {
        std::fs::create_dir_all(s.proj.join(format!("pad/d{i}"))).unwrap();
    }
    layout(s, files);
}

fn chown(s: &Scratch, path: &Path) {
    let _ = std::process::Command::new("chown")
        .args(["-R", &format!("{}:{}", s.who.uid, s.who.gid), p(path)])
        .status();
}

/// The marker a planted program writes in `outside/` (read-only inside: only a run on the host
/// makes it), and shell text writing that program at `at`.
fn evil(s: &Scratch, case: &str, at: &Path) -> (PathBuf, String) {
    let marker = s.outside.join(format!("pwned-{case}"));
    let plant = format!(
        "mkdir -p {dir}; printf '#!/bin/sh\\necho ran > {m}\\necho PLANTED\\n' > {e}; chmod +x {e}; ",
        dir = p(at.parent().unwrap()),
        m = p(&marker),
        e = p(at),
    );
    (marker, plant)
}

/// Existing tool files at every depth stay as they were; new ones (made there, renamed there, in
/// a directory made during the run, moved in from build output, a link) are taken away and the
/// user is told. Control: the same script on the host writes every one of them.
fn nested_tool_files_are_read_only_and_new_ones_go(s: &Scratch) {
    let existing = [
        ("crates/a/.cargo/config.toml", "[build]\n"),
        ("crates/a/rust-toolchain.toml", "[toolchain]\nchannel = \"stable\"\n"),
        ("sub/.envrc", "export A=1\n"),
        ("web/.npmrc", "registry=https://registry.npmjs.org/\n"),
        ("deep/x/y/z/mise.toml", "[tools]\n"),
        ("deep/x/.tool-versions", "nodejs 20.0.0\n"),
        ("tools/.pre-commit-config.yaml", "repos: []\n"),
    ];
    layout(s, &existing);
    let overwrite: String = existing
        .iter()
        .map(|(rel, _)| format!("echo planted >> {rel} 2>/dev/null && echo WROTE {rel}; "))
        .collect();
    let plant = "mkdir -p crates/b/.cargo && echo '[build]' > crates/b/.cargo/config.toml; \
                 echo x > web/plain && mv web/plain web/.yarnrc.yml; \
                 mkdir -p new/a/b/c/d && echo 'use flake' > new/a/b/c/d/.envrc; \
                 mkdir -p target/t && echo x > target/t/.envrc && mv target/t sub/t; \
                 ln -s /etc/passwd deep/x/y/opencode.json; \
                 mkdir -p crates/c && echo '{}' > crates/c/.mcp.json";
    let planted = [
        "crates/b/.cargo",
        "web/.yarnrc.yml",
        "new/a/b/c/d/.envrc",
        "sub/t/.envrc",
        "deep/x/y/opencode.json",
        "crates/c/.mcp.json",
    ];
    let (stdout, stderr) = attack(s, &s.proj, &format!("{overwrite}{plant}"));
    assert!(!stdout.contains("WROTE"), "an existing tool file was written: {stdout}");
    for (rel, body) in existing {
        assert_eq!(std::fs::read_to_string(s.proj.join(rel)).unwrap(), body, "{rel}");
    }
    for rel in planted {
        assert!(
            std::fs::symlink_metadata(s.proj.join(rel)).is_err(),
            "{rel} is in place after the sandbox ended\n{stderr}"
        );
        assert!(stderr.contains(&format!("/{rel} (")), "the user is told about {rel}: {stderr}");
    }
    assert!(s.proj.join("sub/t").is_dir(), "ordinary entries stay");
    // Control: on the host the same script writes every file.
    let control = s.root.join("control");
    std::fs::create_dir_all(&control).unwrap();
    for (rel, body) in existing {
        let path = control.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    }
    chown(s, &control);
    let out = on_the_host(s, &control, &format!("{overwrite}{plant}"));
    assert_eq!(out.matches("WROTE").count(), existing.len(), "control: {out}");
    for rel in planted {
        assert!(std::fs::symlink_metadata(control.join(rel)).is_ok(), "control: {rel}: {out}");
    }
}

/// The review's case one level down: a workspace member's `rust-toolchain.toml` naming a
/// toolchain of the command's making runs it on the host's next `cargo --version` there.
/// Control: planted on the host, it does.
fn a_nested_rust_toolchain_does_not_run_on_the_hosts_cargo(s: &Scratch) {
    layout(s, &[("crates/a/rust-toolchain.toml", "[toolchain]\nchannel = \"stable\"\n")]);
    let (_marker, tc) = evil(s, "toolchain", &s.proj.join("tc/bin/cargo"));
    let plant = |dir: &str| {
        format!(
            "mkdir -p {dir}; printf '[toolchain]\\npath = \"%s/tc\"\\n' \"$PWD\" > {dir}/rust-toolchain.toml; "
        )
    };
    let script = format!("{tc}{} {}", plant("crates/a"), plant("crates/b"));
    let (_, stderr) = attack(s, &s.proj, &script);
    let host_cargo = |dir: &Path| {
        std::process::Command::new("cargo")
            .arg("--version")
            .env_remove("RUSTUP_TOOLCHAIN")
            .current_dir(dir)
            .output()
    };
    if host_cargo(&s.proj).is_err() {
        sandgate_tests::skip("cargo (rustup) on the host");
        return;
    }
    for dir in ["crates/a", "crates/b"] {
        let out = host_cargo(&s.proj.join(dir)).unwrap();
        assert!(!text(&out.stdout).contains("PLANTED"), "{dir}: the host's cargo ran it: {stderr}");
    }
    // Control: the same file written on the host sends the host's cargo to the planted one.
    let out = on_the_host(s, &s.proj, &plant("crates/control"));
    let ran = host_cargo(&s.proj.join("crates/control")).unwrap();
    assert!(text(&ran.stdout).contains("PLANTED"), "control: {out}{}", text(&ran.stderr));
}

/// What a build writes below the top stays (build output is not entered, dot-entries below the
/// top are not protected by default), and the line at the end names the build code that
/// changed, nothing else.
fn build_output_stays_and_changed_build_code_is_named(s: &Scratch) {
    layout(
        s,
        &[
            ("crates/a/build.rs", "fn main() {}\n"),
            ("crates/a/src/lib.rs", "\n"),
            ("lib/Makefile", "all:\n"),
            ("README.md", "# x\n"),
        ],
    );
    let script = "mkdir -p target/debug/.fingerprint crates/a/target/.cargo && \
                  echo x > target/debug/.fingerprint/f && echo x > crates/a/target/.cargo/y; \
                  mkdir -p web/node_modules/.bin web/node_modules/p && \
                  echo x > web/node_modules/.bin/tool && echo x > web/node_modules/p/.npmrc; \
                  mkdir -p py/.venv/bin py/.pytest_cache && echo x > py/.venv/bin/python; \
                  mkdir -p src/.deps && echo x > src/.deps/a.Po; \
                  echo '// more' >> crates/a/build.rs; echo '// x' >> crates/a/src/lib.rs; \
                  echo 'x:' >> lib/Makefile; echo x >> README.md; echo 'fn main(){}' > new.rs; \
                  mkdir -p crates/n && echo '[package]' > crates/n/Cargo.toml";
    let (_, stderr) = attack(s, &s.proj, script);
    for kept in [
        "target/debug/.fingerprint/f",
        "crates/a/target/.cargo/y",
        "web/node_modules/.bin/tool",
        "web/node_modules/p/.npmrc",
        "py/.venv/bin/python",
        "src/.deps/a.Po",
    ] {
        assert!(s.proj.join(kept).exists(), "{kept} was taken: {stderr}");
    }
    assert!(!stderr.contains("took away"), "{stderr}");
    let line: Vec<&str> =
        stderr.lines().filter(|l| l.contains("files host tools execute or obey")).collect();
    assert_eq!(line.len(), 1, "one line: {stderr}");
    for named in ["crates/a/build.rs", "lib/Makefile", "crates/n/Cargo.toml"] {
        assert!(line[0].contains(named), "{named} not named: {}", line[0]);
    }
    for not in ["lib.rs", "README.md", "new.rs", "target", "node_modules"] {
        assert!(!line[0].contains(not), "{not} named: {}", line[0]);
    }
    // Control: a launch that changes nothing of the kind says nothing.
    let (_, quiet) = attack(s, &s.proj, "echo y >> README.md");
    assert!(!quiet.contains("files host tools execute or obey"), "{quiet}");
}

/// Issue 31.2: a bare repository already inside the project, named in no git config: its hooks
/// and config stay read-only, so the host's `git push ./fixtures/mirror.git` runs nothing the
/// command planted (nor does a repository-shaped directory named like anything). Control: the
/// same plant on the host makes the push run it.
fn a_bare_repository_inside_runs_nothing_planted(s: &Scratch) {
    host_git_ok(s, &s.proj, &["init", "-q"]);
    host_git_ok(s, &s.proj, &["commit", "-q", "--allow-empty", "-m", "x"]);
    std::fs::create_dir_all(s.proj.join("fixtures")).unwrap();
    chown(s, &s.proj.join("fixtures"));
    for bare in ["fixtures/mirror.git", "fixtures/data", "fixtures/control.git"] {
        host_git_ok(s, &s.proj, &["init", "-q", "--bare", bare]);
    }
    let plant_in = |bare: &str, case: &str| {
        let (marker, plant) = evil(s, case, &s.proj.join(bare).join("hooks/pre-receive"));
        let config = format!(
            "printf '[core]\\n\\thooksPath = {}\\n' >> {bare}/config 2>/dev/null; ",
            p(&s.proj.join("evilhooks"))
        );
        let (_, hook) = evil(s, case, &s.proj.join("evilhooks/pre-receive"));
        (marker, format!("{plant}{hook}{config}"))
    };
    let (mirror, plant_mirror) = plant_in("fixtures/mirror.git", "bare-mirror");
    let (data, plant_data) = plant_in("fixtures/data", "bare-data");
    let (_, stderr) = attack(s, &s.proj, &format!("{plant_mirror}{plant_data}"));
    for (bare, marker) in [("fixtures/mirror.git", &mirror), ("fixtures/data", &data)] {
        let _ = host_git(s, &s.proj, &["push", "-q", &format!("./{bare}"), "HEAD:refs/heads/x"]);
        assert!(!marker.exists(), "the host's push into {bare} ran a planted hook: {stderr}");
    }
    // Control: planted on the host, the push runs it.
    let (control, plant) = plant_in("fixtures/control.git", "bare-control");
    let out = on_the_host(s, &s.proj, &plant);
    let _ = host_git(s, &s.proj, &["push", "-q", "./fixtures/control.git", "HEAD:refs/heads/x"]);
    assert!(control.exists(), "control: the planted hook did not run: {out}");
}

/// Repositories made during the run: `git init` in a subdirectory and `git init --bare` are
/// undone (the `.git` taken away, the bare one without its `HEAD`), so the host's git there runs
/// none of their hooks. Control: on the host, the same repositories run them.
fn repositories_made_during_the_run_run_nothing(s: &Scratch) {
    host_git_ok(s, &s.proj, &["init", "-q"]);
    host_git_ok(s, &s.proj, &["commit", "-q", "--allow-empty", "-m", "x"]);
    let script = |dir: &Path, case: &str| {
        let (marker, hook) = evil(s, case, &dir.join("made.git/hooks/pre-receive"));
        let (_, commit_hook) = evil(s, case, &dir.join("sub/.git/hooks/pre-commit"));
        let script = format!(
            "cd {d}; git init -q --bare made.git; {hook} mkdir -p sub; git init -q sub; \
             {commit_hook} true",
            d = p(dir)
        );
        (marker, script)
    };
    let (marker, inside) = script(&s.proj, "made");
    let (_, stderr) = attack(s, &s.proj, &inside);
    assert!(!s.proj.join("made.git/HEAD").exists(), "{stderr}");
    assert!(!s.proj.join("sub/.git").exists(), "{stderr}");
    let _ = host_git(s, &s.proj, &["push", "-q", "./made.git", "HEAD:refs/heads/x"]);
    let _ = host_git(s, &s.proj.join("sub"), &["commit", "-q", "--allow-empty", "-m", "h"]);
    assert!(!marker.exists(), "the host's git ran a hook of a repository made inside: {stderr}");
    // Control: the same repositories made on the host run their hooks.
    let control = s.root.join("control");
    std::fs::create_dir_all(&control).unwrap();
    chown(s, &control);
    host_git_ok(s, &control, &["init", "-q"]);
    host_git_ok(s, &control, &["commit", "-q", "--allow-empty", "-m", "x"]);
    let (marker, outside) = script(&control, "made-control");
    let out = on_the_host(s, &control, &outside);
    let _ = host_git(s, &control, &["push", "-q", "./made.git", "HEAD:refs/heads/x"]);
    assert!(marker.exists(), "control: {out}");
}

/// A repository below the scan's depth bound cannot be protected: what the scan did not read is
/// read-only for the launch, the launch says so, once, and `explain` lists it; one within the
/// bound is protected. Controls: a launch in a shallow tree says nothing of the kind, and a plain
/// file within the bound is written where the same write past it is refused.
fn a_tree_past_the_scan_bound_is_named(s: &Scratch) {
    let (_, shallow) = attack(s, &s.proj, "true");
    assert!(!shallow.contains("did not look into"), "{shallow}");
    let deep: PathBuf = (0..26).map(|i| format!("d{i}")).collect();
    let within: PathBuf = (0..20).map(|i| format!("d{i}")).collect();
    for dir in [&deep, &within] {
        std::fs::create_dir_all(s.proj.join(dir)).unwrap();
    }
    chown(s, &s.proj);
    for dir in [&deep, &within] {
        host_git_ok(s, &s.proj.join(dir), &["init", "-q"]);
    }
    let hook = |dir: &Path| s.proj.join(dir).join(".git/hooks/pre-commit");
    let script = format!(
        "echo x > {} 2>/dev/null && echo WROTE-WITHIN; echo x > {} 2>/dev/null && echo WROTE-DEEP; \
         echo x > {} && echo WROTE-PLAIN-WITHIN; echo x > {} 2>/dev/null && echo WROTE-PLAIN-DEEP",
        p(&hook(&within)),
        p(&hook(&deep)),
        p(&s.proj.join(&within).join("plain")),
        p(&s.proj.join(&deep).join("plain")),
    );
    let (stdout, stderr) = attack(s, &s.proj, &script);
    assert!(!stdout.contains("WROTE-WITHIN"), "within the bound: {stdout}");
    assert!(!stdout.contains("WROTE-DEEP"), "past the bound: {stdout}");
    assert!(stdout.contains("WROTE-PLAIN-WITHIN"), "control: {stdout}{stderr}");
    assert!(!stdout.contains("WROTE-PLAIN-DEEP"), "past the bound, read-only: {stdout}");
    let notices: Vec<&str> = stderr.lines().filter(|l| l.contains("did not look into")).collect();
    assert_eq!(notices.len(), 1, "once: {stderr}");
    let unread: PathBuf = (0..25).map(|i| format!("d{i}")).collect();
    assert!(notices[0].contains(p(&unread)), "the directory is named: {}", notices[0]);
    assert!(notices[0].contains("read-only for this launch"), "{}", notices[0]);
    let out = s
        .program(&sandgate_tests::sandgate_bin())
        .args(["explain", "--tier", "build"])
        .output()
        .unwrap();
    let explained = text(&out.stdout);
    assert!(explained.contains("not looked into (1;"), "{explained}{}", text(&out.stderr));
    assert!(explained.contains(p(&unread)), "{explained}");
}

/// Issue 31, third round: a flood of directories made in one run makes the next launch's scan
/// stop early; what it did not read is read-only for that launch (in a few mounts), so a
/// repository past the bound runs nothing planted, and the launch names the key that raises the
/// bound. Control: with the bound raised, the same plain write there succeeds.
fn a_flood_of_directories_leaves_nothing_writable_and_unprotected(s: &Scratch) {
    std::fs::create_dir_all(s.proj.join("deep/er/repo")).unwrap();
    chown(s, &s.proj);
    host_git_ok(s, &s.proj.join("deep/er/repo"), &["init", "-q"]);
    attack(s, &s.proj, "for i in $(seq 60); do mkdir -p flood/$i/x; done");
    let config = s.home.join(".config/sandgate/config.toml");
    std::fs::write(&config, "[filesystem]\nscan_directories = 40\n").unwrap();
    let hook = s.proj.join("deep/er/repo/.git/hooks/pre-commit");
    let plain = s.proj.join("deep/er/repo/plain");
    let script = format!(
        "echo x > {} 2>/dev/null && echo WROTE-HOOK; echo x > {} 2>/dev/null && echo WROTE-PLAIN",
        p(&hook),
        p(&plain)
    );
    let (stdout, stderr) = attack(s, &s.proj, &script);
    assert!(!stdout.contains("WROTE-HOOK"), "a hook past the bound was written: {stderr}");
    assert!(!stdout.contains("WROTE-PLAIN"), "past the bound is read-only: {stderr}");
    let notices: Vec<&str> = stderr.lines().filter(|l| l.contains("did not look into")).collect();
    assert_eq!(notices.len(), 1, "once: {stderr}");
    assert!(notices[0].contains("scan_directories"), "{}", notices[0]);
    assert!(notices[0].contains("past 40 directories"), "the bound in force: {}", notices[0]);
    // Control: with the bound raised, the tree is read (the hook is protected as a repository's)
    // and the plain write succeeds.
    std::fs::write(&config, "[filesystem]\nscan_directories = 20000\n").unwrap();
    let (stdout, stderr) = attack(s, &s.proj, &script);
    assert!(stdout.contains("WROTE-PLAIN"), "control: {stdout}{stderr}");
    assert!(!stdout.contains("WROTE-HOOK"), "{stdout}");
    assert!(!stderr.contains("did not look into"), "{stderr}");
}

/// Issue 31, third round: a project directory replaced by a symbolic link into build output
/// (`crates/foo` → `target/foo`, which the scan does not enter), with a repository planted
/// behind it: the link is taken away, so the host's git started in `crates/foo` runs no planted
/// hook; and a launch refuses such a link that is there already. Controls: the same script run
/// on the host makes the host's git run the hook; without the link the launch runs.
fn a_link_into_build_output_reaches_nothing_planted(s: &Scratch) {
    host_git_ok(s, &s.proj, &["init", "-q"]);
    host_git_ok(s, &s.proj, &["commit", "-q", "--allow-empty", "-m", "x"]);
    layout(s, &[("crates/foo/src/lib.rs", "\n")]);
    let script = |dir: &Path, case: &str| {
        let (marker, hook) = evil(s, case, &dir.join("target/foo/.git/hooks/pre-commit"));
        let script = format!(
            "cd {d}; mkdir -p target/foo; git init -q target/foo; {hook} rm -rf crates/foo; \
             ln -s ../target/foo crates/foo; ln -s target/foo top; true",
            d = p(dir)
        );
        (marker, script)
    };
    let (marker, inside) = script(&s.proj, "link");
    let (_, stderr) = attack(s, &s.proj, &inside);
    for link in ["crates/foo", "top"] {
        assert!(std::fs::symlink_metadata(s.proj.join(link)).is_err(), "{link} stayed: {stderr}");
        assert!(stderr.contains(&format!("/{link} (a symbolic link")), "{link}: {stderr}");
    }
    // The host's git where the link was: the project's own repository, not the planted one.
    let _ = host_git(s, &s.proj.join("crates"), &["commit", "-q", "--allow-empty", "-m", "h"]);
    assert!(!marker.exists(), "the host's git ran a hook planted behind a link: {stderr}");
    // A link there before the launch: refused, with the way out.
    std::os::unix::fs::symlink("../target/foo", s.proj.join("crates/bar")).unwrap();
    chown(s, &s.proj.join("crates"));
    let out = s.command("build", &[], &["true"]).output().unwrap();
    let refused = text(&out.stderr);
    assert!(!out.status.success(), "a launch with a way in ran: {refused}");
    assert!(refused.contains("crates/bar is a symbolic link to"), "{refused}");
    assert!(refused.contains("Replace the link with the directory"), "{refused}");
    std::fs::remove_file(s.proj.join("crates/bar")).unwrap();
    attack(s, &s.proj, "true"); // control: without it the launch runs
    // Control: the same script on the host leaves the links, and the host's git runs the hook.
    let control = s.root.join("control");
    std::fs::create_dir_all(control.join("crates/foo")).unwrap();
    chown(s, &control);
    host_git_ok(s, &control, &["init", "-q"]);
    let (marker, outside) = script(&control, "link-control");
    let out = on_the_host(s, &control, &outside);
    let _ = host_git(s, &control.join("crates/foo"), &["commit", "-q", "--allow-empty", "-m", "h"]);
    assert!(marker.exists(), "control: {out}");
}

/// A link there at launch to a build artifact (`bin/app` → `target/release/app`, a file) is
/// allowed; the command making the artifact a repository-holding directory gets the link taken
/// away, so the host's git started in `bin/app` runs no planted hook. Control: the same script
/// on the host does make it run.
fn a_link_to_an_artifact_made_a_directory_goes(s: &Scratch) {
    host_git_ok(s, &s.proj, &["init", "-q"]);
    host_git_ok(s, &s.proj, &["commit", "-q", "--allow-empty", "-m", "x"]);
    let arrange = |dir: &Path| {
        std::fs::create_dir_all(dir.join("target/release")).unwrap();
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        std::fs::write(dir.join("target/release/app"), "artifact").unwrap();
        std::os::unix::fs::symlink("../target/release/app", dir.join("bin/app")).unwrap();
        chown(s, dir);
    };
    arrange(&s.proj);
    let script = |dir: &Path, case: &str| {
        let (marker, hook) = evil(s, case, &dir.join("target/release/app/.git/hooks/pre-commit"));
        let script = format!(
            "cd {d}; rm target/release/app; mkdir target/release/app; \
             git init -q target/release/app; {hook} true",
            d = p(dir)
        );
        (marker, script)
    };
    let (marker, inside) = script(&s.proj, "artifact");
    let (_, stderr) = attack(s, &s.proj, &inside);
    assert!(std::fs::symlink_metadata(s.proj.join("bin/app")).is_err(), "stayed: {stderr}");
    assert!(stderr.contains("/bin/app (a symbolic link"), "{stderr}");
    let _ = host_git(s, &s.proj.join("bin"), &["commit", "-q", "--allow-empty", "-m", "h"]);
    assert!(!marker.exists(), "{stderr}");
    // Control: on the host the link stays and leads the host's git to the planted hook.
    let control = s.root.join("control");
    std::fs::create_dir_all(&control).unwrap();
    arrange(&control);
    host_git_ok(s, &control, &["init", "-q"]);
    let (marker, outside) = script(&control, "artifact-control");
    let out = on_the_host(s, &control, &outside);
    let _ = host_git(s, &control.join("bin/app"), &["commit", "-q", "--allow-empty", "-m", "h"]);
    assert!(marker.exists(), "control: {out}");
}

/// Issue 31, third round: build code rewritten through a hard link made in build output
/// (`ln src/build.rs target/b`, then a write to `target/b`): the change is real, and the line
/// at the end names `src/build.rs`. Control: a launch writing a plain file of build output says
/// nothing.
fn build_code_written_through_a_hard_link_is_named(s: &Scratch) {
    layout(s, &[("src/build.rs", "fn main() {}\n"), ("lib/Makefile", "all:\n")]);
    // (Made before the launch too: a link left by an earlier run.)
    std::fs::create_dir_all(s.proj.join("target")).unwrap();
    std::fs::hard_link(s.proj.join("lib/Makefile"), s.proj.join("target/m")).unwrap();
    chown(s, &s.proj);
    let (_, stderr) = attack(
        s,
        &s.proj,
        "ln src/build.rs target/b && echo '// evil' >> target/b; echo 'evil:' >> target/m",
    );
    let body = std::fs::read_to_string(s.proj.join("src/build.rs")).unwrap();
    assert!(body.contains("evil"), "the write went through the link: {body}");
    let line: Vec<&str> =
        stderr.lines().filter(|l| l.contains("files host tools execute or obey")).collect();
    assert_eq!(line.len(), 1, "one line: {stderr}");
    for named in ["src/build.rs", "lib/Makefile"] {
        assert!(line[0].contains(named), "{named} not named: {}", line[0]);
    }
    let (_, quiet) = attack(s, &s.proj, "echo x > target/plain");
    assert!(!quiet.contains("files host tools execute or obey"), "control: {quiet}");
}

/// `build` running `script` in `proj/` with the launch's step marks on stderr; whether the
/// daemon's index answered its scan, and stdout.
fn marked(s: &Scratch, script: &str) -> (bool, String) {
    let script = format!("{script}; echo sandboxed-command-ran");
    let mut c = s.command("build", &[], &["sh", "-c", &script]);
    let out = c.env("SANDGATE_DEBUG", "launch").output().unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(stdout.contains("sandboxed-command-ran"), "the launch failed: {stdout}{stderr}");
    (stderr.contains("answered by the daemon's index"), stdout)
}

/// Launches until the daemon's index answers (the first launch in a tree starts building it):
/// each launch is the event waited for, no sleep. Bounded by time, not by a number of
/// launches: the index is built beside the launches, and on a machine busy with other tests
/// (the whole suite on two cores) a hundred launches came and went before it was ready.
fn until_indexed(s: &Scratch) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while std::time::Instant::now() < deadline {
        if marked(s, "true").0 {
            return;
        }
    }
    panic!("the daemon's index never answered in 120 s");
}

/// Stops the daemon of this tree and waits until it is gone (it holds a lock on its pid file
/// for its whole life).
fn stop_daemon(s: &Scratch) {
    let pid_file = s.root.join("run/sandgate/daemon.pid");
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    std::process::Command::new("kill").arg(pid.trim()).status().unwrap();
    let waited = std::process::Command::new("flock").arg(&pid_file).arg("true").status().unwrap();
    assert!(waited.success());
}

/// The daemon's index between launches (issue 31): a tool file made deep down between two
/// launches, one made while no daemon ran, and one made after the index's event queue
/// overflowed are each read-only in the next launch. Controls: a plain file beside each is
/// written by the same script (the sandbox could write there), the index did answer the
/// launches it should (and not the one after the overflow), and on the host the script writes
/// the tool file.
fn the_daemons_index_protects_what_changed_between_launches(s: &Scratch) {
    large_layout(s, &[("a/b/c/d/e/f/lib.rs", "\n"), ("x/y/z/main.rs", "\n")]);
    let write = |rel: &str| {
        let dir = Path::new(rel).parent().unwrap().display().to_string();
        format!(
            "echo planted >> {rel} 2>/dev/null && echo WROTE {rel}; \
             echo x >> {dir}/plain.txt 2>/dev/null && echo WROTE-PLAIN"
        )
    };
    until_indexed(s);
    // Made between two launches.
    layout(s, &[("a/b/c/d/e/f/.envrc", "export A=1\n")]);
    let (indexed, out) = marked(s, &write("a/b/c/d/e/f/.envrc"));
    assert!(indexed, "control: the index answered");
    assert!(!out.contains("WROTE a/"), "written through the index: {out}");
    assert!(out.contains("WROTE-PLAIN"), "control: a plain file there is written: {out}");
    // Made while no daemon ran.
    stop_daemon(s);
    layout(s, &[("x/y/z/.npmrc", "registry=x\n")]);
    let (indexed, out) = marked(s, &write("x/y/z/.npmrc"));
    assert!(!indexed, "a new daemon has no index yet");
    assert!(!out.contains("WROTE x/"), "written after the daemon's restart: {out}");
    until_indexed(s);
    let (indexed, out) = marked(s, &write("x/y/z/.npmrc"));
    assert!(indexed && !out.contains("WROTE x/"), "written through the new index: {out}");
    // Made after the index's queue overflowed: more events than the queue holds.
    let max: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let flood = s.proj.join("x/y/z");
    for i in 0..max / 2 + 10 {
        let f = flood.join(format!("n{i}"));
        std::fs::write(&f, "").unwrap();
        std::fs::remove_file(&f).unwrap();
    }
    layout(s, &[("x/y/mise.toml", "[tools]\n")]);
    let (indexed, out) = marked(s, &write("x/y/mise.toml"));
    assert!(!indexed, "events were lost: the launch scans itself");
    assert!(!out.contains("WROTE x/"), "written after an overflow: {out}");
    assert!(out.contains("WROTE-PLAIN"), "control: {out}");
    // Control: on the host, the same script writes the tool files.
    let host = on_the_host(s, &s.proj, &write("a/b/c/d/e/f/.envrc"));
    assert!(host.contains("WROTE a/"), "control on the host: {host}");
}

/// The warden's watches made ahead by the daemon (issue 31): a repeat launch whose watches came
/// with the index's answer takes away, while the command still runs, a tool file the command
/// makes deep down (the command sees it go), in a directory the daemon watched, in one it made
/// and through a rename; each is gone at the end and the user is told. A directory moved between
/// two launches is not handed over (the launch watches for itself, and still takes the file away).
/// Controls: the launch says the watches were made ahead; the same script on the host sees none
/// go (the wait would have caught a warden that does not watch).
fn watches_made_ahead_take_away_what_the_command_makes(s: &Scratch) {
    large_layout(s, &[("a/b/c/d/e/f/lib.rs", "\n"), ("x/y/z/main.rs", "\n")]);
    // Makes the file, then waits (a deadline, not a delay: it polls) until it is gone.
    let plant = |rel: &str| {
        let dir = Path::new(rel).parent().unwrap().display().to_string();
        format!(
            "mkdir -p {dir} && echo 'export X=1' > {rel}.tmp && mv {rel}.tmp {rel}; \
             i=0; while [ -e {rel} ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; \
             [ -e {rel} ] || echo GONE-LIVE {rel}"
        )
    };
    let cases = ["a/b/c/d/e/f/.envrc", "x/y/z/new/.npmrc", "pad/d7/mise.toml"];
    let script: Vec<String> = cases.iter().map(|c| plant(c)).collect();
    let script = script.join("; ");
    let handed = |s: &Scratch| {
        let mut c = s.command("build", &[], &["sh", "-c", &format!("{script}; echo ran")]);
        let out = c.env("SANDGATE_DEBUG", "launch").output().unwrap();
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(stdout.contains("ran"), "the launch failed: {stdout}{stderr}");
        (stderr.contains("watches made ahead by the daemon taken"), stdout, stderr)
    };
    until_indexed(s);
    // (The watches are made after an answer, off its path: launches until one takes them.)
    let mut taken = None;
    for _ in 0..50 {
        let (ahead, stdout, stderr) = handed(s);
        if ahead {
            taken = Some((stdout, stderr));
            break;
        }
        for c in cases {
            let _ = std::fs::remove_file(s.proj.join(c));
        }
    }
    let (stdout, stderr) = taken.expect("control: a launch took the watches made ahead");
    for c in cases {
        assert!(stdout.contains(&format!("GONE-LIVE {c}")), "{c} stayed while it ran: {stdout}");
        assert!(std::fs::symlink_metadata(s.proj.join(c)).is_err(), "{c} is in place");
        assert!(stderr.contains(&format!("/{c} (")), "the user is told about {c}: {stderr}");
    }
    // A directory moved away and another put in its place between launches: not handed.
    until_indexed(s);
    let (ahead, ..) = handed(s);
    std::fs::rename(s.proj.join("x/y"), s.proj.join("x-old")).unwrap();
    std::fs::create_dir_all(s.proj.join("x/y/z")).unwrap();
    chown(s, &s.proj);
    let (after, stdout, _) = handed(s);
    assert!(!after, "handed after a directory moved (the one before: {ahead})");
    assert!(stdout.contains("GONE-LIVE a/b/c/d/e/f/.envrc"), "{stdout}");
    // Control: on the host nothing takes them away.
    let host = on_the_host(s, &s.proj, &script);
    assert!(!host.contains("GONE-LIVE"), "control on the host: {host}");
}

/// The warden's watches given back to the daemon (issue 31): a launch on watches made ahead
/// gives them back when its command ended (the command made only files, in directories
/// watched), and the next launch takes the same instance (none placed in between) and takes a
/// tool file the command makes deep down away while it runs, as the first did. Then a launch
/// whose command removes a watched directory and makes one at its path does not give them back
/// (the next launch still takes the tool file away). Controls: the launches say which watches
/// they took and gave back; on the host nothing takes the files away.
fn watches_given_back_take_away_what_the_next_command_makes(s: &Scratch) {
    large_layout(s, &[("a/b/c/d/e/f/lib.rs", "\n"), ("x/y/z/main.rs", "\n")]);
    let plant = |rel: &str| {
        format!(
            "echo 'export X=1' > {rel}.tmp && mv {rel}.tmp {rel}; \
             i=0; while [ -e {rel} ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; \
             [ -e {rel} ] || echo GONE-LIVE {rel}"
        )
    };
    let cases = ["a/b/c/d/e/f/.envrc", "x/y/z/.npmrc", "pad/d7/mise.toml"];
    let script: Vec<String> = cases.iter().map(|c| plant(c)).collect();
    let script = script.join("; ");
    let launch = |s: &Scratch, script: &str| {
        let mut c = s.command("build", &[], &["sh", "-c", &format!("{script}; echo ran")]);
        let out = c.env("SANDGATE_DEBUG", "launch").output().unwrap();
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(stdout.contains("ran"), "the launch failed: {stdout}{stderr}");
        let taken = stderr.contains("watches made ahead by the daemon taken");
        let given = stderr.contains("watches given back to the daemon (kept)");
        (taken, given, stdout)
    };
    until_indexed(s);
    // (Made after an answer, off its path: launches until one takes them and gives them back.)
    let given = (0..50).any(|_| matches!(launch(s, &script), (true, true, _)));
    assert!(given, "control: a launch took the watches made ahead and gave them back");
    for round in 0..2 {
        let (taken, given, stdout) = launch(s, &script);
        assert!(taken && given, "round {round}: the watches given back were not handed again");
        for c in cases {
            assert!(stdout.contains(&format!("GONE-LIVE {c}")), "{c} stayed: {stdout}");
            assert!(std::fs::symlink_metadata(s.proj.join(c)).is_err(), "{c} is in place");
        }
    }
    // A watched directory removed and made again by the command: not given back.
    let (taken, given, _) = launch(s, &format!("rm -r x/y && mkdir -p x/y/z; {script}"));
    assert!(taken && !given, "given back after a watched directory was removed");
    let (_, _, stdout) = launch(s, &script);
    assert!(stdout.contains("GONE-LIVE x/y/z/.npmrc"), "{stdout}");
    // Control: on the host nothing takes them away.
    let host = on_the_host(s, &s.proj, &script);
    assert!(!host.contains("GONE-LIVE"), "control on the host: {host}");
}

/// Watches given back to the daemon (issue 31, red team of the lent instance): a launch's
/// command removes a watched directory that a process of another launch, still running, has as
/// its working directory (a `run` launch: no warden of its own on the tree, which would take the
/// file away itself), and makes one at its path. The removed one's watch ends only when that
/// process lets go, and its parent (watched for new entries only) says nothing of the removal:
/// the warden, which read the new directory's event, must not give the instance back, or the
/// next launch relies on a watch of the removed directory and a tool file it makes in the new
/// one stays. Controls: the launches took watches made ahead (the removal's among them); the
/// holder held the directory through them; on the host the file stays.
fn a_directory_made_again_under_another_launch_spoils_the_watches_given_back(s: &Scratch) {
    large_layout(s, &[("a/b/c/lib.rs", "\n")]);
    let stop = s.proj.join("pad/d0/stop");
    let launch = |script: &str| {
        let mut c = s.command("build", &[], &["sh", "-c", &format!("{script}; echo ran")]);
        let out = c.env("SANDGATE_DEBUG", "launch").output().unwrap();
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(stdout.contains("ran"), "the launch failed: {stdout}{stderr}");
        (stderr.contains("watches made ahead by the daemon taken"), stdout)
    };
    until_indexed(s);
    // (The removing launch must take the instance; one given back is kept, so the launch after
    // one that took it takes it too: a few tries at most, a fresh directory held each.)
    let mut attacked = None;
    for attempt in 0..5 {
        let leaf = format!("a/b/c/leaf{attempt}");
        std::fs::create_dir_all(s.proj.join(&leaf)).unwrap();
        chown(s, &s.proj);
        let _ = std::fs::remove_file(&stop);
        // The holder: a read-only launch, its working directory the directory, until told to
        // stop (a deadline, not a delay: it polls).
        let hold = format!(
            "cd {leaf} && echo HOLDING && i=0; while [ ! -e {stop} ] && [ $i -lt 12000 ]; do \
             sleep 0.01; i=$((i+1)); done; echo HELD-TO-THE-END",
            stop = p(&stop)
        );
        let mut holder = s.command("run", &[], &["sh", "-c", &hold]);
        let mut holder = holder.stdout(std::process::Stdio::piped()).spawn().unwrap();
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
            holder.stdout.take().expect("the holder's output"),
        ));
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        assert_eq!(first, "HOLDING", "the holder did not start");
        let took = (0..50).any(|_| launch("true").0);
        assert!(took, "control: a launch took the watches made ahead");
        let (took, out) = launch(&format!("rmdir {leaf} && mkdir {leaf} && echo REMADE"));
        assert!(out.contains("REMADE"), "the directory was not made again: {out}");
        if took {
            attacked = Some((leaf, holder, lines));
            break;
        }
        std::fs::write(&stop, "").unwrap();
        let _ = holder.wait();
    }
    let (leaf, mut holder, lines) = attacked.expect("control: the removal's launch took watches");
    // The next launches: until one takes watches made ahead (at once, when they were given
    // back), each planting a tool file in the directory made again and waiting for it to go.
    let rel = format!("{leaf}/.envrc");
    let plant = format!(
        "echo 'export X=1' > {rel}; i=0; while [ -e {rel} ] && [ $i -lt 500 ]; do sleep 0.01; \
         i=$((i+1)); done; [ -e {rel} ] && echo STAYED || echo GONE-LIVE"
    );
    let mut taken = None;
    for _ in 0..50 {
        let (took, out) = launch(&plant);
        if took {
            taken = Some(out);
            break;
        }
        assert!(out.contains("GONE-LIVE"), "a launch watching for itself left it: {out}");
    }
    std::fs::write(&stop, "").unwrap();
    let held: Vec<String> = lines.map_while(Result::ok).collect();
    let _ = holder.wait();
    assert!(held.iter().any(|l| l == "HELD-TO-THE-END"), "control: the holder held: {held:?}");
    let out = taken.expect("control: a later launch took watches made ahead");
    assert!(out.contains("GONE-LIVE"), "the tool file stayed while it ran: {out}");
    assert!(std::fs::symlink_metadata(s.proj.join(&rel)).is_err(), "{rel} is in place");
    // Control: on the host nothing takes it away.
    let host = on_the_host(s, &s.proj, &plant);
    assert!(host.contains("STAYED"), "control on the host: {host}");
}

/// A symbolic link to a directory the scan reads is no way in (issue 31, red team, second
/// pass): launches answered by the daemon's index run like the first one, which scanned
/// itself. The index's answer, made without copying the directories read, judged links
/// against the tops alone and refused every indexed launch of such a tree. Controls: the
/// launches were answered by the index; a link into build output is still refused.
fn a_link_to_a_directory_read_does_not_refuse_indexed_launches(s: &Scratch) {
    layout(s, &[("a/b/c/lib.rs", "\n"), ("target/debug/x", "\n")]);
    for i in 0..150 {
        std::fs::create_dir_all(s.proj.join(format!("pad/d{i}"))).unwrap();
    }
    std::os::unix::fs::symlink("a/b", s.proj.join("docs")).unwrap();
    chown(s, &s.proj);
    until_indexed(s);
    let (indexed, out) = marked(s, "echo again");
    assert!(indexed && out.contains("again"), "control: answered by the index: {out}");
    // Control: a link into build output is refused, indexed or not.
    std::os::unix::fs::symlink("target/debug", s.proj.join("out")).unwrap();
    let out = s.command("build", &[], &["sh", "-c", "echo ran"]).output().unwrap();
    assert!(!text(&out.stdout).contains("ran"), "a link into build output: {}", text(&out.stderr));
}

/// Lists every descriptor of every process the probe can see under `procs` (a glob of
/// `/proc/PID` directories): one `FD` line each, with where it leads.
fn fd_probe(procs: &str) -> String {
    format!(
        "for f in {procs}/fd/*; do l=$(readlink \"$f\" 2>/dev/null) && echo \"FD $f $l\"; done; \
         echo probe-done"
    )
}

/// The warden's watches made ahead by the daemon (issue 31) reach no process of the sandbox:
/// the launch that takes them leaves no inotify descriptor in the command or in any process
/// it can see (init keeps the launcher's, unreadable). Controls: the launch did take watches
/// made ahead; inside, the same probe in a shell holding an inotify instance finds it.
fn watches_made_ahead_reach_nothing_inside(s: &Scratch) {
    large_layout(s, &[("a/b/c/lib.rs", "\n")]);
    until_indexed(s);
    let probe = format!("{}; echo sandboxed-command-ran", fd_probe("/proc/[0-9]*"));
    // (Made ahead after an answer, on a thread of the daemon: each launch is the event waited
    // for, no sleep.)
    let mut ahead = false;
    for _ in 0..50 {
        let mut c = s.command("build", &[], &["sh", "-c", &probe]);
        let out = c.env("SANDGATE_DEBUG", "launch").output().unwrap();
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(stdout.contains("sandboxed-command-ran"), "the launch failed: {stdout}{stderr}");
        assert!(stdout.contains("probe-done"), "{stdout}");
        assert!(!stdout.contains("inotify"), "an inotify instance inside: {stdout}");
        if stderr.contains("watches made ahead by the daemon taken") {
            ahead = true;
            break;
        }
    }
    assert!(ahead, "control: a launch took watches made ahead");
    // (`inotify_init`: not close-on-exec, the shell keeps it.)
    let own = format!(
        "import ctypes, os; ctypes.CDLL(None).inotify_init(); \
         os.execvp('sh', ['sh', '-c', {:?}])",
        fd_probe("/proc/$$")
    );
    let out = s.command("build", &[], &["python3", "-c", &own]).output().unwrap();
    let seen = text(&out.stdout);
    assert!(
        seen.contains("anon_inode:inotify"),
        "control: the probe finds one made inside: {seen}{}",
        text(&out.stderr)
    );
}

cases!(
    the_daemons_index_protects_what_changed_between_launches,
    watches_made_ahead_take_away_what_the_command_makes,
    watches_given_back_take_away_what_the_next_command_makes,
    watches_made_ahead_reach_nothing_inside,
    a_directory_made_again_under_another_launch_spoils_the_watches_given_back,
    a_link_to_a_directory_read_does_not_refuse_indexed_launches,
    nested_tool_files_are_read_only_and_new_ones_go,
    a_nested_rust_toolchain_does_not_run_on_the_hosts_cargo,
    build_output_stays_and_changed_build_code_is_named,
    a_bare_repository_inside_runs_nothing_planted,
    repositories_made_during_the_run_run_nothing,
    a_tree_past_the_scan_bound_is_named,
    a_flood_of_directories_leaves_nothing_writable_and_unprotected,
    a_link_into_build_output_reaches_nothing_planted,
    a_link_to_an_artifact_made_a_directory_goes,
    build_code_written_through_a_hard_link_is_named,
);
