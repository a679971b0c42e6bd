//! Grants and questions end to end (issues 14 and 17): an answer opens the port asked, a project
//! is its repository root, `check` sees live grants, `status` counts only current grants, a
//! killed sandbox's question leaves `pending` at once, and the Telegram bot says why it is off.
//!
//! Every test has its own `Env`, so its own daemon (stopped by `Env`'s drop). Origins are
//! in-process servers on 127.0.0.1.

use std::time::Duration;

use crate::support::daemon::*;
use sandgate_tests::{origin, skip_unless};
use serde_json::{Value, json};

fn ok(out: &std::process::Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Issue 14: answering a question about host:PORT with `sandgate allow host` opened every port
/// of the host. The grant now names the port asked; another port asks again.
#[test]
fn an_answer_opens_the_port_asked_and_no_other() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let t = DaemonEnv::new("[daemon]\nask_timeout = \"2s\"\n");
    let (asked, other) = (origin("asked"), origin("other"));
    let (ua, uo) = (format!("http://127.0.0.1:{asked}/"), format!("http://127.0.0.1:{other}/"));
    let script = format!(
        "{}; while [ ! -e go ]; do sleep 0.02; done; {}; {}",
        curl_sh(&ua),
        curl_sh(&ua),
        curl_sh(&uo)
    );
    let run = t.spawn_net(&[], &["sh", "-c", &script]);
    let q = wait_for_question(&t);
    assert_eq!(q["port"], asked);
    ok(&t.sg(&["allow", "127.0.0.1"]));
    let rules = t.json(&["rules", "--json"]);
    assert_eq!(rules[0]["port"], asked, "{rules:#}");
    let line = rules[0]["line"].as_str().unwrap();
    assert!(line.contains(&format!("127.0.0.1:{asked}")), "{line}");
    std::fs::write(t.proj.join("go"), "").unwrap();
    // The same port again passes; the other port is asked about (and times out: 403).
    let (_, stdout, stderr) = finish(run);
    assert_eq!(stdout, "200\n200\n403\n", "{stderr}");

    // --any-port says otherwise, and `rules` says so.
    ok(&t.sg(&["allow", "127.0.0.9", "--any-port", "--always", "--global"]));
    ok(&t.sg(&["allow", "127.0.0.8:8443", "--always", "--global"]));
    ok(&t.sg(&["allow", "127.0.0.7", "--always", "--global"]));
    let text = ok(&t.sg(&["rules"]));
    assert!(text.contains("127.0.0.9 (any port)"), "{text}");
    assert!(text.contains("127.0.0.8:8443"), "{text}");
    assert!(text.contains("127.0.0.7:443"), "nothing pending, no port: 443: {text}");
    let out = t.sg(&["allow", "127.0.0.6:22", "--any-port", "--always", "--global"]);
    assert_eq!(out.status.code(), Some(2), "refused: {out:?}");
}

/// Issue 17: a project was the exact working directory, so `--always` in `demo` asked again in
/// `demo/src`. It is the repository root, and `rules` shows the directory.
#[test]
fn an_always_answer_covers_the_whole_repository_and_rules_name_it() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let t = DaemonEnv::new("[daemon]\nask_timeout = \"2s\"\n");
    std::fs::create_dir(t.proj.join(".git")).unwrap();
    let sub = t.proj.join("src/deep");
    std::fs::create_dir_all(&sub).unwrap();
    let url = format!("http://127.0.0.1:{}/", origin("hello"));
    let run = t.spawn_net(&[], &curl(&url).iter().map(String::as_str).collect::<Vec<_>>());
    wait_for_question(&t);
    ok(&t.sg(&["allow", "127.0.0.1", "--always"]));
    assert_eq!(finish(run).1, "200\n");
    let rules = t.json(&["rules", "--json"]);
    let root = t.proj.canonicalize().unwrap();
    assert_eq!(rules[0]["target"]["project"], root.to_str().unwrap(), "{rules:#}");
    let text = ok(&t.sg(&["rules"]));
    assert!(text.contains(&format!("project {}", root.display())), "{text}");
    // A sandbox started in a subdirectory passes without a question (one would time out: 403).
    let (_, stdout, stderr) = finish(
        t.cmd()
            .current_dir(&sub)
            .args(["net", "--"])
            .args(curl(&url))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    assert_eq!(stdout, "200\n", "{stderr}");
    // `check` from the subdirectory names the grant as the deciding rule.
    let port = url.trim_end_matches('/').rsplit(':').next().unwrap().to_owned();
    let out = t.cmd().current_dir(&sub).args(["check", &format!("127.0.0.1:{port}")]).output();
    let out = out.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("grant #"), "{text}");
}

