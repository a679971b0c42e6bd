//! `sandgate hook claude` on recorded inputs (tests/hook_cases/*.json, one file per case), the
//! real-shell check of every allowed command line, `install --claude`/`uninstall --claude`, and
//! an MCP server's stdio under a tier.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sandgate_tests::{Env, sandgate_bin, skip_unless};
use serde_json::Value;

const ALLOW: &str =
    r#"{"hookSpecificOutput":{"decision":{"behavior":"allow"},"hookEventName":"PermissionRequest"}}"#;

/// A home, a project with links and protected names, our links and a fake wrapper.
struct Fixture {
    env: Env,
    project: PathBuf,
    bin: PathBuf,
    fake: PathBuf,
}

fn write(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

impl Fixture {
    fn new() -> Fixture {
        let env = Env::outside_tmp();
        let root = env.root.path().to_owned();
        let home = root.join("home");
        let project = root.join("project");
        write(&home.join(".ssh/id_rsa"), "KEY");
        write(&home.join(".aws/credentials"), "KEY");
        write(&home.join(".bashrc"), "# rc");
        write(&home.join(".sometool-token"), "KEY");
        write(&root.join("data/sandgate/store.db"), "");
        write(&root.join("config/sandgate/config.toml"), "");
        write(&root.join("outside/keep"), "");
        write(&project.join("src/main.rs"), "fn main() {}");
        write(&project.join(".git/config"), "[core]");
        write(&project.join(".git/hooks/README"), "");
        let link = |target: &Path, name: &str| {
            std::os::unix::fs::symlink(target, project.join(name)).unwrap();
        };
        link(&home.join(".ssh"), "link_ssh");
        link(&home.join(".ssh/id_rsa"), "key_link");
        link(&root.join("outside"), "link_out");
        link(&home.join(".bashrc_new"), "dangling");
        std::fs::hard_link(home.join(".bashrc"), project.join("hardlink")).unwrap();
        let bin = root.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        for name in ["sandbox-run", "sandbox-net", "sandbox-build", "sandgate"] {
            std::os::unix::fs::symlink(sandgate_bin(), bin.join(name)).unwrap();
        }
        let fake = root.join("fake");
        write(&fake.join("sandbox-run"), "#!/bin/sh\nexec \"$@\"\n");
        std::fs::set_permissions(fake.join("sandbox-run"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        Fixture { env, project, bin, fake }
    }

    fn fill(&self, text: &str) -> String {
        let root = self.env.root.path();
        text.replace("@PROJECT@", &self.project.display().to_string())
            .replace("@HOME@", &root.join("home").display().to_string())
            .replace("@DATA@", &root.join("data").display().to_string())
            .replace("@CONFIG@", &root.join("config").display().to_string())
            .replace("@BIN@", &self.bin.display().to_string())
            .replace("@FAKE@", &self.fake.display().to_string())
    }

    fn default_path(&self) -> String {
        format!("{}:/usr/bin:/bin", self.bin.display())
    }

    /// Runs the hook on `input`; returns its stdout (panics on a non-zero exit).
    fn hook(&self, input: &[u8], args: &[String], path: &str) -> String {
        let mut child = self
            .env
            .cmd()
            .args(["hook", "claude"])
            .args(args)
            .env("PATH", path)
            .current_dir(&self.project)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        // The hook may stop reading at its limit: a broken pipe is fine.
        let _ = stdin.write_all(input);
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "hook failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
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
                Ok(v) if v["hookSpecificOutput"]["decision"]["behavior"] == "deny"
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
    assert!(wrong.is_empty(), "{} of {} cases wrong:\n{}", wrong.len(), cases.len(), wrong.join("\n"));
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
        .env("PATH", format!("{}:{}:/usr/sbin:/usr/bin:/sbin:/bin", f.bin.display(), probes.display()))
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
    if skip_unless(sandgate_tests::is_root(), "allowed_command_lines_start_nothing_outside_a_sandbox: needs root for namespaces") {
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
        assert!(outside.is_empty(), "{}: {line:?} ran a process outside a sandbox: {outside:?}", c.name);
        if !line.contains(">/dev/null") && !line.contains("2>/dev/null") {
            assert!(inside, "{}: {line:?}: no probe ran inside a sandbox", c.name);
        }
        checked += 1;
    }
    assert!(checked >= 15, "only {checked} allowed command lines");
}
