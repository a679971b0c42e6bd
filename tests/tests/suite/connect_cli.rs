//! `sandgate connect HOST PORT` (an ssh ProxyCommand) through `sandgate proxy`, over HTTP CONNECT
//! and SOCKS5; and the host's own services reached on purpose (`--allow 127.0.0.1:PORT`,
//! `--allow localhost:PORT`).

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sandgate_tests::{Env, echo, origin};

struct Proxy {
    child: Child,
    url: String,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn proxy(env: &Env, args: &[&str]) -> Proxy {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = env
        .cmd()
        .args(["proxy", "--listen", &listen])
        .args(args)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    crate::support::until_listening(&listen, &mut child);
    Proxy { child, url: format!("http://{listen}") }
}

/// Runs `sandgate connect` with `input` on stdin (then end of input); returns status, stdout,
/// stderr.
fn connect(
    env: &Env,
    proxy_env: &[(&str, &str)],
    args: &[&str],
    input: &[u8],
) -> (i32, Vec<u8>, String) {
    let mut cmd = env.cmd();
    cmd.arg("connect").args(args);
    for k in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"] {
        cmd.env_remove(k);
    }
    for (k, v) in proxy_env {
        cmd.env(k, v);
    }
    let mut child =
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
        // Keep stdin open a moment so the echo comes back before the half-close.
        std::thread::sleep(Duration::from_millis(300));
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    (out.status.code().unwrap_or(-1), out.stdout, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn connect_relays_both_ways_for_an_allowed_port_and_names_the_rule_when_denied() {
    let env = Env::new();
    let port = echo();
    let allow = format!("127.0.0.1:{port}");
    let p = proxy(&env, &["--allow", &allow, "--deny", "git.denied.example"]);
    let port_s = port.to_string();
    // 1 MiB both ways, in the shape ssh uses it: stdin to the server, the answer on stdout.
    let payload: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    let (code, out, err) =
        connect(&env, &[("HTTPS_PROXY", &p.url)], &["127.0.0.1", &port_s], &payload);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.len(), payload.len(), "{err}");
    assert!(out == payload, "the relayed bytes differ");

    // The same through SOCKS5 (a socks5h:// proxy URL, as SANDGATE_SOCKS_PROXY gives).
    let socks = p.url.replace("http://", "socks5h://");
    let (code, out, err) = connect(&env, &[], &["--proxy", &socks, "127.0.0.1", &port_s], b"ping");
    assert_eq!((code, out.as_slice()), (0, &b"ping"[..]), "{err}");

    // Denied: exit 1, and the message names the rule.
    let (code, out, err) =
        connect(&env, &[("HTTPS_PROXY", &p.url)], &["git.denied.example", "22"], b"x");
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty());
    assert!(err.contains("git.denied.example:22 refused by the proxy: HTTP/1.1 403"), "{err}");
    assert!(err.contains("deny git.denied.example (command line)"), "{err}");
    let (code, _, err) = connect(&env, &[], &["--proxy", &socks, "git.denied.example", "22"], b"x");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("connection not allowed by ruleset"), "{err}");

    // Another port of the allowed address is not allowed.
    let (code, _, err) = connect(&env, &[("HTTPS_PROXY", &p.url)], &["127.0.0.1", "1"], b"x");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("403"), "{err}");

    // A host that would smuggle a header into CONNECT is refused before anything is sent.
    let (code, _, err) =
        connect(&env, &[("HTTPS_PROXY", &p.url)], &["a.example\r\nX-Evil: 1", "22"], b"");
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = connect(&env, &[], &["a.example", "22"], b"");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no proxy"), "{err}");
}

fn curl(proxy: &str, url: &str) -> (bool, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "--noproxy", "", "-x", proxy, url])
        .output()
        .expect("curl must be installed");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// The host's own services: loopback is refused unless allowed, and then only that port, in
/// both the address form and the `localhost` form.
#[test]
fn host_services_are_reached_only_when_allowed_by_address_or_localhost() {
    let env = Env::new();
    let by_ip = origin("host service by ip\n");
    let by_name = origin("host service by name\n");
    let p = proxy(
        &env,
        &["--allow", &format!("127.0.0.1:{by_ip}"), "--allow", &format!("localhost:{by_name}")],
    );
    let (ok, body) = curl(&p.url, &format!("http://127.0.0.1:{by_ip}/"));
    assert!(ok && body == "host service by ip\n", "{body}");
    let (ok, body) = curl(&p.url, &format!("http://localhost:{by_name}/"));
    assert!(ok && body == "host service by name\n", "{body}");
    // Each rule opens its one port, and nothing else on loopback.
    let (_, body) = curl(&p.url, &format!("http://localhost:{by_ip}/"));
    assert!(body.contains("403") || body.contains("no approver"), "{body}");
    let (_, body) = curl(&p.url, &format!("http://127.0.0.1:{by_name}/"));
    assert!(body.contains("no approver"), "{body}");
    // Names are normalised before matching: `localhost.` is `localhost`.
    let (_, body) = curl(&p.url, &format!("http://localhost.:{by_name}/"));
    assert!(body.contains("host service by name"), "{body}");
}

