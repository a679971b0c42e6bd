//! Issue 35: the managed layer (`/etc/sandgate/managed.toml`) no user can widen, and unattended
//! runs.
//!
//! Each test places the system layers in a root-owned directory of its own under `/var/tmp`
//! (`SANDGATE_TEST_SYSTEM_DIR`, read by debug builds only) and tries every channel that widens a
//! policy — the user's file, the per-directory file, `--allow`, a nested launch, `learn --write`,
//! a person's `sandgate allow --always --global` — as root and as an unprivileged user whose
//! `HOME` and `XDG_CONFIG_HOME` are their own. The control of each is the same attempt without the
//! managed file: it widens.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;

use sandgate_tests::{origin, sandgate_bin};
use serde_json::Value;

use crate::support::daemon::{
    DaemonEnv, can_sandbox, curl, curl_sh, finish, pending, start_daemon,
};
use crate::support::sandbox::{Scratch, Who, both, text};

/// The variable a debug build reads for the system directory.
const VAR: &str = "SANDGATE_TEST_SYSTEM_DIR";

/// A system directory (`/etc/sandgate` stand-in): root-owned, mode 0755, under `/var/tmp` (a
/// sandbox's private `/tmp` would hide one under `/tmp`, and a nested launch must see it).
struct System {
    dir: tempfile::TempDir,
}

impl System {
    fn new(managed: &str) -> System {
        let dir = tempfile::Builder::new().prefix("sandgate-sys").tempdir_in("/var/tmp").unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let file = dir.path().join("managed.toml");
        std::fs::write(&file, managed).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        System { dir }
    }

    fn path(&self) -> &str {
        self.dir.path().to_str().unwrap()
    }

    fn managed(&self) -> std::path::PathBuf {
        self.dir.path().join("managed.toml")
    }
}

/// The managed file of these tests: only `127.0.0.1:OK` may be reached.
fn ceiling(ok: u16) -> String {
    format!("[network]\nallow = [\"127.0.0.1:{ok}\"]\nallow_only_managed = true\n")
}

