//! Issue 33, "done when": real clients with **no proxy settings** reach an allowed test host
//! through a `net` (and a `build`) sandbox by transparent capture, and a name nobody allowed is
//! held (the question is pending while the client waits), then refused by `sandgate deny` or by
//! the ask timeout; the client fails, and the events name the host, port and decision (method
//! `TCP`: the transparent door, not CONNECT or a proxied GET).
//!
//! Every script first unsets what the launcher sets for proxy-aware clients (the proxy variables,
//! `JAVA_TOOL_OPTIONS`, `GIT_SSH_COMMAND`, git's `http.proxy`) and fails the test if any is left.
//!
//! Names: the sandbox's DNS stub answers every name with an address of its own; the daemon
//! resolves the name on the host when the connection is made, through the test's DNS server
//! (`SANDGATE_DNS_SERVER`, [`counting_dns`]), where every `*.lo.sgtest` is 127.0.0.1 and
//! `pub.sgtest` is a public-looking address in a namespace of the test. The servers listen on
//! the host's 127.0.0.1, which the address guard refuses unless the address itself is allowed:
//! each case allows `127.0.0.1:PORT` as well as the name. The held name resolves to the same
//! server, so it is the decision that refuses it, not a missing host (the curl case shows a
//! held name answered with `allow` getting through). One case
//! ([`a_public_looking_host_passes_the_guard_by_name_alone`]) allows nothing by address.
//!
//! Each case runs as root and as an unprivileged test user (a scratch tree and daemon of its
//! own); a missing client fails the test under `CI=true` and skips it elsewhere.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::support::daemon::{finish, wait_until};
use crate::support::dns::counting_dns;
use crate::support::intercept::tls_origin_named;
use crate::support::sandbox::{PUBLIC, Scratch, TestHost, Who, both};
use crate::support::ssh;
use sandgate_tests::{origin, sandgate_bin, skip_unless};
use serde_json::Value;

/// The allowed name (with its port, and 127.0.0.1 on that port).
const ALLOWED: &str = "svc.lo.sgtest";
/// A name nobody allowed: asked about, then refused.
const HELD: &str = "held.lo.sgtest";
/// A name nobody allowed, answered with `allow` (the control of the curl case).
const ASKED: &str = "asked.lo.sgtest";

/// Unsets everything the launcher sets for clients that honour proxy settings, then prints any
/// that is left (the test fails on a `leftover` line).
const UNSET: &str = "unset HTTP_PROXY HTTPS_PROXY ALL_PROXY http_proxy https_proxy all_proxy \
    NO_PROXY no_proxy JAVA_TOOL_OPTIONS GIT_SSH_COMMAND SANDGATE_SOCKS_PROXY npm_config_proxy \
    npm_config_https_proxy CARGO_HTTP_PROXY PIP_PROXY GIT_CONFIG_COUNT GIT_CONFIG_KEY_0 \
    GIT_CONFIG_VALUE_0; \
    env | grep -iE 'proxy|JAVA_TOOL_OPTIONS|GIT_SSH_COMMAND|GIT_CONFIG' | sed 's/^/leftover /'";

/// How a held connection's question is answered.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Answer {
    /// `sandgate allow ID`: the client gets through (the control).
    Allow,
    /// `sandgate deny ID`.
    Deny,
    /// Nobody answers: the ask timeout refuses it.
    Timeout,
}

/// A held step: a command to a name nobody allowed, and the answer it gets.
struct Held {
    host: &'static str,
    cmd: String,
    answer: Answer,
}

/// One client: a command that reaches [`ALLOWED`] on `port`, the text its output holds when it
/// got there, and the held steps that follow.
struct Client {
    tier: &'static str,
    port: u16,
    reach: String,
    reached: String,
    held: Vec<Held>,
}

/// A scratch tree of `who` whose daemon resolves names through the test's DNS server; its
/// questions time out after `ask_timeout`.
struct Env {
    s: Scratch,
    dns: String,
}

impl Env {
    fn new(who: &Who, ask_timeout: &str) -> Env {
        let s = Scratch::new(who);
        let config = format!("[daemon]\nask_timeout = \"{ask_timeout}\"\n");
        std::fs::write(s.home.join(".config/sandgate/config.toml"), config).unwrap();
        let (port, _) = counting_dns();
        Env { s, dns: format!("127.0.0.1:{port}") }
    }

