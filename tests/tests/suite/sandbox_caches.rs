//! Package caches are copy-on-write inside: tools write them as usual, the host's caches stay
//! byte for byte what they were, a planted change never runs on the host, and the layers persist
//! per project.

use std::path::{Path, PathBuf};

use crate::support::sandbox::{Scratch, Who, both, text};

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Every entry below `root` (relative path, mode, contents or link target), sorted: equal trees
/// have equal snapshots.
fn snapshot(root: &Path) -> Vec<(PathBuf, u32, Vec<u8>)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = e.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let body = if meta.is_dir() {
                stack.push(path.clone());
                Vec::new()
            } else if meta.file_type().is_symlink() {
                std::fs::read_link(&path).unwrap().into_os_string().into_encoded_bytes()
            } else {
                std::fs::read(&path).unwrap()
            };
            out.push((path.strip_prefix(root).unwrap().to_path_buf(), meta.mode(), body));
        }
    }
    out.sort();
    out
}

/// A home with caches of three tools: an npm tool under `_npx` (what the host's next `npx`
/// runs), an extracted crate's `build.rs` (what the host's next `cargo build --offline` runs),
/// cargo's credentials next to them.
fn caches_on_the_host(s: &Scratch) -> (PathBuf, PathBuf) {
    let npm = s.home.join(".npm");
    let cargo = s.home.join(".cargo");
    let tool = npm.join("_npx/bin/tool");
    let crate_dir = cargo.join("registry/src/index-1/demo-1.0.0");
    std::fs::create_dir_all(tool.parent().unwrap()).unwrap();
    std::fs::create_dir_all(&crate_dir).unwrap();
    std::fs::write(&tool, "#!/bin/sh\necho host-tool\n").unwrap();
    std::fs::write(npm.join("old.txt"), "old\n").unwrap();
    std::fs::write(crate_dir.join("build.rs"), "fn main() {}\n").unwrap();
    std::fs::write(cargo.join("credentials.toml"), "token = \"secret-token\"\n").unwrap();
    let _ = std::process::Command::new("chmod").arg("755").arg(&tool).status();
    let _ = std::process::Command::new("chown")
        .args(["-R", &format!("{}:{}", s.who.uid, s.who.gid), p(&s.home)])
        .status();
    (npm, cargo)
}

const PLANT: &str = "echo 'echo planted' >> ~/.npm/_npx/bin/tool && echo new > ~/.npm/new.txt && \
     rm ~/.npm/old.txt && \
     echo 'fn main() { planted() }' > ~/.cargo/registry/src/index-1/demo-1.0.0/build.rs && \
     echo l >> ~/.cargo/.package-cache && mkdir -p ~/.cache/pip/http && echo p > ~/.cache/pip/http/x && \
     echo written; \
     cat ~/.cargo/credentials.toml 2>/dev/null; \
     (echo x > ~/.bashrc) 2>/dev/null || echo rc-refused";

