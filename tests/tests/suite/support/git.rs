//! Shared fixtures of the git-metadata wall tests (`sandbox_git`, `redteam_walls`): a scratch
//! tree whose work tree lives under `/var/tmp` or `/tmp`, and the macro that runs each scenario
//! as root and rootless in both places.

use std::path::Path;

use crate::support::sandbox::{Scratch, Who};

/// `path` as `&str` (the tests' paths are UTF-8).
pub fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A scratch tree whose work tree (`proj/` and the repositories next to it) lives under `base`.
/// HOME and the configuration stay under `/var/tmp`: sandgate's own config and data under `/tmp`
/// are a separate known problem (another change fixes it), not what this tests.
pub fn scratch(who: &Who, base: &Path) -> (Scratch, tempfile::TempDir) {
    let mut s = Scratch::new(who);
    let work = tempfile::Builder::new().prefix("sandgate-git").tempdir_in(base).unwrap();
    let proj = work.path().join("proj");
    std::fs::create_dir(&proj).unwrap();
    std::fs::write(proj.join("file.txt"), "hello\n").unwrap();
    let _ = std::process::Command::new("chown")
        .args(["-R", &format!("{}:{}", who.uid, who.gid), p(work.path())])
        .status();
    s.proj = proj;
    (s, work)
}

/// Generates, for each scenario `fn(&Scratch)`, runs as root and rootless with the work tree
/// under `/var/tmp` and under `/tmp`.
macro_rules! cases {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use crate::support::sandbox::{root, rootless, Who};
            fn run(who: Option<Who>, base: &str) {
                if let Some(w) = who {
                    let (s, _work) = crate::support::git::scratch(&w, std::path::Path::new(base));
                    super::$name(&s);
                }
            }
            #[test]
            fn root_var_tmp() { run(root(), "/var/tmp") }
            #[test]
            fn root_tmp() { run(root(), "/tmp") }
            #[test]
            fn rootless_var_tmp() { run(rootless(), "/var/tmp") }
            #[test]
            fn rootless_tmp() { run(rootless(), "/tmp") }
        }
    )*};
}
pub(crate) use cases;