    /// The project directory (the sandbox's working directory).
    fn proj(&self) -> &Path {
        &self.s.proj
    }

    /// Writes `name` in the project, owned by the user who runs the sandbox (ssh refuses a key
    /// or a configuration file of another user).
    fn write(&self, name: &str, contents: &str) {
        let path = self.s.proj.join(name);
        std::fs::write(&path, contents).unwrap();
        self.own(&path);
    }

    /// Gives `path` to the user who runs the sandbox.
    fn own(&self, path: &Path) {
        let owner = format!("{}:{}", self.s.who.uid, self.s.who.gid);
        ssh::run_ok(Command::new("chown").arg(owner).arg(path));
    }

    /// `sandgate ARGS` as the user who runs the sandbox.
    fn sg(&self, args: &[&str]) -> Output {
        self.s
            .program(&sandgate_bin())
            .env("SANDGATE_DNS_SERVER", &self.dns)
            .args(args)
            .output()
            .unwrap()
    }

    /// The questions `sandgate pending --json` lists.
    fn pending(&self) -> Vec<Value> {
        let out = self.sg(&["pending", "--json"]);
        serde_json::from_slice::<Value>(&out.stdout)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    }

    /// The events of `sandgate log --json`.
    fn log(&self) -> Vec<Value> {
        let out = self.sg(&["log", "--json"]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// `sandgate TIER ARGS -- sh -c SCRIPT` in the background, stdout and stderr piped.
    fn spawn(&self, tier: &str, args: &[String], script: &str) -> Child {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.s
            .command(tier, &args, &["sh", "-c", script])
            .env("SANDGATE_DNS_SERVER", &self.dns)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }
}

/// Whether `tool` is on the PATH the sandbox gets.
fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The transparent connection's event for `host:port` (method `TCP`).
fn event<'a>(log: &'a [Value], host: &str, port: u16) -> &'a Value {
    log.iter()
        .find(|e| e["method"] == "TCP" && e["host"] == host && e["port"] == port)
        .unwrap_or_else(|| panic!("no TCP event for {host}:{port}: {log:#?}"))
}

/// Runs `c` in its tier with [`ALLOWED`]`:port` and `127.0.0.1:port` allowed: the reach step
/// must get there; each held step must be asked about (with the client still waiting) and end as
/// answered. Checks the events; returns stdout and stderr.
fn run(t: &Env, c: &Client) -> (String, String) {
    let mut script = format!("{UNSET}; echo '== reach'; {}; echo \"reach_rc=$?\"", c.reach);
    for (i, h) in c.held.iter().enumerate() {
        script.push_str(&format!("; echo '== held {i}'; {}; echo \"held_{i}_rc=$?\"", h.cmd));
    }
    let args = [format!("--allow={ALLOWED}:{}", c.port), format!("--allow=127.0.0.1:{}", c.port)];
    let mut child = t.spawn(c.tier, &args, &script);
    for h in &c.held {
        // Not `wait_for_question`'s 20 s: a JVM compiling its source twice on a loaded machine
        // can take longer than that to get to its second connection.
        let mut q = Value::Null;
        wait_until("a pending question", Duration::from_secs(120), || {
            match t.pending().as_slice() {
                [one] => {
                    q = one.clone();
                    true
                }
                _ => false,
            }
        });
        assert_eq!(
            (q["host"].as_str(), q["port"].as_u64(), q["method"].as_str()),
            (Some(h.host), Some(u64::from(c.port)), Some("TCP")),
            "{q:#}"
        );
        assert!(child.try_wait().unwrap().is_none(), "the client waits while it is asked");
        let id = q["id"].as_str().unwrap();
        let verb = match h.answer {
            Answer::Allow => Some("allow"),
            Answer::Deny => Some("deny"),
            Answer::Timeout => None,
        };
        if let Some(verb) = verb {
            let out = t.sg(&[verb, id]);
            assert!(out.status.success(), "{verb} {id}: {}", String::from_utf8_lossy(&out.stderr));
        }
        wait_until("the question answered", Duration::from_secs(30), || {
            t.pending().iter().all(|p| p["id"] != id)
        });
    }
    let (code, stdout, stderr) = finish(child);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(!stdout.contains("leftover "), "a proxy setting is left: {stdout}");
    assert!(stdout.contains(&c.reached), "did not reach {ALLOWED}:\n{stdout}\n{stderr}");
    assert!(stdout.contains("reach_rc=0\n"), "{stdout}\n{stderr}");
    let log = t.log();
    let e = event(&log, ALLOWED, c.port);
    assert_eq!(e["decision"], "allow", "{e:#}");
    for (i, h) in c.held.iter().enumerate() {
        let ok = stdout.contains(&format!("held_{i}_rc=0\n"));
        let e = event(&log, h.host, c.port);
        let rule = e["rule"].as_str().unwrap_or_default();
        let refused = |rule_ok: bool| {
            assert!(!ok, "{} got through: {stdout}\n{stderr}", h.host);
            assert_eq!(e["decision"], "deny", "{e:#}");
            assert!(rule_ok, "{e:#}");
            let said = format!("sandgate: denied {}:{}", h.host, c.port);
            assert!(stderr.contains(&said), "{stderr}");
        };
        match h.answer {
            Answer::Allow => {
                assert!(ok, "allowed after the question, it must get through: {stdout}\n{stderr}");
                assert_eq!(e["decision"], "allow", "{e:#}");
            }
            Answer::Deny => refused(rule.starts_with(&format!("deny {}", h.host))),
            Answer::Timeout => refused(rule == "approval timed out"),
        }
    }
    (stdout, stderr)
}

