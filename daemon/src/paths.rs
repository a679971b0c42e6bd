//! Where the daemon keeps its runtime files: `$XDG_RUNTIME_DIR/sandgate/` (or, when the variable
//! is unset, `/run/user/UID/sandgate/` if the login session made `/run/user/UID`, else
//! `/tmp/sandgate-UID/`), a 0700 directory owned by the user.

use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

/// The socket that answers a `build` launch's scan from the daemon's index (`tree_socket`
/// binds it in the runtime directory, a launcher connects to it).
#[cfg(target_os = "linux")]
pub(crate) const TREE_SOCKET: &str = "tree.sock";

/// The runtime files.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The directory.
    pub dir: PathBuf,
    /// The control socket (0600).
    pub socket: PathBuf,
    /// Held (flock) by the running daemon for its whole life; holds its pid.
    pub pid_file: PathBuf,
    /// Held by a launcher while it starts a daemon, so two launchers do not start two.
    pub start_lock: PathBuf,
    /// Where an auto-started daemon writes its log.
    pub log: PathBuf,
}

impl Paths {
    /// The socket that hands out networks of `kind` made ahead (`network_sockets` binds it, a
    /// launcher connects to it).
    #[cfg(target_os = "linux")]
    pub(crate) fn network_socket(&self, kind: sandgate_sandbox::NetKind) -> PathBuf {
        self.dir.join(format!("network-{}.sock", kind.name()))
    }

    /// The paths for this user (the directory is not created).
    pub fn discover() -> Paths {
        let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
            Some(d) => PathBuf::from(d).join("sandgate"),
            // Where a login session would have put it, so that a shell without the variable
            // (su, sudo -u, cron) finds the same daemon as the user's other sessions.
            None => match session_runtime_dir() {
                Some(d) => d.join("sandgate"),
                None => PathBuf::from(format!("/tmp/sandgate-{}", nix::unistd::geteuid())),
            },
        };
        Paths::in_dir(dir)
    }

    /// The other places a daemon of this user may have its runtime directory (existing or not),
    /// when another shell's environment picked them. A sandbox hides them too.
    pub fn others(&self) -> Vec<PathBuf> {
        let session = session_runtime_dir().map(|d| d.join("sandgate"));
        let tmp = PathBuf::from(format!("/tmp/sandgate-{}", nix::unistd::geteuid()));
        session.into_iter().chain([tmp]).filter(|d| *d != self.dir).collect()
    }

    /// The paths inside `dir`.
    pub fn in_dir(dir: PathBuf) -> Paths {
        Paths {
            socket: dir.join("control.sock"),
            pid_file: dir.join("daemon.pid"),
            start_lock: dir.join("start.lock"),
            log: dir.join("daemon.log"),
            dir,
        }
    }

    /// Creates the directory (0700) if needed and checks that it is ours: a directory, not a
    /// link, owned by this user, not writable by anyone else.
    pub fn ensure_dir(&self) -> anyhow::Result<()> {
        match std::fs::DirBuilder::new().mode(0o700).recursive(false).create(&self.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .recursive(true)
                    .create(&self.dir)
                    .with_context(|| format!("cannot create {}", self.dir.display()))?;
            }
            Err(e) => {
                return Err(e).with_context(|| format!("cannot create {}", self.dir.display()));
            }
        }
        check_private_dir(&self.dir)
    }
}

/// `/run/user/UID` when it exists and belongs to this user (systemd-logind makes it per login).
fn session_runtime_dir() -> Option<PathBuf> {
    let uid = nix::unistd::geteuid().as_raw();
    let dir = PathBuf::from(format!("/run/user/{uid}"));
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    (meta.is_dir() && meta.uid() == uid).then_some(dir)
}

fn check_private_dir(dir: &Path) -> anyhow::Result<()> {
    let meta =
        std::fs::symlink_metadata(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    let me = nix::unistd::geteuid().as_raw();
    if !meta.is_dir() {
        bail!("{} is not a directory (a link?); remove it and retry", dir.display());
    }
    if meta.uid() != me {
        bail!(
            "{} belongs to uid {}, not to you (uid {me}); remove it or set XDG_RUNTIME_DIR",
            dir.display(),
            meta.uid()
        );
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot make {} private (chmod 700)", dir.display()))?;
    }
    Ok(())
}

/// The name of the small launcher binary (`sandbox-run`, `sandbox-net` and `sandbox-build` link
/// to it when it is installed): the tiers' code without the daemon's and the proxy's.
pub const LAUNCHER_NAME: &str = "sandgate-launch";

static SMALL_LAUNCHER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Said by the small launcher's `main` ([`LAUNCHER_NAME`]): this process has no daemon, proxy or
/// other subcommand of its own, and [`sandgate_exe`] is the binary next to it. (Told, not
/// guessed from the file's name: a renamed copy, or a platform whose executable path is the link
/// it was started through, would otherwise run itself for ever.)
pub fn running_the_small_launcher() {
    SMALL_LAUNCHER.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The `sandgate` binary: this one, or, in the small launcher, the one next to its real file.
pub fn sandgate_exe() -> std::io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    if SMALL_LAUNCHER.load(std::sync::atomic::Ordering::Relaxed) {
        let real = exe.canonicalize().unwrap_or(exe);
        return Ok(real.with_file_name("sandgate"));
    }
    Ok(exe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_is_made_private_and_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let p = Paths::in_dir(tmp.path().join("a/sandgate"));
        p.ensure_dir().unwrap();
        let mode = std::fs::metadata(&p.dir).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::set_permissions(&p.dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        p.ensure_dir().unwrap();
        assert_eq!(std::fs::metadata(&p.dir).unwrap().mode() & 0o777, 0o700);
        let link = Paths::in_dir(tmp.path().join("link"));
        std::os::unix::fs::symlink(&p.dir, &link.dir).unwrap();
        assert!(link.ensure_dir().unwrap_err().to_string().contains("not a directory"));
        assert_eq!(p.socket.file_name().unwrap(), "control.sock");
    }
}
