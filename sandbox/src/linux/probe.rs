//! `sandgate doctor`'s namespace probe: a launch's first steps tried for real in a throwaway
//! child — a user namespace with a mount namespace (as every launch makes, root's included), its
//! id maps, a copy-on-write overlay (as a package cache is mounted), and a network namespace
//! whose firewall has its transparent-capture chain (NAT) — so that what fails is found before
//! a launch fails on it (or, for capture, goes without it). Nothing the child does outlives it.

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use nix::mount::MsFlags;
use nix::sched::CloneFlags;

use super::{mounts, sys};

/// What the probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceProbe {
    /// A user namespace with a mount namespace and the caller's ids mapped: `Err` names the step
    /// that failed and the kernel's answer.
    pub user_namespace: Result<(), String>,
    /// An overlay (lower, upper and work directories under the probe's directory) mounted inside
    /// it, and a file written through it landing in the upper layer; `None` when there was no
    /// namespace to try it in.
    pub overlay: Option<Result<(), String>>,
    /// The sandbox firewall with its `capture` chain (transparent capture) installed in a new
    /// network namespace inside it; `None` when there was no namespace to try it in.
    pub capture: Option<Result<(), String>>,
}

/// Tries the namespaces and an overlay in a child, with its layers in a new directory under
/// `base` (removed again): put `base` where the cache layers live, since the upper layer's file
/// system is what overlayfs may refuse. The calling process must have one thread (a child of a
/// threaded process may not enter a user namespace), as the network factory's must.
pub fn probe_namespaces(base: &Path) -> NamespaceProbe {
    let threads = sys::thread_count();
    if threads > 1 {
        let why = format!("not probed: this process has {threads} threads");
        return NamespaceProbe { user_namespace: Err(why), overlay: None, capture: None };
    }
    let dir = base.join(format!(".doctor-{}", std::process::id()));
    let made = ["lower", "upper", "work", "merged"]
        .iter()
        .try_for_each(|d| std::fs::create_dir_all(dir.join(d)))
        .and_then(|()| std::fs::write(dir.join("lower/file"), b"host\n"));
    let probe = match made {
        Ok(()) => run(&dir),
        Err(e) => {
            // Without the directories the namespace can still be tried; the overlay cannot.
            let mut p = run(Path::new("/nonexistent/sandgate-doctor"));
            p.overlay = p
                .overlay
                .map(|_| Err(format!("cannot make the layers in {}: {e}", base.display())));
            p
        }
    };
    remove(&dir);
    probe
}

/// Removes the probe's directory. The kernel makes the overlay's `work/work` with mode 0 (a
/// rootless user cannot list it to remove it): each directory is made the owner's first.
fn remove(dir: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    if std::fs::remove_dir_all(dir).is_ok() {
        return;
    }
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700));
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Forks the child that tries, and reads its answer: lines `U why` for a namespace step, `O why`
/// for an overlay step, `N why` for the capture chain; nothing for success.
fn run(dir: &Path) -> NamespaceProbe {
    let failed =
        |why: String| NamespaceProbe { user_namespace: Err(why), overlay: None, capture: None };
    let (read, write) = match nix::unistd::pipe() {
        Ok(p) => p,
        Err(e) => return failed(format!("pipe: {e}")),
    };
    let (uid, gid) = sys::ids();
    let pid = match sys::fork() {
        Ok(Some(pid)) => pid,
        Ok(None) => {
            drop(read);
            child(dir, uid, gid, write)
        }
        Err(e) => return failed(format!("fork: {e}")),
    };
    drop(write);
    let mut answer = Vec::new();
    let _ = io::Read::read_to_end(&mut std::fs::File::from(read), &mut answer);
    let ended = sys::waitpid(pid, true);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let said = |tag: &str| {
        answer.lines().find_map(|l| l.strip_prefix(tag)).map(|why| why.trim().to_owned())
    };
    if let Some(why) = said("U ") {
        return failed(why);
    }
    let capture = Some(said("N ").map_or(Ok(()), Err));
    if let Some(why) = said("O ") {
        return NamespaceProbe { user_namespace: Ok(()), overlay: Some(Err(why)), capture };
    }
    if !matches!(ended, Ok(Some((_, sys::Ended::Exit(0))))) {
        return failed(format!("the probe ended without an answer ({ended:?})"));
    }
    // The copy-up must have landed in the upper layer, and the lower layer kept its own.
    let upper = std::fs::read(dir.join("upper/file")).unwrap_or_default();
    let lower = std::fs::read(dir.join("lower/file")).unwrap_or_default();
    let overlay = if upper == b"sandbox\n" && lower == b"host\n" {
        Ok(())
    } else {
        Err("a write through the overlay did not land in its upper layer".to_owned())
    };
    NamespaceProbe { user_namespace: Ok(()), overlay: Some(overlay), capture }
}