/// Skips (outside CI) unless every tool in `tools` is installed.
fn ready(tools: &[&str], what: &str) -> bool {
    !skip_unless(tools.iter().all(|t| have(t)), what)
}

fn curl_over_http_without_proxy_settings(who: &Who) {
    if !ready(&["curl"], "curl") {
        return;
    }
    let t = Env::new(who, "30s");
    let port = origin("hello over plain http");
    let curl =
        |host: &str| format!("curl -sSf --noproxy '*' --max-time 60 http://{host}:{port}/ && echo");
    run(
        &t,
        &Client {
            tier: "net",
            port,
            reach: curl(ALLOWED),
            reached: "hello over plain http\nreach_rc=0".into(),
            held: vec![
                Held { host: ASKED, cmd: curl(ASKED), answer: Answer::Allow },
                Held { host: HELD, cmd: curl(HELD), answer: Answer::Deny },
            ],
        },
    );
}

/// A TLS origin on 127.0.0.1 whose certificate names [`ALLOWED`] and [`HELD`] (so the held name
/// would pass the handshake if it were let through); its CA written to `proj/ca.pem`.
fn tls_origin(t: &Env) -> u16 {
    let origin = tls_origin_named("127.0.0.1", &[ALLOWED, HELD]);
    t.write("ca.pem", &origin.ca_pem);
    origin.port
}

fn curl_over_https_without_proxy_settings(who: &Who) {
    if !ready(&["curl"], "curl") {
        return;
    }
    let t = Env::new(who, "30s");
    let port = tls_origin(&t);
    let curl = |host: &str| {
        format!("curl -sSf --noproxy '*' --max-time 60 --cacert ca.pem https://{host}:{port}/")
    };
    run(
        &t,
        &Client {
            tier: "net",
            port,
            reach: curl(ALLOWED),
            // The origin echoes the request head it received.
            reached: format!("GET / HTTP/1.1\r\nHost: {ALLOWED}:{port}\r\n"),
            held: vec![Held { host: HELD, cmd: curl(HELD), answer: Answer::Deny }],
        },
    );
}

fn openssl_s_client_without_proxy_settings(who: &Who) {
    if !ready(&["openssl"], "openssl") {
        return;
    }
    let t = Env::new(who, "30s");
    let port = tls_origin(&t);
    let s_client = |host: &str| {
        format!(
            "openssl s_client -connect {host}:{port} -servername {host} -verify_hostname {host} \
             -CAfile ca.pem -verify_return_error </dev/null >/tmp/s_client.txt 2>&1; rc=$?; \
             grep -E 'Verify return code|alert' /tmp/s_client.txt; (exit $rc)"
        )
    };
    run(
        &t,
        &Client {
            tier: "net",
            port,
            reach: s_client(ALLOWED),
            reached: "Verify return code: 0 (ok)".into(),
            held: vec![Held { host: HELD, cmd: s_client(HELD), answer: Answer::Deny }],
        },
    );
}