fn package_caches_are_copy_on_write_and_never_written_back(who: &Who) {
    let s = Scratch::new(who);
    let (npm, cargo) = caches_on_the_host(&s);
    let before = (snapshot(&npm), snapshot(&cargo));
    // A fresh user has no pip cache: it is made (empty) on the host, layered inside.
    assert!(!s.home.join(".cache/pip").exists());

    let (out, err) = s.sh("build", &["--net", "none"], PLANT);
    assert_eq!(out, "written\nrc-refused\n", "stderr: {err}");
    assert!(!out.contains("secret-token"), "credentials readable through the layer");
    let (out, _) = s.sh("net", &[], "echo n > ~/.npm/from-net && cat ~/.npm/from-net");
    assert_eq!(out, "n\n", "the net tier layers caches too");

    // Byte for byte what it was on the host; the tool the host runs is its own.
    assert_eq!((snapshot(&npm), snapshot(&cargo)), before, "a host cache changed");
    let ran = std::process::Command::new(npm.join("_npx/bin/tool")).output().unwrap();
    assert_eq!(text(&ran.stdout), "host-tool\n", "the host ran what the sandbox planted");
    let pip = s.home.join(".cache/pip");
    assert!(pip.is_dir() && std::fs::read_dir(&pip).unwrap().next().is_none(), "pip: {pip:?}");

    // The layer persists for this project: the second build is warm.
    let (out, _) = s.sh(
        "build",
        &["--net", "none"],
        "tail -n1 ~/.npm/_npx/bin/tool; cat ~/.npm/new.txt; ls ~/.npm/old.txt 2>/dev/null || echo gone",
    );
    assert_eq!(out, "echo planted\nnew\ngone\n");
    // A directory that comes from the host's cache can be removed inside (the overlay marks it
    // gone in the layer: `go clean -modcache`, `cargo` cleaning its sources), and stays on the host.
    let (out, err) =
        s.sh("build", &["--net", "none"], "rm -rf ~/.cargo/registry/src && ls ~/.cargo/registry");
    assert_eq!(out, "", "{err}");
    assert!(cargo.join("registry/src/index-1/demo-1.0.0/build.rs").exists());
    // Another project starts from the host's caches, not from this project's layer.
    let other = s.root.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let _ = std::process::Command::new("chown")
        .arg(format!("{}:{}", who.uid, who.gid))
        .arg(&other)
        .status();
    let mut cmd =
        s.command("build", &["--net", "none"], &["sh", "-c", "tail -n1 ~/.npm/_npx/bin/tool"]);
    let out = cmd.current_dir(&other).output().unwrap();
    assert_eq!(text(&out.stdout), "echo host-tool\n", "{}", text(&out.stderr));
    // `run` writes no cache at all.
    let (out, _) = s.sh("run", &[], "(echo x > ~/.npm/r) 2>/dev/null || echo refused");
    assert_eq!(out, "refused\n");
    assert!(s.home.join(".local/share/sandgate/caches").is_dir());
}

/// Control: the snapshot comparison sees a write, as the old presets made one (a writable bind
/// of the host's cache, still possible by naming it with `--allow-write`).
fn a_writable_bind_of_a_host_cache_is_seen_by_the_comparison(who: &Who) {
    let s = Scratch::new(who);
    let (npm, _) = caches_on_the_host(&s);
    let before = snapshot(&npm);
    let arg = format!("--allow-write={}", npm.display());
    s.sh("build", &["--net", "none", &arg], "echo 'echo planted' >> ~/.npm/_npx/bin/tool");
    assert_ne!(snapshot(&npm), before, "the comparison missed a write to the host's cache");
}

/// `[filesystem] caches = "off"`: the caches are read-only again, and no layer is made.
fn caches_off_leaves_them_read_only(who: &Who) {
    let s = Scratch::new(who);
    caches_on_the_host(&s);
    std::fs::write(s.home.join(".config/sandgate/config.toml"), "[filesystem]\ncaches = \"off\"\n")
        .unwrap();
    let (out, _) =
        s.sh("build", &["--net", "none"], "(echo x > ~/.npm/y) 2>/dev/null || echo refused");
    assert_eq!(out, "refused\n");
    assert!(!s.home.join(".local/share/sandgate/caches").exists());
}

