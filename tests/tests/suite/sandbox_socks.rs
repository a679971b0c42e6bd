//! SOCKS5 and `sandgate connect` from inside a `net` sandbox, against its own daemon: a held
//! SOCKS request released by `sandgate allow`, a denied one refused with an event, and ssh (the
//! real client, through `$GIT_SSH_COMMAND`) reaching an allowed host port.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use crate::support::daemon::*;
use crate::support::ssh::{bare_repo, have_tools, keygen, sshd};
use sandgate_tests::{origin, skip_unless};
use serde_json::Value;

fn pending(t: &DaemonEnv) -> Vec<Value> {
    t.json(&["pending", "--json"]).as_array().cloned().unwrap_or_default()
}

/// curl through the sandbox's SOCKS side (`$SANDGATE_SOCKS_PROXY`), printing body and code.
fn socks_curl(url: &str) -> String {
    format!(
        "curl -sS --max-time 25 --noproxy '' -x \"$SANDGATE_SOCKS_PROXY\" -w '\\ncode=%{{http_code}}\\n' {url}; echo rc=$?"
    )
}

#[test]
fn a_held_socks_request_is_released_by_sandgate_allow() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let t = DaemonEnv::new("[daemon]\nask_timeout = \"30s\"\n");
    let url = format!("http://127.0.0.1:{}/", origin("hello over socks"));
    start_daemon(&t);
    let run = t.spawn_net(&[], &["sh", "-c", &socks_curl(&url)]);
    let mut p = Vec::new();
    wait_until("a pending SOCKS question", Duration::from_secs(20), || {
        p = pending(&t);
        p.len() == 1
    });
    assert_eq!(p[0]["method"], "SOCKS5", "{p:#?}");
    let out = t.sg(&["allow", "127.0.0.1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, stdout, stderr) = finish(run);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("hello over socks\ncode=200"), "{stdout}\n{stderr}");
    let log = t.json_lines(&["log", "--json"]);
    assert!(log.iter().any(|e| e["method"] == "SOCKS5" && e["decision"] == "allow"), "{log:#?}");
}

#[test]
fn a_denied_socks_request_is_refused_and_recorded() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let t = DaemonEnv::new("[daemon]\nask_timeout = \"30s\"\n");
    start_daemon(&t);
    let (code, stdout, stderr) = finish(t.spawn_net(
        &["--deny", "denied.example"],
        &["sh", "-c", &socks_curl("http://denied.example/")],
    ));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    // curl 97: the proxy refused the SOCKS request (reply 0x02, not allowed by ruleset).
    assert!(stdout.contains("rc=97"), "{stdout}\n{stderr}");
    assert!(pending(&t).is_empty(), "a denied name must not be asked about");
    let log = t.json_lines(&["log", "--json"]);
    let e = log
        .iter()
        .find(|e| e["method"] == "SOCKS5")
        .unwrap_or_else(|| panic!("no SOCKS5 event: {log:#?}"));
    assert_eq!((&e["decision"], &e["host"]), (&"deny".into(), &"denied.example".into()), "{e:#}");
    assert!(e["rule"].as_str().unwrap().contains("deny denied.example"), "{e:#}");
}

/// A server that speaks first like sshd: its identification line; it reads the client's and
/// hangs up (so ssh ends at once instead of waiting for a key exchange).
fn ssh_banner_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = s.write_all(b"SSH-2.0-sandgate_test_server\r\n");
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
            });
        }
    });
    port
}

#[test]
fn ssh_inside_net_goes_through_sandgate_connect() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let have_ssh = std::process::Command::new("ssh").arg("-V").output().is_ok();
    if skip_unless(have_ssh, "an ssh client") {
        return;
    }
    let t = DaemonEnv::new("[daemon]\nask_timeout = \"5s\"\n");
    start_daemon(&t);
    let port = ssh_banner_server();
    // What git runs: sh -c "$GIT_SSH_COMMAND args". The server is not a real sshd, so ssh
    // fails after the identification exchange; -v shows the exchange went through the relay.
    let script = format!(
        "printf 'GIT_SSH_COMMAND=%s\\n' \"$GIT_SSH_COMMAND\"; \
         eval \"$GIT_SSH_COMMAND -v -o BatchMode=yes -o StrictHostKeyChecking=no \
         -o UserKnownHostsFile=/dev/null -p {port} git@127.0.0.1 true\" 2>&1; \
         eval \"$GIT_SSH_COMMAND -o BatchMode=yes -p 22 git@denied.example true\" 2>&1; echo rc=$?"
    );
    let (code, stdout, stderr) = finish(t.spawn_net(
        &["--allow", &format!("127.0.0.1:{port}"), "--deny", "denied.example"],
        &["sh", "-c", &script],
    ));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let exe = sandgate_tests::sandgate_bin();
    assert!(
        stdout.contains(&format!(
            "GIT_SSH_COMMAND=ssh -o ProxyCommand='{} connect %h %p'",
            exe.display()
        )),
        "{stdout}"
    );
    assert!(stdout.contains("remote software version sandgate_test_server"), "{stdout}");
    assert!(stdout.contains("denied.example:22 refused by the proxy: HTTP/1.1 403"), "{stdout}");
    assert!(stdout.contains("deny denied.example (command line)"), "{stdout}");
    assert!(stdout.contains("rc=255"), "{stdout}");
}

#[test]
fn git_clone_over_ssh_goes_through_the_proxy_and_a_denied_host_names_the_rule() {
    if skip_unless(can_sandbox(), "root, curl and python3 (net tier)") {
        return;
    }
    let tools = have_tools();
    if skip_unless(tools, "openssh-server, ssh-keygen and git") {
        return;
    }
    let t = DaemonEnv::new("[daemon]\nask_timeout = \"5s\"\n");
    start_daemon(&t);
    let dir = t.env.root.path().join("ssh");
    std::fs::create_dir_all(&dir).unwrap();
    // The client key lives in the project (visible inside); the test passes it explicitly.
    let key = t.proj.join("id_test");
    keygen(&key);
    let server = sshd(&dir, &key.with_extension("pub"));
    let bare = bare_repo(&dir, "cloned through sandgate\n");

    let opts = format!(
        "-i {} -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=no \
         -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
        key.display()
    );
    let script = format!(
        "export GIT_SSH_COMMAND=\"$GIT_SSH_COMMAND {opts}\"; \
         git clone -q ssh://root@127.0.0.1:{port}{repo} /tmp/out && cat /tmp/out/README; \
         echo clone=$?; \
         git clone -q ssh://root@git.denied.example/x.git /tmp/denied; echo denied=$?",
        port = server.port,
        repo = bare.display()
    );
    let (code, stdout, stderr) = finish(t.spawn_net(
        &["--allow", &format!("127.0.0.1:{}", server.port), "--deny", "git.denied.example"],
        &["sh", "-c", &script],
    ));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("cloned through sandgate\nclone=0"), "{stdout}\n{stderr}");
    assert!(stdout.contains("denied=128"), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("git.denied.example:22 refused by the proxy: HTTP/1.1 403"),
        "{stderr}"
    );
    assert!(stderr.contains("deny git.denied.example (command line)"), "{stderr}");
    // The proxy saw both: an allowed tunnel to the sshd, a denied one.
    let log = t.json_lines(&["log", "--json"]);
    assert!(log.iter().any(|e| e["port"] == server.port && e["decision"] == "allow"), "{log:#?}");
    assert!(log.iter().any(|e| e["host"] == "git.denied.example" && e["decision"] == "deny"));
}
