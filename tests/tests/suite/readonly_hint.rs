//! Issue 17, item 7: when a command fails on a read-only path, the launcher's exit lines name the
//! path and the fix — with stderr a pipe or a file (agents) and on a terminal — without changing
//! the command's own output, and not at all when the write succeeds, when the command succeeds,
//! or with `--quiet`.

use std::process::{Command, Stdio};

use crate::support::sandbox::{Scratch, Who, both, text};
use sandgate_tests::has_script;

/// A write the `run` tier refuses (`touch`) and one from Python, in the project directory.
const WRITES: &str = "touch ro.txt; python3 -c 'open(\"sub/py.txt\", \"w\")'";

fn hint_for(s: &Scratch, name: &str) -> String {
    format!("sandgate: {} is read-only in the run tier", s.proj.join(name).display())
}

fn prepare(s: &Scratch) {
    std::fs::create_dir_all(s.proj.join("sub")).unwrap();
    let _ = Command::new("chown")
        .args([&format!("{}:{}", s.who.uid, s.who.gid), s.proj.join("sub").to_str().unwrap()])
        .status();
}

fn failed_writes_name_the_path_and_the_fix_on_a_pipe(who: &Who) {
    let s = Scratch::new(who);
    prepare(&s);
    let out = s.run("run", &[], &["sh", "-c", WRITES]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // The command's own lines come first, unchanged.
    assert!(
        stderr.starts_with("touch: cannot touch 'ro.txt': Read-only file system\nTraceback"),
        "{stderr}"
    );
    assert!(stderr.contains("OSError: [Errno 30] Read-only file system: 'sub/py.txt'\n"));
    // Then one line per path, with the fix.
    let touch = hint_for(&s, "ro.txt");
    let python = hint_for(&s, "sub/py.txt");
    for want in [&touch, &python] {
        let line = stderr.lines().find(|l| l.starts_with(want.as_str()));
        let line = line.unwrap_or_else(|| panic!("{want:?} missing:\n{stderr}"));
        assert!(line.contains("sandgate build") && line.contains("--allow-write"), "{line}");
    }
    assert!(stderr.find(&touch) < stderr.find(&python), "in the order they failed: {stderr}");
    assert!(stderr.contains(&format!("--allow-write {}`", s.proj.join("sub").display())));
}

/// With stdout and stderr on one open file (`>log 2>&1`), the relay keeps the order of every
/// write exactly, and the bytes are the command's.
fn order_and_bytes_are_the_commands_with_one_file_for_both(who: &Who) {
    let s = Scratch::new(who);
    let log = s.root.join("log");
    let f = std::fs::File::create(&log).unwrap();
    let script = "for i in 1 2 3 4 5 6 7 8 9; do echo out$i; echo err$i >&2; done; \
                  printf 'no newline' >&2; echo; touch ro.txt";
    let status = s
        .command("run", &[], &["sh", "-c", script])
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1));
    let got = std::fs::read_to_string(&log).unwrap();
    let mut want = String::new();
    for i in 1..=9 {
        want.push_str(&format!("out{i}\nerr{i}\n"));
    }
    want.push_str("no newline\ntouch: cannot touch 'ro.txt': Read-only file system\n");
    assert!(got.starts_with(&want), "got:\n{got}");
    assert!(got[want.len()..].starts_with(&hint_for(&s, "ro.txt")), "got:\n{got}");
}

/// When the reader of the launcher's stderr goes away (`2>&1 | head -1`), the command learns it
/// as it would without the relay (SIGPIPE), also in the build tier, where the warden process
/// runs beside the launcher: nothing else may hold the relay's pipe open.
fn a_closed_stderr_reader_still_ends_the_command(who: &Who) {
    let s = Scratch::new(who);
    let inner = s.command("build", &["--net", "none"], &["sh", "-c", "yes >&2"]);
    let mut line = String::new();
    for part in std::iter::once(inner.get_program()).chain(inner.get_args()) {
        line.push_str(&format!(" '{}'", part.to_str().unwrap().replace('\'', r"'\''")));
    }
    // A bound, not a timing assertion: without the fix this never ends.
    let script = format!("timeout 120 {line} 2>&1 | head -1; echo \"${{PIPESTATUS[0]}}\"");
    let envs: Vec<_> =
        inner.get_envs().map(|(k, v)| (k.to_owned(), v.map(|v| v.to_owned()))).collect();
    let mut c = Command::new("bash");
    c.arg("-c").arg(&script).env_clear().current_dir(inner.get_current_dir().unwrap());
    for (k, v) in envs {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    let out = c.output().unwrap();
    let stdout = text(&out.stdout);
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("y"), "{stdout}");
    // sh's `yes` died of SIGPIPE (141); the launcher passes that on. 124 would be the timeout.
    assert_eq!(lines.next(), Some("141"), "{stdout}\n{}", text(&out.stderr));
}

