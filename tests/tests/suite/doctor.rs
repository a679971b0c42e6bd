//! `sandgate doctor` end to end (issue 32.5): the JSON shape root and rootless, with the kernel
//! probes passing on this machine and leaving nothing behind; a broken configuration file (the
//! global one, another project's) failing it with file:line:column; a foreign `sandbox-net`
//! first on `PATH` failing it (control: the links `install` made pass); the Claude hook and the
//! completions `install` writes; Telegram reachability against the fake Bot API (control: a
//! wrong token).
//!
//! Each check is made to fail with its message and fix in the daemon crate's unit tests
//! (`doctor::tests`), over facts; here the prober meets the real system.

use std::path::Path;
use std::process::Command;

use sandgate_tests::{Env, sandgate_bin};
use serde_json::Value;

use crate::support::sandbox::{Scratch, Who, both};

const CHECKS: &[&str] = &[
    "user_namespaces",
    "landlock",
    "seccomp",
    "overlayfs",
    "capture",
    "network",
    "sandbox_links",
    "daemon",
    "config",
    "caches",
    "telegram",
    "claude_hook",
    "completions",
];

const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `sandgate doctor --json` run by `cmd`: exit status, the document, stderr.
fn doctor(mut cmd: Command) -> (Option<i32>, Value, String) {
    let out = cmd.args(["doctor", "--json"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code(), v, stderr)
}

/// The check `name` of a doctor document.
fn check<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no check {name} in {v:#}"))
}

fn detail(v: &Value, name: &str) -> String {
    check(v, name)["detail"].as_str().unwrap_or_default().to_owned()
}

both!(every_check_answers_and_a_broken_config_fails_with_its_line);

fn every_check_answers_and_a_broken_config_fails_with_its_line(who: &Who) {
    let s = Scratch::new(who);
    let (code, v, stderr) = doctor(s.program(&sandgate_bin()));
    assert_eq!(code, Some(0), "{v:#}\n{stderr}");
    assert_eq!(v["ok"], true);
    let names: Vec<&str> =
        v["checks"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, CHECKS);
    for c in v["checks"].as_array().unwrap() {
        let status = c["status"].as_str().unwrap();
        assert!(["ok", "warn"].contains(&status), "{c}");
        assert!(!c["detail"].as_str().unwrap().is_empty(), "{c}");
        assert_eq!(c["fix"].is_null(), status == "ok", "a fix exactly for what is not ok: {c}");
    }
    // This machine has what a launch needs, root or not.
    for name in ["user_namespaces", "seccomp", "overlayfs", "capture", "config"] {
        assert_eq!(check(&v, name)["status"], "ok", "{name}: {v:#}");
    }
    assert_ne!(check(&v, "network")["status"], "fail", "{v:#}");
    // The probes' directories are gone, and none is taken for a cache layer.
    let data = s.home.join(".local/share/sandgate");
    let left: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".doctor"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(detail(&v, "caches").contains("0 set(s) of layers"), "{v:#}");

    // The global file broken: a launch would fail; doctor says where and how to fix it.
    let global = s.home.join(".config/sandgate/config.toml");
    std::fs::write(&global, "[network]\nallow = [\"a.test\",\n  \"*.com\"]\n").unwrap();
    let (code, v, _) = doctor(s.program(&sandgate_bin()));
    assert_eq!(code, Some(1), "{v:#}");
    assert_eq!(v["ok"], false);
    let c = check(&v, "config");
    assert_eq!(c["status"], "fail", "{c}");
    let at = format!("{}:3:3:", global.display());
    assert!(c["detail"].as_str().unwrap().contains(&at), "{c}");
    assert!(c["fix"].as_str().unwrap().contains("registrable domain"), "{c}");
    let out = s.program(&sandgate_bin()).arg("doctor").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(text.contains("FAIL  config") && text.contains(&at), "{text}");
    assert!(text.ends_with("a launch here would fail: 1 check(s) failed\n"), "{text}");

    // Another project's file: a launch there would fail.
    std::fs::write(&global, "# config\n").unwrap();
    let other = s.home.join(".config/sandgate/projects/0123456789abcdef.toml");
    std::fs::create_dir_all(other.parent().unwrap()).unwrap();
    std::fs::write(&other, "[netwrok]\n").unwrap();
    let (code, v, _) = doctor(s.program(&sandgate_bin()));
    assert_eq!(code, Some(1), "{v:#}");
    let d = detail(&v, "config");
    assert!(d.contains(&format!("{}:1:2:", other.display())), "{d}");
    assert!(d.contains("another project") && d.contains("unknown field"), "{d}");
}

both!(the_links_and_the_hook_install_makes_pass_and_a_foreign_wrapper_fails);

fn the_links_and_the_hook_install_makes_pass_and_a_foreign_wrapper_fails(who: &Who) {
    let s = Scratch::new(who);
    let bin = s.root.join("bin");
    let claude = s.home.join(".claude");
    let with = |path: &str| {
        let mut c = s.program(&sandgate_bin());
        c.env("PATH", path).env("CLAUDE_CONFIG_DIR", &claude).env("SHELL", "/bin/bash");
        c
    };
    let path = format!("{}:{SYSTEM_PATH}", bin.display());
    // Before install: the links and completions are missing, the hook is not registered.
    let (_, v, _) = doctor(with(&path));
    assert_eq!(check(&v, "sandbox_links")["status"], "warn", "{v:#}");
    assert!(detail(&v, "sandbox_links").contains("not on PATH: sandbox-run"), "{v:#}");
    assert!(detail(&v, "claude_hook").starts_with("not registered"), "{v:#}");
    assert_eq!(check(&v, "completions")["status"], "warn", "{v:#}");
    assert!(detail(&v, "completions").contains("no bash completions"), "{v:#}");

    let out =
        with(&path).args(["install", "--dir", bin.to_str().unwrap(), "--claude"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, v, _) = doctor(with(&path));
    assert_eq!(code, Some(0), "{v:#}");
    assert_eq!(check(&v, "sandbox_links")["status"], "ok", "{v:#}");
    assert!(detail(&v, "sandbox_links").contains(&format!("in {}", bin.display())), "{v:#}");
    assert_eq!(check(&v, "claude_hook")["status"], "ok", "{v:#}");
    let settings = claude.join("settings.json");
    assert_eq!(detail(&v, "claude_hook"), format!("registered in {}", settings.display()));
    let completions = s.home.join(".local/share/bash-completion/completions/sandgate");
    let d = detail(&v, "completions");
    assert!(d.contains(&format!("{} is current", completions.display())), "{d}");
    // Whether bash reads it depends on the bash-completion package being there.
    let reader = Path::new("/usr/share/bash-completion/bash_completion").is_file();
    let want = if reader { "ok" } else { "warn" };
    assert_eq!(check(&v, "completions")["status"], want, "{v:#}");

    // A `sandbox-net` of someone else's first on PATH: what an agent runs "sandboxed" would be
    // that program. The links above are the control: they pass.
    let evil = s.root.join("evil");
    std::fs::create_dir(&evil).unwrap();
    std::fs::write(evil.join("sandbox-net"), "#!/bin/sh\nexec \"$@\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(evil.join("sandbox-net"), std::fs::Permissions::from_mode(0o755))
        .unwrap();
    let (code, v, _) = doctor(with(&format!("{}:{path}", evil.display())));
    assert_eq!(code, Some(1), "{v:#}");
    let c = check(&v, "sandbox_links");
    assert_eq!(c["status"], "fail", "{c}");
    let named = format!("sandbox-net is {}", evil.join("sandbox-net").display());
    assert!(c["detail"].as_str().unwrap().contains(&named), "{c}");

    // A settings file Claude Code cannot parse.
    std::fs::write(&settings, "{").unwrap();
    let (_, v, _) = doctor(with(&path));
    assert_eq!(check(&v, "claude_hook")["status"], "warn", "{v:#}");
    assert!(detail(&v, "claude_hook").contains("not valid JSON"), "{v:#}");
}

/// The Bot API answering as the bot, and (control) refusing a wrong token.
#[test]
fn telegram_reachability_names_the_bot_or_says_why_not() {
    use sandgate_test_support::telegram::{FakeTelegram, TOKEN};
    let fake = FakeTelegram::start();
    let env = Env::new();
    let dir = env.config_home().join("sandgate");
    std::fs::create_dir_all(&dir).unwrap();
    let token = env.root.path().join("token");
    let config = format!(
        "[telegram]\ntoken_file = \"{}\"\nchats = [5]\napi_url = \"{}\"\n",
        token.display(),
        fake.url
    );
    std::fs::write(dir.join("config.toml"), config).unwrap();
    let run = |secret: &str| {
        std::fs::write(&token, format!("{secret}\n")).unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut c = env.cmd();
        for v in
            ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"]
        {
            c.env_remove(v);
        }
        c.env_remove("SANDGATE_TELEGRAM_TOKEN");
        doctor(c).1
    };
    use std::os::unix::fs::PermissionsExt as _;
    let v = run(TOKEN);
    assert_eq!(check(&v, "telegram")["status"], "ok", "{v:#}");
    assert_eq!(detail(&v, "telegram"), "the Bot API answers as @sandgate_test_bot");
    let v = run("654321:WRONG-token");
    assert_eq!(check(&v, "telegram")["status"], "warn", "{v:#}");
    let d = detail(&v, "telegram");
    assert!(d.starts_with("the Bot API does not answer") && !d.contains("WRONG"), "{d}");
}

both!(a_kernel_refusing_user_namespaces_fails_it_with_the_settings_to_change);

/// The kernel probes are tried, not read from settings: under a seccomp filter that refuses new
/// user namespaces (as a kernel with them disabled answers), the user namespace check fails and
/// says which settings allow them, the overlay is not tried, and doctor exits 1 — for root too,
/// whose launches make a user namespace as well. (Control: the same run without the filter, in
/// the first test, passes.)
fn a_kernel_refusing_user_namespaces_fails_it_with_the_settings_to_change(who: &Who) {
    use crate::support::sandbox::{NO_USERNS, SECCOMP_PY};
    let s = Scratch::new(who);
    let wrapper = s.root.join("no_userns.py");
    std::fs::write(&wrapper, format!("{SECCOMP_PY}{NO_USERNS}")).unwrap();
    let mut cmd = s.program(Path::new("python3"));
    cmd.arg(&wrapper).arg(sandgate_bin());
    let (code, v, stderr) = doctor(cmd);
    assert_eq!(code, Some(1), "{v:#}\n{stderr}");
    let c = check(&v, "user_namespaces");
    assert_eq!(c["status"], "fail", "{c}");
    let d = c["detail"].as_str().unwrap();
    assert!(d.starts_with("no launch can start: unshare(user, mount): EPERM"), "{d}");
    let fix = c["fix"].as_str().unwrap();
    assert!(fix.contains("sysctl") || fix.contains("unshare(CLONE_NEWUSER)"), "{c}");
    assert_eq!(check(&v, "overlayfs")["status"], "warn", "{v:#}");
    assert_eq!(detail(&v, "overlayfs"), "not tried: no user namespace");
    // Rootless, the network is made in a user namespace of its own, refused the same way.
    if who.rootless {
        assert_eq!(check(&v, "network")["status"], "fail", "{v:#}");
    }
}
