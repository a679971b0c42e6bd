//! The top of each writable path in `build`: every dot-entry (and the few tool start-up files
//! without a dot) is read-only unless it is on the allowlist of build directories, and a new one
//! made by the command is taken away into the quarantine — while the command runs and at the
//! latest when the launcher returns — so nothing planted there is in place for a host-side tool
//! started afterwards. Builds that make ordinary top-level entries are unaffected. As root and as
//! an unprivileged user.

use std::path::Path;

use crate::support::sandbox::{self, Scratch, WRITE_REFUSED, Who, both, refused, text};

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The names a hostile command plants, and the ordinary output a build makes.
const HOSTILE: &str = r#"
mkdir -p tc/bin && printf '#!/bin/sh\necho PLANTED\n' > tc/bin/cargo && chmod +x tc/bin/cargo
printf '[toolchain]\npath = "%s/tc"\n' "$PWD" > rust-toolchain.toml
printf 'nightly\n' > rust-toolchain
mkdir -p .cargo && printf '[build]\nrustc-wrapper = "./tc/bin/cargo"\n' > .cargo/config.toml
mkdir -p .cursor && printf '{"mcpServers":{"x":{"command":"./tc/bin/cargo"}}}' > .cursor/mcp.json
printf 'repos: []\n' > .pre-commit-config.yaml
mkdir -p .zzz-RANDOM && printf 'x\n' > .zzz-RANDOM/x
printf 'export X=1\n' > .envrc
ln -s tc .mise
mkdir -p target/debug && printf 'bin\n' > target/debug/app
mkdir -p node_modules/left-pad && printf 'module.exports = 1\n' > node_modules/left-pad/index.js
mkdir -p .venv/bin && printf 'py\n' > .venv/bin/python
printf 'hello\n' > notes.txt && sed -i 's/hello/bye/' notes.txt
echo done
"#;

/// Planted names (relative to `proj/`) that must not be in place after the run.
fn planted(random: &str) -> Vec<String> {
    let mut v: Vec<String> = [
        "rust-toolchain.toml",
        "rust-toolchain",
        ".cargo",
        ".cursor",
        ".pre-commit-config.yaml",
        ".envrc",
        ".mise",
    ]
    .map(String::from)
    .to_vec();
    v.push(random.to_owned());
    v
}

fn random_name() -> String {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!(".zzz-{}-{nanos:x}", std::process::id())
}

fn hostile_files_are_gone_and_builds_still_work(who: &Who) {
    let s = Scratch::new(who);
    let random = random_name();
    let script = HOSTILE.replace(".zzz-RANDOM", &random);
    let out = s.run("build", &[], &["sh", "-c", &script]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success() && stdout.contains("done"), "{stdout}\n{stderr}");
    for name in planted(&random) {
        assert!(
            std::fs::symlink_metadata(s.proj.join(&name)).is_err(),
            "{name} is in place after the sandbox ended\nstderr {stderr}"
        );
        assert!(stderr.contains(&format!("/{name} ")), "the user is told about {name}: {stderr}");
    }
    // What a build makes is there.
    let read = |rel: &str| std::fs::read_to_string(s.proj.join(rel)).unwrap_or_default();
    assert_eq!(read("target/debug/app"), "bin\n");
    assert_eq!(read("node_modules/left-pad/index.js"), "module.exports = 1\n");
    assert_eq!(read(".venv/bin/python"), "py\n");
    assert_eq!(read("notes.txt"), "bye\n", "sed -i at the top works");
    assert!(s.proj.join("tc/bin/cargo").exists(), "ordinary entries stay");
    // What the review found: the host's next `cargo --version` in the directory (rustup reads
    // rust-toolchain.toml) ran the planted binary.
    let host_cargo = std::process::Command::new("cargo")
        .arg("--version")
        .env_remove("RUSTUP_TOOLCHAIN")
        .current_dir(&s.proj)
        .output();
    match host_cargo {
        Ok(o) => assert!(!text(&o.stdout).contains("PLANTED"), "the host's cargo ran it"),
        Err(e) => eprintln!("SKIPPED host-side cargo --version: {e}"),
    }
    // The planted files are kept for inspection, out of every sandbox's sight.
    let quarantine = s.home.join(".local/share/sandgate/quarantine");
    let held: Vec<String> = walk_names(&quarantine);
    assert!(held.iter().any(|n| n.ends_with("-.cargo")), "quarantine holds .cargo: {held:?}");
    assert!(held.iter().any(|n| n.ends_with(&random)), "{held:?}");
    // Nothing placed at the top for the run either (issue 17.11): no leftovers at all.
    let mut left: Vec<String> = std::fs::read_dir(&s.proj)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [".git", ".venv", "file.txt", "node_modules", "notes.txt", "target", "tc"],
        "only what the build made"
    );
}