/// `explain` names the caches a launch would layer and where the layers are; `sandgate cache ls`
/// lists a project's layers after a launch and `cache clear` frees them, leaving the host's.
fn explain_and_cache_commands_show_the_layers(who: &Who) {
    let s = Scratch::new(who);
    let (npm, _) = caches_on_the_host(&s);
    let out = s
        .program(&sandgate_tests::sandgate_bin())
        .args(["explain", "--tier", "build", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let layered = v["caches"]["layered"].as_array().unwrap();
    assert!(layered.iter().any(|c| c["name"] == "npm" && c["path"] == p(&npm)), "{v}");
    assert_eq!(v["caches"]["mode"], "project");
    let out = s
        .program(&sandgate_tests::sandgate_bin())
        .args(["explain", "--tier", "run", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["caches"]["mode"], "off", "{v}");

    s.sh("build", &["--net", "none"], "echo x > ~/.npm/layered");
    let ls = s
        .program(&sandgate_tests::sandgate_bin())
        .args(["cache", "ls", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&ls.stdout).unwrap();
    let scope = &v.as_array().unwrap()[0];
    assert_eq!(scope["project"], p(&s.proj.canonicalize().unwrap()), "{v}");
    assert!(scope["caches"].as_array().unwrap().iter().any(|c| c[0] == "npm"), "{v}");
    let clear =
        s.program(&sandgate_tests::sandgate_bin()).args(["cache", "clear"]).output().unwrap();
    assert!(
        clear.status.success() && text(&clear.stdout).starts_with("removed project-"),
        "{clear:?}"
    );
    let (out, _) =
        s.sh("build", &["--net", "none"], "ls ~/.npm/layered 2>/dev/null || echo cleared");
    assert_eq!(out, "cleared\n");
    assert!(npm.join("_npx/bin/tool").exists(), "the host's cache was touched");
}

/// Events of `events` until `done` says so or 30 s pass: (watch, mask, name) of each.
fn events_until(
    events: &nix::sys::inotify::Inotify,
    mut done: impl FnMut(&[(i32, u32, String)]) -> bool,
) -> Vec<(i32, u32, String)> {
    use nix::poll::{PollFd, PollFlags};
    use std::os::fd::AsFd as _;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut seen = Vec::new();
    while !done(&seen) && std::time::Instant::now() < deadline {
        let mut fds = [PollFd::new(events.as_fd(), PollFlags::POLLIN)];
        let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(1000u16));
        for e in events.read_events().unwrap_or_default() {
            let name = e.name.map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            seen.push((0, e.mask.bits(), name));
        }
    }
    seen
}

/// Takes the lock of each set of work directories of `slot` (`work-<n>.lock`, as a launch
/// does), waiting up to 30 s for each: the closer of a launch holds its set's lock until it has
/// emptied it, so once this returns every closer of that slot is done.
fn wait_for_closers(slot: &Path) {
    for n in 0..4 {
        let path = slot.join(format!("work-{n}.lock"));
        let Ok(f) = std::fs::OpenOptions::new().write(true).open(&path) else { continue };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // (Let go before saying so: the caller may take it next.)
            let taken = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).is_ok();
            let _ = tx.send(taken);
        });
        let got = rx.recv_timeout(std::time::Duration::from_secs(30));
        assert_eq!(got, Ok(true), "{} still held after 30 s", path.display());
    }
}