/// `sandgate net|build ARGS -- curl URL` in `s` (with `system` as the system directory when
/// given); (exit status, stdout, stderr).
fn launch(
    s: &Scratch,
    system: Option<&System>,
    tier: &str,
    args: &[&str],
    cmd: &[&str],
) -> (i32, String, String) {
    let mut c = s.command(tier, args, cmd);
    if let Some(sys) = system {
        c.env(VAR, sys.path());
    }
    let out = c.output().unwrap();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// A scratch tree for `who` whose user file allows `127.0.0.1:by_file` and whose per-directory
/// file allows `127.0.0.1:by_project` (each launch's daemon is this tree's own: the daemon reads
/// the system directory of the launch that started it).
fn widened_scratch(who: &Who, by_file: u16, by_project: u16) -> Scratch {
    let s = Scratch::new(who);
    std::fs::write(
        s.home.join(".config/sandgate/config.toml"),
        format!("[network]\nallow = [\"127.0.0.1:{by_file}\"]\n[daemon]\nask_timeout = \"2s\"\n"),
    )
    .unwrap();
    let projects = s.home.join(".config/sandgate/projects");
    std::fs::create_dir_all(&projects).unwrap();
    let key = sandgate_config::project_key(&s.proj.canonicalize().unwrap());
    std::fs::write(
        projects.join(format!("{key}.toml")),
        format!("[network]\nallow = [\"127.0.0.1:{by_project}\"]\n"),
    )
    .unwrap();
    let _ = Command::new("chown")
        .args(["-R", &format!("{}:{}", who.uid, who.gid)])
        .arg(&projects)
        .status();
    s
}

/// Every file, flag, nested launch and `learn` a user has is held to the managed ceiling; the
/// same attempts without the managed file widen (the control).
fn no_file_or_flag_widens_past_the_managed_layer(who: &Who) {
    if !can_sandbox() {
        sandgate_tests::skip("curl and python3 (net tier)");
        return;
    }
    let ok = origin("managed\n");
    let (by_file, by_project, by_flag) = (origin("file\n"), origin("project\n"), origin("flag\n"));
    let learned = origin("learned\n");
    let url = |port: u16| format!("http://127.0.0.1:{port}/");
    let system = System::new(&ceiling(ok));
    let flag = format!("--allow=127.0.0.1:{by_flag}");
    let bin = sandgate_bin();
    for sys in [None, Some(&system)] {
        let s = widened_scratch(who, by_file, by_project);
        let with_sys = |mut c: Command| {
            if let Some(sys) = sys {
                c.env(VAR, sys.path());
            }
            c
        };
        // (what, tier flags, port, status code without the managed file)
        let rows: [(&str, Vec<&str>, u16, &str); 4] = [
            ("the user's file", vec![], by_file, "200\n"),
            ("the per-directory file", vec![], by_project, "200\n"),
            ("an --allow flag", vec![flag.as_str()], by_flag, "200\n"),
            // Nobody allowed it: asked, and refused when nobody answers in 2 s.
            ("the managed allow list", vec![], ok, "403\n"),
        ];
        for (what, args, port, control) in rows {
            let cmd = curl(&url(port));
            let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
            let (code, stdout, stderr) = launch(&s, sys, "net", &args, &cmd);
            if sys.is_none() {
                assert_eq!(stdout, control, "control, {what}: status {code}, stderr {stderr}");
            } else if port == ok {
                assert_eq!(stdout, "200\n", "{what}: stderr {stderr}");
            } else if args.is_empty() {
                assert_eq!(stdout, "403\n", "{what}: status {code}, stderr {stderr}");
                assert!(
                    stderr.contains("blocked by your organisation's policy"),
                    "{what}: {stderr}"
                );
            } else {
                // A flag past the ceiling refuses the launch, and says why.
                assert_ne!(code, 0, "{what}: {stdout}");
                assert!(stdout.is_empty(), "{what}: the command must not run: {stdout}");
                let said =
                    format!("--allow 127.0.0.1:{by_flag} is blocked by your organisation's policy");
                assert!(stderr.contains(&said), "{what}: {stderr}");
            }
        }

        // A nested launch asks for the file's destination again, by flag: the outer allows it
        // only without the managed file.
        let inner_allow = format!("--allow=127.0.0.1:{by_file}");
        let inner_url = url(by_file);
        let inner = [
            bin.to_str().unwrap(),
            "net",
            inner_allow.as_str(),
            "--",
            "curl",
            "-sS",
            "--max-time",
            "5",
            "--noproxy",
            "",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}\n",
            inner_url.as_str(),
        ];
        let mut c = with_sys(s.command("build", &[], &inner));
        let out = c.env("SANDGATE_NO_DAEMON", "1").output().unwrap();
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        if sys.is_none() {
            assert_eq!(stdout, "200\n", "control, nested: {stderr}");
        } else {
            assert!(!stdout.contains("200"), "nested: {stdout}\n{stderr}");
            assert!(stderr.contains("organisation's policy"), "nested: {stderr}");
        }

        // `learn --write` puts what the command wanted into the per-directory file: past the
        // ceiling it decides nothing, and `check` says who decided.
        let learn_cmd = curl_sh(&url(learned)) + " || true";
        let mut c = with_sys(s.program(&bin));
        let out = c.args(["learn", "--write", "--", "sh", "-c", &learn_cmd]).output().unwrap();
        assert!(out.status.success(), "learn: {}", text(&out.stderr));
        if sys.is_some() {
            // What the control learned, written as the control wrote it.
            let mut c = s.program(&bin);
            c.args(["learn", "--write", "--", "sh", "-c", &learn_cmd]);
            assert!(c.output().unwrap().status.success());
        }
        let mut c = with_sys(s.program(&bin));
        c.args(["check", &format!("127.0.0.1:{learned}"), "--tier", "net", "--json"]);
        let out = c.output().unwrap();
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
        if sys.is_none() {
            assert_eq!(v["decision"], "allow", "control, learn: {v}");
        } else {
            assert_eq!(v["decision"], "deny", "learn: {v}");
            let source = v["rule"]["source"].as_str().unwrap_or_default();
            assert!(source.contains("your organisation's policy"), "learn: {v}");
            let layers: Vec<&str> = v["config_files"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|f| f["layer"].as_str())
                .collect();
            assert!(layers.contains(&"managed"), "{v}");
        }

        // The user cannot edit, replace or remove it.
        if let Some(sys) = sys.filter(|_| who.rootless) {
            let script = format!(
                "echo '[network]' > {m} || rm -f {m} || mv {m} {m}.x",
                m = sys.managed().display()
            );
            let out = s.program(Path::new("/bin/sh")).args(["-c", &script]).output().unwrap();
            assert!(!out.status.success(), "the user changed the managed file");
            assert_eq!(std::fs::read_to_string(sys.managed()).unwrap(), ceiling(ok));
        }
    }
}

