//! Issue 15: secrets the sandbox never sees and HTTP rules per host, through TLS interception
//! of only the hosts that need it. Real clients (curl; Python's urllib and a raw WebSocket
//! handshake when python3 is present) inside `sandgate net`, against HTTPS origins on loopback
//! allowed by IP, each with a certificate authority made by the test.

use std::path::Path;

use crate::support::daemon::{self, DaemonEnv, can_sandbox};
use crate::support::intercept::tls_origin;
use sandgate_tests::skip_unless;
use serde_json::Value;

/// The text between `==name==` and the next marker in the sandbox's output.
fn section<'a>(out: &'a str, name: &str) -> &'a str {
    let start = format!("=={name}==\n");
    let Some(i) = out.find(&start) else { panic!("no section {name} in:\n{out}") };
    let rest = &out[i + start.len()..];
    &rest[..rest.find("\n==").map_or(rest.len(), |j| j + 1)]
}

fn has_python() -> bool {
    std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn files_under(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            files_under(&p, out);
        } else {
            out.push(p);
        }
    }
}

#[test]
fn secrets_reach_only_their_hosts_rules_hold_and_the_value_never_leaks() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let secret = format!("sk-live-{}-{}", std::process::id(), nanos.as_nanos());
    let o1 = tls_origin("127.0.0.1", &secret); // secret + rules
    let o2 = tls_origin("127.0.0.2", &secret); // rules only: intercepted, no secret
    let o3 = tls_origin("127.0.0.1", &secret); // not intercepted
    let o4 = tls_origin("127.0.0.1", &secret); // intercepted, its CA not trusted
    let o5 = tls_origin("127.0.0.1", &secret); // secret whose command hangs
    let t = DaemonEnv::new("");
    let root = t.env.root.path();
    let key = root.join("key");
    std::fs::write(&key, format!("{secret}\n")).unwrap();
    let mut roots = Vec::new();
    for (i, o) in [&o1, &o2, &o3, &o5].iter().enumerate() {
        let p = root.join(format!("ca{i}.pem"));
        std::fs::write(&p, &o.ca_pem).unwrap();
        roots.push(format!("{:?}", p.display().to_string()));
    }
    let o3_ca = root.join("ca2.pem");
    let (p1, p2, p3, p4, p5) = (o1.port, o2.port, o3.port, o4.port, o5.port);
    let p6 = sandgate_tests::origin_at("127.0.0.3", "plain origin\n"); // plain HTTP with rules
    let config = format!(
        r#"[daemon]
ask_timeout = "1s"

[network]
allow = ["127.0.0.1:{p1}", "127.0.0.2:{p2}", "127.0.0.1:{p3}", "127.0.0.1:{p4}", "127.0.0.1:{p5}", "127.0.0.3:{p6}"]

[[secrets]]
name = "testkey"
hosts = ["127.0.0.1:{p1}"]
header = "Authorization"
format = "Bearer {{}}"
env = "TEST_API_KEY"
from_file = "{key}"

[[secrets]]
name = "slow"
hosts = ["127.0.0.1:{p5}"]
header = "x-api-key"
env = "SLOW_KEY"
from_command = ["sleep", "30"]
timeout = "1s"

[[http_rules]]
host = "127.0.0.1:{p1}"
allow = ["GET /echo/**", "GET /ws"]

[[http_rules]]
host = "127.0.0.2:{p2}"
allow = ["* /**"]

[[http_rules]]
host = "127.0.0.1:{p4}"
allow = ["* /**"]

[[http_rules]]
host = "127.0.0.3:{p6}"
allow = ["GET /ok"]

[tls]
extra_roots = [{roots}]
"#,
        key = key.display(),
        roots = roots.join(", "),
    );
    std::fs::write(t.env.config_home().join("sandgate/config.toml"), &config).unwrap();
    // `watch` sees every event of the run (-v: every proxied request too).
    daemon::start_daemon(&t);
    let mut watch = t
        .cmd()
        .args(["watch", "--json", "-v"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let watched = daemon::lines_of(watch.stdout.take().unwrap());
    let curl = "curl -sS --max-time 10 --noproxy '' -x http://127.0.0.1:3128";
    let py_ws = format!(
        r#"
import os, socket, ssl
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT 127.0.0.1:{p1} HTTP/1.1\r\nHost: 127.0.0.1:{p1}\r\n\r\n")
r = b""
while b"\r\n\r\n" not in r:
    r += s.recv(1)
ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
t = ctx.wrap_socket(s, server_hostname="127.0.0.1")
t.sendall(b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{p1}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
h = b""
while b"\r\n\r\n" not in h:
    h += t.recv(1)
print(h.split(b"\r\n")[0].decode())
t.sendall(b"\x81\x85\x00\x00\x00\x00hello")
got = b""
while len(got) < 11:
    got += t.recv(64)
print("echo:", got[6:].decode())
"#
    );
    let py_urllib = format!(
        r#"
import os, urllib.request
req = urllib.request.Request("https://127.0.0.1:{p1}/echo/py", headers={{"Authorization": "Bearer " + os.environ["TEST_API_KEY"]}})
print(urllib.request.urlopen(req, timeout=10).read().decode())
"#
    );
    // Node: CONNECT by hand, then TLS trusting only the default store (NODE_EXTRA_CA_CERTS adds
    // the bundle to it at startup).
    let node = format!(
        r#"
const http = require("http"), tls = require("tls");
http.request({{ host: "127.0.0.1", port: 3128, method: "CONNECT", path: "127.0.0.1:{p1}" }})
  .on("connect", (res, socket) => {{
    const t = tls.connect({{ socket, servername: "", host: "127.0.0.1" }}, () => {{
      t.write("GET /echo/node HTTP/1.1\r\nHost: 127.0.0.1:{p1}\r\nConnection: close\r\n\r\n");
    }});
    let out = "";
    t.on("data", (d) => (out += d));
    t.on("end", () => console.log(out.split("\r\n\r\n").slice(1).join("")));
    t.on("error", (e) => console.log("error: " + e.message));
  }})
  .end();
"#
    );
    std::fs::write(t.proj.join("n.js"), node).unwrap();
    std::fs::write(t.proj.join("ws.py"), py_ws).unwrap();
    std::fs::write(t.proj.join("ul.py"), py_urllib).unwrap();
    let script = format!(
        r#"
echo ==env==; echo "$TEST_API_KEY"; echo "$SSL_CERT_FILE"
echo ==environ==; tr '\0' '\n' < /proc/self/environ
echo ==with-placeholder==; {curl} -H "Authorization: Bearer $TEST_API_KEY" https://127.0.0.1:{p1}/echo/a
echo ==without-header==; {curl} https://127.0.0.1:{p1}/echo/b
echo ==keep-alive==; {curl} https://127.0.0.1:{p1}/echo/c https://127.0.0.1:{p1}/echo/d
echo ==other-host==; {curl} -H "Authorization: Bearer $TEST_API_KEY" https://127.0.0.2:{p2}/echo/e
echo ==path-refused==; {curl} -i https://127.0.0.1:{p1}/admin/delete
echo ==socks==; curl -sS --max-time 10 --noproxy '' --socks5-hostname 127.0.0.1:3128 https://127.0.0.1:{p1}/echo/s; curl -sS --max-time 10 --noproxy '' --socks5-hostname 127.0.0.1:3128 -o /dev/null -w '%{{http_code}}\n' https://127.0.0.1:{p1}/admin
echo ==dot-segments==; {curl} --path-as-is -o /dev/null -w '%{{http_code}}\n' https://127.0.0.1:{p1}/echo/../admin
echo ==plain-http==; {curl} -H "Authorization: Bearer $TEST_API_KEY" -w '%{{http_code}}\n' http://127.0.0.3:{p6}/ok; {curl} -o /dev/null -w '%{{http_code}}\n' http://127.0.0.3:{p6}/no
echo ==not-intercepted==; {curl} --cacert {o3_ca} -o /dev/null -w '%{{certs}}' https://127.0.0.1:{p3}/
echo ==bad-upstream==; {curl} -i https://127.0.0.1:{p4}/x
echo ==hanging-secret==; {curl} -i https://127.0.0.1:{p5}/x
echo ==python-urllib==; env -u NO_PROXY -u no_proxy python3 ul.py 2>&1
echo ==websocket==; python3 ws.py 2>&1
echo ==node==; node n.js 2>&1
echo ==end==
"#,
        o3_ca = o3_ca.display()
    );
    let out = t.cmd().args(["net", "--", "sh", "-c", &script]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let all = format!("{stdout}\n--- stderr ---\n{stderr}");
    let ph = "sandgate-placeholder-testkey";

    // The sandbox holds only the placeholder, and a bundle with the CA.
    let env = section(&stdout, "env");
    assert!(env.starts_with(&format!("{ph}\n")), "{all}");
    let environ = section(&stdout, "environ");
    assert!(environ.contains(&format!("TEST_API_KEY={ph}")), "{all}");
    for var in ["SSL_CERT_FILE=", "CURL_CA_BUNDLE=", "REQUESTS_CA_BUNDLE=", "NODE_EXTRA_CA_CERTS="]
    {
        assert!(environ.contains(var), "{var} missing: {all}");
    }
    // The injected header arrives upstream (the origin shows it redacted), the placeholder never.
    for s in ["with-placeholder", "without-header", "keep-alive"] {
        let echo = section(&stdout, s);
        assert!(
            echo.to_ascii_lowercase().contains("authorization: bearer [[redacted secret]]"),
            "{s}: {all}"
        );
        assert!(!echo.contains(ph), "{s}: the placeholder reached the origin: {all}");
    }
    assert_eq!(section(&stdout, "keep-alive").matches("[[redacted secret]]").count(), 2, "{all}");
    // Another allowed host gets the placeholder as is.
    let other = section(&stdout, "other-host");
    assert!(other.contains(&format!("Bearer {ph}")), "{all}");
    assert!(!other.contains("[[redacted"), "the secret went to another host: {all}");
    // A path outside the rules: the model-friendly 403.
    let refused = section(&stdout, "path-refused");
    assert!(refused.contains("\r\n\r\nHTTP/1.1 403 Blocked by sandgate"), "{all}");
    assert!(refused.contains("GET /echo/**") && refused.contains("http_rules"), "{all}");
    // SOCKS5 is intercepted like CONNECT: secret injected, rules applied.
    let socks = section(&stdout, "socks");
    assert!(
        socks.to_ascii_lowercase().contains("authorization: bearer [[redacted secret]]"),
        "{all}"
    );
    assert!(socks.ends_with("403\n"), "{all}");
    // A path the upstream would resolve elsewhere matches no rule, even one under an allowed one.
    assert_eq!(section(&stdout, "dot-segments"), "403\n", "{all}");
    // Plain HTTP gets the same rules.
    assert_eq!(section(&stdout, "plain-http"), "plain origin\n200\n403\n", "{all}");
    // A host nobody intercepts shows its own certificate.
    let certs = section(&stdout, "not-intercepted");
    let seen: String =
        certs.lines().filter(|l| !l.starts_with("-----") && !l.contains(':')).collect();
    assert!(seen.contains(&o3.leaf_b64), "not the origin's own certificate: {all}");
    // An untrusted upstream: a 502 that says why.
    let bad = section(&stdout, "bad-upstream");
    assert!(bad.contains("\r\n\r\nHTTP/1.1 502"), "{all}");
    assert!(bad.contains("certificate is not trusted") && bad.contains("UnknownIssuer"), "{all}");
    // A hanging secret command: killed at its timeout, a 502 saying so.
    let slow = section(&stdout, "hanging-secret");
    assert!(slow.contains("\r\n\r\nHTTP/1.1 502"), "{all}");
    assert!(slow.contains("could not be read") && slow.contains("killed"), "{all}");
    if has_python() {
        let py = section(&stdout, "python-urllib");
        assert!(
            py.to_ascii_lowercase().contains("authorization: bearer [[redacted secret]]"),
            "{all}"
        );
        let ws = section(&stdout, "websocket");
        assert!(ws.starts_with("HTTP/1.1 101"), "{all}");
        assert!(ws.contains("echo: hello"), "{all}");
    } else {
        eprintln!("SKIPPED python clients: python3 is not installed");
    }
    if std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        let n = section(&stdout, "node");
        assert!(
            n.to_ascii_lowercase().contains("authorization: bearer [[redacted secret]]"),
            "{all}"
        );
    } else {
        eprintln!("SKIPPED node client: node is not installed");
    }

    // `check --json` says what is intercepted.
    let check = |target: &str| -> Value {
        serde_json::from_slice(&t.sg(&["check", target, "--json"]).stdout).unwrap()
    };
    assert_eq!(check(&format!("127.0.0.1:{p1}"))["intercepted"], true);
    assert_eq!(check(&format!("127.0.0.1:{p3}"))["intercepted"], false);

    // The event of the other host's request says a placeholder was seen.
    let log = t.sg(&["log", "--json"]);
    let log_text = String::from_utf8_lossy(&log.stdout).into_owned();
    assert!(log_text.contains("placeholder of secret testkey seen"), "{log_text}");

    // What `watch` showed, until the sandbox ended.
    let mut watch_lines = String::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !watch_lines.contains("sandbox_ended") {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match watched.recv_timeout(left) {
            Ok(l) => watch_lines.push_str(&l),
            Err(e) => panic!("watch: {e}; saw {watch_lines}"),
        }
        watch_lines.push('\n');
    }
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(watch_lines.contains("placeholder of secret testkey seen"), "{watch_lines}");

    // The value is nowhere: outputs, the daemon's log, the store's files, every listing.
    let mut texts: Vec<(String, Vec<u8>)> =
        vec![("sandbox output".into(), all.clone().into_bytes())];
    texts.push(("watch --json -v".into(), watch_lines.into_bytes()));
    texts.push(("log --json".into(), log.stdout.clone()));
    for args in [
        &["secrets", "list", "--json"][..],
        &["secrets", "list"],
        &["secrets", "test", "testkey"],
        &["secrets", "test", "testkey", "--json"],
        &["secrets", "test", "slow"],
        &["status", "--json"],
        &["ls"],
        &["log"],
        &["check", &format!("127.0.0.1:{p1}"), "--json"],
    ] {
        let o = t.sg(args);
        let mut b = o.stdout.clone();
        b.extend_from_slice(&o.stderr);
        texts.push((args.join(" "), b));
    }
    let mut files = Vec::new();
    files_under(&root.join("data"), &mut files);
    files_under(&root.join("run"), &mut files);
    assert!(files.iter().any(|f| f.ends_with("daemon.log")), "{files:?}");
    for f in files {
        if let Ok(b) = std::fs::read(&f) {
            texts.push((f.display().to_string(), b));
        }
    }
    for (what, bytes) in &texts {
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "the secret value appears in {what}"
        );
    }
    // `secrets test` reports ok without the value.
    let ok = String::from_utf8_lossy(&t.sg(&["secrets", "test", "testkey"]).stdout).into_owned();
    assert!(ok.contains("testkey: ok"), "{ok}");
}

/// Bad `[[secrets]]` input is refused with the file and line.
#[test]
fn bad_secrets_configuration_names_file_and_line() {
    let t = DaemonEnv::new("");
    let file = t.env.config_home().join("sandgate/config.toml");
    for (body, want) in [
        (
            "[[secrets]]\nname = \"a\"\nhosts = [\"x.example\"]\nfrom_env = \"A\"\nfrom_file = \"/k\"\n",
            "has 2 sources (from_env, from_file)",
        ),
        (
            "[[secrets]]\nname = \"a\"\nhosts = [\"x.example\"]\nfrom_vault = \"A\"\n",
            "unknown field `from_vault`",
        ),
        ("[[secrets]]\nname = \"a\"\nhosts = [\"x.example\"]\n", "has no source"),
        (
            "[[secrets]]\nname = \"a\"\nhosts = [\"x.example\"]\nfrom_file = \"rel/k\"\n",
            "is not absolute",
        ),
        (
            "[[secrets]]\nname = \"A b\"\nhosts = [\"x.example\"]\nfrom_env = \"A\"\n",
            "outside [a-z0-9_-]",
        ),
        ("[[secrets]]\nname = \"a\"\nhosts = []\nfrom_env = \"A\"\n", "names no hosts"),
        (
            "[[secrets]]\nname = \"a\"\nhosts = [\"x.example\"]\nformat = \"Bearer\"\nfrom_env = \"A\"\n",
            "exactly once",
        ),
        (
            "[[http_rules]]\nhost = \"x.example\"\nallow = [\"GET nope\"]\n",
            "does not start with '/'",
        ),
    ] {
        let text = format!("# line 1\n{body}");
        std::fs::write(&file, &text).unwrap();
        let out = t.sg(&["secrets", "list"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{body}: {err}");
        assert!(err.contains(want), "{body}: {err}");
        assert!(err.contains(&format!("{}:", file.display())), "no file in: {err}");
        assert!(
            err.contains(":2:")
                || err.contains(":3:")
                || err.contains(":4:")
                || err.contains(":5:"),
            "no line in: {err}"
        );
    }
    // Sources that fail are reported by `secrets test`, with the entry's file and line.
    let text = format!(
        "# line 1\n[[secrets]]\nname = \"f\"\nhosts = [\"x.example\"]\nfrom_file = \"{}/missing\"\n\n[[secrets]]\nname = \"c\"\nhosts = [\"x.example\"]\nfrom_command = [\"false\"]\n",
        t.env.root.path().display()
    );
    std::fs::write(&file, &text).unwrap();
    let out = t.sg(&["secrets", "test", "f"]);
    let s = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{s}");
    assert!(s.contains(&format!("{}:3", file.display())) && s.contains("cannot read"), "{s}");
    let out = t.sg(&["secrets", "test", "c"]);
    let s = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{s}");
    assert!(s.contains(&format!("{}:8", file.display())) && s.contains("failed"), "{s}");
}

/// The launcher's own proxy (no daemon) intercepts too; a request outside the rules is refused at
/// once, since nobody can be asked.
#[test]
fn the_launchers_own_proxy_intercepts_without_a_daemon() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let secret = format!("sk-nodaemon-{}", std::process::id());
    let o = tls_origin("127.0.0.1", &secret);
    let t = DaemonEnv::new("");
    let root = t.env.root.path();
    std::fs::write(root.join("ca.pem"), &o.ca_pem).unwrap();
    let config = format!(
        r#"[network]
allow = ["127.0.0.1:{p}"]

[[secrets]]
name = "nd"
hosts = ["127.0.0.1:{p}"]
header = "x-api-key"
env = "ND_KEY"
from_env = "ND_SECRET_FOR_TEST"

[[http_rules]]
host = "127.0.0.1:{p}"
allow = ["GET /echo/*"]

[tls]
extra_roots = ["{ca}"]
"#,
        p = o.port,
        ca = root.join("ca.pem").display()
    );
    std::fs::write(t.env.config_home().join("sandgate/config.toml"), config).unwrap();
    let curl = "curl -sS --max-time 10 --noproxy '' -x http://127.0.0.1:3128";
    let script = format!(
        "echo ==env==; echo \"$ND_KEY\"; env | grep -c ND_SECRET_FOR_TEST; \
         echo ==echo==; {curl} -H \"x-api-key: $ND_KEY\" https://127.0.0.1:{p}/echo/a; \
         echo ==refused==; {curl} -o /dev/null -w '%{{http_code}}\\n' https://127.0.0.1:{p}/other; \
         echo ==ca-key==; cat {key} 2>/dev/null || echo hidden; echo ==end==",
        p = o.port,
        key = root.join("data/sandgate/ca/ca-key.pem").display()
    );
    let out = t
        .cmd()
        .env("SANDGATE_NO_DAEMON", "1")
        .env("ND_SECRET_FOR_TEST", &secret)
        .args(["net", "--", "sh", "-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // The variable the secret comes from is the launcher's, and secret-looking: not inside.
    assert_eq!(section(&stdout, "env"), "sandgate-placeholder-nd\n0\n", "{all}");
    assert!(section(&stdout, "echo").contains("x-api-key: [[redacted secret]]"), "{all}");
    assert_eq!(section(&stdout, "refused"), "403\n", "{all}");
    // The CA's key exists outside and is hidden inside.
    assert!(root.join("data/sandgate/ca/ca-key.pem").exists());
    assert_eq!(section(&stdout, "ca-key"), "hidden\n", "{all}");
    assert!(!all.contains(&secret), "{all}");
}

/// A request outside the host's rules is held like an unknown host, and a person's answer lets
/// that request through.
#[test]
fn a_request_outside_the_rules_is_held_and_a_person_may_let_it_through() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let o = tls_origin("127.0.0.1", "");
    let t = DaemonEnv::new("");
    let root = t.env.root.path();
    std::fs::write(root.join("ca.pem"), &o.ca_pem).unwrap();
    let config = format!(
        r#"[daemon]
ask_timeout = "30s"

[network]
allow = ["127.0.0.1:{p}"]

[[http_rules]]
host = "127.0.0.1:{p}"
allow = ["GET /echo/*"]

[tls]
extra_roots = ["{ca}"]
"#,
        p = o.port,
        ca = root.join("ca.pem").display()
    );
    std::fs::write(t.env.config_home().join("sandgate/config.toml"), config).unwrap();
    daemon::start_daemon(&t);
    let url = format!("https://127.0.0.1:{}/admin/x", o.port);
    let child = t.spawn_net(
        &[],
        &["curl", "-sS", "--max-time", "25", "--noproxy", "", "-x", "http://127.0.0.1:3128", &url],
    );
    let mut question = Value::Null;
    daemon::wait_until("a pending question", std::time::Duration::from_secs(20), || {
        let p = t.json(&["pending", "--json"]);
        match p.as_array().and_then(|a| a.first()) {
            Some(q) => {
                question = q.clone();
                true
            }
            None => false,
        }
    });
    assert!(question.to_string().contains("/admin/x"), "the question names the path: {question}");
    let out = t.sg(&["allow", &format!("127.0.0.1:{}", o.port), "--once"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, stdout, stderr) = daemon::finish(child);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("GET /admin/x HTTP/1.1"), "{stdout}\n{stderr}");
}