/// The names in `dir`, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// An overlay's work directory is emptied after its launch (the `work` the overlay made in it
/// removed by the launcher's detached closer once the overlay is gone), so the next launch
/// mounts on an empty one: an overlay mounted on a used one first clears it, which on a file
/// system that discards freed blocks waits for the disk on the launch's path. Waited for by the
/// removals' own events, with a deadline; the control is that the overlay's `work` was seen
/// made (two launches, two made), so watching the wrong directories would fail.
fn work_directories_are_emptied_after_each_launch(who: &Who) {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    let s = Scratch::new(who);
    caches_on_the_host(&s);
    s.sh("build", &["--net", "none"], "true");
    let caches = s.home.join(".local/share/sandgate/caches");
    let scope = std::fs::read_dir(&caches).unwrap().flatten().next().unwrap().path();
    let layer = scope.join("0/npm");
    wait_for_closers(&scope.join("0"));
    // Every set there (a launch makes the one it takes when missing: made here, so that the
    // watch is on it before any launch's overlay uses it).
    let events = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).unwrap();
    for n in 0..4 {
        let set = layer.join(format!("work-{n}"));
        std::fs::create_dir_all(&set).unwrap();
        let _ = std::process::Command::new("chown")
            .arg(format!("{}:{}", who.uid, who.gid))
            .arg(&set)
            .status();
        events.add_watch(&set, AddWatchFlags::IN_CREATE | AddWatchFlags::IN_DELETE).unwrap();
    }
    events.add_watch(&layer, AddWatchFlags::IN_CREATE).unwrap();
    for _ in 0..2 {
        let (out, err) = s.sh("build", &["--net", "none"], "echo x > ~/.npm/w && echo ok");
        assert_eq!(out, "ok\n", "{err}");
    }
    let (made, gone) = (AddWatchFlags::IN_CREATE.bits(), AddWatchFlags::IN_DELETE.bits());
    let count = |seen: &[(i32, u32, String)], mask: u32| {
        seen.iter().filter(|(_, m, n)| m & mask != 0 && n == "work").count()
    };
    let seen = events_until(&events, |seen| count(seen, made) == 2 && count(seen, gone) == 2);
    assert_eq!(count(&seen, made), 2, "each launch's overlay makes its work: {seen:?}");
    assert_eq!(count(&seen, gone), 2, "and it is removed after: {seen:?}");
    wait_for_closers(&scope.join("0"));
    for n in 0..4 {
        let left = names_in(&layer.join(format!("work-{n}")));
        assert!(left.is_empty(), "work-{n} not empty: {left:?} {seen:?}");
    }
    assert!(!names_in(&layer).iter().any(|n| n.starts_with("work-sg")), "{:?}", names_in(&layer));
}

/// With every set of work directories busy (their locks held, as by closers not done yet), a
/// launch makes work directories of its own, and its closer removes them after it: watched by
/// the removal's event, with a deadline; the control is the name seen made.
fn a_launch_with_every_work_set_busy_makes_its_own(who: &Who) {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    let s = Scratch::new(who);
    caches_on_the_host(&s);
    s.sh("build", &["--net", "none"], "true");
    let caches = s.home.join(".local/share/sandgate/caches");
    let scope = std::fs::read_dir(&caches).unwrap().flatten().next().unwrap().path();
    wait_for_closers(&scope.join("0"));
    let held: Vec<nix::fcntl::Flock<std::fs::File>> = (0..4)
        .map(|n| {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(scope.join(format!("0/work-{n}.lock")))
                .unwrap();
            nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).unwrap()
        })
        .collect();
    let layer = scope.join("0/npm");
    let events = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).unwrap();
    events.add_watch(&layer, AddWatchFlags::IN_CREATE | AddWatchFlags::IN_DELETE).unwrap();
    let (out, err) = s.sh("build", &["--net", "none"], "echo x > ~/.npm/w && echo ok");
    assert_eq!(out, "ok\n", "{err}");
    let own = |seen: &[(i32, u32, String)], mask: AddWatchFlags| {
        seen.iter().filter(|(_, m, n)| m & mask.bits() != 0 && n.starts_with("work-sg")).count()
    };
    let seen = events_until(&events, |seen| own(seen, AddWatchFlags::IN_DELETE) == 1);
    assert_eq!(own(&seen, AddWatchFlags::IN_CREATE), 1, "made its own: {seen:?}");
    assert_eq!(own(&seen, AddWatchFlags::IN_DELETE), 1, "removed after: {seen:?}");
    drop(held);
}