both!(no_file_or_flag_widens_past_the_managed_layer);

/// A person's answer past the ceiling — `sandgate allow --always --global`, and an answer to a
/// question — is refused to them with the organisation's words, and nothing is stored; `config
/// check` names the managed file and what it sets aside. Control: without it, the grant is made.
#[test]
fn an_answer_past_the_ceiling_is_refused_to_the_person() {
    if sandgate_tests::skip_unless(sandgate_tests::is_root(), "root (a root-owned managed file)") {
        return;
    }
    let sys = System::new(&ceiling(1));
    for managed in [false, true] {
        let mut t = DaemonEnv::new("[network]\nallow = [\"user.example\"]\n");
        t.vars.push(("SANDGATE_DNS_SERVER".into(), Some(crate::support::dns::no_dns())));
        if managed {
            t.vars.push((VAR.into(), Some(sys.path().into())));
        }
        start_daemon(&t);
        let out = t.sg(&["allow", "wide.example", "--always", "--global"]);
        let stderr = text(&out.stderr);
        let rules = t.json(&["rules", "--json"]);
        let rules = rules.as_array().cloned().unwrap_or_default();
        if managed {
            assert!(!out.status.success(), "{stderr}");
            assert!(stderr.contains("blocked by your organisation's policy"), "{stderr}");
            assert!(rules.is_empty(), "nothing stored: {rules:?}");
            let check = t.sg(&["check", "user.example:443", "--json"]);
            let v: Value = serde_json::from_slice(&check.stdout).unwrap();
            assert_eq!(v["decision"], "deny", "{v}");
            let out = t.sg(&["config", "check"]);
            let report = text(&out.stdout);
            assert!(out.status.success(), "{report}{}", text(&out.stderr));
            assert!(report.contains("your organisation's policy applies"), "{report}");
            assert!(
                report.contains("allow user.example") && report.contains("no effect"),
                "{report}"
            );
        } else {
            assert!(out.status.success(), "control: {stderr}");
            assert_eq!(rules.len(), 1, "control: {rules:?}");
            let check = t.sg(&["check", "user.example:443"]);
            assert_eq!(check.status.code(), Some(0), "control");
        }
    }
}