/// Controls: no line when the write succeeds (build tier), when the command succeeds anyway,
/// when it fails for another reason, or with `--quiet` / `SANDGATE_QUIET`.
fn no_hint_when_nothing_failed_on_a_read_only_path_or_when_quiet(who: &Who) {
    let s = Scratch::new(who);
    prepare(&s);
    let cases: Vec<(&str, Vec<&str>, &str, Option<i32>)> = vec![
        (
            "build",
            vec!["--net", "none"],
            "touch ok.txt; python3 -c 'open(\"sub/p\", \"w\")'",
            Some(0),
        ),
        ("run", vec![], "touch ro.txt; true", Some(0)),
        ("run", vec![], "echo 'Read-only file system' >&2; exit 0", Some(0)),
        ("run", vec![], "exit 3", Some(3)),
        ("run", vec!["--quiet"], WRITES, Some(1)),
    ];
    for (tier, flags, script, code) in cases {
        let out = s.run(tier, &flags, &["sh", "-c", script]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), code, "{script}: {stderr}");
        assert!(!stderr.contains("is read-only in"), "{tier} {flags:?} {script}: {stderr}");
    }
    let out = s.command("run", &[], &["sh", "-c", WRITES]).env("SANDGATE_QUIET", "1").output();
    let stderr = text(&out.unwrap().stderr);
    assert!(stderr.contains("Read-only file system") && !stderr.contains("is read-only in"));
    // The build tier writes there, and says nothing.
    assert!(s.proj.join("ok.txt").exists() && s.proj.join("sub/p").exists());
}

/// `script` running `cmd` on a new pseudo-terminal; what the terminal showed.
fn on_terminal(cmd: &Command) -> String {
    let mut line = String::new();
    for part in std::iter::once(cmd.get_program()).chain(cmd.get_args()) {
        line.push_str(&format!(" '{}'", part.to_str().unwrap().replace('\'', r"'\''")));
    }
    let mut sc = Command::new("script");
    sc.args(["-qfec", &line, "/dev/null"]).env_clear();
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            sc.env(k, v);
        }
    }
    sc.current_dir(cmd.get_current_dir().unwrap());
    let out = sc.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).output();
    text(&out.unwrap().stdout).replace("\r\n", "\n")
}

fn failed_writes_name_the_path_and_the_fix_on_a_terminal(who: &Who) {
    if sandgate_tests::skip_unless(has_script(), "script (util-linux)") {
        return;
    }
    let s = Scratch::new(who);
    prepare(&s);
    let shown = on_terminal(&s.command("run", &[], &["sh", "-c", WRITES]));
    assert!(shown.contains("touch: cannot touch 'ro.txt': Read-only file system\n"), "{shown}");
    for want in [hint_for(&s, "ro.txt"), hint_for(&s, "sub/py.txt")] {
        assert!(shown.contains(&want), "{want:?} missing:\n{shown}");
    }
    let quiet = on_terminal(&s.command("run", &["--quiet"], &["sh", "-c", WRITES]));
    assert!(quiet.contains("Read-only file system"), "{quiet}");
    assert!(!quiet.contains("is read-only in"), "{quiet}");
    let fine = on_terminal(&s.command("run", &[], &["sh", "-c", "touch ro.txt; true"]));
    assert!(!fine.contains("is read-only in"), "{fine}");
}

/// Issue 32, part 3: pyenv tests its shims directory before writing and fails in its own words
/// (`pyenv: cannot rehash: … isn't writable`, the check of `libexec/pyenv-rehash`); the launcher
/// names the path and what to run instead, as for other read-only failures.
fn a_read_only_shims_directory_gets_the_rehash_hint(who: &Who) {
    let s = Scratch::new(who);
    let shims = s.home.join(".pyenv/shims");
    std::fs::create_dir_all(&shims).unwrap();
    let _ = Command::new("chown")
        .args([
            "-R",
            &format!("{}:{}", s.who.uid, s.who.gid),
            s.home.join(".pyenv").to_str().unwrap(),
        ])
        .status();
    let rehash = "SHIM_PATH=\"$HOME/.pyenv/shims\"; \
                  if [ ! -w \"$SHIM_PATH\" ]; then \
                  echo \"pyenv: cannot rehash: $SHIM_PATH isn't writable\" >&2; exit 1; fi; \
                  ( t=\"$(TMPDIR=\"$SHIM_PATH\" mktemp 2>/dev/null)\" && rm \"$t\" ) || \
                  { echo \"pyenv: cannot rehash: $SHIM_PATH isn't writable\" >&2; exit 1; }";
    for tier in ["run", "build"] {
        let out = s.run(tier, &["--net", "none"], &["sh", "-c", rehash]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{tier}: {stderr}");
        let said = format!("pyenv: cannot rehash: {} isn't writable\n", shims.display());
        assert!(stderr.starts_with(&said), "{tier}: {stderr}");
        let hint = format!("sandgate: {} is read-only in every tier", shims.display());
        let line = stderr.lines().find(|l| l.starts_with(&hint));
        let line = line.unwrap_or_else(|| panic!("{tier}: {hint:?} missing:\n{stderr}"));
        assert!(line.contains("run `pyenv rehash` outside the sandbox"), "{line}");
    }
    assert_eq!(std::fs::read_dir(&shims).unwrap().count(), 0, "nothing was added");
}

both!(
    a_read_only_shims_directory_gets_the_rehash_hint,
    a_closed_stderr_reader_still_ends_the_command,
    failed_writes_name_the_path_and_the_fix_on_a_pipe,
    order_and_bytes_are_the_commands_with_one_file_for_both,
    no_hint_when_nothing_failed_on_a_read_only_path_or_when_quiet,
    failed_writes_name_the_path_and_the_fix_on_a_terminal,
);
