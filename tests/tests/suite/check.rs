//! `sandgate check` against a table of hosts and patterns, and configuration errors end to end.
//!
//! NUL bytes cannot be passed in argv; they are covered by the config crate's host tests.

use std::process::Command;

use crate::support::dns::no_dns;
use sandgate_tests::Env;

/// `sandgate` in `env`, resolving names with a DNS server that is not there: `check` resolves
/// the names it would let through (issue 32), and these are not the test's to resolve.
fn cmd(env: &Env) -> Command {
    let mut c = env.cmd();
    c.env("SANDGATE_DNS_SERVER", no_dns());
    c
}

const CONFIG: &str = r#"
[network]
allow = [
  "example.com",
  "*.wild.test",
  "api.port.test:8443",
  "10.1.2.3",
  "192.168.50.0/24",
  "[2001:db8::1]",
  "bücher.example",
  "127.0.0.1:9000",
]
deny = ["bad.wild.test", "*.evil.wild.test", "10.1.2.3:22"]
"#;

/// (target, extra args, expected exit status: 0 allow, 1 deny, 3 ask, 2 invalid)
const ROWS: &[(&str, &[&str], i32)] = &[
    // exact names, case, trailing dot, ports, URLs
    ("example.com", &[], 0),
    ("EXAMPLE.COM", &[], 0),
    ("example.com.", &[], 0),
    ("example.com:80", &[], 0),
    ("https://example.com/x?y", &[], 0),
    ("http://Example.com:8080/", &[], 0),
    ("www.example.com", &[], 3),
    ("evilexample.com", &[], 3),
    ("example.com.evil.org", &[], 3),
    ("example.co", &[], 3),
    // wildcard depth and apex
    ("wild.test", &[], 3),
    ("a.wild.test", &[], 0),
    ("a.b.c.wild.test", &[], 0),
    ("A.WILD.TEST.", &[], 0),
    ("evilwild.test", &[], 3),
    ("wild.test.attacker.com", &[], 3),
    ("xwild.test", &[], 3),
    // deny wins, exactly as written
    ("bad.wild.test", &[], 1),
    ("BAD.wild.test.", &[], 1),
    ("x.bad.wild.test", &[], 0),
    ("evil.wild.test", &[], 0),
    ("x.evil.wild.test", &[], 1),
    ("a.b.evil.wild.test", &[], 1),
    // ports on patterns
    ("api.port.test:8443", &[], 0),
    ("https://api.port.test:8443/v1", &[], 0),
    ("api.port.test:443", &[], 3),
    ("api.port.test", &[], 3),
    ("http://api.port.test/", &[], 3),
    // IPv4 literals in every numeric form
    ("10.1.2.3", &[], 0),
    ("10.1.2.3:22", &[], 1),
    ("167838211", &[], 0),
    ("0xa.1.2.3", &[], 0),
    ("012.1.2.3", &[], 0),
    ("10.1.515", &[], 0),
    ("0x0a010203", &[], 0),
    ("10.1.2.4", &[], 3),
    ("192.168.50.7", &[], 0),
    ("192.168.50.255:8080", &[], 0),
    ("192.168.51.7", &[], 3),
    ("127.1:9000", &[], 0),
    ("2130706433:9000", &[], 0),
    ("0x7f.1:9000", &[], 0),
    ("0177.0.0.1:9000", &[], 0),
    ("127.0.0.1:9001", &[], 3),
    ("127.1", &[], 3),
    ("localhost:9000", &[], 3),
    // IPv6, brackets, mapped IPv4
    ("[2001:db8::1]", &[], 0),
    ("[2001:DB8:0::1]:443", &[], 0),
    ("https://[2001:db8::1]:8443/", &[], 0),
    ("[2001:db8::2]", &[], 3),
    ("[::ffff:10.1.2.3]", &[], 0),
    ("[::ffff:a01:203]:22", &[], 1),
    ("[::1]:9000", &[], 3),
    // IDN
    ("bücher.example", &[], 0),
    ("xn--bcher-kva.example", &[], 0),
    ("BÜCHER.example", &[], 0),
    ("buecher.example", &[], 3),
    // malformed
    ("exa\rmple.com", &[], 2),
    ("example.com\r\nHost: evil", &[], 2),
    // control and invisible characters anywhere, the path of a URL included (issue 14.8)
    ("https://example.com/\r\n", &[], 2),
    ("https://example.com/x\ty", &[], 2),
    ("https://example.com/\u{1b}[2J", &[], 2),
    ("https://example.com/\u{9b}31m", &[], 2),
    ("https://example.com/\u{202e}fdp.exe", &[], 2),
    ("https://example.com/\u{200b}", &[], 2),
    ("example.com:443\n", &[], 2),
    ("[fe80::1%eth0]", &[], 2),
    ("fe80::1%25lo", &[], 2),
    ("user@example.com", &[], 2),
    ("https://user:pw@example.com/", &[], 2),
    ("example.com@evil.org", &[], 2),
    ("example.com:0", &[], 2),
    ("example.com:99999", &[], 2),
    ("example.com:-1", &[], 2),
    ("256.1.2.3", &[], 2),
    ("1.2.3.4.5", &[], 2),
    ("a..example.com", &[], 2),
    ("[::1", &[], 2),
    ("ex ample.com", &[], 2),
    ("ftp://example.com", &[], 2),
    ("-bad.example.com", &[], 2),
    // tiers and flags
    ("example.com", &["--tier", "run"], 1),
    ("a.wild.test", &["--tier", "build"], 0),
    ("example.com", &["--deny", "example.com"], 1),
    ("www.example.com", &["--allow", "www.example.com"], 0),
    ("example.com", &["--net", "none"], 1),
    ("x.wild.test", &["--deny", "*.wild.test"], 1),
];