/// Issue 32.4: project grants are scoped like the configuration: a configured directory is the
/// project of every directory below it, a repository inside it included.
#[test]
fn a_configured_directory_is_the_project_of_the_repositories_below_it() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let t = DaemonEnv::new("[daemon]\nask_timeout = \"2s\"\n");
    let root = t.proj.canonicalize().unwrap();
    let file = t
        .env
        .config_home()
        .join("sandgate/projects")
        .join(format!("{}.toml", sandgate_config::project_key(&root)));
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "# configured\n").unwrap();
    let (app, other) = (t.proj.join("app"), t.proj.join("other"));
    std::fs::create_dir_all(app.join(".git")).unwrap();
    std::fs::create_dir_all(app.join("src")).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    let port = origin("hello");
    let url = format!("http://127.0.0.1:{port}/");
    let run = t
        .cmd()
        .current_dir(app.join("src"))
        .args(["net", "--"])
        .args(curl(&url))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_question(&t);
    ok(&t.sg(&["allow", "127.0.0.1", "--always"]));
    assert_eq!(finish(run).1, "200\n");
    let rules = t.json(&["rules", "--json"]);
    assert_eq!(rules[0]["target"]["project"], root.to_str().unwrap(), "{rules:#}");
    // Another directory of the project has the grant; a directory outside it does not.
    let check = |cwd: &std::path::Path| {
        let out = t.cmd().current_dir(cwd).args(["check", &format!("127.0.0.1:{port}")]).output();
        out.unwrap().status.code()
    };
    assert_eq!(check(&other), Some(0));
    let outside = t.env.root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    assert_eq!(check(&outside), Some(3), "the grant is the project's, not global");
}

