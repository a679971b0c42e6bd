//! Real kernel (Linux, root): NflogSocket inside a network namespace the test creates — the
//! blocking and tokio receive paths, fd hand-over, ENOBUFS counted and survived, group conflicts.
#![cfg(target_os = "linux")]

use std::fs::File;
use std::io::Write;
use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use sandgate_monitor::nflog::{NflogConfig, NflogSocket};
use sandgate_monitor::{BlockedPacket, Protocol};

static N: AtomicU32 = AtomicU32::new(0);

fn skip() -> bool {
    let ok = nix::unistd::geteuid().is_root()
        && Command::new("nft").arg("--version").output().is_ok_and(|o| o.status.success())
        && Command::new("ip").arg("-V").output().is_ok_and(|o| o.status.success());
    sandgate_test_support::skip_unless(ok, "root, the `nft` command or the `ip` command")
}

/// A namespace with `lo` up and a veth pair (both ends inside) holding 10.202.0.1/24 (so UDP to 10.202.0.9 is
/// routed out and meets the output chain), and a ruleset that logs UDP to that subnet to `group`
/// and drops it. Deleted on drop.
struct Ns(String);

impl Ns {
    fn new(group: u16) -> Ns {
        let name = format!("sgm-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
        let run = |args: &[&str], stdin: Option<&str>| {
            let mut c = Command::new(args[0])
                .args(&args[1..])
                .stdin(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            if let Some(s) = stdin {
                c.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
            }
            drop(c.stdin.take());
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        run(&["ip", "netns", "add", &name], None);
        let ns = Ns(name.clone());
        run(&["ip", "-n", &name, "link", "set", "lo", "up"], None);
        run(&["ip", "-n", &name, "link", "add", "d0", "type", "veth", "peer", "name", "d1"], None);
        run(&["ip", "-n", &name, "link", "set", "d1", "up"], None);
        run(&["ip", "-n", &name, "addr", "add", "10.202.0.1/24", "dev", "d0"], None);
        run(&["ip", "-n", &name, "link", "set", "d0", "up"], None);
        let rules = format!(
            "table inet t {{\n chain o {{\n  type filter hook output priority 0; policy accept;\n  \
             ip daddr 10.202.0.0/24 udp dport 9 log prefix \"mon-test\" group {group} drop\n }}\n}}\n"
        );
        run(&["ip", "netns", "exec", &name, "nft", "-f", "-"], Some(&rules));
        ns
    }

    fn enter<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.0);
        std::thread::scope(|s| {
            s.spawn(|| {
                nix::sched::setns(File::open(&path).unwrap(), nix::sched::CloneFlags::CLONE_NEWNET)
                    .expect("setns");
                f()
            })
            .join()
            .expect("netns thread panicked")
        })
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn group() -> u16 {
    (20_000 + (std::process::id() * 131 + N.fetch_add(1, Ordering::Relaxed) * 977) % 40_000) as u16
}

fn send_udp(n: usize) {
    let s = UdpSocket::bind("10.202.0.1:0").unwrap();
    for _ in 0..n {
        // Dropped in the output chain: the send itself reports EPERM.
        let _ = s.send_to(b"x", "10.202.0.9:9");
    }
}

fn wait_for(sock: &mut NflogSocket, n: usize) -> Vec<BlockedPacket> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        got.extend(sock.recv(Duration::from_millis(100)).expect("recv"));
    }
    got
}

#[test]
fn blocking_recv_and_fd_handover() {
    if skip() {
        return;
    }
    let g = group();
    let ns = Ns::new(g);
    let got = ns.enter(|| {
        let sock = NflogSocket::open(g).expect("open");
        // Hand the fd over as the launcher does, and take it back.
        let mut sock = NflogSocket::from_fd(sock.into_fd());
        assert!(sock.recv(Duration::from_millis(10)).unwrap().is_empty(), "nothing yet");
        send_udp(3);
        wait_for(&mut sock, 3)
    });
    assert_eq!(got.len(), 3, "{got:#?}");
    for p in got {
        assert_eq!(
            (p.protocol, p.dst_port, p.prefix.as_str()),
            (Protocol::Udp, Some(9), "mon-test")
        );
        assert_eq!(p.dst.to_string(), "10.202.0.9");
        assert_eq!(p.uid, Some(0));
    }
}

#[test]
fn tokio_recv() {
    if skip() {
        return;
    }
    let g = group();
    let ns = Ns::new(g);
    let got = ns.enter(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let mut sock = NflogSocket::open(g).expect("open").into_async().expect("register");
            send_udp(2);
            let mut got = Vec::new();
            while got.len() < 2 {
                let batch = tokio::time::timeout(Duration::from_secs(5), sock.recv())
                    .await
                    .expect("no NFLOG record within 5 s")
                    .expect("recv");
                got.extend(batch);
            }
            assert_eq!(sock.stats().packets, got.len() as u64);
            got
        })
    });
    assert!(got.iter().all(|p| p.protocol == Protocol::Udp && p.prefix == "mon-test"));
}

#[test]
fn overruns_are_counted_not_fatal() {
    if skip() {
        return;
    }
    let g = group();
    let ns = Ns::new(g);
    let (stats, after) = ns.enter(|| {
        let config = NflogConfig { socket_buffer: 1, queue_threshold: 1, ..NflogConfig::default() };
        let mut sock = NflogSocket::open_with(g, &config).expect("open");
        send_udp(5_000); // far more than a minimal receive buffer holds
        let _ = sock.recv(Duration::from_millis(200)).expect("recv after overrun");
        while !sock.recv(Duration::from_millis(50)).expect("drain").is_empty() {}
        send_udp(1);
        let after = wait_for(&mut sock, 1);
        (sock.stats(), after)
    });
    assert!(stats.overruns >= 1, "no ENOBUFS seen: {stats:?}");
    assert_eq!(after.len(), 1, "socket unusable after an overrun");
}

#[test]
fn a_group_held_by_another_socket_is_refused() {
    if skip() {
        return;
    }
    let g = group();
    let ns = Ns::new(g);
    let err = ns.enter(|| {
        let _first = NflogSocket::open(g).expect("open");
        NflogSocket::open(g).expect_err("second bind of the same group")
    });
    assert!(err.to_string().contains("BIND"), "{err}");
}
