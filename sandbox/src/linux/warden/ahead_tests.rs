//! The warden on watches made ahead by the daemon (`tree::ahead`): red team (issue 31).

use std::sync::Arc;

use super::*;
use crate::tree::{Ahead, Index, ahead_plan};

fn rule() -> TopLevel {
    TopLevel {
        below: vec![".envrc".into(), "mise.toml".into()],
        skip: vec!["target".into()],
        ..TopLevel::default()
    }
}

/// `root` with two directories of one shape, its index, and the next launch's watches made
/// ahead from the index's answer: what the daemon holds when a launcher asks.
fn placed(root: &Path) -> (Index, Ahead) {
    for d in ["sub/p/c", "sub/q/c"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let roots = [root.to_path_buf()];
    let mut index = Index::build(&roots, &rule()).unwrap();
    let scan = index.scan().unwrap();
    (index, Ahead::place(ahead_plan(&scan, &roots)).unwrap())
}

/// The index's answer for `root` (as [`placed`] makes it) with the watches made ahead, as a
/// launcher receives it.
fn answered_with_watches(root: &Path) -> crate::tree::Scan {
    let (mut index, ahead) = placed(root);
    let ahead = ahead.judge().expect("judged sound");
    let mut scan = index.scan().unwrap();
    let roots = [root.to_path_buf()];
    let (handed, _lent) = ahead.hand(&scan.dirs, &scan.reviewed, &roots).expect("handed");
    scan.ahead = Some(Arc::new(handed.received(&mut scan)));
    scan
}

fn exchange(root: &Path) {
    nix::fcntl::renameat2(
        None,
        &root.join("sub/p"),
        None,
        &root.join("sub/q"),
        nix::fcntl::RenameFlags::RENAME_EXCHANGE,
    )
    .unwrap();
}

/// Whether a tool file planted in one half of the exchange stays with a warden on the handed
/// watches; `lose`: the queue handed is read out before the warden starts.
fn planted_stays(lose: bool) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let roots = [root.clone()];
    let (mut index, ahead) = placed(&root);
    let ahead = ahead.judge().expect("nothing moved yet: judged sound");
    // The host (or another launch's command) between the judging of the queue and the
    // index's answer: the same paths, each leading to the other directory.
    exchange(&root);
    let mut scan = index.scan().unwrap();
    let (handed, _lent) =
        ahead.hand(&scan.dirs, &scan.reviewed, &roots).expect("the same paths and masks: handed");
    scan.ahead = Some(Arc::new(handed.received(&mut scan)));
    let mut w = Warden::prepare(&rule(), "sg-ahead", &roots, &scan);
    assert!(w.watched_ahead());
    if lose {
        let _ = w.drain();
    }
    // The command, during the launch.
    std::fs::write(root.join("sub/p/c/.envrc"), "planted").unwrap();
    w.sweep();
    root.join("sub/p/c/.envrc").exists()
}

/// Two directories of one shape exchanged (`renameat2(RENAME_EXCHANGE)`) after the handed
/// watches' queue was judged, before the index read its own: the answer's paths are the same,
/// so the watches are handed, each directory's watch under the other's name. The exchange's
/// events stay queued for the warden, which watches again what each name leads to: a tool file
/// planted during the run goes. Control: with those events read out before the warden starts,
/// it stays (its event comes on a watch named for the other directory). And an exchange before
/// the judging is not handed.
#[test]
fn directories_exchanged_around_the_judging_are_watched_where_they_are() {
    assert!(!planted_stays(false), "a tool file planted after the exchange stayed");
    assert!(planted_stays(true), "control: without the exchange's events it stays");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let (_index, ahead) = placed(&root);
    exchange(&root);
    assert!(ahead.judge().is_none(), "exchanged before the judging: not handed");
}

/// The instance goes to one warden: the launcher keeps no copy (the warden process's exit must
/// close the last one, off the launch's path). A second warden on the same answer watches for
/// itself, the directories read back from the answer, and takes a planted file away. Control:
/// the first one took the watches made ahead.
#[test]
fn watches_made_ahead_go_to_one_warden() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let roots = [root.clone()];
    let scan = answered_with_watches(&root);
    let first = Warden::prepare(&rule(), "sg-one", &roots, &scan);
    assert!(first.watched_ahead(), "control: the first takes them");
    assert_eq!(scan.ahead.as_ref().unwrap().raw_fd(), None, "no copy left with the answer");
    let mut second = Warden::prepare(&rule(), "sg-two", &roots, &scan);
    assert!(!second.watched_ahead());
    std::fs::write(root.join("sub/q/c/.envrc"), "planted").unwrap();
    second.sweep();
    assert!(!root.join("sub/q/c/.envrc").exists(), "the second warden missed it");
}

/// A second warden of one answer (the first took the watches made ahead, so the answer's
/// directories are only in the handed encoding) that cannot make an instance of its own (out
/// of descriptors) counts every event as lost: its last sweep reads every directory and takes
/// a planted tool file away. It counted the directories of `Scan::dirs`, empty with watches
/// handed, and swept only the tops. Red team, second pass (issue 31); control: verified by
/// hand that the file stays with that count.
#[test]
fn a_second_warden_without_an_instance_reads_everything_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let roots = [root.clone()];
    let scan = answered_with_watches(&root);
    let first = Warden::prepare(&rule(), "sg-one", &roots, &scan);
    assert!(first.watched_ahead(), "the first takes them");
    // (A thread with a descriptor table of its own, filled: no inotify instance there.)
    let mut second = std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_FILES).unwrap();
            let f = std::fs::File::open("/").unwrap();
            let mut held = Vec::new();
            while let Ok(c) = f.try_clone() {
                held.push(c);
            }
            let w = Warden::prepare(&rule(), "sg-two", &roots, &scan);
            assert!(w.raw_fd().is_none(), "no instance made");
            w
        })
        .join()
        .unwrap()
    });
    std::fs::write(root.join("sub/q/c/.envrc"), "planted").unwrap();
    second.sweep();
    assert!(!root.join("sub/q/c/.envrc").exists(), "the second warden left it");
}