/// Issue 17: `check` said `ask` while a live grant allowed the target.
#[test]
fn check_shows_a_live_grant_as_the_deciding_rule() {
    let mut t = DaemonEnv::new("");
    // `check` resolves the names it would let through; these are not the test's to resolve.
    t.vars.push(("SANDGATE_DNS_SERVER".into(), Some(crate::support::dns::no_dns())));
    ok(&t.sg(&["allow", "granted.example:443", "--always", "--global"]));
    ok(&t.sg(&["deny", "refused.example", "--always", "--global"]));
    // (target, exit status, decision, rule text)
    let rows = [
        ("granted.example:443", 0, "allow", Some("grant #1")),
        ("refused.example:443", 1, "deny", Some("grant #2")),
        // The grant is for 443 only.
        ("granted.example:22", 3, "ask", None),
        ("other.example:443", 3, "ask", None),
    ];
    for (target, code, decision, rule) in rows {
        let out = t.sg(&["check", target, "--json"]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!((out.status.code(), v["decision"].as_str()), (Some(code), Some(decision)));
        match rule {
            Some(r) => {
                let src = v["rule"]["source"].as_str().unwrap_or_default();
                assert!(src.contains(r), "{target}: {v}");
            }
            None => assert!(v["rule"].is_null(), "{target}: {v}"),
        }
    }
    // Revoked: no longer deciding.
    ok(&t.sg(&["revoke", "1"]));
    assert_eq!(t.sg(&["check", "granted.example:443"]).status.code(), Some(3));
}

/// Issue 17: a question whose sandbox was killed stayed in `pending` until it timed out; and
/// `status` counted the grants of ended sandboxes (`grants live: 9` while `rules` listed none).
#[test]
fn a_killed_sandbox_leaves_pending_at_once_and_status_counts_current_grants() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    // Ten minutes: only the sandbox's end can take the question out of `pending` in time.
    let t = DaemonEnv::new("[daemon]\nask_timeout = \"10m\"\n");
    let url = format!("http://127.0.0.1:{}/", origin("hello"));
    start_daemon(&t);
    let mut watch =
        t.cmd().args(["watch", "--json"]).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let events = lines_of(watch.stdout.take().unwrap());
    let mut run = t.spawn_net(&[], &curl(&url).iter().map(String::as_str).collect::<Vec<_>>());
    wait_for_question(&t);
    // `watch` is subscribed once it has seen the question.
    expect_line(&events, Duration::from_secs(20), |l| l.contains(r#""event":"asked""#));
    run.kill().unwrap();
    let _ = run.wait();
    wait_until("the killed sandbox's question leaves pending", Duration::from_secs(20), || {
        pending(&t).is_empty()
    });
    expect_line(&events, Duration::from_secs(10), |l| l.contains(r#""event":"withdrawn""#));
    let _ = watch.kill();
    let _ = watch.wait();

    // A session grant of a sandbox that ended is neither listed nor counted.
    let run = t.spawn_net(&[], &curl(&url).iter().map(String::as_str).collect::<Vec<_>>());
    wait_for_question(&t);
    ok(&t.sg(&["allow", "127.0.0.1", "--session"]));
    assert_eq!(finish(run).1, "200\n");
    // The launcher exits after the daemon's answer to its end: the sandbox is no longer served,
    // and `rules` writes the sandbox rows queued before it reads (no waiting here).
    assert_eq!(t.status()["sandboxes"], json!([]));
    assert_eq!(t.json(&["rules", "--json"]), Value::Array(vec![]));
    let status = t.status();
    assert_eq!(status["counts"]["grants_live"], 0, "{status:#}");
    // The per-sandbox budget counts are in `status --json`.
    assert_eq!(status["budgets"]["questions_per_window"], 20, "{status:#}");
}

/// Issue 17: `telegram off` with chats configured but no token gave no reason. Issue 14: a token
/// in config.toml is warned about; a token file others can read is refused.
#[test]
fn telegram_token_sources_are_explained() {
    let mut t = DaemonEnv::new("[telegram]\nchats = [42]\n");
    t.vars.push(("SANDGATE_TELEGRAM_TOKEN".into(), None));
    start_daemon(&t);
    let status = t.status();
    assert_eq!(status["daemon"]["telegram"], false);
    let why = status["daemon"]["telegram_error"].as_str().unwrap_or_default();
    assert!(why.contains("no bot token") && why.contains("token_file"), "{status:#}");
    let text = ok(&t.sg(&["status"]));
    assert!(text.contains("telegram bot not running:"), "{text}");
    let check = t.sg(&["config", "check"]);
    assert!(String::from_utf8_lossy(&check.stderr).contains("no token"), "{check:?}");

    let cfg = t.env.config_home().join("sandgate/config.toml");
    std::fs::write(&cfg, "[telegram]\nchats = [42]\ntoken = \"123:abc\"\n").unwrap();
    let check = t.sg(&["config", "check"]);
    assert!(check.status.success(), "{check:?}");
    let warned = String::from_utf8_lossy(&check.stderr);
    assert!(warned.contains("token is written in the config file"), "{warned}");
    assert!(!warned.contains("123:abc"), "the token is never shown: {warned}");

    use std::os::unix::fs::PermissionsExt as _;
    let file = t.env.root.path().join("token");
    std::fs::write(&file, "123:abc\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let body = format!("[telegram]\nchats = [42]\ntoken_file = {:?}\n", file.to_str().unwrap());
    std::fs::write(&cfg, body).unwrap();
    let warned = String::from_utf8_lossy(&t.sg(&["config", "check"]).stderr).into_owned();
    assert!(warned.contains("mode 0644") && warned.contains("chmod 600"), "{warned}");
}
