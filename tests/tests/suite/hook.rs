//! `sandgate hook claude` on recorded inputs (tests/hook_cases/*.json, one file per case), the
//! real-shell check of every allowed command line, `install --claude`/`uninstall --claude`, and
//! an MCP server's stdio under a tier.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::hook::{HookProject, write};
use sandgate_tests::{Env, sandgate_bin, skip_unless};
use serde_json::Value;

const ALLOW: &str = r#"{"hookSpecificOutput":{"decision":{"behavior":"allow"},"hookEventName":"PermissionRequest"}}"#;

/// The shared hook project, plus more credentials, git settings that name programs, links out of
/// the project, and our binary where a sandboxed command could swap it.
struct Fixture {
    base: HookProject,
    fake: PathBuf,
}

impl std::ops::Deref for Fixture {
    type Target = HookProject;
    fn deref(&self) -> &HookProject {
        &self.base
    }
}

impl Fixture {
    fn new() -> Fixture {
        let base = HookProject::new();
        let root = base.root().to_owned();
        let home = root.join("home");
        let project = base.project.clone();
        write(&home.join(".aws/credentials"), "KEY");
        write(&home.join(".sometool-token"), "KEY");
        write(&root.join("data/sandgate/store.db"), "");
        write(&root.join("config/sandgate/config.toml"), "");
        write(&root.join("outside/keep"), "");
        // Places in the home a `build` must not start in (issue 31).
        std::fs::create_dir_all(home.join("bin")).unwrap();
        std::fs::create_dir_all(home.join(".config/nvim")).unwrap();
        write(&home.join("notes.txt"), "n");
        // Git runs what `core.hooksPath` and `core.fsmonitor` name, on the host: the sandbox
        // keeps them read-only, and so must the file tools.
        write(
            &project.join(".git/config"),
            "[core]\n\thooksPath = githooks\n\tfsmonitor = tools/fsmon.sh\n",
        );
        write(&project.join(".git/HEAD"), "ref: refs/heads/main\n");
        write(&project.join("githooks/README"), "");
        write(&project.join("tools/fsmon.sh"), "#!/bin/sh\n");
        write(&project.join(".git/hooks/README"), "");
        let link = |target: &Path, name: &str| {
            std::os::unix::fs::symlink(target, project.join(name)).unwrap();
        };
        link(&home.join(".ssh"), "link_ssh");
        link(&home.join(".ssh/id_rsa"), "key_link");
        link(&root.join("outside"), "link_out");
        link(&home.join(".bashrc_new"), "dangling");
        std::fs::hard_link(home.join(".bashrc"), project.join("hardlink")).unwrap();
        // Our binary where a sandboxed command could swap it between the decision and the run:
        // inside the project (writable in `build`), in a world-writable directory, and through
        // a link whose way passes the project.
        std::fs::create_dir_all(project.join("pbin")).unwrap();
        std::os::unix::fs::symlink(sandgate_bin(), project.join("pbin/sandbox-run")).unwrap();
        std::fs::create_dir_all(root.join("wwbin")).unwrap();
        std::fs::set_permissions(root.join("wwbin"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        std::os::unix::fs::symlink(sandgate_bin(), root.join("wwbin/sandbox-run")).unwrap();
        std::fs::create_dir_all(root.join("viabin")).unwrap();
        std::os::unix::fs::symlink(
            project.join("pbin/sandbox-run"),
            root.join("viabin/sandbox-run"),
        )
        .unwrap();
        std::fs::create_dir_all(root.join("relbin")).unwrap();
        std::os::unix::fs::symlink("../project/pbin/sandbox-run", root.join("relbin/sandbox-run"))
            .unwrap();
        let fake = root.join("fake");
        write(&fake.join("sandbox-run"), "#!/bin/sh\nexec \"$@\"\n");
        std::fs::set_permissions(fake.join("sandbox-run"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        Fixture { base, fake }
    }

    fn fill(&self, text: &str) -> String {
        let root = self.env.root.path();
        text.replace("@PROJECT@", &self.project.display().to_string())
            .replace("@HOME@", &root.join("home").display().to_string())
            .replace("@DATA@", &root.join("data").display().to_string())
            .replace("@CONFIG@", &root.join("config").display().to_string())
            .replace("@BIN@", &self.bin.display().to_string())
            .replace("@FAKE@", &self.fake.display().to_string())
            .replace("@ROOT@", &root.display().to_string())
    }

    fn default_path(&self) -> String {
        format!("{}:/usr/bin:/bin", self.bin.display())
    }

    /// Runs the hook on `input`; returns its stdout (panics on a non-zero exit).
    fn hook(&self, input: &[u8], args: &[String], path: &str) -> String {
        self.hook_stdout(input, args, path, &[])
    }
}

/// A recorded case: its name, the input bytes, hook arguments, PATH, and what it must answer.
struct Case {
    name: String,
    input: Vec<u8>,
    command: Option<String>,
    args: Vec<String>,
    path: String,
    expect: String,
}

fn cases(f: &Fixture) -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("hook_cases");
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| {
            let text = f.fill(&std::fs::read_to_string(&p).unwrap());
            let c: Value = serde_json::from_str(&text).unwrap();
            let input = if let Some(raw) = c["raw"].as_str() {
                raw.as_bytes().to_vec()
            } else if c["generate"] == "one_mib" {
                let cmd = format!("sandbox-run ls {}", "a".repeat(1024 * 1024));
                serde_json::to_vec(&serde_json::json!({
                    "hook_event_name": "PermissionRequest", "tool_name": "Bash",
                    "tool_input": { "command": cmd }, "cwd": f.project,
                }))
                .unwrap()
            } else {
                serde_json::to_vec(&c["input"]).unwrap()
            };
            let args = c["args"]
                .as_array()
                .map(|a| a.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
                .unwrap_or_default();
            Case {
                name: p.file_stem().unwrap().to_string_lossy().into_owned(),
                input,
                command: c["input"]["tool_input"]["command"].as_str().map(str::to_owned),
                args,
                path: c["path"].as_str().map_or_else(|| f.default_path(), str::to_owned),
                expect: c["expect"].as_str().unwrap().to_owned(),
            }
        })
        .collect()
}

#[test]
fn recorded_inputs_get_the_recorded_answer() {
    let f = Fixture::new();
    let cases = cases(&f);
    assert!(cases.len() > 100, "only {} cases found", cases.len());
    let mut wrong = Vec::new();
    for c in &cases {
        let out = f.hook(&c.input, &c.args, &c.path);
        let got = match out.trim_end() {
            "" => "none".to_owned(),
            ALLOW => "allow".to_owned(),
            other => match serde_json::from_str::<Value>(other) {
                Ok(v)
                    if v["hookSpecificOutput"]["decision"]["behavior"] == "deny"
                        && v["hookSpecificOutput"]["decision"]["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("sandgate refused")) =>
                {
                    "deny".to_owned()
                }
                _ => format!("unexpected output {other:?}"),
            },
        };
        if got != c.expect {
            wrong.push(format!("{}: expected {}, got {got}", c.name, c.expect));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases wrong:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}

/// A stand-in for every command an allowed line names: it records its namespaces in `probe-out`
/// (writable only outside any sandbox) and says on stderr where it ran.
const PROBE: &str = r#"#!/bin/sh
ns=$(/usr/bin/readlink /proc/self/ns/pid /proc/self/ns/mnt /proc/self/ns/net | /usr/bin/tr '\n' ' ')
echo "$ns" > "$PROBE_OUT/$$" 2>/dev/null
echo "probe-ran $ns" >&2
"#;

const PROBE_NAMES: &[&str] =
    &["ls", "cat", "tail", "cargo", "git", "echo", "make", "grep", "wc", "npm", "curl"];

fn own_namespaces() -> String {
    ["pid", "mnt", "net"]
        .iter()
        .map(|n| std::fs::read_link(format!("/proc/self/ns/{n}")).unwrap().display().to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `line` with `bash -c` (wrappers and probes alone on PATH); returns the namespaces of the
/// probes that ran outside every sandbox, and whether any probe said it ran inside one.
fn run_line(f: &Fixture, line: &str) -> (Vec<String>, bool) {
    let root = f.env.root.path();
    let probes = root.join("probes");
    let out = root.join("probe-out");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    if !probes.exists() {
        for name in PROBE_NAMES {
            write(&probes.join(name), PROBE);
            std::fs::set_permissions(probes.join(name), std::fs::Permissions::from_mode(0o755))
                .unwrap();
        }
    }
    let output = Command::new("/bin/bash")
        .arg("-c")
        .arg(line)
        .env_clear()
        .envs(f.env.cmd().get_envs().filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned()))))
        // The launcher needs `ip` for a veth (build, net): system directories come after the probes.
        .env(
            "PATH",
            format!("{}:{}:/usr/sbin:/usr/bin:/sbin:/bin", f.bin.display(), probes.display()),
        )
        .env("PROBE_OUT", &out)
        .env("SANDGATE_NO_DAEMON", "1")
        .current_dir(&f.project)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let own = own_namespaces();
    let inside = stderr.lines().any(|l| l.starts_with("probe-ran ") && !l.contains(&own));
    let outside = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .filter(|ns| ns.trim() == own)
        .collect();
    (outside, inside)
}

#[test]
fn allowed_command_lines_start_nothing_outside_a_sandbox() {
    if skip_unless(
        sandgate_tests::is_root(),
        "allowed_command_lines_start_nothing_outside_a_sandbox: needs root for namespaces",
    ) {
        return;
    }
    let f = Fixture::new();
    // Control: the harness sees a command that runs outside (so a hole would fail this test).
    let (outside, _) = run_line(&f, "ls");
    assert_eq!(outside.len(), 1, "the probe harness does not see an unwrapped command");
    let (outside, _) = run_line(&f, "sandbox-run ls; ls");
    assert_eq!(outside.len(), 1, "the probe harness does not see the second command");
    let mut checked = 0;
    for c in cases(&f).iter().filter(|c| c.expect == "allow") {
        let Some(line) = &c.command else { continue };
        let (outside, inside) = run_line(&f, line);
        assert!(
            outside.is_empty(),
            "{}: {line:?} ran a process outside a sandbox: {outside:?}",
            c.name
        );
        if !line.contains(">/dev/null") && !line.contains("2>/dev/null") {
            assert!(inside, "{}: {line:?}: no probe ran inside a sandbox", c.name);
        }
        checked += 1;
    }
    assert!(checked >= 15, "only {checked} allowed command lines");
}

fn install_cmd(env: &Env, args: &[&str]) {
    let out = env.cmd().args(args).env_remove("CLAUDE_CONFIG_DIR").output().unwrap();
    assert!(out.status.success(), "sandgate {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn install_claude_then_uninstall_restores_settings_exactly() {
    let env = Env::new();
    let home = env.root.path().join("home");
    let bin = env.root.path().join("links");
    let bin = bin.to_str().unwrap();
    let settings = home.join(".claude/settings.json");
    let skill = home.join(".claude/skills/sandgate/SKILL.md");
    // Odd formatting and key order on purpose: only a byte-exact restore gives these bytes back.
    let original = "{\"zeta\": 1,   \"model\":\"opus\",\n \"hooks\": {\"PreToolUse\": [{\"matcher\": \"Bash\", \"hooks\": []}]}}\n";
    write(&settings, original);
    install_cmd(&env, &["install", "--dir", bin, "--claude"]);
    let installed = std::fs::read(&settings).unwrap();
    let v: Value = serde_json::from_slice(&installed).unwrap();
    assert_eq!(v["zeta"], 1);
    assert_eq!(v["model"], "opus");
    assert_eq!(v["hooks"]["PreToolUse"][0]["matcher"], "Bash");
    let entry = &v["hooks"]["PermissionRequest"][0];
    assert!(entry["matcher"].as_str().unwrap().contains("Bash"), "{entry}");
    let command = entry["hooks"][0]["command"].as_str().unwrap();
    assert!(command.ends_with("sandgate hook claude --tier build"), "{command}");
    assert_eq!(entry["hooks"][0]["type"], "command");
    assert!(std::fs::read_to_string(&skill).unwrap().contains("sandbox-build"));
    install_cmd(&env, &["install", "--dir", bin, "--claude"]);
    assert_eq!(std::fs::read(&settings).unwrap(), installed, "a second install changed settings");
    install_cmd(&env, &["uninstall", "--dir", bin, "--claude"]);
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), original);
    assert!(!skill.exists());
    assert!(!Path::new(bin).join("sandbox-run").exists());
    let leftovers: Vec<_> =
        std::fs::read_dir(home.join(".claude")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers, ["settings.json"], "uninstall left files behind");

    // settings.json as a link into a dotfiles directory: written through, still a link after.
    let env = Env::new();
    let home = env.root.path().join("home");
    let dotfiles = env.root.path().join("dotfiles/settings.json");
    write(&dotfiles, original);
    std::fs::create_dir_all(home.join(".claude")).unwrap();
    std::os::unix::fs::symlink(&dotfiles, home.join(".claude/settings.json")).unwrap();
    install_cmd(&env, &["install", "--dir", bin, "--claude"]);
    assert!(std::fs::read_to_string(&dotfiles).unwrap().contains("hook claude"));
    assert!(home.join(".claude/settings.json").is_symlink(), "install replaced the link");
    install_cmd(&env, &["uninstall", "--dir", bin, "--claude"]);
    assert!(home.join(".claude/settings.json").is_symlink(), "uninstall replaced the link");
    assert_eq!(std::fs::read_to_string(&dotfiles).unwrap(), original);

    // No settings before: none after.
    let env = Env::new();
    let home = env.root.path().join("home");
    install_cmd(&env, &["install", "--dir", bin, "--claude"]);
    assert!(home.join(".claude/settings.json").exists());
    install_cmd(&env, &["install", "--dir", bin, "--claude"]);
    install_cmd(&env, &["uninstall", "--dir", bin, "--claude"]);
    assert!(!home.join(".claude/settings.json").exists());
    assert!(!home.join(".claude").exists(), "the directory install made is left");
}

/// Issue 32.4: `install` said "completions and man pages: 34 files" and `uninstall` left them.
/// It names each file and where its reader looks; `uninstall` takes them away again, and
/// leaves a same-named file that is not sandgate's.
#[test]
fn install_names_completions_and_man_pages_and_uninstall_removes_them() {
    let env = Env::new();
    let bin = env.root.path().join("links");
    let (data, config) = (env.root.path().join("data"), env.root.path().join("config"));
    let run = |args: &[&str]| {
        let out = env.cmd().args(args).arg("--dir").arg(&bin).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (text, _) = run(&["install"]);
    let bash = data.join("bash-completion/completions/sandgate");
    let zsh = data.join("zsh/site-functions/_sandgate");
    let fish = config.join("fish/completions/sandgate.fish");
    let man = data.join("man/man1");
    assert!(
        text.contains(&format!("bash completions: {} (read by bash-completion)\n", bash.display())),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "zsh completions: {} (zsh reads it when its directory is in fpath",
            zsh.display()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("fish completions: {} (read by fish)\n", fish.display())),
        "{text}"
    );
    let pages = std::fs::read_dir(&man).unwrap().count();
    assert!(text.contains(&format!("man pages: {pages} in {} (", man.display())), "{text}");
    assert!(text.contains(&format!("add {} to MANPATH", data.join("man").display())), "{text}");
    for f in [&bash, &zsh, &fish, &man.join("sandgate.1"), &man.join("sandgate-run.1")] {
        assert!(f.is_file(), "{}", f.display());
    }
    // Someone else's page of a name like ours.
    let foreign = man.join("sandgate-notes.1");
    std::fs::write(&foreign, ".TH NOTES 1\n").unwrap();
    let (text, notes) = run(&["uninstall"]);
    for f in [&bash, &zsh, &fish] {
        assert!(text.contains(&format!("removed {}\n", f.display())), "{text}");
        assert!(!f.exists(), "{}", f.display());
    }
    assert!(
        text.contains(&format!("removed {pages} man pages from {}\n", man.display())),
        "{text}"
    );
    assert!(!man.join("sandgate.1").exists());
    assert!(foreign.exists(), "not ours: kept");
    assert!(
        notes.contains("sandgate-notes.1 was not written by sandgate; left in place"),
        "{notes}"
    );
}

#[test]
fn check_path_answers_for_any_agent() {
    let f = Fixture::new();
    let check = |args: &[&str]| {
        let out = f.env.cmd().arg("check").args(args).current_dir(&f.project).output().unwrap();
        (out.status.code().unwrap(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (code, _) = check(&["--path", "src/main.rs", "--write", "--tier", "build"]);
    assert_eq!(code, 0);
    let (code, text) = check(&["--path", ".git/hooks/pre-commit", "--write", "--tier", "build"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("read-only") && text.contains("Writable:"), "{text}");
    let (code, text) = check(&["--path", "link_ssh/id_rsa", "--json"]);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["decision"], "deny");
    let (code, _) = check(&["--path", "src/main.rs", "--write", "--tier", "net"]);
    assert_eq!(code, 1);
    // --allow-write narrows only: inside the writable area is fine, outside is an escalation.
    let (code, _) =
        check(&["--path", "src/main.rs", "--write", "--tier", "build", "--allow-write", "src"]);
    assert_eq!(code, 0);
    let (code, _) =
        check(&["--path", "README", "--write", "--tier", "build", "--allow-write", "src"]);
    assert_eq!(code, 1, "a narrowed tier still allowed a path outside it");
    let out = f
        .env
        .cmd()
        .args(["check", "--path", "x", "--write", "--tier", "build", "--allow-write", "/usr"])
        .current_dir(&f.project)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("permission escalation"));
}

#[test]
fn mcp_server_stdio_passes_through_byte_exact() {
    if skip_unless(
        sandgate_tests::is_root(),
        "mcp_server_stdio_passes_through_byte_exact: needs root for namespaces",
    ) {
        return;
    }
    let f = Fixture::new();
    let server = f.project.join("server.py");
    write(
        &server,
        "import sys, json\nfor line in sys.stdin.buffer:\n    msg = json.loads(line)\n    \
         out = json.dumps({'jsonrpc': '2.0', 'id': msg['id'], 'result': msg['params']}, \
         ensure_ascii=False, sort_keys=True, separators=(',', ':'))\n    \
         sys.stdout.buffer.write(out.encode() + b'\\n')\n    sys.stdout.buffer.flush()\n",
    );
    let mut input = Vec::new();
    let mut expected = Vec::new();
    for (id, text) in
        [(1, "hello".to_owned()), (2, "ünïcødé ✓ \\\" tab\t".to_owned()), (3, "x".repeat(200_000))]
    {
        let params = serde_json::json!({ "text": text });
        input.extend(
            serde_json::to_vec(
                &serde_json::json!({"jsonrpc":"2.0","id":id,"method":"echo","params":params}),
            )
            .unwrap(),
        );
        input.push(b'\n');
        let out = serde_json::json!({"jsonrpc":"2.0","id":id,"result":params});
        expected.extend(serde_json::to_vec(&out).unwrap());
        expected.push(b'\n');
    }
    let mut child = f
        .env
        .cmd()
        .args(["net", "--", "python3"])
        .arg(&server)
        .env("SANDGATE_NO_DAEMON", "1")
        .current_dir(&f.project)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.stdout == expected,
        "stdout differs ({} vs {} bytes)",
        out.stdout.len(),
        expected.len()
    );
}

#[test]
fn hook_decisions_reach_the_event_log() {
    let f = Fixture::new();
    // A daemon of this environment (any command that needs one starts it).
    let out = f.env.cmd().arg("rules").current_dir(&f.project).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut watch = f
        .env
        .cmd()
        .args(["watch", "--json"])
        .current_dir(&f.project)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = {
        let (tx, rx) = std::sync::mpsc::channel();
        let stdout = watch.stdout.take().unwrap();
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for l in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        rx
    };
    // Sends `command` (from `cwd`, with `path`) until a hook event whose reason contains `want`
    // is seen (until the subscription is in place, a line can be missed: each send is one event).
    let event = |command: &str, cwd: &Path, path: &str, want: &str| {
        let input = serde_json::json!({
            "hook_event_name": "PermissionRequest", "tool_name": "Bash",
            "tool_input": { "command": command }, "cwd": cwd,
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            f.hook(&serde_json::to_vec(&input).unwrap(), &[], path);
            while let Ok(l) = lines.recv_timeout(std::time::Duration::from_millis(300)) {
                let v: Value = serde_json::from_str(&l).unwrap_or(Value::Null);
                if v["event"] == "hook" && v["reason"].as_str().is_some_and(|r| r.contains(want)) {
                    return Some(v);
                }
            }
        }
        None
    };
    // `;` and `&&` join wrapped commands now: the unwrapped one is what is named.
    let path = f.default_path();
    let list = event("sandbox-run ls; id", &f.project, &path, "\"id\" is not a sandgate wrapper");
    // Issue 31: `build` in the home, refused for where it starts, and the way out named.
    let home = f.env.root.path().join("home");
    let build = event("sandbox-build make", &home, &path, "is your home directory");
    // Issue 32: a wrapper refused for where it lives (the project's `pbin` first in PATH) says
    // so, not "through PATH".
    let in_project = format!("{}/pbin:/usr/bin:/bin", f.project.display());
    let writable = "which a command in a sandbox may write";
    let exposed = event("sandbox-run ls", &f.project, &in_project, writable);
    let _ = watch.kill();
    let _ = watch.wait();
    let v = list.expect("no hook event for the list in `sandgate watch --json`");
    assert_eq!((v["tool"].as_str(), v["decision"].as_str()), (Some("Bash"), Some("none")), "{v}");
    let v = build.expect("no hook event for build in the home");
    assert!(v["reason"].as_str().unwrap().contains("--allow-write"), "{v}");
    let v = exposed.expect("no hook event for an exposed wrapper");
    assert!(!v["reason"].as_str().unwrap().contains("through PATH"), "{v}");
}

/// An interactive bash in a sandbox shows the tier in its prompt, even when `.bashrc` sets `PS1`;
/// `SANDGATE_PROMPT_MARKER=0` or `[shell] prompt_marker = false` turns it off.
#[test]
fn interactive_bash_shows_the_tier_in_its_prompt() {
    if skip_unless(
        sandgate_tests::is_root() && sandgate_tests::has_script(),
        "interactive_bash_shows_the_tier_in_its_prompt: needs root and script(1)",
    ) {
        return;
    }
    let f = Fixture::new();
    std::fs::write(f.env.root.path().join("home/.bashrc"), "PS1='custom\\$ '\n").unwrap();
    let session = |marker: Option<&str>| {
        let mut base = f.env.cmd();
        base.current_dir(&f.project)
            .env("SHELL", "/bin/bash")
            .env("SANDGATE_NO_DAEMON", "1")
            .env_remove("PROMPT_COMMAND")
            .env_remove("PS1");
        if let Some(m) = marker {
            base.env("SANDGATE_PROMPT_MARKER", m);
        }
        let mut child = sandgate_tests::on_terminal(&base, &["run"]);
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"echo tier-is-$SANDGATE_TIER-$GIT_OPTIONAL_LOCKS\nexit\n").unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let shown = session(None);
    assert!(shown.contains("tier-is-run-0"), "{shown}");
    assert!(
        shown.contains("[sandgate:run] custom"),
        "no marker in front of .bashrc's PS1: {shown}"
    );
    let off = session(Some("0"));
    assert!(off.contains("tier-is-run-0"), "{off}");
    assert!(!off.contains("[sandgate:"), "marker shown although turned off: {off}");
    write(&f.env.config_home().join("sandgate/config.toml"), "[shell]\nprompt_marker = false\n");
    let off = session(None);
    assert!(off.contains("tier-is-run-0"), "{off}");
    assert!(!off.contains("[sandgate:"), "marker shown although the configuration says no: {off}");
}
