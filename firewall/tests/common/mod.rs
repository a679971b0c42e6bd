//! Helpers of the real-kernel tests: capability checks, network namespaces and veth links the
//! test creates (and deletes), temporary users.
//!
//! Addresses live in 10.201.K.0/24 and fd00:5a9d:K::/64 with K chosen per test, only on links the
//! test created.

#![allow(dead_code)]

use std::fs::File;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

#[allow(unused_imports)] // each test binary uses a different part
pub use sandgate_test_support::{in_ci, skip, skip_unless};

/// `true` (skip) when the kernel capabilities are missing outside CI; panics in CI.
pub fn skip_without_kernel() -> bool {
    let why = if !nix::unistd::geteuid().is_root() {
        Some("root")
    } else if !Command::new("nft").arg("--version").output().is_ok_and(|o| o.status.success()) {
        Some("the `nft` command")
    } else if !Command::new("ip").arg("-V").output().is_ok_and(|o| o.status.success()) {
        Some("the `ip` command (iproute2)")
    } else {
        None
    };
    match why {
        None => false,
        Some(what) => skip_unless(false, what),
    }
}

/// Runs a command, panicking with its stderr when it fails.
pub fn sh(args: &[&str]) -> Output {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// Runs a command with `stdin` and returns its output, failed or not.
pub fn run_with_stdin(args: &[&str], stdin: &[u8]) -> Output {
    use std::io::Write;
    let mut child = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let _ = child.stdin.take().map(|mut s| s.write_all(stdin));
    child.wait_with_output().unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A short unique tag for names (netns, veth, users): fits 15-byte interface names.
pub fn unique() -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{}{n}", std::process::id() % 100_000)
}

/// A subnet number K in 10.201.K.0/24 for this test.
pub fn subnet() -> u8 {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    (10 + (std::process::id() + n * 37) % 240) as u8
}

/// A random-ish NFLOG group in 20000..60000 so parallel tests do not collide.
pub fn nflog_group() -> u16 {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    (20_000 + (std::process::id().wrapping_mul(7919) + n * 104_729) % 40_000) as u16
}

/// A network namespace created by the test; deleted on drop.
pub struct NetNs {
    /// Its name under /run/netns.
    pub name: String,
}

impl NetNs {
    /// `ip netns add`, with `lo` up.
    pub fn new(tag: &str) -> Self {
        let name = format!("sgt-{tag}-{}", unique());
        sh(&["ip", "netns", "add", &name]);
        sh(&["ip", "-n", &name, "link", "set", "lo", "up"]);
        NetNs { name }
    }

    /// `ip netns exec NAME args...`, panicking on failure.
    pub fn exec(&self, args: &[&str]) -> Output {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        sh(&full)
    }

    /// Runs `f` on a thread that has entered this namespace; sockets it opens live in it.
    pub fn enter<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::scope(|s| {
            s.spawn(|| {
                let ns = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
                nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
                f()
            })
            .join()
            .expect("thread in netns panicked")
        })
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

/// The addresses of one end of a [`veth`] link.
#[derive(Debug, Clone, Copy)]
pub struct End {
    /// IPv4 address.
    pub v4: std::net::Ipv4Addr,
    /// IPv6 address.
    pub v6: std::net::Ipv6Addr,
}

/// Links `a` (or the host namespace when `None`) and `b` with a veth pair on subnet K:
/// a = .1 / ::1, b = .2 / ::2, each with a default route to the other. Returns (a, b) addresses.
/// The link disappears with the namespace(s).
pub fn veth(a: Option<&NetNs>, b: &NetNs, k: u8) -> (End, End) {
    let tag = unique();
    let (ia, ib) = (format!("sga{tag}"), format!("sgb{tag}"));
    sh(&["ip", "link", "add", &ia, "type", "veth", "peer", "name", &ib, "netns", &b.name]);
    if let Some(a) = a {
        sh(&["ip", "link", "set", &ia, "netns", &a.name]);
    }
    let ends = [
        (a.map(|n| n.name.as_str()), ia.as_str(), 1u8, 2u8),
        (Some(b.name.as_str()), ib.as_str(), 2u8, 1u8),
    ];
    for (ns, ifname, me, peer) in ends {
        let ip = |rest: &[&str]| {
            let mut full: Vec<&str> = vec!["ip"];
            if let Some(ns) = ns {
                full.extend(["-n", ns]);
            }
            full.extend_from_slice(rest);
            sh(&full);
        };
        let v4 = format!("10.201.{k}.{me}/24");
        let v6 = format!("fd00:5a9d:{k:x}::{me}/64");
        ip(&["addr", "add", &v4, "dev", ifname]);
        ip(&["-6", "addr", "add", &v6, "dev", ifname, "nodad"]);
        ip(&["link", "set", ifname, "up"]);
        if ns.is_some() {
            let gw4 = format!("10.201.{k}.{peer}");
            let gw6 = format!("fd00:5a9d:{k:x}::{peer}");
            ip(&["route", "replace", "default", "via", &gw4]);
            ip(&["-6", "route", "replace", "default", "via", &gw6]);
        }
    }
    let end = |n: u8| End {
        v4: format!("10.201.{k}.{n}").parse().unwrap(),
        v6: format!("fd00:5a9d:{k:x}::{n}").parse().unwrap(),
    };
    (end(1), end(2))
}

/// A system user created for the test (`useradd --system --no-create-home`); deleted on drop.
pub struct TestUser {
    /// Login name.
    pub name: String,
    /// Uid.
    pub uid: u32,
    /// Primary gid.
    pub gid: u32,
}

impl TestUser {
    /// Creates `sgtestNNNN`.
    pub fn new() -> Self {
        let name = format!("sgtest{}", unique());
        sh(&["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", &name]);
        let id = |flag: &str| -> u32 {
            String::from_utf8_lossy(&sh(&["id", flag, &name]).stdout).trim().parse().unwrap()
        };
        let (uid, gid) = (id("-u"), id("-g"));
        TestUser { name, uid, gid }
    }

    /// Creates a normal (non-system) user `sgsubNNNN`, for which `useradd` allocates subordinate
    /// uid and gid ranges in `/etc/subuid` and `/etc/subgid` (Debian's login.defs
    /// `SUB_UID_COUNT`); `None` (after a skip message, or a panic in CI) when it did not.
    pub fn with_subids() -> Option<Self> {
        let name = format!("sgsub{}", unique());
        sh(&["useradd", "--no-create-home", "--shell", "/bin/sh", &name]);
        let id = |flag: &str| -> u32 {
            String::from_utf8_lossy(&sh(&["id", flag, &name]).stdout).trim().parse().unwrap()
        };
        let user = TestUser { uid: id("-u"), gid: id("-g"), name };
        let has = |file: &str| {
            std::fs::read_to_string(file)
                .unwrap_or_default()
                .lines()
                .any(|l| l.starts_with(&format!("{}:", user.name)))
        };
        if !(has("/etc/subuid") && has("/etc/subgid")) {
            skip("useradd allocates no subordinate ids here (login.defs SUB_UID_COUNT)");
            return None;
        }
        Some(user)
    }

    /// Runs `f` on a thread whose file-system uid and gid are this user's: sockets it creates
    /// belong to the user (`meta skuid`), as if the user had opened them.
    pub fn as_socket_owner<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        use nix::unistd::{Gid, Uid, setfsgid, setfsuid};
        std::thread::scope(|s| {
            s.spawn(|| {
                // Per-thread credentials (the raw syscalls, not glibc's process-wide setxid).
                setfsgid(Gid::from_raw(self.gid));
                setfsuid(Uid::from_raw(self.uid));
                let out = f();
                setfsuid(Uid::from_raw(0));
                setfsgid(Gid::from_raw(0));
                out
            })
            .join()
            .expect("thread as socket owner panicked")
        })
    }

    /// Deletes the user now (for gc tests).
    pub fn delete(&mut self) {
        if !self.name.is_empty() {
            let _ = Command::new("userdel").arg(&self.name).stderr(Stdio::null()).status();
        }
    }

    /// A command line running `args` as this user (with `CAP_NET_RAW` when `raw`, for ICMP).
    pub fn cmd(&self, raw: bool, args: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = vec![
            "setpriv".into(),
            format!("--reuid={}", self.uid),
            format!("--regid={}", self.gid),
            "--clear-groups".into(),
        ];
        if raw {
            v.push("--inh-caps=+net_raw".into());
            v.push("--ambient-caps=+net_raw".into());
        }
        v.extend(args.iter().map(|s| s.to_string()));
        v
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        self.delete();
    }
}
