//! Any bytes as a Claude Code hook input and as a command line: never a panic, and never `allow`
//! for a command line one of whose stages does not start with a wrapper name.
#![no_main]

use std::io;
use std::path::{Path, PathBuf};

use libfuzzer_sys::fuzz_target;
use sandgate_hook::{FileInfo, Filesystem, HookSettings, Walls, check_command, decide_claude};

/// Wrapper names resolve to "our" binary; every path exists as itself, with one link.
struct Fake;

impl Filesystem for Fake {
    fn canonicalize(&self, p: &Path) -> io::Result<PathBuf> {
        Ok(p.to_owned())
    }
    fn symlink_metadata(&self, _: &Path) -> io::Result<FileInfo> {
        Ok(FileInfo { is_symlink: false, is_dir: false, nlink: 1 })
    }
    fn lookup_command(&self, name: &str) -> Option<PathBuf> {
        Some(Path::new("/opt/bin").join(name))
    }
    fn is_sandgate(&self, p: &Path) -> bool {
        p.starts_with("/opt/bin")
    }
}

fuzz_target!(|data: &[u8]| {
    let walls = |_: &Path| {
        Ok(Walls {
            tier: "build".into(),
            writable: vec!["/p".into()],
            hidden: vec!["/home/u/.ssh".into()],
            homes: vec!["/home/u".into()],
            ..Walls::default()
        })
    };
    let _ = decide_claude(data, &HookSettings { deny_refused_paths: false }, &Fake, &walls);
    let Ok(line) = std::str::from_utf8(data) else { return };
    if check_command(line, &Fake).is_ok() {
        for stage in line.split('|') {
            let first = stage.split_whitespace().next().unwrap_or("").replace(['\'', '"'], "");
            assert!(
                ["sandbox-run", "sandbox-net", "sandbox-build", "sandgate"]
                    .iter()
                    .any(|w| first == *w || first.ends_with(&format!("/{w}"))),
                "allowed {line:?}"
            );
        }
    }
});
