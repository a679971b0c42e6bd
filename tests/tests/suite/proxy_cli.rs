//! `sandgate proxy` in the foreground: curl through it, a denial, and a clean SIGTERM exit.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};

use sandgate_tests::Env;

/// A one-response-per-connection HTTP origin on 127.0.0.1.
fn origin() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nConnection: close\r\n\r\nhello, proxy\n",
            );
        }
    });
    port
}

fn curl(args: &[&str]) -> (bool, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20"])
        .args(args)
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("HTTPS_PROXY")
        .output()
        .expect("curl must be installed");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn sandgate_proxy_forwards_denies_and_exits_cleanly_on_sigterm() {
    let env = Env::new();
    let origin = origin();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = env
        .cmd()
        .args(["proxy", "--listen", &listen, "--allow", "127.0.0.1", "--deny", "denied.example"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    crate::support::until_listening(&listen, &mut child);
    let proxy = format!("http://{listen}");

    let (ok, body) = curl(&["-x", &proxy, &format!("http://127.0.0.1:{origin}/")]);
    assert!(ok, "{body}");
    assert_eq!(body, "hello, proxy\n");

    let (_, body) = curl(&["-i", "-x", &proxy, "http://denied.example/"]);
    assert!(body.starts_with("HTTP/1.1 403"), "{body}");
    assert!(body.contains("deny denied.example (command line)"), "{body}");

    let (_, body) = curl(&["-i", "-x", &proxy, "http://unknown.example/"]);
    assert!(body.contains("no approver is running"), "{body}");

    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let status = child.wait().unwrap();
    let mut log = String::new();
    child.stderr.take().unwrap().read_to_string(&mut log).unwrap();
    assert!(status.success(), "exit {status:?}; log:\n{log}");
    assert!(log.contains("sandgate proxy listening"), "{log}");
    assert!(log.contains("shutting down"), "{log}");
}
