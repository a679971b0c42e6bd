//! Red team of the warden's watches made ahead by the daemon (`tree::ahead`, issue 31): where
//! a watched path may come to name another directory.

use super::*;
use crate::tree::DIR_EVENTS_NEW;

/// Unmounts a test's mount when the test ends, passed or not.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// A directory on a filesystem whose changes do not all raise an event here (an overlay whose
/// upper layer is written beside it; a network filesystem or FUSE written from elsewhere): its
/// path can come to name another directory with no event on any watch, and then a watch made
/// ahead hours before watches the old one. No watches are handed for such a tree (its warden
/// places its own, by path, at launch), as its listings are not held. Root (mounts). Controls:
/// a watch placed by path now, as a warden does, reports the tool file the old one misses; the
/// same directories on this machine's filesystem are watched ahead.
#[test]
fn no_watches_made_ahead_where_a_change_may_raise_no_event() {
    if sandgate_test_support::skip_unless(nix::unistd::geteuid().is_root(), "root (mount)") {
        return;
    }
    use nix::mount::{MsFlags, mount};
    // (In a mount namespace of this test's thread, private: the mount reaches no other test.)
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).unwrap();
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
        .unwrap();
    let (_dir, root) = tree(&["src/lib.rs"]);
    let layers = tempfile::tempdir().unwrap();
    let l = |n: &str| layers.path().join(n);
    for n in ["lower", "upper", "work"] {
        std::fs::create_dir(l(n)).unwrap();
    }
    let ov = root.join("ov");
    std::fs::create_dir(&ov).unwrap();
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        l("lower").display(),
        l("upper").display(),
        l("work").display()
    );
    mount(Some("overlay"), &ov, Some("overlay"), MsFlags::empty(), Some(opts.as_str())).unwrap();
    let _unmount = Unmount(ov.clone());
    std::fs::create_dir_all(ov.join("a/b")).unwrap();
    let mut index = Index::build(std::slice::from_ref(&root), &rule()).unwrap();
    let (scan, _) = index.scan_and_hand().unwrap();
    assert!(scan.dirs.contains(&ov.join("a/b")), "control: the scan reads the overlay");
    if index.wants_ahead() {
        let plan = index.ahead_plan().expect("the last scan stands");
        index.install_ahead(Ahead::place(plan));
    }
    // Between launches, beside the overlay: its upper layer's `a/b` swapped for another
    // directory. The overlay's cached entry for `a/b` goes with time (memory pressure): here at
    // once.
    std::fs::rename(l("upper/a/b"), l("old")).unwrap();
    std::fs::create_dir(l("upper/a/b")).unwrap();
    std::fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
    let (scan, handed) = index.scan_and_hand().unwrap();
    let b = scan.dirs.iter().position(|d| *d == ov.join("a/b")).unwrap();
    let fresh = crate::sys::inotify_init().unwrap();
    let fresh_wd =
        crate::sys::inotify_watch(fresh.as_fd().as_raw_fd(), &ov.join("a/b"), DIR_EVENTS_NEW)
            .unwrap();
    // The command, during the next launch: a tool file there, through the overlay.
    make(&root, "ov/a/b/.envrc");
    let by_fresh = drain(fresh.as_fd().as_raw_fd()).unwrap_or_default();
    assert!(
        by_fresh.iter().any(|(wd, _, n)| *wd == fresh_wd && n == b".envrc"),
        "control: a watch placed by path now reports it: {by_fresh:?}"
    );
    if let Some(handed) = handed {
        let events = queued(&handed);
        assert!(
            events.iter().any(|(wd, _, n)| *wd == handed.wds[b] && n == b".envrc"),
            "handed, and the watch the warden reads for ov/a/b misses the tool file: {events:?}"
        );
    }
    let (_plain, plain) = tree(&["src/lib.rs", "ov/a/b/"]);
    let mut index = Index::build(&[plain], &rule()).unwrap();
    let _ = index.scan_and_hand().unwrap();
    assert!(index.wants_ahead(), "control: watched ahead off the overlay");
}

/// Watches made ahead count in the indexes' share of the user's inotify watches: past it none
/// are made, and the wardens keep the other half. Control: with the share as it is, they are.
#[test]
fn watches_made_ahead_leave_the_wardens_their_share() {
    let (_dir, root) = tree(LAYOUT);
    let mut index = Index::build(std::slice::from_ref(&root), &rule()).unwrap();
    assert!(index.wants_ahead(), "every directory is held");
    let plan = index.ahead_plan().expect("the last scan stands");
    // (A share already used up by the other indexes.)
    BUDGET.with(|b| b.set(Some(0)));
    let past = Ahead::place(plan.clone());
    BUDGET.with(|b| b.set(None));
    assert!(past.is_none(), "made past the indexes' share");
    assert!(Ahead::place(plan).is_some(), "control: made within it");
}

/// Red team of the instance handed again (issue 31): its masks as the kernel holds them. Made
/// ahead while `sub/d` held a review file (watched for its writes and removals too); the file
/// removed on the host, the next answer's `sub/d` is watched for new entries only, and the
/// handing gave the same watch that mask; the file made again, the next answer wants the
/// first mask back, which the instance still noted as its own: handed without it, and the
/// file's removal during that launch told nothing. The instance notes each mask it gives.
/// Control: a watch placed now with the answer's plan tells the removal.
#[test]
fn a_mask_changed_and_changed_back_is_given_again() {
    let (_dir, root) = tree(&["sub/d/build.rs", "sub/e/x.rs"]);
    let d = root.join("sub/d");
    let mut index = Index::build(std::slice::from_ref(&root), &rule()).unwrap();
    assert!(index.wants_ahead(), "every directory is held");
    let plan = index.ahead_plan().expect("the last scan stands");
    index.install_ahead(Some(Ahead::place(plan).expect("placed")));
    // Between launches, on the host: the review file removed.
    std::fs::remove_file(d.join("build.rs")).unwrap();
    let (scan, handed) = index.scan_and_hand().unwrap();
    assert!(!scan.reviewed.contains(&d), "no review file there now");
    let handed = handed.expect("the same directories, one mask changed: handed");
    assert!(index.give_back(handed.lend, true), "given back clean");
    drop(handed);
    // Between launches again: the review file made again.
    std::fs::write(d.join("build.rs"), "fn main() {}").unwrap();
    let (scan, handed) = index.scan_and_hand().unwrap();
    assert!(scan.reviewed.contains(&d), "a review file there again");
    let handed = handed.expect("handed");
    let at = scan.dirs.iter().position(|p| *p == d).unwrap();
    let fresh = Ahead::place(index.ahead_plan().expect("stands")).expect("placed");
    // The command, during that launch: the review file removed.
    std::fs::remove_file(d.join("build.rs")).unwrap();
    let told = |events: &[(i32, u32, Vec<u8>)], wd: i32| {
        events.iter().any(|(w, m, n)| *w == wd && m & libc::IN_DELETE != 0 && n == b"build.rs")
    };
    let (fresh_handed, _) =
        fresh.hand(&scan.dirs, &scan.reviewed, std::slice::from_ref(&root), u64::MAX).unwrap();
    assert!(told(&queued(&fresh_handed), fresh_handed.wds[at]), "control: placed now, told");
    let events = queued(&handed);
    assert!(told(&events, handed.wds[at]), "handed without the review mask: {events:?}");
}