/// ssh and `git clone host:path` with `GIT_SSH_COMMAND` unset: a grant for the sshd's name and
/// port is all they need (no `sandgate connect`). The ssh configuration the clients read (`-F`,
/// git's `core.sshCommand`) gives only the port, the key and no host key checking; no
/// `ProxyCommand`.
fn ssh_and_git_over_ssh_without_proxy_settings(who: &Who) {
    if !ready(&["/usr/sbin/sshd", "ssh", "ssh-keygen", "git"], "openssh-server, ssh and git") {
        return;
    }
    let t = Env::new(who, "30s");
    let dir = t.s.root.join("ssh");
    std::fs::create_dir_all(&dir).unwrap();
    let key = t.proj().join("id_test");
    ssh::keygen(&key);
    t.own(&key);
    let server = ssh::sshd(&dir, &key.with_extension("pub"));
    let bare = ssh::bare_repo(&dir, "cloned without proxy settings\n");
    let config = t.proj().join("ssh_config");
    t.write(
        "ssh_config",
        &format!(
            "Host *.lo.sgtest\n  Port {}\n  User root\n  IdentityFile {}\n  IdentitiesOnly yes\n  \
             BatchMode yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  \
             LogLevel ERROR\n  ConnectTimeout 60\n",
            server.port,
            key.display()
        ),
    );
    let cfg = config.display();
    run(
        &t,
        &Client {
            tier: "net",
            port: server.port,
            reach: format!(
                "ssh -F {cfg} {ALLOWED} echo hello-over-ssh && \
                 git -c core.sshCommand='ssh -F {cfg}' clone -q {ALLOWED}:{repo} /tmp/out && \
                 cat /tmp/out/README",
                repo = bare.display()
            ),
            reached: "hello-over-ssh\ncloned without proxy settings\nreach_rc=0".into(),
            held: vec![Held {
                host: HELD,
                cmd: format!("ssh -F {cfg} {HELD} echo should-not-run"),
                answer: Answer::Deny,
            }],
        },
    );
}

/// A server that reads a PostgreSQL client's startup message (answering `N` to an SSL or GSS
/// encryption request first) and answers with a FATAL error that quotes the user it was sent:
/// enough for `psql` to print that it reached this server.
fn fake_postgres() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let user = loop {
                    let mut len = [0u8; 4];
                    if s.read_exact(&mut len).is_err() {
                        return;
                    }
                    let len = u32::from_be_bytes(len) as usize;
                    let mut body = vec![0u8; len.saturating_sub(4)];
                    if s.read_exact(&mut body).is_err() || body.len() < 4 {
                        return;
                    }
                    let code = u32::from_be_bytes(body[..4].try_into().unwrap());
                    // SSLRequest, GSSENCRequest: "not here", then the startup message follows.
                    if code == 80_877_103 || code == 80_877_104 {
                        if s.write_all(b"N").is_err() {
                            return;
                        }
                        continue;
                    }
                    let params: Vec<&[u8]> = body[4..].split(|b| *b == 0).collect();
                    let user = params
                        .windows(2)
                        .find(|w| w[0] == b"user")
                        .map(|w| String::from_utf8_lossy(w[1]).into_owned())
                        .unwrap_or_default();
                    break user;
                };
                let mut fields = Vec::new();
                for (tag, value) in [
                    (b'S', "FATAL".to_owned()),
                    (b'V', "FATAL".to_owned()),
                    (b'C', "28000".to_owned()),
                    (b'M', format!("fake postgres saw user {user}")),
                ] {
                    fields.push(tag);
                    fields.extend_from_slice(value.as_bytes());
                    fields.push(0);
                }
                fields.push(0);
                let mut msg = vec![b'E'];
                msg.extend_from_slice(&(fields.len() as u32 + 4).to_be_bytes());
                msg.extend_from_slice(&fields);
                let _ = s.write_all(&msg);
            });
        }
    });
    port
}

