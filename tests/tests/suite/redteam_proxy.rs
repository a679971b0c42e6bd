//! Red team, end to end: what the proxy's secret injection promises ("a secret never reaches the
//! sandbox") attacked from inside real sandboxes of every tier. The other attacks on the proxy
//! (interception, HTTP rules, the DNS stub, the address guard) are library tests in
//! `proxy/tests/suite/redteam_*.rs`, where the traffic can be inspected on both sides.

use std::os::unix::fs::PermissionsExt as _;

use crate::support::daemon::{DaemonEnv, can_sandbox};
use crate::support::intercept::tls_origin;
use sandgate_tests::skip_unless;

/// A secret's source is a secret wherever it is: a `from_env` variable whose name does not look
/// secret (it would pass the launcher's name filter), and a `from_file` outside the home
/// directory that anyone may read, must not be readable inside any tier; nor the CA's key. The
/// values are only in the launcher's environment and in the file; before the fix both were
/// printed by the sandbox.
#[test]
fn secret_sources_and_the_ca_key_are_out_of_reach_in_every_tier() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let tag = format!("{}-{}", std::process::id(), nanos.as_nanos());
    let value_env = format!("rt-env-value-{tag}");
    let value_file = format!("rt-file-value-{tag}");
    let var = format!("RT_PLAIN_VALUE_{}", std::process::id());
    let mut t = DaemonEnv::new("");
    let root = t.env.root.path().to_path_buf();
    let plain = root.join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let key_file = plain.join("keyfile");
    std::fs::write(&key_file, format!("{value_file}\n")).unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let config = format!(
        r#"[[secrets]]
name = "fromenv"
hosts = ["127.0.0.1:9"]
env = "RT_PLACEHOLDER"
from_env = "{var}"

[[secrets]]
name = "fromfile"
hosts = ["127.0.0.1:9"]
from_file = "{key}"
"#,
        key = key_file.display()
    );
    std::fs::write(t.env.config_home().join("sandgate/config.toml"), config).unwrap();
    t.vars.push((var.clone(), Some(value_env.clone())));
    let ca_dir = root.join("data/sandgate/ca");
    let script = format!(
        "tr '\\0' '\\n' < /proc/self/environ; cat {key} 2>&1; cat {ca}/ca-key.pem 2>&1; \
         ls -la {ca} 2>&1; echo ==ran==",
        key = key_file.display(),
        ca = ca_dir.display()
    );
    // net first: it makes the CA (interception is in use).
    for tier in ["net", "run", "build"] {
        let out = t.cmd().args([tier, "--", "sh", "-c", &script]).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let all = format!("{stdout}\n--- stderr ---\n{stderr}");
        assert!(stdout.contains("==ran=="), "{tier}: the command did not run:\n{all}");
        assert!(!all.contains(&value_env), "{tier}: the from_env value is inside:\n{all}");
        assert!(!all.contains(&var), "{tier}: the from_env variable is inside:\n{all}");
        assert!(!all.contains(&value_file), "{tier}: the from_file value is inside:\n{all}");
        assert!(!all.contains("PRIVATE KEY"), "{tier}: the CA key is inside:\n{all}");
        if tier == "net" {
            // Control: the placeholder is there, and the CA exists outside.
            assert!(stdout.contains("RT_PLACEHOLDER=sandgate-placeholder-fromenv"), "{all}");
            assert!(ca_dir.join("ca-key.pem").exists(), "no CA was made");
        }
    }
    // Control: outside, the file is readable.
    assert!(std::fs::read_to_string(&key_file).unwrap().contains(&value_file));
}

/// The text between `==name==` and the next marker in the sandbox's output.
fn section<'a>(out: &'a str, name: &str) -> &'a str {
    let start = format!("=={name}==\n");
    let Some(i) = out.find(&start) else { panic!("no section {name} in:\n{out}") };
    let rest = &out[i + start.len()..];
    &rest[..rest.find("\n==").map_or(rest.len(), |j| j + 1)]
}