/// A managed file (or a directory above it) that someone other than root could change is
/// refused, with a message that says what to fix; sandgate does not run past it.
#[test]
fn an_unsafe_managed_file_is_refused() {
    if sandgate_tests::skip_unless(sandgate_tests::is_root(), "root (a root-owned managed file)") {
        return;
    }
    let sys = System::new("[network]\ndeny = [\"x.example\"]\n");
    let t = DaemonEnv::new("");
    let check = |sys: &System| {
        let out = t.cmd().env(VAR, sys.path()).args(["check", "x.example"]).output().unwrap();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    // Control: root-owned and 0644, it decides.
    let (code, stdout, _) = check(&sys);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("your organisation's policy"), "{stdout}");
    for (mode, dir_mode, why) in [
        (0o666, 0o755, "writable by group or others"),
        (0o644, 0o777, "writable by group or others"),
    ] {
        std::fs::set_permissions(sys.managed(), std::fs::Permissions::from_mode(mode)).unwrap();
        std::fs::set_permissions(sys.dir.path(), std::fs::Permissions::from_mode(dir_mode))
            .unwrap();
        let (code, stdout, stderr) = check(&sys);
        assert_ne!(code, Some(0), "{stdout}");
        assert_ne!(code, Some(3), "{stdout}");
        assert!(
            stderr.contains("refusing the system configuration") && stderr.contains(why),
            "{stderr}"
        );
        assert!(stderr.contains("chmod go-w"), "{stderr}");
    }
    std::fs::set_permissions(sys.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(sys.managed(), std::fs::Permissions::from_mode(0o644)).unwrap();
    if let Some(user) = crate::support::sandbox::rootless() {
        let _ = Command::new("chown").arg(user.uid.to_string()).arg(sys.managed()).status();
        let (_, _, stderr) = check(&sys);
        assert!(stderr.contains("is not owned by root"), "{stderr}");
    }
}

/// Unattended runs (`--no-ask`, `[daemon] ask = "deny"`): a destination no rule allows is
/// refused at once with the 403 written for the model, nobody is asked, and `log --summary`
/// lists what would have been asked. Control: without either, a person is asked.
#[test]
fn an_unattended_run_refuses_at_once_and_lists_what_it_would_have_asked() {
    if sandgate_tests::skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let port = origin("never\n");
    let url = format!("http://127.0.0.1:{port}/");
    // Ten minutes: only the unattended mode can make the refusal come in time.
    let slow = "[daemon]\nask_timeout = \"10m\"\n";
    let body = format!(
        "curl -sS --noproxy '' --max-time 20 {url} -o /tmp/body -w '%{{http_code}}\\n'; cat /tmp/body"
    );
    for (config, flags) in
        [(format!("{slow}ask = \"deny\"\n"), vec![]), (slow.to_owned(), vec!["--no-ask"])]
    {
        let t = DaemonEnv::new(&config);
        let started = std::time::Instant::now();
        let (code, stdout, stderr) = finish(t.spawn_net(&flags, &["sh", "-c", &body]));
        assert_eq!(code, 0, "{stderr}");
        assert!(stdout.starts_with("403\n"), "{flags:?}: {stdout}\n{stderr}");
        assert!(stdout.contains("this run is unattended"), "{stdout}");
        assert!(started.elapsed() < std::time::Duration::from_secs(15), "not at once");
        assert!(stderr.contains("unattended"), "{stderr}");
        assert!(pending(&t).is_empty());
        t.flush_events();
        let summary = text(&t.sg(&["log", "--summary"]).stdout);
        assert!(
            summary.contains("would have asked (unattended run): 127.0.0.1"),
            "{flags:?}: {summary}"
        );
    }
    // Control: the same run with a person to ask puts the question (answered with a deny).
    let t = DaemonEnv::new(slow);
    let run = t.spawn_net(&[], &["sh", "-c", &body]);
    crate::support::daemon::wait_for_question(&t);
    assert!(t.sg(&["deny", "127.0.0.1"]).status.success());
    let (_, stdout, _) = finish(run);
    assert!(stdout.starts_with("403\n") && !stdout.contains("unattended"), "{stdout}");
}

/// Telegram's `/allow`, as every channel, is screened: past the ceiling the chat is told
/// "blocked by your organisation's policy" and nothing is stored. Control: without the managed
/// file the same command records a grant.
#[test]
fn a_telegram_allow_past_the_ceiling_is_refused_in_the_chat() {
    use sandgate_test_support::telegram::{FakeTelegram, text as body_text};
    if sandgate_tests::skip_unless(sandgate_tests::is_root(), "root (a root-owned managed file)") {
        return;
    }
    const TOKEN: &str = "123456:TEST-token";
    const CHAT: i64 = 42;
    let sys = System::new(&ceiling(1));
    for managed in [false, true] {
        let fake = FakeTelegram::start_with(TOKEN, std::time::Duration::from_secs(1));
        let mut t = DaemonEnv::new(&format!(
            "[telegram]\ntoken = \"{TOKEN}\"\nchats = [{CHAT}]\napi_url = \"{}\"\n",
            fake.url
        ));
        for v in ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"] {
            t.vars.push((v.into(), None));
        }
        t.vars.push(("SANDGATE_TELEGRAM_TOKEN".into(), None));
        if managed {
            t.vars.push((VAR.into(), Some(sys.path().into())));
        }
        start_daemon(&t);
        fake.push_message(CHAT, "bob", "/allow wide.example global");
        let rules =
            |t: &DaemonEnv| t.json(&["rules", "--json"]).as_array().cloned().unwrap_or_default();
        if managed {
            let reply = fake.wait_call("sendMessage", |b| {
                body_text(b).contains("blocked by your organisation's policy")
            });
            assert!(body_text(&reply.body).contains("wide.example"), "{}", reply.body);
            assert!(rules(&t).is_empty());
        } else {
            fake.wait_call("sendMessage", |b| body_text(b).contains("no request was waiting"));
            assert_eq!(rules(&t).len(), 1, "control");
        }
    }
}

