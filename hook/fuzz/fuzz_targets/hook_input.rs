//! Any bytes as a Claude Code hook input and as a command line: never a panic, and never `allow`
//! for a command line one of whose stages does not start with a wrapper name (or is a `cd`).
#![no_main]

use std::io;
use std::path::{Path, PathBuf};

use libfuzzer_sys::fuzz_target;
use sandgate_config::RootRule;
use sandgate_hook::{
    FileInfo, Filesystem, HookSettings, Walls, Wrapper, check_command, decide_claude,
};

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
    fn wrapper(&self, p: &Path, cwds: &[PathBuf]) -> Wrapper {
        if !p.starts_with("/opt/bin") {
            Wrapper::Foreign
        } else if cwds.iter().any(|c| p.starts_with(c)) {
            Wrapper::Exposed("in a directory of the line".into())
        } else {
            Wrapper::Ours
        }
    }
    fn searches_cdpath(&self) -> bool {
        false
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
    let roots = RootRule::new(["/home/u".into()]);
    let _ = decide_claude(data, &HookSettings { deny_refused_paths: false }, &Fake, &walls, &roots);
    let Ok(line) = std::str::from_utf8(data) else { return };
    if check_command(line, Path::new("/p"), &Fake, &roots).is_ok() {
        // Stages end at `|`, `;` and `&&` (the `&` of `2>&1` is no separator); `cd` may stand
        // between them.
        let text = line.replace("2>&1", "");
        for stage in text.split(['|', ';']).flat_map(|s| s.split("&&")) {
            let first = stage.split_whitespace().next().unwrap_or("").replace(['\'', '"'], "");
            if first == "cd" {
                continue;
            }
            assert!(
                ["sandbox-run", "sandbox-net", "sandbox-build", "sandgate"]
                    .iter()
                    .any(|w| first == *w || first.ends_with(&format!("/{w}"))),
                "allowed {line:?}"
            );
        }
    }
});