/// A CONNECT relay standing in for a corporate proxy: records each request head, and connects
/// every name to 127.0.0.1 on the asked port.
fn corporate_relay() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::Read;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = asked.clone();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if s.read(&mut b).unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(b[0]);
                }
                let text = String::from_utf8_lossy(&head).into_owned();
                log.lock().unwrap().push(text.clone());
                let target = text.split_whitespace().nth(1).unwrap_or("").to_owned();
                let port = target.rsplit(':').next().unwrap_or("0").to_owned();
                let Ok(up) = TcpStream::connect(format!("127.0.0.1:{port}")) else { return };
                let _ = s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
                let (mut a, mut b2) = (s.try_clone().unwrap(), up.try_clone().unwrap());
                let (mut s, mut up) = (s, up);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut a, &mut b2);
                    let _ = b2.shutdown(std::net::Shutdown::Write);
                });
                let _ = std::io::copy(&mut up, &mut s);
            });
        }
    });
    (port, asked)
}

#[test]
fn sandgate_proxy_leaves_through_the_configured_upstream_with_its_credentials() {
    let env = Env::new();
    let echo_port = echo();
    let (relay, asked) = corporate_relay();
    let cfg = env.config_home().join("upstream.toml");
    std::fs::write(
        &cfg,
        format!(
            "[proxy]\nupstream = \"http://127.0.0.1:{relay}\"\n\
             upstream_credentials = \"env:TEST_CORP_AUTH\"\nupstream_bypass = [\"127.0.0.1\"]\n"
        ),
    )
    .unwrap();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let target = format!("inside.corp.example:{echo_port}");
    let mut child = env
        .cmd()
        .args(["proxy", "--listen", &listen, "--config"])
        .arg(&cfg)
        .args(["--allow", &target, "--deny", "denied.example"])
        .env("TEST_CORP_AUTH", "corp:pw")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    crate::support::until_listening(&listen, &mut child);
    let p = Proxy { child, url: format!("http://{listen}") };
    let ep = echo_port.to_string();
    let (code, out, err) =
        connect(&env, &[("HTTPS_PROXY", &p.url)], &["inside.corp.example", &ep], b"via corp");
    assert_eq!((code, out.as_slice()), (0, &b"via corp"[..]), "{err}");
    let (code, _, err) = connect(&env, &[("HTTPS_PROXY", &p.url)], &["denied.example", "22"], b"");
    assert_eq!(code, 1, "{err}");
    let a = asked.lock().unwrap().clone();
    assert_eq!(a.len(), 1, "the relay hears only of what sandgate allowed: {a:?}");
    assert!(a[0].starts_with(&format!("CONNECT {target} HTTP/1.1\r\n")), "{a:?}");
    assert!(a[0].contains("Proxy-Authorization: Basic Y29ycDpwdw==\r\n"), "{a:?}");
}

/// Without a daemon the launcher serves the sandbox's proxy itself; the corporate upstream
/// applies there too (the fallback is no way around it). Control: the relay hears of the
/// allowed target only, once, with the configured credentials.
#[test]
fn the_launchers_own_proxy_leaves_through_the_configured_upstream_too() {
    let root = sandgate_tests::is_root();
    if sandgate_tests::skip_unless(root, "root (the net tier)") {
        return;
    }
    let env = Env::outside_tmp();
    let echo_port = echo();
    let (relay, asked) = corporate_relay();
    let dir = env.config_home().join("sandgate");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.toml"),
        format!(
            "[proxy]\nupstream = \"http://127.0.0.1:{relay}\"\n\
             upstream_credentials = \"env:TEST_CORP_AUTH\"\n"
        ),
    )
    .unwrap();
    let target = format!("inside.corp.example:{echo_port}");
    let bin = sandgate_tests::sandgate_bin();
    let script =
        format!("printf 'via corp' | '{}' connect inside.corp.example {echo_port}", bin.display());
    let out = env
        .cmd()
        .env("SANDGATE_NO_DAEMON", "1")
        .env("TEST_CORP_AUTH", "corp:pw")
        .current_dir(env.root.path())
        .args(["net", "-q", "--allow", &target, "--", "sh", "-c", &script])
        .output()
        .unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout, "via corp", "{stderr}");
    let a = asked.lock().unwrap().clone();
    assert_eq!(a.len(), 1, "the relay hears of the one allowed connection: {a:?}");
    assert!(a[0].starts_with(&format!("CONNECT {target} HTTP/1.1\r\n")), "{a:?}");
    assert!(a[0].contains("Proxy-Authorization: Basic Y29ycDpwdw==\r\n"), "{a:?}");
}
