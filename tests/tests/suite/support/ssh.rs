//! A real sshd (Debian's openssh-server) for the tests of ssh and git over ssh from inside a
//! sandbox: a host key and an authorized client key made for the test, a bare repository to
//! clone.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::daemon::wait_until;

/// An sshd on 127.0.0.1; killed on drop.
pub struct Sshd {
    child: std::process::Child,
    pub port: u16,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `cmd`; panics with its stderr unless it succeeded.
pub fn run_ok(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Whether sshd, ssh-keygen and git are installed.
pub fn have_tools() -> bool {
    ["/usr/sbin/sshd", "ssh", "ssh-keygen", "git"].iter().all(|t| {
        Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// A new ed25519 key pair without a passphrase at `path` (and `path.pub`).
pub fn keygen(path: &Path) {
    run_ok(Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-f"]).arg(path));
}

/// The configuration of an sshd listening on `listen:port` that lets in the holder of
/// `client_pub`'s key (as root, key only), with its host key and pid file in `dir`; its path.
pub fn sshd_config(dir: &Path, client_pub: &Path, listen: &str, port: u16) -> PathBuf {
    let host_key = dir.join(format!("host_key_{port}"));
    keygen(&host_key);
    let config = dir.join(format!("sshd_config_{port}"));
    std::fs::write(
        &config,
        format!(
            "Port {port}\nListenAddress {listen}\nHostKey {}\nAuthorizedKeysFile {}\n\
             PidFile {}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n",
            host_key.display(),
            client_pub.display(),
            dir.join(format!("sshd_{port}.pid")).display()
        ),
    )
    .unwrap();
    // sshd's privilege separation directory.
    std::fs::create_dir_all("/run/sshd").unwrap();
    config
}

/// An sshd on 127.0.0.1 (a free port) for the key `client_pub`.
pub fn sshd(dir: &Path, client_pub: &Path) -> Sshd {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = sshd_config(dir, client_pub, "127.0.0.1", port);
    let child = Command::new("/usr/sbin/sshd")
        .args(["-D", "-e", "-f"])
        .arg(&config)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until("sshd listening", Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    Sshd { child, port }
}

/// A bare repository `dir/repo.git` with one commit whose README says `text`; its path.
pub fn bare_repo(dir: &Path, text: &str) -> PathBuf {
    let work = dir.join("work");
    let git = |args: &[&str], cwd: &Path| {
        run_ok(
            Command::new("git")
                .args([
                    "-c",
                    "user.name=t",
                    "-c",
                    "user.email=t@t",
                    "-c",
                    "init.defaultBranch=main",
                ])
                .args(args)
                .current_dir(cwd),
        )
    };
    std::fs::create_dir_all(&work).unwrap();
    git(&["init", "-q"], &work);
    std::fs::write(work.join("README"), text).unwrap();
    git(&["add", "README"], &work);
    git(&["commit", "-qm", "first"], &work);
    let bare = dir.join("repo.git");
    git(&["clone", "-q", "--bare", work.to_str().unwrap(), bare.to_str().unwrap()], dir);
    bare
}
