//! Shared fixtures of the daemon's end-to-end tests: a private environment with its own daemon,
//! a project directory and a configuration, curl commands for sandboxed clients, and helpers that
//! wait for lines and conditions.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sandgate_tests::Env;
pub use sandgate_tests::has_script;
use serde_json::Value;

pub fn can_sandbox() -> bool {
    let root = sandgate_tests::is_root();
    root && Command::new("curl").arg("--version").output().is_ok()
        && Command::new("python3").arg("--version").output().is_ok()
}

pub struct DaemonEnv {
    pub env: Env,
    pub proj: PathBuf,
    /// Variables set (`Some`) or removed (`None`) for every command after [`Env::cmd`]'s (and so
    /// for the daemon a launcher starts).
    pub vars: Vec<(String, Option<String>)>,
}

impl DaemonEnv {
    pub fn new(config: &str) -> DaemonEnv {
        let env = Env::outside_tmp();
        let proj = env.root.path().join("proj");
        std::fs::create_dir_all(&proj).unwrap();
        let dir = env.config_home().join("sandgate");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.toml"), config).unwrap();
        DaemonEnv { env, proj, vars: Vec::new() }
    }

    pub fn cmd(&self) -> Command {
        let mut c = self.env.cmd();
        c.current_dir(&self.proj).stdin(Stdio::null());
        for (k, v) in &self.vars {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c
    }

    pub fn sg(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
    }

    /// JSON lines of `sandgate ARGS`, one value per line.
    #[allow(dead_code)]
    pub fn json_lines(&self, args: &[&str]) -> Vec<Value> {
        let out = self.sg(args);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{args:?}: {e}: {l}")))
            .collect()
    }

    pub fn json(&self, args: &[&str]) -> Value {
        let out = self.sg(args);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{args:?}: {e}\nstdout {}\nstderr {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }

    pub fn status(&self) -> Value {
        self.json(&["status", "--json"])
    }

    /// `status --json`, or `Null` while no daemon answers cleanly (one is restarting).
    pub fn status_now(&self) -> Value {
        serde_json::from_slice(&self.sg(&["status", "--json"]).stdout).unwrap_or(Value::Null)
    }

    /// `sandgate net ARGS -- CMD` in the background, stdout and stderr piped.
    pub fn spawn_net(&self, args: &[&str], cmd: &[&str]) -> Child {
        self.cmd()
            .arg("net")
            .args(args)
            .arg("--")
            .args(cmd)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Has the daemon commit the events it queued (`{"op":"flush"}`): whatever it published
    /// before this call is in the store once it returns.
    pub fn flush_events(&self) {
        let mut c = UnixStream::connect(self.socket()).unwrap();
        let mut r = BufReader::new(c.try_clone().unwrap());
        let reply = request(&mut c, &mut r, r#"{"id":1,"op":"flush"}"#);
        assert_eq!(reply["ok"], true, "{reply}");
    }

    pub fn socket(&self) -> PathBuf {
        self.env.root.path().join("run/sandgate/control.sock")
    }

    pub fn store_path(&self) -> PathBuf {
        self.env.root.path().join("data/sandgate/sandgate.db")
    }
}

/// curl of `url` printing only the status code, giving up after 20 s.
pub fn curl(url: &str) -> Vec<String> {
    curl_within(url, 20)
}

/// [`curl`] giving up after `secs` seconds.
pub fn curl_within(url: &str, secs: u32) -> Vec<String> {
    let secs = secs.to_string();
    [
        "curl",
        "-sS",
        "--max-time",
        &secs,
        "--noproxy",
        "",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}\n",
        url,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// [`curl`] as one shell command (each word quoted).
pub fn curl_sh(url: &str) -> String {
    curl(url)
        .iter()
        .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn lines_of(r: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(r).lines() {
            let Ok(l) = l else { return };
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    rx
}

pub fn expect_line(
    rx: &mpsc::Receiver<String>,
    timeout: Duration,
    pred: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if pred(&l) => return l,
            Ok(l) => seen.push(l),
            Err(e) => panic!("expected line not seen ({e}); saw:\n{}", seen.join("\n")),
        }
    }
}

pub fn finish(child: Child) -> (i32, String, String) {
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn start_daemon(t: &DaemonEnv) {
    // Any command that needs the daemon starts it.
    let out = t.sg(&["rules"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(t.socket().exists());
}

pub fn request(stream: &mut UnixStream, reader: &mut BufReader<UnixStream>, line: &str) -> Value {
    stream.write_all(line.as_bytes()).unwrap();
    stream.write_all(b"\n").unwrap();
    let mut reply = String::new();
    reader.read_line(&mut reply).unwrap();
    serde_json::from_str(&reply).unwrap_or_else(|e| panic!("{e}: {reply:?}"))
}

impl DaemonEnv {
    /// `script` (util-linux) running `sandgate ARGS` on a new pseudo-terminal, with the
    /// environment [`DaemonEnv::cmd`] gives; stdin and stdout piped (what is written to stdin is typed on
    /// the terminal).
    pub fn on_terminal(&self, args: &[&str]) -> Child {
        sandgate_tests::on_terminal(&self.cmd(), args)
    }
}

/// `kill -SIGNAL pid`.
pub fn signal(pid: u32, signal: &str) {
    let ok = Command::new("kill").args([&format!("-{signal}"), &pid.to_string()]).status();
    assert!(ok.unwrap().success(), "kill -{signal} {pid}");
}

/// Whether `pid` has exited (gone, or a zombie nobody has reaped yet).
pub fn exited(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit_once(')').is_some_and(|(_, rest)| rest.split_whitespace().next() == Some("Z"))
    })
}

/// Every live descendant of `pid` (children first found through `/proc/*/stat`'s ppid).
pub fn descendants(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let p: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
            Some((p, ppid))
        })
        .collect();
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(parent) = todo.pop() {
        for &(p, pp) in &parents {
            if pp == parent && !out.contains(&p) {
                out.push(p);
                todo.push(p);
            }
        }
    }
    out
}

/// The questions `sandgate pending --json` lists.
pub fn pending(t: &DaemonEnv) -> Vec<Value> {
    t.json(&["pending", "--json"]).as_array().cloned().unwrap_or_default()
}

/// The one pending question, once there is exactly one.
pub fn wait_for_question(t: &DaemonEnv) -> Value {
    let mut p = Vec::new();
    wait_until("a pending question", Duration::from_secs(20), || {
        p = pending(t);
        p.len() == 1
    });
    p.remove(0)
}

/// The id of the one sandbox the daemon serves, once it serves exactly one.
pub fn one_sandbox(t: &DaemonEnv) -> String {
    let mut id = String::new();
    wait_until("one sandbox registered", Duration::from_secs(20), || {
        let st = t.status_now();
        match st["sandboxes"].as_array().map(Vec::as_slice) {
            Some([s]) => {
                id = s["id"].as_str().unwrap().to_owned();
                true
            }
            _ => false,
        }
    });
    id
}
