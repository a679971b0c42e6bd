//! Issue 31 round three and issue 35, red team: the writable-tree walls (the scan's memory,
//! links into build output, hard links to review files, what the scan did not read) and the
//! managed layer, attacked by a command in `build`. As root and as an unprivileged user, with the
//! work tree under `/var/tmp` and under `/tmp`.
//!
//! Each attack has its control: the same change made the way the wall was built for is caught
//! (so a test passing because its attack broke would show), and each finding was checked by
//! hand to fail without its fix.

use std::path::Path;

use crate::support::git::{cases, p};
use crate::support::sandbox::{Scratch, text};

/// Runs `script` in `build` in `dir`; the sandbox must have run it. Returns stdout and stderr.
fn attack(s: &Scratch, dir: &Path, script: &str) -> (String, String) {
    let script = format!("{}; echo sandboxed-command-ran", script.trim_end().trim_end_matches(';'));
    let out = s.command("build", &[], &["sh", "-c", &script]).current_dir(dir).output().unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(stdout.contains("sandboxed-command-ran"), "the launch failed: {stdout}{stderr}");
    (stdout, stderr)
}

/// Writes `files` (path relative to `proj/`, contents) as the sandbox's user.
fn layout(s: &Scratch, files: &[(&str, &str)]) {
    for (rel, body) in files {
        let path = s.proj.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    }
    let _ = std::process::Command::new("chown")
        .args(["-R", &format!("{}:{}", s.who.uid, s.who.gid), p(&s.proj)])
        .status();
}

/// The end-of-launch line naming changed build code, if any.
fn review_line(stderr: &str) -> Option<&str> {
    stderr.lines().find(|l| l.contains("files host tools execute or obey"))
}

/// Finding: build code changed without a write that is closed (`truncate(2)` by path, a hole
/// punched with `fallocate`) raises only `IN_MODIFY`, which neither the review file's inode
/// watch nor its directory's watch asked for, so the line at the end did not name it — through
/// a hard link in build output or in place. A `Makefile` cut short (`rm -rf $(HOME)/x` becoming
/// `rm -rf $(HOME)`) is build code the user runs next. Control: the change is real (the bytes
/// are gone), and an ordinary write through the same link is named.
fn build_code_cut_short_is_named(s: &Scratch) {
    let makefile = "clean:\n\trm -rf $(HOME)/cache/x\n";
    layout(s, &[("src/build.rs", "fn main() {}\n// tail\n"), ("lib/Makefile", makefile)]);
    // (A link left by an earlier run: making one during this run is a change of its own.)
    std::fs::create_dir_all(s.proj.join("target")).unwrap();
    std::fs::hard_link(s.proj.join("src/build.rs"), s.proj.join("target/b")).unwrap();
    layout(s, &[]);
    let (_, stderr) = attack(
        s,
        &s.proj,
        "python3 -c 'import os; os.truncate(\"target/b\", 13); \
         os.truncate(\"lib/Makefile\", len(\"clean:\\n\\trm -rf $(HOME)\"))'",
    );
    let body = std::fs::read_to_string(s.proj.join("src/build.rs")).unwrap();
    assert_eq!(body, "fn main() {}\n", "the truncation went through the link");
    let cut = std::fs::read_to_string(s.proj.join("lib/Makefile")).unwrap();
    assert_eq!(cut, "clean:\n\trm -rf $(HOME)", "the truncation happened");
    let line = review_line(&stderr).unwrap_or_else(|| panic!("nothing named: {stderr}"));
    for named in ["src/build.rs", "lib/Makefile"] {
        assert!(line.contains(named), "{named} not named: {line}");
    }
    // Control: a write through the link (closed after writing) is named too.
    let (_, stderr) = attack(s, &s.proj, "echo '// evil' >> target/b");
    let line = review_line(&stderr).unwrap_or_else(|| panic!("control: {stderr}"));
    assert!(line.contains("src/build.rs"), "control: {line}");
}

cases!(build_code_cut_short_is_named,);