fn walk_names(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        out.push(e.file_name().to_string_lossy().into_owned());
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk_names(&e.path()));
        }
    }
    out
}

/// Dot-entries and autorun files present at launch are read-only (contents, and the entry
/// itself: it can be neither removed nor renamed); allowlisted ones stay writable.
fn existing_entries_are_read_only_unless_allowlisted(who: &Who) {
    let s = Scratch::new(who);
    for d in [".cargo", ".venv", ".github/workflows", ".pytest_cache"] {
        std::fs::create_dir_all(s.proj.join(d)).unwrap();
    }
    for (f, t) in [
        (".envrc", "export A=1\n"),
        (".cargo/config.toml", "[build]\n"),
        ("rust-toolchain.toml", "[toolchain]\nchannel = \"stable\"\n"),
        (".github/workflows/ci.yml", "on: push\n"),
        (".gitignore", "/target\n"),
    ] {
        std::fs::write(s.proj.join(f), t).unwrap();
    }
    let _ = std::process::Command::new("chown")
        .args(["-R", &format!("{}:{}", who.uid, who.gid)])
        .arg(&s.proj)
        .status();
    for target in [".envrc", ".cargo/config.toml", ".cargo/new.toml", "rust-toolchain.toml"] {
        let answer = s.probe("build", &[], &["write", p(&s.proj.join(target))]);
        refused(&answer, WRITE_REFUSED, target);
    }
    let ci = s.probe("build", &[], &["write", p(&s.proj.join(".github/workflows/ci.yml"))]);
    refused(&ci, WRITE_REFUSED, ".github/workflows/ci.yml");
    for (from, to) in [(".cargo", "cargo-away"), (".envrc", "envrc-away")] {
        let answer = s.probe("build", &[], &["rename", p(&s.proj.join(from)), p(&s.proj.join(to))]);
        refused(&answer, &["EBUSY", "EACCES", "EPERM", "EROFS"], &format!("rename {from}"));
    }
    for ok in [".venv/x", ".pytest_cache/v", ".gitignore"] {
        assert_eq!(s.probe("build", &[], &["write", p(&s.proj.join(ok))]), "ok", "{ok}");
    }
    assert_eq!(std::fs::read_to_string(s.proj.join(".envrc")).unwrap(), "export A=1\n");
    assert_eq!(std::fs::read_to_string(s.proj.join(".cargo/config.toml")).unwrap(), "[build]\n");
    assert!(!s.proj.join(".cargo/new.toml").exists());
}

/// `[filesystem] writable_dotfiles` adds names to the allowlist and (`!name`) takes built-in
/// ones away.
fn the_allowlist_is_configurable(who: &Who) {
    let s = Scratch::new(who);
    std::fs::write(
        s.home.join(".config/sandgate/config.toml"),
        "[filesystem]\nwritable_dotfiles = [\".mytool\", \"!.venv\"]\n",
    )
    .unwrap();
    // `.venv` may be gone before the write into it: the script goes on regardless.
    let (out, err) = s.sh(
        "build",
        &[],
        "mkdir .mytool .venv .tox; echo a > .mytool/x; echo b > .venv/x; echo c > .tox/x; \
         echo done",
    );
    assert!(out.contains("done"), "{out} {err}");
    assert!(s.proj.join(".mytool/x").exists(), "added to the allowlist: {err}");
    assert!(s.proj.join(".tox/x").exists(), "built-in entries stay: {err}");
    assert!(!s.proj.join(".venv").exists(), "taken from the allowlist: {err}");
}

