//! The LaunchDaemon that applies a guest-user fence again at boot: pf forgets its anchors and
//! its enable tokens when the Mac restarts, and the stock `/etc/pf.conf` does not load them, so
//! without it a fenced user is unfenced after the next reboot. `sandgate firewall apply` (root)
//! writes `/Library/LaunchDaemons/org.sandgate.fence.u<UID>.plist` (root's, 0644), which runs
//! `sandgate firewall apply --uid UID --proxy ... --at-boot` at load; `remove` deletes it.
//!
//! launchd runs it as root, so the program it names must be root's to change: every directory
//! from `/` down to the executable, and the executable, owned by root and not writable by group
//! or others ([`check_boot_executable`]); otherwise whoever could replace the file would run
//! code as root at the next boot, and apply says how to install it instead.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::GuestScope;

/// Where launchd reads system daemons from.
pub const LAUNCH_DAEMONS: &str = "/Library/LaunchDaemons";

/// The flag the boot job passes to `apply` (it does not write its own plist again).
pub const AT_BOOT_FLAG: &str = "--at-boot";

/// The job's label: `org.sandgate.fence.u501`.
pub fn label(scope: &GuestScope) -> String {
    format!("org.sandgate.fence.{}", scope.label('.'))
}

/// The plist's path for `scope`.
pub fn plist_path(scope: &GuestScope) -> PathBuf {
    Path::new(LAUNCH_DAEMONS).join(format!("{}.plist", label(scope)))
}

/// Whether `scope` gets a boot job: fences kept until removed, not those tied to a process
/// (which are gone with it, and a reboot ends every process).
pub fn wanted(scope: &GuestScope) -> bool {
    scope.owner_pid.is_none()
}

/// The plist text: run `exe firewall apply --uid UID --proxy P... --at-boot` once at load
/// (boot), as root, its output to `/var/log/sandgate-fence.log`.
pub fn launch_daemon_plist(exe: &Path, scope: &GuestScope, proxies: &[SocketAddr]) -> String {
    let mut args = vec![
        exe.display().to_string(),
        "firewall".into(),
        "apply".into(),
        "--uid".into(),
        scope.uid.to_string(),
    ];
    for p in proxies {
        args.extend(["--proxy".to_owned(), p.to_string()]);
    }
    args.push(AT_BOOT_FLAG.into());
    let mut t = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \
         \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n\
         <plist version=\"1.0\">\n<dict>\n",
    );
    let _ = writeln!(t, "\t<key>Label</key>\n\t<string>{}</string>", xml(&label(scope)));
    t.push_str("\t<key>ProgramArguments</key>\n\t<array>\n");
    for a in &args {
        let _ = writeln!(t, "\t\t<string>{}</string>", xml(a));
    }
    t.push_str("\t</array>\n");
    t.push_str("\t<key>RunAtLoad</key>\n\t<true/>\n");
    t.push_str("\t<key>StandardOutPath</key>\n\t<string>/var/log/sandgate-fence.log</string>\n");
    t.push_str("\t<key>StandardErrorPath</key>\n\t<string>/var/log/sandgate-fence.log</string>\n");
    t.push_str("</dict>\n</plist>\n");
    t
}

/// `s` with XML's special characters escaped.
fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Owner and mode of one path on the way to the executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathOwner {
    /// The path (`/`, `/usr`, ..., the executable).
    pub path: PathBuf,
    /// Its owner's uid.
    pub uid: u32,
    /// Its permission bits.
    pub mode: u32,
}

/// Refuses an executable that someone other than root could replace: the first of `chain`
/// (every directory from `/` down, then the file) not owned by root or writable by group or
/// others, named with the fix.
pub fn check_boot_executable(chain: &[PathOwner]) -> Result<(), String> {
    for p in chain {
        if p.uid != 0 || p.mode & 0o022 != 0 {
            return Err(format!(
                "{} is {} (owner uid {}, mode {:o}): a boot job running it as root would run \
                 whatever replaces it; install sandgate where only root can change it (for \
                 example `sudo install -o root -g wheel -m 755 sandgate /usr/local/bin/`) and \
                 apply with that one",
                p.path.display(),
                if p.uid != 0 { "not root's" } else { "writable by others" },
                p.uid,
                p.mode & 0o7777
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_paths() {
        let s = GuestScope::user(501);
        assert_eq!(label(&s), "org.sandgate.fence.u501");
        assert_eq!(
            plist_path(&s),
            Path::new("/Library/LaunchDaemons/org.sandgate.fence.u501.plist")
        );
        assert!(wanted(&s));
        assert!(!wanted(&GuestScope::owned_by(501, 42)));
        assert_eq!(xml("a<&>\"b"), "a&lt;&amp;&gt;&quot;b");
    }

    #[test]
    fn only_a_root_owned_executable_runs_at_boot() {
        let p = |path: &str, uid, mode| PathOwner { path: path.into(), uid, mode };
        let ok = [
            p("/", 0, 0o755),
            p("/usr/local/bin", 0, 0o755),
            p("/usr/local/bin/sandgate", 0, 0o755),
        ];
        assert_eq!(check_boot_executable(&ok), Ok(()));
        // (chain, the path named)
        let table = [
            (vec![p("/", 0, 0o755), p("/Users/u/.cargo/bin", 501, 0o755)], "/Users/u/.cargo/bin"),
            (vec![p("/", 0, 0o755), p("/opt/homebrew/bin", 0, 0o775)], "/opt/homebrew/bin"),
            (
                vec![p("/", 0, 0o755), p("/usr/local/bin/sandgate", 0, 0o777)],
                "/usr/local/bin/sandgate",
            ),
        ];
        for (chain, named) in table {
            let err = check_boot_executable(&chain).unwrap_err();
            assert!(err.starts_with(named), "{err}");
        }
    }
}
