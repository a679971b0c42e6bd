//! Red team, second pass, of the launch-cost changes around the watches made ahead (issue 31):
//! the daemon's "lean" answer, which leaves the last scan's directories out of its copy.

use super::*;

/// A link to a directory the scan reads is no way in, whether the launcher scans or the daemon
/// answers from the last scan it kept. The lean answer left the directories read out of the
/// copy that `finish` judges links against, so every such link looked like a way into build
/// output and the second launch of a tree that has one was refused. Control: a link into build
/// output is a way in both ways.
#[test]
fn a_lean_answer_judges_links_against_the_directories_read() {
    let (_dir, root) = tree(&["sub/x/y/a.rs", "lnk -> sub/x", "target/debug/"]);
    let roots = vec![root.clone()];
    let mut index = Index::build(&roots, &rule()).unwrap();
    for i in 0..2 {
        let (bytes, _) = index.answer().expect("answered");
        let back = decode_answer(&bytes, None).unwrap().unwrap();
        let fresh = crate::tree::scan(&roots, &rule());
        assert!(fresh.ways_in.is_empty(), "control: a link to a directory read is no way in");
        assert_eq!(back.ways_in, fresh.ways_in, "answer {i}");
    }
    make(&root, "out -> target/debug");
    let (bytes, _) = index.answer().expect("answered");
    let back = decode_answer(&bytes, None).unwrap().unwrap();
    let fresh = crate::tree::scan(&roots, &rule());
    assert_eq!(fresh.ways_in.len(), 1, "control: a link into build output is a way in");
    assert_eq!(back.ways_in, fresh.ways_in);
}
