//! The README's quick start, as a fresh user would run it on a fresh Debian 12 machine: a new
//! account with a home of its own, Debian's default user `PATH` (no `/usr/sbin`), no XDG
//! variables. `net -- curl http://example.com/` is held (nothing allows it; the name is never
//! resolved before a person answers, so nothing leaves the machine), answered from "another
//! terminal" with `sandgate deny example.com`, and curl gets the 403 written for the agent; then
//! `sandgate install` and a `sandbox-run` through the links it made.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sandgate_tests::{is_root, sandgate_bin, skip_unless};

/// Debian 12's default `PATH` for users (`/etc/login.defs` ENV_PATH).
const DEBIAN_USER_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games";

struct FreshUser {
    name: String,
    home: PathBuf,
}

impl FreshUser {
    fn new() -> Option<FreshUser> {
        let name = format!("sgqs{}", std::process::id() % 1_000_000);
        let home = PathBuf::from(format!("/var/tmp/{name}-home"));
        let ok = Command::new("useradd")
            .args(["--create-home", "--home-dir", home.to_str()?, "--shell", "/bin/bash", &name])
            .status()
            .is_ok_and(|s| s.success());
        if skip_unless(ok, "useradd (a fresh user)") {
            return None;
        }
        Some(FreshUser { name, home })
    }

    /// `sandgate ARGS` as this user, with only what a login would give it.
    fn sandgate(&self, args: &[&str]) -> Command {
        self.program(&sandgate_bin(), args)
    }

    fn program(&self, program: &Path, args: &[&str]) -> Command {
        let mut c = Command::new("setpriv");
        c.args(["--reuid", &self.name, "--regid", &self.name, "--init-groups", "--"])
            .arg(program)
            .args(args)
            .env_clear()
            .env("PATH", DEBIAN_USER_PATH)
            .env("HOME", &self.home)
            .env("USER", &self.name)
            .env("LOGNAME", &self.name)
            .env("SHELL", "/bin/bash")
            .current_dir(&self.home)
            .stdin(Stdio::null());
        c
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let out = self.sandgate(args).output().unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
    }
}

impl Drop for FreshUser {
    fn drop(&mut self) {
        let _ = self.sandgate(&["stop"]).output();
        let _ = Command::new("pkill").args(["-KILL", "-u", &self.name]).status();
        let _ =
            Command::new("userdel").args(["--remove", &self.name]).stderr(Stdio::null()).status();
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_quick_start_works_for_a_fresh_user_with_debians_default_path() {
    if skip_unless(is_root(), "root (creates a user)") {
        return;
    }
    let Some(user) = FreshUser::new() else { return };

    // The main job: a held request, answered from another terminal.
    let run = user
        .sandgate(&["net", "--", "curl", "-s", "http://example.com/"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pending = user.json(&["pending", "--json"]);
        if pending.as_array().is_some_and(|q| q.iter().any(|q| q["host"] == "example.com")) {
            break;
        }
        assert!(Instant::now() < deadline, "no question about example.com: {pending}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let answer = user.sandgate(&["deny", "example.com"]).output().unwrap();
    assert!(answer.status.success(), "{:?}", text(&answer));
    let out = run.wait_with_output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("sandgate") && stdout.contains("example.com"), "{stdout}\n{stderr}");
    assert!(stderr.contains("waiting for approval of example.com:80"), "{stderr}");

    // Install: the links, then a tier through its link.
    let out = user.sandgate(&["install"]).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("is not on your PATH"), "Debian's PATH has no ~/.local/bin: {stdout}");
    let link = user.home.join(".local/bin/sandbox-run");
    let out = user
        .program(&link, &["sh", "-c", "echo $SANDGATE_TIER; touch ~/x 2>/dev/null || echo ro"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(stdout, "run\nro\n", "{stderr}");
    assert!(user.home.join(".local/share/man/man1/sandgate.1").is_file());
}