/// The child: each step in turn, the first failure written to `out`.
fn child(dir: &Path, uid: u32, gid: u32, out: OwnedFd) -> ! {
    let say = |what: &str| {
        let _ = nix::unistd::write(&out, what.as_bytes());
    };
    let userns = nix::sched::unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS)
        .map_err(|e| format!("unshare(user, mount): {e}"))
        .and_then(|()| {
            std::fs::write("/proc/self/setgroups", "deny")
                .and_then(|()| std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1")))
                .and_then(|()| std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1")))
                .map_err(|e| format!("writing the id maps: {e}"))
        })
        .and_then(|()| {
            nix::mount::mount(
                None::<&str>,
                "/",
                None::<&str>,
                MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                None::<&str>,
            )
            .map_err(|e| format!("making the mounts private: {e}"))
        });
    if let Err(why) = userns {
        say(&format!("U {why}\n"));
        sys::exit_now(1);
    }
    // The capture chain first (the overlay's failure ends the child).
    let capture = nix::sched::unshare(CloneFlags::CLONE_NEWNET)
        .map_err(|e| format!("unshare(net): {e}"))
        .and_then(|()| {
            super::net::loopback_up().map_err(|e| format!("loopback: {e}"))?;
            let batch =
                super::netlink::namespace_firewall("doctor", 1, crate::spec::PROXY_PORT, true);
            sys::netlink_transact(sys::Netlink::Netfilter, batch.bytes(), batch.acks)
                .map_err(|e| format!("nf_tables refused the capture chain (NAT redirect): {e}"))
        });
    if let Err(why) = capture {
        say(&format!("N {why}\n"));
    }
    let merged = dir.join("merged");
    let overlay =
        mounts::mount_overlay(&dir.join("lower"), &dir.join("upper"), &dir.join("work"), &merged)
            .map_err(|e| format!("mount -t overlay: {e}"))
            .and_then(|()| {
                std::fs::write(merged.join("file"), b"sandbox\n")
                    .map_err(|e| format!("writing through the overlay: {e}"))
            });
    if let Err(why) = overlay {
        say(&format!("O {why}\n"));
        sys::exit_now(1);
    }
    sys::exit_now(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the kernel allows it (this machine, root or not), the probe finds both; its
    /// directory is gone after.
    #[test]
    fn the_probe_mounts_an_overlay_in_a_user_namespace_and_cleans_up() {
        // The test harness runs tests on threads: the probe must say so rather than try.
        let dir = tempfile::tempdir().unwrap();
        let p = probe_namespaces(dir.path());
        if sys::thread_count() > 1 {
            assert!(p.user_namespace.unwrap_err().contains("threads"));
            return;
        }
        assert_eq!(p.user_namespace, Ok(()));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    /// A directory the owner cannot list (as the kernel leaves an overlay's work directory) is
    /// removed too.
    #[test]
    fn the_probe_directory_goes_whatever_its_modes() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let probe = dir.path().join(".doctor-1");
        std::fs::create_dir_all(probe.join("work/work/x")).unwrap();
        std::fs::set_permissions(probe.join("work/work"), std::fs::Permissions::from_mode(0o0))
            .unwrap();
        remove(&probe);
        assert!(!probe.exists());
    }
}