/// Through the daemon, with curl inside `sandgate net`: an intercepted request that names another
/// site (Host, an absolute-form target) reaches the origin naming the tunnel's host, with the
/// secret; a method override, `..;`, `//` and an h2c upgrade do not walk around the host's rules.
/// (The origin echoes the head it received, the secret redacted.) Before the fixes the origin
/// echoed `Host: evil.example` and the absolute target, and the override and `..;` got a 200.
#[test]
fn intercepted_requests_cannot_name_another_site_or_walk_around_the_rules() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let secret = format!("sk-rt-{}-{}", std::process::id(), nanos.as_nanos());
    let o = tls_origin("127.0.0.1", &secret);
    let t = DaemonEnv::new("");
    let root = t.env.root.path();
    let key = root.join("key");
    std::fs::write(&key, format!("{secret}\n")).unwrap();
    let ca = root.join("origin-ca.pem");
    std::fs::write(&ca, &o.ca_pem).unwrap();
    let p = o.port;
    let config = format!(
        r#"[daemon]
ask_timeout = "1s"

[network]
allow = ["127.0.0.1:{p}"]

[[secrets]]
name = "rt"
hosts = ["127.0.0.1:{p}"]
env = "RT_KEY"
from_file = "{key}"

[[http_rules]]
host = "127.0.0.1:{p}"
allow = ["GET /echo/**"]

[tls]
extra_roots = ["{ca}"]
"#,
        key = key.display(),
        ca = ca.display()
    );
    std::fs::write(t.env.config_home().join("sandgate/config.toml"), &config).unwrap();
    let curl = "curl -sS --max-time 10 --noproxy '' -x http://127.0.0.1:3128";
    let code = "-o /dev/null -w '%{http_code}\\n'";
    let script = format!(
        r#"
echo ==host==; {curl} -H 'Host: evil.example' https://127.0.0.1:{p}/echo/a
echo ==absolute==; {curl} --request-target https://evil.example/echo/b https://127.0.0.1:{p}/echo/b
echo ==override==; {curl} {code} -H 'X-HTTP-Method-Override: DELETE' https://127.0.0.1:{p}/echo/c
echo ==query-override==; {curl} {code} 'https://127.0.0.1:{p}/echo/d?_method=DELETE'
echo ==dotdot-semicolon==; {curl} {code} --path-as-is 'https://127.0.0.1:{p}/echo/..;/admin'
echo ==double-slash==; {curl} {code} --path-as-is 'https://127.0.0.1:{p}/echo//../admin'
echo ==h2c==; {curl} {code} -H 'Connection: Upgrade' -H 'Upgrade: h2c' https://127.0.0.1:{p}/echo/e
echo ==control==; {curl} {code} https://127.0.0.1:{p}/echo/f
echo ==end==
"#
    );
    let out = t.cmd().args(["net", "--", "sh", "-c", &script]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let all = format!("{stdout}\n--- stderr ---\n{stderr}");
    for s in ["host", "absolute"] {
        let echo = section(&stdout, s).to_ascii_lowercase();
        assert!(
            !echo.contains("evil.example"),
            "{s}: the origin was asked for another site: {all}"
        );
        assert!(echo.contains(&format!("host: 127.0.0.1:{p}")), "{s}: {all}");
        assert!(echo.contains("authorization: bearer [[redacted secret]]"), "{s}: {all}");
    }
    assert!(section(&stdout, "absolute").starts_with("GET /echo/b HTTP/1.1"), "{all}");
    for s in ["override", "query-override", "dotdot-semicolon", "double-slash"] {
        assert_eq!(section(&stdout, s), "403\n", "{s}: {all}");
    }
    assert_eq!(section(&stdout, "h2c"), "400\n", "{all}");
    assert_eq!(section(&stdout, "control"), "200\n", "{all}");
    assert!(!all.contains(&secret), "the value reached the sandbox: {all}");
}