/// `[filesystem] locked = true`: `config add-path` is refused with the organisation's words,
/// and a writable path already in the user's file is not among the writable paths. Control:
/// without the managed file both widen.
#[test]
fn locked_walls_refuse_config_add_path_and_set_aside_the_users_paths() {
    if sandgate_tests::skip_unless(sandgate_tests::is_root(), "root (a root-owned managed file)") {
        return;
    }
    let sys = System::new("[filesystem]\nlocked = true\n");
    for managed in [false, true] {
        let t = DaemonEnv::new("");
        let (mine, added) = (t.env.root.path().join("mine"), t.env.root.path().join("added"));
        std::fs::create_dir_all(&mine).unwrap();
        std::fs::create_dir_all(&added).unwrap();
        std::fs::write(
            t.env.config_home().join("sandgate/config.toml"),
            format!("[filesystem]\nallow_write = [\"{}\"]\n", mine.display()),
        )
        .unwrap();
        let sg = |args: &[&str]| {
            let mut c = t.cmd();
            if managed {
                c.env(VAR, sys.path());
            }
            c.args(args).output().unwrap()
        };
        let out = sg(&["config", "add-path", added.to_str().unwrap()]);
        let listed = text(&sg(&["config", "list-paths"]).stdout);
        if managed {
            let stderr = text(&out.stderr);
            assert!(!out.status.success(), "{stderr}");
            assert!(stderr.contains("blocked by your organisation's policy"), "{stderr}");
            assert!(!listed.contains(mine.to_str().unwrap()), "{listed}");
        } else {
            assert!(out.status.success(), "control: {}", text(&out.stderr));
            assert!(listed.contains(mine.to_str().unwrap()), "control: {listed}");
        }
    }
}

/// The managed-file examples of the book (fenced as `toml managed`) parse with the managed
/// file's own parser, so a key renamed there cannot leave the documentation behind.
#[test]
fn every_managed_example_in_the_book_parses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut blocks = 0;
    for page in ["docs/teams.md", "docs/configuration.md"] {
        let text = std::fs::read_to_string(root.join(page)).unwrap();
        let mut open: Option<String> = None;
        for line in text.lines() {
            match (&mut open, line.trim_start()) {
                (None, "```toml managed") => open = Some(String::new()),
                (Some(body), l) if l.starts_with("```") => {
                    let parsed = sandgate_config::Managed::parse(Path::new(page), body, None);
                    assert!(parsed.is_ok(), "{page}: {}", parsed.unwrap_err());
                    blocks += 1;
                    open = None;
                }
                (Some(body), _) => {
                    body.push_str(line);
                    body.push('\n');
                }
                (None, _) => {}
            }
        }
    }
    assert_eq!(blocks, 2, "the managed examples were not found");
}
