//! Red team regressions: attempts on `sandgate hook claude` that are refused today (no decision,
//! so the agent's prompt appears), and shell lines it allows whose extra words stay arguments of
//! the sandboxed command. Each row is an input a hostile agent could send.

use std::process::Command;

use crate::support::hook::{HookProject, write};

/// The shared hook project, plus links out of the project and a file beside the credentials.
struct Fixture(HookProject);

impl std::ops::Deref for Fixture {
    type Target = HookProject;
    fn deref(&self) -> &HookProject {
        &self.0
    }
}

impl Fixture {
    fn new() -> Fixture {
        let base = HookProject::new();
        let home = base.root().join("home");
        write(&home.join("notes"), "n");
        write(&base.project.join(".git/config"), "[core]");
        std::os::unix::fs::symlink(&home, base.project.join("link_home")).unwrap();
        std::os::unix::fs::symlink(home.join(".bashrc"), base.project.join("rc_link")).unwrap();
        Fixture(base)
    }

    /// The hook's stdout for one tool call (empty: no decision).
    fn hook(&self, tool: &str, input: serde_json::Value) -> String {
        let event = serde_json::json!({
            "hook_event_name": "PermissionRequest",
            "tool_name": tool,
            "tool_input": input,
            "cwd": self.project,
        });
        let path = format!("{}:/usr/bin:/bin", self.bin.display());
        self.hook_stdout(event.to_string().as_bytes(), &[], &path, &[("SANDGATE_NO_DAEMON", "1")])
    }
}