/// `psql` (Debian's postgresql-client), in a `build` sandbox: a client-speaks-first protocol
/// that is neither TLS nor HTTP, decided by the name the stub gave out.
fn psql_without_proxy_settings_in_a_build_sandbox(who: &Who) {
    if !ready(&["psql"], "psql (postgresql-client)") {
        return;
    }
    let t = Env::new(who, "30s");
    let port = fake_postgres();
    let psql = |host: &str| {
        format!(
            "psql 'host={host} port={port} user=sgtester dbname=t connect_timeout=60 \
             sslmode=disable gssencmode=disable' -c 'select 1' 2>&1 | grep 'fake postgres'"
        )
    };
    run(
        &t,
        &Client {
            tier: "build",
            port,
            reach: psql(ALLOWED),
            reached: "FATAL:  fake postgres saw user sgtester".into(),
            held: vec![Held { host: HELD, cmd: psql(HELD), answer: Answer::Deny }],
        },
    );
}

/// An HTTP client in Go with its own transport and no proxy function at all.
const GO_CLIENT: &str = r#"package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	client := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 60 * time.Second}
	resp, err := client.Get(os.Args[1])
	if err != nil {
		fmt.Println("go error:", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("go status=%d body=%s\n", resp.StatusCode, body)
	if resp.StatusCode != 200 {
		os.Exit(2)
	}
}
"#;

fn a_go_program_without_a_proxy_in_its_transport(who: &Who) {
    if !ready(&["go"], "go (golang-go)") {
        return;
    }
    let t = Env::new(who, "30s");
    // Built here, offline, with everything Go writes in the test's directory.
    let src = t.s.root.join("go");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("main.go"), GO_CLIENT).unwrap();
    std::fs::write(src.join("go.mod"), "module sgtest\n\ngo 1.19\n").unwrap();
    let out = Command::new("go")
        .args(["build", "-o"])
        .arg(t.proj().join("goclient"))
        .arg(".")
        .current_dir(&src)
        .env("GOCACHE", src.join("cache"))
        .env("GOPATH", src.join("gopath"))
        .env("GOFLAGS", "-mod=mod")
        .env("GOPROXY", "off")
        .env("CGO_ENABLED", "0")
        .env("HOME", &src)
        .output()
        .unwrap();
    assert!(out.status.success(), "go build: {}", String::from_utf8_lossy(&out.stderr));
    let port = origin("hello from go");
    let go = |host: &str| format!("./goclient http://{host}:{port}/");
    run(
        &t,
        &Client {
            tier: "net",
            port,
            reach: go(ALLOWED),
            reached: "go status=200 body=hello from go".into(),
            held: vec![Held { host: HELD, cmd: go(HELD), answer: Answer::Deny }],
        },
    );
}

/// Python's urllib with `no_proxy=*`; the held name is refused by the ask timeout.
fn python_urllib_with_no_proxy_and_the_ask_timeout(who: &Who) {
    if !ready(&["python3"], "python3") {
        return;
    }
    let t = Env::new(who, "3s");
    let port = origin("hello from python");
    let py = |host: &str| {
        format!(
            "no_proxy='*' python3 -c 'import urllib.request as u; \
             print(\"py\", u.urlopen(\"http://{host}:{port}/\", timeout=60).read().decode())'"
        )
    };
    run(
        &t,
        &Client {
            tier: "net",
            port,
            reach: py(ALLOWED),
            reached: "py hello from python".into(),
            held: vec![Held { host: HELD, cmd: py(HELD), answer: Answer::Timeout }],
        },
    );
}

/// Java's own HTTP client, started as a single source file (`java Main.java`, which needs the
/// JDK's compiler module), with `JAVA_TOOL_OPTIONS` unset.
const JAVA_CLIENT: &str = r#"import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;

public class Main {
    public static void main(String[] args) throws Exception {
        HttpClient c = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(60)).build();
        HttpRequest req = HttpRequest.newBuilder(URI.create(args[0])).build();
        HttpResponse<String> r = c.send(req, HttpResponse.BodyHandlers.ofString());
        System.out.println("java status=" + r.statusCode() + " body=" + r.body());
        System.exit(r.statusCode() == 200 ? 0 : 2);
    }
}
"#;

fn java_without_java_tool_options(who: &Who) {
    if !ready(&["java", "javac"], "java and its compiler (openjdk-17-jdk-headless)") {
        return;
    }
    let t = Env::new(who, "30s");
    t.write("Main.java", JAVA_CLIENT);
    let port = origin("hello from java");
    let java = |host: &str| format!("java Main.java http://{host}:{port}/");
    run(
        &t,
        &Client {
            tier: "net",
            port,
            reach: java(ALLOWED),
            reached: "java status=200 body=hello from java".into(),
            held: vec![Held { host: HELD, cmd: java(HELD), answer: Answer::Deny }],
        },
    );
}