/// Red-team finding (the resolver of cache paths): a cache variable naming a link with a
/// trailing `/` (`CARGO_HOME=~/link/`) was taken for the link's own path, which holds nothing,
/// so a layer was mounted over the directory the link names: sandgate's configuration
/// (`~/.config`), its data (`~/.local/share`, where the layers are) or its runtime directory.
/// The launch must leave those alone, as it does for the link named without the `/`. The
/// control: the same variable naming a plain cache directory through a link is layered.
fn a_cache_variable_naming_a_link_with_a_trailing_slash_is_resolved(who: &Who) {
    let s = Scratch::new(who);
    let cargo = s.home.join("real-cargo");
    std::fs::create_dir_all(&cargo).unwrap();
    let _ = std::process::Command::new("chown")
        .args([&format!("{}:{}", s.who.uid, s.who.gid), p(&cargo)])
        .status();
    let rows = [
        ("config", s.home.join(".config"), false),
        ("data", s.home.join(".local/share"), false),
        ("runtime", s.root.join("run"), false),
        ("control: a cache", cargo.clone(), true),
    ];
    for (what, target, layered) in rows {
        let link = s.proj.join(format!("link-{}", what.len()));
        std::os::unix::fs::symlink(&target, &link).unwrap();
        for spelled in [format!("{}/", link.display()), format!("{}/.", link.display())] {
            let mut c = s.command("build", &["--net", "none"], &["cat", "/proc/self/mountinfo"]);
            c.env("CARGO_HOME", &spelled);
            let out = c.output().unwrap();
            assert!(out.status.success(), "{what}: {}", text(&out.stderr));
            let at = format!(" {} ", target.display());
            let overlay =
                text(&out.stdout).lines().any(|l| l.contains(&at) && l.contains(" - overlay "));
            assert_eq!(overlay, layered, "{what}, CARGO_HOME={spelled}: {}", text(&out.stderr));
        }
    }
}

/// Red-team finding (each launch's own work directory): an overlay keeps a whiteout of its own
/// in its work directory once a file of the lower layer is deleted (Linux 5.8+), and leaves it
/// there when unmounted, so the closer's `rmdir` failed and every launch that deleted a file of
/// a host's cache (what `npm install` or `cargo` do) left `work-<id>` behind for good. Once
/// the launch's closer is done, no work directory is left. The control: the deletion did make a
/// whiteout (a character device in the upper layer).
fn a_launch_that_deletes_a_cached_file_leaves_no_work_directory(who: &Who) {
    use std::os::unix::fs::FileTypeExt as _;
    let s = Scratch::new(who);
    let (npm, _) = caches_on_the_host(&s);
    std::fs::write(npm.join("older.txt"), "older\n").unwrap();
    for name in ["old.txt", "older.txt"] {
        let (out, err) = s.sh("build", &["--net", "none"], &format!("rm ~/.npm/{name} && echo ok"));
        assert_eq!(out, "ok\n", "{err}");
    }
    let caches = s.home.join(".local/share/sandgate/caches");
    let scope = std::fs::read_dir(&caches).unwrap().flatten().next().unwrap().path();
    wait_for_closers(&scope.join("0"));
    let whiteout = std::fs::symlink_metadata(scope.join("0/npm/upper/old.txt")).unwrap();
    assert!(whiteout.file_type().is_char_device(), "control: the deletion made a whiteout");
    let mut left = Vec::new();
    for slot in std::fs::read_dir(&scope).unwrap().flatten().filter(|e| e.path().is_dir()) {
        for cache in std::fs::read_dir(slot.path()).unwrap().flatten().filter(|e| e.path().is_dir())
        {
            for e in std::fs::read_dir(cache.path()).unwrap().flatten() {
                // A set of work directories stays, empty; one of a launch's own goes.
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("work-sg")
                    || name.starts_with("work-") && !names_in(&e.path()).is_empty()
                {
                    left.push(e.path());
                }
            }
        }
    }
    assert!(left.is_empty(), "work directories left after their launches: {left:?}");
}

both!(
    work_directories_are_emptied_after_each_launch,
    a_launch_with_every_work_set_busy_makes_its_own,
    a_launch_that_deletes_a_cached_file_leaves_no_work_directory,
    a_cache_variable_naming_a_link_with_a_trailing_slash_is_resolved,
    explain_and_cache_commands_show_the_layers,
    package_caches_are_copy_on_write_and_never_written_back,
    a_writable_bind_of_a_host_cache_is_seen_by_the_comparison,
    caches_off_leaves_them_read_only,
);