#[test]
fn check_agrees_with_the_table() {
    let env = Env::new();
    let dir = env.config_home().join("sandgate");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), CONFIG).unwrap();
    let long = "a".repeat(256);
    let mut rows: Vec<(&str, &[&str], i32)> = ROWS.to_vec();
    rows.push((&long, &[], 2));
    assert!(rows.len() >= 60);
    let mut failures = Vec::new();
    for (target, extra, want) in rows {
        let out = cmd(&env).arg("check").arg(target).args(extra).output().unwrap();
        let got = out.status.code().unwrap_or(-1);
        if got != want {
            failures.push(format!(
                "{target:?} {extra:?}: want {want}, got {got}\n  stdout: {}  stderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(failures.is_empty(), "{} rows disagree:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn check_names_the_rule_and_speaks_json() {
    let env = Env::new();
    let dir = env.config_home().join("sandgate");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), CONFIG).unwrap();
    let out = cmd(&env).args(["check", "x.evil.wild.test", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["decision"], "deny");
    assert_eq!(v["rule"]["pattern"], "*.evil.wild.test");
    assert!(v["rule"]["source"].as_str().unwrap().ends_with("config.toml:13"), "{v}");
    let out = cmd(&env).args(["check", "a.wild.test"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("allow a.wild.test:443\n  rule: *.wild.test ("), "{text}");
}

#[test]
fn malformed_config_gives_file_line_column_and_help() {
    let env = Env::new();
    let dir = env.config_home().join("sandgate");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), "[network]\nallow = [\"ok.test\", \"*.com\"]\n")
        .unwrap();
    let out = cmd(&env).args(["check", "ok.test"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("config.toml:2:21:"), "{err}");
    assert!(err.contains("help:"), "{err}");
    assert!(err.lines().count() < 25, "one screen: {err}");

    std::fs::write(dir.join("config.toml"), "[netwrok]\nallow = []\n").unwrap();
    let out = cmd(&env).args(["config", "check"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("config.toml:1:2:") && err.contains("unknown field"), "{err}");

    // Issue 32.4: an unclosed string is placed where it opens (the parser stops a line later),
    // and a pattern with a path says patterns have none.
    std::fs::write(
        dir.join("config.toml"),
        "[network]\nallow = [\"a.test\", \"b.test]\ndeny = []\n",
    )
    .unwrap();
    let out = env.cmd().args(["config", "check"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(err.contains("config.toml:2:20: unclosed string"), "{err}");
    std::fs::write(dir.join("config.toml"), "[network]\nallow = [\"pypi.org/simple\"]\n").unwrap();
    let out = env.cmd().args(["check", "pypi.org"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err.contains(
            "config.toml:2:10: invalid domain pattern \"pypi.org/simple\": a pattern has no path"
        ),
        "{err}"
    );
    assert!(err.contains("write `pypi.org`") && err.contains("[[http_rules]]"), "{err}");
}

/// Issue 32.4: the per-directory file applied only in the exact directory it was made for, so a
/// project's allowlist was lost in `src/`. The nearest configured ancestor's file applies, and
/// `check`, `explain` and `config check` name it.
#[test]
fn a_projects_configuration_applies_in_its_subdirectories_and_check_names_it() {
    let env = Env::new();
    let home = env.root.path().join("home");
    let demo = home.join("code/demo");
    let deep = demo.join("src/deep");
    let other = home.join("code/other");
    for d in [&deep, &other] {
        std::fs::create_dir_all(d).unwrap();
    }
    let demo = demo.canonicalize().unwrap();
    let file = env
        .config_home()
        .join("sandgate/projects")
        .join(format!("{}.toml", sandgate_config::project_key(&demo)));
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "[network]\nallow = [\"proj.test\"]\n").unwrap();
    // A repository inside the project (a sandbox writing it could make one) changes nothing.
    std::fs::create_dir(demo.join("src/.git")).unwrap();
    let check = |cwd: &std::path::Path| {
        let out = env.cmd().current_dir(cwd).args(["check", "proj.test"]).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let named = format!("per-directory {} (for {})", file.display(), demo.display());
    for cwd in [&demo, &deep] {
        let (code, text) = check(cwd);
        assert_eq!(code, Some(0), "{}: {text}", cwd.display());
        assert!(text.contains(&named), "{text}");
        assert!(text.contains(&format!("{}:2", file.display())), "the rule's line: {text}");
    }
    // Control: outside the project the same question is open, and no file applies.
    let (code, text) = check(&other);
    assert_eq!(code, Some(3), "{text}");
    assert!(text.contains(&format!("(for {}) (absent)", other.canonicalize().unwrap().display())));

    let out = env.cmd().current_dir(&deep).args(["check", "proj.test", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let files = &v["config_files"];
    assert_eq!(files[0]["layer"], "global");
    assert_eq!(files[0]["loaded"], false);
    assert_eq!(files[1]["layer"], "per-directory");
    assert_eq!(files[1]["loaded"], true);
    assert_eq!(files[1]["path"], file.to_str().unwrap());
    assert_eq!(files[1]["directory"], demo.to_str().unwrap());
    let out = env.cmd().current_dir(&deep).args(["explain", "--tier", "net", "--json"]).output();
    let v: serde_json::Value = serde_json::from_slice(&out.unwrap().stdout).unwrap();
    assert_eq!(v["config_files"], *files, "{v}");
    assert!(v["allow"][0].as_str().unwrap().starts_with("proj.test ("), "{v}");
    let out = env.cmd().current_dir(&deep).args(["explain", "--tier", "net"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&named), "{text}");
    let out = env.cmd().current_dir(&deep).args(["config", "check"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("present  {}", file.display())), "{text}");
    let project = text.lines().find(|l| l.starts_with("project ")).unwrap_or_default();
    assert_eq!(project.split_whitespace().nth(1), demo.to_str(), "{text}");
    // Writing commands edit the file that applies, not a new one for the subdirectory.
    let out = env.cmd().current_dir(&deep).args(["config", "add-path", "."]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("to {}", file.display())), "{text}");
}

#[test]
fn config_paths_round_trip() {
    let env = Env::new();
    let work = env.root.path().join("home/proj");
    std::fs::create_dir_all(work.join("cache")).unwrap();
    let run = |args: &[&str]| {
        let out = cmd(&env).current_dir(&work).args(args).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (code, out) = run(&["config", "add-path", "cache"]);
    assert_eq!(code, Some(0), "{out}");
    let (_, out) = run(&["config", "add-path", "/opt", "--global"]);
    assert!(out.contains("added /opt"), "{out}");
    let (code, out) = run(&["config", "list-paths"]);
    assert_eq!(code, Some(0));
    let cache = work.canonicalize().unwrap().join("cache");
    assert!(out.contains("current directory"), "{out}");
    assert!(out.contains(&format!("    {}", cache.display())), "{out}");
    assert!(out.contains("  global (") && out.contains("  per-directory ("), "{out}");
    let (_, json) = run(&["config", "list-paths", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let sources: Vec<&str> =
        v.as_array().unwrap().iter().map(|i| i["source"].as_str().unwrap()).collect();
    assert_eq!(sources, ["current directory", "global", "per-directory"]);
    let (code, _) = run(&["config", "remove-path", "cache"]);
    assert_eq!(code, Some(0));
    let (code, _) = run(&["config", "remove-path", "cache"]);
    assert_eq!(code, Some(1));
    let (code, out) = run(&["tiers"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("run") && out.contains("net") && out.contains("build"), "{out}");
}

#[test]
fn the_hook_without_input_makes_no_decision() {
    let env = Env::new();
    let out =
        cmd(&env).args(["hook", "claude"]).stdin(std::process::Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn a_missing_configured_path_is_a_warning_not_a_broken_launch() {
    let env = Env::outside_tmp();
    let work = env.root.path().join("home/proj");
    std::fs::create_dir_all(&work).unwrap();
    let gone = env.root.path().join("gone");
    let run = |args: &[&str]| cmd(&env).current_dir(&work).args(args).output().unwrap();
    let out = run(&["config", "add-path", gone.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not exist"), "add-path warns: {err}");
    let out = run(&["config", "check"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("skipping writable path") && text.contains("remove-path"), "{text}");
    // The launch goes on without it, saying where it came from and how to drop it.
    if sandgate_tests::skip_unless(sandgate_tests::is_root(), "root (a build launch)") {
        return;
    }
    let out = run(&["build", "--", "true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains(&format!("skipping writable path {}", gone.display())), "{err}");
    assert!(err.contains(".toml:") && err.contains("sandgate config remove-path"), "{err}");
}

#[test]
fn config_edit_never_leaves_a_broken_file() {
    let env = Env::new();
    let file = env.config_home().join("sandgate/config.toml");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let good = "[network]\nallow = [\"ok.test\"]\n";
    std::fs::write(&file, good).unwrap();
    // An "editor" that writes a broken file; without a terminal there is no one to ask, so the
    // edit is kept aside and the file restored byte for byte.
    let out = env
        .cmd()
        .args(["config", "edit", "--global"])
        .env("VISUAL", "printf '[netwrok]\\n' >")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("unknown field") && err.contains("is unchanged"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), good);
    let rejected = file.with_extension("toml.rejected");
    assert_eq!(std::fs::read_to_string(rejected).unwrap(), "[netwrok]\n");
    // A valid edit lands.
    let out = env
        .cmd()
        .args(["config", "edit", "--global"])
        .env("VISUAL", "printf '[network]\\nallow = []\\n' >")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "[network]\nallow = []\n");
}

/// Issue 32.4: a new file from `config edit` shows the presets, the cache modes and the common
/// keys (the global one also its own sections), names the project it is for, and loads as is.
#[test]
fn config_edit_starts_from_a_template_of_the_common_keys() {
    let env = Env::new();
    let work = env.root.path().join("home/proj");
    std::fs::create_dir_all(&work).unwrap();
    let edit = |global: bool| {
        let mut c = env.cmd();
        c.current_dir(&work).args(["config", "edit"]).env("VISUAL", "true");
        if global {
            c.arg("--global");
        }
        let out = c.stdin(std::process::Stdio::null()).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        let file = text.strip_prefix("ok: ").and_then(|t| t.strip_suffix(" is valid\n")).unwrap();
        std::fs::read_to_string(file).unwrap()
    };
    let project = edit(false);
    let canonical = work.canonicalize().unwrap();
    assert!(
        project.starts_with(&format!(
            "# Per-directory configuration for {} and its subdirectories\n",
            canonical.display()
        )),
        "{project}"
    );
    for want in [
        "# presets = [\"registries\"]",
        "\"registries\", \"rust\", \"python\", \"node\", \"github\"",
        "# caches = \"project\"",
        "\"shared\", \"off\"",
        "# default_ports = ",
        "# git_writable = ",
        "# pass = ",
        "# [tiers.build-offline]",
    ] {
        assert!(project.contains(want), "{want}: {project}");
    }
    assert!(!project.contains("[telegram]"), "global-only sections: {project}");
    let global = edit(true);
    for want in ["# [daemon]", "# [telegram]", "# [proxy]", "# caches = \"project\""] {
        assert!(global.contains(want), "{want}: {global}");
    }
}

#[test]
fn tiers_and_explain_show_the_allowlist_in_force() {
    let env = Env::new();
    let dir = env.config_home().join("sandgate");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.toml"),
        "[network]\nallow = [\"ok.test\"]\ndeny = [\"no.test\"]\n",
    )
    .unwrap();
    let out = cmd(&env).args(["tiers"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("allow: ok.test (") && text.contains("deny:  no.test ("), "{text}");
    let out = cmd(&env).args(["tiers", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let net = v.as_array().unwrap().iter().find(|t| t["name"] == "net").unwrap();
    assert!(net["allow"][0].as_str().unwrap().starts_with("ok.test ("), "{net}");
    let run = v.as_array().unwrap().iter().find(|t| t["name"] == "run").unwrap();
    assert_eq!(run["allow"], serde_json::json!([]), "no network, no list: {run}");
    let out = cmd(&env).args(["explain", "--tier", "net", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["deny"][0].as_str().unwrap().starts_with("no.test ("), "{v}");
}

#[test]
fn default_ports_narrow_patterns_without_a_port_and_check_says_so() {
    let env = Env::new();
    let dir = env.config_home().join("sandgate");
    std::fs::create_dir_all(&dir).unwrap();
    let config = "[network]\nallow = [\"api.ports.test\", \"git.ports.test:22\"]\n";
    std::fs::write(dir.join("config.toml"), config).unwrap();
    let check = |t: &str| {
        let out = cmd(&env).args(["check", t]).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    // Off by default: a pattern without a port matches every port.
    assert_eq!(check("api.ports.test:5432").0, Some(0));
    std::fs::write(dir.join("config.toml"), format!("{config}default_ports = [80, 443]\n"))
        .unwrap();
    assert_eq!(check("api.ports.test:443").0, Some(0));
    assert_eq!(check("http://api.ports.test/").0, Some(0));
    assert_eq!(check("git.ports.test:22").0, Some(0));
    let (code, text) = check("api.ports.test:5432");
    assert_eq!(code, Some(3), "{text}");
    assert!(text.contains("not matched: api.ports.test ("), "{text}");
    assert!(text.contains("default_ports = [80, 443]"), "{text}");
    assert!(text.contains("allow api.ports.test:5432 to open this one"), "{text}");
    let out = cmd(&env).args(["check", "api.ports.test:5432", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["default_ports"], serde_json::json!([80, 443]));
    assert!(v["narrowed_by_default_ports"].as_str().unwrap().starts_with("api.ports.test"), "{v}");
    // A flag written with the port opens it.
    let out =
        cmd(&env).args(["check", "api.ports.test:5432", "--allow", "api.ports.test:5432"]).output();
    assert_eq!(out.unwrap().status.code(), Some(0));
}