/// A test host on a public-looking address (45.90.7.2, in a namespace of the test, routed only
/// to its veth) is reached with a grant for its name alone: the address guard, active in the
/// same sandbox (the control: a name allowed the same way that resolves to 127.0.0.1 is
/// refused), passes it because the address is public, not because anything allows it. Both a
/// raw TCP client (the host's echo server) and `git clone git@pub.sgtest:repo` (an sshd on
/// port 22 there, with a grant for `pub.sgtest:22` alone).
fn a_public_looking_host_passes_the_guard_by_name_alone(who: &Who) {
    if !ready(&["/usr/sbin/sshd", "ssh", "ssh-keygen", "git"], "openssh-server, ssh and git") {
        return;
    }
    let Some(mut host) = TestHost::start_at(PUBLIC) else { return };
    let t = Env::new(who, "30s");
    let dir = t.s.root.join("ssh");
    std::fs::create_dir_all(&dir).unwrap();
    let key = t.proj().join("id_test");
    ssh::keygen(&key);
    t.own(&key);
    let config = ssh::sshd_config(&dir, &key.with_extension("pub"), PUBLIC.host, 22);
    host.spawn("/usr/sbin/sshd", &["-D", "-e", "-f", config.to_str().unwrap()]);
    wait_until("sshd listening in the test host", Duration::from_secs(20), || {
        std::net::TcpStream::connect((PUBLIC.host, 22)).is_ok()
    });
    let bare = ssh::bare_repo(&dir, "cloned from a public-looking host\n");
    let ssh_config = t.proj().join("ssh_config");
    t.write(
        "ssh_config",
        &format!(
            "Host pub.sgtest\n  User root\n  IdentityFile {}\n  IdentitiesOnly yes\n  \
             BatchMode yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  \
             LogLevel ERROR\n",
            key.display()
        ),
    );
    let loopback = origin("a loopback service");
    let script = format!(
        "{UNSET}; \
         python3 -c 'import socket; s = socket.create_connection((\"pub.sgtest\", 8080), 60); \
         s.sendall(b\"ping\\n\"); print(\"echo=\" + s.recv(100).decode().strip())'; \
         git -c core.sshCommand='ssh -F {cfg}' clone -q pub.sgtest:{repo} /tmp/out && \
         cat /tmp/out/README; \
         curl -sS --noproxy '*' --max-time 60 -o /dev/null -w 'loopback=%{{http_code}}\\n' \
         http://{ALLOWED}:{loopback}/",
        cfg = ssh_config.display(),
        repo = bare.display()
    );
    let args = [
        "--allow=pub.sgtest:8080".to_owned(),
        "--allow=pub.sgtest:22".to_owned(),
        format!("--allow={ALLOWED}:{loopback}"),
    ];
    let (code, stdout, stderr) = finish(t.spawn("net", &args, &script));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(!stdout.contains("leftover "), "a proxy setting is left: {stdout}");
    assert!(stdout.contains("echo=ping\n"), "{stdout}\n{stderr}");
    assert!(stdout.contains("cloned from a public-looking host\n"), "{stdout}\n{stderr}");
    // The control: the guard refuses the loopback address the allowed name resolves to.
    assert!(stdout.contains("loopback=403\n"), "{stdout}\n{stderr}");
    let log = t.log();
    for port in [8080, 22] {
        let e = event(&log, "pub.sgtest", port);
        assert_eq!(e["decision"], "allow", "{e:#}");
        assert!(e["rule"].as_str().unwrap().contains("pub.sgtest"), "{e:#}");
    }
    let e = event(&log, ALLOWED, loopback);
    assert_eq!(e["decision"], "deny", "{e:#}");
    assert!(e["rule"].as_str().unwrap().contains("loopback"), "{e:#}");
}

both!(
    curl_over_http_without_proxy_settings,
    curl_over_https_without_proxy_settings,
    openssl_s_client_without_proxy_settings,
    ssh_and_git_over_ssh_without_proxy_settings,
    psql_without_proxy_settings_in_a_build_sandbox,
    a_go_program_without_a_proxy_in_its_transport,
    python_urllib_with_no_proxy_and_the_ask_timeout,
    java_without_java_tool_options,
    a_public_looking_host_passes_the_guard_by_name_alone,
);
