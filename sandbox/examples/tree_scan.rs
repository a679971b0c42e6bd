//! What the scan of the writable trees costs, alone: `tree::scan` with the launch's rule on a
//! directory, against a plain walk of the same tree (`std::fs::read_dir`, nothing decided), the
//! warden's watch over what the scan read (one inotify watch a directory), the scan with the
//! previous launch's memory of the tree (every directory unchanged: `stat`ed, not listed), and
//! the scan the git wall made before (every directory to 6 levels, build output included), and
//! the daemon's index answering (nothing changed; one file made in a deep directory; the answer
//! encoded for the launcher and read back), each taken in turn, `ROUNDS` times; CPU time of this process (user + system, from `getrusage`: steadier
//! than wall time on a shared machine) and wall time, medians. Run by `bench/tree-scan.sh`.
//!
//! Usage: `cargo run --release -p sandgate-sandbox --example tree_scan -- DIR [ROUNDS]`

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use sandgate_config::ToolFileKind;
use sandgate_sandbox::TopLevel;

/// CPU time of this process so far.
fn cpu() -> Duration {
    let r = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .expect("getrusage");
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::new(t.tv_sec() as u64, 0) + Duration::from_micros(t.tv_usec() as u64)
    };
    tv(r.user_time()) + tv(r.system_time())
}

/// CPU and wall time of `f`.
fn timed<T>(f: impl FnOnce() -> T) -> (Duration, Duration, T) {
    let (c, w) = (cpu(), Instant::now());
    let out = f();
    (cpu() - c, w.elapsed(), out)
}

/// Directories of a plain walk (what any scan must at least do).
fn plain_walk(root: &Path) -> usize {
    let mut todo = vec![root.to_path_buf()];
    let mut n = 0;
    while let Some(d) = todo.pop() {
        n += 1;
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(e.path());
            }
        }
    }
    n
}

/// The scan before issue 31 (the git wall's own, for comparison): every directory to 6 levels,
/// at most 20,000, looking for `.git` entries only, build output included.
fn old_scan(root: &Path) -> usize {
    let mut todo = std::collections::VecDeque::from([(root.to_path_buf(), 0)]);
    let (mut read, mut found) = (0, 0);
    while let Some((dir, depth)) = todo.pop_front() {
        read += 1;
        if read > 20_000 {
            break;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let Ok(t) = e.file_type() else { continue };
            let path = e.path();
            if e.file_name() == ".git" {
                found += 1;
            } else if t.is_dir() && depth < 6 {
                todo.push_back((path, depth + 1));
            }
        }
    }
    found
}

fn median(v: &mut [Duration]) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e3
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir: PathBuf = args.next().expect("a directory").into();
    let dir = dir.canonicalize().expect("an existing directory");
    let rounds: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(15);
    let own = |v: Vec<&str>| v.into_iter().map(str::to_owned).collect::<Vec<_>>();
    let rule = TopLevel {
        writable: own(sandgate_config::writable_dotfiles()),
        protected: own(sandgate_config::top_autorun()),
        below: own(sandgate_config::names_of(ToolFileKind::Protect)),
        review: own(sandgate_config::names_of(ToolFileKind::Review)),
        skip: own(sandgate_config::names_of(ToolFileKind::Skip)),
        ..TopLevel::default()
    };
    let roots = [dir.clone()];
    // The memory of a previous launch: made once the tree has settled (a directory changed
    // within two seconds of a scan is not remembered), as a launch after the first finds it.
    let mem = std::env::temp_dir().join(format!("tree-scan-memory-{}", std::process::id()));
    let remembering = TopLevel { scan_memory: Some(mem.clone()), ..rule.clone() };
    std::thread::sleep(Duration::from_secs(3));
    if let Some(m) = sandgate_sandbox::tree::scan(&roots, &remembering).memory {
        m.write().expect("the memory written");
    }
    let mut recalled = 0;
    let mut rows: [(Vec<Duration>, Vec<Duration>); 8] = Default::default();
    let mut index = sandgate_sandbox::tree::Index::build(&roots, &rule).expect("an index");
    let deep = sandgate_sandbox::tree::scan(&roots, &rule).dirs.last().cloned().expect("a dir");
    let mut last = None;
    for _ in 0..rounds {
        let (c, w, n) = timed(|| plain_walk(&dir));
        rows[0].0.push(c);
        rows[0].1.push(w);
        let (c, w, scan) = timed(|| sandgate_sandbox::tree::scan(&roots, &rule));
        rows[1].0.push(c);
        rows[1].1.push(w);
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC).expect("inotify");
        let mask = AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO;
        let (c, w, failed) = timed(|| {
            scan.dirs.iter().filter(|d| inotify.add_watch(d.as_path(), mask).is_err()).count()
        });
        rows[2].0.push(c);
        rows[2].1.push(w);
        let (c, w, _) = timed(|| old_scan(&dir));
        rows[3].0.push(c);
        rows[3].1.push(w);
        let (c, w, again) = timed(|| sandgate_sandbox::tree::scan(&roots, &remembering));
        rows[4].0.push(c);
        rows[4].1.push(w);
        recalled = again.recalled;
        let (c, w, answer) = timed(|| index.scan().expect("answered"));
        rows[5].0.push(c);
        rows[5].1.push(w);
        let made = deep.join(format!("made-{}", rows[6].0.len()));
        std::fs::write(&made, "").expect("a file made");
        let (c, w, changed) = timed(|| index.scan().expect("answered"));
        rows[6].0.push(c);
        rows[6].1.push(w);
        assert_eq!(changed.dirs.len(), answer.dirs.len());
        let _ = std::fs::remove_file(&made);
        let _ = index.scan();
        let (c, w, _) = timed(|| {
            let bytes = sandgate_sandbox::tree::encode_answer(Some(&answer), None);
            sandgate_sandbox::tree::decode_answer(&bytes, None).flatten().expect("read back")
        });
        rows[7].0.push(c);
        rows[7].1.push(w);
        // Closing an instance with thousands of watches takes a while: not the launch's cost
        // (the warden's exit pays it, off the launch's path).
        std::mem::forget(inotify);
        last = Some((n, scan, failed));
    }
    let (n, scan, failed) = last.expect("one round at least");
    println!(
        "tree_scan: {} ({n} directories; the scan read {} below the top, {} protected, {} \
         repositories, {} build output not entered, {} unread; {failed} watches failed)",
        dir.display(),
        scan.dirs.len(),
        scan.protected.len(),
        scan.repositories.len(),
        scan.skipped.len(),
        scan.unread.len()
    );
    let _ = std::fs::remove_dir_all(&mem);
    println!("tree_scan: with the memory, {recalled} directories recalled");
    println!("tree_scan: the daemon's index holds {} directories", index.len());
    let names = [
        "plain walk",
        "scan",
        "watches",
        "old scan",
        "remembered",
        "index, unchanged",
        "index, one file made",
        "index's answer encoded and read back",
    ];
    for (name, (c, w)) in names.iter().zip(rows.iter_mut()) {
        println!(
            "tree_scan: {name:<36} cpu {:>8.2} ms  wall {:>8.2} ms (medians of {rounds})",
            median(c),
            median(w)
        );
    }
}