#[test]
fn hook_refuses_shell_tricks_and_file_paths_that_leave_the_tier() {
    let f = Fixture::new();
    let p = f.project.display().to_string();
    let home = f.env.root.path().join("home").display().to_string();
    let long = format!("sandbox-run echo {}", "a".repeat(2 * 1024 * 1024));
    let lines: Vec<String> = [
        "sandbox-run ls <<<x",
        "sandbox-run ls <<EOF",
        "sandbox-run $'ls'",
        "sandbox-run ls $'\\n'id",
        "sandbox-run ls \\\nid",
        "sandbox-run ls # c",
        "sandbox-run ls |& sh",
        "sandbox-run ls || sh",
        "sandbox-run ls && sh",
        "sandbox-run ls; sh",
        "sandbox-run ls & sh",
        "sandbox-run ls &>/tmp/x",
        "sandbox-run ls >>/dev/null",
        "sandbox-run ls 2>&1sh",
        "sandbox-run ls >/dev/null|sh",
        "sandbox-run ls | sh",
        "exec sandbox-run ls",
        "command sandbox-run ls",
        "builtin sandbox-run ls",
        "env sandbox-run ls",
        "X=1 sandbox-run ls",
        "LD_PRELOAD=/tmp/x.so sandbox-run ls",
        "sandbox-run --allow-write / ls",
        "sandbox-run --allow x.test ls",
        "sandbox-run --net proxy ls",
        "sandbox-run --net=proxy ls",
        "sandbox-run -q ls",
        "sandbox-run --deny -- ls",
        "sandbox-run --deny '' ls",
        "sandbox-run '' ls",
        "sandbox-run -- '' ls",
        "sandbox-run --",
        "sandbox-run {--allow-write,/} ls",
        "sandbox-run ~ ls",
        "sandbox-run =ls",
        "sandgate --config x run ls",
        "sandgate learn ls",
        "sandgate proxy",
        "sandgate run",
        "sandbox\u{2010}run ls",
        "sandbox-run\u{a0}ls",
        "ѕandbox-run ls",
        "sandbox-run ls\u{0}; sh",
        "sandbox-run ls\rsh",
        "sandbox-run \"$(id)\"",
        "sandbox-run \"`id`\"",
        "sandbox-run ls !!",
        "./sandbox-run ls",
        "../bin/sandbox-run ls",
        "(sandbox-run ls)",
        "{ sandbox-run ls; }",
        "sandbox-run ls <(sh)",
        // `cd` before a wrapper (issue 32) never leads a `build` into the home (issue 31), nor
        // lets anything unwrapped or expanded through.
        "cd link_home && sandbox-build make",
        "cd link_home/.. && sandbox-build make",
        "cd link_home; sandbox-build make",
        "cd .. && sandbox-build make",
        "cd / && sandbox-build make",
        "cd /tmp && sandbox-build make",
        "cd ~ && sandbox-build make",
        "cd ~/ && sandbox-build make",
        "cd $HOME && sandbox-build make",
        "cd \"$HOME\" && sandbox-build make",
        "cd `pwd`/.. && sandbox-build make",
        "cd - && sandbox-build make",
        "cd -L .. && sandbox-build make",
        "cd src && cd && sandbox-build make",
        "cd {..,src} && sandbox-build make",
        "cd .* && sandbox-build make",
        "CDPATH=.. cd src && sandbox-build make",
        "cd src || sandbox-build make",
        "cd src & sandbox-build make",
        "cd src && sandbox-build make &",
        "cd src && sandbox-build make; sh",
        "cd src && sandbox-build make\nsh",
        "cd src; cd ..; sandbox-build make",
        "cd link_home",
        "sandbox-run ls && cd ..",
        &long,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for line in &lines {
        let out = f.hook("Bash", serde_json::json!({ "command": line }));
        let shown: String = line.chars().take(60).collect();
        assert_eq!(out, "", "allowed: {shown:?}");
    }
    // Control: the same shapes are approved where they stay in the project, so the refusals
    // above are the hook's, not a broken fixture.
    for line in ["cd src && sandbox-build make", "cd src; sandbox-build make", "sandbox-build make"]
    {
        let out = f.hook("Bash", serde_json::json!({ "command": line }));
        assert!(out.contains("\"allow\""), "control refused: {line:?}");
    }
    let files: Vec<(&str, serde_json::Value)> = vec![
        ("Write", serde_json::json!({"file_path": format!("{p}/src/../.envrc"), "content": ""})),
        ("Write", serde_json::json!({"file_path": format!("{p}/link_home/notes"), "content": ""})),
        ("Write", serde_json::json!({"file_path": format!("{p}/rc_link"), "content": ""})),
        (
            "Write",
            serde_json::json!({"file_path": format!("{p}/.git/hooks/pre-commit"), "content": ""}),
        ),
        (
            "Write",
            serde_json::json!({"file_path": format!("{p}/RUST-TOOLCHAIN.toml"), "content": ""}),
        ),
        ("Write", serde_json::json!({"file_path": p.clone(), "content": ""})),
        ("Write", serde_json::json!({"file_path": "~/.bashrc", "content": ""})),
        ("Read", serde_json::json!({"file_path": format!("/proc/self/root{home}/.ssh/id_rsa")})),
        ("Read", serde_json::json!({"file_path": format!("{p}/link_home/.ssh/id_rsa")})),
        ("Read", serde_json::json!({"file_path": format!("{p}/link_home/.ssh/")})),
        ("Read", serde_json::json!({"file_path": format!("{home}//.ssh/./id_rsa")})),
        ("Read", serde_json::json!({"file_path": "/dev/fd/0"})),
        ("Read", serde_json::json!({"file_path": "/etc/shadow"})),
        ("Glob", serde_json::json!({"pattern": "**/*", "path": home.clone()})),
        ("Glob", serde_json::json!({"pattern": "{..,x}/*"})),
        ("Glob", serde_json::json!({"pattern": "/etc/*"})),
        ("Grep", serde_json::json!({"pattern": "K", "path": format!("{p}/link_home")})),
        ("Grep", serde_json::json!({"pattern": "K", "glob": "../home/**"})),
        ("Grep", serde_json::json!({"pattern": "root", "path": "/etc"})),
    ];
    for (tool, input) in files {
        assert_eq!(f.hook(tool, input.clone()), "", "allowed: {tool} {input}");
    }
}

/// Options after the command word are the command's arguments, not the wrapper's: the hook stops
/// checking there, and the launcher must agree.
#[test]
fn wrapper_options_after_the_command_are_the_commands_arguments() {
    let f = Fixture::new();
    let out = f.hook("Bash", serde_json::json!({ "command": "sandbox-run echo --allow-write /" }));
    assert!(out.contains("\"allow\""), "{out}");
    let run = Command::new(f.bin.join("sandbox-run"))
        .args(["echo", "--allow-write", "/", "--net", "proxy"])
        .env("XDG_CONFIG_HOME", f.env.config_home())
        .env("XDG_DATA_HOME", f.env.root.path().join("data"))
        .env("XDG_RUNTIME_DIR", f.env.root.path().join("run"))
        .env("HOME", f.env.root.path().join("home"))
        .env("SANDGATE_NO_DAEMON", "1")
        .current_dir(&f.project)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(String::from_utf8_lossy(&run.stdout), "--allow-write / --net proxy\n");
}