/// A planted entry is taken away while the command still runs (the window is short, not the
/// whole run), and no placeholder appears in the directory meanwhile (issue 17.11: they showed
/// up as untracked files in `git status` during every session).
fn planted_entries_go_during_the_run_and_no_placeholders_appear(who: &Who) {
    use std::io::{BufRead as _, Write as _};
    let s = Scratch::new(who);
    let script = "echo ready; read x; mkdir .claude; echo '{}' > .claude/settings.json; \
                  i=0; while [ -e .claude ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; \
                  [ -e .claude ] && echo still-there || echo gone";
    let mut child = s
        .command("build", &[], &["sh", "-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    for name in [".envrc", ".vscode", ".mcp.json", ".claude", ".idea", ".gitmodules"] {
        assert!(!s.proj.join(name).exists(), "placeholder {name} in the directory during the run");
    }
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    line.clear();
    stdout.read_line(&mut line).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(line.trim(), "gone", "taken away during the run; {}", text(&out.stderr));
    assert!(!s.proj.join(".claude").exists());
}

/// A writable path other than the working directory (`--allow-write`) gets the same rule.
fn every_writable_path_is_guarded(who: &Who) {
    let s = Scratch::new(who);
    let extra = s.root.join("extra");
    std::fs::create_dir(&extra).unwrap();
    let _ = std::process::Command::new("chown")
        .arg(format!("{}:{}", who.uid, who.gid))
        .arg(&extra)
        .status();
    let script = format!("mkdir {0}/.cargo {0}/build && echo done", p(&extra));
    let (out, err) = s.sh("build", &["--allow-write", p(&extra)], &script);
    assert!(out.contains("done"), "{err}");
    assert!(!extra.join(".cargo").exists(), "{err}");
    assert!(extra.join("build").exists());
}

/// Killing the launcher does not leave a planted entry in place: the warden outlives it and
/// sweeps once the sandbox (which dies with its launcher) is gone. The command also tries to hide
/// the directory's entries from the warden with `chmod 000`.
fn a_killed_launcher_leaves_nothing_planted(who: &Who) {
    use std::io::BufRead as _;
    let s = Scratch::new(who);
    let marker = format!("sleep 1000.{}", sandbox::unique(who));
    let script = format!(
        "echo ready; while :; do mkdir -p .cargo 2>/dev/null; echo x > .cargo/config.toml \
         2>/dev/null; chmod 000 . 2>/dev/null; chmod 700 . 2>/dev/null; {marker} & wait $!; done"
    );
    let mut child = s
        .command("build", &[], &["sh", "-c", &script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    child.kill().unwrap(); // SIGKILL: the launcher cannot clean up itself
    child.wait().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let left = std::process::Command::new("pgrep").args(["-f", &marker]).output().unwrap();
        if left.stdout.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the sandbox outlived its launcher");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The warden's last sweep follows the end of the sandbox's init.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while s.proj.join(".cargo").exists() {
        if std::time::Instant::now() >= deadline {
            // What is still running (a warden stuck or gone, a sandbox that survived) says which
            // wall failed; the quarantine says whether the warden swept at all.
            let ps = std::process::Command::new("ps").args(["-eo", "pid,ppid,stat,args"]).output();
            let ps =
                ps.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
            let ours: Vec<&str> =
                ps.lines().filter(|l| l.contains("sandgate") || l.contains(&marker)).collect();
            panic!(".cargo still in place after the kill; processes:\n{}", ours.join("\n"));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&s.proj).unwrap().permissions().mode();
    assert_eq!(mode & 0o700, 0o700, "the directory is open again");
}

/// The same under `/tmp` (the sandbox's private `/tmp` puts the working directory back; the
/// warden works on the host's path).
fn a_working_directory_under_tmp_is_guarded_too(who: &Who) {
    let s = Scratch::new(who);
    let dir = tempfile::Builder::new().prefix("sandgate-top").tempdir_in("/tmp").unwrap();
    let _ = std::process::Command::new("chown")
        .arg(format!("{}:{}", who.uid, who.gid))
        .arg(dir.path())
        .status();
    let out = s
        .command(
            "build",
            &[],
            &["sh", "-c", "mkdir .cargo target; echo x > rust-toolchain; echo done"],
        )
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(text(&out.stdout).contains("done"), "{}", text(&out.stderr));
    assert!(!dir.path().join(".cargo").exists(), "{}", text(&out.stderr));
    assert!(!dir.path().join("rust-toolchain").exists());
    assert!(dir.path().join("target").is_dir());
}

/// A descriptor the command keeps on a directory that was taken away must not lead it into the
/// quarantine and from there to sandgate's data directory (the store, hidden inside): the
/// directory now lies outside the bind mount the sandbox reached it through, and the kernel
/// refuses `..` from such a disconnected path.
fn a_kept_descriptor_does_not_lead_into_the_quarantine(who: &Who) {
    let s = Scratch::new(who);
    let script = r#"
import os, time
os.mkdir("plain")
fd = os.open("plain", os.O_RDONLY | os.O_DIRECTORY)
os.rename("plain", ".cargo")  # the descriptor was opened before the warden could act
for _ in range(500):
    if not os.path.lexists(".cargo"):
        break
    time.sleep(0.01)
print("moved" if not os.path.lexists(".cargo") else "still-there")
for rel in ["..", "../..", "../../.."]:
    try:
        print(os.listdir(os.open(rel, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)))
    except OSError as e:
        print("refused", e.errno)
"#;
    let (out, err) = s.sh("build", &[], &format!("python3 -c '{script}'"));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first(), Some(&"moved"), "{out} {err}");
    for l in &lines[1..] {
        assert!(l.starts_with("refused"), "reached {l} through a kept descriptor: {out}");
    }
    assert!(!out.contains("sandgate.db"), "{out}");
}

both!(
    a_kept_descriptor_does_not_lead_into_the_quarantine,
    a_working_directory_under_tmp_is_guarded_too,
    a_killed_launcher_leaves_nothing_planted,
    hostile_files_are_gone_and_builds_still_work,
    existing_entries_are_read_only_unless_allowlisted,
    the_allowlist_is_configurable,
    planted_entries_go_during_the_run_and_no_placeholders_appear,
    every_writable_path_is_guarded,
);
